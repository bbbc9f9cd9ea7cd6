//! `nnpc bench`: throughput of the software graph measured against its baselines, in one run.

use super::host_args::input_rows;
use super::run::DeviceArg;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nnp_grammar::Program;
use nnp_lowering::swgraph::{Roots, SwGraph};
use nnp_numerics::Format;
use nnp_runtime::emulator::{self, EmuOptions};
use nnp_runtime::exec::baseline::{self, Floor};
use nnp_runtime::exec::{ExecOptions, PathCounts, Session};
use nnp_runtime::host::{HostData, Outputs};
use nnp_runtime::stream::{fits_in_memory, io_bytes_per_item};
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The emulator runs again, up to `--reps` times, while its runs add up to less than this
/// many seconds (the report gives their median).
const EMU_REPEAT_S: f64 = 1.0;

/// Measure a firmware file's software graph against the emulator and plain f32, in one run.
///
/// Its baselines, each measured in the same run:
///
/// - software graph: vectors/s at --batch (median of --reps runs after a first run that also
///   prepares the weights; that first run is reported as the cold time);
/// - emulator: vectors/s on the same data (or its first --emu-batch items; the median of up to
///   --reps runs while they take under a second in all, else one run), and whether its
///   outputs equal the graph's bit for bit;
/// - floor: the graph's products as plain f32 candle matmuls (no quantization) at --batch,
///   timed alternately with the graph's runs (both see the same machine load);
/// - quantize kernel: the graph's BFP vector quantizer (the target's, or bw-default's when the
///   target's vector format is not BFP) against a plain element-wise candle op
///   (`x * 1.5 + 0.25`) over the same 4M-element tensor;
/// - peak memory (VmHWM) after the first run (what `nnpc run` needs) and at the end;
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
        super::output::stdout(table(&report))?;
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
    let (runs, graph_outputs) = graph_runs(args, program, graph, progress)?;
    let emu = if args.skip_emulator {
        None
    } else {
        Some(emulator_runs(args, program, &graph_outputs, progress)?)
    };
    drop(graph_outputs);
    let kernel = kernel_race(args, program, progress)?;
    let peak_all_kib = vm_hwm_kib();
    Ok(report(
        args,
        program,
        graph,
        runs,
        emu,
        kernel,
        peak_all_kib,
    ))
}

/// What the software graph's runs measured: the first run's fast paths, device, time and
/// peak memory; the warm runs' and the floor's median times.
struct GraphRuns {
    paths: PathCounts,
    gpu: Option<String>,
    cold_s: f64,
    peak_run_kib: Option<u64>,
    sw_s: f64,
    floor_s: f64,
    shards: usize,
    floor_calls: usize,
    floor_macs: u64,
}

/// The software graph's first run (whose outputs are returned, for the emulator's to be
/// compared with), then its warm runs and the floor's, timed alternately.
fn graph_runs(
    args: &Args,
    program: &Program,
    graph: &SwGraph,
    progress: &Progress,
) -> miette::Result<(GraphRuns, Outputs)> {
    let (batch, reps) = (args.batch, args.reps);
    // 1. The software graph: first run (what `nnpc run` does, weights prepared on the way),
    //    then warm runs of the same session.
    progress.phase("software graph: first run");
    let data = HostData::random(program, batch, args.seed);
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
    let gpu = session.gpu_name().map(str::to_string);
    let cold_s = t.elapsed().as_secs_f64();
    let peak_run_kib = vm_hwm_kib();
    // Warm graph runs and the floor (the same products as plain f32 matmuls) alternate, so
    // both see the same machine load; medians of each.
    progress.phase("software graph and floor: timed runs");
    let floor = Floor::new(graph, batch).map_err(super::fail)?;
    floor.run().map_err(super::fail)?;
    let mut shards = 1;
    let (sw_s, floor_s) = baseline::alternate(
        reps,
        || {
            shards = session.run(&data).map_err(super::fail)?.shards;
            Ok(())
        },
        || floor.run().map_err(super::fail),
    )?;
    Ok((
        GraphRuns {
            paths: sw.paths,
            gpu,
            cold_s,
            peak_run_kib,
            sw_s,
            floor_s,
            shards,
            floor_calls: floor.calls(),
            floor_macs: floor.macs(),
        },
        sw.outputs,
    ))
}

/// The emulator on the first `--emu-batch` items of the same data (item i does not depend on
/// the batch size): the items, the median seconds, the runs, and whether its outputs are
/// `graph_outputs`' bit for bit.
fn emulator_runs(
    args: &Args,
    program: &Program,
    graph_outputs: &Outputs,
    progress: &Progress,
) -> miette::Result<(usize, f64, usize, bool)> {
    let (batch, reps) = (args.batch, args.reps);
    let eb = args.emu_batch.unwrap_or(batch).min(batch);
    progress.phase(&format!("emulator: {eb} items"));
    let edata = HostData::random(program, eb, args.seed);
    // A program of milliseconds moves by up to 2x from one emulator run to the next on a
    // shared machine; one run of a long one takes seconds already.
    let mut same = true;
    let mut times = repeat_while_short(reps, EMU_REPEAT_S, || {
        let t = Instant::now();
        let e = emulator::emulate(program, &edata, &EmuOptions::default());
        let e = e.map_err(super::fail)?;
        let secs = t.elapsed().as_secs_f64();
        same &= same_bits(graph_outputs, &e.outputs, eb);
        Ok::<f64, miette::Report>(secs)
    })?;
    let runs = times.len();
    Ok((eb, baseline::median(&mut times), runs, same))
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

/// The report of `nnpc bench` (JSON) on what was measured.
fn report(
    args: &Args,
    program: &Program,
    graph: &SwGraph,
    runs: GraphRuns,
    emu: Option<(usize, f64, usize, bool)>,
    (fmt, k): (Format, baseline::KernelTimes),
    peak_all_kib: Option<u64>,
) -> Value {
    let (batch, reps) = (args.batch, args.reps);
    let rows = input_rows(program);
    let vectors = batch.saturating_mul(rows);
    let GraphRuns {
        paths,
        gpu,
        cold_s,
        peak_run_kib,
        sw_s,
        floor_s,
        shards,
        floor_calls,
        floor_macs,
    } = runs;
    let sw_vps = vectors as f64 / sw_s.max(1e-12);
    let emu_vps = emu.map(|(eb, secs, ..)| (eb * rows) as f64 / secs.max(1e-12));
    let emu_json = emu.zip(emu_vps).map(|((eb, secs, runs, _), vps)| {
        json!({
            "batch": eb,
            "vectors": eb * rows,
            "runs": runs,
            "seconds": secs,
            "vectors_per_second": vps,
        })
    });
    let concordant = emu.map(|(.., same)| same);
    let mut ratios = Vec::new();
    if let Some(emu_vps) = emu_vps {
        ratios.push(ratio(
            "software graph vs emulator (vectors/s)",
            sw_vps / emu_vps.max(1e-12),
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
    ratios.push(ratio(
        "quantize kernel / element-wise op (elements/s)",
        kernel_ratio,
        ">=",
        KERNEL_TARGET,
    ));
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
            "nodes": graph.nodes.len(),
            "vectors": vectors,
            "first_run_seconds": cold_s,
            "seconds": sw_s,
            "vectors_per_second": sw_vps,
        },
        "emulator": emu_json,
        "floor": {
            "matmuls": floor_calls,
            "macs": floor_macs,
            "seconds": floor_s,
            "gflops": 2.0 * floor_macs as f64 / floor_s.max(1e-12) / 1e9,
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
            "after_first_run": peak_run_kib,
            "end": peak_all_kib,
        },
        "concordant": concordant,
        "ratios": ratios,
        "context": context,
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

/// The times of `run` (each returns its own, in seconds): once, then again up to `reps` runs in
/// all while they add up to less than `budget_s`.
fn repeat_while_short<E>(
    reps: usize,
    budget_s: f64,
    mut run: impl FnMut() -> Result<f64, E>,
) -> Result<Vec<f64>, E> {
    let mut times = vec![run()?];
    while times.len() < reps && times.iter().sum::<f64>() < budget_s {
        times.push(run()?);
    }
    Ok(times)
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

/// Peak resident set size of this process (VmHWM, KiB), where /proc has it.
fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
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

/// The report as a table.
fn table(r: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    table_header(&mut s, r);
    s.push('\n');
    table_times(&mut s, r);
    s.push('\n');
    let mib = |v: &Value| match v.as_u64() {
        Some(k) => format!("{:.1} MiB", k as f64 / 1024.0),
        None => "n/a".into(),
    };
    let _ = writeln!(
        s,
        "peak RSS (VmHWM): {} after the first run (= `nnpc run`), {} at the end",
        mib(&r["peak_rss_kib"]["after_first_run"]),
        mib(&r["peak_rss_kib"]["end"])
    );
    let concordance = match r["concordant"].as_bool() {
        Some(true) => "outputs of graph and emulator bit-identical",
        Some(false) => "OUTPUTS DIFFER between graph and emulator",
        None => "not checked (--skip-emulator)",
    };
    let _ = writeln!(s, "concordance: {concordance}");
    s.push('\n');
    let _ = writeln!(
        s,
        "{:<48} {:>10} {:>8} {:>6}",
        "ratio", "value", "target", ""
    );
    for x in r["ratios"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "{:<48} {:>10.2} {:>8} {:>6}",
            x["name"].as_str().unwrap_or("?"),
            f64_of(&x["value"]),
            x["target"].as_str().unwrap_or("?"),
            if x["pass"] == Value::Bool(true) {
                "PASS"
            } else {
                "MISS"
            }
        );
    }
    for x in r["context"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "{:<48} {:>10.2} {:>15}",
            x["name"].as_str().unwrap_or("?"),
            f64_of(&x["value"]),
            "(context)"
        );
    }
    s
}

/// A number of the report (NaN where there is none).
fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// The table's first lines: what was measured, on what machine, and how the products ran.
fn table_header(s: &mut String, r: &Value) {
    use std::fmt::Write as _;
    let counted = |v: &Value, noun: &str| match v.as_u64() {
        Some(n) => super::output::count(n as usize, noun),
        None => format!("{v} {noun}s"),
    };
    let sw = &r["software_graph"];
    let _ = writeln!(
        s,
        "{}: `{}` (N = {}), batch {}, {} per item, median of {}",
        r["file"].as_str().unwrap_or("?"),
        r["target"].as_str().unwrap_or("?"),
        r["native"],
        r["batch"],
        counted(&r["vectors_per_batch_item"], "vector"),
        counted(&r["reps"], "run")
    );
    let _ = writeln!(
        s,
        "machine: {}, {} threads",
        r["machine"]["cpu"].as_str().unwrap_or("?"),
        r["machine"]["threads"]
    );
    let _ = match sw["gpu"].as_str() {
        Some(gpu) => writeln!(
            s,
            "products: {} of {} on the integer kernel, {} of them on the GPU ({gpu}), the rest \
             on the float path",
            sw["int_products"], sw["products"], sw["gpu_products"]
        ),
        None => writeln!(
            s,
            "products: {} of {} on the integer kernel ({} of them on bytes with AVX-512 VNNI \
             vpdpbusd, the others AVX2 vpmaddwd; {} on integer slices), the rest on the float \
             path ({} on its bounded f64 matmul)",
            sw["int_products"],
            sw["products"],
            sw["byte_products"],
            sw["sliced_products"],
            sw["bounded_products"]
        ),
    };
    if sw["shards"].as_u64().is_some_and(|k| k > 1) {
        let _ = writeln!(
            s,
            "warm runs: {} shards of items side by side (`--shards 1`: the whole batch in one \
             pass)",
            sw["shards"]
        );
    }
}

/// The table's measurements: seconds and rate of each.
fn table_times(s: &mut String, r: &Value) {
    use std::fmt::Write as _;
    let sw = &r["software_graph"];
    let _ = writeln!(s, "{:<44} {:>12} {:>16}", "measurement", "seconds", "rate");
    let row = |s: &mut String, name: &str, secs: f64, rate: String| {
        let _ = writeln!(s, "{name:<44} {secs:>12.4} {rate:>16}");
    };
    row(
        s,
        "software graph (first run, weights prepared)",
        f64_of(&sw["first_run_seconds"]),
        String::new(),
    );
    row(
        s,
        "software graph",
        f64_of(&sw["seconds"]),
        format!("{:.1} vec/s", f64_of(&sw["vectors_per_second"])),
    );
    let e = &r["emulator"];
    if !e.is_null() {
        let runs = match e["runs"].as_u64() {
            Some(k) if k > 1 => format!("median of {k} runs"),
            _ => "1 run".to_string(),
        };
        row(
            s,
            &format!("emulator ({} items, {runs})", e["batch"]),
            f64_of(&e["seconds"]),
            format!("{:.2} vec/s", f64_of(&e["vectors_per_second"])),
        );
    }
    let fl = &r["floor"];
    row(
        s,
        &format!("plain f32 matmuls ({} calls)", fl["matmuls"]),
        f64_of(&fl["seconds"]),
        format!("{:.1} GFLOP/s", f64_of(&fl["gflops"])),
    );
    let q = &r["quantize"];
    row(
        s,
        &format!("quantize kernel ({} elements)", q["elements"]),
        f64_of(&q["quantize_seconds"]),
        format!(
            "{:.0} M/s",
            f64_of(&q["quantize_elements_per_second"]) / 1e6
        ),
    );
    row(
        s,
        "element-wise x * 1.5 + 0.25 (same tensor)",
        f64_of(&q["elementwise_seconds"]),
        format!(
            "{:.0} M/s",
            f64_of(&q["elementwise_elements_per_second"]) / 1e6
        ),
    );
    let _ = writeln!(
        s,
        "(quantize kernel: the graph's BFP vector quantizer, {})",
        q["format"].as_str().unwrap_or("?")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench runs end to end on a small sample in debug: every field is there and the
    /// graph and the emulator agree bit for bit.
    #[test]
    fn bench_reports_every_field_on_a_small_sample() {
        let args = Args {
            firmware: crate::cmd::Firmware {
                file: std::path::PathBuf::from(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/samples/mlp2_relu.nnp"
                )),
                target: None,
            },
            batch: 2,
            seed: 1,
            reps: 1,
            emu_batch: None,
            skip_emulator: false,
            float_matmul: false,
            unfused: false,
            device: DeviceArg::Cpu,
            shards: None,
            kernel_len: 1 << 14,
            json: true,
        };
        let program = nnpc::load_program(&args.firmware.file, None).expect("sample checks");
        let graph = nnp_lowering::swgraph::compile(&program, Roots::Outputs).expect("lowers");
        let r =
            measure(&args, &program, &graph, &Progress(ProgressBar::hidden())).expect("bench runs");
        assert_eq!(r["concordant"], Value::Bool(true));
        assert_eq!(r["batch"], 2);
        // mlp2_relu pushes T = 4 input rows per item.
        assert_eq!(r["software_graph"]["vectors"], 8);
        assert_eq!(r["emulator"]["batch"], 2);
        assert_eq!(r["emulator"]["runs"], 1);
        // Two layers of T = 4 iterations each: 8 products, on the integer kernel where the
        // CPU has AVX2 (mlp2_relu is BFP 8 on bw-default).
        assert_eq!(r["floor"]["matmuls"], 8);
        assert_eq!(r["software_graph"]["products"], 8);
        let int = if nnp_runtime::exec::intdot::simd() {
            8
        } else {
            0
        };
        assert_eq!(r["software_graph"]["int_products"], int);
        // And on bytes where the CPU has AVX-512 VNNI (BFP 8 mantissas fit a byte).
        let bytes = if nnp_runtime::exec::intdot::Kernel::best().is_vnni() {
            8
        } else {
            0
        };
        assert_eq!(r["software_graph"]["byte_products"], bytes);
        assert!(
            r["software_graph"]["vectors_per_second"]
                .as_f64()
                .unwrap_or(0.0)
                > 0.0
        );
        assert!(r["quantize"]["quantize_seconds"].as_f64().is_some());
        let names: Vec<&str> = r["ratios"]
            .as_array()
            .expect("ratios")
            .iter()
            .filter_map(|x| x["name"].as_str())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        for x in r["ratios"].as_array().into_iter().flatten() {
            assert!(x["pass"].is_boolean() && x["value"].is_number());
        }
        // The context: the floor's rate over the emulator's, which is the graph's speed-up
        // times how much faster than the graph the floor ran.
        let v = |x: &Value| x["value"].as_f64().expect("a number");
        let context = r["context"].as_array().expect("context");
        assert_eq!(context.len(), 1);
        let (vs_emu, vs_floor) = (v(&r["ratios"][0]), v(&r["ratios"][1]));
        let floor_vs_emu = v(&context[0]);
        assert!(floor_vs_emu > 0.0);
        assert!((floor_vs_emu - vs_emu * vs_floor).abs() <= 1e-9 * floor_vs_emu);
    }

    /// The emulator's repetitions, counted by hand from the runs' times.
    #[test]
    fn the_emulator_repeats_only_while_its_runs_are_short() {
        let runs = |times: &[f64], reps: usize| {
            let mut next = times.iter().copied();
            repeat_while_short(reps, 1.0, || next.next().ok_or(())).map(|t| t.len())
        };
        // 0.3 s each: after 3 runs 0.9 s < 1, so a 4th; then 1.2 s, stop.
        assert_eq!(runs(&[0.3; 10], 5), Ok(4));
        // 0.5 + 0.5 is the budget exactly: no third run.
        assert_eq!(runs(&[0.5; 10], 5), Ok(2));
        // Short runs stop at --reps.
        assert_eq!(runs(&[0.01; 10], 5), Ok(5));
        // One long run is all.
        assert_eq!(runs(&[2.0; 10], 5), Ok(1));
        // --reps 1: one run however short.
        assert_eq!(runs(&[0.01; 10], 1), Ok(1));
        // A failing run ends it with the error.
        assert_eq!(runs(&[0.01; 2], 5), Err(()));
    }
}
