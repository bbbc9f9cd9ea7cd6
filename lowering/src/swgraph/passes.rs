//! Graph passes: merge identical work, drop no-op roundings, drop dead values.

use super::file::OpKeys;
use super::{Node, Op, PlanCell, SwGraph, ValueId};
use nnp_numerics::FloatFormat;
use std::collections::HashMap;
use std::collections::hash_map::{DefaultHasher, Entry};
use std::hash::{BuildHasherDefault, Hash, Hasher};

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
    optimized(g.clone(), roots)
}

/// [`optimize`] on a graph it may take apart (what [`compile`](super::compile) lowered): each
/// op is moved, never copied.
pub(super) fn optimized(g: SwGraph, roots: Roots) -> SwGraph {
    prune(merge(g), roots)
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

fn merge(mut g: SwGraph) -> SwGraph {
    g.planned = PlanCell::default();
    let nodes = &mut g.nodes;
    let mut map: Vec<ValueId> = Vec::with_capacity(nodes.len());
    let mut seen = Seen::with_capacity(nodes.len());
    // The nodes kept move down in place to `..kept`: one arena, each op moved at most once.
    let mut kept = 0;
    for i in 0..nodes.len() {
        nodes[i].op.map_inputs(|v| map[v.index()]);
        let op = &nodes[i].op;
        // Rounding an F-valued result to F is the identity (rounding is idempotent).
        if let Op::Round { src, format } = op
            && result_format(&nodes[src.index()].op) == Some(*format)
        {
            map.push(*src);
            continue;
        }
        let id = ValueId(kept as u32);
        if !matches!(op, Op::Output { .. })
            && let Some(same) = seen.find_or_insert(op, id, &nodes[..kept])
        {
            map.push(same);
            continue;
        }
        nodes.swap(kept, i);
        kept += 1;
        map.push(id);
    }
    nodes.truncate(kept);
    for w in &mut g.writes {
        w.value = map[w.value.index()];
    }
    for c in &mut g.checks {
        c.value = map[c.value.index()];
    }
    g
}

/// The nodes kept so far, found by their op: the op's row in the file (inputs already renamed)
/// is its structural identity. A table of each key's hash (12 bytes a node, not the key);
/// a key whose hash an unequal key holds is kept whole in `collided`.
struct Seen {
    by_hash: HashMap<u64, ValueId, BuildHasherDefault<Prehashed>>,
    collided: HashMap<Vec<u8>, ValueId>,
    keys: OpKeys,
}

impl Seen {
    fn with_capacity(nodes: usize) -> Seen {
        Seen {
            by_hash: HashMap::with_capacity_and_hasher(nodes, Default::default()),
            collided: HashMap::new(),
            keys: OpKeys::default(),
        }
    }

    /// The kept node (among `kept`) that is `op`, else `None` with `op` recorded as `id`.
    fn find_or_insert(&mut self, op: &Op, id: ValueId, kept: &[Node]) -> Option<ValueId> {
        let key = self.keys.key(op);
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        match self.by_hash.entry(hasher.finish()) {
            Entry::Vacant(e) => {
                e.insert(id);
                None
            }
            Entry::Occupied(e) => {
                let other = *e.get();
                if self.keys.key(&kept[other.index()].op) == key {
                    return Some(other);
                }
                match self.collided.entry(key) {
                    Entry::Occupied(e) => Some(*e.get()),
                    Entry::Vacant(e) => {
                        e.insert(id);
                        None
                    }
                }
            }
        }
    }
}

/// A hasher of a hash: a `u64` key hashes to itself.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn prune(mut g: SwGraph, roots: Roots) -> SwGraph {
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
    g.planned = PlanCell::default();
    let mut map = vec![ValueId(u32::MAX); g.nodes.len()];
    // Live nodes move down in place, as in `merge`.
    let mut kept = 0;
    for i in 0..g.nodes.len() {
        if !live[i] {
            continue;
        }
        g.nodes[i].op.map_inputs(|v| map[v.index()]);
        map[i] = ValueId(kept as u32);
        g.nodes.swap(kept, i);
        kept += 1;
    }
    g.nodes.truncate(kept);
    for c in &mut g.checks {
        c.value = map[c.value.index()];
    }
    match roots {
        Roots::Outputs => g.writes.clear(),
        Roots::OutputsAndWrites => {
            for w in &mut g.writes {
                w.value = map[w.value.index()];
            }
        }
    }
    g
}
