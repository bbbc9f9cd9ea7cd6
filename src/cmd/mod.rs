//! One module per subcommand. Each exposes `Args` (clap) and `run(Args) -> miette::Result<ExitCode>`.
//! Exit codes: 0 success/concordant, 1 errors in the firmware or discordance, 2 bad input.

pub mod bench;
pub mod check;
pub mod compile;
pub mod data;
pub mod diff;
pub mod emulate;
pub mod files;
pub mod graph;
pub mod host_args;
pub mod output;
pub mod quantize;
pub mod run;
pub mod score;
pub mod seeded;
pub mod train;

use indicatif::{ProgressBar, ProgressStyle};
use nnp_grammar::Program;
use nnp_lowering::swgraph::{Roots, SwGraph};
use nnp_runtime::host::Progress;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// A runtime error of the firmware rendered with its source line.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{message}")]
#[diagnostic(code(nnp::runtime))]
struct RuntimeError {
    message: String,
    #[source_code]
    src: nnp_grammar::SourceText,
    #[label("here")]
    span: Option<miette::SourceSpan>,
    #[help]
    help: Option<String>,
}

/// A library error as a report. The crates' errors are plain `thiserror` messages that end in
/// "; help: ..." where there is a fix to name; the fix becomes miette's help line.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{message}")]
struct Failure {
    message: String,
    #[help]
    help: Option<String>,
}

/// `message` and the help it ends with, if any (see [`Failure`]).
fn split_help(message: String) -> (String, Option<String>) {
    match message.split_once("; help: ") {
        Some((what, help)) => (what.to_string(), Some(help.to_string())),
        None => (message, None),
    }
}

/// The error `e` of a library crate, or of the CLI's own `format!`, as a report.
pub fn fail(e: impl std::fmt::Display) -> miette::Report {
    let (message, help) = split_help(e.to_string());
    miette::Report::new(Failure { message, help })
}

/// The runtime error `e` of the firmware in `src`, pointing at `span` (where `src` holds it:
/// a compiled graph run alone has no source text; the message names the line), with `help`.
pub fn runtime_error(
    src: &nnp_grammar::SourceFile,
    e: &dyn std::fmt::Display,
    span: Option<nnp_grammar::Span>,
    help: Option<&str>,
) -> miette::Report {
    let (message, own_help) = split_help(e.to_string());
    miette::Report::new(RuntimeError {
        message,
        src: src.named(),
        span: span
            .filter(|s| s.end as usize <= src.text.len())
            .map(Into::into),
        help: help.map(str::to_string).or(own_help),
    })
}

/// A count flag's value (`--batch`, `--reps`, `--native`, ...): a positive integer. 0 is a
/// usage error naming the flag (clap adds it), not a silent 1.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A bar of `len` steps of `what`, labelled `verb` (indicatif draws nothing when stderr is not
/// a terminal).
pub fn bar(verb: &str, len: usize, what: &str) -> ProgressBar {
    ProgressBar::new(len as u64).with_style(
        ProgressStyle::with_template(&format!(
            "{verb} {{bar:30}} {{pos}}/{{len}} {what}, {{eta}} left"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    )
}

/// A bar of `batch` input sets labelled `verb`, and the progress callback that advances it.
pub fn input_sets_bar(verb: &str, batch: usize) -> (ProgressBar, Progress) {
    let bar = bar(verb, batch, "input sets");
    let tick = bar.clone();
    (bar, Progress(Arc::new(move |n| tick.inc(n as u64))))
}

/// The firmware a command works on: the firmware file and `--target`.
#[derive(clap::Args)]
pub struct Firmware {
    /// The firmware file (.nnp).
    pub file: PathBuf,
    /// Target: a built-in name (`bw-default`) or a TOML target file. Overrides the file's
    /// `target` statement.
    #[arg(long, value_name = "NAME|FILE")]
    pub target: Option<String>,
}

impl Firmware {
    /// Load and check the firmware; on failure print the diagnostics and return the exit
    /// status (1 for firmware errors, 2 for unreadable input).
    pub fn load(&self) -> Result<Program, ExitCode> {
        nnpc::load_program(&self.file, self.target()).map_err(|e| {
            let code = e.exit_code();
            output::report(&miette::Report::new(e), code)
        })
    }

    /// `--target`, if given.
    pub fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }

    /// The files a command on this firmware reads ([`files::Reads::firmware`]).
    pub fn reads(&self, program: &Program) -> files::Reads {
        files::Reads::firmware(&self.file, self.target(), program)
    }
}

/// Write `bytes` to `path` (given by `flag`) in one piece: through a temporary file beside it
/// and an atomic rename ([`nnp_runtime::io::write_file_atomic`]), so that a full disk or a
/// crash leaves the old file whole and two writers never interleave; refused where `path`
/// is a file the command reads (`reads`).
pub fn write_output(
    flag: &str,
    path: &Path,
    bytes: &[u8],
    reads: &files::Reads,
) -> miette::Result<()> {
    reads.check(flag, path)?;
    nnp_runtime::io::write_file_atomic(path, bytes)
        .map_err(|e| fail(format!("cannot write `{}`: {e}", path.display())))
}

/// Compile a checked program to the software graph that keeps `roots`
/// ([`nnp_lowering::swgraph::compile`]); on failure print why and return status 1.
pub fn compile(program: &Program, roots: Roots) -> Result<SwGraph, ExitCode> {
    nnp_lowering::swgraph::compile(program, roots).map_err(|e| {
        let report = fail(format!("{}: cannot lower: {e}", program.source.name));
        output::report(&report, ExitCode::from(1))
    })
}
