//! Printing formats: canonical `Display` (parses back to the same value) and serde as literal.

use super::{
    Block, FloatFormat, Format, FormatError, IntScale, Overflow, PRESETS, Per, PolicyKind,
    bits_for, mx_preset,
};
use crate::Rounding;
use serde::{Deserialize, Serialize};
use std::fmt;

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
