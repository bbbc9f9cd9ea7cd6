//! Exact arithmetic: integer decomposition of quantized values, an exact (Kulisch-style) sum of
//! integer terms `m * 2^e`, and correctly rounded add / multiply for any float format.
//!
//! Nothing here rounds more than once: sums are kept as integers until
//! [`FloatFormat::round_exact`] rounds them, and MFU arithmetic goes through a round-to-odd f64
//! value (exact to 53 bits with a sticky last bit), which rounds to any format of at most
//! 51 significant bits exactly as the exact value would.

use nnp_numerics::FloatFormat;

/// `|v| = m * 2^e` with `m` odd (trailing zeros removed), for a finite non-zero f64.
pub fn decompose(v: f64) -> (u64, i32) {
    let bits = v.abs().to_bits();
    let be = (bits >> 52) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, e) = if be == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), be - 1075)
    };
    let tz = m.trailing_zeros();
    (m >> tz, e + tz as i32)
}

/// Bit length of a magnitude.
pub fn bitlen(m: u128) -> i32 {
    128 - m.leading_zeros() as i32
}

/// An exact sum of terms `m * 2^e` (plus an IEEE value when a term is NaN or infinite).
///
/// The running sum is one `i128` at a common exponent while the terms line up; a term that does
/// not fit is kept aside and everything is summed in a multi-limb integer at rounding time.
#[derive(Clone, Debug, Default)]
pub struct ExactSum {
    acc: i128,
    exp: i32,
    spill: Vec<(i128, i32)>,
    /// Sum of the non-finite terms (IEEE semantics: inf + -inf = NaN).
    special: Option<f64>,
}

impl ExactSum {
    pub fn new() -> Self {
        ExactSum::default()
    }

    pub fn clear(&mut self) {
        self.acc = 0;
        self.exp = 0;
        self.spill.clear();
        self.special = None;
    }

    /// Add `m * 2^e`.
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
            let (m, e) = decompose(v);
            let m = m as i128;
            self.add(if v < 0.0 { -m } else { m }, e);
        }
    }

    /// Absorb another sum.
    pub fn merge(&mut self, other: &ExactSum) {
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

/// The round-to-odd f64 of `s + err`, where `s = RN(exact)` and `err = exact - s` exactly.
fn to_odd(s: f64, err: f64) -> f64 {
    if err == 0.0 || s == 0.0 || !s.is_finite() {
        return s;
    }
    let bits = s.to_bits();
    if bits & 1 == 1 {
        return s;
    }
    // The exact value lies strictly between s and its neighbour toward err; that neighbour is
    // odd.
    if (err > 0.0) == (s > 0.0) {
        f64::from_bits(bits + 1)
    } else {
        f64::from_bits(bits - 1)
    }
}

/// Round an f64 result known as `s + err` (exactly) to `fmt`.
fn round_pair(fmt: &FloatFormat, s: f64, err: f64) -> f64 {
    if fmt.mant_bits > 50 && err != 0.0 {
        // Round-to-odd needs two spare bits: a format this wide rounds the exact pair. (Until
        // 2026-11-24 it took `s`, f64's nearest, which a directed rounding must not: in
        // `fp(11, 52, round = zero)`, 1 - 2^-100 is 1 - 2^-53, not 1.)
        let mut sum = ExactSum::new();
        sum.add_f64(s);
        sum.add_f64(err);
        return sum.round(fmt);
    }
    fmt.round(to_odd(s, err))
}

/// `fmt(a + b)`, correctly rounded (one rounding of the exact sum).
pub fn add(fmt: &FloatFormat, a: f64, b: f64) -> f64 {
    let s = a + b;
    if !s.is_finite() {
        return fmt.round(s);
    }
    // Knuth's two-sum: the exact rounding error of s.
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    round_pair(fmt, s, err)
}

/// `fmt(a * b)`, correctly rounded.
pub fn mul(fmt: &FloatFormat, a: f64, b: f64) -> f64 {
    let p = a * b;
    if !p.is_finite() || p == 0.0 {
        return fmt.round(p);
    }
    let err = a.mul_add(b, -p);
    round_pair(fmt, p, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decompose_strips_trailing_zeros() {
        assert_eq!(decompose(1.0), (1, 0));
        assert_eq!(decompose(-6.0), (3, 1));
        assert_eq!(decompose(0.375), (3, -3));
        assert_eq!(decompose(f64::from_bits(1)), (1, -1074));
    }

    #[test]
    fn exact_sum_of_far_apart_terms() {
        // 2^100 + 1 - 2^100 = 1 exactly; a float sum in any order of these three gives 0 or 1
        // depending on order.
        let mut s = ExactSum::new();
        s.add(1, 100);
        s.add(1, 0);
        s.add(-1, 100);
        assert_eq!(s.round(&FloatFormat::FP32), 1.0);
        // 2^200 + 2^-200 rounds to 2^200 in fp64 with a sticky bit: 2^200 exactly.
        let mut s = ExactSum::new();
        s.add(1, 200);
        s.add(1, -200);
        assert_eq!(s.round(&FloatFormat::FP64), 2f64.powi(200));
        // 1 + 2^-11 + 2^-300 in fp16: the tie 1 + 2^-11 is broken upward by 2^-300, giving
        // 1 + 2^-10 (a single rounding of the exact sum; dropping the tiny term would give 1).
        let mut s = ExactSum::new();
        s.add(1, 0);
        s.add(1, -11);
        s.add(1, -300);
        assert_eq!(s.round(&FloatFormat::FP16), 1.0 + 2f64.powi(-10));
    }

    #[test]
    fn add_and_mul_round_once() {
        let f32f = FloatFormat::FP32;
        // 1 + 2^-24 + 2^-60: f64 sum RN gives 1 + 2^-24 (the 2^-60 is lost), then rounding to
        // fp32 would tie to 1.0; the exact sum is above the tie, so fp32 gives 1 + 2^-23.
        let a = 1.0 + 2f64.powi(-24);
        let b = 2f64.powi(-60);
        assert_eq!(a + b, a);
        assert_eq!(add(&f32f, a, b), 1.0 + 2f64.powi(-23));
        // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: in fp16 just above the tie 1 + 2^-11: rounds up.
        let x = 1.0 + 2f64.powi(-12);
        assert_eq!(mul(&FloatFormat::FP16, x, x), 1.0 + 2f64.powi(-10));
        assert!(add(&FloatFormat::FP16, f64::INFINITY, f64::NEG_INFINITY).is_nan());
    }

    /// A format as wide as f64, rounded toward zero: `1 - 2^-100` truncates to `1 - 2^-53` (f64's
    /// sum is 1.0), and `(1 + 2^-52)(1 - 2^-52) = 1 - 2^-104` to `1 - 2^-53` (f64's product is
    /// 1.0); to nearest both are 1.
    #[test]
    fn wide_formats_round_the_exact_pair() {
        let zero = FloatFormat {
            rounding: nnp_numerics::Rounding::TowardZero,
            ..FloatFormat::ieee(11, 52)
        };
        let below_one = 1.0 - 2f64.powi(-53);
        assert_eq!(add(&zero, 1.0, -(2f64.powi(-100))), below_one);
        let (a, b) = (1.0 + 2f64.powi(-52), 1.0 - 2f64.powi(-52));
        assert_eq!(mul(&zero, a, b), below_one);
        let even = FloatFormat::ieee(11, 52);
        assert_eq!(add(&even, 1.0, -(2f64.powi(-100))), 1.0);
        assert_eq!(mul(&even, a, b), 1.0);
        // An exact result keeps its sign: -0 + -0 is -0.
        assert_eq!(add(&zero, -0.0, -0.0).to_bits(), (-0.0f64).to_bits());
    }
}
