//! `nnpc data`: write the seeded random weights and inputs that every command uses without
//! `--weights`/`--inputs`, so that they can be read back, edited or fed to a board.

use super::data::DataArgs;
use super::files::provenance;
use nnp_grammar::Interface;
use nnp_runtime::host::{HostData, InputFeed, ShapeDisplay};
use nnp_runtime::io::{self, Dtype, ItemWriter};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Write the seeded random data of a program (its weights, its inputs, or both) to tensor
/// files: the values `nnpc run`, `emulate`, `diff` and `train` use for the same `--seed` and
/// `--batch` when no `--weights`/`--inputs` are given, so a run on the files gives the same
/// bits as a run on the seed.
///
/// Files are f32 (every value exactly), `*.safetensors`, `*.npy` (a program with one weight or
/// one input) or a directory of .npy files. Inputs are written batch first,
/// `[batch, ...declared shape]`. Exit status: 0 ok, 1 firmware errors, 2 unusable input.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc data samples/lstm.nnp --batch 64 --seed 7 --weights-out w.safetensors --inputs-out x.npy
  nnpc run samples/lstm.nnp --weights w.safetensors --inputs x.npy -o sw.safetensors
  nnpc data samples/mlp2_relu.nnp --weights-out mlp_weights --target samples/targets/fp32.toml")]
pub struct Args {
    #[command(flatten)]
    pub firmware: super::Firmware,
    /// Write the weights (every declaration the host loads but the inputs).
    #[arg(long, value_name = "FILE|DIR", required_unless_present = "inputs_out")]
    pub weights_out: Option<PathBuf>,
    /// Write the inputs of `--batch` input sets.
    #[arg(long, value_name = "FILE|DIR")]
    pub inputs_out: Option<PathBuf>,
    /// Input sets written to --inputs-out.
    #[arg(long, value_name = "B", default_value_t = 1, value_parser = super::at_least_one)]
    pub batch: usize,
    /// Seed of the random data (`--seed` of the other commands).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
}

/// Input sets made and written at a time, so that a large batch never sits whole in memory.
const PIECE_ITEMS: usize = 4096;

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match args.firmware.load() {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    nnp_runtime::host::weights_fit(&program).map_err(super::fail)?;
    super::host_args::check_batch(&program, args.batch)?;
    let seeded = DataArgs {
        weights: None,
        inputs: None,
        batch: Some(args.batch),
        seed: args.seed,
        random_missing: false,
    };
    let made = provenance(&args.firmware.file, &program, false, &seeded, args.batch);
    let reads = args.firmware.reads(&program);
    let weight_shapes: BTreeMap<String, Vec<usize>> = program
        .weights()
        .map(|d| (d.name.clone(), d.shape.clone()))
        .collect();
    let input_shapes: BTreeMap<String, Vec<usize>> = program
        .inputs()
        .map(|d| {
            let shape = std::iter::once(args.batch).chain(d.shape.iter().copied());
            (d.name.clone(), shape.collect())
        })
        .collect();
    if let (Some(w), Some(x)) = (&args.weights_out, &args.inputs_out)
        && super::files::written_files(w, weight_shapes.keys())
            .iter()
            .any(|f| super::files::written_files(x, input_shapes.keys()).contains(f))
    {
        let same = format!(
            "--weights-out {} and --inputs-out {} name the same file",
            w.display(),
            x.display()
        );
        return Err(super::fail(
            super::Failure::new(same).help("write them to two paths"),
        ));
    }
    // Before the files exist, so that Ctrl-C never leaves one behind.
    super::host_args::stop_on_interrupt();
    let mut summary = String::new();
    let mut writers = Vec::new();
    for (flag, path, shapes, what) in [
        ("--weights-out", &args.weights_out, &weight_shapes, "weight"),
        ("--inputs-out", &args.inputs_out, &input_shapes, "input"),
    ] {
        let Some(path) = path else { continue };
        if shapes.is_empty() {
            let none = format!(
                "{flag}: `{}` declares no {what}s",
                args.firmware.file.display()
            );
            return Err(super::fail(
                super::Failure::new(none).help(format!("leave {flag} out")),
            ));
        }
        reads.check_tensors(flag, path, shapes.keys())?;
        let writer = ItemWriter::create_with(path, shapes, Dtype::F32, &made)
            .map_err(|e| super::fail_in(flag, &e))?;
        summary.push_str(&written(path, shapes, what));
        writers.push((flag, writer, what == "input"));
    }
    for (flag, mut writer, inputs) in writers {
        let fail = |e: io::IoError| super::fail_in(flag, &e);
        if !inputs {
            let weights = HostData::random_weights(&program, args.seed);
            writer.write_items(0, &weights).map_err(fail)?;
        } else {
            let feed = InputFeed::random(&program, args.batch, args.seed);
            for first in (0..args.batch).step_by(PIECE_ITEMS) {
                if super::host_args::interrupted() {
                    super::output::stderr("interrupted: nothing written\n")?;
                    return Ok(ExitCode::from(130));
                }
                let items = first..(first + PIECE_ITEMS).min(args.batch);
                let piece = feed.items(items).map_err(super::fail)?;
                writer.write_items(first, &piece).map_err(fail)?;
            }
        }
        writer.finish().map_err(fail)?;
    }
    super::output::note(summary)?;
    Ok(ExitCode::SUCCESS)
}

/// The confirmation line of tensors `shapes` written to `path`.
fn written(path: &Path, shapes: &BTreeMap<String, Vec<usize>>, what: &str) -> String {
    let list: Vec<String> = shapes
        .iter()
        .map(|(n, s)| format!("{n} {}", ShapeDisplay(s)))
        .collect();
    format!(
        "{} written to {}: {}\n",
        super::output::count(shapes.len(), what),
        path.display(),
        list.join(", ")
    )
}
