//! The plan of a graph: everything about running it that the graph alone decides, computed
//! once ([`SwGraph::plan`]) and shared by every session that runs the graph (docs/swgraph.md,
//! "The plan"). What depends on a run's options (traced values, devices) or on the weights'
//! data is the session's, derived from the plan.

mod record;
mod rounded;

pub use record::{Plan, PlanCell, Schedule};

use super::{NodeMap, Op, SwGraph, Ty, UnOp, ValueId};
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

impl Plan {
    /// The plan of `graph`, a valid one ([`SwGraph::validate`]).
    pub fn new(graph: &SwGraph) -> Plan {
        let len = graph.nodes.len();
        let mut constant = vec![false; len];
        let mut keep = vec![false; len];
        for (i, node) in graph.nodes.iter().enumerate() {
            let inputs = node.op.inputs();
            let is = |v: &ValueId| constant.get(v.index()).copied().unwrap_or(false);
            constant[i] = match &node.op {
                Op::Input { .. } | Op::Output { .. } => false,
                _ => inputs.iter().all(is),
            };
            if !constant[i] {
                for v in inputs.iter().filter(|v| v.index() < len) {
                    keep[v.index()] |= constant[v.index()];
                }
            }
        }
        let checked: HashSet<ValueId> = graph.checks.iter().map(|c| c.value).collect();
        for v in checked.iter().filter(|v| v.index() < len) {
            keep[v.index()] |= constant[v.index()];
        }
        let stacks = weight_stacks(graph, &constant, &checked);
        let vectors = quantized_vectors(graph, &constant, &keep, &checked);
        let constant = NodeMap::from(constant);
        let schedule = Schedule::new(graph, &constant, false);
        let mut weights: Vec<(ValueId, usize)> = graph
            .nodes
            .iter()
            .filter_map(|node| match &node.op {
                Op::TiledMatVec { w, rows, cols, .. } => {
                    let n = graph.native;
                    Some((*w, *rows as usize * *cols as usize * n * n))
                }
                _ => None,
            })
            .collect();
        weights.sort_unstable();
        weights.dedup_by_key(|(w, _)| *w);
        let mut checks = NodeMap::filled(len, Vec::new());
        for (k, c) in graph.checks.iter().enumerate() {
            if c.value.index() < len {
                checks[c.value].push(k);
            }
        }
        Plan {
            constant,
            keep: keep.into(),
            schedule,
            stacks: stacks.into(),
            vectors: vectors.into(),
            weight_elements: weights.iter().map(|(_, e)| e).sum(),
            rounded: rounded::rounded_formats(&graph.nodes),
            checks,
        }
    }
}

impl Schedule {
    /// An evaluation order of the nodes: graph order, except that fusable nodes wait until a
    /// node that is not fusable needs them (or the end), and then come together, each after
    /// its operands. The lowering emits an LSTM step chain by chain (product, add, product,
    /// add, sigmoid, ...); in this order the step's element-wise ops form one region.
    ///
    /// Constant nodes wait for their first reader too. The lowering declares every weight
    /// first: in graph order, all the weight stacks' preparations (load, pad, round) would be
    /// alive together before the first product, while this way each stack is prepared right
    /// before the product that quantizes it, and a session can keep it as integers alone
    /// before the next one is loaded.
    ///
    /// With `products_first` (a second order of the same graph, which the tests run to show
    /// that the bits do not depend on the order), the products that depend on no other
    /// product come first, after the operands of all of them: an LSTM's `W x_t` products of
    /// every step, then each step's `U h_(t-1)` products.
    pub fn new(graph: &SwGraph, constant: &NodeMap<bool>, products_first: bool) -> Schedule {
        let order = order(graph, constant, products_first);
        let mut last_use = NodeMap::filled(graph.nodes.len(), 0usize);
        for (pos, &id) in order.iter().enumerate() {
            for v in graph.nodes[id.index()].op.inputs() {
                if let Some(l) = last_use.get_mut(v) {
                    *l = pos;
                }
            }
        }
        let regions = regions(graph, constant, &order);
        Schedule {
            order,
            last_use,
            regions,
        }
    }
}

/// The vector length (in tiles) of a node that may join a fused region: a non-constant
/// binary op or relu, pass or table activation; `None` otherwise. (A valid graph gives such
/// an op's operands the length of its value.)
pub fn fusable(graph: &SwGraph, constant: &NodeMap<bool>, id: ValueId) -> Option<u32> {
    let node = graph.nodes.get(id.index())?;
    let mfu = match &node.op {
        Op::Binary { .. } => true,
        Op::Unary { op, .. } => *op != UnOp::Softmax,
        _ => false,
    };
    match node.ty {
        Ty::Vector { tiles } if tiles > 0 && mfu && !constant.get(id).copied().unwrap_or(true) => {
            Some(tiles)
        }
        _ => None,
    }
}

/// [`Schedule::new`]'s order.
fn order(graph: &SwGraph, constant: &NodeMap<bool>, products_first: bool) -> Vec<ValueId> {
    let count = graph.nodes.len();
    let id = |i: usize| ValueId(i as u32);
    let mut order = Vec::with_capacity(count);
    let mut placed = vec![false; count];
    let mut stack = Vec::new();
    let mut place = |root: usize, order: &mut Vec<usize>| {
        // Depth first, operands before the node; an explicit stack (chains can be long).
        stack.push((root, false));
        while let Some((i, ready)) = stack.pop() {
            if placed[i] {
                continue;
            }
            if ready {
                placed[i] = true;
                order.push(i);
                continue;
            }
            stack.push((i, true));
            for v in graph.nodes[i].op.inputs().into_iter().rev() {
                if v.index() < count && !placed[v.index()] {
                    stack.push((v.index(), false));
                }
            }
        }
    };
    if products_first {
        let product = |i: usize| matches!(graph.nodes[i].op, Op::TiledMatVec { .. });
        // Whether every operand of node `i` depends on no product (operands come first).
        let operands_free = |free: &[bool], i: usize| {
            let inputs = graph.nodes[i].op.inputs();
            inputs
                .iter()
                .all(|v| free.get(v.index()).copied().unwrap_or(false))
        };
        let mut free = vec![false; count];
        for i in 0..count {
            free[i] = !product(i) && operands_free(&free, i);
        }
        let first: Vec<usize> = (0..count)
            .filter(|&i| product(i) && operands_free(&free, i))
            .collect();
        for &i in &first {
            for v in graph.nodes[i].op.inputs() {
                if v.index() < count {
                    place(v.index(), &mut order);
                }
            }
        }
        for &i in &first {
            place(i, &mut order);
        }
    }
    for i in 0..count {
        if fusable(graph, constant, id(i)).is_none()
            && !constant.get(id(i)).copied().unwrap_or(false)
        {
            place(i, &mut order);
        }
    }
    for i in 0..count {
        place(i, &mut order);
    }
    order.into_iter().map(id).collect()
}

/// The fused regions of `order` ([`Schedule::regions`]).
fn regions(graph: &SwGraph, constant: &NodeMap<bool>, order: &[ValueId]) -> Vec<Range<usize>> {
    let fusable_at = |pos: usize| fusable(graph, constant, order[pos]);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < order.len() {
        let Some(tiles) = fusable_at(pos) else {
            pos += 1;
            continue;
        };
        let start = pos;
        while pos < order.len() && fusable_at(pos) == Some(tiles) {
            pos += 1;
        }
        if pos - start >= 2 {
            out.push(start..pos);
        }
    }
    out
}

/// [`Plan::stacks`]: the values marked in `among` that only products read, as their matrix,
/// with one `(rows, cols)` for all of them, and not `checked`.
fn weight_stacks(
    graph: &SwGraph,
    among: &[bool],
    checked: &HashSet<ValueId>,
) -> Vec<Option<(usize, usize)>> {
    let len = graph.nodes.len();
    let mut stacks = vec![None; len];
    let mut other = read_beside_products(graph, checked);
    for node in &graph.nodes {
        if let Op::TiledMatVec {
            x, w, rows, cols, ..
        } = &node.op
            && x.index() < len
            && w.index() < len
        {
            other[x.index()] = true;
            let dims = (*rows as usize, *cols as usize);
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

/// [`Plan::vectors`]: the `quantize` nodes that only products read, as their vector, one
/// native tile per quantizer run, not `checked`, and not constants a warm run keeps (`keep`):
/// a constant one's products are constant too, computed with it by the first run.
fn quantized_vectors(
    graph: &SwGraph,
    constant: &[bool],
    keep: &[bool],
    checked: &HashSet<ValueId>,
) -> Vec<bool> {
    let (n, len) = (graph.native, graph.nodes.len());
    let mut other = read_beside_products(graph, checked);
    let mut as_x = vec![false; len];
    for node in &graph.nodes {
        if let Op::TiledMatVec { x, w, .. } = &node.op
            && x.index() < len
            && w.index() < len
        {
            as_x[x.index()] = true;
            other[w.index()] = true;
        }
    }
    graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| match &node.op {
            Op::Quantize { axis, .. } => {
                as_x[i] && !other[i] && !(constant[i] && keep[i]) && axis.run(n) == n
            }
            _ => false,
        })
        .collect()
}

/// The values a node other than a product reads, or that are `checked`.
fn read_beside_products(graph: &SwGraph, checked: &HashSet<ValueId>) -> Vec<bool> {
    let len = graph.nodes.len();
    let mut read = vec![false; len];
    for node in &graph.nodes {
        if !matches!(node.op, Op::TiledMatVec { .. }) {
            for v in node.op.inputs().into_iter().filter(|v| v.index() < len) {
                read[v.index()] = true;
            }
        }
    }
    for v in checked.iter().filter(|v| v.index() < len) {
        read[v.index()] = true;
    }
    read
}

impl PlanCell {
    /// The plan of `graph`, computed on first use.
    pub(super) fn get(&self, graph: &SwGraph) -> &Arc<Plan> {
        self.0.get_or_init(|| Arc::new(Plan::new(graph)))
    }
}

impl SwGraph {
    /// What a run of the graph can know before data arrives ([`Plan`]): computed by
    /// [`compile`](super::compile) and [`SwGraph::from_json`], else on first use. Meaningful
    /// for a valid graph ([`SwGraph::validate`]) only.
    pub fn plan(&self) -> &Arc<Plan> {
        self.planned.get(self)
    }
}

#[cfg(test)]
mod tests;
