//! What one pass over some items holds, below every kind of work it does: the executor (the
//! pass's values and handles), the caches kept between runs, the fast paths taken and the
//! profile. The session's steps, the executor's evaluation and the products all read these;
//! this module reads none of them.

use super::mfu::ActTable;
use super::products::bounded::BoundedWeights;
use super::{ExecError, PathCounts, gpu, intdot, quant};
use candle_core::{DType, Device, Tensor};
use nnp_host::HostData;
use nnp_lowering::swgraph::{NodeMap, SwGraph, UnOp, ValueId};
use nnp_numerics::FloatFormat;
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

pub(crate) enum Failure {
    Candle(candle_core::Error),
    Exec(ExecError),
}

impl From<candle_core::Error> for Failure {
    fn from(e: candle_core::Error) -> Self {
        Failure::Candle(e)
    }
}

impl From<ExecError> for Failure {
    fn from(e: ExecError) -> Self {
        Failure::Exec(e)
    }
}

/// One pass of the graph over some items: what every kind of work reads and writes. Its
/// evaluation of nodes is in `executor`, the products' in `products`.
pub(crate) struct Executor<'a> {
    pub(crate) graph: &'a SwGraph,
    pub(crate) data: &'a HostData,
    /// The items of `data` this pass computes (a shard's, or all of them).
    pub(crate) items: Range<usize>,
    pub(crate) dev: Device,
    /// The graph's native dimension.
    pub(crate) native: usize,
    /// The values alive, by node (kept constants from the start).
    pub(crate) values: NodeMap<Option<Tensor>>,
    /// The plan's constant nodes.
    pub(crate) constant: &'a NodeMap<bool>,
    /// The format each value is a fixed point of, where one is known ([`super::rounded`]).
    pub(crate) rounded: &'a NodeMap<Option<FloatFormat>>,
    /// Weight-side work kept between runs.
    pub(crate) caches: &'a mut Caches,
    /// Vector-side work of this pass.
    pub(crate) vectors: VectorCaches,
    /// Whether products may take the integer kernel (or the GPU's integers).
    pub(crate) int_products: bool,
    /// The nodes that took each fast path in this pass.
    pub(crate) paths: Paths,
    /// The GPU that computes integer products where it gives the same bits.
    pub(crate) gpu: Option<&'a gpu::Gpu>,
    /// Time per kind of work (`NNPC_EXEC_PROFILE`).
    pub(crate) prof: Profile,
}

/// The vectors of one pass in the forms products read them, made once per pass.
#[derive(Default)]
pub(crate) struct VectorCaches {
    /// Rearranged for the chunked matmul, by (value, chunk).
    pub(crate) arranged: HashMap<(ValueId, usize), Tensor>,
    /// As integer mantissas (`None`: they do not fit).
    pub(crate) ints: HashMap<ValueId, Option<Arc<intdot::IntVector>>>,
    /// Single tiles of values quantized to integers, by format, then by (value, tile): the
    /// columns `Executor::quantize_parts_to_ints` assembles vectors from.
    pub(crate) tiles: Vec<(quant::BfpInts, TileInts)>,
    /// As integers on the GPU (`None`: they have none).
    pub(crate) gpu: HashMap<ValueId, Option<Arc<gpu::GpuVector>>>,
}

/// Tiles of values as integers, by (value, tile): one column each ([`intdot::IntVector`] of
/// one tile column; `None`: the tile has no integer form).
type TileInts = HashMap<(ValueId, usize), Option<Arc<intdot::IntVector>>>;

/// Seconds and counts per line of the profile; `None` when not profiling.
pub(crate) type Profile = Option<Vec<(&'static str, f64, usize)>>;

/// Weight-side work kept between runs: quantized weight stacks rearranged for the matmul,
/// exact slices of weights, activation tables. Handles only: a clone shares the data.
#[derive(Default, Clone)]
pub(crate) struct Caches {
    /// Quantized weight stacks rearranged for the chunked matmul, by (stack, chunk, dtype): one
    /// stack may feed an f32 matmul in one chain and an f64 one in another.
    pub(crate) arranged: HashMap<(ValueId, usize, DType), Tensor>,
    /// Weight stacks split into exact slices (rearranged), `None` when they cannot be.
    pub(crate) sliced: HashMap<ValueId, Option<Vec<Tensor>>>,
    /// Weight stacks as f64 matrices for the bounded float path, by (stack, per tile column).
    pub(crate) bounded: HashMap<(ValueId, bool), Arc<BoundedWeights>>,
    /// Weight stacks as integer mantissas, `None` when they do not fit.
    pub(crate) int: HashMap<ValueId, Option<Arc<intdot::IntWeights>>>,
    /// Weight stacks that do not fit as integer slices, `None` when they take too many.
    pub(crate) int_sliced: HashMap<ValueId, Option<Arc<intdot::SlicedWeights>>>,
    /// Those integers on the GPU.
    pub(crate) gpu: HashMap<ValueId, Arc<gpu::GpuWeights>>,
    /// Weight stacks kept in another form only, which gives their f64 tensor back where a
    /// product needs it.
    pub(crate) kept: HashMap<ValueId, Kept>,
    pub(crate) tables: HashMap<(UnOp, Option<String>, FloatFormat), ActTable>,
}

/// The form a weight stack is kept in alone.
#[derive(Clone, Debug)]
pub(crate) enum Kept {
    /// As integers (in `Caches::int`; [`intdot::IntWeights::restore`]), with the shape of the
    /// f64 tensor.
    Ints(Vec<usize>),
    /// As the bounded matmul's matrix, per tile column or not (in `Caches::bounded`;
    /// `BoundedWeights::stack`, which knows its grid).
    Bounded { per_tile: bool },
}

/// A fast path a node took ([`Execution`](super::Execution)'s counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Path {
    IntKernel,
    Bytes,
    Stacked,
    Gpu,
    Slices,
    Bounded,
    OnePass,
    QuantizedToInts,
    ConcatSkipped,
}

/// The nodes of a run that took each fast path.
pub(crate) type Paths = BTreeSet<(Path, usize)>;

/// How many nodes of `paths` took each path.
pub(crate) fn counts(paths: &Paths) -> PathCounts {
    let taken = |path| paths.iter().filter(|(p, _)| *p == path).count();
    PathCounts {
        int_products: taken(Path::IntKernel),
        byte_products: taken(Path::Bytes),
        stacked_products: taken(Path::Stacked),
        gpu_products: taken(Path::Gpu),
        sliced_products: taken(Path::Slices),
        bounded_products: taken(Path::Bounded),
        one_pass_stacks: taken(Path::OnePass),
        quantized_to_ints: taken(Path::QuantizedToInts),
        concats_skipped: taken(Path::ConcatSkipped),
    }
}

/// Add the time since `t0` and `count` nodes to the profile line `name` (when profiling).
pub(crate) fn tally(prof: &mut Profile, name: &'static str, t0: std::time::Instant, count: usize) {
    let Some(prof) = prof else { return };
    let dt = t0.elapsed().as_secs_f64();
    match prof.iter_mut().find(|p| p.0 == name) {
        Some(p) => {
            p.1 += dt;
            p.2 += count;
        }
        None => prof.push((name, dt, count)),
    }
}
