//! Why training failed ([`TrainError`]).

use crate::{ExecError, short};
use nnp_lowering::swgraph::LowerError;

/// Why training failed.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum TrainError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Lower(#[from] LowerError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Weights(#[from] Box<crate::module::ModuleError>),
    #[error("training data: {0}")]
    Data(String),
    #[error("training data: no tensor `{name}_train` (or `{name}`) for {what} `{name}`")]
    #[diagnostic(help(
        "a data file holds `NAME_train` and `NAME_test` (or `NAME`) for every input and output \
         of the program"
    ))]
    NoData { name: String, what: &'static str },
    #[error(
        "training data: the targets of output `{output}` are class indices, which mean squared \
         error cannot take"
    )]
    #[diagnostic(help("use cross-entropy, or targets of the output's shape"))]
    ClassesForMse { output: String },
    #[error("precision schedule: {0}")]
    Schedule(String),
    #[error("precision schedule: `{0}` is not a precision")]
    #[diagnostic(help(
        "write `firmware`, `aNwM` (BFP mantissa widths of the vector and the matrix, sign \
         included, e.g. `a4w4`), `aN` or `wM`"
    ))]
    NotAPrecision(String),
    #[error("precision schedule: phase `{0}` has no epoch count")]
    #[diagnostic(help("write `PRECISION:EPOCHS`, e.g. `a4w4:2,a6w6:2,firmware:1`"))]
    NoEpochs(String),
    #[error(
        "precision schedule: a mantissa width ({mant}) for the `{what}` format of the mv_mul at \
         line {line}, which is {format}, not BFP"
    )]
    #[diagnostic(help(
        "give that phase the format in full (`vector = ...`, `matrix = ...` in a schedule file)"
    ))]
    NotBfp {
        mant: u32,
        what: String,
        line: usize,
        format: String,
    },
    #[error("{0}")]
    Options(String),
    #[error("the loss became {loss} at epoch {epoch}, step {step}")]
    #[diagnostic(help("lower the learning rate (`--lr`)"))]
    Diverged {
        epoch: usize,
        step: usize,
        loss: f64,
    },
    #[error("tensor operation failed at node {node} ({op}): {message}")]
    Node {
        node: usize,
        op: &'static str,
        message: String,
    },
    #[error("tensor operation failed: {0}")]
    Tensor(String),
    /// A broken invariant of the trainer: a bug in nnpc, not in what the caller passed.
    #[error("internal error (a bug in nnpc; please report it): {0}")]
    Internal(String),
}

impl TrainError {
    /// Whether the error is in what the caller passed (data, schedule, options, weights)
    /// rather than in the run.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            TrainError::Data(_)
                | TrainError::NoData { .. }
                | TrainError::ClassesForMse { .. }
                | TrainError::Schedule(_)
                | TrainError::NotAPrecision(_)
                | TrainError::NoEpochs(_)
                | TrainError::NotBfp { .. }
                | TrainError::Options(_)
                | TrainError::Weights(_)
        )
    }

    pub(super) fn node(node: usize, op: &'static str, e: &candle_core::Error) -> TrainError {
        TrainError::Node {
            node,
            op,
            message: short(e),
        }
    }

    pub(super) fn tensor(e: &candle_core::Error) -> TrainError {
        TrainError::Tensor(short(e))
    }
}
