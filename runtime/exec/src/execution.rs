//! What a run hands back: the outputs, the written values, the paths the products took.

use nnp_host::Outputs;
use nnp_lowering::swgraph::ValueId;
use std::collections::HashMap;

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
    /// Shards of items the run went in, side by side ([`Session::run`](crate::Session::run)): 1 for
    /// the whole batch (or chunk) in one pass, else the most of any chunk. A sharded run counts a
    /// node on a path where every shard took it.
    pub shards: usize,
    /// Chunks of items the run went in, one after the other
    /// ([`Session::chunks`](crate::Session::chunks)): 1 for a batch that fits one.
    pub chunks: usize,
}

/// The nodes of a run that took each fast path ([`Execution::paths`]). A sharded or chunked
/// run counts a node on a path where every shard and chunk took it; `+` adds the counts of
/// several runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounts {
    /// Products (`TiledMatVec` nodes) computed on the integer kernel ([`intdot`](crate::intdot));
    /// the others took a float path.
    pub int_products: usize,
    /// Of those, the products whose weights and vector the CPU took as bytes, on the AVX-512 VNNI
    /// kernel ([`intdot::Kernel::Vnni`](crate::intdot::Kernel::Vnni): BFP 8 and narrower; sliced
    /// products not counted).
    pub byte_products: usize,
    /// Of those, the products computed as one with others of their weight stack, over their
    /// vectors' items stacked (a warm pass of few items: `session/steps.rs`, stacked steps).
    pub stacked_products: usize,
    /// Of those, the products computed on the GPU (`DeviceKind::Cuda`).
    pub gpu_products: usize,
    /// Of those, the products whose operands the kernel took in slices (fp8 and MX formats:
    /// [`intdot::SlicedWeights`](crate::intdot::SlicedWeights)).
    pub sliced_products: usize,
    /// Products on the float path's one f64 matmul with proven roundings (`FloatPath::Bounded`:
    /// float formats whose products, not tiles, are exact in f64).
    pub bounded_products: usize,
    /// Weight stacks prepared in one pass from the host's weights (`prepare`).
    pub one_pass_stacks: usize,
    /// Vectors quantized straight to the integer kernel's integers (BFP `quantize` nodes that only
    /// products read: [`intdot::IntVector::quantized`](crate::intdot::IntVector::quantized)).
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
            stacked_products: self.stacked_products + o.stacked_products,
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
            "{} products on the integer kernel ({} on bytes, {} stacked, {} on the GPU, {} on \
             integer slices), {} on the float path's bounded matmul, {} weight stacks prepared in one pass, {} vectors \
             quantized straight to integers ({} of them from a concat's parts)",
            self.int_products,
            self.byte_products,
            self.stacked_products,
            self.gpu_products,
            self.sliced_products,
            self.bounded_products,
            self.one_pass_stacks,
            self.quantized_to_ints,
            self.concats_skipped
        )
    }
}
