//! `nnpc emulate`: run firmware on the instruction-level hardware model.

use super::data::DataArgs;
use super::files::provenance;
use super::host_args::{ChunkError, OutputArgs, RunSummary, Workload, run_failed, stream_with_bar};
use nnp_runtime::emulator::{EmuOptions, Emulation};
use nnp_runtime::stream::Emulator;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Execute a checked program on the emulator (the hardware model) and write its outputs.
///
/// Without `--weights`/`--inputs`, seeded random data of the declared shapes is used. Exit
/// status: 0 ok, 1 firmware errors or a runtime error of the program (netq underflow, read of an
/// unwritten register, NaN/Inf where the target forbids it), 2 unreadable or unusable input.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc emulate samples/lstm.nnp
  nnpc emulate samples/lstm.nnp --batch 64 --seed 7 -o hw.safetensors --trace hw.trace.jsonl
  nnpc data samples/elman_rnn_small.nnp --batch 8 --weights-out w.safetensors --inputs-out x.npy
  nnpc emulate samples/elman_rnn_small.nnp --target samples/targets/n16.toml --weights w.safetensors --inputs x.npy
  nnpc emulate samples/gru.nnp -o out_dir --layout tiles --dtype f32 --json
  nnpc emulate samples/train/digits_mlp.nnp --weights samples/train/digits_mlp.weights.safetensors --inputs samples/train/digits_mlp.data.safetensors:x=x_test")]
pub struct Args {
    #[command(flatten)]
    pub firmware: super::Firmware,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Write the trace of every `v_wr` as JSON lines (format: docs/emulator.md).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Items emulated at a time: each piece's inputs are read just before it runs and its
    /// outputs and trace written as it is done, so memory stays bounded whatever the batch
    /// (default: 4096, or 1024 with --trace; fewer where their inputs and outputs would pass
    /// 1 GiB). The same bits for any value.
    #[arg(long, value_name = "N", value_parser = super::at_least_one)]
    pub chunk_items: Option<usize>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match args.firmware.load() {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let (weights, feed) = args.data.feed(&program, None).map_err(super::fail)?;
    let batch = feed.batch;
    super::host_args::check_batch(&program, batch)?;
    let shapes: BTreeMap<String, Vec<usize>> = program
        .outputs()
        .map(|d| {
            let shape = std::iter::once(batch).chain(d.shape.iter().copied());
            (d.name.clone(), shape.collect())
        })
        .collect();
    let reads = args.firmware.reads(&program);
    let made = provenance(&args.firmware.file, &program, false, &args.data, batch);
    let mut files = args.out.files(
        &program,
        &shapes,
        args.trace.as_deref(),
        (&args.data, reads),
        &made,
    )?;
    let opts = EmuOptions {
        trace: args.trace.is_some(),
        // Ctrl-C stops a piece within moments, not only between pieces.
        stop: Some(&super::host_args::INTERRUPTED),
        ..EmuOptions::default()
    };
    let mut engine = Emulator::new(&program, opts, args.chunk_items, batch).map_err(super::fail)?;
    let start = Instant::now();
    // The time reported is the emulation's alone, as when the data was loaded before it and
    // the outputs written after.
    let mut feeding = Duration::ZERO;
    let mut writing = Duration::ZERO;
    let inputs = |items| {
        let t0 = Instant::now();
        let fed = feed.items(items);
        feeding += t0.elapsed();
        Ok(fed?)
    };
    let sink = |items: Range<usize>, emu: Emulation| {
        let t0 = Instant::now();
        let records = || Ok(emu.trace.unwrap_or_default());
        files.write(items.start, &emu.outputs, records)?;
        writing += t0.elapsed();
        Ok(())
    };
    let run = stream_with_bar(
        "emulating",
        &mut engine,
        Workload { weights, batch },
        inputs,
        sink,
    );
    match run {
        Ok(()) => {}
        Err(e @ ChunkError::Interrupted { .. }) => {
            drop(files);
            super::output::stderr(format!("{e}\n"))?;
            return Ok(ExitCode::from(130));
        }
        Err(e) => return run_failed(&program.source, e),
    }
    let secs = start
        .elapsed()
        .saturating_sub(feeding + writing)
        .as_secs_f64();
    files.finish()?;
    RunSummary {
        engine: "emulated on",
        file: &args.firmware.file,
        program: &program,
        nodes: None,
        outputs: &shapes,
        batch,
        secs,
        output_file: args.out.output.as_deref(),
        trace_file: args.trace.as_deref(),
    }
    .print(args.json)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnp_runtime::exec::MAX_CHUNK_BYTES;
    use nnp_runtime::stream::{PIECE_ITEMS, TRACED_PIECE_ITEMS};

    /// `--chunk-items`' help states the defaults [`PIECE_ITEMS`] and [`TRACED_PIECE_ITEMS`].
    #[test]
    fn chunk_items_help_states_the_default_pieces() {
        let help = crate::cmd::host_args::arg_help::<Args>("chunk_items");
        let stated = format!(
            "(default: {PIECE_ITEMS}, or {TRACED_PIECE_ITEMS} with --trace; fewer where their \
             inputs and outputs would pass {} GiB)",
            MAX_CHUNK_BYTES >> 30
        );
        assert!(help.contains(&stated), "{help:?} should say {stated:?}");
    }
}
