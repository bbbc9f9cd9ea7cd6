//! `nnpc bench`: throughput of the software graph measured against its baselines, in one run.

mod table;

use super::host_args::input_rows;
use super::run::DeviceArg;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nnp_grammar::Program;
use nnp_lowering::swgraph::{Roots, SwGraph};
use nnp_numerics::Format;
use nnp_runtime::emulator::{self, EmuOptions};
use nnp_runtime::exec::baseline::{self, Floor, IntProducts, Timed};
use nnp_runtime::exec::{ExecOptions, PathCounts, Session};
use nnp_runtime::host::{HostData, Outputs};
use nnp_runtime::stream::{fits_in_memory, io_bytes_per_item};
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Measure a firmware file's software graph against the emulator and plain f32, in one run.
///
/// Its baselines, each measured in the same run:
///
/// - software graph: vectors/s at --batch (median of the warm runs of the timed rounds, after
///   a first run that also prepares the weights; that first run is reported as the cold time);
/// - timed rounds (--reps of them, at least 3 where the emulator runs), each a warm run of the
///   graph, the floor, the products alone, the emulator by its rule and a peak probe, one
///   after the other, so that all see the same machine load;
/// - software graph, back to back: the median of up to 3 more warm runs right after each
///   round's first (one where a run takes over half a second), the latency of a caller that
///   runs the session again and again: the round's other measurements leave the caches to
///   other data and the threads idle, which the first run of a round pays for (at batch 1, a
///   large part of a run);
/// - emulator: vectors/s on the same data (or its first --emu-batch items): in every round
///   until it ran 3 times where one run takes under 10 s, then while its runs add up to under
///   a second; once where a run takes longer. Its ratio is against the graph's runs in the
///   same rounds, and its outputs are checked against the graph's bit for bit;
/// - floor: the graph's products as candle's f32 matmul (its CPU gemm; no quantization) at
///   --batch: candle's speed on this machine, not the machine's; with its fraction of the
///   f32 FMA peak (vfmadd231ps, probed as the int8 peak);
/// - products alone: the graph's products on the integer kernel, on random BFP 8 operands of
///   their shapes, nothing else of a run;
/// - int8 peak: the machine's int8 multiply-adds per second, registers only, on the CPU's best
///   integer instruction (AVX-512 VNNI vpdpbusd, else AVX2 vpmaddubsw + vpmaddwd, else a
///   scalar estimate) on every thread; the best probe of the rounds. The graph's and the
///   products' multiply-adds per second (every weight of their stacks per item) as fractions
///   of it;
/// - quantize kernel: the graph's BFP vector quantizer (the target's, or bw-default's when the
///   target's vector format is not BFP) against a plain element-wise candle op
///   (`x * 1.5 + 0.25`) over the same 4M-element tensor;
/// - memory after the first run: peak (VmHWM: what `nnpc run` needs) and resident (VmRSS) with
///   the host's f32 weights held, then with them dropped (the session reads them in its
///   first run only): what it keeps for warm runs; each also in bytes per weight. And the
///   peak at the end;
/// - context, with no target: the floor's vectors/s over the emulator's (how far plain f32
///   BLAS of the same products, with no quantization, is ahead of the emulator here).
///
/// Exit status: 0 measured (targets met or not), 1 firmware errors or outputs of the graph
/// and the emulator that differ, 2 unusable input.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
#[command(after_help = "Examples:
  nnpc bench samples/bench/lstm_1024.nnp --batch 64
  nnpc bench samples/bench/mlp_4096.nnp --batch 256 --json
  nnpc bench samples/mlp2_relu.nnp --batch 2 --skip-emulator")]
pub struct Args {
    #[command(flatten)]
    pub firmware: super::Firmware,
    /// Input sets per software-graph run.
    #[arg(long, value_name = "B", default_value_t = 64, value_parser = super::at_least_one)]
    pub batch: usize,
    /// Seed of the random weights and inputs.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Timed repetitions of each measurement (the median is reported).
    #[arg(long, value_name = "R", default_value_t = 5, value_parser = super::at_least_one)]
    pub reps: usize,
    /// Batch items the emulator runs (default: the whole batch). Fewer is faster, but the
    /// emulator runs items in lockstep and is slower per vector on small batches.
    #[arg(long, value_name = "E", value_parser = super::at_least_one)]
    pub emu_batch: Option<usize>,
    /// Do not run the emulator (no speed-up ratio, no concordance check).
    #[arg(long)]
    pub skip_emulator: bool,
    /// Measure the graph with the float BLAS path for every product (as before the integer
    /// kernel; see `nnpc run --float-matmul`).
    #[arg(long)]
    pub float_matmul: bool,
    /// Measure the graph with every MFU op a candle op of its own, whole tensors in and out,
    /// instead of the fused regions (docs/swgraph.md, "Which ops are candle ops").
    #[arg(long)]
    pub unfused: bool,
    /// Where the graph runs (as `nnpc run --device`; the emulator, the floor and the quantize
    /// kernel stay on the CPU).
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Shards of items each warm run goes in, side by side (1: the whole batch in one pass).
    /// Default: one per thread for graphs whose products' weights are at most 1 Mi elements,
    /// else 1. The outputs are the same bits either way.
    #[arg(long, value_name = "K", value_parser = super::at_least_one)]
    pub shards: Option<usize>,
    /// Elements of the quantize-kernel tensor.
    #[arg(long, value_name = "LEN", default_value_t = 4 << 20, hide = true, value_parser = super::at_least_one)]
    pub kernel_len: usize,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The targets of issue 6: (name, what is compared, target, higher is better).
const EMU_TARGET: f64 = 50.0;
const FLOOR_TARGET: f64 = 3.0;
const KERNEL_TARGET: f64 = 0.25;

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match args.firmware.load() {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let graph = match super::compile(&program, Roots::Outputs) {
        Ok(g) => g,
        Err(code) => return Ok(code),
    };
    let progress = Progress::new();
    let report = measure(&args, &program, &graph, &progress);
    progress.finish();
    let report = report?;
    if args.json {
        super::output::stdout(format!("{report}\n"))?;
    } else {
        super::output::stdout(table::table(&report))?;
    }
    Ok(if report["concordant"] == Value::Bool(false) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A spinner on stderr, drawn only when stderr is a terminal and without `--quiet`.
struct Progress(ProgressBar);

impl Progress {
    fn new() -> Progress {
        let pb = if std::io::stderr().is_terminal() && !super::output::quiet() {
            let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            pb.set_style(
                ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            pb.enable_steady_tick(Duration::from_millis(120));
            pb
        } else {
            ProgressBar::hidden()
        };
        Progress(pb)
    }
    fn phase(&self, msg: &str) {
        self.0.set_message(msg.to_string());
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// Every measurement, as the JSON report.
fn measure(
    args: &Args,
    program: &Program,
    graph: &SwGraph,
    progress: &Progress,
) -> miette::Result<Value> {
    let batch = args.batch;
    // The batch is held whole: refused before anything is allocated where it cannot be.
    let fix = format!(
        "`nnpc bench` holds the whole batch: bench a smaller one (vectors per second do not \
         grow past a few thousand items), or run it with `nnpc run --batch {batch}`, which \
         goes in chunks of bounded memory"
    );
    fits_in_memory(batch, io_bytes_per_item(program), fix).map_err(super::fail)?;
    progress.phase("software graph: first run");
    let mut data = HostData::random(program, batch, args.seed);
    let opts = ExecOptions {
        float_matmul: args.float_matmul,
        unfused: args.unfused,
        device: args.device.into(),
        batch_shards: args.shards,
        ..ExecOptions::default()
    };
    let mut session = Session::new(graph, &opts).map_err(super::fail)?;
    let t = Instant::now();
    let sw = session.run(&data).map_err(super::fail)?;
    let cold_s = t.elapsed().as_secs_f64();
    let memory = Memory::after_first_run(&mut session, &mut data).map_err(super::fail)?;
    let first = FirstRun {
        paths: sw.paths,
        gpu: session.gpu_name().map(str::to_string),
        cold_s,
        memory,
    };
    let rounds = timed_rounds(
        args,
        program,
        graph,
        (&mut session, &data),
        &sw.outputs,
        progress,
    )?;
    drop(sw);
    let kernel = kernel_race(args, program, progress)?;
    let peak_all_kib = vm_kib("VmHWM:");
    Ok(report(
        args,
        program,
        graph,
        (first, rounds),
        kernel,
        peak_all_kib,
    ))
}

/// What the software graph's first run did: its fast paths, device, time and memory.
struct FirstRun {
    paths: PathCounts,
    gpu: Option<String>,
    cold_s: f64,
    memory: Memory,
}

/// The process's memory after the first run, and the weights it ran with.
struct Memory {
    /// Elements of the host's weights (every `Init::Load` matrix and vector).
    weights: usize,
    /// Peak resident set (VmHWM) after the first run: what `nnpc run` needs.
    peak_kib: Option<u64>,
    /// Resident set (VmRSS) after the first run, the host's f32 weights still held.
    rss_kib: Option<u64>,
    /// Resident set once the host's weights are dropped, a warm run went without them and
    /// the allocator's free memory went back to the system: what the session keeps for its
    /// warm runs, with the batch's inputs and the process's code.
    session_kib: Option<u64>,
}

impl Memory {
    /// The memory after the first run over the host's weights, in bytes each.
    fn per_weight(&self) -> Value {
        let per = |kib: Option<u64>| kib.map(|k| (k * 1024) as f64 / self.weights.max(1) as f64);
        json!({
            "peak_after_first_run": per(self.peak_kib),
            "after_first_run": per(self.rss_kib),
            "session_alone": per(self.session_kib),
        })
    }

    /// Measure after the first run of `session` on `data`; then drop `data`'s weights (a
    /// session reads them in its first run only) and measure again after a warm run.
    fn after_first_run(
        session: &mut Session,
        data: &mut HostData,
    ) -> Result<Memory, nnp_runtime::exec::ExecError> {
        let weights = data.weights.values().map(|t| t.data.len()).sum();
        let (peak_kib, rss_kib) = (vm_kib("VmHWM:"), vm_kib("VmRSS:"));
        // A warm session reads no weights (`Graph.run` relies on it too): a run that needs
        // them fails here, loudly.
        drop(std::mem::take(&mut data.weights));
        drop(session.run(data)?);
        nnpc::memory::release_free_memory();
        let session_kib = vm_kib("VmRSS:");
        // The rounds' first run then finds its buffers faulted in, as every warm run.
        session.run(data)?;
        Ok(Memory {
            weights,
            peak_kib,
            rss_kib,
            session_kib,
        })
    }
}

/// Warm runs right after a round's first, at most ([`Rounds::back_to_back_s`]).
const BACK_TO_BACK: usize = 3;
/// A run longer than this is the only one back to back: its caches and threads are warm
/// within it.
const BACK_TO_BACK_LONG: Duration = Duration::from_millis(500);

/// What the timed rounds measured: median seconds of each, the emulator's, the peak.
struct Rounds {
    sw_s: f64,
    /// The graph's runs right after the rounds' first ones (median).
    back_to_back_s: f64,
    floor_s: f64,
    shards: usize,
    /// Products a warm run computed stacked with others of their weight stack.
    stacked: usize,
    floor_calls: usize,
    floor_macs: u64,
    /// The products alone on the integer kernel: median seconds, multiply-adds, on bytes.
    products: Option<(f64, u64, bool)>,
    peak: baseline::Peak,
    /// The f32 FMA peak, where the CPU has FMA: what the floor's matmul is a fraction of.
    fma: Option<baseline::FmaPeak>,
    emu: Option<EmuRuns>,
}

/// The emulator's runs in the rounds: its items, median seconds and runs, the graph's median
/// in the same rounds, and whether its outputs were the graph's bit for bit.
#[derive(Clone, Copy)]
struct EmuRuns {
    items: usize,
    secs: f64,
    runs: usize,
    graph_secs: f64,
    same: bool,
}

impl EmuRuns {
    /// The report's `emulator`, at `rows` vectors per item and `vps` vectors per second.
    fn json(&self, rows: usize, vps: f64) -> Value {
        json!({
            "batch": self.items,
            "vectors": self.items * rows,
            "runs": self.runs,
            "seconds": self.secs,
            "vectors_per_second": vps,
            // The graph's median in the rounds the emulator ran (its ratio's).
            "graph_seconds": self.graph_secs,
        })
    }
}

/// The timed rounds after the first run: in each, a warm run of the graph, the floor (the
/// same products as plain f32 matmuls), the products alone on the integer kernel, the
/// emulator (by its rule, [`baseline::emulator_runs_again`], on the first `--emu-batch` items
/// of the same data; item i does not depend on the batch size) and a peak probe, so that all
/// see the same machine load. `--reps` rounds, at least [`baseline::EMU_MIN_RUNS`] where the
/// emulator runs.
fn timed_rounds(
    args: &Args,
    program: &Program,
    graph: &SwGraph,
    (session, data): (&mut Session, &HostData),
    graph_outputs: &Outputs,
    progress: &Progress,
) -> miette::Result<Rounds> {
    let batch = args.batch;
    progress.phase("timed rounds: graph, floor, products, emulator, peak");
    let floor = Floor::new(graph, batch).map_err(super::fail)?;
    floor.run().map_err(super::fail)?;
    let products = IntProducts::new(graph, batch);
    if let Some(p) = &products {
        p.run();
    }
    let eb = args.emu_batch.unwrap_or(batch).min(batch);
    let edata = (!args.skip_emulator).then(|| HostData::random(program, eb, args.seed));
    let rounds = match edata {
        Some(_) => args.reps.max(baseline::EMU_MIN_RUNS),
        None => args.reps,
    };
    let (mut shards, mut same, mut peaks, mut fmas) = (1, true, Vec::new(), Vec::new());
    let mut stacked = 0;
    let session = std::cell::RefCell::new(session);
    let mut run_graph = || -> miette::Result<()> {
        let run = session.borrow_mut().run(data).map_err(super::fail)?;
        (shards, stacked) = (run.shards, run.paths.stacked_products);
        Ok(())
    };
    let mut again = Vec::new();
    let mut run_again = || -> miette::Result<()> {
        for _ in 0..BACK_TO_BACK {
            let t = Instant::now();
            session.borrow_mut().run(data).map_err(super::fail)?;
            again.push(t.elapsed().as_secs_f64());
            if t.elapsed() > BACK_TO_BACK_LONG {
                break;
            }
        }
        Ok(())
    };
    let mut run_floor = || floor.run().map_err(super::fail);
    let mut run_products = || -> miette::Result<()> {
        if let Some(p) = &products {
            p.run();
        }
        Ok(())
    };
    let mut run_emulator = || -> miette::Result<()> {
        if let Some(edata) = &edata {
            let e = emulator::emulate(program, edata, &EmuOptions::default());
            same &= same_bits(graph_outputs, &e.map_err(super::fail)?.outputs, eb);
        }
        Ok(())
    };
    let mut run_peak = || -> miette::Result<()> {
        peaks.push(baseline::int8_peak(1));
        fmas.extend(baseline::f32_fma_peak(1));
        Ok(())
    };
    let has_products = |_: &[Option<f64>]| products.is_some();
    // Each measurement's place in the rounds (the runs back to back time themselves).
    const GRAPH: usize = 0;
    const FLOOR: usize = 2;
    const PRODUCTS: usize = 3;
    const EMULATOR: usize = 4;
    let emulates = |past: &[Option<f64>]| edata.is_some() && baseline::emulator_runs_again(past);
    let times = baseline::interleave(
        rounds,
        &mut [
            Timed::every(&mut run_graph),
            Timed::every(&mut run_again),
            Timed::every(&mut run_floor),
            Timed {
                run: &mut run_products,
                when: &has_products,
            },
            Timed {
                run: &mut run_emulator,
                when: &emulates,
            },
            Timed::every(&mut run_peak),
        ],
    )?;
    let med = |k: usize| {
        let mut ran: Vec<f64> = times[k].iter().flatten().copied().collect();
        (!ran.is_empty()).then(|| baseline::median(&mut ran))
    };
    // The graph's runs in the rounds the emulator ran: its ratio is taken side by side.
    let mut paired: Vec<f64> = times[GRAPH]
        .iter()
        .zip(&times[EMULATOR])
        .filter_map(|(g, e)| e.and(*g))
        .collect();
    let emu = med(EMULATOR)
        .filter(|_| edata.is_some())
        .map(|secs| EmuRuns {
            items: eb,
            secs,
            runs: times[EMULATOR].iter().flatten().count(),
            graph_secs: baseline::median(&mut paired),
            same,
        });
    let best = peaks
        .iter()
        .copied()
        .max_by(|a, b| a.macs_per_second.total_cmp(&b.macs_per_second));
    Ok(Rounds {
        sw_s: med(GRAPH).unwrap_or(0.0),
        back_to_back_s: baseline::median(&mut again),
        floor_s: med(FLOOR).unwrap_or(0.0),
        shards,
        stacked,
        floor_calls: floor.calls(),
        floor_macs: floor.macs(),
        products: products
            .as_ref()
            .zip(med(PRODUCTS))
            .map(|(p, secs)| (secs, p.macs(), p.on_bytes())),
        peak: best.unwrap_or_else(|| baseline::int8_peak(1)),
        fma: fmas
            .into_iter()
            .max_by(|a, b| a.flops_per_second.total_cmp(&b.flops_per_second)),
        emu,
    })
}

/// The quantize kernel against a plain element-wise op: the kernel's format and times.
fn kernel_race(
    args: &Args,
    program: &Program,
    progress: &Progress,
) -> miette::Result<(Format, baseline::KernelTimes)> {
    let reps = args.reps;
    // 3. The quantize kernel against a plain element-wise op.
    progress.phase("quantize kernel");
    // The BFP kernel: the target's vector format when it is BFP, else bw-default's.
    let fmt = match program.target.numerics.mvm_vector {
        f @ Format::Bfp(_) => f,
        _ => nnp_grammar::Target::bw_default().numerics.mvm_vector,
    };
    let k = baseline::quantize_vs_elementwise(&fmt, program.native(), args.kernel_len, 3 * reps)
        .map_err(super::fail)?;
    Ok((fmt, k))
}

/// The ratios `nnpc bench` holds against its targets: the graph against the emulator (its
/// runs and vectors per second, in the same rounds), against the plain f32 floor, and the quantize kernel against an element-wise
/// op.
fn target_ratios(
    emu: Option<(EmuRuns, f64)>,
    vectors: usize,
    (sw_s, floor_s): (f64, f64),
    kernel_ratio: f64,
) -> Vec<Value> {
    let mut ratios = Vec::new();
    if let Some((e, emu_vps)) = emu {
        let paired_vps = vectors as f64 / e.graph_secs.max(1e-12);
        ratios.push(ratio(
            "software graph vs emulator (vectors/s)",
            paired_vps / emu_vps.max(1e-12),
            ">=",
            EMU_TARGET,
        ));
    }
    ratios.push(ratio(
        "software graph time / plain f32 matmuls",
        sw_s / floor_s.max(1e-12),
        "<=",
        FLOOR_TARGET,
    ));
    ratios.push(ratio(
        "quantize kernel / element-wise op (elements/s)",
        kernel_ratio,
        ">=",
        KERNEL_TARGET,
    ));
    ratios
}

/// The report of `nnpc bench` (JSON) on what was measured.
fn report(
    args: &Args,
    program: &Program,
    graph: &SwGraph,
    (first, rounds): (FirstRun, Rounds),
    (fmt, k): (Format, baseline::KernelTimes),
    peak_all_kib: Option<u64>,
) -> Value {
    let (batch, reps) = (args.batch, args.reps);
    let rows = input_rows(program);
    let vectors = batch.saturating_mul(rows);
    let FirstRun {
        paths,
        gpu,
        cold_s,
        memory,
    } = first;
    let Rounds {
        sw_s,
        back_to_back_s,
        floor_s,
        shards,
        stacked,
        floor_calls,
        floor_macs,
        products,
        peak,
        fma,
        emu,
    } = rounds;
    let sw_vps = vectors as f64 / sw_s.max(1e-12);
    let emu_vps = emu.map(|e| (e.items * rows) as f64 / e.secs.max(1e-12));
    let emu_json = emu.zip(emu_vps).map(|(e, vps)| e.json(rows, vps));
    let concordant = emu.map(|e| e.same);
    // Context without a target: how far the products alone, as plain f32 BLAS with no
    // quantization at all, are ahead of the emulator on this machine.
    let context: Vec<Value> = emu_vps
        .map(|emu_vps| {
            json!({
                "name": "plain f32 matmuls vs emulator (vectors/s)",
                "value": vectors as f64 / floor_s.max(1e-12) / emu_vps.max(1e-12),
            })
        })
        .into_iter()
        .collect();
    let kernel_ratio = k.elementwise_s / k.quantize_s.max(1e-12);
    let ratios = target_ratios(emu.zip(emu_vps), vectors, (sw_s, floor_s), kernel_ratio);
    let peak_rate = peak.macs_per_second.max(1e-12);
    let floor_flops = 2.0 * floor_macs as f64 / floor_s.max(1e-12);
    let graph_rate = floor_macs as f64 / sw_s.max(1e-12);
    let products_json = products.map(|p| products_json(p, peak_rate));
    json!({
        "file": program.source.name,
        "target": program.target.name,
        "native": program.native(),
        "batch": batch,
        "seed": args.seed,
        "reps": reps,
        "vectors_per_batch_item": rows,
        "machine": machine(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "software_graph": {
            // What the first run did, not what the flags suggest: data that does not fit
            // the integer kernel takes the float path product by product.
            "products": floor_calls,
            "int_products": paths.int_products,
            // Of those, the products on bytes (AVX-512 VNNI `vpdpbusd`).
            "byte_products": paths.byte_products,
            // Of those, the products on the GPU (`--device cuda`), and its name.
            "gpu_products": paths.gpu_products,
            "gpu": gpu,
            // Of those, the products whose fp8 or MX operands the kernel took in slices.
            "sliced_products": paths.sliced_products,
            // Float-path products on one f64 matmul with proven roundings.
            "bounded_products": paths.bounded_products,
            // Shards of items the warm runs went in (`--shards`).
            "shards": shards,
            // Products a warm run computed stacked with others of their weight stack (passes
            // of at most 4 items: docs/swgraph.md, "Stacked steps").
            "stacked_products": stacked,
            "nodes": graph.nodes.len(),
            "vectors": vectors,
            "first_run_seconds": cold_s,
            "seconds": sw_s,
            "vectors_per_second": sw_vps,
            // The runs right after each round's first: a caller's repeated runs.
            "back_to_back_seconds": back_to_back_s,
            "back_to_back_vectors_per_second": vectors as f64 / back_to_back_s.max(1e-12),
            // The products' multiply-adds per run (every weight of their stacks per item)
            // over the warm run's time, and that as a fraction of the int8 peak.
            "macs": floor_macs,
            "macs_per_second": graph_rate,
            "peak_fraction": graph_rate / peak_rate,
        },
        "products_alone": products_json,
        "peak": {
            "instruction": peak.kernel.name(),
            "threads": peak.threads,
            "int8_macs_per_second": peak.macs_per_second,
        },
        "emulator": emu_json,
        "floor": {
            // candle's own f32 matmul (its CPU gemm), not the machine's f32 peak.
            "what": "candle f32 matmul",
            "matmuls": floor_calls,
            "macs": floor_macs,
            "seconds": floor_s,
            "gflops": floor_flops / 1e9,
            // The machine's f32 FMA peak (registers only, every thread) and the fraction of
            // it the matmul reached.
            "fma_peak_gflops": fma.map(|f| f.flops_per_second / 1e9),
            "fma_instruction": fma.map(|f| f.instruction),
            "peak_fraction": fma.map(|f| floor_flops / f.flops_per_second.max(1e-12)),
        },
        "quantize": {
            "format": fmt.to_string(),
            "elements": k.len,
            "quantize_seconds": k.quantize_s,
            "elementwise_seconds": k.elementwise_s,
            "quantize_elements_per_second": k.len as f64 / k.quantize_s.max(1e-12),
            "elementwise_elements_per_second": k.len as f64 / k.elementwise_s.max(1e-12),
        },
        "peak_rss_kib": {
            "after_first_run": memory.peak_kib,
            "end": peak_all_kib,
        },
        "rss_kib": {
            "after_first_run": memory.rss_kib,
            "session_alone": memory.session_kib,
        },
        "weights": memory.weights,
        "bytes_per_weight": memory.per_weight(),
        "concordant": concordant,
        "ratios": ratios,
        "context": context,
    })
}

/// The products alone (median seconds, multiply-adds, on bytes), with their fraction of the
/// int8 peak `peak_rate`.
fn products_json((secs, macs, bytes): (f64, u64, bool), peak_rate: f64) -> Value {
    let rate = macs as f64 / secs.max(1e-12);
    json!({
        "seconds": secs,
        "macs": macs,
        "macs_per_second": rate,
        "peak_fraction": rate / peak_rate,
        "on_bytes": bytes,
    })
}

fn ratio(name: &str, value: f64, cmp: &str, target: f64) -> Value {
    let pass = if cmp == ">=" {
        value >= target
    } else {
        value <= target
    };
    json!({ "name": name, "value": value, "target": format!("{cmp} {target}"), "pass": pass })
}

/// Outputs of the first `items` batch items equal bit for bit (as the f32 the engines return).
fn same_bits(sw: &Outputs, emu: &Outputs, items: usize) -> bool {
    sw.len() == emu.len()
        && sw.iter().all(|(name, s)| {
            let Some(e) = emu.get(name) else {
                return false;
            };
            let per = e.len() / items.max(1);
            let n = per * items;
            s.data.len() >= n
                && e.data.len() == n
                && s.data[..n]
                    .iter()
                    .zip(&e.data)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
        })
}

/// A memory line of this process's /proc status (`VmHWM:` the peak resident set, `VmRSS:`
/// the resident set now), in KiB, where /proc has it.
fn vm_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The CPU model and thread count.
fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    json!({ "cpu": cpu, "threads": threads, "os": std::env::consts::OS })
}

#[cfg(test)]
mod tests;
