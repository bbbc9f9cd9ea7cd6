//! `nnpc compile`: lower firmware to its software graph and write it as JSON.

use super::output::{self, count};
use nnp_lowering::swgraph::{Roots, SwGraph};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Compile a firmware file to its software graph (`.swg.json`): the SSA tensor graph that
/// `nnpc run` executes bit-identically to the hardware. Schema: docs/files.md ("Compiled graphs").
///
/// Exit status: 0 ok, 1 firmware errors, 2 unreadable input or unwritable output.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc compile samples/lstm.nnp                       # writes samples/lstm.swg.json
  nnpc compile samples/lstm.nnp -o /tmp/lstm.swg.json --target samples/targets/fp32.toml
  nnpc run /tmp/lstm.swg.json --batch 64
  nnpc compile samples/gru.nnp -o - | jq '.nodes | length'")]
pub struct Args {
    /// Output file (`-` for stdout). Default: the input with `.swg.json` for `.nnp`.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub firmware: super::Firmware,
    /// Keep only what the outputs need (drops the values of `v_wr`s that reach no output, so
    /// `run --trace` cannot report them).
    #[arg(long)]
    pub outputs_only: bool,
}

/// The default output path: `x.nnp` -> `x.swg.json`.
pub fn default_output(file: &Path) -> PathBuf {
    file.with_extension("swg.json")
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match args.firmware.load() {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let roots = if args.outputs_only {
        Roots::Outputs
    } else {
        Roots::OutputsAndWrites
    };
    let graph = match super::compile(&program, roots) {
        Ok(g) => g,
        Err(code) => return Ok(code),
    };
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&args.firmware.file));
    let json = graph.to_json();
    if out.as_os_str() == "-" {
        output::stdout(json + "\n")?;
    } else {
        let reads = args.firmware.reads(&program);
        super::write_output("-o", &out, (json + "\n").as_bytes(), &reads)?;
        output::stdout(summary(&graph, &out))?;
    }
    // The process ends here and its memory with it: freeing the graph and the program block by
    // block (millions of blocks at 10^6 instructions) would only take time.
    std::mem::forget(graph);
    std::mem::forget(program);
    Ok(ExitCode::SUCCESS)
}

/// What was compiled, to where, and what the graph holds.
fn summary(g: &SwGraph, out: &Path) -> String {
    use std::fmt::Write as _;
    let ops: Vec<String> = g
        .op_counts()
        .iter()
        .map(|(name, n)| format!("{n} {name}"))
        .collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: compiled for `{}` (N = {}) to {}",
        g.source,
        g.target,
        g.native,
        out.display()
    );
    let _ = writeln!(s, "  {}: {}", count(g.nodes.len(), "node"), ops.join(", "));
    let _ = writeln!(
        s,
        "  {}, {}",
        count(g.writes.len(), "traced write"),
        count(g.outputs.len(), "output")
    );
    if !g.checks.is_empty() {
        let _ = writeln!(
            s,
            "  {} checked for NaN/Inf (the target says nonfinite = \"error\")",
            count(g.checks.len(), "value")
        );
    }
    s
}
