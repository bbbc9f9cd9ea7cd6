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
//! `state.rs`, which imports none of them; the kernels are the modules below.

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

pub use session::{
    CHUNK_BYTES, MAX_CHUNK_BYTES, MIN_CHUNK_ITEMS, Session, default_chunk_items, max_chunk_items,
};

use nnp_grammar::Span;
use nnp_host::{HostData, Outputs};
use nnp_lowering::swgraph::{GraphError, SwGraph, ValueId};
use std::collections::HashMap;

/// Where the graph runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceKind {
    #[default]
    Cpu,
    /// The graph on the first CUDA device (`device`, `gpu`; needs the `cuda` feature).
    Cuda,
}

/// Options of [`execute`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecOptions {
    pub device: DeviceKind,
    /// Keep the value of every `v_wr` (the graph's write records) for traces.
    pub keep_writes: bool,
    /// Hand back the value of every node but the outputs in `Execution::written` (the
    /// forward values the training's backward pass reads, `crate::train`). Every value is
    /// then made whole: no fused region, prepared stack or skipped concat keeps one inside.
    pub keep_values: bool,
    /// Take the float BLAS path for every product even where the integer kernel ([`intdot`])
    /// applies (for comparisons and tests: the results are the same bits).
    pub float_matmul: bool,
    /// Evaluate every MFU op as a candle op of its own, whole tensors in and out, instead of in
    /// the plan's fused regions (for comparisons and tests: the results are the same bits).
    pub unfused: bool,
    /// Evaluate in the products-first order (`swgraph::Schedule::new`): another order of the
    /// same graph, for tests (the results are the same bits).
    pub products_first: bool,
    /// Shards of a warm run on the CPU ([`Session::run`]): `None` chooses (one per thread for
    /// graphs of small weights, else the whole batch), `Some(1)` runs every batch whole; for
    /// comparisons and tests (the results are the same bits).
    pub batch_shards: Option<usize>,
    /// Items per chunk: a run goes through its batch in consecutive chunks of at most this
    /// many items, one after the other, so its intermediate values stay bounded whatever the
    /// batch ([`Session::chunks`]). `None` chooses from [`CHUNK_BYTES`]; the results are the
    /// same bits.
    pub chunk_items: Option<usize>,
}

/// Lanes of batch item `b` of the values `data` of `batch` items (`[batch, lanes]`): a value
/// of one item (a constant's) is every item's.
pub(crate) fn item_lanes(data: &[f64], batch: usize, b: usize) -> &[f64] {
    let lanes = data.len() / batch.max(1);
    let b = if batch == 1 { 0 } else { b };
    &data[b * lanes..(b + 1) * lanes]
}

/// The value a `v_wr` wrote, on the host: `[batch, lanes]` storage values.
#[derive(Clone, Debug, PartialEq)]
pub struct WrittenValue {
    pub batch: usize,
    pub lanes: usize,
    pub data: Vec<f64>,
}

impl WrittenValue {
    /// Lanes of batch item `b` (items beyond a batch-1 value's single item repeat it).
    pub fn item(&self, b: usize) -> &[f64] {
        item_lanes(&self.data, self.batch, b)
    }
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct Execution {
    pub outputs: Outputs,
    /// With `keep_writes`: the value of every written value id; with `keep_values`: of every
    /// node but the outputs.
    pub written: HashMap<ValueId, WrittenValue>,
    /// The nodes that took each fast path.
    pub paths: PathCounts,
    /// Shards of items the run went in, side by side ([`Session::run`]): 1 for the whole
    /// batch (or chunk) in one pass, else the most of any chunk. A sharded run counts a node
    /// on a path where every shard took it.
    pub shards: usize,
    /// Chunks of items the run went in, one after the other ([`Session::chunks`]): 1 for a
    /// batch that fits one.
    pub chunks: usize,
}

/// The nodes of a run that took each fast path ([`Execution::paths`]). A sharded or chunked
/// run counts a node on a path where every shard and chunk took it; `+` adds the counts of
/// several runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounts {
    /// Products (`TiledMatVec` nodes) computed on the integer kernel ([`intdot`]); the others
    /// took a float path.
    pub int_products: usize,
    /// Of those, the products whose weights and vector the CPU took as bytes, on the AVX-512
    /// VNNI kernel ([`intdot::Kernel::Vnni`]: BFP 8 and narrower; sliced products not
    /// counted).
    pub byte_products: usize,
    /// Of those, the products computed on the GPU (`DeviceKind::Cuda`).
    pub gpu_products: usize,
    /// Of those, the products whose operands the kernel took in slices (fp8 and MX formats:
    /// [`intdot::SlicedWeights`]).
    pub sliced_products: usize,
    /// Products on the float path's one f64 matmul with proven roundings (`FloatPath::Bounded`:
    /// float formats whose products, not tiles, are exact in f64).
    pub bounded_products: usize,
    /// Weight stacks prepared in one pass from the host's weights (`prepare`).
    pub one_pass_stacks: usize,
    /// Vectors quantized straight to the integer kernel's integers (BFP `quantize`
    /// nodes that only products read: [`intdot::IntVector::quantized`]).
    pub quantized_to_ints: usize,
    /// Of those, the vectors assembled from their concat's parts, tile by tile, without the
    /// concat (a skipped concat step, `session/steps.rs`).
    pub concats_skipped: usize,
}

impl std::ops::Add for PathCounts {
    type Output = PathCounts;

    fn add(self, o: PathCounts) -> PathCounts {
        PathCounts {
            int_products: self.int_products + o.int_products,
            byte_products: self.byte_products + o.byte_products,
            gpu_products: self.gpu_products + o.gpu_products,
            sliced_products: self.sliced_products + o.sliced_products,
            bounded_products: self.bounded_products + o.bounded_products,
            one_pass_stacks: self.one_pass_stacks + o.one_pass_stacks,
            quantized_to_ints: self.quantized_to_ints + o.quantized_to_ints,
            concats_skipped: self.concats_skipped + o.concats_skipped,
        }
    }
}

impl std::fmt::Display for PathCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} products on the integer kernel ({} on bytes, {} on the GPU, {} on integer \
             slices), {} on the float path's bounded matmul, {} weight stacks prepared in one pass, {} vectors \
             quantized straight to integers ({} of them from a concat's parts)",
            self.int_products,
            self.byte_products,
            self.gpu_products,
            self.sliced_products,
            self.bounded_products,
            self.one_pass_stacks,
            self.quantized_to_ints,
            self.concats_skipped
        )
    }
}

/// Why a graph could not be executed. A fix, where there is one, is the error's help
/// ([`miette::Diagnostic::help`]), not part of its message.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ExecError {
    #[error("no host tensor `{name}` for the graph's {kind}")]
    #[diagnostic(help(
        "pass a weights/inputs file that holds it, or run without files for seeded random data"
    ))]
    Missing { name: String, kind: &'static str },
    #[error("host tensor `{name}` has shape {found:?}, the graph expects {expected:?}")]
    Shape {
        name: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Table(#[from] mfu::TableError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Graph(#[from] GraphError),
    #[error("{0}")]
    Device(String),
    /// No CUDA device to run on: none usable, or a build without CUDA.
    #[error("{message}")]
    #[diagnostic(help("{help}"))]
    NoGpu { message: String, help: &'static str },
    #[error("tensor operation failed at node {node} ({op}): {message}")]
    Tensor {
        node: usize,
        op: &'static str,
        message: String,
    },
    /// A NaN or infinity where the target says `nonfinite = "error"` (the emulator's
    /// `EmuError::NonFinite`, in its words).
    #[error(
        "`{op}` produced {value} in lane {lane} and the target forbids NaN/Inf (line {line}, \
         chain {chain}, iteration {iteration}, batch item {item})"
    )]
    #[diagnostic(help("{}", nnp_host::NONFINITE_HELP))]
    NonFinite {
        op: String,
        value: f64,
        lane: usize,
        line: usize,
        span: Span,
        chain: usize,
        iteration: u32,
        item: usize,
    },
    /// A broken invariant of the executor: a bug in nnpc, not in the graph or its data.
    #[error("internal error (a bug in nnpc; please report it): {0}")]
    Internal(String),
}

impl ExecError {
    /// The error of a run of items `first..` of a larger batch, its item numbered in that
    /// batch.
    pub fn in_batch(mut self, first: usize) -> ExecError {
        if let ExecError::NonFinite { item, .. } = &mut self {
            *item += first;
        }
        self
    }

    /// The source span of the instruction a runtime error of the firmware points at.
    pub fn span(&self) -> Option<Span> {
        match self {
            ExecError::NonFinite { span, .. } => Some(*span),
            _ => None,
        }
    }
}

/// A short message of a candle error (its Display may carry a backtrace after the first line).
fn short(e: &candle_core::Error) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or("candle error")
        .to_string()
}

/// Run `graph` on `data` (`data.batch` input sets in one pass).
pub fn execute(
    graph: &SwGraph,
    data: &HostData,
    opts: &ExecOptions,
) -> Result<Execution, ExecError> {
    Session::new(graph, opts)?.run(data)
}

/// A broken invariant ([`ExecError::Internal`]).
fn internal(msg: &str) -> ExecError {
    ExecError::Internal(msg.to_string())
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

/// Lowering or execution failure.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum RunError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Lower(#[from] nnp_lowering::swgraph::LowerError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Exec(#[from] ExecError),
}
