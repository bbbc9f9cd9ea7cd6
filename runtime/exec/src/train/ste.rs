//! Straight-through estimators of the quantizers: where each passes the gradient, and the
//! point positions `dynfixed` chose (docs/training.md).
//!
//! A quantizer's gradient is the identity except where the element saturates, where it is
//! zero (a larger or smaller input would give the same value):
//! - a float format with `overflow = saturate`: `|x|` above its largest finite value (with
//!   `overflow = inf` nothing saturates: the value becomes infinite);
//! - `fixed(int, frac)`: `x` outside `[-2^(int-1), 2^(int-1) - 2^-frac]`;
//! - `dynfixed(bits, policy)`: `x` outside the word at the point position the policy chose for
//!   the run (`max` chooses one that holds every value; `overflow` lets some saturate);
//! - block formats (`bfp`, `msfp`, `mx`, `hbfp`, `pot`, `twohot`) and `int`: their shared
//!   exponent or scale follows the block's largest value, so no element saturates.

use nnp_numerics::fixed::BitStats;
use nnp_numerics::{FloatFormat, Format, Overflow};
use std::collections::BTreeMap;

/// The point positions (fraction bits) the `dynfixed` quantizers chose, by node: how many
/// runs took each position. A run of all zeros places no point and is not counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Points {
    pub by_node: BTreeMap<usize, BTreeMap<i32, u64>>,
}

impl Points {
    /// Add the counts of `other`.
    pub fn merge(&mut self, other: &Points) {
        for (node, hist) in &other.by_node {
            let mine = self.by_node.entry(*node).or_default();
            for (f, c) in hist {
                *mine.entry(*f).or_default() += c;
            }
        }
    }
}

/// Whether [`float_passes`] reads the values (`f` saturates).
pub(crate) fn float_reads(f: &FloatFormat) -> bool {
    f.overflow == Overflow::Saturate
}

/// Whether [`passes`] reads the values (a saturating float, `fixed` or `dynfixed`).
pub(crate) fn reads(format: &Format) -> bool {
    match format {
        Format::Float(f) => float_reads(f),
        Format::Fixed(_) | Format::DynFixed(_) => true,
        _ => false,
    }
}

/// The mask of the elements of `x` whose gradient passes `round` to `f` (1: passes), or `None`
/// when every element passes.
pub(crate) fn float_passes(f: &FloatFormat, x: &[f64]) -> Option<Vec<u8>> {
    match f.overflow {
        Overflow::Infinity => None,
        Overflow::Saturate => {
            let max = f.max_value();
            within(x, |v| v.abs() <= max)
        }
    }
}

/// The mask of `quantize` with `format` over runs of `run` lanes of `x` (`None`: every
/// element passes); the point positions of a `dynfixed` format go to `points` under `node`.
pub(crate) fn passes(
    format: &Format,
    x: &[f64],
    run: usize,
    node: usize,
    points: &mut Points,
) -> Option<Vec<u8>> {
    match format {
        Format::Float(f) => float_passes(f, x),
        Format::Fixed(f) => {
            let hi = 2f64.powi(f.int as i32 - 1);
            let lo = -hi;
            let hi = hi - 2f64.powi(-(f.frac as i32));
            within(x, |v| (lo..=hi).contains(&v))
        }
        Format::DynFixed(d) => {
            let policy = d.policy.policy();
            let (lo, hi) = d.range();
            let hist = points.by_node.entry(node).or_default();
            let mut mask = Vec::with_capacity(x.len());
            for r in x.chunks(run.max(1)) {
                match policy.frac_bits(&BitStats::of(r), d.bits) {
                    None => mask.extend(std::iter::repeat_n(1u8, r.len())),
                    Some(f) => {
                        *hist.entry(f).or_default() += 1;
                        let scale = 2f64.powi(f);
                        let (lo, hi) = (lo as f64 / scale, hi as f64 / scale);
                        mask.extend(
                            r.iter()
                                .map(|v| u8::from(v.is_nan() || (lo..=hi).contains(v))),
                        );
                    }
                }
            }
            Some(mask)
        }
        Format::Bfp(_)
        | Format::Mx(_)
        | Format::Hbfp(_)
        | Format::Int(_)
        | Format::Pot(_)
        | Format::TwoHot(_) => None,
    }
}

/// The mask of `keep` over `x` (NaN passes: it carries no saturation), `None` when all pass.
fn within(x: &[f64], keep: impl Fn(f64) -> bool) -> Option<Vec<u8>> {
    let mask: Vec<u8> = x.iter().map(|&v| u8::from(v.is_nan() || keep(v))).collect();
    mask.contains(&0).then_some(mask)
}
