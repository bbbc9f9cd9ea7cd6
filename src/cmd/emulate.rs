//! `nnpc emulate`: run firmware on the instruction-level hardware model.

use super::host_args::{DataArgs, OutputArgs, RunSummary};
use nnp_grammar::SourceFile;
use nnp_runtime::emulator::{self, EmuError, EmuOptions, PROGRESS_CHUNK};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

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
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A runtime error rendered with its source line.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{message}")]
#[diagnostic(code(nnp::emulate))]
struct RuntimeError {
    message: String,
    #[source_code]
    src: miette::NamedSource<String>,
    #[label("here")]
    span: Option<miette::SourceSpan>,
    #[help]
    help: Option<String>,
}

fn render(src: &SourceFile, e: &EmuError) -> miette::Report {
    miette::Report::new(RuntimeError {
        message: e.to_string(),
        src: src.named(),
        span: e.span().map(Into::into),
        help: e.help().map(str::to_string),
    })
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match super::load(&args.file, args.target.as_deref()) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let data = args
        .data
        .host_data(&program, None)
        .map_err(|e| miette::miette!("{e}"))?;
    let (bar, tick) = super::input_sets_bar("emulating", data.batch);
    let opts = EmuOptions {
        trace: args.trace.is_some(),
        chunk: None,
        progress: (data.batch >= 2 * PROGRESS_CHUNK).then_some(tick),
    };
    let start = Instant::now();
    let result = emulator::emulate(&program, &data, &opts);
    bar.finish_and_clear();
    let emu = match result {
        Ok(e) => e,
        Err(e @ (EmuError::Data { .. } | EmuError::Table { .. })) => {
            return Err(miette::miette!("{e}"));
        }
        Err(e) => {
            eprintln!("{:?}", render(&program.source, &e));
            return Ok(ExitCode::from(1));
        }
    };
    let secs = start.elapsed().as_secs_f64();
    if let (Some(path), Some(trace)) = (&args.trace, &emu.trace) {
        emulator::write_trace(path, trace).map_err(|e| miette::miette!("{e}"))?;
    }
    args.out.write(&program, &emu.outputs)?;
    RunSummary {
        engine: "emulated on",
        file: &args.file,
        program: &program,
        nodes: None,
        outputs: &super::host_args::output_shapes(&emu.outputs),
        batch: data.batch,
        secs,
        output_file: args.out.output.as_deref(),
        trace_file: args.trace.as_deref(),
    }
    .print(args.json);
    Ok(ExitCode::SUCCESS)
}
