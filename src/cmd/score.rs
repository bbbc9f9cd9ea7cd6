//! `nnpc score`: a program's loss and accuracy on a dataset with the hardware's numerics.

use super::train::{Files, Loss};
use super::{fail, output};
use nnp_runtime::io;
use nnp_runtime::score::{self, Engine};
use nnp_runtime::train::Dataset;
use serde_json::json;
use std::process::ExitCode;

/// Score a program's outputs against a dataset's targets, with the hardware's numerics.
///
/// The program runs on every item of a split of the data (the test split by default) through
/// the software graph (bit-identical to `nnpc run`) or the emulator, and its outputs are scored
/// as `nnpc train` scores its test split: class targets give the softmax cross-entropy and the
/// accuracy (the largest output is the class), value targets the mean squared error. The data
/// and weights files are `nnpc train`'s (by default `STEM.data.safetensors` and
/// `STEM.weights.safetensors` beside the firmware; without a weights file, seeded random
/// weights).
///
/// Exit status: 0 on success, 1 for errors in the firmware or a failed run, 2 for bad input.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc score samples/train/digits_mlp.nnp
  nnpc score samples/train/digits_mlp.nnp --engine emulator --json
  nnpc score samples/train/digits_mlp.nnp --split train")]
pub struct Args {
    #[command(flatten)]
    pub files: Files,
    /// Seed of the random weights without a weights file.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Which split to score (a file without a test split has only `train`).
    #[arg(long, value_enum, default_value_t = Split::Test)]
    pub split: Split,
    /// The engine: the software graph, or the emulator (the same bits, independently).
    #[arg(long, value_enum, default_value_t = EngineArg::Graph)]
    pub engine: EngineArg,
    /// Loss (default: cross-entropy for class targets, else mean squared error).
    #[arg(long, value_enum)]
    pub loss: Option<Loss>,
    /// The score as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Split {
    Test,
    Train,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum EngineArg {
    Graph,
    Emulator,
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match args.files.firmware.load() {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let data_path = args.files.data_path()?;
    let mut reads = super::files::Reads::default();
    let weights = args
        .files
        .starting_weights(&program, args.seed, &mut reads)?;
    let tensors = io::read_tensors(&data_path).map_err(fail)?;
    let data = Dataset::from_tensors(&program, tensors).map_err(fail)?;
    let (split, name) = match (args.split, &data.test) {
        (Split::Test, Some(test)) => (test, "test"),
        (Split::Test, None) => {
            let none = format!(
                "`{}` has no test split (`NAME_test` tensors)",
                data_path.display()
            );
            return Err(fail(super::Failure::new(none).help("pass `--split train`")));
        }
        (Split::Train, _) => (&data.train, "train"),
    };
    let engine = match args.engine {
        EngineArg::Graph => Engine::Graph,
        EngineArg::Emulator => Engine::Emulator,
    };
    let s =
        score::score(&program, &weights, split, args.loss.map(Loss::kind), engine).map_err(fail)?;
    let engine_name = match engine {
        Engine::Graph => "graph",
        Engine::Emulator => "emulator",
    };
    let text = if args.json {
        json!({
            "file": args.files.firmware.file.display().to_string(),
            "data": data_path.display().to_string(),
            "split": name,
            "items": split.items(),
            "engine": engine_name,
            "loss": s.loss,
            "accuracy": s.accuracy,
        })
        .to_string()
    } else {
        let acc = s
            .accuracy
            .map(|a| format!(", accuracy {:.2}%", a * 100.0))
            .unwrap_or_default();
        format!(
            "{}: the {name} split of {} ({} items), hardware numerics ({engine_name}): loss \
             {:.4}{acc}",
            args.files.firmware.file.display(),
            data_path.display(),
            split.items(),
            s.loss
        )
    };
    output::stdout(format!("{text}\n"))?;
    Ok(ExitCode::SUCCESS)
}
