//! Bit-exact number formats of the NNP (see `shared/NUMERICS.md`).
//!
//! The public contract other crates rely on:
//! - [`Format`]: every `quant` literal, parsed with `str::parse`, printed canonically with
//!   `Display`, serialisable with serde.
//! - [`Format::quantize`]: the scalar reference quantizer (fake-quant, f64 in and out) over one
//!   contiguous run of values (a tile row), blocks laid consecutively along it.
//! - [`FloatFormat::round`]: rounding of one value to an IEEE-style float format.
//! - [`Rounding`]: the rounding modes.

pub mod format;
pub mod rounding;

pub use format::{FloatFormat, Format, FormatError, Overflow};
pub use rounding::Rounding;
