//! The two exact sums, each the check of the other: [`IntegerSum`] adds integer terms
//! `m * 2^e` in a wide integer (the emulator's accumulator), and [`Expansion`] adds f64 values
//! as a Shewchuk expansion of error-free two-sums (the software graph's). Both round once, with
//! [`FloatFormat::round_exact`], never through an intermediate float.
//!
//! An expansion is a list of non-overlapping f64 components in increasing magnitude whose exact
//! (unrounded) sum is the value. Adding an f64 with [`Expansion::add`] is Shewchuk's
//! grow-expansion with zero elimination: every step is a two-sum, so nothing is ever lost,
//! however far apart the exponents are (a double-double would drop the middle bits of
//! `2^40 + 1 + 2^-40`).

use crate::FloatFormat;
use crate::rounding::{decompose, decompose_odd};

/// An exact sum of terms `m * 2^e` (plus an IEEE value when a term is NaN or infinite).
///
/// The running sum is one `i128` at a common exponent while the terms line up; a term that does
/// not fit is kept aside and everything is summed in a multi-limb integer at rounding time.
#[derive(Clone, Debug, Default)]
pub struct IntegerSum {
    acc: i128,
    exp: i32,
    spill: Vec<(i128, i32)>,
    /// Sum of the non-finite terms (IEEE semantics: inf + -inf = NaN).
    special: Option<f64>,
}

impl IntegerSum {
    pub fn new() -> Self {
        IntegerSum::default()
    }

    pub fn clear(&mut self) {
        self.acc = 0;
        self.exp = 0;
        self.spill.clear();
        self.special = None;
    }

    /// Add `m * 2^e`.
    #[inline]
    pub fn add(&mut self, m: i128, e: i32) {
        if m == 0 {
            return;
        }
        if self.acc == 0 {
            self.acc = m;
            self.exp = e;
            return;
        }
        let fits = |v: i128, d: i32| d < 120 && (v.unsigned_abs().leading_zeros() as i32) > d + 1;
        if e >= self.exp {
            let d = e - self.exp;
            if fits(m, d)
                && let Some(s) = self.acc.checked_add(m << d)
            {
                self.acc = s;
                return;
            }
        } else {
            let d = self.exp - e;
            if fits(self.acc, d)
                && let Some(s) = (self.acc << d).checked_add(m)
            {
                self.acc = s;
                self.exp = e;
                return;
            }
        }
        self.spill.push((m, e));
    }

    /// Add a NaN or infinite term.
    pub fn add_special(&mut self, v: f64) {
        self.special = Some(self.special.map_or(v, |s| s + v));
    }

    /// Add a finite f64 exactly.
    pub fn add_f64(&mut self, v: f64) {
        if !v.is_finite() {
            self.add_special(v);
        } else if v != 0.0 {
            let (m, e) = decompose_odd(v);
            let m = m as i128;
            self.add(if v < 0.0 { -m } else { m }, e);
        }
    }

    /// Absorb another sum.
    pub fn merge(&mut self, other: &IntegerSum) {
        self.add(other.acc, other.exp);
        for &(m, e) in &other.spill {
            self.add(m, e);
        }
        if let Some(s) = other.special {
            self.add_special(s);
        }
    }

    /// The exact sum rounded once to `fmt` (an exact zero is +0).
    pub fn round(&self, fmt: &FloatFormat) -> f64 {
        if let Some(s) = self.special {
            return fmt.round(s);
        }
        if self.spill.is_empty() {
            if self.acc == 0 {
                return 0.0;
            }
            return fmt.round_exact(self.acc < 0, self.acc.unsigned_abs(), self.exp, false);
        }
        let terms: Vec<(i128, i32)> = std::iter::once((self.acc, self.exp))
            .chain(self.spill.iter().copied())
            .filter(|t| t.0 != 0)
            .collect();
        let (neg, mant, exp, sticky) = wide_sum(&terms);
        if mant == 0 {
            return 0.0;
        }
        fmt.round_exact(neg, mant, exp, sticky)
    }
}

/// Sum terms of arbitrary exponents in multi-limb integers. Returns the sign, the top 128 bits
/// of the magnitude, their exponent, and whether any lower bit was set.
fn wide_sum(terms: &[(i128, i32)]) -> (bool, u128, i32, bool) {
    let emin = terms.iter().map(|t| t.1).min().unwrap_or(0);
    let top = terms
        .iter()
        .map(|&(_, e)| (e - emin) as i64 + 128)
        .max()
        .unwrap_or(0);
    let limbs = (top as usize + 64) / 64 + 1;
    let mut pos = vec![0u64; limbs];
    let mut neg = vec![0u64; limbs];
    for &(m, e) in terms {
        let target = if m < 0 { &mut neg } else { &mut pos };
        add_shifted(target, m.unsigned_abs(), (e - emin) as usize);
    }
    let negative = cmp_limbs(&neg, &pos) == std::cmp::Ordering::Greater;
    let (big, small) = if negative { (neg, pos) } else { (pos, neg) };
    let mag = sub_limbs(&big, &small);
    let Some(hi) = mag.iter().rposition(|&l| l != 0) else {
        return (false, 0, 0, false);
    };
    let top_bit = hi * 64 + 63 - mag[hi].leading_zeros() as usize; // index of the leading one
    let low = top_bit.saturating_sub(127); // index of the lowest bit kept
    let mut mant = 0u128;
    for i in (low..=top_bit).rev() {
        mant = (mant << 1) | ((mag[i / 64] >> (i % 64)) & 1) as u128;
    }
    let sticky = (0..low).any(|i| (mag[i / 64] >> (i % 64)) & 1 == 1);
    (negative, mant, emin + low as i32, sticky)
}

fn add_shifted(acc: &mut [u64], m: u128, shift: usize) {
    let (limb, bit) = (shift / 64, shift % 64);
    // m << bit spans at most three limbs.
    let lo = (m << bit) as u64;
    let mid = ((m << bit) >> 64) as u64;
    let hi = if bit == 0 {
        0
    } else {
        (m >> (128 - bit)) as u64
    };
    let mut carry = 0u64;
    for (k, part) in [lo, mid, hi].into_iter().enumerate() {
        let (s1, c1) = acc[limb + k].overflowing_add(part);
        let (s2, c2) = s1.overflowing_add(carry);
        acc[limb + k] = s2;
        carry = (c1 as u64) + (c2 as u64);
    }
    let mut k = limb + 3;
    while carry != 0 && k < acc.len() {
        let (s, c) = acc[k].overflowing_add(carry);
        acc[k] = s;
        carry = c as u64;
        k += 1;
    }
}

fn cmp_limbs(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    a.iter().rev().cmp(b.iter().rev())
}

fn sub_limbs(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut borrow = 0u64;
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let (d1, b1) = x.overflowing_sub(y);
            let (d2, b2) = d1.overflowing_sub(borrow);
            borrow = (b1 as u64) + (b2 as u64);
            d2
        })
        .collect()
}

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
pub struct Expansion {
    /// Non-overlapping, increasing magnitude, no zeros.
    comps: Vec<f64>,
    nan: bool,
    pos_inf: bool,
    neg_inf: bool,
}

impl Expansion {
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
        self.round_by(fmt, |v| fmt.round(v))
    }

    /// [`round_to`](Self::round_to) `fmt`, a sum that is one f64 rounded by `round_one` (the
    /// same bits as `fmt.round`; a faster rounder of it).
    #[inline]
    pub fn round_by(&self, fmt: &FloatFormat, round_one: impl Fn(f64) -> f64) -> f64 {
        match self.value() {
            ExactValue::Zero => 0.0,
            ExactValue::One(v) => round_one(v),
            ExactValue::Wide {
                negative,
                mant,
                exp,
                sticky,
            } => fmt.round_exact(negative, mant, exp, sticky),
        }
    }

    /// The exact sum, for one rounding: no term (or none but zeros), one f64 where the sum is
    /// one (a non-finite result, or a single component), else its wide significand.
    #[inline]
    pub fn value(&self) -> ExactValue {
        if let Some(v) = self.non_finite() {
            return ExactValue::One(v);
        }
        match self.comps.as_slice() {
            [] => ExactValue::Zero,
            [x] => ExactValue::One(*x),
            comps => {
                let (negative, mant, exp, sticky) = to_parts(comps);
                ExactValue::Wide {
                    negative,
                    mant,
                    exp,
                    sticky,
                }
            }
        }
    }
}

/// An [`Expansion`]'s exact value, as one rounding takes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExactValue {
    /// An exact zero, which rounds to `+0` in every format.
    Zero,
    /// The value is this f64 exactly.
    One(f64),
    /// `(-1)^negative * (mant + s) * 2^exp`, `s` infinitesimal when `sticky`
    /// ([`FloatFormat::round_exact`]'s arguments).
    Wide {
        negative: bool,
        mant: u128,
        exp: i32,
        sticky: bool,
    },
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
    use crate::rounding::decompose_odd;

    fn exact(xs: &[f64], fmt: &FloatFormat) -> f64 {
        let mut s = Expansion::new();
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
        let mut s = Expansion::new();
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
        let mut s = Expansion::new();
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

    #[test]
    fn decompose_odd_strips_trailing_zeros() {
        assert_eq!(decompose_odd(1.0), (1, 0));
        assert_eq!(decompose_odd(-6.0), (3, 1));
        assert_eq!(decompose_odd(0.375), (3, -3));
        assert_eq!(decompose_odd(f64::from_bits(1)), (1, -1074));
    }

    #[test]
    fn exact_sum_of_far_apart_terms() {
        // 2^100 + 1 - 2^100 = 1 exactly; a float sum in any order of these three gives 0 or 1
        // depending on order.
        let mut s = IntegerSum::new();
        s.add(1, 100);
        s.add(1, 0);
        s.add(-1, 100);
        assert_eq!(s.round(&FloatFormat::FP32), 1.0);
        // 2^200 + 2^-200 rounds to 2^200 in fp64 with a sticky bit: 2^200 exactly.
        let mut s = IntegerSum::new();
        s.add(1, 200);
        s.add(1, -200);
        assert_eq!(s.round(&FloatFormat::FP64), 2f64.powi(200));
        // 1 + 2^-11 + 2^-300 in fp16: the tie 1 + 2^-11 is broken upward by 2^-300, giving
        // 1 + 2^-10 (a single rounding of the exact sum; dropping the tiny term would give 1).
        let mut s = IntegerSum::new();
        s.add(1, 0);
        s.add(1, -11);
        s.add(1, -300);
        assert_eq!(s.round(&FloatFormat::FP16), 1.0 + 2f64.powi(-10));
    }
}
