//! Integer-grid formats: `int` (symmetric integers with a power-of-two or f32 scale), `fixed`
//! (qX.Y) and seed 004's dynamic fixed point (point position from statistics of the data being
//! quantized, with a pluggable [`PointPolicy`]).

use crate::block::round_mag;
use crate::float::{exceeds, rand_for};
use crate::format::{DynFixedFormat, FixedFormat, IntFormat, IntScale, PolicyKind};
use crate::rounding::{Rounding, decompose, floor_log2, make_f64};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// int

impl IntFormat {
    /// Largest integer magnitude `2^(bits-1) - 1`.
    pub fn qmax(&self) -> u64 {
        (1u64 << (self.bits - 1)) - 1
    }

    /// Power-of-two scale exponent for a group with largest magnitude `amax > 0`: the smallest
    /// `s` with `amax <= qmax * 2^s` (nothing saturates), clamped to the 8-bit range
    /// `[-127, 127]`.
    pub fn pow2_scale(&self, amax: f64) -> i32 {
        let (_, mant, exp) = decompose(amax);
        let qmax = u128::from(self.qmax());
        // qmax * 2^s0 is just below 2^(e+1) > amax's leading bit; one step up always suffices.
        let s0 = floor_log2(amax) - (self.bits as i32 - 2);
        let s = if exceeds(u128::from(mant), exp, qmax, s0) {
            s0 + 1
        } else {
            s0
        };
        s.clamp(-127, 127)
    }

    /// f32 scale for a group with largest magnitude `amax > 0`: `f32(amax) / qmax` in f32
    /// arithmetic (the smallest positive f32 if that underflows to 0).
    pub fn f32_scale(&self, amax: f64) -> f32 {
        let s = (amax as f32) / (self.qmax() as f32);
        if s > 0.0 { s } else { f32::from_bits(1) }
    }
}

/// `round(x / s)` as a signed integer, exactly (the f64 quotient can double-round at ties).
fn round_div(x: f64, s: f64, rounding: Rounding, key: u64) -> i64 {
    let ax = x.abs();
    let mut n = (ax / s).floor();
    // Exact residual: n * s has at most 24 + 24 bits, and |ax - n s| < 2s.
    let mut r = (-n).mul_add(s, ax);
    while r < 0.0 {
        n -= 1.0;
        r = (-n).mul_add(s, ax);
    }
    while r >= s {
        n += 1.0;
        r = (-n).mul_add(s, ax);
    }
    let twice = 2.0 * r;
    let up = match rounding {
        Rounding::NearestEven => twice > s || (twice == s && n % 2.0 == 1.0),
        Rounding::NearestAway => twice >= s,
        Rounding::TowardZero => false,
        Rounding::Stochastic { .. } => {
            let frac = ((r / s) * 18446744073709551616.0) as u64;
            r > 0.0 && rand_for(rounding, x, key) < frac
        }
    };
    let m = n as i64 + i64::from(up);
    if x < 0.0 { -m } else { m }
}

/// The scale of one `int` group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScaleValue {
    /// `2^e`.
    Pow2(i32),
    F32(f32),
}

impl ScaleValue {
    /// `q * scale` (exact).
    pub fn apply(self, q: i64) -> f64 {
        if q == 0 {
            return 0.0;
        }
        match self {
            ScaleValue::Pow2(e) => make_f64(q < 0, u128::from(q.unsigned_abs()), e),
            // q * s has at most 24 + 24 bits: exact in f64.
            ScaleValue::F32(s) => q as f64 * f64::from(s),
        }
    }
}

impl IntFormat {
    /// Integers and scale of one group of finite values (an all-zero group: scale `2^0` / 0.0).
    pub fn encode_run(&self, x: &[f64]) -> (ScaleValue, Vec<i64>) {
        let amax = x.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        let qmax = self.qmax() as i64;
        if amax == 0.0 {
            let s = match self.scale {
                IntScale::Pow2 => ScaleValue::Pow2(0),
                IntScale::F32 => ScaleValue::F32(0.0),
            };
            return (s, vec![0; x.len()]);
        }
        match self.scale {
            IntScale::Pow2 => {
                let s = self.pow2_scale(amax);
                let q = x
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let m = round_mag(*v, s, self.rounding, i as u64).min(qmax as u128) as i64;
                        if *v < 0.0 { -m } else { m }
                    })
                    .collect();
                (ScaleValue::Pow2(s), q)
            }
            IntScale::F32 => {
                let s = self.f32_scale(amax);
                let q = x
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        round_div(*v, f64::from(s), self.rounding, i as u64).clamp(-qmax, qmax)
                    })
                    .collect();
                (ScaleValue::F32(s), q)
            }
        }
    }
}

/// Symmetric integer fake-quant of one scale group of finite values.
pub(crate) fn int_run(f: &IntFormat, x: &[f64], out: &mut [f64]) {
    let (s, q) = f.encode_run(x);
    for (o, qi) in out.iter_mut().zip(q) {
        *o = s.apply(qi);
    }
}

// ---------------------------------------------------------------------------------------------
// fixed

impl FixedFormat {
    /// Integer range of the two's complement word: `[-2^(int+frac-1), 2^(int+frac-1) - 1]`.
    pub fn range(&self) -> (i64, i64) {
        let h = 1i64 << (self.int + self.frac - 1);
        (-h, h - 1)
    }
}

impl FixedFormat {
    /// The saturated integer of `x` (infinities saturate; NaN has no code: `None`).
    pub fn encode_value(&self, x: f64, key: u64) -> Option<i64> {
        let (lo, hi) = self.range();
        if x.is_nan() {
            return None;
        }
        if x.is_infinite() {
            return Some(if x < 0.0 { lo } else { hi });
        }
        let max = if x < 0.0 {
            lo.unsigned_abs()
        } else {
            hi as u64
        };
        let m = round_mag(x, -(self.frac as i32), self.rounding, key).min(u128::from(max)) as i64;
        Some(if x < 0.0 { -m } else { m })
    }

    /// The value of an integer code.
    pub fn value(&self, q: i64) -> f64 {
        if q == 0 {
            0.0
        } else {
            make_f64(q < 0, u128::from(q.unsigned_abs()), -(self.frac as i32))
        }
    }
}

/// qX.Y fake-quant, elementwise: NaN stays NaN, infinities saturate.
pub(crate) fn fixed_run(f: &FixedFormat, x: &[f64], out: &mut [f64]) {
    for (i, (v, o)) in x.iter().zip(out.iter_mut()).enumerate() {
        *o = f
            .encode_value(*v, i as u64)
            .map_or(f64::NAN, |q| f.value(q));
    }
}

// ---------------------------------------------------------------------------------------------
// dynamic fixed point (seed 004)

/// Statistics of the bit positions of a set of values (seed 004: "information about the decimal
/// point position of the operation results"). Positions are powers of two: the MSB of `x` is
/// its two's complement "unsigned MSB", the highest bit differing from the sign bit
/// (`floor(log2 |x|)`, one less for `x = -2^p`); its LSB the weight of its lowest set bit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BitStats {
    /// Number of non-zero values.
    pub nonzero: u64,
    /// Number of zeros.
    pub zeros: u64,
    /// Histogram of MSB positions (position -> count); the sum of the MSB detector's one-hot
    /// outputs.
    pub msb_hist: BTreeMap<i32, u64>,
    /// Histogram of non-zero LSB positions.
    pub lsb_hist: BTreeMap<i32, u64>,
    pub max_msb: Option<i32>,
    pub min_lsb: Option<i32>,
}

impl BitStats {
    /// Statistics of finite values (non-finite ones are ignored).
    pub fn of(x: &[f64]) -> BitStats {
        let mut s = BitStats::default();
        for v in x {
            s.add(*v);
        }
        s
    }

    pub fn add(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        if v == 0.0 {
            self.zeros += 1;
            return;
        }
        let (_, mant, exp) = decompose(v);
        // Two's complement "unsigned MSB" (the highest bit differing from the sign bit):
        // -2^p needs one bit less than +2^p.
        let msb = floor_log2(v) - i32::from(v < 0.0 && mant.is_power_of_two());
        let lsb = exp + mant.trailing_zeros() as i32;
        self.nonzero += 1;
        *self.msb_hist.entry(msb).or_default() += 1;
        *self.lsb_hist.entry(lsb).or_default() += 1;
        self.max_msb = Some(self.max_msb.map_or(msb, |m| m.max(msb)));
        self.min_lsb = Some(self.min_lsb.map_or(lsb, |m| m.min(lsb)));
    }

    /// Merge statistics gathered elsewhere (seed 004's aggregator over scalar and vector units).
    pub fn merge(&mut self, other: &BitStats) {
        self.nonzero += other.nonzero;
        self.zeros += other.zeros;
        for (k, v) in &other.msb_hist {
            *self.msb_hist.entry(*k).or_default() += v;
        }
        for (k, v) in &other.lsb_hist {
            *self.lsb_hist.entry(*k).or_default() += v;
        }
        self.max_msb = self.max_msb.max(other.max_msb).or(other.max_msb);
        self.min_lsb = match (self.min_lsb, other.min_lsb) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Chooses the point position of a `bits`-wide two's complement word from statistics:
/// returns the number of fraction bits `f` (value = integer * 2^-f; may be negative), or
/// `None` when there is nothing to place (all zeros).
pub trait PointPolicy {
    fn frac_bits(&self, stats: &BitStats, bits: u32) -> Option<i32>;
}

/// Default policy: the largest MSB lands on the word's top magnitude bit (no value saturates,
/// except one that rounds up past it), but no more fraction bits than the smallest non-zero
/// LSB needs: `f = min(bits - 2 - max_msb, -min_lsb)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MaxPolicy;

impl PointPolicy for MaxPolicy {
    fn frac_bits(&self, stats: &BitStats, bits: u32) -> Option<i32> {
        let top = bits as i32 - 2 - stats.max_msb?;
        Some(stats.min_lsb.map_or(top, |l| top.min(-l)))
    }
}

/// The most fraction bits such that at most `ppm` values per million have their MSB above the
/// word (saturate), read off the MSB histogram; capped by the min LSB like [`MaxPolicy`].
#[derive(Clone, Copy, Debug)]
pub struct OverflowPolicy {
    pub ppm: u32,
}

impl PointPolicy for OverflowPolicy {
    fn frac_bits(&self, stats: &BitStats, bits: u32) -> Option<i32> {
        let max_msb = stats.max_msb?;
        let allowed = (u128::from(stats.nonzero) * u128::from(self.ppm) / 1_000_000) as u64;
        // Lower the top position p while the values above it stay within budget.
        let mut p = max_msb;
        let mut above = 0u64;
        for (pos, count) in stats.msb_hist.iter().rev() {
            p = *pos;
            if above + count > allowed {
                break;
            }
            above += count;
        }
        let top = bits as i32 - 2 - p;
        Some(stats.min_lsb.map_or(top, |l| top.min(-l)))
    }
}

impl PolicyKind {
    /// The built-in policy object.
    pub fn policy(&self) -> Box<dyn PointPolicy> {
        match *self {
            PolicyKind::Max => Box::new(MaxPolicy),
            PolicyKind::Overflow { ppm } => Box::new(OverflowPolicy { ppm }),
        }
    }
}

impl DynFixedFormat {
    /// Integer range of the word.
    pub fn range(&self) -> (i64, i64) {
        let h = 1i64 << (self.bits - 1);
        (-h, h - 1)
    }

    /// Quantize finite values with the point position `policy` picks from their statistics;
    /// returns the fraction bits used (`None`: all zero, outputs 0).
    pub fn quantize_with(
        &self,
        policy: &dyn PointPolicy,
        x: &[f64],
        out: &mut [f64],
    ) -> Option<i32> {
        let (f, q) = self.encode_with(policy, x);
        for (o, qi) in out.iter_mut().zip(q) {
            *o = self.value(qi, f.unwrap_or(0));
        }
        f
    }

    /// Fraction bits (`None`: all zero) and integers of finite values under `policy`.
    pub fn encode_with(&self, policy: &dyn PointPolicy, x: &[f64]) -> (Option<i32>, Vec<i64>) {
        let stats = BitStats::of(x);
        match policy.frac_bits(&stats, self.bits) {
            None => (None, vec![0; x.len()]),
            Some(f) => (Some(f), self.encode_at(f, x)),
        }
    }

    /// Integers at a given point position (fraction bits `f`): round low bits, saturate high.
    pub fn encode_at(&self, f: i32, x: &[f64]) -> Vec<i64> {
        let (lo, hi) = self.range();
        x.iter()
            .enumerate()
            .map(|(i, v)| {
                let max = if *v < 0.0 {
                    lo.unsigned_abs()
                } else {
                    hi as u64
                };
                let m = round_mag(*v, -f, self.rounding, i as u64).min(u128::from(max)) as i64;
                if *v < 0.0 { -m } else { m }
            })
            .collect()
    }

    /// The value of integer `q` with `f` fraction bits.
    pub fn value(&self, q: i64, f: i32) -> f64 {
        if q == 0 {
            0.0
        } else {
            make_f64(q < 0, u128::from(q.unsigned_abs()), -f)
        }
    }
}

/// Seed 004's data converter: re-express the integer `v` with `src_frac` fraction bits as a
/// `bits`-wide two's complement integer with `dst_frac` fraction bits, rounding the low bits
/// with `rounding` and saturating the high bits.
pub fn convert(v: i128, src_frac: i32, dst_frac: i32, bits: u32, rounding: Rounding) -> i64 {
    let h = 1i128 << (bits - 1);
    let mag = round_to_quantum_i(v.unsigned_abs(), dst_frac - src_frac, rounding, v as u64);
    let mag = mag.min(if v < 0 { h as u128 } else { (h - 1) as u128 });
    if v < 0 {
        -(mag as i128) as i64
    } else {
        mag as i64
    }
}

/// Round `m * 2^shift` to an integer.
fn round_to_quantum_i(m: u128, shift: i32, rounding: Rounding, key: u64) -> u128 {
    let rand = match rounding {
        Rounding::Stochastic { seed } => crate::rounding::draw(seed, key, 0),
        _ => 0,
    };
    crate::rounding::round_to_quantum(m, shift, false, 0, rounding, rand)
}

/// Fake-quant of one scale group (run or tensor) of finite values with the format's policy.
pub(crate) fn dynfixed_run(f: &DynFixedFormat, x: &[f64], out: &mut [f64]) {
    let policy = f.policy.policy();
    f.quantize_with(policy.as_ref(), x, out);
}
