//! Sessions: a graph prepared for repeated runs. A session is a plan and its state: the
//! steps of a pass, decided once when it opens from the graph's plan and the run's options
//! (`steps`, on the analyses in `analysis`), and what it keeps between runs (constants,
//! caches). A run takes its batch in chunks and shards (`run`), each one pass over the steps
//! (`pass`).

mod analysis;
mod awake;
mod pass;
mod run;
mod steps;

use super::state::Caches;
use super::{DeviceKind, ExecError, ExecOptions, WrittenValue, finite, gpu, intdot, rounded};
use crate::state::Paths;
use candle_core::{Device, Tensor};
use nnp_host::Outputs;
use nnp_lowering::swgraph::{NodeMap, Plan, SwGraph, ValueId};
use nnp_numerics::FloatFormat;
pub use run::{
    CHUNK_BYTES, MAX_CHUNK_BYTES, MIN_CHUNK_ITEMS, default_chunk_items, max_chunk_items,
};
use std::collections::HashMap;
use std::sync::Arc;

/// A graph prepared for repeated runs: everything that depends only on the weights (padding,
/// rounding and quantizing them, rearranging tile stacks for the matmul, activation tables) is
/// computed by the first [`Session::run`] and reused by the next ones. Every run must use the
/// weights of the first (only the inputs and the batch size may change) until
/// [`Session::change_weights`] lets the next take others; [`super::execute`] is one
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
    /// The steps of a first run and of the warm ones.
    steps: steps::Steps,
    /// The format each value is a fixed point of the executor's fast rounder of, where the
    /// graph shows one ([`rounded`]).
    rounded: NodeMap<Option<FloatFormat>>,
    /// Whether products take the integer kernel (or the GPU's integers).
    int_products: bool,
    /// Whether warm runs go in shards ([`Session::shards`]): the products' weights are at
    /// most [`SMALL_WEIGHTS`].
    shard_warm_runs: bool,
    /// The kept constant values, once computed.
    consts: NodeMap<Option<Tensor>>,
    /// What the first run's checks found in the constant values (weights), which later runs
    /// reuse.
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
        Session::open(GraphRef::Shared(graph), opts, None)
    }

    /// [`Session::recording`] on a graph it shares ownership of ([`Session::shared`]).
    pub fn shared_recording(
        graph: Arc<SwGraph>,
        opts: &ExecOptions,
        values: &[ValueId],
    ) -> Result<Session<'static>, ExecError> {
        Session::open(GraphRef::Shared(graph), opts, Some(values))
    }
}

impl<'g> Session<'g> {
    /// Validate `graph` and open its device.
    pub fn new(graph: &'g SwGraph, opts: &ExecOptions) -> Result<Session<'g>, ExecError> {
        Session::open(GraphRef::Borrowed(graph), opts, None)
    }

    /// A session whose runs hand back the values `values` in [`crate::Execution::written`]
    /// (what the training's backward pass reads), each made whole, and compute the rest as
    /// plain runs do (`keep_values` hands back every value).
    pub fn recording(
        graph: &'g SwGraph,
        opts: &ExecOptions,
        values: &[ValueId],
    ) -> Result<Session<'g>, ExecError> {
        Session::open(GraphRef::Borrowed(graph), opts, Some(values))
    }

    fn open(
        owner: GraphRef<'g>,
        opts: &ExecOptions,
        hand_back: Option<&[ValueId]>,
    ) -> Result<Session<'g>, ExecError> {
        let graph: &SwGraph = &owner;
        graph.validate()?;
        let gpu = match opts.device {
            DeviceKind::Cpu => None,
            DeviceKind::Cuda => Some(gpu::Gpu::open()?),
        };
        // What the graph alone decides (constants, order, regions, product candidates) is
        // its plan; the steps add what the options decide, the runs what the data does.
        let plan = graph.plan().clone();
        let int_products = !opts.float_matmul
            && (gpu.is_some() || intdot::simd())
            && intdot::supports(graph.native);
        let cx = steps::Context {
            opts,
            hand_back,
            int_products,
            gpu: gpu.is_some(),
        };
        let steps = steps::Steps::new(graph, &plan, &cx);
        Ok(Session {
            opts: *opts,
            dev: gpu.as_ref().map_or(Device::Cpu, |g| g.device().clone()),
            gpu,
            consts: NodeMap::filled(graph.nodes.len(), None),
            rounded: rounded::rounded_formats(&plan),
            shard_warm_runs: plan.weight_elements <= SMALL_WEIGHTS,
            plan,
            steps,
            int_products,
            const_found: finite::Found::default(),
            warm: false,
            caches: Caches::default(),
            graph: owner,
        })
    }

    /// Let the next run take other weights: what the session computed from its weights (the
    /// constants, the prepared weight stacks and what their checks found) is dropped, so the
    /// next run is a first run again; the steps, decided when the session opened, stay. A
    /// training loop's session, whose weights change every step, pays for the weights each
    /// step and for the planning once.
    pub fn change_weights(&mut self) {
        // Whatever the last run left, a failed first run's caches too.
        self.consts = NodeMap::filled(self.graph.nodes.len(), None);
        self.const_found = finite::Found::default();
        // The activation tables depend on the op and format alone: they stay.
        self.caches = Caches {
            tables: std::mem::take(&mut self.caches.tables),
            ..Caches::default()
        };
        self.warm = false;
    }

    /// The graph the session runs.
    pub fn graph(&self) -> &SwGraph {
        &self.graph
    }

    /// The name of the GPU the graph runs on (`DeviceKind::Cuda`).
    pub fn gpu_name(&self) -> Option<&str> {
        self.gpu.as_deref().map(gpu::Gpu::name)
    }
}

/// Weights (elements of the distinct weight stacks that products read) of a graph whose warm
/// runs go in shards, at most ([`Session::shard_warm_runs`]): 1 Mi elements are 2 MiB as the kernel's
/// integers, which every shard then reads from the shared caches.
const SMALL_WEIGHTS: usize = 1 << 20;

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
    consts: Vec<(ValueId, Tensor)>,
}

#[cfg(test)]
mod tests;
