//! The checker: AST -> [`Program`], enforcing the rules of docs/language.md against a
//! [`Target`].
//!
//! Two passes over the file. Pass 1 evaluates the top-level `let`s and declarations (so the
//! host's data is in place before the first instruction, wherever the declarations are written).
//! Pass 2 walks the code in order, unrolling `repeat`, assembling chains and simulating which
//! register holds what, per register and per iteration, to find uninitialised reads, dead writes
//! and netq mismatches. All errors are collected; a diagnostic is reported once per
//! (code, span), so an error inside a `repeat` body is not repeated for every unrolled copy.
//!
//! This file: the entry points, the checker's state and the walk over items. Statements between
//! chains are in `stmt.rs`, memory operands in `operand.rs`, chains in `chain/`.

mod chain;
mod decls;
mod eval;
mod operand;
mod pads;
mod size;
mod state;
mod stmt;

use crate::ast::{self, Expr, File, Item};
use crate::diagnostics::{Diagnostic, codes};
use crate::parse::parse;
use crate::program::{Addr, Chain, Decl, Mem, NetqSlot, Program, QuantConfig, SourceFile, Span};
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
    /// The `repeat`s (by address in the AST) whose unrolled size the innermost running
    /// `repeat` that counted its body included: they do not count again.
    counted: HashSet<usize>,
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
            counted: HashSet::new(),
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
