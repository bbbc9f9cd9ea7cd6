//! The format catalogue of NUMERICS.md section 3.
//!
//! SKELETON: the numerics owner replaces this with the full catalogue. The names below are the
//! contract other crates compile against.

use crate::Rounding;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What happens to a finite value beyond the largest finite value of a float format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Overflow {
    /// Clamp to the largest finite value of the same sign.
    Saturate,
    /// Become infinity (IEEE behaviour).
    Infinity,
}

/// An IEEE-style binary float format `fp(exp_bits, mant_bits)`; `mant_bits` excludes the
/// hidden bit (fp16 = fp(5, 10)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FloatFormat {
    pub exp_bits: u32,
    pub mant_bits: u32,
    pub subnormals: bool,
    pub overflow: Overflow,
    pub rounding: Rounding,
}

impl FloatFormat {
    pub const FP16: FloatFormat = FloatFormat::ieee(5, 10);
    pub const BF16: FloatFormat = FloatFormat::ieee(8, 7);
    pub const FP32: FloatFormat = FloatFormat::ieee(8, 23);

    pub const fn ieee(exp_bits: u32, mant_bits: u32) -> Self {
        FloatFormat {
            exp_bits,
            mant_bits,
            subnormals: true,
            overflow: Overflow::Infinity,
            rounding: Rounding::NearestEven,
        }
    }

    /// Round `x` to this format with its rounding mode. NaN stays NaN.
    pub fn round(&self, x: f64) -> f64 {
        let _ = x;
        unimplemented!("numerics owner")
    }
}

/// A quantization format (a `quant` literal).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Format {
    Float(FloatFormat),
}

impl Format {
    pub const FP16: Format = Format::Float(FloatFormat::FP16);
    pub const FP32: Format = Format::Float(FloatFormat::FP32);

    /// Fake-quantize `x` into `out` (same length). `x` is one contiguous run along the blocking
    /// axis (for the MVM: one native tile of a vector, or one row of one N x N matrix tile);
    /// blocks are laid consecutively along it, `native` is the native dimension N (what
    /// `block = native` means).
    pub fn quantize(&self, x: &[f64], native: usize, out: &mut [f64]) {
        let _ = (x, native, out);
        unimplemented!("numerics owner")
    }

    /// The float format, when this is one (MFU and storage formats must be floats).
    pub fn as_float(&self) -> Option<&FloatFormat> {
        match self {
            Format::Float(f) => Some(f),
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

impl FromStr for Format {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "fp16" => Ok(Format::FP16),
            "fp32" => Ok(Format::FP32),
            _ => Err(FormatError {
                message: format!("unknown format `{s}`"),
                offset: 0,
                len: s.len(),
                help: None,
            }),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Float(ff) => write!(f, "fp({}, {})", ff.exp_bits, ff.mant_bits),
        }
    }
}
