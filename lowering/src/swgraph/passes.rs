//! Graph passes: merge identical work, drop no-op roundings, drop dead values.

use super::{Op, SwGraph, ValueId};
use nnp_numerics::FloatFormat;
use std::collections::HashMap;

/// What must survive dead-value elimination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Roots {
    /// Only the outputs (write records are dropped: fastest for plain runs).
    Outputs,
    /// The outputs and every value a `v_wr` wrote (for `--trace` and diff's source lines).
    OutputsAndWrites,
}

/// Merge identical nodes (same op on the same inputs, e.g. a weight quantized with the same
/// format by several chains), remove roundings of values that already hold that format, and
/// drop values no root needs. Node order (a topological order) is kept.
pub fn optimize(g: &SwGraph, roots: Roots) -> SwGraph {
    let merged = merge(g);
    prune(&merged, roots)
}

/// The float format every element of `op`'s result is already rounded to, if any.
fn result_format(op: &Op) -> Option<FloatFormat> {
    match op {
        Op::Round { format, .. } | Op::Binary { format, .. } | Op::Unary { format, .. } => {
            Some(*format)
        }
        Op::TiledMatVec { output, .. } => Some(*output),
        _ => None,
    }
}

fn merge(g: &SwGraph) -> SwGraph {
    let mut out = g.clone();
    out.nodes.clear();
    let mut map: Vec<ValueId> = Vec::with_capacity(g.nodes.len());
    let mut seen: HashMap<String, ValueId> = HashMap::new();
    for node in &g.nodes {
        let mut op = node.op.clone();
        op.map_inputs(|v| map[v.index()]);
        // Rounding an F-valued result to F is the identity (rounding is idempotent).
        if let Op::Round { src, format } = &op
            && result_format(&out.nodes[src.index()].op) == Some(*format)
        {
            map.push(*src);
            continue;
        }
        // The serialised op (inputs already renamed) is its structural identity.
        let key = serde_json::to_string(&op).unwrap_or_default();
        if !matches!(op, Op::Output { .. })
            && let Some(&id) = seen.get(&key)
        {
            map.push(id);
            continue;
        }
        let id = ValueId(out.nodes.len() as u32);
        out.nodes.push(super::Node {
            op,
            ty: node.ty.clone(),
        });
        seen.insert(key, id);
        map.push(id);
    }
    for w in &mut out.writes {
        w.value = map[w.value.index()];
    }
    for c in &mut out.checks {
        c.value = map[c.value.index()];
    }
    out
}

fn prune(g: &SwGraph, roots: Roots) -> SwGraph {
    let mut live = vec![false; g.nodes.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        if matches!(node.op, Op::Output { .. }) {
            live[i] = true;
        }
    }
    if roots == Roots::OutputsAndWrites {
        for w in &g.writes {
            live[w.value.index()] = true;
        }
    }
    // A checked value is a root: a run fails where the hardware would.
    for c in &g.checks {
        live[c.value.index()] = true;
    }
    // Inputs always precede their readers, so one backward sweep marks everything live.
    for i in (0..g.nodes.len()).rev() {
        if live[i] {
            for v in g.nodes[i].op.inputs() {
                live[v.index()] = true;
            }
        }
    }
    let mut out = g.clone();
    out.nodes.clear();
    let mut map = vec![ValueId(u32::MAX); g.nodes.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let mut op = node.op.clone();
        op.map_inputs(|v| map[v.index()]);
        map[i] = ValueId(out.nodes.len() as u32);
        out.nodes.push(super::Node {
            op,
            ty: node.ty.clone(),
        });
    }
    for c in &mut out.checks {
        c.value = map[c.value.index()];
    }
    match roots {
        Roots::Outputs => out.writes.clear(),
        Roots::OutputsAndWrites => {
            for w in &mut out.writes {
                w.value = map[w.value.index()];
            }
        }
    }
    out
}
