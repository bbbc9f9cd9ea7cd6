//! Execution of a [`SwGraph`] with candle-core, batched.
//!
//! Every value is an f64 candle tensor with a leading batch dimension (B for values that depend
//! on inputs, 1 for weights and constants; binary ops broadcast). f64 holds every value of
//! every supported format exactly. Plain candle ops move data (pad, slice, concatenate,
//! permute) and compute the per-chunk dot products (f64 matmul, exact by the argument in
//! [`matmul`]); everything that rounds runs as a custom op whose kernel is in [`quant`],
//! [`mfu`], [`matmul`] and [`exact`] (candle's own `round` rounds half away from zero, and it
//! has no exact accumulation).
//!
//! With the `cuda` feature and [`DeviceKind::Cuda`] the integer products run on the GPU
//! ([`gpu`]); the rest of the graph stays on the host.

pub mod baseline;
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

use crate::host::{HostData, Outputs, Progress, Tensor as HostTensor};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use matmul::{MIN_CHUNK, MatVec};
use mfu::ActTable;
use nnp_grammar::Span;
use nnp_lowering::swgraph::{GraphError, Op, SwGraph, TileLayout, Ty, UnOp, ValueId};
use nnp_numerics::{FloatFormat, Format};
use rayon::prelude::*;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

/// Where the graph runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceKind {
    #[default]
    Cpu,
    /// The integer products on the first CUDA device ([`gpu`], needs the `cuda` feature);
    /// every other op on the host.
    Cuda,
}

/// Options of [`execute`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecOptions {
    pub device: DeviceKind,
    /// Keep the value of every `v_wr` (the graph's write records) for traces.
    pub keep_writes: bool,
    /// Take the float BLAS path for every product even where the integer kernel ([`intdot`])
    /// applies (for comparisons and tests: the results are the same bits).
    pub float_matmul: bool,
    /// Evaluate in the products-first order ([`fused::schedule`]), which a session on a GPU
    /// always uses; on the CPU for tests (the results are the same bits).
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
        let b = if self.batch == 1 { 0 } else { b };
        &self.data[b * self.lanes..(b + 1) * self.lanes]
    }
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct Execution {
    pub outputs: Outputs,
    /// With `keep_writes`: the value of every written value id.
    pub written: HashMap<ValueId, WrittenValue>,
    /// Products (`TiledMatVec` nodes) this run computed on the integer kernel ([`intdot`]);
    /// the others took a float path.
    pub int_products: usize,
    /// Of those, the products computed on the GPU (`DeviceKind::Cuda`).
    pub gpu_products: usize,
    /// Of those, the products whose operands the kernel took in slices (fp8 and MX formats:
    /// [`intdot::SlicedWeights`]).
    pub sliced_products: usize,
    /// Weight stacks this run prepared in one pass from the host's weights (`prepare`).
    pub one_pass_stacks: usize,
    /// Vectors this run quantized straight to the integer kernel's integers (BFP `quantize`
    /// nodes that only products read: [`intdot::IntVector::quantized`]).
    pub quantized_to_ints: usize,
    /// Of those, the vectors assembled from their concat's parts, tile by tile, without the
    /// concat ([`Session::through`]).
    pub concats_skipped: usize,
    /// Shards of items the run went in, side by side ([`Session::run`]): 1 for the whole
    /// batch (or chunk) in one pass, else the most of any chunk. A sharded run counts a node
    /// on a path above where every shard took it.
    pub shards: usize,
    /// Chunks of items the run went in, one after the other ([`Session::chunks`]): 1 for a
    /// batch that fits one.
    pub chunks: usize,
}

/// Why a graph could not be executed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(
        "no host tensor `{name}` for the graph's {kind}; help: pass a weights/inputs file that \
         holds it, or run without files for seeded random data"
    )]
    Missing { name: String, kind: &'static str },
    #[error("host tensor `{name}` has shape {found:?}, the graph expects {expected:?}")]
    Shape {
        name: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error(transparent)]
    Table(#[from] mfu::TableError),
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("{0}")]
    Device(String),
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

    /// What the user can do about a runtime error of the firmware.
    pub fn help(&self) -> Option<&'static str> {
        match self {
            ExecError::NonFinite { .. } => Some(crate::host::NONFINITE_HELP),
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

/// Weight-side work kept between runs: quantized weight stacks rearranged for the matmul,
/// exact slices of weights, activation tables. Handles only: a clone shares the data.
#[derive(Default, Clone)]
struct Caches {
    /// Quantized weight stacks rearranged for the chunked matmul, by (stack, chunk, dtype): one
    /// stack may feed an f32 matmul in one chain and an f64 one in another.
    arranged: HashMap<(ValueId, usize, DType), Tensor>,
    /// Weight stacks split into exact slices (rearranged), `None` when they cannot be.
    sliced: HashMap<ValueId, Option<Vec<Tensor>>>,
    /// Weight stacks as integer mantissas, `None` when they do not fit.
    int: HashMap<ValueId, Option<Arc<intdot::IntWeights>>>,
    /// Weight stacks that do not fit as integer slices, `None` when they take too many.
    int_sliced: HashMap<ValueId, Option<Arc<intdot::SlicedWeights>>>,
    /// Those integers on the GPU.
    gpu: HashMap<ValueId, Arc<gpu::GpuWeights>>,
    /// Weight stacks kept as integers only (in `int`), by the shape of their f64 tensor:
    /// [`intdot::IntWeights::restore`] gives the tensor back where a product needs it.
    as_ints: HashMap<ValueId, Vec<usize>>,
    tables: HashMap<(UnOp, Option<String>, FloatFormat), ActTable>,
}

/// A graph prepared for repeated runs: everything that depends only on the weights (padding,
/// rounding and quantizing them, rearranging tile stacks for the matmul, activation tables) is
/// computed by the first [`Session::run`] and reused by the next ones. Every run must use the
/// weights of the first (only the inputs and the batch size may change); [`execute`] is one
/// run of a fresh session. With the environment variable `NNPC_EXEC_PROFILE` set, every run
/// prints the time spent per kind of op on stderr.
pub struct Session<'g> {
    graph: &'g SwGraph,
    opts: ExecOptions,
    dev: Device,
    /// The GPU of `DeviceKind::Cuda`.
    gpu: Option<Arc<gpu::Gpu>>,
    /// Nodes whose value depends on no input (batch 1, the same in every run).
    constant: Vec<bool>,
    /// Constant values a non-constant node, an output or a trace reads: what a warm run needs.
    keep: Vec<bool>,
    /// The kept constant values, once computed.
    consts: Vec<Option<Tensor>>,
    /// Kept constant values that only products read, as their matrix: `(rows, cols)` of
    /// those products. The session keeps them as integers only where it can restore them
    /// (`Executor::keep_as_ints`): a quarter of the memory.
    stacks: Vec<Option<(usize, usize)>>,
    /// The constant weight stacks that [`prepare`] computes in one pass from the host's
    /// weights (as integers where the kernel runs, else in their matmul's layout or as f64),
    /// the input chains it computes in one pass from the host's inputs, and the nodes it
    /// skips.
    plan: prepare::Plan,
    /// For the float path, the plan's stacks whose every product takes the chunked matmul
    /// with one chunk and dtype: those, which the session prepares straight into that
    /// matmul's layout and keeps in it alone.
    arranged: Vec<Option<(usize, DType)>>,
    /// The format each value is already rounded to, where the graph shows one.
    rounded: Vec<Option<FloatFormat>>,
    /// `quantize` nodes that only products read, as their vector, in a BFP format the
    /// integer kernel's integers come straight from ([`quant::BfpInts`]): where the kernel
    /// runs, the run quantizes them to those integers in one pass, and makes their f64 value
    /// only if a product needs it.
    to_ints: Vec<Option<quant::BfpInts>>,
    /// `concat` nodes that only such `quantize` nodes read: where the kernel runs, those
    /// quantize the concat's parts tile by tile ([`Executor::quantize_parts_to_ints`]; a
    /// convolution's window holds each pixel's tile several times) and the concat itself is
    /// made only if one of them falls back to its f64 value.
    through: Vec<bool>,
    /// The evaluation order ([`fused::schedule`]).
    order: Vec<usize>,
    /// Position in `order` of the last reader of every value, so tensors are freed as soon as
    /// possible.
    last_use: Vec<usize>,
    /// Bytes per batch item of the values a run holds at once, at most ([`peak_item_bytes`]).
    item_bytes: usize,
    /// Told how many items each chunk of a run covered, after it ([`Session::set_progress`]).
    progress: Option<Progress>,
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

impl<'g> Session<'g> {
    /// Validate `graph` and open its device.
    pub fn new(graph: &'g SwGraph, opts: &ExecOptions) -> Result<Session<'g>, ExecError> {
        graph.validate()?;
        let gpu = match opts.device {
            DeviceKind::Cpu => None,
            DeviceKind::Cuda => Some(gpu::Gpu::open()?),
        };
        let len = graph.nodes.len();
        let mut constant = vec![false; len];
        let mut keep = vec![false; len];
        for (i, node) in graph.nodes.iter().enumerate() {
            let inputs = node.op.inputs();
            constant[i] = match &node.op {
                Op::Input { .. } | Op::Output { .. } => false,
                _ => inputs.iter().all(|v| constant[v.index()]),
            };
            if !constant[i] {
                for v in inputs {
                    keep[v.index()] |= constant[v.index()];
                }
            }
        }
        // The values a run hands back or scans: every `v_wr`'s for traces, and those the
        // target's `nonfinite = "error"` checks. Each is made whole (never only inside a
        // prepared stack or a skipped concat); only a fused region's checked values stay in
        // its scratch rows, scanned there (`fused::RegionPass::run`).
        let handed: HashSet<ValueId> = written_values(graph, opts.keep_writes)
            .chain(graph.checks.iter().map(|c| c.value))
            .collect();
        for v in &handed {
            keep[v.index()] |= constant[v.index()];
        }
        let order = fused::schedule(graph, &constant, gpu.is_some() || opts.products_first);
        // Every constant stack that only products read, kept or not (a product of constants
        // reads its stack once), goes to the plan; the kept ones may be kept as integers.
        let product_only = weight_stacks(graph, &constant, &handed);
        let plan = prepare::plan(graph, &product_only, &handed);
        let arranged = chunked_stacks(graph, &plan);
        let to_ints = quantized_vectors(graph, &constant, &keep, &handed);
        let through = concats_to_ints(graph, &constant, &to_ints, &handed);
        let mut last_use = vec![0usize; len];
        for (pos, &i) in order.iter().enumerate() {
            for v in reads(graph, &through, i) {
                last_use[v.index()] = pos;
            }
        }
        let traced: HashSet<ValueId> = written_values(graph, opts.keep_writes).collect();
        let item_bytes = peak_item_bytes(graph, &order, &constant, &last_use, &traced);
        // The distinct weight stacks of the products, in elements.
        let weights: HashMap<ValueId, usize> = graph
            .nodes
            .iter()
            .filter_map(|node| product_spec(&node.op, graph.native))
            .map(|(s, _, w)| (w, s.rows * s.cols * s.n * s.n))
            .collect();
        let stacks = product_only
            .into_iter()
            .zip(&keep)
            .map(|(s, &k)| s.filter(|_| k))
            .collect();
        Ok(Session {
            graph,
            opts: *opts,
            dev: Device::Cpu,
            gpu,
            order,
            last_use,
            item_bytes,
            progress: None,
            constant,
            keep,
            consts: vec![None; len],
            stacks,
            plan,
            arranged,
            rounded: rounded::rounded_formats(&graph.nodes),
            to_ints,
            through,
            small: weights.values().sum::<usize>() <= SMALL_WEIGHTS,
            traced,
            checks: finite::Checks::new(graph),
            const_found: finite::Found::default(),
            warm: false,
            caches: Caches::default(),
        })
    }

    /// The name of the GPU that computes the integer products (`DeviceKind::Cuda`).
    pub fn gpu_name(&self) -> Option<&str> {
        self.gpu.as_deref().map(gpu::Gpu::name)
    }

    /// Tell `progress` how many items each chunk of a run covered, after it (a run of one
    /// chunk reports once, at its end).
    pub fn set_progress(&mut self, progress: Option<Progress>) {
        self.progress = progress;
    }

    /// Run the graph on `data` (`data.batch` input sets), in chunks of items one after the
    /// other ([`Session::chunks`]), with the outputs of the whole batch in the execution. A
    /// warm chunk of a graph with small weights goes in shards of items, one per thread
    /// ([`Session::run_shards`]).
    pub fn run(&mut self, data: &HostData) -> Result<Execution, ExecError> {
        let mut outputs = Outputs::new();
        let run = self.run_each(data, |_, part| {
            append_outputs(&mut outputs, part, data.batch);
            Ok::<_, ExecError>(())
        })?;
        Ok(Execution { outputs, ..run })
    }

    /// Run like [`Session::run`], but hand each chunk's outputs to `sink` with the chunk's
    /// items as soon as the chunk is done, in order, instead of holding the whole batch's: a
    /// run of any batch then holds one chunk's values at a time. The execution returned has
    /// no outputs (written values are merged as in `run`); an error of `sink` stops the run.
    pub fn run_each<E: From<ExecError> + Send>(
        &mut self,
        data: &HostData,
        mut sink: impl FnMut(Range<usize>, Outputs) -> Result<(), E> + Send,
    ) -> Result<Execution, E> {
        // On one of rayon's threads: every op's parallel loop then starts on this thread at
        // once, with idle threads joining as they wake, instead of the caller handing it to
        // the pool and sleeping until it is done (two wake-ups per op, each tens of
        // microseconds on a virtual machine). The GPU binds its context on whichever thread
        // calls it (`gpu`).
        rayon::scope(|_| {
            let chunks = self.chunks(data.batch);
            if std::env::var_os("NNPC_EXEC_PROFILE").is_some() {
                eprintln!(
                    "profile: {} chunk(s) of at most {} items ({} bytes per item at most)",
                    chunks.len(),
                    chunks.iter().map(Range::len).max().unwrap_or(0),
                    self.item_bytes
                );
            }
            let (count, mut shards, mut all) = (chunks.len(), 1, None);
            for items in chunks {
                let mut chunk = None;
                match self.shards(items.clone()) {
                    Some(s) => {
                        shards = shards.max(s.len());
                        for part in self.run_shards(data, s)? {
                            self.merge(&mut chunk, part, items.len());
                        }
                    }
                    None => {
                        let part = self.run_whole(data, items.clone())?;
                        self.merge(&mut chunk, part, items.len());
                    }
                }
                let mut chunk = chunk.unwrap_or_default();
                chunk.found.merge(self.const_found.clone());
                if let Some(e) = chunk.found.error(self.graph) {
                    return Err(e.into());
                }
                let outputs = std::mem::take(&mut chunk.outputs);
                self.merge(&mut all, chunk, data.batch);
                sink(items.clone(), outputs)?;
                if let Some(p) = &self.progress {
                    (p.0)(items.len());
                }
            }
            Ok(self.execution(all, shards, count))
        })
    }

    /// The chunks a run at batch `b` takes: consecutive ranges of nearly equal size, none
    /// over `chunk_items`, or by default over what [`CHUNK_BYTES`] of the values a run holds
    /// at once ([`Session::item_bytes`]) allow, or [`MIN_CHUNK_ITEMS`] if that is more. Every
    /// op computes each item alone, so the bits are those of one pass over the batch. At
    /// least one range, whatever `b`.
    pub fn chunks(&self, b: usize) -> Vec<Range<usize>> {
        let most = self
            .opts
            .chunk_items
            .unwrap_or_else(|| (CHUNK_BYTES / self.item_bytes.max(1)).max(MIN_CHUNK_ITEMS))
            .max(1);
        let count = b.div_ceil(most).max(1);
        (0..count)
            .map(|k| k * b / count..(k + 1) * b / count)
            .collect()
    }

    /// The shards a run takes of the items `items` ([`Session::run_shards`]): a warm run on
    /// the CPU of a graph with [`Session::small`] weights, one shard per thread of at least
    /// [`MIN_SHARD_ITEMS`] items (or `batch_shards`); `None` to run the items whole.
    fn shards(&self, items: Range<usize>) -> Option<Vec<Range<usize>>> {
        let b = items.len();
        let count = match self.opts.batch_shards {
            Some(k) => k.min(b),
            None if self.small => rayon::current_num_threads().min(b / MIN_SHARD_ITEMS),
            None => 1,
        };
        (self.warm && self.gpu.is_none() && count > 1).then(|| {
            (0..count)
                .map(|k| items.start + k * b / count..items.start + (k + 1) * b / count)
                .collect()
        })
    }

    /// The items `items` in one pass (a first run computes and keeps the constants).
    fn run_whole(&mut self, data: &HostData, items: Range<usize>) -> Result<Part, ExecError> {
        let mut caches = std::mem::take(&mut self.caches);
        let part = self.run_items(data, items, &mut caches);
        self.caches = caches;
        let mut part = part?;
        for (i, t) in part.consts.drain(..) {
            self.consts[i] = Some(t);
        }
        self.const_found
            .merge(std::mem::take(&mut part.const_found));
        self.warm = true;
        Ok(part)
    }

    /// A warm run in shards of consecutive items, side by side on rayon's threads: each shard
    /// runs the whole graph on its items with no wait between its ops (a small graph's ops
    /// are microseconds, about what waking a thread costs), on handles to the session's
    /// cached weights. Every op computes each item alone, so the bits are those of one pass
    /// over the batch.
    fn run_shards(
        &mut self,
        data: &HostData,
        shards: Vec<Range<usize>>,
    ) -> Result<Vec<Part>, ExecError> {
        let this = &*self;
        let mut parts = shards
            .into_par_iter()
            .map(|items| {
                let mut caches = this.caches.clone();
                this.run_items(data, items, &mut caches)
                    .map(|part| (part, caches))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // What the first shard added to the caches stays (a warm run rarely adds any).
        if let Some((_, caches)) = parts.first_mut() {
            self.caches = std::mem::take(caches);
        }
        Ok(parts.into_iter().map(|(part, _)| part).collect())
    }

    /// Append `part` (the next items in order) to `all`, the parts so far of `b` items:
    /// outputs ([`append_outputs`]) and written values concatenated (a constant's written
    /// value is one item in every part), and a node counted on a fast path where every part
    /// took it.
    fn merge(&self, all: &mut Option<Part>, part: Part, b: usize) {
        let Some(all) = all else {
            *all = Some(part);
            return;
        };
        append_outputs(&mut all.outputs, part.outputs, b);
        all.found.merge(part.found);
        for (id, w) in &mut all.written {
            if let (false, Some(more)) = (self.constant[id.index()], part.written.get(id)) {
                w.data.extend_from_slice(&more.data);
                w.batch += more.batch;
            }
        }
        all.paths = all.paths.intersection(&part.paths).copied().collect();
    }

    /// The execution of a batch from its parts merged ([`Session::merge`]), in `chunks`
    /// chunks of at most `shards` shards each.
    fn execution(&self, all: Option<Part>, shards: usize, chunks: usize) -> Execution {
        let all = all.unwrap_or_default();
        let count = |path| taken(&all.paths, path);
        Execution {
            int_products: count(Path::IntKernel),
            gpu_products: count(Path::Gpu),
            sliced_products: count(Path::Slices),
            one_pass_stacks: count(Path::OnePass),
            quantized_to_ints: count(Path::QuantizedToInts),
            concats_skipped: count(Path::ConcatSkipped),
            shards,
            chunks,
            outputs: all.outputs,
            written: all.written,
        }
    }

    /// One pass of the graph over the items `items` of `data`, with the session's `caches`.
    fn run_items(
        &self,
        data: &HostData,
        items: Range<usize>,
        caches: &mut Caches,
    ) -> Result<Part, ExecError> {
        let graph = self.graph;
        let warm = self.warm;
        let mut consts = Vec::new();
        let mut ex = Executor {
            g: graph,
            data,
            items,
            dev: self.dev.clone(),
            n: graph.native,
            values: self.consts.clone(),
            constant: &self.constant,
            rounded: &self.rounded,
            caches,
            arranged_x: HashMap::new(),
            int_x: HashMap::new(),
            int_tiles: Vec::new(),
            int: !self.opts.float_matmul && (self.gpu.is_some() || intdot::simd()),
            paths: Paths::new(),
            gpu: self.gpu.as_deref(),
            gpu_x: HashMap::new(),
            prefetched: HashMap::new(),
            prof: std::env::var_os("NNPC_EXEC_PROFILE").map(|_| Vec::new()),
        };
        let last_use = &self.last_use;
        let traced = &self.traced;
        let first = ex.items.start;
        let (mut found, mut const_found) = Default::default();
        let mut fused_found = finite::Found::default();
        // A value a run hands back: kept for the trace, scanned by the checks (a constant by
        // the run that computes it: the session keeps what that found). A fused region's
        // values are scanned in its pass (`scan_region`).
        let trace = |id: ValueId, t: &Tensor, written: &mut HashMap<ValueId, WrittenValue>| {
            if traced.contains(&id) {
                written.insert(id, to_written(t)?);
            }
            Ok(())
        };
        let mut hand = |id: ValueId, t: &Tensor, written: &mut HashMap<ValueId, WrittenValue>| {
            trace(id, t, written)?;
            match (self.constant[id.index()], warm) {
                (false, _) => self.checks.scan(graph, id, t, first, &mut found),
                (true, false) => self.checks.scan(graph, id, t, first, &mut const_found),
                (true, true) => Ok(()),
            }
        };
        let mut rows: HashMap<String, Vec<Option<Tensor>>> = graph
            .outputs
            .iter()
            .map(|o| (o.name.clone(), vec![None; o.rows]))
            .collect();
        let mut written = HashMap::new();
        let mut regions =
            fused::regions(graph, &self.constant, &self.order, last_use, &self.traced)
                .into_iter()
                .peekable();
        let mut in_region = 0..0;
        // Where `Executor::keep_as_ints` would keep weight stacks as integers, `prepare` makes
        // them so.
        let ints = ex.int && intdot::supports(ex.n);
        for (pos, &i) in self.order.iter().enumerate() {
            if in_region.contains(&pos) {
                continue;
            }
            let node = &graph.nodes[i];
            let t0 = std::time::Instant::now();
            let fail = |e: candle_core::Error| ExecError::Tensor {
                node: i,
                op: node.op.name(),
                message: short(&e),
            };
            let exec_err = |e| match e {
                Failure::Candle(c) => fail(c),
                Failure::Exec(x) => x,
            };
            if let Some(reg) = regions.next_if(|r| r.start == pos) {
                // A run of element-wise MFU ops, evaluated together (`fused`).
                let nodes = &self.order[reg.start..reg.end];
                let scan_region = |k: usize, item, rows: &[f64], len, found: &mut finite::Found| {
                    let id = ValueId(k as u32);
                    self.checks.scan_rows(graph, id, rows, len, item, found)
                };
                let scanned: Vec<bool> = nodes
                    .iter()
                    .map(|&k| self.checks.has(ValueId(k as u32)))
                    .collect();
                let (values, parts) = ex
                    .eval_mfu(nodes, &reg.kept, &scanned, scan_region)
                    .map_err(exec_err)?;
                parts.into_iter().for_each(|part| fused_found.merge(part));
                let kept = nodes.iter().zip(&reg.kept).filter(|(_, k)| **k);
                for ((&k, _), t) in kept.zip(values) {
                    trace(ValueId(k as u32), &t, &mut written).map_err(fail)?;
                    ex.values[k] = Some(t);
                }
                for (p, &k) in (reg.start..reg.end).zip(nodes) {
                    release(&mut ex.values, reads(graph, &self.through, k), last_use, p);
                }
                tally(&mut ex.prof, "fused mfu", t0, reg.end - reg.start);
                in_region = reg.start..reg.end;
                continue;
            }
            let id = ValueId(i as u32);
            if warm && self.constant[i] {
                // Computed by an earlier run; kept when anything of this run reads it.
                if let Some(t) = &self.consts[i] {
                    hand(id, t, &mut written).map_err(fail)?;
                }
                continue;
            }
            if self.plan.skipped[i] || (ints && self.through[i]) {
                // Computed with the stacks that read it, below; or a concat its quantize
                // nodes read part by part (made by them if they need it).
                continue;
            }
            if let (true, Some(f)) = (ints, &self.to_ints[i])
                && ex.quantize_to_ints(i, f).map_err(exec_err)?
            {
                ex.paths.insert((Path::QuantizedToInts, i));
                release(
                    &mut ex.values,
                    reads(graph, &self.through, i),
                    last_use,
                    pos,
                );
                tally(&mut ex.prof, "quantize to ints", t0, 1);
                continue;
            }
            // A weight stack goes from the host's weights straight to the form the session
            // keeps (`prepare`): integers where the kernel runs, else its matmul's layout or
            // the f64 stack; an input chain's value straight from the host's input.
            let mut prepared = None;
            if let Some(chain) = &self.plan.inputs[i] {
                // The input converted, padded and rounded in one pass (`prepare`).
                prepared = Some(ex.rounded_input(chain).map_err(exec_err)?);
            }
            if let Some(stack) = &self.plan.stacks[i] {
                let arranged = self.arranged[i].filter(|_| !ints);
                if let Some(key) = arranged {
                    ex.prepare_arranged(id, stack, key).map_err(exec_err)?;
                    ex.paths.insert((Path::OnePass, i));
                    release(
                        &mut ex.values,
                        reads(graph, &self.through, i),
                        last_use,
                        pos,
                    );
                    tally(&mut ex.prof, "prepare weights", t0, 1);
                    continue;
                } else if !ints {
                    prepared = Some(ex.prepare_f64(stack).map_err(exec_err)?);
                    ex.paths.insert((Path::OnePass, i));
                } else if ex.prepare_ints(id, stack).map_err(exec_err)? {
                    ex.paths.insert((Path::OnePass, i));
                    release(
                        &mut ex.values,
                        reads(graph, &self.through, i),
                        last_use,
                        pos,
                    );
                    tally(&mut ex.prof, "prepare weights", t0, 1);
                    continue;
                } else {
                    // No integer form: the chains node by node, then the stack as usual.
                    ex.eval_chains(i, &stack.parts).map_err(exec_err)?;
                }
            }
            if let Op::Output { name, row, src } = &node.op {
                let t = ex.value(*src)?.clone();
                if let Some(slot) = rows.get_mut(name).and_then(|r| r.get_mut(*row)) {
                    *slot = Some(t);
                }
            } else {
                let product = matches!(node.op, Op::TiledMatVec { .. });
                if product && ex.gpu.is_some() && !ex.prefetched.contains_key(&i) {
                    ex.prefetch_products(&self.order[pos..]).map_err(exec_err)?;
                }
                let t = match prepared.take().or_else(|| ex.prefetched.remove(&i)) {
                    Some(t) => t,
                    None => ex.eval(i).map_err(exec_err)?,
                };
                hand(id, &t, &mut written).map_err(fail)?;
                let as_ints = match self.stacks[i] {
                    Some(dims) => ex.keep_as_ints(id, &t, dims).map_err(exec_err)?,
                    None => false,
                };
                if !as_ints {
                    if self.keep[i] && self.constant[i] {
                        consts.push((i, t.clone()));
                    }
                    ex.values[i] = Some(t);
                }
            }
            release(
                &mut ex.values,
                reads(graph, &self.through, i),
                last_use,
                pos,
            );
            let kind = match (&self.plan.stacks[i], &self.plan.inputs[i]) {
                (Some(_), _) if !ints => "prepare weights",
                (_, Some(_)) => "input",
                _ => node.op.name(),
            };
            tally(&mut ex.prof, kind, t0, 1);
        }
        if let Some(prof) = &ex.prof {
            let items = &ex.items;
            for (name, secs, count) in prof {
                eprintln!(
                    "profile: {name:>14} {count:>6} nodes {:>10.3} ms",
                    secs * 1e3
                );
            }
            let count = |path| taken(&ex.paths, path);
            eprintln!(
                "profile: items {items:?}: {} products on the integer kernel ({} on the GPU, {} \
                 in slices)",
                count(Path::IntKernel),
                count(Path::Gpu),
                count(Path::Slices)
            );
        }
        found.merge(fused_found);
        Ok(Part {
            outputs: collect_outputs(graph, ex.batch(), rows)?,
            written,
            found,
            const_found,
            paths: ex.paths,
            consts,
        })
    }
}

/// Bytes per chunk of the values a run holds at once, at most, by default
/// ([`Session::chunks`]): a batch of any size runs in bounded memory, a chunk this size still
/// gives every op hundreds of items of a small graph, and its values stay in a server CPU's
/// last-level cache (the samples at large batches ran 1.1x to 1.25x faster than with 32 MiB:
/// BENCHMARKS.md, "Smaller chunks").
pub const CHUNK_BYTES: usize = 8 << 20;

/// The default limit of items per chunk is at least this ([`Session::chunks`]): four of the
/// integer kernel's tasks of items, each reading its weight tiles once.
pub const MIN_CHUNK_ITEMS: usize = 256;

/// Bytes per batch item of the values a run holds at once, at most: the largest sum, over the
/// positions of the evaluation order, of the non-constant values alive there (from the node
/// that makes them to their last reader; the values outputs read stay to the end of the run),
/// as f64 elements. Values a fused region keeps only in its scratch rows are counted as
/// tensors, so this is an upper bound. A `traced` value is also held from the node that makes
/// it to the end of the chunk, as the written value's f64 copy and its trace records' 32-bit
/// patterns ([`TRACED_BYTES`] per element): a traced run of the README LSTM holds more of
/// those than of anything else.
fn peak_item_bytes(
    graph: &SwGraph,
    order: &[usize],
    constant: &[bool],
    last_use: &[usize],
    traced: &HashSet<ValueId>,
) -> usize {
    let elements = |ty: &Ty| match ty {
        Ty::Logical { shape } => shape.iter().product(),
        Ty::Vector { tiles } => *tiles as usize * graph.native,
        Ty::TileStack { tiles } => *tiles as usize * graph.native * graph.native,
        Ty::None => 0,
    };
    let to_end: Vec<bool> = {
        let mut v = vec![false; graph.nodes.len()];
        for node in &graph.nodes {
            if let Op::Output { src, .. } = &node.op {
                v[src.index()] = true;
            }
        }
        v
    };
    let mut freed_at = vec![0usize; order.len()];
    let (mut live, mut peak) = (0usize, 0usize);
    for (pos, &i) in order.iter().enumerate() {
        if !constant[i] {
            let count = elements(&graph.nodes[i].ty);
            let bytes = count * std::mem::size_of::<f64>();
            live += bytes;
            if !to_end[i] {
                freed_at[last_use[i].max(pos)] += bytes;
            }
            if traced.contains(&ValueId(i as u32)) {
                live += count * TRACED_BYTES;
            }
        }
        peak = peak.max(live);
        live -= freed_at[pos];
    }
    peak
}

/// Bytes per element a run holds to the end of a chunk for a traced value: the written
/// value's f64 and its record's storage bits (`u32`).
const TRACED_BYTES: usize = std::mem::size_of::<f64>() + std::mem::size_of::<u32>();

/// Items per shard of a warm run, at least ([`Session::shards`]).
const MIN_SHARD_ITEMS: usize = 4;

/// Weights (elements of the distinct weight stacks that products read) of a graph whose warm
/// runs go in shards, at most ([`Session::small`]): 1 Mi elements are 2 MiB as the kernel's
/// integers, which every shard then reads from the shared caches.
const SMALL_WEIGHTS: usize = 1 << 20;

/// A fast path a node took ([`Execution`]'s counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Path {
    IntKernel,
    Gpu,
    Slices,
    OnePass,
    QuantizedToInts,
    ConcatSkipped,
}

/// The nodes of a run that took each fast path.
type Paths = BTreeSet<(Path, usize)>;

/// The nodes of `paths` that took `path`.
fn taken(paths: &Paths, path: Path) -> usize {
    paths.iter().filter(|(p, _)| *p == path).count()
}

/// Append `more` (the outputs of the next items in order) to `all`, the outputs so far of a
/// run of `b` items. The first append after the first part makes room for all `b` items at
/// that part's size per item, so a run of many parts holds each output once.
fn append_outputs(all: &mut Outputs, more: Outputs, b: usize) {
    if all.is_empty() {
        *all = more;
        return;
    }
    for (name, t) in all.iter_mut() {
        if let Some(more) = more.get(name) {
            // A no-op once the room is there.
            let per_item = t.data.len().checked_div(t.shape[0]).unwrap_or(0);
            t.data
                .reserve_exact(per_item * b.saturating_sub(t.shape[0]));
            t.data.extend_from_slice(&more.data);
            t.shape[0] += more.shape[0];
        }
    }
}

/// What one pass over some items of a batch produced.
#[derive(Default)]
struct Part {
    outputs: Outputs,
    written: HashMap<ValueId, WrittenValue>,
    /// Under `nonfinite = "error"`: the NaNs and infinities the checks found in the part's
    /// values, and in the constants it computed (a first run).
    found: finite::Found,
    const_found: finite::Found,
    paths: Paths,
    /// Constant values to keep for the session (computed by a first run).
    consts: Vec<(usize, Tensor)>,
}

/// The values node `i` reads: its inputs and, where it quantizes a concat the run may skip
/// (`through`, [`Session::through`]), that concat's parts.
fn reads(graph: &SwGraph, through: &[bool], i: usize) -> Vec<ValueId> {
    let mut vs = graph.nodes[i].op.inputs();
    if let Op::Quantize { src, .. } = &graph.nodes[i].op
        && through[src.index()]
        && let Op::Concat { parts } = &graph.nodes[src.index()].op
    {
        vs.extend(parts.iter().map(|p| p.value));
    }
    vs
}

/// The `concat` nodes of vectors that only `quantize` nodes of [`quantized_vectors`] read,
/// and that a run does not hand back (`handed`), not constant (a warm run skips those anyway).
fn concats_to_ints(
    graph: &SwGraph,
    constant: &[bool],
    to_ints: &[Option<quant::BfpInts>],
    handed: &HashSet<ValueId>,
) -> Vec<bool> {
    let other = read_beside(graph, handed, |i, _| to_ints[i].is_none());
    let read = read_beside(graph, &HashSet::new(), |_, _| true);
    graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            matches!(node.op, Op::Concat { .. })
                && matches!(node.ty, Ty::Vector { .. })
                && !constant[i]
                && !other[i]
                && read[i]
        })
        .collect()
}

/// The values marked in `among` that only products read, as their matrix, with one
/// `(rows, cols)` for all of them, and that a run does not hand back (`handed`): `(rows,
/// cols)` per value, `None` for every other value.
fn weight_stacks(
    graph: &SwGraph,
    among: &[bool],
    handed: &HashSet<ValueId>,
) -> Vec<Option<(usize, usize)>> {
    let len = graph.nodes.len();
    let mut stacks = vec![None; len];
    let mut other = read_beside_products(graph, handed);
    for node in &graph.nodes {
        if let Some((spec, x, w)) = product_spec(&node.op, graph.native) {
            other[x.index()] = true;
            let dims = (spec.rows, spec.cols);
            match stacks[w.index()] {
                Some(d) if d != dims => other[w.index()] = true,
                _ => stacks[w.index()] = Some(dims),
            }
        }
    }
    for (i, s) in stacks.iter_mut().enumerate() {
        if other[i] || !among[i] {
            *s = None;
        }
    }
    stacks
}

/// The `quantize` nodes that only products read, each as its vector, and that a run does not
/// hand back (`handed`), in a format [`quant::BfpInts`] quantizes straight to the integer kernel's
/// integers: that format by node. A constant one only where the session keeps no value of it
/// (`keep`): its products are constant too, computed with it in the first run.
fn quantized_vectors(
    graph: &SwGraph,
    constant: &[bool],
    keep: &[bool],
    handed: &HashSet<ValueId>,
) -> Vec<Option<quant::BfpInts>> {
    let n = graph.native;
    let mut other = read_beside_products(graph, handed);
    let mut as_x = vec![false; graph.nodes.len()];
    for node in &graph.nodes {
        if let Some((_, x, w)) = product_spec(&node.op, n) {
            as_x[x.index()] = true;
            other[w.index()] = true;
        }
    }
    let limit = intdot::mantissa_limit(n);
    graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| match &node.op {
            Op::Quantize { format, axis, .. }
                if as_x[i] && !other[i] && !(constant[i] && keep[i]) && axis.run(n) == n =>
            {
                quant::BfpInts::new(format, n, limit)
            }
            _ => None,
        })
        .collect()
}

/// The values of the graph's `v_wr`s when a run keeps them (`keep_writes`).
fn written_values(graph: &SwGraph, keep_writes: bool) -> impl Iterator<Item = ValueId> + '_ {
    let writes = if keep_writes { &graph.writes[..] } else { &[] };
    writes.iter().map(|w| w.value)
}

/// The values a node other than a product reads, or that a run hands back (`handed`).
fn read_beside_products(graph: &SwGraph, handed: &HashSet<ValueId>) -> Vec<bool> {
    read_beside(graph, handed, |_, node| {
        product_spec(&node.op, graph.native).is_none()
    })
}

/// The values that a node for which `reader(i, node)` holds reads, or that a run hands back
/// (`handed`).
fn read_beside(
    graph: &SwGraph,
    handed: &HashSet<ValueId>,
    reader: impl Fn(usize, &nnp_lowering::swgraph::Node) -> bool,
) -> Vec<bool> {
    let mut read = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        if reader(i, node) {
            node.op.inputs().iter().for_each(|v| read[v.index()] = true);
        }
    }
    handed.iter().for_each(|v| read[v.index()] = true);
    read
}

/// Free the values `vs` read at position `pos` of the evaluation order that nothing later
/// reads.
fn release(
    values: &mut [Option<Tensor>],
    vs: impl IntoIterator<Item = ValueId>,
    last_use: &[usize],
    pos: usize,
) {
    for v in vs {
        if last_use[v.index()] == pos {
            values[v.index()] = None;
        }
    }
}

/// Add the time since `t0` and `count` nodes to the profile line `name` (when profiling).
fn tally(prof: &mut Profile, name: &'static str, t0: std::time::Instant, count: usize) {
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

/// Assemble the output tensors from their rows.
fn collect_outputs(
    graph: &SwGraph,
    batch: usize,
    mut rows: HashMap<String, Vec<Option<Tensor>>>,
) -> Result<Outputs, ExecError> {
    let mut outputs = Outputs::new();
    for o in &graph.outputs {
        let parts = rows.remove(&o.name).unwrap_or_default();
        let mut shape = vec![batch];
        shape.extend(&o.shape);
        let mut out = vec![0f32; batch * o.rows * o.row_len];
        for (r, part) in parts.into_iter().enumerate() {
            let Some(t) = part else {
                return Err(ExecError::Graph(GraphError::Other(format!(
                    "output `{}` row {r} is never produced",
                    o.name
                ))));
            };
            let w = to_written(&t).map_err(|e| ExecError::Tensor {
                node: 0,
                op: "output",
                message: short(&e),
            })?;
            for b in 0..batch {
                let dst = &mut out[(b * o.rows + r) * o.row_len..][..o.row_len];
                for (d, s) in dst.iter_mut().zip(w.item(b)) {
                    *d = *s as f32;
                }
            }
        }
        outputs.insert(o.name.clone(), HostTensor { shape, data: out });
    }
    Ok(outputs)
}

fn to_written(t: &Tensor) -> candle_core::Result<WrittenValue> {
    let dims = t.dims().to_vec();
    let batch = dims.first().copied().unwrap_or(1);
    let data: Vec<f64> = t.flatten_all()?.to_device(&Device::Cpu)?.to_vec1()?;
    Ok(WrittenValue {
        batch,
        lanes: data.len() / batch.max(1),
        data,
    })
}

enum Failure {
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

struct Executor<'a> {
    g: &'a SwGraph,
    data: &'a HostData,
    /// The items of `data` this run computes (a shard's, or all of them).
    items: Range<usize>,
    dev: Device,
    n: usize,
    values: Vec<Option<Tensor>>,
    constant: &'a [bool],
    rounded: &'a [Option<FloatFormat>],
    caches: &'a mut Caches,
    /// Vectors rearranged for the chunked matmul in this run, by (value, chunk).
    arranged_x: HashMap<(ValueId, usize), Tensor>,
    /// Vectors as integer mantissas in this run (`None`: they do not fit).
    int_x: HashMap<ValueId, Option<Arc<intdot::IntVector>>>,
    /// Single tiles of values quantized to integers in this run, by format, then by (value,
    /// tile): the columns [`Executor::quantize_parts_to_ints`] assembles vectors from.
    int_tiles: Vec<(quant::BfpInts, TileInts)>,
    /// Whether products may take the integer kernel.
    int: bool,
    /// The nodes that took each fast path in this run.
    paths: Paths,
    /// The GPU that computes integer products where it gives the same bits.
    gpu: Option<&'a gpu::Gpu>,
    /// Vectors as integers on the GPU in this run.
    gpu_x: HashMap<ValueId, Arc<gpu::GpuVector>>,
    /// Products computed ahead by [`Executor::prefetch_products`], by node.
    prefetched: HashMap<usize, Tensor>,
    /// Time per kind of work (`NNPC_EXEC_PROFILE`).
    prof: Profile,
}

/// Tiles of values as integers, by (value, tile): one column each ([`intdot::IntVector`] of
/// one tile column; `None`: the tile has no integer form).
type TileInts = HashMap<(ValueId, usize), Option<Arc<intdot::IntVector>>>;

/// Seconds and counts per line of the profile; `None` when not profiling.
type Profile = Option<Vec<(&'static str, f64, usize)>>;

impl<'a> Executor<'a> {
    fn value(&self, v: ValueId) -> Result<&Tensor, ExecError> {
        self.values
            .get(v.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                ExecError::Graph(GraphError::Other(format!("{v} is used after it was freed")))
            })
    }

    /// The values of host tensor `name`: this run's items of an input (`input`), or the
    /// weights; checked to be `[data.batch, shape]` (weights: `shape`).
    fn host_tensor(
        &self,
        name: &str,
        input: bool,
        shape: &[usize],
    ) -> Result<&'a [f32], ExecError> {
        let (tensors, kind) = match input {
            true => (&self.data.inputs, "input"),
            false => (&self.data.weights, "weights"),
        };
        let t = tensors.get(name).ok_or_else(|| ExecError::Missing {
            name: name.to_string(),
            kind,
        })?;
        let mut want: Vec<usize> = input.then_some(self.data.batch).into_iter().collect();
        want.extend(shape);
        if t.shape != want {
            return Err(ExecError::Shape {
                name: name.to_string(),
                found: t.shape.clone(),
                expected: want,
            });
        }
        if !input {
            return Ok(&t.data);
        }
        let per_item: usize = shape.iter().product();
        Ok(&t.data[self.items.start * per_item..self.items.end * per_item])
    }

    /// This run's batch: its items of the inputs.
    fn batch(&self) -> usize {
        self.items.len()
    }

    /// The host tensor `name` ([`Executor::host_tensor`]) as an f64 tensor `[batch or 1,
    /// shape]`.
    fn host(&self, name: &str, input: bool, shape: &[usize]) -> Result<Tensor, Failure> {
        let t = self.host_tensor(name, input, shape)?;
        let mut dims = vec![if input { self.batch() } else { 1 }];
        dims.extend(shape);
        // In parallel: a benchmark's inputs are megabytes, converted once per run.
        let v: Vec<f64> = t
            .par_iter()
            .with_min_len(quant::PAR_MIN)
            .map(|&x| f64::from(x))
            .collect();
        Ok(Tensor::from_vec(v, dims, &self.dev)?)
    }

    fn eval(&mut self, i: usize) -> Result<Tensor, Failure> {
        let node = &self.g.nodes[i];
        let n = self.n;
        Ok(match &node.op {
            Op::Input { name, shape } => self.host(name, true, shape)?,
            Op::Weight { name, shape } => self.host(name, false, shape)?,
            Op::Zero { shape } => {
                let mut dims = vec![1];
                dims.extend(shape);
                Tensor::zeros(dims, DType::F64, &self.dev)?
            }
            Op::PadToTiles { src, layout, pad } => {
                let t = self.value(*src)?;
                let Ty::Logical { shape } = &self.g.node(*src).ty else {
                    return Err(internal("pad_to_tiles of a non-logical value").into());
                };
                let b = t.dims()[0];
                let c = shape.last().copied().unwrap_or(1);
                let rows: usize = shape[..shape.len() - 1].iter().product();
                let ct = c.div_ceil(n);
                match layout {
                    TileLayout::Vector => {
                        let t = t.reshape((b, rows, c))?;
                        let t = pad_dim(&t, 2, ct * n, *pad)?;
                        t.reshape((b, rows * ct * n))?
                    }
                    TileLayout::Matrix => {
                        let r = shape[0];
                        let rt = r.div_ceil(n);
                        let t = pad_dim(&pad_dim(t, 2, ct * n, 0.0)?, 1, rt * n, 0.0)?;
                        // [b, rt, n, ct, n] -> [b, rt, ct, n, n]: row runs of n copied, one row
                        // band per task (candle's strided copy of this permute was 4x slower).
                        let host = t.contiguous()?.to_device(&Device::Cpu)?;
                        host.apply_op1_no_bwd(&Map1("pad_to_tiles", |xs: &[f64]| {
                            let mut out = vec![0.0; xs.len()];
                            out.par_chunks_mut(ct * n * n)
                                .zip(xs.par_chunks(ct * n * n))
                                .for_each(|(o, band)| {
                                    for (r, row) in band.chunks(ct * n).enumerate() {
                                        for (j, run) in row.chunks(n).enumerate() {
                                            o[(j * n + r) * n..][..n].copy_from_slice(run);
                                        }
                                    }
                                });
                            (out, Shape::from((b, rt * ct, n, n)))
                        }))?
                        .to_device(&self.dev)?
                    }
                }
            }
            Op::Unpad { src, len } => self.value(*src)?.narrow(1, 0, *len)?.contiguous()?,
            // Rounding a value that is rounded to the format already changes nothing.
            Op::Round { src, format } if self.is_rounded(*src, format) => self.value(*src)?.clone(),
            Op::Round { src, format } => {
                let f = *format;
                map1(self.value(*src)?, "round", move |x, o| {
                    quant::round_slice(&f, x, o)
                })?
            }
            Op::Quantize { src, format, axis } => {
                let f: Format = *format;
                let run = axis.run(n);
                map1(self.value(*src)?, "quantize", move |x, o| {
                    quant::quantize_runs(&f, x, run, n, o)
                })?
            }
            Op::Concat { parts } => {
                let stack = matches!(node.ty, Ty::TileStack { .. });
                let unit = if stack { 1 } else { n };
                let mut ts = Vec::with_capacity(parts.len());
                for p in parts {
                    let t = self.value(p.value)?;
                    ts.push(t.narrow(1, p.start as usize * unit, p.count as usize * unit)?);
                }
                let ts = broadcast_batch(&ts)?;
                Tensor::cat(&ts, 1)?
            }
            Op::TiledMatVec {
                vector_format,
                matrix_format,
                ..
            } => {
                let (spec, x, w) = product_spec(&node.op, n)
                    .ok_or_else(|| ExecError::Graph(GraphError::Other("not a product".into())))?;
                let (chunk, dtype) = float_chunk(vector_format, matrix_format, n);
                self.matvec(i, &spec, x, w, chunk, dtype)?
            }
            Op::Unary {
                op: UnOp::Softmax,
                src,
                format,
                table,
            } => {
                let tab = self.table(UnOp::Softmax, format, table.as_deref())?;
                let t = self.value(*src)?.clone();
                let lanes = t.dims().get(1).copied().unwrap_or(1);
                map1(&t, "softmax", move |x, o| mfu::softmax(&tab, x, lanes, o))?
            }
            // Every other MFU op: a region of one node (`fused`).
            Op::Binary { .. } | Op::Unary { .. } => self
                .eval_mfu(&[i], &[true], &[false], |_, _, _, _, _: &mut ()| {})?
                .0
                .pop()
                .ok_or_else(|| internal("an MFU op gave no value"))?,
            Op::Output { .. } => return Err(internal("output evaluated as a value").into()),
        })
    }

    /// Element-wise MFU nodes (binary ops, relu, pass, table activations on vectors of one
    /// length, each after its operands), evaluated together ([`fused`]): the values of the
    /// nodes whose `kept` is set, in node order, and what `scan` found in the values of the
    /// nodes whose `scanned` is set (`scan(node, first_item, rows, lanes, state)`: whole rows
    /// of `lanes` values, items numbered in the run).
    fn eval_mfu<S: Default + Send>(
        &mut self,
        nodes: &[usize],
        kept: &[bool],
        scanned: &[bool],
        scan: impl Fn(usize, usize, &[f64], usize, &mut S) + Sync,
    ) -> Result<(Vec<Tensor>, Vec<S>), Failure> {
        use fused::{Src, Step};
        let len = match nodes.first().map(|&k| &self.g.nodes[k].ty) {
            Some(Ty::Vector { tiles }) => *tiles as usize * self.n,
            _ => return Err(internal("an MFU op whose value is not a vector").into()),
        };
        // Operands from outside the region, contiguous on the host, each once.
        let mut outer: Vec<(ValueId, Tensor)> = Vec::new();
        let mut src = |ex: &Self, v: ValueId| -> Result<Src, Failure> {
            if let Some(j) = nodes.iter().position(|&k| k == v.index()) {
                return Ok(Src::Local(j));
            }
            let at = match outer.iter().position(|(w, _)| *w == v) {
                Some(at) => at,
                None => {
                    let t = ex.value(v)?.contiguous()?.to_device(&Device::Cpu)?;
                    outer.push((v, t));
                    outer.len() - 1
                }
            };
            Ok(Src::Outer(at))
        };
        let mut steps = Vec::with_capacity(nodes.len());
        for node in nodes.iter().map(|&k| &self.g.nodes[k]) {
            steps.push(match &node.op {
                Op::Binary { op, a, b, format } => Step::Binary {
                    op: *op,
                    format: *format,
                    a: src(self, *a)?,
                    b: src(self, *b)?,
                    rounded: [self.is_rounded(*a, format), self.is_rounded(*b, format)],
                },
                Op::Unary {
                    op: UnOp::Relu,
                    src: x,
                    format,
                    ..
                } => Step::Relu(*format, src(self, *x)?),
                Op::Unary {
                    op: UnOp::Pass,
                    src: x,
                    format,
                    ..
                } => Step::Pass(*format, src(self, *x)?),
                Op::Unary {
                    op,
                    src: x,
                    format,
                    table,
                } => Step::Activation {
                    table: self.table(*op, format, table.as_deref())?,
                    x: src(self, *x)?,
                    rounded: self.is_rounded(*x, format),
                },
                _ => return Err(internal("a region holds a node that is not an MFU op").into()),
            });
        }
        // The batch is that of the widest operand; a batch-1 operand is broadcast.
        let batch_of = |t: &Tensor| t.dims().first().copied().unwrap_or(1);
        let batch = outer.iter().map(|(_, t)| batch_of(t)).max().unwrap_or(1);
        let guards: Vec<_> = outer.iter().map(|(_, t)| t.storage_and_layout()).collect();
        let mut slices: Vec<&[f64]> = Vec::with_capacity(guards.len());
        for (storage, layout) in &guards {
            match host_slice(storage, layout) {
                Some(v) if v.len() == len || v.len() == batch * len => slices.push(v),
                _ => return Err(internal("a region operand is not a contiguous f64 vector").into()),
            }
        }
        let first = self.items.start;
        let pass = fused::RegionPass {
            steps: &steps,
            kept,
            scanned,
            outer: &slices,
            batch,
            len,
        };
        let (values, found) = pass.run(|k, r0, rows, s| scan(nodes[k], first + r0, rows, len, s));
        let values = values
            .into_iter()
            .map(|v| Tensor::from_vec(v, (batch, len), &self.dev))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok((values, found))
    }

    /// Whether every element of `v` is rounded to `f` already ([`rounded`]).
    fn is_rounded(&self, v: ValueId, f: &FloatFormat) -> bool {
        self.rounded.get(v.index()).copied().flatten() == Some(*f)
    }

    fn table(
        &mut self,
        op: UnOp,
        f: &FloatFormat,
        file: Option<&str>,
    ) -> Result<ActTable, ExecError> {
        let key = (op, file.map(str::to_string), *f);
        if let Some(t) = self.caches.tables.get(&key) {
            return Ok(t.clone());
        }
        let kind = op
            .table()
            .ok_or_else(|| internal("table for a table-less op"))?;
        let t = ActTable::load(kind, f, file)?;
        self.caches.tables.insert(key, t.clone());
        Ok(t)
    }

    /// `y = W x`, exactly, by the first of these paths that applies:
    /// 0. on CPUs with AVX2 and FMA (unless `float_matmul`), data whose runs are small
    ///    integers times a power of two (BFP up to 12-bit mantissas, checked on the data):
    ///    integer tile products with exact sums ([`intdot`]);
    /// 1. `chunk` proven exact from the formats (BFP tiles by default): one f32 or f64 matmul
    ///    gives the exact per-chunk partials;
    /// 2. otherwise the values are split into slices whose pairwise tile products are exact
    ///    ([`matmul::slices`]), one matmul per slice pair;
    /// 3. non-finite data (or data needing too many slices): every product exact, element-wise.
    ///
    /// The partials of 1 to 3 are then summed exactly and rounded once
    /// ([`matmul::sum_partials`]).
    fn matvec(
        &mut self,
        node: usize,
        spec: &MatVec,
        x: ValueId,
        w: ValueId,
        chunk: Option<usize>,
        dtype: DType,
    ) -> Result<Tensor, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let b = self.batch_of(x)?;
        let s = *spec;
        let sum = |parts: Vec<Tensor>, k: usize| -> Result<Tensor, Failure> {
            let pairs = parts.len();
            let p = match parts.as_slice() {
                [one] => one.clone(),
                _ => Tensor::cat(&parts, 0)?,
            };
            let p = p.contiguous()?.to_device(&Device::Cpu)?;
            Ok(p.apply_op1_no_bwd(&SumPartials {
                spec: s,
                k,
                pairs,
                b,
            })?)
        };
        let operands = self.operands(x, w, b);
        let cacheable = operands.cacheable;
        // The integer kernel on the CPU: the GPU took this product already where it gives the
        // same bits (`prefetch_products`). Operands with more bits per run than one integer
        // unit holds take it in slices (exact accumulation only: no weights are sliced for
        // the others, which `SlicedWeights::matvec` refuses).
        if self.int && intdot::supports(n) {
            let y = if let Some((wi, xi)) = self.int_operands(spec, operands)? {
                Some(intdot::matvec(spec, &wi, &xi, intdot::simd()))
            } else if spec.accumulation == nnp_grammar::Accumulation::Exact
                && let Some(y) = self.sliced_product(spec, operands)?
            {
                self.paths.insert((Path::Slices, node));
                Some(y)
            } else {
                None
            };
            if let Some(y) = y {
                self.paths.insert((Path::IntKernel, node));
                return Ok(Tensor::from_vec(y, (b, rows * n), &self.dev)?);
            }
        }
        let xt = self.vector(x)?;
        if let Some(k) = chunk {
            let wa = match self.caches.arranged.get(&(w, k, dtype)) {
                Some(t) if cacheable => t.clone(),
                _ => {
                    let t = arrange_w(&self.weights(w)?, rows, cols, n, k)?.to_dtype(dtype)?;
                    if cacheable {
                        self.caches.arranged.insert((w, k, dtype), t.clone());
                    }
                    t
                }
            };
            // The vector side, once per run for every product that reads it (the four gates
            // of an LSTM step share x_t and h_t): transposed and converted in one pass.
            let xa = match self.arranged_x.get(&(x, k)) {
                Some(t) if t.dtype() == dtype => t.clone(),
                _ => {
                    let t = xt
                        .contiguous()?
                        .to_device(&Device::Cpu)?
                        .apply_op1_no_bwd(&TransposeTo(dtype))?
                        .reshape((cols * n / k, k, b))?
                        .to_device(&self.dev)?;
                    self.arranged_x.insert((x, k), t.clone());
                    t
                }
            };
            // [chunks, rows*n, b], exact per chunk.
            let y = sum(vec![wa.matmul(&xa)?], k)?;
            return Ok(y.to_device(&self.dev)?);
        }
        let beta = matmul::slice_bits(n);
        if !cacheable || !self.caches.sliced.contains_key(&w) {
            let wv = host_vec(&self.weights(w)?)?;
            let sl = match matmul::slices(&wv, n, beta) {
                Some(sl) => Some(
                    sl.into_iter()
                        .map(|v| {
                            let t = Tensor::from_vec(v, (1, rows * cols, n, n), &self.dev)?;
                            arrange_w(&t, rows, cols, n, n)
                        })
                        .collect::<candle_core::Result<Vec<_>>>()?,
                ),
                None => None,
            };
            // A non-constant stack is replaced by the next run's (or call's) value.
            self.caches.sliced.insert(w, sl);
        }
        let xv = host_vec(&xt)?;
        let ws = self.caches.sliced.get(&w).cloned().flatten();
        if let (Some(ws), Some(xs)) = (ws, matmul::slices(&xv, n, beta)) {
            let mut parts = Vec::with_capacity(ws.len() * xs.len());
            for xsl in xs {
                let xa = arrange_x(
                    &Tensor::from_vec(xsl, (b, cols * n), &self.dev)?,
                    b,
                    cols,
                    n,
                    n,
                )?;
                for wsl in &ws {
                    parts.push(wsl.matmul(&xa)?);
                }
            }
            return Ok(sum(parts, n)?.to_device(&self.dev)?);
        }
        let wv = Arc::new(host_vec(&self.weights(w)?)?);
        let xc = xt.contiguous()?.to_device(&Device::Cpu)?;
        let y = xc.apply_op1_no_bwd(&Map1("matvec_exact", move |xs: &[f64]| {
            (
                matmul::matvec_exact(&s, xs, b, &wv),
                Shape::from((b, rows * n)),
            )
        }))?;
        Ok(y.to_device(&self.dev)?)
    }
}

impl<'a> Executor<'a> {
    /// Keep the weight stack `w` (value `t`, read by products of `(rows, cols)` only) as
    /// integers alone, when the integer kernel runs and the f64 tensor can be restored bit
    /// for bit; whether it is.
    fn keep_as_ints(
        &mut self,
        w: ValueId,
        t: &Tensor,
        (rows, cols): (usize, usize),
    ) -> Result<bool, Failure> {
        if !self.int || !intdot::supports(self.n) || t.dtype() != DType::F64 {
            return Ok(false);
        }
        let wi = int_weights(t, rows, cols, self.n)?;
        Ok(self.cache_ints(w, wi, t.dims()))
    }

    /// Cache `wi` as the integers of weight stack `w`, and keep them as its only form when
    /// they give back its f64 tensor of `shape` ([`intdot::IntWeights::restore`]); whether
    /// they do.
    fn cache_ints(
        &mut self,
        w: ValueId,
        wi: Option<Arc<intdot::IntWeights>>,
        shape: &[usize],
    ) -> bool {
        let as_ints = wi.as_ref().is_some_and(|wi| wi.restorable());
        self.caches.int.insert(w, wi);
        if as_ints {
            self.caches.as_ints.insert(w, shape.to_vec());
        }
        as_ints
    }

    /// The parts of `stack` on the host's weights, checked.
    fn sources<'s>(&self, stack: &'s prepare::Stack) -> Result<Vec<prepare::Source<'s>>, ExecError>
    where
        'a: 's,
    {
        stack
            .parts
            .iter()
            .map(|p| {
                let Op::Weight { name, shape } = &self.g.nodes[p.chain.weight].op else {
                    return Err(internal("a weight chain without weights"));
                };
                Ok(prepare::Source {
                    w: self.host_tensor(name, false, shape)?,
                    shape,
                    round: p.chain.round.as_ref().map(|(_, f)| f),
                    format: &p.chain.format,
                    start: p.start,
                    count: p.count,
                })
            })
            .collect()
    }

    /// Compute the weight stack `w` (read by products only) straight from the host's weights
    /// to the integers it is kept as ([`prepare`]); whether it could (else its chains are
    /// evaluated node by node, [`Executor::eval_chains`]).
    fn prepare_ints(&mut self, w: ValueId, stack: &prepare::Stack) -> Result<bool, Failure> {
        let ((rows, cols), n) = (stack.dims, self.n);
        let Some(wi) =
            prepare::int_stack(&self.sources(stack)?, (rows, cols, n)).filter(|wi| wi.restorable())
        else {
            return Ok(false);
        };
        Ok(self.cache_ints(w, Some(Arc::new(wi)), &[1, rows * cols, n, n]))
    }

    /// Compute the weight stack `w` (read only by chunked matmuls of chunk and dtype `key`)
    /// straight from the host's weights into that matmul's layout ([`arrange_w`], converted),
    /// and keep it in that form alone (the products read nothing else).
    fn prepare_arranged(
        &mut self,
        w: ValueId,
        stack: &prepare::Stack,
        (k, dtype): (usize, DType),
    ) -> Result<(), Failure> {
        let ((rows, cols), n) = (stack.dims, self.n);
        let (sources, grid) = (self.sources(stack)?, (rows, cols, n));
        let shape = (cols * n / k, rows * n, k);
        fn tensor<T: candle_core::WithDType>(
            v: Option<Vec<T>>,
            shape: (usize, usize, usize),
            dev: &Device,
        ) -> Result<Tensor, Failure> {
            let v = v.ok_or_else(|| internal("a weight stack's parts do not make it"))?;
            Ok(Tensor::from_vec(v, shape, dev)?)
        }
        // `as f32` is candle's `to_dtype(F32)`: exact for the values `float_chunk` admits.
        let t = match dtype {
            DType::F32 => {
                let v = prepare::arranged_stack(&sources, grid, k, |v| v as f32);
                tensor(v, shape, &self.dev)?
            }
            _ => tensor(
                prepare::arranged_stack(&sources, grid, k, |v| v),
                shape,
                &self.dev,
            )?,
        };
        self.caches.arranged.insert((w, k, dtype), t);
        Ok(())
    }

    /// The value of the input chain `chain` (its `round`), straight from the host's input
    /// ([`prepare::rounded_input`]).
    fn rounded_input(&self, chain: &prepare::InputChain) -> Result<Tensor, Failure> {
        let Op::Input { name, shape } = &self.g.nodes[chain.input].op else {
            return Err(internal("an input chain without its input").into());
        };
        let batch = self.batch();
        let t = self.host_tensor(name, true, shape)?;
        let (c, rows) = match shape.split_last() {
            Some((c, lead)) => (*c, lead.iter().product::<usize>()),
            None => return Err(internal("an input chain of a scalar").into()),
        };
        let width = c.div_ceil(self.n) * self.n;
        let v = prepare::rounded_input(t, c, width, chain.pad_value, &chain.format)
            .ok_or_else(|| internal("an input's values are not whole rows"))?;
        Ok(Tensor::from_vec(v, (batch, rows * width), &self.dev)?)
    }

    /// The weight stack `stack` computed straight from the host's weights as f64 values
    /// ([`prepare`], for the float path).
    fn prepare_f64(&self, stack: &prepare::Stack) -> Result<Tensor, Failure> {
        let ((rows, cols), n) = (stack.dims, self.n);
        let v = prepare::f64_stack(&self.sources(stack)?, (rows, cols, n))
            .ok_or_else(|| internal("a weight stack's parts do not make it"))?;
        Ok(Tensor::from_vec(v, (1, rows * cols, n, n), &self.dev)?)
    }

    /// Evaluate what the stack `s` made of `parts` reads and is not computed: the links of
    /// each chain and, for a chain whose value is another node, that value. Each node is freed
    /// once the next is computed; the last ones by the stack's evaluation.
    fn eval_chains(&mut self, s: usize, parts: &[prepare::Part]) -> Result<(), Failure> {
        for part in parts {
            let q = part.chain.quantize;
            if q != s && self.ready(ValueId(q as u32)) {
                continue;
            }
            let mut prev = None;
            for l in part.chain.links().chain((q != s).then_some(q)) {
                let t = self.eval(l)?;
                self.values[l] = Some(t);
                if let Some(p) = prev.replace(l) {
                    self.values[p] = None;
                }
            }
        }
        Ok(())
    }

    /// Whether value `v` is computed and not yet freed in this run.
    fn ready(&self, v: ValueId) -> bool {
        self.values.get(v.index()).is_some_and(Option::is_some)
    }

    /// Whether the weight stack `w` is available: computed, or kept as integers.
    fn weights_ready(&self, w: ValueId) -> bool {
        self.ready(w) || self.caches.as_ints.contains_key(&w)
    }

    /// The weight stack `w` as a tensor: its value, or restored from the integers it is kept
    /// as (then held for the rest of the run).
    fn weights(&mut self, w: ValueId) -> Result<Tensor, Failure> {
        if let Some(t) = self.values.get(w.index()).and_then(Option::as_ref) {
            return Ok(t.clone());
        }
        let restored = match (self.caches.as_ints.get(&w), self.caches.int.get(&w)) {
            (Some(shape), Some(Some(wi))) => wi.restore().map(|v| (v, shape.clone())),
            _ => None,
        };
        let Some((v, shape)) = restored else {
            return Ok(self.value(w)?.clone());
        };
        let t = Tensor::from_vec(v, shape, &self.dev)?;
        self.values[w.index()] = Some(t.clone());
        Ok(t)
    }

    /// Quantize node `q` (BFP in blocks of the native dimension, `f`) straight to the integer
    /// kernel's integers, which its products then read ([`intdot::IntVector::quantized`]);
    /// `false` when its vector has no such form (the node is then evaluated as usual).
    fn quantize_to_ints(&mut self, q: usize, f: &quant::BfpInts) -> Result<bool, Failure> {
        let Op::Quantize { src, .. } = &self.g.nodes[q].op else {
            return Ok(false);
        };
        if !self.ready(*src)
            && let Op::Concat { parts } = &self.g.nodes[src.index()].op
        {
            if self.quantize_parts_to_ints(q, parts, f)? {
                return Ok(true);
            }
            // The quantize falls back to its f64 value: the concat it reads, made now.
            let t = self.eval(src.index())?;
            self.values[src.index()] = Some(t);
        }
        let n = self.n;
        let t = self.value(*src)?;
        let &[b, len] = t.dims() else {
            return Ok(false);
        };
        let quantized =
            |v: &[f64], stride| intdot::IntVector::quantized(v, stride, b, len / n, n, f);
        let Some(xi) = with_host_rows(t, quantized)? else {
            return Ok(false);
        };
        self.int_x.insert(ValueId(q as u32), Some(Arc::new(xi)));
        Ok(true)
    }

    /// [`Executor::quantize_to_ints`] of a quantize node `q` whose concat of `parts` the run
    /// skipped: each tile of each part quantized once per run ([`Executor::tile_ints`]), then
    /// the vector assembled from them; `false` when a tile has no integer form.
    fn quantize_parts_to_ints(
        &mut self,
        q: usize,
        parts: &[nnp_lowering::swgraph::TileSlice],
        f: &quant::BfpInts,
    ) -> Result<bool, Failure> {
        let mut columns = Vec::new();
        let mut b = 1;
        for p in parts {
            for k in p.start as usize..(p.start + p.count) as usize {
                let Some(c) = self.tile_ints(p.value, k, f)? else {
                    return Ok(false);
                };
                b = b.max(c.batch());
                columns.push(c);
            }
        }
        let columns: Vec<&intdot::IntVector> = columns.iter().map(|c| &**c).collect();
        let Some(xi) = intdot::IntVector::from_columns(&columns, b) else {
            return Ok(false);
        };
        self.int_x.insert(ValueId(q as u32), Some(Arc::new(xi)));
        self.paths.insert((Path::ConcatSkipped, q));
        Ok(true)
    }

    /// Tile `k` of value `v` ([b, len]) quantized in format `f` to one column of integers,
    /// once per run.
    fn tile_ints(
        &mut self,
        v: ValueId,
        k: usize,
        f: &quant::BfpInts,
    ) -> Result<Option<Arc<intdot::IntVector>>, Failure> {
        let slot = match self.int_tiles.iter().position(|(g, _)| g == f) {
            Some(s) => s,
            None => {
                self.int_tiles.push((*f, HashMap::new()));
                self.int_tiles.len() - 1
            }
        };
        if let Some(c) = self.int_tiles[slot].1.get(&(v, k)) {
            return Ok(c.clone());
        }
        let n = self.n;
        let t = self.value(v)?;
        let &[b, _] = t.dims() else { return Ok(None) };
        let column = with_host_rows(t, |x, stride| {
            let x = x.get(k * n..(k * n + (b.max(1) - 1) * stride + n))?;
            intdot::IntVector::quantized(x, stride, b, 1, n, f)
        })?
        .map(Arc::new);
        self.int_tiles[slot].1.insert((v, k), column.clone());
        Ok(column)
    }

    /// Whether a product's vector `x` is available: computed, or as integers.
    fn vector_ready(&self, x: ValueId) -> bool {
        self.ready(x) || matches!(self.int_x.get(&x), Some(Some(_)))
    }

    /// The batch of a product's vector `x`.
    fn batch_of(&self, x: ValueId) -> Result<usize, ExecError> {
        match self.int_x.get(&x) {
            Some(Some(xi)) => Ok(xi.batch()),
            _ => Ok(self.value(x)?.dims()[0]),
        }
    }

    /// A product's vector `x` as a tensor: its value, or restored from the integers it was
    /// quantized to ([`Executor::quantize_to_ints`]; then held for the rest of the run).
    fn vector(&mut self, x: ValueId) -> Result<Tensor, Failure> {
        if let Some(t) = self.values.get(x.index()).and_then(Option::as_ref) {
            return Ok(t.clone());
        }
        let Some(Some(xi)) = self.int_x.get(&x) else {
            return Ok(self.value(x)?.clone());
        };
        let (b, v) = (xi.batch(), xi.restore());
        let t = Tensor::from_vec(v, (b, xi.ints().len() / b.max(1)), &self.dev)?;
        self.values[x.index()] = Some(t.clone());
        Ok(t)
    }

    /// The operands of a product of `w` and `x` at batch `b`.
    fn operands(&self, x: ValueId, w: ValueId, b: usize) -> Operands {
        Operands {
            x,
            w,
            b,
            // Weight-side work is cached for the session when the stack is a constant.
            cacheable: self.constant.get(w.index()).copied().unwrap_or(false),
        }
    }

    /// A weight stack's form in the cache `pick` picks, kept for the session when `cacheable`
    /// (a constant stack), else made anew by `make`.
    fn weight_side<V: Clone>(
        &mut self,
        pick: fn(&mut Caches) -> &mut HashMap<ValueId, V>,
        w: ValueId,
        cacheable: bool,
        make: impl FnOnce(&mut Self) -> Result<V, Failure>,
    ) -> Result<V, Failure> {
        if cacheable && let Some(v) = pick(self.caches).get(&w) {
            return Ok(v.clone());
        }
        let v = make(self)?;
        if cacheable {
            pick(self.caches).insert(w, v.clone());
        }
        Ok(v)
    }

    /// The integer operands of a product (weights cached for the session when `cacheable`,
    /// the vector for the run), when both fit the integer kernel.
    #[allow(clippy::type_complexity)]
    fn int_operands(
        &mut self,
        spec: &MatVec,
        Operands { x, w, b, cacheable }: Operands,
    ) -> Result<Option<(Arc<intdot::IntWeights>, Arc<intdot::IntVector>)>, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let wi = self.weight_side(
            |c| &mut c.int,
            w,
            cacheable,
            |ex| Ok(int_weights(&ex.weights(w)?, rows, cols, n)?),
        )?;
        let Some(wi) = wi else { return Ok(None) };
        let xi = match self.int_x.get(&x) {
            Some(xi) => xi.clone(),
            None => {
                let xi = with_host(self.value(x)?, |v| intdot::IntVector::new(v, b, cols, n))?
                    .map(Arc::new);
                self.int_x.insert(x, xi.clone());
                xi
            }
        };
        Ok(xi.filter(|xi| intdot::fits(&wi, xi)).map(|xi| (wi, xi)))
    }

    /// The product of weight stack `w` (sliced once for the session when `cacheable`) and
    /// vector `x` on integer slices ([`intdot::SlicedWeights`]), or `None` where the operands
    /// take too many slices (the float path then computes it).
    fn sliced_product(
        &mut self,
        spec: &MatVec,
        Operands { x, w, b, cacheable }: Operands,
    ) -> Result<Option<Vec<f64>>, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let xt = self.vector(x)?;
        // Sliced for vectors like this first one.
        let sw = self.weight_side(
            |c| &mut c.int_sliced,
            w,
            cacheable,
            |ex| {
                let wt = ex.weights(w)?;
                let sw = with_host(&wt, |wv| {
                    with_host(&xt, |xv| intdot::SlicedWeights::new(wv, xv, rows, cols, n))
                })??;
                Ok(sw.map(Arc::new))
            },
        )?;
        let Some(sw) = sw else { return Ok(None) };
        Ok(with_host(&xt, |v| sw.matvec(spec, v, b, intdot::simd()))?)
    }

    /// Integer operands on the GPU, uploaded once (weights per session when `cacheable`, the
    /// vector per run).
    fn gpu_operands(
        &mut self,
        gpu: &gpu::Gpu,
        (x, xi): (ValueId, &intdot::IntVector),
        (w, wi): (ValueId, &intdot::IntWeights),
        cacheable: bool,
    ) -> Result<(Arc<gpu::GpuWeights>, Arc<gpu::GpuVector>), ExecError> {
        let gw = match self.caches.gpu.get(&w) {
            Some(gw) if cacheable => gw.clone(),
            _ => {
                let gw = Arc::new(gpu.weights(wi)?);
                if cacheable {
                    self.caches.gpu.insert(w, gw.clone());
                }
                gw
            }
        };
        let gx = match self.gpu_x.get(&x) {
            Some(gx) => gx.clone(),
            None => {
                let gx = Arc::new(gpu.vector(xi)?);
                self.gpu_x.insert(x, gx.clone());
                gx
            }
        };
        Ok((gw, gx))
    }

    /// With a GPU: compute the product at `upcoming[0]` and every product among the next nodes
    /// of the evaluation order whose operands are ready, in one [`gpu::Gpu::products`] call (a
    /// few launches, one wait): at an LSTM's first product, the `W x_t` products of every step
    /// (the products-first order, [`fused::schedule`]), then each step's four `U h_(t-1)`. The
    /// values wait in `prefetched` until the main loop reaches their nodes; a product the GPU
    /// refuses is left to [`Executor::matvec`] (the CPU).
    fn prefetch_products(&mut self, upcoming: &[usize]) -> Result<(), Failure> {
        // Nodes scanned (the products-first order puts an LSTM's 128 `W x_t` products and
        // their operands side by side), and the most output bytes one batch holds.
        const LOOKAHEAD: usize = 1024;
        const MAX_BYTES: usize = 1 << 28;
        let mut bytes = 0;
        let Some(gpu) = self.gpu.filter(|_| self.int && intdot::supports(self.n)) else {
            return Ok(());
        };
        // The products found, with their operands (held here so `Product` can borrow them).
        let mut found = Vec::new();
        for &k in upcoming.iter().take(LOOKAHEAD) {
            let Some((spec, x, w)) = product_spec(&self.g.nodes[k].op, self.n) else {
                continue;
            };
            if bytes >= MAX_BYTES {
                break;
            }
            // Constants ahead are computed in the first run only (and kept): they wait for it.
            let constant_ahead = self.constant[k] && k != upcoming[0];
            let waiting = !constant_ahead && !self.prefetched.contains_key(&k);
            if !waiting || !self.vector_ready(x) || !self.weights_ready(w) {
                continue;
            }
            let b = self.batch_of(x)?;
            let operands = self.operands(x, w, b);
            let cacheable = operands.cacheable;
            let t0 = std::time::Instant::now();
            let Some((wi, xi)) = self.int_operands(&spec, operands)? else {
                continue;
            };
            tally(&mut self.prof, "gpu: to ints", t0, 1);
            let t0 = std::time::Instant::now();
            let (gw, gx) = self.gpu_operands(gpu, (x, &xi), (w, &wi), cacheable)?;
            tally(&mut self.prof, "gpu: upload", t0, 1);
            bytes += b * spec.rows * spec.n * std::mem::size_of::<f64>();
            found.push((k, spec, b, (wi, gw), (xi, gx)));
        }
        let t0 = std::time::Instant::now();
        let products: Vec<gpu::Product> = found
            .iter()
            .map(|(_, spec, _, w, x)| gpu::Product {
                spec: *spec,
                w: (&w.0, &w.1),
                x: (&x.0, &x.1),
            })
            .collect();
        let values = gpu.products(&products)?;
        tally(&mut self.prof, "gpu: products", t0, 1);
        let t0 = std::time::Instant::now();
        for ((k, spec, b, ..), y) in found.iter().zip(values) {
            // A product the GPU refused is left to the main loop (the CPU kernel).
            if let Some(y) = y {
                self.prefetched.insert(
                    *k,
                    Tensor::from_vec(y, (*b, spec.rows * spec.n), &self.dev)?,
                );
                self.paths.insert((Path::IntKernel, *k));
                self.paths.insert((Path::Gpu, *k));
            }
        }
        tally(&mut self.prof, "gpu: tensors", t0, 1);
        Ok(())
    }
}

/// The product of a `TiledMatVec` node at native dimension `n`: its spec, vector and weights.
fn product_spec(op: &Op, n: usize) -> Option<(MatVec, ValueId, ValueId)> {
    match op {
        Op::TiledMatVec {
            x,
            w,
            rows,
            cols,
            accumulation,
            output,
            ..
        } => Some((
            MatVec {
                rows: *rows as usize,
                cols: *cols as usize,
                n,
                accumulation: *accumulation,
                output: *output,
            },
            *x,
            *w,
        )),
        _ => None,
    }
}

/// A weight stack as integers for [`intdot`], `None` when it does not fit.
fn int_weights(
    t: &Tensor,
    rows: usize,
    cols: usize,
    n: usize,
) -> candle_core::Result<Option<Arc<intdot::IntWeights>>> {
    Ok(with_host(t, |v| intdot::IntWeights::new(v, rows, cols, n))?.map(Arc::new))
}

/// A tensor's values on the host, row-major.
fn host_vec(t: &Tensor) -> candle_core::Result<Vec<f64>> {
    t.flatten_all()?.to_device(&Device::Cpu)?.to_vec1()
}

/// `f` of a tensor's values on the host, row-major: borrowed where the tensor is contiguous
/// f64 on the CPU (a weight stack is hundreds of MiB), else copied once ([`host_vec`]).
fn with_host<R>(t: &Tensor, f: impl FnOnce(&[f64]) -> R) -> candle_core::Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let Some(v) = host_slice(&storage, layout) {
            return Ok(f(v));
        }
    }
    Ok(f(&host_vec(t)?))
}

/// `f(values, stride)` of a `[rows, len]` tensor whose row `r` is `values[r * stride..][..len]`:
/// its f64 storage on the CPU where each row is contiguous (an LSTM's `x_t` is a slice of the
/// whole input's rows), else a contiguous copy.
fn with_host_rows<R>(t: &Tensor, f: impl FnOnce(&[f64], usize) -> R) -> candle_core::Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(CpuStorage::F64(v)), &[rows, len], &[stride, 1]) =
            (&*storage, layout.dims(), layout.stride())
            && rows > 0
            && let Some(v) =
                v.get(layout.start_offset()..layout.start_offset() + (rows - 1) * stride + len)
        {
            return Ok(f(v, stride));
        }
    }
    let len = t.dims().last().copied().unwrap_or(0);
    Ok(f(&host_vec(t)?, len))
}

/// The values of contiguous f64 storage on the CPU, row-major; `None` for anything else.
fn host_slice<'a>(storage: &'a candle_core::Storage, layout: &Layout) -> Option<&'a [f64]> {
    match (storage, layout.contiguous_offsets()) {
        (candle_core::Storage::Cpu(CpuStorage::F64(v)), Some((a, e))) => Some(&v[a..e]),
        _ => None,
    }
}

/// A weight stack `[1, rows*cols, n, n]` as `[chunks, rows*n, k]` for the chunked matmul:
/// `[rows, cols, n, n/k, k] -> [cols, n/k, rows, n, k]`.
fn arrange_w(
    t: &Tensor,
    rows: usize,
    cols: usize,
    n: usize,
    k: usize,
) -> candle_core::Result<Tensor> {
    t.reshape((rows, cols, n, n / k, k))?
        .permute((1, 3, 0, 2, 4))?
        .contiguous()?
        .reshape((cols * n / k, rows * n, k))
}

/// The operands of one product: vector `x` at batch `b`, weight stack `w`, and whether work on
/// the weights is kept for the session (a constant stack).
#[derive(Clone, Copy)]
struct Operands {
    x: ValueId,
    w: ValueId,
    b: usize,
    cacheable: bool,
}

/// The float path's matmul of a product of these formats: the chunk whose partials it proves
/// exact (`None`: exact slices, or element by element), and f32 where that proves the same
/// chunk exact (twice the BLAS speed), else f64.
fn float_chunk(vector: &Format, matrix: &Format, n: usize) -> (Option<usize>, DType) {
    let chunk = matmul::exact_chunk(vector, matrix, n).filter(|k| *k >= MIN_CHUNK.min(n));
    match chunk {
        Some(k) if matmul::exact_chunk_f32(vector, matrix, n) == Some(k) => (chunk, DType::F32),
        _ => (chunk, DType::F64),
    }
}

/// The plan's stacks whose every product takes the chunked matmul with one chunk and dtype
/// ([`float_chunk`]): that `(chunk, dtype)` by node.
fn chunked_stacks(graph: &SwGraph, plan: &prepare::Plan) -> Vec<Option<(usize, DType)>> {
    let mut key: Vec<Option<Option<(usize, DType)>>> = vec![None; graph.nodes.len()];
    for node in &graph.nodes {
        let Op::TiledMatVec {
            w,
            vector_format,
            matrix_format,
            ..
        } = &node.op
        else {
            continue;
        };
        let (chunk, dtype) = float_chunk(vector_format, matrix_format, graph.native);
        let this = chunk.map(|k| (k, dtype));
        let seen = &mut key[w.index()];
        *seen = Some(match *seen {
            Some(before) if before != this => None,
            _ => this,
        });
    }
    key.into_iter()
        .zip(&plan.stacks)
        .map(|(k, s)| k.flatten().filter(|_| s.is_some()))
        .collect()
}

/// A vector `[b, cols*n]` as `[chunks, k, b]`.
fn arrange_x(t: &Tensor, b: usize, cols: usize, n: usize, k: usize) -> candle_core::Result<Tensor> {
    t.reshape((b, cols * n / k, k))?
        .permute((1, 2, 0))?
        .contiguous()
}

/// A contiguous f64 matrix `[r, c]` transposed to `[c, r]` and converted to f32 (exact for
/// values [`matmul::exact_chunk_f32`] admits) or kept f64, in cache-sized tiles.
struct TransposeTo(DType);

impl CustomOp1 for TransposeTo {
    fn name(&self) -> &'static str {
        "transpose_to"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F64(v), Some((a, e))) = (s, l.contiguous_offsets()) else {
            candle_core::bail!("transpose_to: expected contiguous f64 data")
        };
        let (r, c) = l.shape().dims2()?;
        let v = &v[a..e];
        let storage = match self.0 {
            DType::F32 => CpuStorage::F32(matmul::transpose_map(v, r, c, |x| x as f32)),
            DType::F64 => CpuStorage::F64(matmul::transpose_map(v, r, c, |x| x)),
            other => candle_core::bail!("transpose_to: unsupported dtype {other:?}"),
        };
        Ok((storage, Shape::from((c, r))))
    }
}

fn internal(msg: &str) -> ExecError {
    ExecError::Graph(GraphError::Other(format!("internal: {msg}")))
}

/// Pad dimension `dim` of `t` to `len` with `value`.
fn pad_dim(t: &Tensor, dim: usize, len: usize, value: f64) -> candle_core::Result<Tensor> {
    let have = t.dims()[dim];
    if have >= len {
        return Ok(t.clone());
    }
    let mut dims = t.dims().to_vec();
    dims[dim] = len - have;
    let pad = Tensor::full(value, dims, t.device())?;
    Tensor::cat(&[t, &pad], dim)
}

/// Broadcast the batch dimension of every tensor to the largest.
fn broadcast_batch(ts: &[Tensor]) -> candle_core::Result<Vec<Tensor>> {
    let b = ts.iter().map(|t| t.dims()[0]).max().unwrap_or(1);
    ts.iter()
        .map(|t| {
            if t.dims()[0] == b {
                Ok(t.clone())
            } else {
                let mut dims = t.dims().to_vec();
                dims[0] = b;
                t.broadcast_as(dims)?.contiguous()
            }
        })
        .collect()
}

/// An element-wise kernel on a contiguous f64 tensor (CPU path on every device).
fn map1(
    t: &Tensor,
    name: &'static str,
    f: impl Fn(&[f64], &mut [f64]) + Send + Sync,
) -> candle_core::Result<Tensor> {
    let dev = t.device().clone();
    let t = t.contiguous()?.to_device(&Device::Cpu)?;
    let y = t.apply_op1_no_bwd(&Map1(name, move |x: &[f64]| {
        let mut o = vec![0.0; x.len()];
        f(x, &mut o);
        (o, Shape::from(x.len()))
    }))?;
    y.reshape(t.dims())?.to_device(&dev)
}

/// A CPU custom op from a closure: contiguous f64 in, (values, shape) out.
struct Map1<F>(&'static str, F);

impl<F: Fn(&[f64]) -> (Vec<f64>, Shape) + Send + Sync> CustomOp1 for Map1<F> {
    fn name(&self) -> &'static str {
        self.0
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F64(v) = s else {
            candle_core::bail!("{}: expected f64 data", self.0)
        };
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("{}: expected contiguous data", self.0)
        };
        let (out, shape) = (self.1)(&v[a..b]);
        Ok((CpuStorage::F64(out), shape))
    }
}

/// [`matmul::sum_partials`] as a CPU custom op on f32 or f64 partials.
struct SumPartials {
    spec: MatVec,
    k: usize,
    pairs: usize,
    b: usize,
}

impl CustomOp1 for SumPartials {
    fn name(&self) -> &'static str {
        "sum_partials"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let Some((a, e)) = l.contiguous_offsets() else {
            candle_core::bail!("sum_partials: expected contiguous data")
        };
        let (spec, k, pairs, b) = (&self.spec, self.k, self.pairs, self.b);
        let out = match s {
            CpuStorage::F32(v) => matmul::sum_partials(spec, k, pairs, &v[a..e], b),
            CpuStorage::F64(v) => matmul::sum_partials(spec, k, pairs, &v[a..e], b),
            _ => candle_core::bail!("sum_partials: expected f32 or f64 data"),
        };
        Ok((CpuStorage::F64(out), Shape::from((b, spec.rows * spec.n))))
    }
}

/// Lower `program` and run it (the one-call path of `nnpc run`).
pub fn run_program(
    program: &nnp_grammar::Program,
    data: &HostData,
    opts: &ExecOptions,
) -> Result<Execution, RunError> {
    let g = nnp_lowering::swgraph::lower(program)?;
    let roots = if opts.keep_writes {
        nnp_lowering::swgraph::Roots::OutputsAndWrites
    } else {
        nnp_lowering::swgraph::Roots::Outputs
    };
    let g = nnp_lowering::swgraph::optimize(&g, roots);
    Ok(execute(&g, data, opts)?)
}

/// Lowering or execution failure.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Lower(#[from] nnp_lowering::swgraph::LowerError),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulator::{self, EmuOptions};
    use nnp_grammar::SourceFile;
    use nnp_lowering::swgraph::{Node, Roots, lower, optimize};

    /// The outputs' bit patterns, NaN canonical (NaN payloads are not part of the contract).
    fn bits(o: &Outputs) -> Vec<(String, Vec<u32>)> {
        let canonical = |v: &f32| if v.is_nan() { 0x7FC0_0000 } else { v.to_bits() };
        o.iter()
            .map(|(k, t)| (k.clone(), t.data.iter().map(canonical).collect()))
            .collect()
    }

    /// `samples/lstm.nnp`, checked, and its optimized graph.
    fn lstm_sample() -> (nnp_grammar::Program, SwGraph) {
        lstm_sample_on(None)
    }

    /// [`lstm_sample`] on `target`.
    fn lstm_sample_on(target: Option<nnp_grammar::Target>) -> (nnp_grammar::Program, SwGraph) {
        checked(
            "lstm.nnp",
            include_str!("../../../samples/lstm.nnp"),
            target,
        )
    }

    /// Firmware `text` (file `name`) checked for `target`, and its optimized graph.
    fn checked(
        name: &str,
        text: &str,
        target: Option<nnp_grammar::Target>,
    ) -> (nnp_grammar::Program, SwGraph) {
        let src = Arc::new(SourceFile::new(name, text));
        let program = nnp_grammar::check(src, target)
            .expect("firmware checks")
            .program;
        let g = optimize(&lower(&program).expect("lowers"), Roots::Outputs);
        (program, g)
    }

    /// The products (`TiledMatVec` nodes) of `g`.
    fn products(g: &SwGraph) -> usize {
        g.nodes
            .iter()
            .filter(|n| matches!(n.op, Op::TiledMatVec { .. }))
            .count()
    }

    /// The bytes per item a run holds at once, by hand (N = 2): an input of 4 lanes (4 f64),
    /// padded to 3 tiles (6 f64) that an output reads, the relu of the padded value and the
    /// sum of the relu with itself. The input is freed after the pad and the constant is not
    /// counted; the padded value stays to the end (an output's), so at the sum the padded
    /// value, the relu and the sum are alive: 3 x 6 f64. With the output reading the input
    /// instead, the padded value goes after the relu: at the sum, 4 + 6 + 6 f64.
    #[test]
    fn peak_item_bytes_by_hand() {
        let v = Ty::Vector { tiles: 3 };
        let output = |src: u32| Node {
            op: Op::Output {
                name: "y".into(),
                row: 0,
                src: ValueId(src),
            },
            ty: Ty::None,
        };
        let mut graph = SwGraph {
            version: nnp_lowering::swgraph::SWGRAPH_VERSION,
            source: "hand".into(),
            target: "hand".into(),
            native: 2,
            storage: FloatFormat::FP16,
            nodes: vec![
                Node {
                    op: Op::Input {
                        name: "x".into(),
                        shape: vec![4],
                    },
                    ty: Ty::Logical { shape: vec![4] },
                },
                Node {
                    op: Op::Zero { shape: vec![6] },
                    ty: Ty::Logical { shape: vec![6] },
                },
                Node {
                    op: Op::PadToTiles {
                        src: ValueId(0),
                        layout: TileLayout::Vector,
                        pad: 0.0,
                    },
                    ty: v.clone(),
                },
                output(2),
                Node {
                    op: Op::Unary {
                        op: UnOp::Relu,
                        src: ValueId(2),
                        format: FloatFormat::FP16,
                        table: None,
                    },
                    ty: v.clone(),
                },
                Node {
                    op: Op::Binary {
                        op: nnp_lowering::swgraph::BinOp::Add,
                        a: ValueId(4),
                        b: ValueId(4),
                        format: FloatFormat::FP16,
                    },
                    ty: v,
                },
            ],
            outputs: vec![],
            decls: vec![],
            writes: vec![],
            checks: vec![],
        };
        let order: Vec<usize> = (0..6).collect();
        let constant = [false, true, false, false, false, false];
        // Last readers: the input's at position 2, the padded value's at 4 (the relu), the
        // relu's at 5; the rest are read by nothing.
        let last_use = [2, 0, 4, 0, 5, 0];
        let none = HashSet::new();
        assert_eq!(
            peak_item_bytes(&graph, &order, &constant, &last_use, &none),
            3 * 6 * 8
        );
        // A traced relu adds its written copy (6 f64) and its records' bits (6 u32).
        let relu: HashSet<ValueId> = [ValueId(4)].into();
        assert_eq!(
            peak_item_bytes(&graph, &order, &constant, &last_use, &relu),
            3 * 6 * 8 + 6 * (8 + 4)
        );
        graph.nodes[3] = output(0);
        let last_use = [3, 0, 4, 0, 5, 0];
        assert_eq!(
            peak_item_bytes(&graph, &order, &constant, &last_use, &none),
            (4 + 6 + 6) * 8
        );
    }

    /// The chunks of a run, by hand: `chunk_items` consecutive ranges of nearly equal size,
    /// the first run too; by default none over what [`CHUNK_BYTES`] allow at the session's
    /// bytes per item, or over 256 items where those allow fewer.
    #[test]
    fn chunks_by_hand() {
        let (program, g) = lstm_sample_on(None);
        let data = HostData::random(&program, 2, 1);
        let session = |k: Option<usize>| {
            let opts = ExecOptions {
                chunk_items: k,
                ..ExecOptions::default()
            };
            Session::new(&g, &opts).expect("session")
        };
        let s = session(Some(5));
        assert_eq!(s.chunks(13), vec![0..4, 4..8, 8..13]);
        assert_eq!(s.chunks(5), vec![0..5]);
        assert_eq!(s.chunks(1), vec![0..1]);
        let mut warm = session(Some(5));
        warm.run(&data).expect("first run");
        assert_eq!(warm.chunks(11), vec![0..3, 3..7, 7..11]);
        assert_eq!(session(Some(1)).chunks(3), vec![0..1, 1..2, 2..3]);
        // By default: the README's LSTM holds at most a few tens of KiB per item (2 tiles of
        // h and c, 4 gates of 2 tiles, at f64), so a batch of 256 is one chunk, and a million
        // items go in chunks of at most CHUNK_BYTES.
        let d = session(None);
        assert!((1_000..100_000).contains(&d.item_bytes), "{}", d.item_bytes);
        assert_eq!(d.chunks(256), vec![0..256]);
        let big = d.chunks(1_000_000);
        assert!(big.len() > 1);
        assert_eq!((big[0].start, big[big.len() - 1].end), (0, 1_000_000));
        assert!(big.windows(2).all(|p| p[0].end == p[1].start));
        assert!(
            big.iter().all(|r| r.len() * d.item_bytes <= CHUNK_BYTES),
            "{:?}",
            &big[..2]
        );
        // A graph of large values per item still takes chunks of up to 256 items.
        let mut fat = session(None);
        fat.item_bytes = CHUNK_BYTES;
        assert_eq!(fat.chunks(600), vec![0..200, 200..400, 400..600]);
        assert_eq!(fat.chunks(512), vec![0..256, 256..512]);
        assert_eq!(fat.chunks(100), vec![0..100]);
    }

    /// `run_each` hands every chunk's outputs to its sink in order, with the chunk's items,
    /// and the pieces laid end to end are the outputs of one pass (and of `run`, cold and
    /// warm); a sink's error stops the run at that chunk.
    #[test]
    fn run_each_hands_chunks_in_order() {
        let (program, g) = lstm_sample_on(None);
        let data = HostData::random(&program, 13, 4);
        let one_pass = execute(&g, &data, &ExecOptions::default()).expect("one pass");
        let opts = ExecOptions {
            chunk_items: Some(5),
            ..ExecOptions::default()
        };
        let mut s = Session::new(&g, &opts).expect("session");
        for _ in 0..2 {
            let mut pieces = Vec::new();
            let run = s
                .run_each(&data, |items, outputs| {
                    pieces.push((items, outputs));
                    Ok::<_, ExecError>(())
                })
                .expect("run_each");
            assert!(run.outputs.is_empty());
            assert_eq!(run.chunks, 3);
            let ranges: Vec<_> = pieces.iter().map(|(r, _)| r.clone()).collect();
            assert_eq!(ranges, vec![0..4, 4..8, 8..13]);
            for (name, whole) in &one_pass.outputs {
                let per_item = whole.len() / 13;
                for (items, outputs) in &pieces {
                    let t = &outputs[name];
                    assert_eq!(t.shape[0], items.len());
                    assert_eq!(&t.shape[1..], &whole.shape[1..]);
                    let want = &whole.data[items.start * per_item..items.end * per_item];
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&t.data), bits(want), "{name} {items:?}");
                }
            }
        }
        assert_eq!(
            bits(&s.run(&data).expect("run").outputs),
            bits(&one_pass.outputs)
        );
        let mut calls = 0;
        let stopped = s.run_each(&data, |items, _| {
            calls += 1;
            if items.start > 0 {
                return Err(ExecError::Device(format!("sink refused {items:?}")));
            }
            Ok(())
        });
        assert_eq!(calls, 2);
        let e = stopped.err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("sink refused 4..8"));
    }

    /// The shards of a run, by hand: none for a first run, `batch_shards` consecutive ranges
    /// of nearly equal size (at most one per item) for warm ones, and by default one per
    /// thread of at least 4 items for a graph of small weights only.
    #[test]
    fn shards_by_hand() {
        let (program, g) = lstm_sample_on(None);
        let data = HostData::random(&program, 2, 1);
        let shards = |k: Option<usize>, warm: bool, b: usize| {
            let opts = ExecOptions {
                batch_shards: k,
                ..ExecOptions::default()
            };
            let mut s = Session::new(&g, &opts).expect("session");
            if warm {
                s.run(&data).expect("first run");
            }
            s.shards(0..b)
        };
        assert_eq!(shards(Some(3), false, 13), None);
        assert_eq!(shards(Some(3), true, 13), Some(vec![0..4, 4..8, 8..13]));
        assert_eq!(shards(Some(5), true, 3), Some(vec![0..1, 1..2, 2..3]));
        assert_eq!(shards(Some(1), true, 64), None);
        // By default, for the README's LSTM (4 W of 2 x 1 tiles and 4 U of 2 x 2 tiles of
        // 128 x 128: 384 Ki elements): one shard per thread, none below 4 items each (at most
        // 16 at batch 64), consecutive, sizes apart by at most one item.
        let threads = rayon::current_num_threads();
        match shards(None, true, 64) {
            None => assert_eq!(threads, 1),
            Some(s) => {
                assert_eq!(s.len(), threads.min(16));
                assert_eq!((s[0].start, s[s.len() - 1].end), (0, 64));
                assert!(s.windows(2).all(|p| p[0].end == p[1].start));
                let sizes: Vec<usize> = s.iter().map(|r| r.len()).collect();
                let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
                assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{sizes:?}");
                if threads == 2 {
                    assert_eq!(s, vec![0..32, 32..64]);
                }
            }
        }
        assert_eq!(shards(None, true, 3), None);
        // The benchmark LSTM's 8 Mi elements: whole batches.
        let big = include_str!("../../../samples/bench/lstm_1024.nnp");
        let (_, big) = checked("lstm_1024.nnp", big, None);
        let small = |g: &SwGraph| Session::new(g, &ExecOptions::default()).map(|s| s.small);
        assert!(small(&g).expect("session"));
        assert!(!small(&big).expect("session"));
    }

    /// A session's warm runs (weights prepared by the first run, new inputs and batch sizes)
    /// give the bits of a fresh `execute` and of the emulator (the oracle).
    #[test]
    fn warm_session_runs_equal_fresh_runs_and_the_emulator() {
        let (program, g) = lstm_sample();
        let opts = ExecOptions::default();
        let mut session = Session::new(&g, &opts).expect("session");
        for (batch, seed) in [(3, 1), (2, 2), (3, 1)] {
            let data = HostData::random(&program, batch, seed);
            // Seeded weights differ by seed: a session keeps its first run's, so feed those.
            let mut fed = HostData::random(&program, batch, 1);
            fed.inputs = data.inputs.clone();
            let warm = session.run(&fed).expect("warm run");
            let fresh = execute(&g, &fed, &opts).expect("fresh run");
            let emu = emulator::emulate(&program, &fed, &EmuOptions::default()).expect("emulates");
            assert_eq!(
                bits(&warm.outputs),
                bits(&fresh.outputs),
                "batch {batch} seed {seed}"
            );
            assert_eq!(
                bits(&warm.outputs),
                bits(&emu.outputs),
                "batch {batch} seed {seed}"
            );
        }
    }

    /// Where the integer kernel runs, every weight stack of the LSTM sample is one chain that
    /// the session prepares in one pass from the host's weights ([`prepare`]), and every
    /// vector of a product goes straight to integers ([`intdot::IntVector::quantized`]). With
    /// adversarial weights (fp16 ties, fp16 and f32 subnormals, `-0.0`, magnitudes 2^-30 to
    /// 2^15 in one row) the outputs are the emulator's bits. A weight that rounds to
    /// infinity gives its stack no integer form: that chain is evaluated node by node and its
    /// stack kept as f64, with the emulator's bits still. On the float path every stack is
    /// prepared in one pass straight into its matmul's f32 layout and kept in it alone, with
    /// the emulator's bits too, in the first run and in a warm one.
    #[test]
    fn weight_stacks_prepared_in_one_pass_give_the_emulators_bits() {
        if !intdot::simd() {
            return;
        }
        let (program, g) = lstm_sample();
        let mut s = 0x5851_f42d_4c95_7f2du64;
        let mut data = HostData::random(&program, 3, 4);
        for (k, t) in data.weights.values_mut().enumerate() {
            for (i, x) in t.data.iter_mut().enumerate() {
                let r = intdot::tests::xorshift(&mut s);
                *x = match (i / 16 + k) % 5 {
                    0 => [0.0, -0.0, *x][(r % 3) as usize],
                    1 => (1.0 + (2.0 * (r % 1024) as f32 + 1.0) / 2048.0) * 2f32.powi(-3),
                    2 => [2f32.powi(-25), 3.0 * 2f32.powi(-26), 1e-40][(r % 3) as usize],
                    3 => *x * 2f32.powi((r % 46) as i32 - 30),
                    _ => *x,
                };
            }
        }
        let stack_of = |session: &Session, name: &str| {
            session.plan.stacks.iter().position(|stack| {
                stack.iter().flat_map(|s| &s.parts).any(|p| {
                    matches!(&g.nodes[p.chain.weight].op, Op::Weight { name: w, .. } if w == name)
                })
            })
        };
        for (float_matmul, overflow) in [(false, false), (false, true), (true, false), (true, true)]
        {
            let mut fed = data.clone();
            if overflow {
                fed.weights.get_mut("Uc").expect("Uc").data[300] = 70000.0;
            }
            let opts = ExecOptions {
                float_matmul,
                ..ExecOptions::default()
            };
            let mut session = Session::new(&g, &opts).expect("session");
            let stacks = session.stacks.iter().flatten().count();
            assert_eq!(session.plan.stacks.iter().flatten().count(), stacks);
            let out = session.run(&fed).expect("run");
            // The float path's f64 stacks have no integer form to miss.
            let fallbacks = usize::from(overflow && !float_matmul);
            assert_eq!(out.one_pass_stacks, stacks - fallbacks);
            // The vectors of the products, x_t and h_(t-1) of T = 4 steps, go straight to
            // integers where the kernel runs (Uc's NaN block makes h_1 onwards NaN: those are
            // quantized as f64 as before).
            assert_eq!(session.to_ints.iter().flatten().count(), 8);
            let quantized = match (float_matmul, overflow) {
                (true, _) => 0,
                (false, true) => 5,
                (false, false) => 8,
            };
            assert_eq!(
                out.quantized_to_ints, quantized,
                "{float_matmul} {overflow}"
            );
            let emu = emulator::emulate(&program, &fed, &EmuOptions::default()).expect("emulates");
            let case = format!("float_matmul {float_matmul}, overflow {overflow}");
            assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{case}");
            let uc = stack_of(&session, "Uc").expect("Uc has a chain");
            let as_ints = session.caches.as_ints.contains_key(&ValueId(uc as u32));
            assert_eq!(
                as_ints,
                !overflow && !float_matmul,
                "{case}: Uc kept as integers"
            );
            // The float path keeps every stack in its matmul's layout alone, f32 here (BFP 8);
            // on the integer path Uc's NaN block sends its products to the float path too.
            let arranged = session.caches.arranged.keys();
            let arranged: Vec<_> = arranged.filter(|key| key.0 == ValueId(uc as u32)).collect();
            let expected = usize::from(float_matmul || overflow);
            assert_eq!(arranged.len(), expected, "{case}: Uc arranged");
            assert!(arranged.iter().all(|key| key.2 == DType::F32), "{case}");
            assert_eq!(
                session.consts[uc].is_some(),
                overflow && !float_matmul,
                "{case}: Uc kept as f64"
            );
            let expected = if float_matmul { 0 } else { stacks - fallbacks };
            assert_eq!(session.caches.as_ints.len(), expected, "{case}");
            let kept_f64 = session.consts.iter().zip(&session.stacks);
            let kept_f64 = kept_f64.filter(|(c, s)| c.is_some() && s.is_some()).count();
            assert_eq!(kept_f64, fallbacks, "{case}: stacks kept as f64");
            // A warm run reads the kept forms alone.
            let warm = session.run(&fed).expect("warm run");
            assert_eq!(bits(&warm.outputs), bits(&emu.outputs), "{case}: warm");
            if !overflow {
                assert!(
                    out.outputs
                        .values()
                        .all(|t| t.data.iter().all(|v| v.is_finite())),
                    "the finite case stays finite"
                );
            }
        }
    }

    /// A product whose weights have no integer form (Uc stored in fp16: its rows span more
    /// bits than the kernel's integers hold) reads its vector, which went straight to integers,
    /// as f64 values restored from them: the outputs are the emulator's bits, in the first run
    /// and a warm one.
    #[test]
    fn vectors_quantized_to_ints_serve_float_products_too() {
        if !intdot::simd() {
            return;
        }
        let text = include_str!("../../../samples/lstm.nnp").replace(
            "matrix Uc : [256, 256] at mrf[20]",
            "matrix Uc : [256, 256] at mrf[20] quant fp16",
        );
        let (program, g) = checked("lstm_fp16_uc.nnp", &text, None);
        let data = HostData::random(&program, 3, 7);
        let emu = emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
        let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
        // Uc's four products (one per step) take the float path; a warm run keeps the
        // products of the constant h_0 (three of them integer ones) from the first, and
        // quantizes h_0 no more.
        for (run, int_products, quantized) in [("first", 28, 8), ("warm", 28 - 3, 7)] {
            let out = session.run(&data).expect("run");
            assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{run} run");
            assert_eq!(out.quantized_to_ints, quantized, "{run} run");
            assert_eq!(out.int_products, int_products, "{run} run");
        }
    }

    /// A convolution's windows (`samples/conv3x3.nnp`: each a concat of 9 pixel tiles of the
    /// frame and the image, only quantized for the product) are assembled from their tiles,
    /// each quantized once per run, without the concat: the emulator's bits, 16 windows in
    /// the first run and in a warm one. With a NaN pixel in one item, the 9 windows that hold
    /// its tile have no integer form: they make their concat and take the float path, with
    /// the emulator's bits still.
    #[test]
    fn concats_quantized_part_by_part_give_the_emulators_bits() {
        if !intdot::simd() {
            return;
        }
        let text = include_str!("../../../samples/conv3x3.nnp");
        // Also with the frame as random weights instead of zeros: the windows' parts of three
        // frame tiles (one item standing for every item) then hold data, in an order that
        // matters.
        let loaded = text.replace("at ivrf[0] = 0", "at ivrf[0]");
        assert_ne!(loaded, text);
        let open = |text: &str| checked("conv3x3.nnp", text, None);
        for text in [loaded.as_str(), text] {
            let (program, g) = open(text);
            let data = HostData::random(&program, 5, 3);
            let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
            let emu = emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
            for run in ["first", "warm"] {
                let out = session.run(&data).expect("run");
                assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{run} run");
                let counts = (out.concats_skipped, out.quantized_to_ints, out.int_products);
                assert_eq!(counts, (16, 16, 16), "{run} run");
            }
        }
        let (program, g) = open(text);
        let mut data = HostData::random(&program, 5, 3);
        let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
        session.run(&data).expect("run");
        // Pixel (1, 1) of item 2 (row 5 of `img`, 128 lanes per pixel) is in the windows of
        // the 9 output pixels around it.
        let img = data.inputs.get_mut("img").expect("input img");
        img.data[(2 * 16 + 5) * 128 + 7] = f32::NAN;
        let emu = emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
        let out = session.run(&data).expect("run");
        assert_eq!(bits(&out.outputs), bits(&emu.outputs), "NaN pixel");
        assert_eq!(
            (out.concats_skipped, out.quantized_to_ints),
            (7, 7),
            "NaN pixel"
        );
        assert_eq!(out.int_products, 7, "NaN pixel");
    }

    /// `with_host_rows` hands a slice of wider rows (an LSTM's `x_t`) over in place, with the
    /// wide rows' stride, and anything else as a contiguous copy.
    #[test]
    fn host_rows_in_place_or_copied() {
        let v: Vec<f64> = (0..24).map(f64::from).collect();
        let t = Tensor::from_vec(v, (3, 8), &Device::Cpu).expect("tensor");
        let rows = |t: &Tensor| {
            with_host_rows(t, |v, stride| {
                let len = t.dims()[1];
                let rows: Vec<Vec<f64>> = (0..t.dims()[0])
                    .map(|r| v[r * stride..][..len].to_vec())
                    .collect();
                (stride, rows)
            })
            .expect("rows")
        };
        let narrow = t.narrow(1, 2, 4).expect("narrow");
        let (stride, got) = rows(&narrow);
        assert_eq!(stride, 8, "in place");
        assert_eq!(got, narrow.to_vec2::<f64>().expect("values"));
        let transposed = narrow.t().expect("t");
        let (stride, got) = rows(&transposed);
        assert_eq!(stride, 3, "copied");
        assert_eq!(got, transposed.to_vec2::<f64>().expect("values"));
    }

    /// Missing or mis-shaped weights are errors that name the tensor, on the one-pass path as
    /// on the nodes' (`float_matmul`); so are a missing or mis-shaped input.
    #[test]
    fn missing_or_misshaped_tensors_are_named() {
        let (program, g) = lstm_sample();
        for float_matmul in [false, true] {
            let opts = ExecOptions {
                float_matmul,
                ..ExecOptions::default()
            };
            let mut missing = HostData::random(&program, 2, 1);
            missing.weights.remove("Uc");
            let err = execute(&g, &missing, &opts).err().map(|e| e.to_string());
            let err = err.expect("missing weights are an error");
            assert!(
                err.contains("no host tensor `Uc` for the graph's weights"),
                "{err}"
            );
            let mut misshaped = HostData::random(&program, 2, 1);
            let uc = misshaped.weights.get_mut("Uc").expect("Uc");
            uc.shape = vec![128, 512];
            let err = execute(&g, &misshaped, &opts).err().map(|e| e.to_string());
            let err = err.expect("mis-shaped weights are an error");
            assert!(
                err.contains("host tensor `Uc` has shape [128, 512], the graph expects [256, 256]"),
                "{err}"
            );
        }
        // The input, which the session converts, pads and rounds in one pass, likewise.
        let session = Session::new(&g, &ExecOptions::default()).expect("session");
        assert_eq!(session.plan.inputs.iter().flatten().count(), 1, "x's chain");
        let mut missing = HostData::random(&program, 2, 1);
        let x = missing.inputs.remove("x").expect("x");
        let err = execute(&g, &missing, &ExecOptions::default()).err();
        let err = err
            .map(|e| e.to_string())
            .expect("a missing input is an error");
        assert!(err.contains("no host tensor `x`"), "{err}");
        let (mut misshaped, mut x) = (missing, x);
        x.shape = vec![2, x.data.len() / 2];
        misshaped.inputs.insert("x".into(), x);
        let err = execute(&g, &misshaped, &ExecOptions::default()).err();
        let err = err
            .map(|e| e.to_string())
            .expect("a mis-shaped input is an error");
        assert!(err.contains("host tensor `x` has shape [2, "), "{err}");
    }

    /// Where the integer kernel runs, a session keeps its weight stacks as integers only; a
    /// later run whose vectors do not fit the kernel (non-finite inputs) takes the float path
    /// on stacks restored from those integers, and still gives the emulator's bits.
    #[test]
    fn weights_kept_as_integers_are_restored_for_the_float_path() {
        if !intdot::simd() {
            return;
        }
        let (program, g) = lstm_sample();
        let products = products(&g);
        let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
        let first = session
            .run(&HostData::random(&program, 2, 1))
            .expect("first run");
        assert_eq!(first.int_products, products, "every product on the kernel");
        let stacks = session.stacks.iter().flatten().count();
        assert!(stacks > 0, "the sample's weights are read by products only");
        assert_eq!(session.caches.as_ints.len(), stacks);
        for &w in session.caches.as_ints.keys() {
            assert!(session.consts[w.index()].is_none(), "{w} kept as f64 too");
        }
        // Infinities and a NaN in the inputs: their vectors take the float path.
        let mut fed = HostData::random(&program, 2, 1);
        for t in fed.inputs.values_mut() {
            t.data[0] = f32::INFINITY;
            t.data[3] = f32::NEG_INFINITY;
            t.data[7] = f32::NAN;
        }
        let warm = session.run(&fed).expect("run with non-finite inputs");
        assert!(
            warm.int_products < products,
            "no product took the float path"
        );
        let emu = emulator::emulate(&program, &fed, &EmuOptions::default()).expect("emulates");
        assert_eq!(bits(&warm.outputs), bits(&emu.outputs));
        assert!(
            warm.outputs
                .values()
                .any(|t| t.data.iter().any(|v| !v.is_nan())),
            "some outputs stay finite"
        );
    }

    /// On the fp8 and MX targets of `samples/targets/` every product of the LSTM sample runs
    /// on integer slices ([`intdot::SlicedWeights`]: its runs span more bits than one integer
    /// unit holds), in a first run and a warm one, with the emulator's bits. A NaN input sends
    /// the products that read it to the float path, with the emulator's bits still.
    #[test]
    fn fp8_and_mx_products_on_integer_slices_give_the_emulators_bits() {
        if !intdot::simd() {
            return;
        }
        let targets = [
            (
                "mx-fp8",
                include_str!("../../../samples/targets/mx-fp8.toml"),
            ),
            (
                "msfp8-like",
                include_str!("../../../samples/targets/msfp8-like.toml"),
            ),
        ];
        for (name, toml) in targets {
            let target = nnp_grammar::Target::from_toml(toml, name).expect("target parses");
            let (program, g) = lstm_sample_on(Some(target));
            let products = products(&g);
            let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
            let mut warm = 0;
            for seed in [1, 2] {
                // A session keeps its first run's weights: new inputs only.
                let mut data = HostData::random(&program, 3, 1);
                data.inputs = HostData::random(&program, 3, seed).inputs;
                let out = session.run(&data).expect("runs");
                let emu =
                    emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
                assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{name} seed {seed}");
                // Every product on slices; a warm run reuses the products of constants.
                assert_eq!(out.int_products, out.sliced_products, "{name} seed {seed}");
                if seed == 1 {
                    assert_eq!(out.sliced_products, products, "{name} first run");
                }
                warm = out.sliced_products;
            }
            let mut nan = HostData::random(&program, 3, 1);
            nan.inputs.get_mut("x").expect("x").data[5] = f32::NAN;
            let out = session.run(&nan).expect("runs");
            let emu = emulator::emulate(&program, &nan, &EmuOptions::default()).expect("emulates");
            assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{name} NaN input");
            assert!(out.sliced_products < products, "{name} NaN input");
            // A session whose first run has a NaN in every x_t (so that the first vector of
            // every W stack has one) slices its weights all the same: the next run takes the
            // slices for every product, as a warm run does.
            let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
            let x = nan.inputs.get_mut("x").expect("x");
            x.data.iter_mut().step_by(128).for_each(|v| *v = f32::NAN);
            let emu = emulator::emulate(&program, &nan, &EmuOptions::default()).expect("emulates");
            let first = session.run(&nan).expect("runs");
            assert_eq!(bits(&first.outputs), bits(&emu.outputs), "{name} NaN first");
            let clean = HostData::random(&program, 3, 1);
            let out = session.run(&clean).expect("runs");
            let emu =
                emulator::emulate(&program, &clean, &EmuOptions::default()).expect("emulates");
            assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{name} after NaN");
            assert_eq!(out.int_products, out.sliced_products, "{name} after NaN");
            assert_eq!(out.sliced_products, warm, "{name} after NaN");
            assert!(first.sliced_products < warm, "{name} NaN first");
        }
    }
}
