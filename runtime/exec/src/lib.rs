//! Execution of a [`SwGraph`] with candle-core, batched.
//!
//! Every value is an f64 candle tensor with a leading batch dimension (B for values that depend
//! on inputs, 1 for weights and constants; binary ops broadcast). f64 holds every value of
//! every supported format exactly. Plain candle ops move data (pad, slice, concatenate) and
//! compute the float path's per-chunk dot products (f64 matmul, exact by the argument in
//! [`matmul`]); every op that rounds is a candle custom op whose kernel is in [`quant`],
//! [`mfu`], [`matmul`], [`exact`] and `fused` (candle's own `round` rounds half away from zero,
//! and it has no exact accumulation). Two kinds of op are not candle ops, for reasons measured
//! in docs/swgraph.md ("Which ops are candle ops"): fused regions of MFU ops (many tensors in,
//! several out) and products on the integer kernels ([`intdot`]; candle has no integer matmul).
//!
//! With the `cuda` feature and [`DeviceKind::Cuda`] the values live on the GPU (candle's
//! `Device::Cuda`) and the custom ops run their `cuda_fwd` (`device`, the products' `gpu`).
//!
//! A run, file by file: [`Session::new`] (`session.rs`) turns the graph's plan and the run's
//! options into the steps of a pass (`session/steps.rs`, one module per kind of step under
//! `session/steps/`, on the analyses in `session/analysis.rs`); [`Session::run`]
//! (`session/run.rs`) takes the batch in chunks (and shards), each one pass
//! (`session/pass.rs`) over the steps. A step evaluates nodes with the pass's `Executor`
//! (`executor.rs`), whose products take their operands and their path in `products/`; what
//! every layer shares (the executor's state, the caches, the paths taken, the profile) is in
//! `state.rs`, which imports none of them; the kernels are the modules below. A run's options,
//! errors and results are in `options.rs`, `error.rs` and `execution.rs`, below every layer.

pub mod module;
pub mod train;

pub mod baseline;
mod device;
pub mod exact;
mod f16c;
mod finite;
mod fused;
mod gpu;
pub mod intdot;
pub mod matmul;
pub mod mfu;
mod prepare;
pub mod quant;
mod rounded;
pub mod trace;

mod executor;
mod products;
mod session;
mod state;
mod tensors;

mod error;
mod execution;
mod options;

pub use error::{ExecError, RunError};
pub(crate) use error::{internal, short};
pub(crate) use execution::item_lanes;
pub use execution::{Execution, PathCounts, WrittenValue};
pub use options::{DeviceKind, ExecOptions};
pub use session::{
    CHUNK_BYTES, MAX_CHUNK_BYTES, MIN_CHUNK_ITEMS, Session, default_chunk_items, max_chunk_items,
};

use nnp_host::HostData;
use nnp_lowering::swgraph::SwGraph;

/// Run `graph` on `data` (`data.batch` input sets in one pass).
pub fn execute(
    graph: &SwGraph,
    data: &HostData,
    opts: &ExecOptions,
) -> Result<Execution, ExecError> {
    Session::new(graph, opts)?.run(data)
}

/// Lower `program` and run it (the one-call path of `nnpc run`).
pub fn run_program(
    program: &nnp_grammar::Program,
    data: &HostData,
    opts: &ExecOptions,
) -> Result<Execution, RunError> {
    let roots = if opts.keep_writes {
        nnp_lowering::swgraph::Roots::OutputsAndWrites
    } else {
        nnp_lowering::swgraph::Roots::Outputs
    };
    let g = nnp_lowering::swgraph::compile(program, roots)?;
    Ok(execute(&g, data, opts)?)
}
