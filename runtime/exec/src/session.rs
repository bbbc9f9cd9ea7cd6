//! Sessions: a graph prepared for repeated runs. The session itself (what it keeps between
//! runs, what [`Session::new`] decides), the fast paths a run counts, and its parts: the
//! analysis of which nodes take which fast path (`analysis`), a run in chunks and shards
//! (`run`), and one pass over some items (`pass`).

mod analysis;
mod pass;
mod run;

use super::mfu::ActTable;
use super::products::{BoundedWeights, bounded_stacks, chunked_stacks};
use super::{
    DeviceKind, ExecError, ExecOptions, PathCounts, WrittenValue, finite, fused, gpu, intdot,
    prepare, quant, rounded,
};
use analysis::{
    concats_to_ints, extend_last_uses, peak_item_bytes, quantized_vectors, written_values,
};
use candle_core::{DType, Device, Tensor};
use nnp_host::Outputs;
use nnp_lowering::swgraph::{Plan, Schedule, SwGraph, UnOp, ValueId};
use nnp_numerics::FloatFormat;
pub(super) use pass::tally;
pub use run::{
    CHUNK_BYTES, MAX_CHUNK_BYTES, MIN_CHUNK_ITEMS, default_chunk_items, max_chunk_items,
};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// Weight-side work kept between runs: quantized weight stacks rearranged for the matmul,
/// exact slices of weights, activation tables. Handles only: a clone shares the data.
#[derive(Default, Clone)]
pub(super) struct Caches {
    /// Quantized weight stacks rearranged for the chunked matmul, by (stack, chunk, dtype): one
    /// stack may feed an f32 matmul in one chain and an f64 one in another.
    pub(super) arranged: HashMap<(ValueId, usize, DType), Tensor>,
    /// Weight stacks split into exact slices (rearranged), `None` when they cannot be.
    pub(super) sliced: HashMap<ValueId, Option<Vec<Tensor>>>,
    /// Weight stacks as f64 matrices for the bounded float path, by (stack, per tile column).
    pub(super) bounded: HashMap<(ValueId, bool), Arc<BoundedWeights>>,
    /// Weight stacks as integer mantissas, `None` when they do not fit.
    pub(super) int: HashMap<ValueId, Option<Arc<intdot::IntWeights>>>,
    /// Weight stacks that do not fit as integer slices, `None` when they take too many.
    pub(super) int_sliced: HashMap<ValueId, Option<Arc<intdot::SlicedWeights>>>,
    /// Those integers on the GPU.
    pub(super) gpu: HashMap<ValueId, Arc<gpu::GpuWeights>>,
    /// Weight stacks kept in another form only, which gives their f64 tensor back where a
    /// product needs it.
    pub(super) kept: HashMap<ValueId, Kept>,
    pub(super) tables: HashMap<(UnOp, Option<String>, FloatFormat), ActTable>,
}

/// The form a weight stack is kept in alone.
#[derive(Clone, Debug)]
pub(super) enum Kept {
    /// As integers (in `Caches::int`; [`intdot::IntWeights::restore`]), with the shape of the
    /// f64 tensor.
    Ints(Vec<usize>),
    /// As the bounded matmul's matrix, per tile column or not (in `Caches::bounded`;
    /// `BoundedWeights::stack`, which knows its grid).
    Bounded(bool),
}

/// A graph prepared for repeated runs: everything that depends only on the weights (padding,
/// rounding and quantizing them, rearranging tile stacks for the matmul, activation tables) is
/// computed by the first [`Session::run`] and reused by the next ones. Every run must use the
/// weights of the first (only the inputs and the batch size may change); [`super::execute`] is one
/// run of a fresh session. With the environment variable `NNPC_EXEC_PROFILE` set, every run
/// prints the time spent per kind of op on stderr.
pub struct Session<'g> {
    graph: GraphRef<'g>,
    opts: ExecOptions,
    dev: Device,
    /// The GPU of `DeviceKind::Cuda`.
    gpu: Option<Arc<gpu::Gpu>>,
    /// The graph's plan ([`SwGraph::plan`]): which nodes are constant, the product candidates.
    plan: Arc<Plan>,
    /// Constant values a non-constant node, a check or a trace reads: what a warm run needs
    /// (the plan's and the traced ones).
    keep: Vec<bool>,
    /// The kept constant values, once computed.
    consts: Vec<Option<Tensor>>,
    /// Kept constant values that only products read, as their matrix: `(rows, cols)` of
    /// those products. The session keeps them as integers only where it can restore them
    /// (`Executor::keep_as_ints`): a quarter of the memory; or, prepared in one pass, as the
    /// bounded matmul's matrix alone where every product reads them so (`bounded`,
    /// `Executor::prepare_bounded`).
    stacks: Vec<Option<(usize, usize)>>,
    /// The constant weight stacks that [`prepare`] computes in one pass from the host's
    /// weights (as integers where the kernel runs, else in their matmul's layout or as f64),
    /// the input chains it computes in one pass from the host's inputs, and the nodes it
    /// skips.
    prepared: prepare::Plan,
    /// For the float path, the plan's stacks whose every product takes the chunked matmul
    /// with one chunk and dtype: those, which the session prepares straight into that
    /// matmul's layout and keeps in it alone.
    arranged: Vec<Option<(usize, DType)>>,
    /// The stacks whose every product takes the bounded matmul in one layout (per tile
    /// column or not): by node, that layout.
    bounded: Vec<Option<bool>>,
    /// The format each value is already rounded to, where the graph shows one.
    rounded: Vec<Option<FloatFormat>>,
    /// `quantize` nodes that only products read, as their vector, in a BFP format the
    /// integer kernel's integers come straight from ([`quant::BfpInts`]): where the kernel
    /// runs, the run quantizes them to those integers in one pass, and makes their f64 value
    /// only if a product needs it.
    to_ints: Vec<Option<quant::BfpInts>>,
    /// `concat` nodes that only such `quantize` nodes read: where the kernel runs, those
    /// quantize the concat's parts tile by tile ([`Executor::quantize_parts_to_ints`](super::executor::Executor::quantize_parts_to_ints); a
    /// convolution's window holds each pixel's tile several times) and the concat itself is
    /// made only if one of them falls back to its f64 value.
    through: Vec<bool>,
    /// The evaluation order, the plan's or products first on a GPU ([`Schedule::new`]), with
    /// the last uses of the concats' parts that a run may skip (`through`).
    schedule: Schedule,
    /// The fused regions of the order, and which of their values become tensors.
    regions: Vec<fused::Region>,
    /// Bytes per batch item of the values a run holds at once, at most ([`peak_item_bytes`]).
    item_bytes: usize,
    /// Whether the products' weights are at most [`SMALL_WEIGHTS`]: then warm runs go in
    /// shards ([`Session::shards`]).
    small: bool,
    /// The values a run hands back in `Execution::written`: every `v_wr`'s with
    /// `keep_writes`.
    traced: HashSet<ValueId>,
    /// The values a run scans for NaN/Inf as it computes them (`nonfinite = "error"`), and
    /// what the first run found in the constant ones (weights), which later runs reuse.
    checks: finite::Checks,
    const_found: finite::Found,
    warm: bool,
    caches: Caches,
}

/// The graph a session runs: borrowed from its caller, or shared with an owner that keeps the
/// session (an embedded [`crate::module::FirmwareModule`]).
enum GraphRef<'g> {
    Borrowed(&'g SwGraph),
    Shared(Arc<SwGraph>),
}

impl std::ops::Deref for GraphRef<'_> {
    type Target = SwGraph;

    fn deref(&self) -> &SwGraph {
        match self {
            GraphRef::Borrowed(g) => g,
            GraphRef::Shared(g) => g,
        }
    }
}

/// A session on a GPU frees its tensors and caches there: CUDA frees memory in the calling
/// thread's current context, and a session may be dropped on any thread.
impl Drop for Session<'_> {
    fn drop(&mut self) {
        if let Some(gpu) = &self.gpu {
            // An error here surfaces at the context's next call, as CUDA's free errors do.
            let _ = gpu.bind_to_thread();
        }
    }
}

impl Session<'static> {
    /// A session that shares ownership of its graph, so it can live as long as its owner.
    pub fn shared(graph: Arc<SwGraph>, opts: &ExecOptions) -> Result<Session<'static>, ExecError> {
        Session::open(GraphRef::Shared(graph), opts)
    }
}

impl<'g> Session<'g> {
    /// Validate `graph` and open its device.
    pub fn new(graph: &'g SwGraph, opts: &ExecOptions) -> Result<Session<'g>, ExecError> {
        Session::open(GraphRef::Borrowed(graph), opts)
    }

    fn open(owner: GraphRef<'g>, opts: &ExecOptions) -> Result<Session<'g>, ExecError> {
        let graph: &SwGraph = &owner;
        graph.validate()?;
        let gpu = match opts.device {
            DeviceKind::Cpu => None,
            DeviceKind::Cuda => Some(gpu::Gpu::open()?),
        };
        // What the graph alone decides (constants, order, regions, product candidates) is
        // its plan; the session adds what its options and the weights' data decide.
        let graph_plan = graph.plan().clone();
        let constant = &graph_plan.constant;
        // The values a run hands back or scans: every `v_wr`'s for traces, and those the
        // target's `nonfinite = "error"` checks. Each is made whole (never only inside a
        // prepared stack or a skipped concat); only a fused region's checked values stay in
        // its scratch rows, scanned there (`fused::RegionPass::run`). The plan leaves out the
        // checked ones already; the traced ones are left out here.
        let traced: HashSet<ValueId> = written_values(graph, opts).into_iter().collect();
        let handed: HashSet<ValueId> = traced
            .iter()
            .copied()
            .chain(graph.checks.iter().map(|c| c.value))
            .collect();
        let mut keep = graph_plan.keep.clone();
        let mut product_only = graph_plan.stacks.clone();
        for v in &traced {
            keep[v.index()] |= constant[v.index()];
            product_only[v.index()] = None;
        }
        let mut schedule = match opts.products_first {
            true => Schedule::new(graph, constant, true),
            false => graph_plan.schedule.clone(),
        };
        // Every constant stack that only products read, kept or not (a product of constants
        // reads its stack once), is prepared in one pass; the kept ones may be kept as integers.
        let prepared = prepare::plan(graph, &product_only, &handed);
        let arranged = chunked_stacks(graph, &prepared);
        let bounded = bounded_stacks(graph);
        // On a GPU the vectors stay values there: none is quantized straight to host integers.
        let to_ints = match gpu {
            Some(_) => vec![None; graph.nodes.len()],
            None => quantized_vectors(graph, &graph_plan.vectors, &traced),
        };
        let through = concats_to_ints(graph, constant, &to_ints, &handed);
        extend_last_uses(graph, &mut schedule, &through);
        // On a GPU every MFU op is a candle op of its own (`fused::MfuOp`'s `cuda_fwd`).
        let regions = match opts.unfused || gpu.is_some() {
            true => Vec::new(),
            false => fused::regions(&schedule, &traced),
        };
        let item_bytes = peak_item_bytes(
            graph,
            &schedule.order,
            constant,
            &schedule.last_use,
            &traced,
        );
        let stacks = product_only
            .into_iter()
            .zip(&keep)
            .map(|(s, &k)| s.filter(|_| k))
            .collect();
        let rounded = rounded::rounded_formats(&graph.nodes);
        let small = graph_plan.weight_elements <= SMALL_WEIGHTS;
        let checks = finite::Checks::new(graph);
        let len = graph.nodes.len();
        Ok(Session {
            graph: owner,
            opts: *opts,
            dev: gpu.as_ref().map_or(Device::Cpu, |g| g.device().clone()),
            gpu,
            consts: vec![None; len],
            plan: graph_plan,
            schedule,
            regions,
            item_bytes,
            keep,
            stacks,
            prepared,
            arranged,
            bounded,
            rounded,
            to_ints,
            through,
            small,
            traced,
            checks,
            const_found: finite::Found::default(),
            warm: false,
            caches: Caches::default(),
        })
    }

    /// The name of the GPU the graph runs on (`DeviceKind::Cuda`).
    pub fn gpu_name(&self) -> Option<&str> {
        self.gpu.as_deref().map(gpu::Gpu::name)
    }
}

/// Weights (elements of the distinct weight stacks that products read) of a graph whose warm
/// runs go in shards, at most ([`Session::small`]): 1 Mi elements are 2 MiB as the kernel's
/// integers, which every shard then reads from the shared caches.
const SMALL_WEIGHTS: usize = 1 << 20;

/// A fast path a node took ([`Execution`](super::Execution)'s counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Path {
    IntKernel,
    Bytes,
    Gpu,
    Slices,
    Bounded,
    OnePass,
    QuantizedToInts,
    ConcatSkipped,
}

/// The nodes of a run that took each fast path.
pub(super) type Paths = BTreeSet<(Path, usize)>;

/// How many nodes of `paths` took each path.
fn counts(paths: &Paths) -> PathCounts {
    let taken = |path| paths.iter().filter(|(p, _)| *p == path).count();
    PathCounts {
        int_products: taken(Path::IntKernel),
        byte_products: taken(Path::Bytes),
        gpu_products: taken(Path::Gpu),
        sliced_products: taken(Path::Slices),
        bounded_products: taken(Path::Bounded),
        one_pass_stacks: taken(Path::OnePass),
        quantized_to_ints: taken(Path::QuantizedToInts),
        concats_skipped: taken(Path::ConcatSkipped),
    }
}

/// What one pass over some items of a batch produced.
#[derive(Default)]
pub(super) struct Part {
    pub(super) outputs: Outputs,
    pub(super) written: HashMap<ValueId, WrittenValue>,
    /// Under `nonfinite = "error"`: the NaNs and infinities the checks found in the part's
    /// values, and in the constants it computed (a first run).
    pub(super) found: finite::Found,
    const_found: finite::Found,
    pub(super) paths: Paths,
    /// Constant values to keep for the session (computed by a first run).
    consts: Vec<(usize, Tensor)>,
}

#[cfg(test)]
mod tests;
