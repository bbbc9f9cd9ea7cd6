//! nnpc facade: load and check firmware in one call, and the crates' main types.
//!
//! ```no_run
//! # fn main() -> miette::Result<()> {
//! let program = nnpc::load_program("samples/lstm.nnp", None)?;
//! println!("{} chains", program.chains.len());
//! # Ok(())
//! # }
//! ```

pub mod memory;

pub use nnp_grammar as grammar;
pub use nnp_grammar::{
    CheckOutput, Diagnostic, Diagnostics, Program, Severity, SourceFile, Target, TargetError,
};
pub use nnp_numerics as numerics;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

/// Why a firmware file could not be loaded as a checked program.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum LoadError {
    /// The firmware file cannot be read.
    #[error("cannot read firmware file `{path}`")]
    #[diagnostic(code(nnp::io))]
    Read {
        path: String,
        source: std::io::Error,
        #[help]
        help: Option<String>,
    },
    /// The file is JSON (a compiled software graph, made by `nnpc compile`), not firmware.
    #[error("`{path}` is not firmware but {what}")]
    #[diagnostic(code(nnp::input))]
    NotFirmware {
        path: String,
        /// A compiled graph, or some other JSON.
        what: &'static str,
        #[help]
        help: String,
    },
    /// The firmware file is not UTF-8 text.
    #[error(transparent)]
    #[diagnostic(transparent)]
    NotUtf8(Box<NotUtf8>),
    /// The `--target` given cannot be loaded.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Target(#[from] TargetError),
    /// The firmware has errors (rendered with their source spans).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Firmware(Diagnostics),
}

/// A firmware file that is not UTF-8 text, at its first invalid byte.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error(
    "`{path}` is not UTF-8 text: invalid byte 0x{byte:02X} at line {line}, column {column} \
     (byte offset {offset})"
)]
#[diagnostic(
    code(nnp::encoding),
    help(
        "save the file as UTF-8 (from Latin-1, for instance: `iconv -f latin1 -t utf-8 {path} \
         > fixed.nnp`)"
    )
)]
pub struct NotUtf8 {
    pub path: String,
    pub byte: u8,
    pub offset: usize,
    pub line: usize,
    pub column: usize,
    /// The text, the invalid bytes shown as U+FFFD.
    #[source_code]
    pub text: nnp_grammar::SourceText,
    #[label("not UTF-8")]
    pub at: miette::SourceSpan,
}

impl LoadError {
    /// The CLI exit status for this error: 1 for firmware errors, 2 for unreadable input.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            LoadError::Firmware(_) => ExitCode::from(1),
            _ => ExitCode::from(2),
        }
    }
}

/// The result of checking a readable file: the program and its warnings, or every diagnostic.
pub type CheckResult = Result<CheckOutput, Vec<Diagnostic>>;

/// The largest firmware file read: its size is checked before it is read, so a path naming
/// `/dev/zero` or a FIFO is an error, never a read without end or a wait.
pub const MAX_FIRMWARE_BYTES: u64 = 1 << 30;

/// Read and check a firmware file. `target` (a built-in name or a TOML path) overrides the
/// file's `target` statement. Firmware errors come back in the inner result, with the source.
pub fn check_file(
    path: impl AsRef<Path>,
    target: Option<&str>,
) -> Result<(Arc<SourceFile>, CheckResult), LoadError> {
    let path = path.as_ref();
    let name = path.to_string_lossy().into_owned();
    let bytes = nnp_runtime::io::read_limited(path, MAX_FIRMWARE_BYTES).map_err(|e| {
        let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
        let source = match e {
            nnp_runtime::io::LimitedReadError::Io(e) => e,
            e => std::io::Error::other(e.to_string()),
        };
        LoadError::Read {
            path: name.clone(),
            source,
            help,
        }
    })?;
    if looks_like_json(path, &bytes) {
        return Err(not_firmware(name, &bytes));
    }
    let text = String::from_utf8(bytes).map_err(|e| not_utf8(name.clone(), &e))?;
    let target = target.map(Target::load).transpose()?;
    let src = Arc::new(SourceFile::new(name, text));
    let result = nnp_grammar::check(src.clone(), target);
    Ok((src, result))
}

/// Whether the file `path` holding `bytes` (or at least its first bytes) is JSON, as a graph
/// written by `nnpc compile` is, rather than firmware: its name ends in `.json`, or its first
/// character other than white space is `{` (which no firmware line starts with).
pub fn looks_like_json(path: &Path, bytes: &[u8]) -> bool {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    path.to_string_lossy().ends_with(".json")
        || bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// The error for the JSON file `path` (see [`looks_like_json`]) given where firmware goes:
/// a compiled graph's help names the firmware it was compiled from.
fn not_firmware(path: String, bytes: &[u8]) -> LoadError {
    let json: Option<serde_json::Value> = serde_json::from_slice(bytes).ok();
    let graph =
        path.ends_with(".swg.json") || json.as_ref().is_some_and(|v| v.get("nodes").is_some());
    let source = json
        .as_ref()
        .and_then(|v| v.get("source"))
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty());
    let help = match source {
        Some(firmware) if graph => format!(
            "give the firmware file instead: `{firmware}` (the graph's source), or run the \
             graph with `nnpc run {path}`"
        ),
        _ => "give the firmware file (.nnp) instead".to_string(),
    };
    LoadError::NotFirmware {
        what: if graph {
            "a compiled software graph (.swg.json), which only `nnpc run` takes"
        } else {
            "a JSON file"
        },
        path,
        help,
    }
}

/// The error for the file `path` that is not UTF-8, at its first invalid byte.
fn not_utf8(path: String, e: &std::string::FromUtf8Error) -> LoadError {
    let bytes = e.as_bytes();
    let offset = e.utf8_error().valid_up_to();
    // The text up to `offset` is valid, so its offsets are the file's; the invalid bytes
    // become one U+FFFD (3 bytes) there.
    let text = String::from_utf8_lossy(bytes).into_owned();
    let (line, column) = nnp_grammar::diagnostics::line_col(&text, offset as u32);
    LoadError::NotUtf8(Box::new(NotUtf8 {
        byte: bytes.get(offset).copied().unwrap_or_default(),
        offset,
        line,
        column,
        text: nnp_grammar::SourceText::new(path.clone(), text),
        at: (offset, '\u{FFFD}'.len_utf8()).into(),
        path,
    }))
}

/// Read and check a firmware file; the program with its warnings.
pub fn load_program_with_warnings(
    path: impl AsRef<Path>,
    target: Option<&str>,
) -> Result<CheckOutput, LoadError> {
    let (src, result) = check_file(path, target)?;
    result.map_err(|diags| LoadError::Firmware(Diagnostics::new(&src, diags)))
}

/// Read and check a firmware file; the checked program (warnings dropped). The error renders
/// every diagnostic with `miette` (`{err:?}` on a `miette::Report`).
pub fn load_program(path: impl AsRef<Path>, target: Option<&str>) -> Result<Program, LoadError> {
    load_program_with_warnings(path, target).map(|o| o.program)
}
