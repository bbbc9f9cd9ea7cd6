//! Error-free arithmetic: exact sums of f64 values as Shewchuk expansions, and one correct
//! rounding of such an exact sum to any float format.
//!
//! An expansion is a list of non-overlapping f64 components in increasing magnitude whose exact
//! (unrounded) sum is the value. Adding an f64 with [`ExactSum::add`] is Shewchuk's
//! grow-expansion with zero elimination: every step is a two-sum, so nothing is ever lost,
//! however far apart the exponents are (a double-double would drop the middle bits of
//! `2^40 + 1 + 2^-40`). The final rounding turns the expansion into an integer significand plus
//! a sticky bit and rounds once with [`FloatFormat::round_exact`] (never f64 -> f32 -> fp16).

use super::quant::Rounder;
use nnp_numerics::{FloatFormat, decompose};

/// `a + b = s + e` exactly, `s = fl(a + b)` (Knuth's two-sum, any magnitudes).
#[inline]
pub fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// `a * b = p + e` exactly, `p = fl(a * b)` (exact unless the product underflows).
#[inline]
pub fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    (p, a.mul_add(b, -p))
}

/// An exact sum of f64 values (IEEE rules for NaN and infinities).
#[derive(Clone, Debug, Default)]
pub struct ExactSum {
    /// Non-overlapping, increasing magnitude, no zeros.
    comps: Vec<f64>,
    nan: bool,
    pos_inf: bool,
    neg_inf: bool,
}

impl ExactSum {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        self.comps.clear();
        self.nan = false;
        self.pos_inf = false;
        self.neg_inf = false;
    }

    /// Add `x` exactly.
    #[inline]
    pub fn add(&mut self, x: f64) {
        if !x.is_finite() {
            if x.is_nan() {
                self.nan = true;
            } else if x > 0.0 {
                self.pos_inf = true;
            } else {
                self.neg_inf = true;
            }
            return;
        }
        if x == 0.0 {
            return;
        }
        if self.comps.is_empty() {
            self.comps.push(x);
            return;
        }
        // Grow-expansion with zero elimination, in place.
        let mut q = x;
        let mut out = 0;
        for i in 0..self.comps.len() {
            let (s, e) = two_sum(q, self.comps[i]);
            q = s;
            if e != 0.0 {
                self.comps[out] = e;
                out += 1;
            }
        }
        self.comps.truncate(out);
        if q != 0.0 {
            self.comps.push(q);
        }
        // Two finite values can round to an infinite f64 sum only far beyond any format here;
        // treat it as the infinity IEEE arithmetic would give.
        if !q.is_finite() {
            self.comps.clear();
            if q > 0.0 {
                self.pos_inf = true;
            } else {
                self.neg_inf = true;
            }
        }
    }

    /// Add `a * b` exactly.
    #[inline]
    pub fn add_product(&mut self, a: f64, b: f64) {
        let (p, e) = two_prod(a, b);
        if !p.is_finite() {
            self.add(p);
            return;
        }
        self.add(p);
        self.add(e);
    }

    /// The components (for tests).
    pub fn components(&self) -> &[f64] {
        &self.comps
    }

    /// The non-finite result IEEE addition gives, if any term was NaN or infinite.
    fn non_finite(&self) -> Option<f64> {
        if self.nan || (self.pos_inf && self.neg_inf) {
            Some(f64::NAN)
        } else if self.pos_inf {
            Some(f64::INFINITY)
        } else if self.neg_inf {
            Some(f64::NEG_INFINITY)
        } else {
            None
        }
    }

    /// The exact sum rounded once to `fmt`. An exact zero is `+0` (the hardware's integer
    /// accumulator has no signed zero).
    pub fn round_to(&self, fmt: &FloatFormat) -> f64 {
        self.round_with(&Rounder::Reference(*fmt), fmt)
    }

    /// [`round_to`](Self::round_to) `fmt`, a sum that is one f64 rounded by `rounder` (one of
    /// `fmt`'s, the same bits as the reference's).
    pub(crate) fn round_with(&self, rounder: &Rounder, fmt: &FloatFormat) -> f64 {
        if let Some(v) = self.non_finite() {
            return rounder.round(v);
        }
        match self.comps.as_slice() {
            [] => 0.0,
            // One component is the exact value: one rounding.
            [x] => rounder.round(*x),
            comps => {
                let (neg, mant, exp, sticky) = to_parts(comps);
                fmt.round_exact(neg, mant, exp, sticky)
            }
        }
    }
}

/// `(-1)^neg * (mant + s) * 2^exp` with `s` infinitesimal when `sticky`: the exact sum of the
/// components as a 127-bit significand and a sticky bit, via a two's complement big integer
/// scaled to the lowest component bit.
fn to_parts(comps: &[f64]) -> (bool, u128, i32, bool) {
    // (sign, 53-bit integer significand, exponent of its last bit) of every component.
    let parts: Vec<(bool, u64, i32)> = comps.iter().map(|&c| decompose(c)).collect();
    let lo = parts.iter().map(|p| p.2).min().unwrap_or(0);
    let hi = parts.iter().map(|p| p.2 + 53).max().unwrap_or(0);
    // One limb of headroom for the carries of up to a few hundred components and the sign.
    let limbs = ((hi - lo) as usize).div_ceil(64) + 2;
    let mut acc = vec![0u64; limbs];
    for &(neg, m, e) in &parts {
        let shift = (e - lo) as usize;
        let mut term = vec![0u64; limbs];
        let (w, b) = (shift / 64, shift % 64);
        let wide = (m as u128) << b;
        term[w] = wide as u64;
        if w + 1 < limbs {
            term[w + 1] = (wide >> 64) as u64;
        }
        if neg {
            negate(&mut term);
        }
        add_into(&mut acc, &term);
    }
    let neg = acc[limbs - 1] >> 63 == 1;
    if neg {
        negate(&mut acc);
    }
    // Highest set bit.
    let top = (0..limbs)
        .rev()
        .find(|&i| acc[i] != 0)
        .map(|i| i * 64 + 63 - acc[i].leading_zeros() as usize)
        .unwrap_or(0);
    // Take 127 bits ending at `top`; everything below is sticky.
    let low_bit = top.saturating_sub(126);
    let mut mant: u128 = 0;
    for bit in (low_bit..=top).rev() {
        mant = (mant << 1) | ((acc[bit / 64] >> (bit % 64)) & 1) as u128;
    }
    let sticky = (0..low_bit).any(|bit| (acc[bit / 64] >> (bit % 64)) & 1 == 1);
    (neg, mant, lo + low_bit as i32, sticky)
}

fn negate(v: &mut [u64]) {
    let mut carry = 1u64;
    for limb in v.iter_mut() {
        let (s, c) = (!*limb).overflowing_add(carry);
        *limb = s;
        carry = c as u64;
    }
}

fn add_into(acc: &mut [u64], term: &[u64]) {
    let mut carry = 0u64;
    for (a, &t) in acc.iter_mut().zip(term) {
        let (s1, c1) = a.overflowing_add(t);
        let (s2, c2) = s1.overflowing_add(carry);
        *a = s2;
        carry = (c1 as u64) + (c2 as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(xs: &[f64], fmt: &FloatFormat) -> f64 {
        let mut s = ExactSum::new();
        xs.iter().for_each(|&x| s.add(x));
        s.round_to(fmt)
    }

    #[test]
    fn two_sum_and_two_prod_are_error_free() {
        // 2^53 + 1: the 1 is lost by f64 addition and recovered as the error term.
        assert_eq!(two_sum(2f64.powi(53), 1.0), (2f64.powi(53), 1.0));
        // (1 + 2^-30)^2 = 1 + 2^-29 + 2^-60: the 2^-60 is the product's error term.
        let a = 1.0 + 2f64.powi(-30);
        assert_eq!(two_prod(a, a), (1.0 + 2f64.powi(-29), 2f64.powi(-60)));
    }

    #[test]
    fn far_apart_terms_are_kept() {
        // 2^40 + 1 + 2^-40 - 2^40 = 1 + 2^-40 (a double-double would lose the 2^-40 or the 1).
        let mut s = ExactSum::new();
        for x in [2f64.powi(40), 1.0, 2f64.powi(-40), -(2f64.powi(40))] {
            s.add(x);
        }
        assert_eq!(s.round_to(&FloatFormat::FP64), 1.0 + 2f64.powi(-40));
    }

    #[test]
    fn one_rounding_not_two() {
        // 1 + 2^-11 + 2^-40 in fp16: above the tie 1 + 2^-11 by 2^-40, so nearest is
        // 1 + 2^-10. Rounding to f32 first gives exactly the tie 1 + 2^-11 (2^-40 is below
        // f32's half ulp 2^-24) and then nearest-even 1.0: the double-rounding trap.
        let fp16 = FloatFormat::FP16;
        let v = exact(&[1.0, 2f64.powi(-11), 2f64.powi(-40)], &fp16);
        assert_eq!(v, 1.0 + 2f64.powi(-10));
        // Exactly the tie: even.
        assert_eq!(exact(&[1.0, 2f64.powi(-11)], &fp16), 1.0);
        // Just below the tie.
        assert_eq!(exact(&[1.0, 2f64.powi(-11), -(2f64.powi(-40))], &fp16), 1.0);
        // Negative values, ties to even away from the odd neighbour: -(1 + 3 * 2^-11) lies
        // between -(1 + 2^-10) and -(1 + 2^-9); the even one is -(1 + 2^-9).
        assert_eq!(
            exact(&[-1.0, -3.0 * 2f64.powi(-11)], &fp16),
            -(1.0 + 2f64.powi(-9))
        );
    }

    #[test]
    fn zeros_and_non_finite() {
        let fp16 = FloatFormat::FP16;
        assert_eq!(exact(&[], &fp16).to_bits(), 0.0f64.to_bits());
        // x + (-x) is an exact zero: +0.
        assert_eq!(exact(&[-3.0, 3.0, -0.0], &fp16).to_bits(), 0.0f64.to_bits());
        assert!(exact(&[1.0, f64::NAN], &fp16).is_nan());
        assert!(exact(&[f64::INFINITY, f64::NEG_INFINITY], &fp16).is_nan());
        assert_eq!(exact(&[f64::NEG_INFINITY, 1e300], &fp16), f64::NEG_INFINITY);
        // Overflow to infinity: 65504 + 16 is the fp16 overflow tie (65520), which rounds to inf;
        // one 2^-30 below it rounds to 65504.
        assert_eq!(exact(&[65504.0, 16.0], &fp16), f64::INFINITY);
        assert_eq!(exact(&[65504.0, 16.0, -(2f64.powi(-30))], &fp16), 65504.0);
    }

    #[test]
    fn many_terms_with_cancellation() {
        // 1000 copies of 2^30, one 2^-30, 1000 copies of -2^30: exactly 2^-30.
        let mut s = ExactSum::new();
        for _ in 0..1000 {
            s.add(2f64.powi(30));
        }
        s.add(2f64.powi(-30));
        for _ in 0..1000 {
            s.add(-(2f64.powi(30)));
        }
        assert_eq!(s.round_to(&FloatFormat::FP32), 2f64.powi(-30));
        assert_eq!(s.components().len(), 1);
    }
}
