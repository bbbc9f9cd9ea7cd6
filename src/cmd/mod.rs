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

/// An error as a report: its message, and the fix (the library error's
/// [`miette::Diagnostic::help`], or the CLI's own) as miette's help line under it. The message
/// is the error's Display alone: a library error's `source` is in its message, not printed
/// again as a cause.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{message}")]
pub struct Failure {
    message: String,
    #[help]
    help: Option<String>,
}

impl Failure {
    /// The CLI's own error `message`, with no help.
    pub fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            help: None,
        }
    }

    /// The error with `help` as its fix.
    pub fn help(self, help: impl Into<String>) -> Failure {
        Failure {
            help: Some(help.into()),
            ..self
        }
    }

    /// The error `e`: its message and its help.
    pub fn of(e: &dyn miette::Diagnostic) -> Failure {
        Failure {
            message: e.to_string(),
            help: e.help().map(|h| h.to_string()),
        }
    }

    /// The message `context: MESSAGE`, the help kept.
    pub fn within(self, context: impl std::fmt::Display) -> Failure {
        Failure {
            message: format!("{context}: {}", self.message),
            ..self
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::new(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::new(message)
    }
}

/// The library errors that reach [`fail`]: each brings its help.
macro_rules! failures {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Failure {
                Failure::of(&e)
            }
        }
    )*};
}

failures!(
    nnp_runtime::exec::ExecError,
    nnp_runtime::train::TrainError,
    nnp_runtime::host::HostError,
    nnp_runtime::io::IoError,
    nnp_runtime::emulator::EmuError,
    nnp_runtime::trace::TraceError,
    nnp_runtime::diff::DiffError,
    nnp_runtime::diff::DumpError,
    nnp_runtime::diff::CompareError,
    nnp_runtime::stream::StreamError,
    nnp_runtime::score::ScoreError,
    nnp_lowering::depgraph::ExportError,
    host_args::ChunkError,
);

/// Errors of other crates, which name no fix.
impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Failure {
        Failure::new(e.to_string())
    }
}

/// The error `e` (a library error, a [`Failure`], or the CLI's own message) as a report.
pub fn fail(e: impl Into<Failure>) -> miette::Report {
    miette::Report::new(e.into())
}

/// The library error `e` as a report, its message after `context` (`CONTEXT: MESSAGE`), its
/// help kept.
pub fn fail_in(context: impl std::fmt::Display, e: &dyn miette::Diagnostic) -> miette::Report {
    miette::Report::new(Failure::of(e).within(context))
}

/// The runtime error `e` of the firmware in `src`, pointing at `span` (where `src` holds it:
/// a compiled graph run alone has no source text; the message names the line), with its help.
pub fn runtime_error(
    src: &nnp_grammar::SourceFile,
    e: &dyn miette::Diagnostic,
    span: Option<nnp_grammar::Span>,
) -> miette::Report {
    miette::Report::new(RuntimeError {
        message: e.to_string(),
        src: src.named(),
        span: span
            .filter(|s| s.end as usize <= src.text.len())
            .map(Into::into),
        help: e.help().map(|h| h.to_string()),
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
        let report = fail_in(format!("{}: cannot lower", program.source.name), &e);
        output::report(&report, ExitCode::from(1))
    })
}
