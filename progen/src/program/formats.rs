//! The format literals the generator draws: MVM inputs, MVM outputs, MFU inputs, storage,
//! and their rounding modes.

use crate::Rng;
use std::fmt::Write as _;

const MX_ELEMS: &[&str] = &[
    "fp8e4m3", "fp8e5m2", "fp6e3m2", "fp6e2m3", "fp4e2m1", "int8",
];

/// `, round = ...` (nearest-even by default, so often nothing).
fn round_arg(r: &mut Rng) -> String {
    match r.below(8) {
        0 => ", round = away".into(),
        1 => ", round = zero".into(),
        2 => ", round = even".into(),
        3 => format!(", round = stochastic(seed = {})", r.below(1000)),
        _ => String::new(),
    }
}

/// Block sizes: divisors of N, sometimes more than a tile.
fn block_size(r: &mut Rng, n: usize) -> usize {
    let mut blocks: Vec<usize> = (2..=n).filter(|&b| n.is_multiple_of(b)).collect();
    if blocks.is_empty() || r.chance(0.1) {
        blocks = vec![32];
    }
    *r.pick(&blocks)
}

/// A random MVM-input format. With `all`, the whole catalogue of docs/numerics.md;
/// otherwise BFP, MSFP, MX, reduced floats, bf16 and fp16.
pub(super) fn mvm_format(r: &mut Rng, n: usize, all: bool) -> String {
    let pick = r.below(if all { 22 } else { 16 });
    match pick {
        0..=6 => {
            let mut s = format!("bfp(mant = {}", r.range(2, 8));
            if r.chance(0.3) {
                let _ = write!(s, ", exp_bits = {}", r.pick(&[3, 4, 5, 6, 8]));
            }
            s.push_str(&round_arg(r));
            if r.chance(0.2) {
                let _ = write!(s, ", block = {}", block_size(r, n));
            }
            if r.chance(0.1) {
                s.push_str(", range = full");
            }
            s.push(')');
            s
        }
        7 => format!("msfp(mant = {}{})", r.pick(&[4, 5, 8]), round_arg(r)),
        8..=10 => format!(
            "mx(elem = {}, block = {}{})",
            r.pick(MX_ELEMS),
            block_size(r, n),
            round_arg(r)
        ),
        11 | 12 => {
            let (e, m) = *r.pick(&[(5, 2), (4, 3), (5, 3), (3, 2), (6, 5)]);
            let mut s = format!("fp({e}, {m}");
            if r.chance(0.2) {
                s.push_str(", overflow = sat");
            }
            if r.chance(0.2) {
                s.push_str(", subnormals = false");
            }
            s.push_str(&round_arg(r));
            s.push(')');
            s
        }
        13 => "bf16".into(),
        14 | 15 => "fp16".into(),
        16 => r
            .pick(&[
                "mx9",
                "mx6",
                "mx4",
                "hbfp(mant = 4, levels = 1, scale_cap = 1, block = 16)",
            ])
            .to_string(),
        17 => format!(
            "int(bits = {}, scale = {}, per = {}{})",
            r.range(3, 8),
            r.pick(&["f32", "pow2"]),
            r.pick(&["tensor", "row"]),
            round_arg(r)
        ),
        18 => format!(
            "fixed(int = {}, frac = {}{})",
            r.range(2, 6),
            r.range(2, 10),
            round_arg(r)
        ),
        19 => format!(
            "dynfixed(bits = {}, policy = {})",
            r.range(4, 8),
            r.pick(&["max", "overflow(ppm = 10000)"])
        ),
        20 => format!("pot(bits = {})", r.range(3, 6)),
        _ => format!("twohot(bits = {})", r.pick(&[4, 6, 8])),
    }
}

/// Float MVM input pairs (vector, matrix) whose products are exact in f64 with no bit to
/// spare (52 or 53 significand bits between them), or are not (wider, or exponents too wide):
/// the float path's bounded and sliced products at their edges.
pub(super) const WIDE_MVM: [(&str, &str); 5] = [
    ("fp(8, 25)", "fp(8, 25)"),
    ("fp32", "fp(8, 28)"),
    ("fp(6, 26)", "fp(6, 25)"),
    ("fp(11, 26)", "fp(11, 25)"),
    ("fp(8, 30)", "fp(8, 30)"),
];

/// `lit` (a float literal) with the rounding mode `round` (a [`round_arg`]), written as
/// `fp(e, m, ...)`.
pub(super) fn float_rounded(lit: &str, round: &str) -> String {
    if round.is_empty() || lit.contains("round") {
        return lit.to_string();
    }
    let long = match lit {
        "fp16" => "fp(5, 10)",
        "bf16" => "fp(8, 7)",
        "fp32" => "fp(8, 23)",
        other => other,
    };
    match long.strip_suffix(')') {
        Some(head) => format!("{head}{round})"),
        None => long.to_string(),
    }
}

/// A float rounding mode for a float format now and then (nearest-even, the default, mostly),
/// from its own stream `rr`, so that the rest of a seed's program is what it was before the
/// knob: directed and stochastic roundings of MFU results, MVM outputs and storage.
pub(super) fn float_round(rr: &mut Rng) -> String {
    if rr.chance(0.3) {
        round_arg(rr)
    } else {
        String::new()
    }
}

/// The storage format, from its own stream: fp16 mostly; bf16, fp32 (wide ranges reach the
/// MFUs) and fp16 rounded otherwise now and then.
pub(super) fn storage_format(rr: &mut Rng) -> String {
    if rr.chance(0.7) {
        return "fp16".into();
    }
    let lit = *rr.pick(&["fp16", "bf16", "fp32", "fp32"]);
    let round = round_arg(rr);
    float_rounded(lit, &round)
}

/// A random float format for `mvm.output`.
pub(super) fn output_format(r: &mut Rng, rr: &mut Rng) -> String {
    let lit = r.pick(&[
        "fp16",
        "fp16",
        "fp16",
        "bf16",
        "fp32",
        "fp(5, 3)",
        "fp(5, 10, overflow = sat)",
        "fp(5, 10, round = zero)",
        "fp(8, 10)",
    ]);
    float_rounded(lit, &float_round(rr))
}

/// A random float format for `mfu.input`.
pub(super) fn mfu_format(r: &mut Rng, rr: &mut Rng, wide: bool) -> String {
    let lit = if wide && r.chance(0.25) {
        r.pick(&[
            "fp32",
            "fp(5, 3)",
            "fp(4, 3)",
            "fp(5, 10, overflow = sat)",
            "fp(8, 10)",
        ])
    } else {
        r.pick(&["fp16", "fp16", "fp16", "bf16"])
    };
    // Now and then (from `rr`, so the program stays the same) a format as wide as f64 or
    // nearly: MFU results that f64 arithmetic cannot round alone.
    let lit = match (wide, rr.below(20)) {
        (true, 0) => "fp(11, 52)",
        (true, 1) => "fp(10, 45)",
        _ => lit,
    };
    float_rounded(lit, &float_round(rr))
}
