//! Why a run failed ([`ExecError`], [`RunError`]), and the constructors the layers share.

use crate::mfu;
use nnp_grammar::Span;
use nnp_lowering::swgraph::GraphError;

/// Why a graph could not be executed. A fix, where there is one, is the error's help
/// ([`miette::Diagnostic::help`]), not part of its message.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ExecError {
    #[error("no host tensor `{name}` for the graph's {kind}")]
    #[diagnostic(help(
        "pass a weights/inputs file that holds it, or run without files for seeded random data"
    ))]
    Missing { name: String, kind: &'static str },
    #[error("host tensor `{name}` has shape {found:?}, the graph expects {expected:?}")]
    Shape {
        name: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    /// A host tensor built by hand whose values do not fill its shape.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Unfilled(#[from] nnp_host::Unfilled),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Table(#[from] mfu::TableError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Graph(#[from] GraphError),
    #[error("{0}")]
    Device(String),
    /// No CUDA device to run on: none usable, or a build without CUDA.
    #[error("{message}")]
    #[diagnostic(help("{help}"))]
    NoGpu { message: String, help: &'static str },
    #[error("tensor operation failed at node {node} ({op}): {message}")]
    Tensor {
        node: usize,
        op: &'static str,
        message: String,
    },
    /// A NaN or infinity where the target says `nonfinite = "error"` (the emulator's
    /// `EmuError::NonFinite`, in its words).
    #[error(
        "`{op}` produced {value} in lane {lane} and the target forbids NaN/Inf (line {line}, \
         chain {chain}, iteration {iteration}, batch item {item})"
    )]
    #[diagnostic(help("{}", nnp_host::NONFINITE_HELP))]
    NonFinite {
        op: String,
        value: f64,
        lane: usize,
        line: usize,
        span: Span,
        chain: usize,
        iteration: u32,
        item: usize,
    },
    /// A broken invariant of the executor: a bug in nnpc, not in the graph or its data.
    #[error("internal error (a bug in nnpc; please report it): {0}")]
    Internal(String),
}

impl ExecError {
    /// The error of a run of items `first..` of a larger batch, its item numbered in that
    /// batch.
    pub fn in_batch(mut self, first: usize) -> ExecError {
        if let ExecError::NonFinite { item, .. } = &mut self {
            *item += first;
        }
        self
    }

    /// The source span of the instruction a runtime error of the firmware points at.
    pub fn span(&self) -> Option<Span> {
        match self {
            ExecError::NonFinite { span, .. } => Some(*span),
            _ => None,
        }
    }
}

/// A short message of a candle error (its Display may carry a backtrace after the first line).
pub(crate) fn short(e: &candle_core::Error) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or("candle error")
        .to_string()
}

/// A broken invariant ([`ExecError::Internal`]).
pub(crate) fn internal(msg: &str) -> ExecError {
    ExecError::Internal(msg.to_string())
}

/// Lowering or execution failure.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum RunError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Lower(#[from] nnp_lowering::swgraph::LowerError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Exec(#[from] ExecError),
}
