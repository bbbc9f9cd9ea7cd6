//! Checking a complete vector chain: widths, windows, the mv_mul matrix layout and format,
//! read-modify-write, then the simulation of its register traffic.

use super::access::Netq;
use super::records::{MemOp, VecChain};
use crate::check::checker::Checker;
use crate::check::state::{Scalars, Space};
use crate::diagnostics::{Diagnostic, codes};
use crate::program::{
    Chain, ChainBody, Mem, MfuOp, MvMul, QuantConfig, Read, VectorChain, Window, Write,
};
use nnp_numerics::Format;
use std::collections::HashMap;

impl Checker {
    pub(super) fn vector_chain(&mut self, c: VecChain) {
        let s = c.scalars;
        let k = c.iterations;
        let width = s.rows;
        let needed = if c.mv_mul.is_some() { s.cols } else { s.rows };
        let needed_name = if c.mv_mul.is_some() { "cols" } else { "rows" };
        let mut ok = true;

        // Read width and window.
        let window = c.read.window.then_some(Window {
            w: s.win_w,
            h: s.win_h,
            pitch: s.pitch,
        });
        let (read_tiles, read_extent) = match window {
            Some(w) => {
                let tiles = w.w * w.h;
                if tiles != needed {
                    self.emit(
                        Diagnostic::error(
                            codes::WIDTH,
                            format!(
                                "the window is {} x {} = {tiles} tiles but the chain reads {needed_name} = {needed}",
                                w.h, w.w
                            ),
                        )
                        .label(c.read.span, format!("reads win_h x win_w = {tiles} tiles"))
                        .help(format!("set `s_wr {needed_name}, {tiles}` before the chain, or change win_w/win_h")),
                    );
                    ok = false;
                }
                if w.pitch < w.w {
                    self.emit(
                        Diagnostic::error(
                            codes::SCALAR_VALUE,
                            format!("pitch = {} is smaller than win_w = {}", w.pitch, w.w),
                        )
                        .label(c.read.span, "the window's rows would overlap")
                        .help("set `s_wr pitch, P` to the number of tiles per image row"),
                    );
                    ok = false;
                }
                (tiles, (w.h - 1) * w.pitch + w.w)
            }
            None => (needed, needed),
        };
        if ok {
            ok &= self.in_range(&c.read.op, false, read_extent, k, "reads");
        }
        if let Some((m, _)) = &c.mv_mul {
            ok &= self.in_range(m, false, s.rows * s.cols, k, "multiplies by");
        }
        for op in c.ops.iter().filter_map(|o| o.operand.as_ref()) {
            ok &= self.in_range(op, false, width, k, "reads");
        }
        for w in &c.writes {
            ok &= self.in_range(&w.op, false, width, k, "writes");
        }
        let index = self.chains.len();
        if ok {
            // Register accesses over all iterations (the read-modify-write check and the
            // simulation are both linear in it).
            let per_iter = u64::from(read_extent)
                + u64::from(s.rows * s.cols) * u64::from(c.mv_mul.is_some())
                + u64::from(width) * (c.ops.len() + c.writes.len()) as u64;
            ok = self.count_work(per_iter * u64::from(k), c.span);
            if ok {
                let layout = c.mv_mul.is_none_or(|(m, _)| {
                    self.matrix_layout(&m, &s, k) && self.one_matrix_format(&m, &s, k, &c.quant)
                });
                ok = self.read_modify_write(&c, width) & layout;
            }
        }
        self.incomplete |= !ok;
        if ok {
            self.simulate(&c, index, read_tiles, window, width);
        }

        // The matrix format of each iteration: that of its tiles (`one_matrix_format`).
        let mv_mul = c.mv_mul.map(|(m, span)| {
            let format = |t: u32| self.tile_format(m.addr.at(t), &c.quant);
            let matrix_format = format(0);
            let mut iteration_formats = Vec::new();
            if ok && (1..k).any(|t| format(t) != matrix_format) {
                iteration_formats = (0..k).map(format).collect();
            }
            MvMul {
                addr: m.addr,
                matrix_format,
                iteration_formats,
                span,
            }
        });
        self.chains.push(Chain {
            index,
            iterations: k,
            rows: s.rows,
            cols: s.cols,
            body: ChainBody::Vector(VectorChain {
                read: Read {
                    src: c.read.op.mem,
                    addr: c.read.op.addr,
                    window,
                    tiles: read_tiles,
                    span: c.read.span,
                },
                mv_mul,
                ops: c
                    .ops
                    .iter()
                    .map(|o| MfuOp {
                        kind: o.kind,
                        operand: o.operand.map(|m| (m.mem, m.addr)),
                        mfu: o.mfu,
                        span: o.span,
                    })
                    .collect(),
                writes: c
                    .writes
                    .iter()
                    .map(|w| Write {
                        dst: w.op.mem,
                        addr: w.op.addr,
                        span: w.span,
                    })
                    .collect(),
                width,
                quant: c.quant,
            }),
            span: c.span,
        });
    }

    /// `mv_mul` on the tiles of a matrix declared in mrf, while they hold its data, must use
    /// its layout in every iteration: `cols` = its column tiles, starting on a tile row, each
    /// tile the next of that matrix (not running past its end, nor into another's data).
    /// Tiles copied from dram are not held to a layout.
    fn matrix_layout(&mut self, m: &MemOp, s: &Scalars, k: u32) -> bool {
        let tiles = s.rows * s.cols;
        for t in 0..k.max(1) {
            let a = m.addr.at(t);
            let Some(&(d, first)) = self.mrf_tiles.get(&a) else {
                continue; // uninitialised: the simulation says so
            };
            let decl = &self.decls[d];
            // Copied tiles may be multiplied a block at a time (a tile, a column of tiles).
            if decl.place.is_none_or(|p| p.mem != Mem::Mrf) {
                continue;
            }
            let n = self.n;
            let (rt, ct) = (
                decl.shape[0].div_ceil(n) as u32,
                decl.shape[1].div_ceil(n) as u32,
            );
            let dims = format!("[{}, {}]", decl.shape[0], decl.shape[1]);
            let name = decl.name.clone();
            let iteration = match k > 1 {
                true => format!(" (iteration {t})"),
                false => String::new(),
            };
            // The first tile that is not the next of `d`'s tiles.
            let stray = (1..tiles).find(|&j| self.mrf_tiles.get(&(a + j)) != Some(&(d, first + j)));
            let problem = if s.cols != ct {
                Some((
                    format!(
                        "`mv_mul` uses rows x cols = {} x {} tiles but matrix `{name}` {dims} is {rt} x {ct} tiles (N = {n})",
                        s.rows, s.cols
                    ),
                    format!("set `s_wr cols, {ct}` before the chain"),
                ))
            } else if !first.is_multiple_of(ct) {
                Some((
                    format!("`mv_mul` starts in the middle of a tile row of `{name}`{iteration}"),
                    format!(
                        "start at a tile of `{name}` whose index is a multiple of {ct} (its tiles per row)"
                    ),
                ))
            } else if first + tiles > rt * ct {
                Some((
                    format!(
                        "`mv_mul` reads past the end of `{name}`{iteration} ({} x {} tiles from tile {first})",
                        s.rows, s.cols
                    ),
                    format!(
                        "`{name}` {dims} has {rt} tile rows: set `s_wr rows, {}` at most",
                        rt - first / ct
                    ),
                ))
            } else {
                stray.map(|j| {
                    let holds = match self.mrf_tiles.get(&(a + j)) {
                        Some(&(o, i)) => format!("tile {i} of `{}`", self.decls[o].name),
                        None => "no matrix's data".to_string(),
                    };
                    (
                        format!(
                            "`mv_mul`'s tile {j}{iteration} (mrf[{}]) holds {holds}, not tile {} of `{name}`",
                            a + j,
                            first + j
                        ),
                        format!(
                            "copy `{name}`'s tiles in order (`m_rd`/`m_wr`), or multiply by each matrix in its own chain"
                        ),
                    )
                })
            };
            if let Some((msg, help)) = problem {
                let name_span = self.decl_names[d];
                self.emit(
                    Diagnostic::error(codes::WIDTH, msg)
                        .label(m.span, format!("{} x {} tiles", s.rows, s.cols))
                        .label(name_span, format!("{rt} x {ct} tiles"))
                        .help(help),
                );
                return false;
            }
        }
        true
    }

    /// The `mvm.matrix` format of mrf tile `a`: that of the matrix declaration whose data it
    /// holds, else the chain's.
    fn tile_format(&self, a: u32, quant: &QuantConfig) -> Format {
        let held = self.mrf_tiles.get(&a);
        held.and_then(|&(d, _)| self.decls[d].format)
            .unwrap_or(quant.mvm_matrix)
    }

    /// One `mv_mul` quantizes its tiles with one format: the tiles of each iteration hold
    /// matrices of one `mvm.matrix` format (each matrix's own `quant`, else the chain's).
    fn one_matrix_format(&mut self, m: &MemOp, s: &Scalars, k: u32, quant: &QuantConfig) -> bool {
        let tiles = s.rows * s.cols;
        for t in 0..k.max(1) {
            let a = m.addr.at(t);
            let first = self.tile_format(a, quant);
            let Some(j) = (1..tiles).find(|&j| self.tile_format(a + j, quant) != first) else {
                continue;
            };
            let holds = |a: u32| match self.mrf_tiles.get(&a) {
                Some(&(d, _)) => format!("`{}`", self.decls[d].name),
                None => "no matrix's data".to_string(),
            };
            let message = format!(
                "`mv_mul`'s tiles hold matrices of different formats: tile 0 ({}, {first}) and \
                 tile {j} ({}, {})",
                holds(a),
                holds(a + j),
                self.tile_format(a + j, quant)
            );
            self.emit(
                Diagnostic::error(codes::WIDTH, message)
                    .label(m.span, format!("{} x {} tiles", s.rows, s.cols))
                    .help(
                        "multiply by each matrix in its own chain, or give them the same `quant`",
                    ),
            );
            return false;
        }
        true
    }

    /// No write of the chain may hit a register it reads as an MFU operand (any iteration).
    fn read_modify_write(&mut self, c: &VecChain, width: u32) -> bool {
        if c.ops.iter().all(|o| o.operand.is_none()) {
            return true;
        }
        let k = c.iterations;
        let mut operands: HashMap<(Mem, u32), usize> = HashMap::new();
        for (oi, o) in c.ops.iter().enumerate() {
            if let Some(m) = &o.operand {
                for t in 0..k {
                    let a = m.addr.at(t);
                    for r in a..a + width {
                        operands.entry((m.mem, r)).or_insert(oi);
                    }
                }
            }
        }
        for w in &c.writes {
            for t in 0..k {
                let a = w.op.addr.at(t);
                for r in a..a + width {
                    if let Some(&oi) = operands.get(&(w.op.mem, r)) {
                        let o = &c.ops[oi];
                        let Some(m) = o.operand else { continue };
                        self.emit(
                            Diagnostic::error(
                                codes::READ_MODIFY_WRITE,
                                format!("the chain writes {}[{r}], which it reads as an MFU operand", w.op.mem),
                            )
                            .label(w.op.span, format!("writes {}[{r}]", w.op.mem))
                            .label(m.span, format!("operand of `{}`", o.kind.mnemonic()))
                            .help("an operand VRF cannot be read and written by the same chain: write the result elsewhere (e.g. double-buffer) and copy it in a later chain"),
                        );
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Run the chain's register traffic in order, iteration by iteration.
    fn simulate(
        &mut self,
        c: &VecChain,
        index: usize,
        read_tiles: u32,
        window: Option<Window>,
        width: u32,
    ) {
        let k = c.iterations;
        let s = c.scalars;
        let writers: Vec<Option<u32>> = c
            .writes
            .iter()
            .map(|w| (w.op.mem != Mem::Netq).then(|| self.regs.instr_writer(w.span)))
            .collect();
        let mut tiles = Vec::new();
        for t in 0..k {
            // Reads: v_rd, then the matrix, then the operands.
            let r = &c.read.op;
            let mut popped = None;
            tiles.clear();
            if r.mem == Mem::Netq {
                let before = self.pops.len();
                self.netq_slot(Netq::Pop, read_tiles, index, t, r.span);
                popped = self.pops.get(before).map(|slot| slot.decl);
                tiles.extend(0..read_tiles);
            } else if let Some(space) = Space::of(r.mem, false) {
                let a = r.addr.at(t);
                match window {
                    Some(w) => tiles.extend(w.offsets().map(|off| a + off)),
                    None => tiles.extend(a..a + read_tiles),
                }
                for &reg in &tiles {
                    self.read_reg(space, reg, r.mem, t, k, r.span);
                }
            }
            if let Some((m, _)) = &c.mv_mul
                && let Some(space) = Space::of(Mem::Mrf, false)
            {
                let a = m.addr.at(t);
                for reg in a..a + s.rows * s.cols {
                    self.read_reg(space, reg, Mem::Mrf, t, k, m.span);
                }
            }
            for o in &c.ops {
                if let Some(m) = &o.operand
                    && let Some(space) = Space::of(m.mem, false)
                {
                    let a = m.addr.at(t);
                    for reg in a..a + width {
                        self.read_reg(space, reg, m.mem, t, k, m.span);
                    }
                }
            }
            // Writes.
            for (w, writer) in c.writes.iter().zip(&writers) {
                match (Space::of(w.op.mem, false), writer) {
                    (Some(space), Some(writer)) => {
                        let a = w.op.addr.at(t);
                        for reg in a..a + width {
                            self.regs.write(space, reg, *writer);
                        }
                    }
                    _ => self.netq_slot(Netq::Push, width, index, t, w.op.span),
                }
            }
            self.follow_pads(c, t, popped, &tiles);
        }
    }
}
