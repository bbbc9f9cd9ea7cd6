//! Sessions: a graph prepared for repeated runs, each run in chunks (and shards) of items,
//! and the analysis that decides which nodes take which fast path.

use super::executor::{Executor, Failure, Profile};
use super::mfu::ActTable;
use super::products::{BoundedWeights, bounded_stacks, chunked_stacks, product_spec};
use super::tensors::with_host;
use super::{
    DeviceKind, ExecError, ExecOptions, Execution, PathCounts, WrittenValue, finite, fused, gpu,
    intdot, item_lanes, prepare, quant, rounded, short,
};
use crate::host::{HostData, Outputs, Progress, Tensor as HostTensor, canonical_nan};
use candle_core::{DType, Device, Tensor};
use nnp_lowering::swgraph::{GraphError, Op, SwGraph, Ty, UnOp, ValueId};
use nnp_numerics::FloatFormat;
use rayon::prelude::*;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;
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
    /// Nodes whose value depends on no input (batch 1, the same in every run).
    constant: Vec<bool>,
    /// Constant values a non-constant node, an output or a trace reads: what a warm run needs.
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
    plan: prepare::Plan,
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
        let handed: HashSet<ValueId> = written_values(graph, opts)
            .into_iter()
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
        let bounded = bounded_stacks(graph);
        let to_ints = quantized_vectors(graph, &constant, &keep, &handed);
        let through = concats_to_ints(graph, &constant, &to_ints, &handed);
        let mut last_use = vec![0usize; len];
        for (pos, &i) in order.iter().enumerate() {
            for v in reads(graph, &through, i) {
                last_use[v.index()] = pos;
            }
        }
        let traced: HashSet<ValueId> = written_values(graph, opts).into_iter().collect();
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
        let rounded = rounded::rounded_formats(&graph.nodes);
        let small = weights.values().sum::<usize>() <= SMALL_WEIGHTS;
        let checks = finite::Checks::new(graph);
        Ok(Session {
            graph: owner,
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
    /// (`Session::run_shards`).
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
                    data.batch.div_ceil(chunks.len()),
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
                if let Some(e) = chunk.found.error(&self.graph) {
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

    /// Bytes per batch item of the values a run holds at once, at most.
    pub fn item_bytes(&self) -> usize {
        self.item_bytes
    }

    /// The chunks a run at batch `b` takes: consecutive ranges of nearly equal size, none
    /// over `chunk_items`, or by default over [`default_chunk_items`] of the values a run
    /// holds at once per item ([`Session::item_bytes`]). Every op computes each item alone, so
    /// the bits are those of one pass over the batch. At least one range, whatever `b`; made
    /// as they are taken, so any batch has them.
    pub fn chunks(
        &self,
        b: usize,
    ) -> impl ExactSizeIterator<Item = Range<usize>> + DoubleEndedIterator + Clone + use<> {
        let most = self
            .opts
            .chunk_items
            .unwrap_or_else(|| default_chunk_items(self.item_bytes))
            .max(1);
        let count = b.div_ceil(most).max(1);
        // In u128: `k * b` passes usize where b does 2^32 items.
        let at = move |k: usize| (k as u128 * b as u128 / count as u128) as usize;
        (0..count).map(move |k| at(k)..at(k + 1))
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
        Execution {
            paths: counts(&all.paths),
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
        let graph: &SwGraph = &self.graph;
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
        // Each output row goes into its output's buffer as it is produced, so the value it
        // came from is freed at its last reader like any other.
        let mut outputs = OutputRows::new(graph, ex.batch());
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
            // Node `i` done: free what nothing later reads, and count its time as `kind`.
            let finish = |ex: &mut Executor, kind| {
                release(
                    &mut ex.values,
                    reads(graph, &self.through, i),
                    last_use,
                    pos,
                );
                tally(&mut ex.prof, kind, t0, 1);
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
                finish(&mut ex, "quantize to ints");
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
                // Kept in the bounded matmul's matrix alone where only such products read it
                // (after the integer form, which the kernel takes first where there is one).
                let bounded = |ex: &mut Executor| match (self.stacks[i], self.bounded[i]) {
                    (Some(_), Some(per_tile)) => ex.prepare_bounded(id, stack, per_tile),
                    _ => Ok(false),
                };
                if let Some(key) = arranged {
                    ex.prepare_arranged(id, stack, key).map_err(exec_err)?;
                    ex.paths.insert((Path::OnePass, i));
                    finish(&mut ex, "prepare weights");
                    continue;
                } else if (ints && ex.prepare_ints(id, stack).map_err(exec_err)?)
                    || bounded(&mut ex).map_err(exec_err)?
                {
                    ex.paths.insert((Path::OnePass, i));
                    finish(&mut ex, "prepare weights");
                    continue;
                } else if !ints {
                    prepared = Some(ex.prepare_f64(stack).map_err(exec_err)?);
                    ex.paths.insert((Path::OnePass, i));
                } else {
                    // No integer form: the chains node by node, then the stack as usual.
                    ex.eval_chains(i, &stack.parts).map_err(exec_err)?;
                }
            }
            if let Op::Output { name, row, src } = &node.op {
                outputs.put(name, *row, ex.value(*src)?).map_err(fail)?;
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
            let kind = match (&self.plan.stacks[i], &self.plan.inputs[i]) {
                (Some(_), _) if !ints => "prepare weights",
                (_, Some(_)) => "input",
                _ => node.op.name(),
            };
            finish(&mut ex, kind);
        }
        if let Some(prof) = &ex.prof {
            let items = &ex.items;
            for (name, secs, count) in prof {
                eprintln!(
                    "profile: {name:>14} {count:>6} nodes {:>10.3} ms",
                    secs * 1e3
                );
            }
            eprintln!("profile: items {items:?}: {}", counts(&ex.paths));
        }
        found.merge(fused_found);
        Ok(Part {
            outputs: outputs.finish()?,
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
/// integer kernel's tasks of items, each reading its weight tiles once. Not where their values
/// pass [`MAX_CHUNK_BYTES`].
pub const MIN_CHUNK_ITEMS: usize = 256;

/// Bytes of the values a run holds at once that a default chunk never passes, unless a single
/// item does: programs whose items hold megabytes (an LSTM over thousands of steps keeps every
/// step's output) run in chunks of fewer than [`MIN_CHUNK_ITEMS`], where 256 items would hold
/// gigabytes at once.
pub const MAX_CHUNK_BYTES: usize = 1 << 30;

/// The most items of `item_bytes` each that [`MAX_CHUNK_BYTES`] allow, at least one: the cap
/// on a default chunk here and on a default piece of `nnpc emulate`.
pub fn max_chunk_items(item_bytes: usize) -> usize {
    (MAX_CHUNK_BYTES / item_bytes.max(1)).max(1)
}

/// The default limit of items per chunk ([`Session::chunks`]) for values of `item_bytes` per
/// item: as many as [`CHUNK_BYTES`] allow, or [`MIN_CHUNK_ITEMS`] where that is fewer, but no
/// more than [`max_chunk_items`]; at least one.
pub fn default_chunk_items(item_bytes: usize) -> usize {
    (CHUNK_BYTES / item_bytes.max(1)).max(MIN_CHUNK_ITEMS.min(max_chunk_items(item_bytes)))
}

/// Bytes per batch item of the values a run holds at once, at most: the run's output tensors
/// (f32, from the start), and the largest sum, over the positions of the evaluation order, of
/// the non-constant values alive there (from the node that makes them to their last reader,
/// an `Output` node among them), as f64 elements. Values a fused region keeps only in its
/// scratch rows are counted as tensors, so this is an upper bound. A `traced` value is also held from the node that makes
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
    let outputs: usize = graph
        .outputs
        .iter()
        .map(|o| o.rows * o.row_len * std::mem::size_of::<f32>())
        .sum();
    let mut freed_at = vec![0usize; order.len()];
    let (mut live, mut peak) = (outputs, outputs);
    for (pos, &i) in order.iter().enumerate() {
        if !constant[i] {
            let count = elements(&graph.nodes[i].ty);
            let bytes = count * std::mem::size_of::<f64>();
            live += bytes;
            freed_at[last_use[i].max(pos)] += bytes;
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

/// The values a run hands back: the graph's `v_wr`s with `keep_writes`, every node's but the
/// outputs' with `keep_values`.
fn written_values(graph: &SwGraph, opts: &ExecOptions) -> Vec<ValueId> {
    if opts.keep_values {
        let values = graph.nodes.iter().enumerate();
        let values = values.filter(|(_, n)| !matches!(n.op, Op::Output { .. }));
        return values.map(|(i, _)| ValueId(i as u32)).collect();
    }
    let writes = if opts.keep_writes {
        &graph.writes[..]
    } else {
        &[]
    };
    writes.iter().map(|w| w.value).collect()
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
pub(super) fn tally(prof: &mut Profile, name: &'static str, t0: std::time::Instant, count: usize) {
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

/// A run's output tensors, filled row by row as their `Output` nodes are reached: per output
/// of the graph, its values `[batch, rows, row_len]` and which rows are in.
struct OutputRows<'g> {
    graph: &'g SwGraph,
    batch: usize,
    outputs: Vec<(Vec<f32>, Vec<bool>)>,
}

impl<'g> OutputRows<'g> {
    fn new(graph: &'g SwGraph, batch: usize) -> Self {
        let outputs = graph
            .outputs
            .iter()
            .map(|o| (vec![0f32; batch * o.rows * o.row_len], vec![false; o.rows]))
            .collect();
        OutputRows {
            graph,
            batch,
            outputs,
        }
    }

    /// Row `row` of output `name` from the value `t` (`[batch or 1, lanes]`, each item's
    /// first `row_len` lanes).
    fn put(&mut self, name: &str, row: usize, t: &Tensor) -> candle_core::Result<()> {
        let Some(k) = self.graph.outputs.iter().position(|o| o.name == name) else {
            return Ok(());
        };
        let (o, (out, done)) = (&self.graph.outputs[k], &mut self.outputs[k]);
        if row >= o.rows {
            return Ok(());
        }
        // Read in place (`to_written` would copy every row first).
        let (items, batch) = (t.dims().first().copied().unwrap_or(1), self.batch);
        with_host(t, |v| {
            for b in 0..batch {
                let dst = &mut out[(b * o.rows + row) * o.row_len..][..o.row_len];
                for (d, s) in dst.iter_mut().zip(item_lanes(v, items, b)) {
                    *d = canonical_nan(*s as f32);
                }
            }
        })?;
        done[row] = true;
        Ok(())
    }

    /// The output tensors, or the error naming a row that no `Output` node produced.
    fn finish(self) -> Result<Outputs, ExecError> {
        let mut outputs = Outputs::new();
        for (o, (data, done)) in self.graph.outputs.iter().zip(self.outputs) {
            if let Some(r) = done.iter().position(|d| !d) {
                return Err(ExecError::Graph(GraphError::Other(format!(
                    "output `{}` row {r} is never produced",
                    o.name
                ))));
            }
            let mut shape = vec![self.batch];
            shape.extend(&o.shape);
            outputs.insert(o.name.clone(), HostTensor { shape, data });
        }
        Ok(outputs)
    }
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

#[cfg(test)]
mod tests;
