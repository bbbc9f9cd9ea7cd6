//! One differential step: check, emulate, run the software graph, compare bit patterns.

use super::{DataConfig, host_data, minimize};
use nnp_runtime::diff::DiffReport;
use nnp_runtime::exec::PathCounts;
use nnp_runtime::trace::TraceDivergence;

/// What one program did under both engines.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Both engines agree on every bit of every output.
    Concordant {
        /// Output elements compared (over the batch).
        elements: usize,
        /// Lanes of `v_wr` values compared (over the trace and the batch).
        written: usize,
        /// The paths the outputs' run took.
        paths: PathCounts,
    },
    /// Both engines stopped at the same NaN or infinity that the target forbids
    /// (`nonfinite = "error"`), with this error: every run of the graph (first and warm, traced
    /// and not) said what the emulator said.
    SameError(String),
    /// The target or the program was rejected (a generator bug when it came from
    /// [`generate`](super::generate)).
    Invalid(String),
    /// The emulator failed (error or panic) on a valid program.
    EmulatorError(String),
    /// Lowering or executing the software graph failed (error or panic) on a valid program.
    GraphError(String),
    /// The engines disagree on an output: `nnpc diff`'s report, the emulator as the hardware
    /// (its first mismatch is the first differing element).
    Mismatch(Box<DiffReport>),
    /// The engines disagree on a `v_wr` (emulator trace vs the graph's write records): the
    /// first divergent write in execution order.
    TraceMismatch(TraceDivergence),
}

impl Outcome {
    /// A short name of the variant: minimizing keeps it unchanged.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Concordant { .. } => "concordant",
            Outcome::SameError(_) => "same error",
            Outcome::Invalid(_) => "invalid",
            Outcome::EmulatorError(_) => "emulator error",
            Outcome::GraphError(_) => "graph error",
            Outcome::Mismatch(_) => "mismatch",
            Outcome::TraceMismatch(_) => "trace mismatch",
        }
    }
    pub fn is_failure(&self) -> bool {
        !matches!(self, Outcome::Concordant { .. } | Outcome::SameError(_))
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Concordant {
                elements,
                written,
                paths,
            } => write!(
                f,
                "concordant ({elements} output elements, {written} written lanes, {paths})"
            ),
            Outcome::Invalid(m) => write!(f, "invalid program: {m}"),
            Outcome::SameError(m) => write!(f, "both engines stopped: {m}"),
            Outcome::EmulatorError(m) => write!(f, "emulator failed: {m}"),
            Outcome::GraphError(m) => write!(f, "software graph failed: {m}"),
            Outcome::Mismatch(r) => {
                write!(
                    f,
                    "mismatch in {} of {} elements",
                    r.elements - r.bit_exact,
                    r.elements
                )?;
                if let Some(m) = r.mismatches.first() {
                    write!(
                        f,
                        "; first: output `{}` index {:?} (batch item first): emulator {:e} \
                         (bits {:#06x}), software graph {:e} (bits {:#06x})",
                        m.output, m.index, m.hardware, m.hardware_bits, m.software, m.software_bits
                    )?;
                }
                Ok(())
            }
            Outcome::TraceMismatch(t) => write!(
                f,
                "first divergent write: chain {} iteration {} `v_wr {}` (register/push {}, line \
                 {}), batch item {} lane {}: emulator bits {:#06x}, software graph bits {:#06x}",
                t.chain,
                t.iteration,
                t.dst,
                t.addr,
                t.line,
                t.item,
                t.first_lane,
                t.hardware_bits,
                t.software_bits
            ),
        }
    }
}

fn panic_text(e: Box<dyn std::any::Any + Send>) -> String {
    let msg = e
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("panicked: {msg}")
}

/// The options of the outputs' run: `NNPC_DIFF_DEVICE=cuda` runs the graph on the GPU (a
/// build with the `cuda` feature), anything else or nothing on the CPU. Odd seeds evaluate
/// in the products-first order (another order of the same graph: the same bits).
fn run_options(data_seed: u64) -> nnp_runtime::exec::ExecOptions {
    use nnp_runtime::exec::{DeviceKind, ExecOptions};
    let cuda = std::env::var("NNPC_DIFF_DEVICE").is_ok_and(|d| d == "cuda");
    ExecOptions {
        device: if cuda {
            DeviceKind::Cuda
        } else {
            DeviceKind::Cpu
        },
        products_first: data_seed % 2 == 1,
        ..ExecOptions::default()
    }
}

/// The program `source` checked for the target in `target_toml`, or why it is invalid.
fn checked_program(source: &str, target_toml: &str) -> Result<nnp_grammar::Program, Outcome> {
    use nnp_grammar::{SourceFile, Target, check};
    use std::sync::Arc;
    let target = match Target::from_toml(target_toml, "gen.toml") {
        Ok(t) => t,
        Err(e) => return Err(Outcome::Invalid(format!("target: {e}"))),
    };
    let src = Arc::new(SourceFile::new("gen.nnp", source));
    match check(src.clone(), Some(target)) {
        Ok(out) => Ok(out.program),
        Err(diags) => {
            let d = diags.iter().find(|d| d.is_error()).or(diags.first());
            let text = d.map_or("rejected".to_string(), |d| {
                format!(
                    "{} (line {}: `{}`)",
                    d.message,
                    src.line_of(d.span().start),
                    src.line_text(d.span().start)
                )
            });
            Err(Outcome::Invalid(text))
        }
    }
}

/// Check `source` for the target in `target_toml`, build [`host_data`] (`batch` input sets from
/// `data_seed`), run the emulator (with its trace) and the software graph, and compare storage
/// bit patterns ([`nnp_runtime::host::storage_bits`]: every NaN is the canonical NaN): first
/// every `v_wr` (the emulator's trace against the graph's write records, so writes no output
/// reads are checked too), then every output element of the graph pruned to its outputs, as
/// `nnp_runtime::exec::run_program` runs it (the `nnpc run` path; through a JSON round trip of
/// the graph when `json` is set). Each graph runs twice in one session, the first run and a warm
/// run in 2 shards of items, and both are compared. Panics in either engine are caught and
/// reported as that engine's failure.
pub fn run_differential(
    source: &str,
    target_toml: &str,
    data_seed: u64,
    batch: usize,
    data_cfg: &DataConfig,
    json: bool,
) -> Outcome {
    use nnp_lowering::swgraph::{Roots, SwGraph, compile};
    use nnp_runtime::emulator::{EmuError, EmuOptions, emulate};
    use nnp_runtime::exec::{ExecOptions, Execution, Session};
    use std::panic::{AssertUnwindSafe, catch_unwind};

    let program = match checked_program(source, target_toml) {
        Ok(p) => p,
        Err(out) => return out,
    };
    let data = host_data(&program, batch, data_seed, data_cfg);
    let emu_opts = EmuOptions {
        trace: true,
        ..EmuOptions::default()
    };
    // A NaN or infinity the target forbids stops the emulator: the graph must stop with the
    // same error.
    let emu = match catch_unwind(AssertUnwindSafe(|| emulate(&program, &data, &emu_opts))) {
        Ok(Ok(e)) => Ok(e),
        Ok(Err(e @ EmuError::NonFinite { .. })) => Err(e.to_string()),
        Ok(Err(e)) => return Outcome::EmulatorError(e.to_string()),
        Err(p) => return Outcome::EmulatorError(panic_text(p)),
    };
    // The graph twice: with every write kept (traces) on the float BLAS path of products, and
    // as `nnpc run` runs it (outputs only, pruned; the integer kernel where the CPU has AVX2,
    // or the whole graph on the GPU with `NNPC_DIFF_DEVICE=cuda`), or through its JSON form. Each in a session
    // that runs it twice: the first run (the whole batch), then a warm run in 2 shards of
    // items (on the CPU). The traced session goes in chunks of at most 2 items (its first
    // chunk computes the constants; its warm chunks go in shards).
    type Twice = [Result<Execution, nnp_runtime::exec::ExecError>; 2];
    let twice = |g: &SwGraph, opts: ExecOptions| -> Result<Twice, String> {
        let opts = ExecOptions {
            batch_shards: Some(2),
            ..opts
        };
        let mut session = Session::new(g, &opts).map_err(|e| e.to_string())?;
        let first = session.run(&data);
        Ok([first, session.run(&data)])
    };
    let sw = catch_unwind(AssertUnwindSafe(|| -> Result<_, String> {
        let g = compile(&program, Roots::OutputsAndWrites).map_err(|e| e.to_string())?;
        let keep = ExecOptions {
            keep_writes: true,
            float_matmul: true,
            chunk_items: Some(2),
            ..ExecOptions::default()
        };
        let traced = twice(&g, keep)?;
        let plain = if json {
            let g =
                SwGraph::from_json(&g.to_json()).map_err(|e| format!("JSON round trip: {e}"))?;
            twice(&g, run_options(data_seed))?
        } else {
            let g = compile(&program, Roots::Outputs).map_err(|e| e.to_string())?;
            twice(&g, run_options(data_seed))?
        };
        Ok((g, traced, plain))
    }));
    let (graph, traced, plain) = match sw {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return Outcome::GraphError(e),
        Err(p) => return Outcome::GraphError(panic_text(p)),
    };
    // Every run stops where the emulator stopped, or none does.
    let emu = match emu {
        Ok(emu) => emu,
        Err(emu) => {
            for run in traced.iter().chain(&plain) {
                let graph = match run {
                    Err(e) if e.to_string() == emu => continue,
                    Err(e) => e.to_string(),
                    Ok(_) => "ran".to_string(),
                };
                let message = format!("the emulator stopped ({emu}); the graph: {graph}");
                return Outcome::GraphError(message);
            }
            return Outcome::SameError(emu);
        }
    };
    let runs = |[a, b]: Twice| match (a, b) {
        (Ok(a), Ok(b)) => Ok([a, b]),
        (Err(e), _) | (_, Err(e)) => Err(Outcome::GraphError(e.to_string())),
    };
    let (traced, plain) = match (runs(traced), runs(plain)) {
        (Ok(traced), Ok(plain)) => (traced, plain),
        (Err(out), _) | (_, Err(out)) => return out,
    };
    let trace = emu.trace.unwrap_or_default();
    let mut lanes = 0;
    for traced in &traced {
        lanes = match compare_traces(&graph, traced, &trace, data.batch) {
            Ok(lanes) => lanes,
            Err(out) => return out,
        };
    }
    let mut elements = 0;
    for plain in &plain {
        elements = match compare_outputs(&program, &emu.outputs, &plain.outputs) {
            Outcome::Concordant { elements, .. } => elements,
            other => return other,
        };
        // The output tensors themselves, bit for bit: both engines write the canonical NaN
        // (the comparison above counts any NaN equal to any NaN, as for a board's dump).
        for (name, hw) in &emu.outputs {
            let sw = plain.outputs.get(name).map_or(&[][..], |t| &t.data[..]);
            let same = |(a, b): (&f32, &f32)| a.to_bits() == b.to_bits();
            if let Some(i) = hw.data.iter().zip(sw).position(|p| !same(p)) {
                return Outcome::GraphError(format!(
                    "output `{name}` element {i}: the emulator wrote {:#010x}, the graph {:#010x}",
                    hw.data[i].to_bits(),
                    sw[i].to_bits()
                ));
            }
        }
    }
    // The first run's paths, and the products the warm run stacked (it alone takes the
    // stacked steps).
    let paths = PathCounts {
        stacked_products: plain[1].paths.stacked_products,
        ..plain[0].paths
    };
    Outcome::Concordant {
        elements,
        written: lanes,
        paths,
    }
}

/// Compare every `v_wr` of the emulator's trace with the graph's write records, in execution
/// order (`nnpc diff --trace`'s comparison): the lanes compared when they agree, else the first
/// divergence.
pub fn compare_traces(
    graph: &nnp_lowering::swgraph::SwGraph,
    traced: &nnp_runtime::exec::Execution,
    trace: &[nnp_runtime::trace::TraceRecord],
    batch: usize,
) -> Result<usize, Outcome> {
    let records = nnp_runtime::exec::trace::records(graph, traced, 0..batch)
        .ok_or_else(|| Outcome::GraphError("trace: the graph kept no written values".into()))?;
    let cmp = nnp_runtime::trace::compare_traces(trace, &records)
        .map_err(|e| Outcome::GraphError(format!("trace: {e}")))?;
    match cmp.first {
        Some(d) => Err(Outcome::TraceMismatch(d)),
        None => Ok(records.iter().map(|r| r.bits.len()).sum()),
    }
}

/// Compare two engines' outputs element by element on their storage bit patterns (`nnpc
/// diff`'s comparison: every NaN is the canonical NaN).
pub fn compare_outputs(
    program: &nnp_grammar::Program,
    emu: &nnp_runtime::host::Outputs,
    sw: &nnp_runtime::host::Outputs,
) -> Outcome {
    match nnp_runtime::diff::diff_outputs(program, emu, sw, 1) {
        Err(e) => Outcome::GraphError(e.to_string()),
        Ok(r) if r.concordant => Outcome::Concordant {
            elements: r.elements,
            written: 0,
            paths: PathCounts::default(),
        },
        Ok(r) => Outcome::Mismatch(Box::new(r)),
    }
}

/// [`minimize`] a failing program, keeping the same kind of failure on the same data.
pub fn minimize_failure(
    source: &str,
    target_toml: &str,
    data_seed: u64,
    batch: usize,
    data_cfg: &DataConfig,
    json: bool,
) -> (String, String, Outcome) {
    let first = run_differential(source, target_toml, data_seed, batch, data_cfg, json);
    let kind = first.kind();
    if !first.is_failure() || matches!(first, Outcome::Invalid(_)) {
        // Nothing to shrink: any edit that breaks the program would "still fail".
        return (source.to_string(), target_toml.to_string(), first);
    }
    let (s, t) = minimize(source, target_toml, |s, t| {
        run_differential(s, t, data_seed, batch, data_cfg, json).kind() == kind
    });
    let out = run_differential(&s, &t, data_seed, batch, data_cfg, json);
    (s, t, out)
}

/// The software graph's error on `source` at `toml` (`batch` items of [`host_data`] from
/// `data_seed`), at lowering or run time, or what it did instead (ran, or panicked).
fn graph_error(source: &str, toml: &str, data_seed: u64, batch: usize) -> Result<String, String> {
    use nnp_grammar::{SourceFile, Target, check};
    use nnp_lowering::swgraph::{Roots, compile};
    use nnp_runtime::exec::{ExecOptions, Session};
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let target = Target::from_toml(toml, "mutant.toml").map_err(|e| e.to_string())?;
    let src = std::sync::Arc::new(SourceFile::new("mutant.nnp", source));
    let program = check(src, Some(target))
        .map_err(|_| "does not check".to_string())?
        .program;
    let data = host_data(&program, batch, data_seed, &DataConfig::default());
    let ran = catch_unwind(AssertUnwindSafe(|| {
        let graph = compile(&program, Roots::OutputsAndWrites).map_err(|e| e.to_string())?;
        let mut session =
            Session::new(&graph, &ExecOptions::default()).map_err(|e| e.to_string())?;
        session.run(&data).map(|_| ()).map_err(|e| e.to_string())
    }));
    match ran {
        Ok(Err(e)) => Ok(e),
        Ok(Ok(())) => Err("the graph ran".into()),
        Err(_) => Err("the graph panicked".into()),
    }
}

/// The first register address (`dram[16]`: a name, then a number in brackets) an error
/// message names.
pub fn first_address(message: &str) -> Option<&str> {
    message.match_indices('[').find_map(|(open, _)| {
        let close = open + message[open..].find(']')?;
        let digits = &message[open + 1..close];
        let start = message[..open]
            .char_indices()
            .rev()
            .find(|&(_, c)| !c.is_ascii_alphanumeric() && c != '_')
            .map_or(0, |(k, c)| k + c.len_utf8());
        (start < open && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| &message[start..=close])
    })
}

/// After the emulator refused a valid program at run time with `emulator` (an
/// [`Outcome::EmulatorError`] that is no panic): the graph refuses it too, naming the
/// emulator's register if it named one; else what the graph did.
pub fn refused_alike(
    emulator: &str,
    source: &str,
    toml: &str,
    data_seed: u64,
    batch: usize,
) -> Result<(), String> {
    let graph = graph_error(source, toml, data_seed, batch)?;
    match first_address(emulator) {
        Some(at) if !graph.contains(at) => Err(format!("the graph refused elsewhere: {graph}")),
        _ => Ok(()),
    }
}
