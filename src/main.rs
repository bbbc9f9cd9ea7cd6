//! `nnpc`: the command line. Each subcommand lives in `src/cmd/`.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cmd;

/// Bit-exact software execution of NNP (Brainwave-style) firmware.
///
/// Write firmware, check it, inspect its dependency graph, run it as a software graph that is
/// bit-identical to the hardware, emulate the hardware, and diff the two.
#[derive(Parser)]
#[command(name = "nnpc", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Check(cmd::check::Args),
    Graph(cmd::graph::Args),
    Compile(cmd::compile::Args),
    Run(cmd::run::Args),
    Emulate(cmd::emulate::Args),
    Diff(cmd::diff::Args),
    Quantize(cmd::quantize::Args),
    Bench(cmd::bench::Args),
    Train(cmd::train::Args),
    Score(cmd::score::Args),
    Data(cmd::seeded::Args),
}

fn main() -> ExitCode {
    nnpc::memory::keep_large_buffers_on_the_heap();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => cmd::check::run(a),
        Command::Graph(a) => cmd::graph::run(a),
        Command::Compile(a) => cmd::compile::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Emulate(a) => cmd::emulate::run(a),
        Command::Diff(a) => cmd::diff::run(a),
        Command::Quantize(a) => cmd::quantize::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Train(a) => cmd::train::run(a),
        Command::Score(a) => cmd::score::run(a),
        Command::Data(a) => cmd::seeded::run(a),
    };
    match result {
        Ok(code) => code,
        Err(report) => cmd::output::report(&report, ExitCode::from(2)),
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: nnpc::memory::HugePages = nnpc::memory::HugePages;
