//! Rounding modes offered by every quantizer, the one integer-rounding primitive every
//! quantizer is built on (exact, from the bits: no float operation that could double-round),
//! and the exact-arithmetic building blocks both engines use: an f64's integer significand
//! ([`decompose`], [`decompose_odd`]), [`bitlen`], and round-to-odd ([`to_odd_f64`],
//! [`to_odd_pair`]). The exact sums built on them are in [`crate::sums`].

use serde::{Deserialize, Serialize};

/// How a value that falls between two representable values is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Rounding {
    /// Round to nearest, ties to even (IEEE default).
    #[default]
    NearestEven,
    /// Round to nearest, ties away from zero.
    NearestAway,
    /// Truncate toward zero.
    TowardZero,
    /// Stochastic rounding driven by an explicit seed (reproducible).
    Stochastic { seed: u64 },
}

/// SplitMix64 finaliser: a good 64-bit mixer, used to derive stochastic-rounding draws.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The stochastic-rounding draw for one value: a hash of the seed, the value's f64 bits and its
/// position in the run (so equal values at different positions draw independently, and the same
/// call always gives the same result).
pub(crate) fn draw(seed: u64, value_bits: u64, position: u64) -> u64 {
    mix64(seed ^ mix64(value_bits ^ mix64(position.wrapping_mul(0xA076_1D64_78BD_642F))))
}

/// Bit length of `v` (0 for 0).
#[inline]
pub fn bitlen(v: u128) -> i32 {
    128 - v.leading_zeros() as i32
}

/// Round the magnitude `(mant + s) * 2^exp` (`s` an infinitesimal positive amount when `sticky`)
/// to an integer multiple of `2^q` and return that integer. `draw` is the 64-bit random draw used
/// by stochastic rounding (ignored otherwise). Saturates at `u128::MAX` (callers clamp far below).
pub(crate) fn round_to_quantum(
    mant: u128,
    exp: i32,
    sticky: bool,
    q: i32,
    rounding: Rounding,
    draw: u64,
) -> u128 {
    if mant == 0 {
        // An infinitesimal amount rounds to 0 in every mode (stochastic: probability 0).
        return 0;
    }
    let shift = i64::from(q) - i64::from(exp);
    if shift <= 0 {
        // Exact at this quantum; a sticky residue below never reaches a tie or an up-rounding.
        let up = (-shift) as u32;
        if up as i32 + bitlen(mant) > 127 {
            return u128::MAX;
        }
        return mant << up;
    }
    let (int, rem_cmp, frac64) = if shift > 128 {
        // Everything is below half a quantum (`mant < 2^128 <= 2^(shift - 1)`); the fraction's
        // top 64 bits still count for stochastic rounding where `mant` reaches them (a wide
        // sum's 128-bit significand just below the quantum).
        let frac64 = if shift < 192 {
            (mant >> (shift - 64)) as u64
        } else {
            0
        };
        (0u128, std::cmp::Ordering::Less, frac64)
    } else {
        let shift = shift as u32;
        let int = if shift == 128 { 0 } else { mant >> shift };
        let rem = if shift == 128 {
            mant
        } else {
            mant & ((1u128 << shift) - 1)
        };
        let half = 1u128 << (shift - 1);
        let cmp = rem.cmp(&half).then(if sticky {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        });
        // Top 64 bits of the fraction rem / 2^shift.
        let frac64 = if shift >= 64 {
            (rem >> (shift - 64)) as u64
        } else {
            (rem << (64 - shift)) as u64
        };
        (int, cmp, frac64)
    };
    let inexact = rem_cmp != std::cmp::Ordering::Less || frac64 != 0 || sticky || shift > 128;
    let up = match rounding {
        Rounding::NearestEven => {
            rem_cmp == std::cmp::Ordering::Greater
                || (rem_cmp == std::cmp::Ordering::Equal && int & 1 == 1)
        }
        Rounding::NearestAway => rem_cmp != std::cmp::Ordering::Less,
        Rounding::TowardZero => false,
        // Up with probability equal to the fraction (to 64 bits).
        Rounding::Stochastic { .. } => inexact && draw < frac64,
    };
    int + u128::from(up)
}

/// Sign, integer significand and exponent of a finite f64: `x = (-1)^neg * mant * 2^exp`
/// (`mant` below `2^53`, `exp` the exponent of its last bit).
pub fn decompose(x: f64) -> (bool, u64, i32) {
    let bits = x.to_bits();
    let neg = bits >> 63 == 1;
    let field = ((bits >> 52) & 0x7FF) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if field == 0 {
        (neg, frac, -1074)
    } else {
        (neg, frac | (1u64 << 52), field - 1075)
    }
}

/// `|x| = m * 2^e` with `m` odd (trailing zeros removed), for a finite non-zero f64.
#[inline]
pub fn decompose_odd(x: f64) -> (u64, i32) {
    let (_, m, e) = decompose(x);
    let tz = m.trailing_zeros();
    (m >> tz, e + tz as i32)
}

/// `(-1)^negative * (mant + s) * 2^exp` (`s` infinitesimal when `sticky`) rounded to f64 by
/// round-to-odd: truncated to f64's precision (53 bits, fewer among its subnormals), with the
/// last bit set where anything was dropped; past f64's largest value, that value (whose last
/// bit is set). The result depends on the value only, and is the value where f64 holds it.
pub fn to_odd_f64(negative: bool, mant: u128, exp: i32, sticky: bool) -> f64 {
    let signed = |v: f64| if negative { -v } else { v };
    if mant == 0 {
        // Zero, or zero plus an infinitesimal: truncated, with the last bit set.
        return signed(if sticky { pow2(-1074) } else { 0.0 });
    }
    let lead = exp + bitlen(mant) - 1;
    if lead > 1023 {
        return signed(f64::MAX);
    }
    // f64's last bit for this value: 53 bits from its leading one, not below 2^-1074.
    let low = (lead - 52).max(-1074);
    let (mut m, mut lost) = (mant, sticky);
    if exp < low {
        let shift = (low - exp) as u32;
        lost |= shift >= 128 || m & ((1u128 << shift) - 1) != 0;
        m = m.checked_shr(shift).unwrap_or(0);
    } else {
        // At most 52 places: the value has fewer than 53 bits above `low`.
        m <<= exp - low;
    }
    if lost {
        m |= 1;
    }
    make_f64(negative, m, low)
}

/// The round-to-odd f64 of `s + err`, where `s = RN(exact)` and `err = exact - s` exactly
/// (a two-sum or two-product pair): `s` where that is exact, else the odd one of `s` and its
/// neighbour toward `err`, between which the exact value lies.
pub fn to_odd_pair(s: f64, err: f64) -> f64 {
    if err == 0.0 || s == 0.0 || !s.is_finite() {
        return s;
    }
    let bits = s.to_bits();
    if bits & 1 == 1 {
        return s;
    }
    if (err > 0.0) == (s > 0.0) {
        f64::from_bits(bits + 1)
    } else {
        f64::from_bits(bits - 1)
    }
}

/// `floor(log2 |x|)` of a finite non-zero f64, from its bits (subnormals by their leading one).
#[inline]
pub fn floor_log2(x: f64) -> i32 {
    let bits = x.to_bits() & !(1u64 << 63);
    let field = (bits >> 52) as i32;
    if field == 0 {
        // Subnormal: the leading one of the fraction.
        -1074 + 63 - bits.leading_zeros() as i32
    } else {
        field - 1023
    }
}

/// `(-1)^neg * q * 2^e` as an f64, exactly (the caller guarantees it is representable).
pub(crate) fn make_f64(neg: bool, q: u128, e: i32) -> f64 {
    if q == 0 {
        return if neg { -0.0 } else { 0.0 };
    }
    // Normalise q to at most 53 bits (callers pass values exactly representable).
    let mut q = q;
    let mut e = e;
    let excess = bitlen(q) - 53;
    if excess > 0 {
        q >>= excess;
        e += excess;
    }
    // At most 53 bits now: the u64 conversion is exact (and one instruction, where a u128's
    // is a library call).
    let mag = pow2_mul(q as u64 as f64, e);
    if neg { -mag } else { mag }
}

/// `v * 2^e` for a representable result, without intermediate overflow or double rounding.
pub(crate) fn pow2_mul(v: f64, e: i32) -> f64 {
    let mut v = v;
    let mut e = e;
    while e > 1000 {
        v *= pow2(1000);
        e -= 1000;
    }
    while e < -1000 {
        // Keep the intermediate normal: scale in steps that stay exact.
        v *= pow2(-1000);
        e += 1000;
    }
    v * pow2(e)
}

/// `2^e` for `-1074 <= e <= 1023` (0 or inf outside).
pub fn pow2(e: i32) -> f64 {
    if e > 1023 {
        f64::INFINITY
    } else if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else if e >= -1074 {
        f64::from_bits(1u64 << (e + 1074))
    } else {
        0.0
    }
}
