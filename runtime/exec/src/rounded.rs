//! Which values of a graph are already rounded to a float format, so that an MFU op of that
//! format may skip rounding its inputs.
//!
//! The graph's plan says which values are rounded to which format ([`Plan::rounded`]): every
//! value of such a node is one a rounding to that format returns. The skip is taken only for
//! formats with a fast rounder ([`FastRound`]), which keeps representable values, keeps every
//! NaN as it is, and keeps infinities when the format overflows to infinity (a saturating
//! format never returns one): those values are its fixed points, bit for bit, as a test checks
//! on every fp16 value and on adversarial f64 inputs.

use super::quant::FastRound;
use nnp_lowering::swgraph::{NodeMap, Plan};
use nnp_numerics::FloatFormat;

/// For every node, the format all of its values are a fixed point of the fast rounder of (as
/// far as the graph shows): the plan's rounded formats that have one; `None` when unknown.
pub(crate) fn rounded_formats(plan: &Plan) -> NodeMap<Option<FloatFormat>> {
    let fast = |f: &Option<FloatFormat>| f.filter(|f| FastRound::new(f).is_some());
    NodeMap::from(plan.rounded.values().map(fast).collect::<Vec<_>>())
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
}
