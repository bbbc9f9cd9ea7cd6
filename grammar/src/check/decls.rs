//! Declarations: shapes, places, attributes, overlaps, and what they put in memory and on netq.

use super::checker::Checker;
use super::eval::Value;
use super::state::Space;
use crate::ast::{self, DeclAttrKind, DeclKeyword};
use crate::diagnostics::{Diagnostic, codes};
use crate::program::{Decl, DeclKind, Init, Mem, Place};
use nnp_numerics::Format;

/// Most elements one declaration may have, and most netq rows in all.
const MAX_ELEMENTS: usize = 1 << 36;
const MAX_NETQ_ROWS: usize = 1 << 24;

/// An error already reported as a diagnostic.
struct Reported;

/// The attributes of a declaration, and whether none was given twice.
struct DeclAttrs<'d> {
    at: Option<&'d ast::MemRef>,
    init: Option<&'d ast::Expr>,
    pad: Option<&'d ast::Number>,
    quant: Option<&'d ast::FormatLit>,
    ok: Result<(), Reported>,
}

fn kind_word(k: DeclKind) -> &'static str {
    match k {
        DeclKind::Matrix => "matrix",
        DeclKind::Vector => "vector",
        DeclKind::Input => "input",
        DeclKind::Output => "output",
    }
}

impl Checker {
    pub(super) fn decl(&mut self, d: &ast::Decl) {
        let kind = match d.keyword {
            DeclKeyword::Matrix => DeclKind::Matrix,
            DeclKeyword::Vector => DeclKind::Vector,
            DeclKeyword::Input => DeclKind::Input,
            DeclKeyword::Output => DeclKind::Output,
        };
        match self.decl_inner(d, kind) {
            Some(decl) => {
                let idx = self.decls.len();
                match self.env.define(&d.name.name, d.name.span, Value::Decl(idx)) {
                    Ok(()) => {
                        self.decls.push(decl);
                        self.decl_names.push(d.name.span);
                    }
                    Err(e) => self.emit(e),
                }
            }
            // Keep the name defined so that its uses do not cascade into "unknown name".
            None => {
                let _ = self.env.define(&d.name.name, d.name.span, Value::Int(0));
            }
        }
    }

    fn decl_inner(&mut self, d: &ast::Decl, kind: DeclKind) -> Option<Decl> {
        // Every part is checked, so that one declaration reports all its errors at once.
        let shape = self.decl_shape(d, kind);
        let attrs = self.decl_attrs(d);
        let place = self.decl_place(d, kind, attrs.at);
        let placed = matches!(place, Ok(Some(_)));
        let zero = self.decl_init(d, kind, placed, attrs.init);
        let pad = self.decl_pad(d, kind, attrs.pad);
        let format = self.decl_quant(d, kind, attrs.quant);
        let (Ok(shape), Ok(()), Ok(place), Ok(zero), Ok(pad), Ok(format)) =
            (shape, attrs.ok, place, zero, pad, format)
        else {
            return None;
        };
        let decl = Decl {
            name: d.name.name.clone(),
            kind,
            shape,
            place,
            init: if zero { Init::Zero } else { Init::Load },
            pad,
            format,
            span: d.span,
        };
        self.decl_fits(d, &decl).then_some(decl)
    }

    /// The dimensions of `d`: each positive, two for a matrix, not too many elements.
    fn decl_shape(&mut self, d: &ast::Decl, kind: DeclKind) -> Result<Vec<usize>, Reported> {
        let name = &d.name.name;
        let mut ok = true;
        let mut shape = Vec::with_capacity(d.shape.len());
        for e in &d.shape {
            match self.eval(e) {
                Some(v) if (1..=1 << 32).contains(&v) => shape.push(v as usize),
                Some(v) => {
                    self.emit(
                        Diagnostic::error(
                            codes::DECL,
                            format!("dimension {v} of `{name}` is not positive"),
                        )
                        .label(e.span, "must be at least 1"),
                    );
                    ok = false;
                }
                None => ok = false,
            }
        }
        if !ok {
            return Err(Reported);
        }
        if kind == DeclKind::Matrix && shape.len() != 2 {
            self.emit(
                Diagnostic::error(
                    codes::DECL,
                    format!("a matrix has 2 dimensions, `{name}` has {}", shape.len()),
                )
                .label(d.shape_span, "expected [ROWS, COLS]"),
            );
            return Err(Reported);
        }
        let elements = shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        if elements.is_none_or(|e| e > MAX_ELEMENTS) {
            self.emit(
                Diagnostic::error(codes::TOO_LARGE, format!("`{name}` is too large"))
                    .label(d.shape_span, format!("more than {MAX_ELEMENTS} elements")),
            );
            return Err(Reported);
        }
        Ok(shape)
    }

    /// The attributes of `d`, each at most once.
    fn decl_attrs<'d>(&mut self, d: &'d ast::Decl) -> DeclAttrs<'d> {
        let mut attrs = DeclAttrs {
            at: None,
            init: None,
            pad: None,
            quant: None,
            ok: Ok(()),
        };
        for a in &d.attrs {
            let (twice, word) = match &a.kind {
                DeclAttrKind::At(m) => (attrs.at.replace(m).is_some(), "at"),
                DeclAttrKind::Init(e) => (attrs.init.replace(e).is_some(), "="),
                DeclAttrKind::Pad(n) => (attrs.pad.replace(n).is_some(), "pad"),
                DeclAttrKind::Quant(f) => (attrs.quant.replace(f).is_some(), "quant"),
            };
            if twice {
                let name = &d.name.name;
                self.emit(
                    Diagnostic::error(codes::DECL, format!("`{word}` given twice for `{name}`"))
                        .label(a.span, "second one"),
                );
                attrs.ok = Err(Reported);
            }
        }
        attrs
    }

    /// Where `d` lives (`at`): none on netq (inputs, and outputs without `at`), a memory of its
    /// kind at an address in range for the others.
    fn decl_place(
        &mut self,
        d: &ast::Decl,
        kind: DeclKind,
        at: Option<&ast::MemRef>,
    ) -> Result<Option<Place>, Reported> {
        let (kw, name) = (kind_word(kind), &d.name.name);
        match (kind, at) {
            (DeclKind::Input, Some(m)) => {
                self.emit(
                    Diagnostic::error(codes::DECL, format!("input `{name}` cannot have `at`"))
                        .label(m.span, "inputs are pushed on netq by the host")
                        .help("declare data the host loads into memory with `vector`"),
                );
                Err(Reported)
            }
            (DeclKind::Matrix | DeclKind::Vector, None) => {
                let example = if kind == DeclKind::Matrix {
                    "`at mrf[ADDR]` or `at dram[ADDR]`"
                } else {
                    "`at ivrf[ADDR]`, `at asvrf0[ADDR]`, `at mulvrf0[ADDR]` or `at dram[ADDR]`"
                };
                self.emit(
                    Diagnostic::error(codes::DECL, format!("{kw} `{name}` has no place"))
                        .label(d.name.span, "where does the host load it?")
                        .help(format!("add {example}")),
                );
                Err(Reported)
            }
            (_, Some(m)) => self.decl_place_at(name, kind, m).map(Some),
            (DeclKind::Output | DeclKind::Input, None) => Ok(None),
        }
    }

    /// The place `at m` of the matrix, vector or output `name`.
    fn decl_place_at(
        &mut self,
        name: &str,
        kind: DeclKind,
        m: &ast::MemRef,
    ) -> Result<Place, Reported> {
        let kw = kind_word(kind);
        let mem = self.mem_of(&m.mem).ok_or(Reported)?;
        let allowed = match kind {
            DeclKind::Matrix => matches!(mem, Mem::Mrf | Mem::Dram),
            _ => !matches!(mem, Mem::Mrf | Mem::Netq),
        };
        if !allowed {
            let (what, help) = match (kind, mem) {
                (_, Mem::Netq) => (
                    "netq is a queue, not a place",
                    format!("an {kw} without `at` is on netq: remove `at netq`"),
                ),
                (DeclKind::Matrix, _) => (
                    "matrices live in mrf or dram",
                    "use `at mrf[ADDR]`, or `at dram[ADDR]` and copy with m_rd/m_wr".into(),
                ),
                _ => (
                    "mrf holds matrix tiles",
                    "vectors live in ivrf, asvrfK, mulvrfK or dram".into(),
                ),
            };
            self.emit(
                Diagnostic::error(
                    codes::WRONG_MEMORY,
                    format!("{kw} `{name}` cannot live in {mem}"),
                )
                .label(m.mem.span, what)
                .help(help),
            );
            return Err(Reported);
        }
        let a = self.eval(&m.addr).ok_or(Reported)?;
        if !(0..=i64::from(u32::MAX)).contains(&a) {
            self.emit(
                Diagnostic::error(codes::ADDRESS_RANGE, format!("address {a} is out of range"))
                    .label(m.addr.span, "must not be negative"),
            );
            return Err(Reported);
        }
        Ok(Place {
            mem,
            addr: a as u32,
        })
    }

    /// Whether `d` starts zeroed (`= 0`, only in memory: `placed` where it has a place).
    fn decl_init(
        &mut self,
        d: &ast::Decl,
        kind: DeclKind,
        placed: bool,
        init: Option<&ast::Expr>,
    ) -> Result<bool, Reported> {
        let Some(e) = init else {
            return Ok(false);
        };
        let name = &d.name.name;
        let on_netq = kind == DeclKind::Input || (kind == DeclKind::Output && !placed);
        if on_netq {
            self.emit(
                Diagnostic::error(
                    codes::DECL,
                    format!("`{name}` is on netq: it cannot be `= 0`"),
                )
                .label(e.span, "no memory to initialise")
                .help("`= 0` is for data placed in memory with `at`"),
            );
            return Err(Reported);
        }
        match self.eval(e) {
            Some(0) => Ok(true),
            Some(v) => {
                self.emit(
                    Diagnostic::error(codes::DECL, format!("`= {v}`: only `= 0` is supported"))
                        .label(e.span, "must be 0")
                        .help("load other values from the weights file (drop the `=`)"),
                );
                Err(Reported)
            }
            None => Err(Reported),
        }
    }

    /// The value of `d`'s pad lanes (`pad V`, on vectors and inputs; 0 without).
    fn decl_pad(
        &mut self,
        d: &ast::Decl,
        kind: DeclKind,
        pad: Option<&ast::Number>,
    ) -> Result<f64, Reported> {
        let Some(n) = pad else {
            return Ok(0.0);
        };
        let (kw, name) = (kind_word(kind), &d.name.name);
        if matches!(kind, DeclKind::Matrix | DeclKind::Output) {
            let why = if kind == DeclKind::Matrix {
                "the pad rows and columns of a matrix are always 0"
            } else {
                "the pad lanes of an output are dropped"
            };
            self.emit(
                Diagnostic::error(codes::DECL, format!("`pad` on {kw} `{name}`"))
                    .label(n.span, why)
                    .help("`pad` is for vectors and inputs"),
            );
            return Err(Reported);
        }
        let t = n.text.as_str();
        let v = match t {
            "inf" => Some(f64::INFINITY),
            "nan" => Some(f64::NAN),
            _ if t.starts_with(|c: char| c.is_ascii_digit()) => t.parse::<f64>().ok(),
            _ => None,
        };
        match v {
            // Pad lanes are loaded as f32 values and go through every op: one rule for
            // every command is a finite pad an f32 holds (graph files are JSON, which
            // has no inf or nan).
            Some(v) if !v.is_finite() || v.abs() > f64::from(f32::MAX) => {
                self.emit(
                    Diagnostic::error(
                        codes::BAD_NUMBER,
                        format!(
                            "pad `{}{t}` is not a finite f32 value",
                            if n.negative { "-" } else { "" }
                        ),
                    )
                    .label(n.span, "pad lanes must hold a finite number")
                    .help(
                        "to mask pad lanes out of a `v_softmax`, `v_exp` or `v_sigm`, use \
                         `pad -65504` (the most negative fp16): it exponentiates to 0",
                    ),
                );
                // Declared with pad 0, so that its uses report nothing more.
                Ok(0.0)
            }
            Some(v) => Ok(if n.negative { -v } else { v }),
            None => {
                self.emit(
                    Diagnostic::error(codes::BAD_NUMBER, format!("`{t}` is not a number"))
                        .label(n.span, "expected a number such as -65504, 0.5, 1e-3")
                        .help("pad values are finite numbers"),
                );
                Err(Reported)
            }
        }
    }

    /// `d`'s own storage format (`quant FORMAT`, not on outputs), if it has one.
    fn decl_quant(
        &mut self,
        d: &ast::Decl,
        kind: DeclKind,
        quant: Option<&ast::FormatLit>,
    ) -> Result<Option<Format>, Reported> {
        let Some(f) = quant else {
            return Ok(None);
        };
        if kind == DeclKind::Output {
            let name = &d.name.name;
            self.emit(
                Diagnostic::error(codes::DECL, format!("`quant` on output `{name}`"))
                    .label(f.span, "outputs are collected as stored")
                    .help("per-declaration `quant` is for matrices, vectors and inputs"),
            );
            return Err(Reported);
        }
        self.format(f, None).map(Some).ok_or(Reported)
    }

    /// Whether the placed `decl` fits its memory (else the error is reported).
    fn decl_fits(&mut self, d: &ast::Decl, decl: &Decl) -> bool {
        let Some(p) = decl.place else {
            return true;
        };
        let (name, kind) = (&decl.name, decl.kind);
        let tiles = decl.tiles(self.n) as u64;
        let tile_space = kind == DeclKind::Matrix && p.mem == Mem::Dram;
        let size = if tile_space {
            self.target.memory.dram_tiles
        } else {
            self.target.mem_size(p.mem)
        };
        let unit = if kind == DeclKind::Matrix {
            "tiles"
        } else {
            "registers"
        };
        if u64::from(p.addr) + tiles > u64::from(size) {
            let at_span = d
                .attrs
                .iter()
                .find(|a| matches!(a.kind, DeclAttrKind::At(_)))
                .map_or(d.span, |a| a.span);
            self.emit(
                Diagnostic::error(
                    codes::ADDRESS_RANGE,
                    format!(
                        "`{name}` does not fit in {}: it needs {unit} {}..{} but {} has {size}",
                        p.mem,
                        p.addr,
                        u64::from(p.addr) + tiles,
                        p.mem
                    ),
                )
                .label(
                    at_span,
                    format!("{tiles} {unit} from here (N = {})", self.n),
                )
                .help(format!(
                    "the last {unit} start at {}",
                    u64::from(size).saturating_sub(tiles)
                )),
            );
            return false;
        }
        true
    }

    /// After all declarations: overlaps, initial register contents, netq queues.
    pub(super) fn finish_decls(&mut self) {
        let n = self.n;
        for (i, d) in self.decls.iter().enumerate() {
            if let Some(p) = d.place
                && let Some(space) = Space::of(p.mem, d.kind == DeclKind::Matrix)
            {
                let end = p.addr.saturating_add(d.tiles(n) as u32);
                self.decl_index.push((space, p.addr, end, i));
            }
        }
        self.decl_index.sort_by_key(|&(s, a, _, i)| (s.0, a, i));

        // Overlaps: sweep each space in address order.
        let mut prev: Option<(Space, u32, usize)> = None;
        let index = self.decl_index.clone();
        for &(space, start, end, i) in &index {
            if let Some((ps, pend, pi)) = prev
                && ps == space
                && start < pend
            {
                let (a, b) = (&self.decls[pi], &self.decls[i]);
                let mem = b.place.map_or(Mem::Netq, |p| p.mem);
                let d = Diagnostic::error(
                    codes::DECL_OVERLAP,
                    format!(
                        "`{}` overlaps `{}` in {mem}: {} {start}..{} are in both",
                        b.name,
                        a.name,
                        if b.kind == DeclKind::Matrix {
                            "tiles"
                        } else {
                            "registers"
                        },
                        end.min(pend)
                    ),
                )
                .label(self.decl_names[i], format!("{mem}[{start}..{end}]"))
                .label(self.decl_names[pi], format!("occupies {mem} up to {pend}"))
                .help(format!(
                    "move `{}` to start at {mem}[{pend}] or later",
                    b.name
                ));
                self.emit(d);
            }
            if prev.is_none_or(|(ps, pend, _)| ps != space || end > pend) {
                prev = Some((space, end, i));
            }
        }

        // What the host puts in memory before the program starts.
        for &(space, start, end, i) in &index {
            let d = &self.decls[i];
            let matrix_in_mrf =
                Some(space) == Space::of(Mem::Mrf, false) && d.kind == DeclKind::Matrix;
            if d.kind == DeclKind::Output && d.init == Init::Load {
                continue; // written by the program, read back after it
            }
            let w = self.regs.decl_writer(i, self.decl_names[i]);
            for r in start..end {
                self.regs.write(space, r, w);
            }
            self.load_pads(space, start, i);
            if matrix_in_mrf {
                self.mrf_tiles
                    .extend((start..end).map(|r| (r, (i, r - start))));
            }
        }

        self.pads.active = self.any_pads();

        // netq: inputs pushed and outputs collected, in declaration order, row by row.
        let mut total = 0usize;
        for (i, d) in self.decls.iter().enumerate() {
            let q = match (d.kind, d.place) {
                (DeclKind::Input, _) => &mut self.inputs,
                (DeclKind::Output, None) => &mut self.outputs,
                _ => continue,
            };
            total += d.rows();
            if total > MAX_NETQ_ROWS {
                let span = self.decl_names[i];
                self.emit(
                    Diagnostic::error(codes::TOO_LARGE, "too many netq rows").label(
                        span,
                        format!("the inputs and outputs exceed {MAX_NETQ_ROWS} rows"),
                    ),
                );
                self.stopped = true;
                return;
            }
            let tiles = d.row_tiles(n) as u32;
            q.rows.extend((0..d.rows()).map(|r| (i, r, tiles)));
        }
    }

    /// The declaration whose registers contain `reg` in `space`, if any.
    pub(super) fn decl_at(&self, space: Space, reg: u32) -> Option<usize> {
        let idx = self
            .decl_index
            .partition_point(|&(s, a, _, _)| (s.0, a) <= (space.0, reg));
        // Valid declarations do not overlap: only the last one starting at or below `reg` can
        // contain it.
        let &(s, a, e, i) = self.decl_index[..idx].last()?;
        (s == space && a <= reg && reg < e).then_some(i)
    }
}
