//! The flags of `nnpc diff` ([`Args`]).

use crate::cmd::Firmware;
use crate::cmd::data::DataArgs;
use crate::cmd::host_args::{ChunkArgs, LayoutArg};
use crate::cmd::run::DeviceArg;
use std::path::PathBuf;

/// Run the firmware's software graph on the data the hardware saw and compare every output
/// with the hardware's dump: bit-exact count, ULP histogram, error statistics and the first
/// mismatches, each with its tile, lane and the `v_wr` line that wrote it. With `--trace`,
/// compare the per-`v_wr` traces too and name the first divergent instruction.
///
/// The data must be the hardware's: the same `--weights`/`--inputs` files, or (for a dump made
/// by `nnpc emulate` with random data) the same `--seed`; the batch is read from the dump.
/// Exit status, as diff tools have it: 0 concordant (every element bit-exact, and every trace
/// record identical), 1 not concordant, 2 no comparison made (unreadable or unusable input,
/// firmware errors, a runtime error of the firmware).
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc emulate samples/lstm.nnp --batch 64 -o hw.safetensors && nnpc diff samples/lstm.nnp --hardware hw.safetensors
  nnpc data samples/lstm.nnp --batch 64 --seed 7 --weights-out w.safetensors --inputs-out x.npy
  nnpc emulate samples/lstm.nnp --weights w.safetensors --inputs x.npy -o board.safetensors
  nnpc diff samples/lstm.nnp --hardware board.safetensors --weights w.safetensors --inputs x.npy --json
  nnpc diff samples/lstm.nnp --hardware board.safetensors --weights w.safetensors --inputs x.npy --explain
  nnpc emulate samples/gru.nnp --batch 8 --layout tiles -o dump_tiles.safetensors
  nnpc diff samples/gru.nnp --hardware dump_tiles.safetensors --layout tiles --first 50
  nnpc emulate samples/lstm.nnp --trace hw.jsonl -o hw.safetensors && nnpc diff samples/lstm.nnp --hardware hw.safetensors --trace hw.jsonl
  nnpc emulate samples/lstm.nnp --batch 64 -o hw.safetensors && nnpc diff samples/lstm.nnp --hardware hw.safetensors --report report.html")]
pub struct Args {
    /// The hardware's outputs: `*.safetensors` or a directory of .npy files, one tensor per
    /// `output` declaration under its declared name; or `*.npy` (a program with one output:
    /// its one tensor, whatever the file's name). A value that is not exactly a value of the
    /// storage format is a mismatch.
    #[arg(long, value_name = "DUMP")]
    pub hardware: PathBuf,
    /// Layout of the dump: logical shapes, or native tiles ([..., tiles, N]).
    #[arg(long, value_enum, default_value_t = LayoutArg::Logical)]
    pub layout: LayoutArg,
    /// A per-`v_wr` trace of the hardware run (JSON lines, the format of `nnpc emulate
    /// --trace`): compare it record by record and name the first divergent `v_wr`.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    #[command(flatten)]
    pub firmware: Firmware,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub chunks: ChunkArgs,
    /// Where the software graph runs: `cuda` puts it on the first CUDA GPU, with the same
    /// bits (needs a build made by `scripts/cuda-build.sh`; docs/swgraph.md).
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// How many mismatching elements to list.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub first: usize,
    /// When the dump is not concordant, rerun the software graph under the default target
    /// `bw-default` (where the target is another: a board that ran the default) and each
    /// one-knob change of the target's numerics (accumulation; rounding of the MVM inputs, the MVM output, the
    /// MFU input and storage; the MVM inputs' mantissa width, or their format as another of
    /// the catalogue's MVM formats; the MVM output's and MFU input's float format) and say
    /// which change, if any, makes the dump concordant: a target file that misdescribes the
    /// board, told apart from a fault. When none does, changes of two knobs: each change of a
    /// second knob on top of the closest one (`--explain`, `--explain=closest`), or every pair
    /// of two changes (`--explain=all-pairs`: about 500 reruns on bw-default, for a board that
    /// the closest one does not lead to). Each change runs on the first 8 items, and on the
    /// whole batch where those are bit-exact.
    #[arg(
        long,
        value_enum,
        value_name = "PAIRS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "closest"
    )]
    pub explain: Option<ExplainPairs>,
    /// Print the report as JSON (schema `nnpc.diff/1`, docs/diff.md).
    #[arg(long)]
    pub json: bool,
    /// Also write the report as a self-contained web page (verdict, provenance, ULP
    /// histogram, heatmaps of where the mismatches are, the first mismatches at their
    /// firmware lines, the trace's first divergent v_wr and what feeds it, --explain's rows).
    #[arg(long, value_name = "PAGE.html")]
    pub report: Option<PathBuf>,
}

/// Which changes of two knobs `--explain` tries when no one-knob change is concordant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainPairs {
    /// Each change of a second knob on top of the closest one-knob change, when that is
    /// closer than the target itself.
    Closest,
    /// Every pair: each change of a second knob on top of every one-knob change.
    AllPairs,
}

impl From<ExplainPairs> for nnp_runtime::diff::ExplainPairs {
    fn from(p: ExplainPairs) -> Self {
        match p {
            ExplainPairs::Closest => Self::Closest,
            ExplainPairs::AllPairs => Self::AllPairs,
        }
    }
}
