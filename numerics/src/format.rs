//! The format catalogue of docs/numerics.md: the [`Format`] value of every `quant`
//! literal, its parser (`str::parse`), its canonical printing (`Display`, which parses back to
//! the same value) and the scalar reference quantizer [`Format::quantize`].
//!
//! Literal syntax (see `docs/numerics.md`): `name` or `name(args)`; arguments are positional
//! (in the documented order) and/or `key = value`, keywords after positionals.

use crate::literal::{self, Arg, Call, Value, err, nearest};
use crate::{block, fixed, log};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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

    /// Fake-quantize `x` into `out` (same length). `x` is one contiguous run along the blocking
    /// axis (for the MVM: one native tile of a vector, or one row of one N x N tile);
    /// blocks are laid consecutively along it, `native` is the native dimension N (what
    /// `block = native` means). A last partial block is quantized as a block of its own (the
    /// same as padding it with zeros). Block and scale groups holding a NaN or infinity become
    /// all NaN; float formats round elementwise.
    pub fn quantize(&self, x: &[f64], native: usize, out: &mut [f64]) {
        let n = x.len().min(out.len());
        let (x, out) = (&x[..n], &mut out[..n]);
        match self {
            Format::Float(f) => {
                for (i, (o, v)) in out.iter_mut().zip(x).enumerate() {
                    *o = f.round_at(*v, i as u64);
                }
            }
            Format::Bfp(b) => blocks(x, out, b.block.len(native), |x, o, base| {
                block::bfp_block(b, x, o, base)
            }),
            Format::Mx(m) => blocks(x, out, m.block.len(native), |x, o, base| {
                block::mx_block(m, x, o, base)
            }),
            Format::Hbfp(h) => blocks(x, out, h.block.len(native), |x, o, base| {
                block::hbfp_block(h, x, o, base)
            }),
            Format::Int(f) => guarded(x, out, |x, o| fixed::int_run(f, x, o)),
            Format::Fixed(f) => fixed::fixed_run(f, x, out),
            Format::DynFixed(f) => guarded(x, out, |x, o| fixed::dynfixed_run(f, x, o)),
            Format::Pot(p) => blocks(x, out, p.block.len(native), |x, o, base| {
                log::pot_block(p, x, o, base)
            }),
            Format::TwoHot(t) => blocks(x, out, t.block.len(native), |x, o, base| {
                log::twohot_block(t, x, o, base)
            }),
        }
    }

    /// Fake-quantize a whole tensor laid out as `data.len() / row_len` runs of `row_len`
    /// (the quantization axis innermost). Like [`quantize`](Self::quantize) on each run, except
    /// that `per = tensor` formats share one scale (point position) over the whole tensor.
    pub fn quantize_tensor(&self, data: &[f64], row_len: usize, native: usize, out: &mut [f64]) {
        let n = data.len().min(out.len());
        let (data, out) = (&data[..n], &mut out[..n]);
        let tensor_wide = matches!(
            self,
            Format::Int(IntFormat {
                per: Per::Tensor,
                ..
            }) | Format::DynFixed(DynFixedFormat {
                per: Per::Tensor,
                ..
            })
        );
        if tensor_wide || row_len == 0 {
            self.quantize(data, native, out);
            return;
        }
        for (x, o) in data.chunks(row_len).zip(out.chunks_mut(row_len)) {
            self.quantize(x, native, o);
        }
    }

    /// The float format, when this is one (MFU and storage formats must be floats).
    pub fn as_float(&self) -> Option<&FloatFormat> {
        match self {
            Format::Float(f) => Some(f),
            _ => None,
        }
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

    /// Storage cost in bits per element for runs of `run_len` elements (shared scales
    /// amortised over their block; per-tensor scales counted once per run).
    pub fn bits_per_element(&self, native: usize, run_len: usize) -> f64 {
        crate::pack::bits_per_element(self, native, run_len)
    }
}

/// Apply `f` to consecutive blocks of `len`; a block holding a non-finite value becomes NaN.
fn blocks(x: &[f64], out: &mut [f64], len: usize, f: impl Fn(&[f64], &mut [f64], u64)) {
    for (i, (xb, ob)) in x.chunks(len).zip(out.chunks_mut(len)).enumerate() {
        if xb.iter().any(|v| !v.is_finite()) {
            ob.fill(f64::NAN);
        } else {
            f(xb, ob, (i * len) as u64);
        }
    }
}

/// Apply `f` to the whole run unless it holds a non-finite value (then all NaN).
fn guarded(x: &[f64], out: &mut [f64], f: impl Fn(&[f64], &mut [f64])) {
    if x.iter().any(|v| !v.is_finite()) {
        out.fill(f64::NAN);
    } else {
        f(x, out);
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
    "fp16", "bf16", "fp32", "fp", "bfp", "msfp", "mx", "hbfp", "mx9", "mx6", "mx4", "int", "fixed",
    "dynfixed", "pot", "twohot",
];

/// Bits needed to store `v`.
pub(crate) fn bits_for(v: u32) -> u32 {
    32 - v.leading_zeros()
}

// ---------------------------------------------------------------------------------------------
// Parsing.

impl FromStr for Format {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let call = literal::parse(s)?;
        build(&call)
    }
}

/// Arguments of one call bound to a parameter list.
struct Bound<'a> {
    call: &'a Call,
    params: &'static [&'static str],
    vals: Vec<Option<&'a Arg>>,
}

impl<'a> Bound<'a> {
    fn new(call: &'a Call, params: &'static [&'static str]) -> Result<Self, FormatError> {
        let mut vals: Vec<Option<&Arg>> = vec![None; params.len()];
        let mut seen_key = false;
        for (i, arg) in call.args.iter().flatten().enumerate() {
            let idx = match &arg.key {
                Some((key, span)) => {
                    seen_key = true;
                    let Some(idx) = params.iter().position(|p| *p == key) else {
                        let help = match nearest(key, params) {
                            Some(s) => format!(
                                "did you mean `{s}`? `{}` takes: {}",
                                call.name,
                                params.join(", ")
                            ),
                            None => format!("`{}` takes: {}", call.name, params.join(", ")),
                        };
                        return Err(err(
                            format!("unknown keyword `{key}` for `{}`", call.name),
                            span,
                            Some(help),
                        ));
                    };
                    idx
                }
                None => {
                    if seen_key {
                        return Err(err(
                            "positional argument after a keyword argument",
                            &arg.value_span,
                            Some("write it as `key = value`".into()),
                        ));
                    }
                    if i >= params.len() {
                        return Err(err(
                            format!("`{}` takes at most {} arguments", call.name, params.len()),
                            &arg.value_span,
                            Some(format!("`{}` takes: {}", call.name, params.join(", "))),
                        ));
                    }
                    i
                }
            };
            if vals[idx].is_some() {
                return Err(err(
                    format!("`{}` is given twice", params[idx]),
                    arg.key.as_ref().map_or(&arg.value_span, |k| &k.1),
                    None,
                ));
            }
            vals[idx] = Some(arg);
        }
        Ok(Bound { call, params, vals })
    }

    fn arg(&self, name: &str) -> Option<&'a Arg> {
        self.params
            .iter()
            .position(|p| *p == name)
            .and_then(|i| self.vals[i])
    }

    fn required(&self, name: &str) -> Result<&'a Arg, FormatError> {
        self.arg(name).ok_or_else(|| {
            err(
                format!("`{}` needs `{name}`", self.call.name),
                &self.call.span,
                Some(format!("e.g. `{}`", example(&self.call.name))),
            )
        })
    }

    fn int(
        &self,
        name: &str,
        default: Option<u64>,
        min: u64,
        max: u64,
    ) -> Result<u64, FormatError> {
        let arg = match (self.arg(name), default) {
            (Some(a), _) => a,
            (None, Some(d)) => return Ok(d),
            (None, None) => self.required(name)?,
        };
        int_value(arg, name, min, max)
    }

    fn u32(
        &self,
        name: &str,
        default: Option<u32>,
        min: u32,
        max: u32,
    ) -> Result<u32, FormatError> {
        Ok(self.int(name, default.map(u64::from), u64::from(min), u64::from(max))? as u32)
    }

    fn ident(
        &self,
        name: &str,
        default: &'static str,
        choices: &[&'static str],
    ) -> Result<&'static str, FormatError> {
        let Some(arg) = self.arg(name) else {
            return Ok(default);
        };
        let found = match &arg.value {
            Value::Ident(s) => choices.iter().find(|c| **c == s.as_str()).copied(),
            _ => None,
        };
        found.ok_or_else(|| bad_choice(arg, name, choices))
    }

    fn rounding(&self) -> Result<Rounding, FormatError> {
        match self.arg("round") {
            None => Ok(Rounding::NearestEven),
            Some(a) => rounding_value(a),
        }
    }

    fn block(&self, default: Block) -> Result<Block, FormatError> {
        let Some(arg) = self.arg("block") else {
            return Ok(default);
        };
        match &arg.value {
            Value::Ident(s) if s == "native" => Ok(Block::Native),
            Value::Number(_) => Ok(Block::Size(int_value(arg, "block", 1, 1 << 20)? as usize)),
            _ => Err(err(
                "`block` is `native` or a number of elements",
                &arg.value_span,
                Some("e.g. `block = 32`".into()),
            )),
        }
    }

    fn per(&self) -> Result<Per, FormatError> {
        Ok(match self.ident("per", "tensor", &["tensor", "row"])? {
            "row" => Per::Row,
            _ => Per::Tensor,
        })
    }
}

fn bad_choice(arg: &Arg, name: &str, choices: &[&str]) -> FormatError {
    let shown = match &arg.value {
        Value::Ident(s) | Value::Number(s) => s.clone(),
        Value::Call(c) => c.name.clone(),
    };
    let help = match nearest(&shown, choices) {
        Some(s) => format!("did you mean `{s}`? choices: {}", choices.join(", ")),
        None => format!("choices: {}", choices.join(", ")),
    };
    err(
        format!("`{shown}` is not a valid `{name}`"),
        &arg.value_span,
        Some(help),
    )
}

fn int_value(arg: &Arg, name: &str, min: u64, max: u64) -> Result<u64, FormatError> {
    let v = match &arg.value {
        Value::Number(s) => s.parse::<u64>().ok(),
        _ => None,
    };
    match v {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(err(
            format!("`{name}` must be an integer in {min}..={max}"),
            &arg.value_span,
            None,
        )),
    }
}

fn rounding_value(arg: &Arg) -> Result<Rounding, FormatError> {
    const CHOICES: &[&str] = &["even", "away", "zero", "stochastic"];
    match &arg.value {
        Value::Ident(s) if s == "even" => Ok(Rounding::NearestEven),
        Value::Ident(s) if s == "away" => Ok(Rounding::NearestAway),
        Value::Ident(s) if s == "zero" => Ok(Rounding::TowardZero),
        Value::Ident(s) if s == "stochastic" => Err(err(
            "stochastic rounding needs an explicit seed",
            &arg.value_span,
            Some("write `round = stochastic(seed = 1)`".into()),
        )),
        Value::Call(c) if c.name == "stochastic" => {
            let b = Bound::new(c, &["seed"])?;
            Ok(Rounding::Stochastic {
                seed: b.int("seed", None, 0, u64::MAX)?,
            })
        }
        _ => Err(bad_choice(arg, "round", CHOICES)),
    }
}

fn no_args(call: &Call) -> Result<(), FormatError> {
    match &call.args {
        Some(_) => Err(err(
            format!("`{}` takes no arguments", call.name),
            &call.span,
            Some(format!("write `{}`", call.name)),
        )),
        None => Ok(()),
    }
}

fn example(name: &str) -> &'static str {
    match name {
        "fp" => "fp(5, 2)",
        "bfp" => "bfp(mant = 8)",
        "msfp" => "msfp(mant = 5)",
        "mx" => "mx(elem = fp8e4m3, block = 32)",
        "hbfp" => "hbfp(mant = 4, levels = 1, scale_cap = 1, block = 16)",
        "int" => "int(bits = 8, scale = f32, per = tensor)",
        "fixed" => "fixed(int = 3, frac = 4)",
        "dynfixed" => "dynfixed(bits = 8, policy = max)",
        "pot" => "pot(bits = 4)",
        "twohot" => "twohot(bits = 6)",
        _ => "bfp(mant = 8)",
    }
}

fn build(call: &Call) -> Result<Format, FormatError> {
    let name = call.name.as_str();
    match name {
        "fp16" => no_args(call).map(|_| Format::FP16),
        "bf16" => no_args(call).map(|_| Format::BF16),
        "fp32" => no_args(call).map(|_| Format::FP32),
        "mx9" | "mx6" | "mx4" => {
            no_args(call)?;
            let mant = PRESETS.iter().find(|p| p.0 == name).map_or(8, |p| p.1);
            Ok(Format::Hbfp(mx_preset(mant)))
        }
        "fp" => {
            let b = Bound::new(call, &["e", "m", "round", "overflow", "subnormals"])?;
            let e = b.u32("e", None, 2, 11)?;
            let m = b.u32("m", None, 1, 52)?;
            let overflow = match b.ident("overflow", "inf", &["inf", "sat"])? {
                "sat" => Overflow::Saturate,
                _ => Overflow::Infinity,
            };
            let subnormals = b.ident("subnormals", "true", &["true", "false"])? == "true";
            Ok(Format::Float(FloatFormat {
                exp_bits: e,
                mant_bits: m,
                subnormals,
                overflow,
                rounding: b.rounding()?,
            }))
        }
        "bfp" | "msfp" => {
            let b = if name == "bfp" {
                Bound::new(call, &["mant", "block", "exp_bits", "round", "range"])?
            } else {
                Bound::new(call, &["mant", "round"])?
            };
            let mant = b.u32("mant", None, 2, 32)?;
            let (block, exp_bits) = if name == "bfp" {
                (b.block(Block::Native)?, b.u32("exp_bits", Some(5), 1, 16)?)
            } else {
                (Block::Size(16), 8)
            };
            let full_range = b.ident("range", "sym", &["sym", "full"])? == "full";
            Ok(Format::Bfp(BfpFormat {
                mant,
                block,
                exp_bits,
                rounding: b.rounding()?,
                full_range,
            }))
        }
        "mx" => {
            let b = Bound::new(call, &["elem", "block", "round"])?;
            let arg = b.required("elem")?;
            let names: Vec<&'static str> = MxElem::ALL.iter().map(|e| e.name()).collect();
            let elem = match &arg.value {
                Value::Ident(s) => MxElem::ALL.iter().copied().find(|e| e.name() == s),
                _ => None,
            }
            .ok_or_else(|| bad_choice(arg, "elem", &names))?;
            Ok(Format::Mx(MxFormat {
                elem,
                block: b.block(Block::Size(32))?,
                rounding: b.rounding()?,
            }))
        }
        "hbfp" => {
            let b = Bound::new(
                call,
                &[
                    "mant",
                    "levels",
                    "scale_cap",
                    "block",
                    "sub",
                    "scale_bits",
                    "exp_bits",
                    "flush",
                    "round",
                ],
            )?;
            let mant = b.u32("mant", None, 2, 32)?;
            let levels = b.u32("levels", Some(1), 1, 16)?;
            let scale_cap = b.u32("scale_cap", Some(1), 0, 64)?;
            let block = b.block(Block::Size(16))?;
            let sub = b.int("sub", Some(2), 1, 1 << 16)? as usize;
            let need = bits_for(scale_cap);
            let scale_bits = b.u32("scale_bits", Some(need), need, 8)?;
            let exp_bits = b.u32("exp_bits", Some(8), 1, 16)?;
            let flush = b.ident("flush", "true", &["true", "false"])? == "true";
            let span = b.arg("block").map_or(&call.span, |a| &a.value_span);
            if let Block::Size(n) = block {
                let group = sub << (levels - 1);
                if n % group != 0 || n < 2 * group {
                    return Err(err(
                        format!(
                            "`block = {n}` must be a multiple of twice `sub * 2^(levels - 1)` = {group}"
                        ),
                        span,
                        Some("e.g. `block = 16, sub = 2, levels = 1`".into()),
                    ));
                }
            }
            Ok(Format::Hbfp(HbfpFormat {
                mant,
                block,
                levels,
                sub,
                scale_cap,
                scale_bits,
                exp_bits,
                flush,
                rounding: b.rounding()?,
            }))
        }
        "int" => {
            let b = Bound::new(call, &["bits", "scale", "per", "round"])?;
            let bits = b.u32("bits", None, 2, 32)?;
            let scale = match b.ident("scale", "f32", &["f32", "pow2"])? {
                "pow2" => IntScale::Pow2,
                _ => IntScale::F32,
            };
            Ok(Format::Int(IntFormat {
                bits,
                scale,
                per: b.per()?,
                rounding: b.rounding()?,
            }))
        }
        "fixed" => {
            let b = Bound::new(call, &["int", "frac", "round"])?;
            let int = b.u32("int", None, 1, 62)?;
            let frac = b.u32("frac", None, 0, 62)?;
            if int + frac > 63 {
                return Err(err(
                    "`fixed` is at most 63 bits (int + frac)",
                    &call.span,
                    None,
                ));
            }
            Ok(Format::Fixed(FixedFormat {
                int,
                frac,
                rounding: b.rounding()?,
            }))
        }
        "dynfixed" => {
            let b = Bound::new(call, &["bits", "policy", "per", "round"])?;
            let bits = b.u32("bits", None, 2, 32)?;
            let policy = match b.arg("policy") {
                None => PolicyKind::Max,
                Some(a) => match &a.value {
                    Value::Ident(s) if s == "max" => PolicyKind::Max,
                    Value::Call(c) if c.name == "overflow" => {
                        let pb = Bound::new(c, &["ppm"])?;
                        PolicyKind::Overflow {
                            ppm: pb.u32("ppm", None, 0, 1_000_000)?,
                        }
                    }
                    _ => return Err(bad_choice(a, "policy", &["max", "overflow(ppm = N)"])),
                },
            };
            Ok(Format::DynFixed(DynFixedFormat {
                bits,
                policy,
                per: b.per()?,
                rounding: b.rounding()?,
            }))
        }
        "pot" => {
            let b = Bound::new(call, &["bits", "block", "round"])?;
            Ok(Format::Pot(PotFormat {
                bits: b.u32("bits", None, 2, 8)?,
                block: b.block(Block::Native)?,
                rounding: b.rounding()?,
            }))
        }
        "twohot" => {
            let b = Bound::new(call, &["bits", "r", "block", "round"])?;
            let bits = b.u32("bits", None, 4, 16)?;
            if bits % 2 != 0 {
                let span = b.arg("bits").map_or(&call.span, |a| &a.value_span);
                return Err(err(
                    "`twohot` bits must be even (two equal halves, one per term)",
                    span,
                    Some("e.g. `twohot(bits = 6)`".into()),
                ));
            }
            Ok(Format::TwoHot(TwoHotFormat {
                bits,
                r: b.u32("r", Some(0), 0, 16)?,
                block: b.block(Block::Native)?,
                rounding: b.rounding()?,
            }))
        }
        _ => {
            let help = match nearest(name, NAMES) {
                Some(s) => format!("did you mean `{s}`? formats: {}", NAMES.join(", ")),
                None => format!("formats: {}", NAMES.join(", ")),
            };
            Err(err(
                format!("unknown format `{name}`"),
                &call.name_span,
                Some(help),
            ))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Printing.

impl fmt::Display for Rounding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rounding::NearestEven => write!(f, "even"),
            Rounding::NearestAway => write!(f, "away"),
            Rounding::TowardZero => write!(f, "zero"),
            Rounding::Stochastic { seed } => write!(f, "stochastic(seed = {seed})"),
        }
    }
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Block::Native => write!(f, "native"),
            Block::Size(n) => write!(f, "{n}"),
        }
    }
}

impl fmt::Display for Per {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Per::Tensor => "tensor",
            Per::Row => "row",
        })
    }
}

/// `, round = X` unless nearest-even.
fn round_suffix(r: Rounding) -> String {
    if r == Rounding::NearestEven {
        String::new()
    } else {
        format!(", round = {r}")
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Float(ff) => {
                for (name, c) in [
                    ("fp16", FloatFormat::FP16),
                    ("bf16", FloatFormat::BF16),
                    ("fp32", FloatFormat::FP32),
                ] {
                    if *ff == c {
                        return f.write_str(name);
                    }
                }
                write!(f, "fp({}, {}", ff.exp_bits, ff.mant_bits)?;
                f.write_str(&round_suffix(ff.rounding))?;
                if ff.overflow == Overflow::Saturate {
                    f.write_str(", overflow = sat")?;
                }
                if !ff.subnormals {
                    f.write_str(", subnormals = false")?;
                }
                f.write_str(")")
            }
            Format::Bfp(b) => {
                if b.block == Block::Size(16) && b.exp_bits == 8 && !b.full_range {
                    return write!(f, "msfp(mant = {}{})", b.mant, round_suffix(b.rounding));
                }
                write!(
                    f,
                    "bfp(mant = {}, block = {}, exp_bits = {}, round = {}",
                    b.mant, b.block, b.exp_bits, b.rounding
                )?;
                if b.full_range {
                    f.write_str(", range = full")?;
                }
                f.write_str(")")
            }
            Format::Mx(m) => write!(
                f,
                "mx(elem = {}, block = {}{})",
                m.elem.name(),
                m.block,
                round_suffix(m.rounding)
            ),
            Format::Hbfp(h) => {
                for (name, mant) in PRESETS {
                    if *h == mx_preset(mant) {
                        return f.write_str(name);
                    }
                }
                write!(
                    f,
                    "hbfp(mant = {}, levels = {}, scale_cap = {}, block = {}, sub = {}",
                    h.mant, h.levels, h.scale_cap, h.block, h.sub
                )?;
                if h.scale_bits != bits_for(h.scale_cap) {
                    write!(f, ", scale_bits = {}", h.scale_bits)?;
                }
                if h.exp_bits != 8 {
                    write!(f, ", exp_bits = {}", h.exp_bits)?;
                }
                if !h.flush {
                    f.write_str(", flush = false")?;
                }
                write!(f, "{})", round_suffix(h.rounding))
            }
            Format::Int(i) => write!(
                f,
                "int(bits = {}, scale = {}, per = {}{})",
                i.bits,
                match i.scale {
                    IntScale::Pow2 => "pow2",
                    IntScale::F32 => "f32",
                },
                i.per,
                round_suffix(i.rounding)
            ),
            Format::Fixed(x) => write!(
                f,
                "fixed(int = {}, frac = {}{})",
                x.int,
                x.frac,
                round_suffix(x.rounding)
            ),
            Format::DynFixed(d) => {
                let policy = match d.policy {
                    PolicyKind::Max => "max".to_string(),
                    PolicyKind::Overflow { ppm } => format!("overflow(ppm = {ppm})"),
                };
                write!(
                    f,
                    "dynfixed(bits = {}, policy = {policy}, per = {}{})",
                    d.bits,
                    d.per,
                    round_suffix(d.rounding)
                )
            }
            Format::Pot(p) => write!(
                f,
                "pot(bits = {}, block = {}{})",
                p.bits,
                p.block,
                round_suffix(p.rounding)
            ),
            Format::TwoHot(t) => write!(
                f,
                "twohot(bits = {}, r = {}, block = {}{})",
                t.bits,
                t.r,
                t.block,
                round_suffix(t.rounding)
            ),
        }
    }
}

// Serde: a format is its canonical literal (readable in TOML / JSON, round-trips exactly).
impl Serialize for Format {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(|e: FormatError| {
            serde::de::Error::custom(format!("invalid format `{text}`: {e}"))
        })
    }
}
