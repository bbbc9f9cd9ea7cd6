//! One pass of a session's graph over some items of a batch: node by node in the evaluation
//! order, each on its fast path, the values freed at their last reader, the outputs filled
//! row by row.

use super::analysis::reads;
use super::{Caches, Part, Path, Paths, Session, counts};
use crate::executor::{Executor, Failure, Profile};
use crate::tensors::with_host;
use crate::{ExecError, WrittenValue, finite, intdot, item_lanes, short};
use candle_core::{Device, Tensor};
use nnp_host::{HostData, Outputs, Tensor as HostTensor, canonical_nan};
use nnp_lowering::swgraph::{GraphError, Op, SwGraph, ValueId};
use std::collections::HashMap;
use std::ops::Range;

impl Session<'_> {
    /// One pass of the graph over the items `items` of `data`, with the session's `caches`.
    pub(super) fn run_items(
        &self,
        data: &HostData,
        items: Range<usize>,
        caches: &mut Caches,
    ) -> Result<Part, ExecError> {
        let graph: &SwGraph = &self.graph;
        if let Some(gpu) = &self.gpu {
            gpu.bind_to_thread()?;
        }
        let warm = self.warm;
        let mut consts = Vec::new();
        let mut ex = Executor {
            g: graph,
            data,
            items,
            dev: self.dev.clone(),
            n: graph.native,
            values: self.consts.clone(),
            constant: &self.plan.constant,
            rounded: &self.rounded,
            caches,
            arranged_x: HashMap::new(),
            int_x: HashMap::new(),
            int_tiles: Vec::new(),
            int: !self.opts.float_matmul && (self.gpu.is_some() || intdot::simd()),
            paths: Paths::new(),
            gpu: self.gpu.as_deref(),
            gpu_x: HashMap::new(),
            prof: std::env::var_os("NNPC_EXEC_PROFILE").map(|_| Vec::new()),
        };
        let last_use = &self.schedule.last_use;
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
            match (self.plan.constant[id.index()], warm) {
                (false, _) => self.checks.scan(graph, id, t, first, &mut found),
                (true, false) => self.checks.scan(graph, id, t, first, &mut const_found),
                (true, true) => Ok(()),
            }
        };
        // Each output row goes into its output's buffer as it is produced, so the value it
        // came from is freed at its last reader like any other.
        let mut outputs = OutputRows::new(graph, ex.batch());
        let mut written = HashMap::new();
        let mut regions = self.regions.iter().peekable();
        let mut in_region = 0..0;
        // Where `Executor::keep_as_ints` would keep weight stacks as integers, `prepare` makes
        // them so.
        let ints = ex.int && intdot::supports(ex.n);
        for (pos, &i) in self.schedule.order.iter().enumerate() {
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
                let nodes = &self.schedule.order[reg.start..reg.end];
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
            if warm && self.plan.constant[i] {
                // Computed by an earlier run; kept when anything of this run reads it.
                if let Some(t) = &self.consts[i] {
                    hand(id, t, &mut written).map_err(fail)?;
                }
                continue;
            }
            if self.prepared.skipped[i] || (ints && self.through[i]) {
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
            if let Some(chain) = &self.prepared.inputs[i] {
                // The input converted, padded and rounded in one pass (`prepare`).
                prepared = Some(ex.rounded_input(chain).map_err(exec_err)?);
            }
            if let Some(stack) = &self.prepared.stacks[i] {
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
                let t = match prepared.take() {
                    Some(t) => t,
                    None => ex.eval(i).map_err(exec_err)?,
                };
                hand(id, &t, &mut written).map_err(fail)?;
                let as_ints = match self.stacks[i] {
                    Some(dims) => ex.keep_as_ints(id, &t, dims).map_err(exec_err)?,
                    None => false,
                };
                if !as_ints {
                    if self.keep[i] && self.plan.constant[i] {
                        consts.push((i, t.clone()));
                    }
                    ex.values[i] = Some(t);
                }
            }
            let kind = match (&self.prepared.stacks[i], &self.prepared.inputs[i]) {
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
