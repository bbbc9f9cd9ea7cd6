//! Which values of a graph are already rounded to a float format ([`Plan::rounded`]).
//!
//! An MFU op computes `fmt(op(fmt(a), fmt(b)))`. When `a` is the output of a rounding to `fmt`
//! (a `round` node, an MFU op or a product of that format), every value of `a` is one that a
//! rounding to `fmt` returns: representable in `fmt` (or a NaN, or an infinity where `fmt`
//! overflows to infinity). An engine whose rounder keeps such values unchanged may skip
//! rounding `a` again; which rounders do is the engine's to say (the executor keeps the claim
//! for formats with its fast rounder, and a test there checks the fixed points).
//!
//! [`Plan::rounded`]: super::Plan::rounded

use super::super::{Node, NodeMap, Op, UnOp, ValueId};
use nnp_numerics::FloatFormat;

/// For every node (in graph order), the format all of its values are rounded to (as far as the
/// graph shows); `None` when unknown.
pub(super) fn rounded_formats(nodes: &[Node]) -> NodeMap<Option<FloatFormat>> {
    let mut known: Vec<Option<FloatFormat>> = Vec::with_capacity(nodes.len());
    for node in nodes {
        let of = |v: ValueId| known.get(v.index()).copied().flatten();
        let f = match &node.op {
            Op::Round { format, .. } | Op::Binary { format, .. } => Some(*format),
            Op::TiledMatVec { output, .. } => Some(*output),
            // A target's table file may hold values the format's rounding changes (an
            // infinity in a saturating format); the built-in tables are rounded results.
            Op::Unary {
                format, table, op, ..
            } if table.is_none() || *op == UnOp::Relu => Some(*format),
            Op::Unary {
                format,
                op: UnOp::Pass,
                ..
            } => Some(*format),
            Op::Unpad { src, .. } => of(*src),
            // Padding lanes hold `pad`: +0 is a fixed point of every rounding.
            Op::PadToTiles { src, pad, .. } if pad.to_bits() == 0 => of(*src),
            Op::Concat { parts } => {
                let mut formats = parts.iter().map(|p| of(p.value));
                let first = formats.next().flatten();
                first.filter(|f| formats.all(|g| g == Some(*f)))
            }
            _ => None,
        };
        known.push(f);
    }
    known.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_flow_through_the_graph_by_hand() {
        use crate::swgraph::{BinOp, TileLayout, TileSlice, Ty};
        let fp16 = FloatFormat::FP16;
        let bf16 = FloatFormat::BF16;
        let vector = Ty::Vector { tiles: 1 };
        let node = |op: Op| Node {
            op,
            ty: vector.clone(),
        };
        let v = ValueId;
        let nodes = vec![
            // 0: input, unknown.
            node(Op::Input {
                name: "x".into(),
                shape: vec![4],
            }),
            // 1: padded with +0: still unknown (its source is).
            node(Op::PadToTiles {
                src: v(0),
                layout: TileLayout::Vector,
                pad: 0.0,
            }),
            // 2: rounded to fp16.
            node(Op::Round {
                src: v(1),
                format: fp16,
            }),
            // 3: an fp16 add of it: fp16.
            node(Op::Binary {
                op: BinOp::Add,
                a: v(2),
                b: v(2),
                format: fp16,
            }),
            // 4: concat of two fp16 values: fp16.
            node(Op::Concat {
                parts: vec![
                    TileSlice {
                        value: v(2),
                        start: 0,
                        count: 1,
                    },
                    TileSlice {
                        value: v(3),
                        start: 0,
                        count: 1,
                    },
                ],
            }),
            // 5: a bf16 rounding of it, 6: concat of fp16 and bf16: unknown.
            node(Op::Round {
                src: v(4),
                format: bf16,
            }),
            node(Op::Concat {
                parts: vec![
                    TileSlice {
                        value: v(4),
                        start: 0,
                        count: 1,
                    },
                    TileSlice {
                        value: v(5),
                        start: 0,
                        count: 1,
                    },
                ],
            }),
            // 7: padding with 1.5 is not claimed.
            node(Op::PadToTiles {
                src: v(2),
                layout: TileLayout::Vector,
                pad: 1.5,
            }),
            // 8: a built-in sigmoid table: fp16; 9: a table file: unknown.
            node(Op::Unary {
                op: UnOp::Table(nnp_numerics::Activation::Sigmoid),
                src: v(3),
                format: fp16,
                table: None,
            }),
            node(Op::Unary {
                op: UnOp::Table(nnp_numerics::Activation::Sigmoid),
                src: v(3),
                format: fp16,
                table: Some("t.bin".into()),
            }),
        ];
        let known = rounded_formats(&nodes);
        assert_eq!(
            known.values().copied().collect::<Vec<_>>(),
            vec![
                None,
                None,
                Some(fp16),
                Some(fp16),
                Some(fp16),
                Some(bf16),
                None,
                None,
                Some(fp16),
                None
            ]
        );
    }
}
