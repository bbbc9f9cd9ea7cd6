//! Bit-exact number formats of the NNP (see `docs/numerics.md`).
//!
//! The public contract other crates rely on:
//! - [`Format`]: every `quant` literal, parsed with `str::parse`, printed canonically with
//!   `Display`, serialisable with serde (as its literal).
//! - [`Format::quantize`]: the scalar reference quantizer (fake-quant, f64 in and out) over one
//!   contiguous run of values (a tile row), blocks laid consecutively along it.
//! - [`FloatFormat::round`] / [`FloatFormat::round_exact`]: correct rounding of one value (or of
//!   a wide exact integer) to an IEEE-style float format; `encode` / `decode` to its bits.
//! - [`Rounding`]: the rounding modes.
//! - [`activation`]: correctly rounded sigmoid / tanh / exp and their 16-bit tables.
//! - [`rounding`] and [`sums`]: the exact-arithmetic building blocks (integer significands,
//!   round-to-odd, two-sum) and the two exact sums, one per engine, each the other's check.

pub mod activation;
pub mod block;
pub mod codes;
pub mod elementwise;
pub mod fixed;
pub mod float;
pub mod format;
pub mod kernel;
mod literal;
pub mod log;
pub mod pack;
mod quantize;
pub mod rounding;
pub mod stats;
pub mod sums;

pub use activation::Activation;
pub use codes::Codes;
pub use format::{
    BfpFormat, Block, DynFixedFormat, FixedFormat, FloatFormat, Format, FormatError, HbfpFormat,
    IntFormat, IntScale, MiniFloat, MiniOverflow, MxElem, MxFormat, Overflow, Per, PolicyKind,
    PotFormat, Specials, TwoHotFormat,
};
pub use rounding::{Rounding, decompose, floor_log2, pow2};
pub use stats::{ErrorAcc, ErrorStats, error_stats, qsnr};
