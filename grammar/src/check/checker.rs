//! The checker's state ([`Checker`]: what pass 1 found, the chain being assembled, the simulated
//! registers and queues, the size counters) and what every part of the check uses: diagnostics
//! reported once per (code, span) and expression evaluation.

use super::chain::OpenChain;
use super::eval::{Env, Eval};
use super::state::{PadLanes, Queue, Regs, Scalars, Space};
use crate::ast::Expr;
use crate::diagnostics::{Diagnostic, codes};
use crate::program::{Chain, Decl, NetqSlot, QuantConfig, SourceFile, Span};
use crate::target::Target;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
    pub pads: PadLanes,
    /// The matrix declaration and tile (row-major index in it) whose data each mrf tile
    /// holds: placed there, or copied there by `m_rd`/`m_wr`.
    pub mrf_tiles: HashMap<u32, (usize, u32)>,
    pub inputs: Queue,
    pub outputs: Queue,
    pub pops: Vec<NetqSlot>,
    pub pushes: Vec<NetqSlot>,
    /// Unrolled steps so far: instructions and `repeat` iterations.
    pub(super) steps: u64,
    /// The `repeat`s (by address in the AST) whose unrolled size the innermost running
    /// `repeat` that counted its body included: they do not count again.
    pub(super) counted: HashSet<usize>,
    pub work: u64,
    /// A size limit was hit: stop walking.
    pub stopped: bool,
    /// Some chain was dropped or not simulated because of its errors.
    pub incomplete: bool,
}

impl Checker {
    pub(super) fn new(src: Arc<SourceFile>, target: Target) -> Self {
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
            pads: PadLanes::default(),
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
}
