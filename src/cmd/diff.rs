//! `nnpc diff`: compare a hardware output dump (or trace) with the software graph, bit for bit.

use super::host_args::{ChunkArgs, DataArgs, LayoutArg};
use nnp_grammar::Program;
use nnp_lowering::swgraph::{self, Roots};
use nnp_runtime::diff::{DiffReport, diff_outputs};
use nnp_runtime::exec::{self, ExecOptions};
use nnp_runtime::host::{Outputs, ShapeDisplay};
use nnp_runtime::io;
use nnp_runtime::trace::{compare_traces, read_trace};
use std::path::PathBuf;
use std::process::ExitCode;

/// Run the firmware's software graph on the data the hardware saw and compare every output
/// with the hardware's dump: bit-exact count, ULP histogram, error statistics and the first
/// mismatches, each with its tile, lane and the `v_wr` line that wrote it. With `--trace`,
/// compare the per-`v_wr` traces too and name the first divergent instruction.
///
/// The data must be the hardware's: the same `--weights`/`--inputs` files, or (for a dump made
/// by `nnpc emulate` with random data) the same `--seed`; the batch is read from the dump.
/// Exit status: 0 concordant, 1 not concordant (or firmware errors), 2 unreadable or unusable
/// input.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc emulate samples/lstm.nnp --batch 64 -o hw.safetensors && nnpc diff samples/lstm.nnp --hardware hw.safetensors
  nnpc diff prog.nnp --hardware board_dump.safetensors --weights w.safetensors --inputs x.npy --json
  nnpc diff prog.nnp --hardware dump_tiles.safetensors --layout tiles --first 50
  nnpc emulate prog.nnp --trace hw.jsonl -o hw.safetensors && nnpc diff prog.nnp --hardware hw.safetensors --trace hw.jsonl")]
pub struct Args {
    /// The firmware file (.nnp).
    pub file: PathBuf,
    /// The hardware's outputs: `*.safetensors`, `*.npy` (one output) or a directory of .npy
    /// files, one tensor per `output` declaration under its declared name.
    #[arg(long, value_name = "DUMP")]
    pub hardware: PathBuf,
    /// Layout of the dump: logical shapes, or native tiles ([..., tiles, N]).
    #[arg(long, value_enum, default_value_t = LayoutArg::Logical)]
    pub layout: LayoutArg,
    /// A per-`v_wr` trace of the hardware run (JSON lines, the format of `nnpc emulate
    /// --trace`): compare it record by record and name the first divergent `v_wr`.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Target: a built-in name (`bw-default`) or a TOML target file. Overrides the file's
    /// `target` statement.
    #[arg(long, value_name = "NAME|FILE")]
    pub target: Option<String>,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub chunks: ChunkArgs,
    /// How many mismatching elements to list.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub first: usize,
    /// Print the report as JSON (schema `nnpc.diff/1`, docs/diff.md).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match super::load(&args.file, args.target.as_deref()) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let dump = io::read_tensors(&args.hardware).map_err(|e| miette::miette!("{e}"))?;
    let batch = dump_batch(&program, &dump, args.layout);
    let hardware = match args.layout {
        LayoutArg::Logical => dump,
        LayoutArg::Tiles => untile(&program, &dump, batch.unwrap_or(1))?,
    };
    let data = args
        .data
        .host_data(&program, batch)
        .map_err(|e| miette::miette!("{e}"))?;

    let roots = if args.trace.is_some() {
        Roots::OutputsAndWrites
    } else {
        Roots::Outputs
    };
    let graph = match super::lower(&program) {
        Ok(g) => swgraph::optimize(&g, roots),
        Err(code) => return Ok(code),
    };
    let opts = ExecOptions {
        keep_writes: args.trace.is_some(),
        ..ExecOptions::default()
    };
    let software = args.chunks.execute(&graph, &data, opts)?;
    let mut report = diff_outputs(&program, &hardware, &software.outputs, args.first)
        .map_err(|e| miette::miette!("`{}`: {e}", args.hardware.display()))?;
    if let Some(path) = &args.trace {
        let hw = read_trace(path).map_err(|e| miette::miette!("{e}"))?;
        let sw = exec::trace::records(&graph, &software, data.batch)
            .ok_or_else(|| miette::miette!("internal: the run kept no written values"))?;
        let cmp =
            compare_traces(&hw, &sw).map_err(|e| miette::miette!("`{}`: {e}", path.display()))?;
        report.trace = Some(cmp);
    }

    if args.json {
        let v = serde_json::to_string_pretty(&report).map_err(|e| miette::miette!("{e}"))?;
        println!("{v}");
    } else {
        print_report(&args, &program, &report, data.batch);
    }
    let trace_ok = report.trace.as_ref().is_none_or(|t| t.first.is_none());
    Ok(if report.concordant && trace_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The batch of a dump: the leading dimension of the first output, when it has more dimensions
/// than the declaration (logical) or its tile layout.
fn dump_batch(program: &Program, dump: &Outputs, layout: LayoutArg) -> Option<usize> {
    program.outputs().find_map(|d| {
        let t = dump.get(&d.name)?;
        let rank = match layout {
            LayoutArg::Logical => d.shape.len(),
            LayoutArg::Tiles => d.shape.len() + 1,
        };
        (t.shape.len() > rank).then(|| t.shape[0])
    })
}

/// The dump's outputs in logical layout, from native tiles.
fn untile(program: &Program, dump: &Outputs, batch: usize) -> miette::Result<Outputs> {
    let mut out = Outputs::new();
    for d in program.outputs() {
        let Some(t) = dump.get(&d.name) else {
            continue; // reported as missing by the comparison
        };
        let mut logical = vec![batch];
        logical.extend(&d.shape);
        let t = io::from_tiles(&d.name, t, &logical, program.native(), false)
            .map_err(|e| miette::miette!("{e}"))?;
        out.insert(d.name.clone(), t);
    }
    Ok(out)
}

/// Bucket labels of the ULP histogram (see `DiffReport::ulp_histogram`).
fn bucket_label(k: usize, buckets: usize) -> String {
    match k {
        0 => "0".into(),
        1 => "1".into(),
        2 => "2".into(),
        k if k + 2 == buckets => format!(">{}", 1u64 << (k - 2)),
        k if k + 1 == buckets => "NaN vs number".into(),
        k => format!("{}-{}", (1u64 << (k - 2)) + 1, 1u64 << (k - 1)),
    }
}

fn print_report(args: &Args, program: &Program, report: &DiffReport, batch: usize) {
    println!(
        "{}: hardware `{}` vs software graph on `{}` (N = {}), batch {batch}",
        program.source.name,
        args.hardware.display(),
        program.target.name,
        program.native()
    );
    for o in &report.outputs {
        println!(
            "  output {} {}: {} of {} bit-exact, max {} ULP, max abs err {:.3e}, QSNR {} dB",
            o.name,
            ShapeDisplay(&o.shape),
            o.bit_exact,
            o.elements,
            o.max_ulps,
            o.max_abs_err,
            if o.qsnr_db.is_finite() {
                format!("{:.1}", o.qsnr_db)
            } else {
                "inf".into()
            }
        );
    }
    if !report.concordant {
        let buckets = report.ulp_histogram.len();
        let hist: Vec<String> = report
            .ulp_histogram
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(k, c)| format!("{}: {c}", bucket_label(k, buckets)))
            .collect();
        println!("  ULP histogram: {}", hist.join(", "));
        println!("  first {} mismatches:", report.mismatches.len());
        for m in &report.mismatches {
            let idx: Vec<String> = m.index.iter().map(ToString::to_string).collect();
            let ulps = m.ulps.map_or("NaN".into(), |u| format!("{u} ULP"));
            let at = match (m.line, &m.source) {
                (Some(l), Some(s)) => format!("line {l}: {}", s.trim()),
                _ => "writer unknown".into(),
            };
            println!(
                "    {}[{}] tile {} lane {}: hardware {} (0x{:04X}) software {} (0x{:04X}), {ulps}; {at}",
                m.output,
                idx.join(", "),
                m.tile,
                m.lane,
                m.hardware,
                m.hardware_bits,
                m.software,
                m.software_bits
            );
        }
    }
    if let Some(t) = &report.trace {
        match &t.first {
            None => println!(
                "  trace: {} of {} v_wr records identical",
                t.identical, t.records
            ),
            Some(f) => {
                let text = program
                    .source
                    .text
                    .lines()
                    .nth(f.line.saturating_sub(1))
                    .unwrap_or("")
                    .trim();
                println!(
                    "  trace: {} of {} v_wr records identical; first divergent v_wr: line {}: {text}",
                    t.identical, t.records, f.line
                );
                println!(
                    "    chain {} iteration {} -> {}[{}], batch item {}: {} lanes differ, lane {} hardware 0x{:04X} software 0x{:04X}",
                    f.chain,
                    f.iteration,
                    f.dst,
                    f.addr,
                    f.item,
                    f.lanes_differing,
                    f.first_lane,
                    f.hardware_bits,
                    f.software_bits
                );
            }
        }
    }
    println!(
        "bit-exact: {} of {}{}",
        report.bit_exact,
        report.elements,
        if report.concordant {
            " (concordant)"
        } else {
            " (NOT concordant)"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::bucket_label;

    #[test]
    fn bucket_labels_follow_the_histogram_layout() {
        // 19 buckets: 0, 1, 2, 3-4, 5-8, ..., 2^14+1..2^15, >2^15, NaN.
        assert_eq!(bucket_label(3, 19), "3-4");
        assert_eq!(bucket_label(4, 19), "5-8");
        assert_eq!(bucket_label(16, 19), "16385-32768");
        assert_eq!(bucket_label(17, 19), ">32768");
        assert_eq!(bucket_label(18, 19), "NaN vs number");
    }
}
