//! The analysis behind a session, on top of the graph's plan: which of the plan's candidates
//! take which fast path (vectors quantized straight to integers, concats skipped), what a run
//! reads and hands back, and the bytes per item it holds at once.

use crate::{ExecOptions, intdot, quant};
use nnp_lowering::swgraph::{Node, NodeMap, Op, Schedule, SwGraph, Ty, ValueId};
use std::collections::HashSet;

/// Bytes per batch item of the values a run holds at once, at most: the run's output tensors
/// (f32, from the start), and the largest sum, over the positions of the evaluation order, of
/// the non-constant values alive there (from the node that makes them to their last reader,
/// an `Output` node among them), as f64 elements. Values a fused region keeps only in its
/// scratch rows are counted as tensors, so this is an upper bound. A `traced` value is also held from the node that makes
/// it to the end of the chunk, as the written value's f64 copy and its trace records' 32-bit
/// patterns ([`TRACED_BYTES`] per element): a traced run of the README LSTM holds more of
/// those than of anything else.
pub(super) fn peak_item_bytes(
    graph: &SwGraph,
    order: &[ValueId],
    constant: &NodeMap<bool>,
    last_use: &NodeMap<usize>,
    traced: &HashSet<ValueId>,
) -> usize {
    let elements = |ty: &Ty| ty.elements(graph.native);
    let outputs: usize = graph
        .outputs
        .iter()
        .map(|o| o.rows * o.row_len * std::mem::size_of::<f32>())
        .sum();
    let mut freed_at = vec![0usize; order.len()];
    let (mut live, mut peak) = (outputs, outputs);
    for (pos, &id) in order.iter().enumerate() {
        if !constant[id] {
            let count = elements(&graph.node(id).ty);
            let bytes = count * std::mem::size_of::<f64>();
            live += bytes;
            freed_at[last_use[id].max(pos)] += bytes;
            if traced.contains(&id) {
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

/// The values node `id` reads: its inputs and, where it quantizes a concat the run may skip
/// (`through`: the steps skip those concats), that concat's parts.
pub(super) fn reads(graph: &SwGraph, through: &NodeMap<bool>, id: ValueId) -> Vec<ValueId> {
    let mut vs = graph.node(id).op.inputs();
    vs.extend(through_parts(graph, through, id));
    vs
}

/// The parts of the concat that node `id` quantizes, where the run may skip that concat.
fn through_parts<'g>(
    graph: &'g SwGraph,
    through: &NodeMap<bool>,
    id: ValueId,
) -> impl Iterator<Item = ValueId> + 'g {
    let parts = match &graph.node(id).op {
        Op::Quantize { src, .. } if through[*src] => match &graph.node(*src).op {
            Op::Concat { parts } => &parts[..],
            _ => &[],
        },
        _ => &[],
    };
    parts.iter().map(|p| p.value)
}

/// The plan's last uses ([`Schedule::last_use`]) with the reads of `through`: a quantize that
/// reads a skipped concat's parts is their last reader where it comes after the others.
pub(super) fn extend_last_uses(graph: &SwGraph, schedule: &mut Schedule, through: &NodeMap<bool>) {
    if !through.values().any(|&t| t) {
        return;
    }
    for (pos, &id) in schedule.order.iter().enumerate() {
        for v in through_parts(graph, through, id) {
            let last = &mut schedule.last_use[v];
            *last = (*last).max(pos);
        }
    }
}

/// The `concat` nodes of vectors that only `quantize` nodes of [`quantized_vectors`] read,
/// and that a run does not hand back (`handed`), not constant (a warm run skips those anyway).
pub(super) fn concats_to_ints(
    graph: &SwGraph,
    constant: &NodeMap<bool>,
    to_ints: &NodeMap<Option<quant::BfpInts>>,
    handed: &HashSet<ValueId>,
) -> NodeMap<bool> {
    let other = read_beside(graph, handed, |id, _| to_ints[id].is_none());
    let read = read_beside(graph, &HashSet::new(), |_, _| true);
    graph
        .nodes_by_id()
        .map(|(id, node)| {
            matches!(node.op, Op::Concat { .. })
                && matches!(node.ty, Ty::Vector { .. })
                && !constant[id]
                && !other[id]
                && read[id]
        })
        .collect()
}

/// The plan's candidates for quantizing straight to the integer kernel's integers
/// ([`Plan::vectors`](nnp_lowering::swgraph::Plan::vectors)), in a format [`quant::BfpInts`]
/// quantizes so: that format by node. A traced one is handed back restored from its integers,
/// the quantized value's bits ([`intdot::IntVector::restore`]).
pub(super) fn quantized_vectors(
    graph: &SwGraph,
    candidates: &NodeMap<bool>,
) -> NodeMap<Option<quant::BfpInts>> {
    let n = graph.native;
    let limit = intdot::mantissa_limit(n);
    graph
        .nodes_by_id()
        .map(|(id, node)| match &node.op {
            Op::Quantize { format, .. } if candidates[id] => quant::BfpInts::new(format, n, limit),
            _ => None,
        })
        .collect()
}

/// The values a run hands back: `hand_back` where given, else the graph's `v_wr`s with
/// `keep_writes` and every node's but the outputs' with `keep_values`.
pub(super) fn written_values(
    graph: &SwGraph,
    opts: &ExecOptions,
    hand_back: Option<&[ValueId]>,
) -> Vec<ValueId> {
    if let Some(values) = hand_back {
        return values.to_vec();
    }
    if opts.keep_values {
        let values = graph.nodes_by_id();
        let values = values.filter(|(_, n)| !matches!(n.op, Op::Output { .. }));
        return values.map(|(id, _)| id).collect();
    }
    let writes = if opts.keep_writes {
        &graph.writes[..]
    } else {
        &[]
    };
    writes.iter().map(|w| w.value).collect()
}

/// The values that a node for which `reader(id, node)` holds reads, or that a run hands back
/// (`handed`).
fn read_beside(
    graph: &SwGraph,
    handed: &HashSet<ValueId>,
    reader: impl Fn(ValueId, &Node) -> bool,
) -> NodeMap<bool> {
    let mut read = NodeMap::filled(graph.nodes.len(), false);
    for (id, node) in graph.nodes_by_id() {
        if reader(id, node) {
            node.op.inputs().into_iter().for_each(|v| read[v] = true);
        }
    }
    handed.iter().for_each(|&v| read[v] = true);
    read
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnp_lowering::swgraph::{TileLayout, UnOp};
    use nnp_numerics::FloatFormat;

    /// The bytes per item a run holds at once, by hand (N = 2): the output `y` of 5 values (5
    /// f32, held from the start), an input of 4 lanes (4 f64), padded to 3 tiles (6 f64) that
    /// the output reads, the relu of the padded value and the sum of the relu with itself. The
    /// input is freed after the pad and the constant is not counted; the output's row goes into
    /// its f32 buffer, so the padded value goes after its last reader, the relu: at the relu and
    /// at the sum, 5 f32 and 2 x 6 f64. With the output reading the input instead, the input goes
    /// at the output node, before the relu: the same peak.
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
            program_hash: String::new(),
            target: "hand".into(),
            target_hash: String::new(),
            native: 2,
            storage: FloatFormat::FP16,
            output_storage: FloatFormat::FP16,
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
            outputs: vec![nnp_lowering::swgraph::OutputInfo {
                name: "y".into(),
                shape: vec![5],
                rows: 1,
                row_len: 5,
            }],
            decls: vec![],
            writes: vec![],
            checks: vec![],
            planned: Default::default(),
        };
        let order: Vec<ValueId> = (0..6).map(ValueId).collect();
        let constant = NodeMap::from(vec![false, true, false, false, false, false]);
        // Last readers: the input's at position 2, the padded value's at 4 (the relu), the
        // relu's at 5; the rest are read by nothing.
        let last_use = NodeMap::from(vec![2, 0, 4, 0, 5, 0]);
        let none = HashSet::new();
        assert_eq!(
            peak_item_bytes(&graph, &order, &constant, &last_use, &none),
            5 * 4 + 2 * 6 * 8
        );
        // A traced relu adds its written copy (6 f64) and its records' bits (6 u32).
        let relu: HashSet<ValueId> = [ValueId(4)].into();
        assert_eq!(
            peak_item_bytes(&graph, &order, &constant, &last_use, &relu),
            5 * 4 + 2 * 6 * 8 + 6 * (8 + 4)
        );
        graph.nodes[3] = output(0);
        let last_use = NodeMap::from(vec![3, 0, 4, 0, 5, 0]);
        assert_eq!(
            peak_item_bytes(&graph, &order, &constant, &last_use, &none),
            5 * 4 + 2 * 6 * 8
        );
        // At the pad, the input is alive too (its reader, the output, comes after): 5 f32, 4 + 6
        // f64. With the input 2 lanes wider, that is the peak.
        graph.nodes[0].ty = Ty::Logical { shape: vec![8] };
        assert_eq!(
            peak_item_bytes(&graph, &order, &constant, &last_use, &none),
            5 * 4 + (8 + 6) * 8
        );
    }
}
