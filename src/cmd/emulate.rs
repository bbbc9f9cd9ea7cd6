//! `nnpc emulate`: run firmware on the instruction-level hardware model.

use super::files::{Reads, provenance};
use super::host_args::{
    ChunkError, DataArgs, OutputArgs, RunSummary, fits_in_memory, interrupted, io_bytes_per_item,
};
use nnp_grammar::SourceFile;
use nnp_runtime::emulator::{self, EmuError, EmuOptions, PROGRESS_CHUNK};
use nnp_runtime::exec::max_chunk_items;
use nnp_runtime::host::HostData;
use std::collections::BTreeMap;
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
  nnpc emulate prog.nnp --target samples/targets/n16.toml --weights w.safetensors --inputs x.npy
  nnpc emulate prog.nnp -o out_dir --layout tiles --dtype f32 --json")]
pub struct Args {
    /// The firmware file (.nnp).
    pub file: PathBuf,
    /// Target: a built-in name (`bw-default`) or a TOML target file. Overrides the file's
    /// `target` statement.
    #[arg(long, value_name = "NAME|FILE")]
    pub target: Option<String>,
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

fn render(src: &SourceFile, e: &EmuError) -> miette::Report {
    super::runtime_error(src, e, e.span(), e.help())
}

/// Batch items emulated at a time by default (`--chunk-items`): each piece's inputs are read
/// or made just before it runs, and its outputs and trace written as it is done, so the
/// emulator never holds more than a piece's values whatever the batch. The emulator splits a
/// piece over its threads, so a piece should keep them all busy.
const PIECE_ITEMS: usize = 4096;

/// [`PIECE_ITEMS`] of a traced emulation: a piece holds its trace records until it is written,
/// and the README LSTM's are 45 KB per item (275 MB at 4096 items, 84 to 87 MB at 1024, in
/// the same time).
const TRACED_PIECE_ITEMS: usize = 1024;

/// Items per piece by default for inputs and outputs of `per_item` bytes per item:
/// [`PIECE_ITEMS`] or [`TRACED_PIECE_ITEMS`], fewer where those would pass the software
/// graph's cap on a chunk ([`max_chunk_items`]).
fn default_piece(traced: bool, per_item: usize) -> usize {
    let most = if traced {
        TRACED_PIECE_ITEMS
    } else {
        PIECE_ITEMS
    };
    most.min(max_chunk_items(per_item))
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match super::load(&args.file, args.target.as_deref()) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let (weights, feed) = args.data.feed(&program, None).map_err(super::fail)?;
    let batch = feed.batch;
    let shapes: BTreeMap<String, Vec<usize>> = program
        .outputs()
        .map(|d| {
            let shape = std::iter::once(batch).chain(d.shape.iter().copied());
            (d.name.clone(), shape.collect())
        })
        .collect();
    let reads = Reads::firmware(&args.file, args.target.as_deref(), &program);
    let made = provenance(&args.file, &program, false, &args.data, batch);
    let mut files = args.out.files(
        &program,
        &shapes,
        args.trace.as_deref(),
        (&args.data, reads),
        &made,
    )?;
    let (bar, tick) = super::input_sets_bar("emulating", batch);
    let mut opts = EmuOptions {
        trace: args.trace.is_some(),
        progress: (batch >= 2 * PROGRESS_CHUNK).then_some(tick),
        ..EmuOptions::default()
    };
    let mut data = HostData {
        batch: 0,
        weights,
        inputs: BTreeMap::new(),
    };
    let start = Instant::now();
    // The time reported is the emulation's alone, as when the data was loaded before it and
    // the outputs written after.
    let mut io = Duration::ZERO;
    let per_item = io_bytes_per_item(&program);
    let piece = args
        .chunk_items
        .unwrap_or_else(|| default_piece(args.trace.is_some(), per_item));
    let fix = match args.chunk_items {
        Some(_) => "a smaller `--chunk-items`, or none (pieces of bounded memory)",
        None => "the program's inputs and outputs per input set are too large for this machine",
    };
    fits_in_memory(piece.min(batch), per_item, fix.into()).map_err(super::fail)?;
    for first in (0..batch).step_by(piece) {
        let items = first..(first + piece).min(batch);
        if interrupted() {
            bar.finish_and_clear();
            drop(files);
            let e = ChunkError::Interrupted { done: first, batch };
            super::output::stderr(format!("{e}\n"))?;
            return Ok(ExitCode::from(130));
        }
        let t0 = Instant::now();
        data.inputs = feed.items(items.clone()).map_err(super::fail)?;
        data.batch = items.len();
        io += t0.elapsed();
        opts.first_item = first;
        let emu = match emulator::emulate(&program, &data, &opts) {
            Ok(e) => e,
            Err(e @ (EmuError::Data { .. } | EmuError::Table { .. })) => {
                bar.finish_and_clear();
                return Err(super::fail(e));
            }
            Err(e) => {
                bar.finish_and_clear();
                let report = render(&program.source, &e);
                return Ok(super::output::report(&report, ExitCode::from(1)));
            }
        };
        let t0 = Instant::now();
        let records = || Ok(emu.trace.unwrap_or_default());
        files
            .write(first, &emu.outputs, records)
            .map_err(super::fail)?;
        io += t0.elapsed();
    }
    bar.finish_and_clear();
    let secs = start.elapsed().saturating_sub(io).as_secs_f64();
    files.finish()?;
    RunSummary {
        engine: "emulated on",
        file: &args.file,
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

    /// Pieces of 1 GiB of inputs and outputs at most, by hand: 4096 items of 256 KiB make
    /// 1 GiB exactly; 4096 of 256 KiB + 1 byte pass it, so 4095; items of 100 MB, 10 (1.0 GB);
    /// one item of more than 1 GiB still goes alone.
    #[test]
    fn default_pieces_by_hand() {
        assert_eq!(default_piece(false, 0), 4096);
        assert_eq!(default_piece(false, 256 << 10), 4096);
        assert_eq!(default_piece(false, (256 << 10) + 1), 4095);
        assert_eq!(default_piece(true, 256 << 10), 1024);
        assert_eq!(default_piece(true, 100_000_000), 10);
        assert_eq!(default_piece(false, 100_000_000), 10);
        assert_eq!(default_piece(false, 3 << 30), 1);
    }
}
