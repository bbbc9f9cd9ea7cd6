//! The emulator: an instruction-level model of the NNP hardware (docs/language.md, docs/numerics.md).
//!
//! It executes a checked [`Program`] chain by chain, iteration by iteration, over native tiles,
//! with its own code for every op: integer mantissas and exact sums in the MVM, correctly
//! rounded MFU arithmetic, activation tables. It shares no kernels with the software graph; it
//! uses only `nnp-numerics` scalar quantizers and rounding. It is the oracle the software graph
//! is tested against.
//!
//! Batch items run in lockstep inside one machine (each vector register holds every item's
//! lanes), split over threads in contiguous chunks.

mod exact;
mod machine;
pub mod mfu;
pub mod mvm;

pub use nnp_host::trace::{TraceError, TraceRecord, read_trace, write_trace};

use nnp_grammar::{Program, Span};
pub use nnp_host::Progress;
use nnp_host::{HostData, Outputs, Tensor};
use rayon::prelude::*;
use std::fmt;
use std::path::PathBuf;

/// How to run the emulator.
#[derive(Clone, Debug, Default)]
pub struct EmuOptions {
    /// Record every `v_wr` (see [`TraceRecord`]).
    pub trace: bool,
    /// Batch items per machine (lockstep chunk); `None` splits the batch evenly over the
    /// threads (in chunks of at most [`PROGRESS_CHUNK`] items when `progress` or `stop` is
    /// set).
    pub chunk: Option<usize>,
    /// Told how many batch items finished, chunk by chunk (from worker threads).
    pub progress: Option<Progress>,
    /// The number of the data's first item in a larger batch emulated a piece at a time:
    /// trace records and error sites count from it (0: the data is the whole batch).
    pub first_item: usize,
    /// The stop flag: once set, the run stops before its next chain iteration of any item
    /// ([`EmuError::Stopped`]), so a long piece stops within moments.
    pub stop: Option<&'static std::sync::atomic::AtomicBool>,
}

/// Largest chunk when progress is reported, so a long run reports often.
pub const PROGRESS_CHUNK: usize = 32;

/// What a run produced.
#[derive(Clone, Debug)]
pub struct Emulation {
    /// One tensor per `output` declaration, shape `[batch, ...decl.shape]`.
    pub outputs: Outputs,
    /// The write trace, item-major then execution order, when asked for.
    pub trace: Option<Vec<TraceRecord>>,
}

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
    /// The stop flag was set ([`EmuOptions::stop`]).
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

/// Run `program` on every batch item of `data`.
pub fn emulate(
    program: &Program,
    data: &HostData,
    opts: &EmuOptions,
) -> Result<Emulation, EmuError> {
    program.check_size()?;
    let mut shared = machine::Shared::new(program, data)?;
    shared.stop = opts.stop;
    let batch = data.batch.max(1);
    let even = batch.div_ceil(rayon::current_num_threads().max(1));
    // A run that reports progress or can be stopped goes in small chunks, so that a chain
    // iteration (where the stop flag is looked at) takes moments.
    let chunk = match opts.chunk {
        Some(c) => c,
        None if opts.progress.is_some() || opts.stop.is_some() => even.min(PROGRESS_CHUNK),
        None => even,
    }
    .max(1);
    let starts: Vec<usize> = (0..batch).step_by(chunk).collect();
    let results: Vec<Result<machine::ChunkResult, EmuError>> = starts
        .par_iter()
        .map(|&s| {
            let items = s..(s + chunk).min(batch);
            let done = items.len();
            let r = machine::run_chunk(&shared, items, opts.trace, opts.first_item);
            if let Some(Progress(report)) = &opts.progress {
                report(done);
            }
            r
        })
        .collect();
    let mut outputs: Outputs = program
        .outputs()
        .map(|d| {
            let mut shape = vec![batch];
            shape.extend(&d.shape);
            (d.name.clone(), Tensor::zeros(shape))
        })
        .collect();
    let mut trace = opts.trace.then(Vec::new);
    for (start, r) in starts.into_iter().zip(results) {
        let r = r?;
        for (name, values) in r.outputs {
            if let Some(t) = outputs.get_mut(&name) {
                let per = t.len() / batch;
                t.data[start * per..start * per + values.len()].copy_from_slice(&values);
            }
        }
        if let (Some(all), Some(recs)) = (trace.as_mut(), r.trace) {
            all.extend(recs);
        }
    }
    Ok(Emulation { outputs, trace })
}
