//! Which values of a graph are already rounded to a float format, so that an MFU op of that
//! format may skip rounding its inputs.
//!
//! An MFU op computes `fmt(op(fmt(a), fmt(b)))`. When `a` is the output of a rounding to `fmt`
//! (a `round` node, an MFU op or a product of that format), `fmt(a) = a` bit for bit: every
//! value a rounding returns is a fixed point of the fast rounder ([`FastRound`]), which keeps
//! representable values, keeps every NaN as it is, and keeps infinities when the format
//! overflows to infinity (a saturating format never returns one). The skip is taken only for
//! formats with a fast rounder, so the fixed-point property is the one of that rounder, and a
//! test checks it on every fp16 value and on adversarial f64 inputs.

use super::quant::FastRound;
use nnp_lowering::swgraph::{Node, Op, UnOp, ValueId};
use nnp_numerics::FloatFormat;

/// For every node (in graph order), the format all of its values are a fixed point of (as far
/// as the graph shows), restricted to formats with a fast rounder; `None` when unknown.
pub(crate) fn rounded_formats(nodes: &[Node]) -> Vec<Option<FloatFormat>> {
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
        known.push(f.filter(|f| FastRound::new(f).is_some()));
    }
    known
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnp_numerics::{Overflow, Rounding};

    fn formats() -> Vec<FloatFormat> {
        let mut out = Vec::new();
        for (e, m) in [(5, 10), (8, 7), (4, 3), (5, 2), (8, 23), (2, 1)] {
            for overflow in [Overflow::Infinity, Overflow::Saturate] {
                let f = FloatFormat {
                    exp_bits: e,
                    mant_bits: m,
                    subnormals: true,
                    overflow,
                    rounding: Rounding::NearestEven,
                };
                if FastRound::new(&f).is_some() {
                    out.push(f);
                }
            }
        }
        out
    }

    /// Inputs: every fp16 and bf16 value, the midpoints between neighbouring fp16 values,
    /// powers of two across f64's range, NaNs with payloads, infinities, signed zeros, and
    /// pseudo-random bit patterns.
    fn inputs() -> Vec<f64> {
        let mut xs = Vec::new();
        for b in 0..=u16::MAX {
            let h = half::f16::from_bits(b).to_f64();
            let next = half::f16::from_bits(b.wrapping_add(1)).to_f64();
            xs.push(h);
            xs.push((h + next) / 2.0);
            xs.push(half::bf16::from_bits(b).to_f64());
        }
        for e in -1074..=1023 {
            let p = 2f64.powi(e);
            xs.extend([p, -p, p * 1.5, -p * 0.75]);
        }
        xs.extend([
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7FF0_0000_0000_0001),
            f64::from_bits(0xFFF4_0000_0000_1234),
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            f64::MAX,
            f64::MIN_POSITIVE,
        ]);
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            xs.push(f64::from_bits(s));
        }
        xs
    }

    /// The property the skip rests on: whatever a rounding to `fmt` returns (the fast rounder,
    /// the reference rounder, an exact sum rounded once), the fast rounder returns unchanged,
    /// bit for bit.
    #[test]
    fn rounded_values_are_fixed_points_of_the_fast_rounder() {
        let xs = inputs();
        for f in formats() {
            let fast = FastRound::new(&f).expect("filtered above");
            for &x in &xs {
                for y in [fast.round(x), f.round(x)] {
                    assert_eq!(
                        fast.round(y).to_bits(),
                        y.to_bits(),
                        "{f:?}: round({x:e}) = {y:e} is not a fixed point"
                    );
                }
            }
        }
    }

    #[test]
    fn formats_flow_through_the_graph_by_hand() {
        use nnp_lowering::swgraph::{BinOp, TileLayout, TileSlice, Ty};
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
            known,
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
