//! `nnpc run`: execute firmware (or a compiled graph) as a software graph on candle-core.

use super::data::DataArgs;
use super::files::{Reads, provenance};
use super::host_args::{
    ChunkArgs, ChunkError, OutputArgs, RunSummary, Workload, interrupted, run_failed,
};
use nnp_grammar::{Interface, Program, SourceFile};
use nnp_lowering::swgraph::{self, Roots, SwGraph};
use nnp_runtime::exec::{DeviceKind, ExecOptions, Execution, trace};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Run firmware as its software graph (candle-core, bit-identical to the hardware) and write
/// its outputs. Accepts a firmware file (.nnp) or a graph written by `nnpc compile`
/// (.swg.json).
///
/// Without `--weights`/`--inputs`, seeded random data of the declared shapes is used (the same
/// data `nnpc emulate` uses for the same seed and batch). Exit status: 0 ok, 1 firmware errors,
/// 2 unreadable or unusable input.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc run samples/lstm.nnp
  nnpc run samples/lstm.nnp --batch 64 --seed 7 -o sw.safetensors --trace sw.trace.jsonl
  nnpc compile samples/lstm.nnp -o lstm.swg.json && nnpc run lstm.swg.json --batch 256
  nnpc data samples/mlp2_relu.nnp --batch 8 --weights-out w.safetensors --inputs-out x.npy
  nnpc run samples/mlp2_relu.nnp --target samples/targets/fp32.toml --weights w.safetensors --inputs x.npy
  nnpc run samples/gru.nnp -o out_dir --layout tiles --dtype f32 --json
  nnpc run samples/lstm.nnp --batch 1000000 --chunk-items 8192 -o sw.safetensors
  nnpc run samples/train/digits_mlp.nnp --weights samples/train/digits_mlp.weights.safetensors --inputs samples/train/digits_mlp.data.safetensors:x=x_test -o y.safetensors")]
// The file may be a compiled graph too; its target is fixed.
#[command(mut_arg("file", |a| a.help("The firmware file (.nnp) or compiled graph (.swg.json)")))]
#[command(mut_arg("target", |a| a.help(
    "Target: a built-in name (`bw-default`) or a TOML target file. Overrides the file's \
     `target` statement (firmware only: a compiled graph keeps its target)"
)))]
pub struct Args {
    #[command(flatten)]
    pub firmware: super::Firmware,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(flatten)]
    pub chunks: ChunkArgs,
    /// Write the trace of every `v_wr` as JSON lines (the emulator's format: docs/emulator.md).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Where the graph runs: `cuda` puts its values and ops on the first CUDA GPU, with the
    /// same bits (needs a build made by `scripts/cuda-build.sh`; docs/swgraph.md).
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Compute every product with the float BLAS path, even where the integer kernel applies
    /// (CPUs with AVX2 and FMA). The same bits, more slowly: for comparisons.
    #[arg(long)]
    pub float_matmul: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum DeviceArg {
    Cpu,
    Cuda,
}

impl From<DeviceArg> for DeviceKind {
    fn from(d: DeviceArg) -> DeviceKind {
        match d {
            DeviceArg::Cpu => DeviceKind::Cpu,
            DeviceArg::Cuda => DeviceKind::Cuda,
        }
    }
}

/// The largest compiled graph file read (a graph is untrusted input: its size is bounded
/// before it is read).
const MAX_GRAPH_BYTES: u64 = 4 << 30;

/// True for a compiled graph file: JSON by its name or its first bytes
/// ([`nnpc::looks_like_json`]). A file that cannot be read is not one (loading it as firmware
/// says why it cannot be read).
fn is_graph(path: &Path) -> bool {
    use std::io::Read as _;
    let mut head = Vec::new();
    // Only a regular file is opened (a FIFO would wait for a writer); anything else is
    // refused by the firmware loader, which says why.
    let read = nnp_runtime::io::open_regular(path)
        .map_err(|_| ())
        .and_then(|(f, _)| f.take(4096).read_to_end(&mut head).map_err(|_| ()));
    nnpc::looks_like_json(path, if read.is_ok() { &head } else { &[] })
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let roots = if args.trace.is_some() {
        Roots::OutputsAndWrites
    } else {
        Roots::Outputs
    };
    let graph_file = is_graph(&args.firmware.file);
    let reads;
    // The host side of either: a compiled graph's is its firmware's, recorded when it was
    // compiled; the firmware (its source text, for located errors) only for a firmware file.
    let (graph, program): (SwGraph, Option<Program>) = if graph_file {
        if args.firmware.target.is_some() {
            return Err(miette::miette!(
                help = "recompile the firmware with `nnpc compile FILE --target T`",
                "`{}` is a compiled graph; its target is fixed at compile time",
                args.firmware.file.display()
            ));
        }
        let bytes =
            nnp_runtime::io::read_limited(&args.firmware.file, MAX_GRAPH_BYTES).map_err(|e| {
                super::fail_in(
                    format!("cannot read `{}`", args.firmware.file.display()),
                    &e,
                )
            })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            super::fail(format!(
                "`{}` is not a software graph: not UTF-8 text ({e})",
                args.firmware.file.display()
            ))
        })?;
        let g = SwGraph::from_json(&text)
            .map_err(|e| super::fail_in(format!("`{}`", args.firmware.file.display()), &e))?;
        if roots == Roots::OutputsAndWrites && g.writes.is_empty() {
            return Err(miette::miette!(
                help = "compile without --outputs-only, or run the firmware file",
                "`{}` keeps no write records, so --trace has nothing to report",
                args.firmware.file.display()
            ));
        }
        reads = Reads::graph(&args.firmware.file, &g);
        (swgraph::optimize(&g, roots), None)
    } else {
        let program = match args.firmware.load() {
            Ok(p) => p,
            Err(code) => return Ok(code),
        };
        let g = match super::compile(&program, roots) {
            Ok(g) => g,
            Err(code) => return Ok(code),
        };
        reads = args.firmware.reads(&program);
        (g, Some(program))
    };
    let host: &dyn Interface = match &program {
        Some(p) => p,
        None => &graph,
    };
    // Inputs, from files or seeded random, are read or made a chunk at a time.
    let (weights, feed) = args.data.feed(host, None).map_err(super::fail)?;
    let batch = feed.batch;
    super::host_args::check_batch(host, batch)?;
    let opts = ExecOptions {
        device: args.device.into(),
        keep_writes: args.trace.is_some(),
        float_matmul: args.float_matmul,
        ..ExecOptions::default()
    };
    let shapes: BTreeMap<String, Vec<usize>> = graph
        .outputs
        .iter()
        .map(|o| {
            let shape = [batch].into_iter().chain(o.shape.iter().copied());
            (o.name.clone(), shape.collect())
        })
        .collect();
    let made = provenance(&args.firmware.file, host, graph_file, &args.data, batch);
    let mut files = args.out.files(
        host,
        &shapes,
        args.trace.as_deref(),
        (&args.data, reads),
        &made,
    )?;
    let start = Instant::now();
    // Each chunk's outputs and trace records go to the files as the chunk is done: the run
    // never holds the whole batch's. The time reported is the run's alone, without that
    // writing or reading or making inputs, as when the data was loaded before the run and
    // the outputs written after.
    let mut writing = Duration::ZERO;
    let mut feeding = Duration::ZERO;
    let inputs = |items| {
        let t0 = Instant::now();
        let fed = feed.items(items).map_err(ChunkError::Input);
        feeding += t0.elapsed();
        fed
    };
    let sink = |items: Range<usize>, run: Execution| {
        let t0 = Instant::now();
        let records = || Ok(trace::kept_records(&graph, &run, items.clone())?);
        files.write(items.start, &run.outputs, records)?;
        writing += t0.elapsed();
        Ok(())
    };
    let run = args
        .chunks
        .execute_fed(&graph, Workload { weights, batch }, opts, inputs, sink);
    match run {
        Ok(()) => {}
        Err(e) if interrupted() => {
            drop(files);
            super::output::stderr(format!("{e}\n"))?;
            return Ok(ExitCode::from(130));
        }
        Err(e) => {
            let graph_source;
            let source = match &program {
                Some(p) => &*p.source,
                None => {
                    // A graph's errors name their lines; it holds no text to show them in.
                    graph_source = SourceFile::new(graph.source.clone(), String::new());
                    &graph_source
                }
            };
            return run_failed(source, e);
        }
    }
    let secs = start
        .elapsed()
        .saturating_sub(writing + feeding)
        .as_secs_f64();
    files.finish()?;
    RunSummary {
        engine: "software graph on",
        file: &args.firmware.file,
        program: host,
        nodes: Some(graph.nodes.len()),
        outputs: &shapes,
        batch,
        secs,
        output_file: args.out.output.as_deref(),
        trace_file: args.trace.as_deref(),
    }
    .print(args.json)?;
    Ok(ExitCode::SUCCESS)
}
