//! `nnpc emulate`: run firmware on the instruction-level hardware model.

use nnp_grammar::{Program, SourceFile};
use nnp_runtime::emulator::{self, EmuError, EmuOptions};
use nnp_runtime::host::{HostData, LoadOptions, ShapeDisplay};
use nnp_runtime::io::{self, Dtype};
use std::collections::BTreeMap;
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
    /// Weights: a .safetensors file, a .npy file, or a directory of .npy files.
    #[arg(long, value_name = "FILE|DIR")]
    pub weights: Option<PathBuf>,
    /// Inputs, same kinds of file; each input is its declared shape or [batch, ...shape].
    #[arg(long, value_name = "FILE|DIR")]
    pub inputs: Option<PathBuf>,
    /// Batch size (default: from batched inputs, else 1).
    #[arg(long, value_name = "B")]
    pub batch: Option<usize>,
    /// Seed of the random data used when no files are given (or with --random-missing).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Fill tensors missing from --weights/--inputs with seeded random data.
    #[arg(long)]
    pub random_missing: bool,
    /// Write the outputs: `*.safetensors`, `*.npy` (one output), or a directory of .npy files.
    #[arg(short = 'o', long = "output", value_name = "FILE|DIR")]
    pub output: Option<PathBuf>,
    /// Layout of the written outputs.
    #[arg(long, value_enum, default_value_t = LayoutArg::Logical)]
    pub layout: LayoutArg,
    /// Element type of the written outputs (default: f16 when the storage format fits, else
    /// f32; both are exact then).
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
    /// Write the trace of every `v_wr` as JSON lines (format: docs/emulator.md).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LayoutArg {
    /// The declarations' logical shapes.
    Logical,
    /// Native tiles: rows padded to whole N-lane tiles, shape [..., tiles, N].
    Tiles,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum DtypeArg {
    F16,
    F32,
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

fn host_data(args: &Args, program: &Program) -> Result<HostData, nnp_runtime::host::HostError> {
    if args.weights.is_none() && args.inputs.is_none() {
        return Ok(HostData::random(
            program,
            args.batch.unwrap_or(1).max(1),
            args.seed,
        ));
    }
    let opts = LoadOptions {
        batch: args.batch,
        random_missing: args.random_missing,
        seed: args.seed,
    };
    HostData::load_with(
        program,
        args.weights.as_deref(),
        args.inputs.as_deref(),
        &opts,
    )
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match crate::load_program(&args.file, args.target.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            let code = e.exit_code();
            eprintln!("{:?}", miette::Report::new(e));
            return Ok(code);
        }
    };
    let data = host_data(&args, &program).map_err(|e| miette::miette!("{e}"))?;
    let opts = EmuOptions {
        trace: args.trace.is_some(),
        chunk: None,
    };
    let start = Instant::now();
    let emu = match emulator::emulate(&program, &data, &opts) {
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
    if let Some(path) = &args.output {
        let mut tensors = BTreeMap::new();
        for (name, t) in &emu.outputs {
            let t = match args.layout {
                LayoutArg::Logical => t.clone(),
                LayoutArg::Tiles => io::to_tiles(name, t, program.native(), false)
                    .map_err(|e| miette::miette!("{e}"))?,
            };
            tensors.insert(name.clone(), t);
        }
        io::write_tensors(path, &tensors, dtype(&args, &program))
            .map_err(|e| miette::miette!("{e}"))?;
    }
    print_summary(&args, &program, &emu.outputs, data.batch, secs);
    Ok(ExitCode::SUCCESS)
}

/// f16 when the storage format's values all fit f16 exactly, else f32.
fn dtype(args: &Args, program: &Program) -> Dtype {
    match args.dtype {
        Some(DtypeArg::F16) => Dtype::F16,
        Some(DtypeArg::F32) => Dtype::F32,
        None => match program.target.numerics.storage.as_float() {
            Some(f) if f.exp_bits <= 5 && f.mant_bits <= 10 => Dtype::F16,
            _ => Dtype::F32,
        },
    }
}

/// Input vectors per second: batch items times input rows pushed on netq (at least one per
/// item).
fn print_summary(
    args: &Args,
    program: &Program,
    outputs: &nnp_runtime::host::Outputs,
    batch: usize,
    secs: f64,
) {
    let rows: usize = program
        .inputs()
        .filter(|d| d.place.is_none())
        .map(|d| d.rows())
        .sum();
    let vectors = batch * rows.max(1);
    let per_s = vectors as f64 / secs.max(1e-9);
    if args.json {
        let outs: Vec<serde_json::Value> = outputs
            .iter()
            .map(|(n, t)| serde_json::json!({ "name": n, "shape": t.shape }))
            .collect();
        let v = serde_json::json!({
            "file": program.source.name,
            "target": program.target.name,
            "batch": batch,
            "outputs": outs,
            "seconds": secs,
            "vectors": vectors,
            "vectors_per_second": per_s,
            "output_file": args.output,
            "trace_file": args.trace,
        });
        println!("{v}");
        return;
    }
    println!(
        "{}: emulated on `{}` (N = {}), batch {batch}",
        program.source.name,
        program.target.name,
        program.native()
    );
    for (name, t) in outputs {
        println!("  output {name}: {}", ShapeDisplay(&t.shape));
    }
    println!(
        "  {:.3} ms, {vectors} input vectors, {per_s:.0} vectors/s",
        secs * 1e3
    );
    if let Some(p) = &args.output {
        println!("  outputs written to {}", p.display());
    }
    if let Some(p) = &args.trace {
        println!("  trace written to {}", p.display());
    }
}
