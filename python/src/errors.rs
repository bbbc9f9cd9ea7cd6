//! Errors as the Python package's exception classes (`nnpc._errors`): the message is what the
//! command line prints, and a library error's help ([`miette::Diagnostic::help`]) is the
//! exception's `help` (`str(e)` ends in `; help: ...` where there is one).

use nnp_grammar::{Diagnostic, Severity, SourceFile};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The start of the message of a broken invariant of the package: a bug, not the caller's.
pub const BUG: &str = "internal error (a bug in nnpc; please report it)";

/// The exception `class` of `nnpc._errors` with `args`.
pub fn raise<'py>(py: Python<'py>, class: &str, args: impl pyo3::call::PyCallArgs<'py>) -> PyErr {
    let made = py
        .import("nnpc._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1(args));
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => PyRuntimeError::new_err(format!("{BUG}: cannot raise nnpc.{class}: {e}")),
    }
}

/// An error's message and its help, as an exception takes them.
pub struct Message {
    pub message: String,
    pub help: Option<String>,
}

impl Message {
    /// The error `e`: its message and its help.
    pub fn of(e: &dyn miette::Diagnostic) -> Message {
        Message {
            message: e.to_string(),
            help: e.help().map(|h| h.to_string()),
        }
    }
}

impl From<String> for Message {
    fn from(message: String) -> Message {
        Message {
            message,
            help: None,
        }
    }
}

impl From<&str> for Message {
    fn from(message: &str) -> Message {
        message.to_string().into()
    }
}

impl From<serde_json::Error> for Message {
    fn from(e: serde_json::Error) -> Message {
        e.to_string().into()
    }
}

/// The library errors the package raises: each brings its help.
macro_rules! messages {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Message {
            fn from(e: $t) -> Message {
                Message::of(&e)
            }
        }
    )*};
}

messages!(
    nnp_runtime::exec::ExecError,
    nnp_runtime::train::TrainError,
    nnp_runtime::host::HostError,
    nnp_runtime::io::IoError,
    nnp_runtime::emulator::EmuError,
    nnp_runtime::diff::DiffError,
    nnp_runtime::campaign::CampaignError,
    nnp_runtime::stream::StreamError,
    nnp_runtime::score::ScoreError,
);

/// The exception `class` with `e`'s message and help, in the caller's vocabulary.
fn raise_message(py: Python<'_>, class: &str, e: Message) -> PyErr {
    let help = e.help.as_deref().map(in_python_terms);
    raise(py, class, (in_python_terms(&e.message), help))
}

/// `nnpc.DataError` (bad weights, inputs or hardware arrays: a ValueError).
pub fn data_error(py: Python<'_>, e: impl Into<Message>) -> PyErr {
    raise_message(py, "DataError", e.into())
}

/// `nnpc.ExecutionError` (a run failed, e.g. a NaN the target forbids: a RuntimeError).
pub fn exec_error(py: Python<'_>, e: impl Into<Message>) -> PyErr {
    raise_message(py, "ExecutionError", e.into())
}

/// The command line's flags that the library's help lines name, as the Python API's
/// arguments.
const FLAGS: &[(&str, &str)] = &[
    ("`--random-missing`", "`random_missing=True`"),
    ("--random-missing", "random_missing=True"),
    ("--batch", "batch="),
    ("--seed", "seed="),
    ("--weights", "weights="),
    ("--inputs", "inputs="),
    ("--hardware", "hardware="),
];

/// A library message in the caller's vocabulary: the CLI flags it names as arguments.
fn in_python_terms(message: &str) -> String {
    FLAGS
        .iter()
        .fold(message.to_string(), |m, (flag, arg)| m.replace(flag, arg))
}

/// A diagnostic rendered as the command line renders it (without colours).
pub fn render(d: &dyn miette::Diagnostic) -> String {
    let handler =
        miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor());
    let mut text = String::new();
    match handler.render_report(&mut text, d) {
        Ok(()) => text,
        Err(_) => d.to_string(),
    }
}

/// One diagnostic as a dict: code, severity, line, column (1-based, at its primary span),
/// message, help.
pub fn diagnostic_dict<'py>(
    py: Python<'py>,
    src: &SourceFile,
    d: &Diagnostic,
) -> PyResult<Bound<'py, PyDict>> {
    let (line, column) = nnp_grammar::diagnostics::line_col(&src.text, d.span().start);
    let dict = PyDict::new(py);
    dict.set_item("code", d.code)?;
    let severity = match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    dict.set_item("severity", severity)?;
    dict.set_item("line", line)?;
    dict.set_item("column", column)?;
    dict.set_item("message", &d.message)?;
    dict.set_item("help", d.help.as_deref())?;
    Ok(dict)
}
