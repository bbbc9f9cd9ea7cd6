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
pub mod progen;

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
    },
    /// The `--target` given cannot be loaded.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Target(#[from] TargetError),
    /// The firmware has errors (rendered with their source spans).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Firmware(Diagnostics),
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

/// Read and check a firmware file. `target` (a built-in name or a TOML path) overrides the
/// file's `target` statement. Firmware errors come back in the inner result, with the source.
pub fn check_file(
    path: impl AsRef<Path>,
    target: Option<&str>,
) -> Result<(Arc<SourceFile>, CheckResult), LoadError> {
    let path = path.as_ref();
    let name = path.to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: name.clone(),
        source,
    })?;
    let target = target.map(Target::load).transpose()?;
    let src = Arc::new(SourceFile::new(name, text));
    let result = nnp_grammar::check(src.clone(), target);
    Ok((src, result))
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
