//! How the CLI reports an error: a library error's message with its help ([`Failure`]), and a
//! runtime error of the firmware at its source line.

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
