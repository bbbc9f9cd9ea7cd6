//! Runs of values as integers on one unit: [`to_ints`] and its BFP shortcut
//! ([`quantized_ints`]), the span of a set of units ([`Span`]) and a row's runs on a common
//! unit ([`Aligned`]).

use super::{ZERO_RUN, int_bits};
use crate::quant::{BfpInts, avx2_copy, to_i16};
use nnp_numerics::{floor_log2, pow2};

avx2_copy! {
    /// The integers and unit of one run: `v[i] = q[i] * 2^u` with every `|q| <= qmax`, or `None`
    /// when the run has no such form (non-finite values, more significant bits across the run than
    /// `qmax` holds, units outside f64's normal scaling range). An all-zero run has the unit
    /// `ZERO_RUN`.
    ///
    /// The unit is the coarsest that holds every value: first `2^(top + 1 - bits)` for the largest
    /// magnitude `m < 2^(top + 1)`, with `2^bits - 1 <= qmax` (so every `|q| < 2^bits`; a value
    /// that is not a whole number of such units refuses the run), then coarser by the trailing zero
    /// bits all the integers share (BFP 8 mantissas come out as they are, `|q| <= 127`).
    pub fn to_ints / to_ints_avx2 / to_ints_avx512 / to_ints_body
        (v: &[f64], q: &mut [i16], qmax: i32) -> Option<i32>
}

#[inline(always)]
pub(super) fn to_ints_body(v: &[f64], q: &mut [i16], qmax: i32) -> Option<i32> {
    // The largest magnitude by bit pattern, in one branch-free pass: non-negative f64 order
    // as their bits, and every NaN and infinity lies above every finite value.
    let top = v
        .iter()
        .fold(0u64, |a, x| a.max(x.to_bits() & !(1u64 << 63)));
    if top >= f64::INFINITY.to_bits() {
        return None;
    }
    let m = f64::from_bits(top);
    if m == 0.0 {
        // All zeros (-0.0 included: a product with it is an exact zero).
        q.fill(0);
        return Some(ZERO_RUN);
    }
    let bits = int_bits(qmax);
    let u = floor_log2(m) + 1 - bits;
    if !(-1022..=1000).contains(&u) {
        return None;
    }
    let down = pow2(-u);
    let (mut ok, mut all) = (true, 0i32);
    for (x, o) in v.iter().zip(q.iter_mut()) {
        // |x * down| < 2^bits <= 2^15: the conversion is exact exactly when it is an integer.
        let (i, whole) = to_i16(x * down);
        ok &= whole;
        all |= i32::from(i);
        *o = i;
    }
    if !ok {
        return None;
    }
    Some(u + coarsest(q, all))
}

avx2_copy! {
    /// One run of `v` quantized in `fmt` straight to integers at their coarsest unit: what
    /// [`to_ints`] gives for the run's quantized values, or `None` where it would give `None`
    /// (a non-finite element) or could differ ([`mantissa_unit`]).
    pub(super) fn quantized_ints / quantized_ints_avx2 / quantized_ints_avx512 / quantized_ints_body
        (fmt: &BfpInts, v: &[f64], q: &mut [i16], qmax: i32) -> Option<i32>
}

#[inline(always)]
fn quantized_ints_body(fmt: &BfpInts, v: &[f64], q: &mut [i16], qmax: i32) -> Option<i32> {
    let lsb = fmt.run(v, q)?;
    mantissa_unit(q, lsb, qmax)
}

/// The bits of a run's integers at its coarsest unit: a run of BFP mantissas `q * 2^lsb`
/// (`quant::BfpInts`) as [`to_ints`] holds the same values, or `None` where `to_ints` could
/// differ (the largest `|q|` not below `2^bits` of [`qmax`](super::qmax), or the unit out of its
/// range).
#[inline(always)]
pub(super) fn mantissa_unit(q: &mut [i16], lsb: i32, qmax: i32) -> Option<i32> {
    let (top, all) = q.iter().fold((0u16, 0i32), |(m, a), &x| {
        (m.max(x.unsigned_abs()), a | i32::from(x))
    });
    if top == 0 {
        return Some(ZERO_RUN);
    }
    // `to_ints` takes `u = floor_log2(max) + 1 - bits` and holds the values as integers of
    // `2^u`, which these are (as `|q| < 2^bits`, `u <= lsb`); both then strip the trailing
    // zero bits all the integers share, so they end at the same unit and integers.
    let bits = int_bits(qmax);
    let log = 15 - top.leading_zeros() as i32;
    let u = log + lsb + 1 - bits;
    if log >= bits || !(-1022..=1000).contains(&u) {
        return None;
    }
    Some(lsb + coarsest(q, all))
}

/// Shifts out the trailing zero bits that all of `q` share (`all`: their bitwise or, not zero:
/// both callers hand a run with a nonzero integer) and returns how many.
#[inline(always)]
fn coarsest(q: &mut [i16], all: i32) -> i32 {
    debug_assert_ne!(all, 0, "a zero run has no coarsest unit");
    let tz = all.trailing_zeros();
    if tz > 0 {
        q.iter_mut().for_each(|x| *x >>= tz);
    }
    tz as i32
}

/// Bits of the largest magnitude of `q`.
pub(super) fn mag_bits(q: &[i16]) -> u32 {
    let m = q.iter().map(|x| x.unsigned_abs()).max().unwrap_or(0);
    u16::BITS - m.leading_zeros()
}

/// `ceil(log2 k)` for `k >= 1`.
pub(super) fn ceil_log2(k: usize) -> u32 {
    usize::BITS - k.max(1).saturating_sub(1).leading_zeros()
}

/// The smallest and largest unit of a set of runs, all-zero runs left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) lo: i32,
    pub(super) hi: i32,
}

impl Span {
    pub(super) const EMPTY: Span = Span {
        lo: i32::MAX,
        hi: i32::MIN,
    };

    pub(super) fn of(units: impl IntoIterator<Item = i32>) -> Span {
        units.into_iter().fold(Span::EMPTY, |s, u| {
            if u == ZERO_RUN {
                s
            } else {
                Span {
                    lo: s.lo.min(u),
                    hi: s.hi.max(u),
                }
            }
        })
    }

    pub(super) fn merge(self, o: Span) -> Span {
        Span {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.lo > self.hi
    }

    /// Binades between the smallest and largest unit (0 when empty).
    pub(super) fn width(&self) -> u32 {
        if self.is_empty() {
            0
        } else {
            (self.hi - self.lo) as u32
        }
    }
}

/// `2^u` of every unit, 0 for all-zero runs (their partials are zero).
pub(super) fn scales(units: &[i32]) -> Vec<f64> {
    units
        .iter()
        .map(|&u| if u == ZERO_RUN { 0.0 } else { pow2(u) })
        .collect()
}

/// The runs of one output row (a weight row, or a vector item) across the tile columns, on a
/// common unit: the row's smallest unit (`base`, as `2^base`; 1 for a row of zero runs) and
/// each run's unit above it (`shift`, 0 for a zero run), so that a tile partial `P` of runs
/// with shifts `a` and `b` is `(P << (a + b)) * 2^(base_w + base_x)`. `unit_of(row, j)` is the
/// index of run `j` of `row` in `units`; the shifts come in the same layout.
pub(super) struct Aligned {
    pub(super) base: Vec<f64>,
    pub(super) shift: Vec<i32>,
}

impl Aligned {
    pub(super) fn new(
        units: &[i32],
        rows: usize,
        cols: usize,
        unit_of: impl Fn(usize, usize) -> usize,
    ) -> Aligned {
        let mut shift = vec![0; units.len()];
        let base = (0..rows)
            .map(|row| {
                let span = Span::of((0..cols).map(|j| units[unit_of(row, j)]));
                let lo = if span.is_empty() { 0 } else { span.lo };
                for j in 0..cols {
                    let k = unit_of(row, j);
                    shift[k] = if units[k] == ZERO_RUN {
                        0
                    } else {
                        units[k] - lo
                    };
                }
                pow2(lo)
            })
            .collect();
        Aligned { base, shift }
    }
}
