//! `nnpc`: the command line. Each subcommand lives in `src/cmd/`.

use clap::{ColorChoice, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

mod cmd;

/// Bit-exact software execution of NNP (Brainwave-style) firmware.
///
/// Write firmware, check it, inspect its dependency graph, run it as a software graph that is
/// bit-identical to the hardware, emulate the hardware, and diff the two.
#[derive(Parser)]
#[command(name = "nnpc", version, propagate_version = true)]
struct Cli {
    /// When to colour errors, diagnostics and help.
    ///
    /// `auto` colours where the stream is a terminal and NO_COLOR is unset; `always` and
    /// `never` whatever it is.
    #[arg(long, global = true, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    /// Print no progress bars and no confirmations of files written.
    ///
    /// The results (stdout), warnings and errors print as without it.
    #[arg(short, long, global = true)]
    quiet: bool,
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
    Completions(cmd::completions::Args),
}

/// The `--color` of the command line, read before clap parses it, so that clap's own help and
/// usage errors follow it too (the last one given, as clap takes it; `Auto` where none or an
/// unknown value is, which clap then refuses).
fn color_arg(args: &[std::ffi::OsString]) -> ColorChoice {
    let mut choice = ColorChoice::Auto;
    let mut words = args.iter().skip(1).map(|a| a.to_str().unwrap_or(""));
    while let Some(w) = words.next() {
        let value = match w {
            "--" => break,
            "--color" => words.next(),
            _ => w.strip_prefix("--color="),
        };
        if let Some(v) = value {
            choice = clap::ValueEnum::from_str(v, false).unwrap_or(ColorChoice::Auto);
        }
    }
    choice
}

fn main() -> ExitCode {
    nnpc::memory::keep_large_buffers_on_the_heap();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let matches = Cli::command()
        .color(color_arg(&args))
        .get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    cmd::output::set_color(cli.color);
    cmd::output::set_quiet(cli.quiet);
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
        Command::Completions(a) => cmd::completions::run(a, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(report) => cmd::output::report(&report, ExitCode::from(2)),
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: nnpc::memory::HugePages = nnpc::memory::HugePages;

#[cfg(test)]
mod tests {
    use super::*;

    fn color_of(line: &str) -> ColorChoice {
        let args: Vec<std::ffi::OsString> = line.split(' ').map(Into::into).collect();
        color_arg(&args)
    }

    /// `--color` is found in either spelling, anywhere before `--`, the last one winning (as
    /// clap takes it); none, or a value clap will refuse, is `Auto`.
    #[test]
    fn the_color_flag_is_read_as_clap_reads_it() {
        assert_eq!(color_of("nnpc check f.nnp"), ColorChoice::Auto);
        assert_eq!(color_of("nnpc --color never check f"), ColorChoice::Never);
        assert_eq!(color_of("nnpc check f --color=always"), ColorChoice::Always);
        let last = "nnpc --color never check --color always f";
        assert_eq!(color_of(last), ColorChoice::Always);
        assert_eq!(color_of("nnpc run f -- --color never"), ColorChoice::Auto);
        assert_eq!(
            color_of("nnpc --color sometimes check f"),
            ColorChoice::Auto
        );
        assert_eq!(color_of("nnpc check f --color"), ColorChoice::Auto);
    }
}
