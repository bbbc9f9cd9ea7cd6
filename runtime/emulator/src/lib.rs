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

mod error;
mod exact;
mod machine;
pub mod mfu;
pub mod mvm;

pub use error::{EmuError, Site};
pub use nnp_host::trace::{TraceError, TraceRecord, read_trace, write_trace};

use nnp_grammar::Program;
pub use nnp_host::Progress;
use nnp_host::{HostData, Outputs, Tensor};
use rayon::prelude::*;

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
