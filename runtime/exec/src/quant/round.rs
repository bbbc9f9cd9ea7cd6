//! Rounding f64 values to a float format, element by element over slices: nearest-even
//! ([`FastRound`]) and nearest-away or toward-zero ([`DirectedRound`]) from the bits, else the
//! scalar reference ([`Rounder`] picks).

use super::lanes::{avx2_copy, par_pieces};
use nnp_numerics::{FloatFormat, Overflow, Rounding, pow2};

/// Round every element of `x` to `fmt` (as [`FloatFormat::round`]).
pub fn round_slice(fmt: &FloatFormat, x: &[f64], out: &mut [f64]) {
    par_pieces(x, out, 4096, |(xs, os)| round_seq(fmt, xs, os));
}

/// [`round_slice`] on the calling thread (for a caller that is one parallel task already).
pub(crate) fn round_seq(fmt: &FloatFormat, x: &[f64], out: &mut [f64]) {
    Rounder::new(fmt).round_all(x, out)
}

/// Rounding to a float format by the fastest exact rounder that applies: nearest-even
/// ([`FastRound`]), away or toward zero ([`DirectedRound`]), else the reference
/// (`FloatFormat::round`, position 0 for stochastic rounding).
#[derive(Clone, Copy)]
pub(crate) enum Rounder {
    NearestEven(FastRound),
    Directed(DirectedRound),
    Reference(FloatFormat),
}

impl Rounder {
    pub(crate) fn new(fmt: &FloatFormat) -> Self {
        match (FastRound::new(fmt), DirectedRound::new(fmt)) {
            (Some(f), _) => Rounder::NearestEven(f),
            (None, Some(d)) => Rounder::Directed(d),
            (None, None) => Rounder::Reference(*fmt),
        }
    }

    /// The nearest-even rounder, where the format has one.
    pub(crate) fn nearest_even(&self) -> Option<&FastRound> {
        match self {
            Rounder::NearestEven(f) => Some(f),
            _ => None,
        }
    }

    /// Whether a fast rounder applies (the reference is the fallback).
    pub(crate) fn is_fast(&self) -> bool {
        !matches!(self, Rounder::Reference(_))
    }

    #[inline]
    pub(crate) fn round(&self, x: f64) -> f64 {
        match self {
            Rounder::NearestEven(f) => f.round(x),
            Rounder::Directed(d) => d.round(x),
            Rounder::Reference(fmt) => fmt.round(x),
        }
    }

    /// `out[i] = round(x[i])`, with a fast rounder's AVX2 copy where one applies.
    pub(crate) fn round_all(&self, x: &[f64], out: &mut [f64]) {
        match self {
            Rounder::NearestEven(f) => f.round_all(x, out),
            Rounder::Directed(d) => d.round_all(x, out),
            Rounder::Reference(fmt) => {
                (x.iter().zip(out.iter_mut())).for_each(|(v, o)| *o = fmt.round(*v))
            }
        }
    }
}

/// Whether rounding to `fmt` can work on f64's bits ([`FastRound`], [`DirectedRound`]): it
/// has subnormals, and its exponent and significand fit inside f64's with room for the
/// subnormal quantum's scaling.
fn bit_roundable(fmt: &FloatFormat) -> bool {
    fmt.subnormals && (2..=10).contains(&fmt.exp_bits) && fmt.mant_bits <= 50
}

/// Nearest-even rounding of an f64 to a float format with subnormals, from the bits.
/// Branch-free (both paths computed, then selected), so loops over it vectorise.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastRound {
    /// Mantissa bits dropped from f64's 52 for a normal result.
    pub(crate) shift: u32,
    /// `2^(shift - 1) - 1`: added with the kept lsb, rounds the dropped bits to nearest-even.
    pub(crate) half: u64,
    /// The dropped bits.
    pub(crate) mask: u64,
    /// Bits of `2^emin`, the smallest normal of the format: magnitudes below take the
    /// subnormal path.
    pub(crate) emin_bits: u64,
    /// `2^(emin - mant_bits + 52)`: adding and subtracting it rounds a subnormal-range value to
    /// the format's subnormal quantum with the FPU's own nearest-even.
    pub(crate) magic: f64,
    pub(crate) max: f64,
    /// What a magnitude above `max` becomes: `max` (saturating) or infinity.
    pub(crate) over: f64,
}

impl FastRound {
    /// The fast rounder for `fmt`, when its mode and range allow one.
    pub(crate) fn new(fmt: &FloatFormat) -> Option<FastRound> {
        if fmt.rounding != Rounding::NearestEven || !bit_roundable(fmt) {
            return None;
        }
        let emin = 1 - fmt.bias();
        let shift = 52 - fmt.mant_bits;
        let max = fmt.max_value();
        Some(FastRound {
            shift,
            half: (1u64 << (shift - 1)) - 1,
            mask: (1u64 << shift) - 1,
            emin_bits: pow2(emin).to_bits(),
            magic: pow2(emin - fmt.mant_bits as i32 + 52),
            max,
            over: if fmt.overflow == Overflow::Saturate {
                max
            } else {
                f64::INFINITY
            },
        })
    }

    avx2_copy! {
        /// `out[i] = round(x[i])`.
        pub(crate) fn round_all / round_all_avx2 / round_all_avx512 / round_all_body
            (&self, x: &[f64], out: &mut [f64])
    }

    #[inline(always)]
    fn round_all_body(&self, x: &[f64], out: &mut [f64]) {
        for (v, o) in x.iter().zip(out.iter_mut()) {
            *o = self.round(*v);
        }
    }

    avx2_copy! {
        /// Round exact sums in place; an exact zero is +0 (an integer accumulator has no
        /// signed zero). Branch-free: both results computed, then selected.
        pub(crate) fn round_sums / round_sums_avx2 / round_sums_avx512 / round_sums_body (&self, s: &mut [f64])
    }

    #[inline(always)]
    fn round_sums_body(&self, s: &mut [f64]) {
        for v in s.iter_mut() {
            *v = self.round_sum(*v);
        }
    }

    avx2_copy! {
        /// `out[k]` = the exact sum `a[k] * (w[k] * x)` rounded as [`FastRound::round_sums`]
        /// does: integer sums on common units, scaled by powers of two (`w[k] * x` and the
        /// product are exact where the caller's units fit f64), in one pass straight into the
        /// output.
        pub(crate) fn round_scaled_ints / round_scaled_ints_avx2 / round_scaled_ints_avx512 / round_scaled_ints_body
            (&self, a: &[i32], w: &[f64], x: f64, out: &mut [std::mem::MaybeUninit<f64>])
    }

    #[inline(always)]
    fn round_scaled_ints_body(
        &self,
        a: &[i32],
        w: &[f64],
        x: f64,
        out: &mut [std::mem::MaybeUninit<f64>],
    ) {
        for ((o, &a), &w) in out.iter_mut().zip(a).zip(w) {
            o.write(self.round_sum(f64::from(a) * (w * x)));
        }
    }

    /// An exact sum rounded; an exact zero is +0.
    #[inline(always)]
    fn round_sum(&self, v: f64) -> f64 {
        let r = self.round(v);
        if v == 0.0 { 0.0 } else { r }
    }

    #[inline]
    pub(crate) fn round(&self, x: f64) -> f64 {
        let bits = x.to_bits();
        let sign = bits & (1u64 << 63);
        let mag = bits & !(1u64 << 63);
        // Normal range: round the significand to nearest-even at bit `shift`; a carry moves
        // the exponent (infinity stays infinity; a NaN's garbage is not selected).
        let odd = (mag >> self.shift) & 1;
        let normal = f64::from_bits(mag.wrapping_add(self.half + odd) & !self.mask);
        // Subnormal range of the format: round to its fixed quantum.
        let ax = f64::from_bits(mag);
        let sub = (ax + self.magic) - self.magic;
        let r = if mag >= self.emin_bits { normal } else { sub };
        let r = if r > self.max { self.over } else { r };
        let r = f64::from_bits(r.to_bits() | sign);
        if x.is_nan() { x } else { r }
    }
}

/// Nearest-away and toward-zero rounding of an f64 to a float format with subnormals, from the
/// bits, as [`FastRound`] rounds to nearest-even: in the normal range, half a unit added
/// (away) or nothing (toward zero), then the dropped bits cleared; in the subnormal range, at
/// the format's quantum `q`: `x / q` truncated and, away, 1 added where the dropped fraction
/// is a half or more (each step exact). Toward zero never overflows to infinity.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirectedRound {
    away: bool,
    half: u64,
    mask: u64,
    emin_bits: u64,
    quantum: f64,
    inv_quantum: f64,
    max: f64,
    /// What a finite magnitude above `max` becomes: infinity (away, `overflow = inf`) or `max`.
    over: f64,
    /// What an infinity becomes: itself, or `max` where the format saturates.
    inf: f64,
}

impl DirectedRound {
    /// The rounder for `fmt`, when it rounds away or toward zero and its range allows one.
    pub(crate) fn new(fmt: &FloatFormat) -> Option<DirectedRound> {
        let away = match fmt.rounding {
            Rounding::NearestAway => true,
            Rounding::TowardZero => false,
            _ => return None,
        };
        if !bit_roundable(fmt) {
            return None;
        }
        let emin = 1 - fmt.bias();
        let shift = 52 - fmt.mant_bits;
        let q = emin - fmt.mant_bits as i32;
        let max = fmt.max_value();
        let saturate = fmt.overflow == Overflow::Saturate;
        Some(DirectedRound {
            away,
            half: 1u64 << (shift - 1),
            mask: (1u64 << shift) - 1,
            emin_bits: pow2(emin).to_bits(),
            quantum: pow2(q),
            inv_quantum: pow2(-q),
            max,
            over: if saturate || !away {
                max
            } else {
                f64::INFINITY
            },
            inf: if saturate { max } else { f64::INFINITY },
        })
    }

    avx2_copy! {
        /// `out[i] = round(x[i])`.
        pub(crate) fn round_all / round_all_avx2 / round_all_avx512 / round_all_body
            (&self, x: &[f64], out: &mut [f64])
    }

    #[inline(always)]
    fn round_all_body(&self, x: &[f64], out: &mut [f64]) {
        let pairs = x.iter().zip(out.iter_mut());
        match self.away {
            true => pairs.for_each(|(v, o)| *o = self.round_as::<true>(*v)),
            false => pairs.for_each(|(v, o)| *o = self.round_as::<false>(*v)),
        }
    }

    #[inline]
    pub(crate) fn round(&self, x: f64) -> f64 {
        match self.away {
            true => self.round_as::<true>(x),
            false => self.round_as::<false>(x),
        }
    }

    #[inline(always)]
    fn round_as<const AWAY: bool>(&self, x: f64) -> f64 {
        let bits = x.to_bits();
        let sign = bits & (1u64 << 63);
        let mag = bits & !(1u64 << 63);
        // Normal range (a carry moves the exponent; infinity stays infinity).
        let up = if AWAY { self.half } else { 0 };
        let normal = f64::from_bits(mag.wrapping_add(up) & !self.mask);
        // Subnormal range: whole quanta, exactly.
        let ax = f64::from_bits(mag);
        let y = ax * self.inv_quantum;
        let t = y.trunc();
        let t = if AWAY && y - t >= 0.5 { t + 1.0 } else { t };
        let sub = t * self.quantum;
        let r = if mag >= self.emin_bits { normal } else { sub };
        let r = if r <= self.max {
            r
        } else if ax == f64::INFINITY {
            self.inf
        } else {
            self.over
        };
        let r = f64::from_bits(r.to_bits() | sign);
        if x.is_nan() { x } else { r }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{adversarial, same};
    use super::*;

    /// The nearest-even, nearest-away and toward-zero rounders against the reference, bit for
    /// bit, on the adversarial values (ties and one ulp either side at every binade, subnormal
    /// boundaries, the overflow thresholds, zeros, infinities, NaN), element by element and
    /// through each copy of their loops (AVX-512, AVX2, as built), on formats with and without saturation, from 3 to 50 mantissa
    /// bits; and on every fp16 value halved, so that every fp16 tie is met.
    #[test]
    fn fast_rounders_match_reference() {
        let mut data = adversarial();
        data.extend((0..=u16::MAX).map(|b| f64::from(half::f16::from_bits(b)) * 0.5));
        let mut sat = FloatFormat::FP16;
        sat.overflow = Overflow::Saturate;
        for base in [
            FloatFormat::FP16,
            FloatFormat::BF16,
            FloatFormat::FP32,
            FloatFormat::ieee(5, 2),
            FloatFormat::ieee(4, 3),
            FloatFormat::ieee(10, 50),
            sat,
        ] {
            for rounding in [
                Rounding::NearestEven,
                Rounding::NearestAway,
                Rounding::TowardZero,
            ] {
                let fmt = FloatFormat { rounding, ..base };
                // Each mode has its bit rounder: nearest-even, or directed.
                let r = Rounder::new(&fmt);
                let nearest_even = rounding == Rounding::NearestEven;
                match r {
                    Rounder::NearestEven(_) => assert!(nearest_even, "{fmt:?}"),
                    Rounder::Directed(_) => assert!(!nearest_even, "{fmt:?}"),
                    Rounder::Reference(_) => panic!("{fmt:?} has no bit rounder"),
                }
                let one = |x: f64| r.round(x);
                let want: Vec<f64> = data.iter().map(|&x| fmt.round(x)).collect();
                for (x, want) in data.iter().zip(&want) {
                    assert!(
                        same(one(*x), *want),
                        "{fmt:?} x = {x:e}: {} want {want:e}",
                        one(*x)
                    );
                }
                crate::quant::each_copy(|copy| {
                    let mut all = vec![0.0; data.len()];
                    r.round_all(&data, &mut all);
                    for ((x, a), want) in data.iter().zip(&all).zip(&want) {
                        assert!(
                            same(*a, *want),
                            "{fmt:?} x = {x:e} ({copy:?} loop): {a:e} want {want:e}"
                        );
                    }
                });
            }
        }
    }

    /// Integer sums on common units, scaled by powers of two and rounded in one pass, equal
    /// `FloatFormat::round` of the same exact value (an exact zero is +0): ties at every
    /// format's precision, sums near i32's limits, units that underflow to zero or subnormals
    /// and overflow to infinity or the saturation value. Through `ExactSums`, so a format with
    /// no fast rounder (stochastic) takes its element-by-element fallback, and toward zero its
    /// directed rounder.
    #[test]
    fn scaled_integer_sums_round_as_the_format_does() {
        use std::mem::MaybeUninit;
        let mut sat = FloatFormat::FP16;
        sat.overflow = Overflow::Saturate;
        let mut trunc = FloatFormat::FP16;
        trunc.rounding = Rounding::TowardZero;
        let mut a: Vec<i32> = vec![0, 1, -1, i32::MAX, i32::MIN, i32::MIN + 1, 65504, 65520];
        for bits in [8, 11, 12, 24, 25, 30] {
            let p = 1i32 << bits;
            a.extend([
                p + 1,
                p + 2,
                p + 3,
                p - 1,
                -(p + 1),
                -(p + 3),
                p + p / 2 + 1,
            ]);
        }
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2000 {
            let r = crate::intdot::tests::xorshift(&mut s);
            a.push((r >> 32) as i32 >> (r % 31));
        }
        // Row units 2^-40 .. 2^20 in turn; item units chosen so the product spans fp16's
        // subnormals, normals and overflow.
        let w: Vec<f64> = (0..a.len()).map(|k| pow2((k % 61) as i32 - 40)).collect();
        let mut stochastic = FloatFormat::FP16;
        stochastic.rounding = Rounding::Stochastic { seed: 11 };
        for fmt in [FloatFormat::FP16, FloatFormat::BF16, sat, trunc, stochastic] {
            let sums = crate::matmul::ExactSums::new(&fmt);
            for xu in [-30, -12, 0, 6] {
                let x = pow2(xu);
                crate::quant::each_copy(|copy| {
                    let mut out = vec![MaybeUninit::new(f64::NAN); a.len()];
                    sums.round_scaled_ints(&a, &w, x, &mut out);
                    for ((o, &a), &w) in out.iter().zip(&a).zip(&w) {
                        // SAFETY: every element was initialised above.
                        let got = unsafe { o.assume_init() };
                        let exact = f64::from(a) * w * x;
                        let want = if a == 0 { 0.0 } else { fmt.round(exact) };
                        let at = format!("{fmt:?} {a} * {w:e} * {x:e} ({copy:?})");
                        assert_eq!(got.to_bits(), want.to_bits(), "{at}");
                    }
                });
            }
        }
        assert!(
            FastRound::new(&trunc).is_none() && DirectedRound::new(&trunc).is_some(),
            "the directed rounder is exercised"
        );
        assert!(
            FastRound::new(&stochastic).is_none() && DirectedRound::new(&stochastic).is_none(),
            "the fallback is exercised"
        );
    }

    #[test]
    fn fp16_rounding_by_hand() {
        let f = FastRound::new(&FloatFormat::FP16).expect("fp16");
        // 1 + 2^-11 is the tie between 1 and 1 + 2^-10: even is 1.
        assert_eq!(f.round(1.0 + 2f64.powi(-11)), 1.0);
        // 1 + 3 * 2^-11 ties to the even 1 + 2^-9.
        assert_eq!(f.round(1.0 + 3.0 * 2f64.powi(-11)), 1.0 + 2f64.powi(-9));
        // Half the smallest subnormal 2^-25 ties to 0; just above goes to 2^-24.
        assert_eq!(f.round(2f64.powi(-25)).to_bits(), 0);
        assert_eq!(f.round(2f64.powi(-25) * 1.0001), 2f64.powi(-24));
        // -2^-26 rounds to -0.
        assert_eq!(f.round(-(2f64.powi(-26))).to_bits(), (-0.0f64).to_bits());
        // 65519.99 -> 65504, 65520 -> inf.
        assert_eq!(f.round(65519.99), 65504.0);
        assert_eq!(f.round(65520.0), f64::INFINITY);
    }
}
