//! The format catalogue of docs/numerics.md: the [`Format`] value of every `quant` literal
//! (the reference quantizer [`Format::quantize`] is in `quantize.rs`, above the formats'
//! kernels; the storage cost [`Format::bits_per_element`] in `pack.rs`). Parsing (`str::parse`) is in
//! `parse.rs`, canonical printing (`Display`, which parses back to the same value) and serde in
//! `display.rs`.

mod display;
mod names;
mod parse;

use serde::{Deserialize, Serialize};

use crate::Rounding;
pub use crate::float::{FloatFormat, MiniFloat, MiniOverflow, Overflow, Specials};

/// How many consecutive elements of a run share one scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Block {
    /// The native dimension N (one native tile / one row of an N x N tile).
    Native,
    Size(usize),
}

impl Block {
    /// The block length for native dimension `native` (at least 1).
    pub fn len(&self, native: usize) -> usize {
        match self {
            Block::Native => native.max(1),
            Block::Size(n) => (*n).max(1),
        }
    }
}

/// `bfp(mant, block, exp_bits, round)`: docs/numerics.md. `msfp(mant)` is the same with
/// `block = 16, exp_bits = 8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BfpFormat {
    /// Mantissa width including the sign (two's complement), 2..=32.
    pub mant: u32,
    pub block: Block,
    /// Shared exponent width, 1..=16; the exponent is clamped to `[1 - 2^(w-1), 2^(w-1)]`.
    pub exp_bits: u32,
    pub rounding: Rounding,
    /// Allow the mantissa `-2^(mant-1)` (`range = full`); default symmetric saturation.
    pub full_range: bool,
}

/// An OCP MX v1.0 element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MxElem {
    Fp8E4M3,
    Fp8E5M2,
    Fp6E3M2,
    Fp6E2M3,
    Fp4E2M1,
    Int8,
}

impl MxElem {
    pub const ALL: [MxElem; 6] = [
        MxElem::Fp8E4M3,
        MxElem::Fp8E5M2,
        MxElem::Fp6E3M2,
        MxElem::Fp6E2M3,
        MxElem::Fp4E2M1,
        MxElem::Int8,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MxElem::Fp8E4M3 => "fp8e4m3",
            MxElem::Fp8E5M2 => "fp8e5m2",
            MxElem::Fp6E3M2 => "fp6e3m2",
            MxElem::Fp6E2M3 => "fp6e2m3",
            MxElem::Fp4E2M1 => "fp4e2m1",
            MxElem::Int8 => "int8",
        }
    }

    /// Element width in bits.
    pub fn bits(self) -> u32 {
        match self {
            MxElem::Fp8E4M3 | MxElem::Fp8E5M2 | MxElem::Int8 => 8,
            MxElem::Fp6E3M2 | MxElem::Fp6E2M3 => 6,
            MxElem::Fp4E2M1 => 4,
        }
    }

    /// `emax_elem` of OCP MX v1.0 table 1: exponent of the largest normal (INT8: 0, it is
    /// the fixed-point `s1.6`).
    pub fn emax(self) -> i32 {
        match self {
            MxElem::Fp8E4M3 => 8,
            MxElem::Fp8E5M2 => 15,
            MxElem::Fp6E3M2 => 4,
            MxElem::Fp6E2M3 | MxElem::Fp4E2M1 => 2,
            MxElem::Int8 => 0,
        }
    }

    /// The element as a saturating mini-float (INT8: `s1.6` = 6 fraction bits, symmetric
    /// `[-127/64, 127/64]` as microxcaling clamps it).
    pub fn mini(self) -> MiniFloat {
        let (mant_bits, emin, emax, max_sig, specials) = match self {
            MxElem::Fp8E4M3 => (3, -6, 8, 0b1110, Specials::NanOnly),
            MxElem::Fp8E5M2 => (2, -14, 15, 0b111, Specials::Ieee),
            MxElem::Fp6E3M2 => (2, -2, 4, 0b111, Specials::None),
            MxElem::Fp6E2M3 => (3, 0, 2, 0b1111, Specials::None),
            MxElem::Fp4E2M1 => (1, 0, 2, 0b11, Specials::None),
            // A fixed-point grid of step 2^-6: "subnormals" with emin = 0 and 6 fraction bits.
            MxElem::Int8 => (6, 0, 0, 127, Specials::None),
        };
        MiniFloat {
            mant_bits,
            emin,
            emax,
            max_sig,
            subnormals: true,
            overflow: MiniOverflow::Saturate,
            specials,
        }
    }
}

/// `mx(elem, block)`: OCP Microscaling v1.0, E8M0 shared scale `2^(floor(log2 amax) - emax)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MxFormat {
    pub elem: MxElem,
    pub block: Block,
    pub rounding: Rounding,
}

/// `hbfp(mant, levels, scale_cap, block, sub, ...)`: seed 000's hierarchical shared exponents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HbfpFormat {
    /// Sign-magnitude mantissa width including the sign (2..=32).
    pub mant: u32,
    pub block: Block,
    /// Number of tree levels carrying scales.
    pub levels: u32,
    /// Size of the smallest sub-tile that carries a scale (1: per element, Fig. 2; 2: per
    /// pair, Fig. 4 and the MX9/6/4 micro-exponents).
    pub sub: usize,
    /// Largest scale (right shift) a sub-tile may take relative to its parent.
    pub scale_cap: u32,
    /// Stored width of each scale field (at least enough for `scale_cap`).
    pub scale_bits: u32,
    /// Width of the top shared exponent (bias `2^(w-1) - 1`).
    pub exp_bits: u32,
    /// Seed 000's flush rule: an element whose quantized exponent exceeds its own by at least
    /// the number of magnitude bits becomes 0 (otherwise it is rounded like the others).
    pub flush: bool,
    pub rounding: Rounding,
}

/// Scale of an `int` format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IntScale {
    /// Power of two (stored as an 8-bit exponent).
    Pow2,
    /// Any f32 (`amax / (2^(bits-1) - 1)` rounded to f32).
    F32,
}

/// What one scale covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Per {
    /// The whole tensor (in [`Format::quantize`]: the whole run).
    Tensor,
    /// Each run (row) separately.
    Row,
}

/// `int(bits, scale, per)`: symmetric integer `[-(2^(b-1) - 1), 2^(b-1) - 1]` times a scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IntFormat {
    pub bits: u32,
    pub scale: IntScale,
    pub per: Per,
    pub rounding: Rounding,
}

/// `fixed(int, frac)`: qX.Y two's complement (`int` includes the sign bit, as in seed 001's
/// q1.15), saturating: range `[-2^(int-1), 2^(int-1) - 2^-frac]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FixedFormat {
    pub int: u32,
    pub frac: u32,
    pub rounding: Rounding,
}

/// Built-in point-position policies of `dynfixed` (see [`crate::fixed::PointPolicy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PolicyKind {
    /// Default: the largest MSB fits (no value saturates), and no more fraction bits than the
    /// smallest non-zero LSB needs.
    Max,
    /// The most fraction bits such that at most `ppm` values per million saturate.
    Overflow { ppm: u32 },
}

/// `dynfixed(bits, policy, per)`: seed 004's fixed point whose point position is chosen from
/// statistics of the data being quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DynFixedFormat {
    pub bits: u32,
    pub policy: PolicyKind,
    pub per: Per,
    pub rounding: Rounding,
}

/// `pot(bits, block)`: seed 002's power-of-two weights, sign + shift code, shared exponent
/// per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PotFormat {
    pub bits: u32,
    pub block: Block,
    pub rounding: Rounding,
}

/// `twohot(bits, r, block)`: seed 002's two-hot weights `t1 * 2^r + t2`, each term a pot code
/// of `bits / 2` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TwoHotFormat {
    pub bits: u32,
    pub r: u32,
    pub block: Block,
    pub rounding: Rounding,
}

/// A quantization format (a `quant` literal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Float(FloatFormat),
    Bfp(BfpFormat),
    Mx(MxFormat),
    Hbfp(HbfpFormat),
    Int(IntFormat),
    Fixed(FixedFormat),
    DynFixed(DynFixedFormat),
    Pot(PotFormat),
    TwoHot(TwoHotFormat),
}

impl Format {
    pub const FP16: Format = Format::Float(FloatFormat::FP16);
    pub const BF16: Format = Format::Float(FloatFormat::BF16);
    pub const FP32: Format = Format::Float(FloatFormat::FP32);

    /// The float format, when this is one (MFU and storage formats must be floats).
    pub fn as_float(&self) -> Option<&FloatFormat> {
        match self {
            Format::Float(f) => Some(f),
            _ => None,
        }
    }

    /// Whether the format shares one scale (point position) over a whole tensor
    /// (`int`/`dynfixed` with `per = tensor`) rather than per run or block.
    pub fn per_tensor(&self) -> bool {
        matches!(
            self,
            Format::Int(IntFormat {
                per: Per::Tensor,
                ..
            }) | Format::DynFixed(DynFixedFormat {
                per: Per::Tensor,
                ..
            })
        )
    }

    /// The rounding mode of the format.
    pub fn rounding(&self) -> Rounding {
        let mut f = *self;
        *f.rounding_mut()
    }

    /// The same format with rounding mode `r`.
    pub fn with_rounding(&self, r: Rounding) -> Format {
        let mut f = *self;
        *f.rounding_mut() = r;
        f
    }

    /// Every format carries a rounding mode.
    fn rounding_mut(&mut self) -> &mut Rounding {
        match self {
            Format::Float(f) => &mut f.rounding,
            Format::Bfp(f) => &mut f.rounding,
            Format::Mx(f) => &mut f.rounding,
            Format::Hbfp(f) => &mut f.rounding,
            Format::Int(f) => &mut f.rounding,
            Format::Fixed(f) => &mut f.rounding,
            Format::DynFixed(f) => &mut f.rounding,
            Format::Pot(f) => &mut f.rounding,
            Format::TwoHot(f) => &mut f.rounding,
        }
    }
}

/// A malformed format literal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct FormatError {
    pub message: String,
    /// Byte range inside the literal the error points at.
    pub offset: usize,
    pub len: usize,
    pub help: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Presets and defaults.

/// The `mxN` presets: 16 elements, 8-bit shared exponent, 1-bit micro-exponent per pair.
pub fn mx_preset(mant: u32) -> HbfpFormat {
    HbfpFormat {
        mant,
        block: Block::Size(16),
        levels: 1,
        sub: 2,
        scale_cap: 1,
        scale_bits: 1,
        exp_bits: 8,
        flush: true,
        rounding: Rounding::NearestEven,
    }
}

const PRESETS: [(&str, u32); 3] = [("mx9", 8), ("mx6", 5), ("mx4", 3)];

const NAMES: &[&str] = &[
    "fp16",
    "bf16",
    "fp32",
    "fp",
    "bfp",
    "msfp",
    "mx",
    "mxfp8_e4m3",
    "mxfp8_e5m2",
    "mxfp6_e3m2",
    "mxfp6_e2m3",
    "mxfp4",
    "mxint8",
    "hbfp",
    "mx9",
    "mx6",
    "mx4",
    "int",
    "fixed",
    "dynfixed",
    "pot",
    "twohot",
];

/// Bits needed to store `v`.
pub(crate) fn bits_for(v: u32) -> u32 {
    32 - v.leading_zeros()
}
