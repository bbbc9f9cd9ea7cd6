//! Scoring a program on a dataset with the hardware's numerics (`nnpc score`, `Graph.score`):
//! its outputs on a split's inputs, through the software graph or the emulator, against the
//! split's targets, as `nnpc train` scores its test split (`train::score_outputs`).

use crate::emulator::{self, EmuOptions};
use crate::exec::{ExecOptions, Session};
use crate::train::{self, LossKind, Score, Split, TrainError};
use nnp_grammar::Program;
use nnp_host::{HostData, Tensor};
use std::collections::BTreeMap;

/// Which engine computes the outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The concordant software graph (`nnpc run`).
    Graph,
    /// The instruction-level emulator (`nnpc emulate`): the same bits, independently.
    Emulator,
}

/// Why a program could not be scored.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ScoreError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Train(#[from] TrainError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Emulator(#[from] emulator::EmuError),
}

/// `program` with `weights` on every item of `split`, scored against its targets.
pub fn score(
    program: &Program,
    weights: &BTreeMap<String, Tensor>,
    split: &Split,
    loss: Option<LossKind>,
    engine: Engine,
) -> Result<Score, ScoreError> {
    let data = HostData {
        batch: split.items(),
        weights: weights.clone(),
        inputs: split.inputs.clone(),
    };
    let outputs = match engine {
        Engine::Graph => {
            let graph = train::compile(program)?;
            let mut session =
                Session::new(&graph, &ExecOptions::default()).map_err(TrainError::from)?;
            session.run(&data).map_err(TrainError::from)?.outputs
        }
        Engine::Emulator => emulator::emulate(program, &data, &EmuOptions::default())?.outputs,
    };
    Ok(train::score_outputs(program, split, &outputs, loss)?)
}
