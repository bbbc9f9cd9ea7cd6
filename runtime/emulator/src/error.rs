//! The emulated machine's runtime errors ([`EmuError`]) and where they happened ([`Site`]).

use nnp_grammar::Span;
use std::fmt;
use std::path::PathBuf;

/// Where a runtime error happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    /// Batch item.
    pub item: usize,
    /// Chain index (0-based, program order).
    pub chain: usize,
    pub iteration: u32,
    /// The instruction.
    pub span: Span,
    /// 1-based source line of `span`.
    pub line: usize,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, chain {}, iteration {}, batch item {}",
            self.line, self.chain, self.iteration, self.item
        )
    }
}

/// A runtime error of the emulated machine.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum EmuError {
    #[error("netq underflow: `v_rd netq` found the input queue empty ({site})")]
    #[diagnostic(help(
        "every `v_rd netq` pops one input row; declare more input rows or pop fewer"
    ))]
    NetqUnderflow { site: Site },
    #[error(
        "`v_rd netq` reads {expected} tile(s) but the next input row (`{input}` row {row}) has \
         {found} ({site})"
    )]
    #[diagnostic(help("set `s_wr rows`/`cols` so the chain's width equals the row's tile count"))]
    NetqWidth {
        site: Site,
        input: String,
        row: usize,
        expected: u32,
        found: usize,
    },
    #[error("{left} input row(s) left on netq after the program ended (next: `{input}` row {row})")]
    #[diagnostic(help(
        "every input row must be popped: add `v_rd netq` chains or shrink the input"
    ))]
    NetqLeftover {
        left: usize,
        input: String,
        row: usize,
        span: Span,
        line: usize,
    },
    #[error("`v_wr netq` pushes a row but every `output` row is already produced ({site})")]
    #[diagnostic(help("the `v_wr netq` pushes must match the `output` declarations row for row"))]
    NetqOverflow { site: Site },
    #[error("`v_wr netq` pushes {found} tile(s) but `{output}` row {row} has {expected} ({site})")]
    #[diagnostic(help("set `s_wr rows`/`cols` so the chain's width equals the row's tile count"))]
    PushWidth {
        site: Site,
        output: String,
        row: usize,
        expected: usize,
        found: u32,
    },
    #[error("output `{output}` got {got} of its {expected} rows from netq")]
    #[diagnostic(help("the `v_wr netq` pushes must match the `output` declarations row for row"))]
    OutputMissing {
        output: String,
        got: usize,
        expected: usize,
        span: Span,
        line: usize,
    },
    #[error("read of {mem}[{addr}], which nothing wrote ({site})")]
    #[diagnostic(help(
        "declare the register (a `vector ... at`, `= 0`) or write it before this chain"
    ))]
    Uninitialized { site: Site, mem: String, addr: u32 },
    #[error("{mem}[{addr}] is outside the memory ({size} registers) ({site})")]
    #[diagnostic(help("check the address and its per-iteration increment"))]
    OutOfRange {
        site: Site,
        mem: String,
        addr: u64,
        size: u32,
    },
    #[error("`{op}` produced {value} in lane {lane} and the target forbids NaN/Inf ({site})")]
    #[diagnostic(help("{}", nnp_host::NONFINITE_HELP))]
    NonFinite {
        site: Site,
        op: &'static str,
        value: f64,
        lane: usize,
    },
    #[error("the emulator does not support this: {message}")]
    Unsupported {
        message: String,
        span: Span,
        line: usize,
    },
    #[error("activation table `{path}`: {message}")]
    Table { path: PathBuf, message: String },
    #[error("host data lacks `{name}` ({message})")]
    Data { name: String, message: String },
    /// The stop flag was set ([`EmuOptions::stop`](crate::EmuOptions::stop)).
    #[error("stopped")]
    Stopped,
    /// Past a size limit of [`nnp_grammar::limits`] (checked before anything is allocated).
    #[error(transparent)]
    #[diagnostic(transparent)]
    TooLarge(#[from] nnp_grammar::SizeError),
}

impl EmuError {
    /// The source span the error points at.
    pub fn span(&self) -> Option<Span> {
        match self {
            EmuError::NetqUnderflow { site }
            | EmuError::NetqWidth { site, .. }
            | EmuError::NetqOverflow { site }
            | EmuError::PushWidth { site, .. }
            | EmuError::Uninitialized { site, .. }
            | EmuError::OutOfRange { site, .. }
            | EmuError::NonFinite { site, .. } => Some(site.span),
            EmuError::NetqLeftover { span, .. }
            | EmuError::OutputMissing { span, .. }
            | EmuError::Unsupported { span, .. } => Some(*span),
            EmuError::Table { .. }
            | EmuError::Data { .. }
            | EmuError::TooLarge(_)
            | EmuError::Stopped => None,
        }
    }
}
