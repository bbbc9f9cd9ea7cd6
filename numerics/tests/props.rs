//! Property tests over the whole catalogue: quantize is idempotent, decode(encode(x)) equals
//! quantize(x) bit for bit, and encode/decode is the identity on representable values.

use nnp_numerics::{FloatFormat, Format};
use proptest::prelude::*;

/// Formats whose quantizer is not idempotent (docs/numerics.md): `range = full` BFP (a
/// mantissa rounding to `-2^(m-1)` raises the block exponent), `int(scale = f32)` (the f32
/// scale is recomputed from the rounded maximum), `dynfixed(policy = overflow(...))` (the
/// statistics change once outliers saturate), `hbfp` with two or more levels and more than
/// one magnitude bit (a rounding carry raises a sub-tile's maximum, seed 000's scales are
/// differences of maxima: a scale below a clipped one shrinks and coarsens the grid), and
/// `twohot` with `r >= 3` (a rounded block maximum can lower `base`, and the grid is not
/// closed under doubling). Only the encode/decode properties apply.
const NOT_IDEMPOTENT: &[&str] = &[
    "bfp(mant = 6, block = 8, range = full)",
    "int(bits = 8, scale = f32)",
    "int(bits = 6, scale = f32, per = row, round = away)",
    "dynfixed(bits = 8, policy = overflow(ppm = 50000))",
    "hbfp(mant = 4, levels = 2, scale_cap = 3, block = 16, sub = 2, flush = false)",
    "hbfp(mant = 4, levels = 2, scale_cap = 3, block = 16, sub = 2)",
    "hbfp(mant = 3, levels = 3, scale_cap = 1, block = 16, sub = 1, round = stochastic(seed = 2))",
    "twohot(bits = 16, r = 3, block = 8)",
    "twohot(bits = 14, r = 16, block = 4, round = away)",
];

/// Formats whose quantizer is idempotent.
const FORMATS: &[&str] = &[
    "fp16",
    "bf16",
    "fp32",
    "fp(5, 2)",
    "fp(4, 3, overflow = sat)",
    "fp(5, 3, subnormals = false)",
    "fp(5, 2, round = stochastic(seed = 3))",
    "bfp(mant = 8)",
    "bfp(mant = 4, block = 16, round = away)",
    "bfp(mant = 5, block = 8, exp_bits = 3, round = zero)",
    "bfp(mant = 3, block = 4, round = stochastic(seed = 11))",
    "msfp(mant = 4)",
    "mx(elem = fp8e4m3, block = 32)",
    "mx(elem = fp8e5m2, block = 8)",
    "mx(elem = fp6e3m2, block = 16)",
    "mx(elem = fp6e2m3, block = 16, round = zero)",
    "mx(elem = fp4e2m1, block = 4)",
    "mx(elem = int8, block = 32)",
    "mx(elem = int8, block = 4, round = zero)",
    "mx(elem = fp4e2m1, block = 8, round = stochastic(seed = 1))",
    "mx(elem = int8, block = 8, round = stochastic(seed = 4))",
    "mx9",
    "mx6",
    "mx4",
    "hbfp(mant = 2, levels = 2, scale_cap = 1, block = 4, sub = 1)",
    "hbfp(mant = 4, levels = 1, scale_cap = 3, block = 16, sub = 2, flush = false)",
    "int(bits = 8, scale = pow2)",
    "int(bits = 4, scale = pow2, round = zero)",
    "fixed(int = 3, frac = 4)",
    "fixed(int = 1, frac = 15)",
    "dynfixed(bits = 8, policy = max)",
    "pot(bits = 4, block = 8)",
    "pot(bits = 5)",
    "twohot(bits = 6, block = 8)",
    "twohot(bits = 8, r = 2, block = 16)",
    "pot(bits = 8, block = 8)",
    "pot(bits = 7, round = stochastic(seed = 6))",
    "twohot(bits = 16, block = 8)",
    "twohot(bits = 16, r = 1, block = 8, round = away)",
    "twohot(bits = 12, r = 1, block = 8, round = stochastic(seed = 8))",
];

/// fp16 values over the whole range (sign, exponent -24..=15, 10-bit mantissa), some zeros.
fn fp16_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => Just(0.0),
        12 => (any::<bool>(), -14i32..=15, 0u32..1024).prop_map(|(neg, e, m)| {
            let v = (1.0 + f64::from(m) / 1024.0) * 2f64.powi(e);
            if neg { -v } else { v }
        }),
        2 => (any::<bool>(), 1u32..1024).prop_map(|(neg, m)| {
            let v = f64::from(m) * 2f64.powi(-24);
            if neg { -v } else { v }
        }),
    ]
}

/// Values of similar magnitude (the common case inside a block).
fn clustered() -> impl Strategy<Value = Vec<f64>> {
    (
        -10i32..10,
        prop::collection::vec((any::<bool>(), 0u32..4096, 0i32..6), 1..70),
    )
        .prop_map(|(e, v)| {
            v.into_iter()
                .map(|(neg, m, d)| {
                    let x = FloatFormat::FP16.round(f64::from(m) / 4096.0 * 2f64.powi(e - d));
                    if neg { -x } else { x }
                })
                .collect()
        })
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

fn check(lit: &str, x: &[f64]) -> Result<(), TestCaseError> {
    let f: Format = lit.parse().unwrap();
    let native = 32;
    let mut q = vec![0.0; x.len()];
    f.quantize(x, native, &mut q);
    if !NOT_IDEMPOTENT.contains(&lit) {
        let mut qq = vec![0.0; x.len()];
        f.quantize(&q, native, &mut qq);
        for i in 0..x.len() {
            prop_assert!(
                same(q[i], qq[i]),
                "{lit}: not idempotent at {i}: x = {} -> {} -> {}",
                x[i],
                q[i],
                qq[i]
            );
        }
    }
    // Fixed point has no NaN code.
    if matches!(f, Format::Fixed(_)) && x.iter().any(|v| v.is_nan()) {
        return Ok(());
    }
    let p = match f.encode(x, native) {
        Ok(p) => p,
        // BFP with `range = full` has no spare code to mark a NaN block.
        Err(_) if lit.contains("range = full") && x.iter().any(|v| !v.is_finite()) => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(format!("{lit}: {e}"))),
    };
    let d = f.decode(&p, x.len(), native).unwrap();
    for i in 0..x.len() {
        prop_assert!(
            same(d[i], q[i]),
            "{lit}: decode(encode) at {i}: x = {} q = {} d = {}",
            x[i],
            q[i],
            d[i]
        );
    }
    // Identity on representable values: the code of q decodes to q.
    if NOT_IDEMPOTENT.contains(&lit) {
        return Ok(());
    }
    let p2 = f.encode(&q, native).unwrap();
    let d2 = f.decode(&p2, x.len(), native).unwrap();
    for i in 0..x.len() {
        prop_assert!(
            same(d2[i], q[i]),
            "{lit}: identity at {i}: q = {} d = {}",
            q[i],
            d2[i]
        );
    }
    // The stream has the advertised size for whole blocks.
    if x.len() == native {
        let bpe = f.bits_per_element(native, native);
        prop_assert_eq!(p.bits as f64, bpe * native as f64, "{}: size", lit);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn catalogue_wide(x in prop::collection::vec(fp16_value(), 1..70)) {
        for lit in FORMATS.iter().chain(NOT_IDEMPOTENT) {
            check(lit, &x)?;
        }
    }

    #[test]
    fn catalogue_clustered(x in clustered()) {
        for lit in FORMATS.iter().chain(NOT_IDEMPOTENT) {
            check(lit, &x)?;
        }
    }

    #[test]
    fn catalogue_full_runs(x in prop::collection::vec(fp16_value(), 32)) {
        for lit in FORMATS.iter().chain(NOT_IDEMPOTENT) {
            check(lit, &x)?;
        }
    }

    #[test]
    fn nonfinite_blocks(x in prop::collection::vec(fp16_value(), 8..40), at in 0usize..8, kind in 0u8..3) {
        let mut x = x;
        x[at] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][kind as usize];
        for lit in FORMATS.iter().chain(NOT_IDEMPOTENT) {
            check(lit, &x)?;
        }
    }
}
