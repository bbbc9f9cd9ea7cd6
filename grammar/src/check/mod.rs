//! The checker: AST -> [`Program`], enforcing the rules of docs/language.md against a
//! [`Target`].
//!
//! Two passes over the file. Pass 1 evaluates the top-level `let`s and declarations (so the
//! host's data is in place before the first instruction, wherever the declarations are written).
//! Pass 2 walks the code in order, unrolling `repeat`, assembling chains and simulating which
//! register holds what, per register and per iteration, to find uninitialised reads, dead writes
//! and netq mismatches. All errors are collected; a diagnostic is reported once per
//! (code, span), so an error inside a `repeat` body is not repeated for every unrolled copy.

mod chain;
mod decls;
mod eval;
mod pads;
mod size;
mod state;

use crate::ast::{self, Expr, File, Ident, Instr, Item, Operand};
use crate::diagnostics::{Diagnostic, codes};
use crate::isa::{self, Op};
use crate::parse::parse;
use crate::program::{
    Addr, Chain, Decl, DeclKind, Mem, NetqSlot, Place, Program, QuantConfig, SourceFile, Span,
};
use crate::target::{BUILTIN_TARGETS, Target};
use chain::OpenChain;
use eval::{Env, Eval, Value};
use state::{Queue, Regs, Space};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

pub use eval::RESERVED;

/// A program that passed the checker, with its warnings.
#[derive(Clone, Debug)]
pub struct CheckOutput {
    pub program: Program,
    pub warnings: Vec<Diagnostic>,
}

/// Most steps a program may unroll to: instructions plus `repeat` iterations.
pub const MAX_INSTRUCTIONS: usize = 5_000_000;
/// Most register accesses (over all iterations) the checker simulates.
const MAX_WORK: u64 = 200_000_000;
/// Largest value of each scalar register. Widths in tiles stay small enough that products such
/// as `rows * cols` and window extents fit in 32 bits.
fn max_scalar(reg: &str) -> i64 {
    match reg {
        "iterations" => 1 << 20,
        "pitch" => 1 << 16,
        _ => 1 << 12,
    }
}

/// Parse and check a firmware file. `target_override` (the `--target` option) wins over the
/// file's `target` statement. On failure returns every error (and the warnings found so far).
pub fn check(
    src: Arc<SourceFile>,
    target_override: Option<Target>,
) -> Result<CheckOutput, Vec<Diagnostic>> {
    let file = parse(&src)?;
    check_file(src, &file, target_override)
}

/// Check an already parsed file.
pub fn check_file(
    src: Arc<SourceFile>,
    file: &File,
    target_override: Option<Target>,
) -> Result<CheckOutput, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let target = resolve_target(&src, file, target_override, &mut diags);
    let mut c = Checker::new(src, target);
    for d in diags {
        c.emit(d);
    }
    c.run(file);
    c.into_output()
}

/// The target: `--target`, else the file's `target` statement, else `bw-default`.
fn resolve_target(
    src: &SourceFile,
    file: &File,
    over: Option<Target>,
    diags: &mut Vec<Diagnostic>,
) -> Target {
    let stmts: Vec<&ast::TargetStmt> = file
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Target(t) => Some(t),
            _ => None,
        })
        .collect();
    if let [first, rest @ ..] = stmts.as_slice() {
        for t in rest {
            diags.push(
                Diagnostic::error(codes::TARGET, "more than one `target` statement")
                    .label(t.span, "second target")
                    .label(first.span, "first target")
                    .help("a file is checked for one target: keep one `target` line"),
            );
        }
    }
    if let Some(t) = over {
        return t;
    }
    let Some(stmt) = stmts.first() else {
        return Target::bw_default();
    };
    let value = stmt.value.as_str();
    let loaded = if BUILTIN_TARGETS.contains(&value) {
        Target::builtin(value)
    } else {
        let path = Path::new(value);
        let path = match Path::new(&src.name).parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        };
        Target::load_as(value, &path.to_string_lossy())
    };
    loaded.unwrap_or_else(|e| {
        let help = match crate::target::nearest_builtin(value) {
            Some(b) if matches!(e, crate::TargetError::Read { .. }) => {
                format!("did you mean the built-in target `{b}`?")
            }
            _ => format!(
                "built-in targets: {}; otherwise a path to a TOML target file, relative to \
                 this file",
                BUILTIN_TARGETS.join(", ")
            ),
        };
        diags.push(
            Diagnostic::error(codes::TARGET, format!("cannot use target `{value}`"))
                .label(stmt.value_span, e.to_string())
                .help(help),
        );
        Target::bw_default()
    })
}

/// Scalar control registers in force.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scalars {
    pub rows: u32,
    pub cols: u32,
    pub win_w: u32,
    pub win_h: u32,
    pub pitch: u32,
    /// `s_wr iterations, K` waiting for the next chain.
    pub iterations: Option<(u32, Span)>,
}

pub(crate) struct Checker {
    pub src: Arc<SourceFile>,
    pub target: Target,
    pub n: usize,
    pub diags: Vec<Diagnostic>,
    reported: HashSet<(&'static str, Span)>,
    pub env: Env,
    pub decls: Vec<Decl>,
    /// Span of each declaration's name.
    pub decl_names: Vec<Span>,
    /// Placed declarations: (space, first register, end, declaration), sorted.
    pub decl_index: Vec<(Space, u32, u32, usize)>,
    pub quant: QuantConfig,
    pub scalars: Scalars,
    pub open: Option<OpenChain>,
    pub chains: Vec<Chain>,
    pub regs: Regs,
    /// Pad lanes per register (warning `nnp::pad-lanes`).
    pub pads: pads::PadLanes,
    /// The matrix declaration and tile (row-major index in it) whose data each mrf tile
    /// holds: placed there, or copied there by `m_rd`/`m_wr`.
    pub mrf_tiles: HashMap<u32, (usize, u32)>,
    pub inputs: Queue,
    pub outputs: Queue,
    pub pops: Vec<NetqSlot>,
    pub pushes: Vec<NetqSlot>,
    /// Unrolled steps so far: instructions and `repeat` iterations.
    steps: u64,
    pub work: u64,
    /// A size limit was hit: stop walking.
    pub stopped: bool,
    /// Some chain was dropped or not simulated because of its errors.
    pub incomplete: bool,
}

/// A resolved memory operand.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemOp {
    pub mem: Mem,
    pub addr: Addr,
    /// The whole operand (`ivrf[4] + 1`).
    pub span: Span,
    /// The memory name.
    pub mem_span: Span,
}

impl Checker {
    fn new(src: Arc<SourceFile>, target: Target) -> Self {
        let num = &target.numerics;
        let quant = QuantConfig {
            storage: num.storage,
            mvm_vector: num.mvm_vector,
            mvm_matrix: num.mvm_matrix,
            mvm_output: num.mvm_output,
            mfu_input: num.mfu_input,
        };
        Checker {
            src,
            n: target.native,
            target,
            diags: Vec::new(),
            reported: HashSet::new(),
            env: Env::default(),
            decls: Vec::new(),
            decl_names: Vec::new(),
            decl_index: Vec::new(),
            quant,
            scalars: Scalars {
                rows: 1,
                cols: 1,
                win_w: 1,
                win_h: 1,
                pitch: 1,
                iterations: None,
            },
            open: None,
            chains: Vec::new(),
            regs: Regs::new(),
            pads: pads::PadLanes::default(),
            mrf_tiles: HashMap::new(),
            inputs: Queue::default(),
            outputs: Queue::default(),
            pops: Vec::new(),
            pushes: Vec::new(),
            steps: 0,
            work: 0,
            stopped: false,
            incomplete: false,
        }
    }

    /// Record a diagnostic once per (code, primary span).
    pub fn emit(&mut self, d: Diagnostic) {
        if self.reported.insert((d.code, d.span())) {
            self.diags.push(d);
        }
    }

    /// True when a diagnostic with this code and span was already reported.
    pub fn reported(&self, code: &'static str, span: Span) -> bool {
        self.reported.contains(&(code, span))
    }

    fn run(&mut self, file: &File) {
        for item in &file.items {
            match item {
                Item::Let(l) => self.let_(l),
                Item::Decl(d) => self.decl(d),
                _ => {}
            }
        }
        self.finish_decls();
        self.items(&file.items, true);
        self.finish();
    }

    fn items(&mut self, items: &[Item], top: bool) {
        for item in items {
            if self.stopped {
                return;
            }
            match item {
                Item::Target(t) if !top => self.emit(
                    Diagnostic::error(codes::TARGET, "`target` inside a `repeat` block")
                        .label(t.span, "not at the top level")
                        .help("put the `target` line at the top of the file"),
                ),
                Item::Target(_) => {}
                Item::Let(l) if !top => self.let_(l),
                Item::Let(_) => {}
                Item::Decl(d) if !top => self.emit(
                    Diagnostic::error(codes::DECL, "declaration inside a `repeat` block")
                        .label(d.span, "not at the top level")
                        .help("declarations describe what the host loads: write them at the top level"),
                ),
                Item::Decl(_) => {}
                Item::Quant(q) => self.quant(q),
                Item::Repeat(r) => self.repeat(r),
                Item::Instr(i) => self.instr(i),
            }
        }
    }

    /// Evaluate an expression, reporting errors.
    pub fn eval(&mut self, e: &Expr) -> Option<i64> {
        let decls = &self.decls;
        let names = &self.decl_names;
        let base_of = |d: usize, span: Span| -> Result<i64, Diagnostic> {
            let decl = decls.get(d).ok_or_else(|| {
                Diagnostic::error(codes::UNKNOWN_NAME, "declaration not available").label(span, "")
            })?;
            match decl.place {
                Some(p) => Ok(i64::from(p.addr)),
                None => {
                    let mut diag =
                        Diagnostic::error(codes::EXPR, format!("`{}` has no address", decl.name))
                            .label(span, "used as an address");
                    if let Some(&s) = names.get(d) {
                        diag = diag.label(s, "declared without `at`: it lives on netq");
                    }
                    Err(diag.help("only declarations placed with `at MEM[ADDR]` have an address"))
                }
            }
        };
        let r = Eval {
            env: &self.env,
            base_of: &base_of,
        }
        .eval(e);
        match r {
            Ok(v) => Some(v),
            Err(d) => {
                self.emit(d);
                None
            }
        }
    }

    fn let_(&mut self, l: &ast::Let) {
        let Some(v) = self.eval(&l.value) else { return };
        if let Err(d) = self.env.define(&l.name.name, l.name.span, Value::Int(v)) {
            self.emit(d);
        }
    }

    fn quant(&mut self, q: &ast::Quant) {
        self.drop_broken_chain();
        if let Some(open) = &self.open {
            let first = open.first;
            self.emit(
                Diagnostic::error(codes::INSIDE_CHAIN, "`quant` inside a chain")
                    .label(q.span, "the chain starting above is not finished")
                    .label(first, "chain starts here")
                    .help(
                        "`quant` applies to the chains after it: move it before the chain's `v_rd`",
                    ),
            );
            return;
        }
        const POINTS: [&str; 5] = [
            "mvm.vector",
            "mvm.matrix",
            "mvm.output",
            "mfu.input",
            "storage",
        ];
        let point = q.point.name.as_str();
        if !POINTS.contains(&point) {
            let d = Diagnostic::error(
                codes::QUANT_POINT,
                format!("unknown quantization point `{point}`"),
            )
            .label(q.point.span, "not a quantization point");
            let help = match isa::nearest(point, POINTS) {
                Some(s) => format!("did you mean `{s}`? points: {}", POINTS.join(", ")),
                None => format!("points: {}", POINTS.join(", ")),
            };
            self.emit(d.help(help));
            return;
        }
        let float_only = matches!(point, "mvm.output" | "mfu.input" | "storage");
        let Some(format) = self.format(&q.format, float_only.then_some(point)) else {
            return;
        };
        let slot = match point {
            "mvm.vector" => &mut self.quant.mvm_vector,
            "mvm.matrix" => &mut self.quant.mvm_matrix,
            "mvm.output" => &mut self.quant.mvm_output,
            "mfu.input" => &mut self.quant.mfu_input,
            _ => &mut self.quant.storage,
        };
        *slot = format;
    }

    /// Parse a format literal; `float_for` names the point when it must be a float format.
    pub fn format(
        &mut self,
        lit: &ast::FormatLit,
        float_for: Option<&str>,
    ) -> Option<nnp_numerics::Format> {
        match lit.text.parse::<nnp_numerics::Format>() {
            Ok(f) => {
                if let Some(point) = float_for
                    && f.as_float().is_none()
                {
                    self.emit(
                        Diagnostic::error(
                            codes::FORMAT,
                            format!("`{point}` needs a float format, not `{}`", lit.text),
                        )
                        .label(lit.span, "not a float format")
                        .help("use fp16, bf16, fp32 or fp(EXP_BITS, MANT_BITS)"),
                    );
                    return None;
                }
                Some(f)
            }
            Err(e) => {
                // Inside the literal, on character boundaries (miette slices the source there).
                let text = lit.text.as_str();
                let len = text.len();
                let mut start = e.offset.min(len);
                while !text.is_char_boundary(start) {
                    start -= 1;
                }
                let mut end = (start + e.len.max(1)).min(len);
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                let span = Span::new(
                    lit.span.start as usize + start,
                    lit.span.start as usize + end.max(start),
                );
                let mut d = Diagnostic::error(
                    codes::FORMAT,
                    format!("invalid format `{}`: {}", lit.text, e.message),
                )
                .label(span, e.message.clone());
                d = d.help(e.help.unwrap_or_else(|| {
                    "formats: fp16, bf16, fp32, fp(e, m), bfp(mant = M), msfp(mant = M), \
                     mx(elem, block), hbfp(...), int(bits), fixed(int, frac), dynfixed(bits), \
                     pot(bits), twohot(bits) (docs/numerics.md)"
                        .to_string()
                }));
                self.emit(d);
                None
            }
        }
    }

    fn instr(&mut self, i: &Instr) {
        if !self.step(i.span) {
            return;
        }
        match i.mnemonic.op {
            Op::SWr => self.s_wr(i),
            Op::EndChain => self.end_chain(i),
            Op::VRd | Op::VRd2d => self.v_rd(i),
            Op::MvMul => self.mv_mul(i),
            Op::Mfu(kind) => self.mfu_op(i, kind),
            Op::VWr => self.v_wr(i),
            Op::MRd => self.m_rd(i),
            Op::MWr => self.m_wr(i),
        }
    }

    fn s_wr(&mut self, i: &Instr) {
        self.drop_broken_chain();
        if let Some(open) = &self.open {
            let first = open.first;
            self.emit(
                Diagnostic::error(codes::INSIDE_CHAIN, "`s_wr` inside a chain")
                    .label(i.span, "scalar registers cannot change while a chain runs")
                    .label(first, "chain starts here")
                    .help("move the `s_wr` before the chain's `v_rd` (or after its `end_chain`)"),
            );
            return;
        }
        let [reg, value] = i.operands.as_slice() else {
            self.emit(
                Diagnostic::error(
                    codes::OPERANDS,
                    format!("`s_wr` takes 2 operands, found {}", i.operands.len()),
                )
                .label(i.span, "expected `s_wr REGISTER, VALUE`")
                .help("e.g. `s_wr rows, 4`"),
            );
            return;
        };
        const REGS: [&str; 6] = ["rows", "cols", "iterations", "win_w", "win_h", "pitch"];
        let name = match reg {
            Operand::Expr(e) => e.as_name().map(|n| (n, e.span)),
            Operand::Mem(_) => None,
        };
        let Some((name, _)) = name.filter(|(n, _)| REGS.contains(n)) else {
            let written = name.map_or("this operand", |(n, _)| n);
            let help = match name.and_then(|(n, _)| isa::nearest(n, REGS)) {
                Some(s) => format!("did you mean `{s}`? registers: {}", REGS.join(", ")),
                None => format!("scalar registers: {}", REGS.join(", ")),
            };
            self.emit(
                Diagnostic::error(
                    codes::UNKNOWN_REGISTER,
                    format!("`{written}` is not a scalar register"),
                )
                .label(reg.span(), "unknown register")
                .help(help),
            );
            return;
        };
        let Operand::Expr(value_expr) = value else {
            self.emit(
                Diagnostic::error(codes::OPERANDS, "`s_wr` needs an integer value")
                    .label(value.span(), "a memory operand, not a value")
                    .help("e.g. `s_wr rows, 4`"),
            );
            return;
        };
        let Some(v) = self.eval(value_expr) else {
            return;
        };
        let max = max_scalar(name);
        if !(1..=max).contains(&v) {
            self.emit(
                Diagnostic::error(
                    codes::SCALAR_VALUE,
                    format!("`{name}` = {v} is out of range"),
                )
                .label(value_expr.span, format!("must be between 1 and {max}")),
            );
            return;
        }
        let v = v as u32;
        let s = &mut self.scalars;
        match name {
            "rows" => s.rows = v,
            "cols" => s.cols = v,
            "win_w" => s.win_w = v,
            "win_h" => s.win_h = v,
            "pitch" => s.pitch = v,
            _ => s.iterations = Some((v, i.span)),
        }
    }

    /// The memory a name refers to on this target.
    pub fn mem_of(&mut self, name: &Ident) -> Option<Mem> {
        let s = name.name.as_str();
        let simple = match s {
            "netq" => Some(Mem::Netq),
            "dram" => Some(Mem::Dram),
            "ivrf" => Some(Mem::Ivrf),
            "mrf" => Some(Mem::Mrf),
            _ => None,
        };
        if simple.is_some() {
            return simple;
        }
        let mfus = self.target.mfus;
        let indexed = |prefix: &str| {
            s.strip_prefix(prefix)
                .filter(|k| !k.is_empty() && k.len() <= 3 && k.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|k| k.parse::<u8>().ok())
        };
        let (k, mem) = match (indexed("asvrf"), indexed("mulvrf")) {
            (Some(k), _) => (k, Mem::AsVrf(k)),
            (_, Some(k)) => (k, Mem::MulVrf(k)),
            _ => {
                let names = self.mem_names();
                let d = Diagnostic::error(codes::UNKNOWN_MEMORY, format!("unknown memory `{s}`"))
                    .label(name.span, "not a memory of this target");
                let d = match (self.named_value(s), isa::nearest(s, &names)) {
                    (Some(what), _) => d.help(what),
                    (None, Some(n)) => d.help(format!(
                        "did you mean `{n}`? memories: {}",
                        names.join(", ")
                    )),
                    (None, None) => d.help(format!("memories: {}", names.join(", "))),
                };
                self.emit(d);
                return None;
            }
        };
        if usize::from(k) >= mfus {
            self.emit(
                Diagnostic::error(codes::UNKNOWN_MEMORY, format!("`{s}` does not exist"))
                    .label(
                        name.span,
                        format!("target `{}` has {mfus} MFUs", self.target.name),
                    )
                    .help(format!(
                        "MFU k has asvrf{{k}} and mulvrf{{k}} for k = 0..{}",
                        mfus.saturating_sub(1)
                    )),
            );
            return None;
        }
        Some(mem)
    }

    /// What a name written where a memory belongs stands for, and how to write it: the
    /// commonest slip is a declaration's name as the operand (`mv_mul W` for `mv_mul mrf[W]`).
    fn named_value(&self, s: &str) -> Option<String> {
        let decl = match self.env.get(s)? {
            Value::Int(v) => {
                return Some(format!(
                    "`{s}` is the constant {v}, not a memory; an operand is a memory and an \
                     address, as in `ivrf[{s}]`"
                ));
            }
            Value::Decl(idx) => self.decls.get(idx)?,
        };
        let kind = match decl.kind {
            DeclKind::Matrix => "matrix",
            DeclKind::Vector => "vector",
            DeclKind::Input => "input",
            DeclKind::Output => "output",
        };
        Some(match decl.place {
            Some(Place { mem, addr }) => format!(
                "`{s}` is the {kind} declared at `{mem}[{addr}]`; a declared name stands for its \
                 base address inside the brackets: write `{mem}[{s}]`"
            ),
            None if decl.kind == DeclKind::Input => format!(
                "`{s}` is an input, which the host pushes on netq: read it with `v_rd netq`"
            ),
            None => format!(
                "`{s}` is an {kind} that the host collects from netq: write it with `v_wr netq`"
            ),
        })
    }

    fn mem_names(&self) -> Vec<String> {
        let mut v: Vec<String> = ["netq", "dram", "ivrf", "mrf"].map(String::from).to_vec();
        for k in 0..self.target.mfus {
            v.push(format!("asvrf{k}"));
            v.push(format!("mulvrf{k}"));
        }
        v
    }

    /// The memory operand of an address-taking instruction (`MEM[A]`, `MEM[A] + INC`, the
    /// `_inc` spelling's extra operand, or a bare `netq`).
    pub fn mem_operand(&mut self, i: &Instr) -> Option<MemOp> {
        let want = 1 + usize::from(i.mnemonic.inc);
        if i.operands.len() != want {
            let form = if i.mnemonic.inc {
                format!("`{} MEM[ADDR], INC`", i.name.name)
            } else {
                format!("`{} MEM[ADDR]`", i.name.name)
            };
            self.emit(
                Diagnostic::error(
                    codes::OPERANDS,
                    format!(
                        "`{}` takes {want} operand{}, found {}",
                        i.name.name,
                        if want == 1 { "" } else { "s" },
                        i.operands.len()
                    ),
                )
                .label(i.span, format!("expected {form}")),
            );
            return None;
        }
        let first = i.operands.first()?;
        let (mem_ident, addr_expr, plus_inc, span) = match first {
            Operand::Mem(m) => (m.mem.clone(), Some(&m.addr), m.inc.as_ref(), m.span),
            Operand::Expr(e) => match e.as_name() {
                Some(n) => (
                    Ident {
                        name: n.to_string(),
                        span: e.span,
                    },
                    None,
                    None,
                    e.span,
                ),
                None => {
                    self.emit(
                        Diagnostic::error(
                            codes::OPERANDS,
                            format!("`{}` needs a memory operand", i.name.name),
                        )
                        .label(e.span, "not a memory")
                        .help("write a memory and address such as `ivrf[0]`, or `netq`"),
                    );
                    return None;
                }
            },
        };
        let mem = self.mem_of(&mem_ident)?;
        if mem == Mem::Netq {
            if addr_expr.is_some() || plus_inc.is_some() || i.mnemonic.inc {
                self.emit(
                    Diagnostic::error(codes::NETQ_ADDRESS, "netq has no address")
                        .label(span, "netq is a queue: no address or increment")
                        .help(format!("write `{} netq`", isa_base_name(i))),
                );
                return None;
            }
            return Some(MemOp {
                mem,
                addr: Addr::default(),
                span,
                mem_span: mem_ident.span,
            });
        }
        let Some(addr_expr) = addr_expr else {
            self.emit(
                Diagnostic::error(codes::OPERANDS, format!("`{mem}` needs an address"))
                    .label(span, "no address")
                    .help(format!("write `{mem}[ADDR]`, e.g. `{mem}[0]`")),
            );
            return None;
        };
        let base = self.eval(addr_expr)?;
        let size = self.target.mem_size(mem);
        if !(0..=i64::from(u32::MAX)).contains(&base) {
            self.emit(
                Diagnostic::error(
                    codes::ADDRESS_RANGE,
                    format!("address {base} is out of range: {mem} has {size} registers"),
                )
                .label(
                    addr_expr.span,
                    format!("must be between 0 and {}", size.saturating_sub(1)),
                ),
            );
            return None;
        }
        let inc_expr = match (plus_inc, i.mnemonic.inc) {
            (Some(e), true) => {
                self.emit(
                    Diagnostic::error(codes::INCREMENT, "increment given twice")
                        .label(e.span, "`+ INC` here")
                        .label(
                            i.name.span,
                            "and the `_inc` spelling takes it as the last operand",
                        )
                        .help(format!(
                            "write either `{} {mem}[A] + INC` or `{}_inc {mem}[A], INC`",
                            isa_base_name(i),
                            isa_base_name(i)
                        )),
                );
                return None;
            }
            (Some(e), false) => Some(e),
            (None, true) => match i.operands.get(1) {
                Some(Operand::Expr(e)) => Some(e),
                Some(other) => {
                    self.emit(
                        Diagnostic::error(codes::INCREMENT, "the increment must be an integer")
                            .label(other.span(), "a memory operand, not an increment")
                            .help(format!("e.g. `{} {mem}[0], 2`", i.name.name)),
                    );
                    return None;
                }
                None => None,
            },
            (None, false) => None,
        };
        let inc = match inc_expr {
            Some(e) => {
                let v = self.eval(e)?;
                match i32::try_from(v) {
                    Ok(v) => v,
                    Err(_) => {
                        self.emit(
                            Diagnostic::error(
                                codes::INCREMENT,
                                format!("increment {v} is too large"),
                            )
                            .label(e.span, "does not fit in 32 bits"),
                        );
                        return None;
                    }
                }
            }
            None => 0,
        };
        Some(MemOp {
            mem,
            addr: Addr {
                base: base as u32,
                inc,
            },
            span,
            mem_span: mem_ident.span,
        })
    }

    fn into_output(mut self) -> Result<CheckOutput, Vec<Diagnostic>> {
        let mut errors = self.diags.iter().any(Diagnostic::is_error);
        if !errors && let Some(d) = self.size_error() {
            self.diags.push(d);
            errors = true;
        }
        self.diags.sort_by_key(|d| (d.span().start, d.severity));
        if errors {
            return Err(self.diags);
        }
        Ok(CheckOutput {
            program: Program {
                source: self.src,
                target: self.target,
                decls: self.decls,
                chains: self.chains,
                pops: self.pops,
                pushes: self.pushes,
            },
            warnings: self.diags,
        })
    }
}

/// The mnemonic without its `_inc` suffix.
fn isa_base_name(i: &Instr) -> &str {
    i.name.name.strip_suffix("_inc").unwrap_or(&i.name.name)
}
