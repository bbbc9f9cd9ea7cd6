//! Parsing a format literal (`str::parse` for [`Format`]): arguments bound to parameters.
//!
//! Literal syntax (see `docs/literals.md`): `name` or `name(args)`; arguments are positional
//! (in the documented order) and/or `key = value`, keywords after positionals.

use super::names::{self, KEY_ALIASES};
use super::{
    BfpFormat, Block, DynFixedFormat, FixedFormat, FloatFormat, Format, FormatError, HbfpFormat,
    IntFormat, IntScale, MxElem, MxFormat, NAMES, Overflow, PRESETS, Per, PolicyKind, PotFormat,
    TwoHotFormat, bits_for, mx_preset,
};
use crate::Rounding;
use crate::literal::{self, Arg, Call, Value, err, nearest};
use std::str::FromStr;

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
                    // microxcaling's keywords name `mx`'s parameters too.
                    let alias = KEY_ALIASES.iter().find(|(a, _)| a == key);
                    let key = alias
                        .filter(|_| is_mx(&call.name))
                        .map_or(key.as_str(), |p| p.1);
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

/// Whether `name` is an OCP MX format (`mx` or an OCP name), whose parameters take
/// microxcaling's keywords too.
fn is_mx(name: &str) -> bool {
    name == "mx" || names::ocp_format(name).is_some()
}

/// An OCP MX format of element `elem` (given, or from `elem`'s argument) with `b`'s block,
/// rounding and scale width (E8M0 only: `scale_bits = 8`).
fn mx(b: &Bound, elem: Option<MxElem>) -> Result<Format, FormatError> {
    let elem = match elem {
        Some(e) => e,
        None => {
            let arg = b.required("elem")?;
            let names: Vec<&'static str> = MxElem::ALL.iter().map(|e| e.name()).collect();
            match &arg.value {
                Value::Ident(s) => names::elem(s),
                _ => None,
            }
            .ok_or_else(|| bad_choice(arg, "elem", &names))?
        }
    };
    b.u32("scale_bits", Some(8), 8, 8)?;
    Ok(Format::Mx(MxFormat {
        elem,
        block: b.block(Block::Size(32))?,
        rounding: b.rounding()?,
    }))
}

fn build(call: &Call) -> Result<Format, FormatError> {
    let name = call.name.as_str();
    if let Some(elem) = names::ocp_format(name) {
        let b = Bound::new(call, &["block", "round", "scale_bits"])?;
        return mx(&b, Some(elem));
    }
    match name {
        "fp16" => no_args(call).map(|_| Format::FP16),
        "bf16" => no_args(call).map(|_| Format::BF16),
        "fp32" => no_args(call).map(|_| Format::FP32),
        "mx9" | "mx6" | "mx4" => {
            no_args(call)?;
            let mant = PRESETS.iter().find(|p| p.0 == name).map_or(8, |p| p.1);
            Ok(Format::Hbfp(mx_preset(mant)))
        }
        "fp" => float_format(call),
        "bfp" | "msfp" => bfp_format(call, name),
        "mx" => mx(
            &Bound::new(call, &["elem", "block", "round", "scale_bits"])?,
            None,
        ),
        "hbfp" => hbfp_format(call),
        "int" => int_format(call),
        "fixed" => fixed_format(call),
        "dynfixed" => dynfixed_format(call),
        "pot" => pot_format(call),
        "twohot" => twohot_format(call),
        _ => Err(unknown_format(call, name)),
    }
}

/// `fp(e = .., m = ..)`: an IEEE-style float format.
fn float_format(call: &Call) -> Result<Format, FormatError> {
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

/// `bfp(..)`, or `msfp(..)` (Microsoft floating point: blocks of 16, 8-bit exponents).
fn bfp_format(call: &Call, name: &str) -> Result<Format, FormatError> {
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

/// `hbfp(..)`: hierarchical block floating point.
fn hbfp_format(call: &Call) -> Result<Format, FormatError> {
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

/// `int(bits = ..)`: scaled integers.
fn int_format(call: &Call) -> Result<Format, FormatError> {
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

/// `fixed(int = .., frac = ..)`: fixed point.
fn fixed_format(call: &Call) -> Result<Format, FormatError> {
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

/// `dynfixed(bits = ..)`: fixed point with a dynamic binary point.
fn dynfixed_format(call: &Call) -> Result<Format, FormatError> {
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

/// `pot(bits = ..)`: powers of two.
fn pot_format(call: &Call) -> Result<Format, FormatError> {
    let b = Bound::new(call, &["bits", "block", "round"])?;
    Ok(Format::Pot(PotFormat {
        bits: b.u32("bits", None, 2, 8)?,
        block: b.block(Block::Native)?,
        rounding: b.rounding()?,
    }))
}

/// `twohot(bits = ..)`: sums of two powers of two.
fn twohot_format(call: &Call) -> Result<Format, FormatError> {
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

/// The error of the unknown format `name`, with the nearest name.
fn unknown_format(call: &Call, name: &str) -> FormatError {
    let help = match (names::mx_help(name), nearest(name, NAMES)) {
        (Some(mx), _) => mx,
        (None, Some(s)) => format!("did you mean `{s}`? formats: {}", NAMES.join(", ")),
        (None, None) => format!("formats: {}", NAMES.join(", ")),
    };
    err(
        format!("unknown format `{name}`"),
        &call.name_span,
        Some(help),
    )
}
