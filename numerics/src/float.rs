//! Scalar float formats: IEEE-style `fp(e, m)` ([`FloatFormat`]) and the general mini-float
//! description ([`MiniFloat`]) that also covers the OCP 8/6/4-bit element formats, whose top
//! exponent holds normal values (no infinity).
//!
//! Rounding is done on the integer significand (see [`crate::rounding`]): one rounding, from the
//! exact value, never a chain of float operations.

use crate::rounding::{
    self, Rounding, bitlen, decompose, draw, make_f64, round_to_quantum, to_odd_f64,
};
use serde::{Deserialize, Serialize};

/// What happens to a finite value beyond the largest finite value of a float format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Overflow {
    /// Clamp to the largest finite value of the same sign.
    Saturate,
    /// Become infinity (IEEE behaviour). With round-toward-zero the result is the largest
    /// finite value, as in IEEE 754.
    Infinity,
}

/// An IEEE-style binary float format `fp(exp_bits, mant_bits)`; `mant_bits` excludes the
/// hidden bit (fp16 = fp(5, 10)). The top exponent field encodes infinity and NaN.
/// Supported: `2 <= exp_bits <= 11`, `mant_bits <= 52` (every such format embeds in f64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FloatFormat {
    pub exp_bits: u32,
    pub mant_bits: u32,
    /// Without subnormals the representable set is zero plus the normals; values in the gap
    /// round to 0 or the smallest normal by the rounding mode.
    pub subnormals: bool,
    pub overflow: Overflow,
    pub rounding: Rounding,
}

/// What a mini-float does with values beyond its largest finite value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MiniOverflow {
    Saturate,
    Infinity,
    /// Become NaN (formats without infinity, e.g. `ml_dtypes.float8_e4m3fn` casts).
    Nan,
}

/// A general binary mini-float: value = `(-1)^s * sig * 2^(e - mant_bits)` with an integer
/// significand `sig` of `mant_bits + 1` bits for normals, exponent range `[emin, emax]`, and a
/// largest significand at `emax` (`max_sig`, with `mant_bits` fraction bits; e.g. OCP e4m3 has
/// `1.110b` because `1.111b * 2^8` is its NaN).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MiniFloat {
    pub mant_bits: u32,
    pub emin: i32,
    pub emax: i32,
    pub max_sig: u64,
    pub subnormals: bool,
    pub overflow: MiniOverflow,
    pub specials: Specials,
}

/// Which codes of a mini-float's bit layout are infinity / NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Specials {
    /// IEEE: the all-ones exponent field holds infinity (mantissa 0) and NaN.
    Ieee,
    /// Only the all-ones pattern (magnitude) is NaN (OCP fp8 e4m3, `float8_e4m3fn`).
    NanOnly,
    /// Every code is a finite number (OCP fp6 / fp4).
    None,
}

/// The rounded value of a mini-float conversion, before it becomes an f64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Rounded {
    /// `(-1)^neg * sig * 2^exp` (`sig` may be 0).
    Finite {
        neg: bool,
        sig: u128,
        exp: i32,
    },
    Inf {
        neg: bool,
    },
    Nan,
}

impl Rounded {
    /// As an f64, scaled by `2^scale` (exact for the formats here).
    pub(crate) fn to_f64_scaled(self, scale: i32) -> f64 {
        match self {
            Rounded::Finite { neg, sig, exp } => make_f64(neg, sig, exp + scale),
            Rounded::Inf { neg } => {
                if neg {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            Rounded::Nan => f64::NAN,
        }
    }
}

impl MiniFloat {
    /// The largest finite value.
    pub fn max_value(&self) -> f64 {
        make_f64(
            false,
            u128::from(self.max_sig),
            self.emax - self.mant_bits as i32,
        )
    }

    /// The smallest positive value (subnormal if the format has them).
    pub fn min_positive(&self) -> f64 {
        if self.subnormals {
            make_f64(false, 1, self.emin - self.mant_bits as i32)
        } else {
            make_f64(false, 1, self.emin)
        }
    }

    /// Exponent bias `1 - emin`.
    pub fn bias(&self) -> i32 {
        1 - self.emin
    }

    /// Width of the exponent field (IEEE-style formats reserve the all-ones field).
    pub fn exp_field_bits(&self) -> u32 {
        let top = (self.emax + self.bias()) as u32 + u32::from(self.specials == Specials::Ieee);
        32 - top.leading_zeros()
    }

    /// Total width: sign, exponent field, mantissa.
    pub fn bits(&self) -> u32 {
        1 + self.exp_field_bits() + self.mant_bits
    }

    /// Round `x` to this format (NaN stays NaN; infinities follow `overflow`).
    pub fn round(&self, x: f64, rounding: Rounding) -> f64 {
        self.round_scaled(x, 0, rounding, 0)
    }

    /// The bit pattern of `x` rounded to nearest-even. NaN: IEEE layout the quiet NaN
    /// (all-ones exponent, top mantissa bit); otherwise the all-ones pattern (e4m3's NaN; fp6 /
    /// fp4 have no NaN and give their all-ones code). Infinity in a layout without one (after
    /// `overflow`): the all-ones pattern too.
    pub fn encode(&self, x: f64) -> u64 {
        let m = self.mant_bits;
        let w = self.exp_field_bits();
        let field_all = (1u64 << w) - 1;
        let r = self.round(x, Rounding::NearestEven);
        let sign = u64::from(r.is_sign_negative() && !r.is_nan()) << (w + m);
        if r.is_nan() {
            return match self.specials {
                Specials::Ieee => (field_all << m) | if m == 0 { 0 } else { 1u64 << (m - 1) },
                _ => (1u64 << (w + m)) - 1,
            };
        }
        if r.is_infinite() {
            return match self.specials {
                Specials::Ieee => sign | (field_all << m),
                _ => sign | ((1u64 << (w + m)) - 1),
            };
        }
        if r == 0.0 {
            return sign;
        }
        let (_, mant, exp) = decompose(r);
        let len = bitlen(u128::from(mant));
        let lead = exp + len - 1;
        if lead >= self.emin {
            let frac = (u128::from(mant) << m >> (len - 1)) as u64 & ((1u64 << m) - 1);
            sign | (((lead + self.bias()) as u64) << m) | frac
        } else {
            let q = self.emin - m as i32;
            // On the subnormal grid: mant * 2^exp = frac * 2^q exactly.
            let frac = if exp >= q {
                u128::from(mant) << (exp - q)
            } else {
                u128::from(mant) >> (q - exp)
            };
            sign | frac as u64
        }
    }

    /// The value of a bit pattern.
    pub fn decode(&self, bits: u64) -> f64 {
        let m = self.mant_bits;
        let w = self.exp_field_bits();
        let neg = (bits >> (w + m)) & 1 == 1;
        let field = ((bits >> m) & ((1u64 << w) - 1)) as i32;
        let frac = bits & ((1u64 << m) - 1);
        let all = (1i32 << w) - 1;
        let mag = if field == all && self.specials == Specials::Ieee {
            if frac == 0 { f64::INFINITY } else { f64::NAN }
        } else if field == all && self.specials == Specials::NanOnly && frac == (1u64 << m) - 1 {
            f64::NAN
        } else if field == 0 {
            if self.subnormals {
                make_f64(false, u128::from(frac), self.emin - m as i32)
            } else {
                0.0
            }
        } else {
            make_f64(
                false,
                u128::from(frac | (1u64 << m)),
                field - self.bias() - m as i32,
            )
        };
        if neg { -mag } else { mag }
    }

    /// Round `(-1)^neg * (mant + s) * 2^exp` (see [`FloatFormat::round_exact`]).
    pub(crate) fn round_parts(
        &self,
        neg: bool,
        mant: u128,
        exp: i32,
        sticky: bool,
        rounding: Rounding,
        rand: u64,
    ) -> Rounded {
        if mant == 0 {
            return Rounded::Finite {
                neg,
                sig: 0,
                exp: 0,
            };
        }
        let m = self.mant_bits as i32;
        let lead = exp + bitlen(mant) - 1;
        // The quantum (weight of the last significand bit) at this magnitude.
        let q = if lead >= self.emin {
            lead - m
        } else if self.subnormals {
            self.emin - m
        } else {
            self.emin
        };
        let sig = round_to_quantum(mant, exp, sticky, q, rounding, rand);
        // Overflow: compare sig * 2^q with max_sig * 2^(emax - m).
        let over = exceeds(sig, q, u128::from(self.max_sig), self.emax - m);
        if over {
            let saturate = Rounded::Finite {
                neg,
                sig: u128::from(self.max_sig),
                exp: self.emax - m,
            };
            return match (self.overflow, rounding) {
                (MiniOverflow::Saturate, _) | (_, Rounding::TowardZero) => saturate,
                (MiniOverflow::Infinity, _) => Rounded::Inf { neg },
                (MiniOverflow::Nan, _) => Rounded::Nan,
            };
        }
        Rounded::Finite { neg, sig, exp: q }
    }

    /// Round an f64 to this format, scaled by `2^-scale` first and `2^scale` after (exact):
    /// the value of `x` quantized on the grid of this format times `2^scale`.
    pub(crate) fn round_scaled(&self, x: f64, scale: i32, rounding: Rounding, key: u64) -> f64 {
        if x.is_nan() {
            return f64::NAN;
        }
        if x.is_infinite() {
            return match self.overflow {
                MiniOverflow::Nan => f64::NAN,
                MiniOverflow::Infinity => x,
                MiniOverflow::Saturate => self.max_value().copysign(x) * rounding::pow2(scale),
            };
        }
        let (neg, mant, exp) = decompose(x);
        let rand = rand_for(rounding, x, key);
        self.round_parts(neg, u128::from(mant), exp - scale, false, rounding, rand)
            .to_f64_scaled(scale)
    }
}

/// Whether `a * 2^ea > b * 2^eb` (exact, for non-negative integers).
pub(crate) fn exceeds(a: u128, ea: i32, b: u128, eb: i32) -> bool {
    if a == 0 {
        return false;
    }
    if b == 0 {
        return true;
    }
    let d = ea - eb;
    if d >= 0 {
        bitlen(a) + d > 127 || (a << d) > b
    } else {
        bitlen(b) - d <= 127 && a > (b << -d)
    }
}

/// The random draw for stochastic rounding of `x` at position `key` (0 for other modes).
pub(crate) fn rand_for(rounding: Rounding, x: f64, key: u64) -> u64 {
    match rounding {
        Rounding::Stochastic { seed } => draw(seed, x.to_bits(), key),
        _ => 0,
    }
}

impl FloatFormat {
    pub const FP16: FloatFormat = FloatFormat::ieee(5, 10);
    pub const BF16: FloatFormat = FloatFormat::ieee(8, 7);
    pub const FP32: FloatFormat = FloatFormat::ieee(8, 23);
    pub const FP64: FloatFormat = FloatFormat::ieee(11, 52);

    /// An IEEE-style format with subnormals, overflow to infinity, nearest-even.
    pub const fn ieee(exp_bits: u32, mant_bits: u32) -> Self {
        FloatFormat {
            exp_bits,
            mant_bits,
            subnormals: true,
            overflow: Overflow::Infinity,
            rounding: Rounding::NearestEven,
        }
    }

    /// Exponent bias `2^(e-1) - 1`.
    pub fn bias(&self) -> i32 {
        (1i32 << (self.exp_bits - 1)) - 1
    }

    /// Total width in bits (sign + exponent + mantissa).
    pub fn bits(&self) -> u32 {
        1 + self.exp_bits + self.mant_bits
    }

    /// The same format as a [`MiniFloat`].
    pub fn mini(&self) -> MiniFloat {
        let bias = self.bias();
        MiniFloat {
            mant_bits: self.mant_bits,
            emin: 1 - bias,
            emax: bias,
            max_sig: (1u64 << (self.mant_bits + 1)) - 1,
            subnormals: self.subnormals,
            overflow: match self.overflow {
                Overflow::Saturate => MiniOverflow::Saturate,
                Overflow::Infinity => MiniOverflow::Infinity,
            },
            specials: Specials::Ieee,
        }
    }

    /// The largest finite value.
    pub fn max_value(&self) -> f64 {
        self.mini().max_value()
    }

    /// Round `x` to this format with its rounding mode. NaN stays NaN; infinities stay
    /// infinite (or become the largest finite value with `Overflow::Saturate`).
    pub fn round(&self, x: f64) -> f64 {
        self.round_at(x, 0)
    }

    /// [`round`](Self::round) for the element at `position` of a run (the position feeds the
    /// stochastic-rounding draw; other modes ignore it).
    pub fn round_at(&self, x: f64, position: u64) -> f64 {
        self.mini().round_scaled(x, 0, self.rounding, position)
    }

    /// The correctly rounded value of `(-1)^negative * (mant + s) * 2^exp`, where `s` is an
    /// infinitesimal positive amount when `sticky` (a wide exact sum whose lost low bits are
    /// summarised by `sticky`). Stochastic rounding draws as [`round`](Self::round) does at
    /// position 0, from the bits of the value rounded to f64 by round-to-odd
    /// ([`to_odd_f64`]): the value itself where f64 holds it, so the draw depends on the
    /// value only, not on how a sum came to write it (`(3, 1)` or `(6, 0)`, 127 bits or 128).
    pub fn round_exact(&self, negative: bool, mant: u128, exp: i32, sticky: bool) -> f64 {
        let rand = match self.rounding {
            Rounding::Stochastic { seed } => {
                draw(seed, to_odd_f64(negative, mant, exp, sticky).to_bits(), 0)
            }
            _ => 0,
        };
        self.mini()
            .round_parts(negative, mant, exp, sticky, self.rounding, rand)
            .to_f64_scaled(0)
    }

    /// The bit pattern of `round(x)`: sign, biased exponent, mantissa (NaN: quiet NaN with
    /// the top mantissa bit set; without subnormals, zero and normals only).
    pub fn encode(&self, x: f64) -> u64 {
        // `round` applies this format's rounding mode; re-rounding its result is exact.
        self.mini().encode(self.round(x))
    }

    /// The value of a bit pattern (bits above the format's width are ignored).
    pub fn decode(&self, bits: u64) -> f64 {
        self.mini().decode(bits)
    }
}
