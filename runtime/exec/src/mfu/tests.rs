//! Tests of `exec::mfu`.
use super::*;

const FP16: FloatFormat = FloatFormat::FP16;

fn bin(op: BinOp, a: f64, b: f64) -> f64 {
    let mut o = [0.0];
    binary(op, &FP16, &[a], &[b], &mut o, [false, false]);
    o[0]
}

/// On operands that are fp16 values already, skipping their rounding (`rounded`) gives
/// the contract's `fp16(op(a, b))` (`nnp_numerics`' rounding) for every op, on specials
/// (signed zeros, subnormals, the largest value, infinities, NaNs) and random pairs, on
/// both sides of the parallel threshold.
#[test]
fn binary_skips_the_rounding_of_rounded_operands() {
    let mut vals: Vec<f64> = vec![
        0.0,
        -0.0,
        2f64.powi(-24),
        -2f64.powi(-24),
        6.1e-5,
        65504.0,
        -65504.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -f64::NAN,
        1.0,
        2048.0,
    ];
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    while vals.len() < 40_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        vals.push(half::f16::from_bits(s as u16).to_f64());
    }
    let (a, b): (Vec<f64>, Vec<f64>) = vals
        .iter()
        .zip(vals.iter().rev())
        .map(|(x, y)| (*x, *y))
        .unzip();
    for op in [BinOp::Add, BinOp::Sub, BinOp::Mul] {
        let f = |x: f64, y: f64| match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            _ => x * y,
        };
        for rounded in [[false, false], [true, false], [false, true], [true, true]] {
            for len in [a.len(), 1000] {
                let mut out = vec![0.0; len];
                binary(op, &FP16, &a[..len], &b[..len], &mut out, rounded);
                for ((x, y), o) in a.iter().zip(&b).zip(&out) {
                    let want = FP16.round(f(*x, *y));
                    assert_eq!(
                        nan_bits(*o),
                        nan_bits(want),
                        "{op:?} {x:e} {y:e} {rounded:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn binary_ops_round_once() {
    // 2048 + 1 = 2049 is a tie between 2048 and 2050 in fp16 (spacing 2): even -> 2048.
    assert_eq!(bin(BinOp::Add, 2048.0, 1.0), 2048.0);
    // 2050 + 1 = 2051 ties to 2052 (even mantissa).
    assert_eq!(bin(BinOp::Add, 2050.0, 1.0), 2052.0);
    // Inputs are rounded first: 1 + 2^-12 becomes 1.
    assert_eq!(bin(BinOp::Sub, 1.0 + 2f64.powi(-12), 1.0).to_bits(), 0);
    // (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 -> 1 + 2^-9.
    let a = 1.0 + 2f64.powi(-10);
    assert_eq!(bin(BinOp::Mul, a, a), 1.0 + 2f64.powi(-9));
    // Overflow: 256 * 256 = 65536 -> inf.
    assert_eq!(bin(BinOp::Mul, 256.0, 256.0), f64::INFINITY);
    // x - x = +0; -0 + -0 = -0.
    assert_eq!(bin(BinOp::Sub, 3.0, 3.0).to_bits(), 0);
    assert_eq!(bin(BinOp::Add, -0.0, -0.0).to_bits(), (-0.0f64).to_bits());
}

#[test]
fn fp16_bits_match_half() {
    // Every fp16 value (all 65,536 patterns but NaNs) back to its own bits.
    for bits in 0..=u16::MAX {
        let v = half::f16::from_bits(bits);
        if v.is_nan() {
            continue;
        }
        assert_eq!(fp16_bits(v.to_f64()), bits, "pattern {bits:#06x}");
    }
    // Any NaN, whatever its sign and payload, indexes the canonical quiet NaN 0x7E00
    // (docs/emulator.md), as the emulator's `encode` does.
    for nan in [f64::NAN, -f64::NAN, f64::from_bits(0xFFF8_0000_0000_1234)] {
        assert_eq!(bits16(&FloatFormat::FP16, nan), 0x7E00);
        assert_eq!(
            bits16(&FloatFormat::BF16, nan),
            FloatFormat::BF16.encode(nan) as u16
        );
    }
}

/// Toward-zero roundings of sums that f64 cannot hold, by hand: `1 - 2^-100` truncates to
/// fp32's value below 1, `1 - 2^-24` (f64 rounds the sum to 1.0, which truncates to 1);
/// `-0.5 + 2^-115` to bf16's `-(0.5 - 2^-9)`; in an f64-wide format, `1 - 2^-53`. The
/// nearest modes keep the f64 shortcut: `1 + 2^-100` and `1 - 2^-100` are 1.
#[test]
fn directed_roundings_of_far_apart_sums_by_hand() {
    let with = |fmt: FloatFormat, rounding| FloatFormat { rounding, ..fmt };
    let tiny = 2f64.powi(-100);
    let cases = [
        (
            with(FloatFormat::FP32, Rounding::TowardZero),
            1.0,
            -tiny,
            1.0 - 2f64.powi(-24),
        ),
        (
            with(FloatFormat::BF16, Rounding::TowardZero),
            -0.5,
            2f64.powi(-115),
            -(0.5 - 2f64.powi(-9)),
        ),
        (
            with(FloatFormat::FP32, Rounding::NearestAway),
            1.0,
            tiny,
            1.0,
        ),
        (
            with(FloatFormat::FP32, Rounding::NearestEven),
            1.0,
            -tiny,
            1.0,
        ),
        // As wide as f64 (the error-free path): 1 - 2^-53.
        (
            with(FloatFormat::ieee(11, 52), Rounding::TowardZero),
            1.0,
            -tiny,
            1.0 - 2f64.powi(-53),
        ),
    ];
    for (fmt, a, b, want) in cases {
        let mut out = [0.0];
        binary(BinOp::Add, &fmt, &[a], &[b], &mut out, [false, false]);
        assert_eq!(out[0].to_bits(), want.to_bits(), "{fmt:?}: {a:e} + {b:e}");
    }
}

#[test]
fn max_rules() {
    assert!(bin(BinOp::Max, f64::NAN, 1.0).is_nan());
    assert!(bin(BinOp::Max, 1.0, f64::NAN).is_nan());
    assert_eq!(bin(BinOp::Max, -0.0, 0.0).to_bits(), 0);
    assert_eq!(bin(BinOp::Max, 0.0, -0.0).to_bits(), 0);
    assert_eq!(bin(BinOp::Max, -0.0, -0.0).to_bits(), (-0.0f64).to_bits());
    assert_eq!(bin(BinOp::Max, -3.0, -2.0), -2.0);
}

/// Every fp16 pattern (the first 2^16 values, in order), each finite one times
/// `1 + 2^k` for every `k` of `between` (ties and the points beside them), then `extra`,
/// then a negative NaN and one with a payload.
fn fp16_inputs(between: &[i32], extra: &[f64]) -> Vec<f64> {
    let mut x: Vec<f64> = (0..=u16::MAX)
        .map(|b| half::f16::from_bits(b).to_f64())
        .collect();
    let finite: Vec<f64> = x.iter().copied().filter(|v| v.is_finite()).collect();
    for &k in between {
        x.extend(finite.iter().map(|v| v * (1.0 + 2f64.powi(k))));
    }
    x.extend(extra);
    x.extend([-f64::NAN, f64::from_bits(0x7FF0_0000_0000_0F00)]);
    x
}

#[test]
fn relu_rules() {
    let mut o = [9.0; 5];
    relu(&FP16, &[-0.0, -1.0, 2.5, f64::NAN, 1e-9], &mut o);
    assert_eq!(o[0].to_bits(), 0);
    assert_eq!(o[1].to_bits(), 0);
    assert_eq!(o[2], 2.5);
    assert!(o[3].is_nan());
    // 1e-9 rounds to fp16 +0 first (below half of 2^-24), so relu gives +0.
    assert_eq!(o[4].to_bits(), 0);
}

/// `relu` and `pass` round first, as `nnp_numerics` rounds (the contract: `fmt(x)`, then
/// the select), on every fp16 pattern, the points between them (ties and their
/// neighbours), beyond the range, subnormals and signed NaNs; above and below the parallel
/// threshold; in formats that take the fast rounder (fp16, bf16, a saturating one) and one
/// that does not (toward zero).
#[test]
fn relu_and_pass_round_as_the_format_does() {
    let x = fp16_inputs(
        &[-11, -12, -8],
        &[
            65520.0,
            -65520.0,
            1e300,
            -1e300,
            2f64.powi(-25),
            -2f64.powi(-25),
        ],
    );
    let saturating = FloatFormat {
        overflow: nnp_numerics::Overflow::Saturate,
        ..FP16
    };
    let toward_zero = FloatFormat {
        rounding: nnp_numerics::Rounding::TowardZero,
        ..FP16
    };
    for fmt in [FP16, FloatFormat::BF16, saturating, toward_zero] {
        for len in [x.len(), 1000] {
            let mut out = vec![9.0; len];
            relu(&fmt, &x[..len], &mut out);
            for (v, o) in x[..len].iter().zip(&out) {
                let r = fmt.round(*v);
                let want = if r > 0.0 || r.is_nan() { r } else { 0.0 };
                assert_eq!(nan_bits(*o), nan_bits(want), "relu({v:e}) in {fmt:?}");
            }
            pass(&fmt, &x[..len], &mut out);
            for (v, o) in x[..len].iter().zip(&out) {
                assert_eq!(
                    nan_bits(*o),
                    nan_bits(fmt.round(*v)),
                    "pass({v:e}) in {fmt:?}"
                );
            }
        }
    }
}

#[test]
fn tables_by_hand() {
    let sigm = ActTable::load(Activation::Sigmoid, &FP16, None).expect("built-in");
    let exp = ActTable::load(Activation::Exp, &FP16, None).expect("built-in");
    assert_eq!(sigm.apply(0.0), 0.5);
    assert_eq!(exp.apply(0.0), 1.0);
    // exp(12) = 162754.8 > 65504: inf. exp(-20) = 2.06e-9 < 2^-25: 0.
    assert_eq!(exp.apply(12.0), f64::INFINITY);
    assert_eq!(exp.apply(-20.0), 0.0);
    assert!(exp.apply(f64::NAN).is_nan());
}

/// The slice path (`activate`: fast rounder, f32 table, fp16 bits from the f64 bits) on
/// every fp16 pattern, on values between patterns (they round first: ties, the subnormal
/// range, overflow), and on NaNs with a sign and a payload, against the function in f64
/// rounded by `nnp_numerics` (the contract: `fmt(f(fmt(x)))`), for sigm, tanh and exp, on
/// both sides of the parallel threshold.
#[test]
fn activate_matches_the_rounded_function_on_every_fp16_input() {
    let x = fp16_inputs(
        &[-11],
        &[
            65520.0,
            -65520.0,
            2f64.powi(-25),
            3.0 * 2f64.powi(-26),
            1e300,
        ],
    );
    for f in Activation::ALL {
        let t = ActTable::load(f, &FP16, None).expect("built-in");
        let kind = f;
        for len in [x.len(), 1000] {
            let mut out = vec![0.0; len];
            activate(&t, &x[..len], &mut out, false);
            for (v, o) in x[..len].iter().zip(&out) {
                let want = FP16.round(activation::eval(kind, FP16.round(*v)));
                assert_eq!(nan_bits(*o), nan_bits(want), "{f:?}({v:e})");
            }
            // The first 2^16 inputs are the fp16 values: their rounding may be skipped.
            let n = len.min(1 << 16);
            activate(&t, &x[..n], &mut out[..n], true);
            for (v, o) in x[..n].iter().zip(&out) {
                let want = FP16.round(activation::eval(kind, *v));
                assert_eq!(nan_bits(*o), nan_bits(want), "{f:?}({v:e}), rounded");
            }
        }
    }
}

/// `softmax` against the contract computed here from `nnp_numerics` alone: the rounded
/// inputs' NaN-propagating max, exp(fmt(x - m)) rounded to fp16, the exact sum as an
/// integer count of fp16's quantum 2^-24 rounded once to f32, and the f32 division rounded
/// to fp16. Rows of 3, 128 and 1000 lanes: random fp16 values over the whole range, pads of
/// -65504, equal lanes, overflowing inputs, NaN and infinite lanes, values between fp16
/// patterns; rows above and below the parallel threshold.
#[test]
fn softmax_equals_the_contract_on_adversarial_rows() {
    let exp = ActTable::load(Activation::Exp, &FP16, None).expect("built-in");
    let kind = Activation::Exp;
    let mut s = 0x51f1_5e7a_u64;
    let mut next = || crate::intdot::tests::xorshift(&mut s);
    for lanes in [3usize, 128, 1000] {
        let rows = (40_000 / lanes).max(8);
        let mut x = Vec::with_capacity(rows * lanes);
        for row in 0..rows {
            for _ in 0..lanes {
                let v = match (row % 8, next() % 8) {
                    (0, _) => 0.0,
                    (1, k) if k < 4 => -65504.0,
                    (2, 0) => f64::NAN,
                    (3, 0) => f64::INFINITY,
                    (4, 0) => f64::NEG_INFINITY,
                    (5, _) => 1e6,
                    (6, _) => (next() % 64) as f64 * 0.125 * (1.0 + 2f64.powi(-12)),
                    _ => half::f16::from_bits(
                        (next() % 0x7C00) as u16 | (0x8000 * (next() % 2) as u16),
                    )
                    .to_f64(),
                };
                x.push(v);
            }
        }
        let mut out = vec![9.0; x.len()];
        softmax(&exp, &x, lanes, &mut out);
        for (xs, os) in x.chunks(lanes).zip(out.chunks(lanes)) {
            let xr: Vec<f64> = xs.iter().map(|v| FP16.round(*v)).collect();
            let m = xr.iter().fold(f64::NEG_INFINITY, |m, &v| max(m, v));
            let e: Vec<f64> = xr
                .iter()
                .map(|v| FP16.round(activation::eval(kind, FP16.round(v - m))))
                .collect();
            let sum = if e.iter().any(|v| v.is_nan()) {
                f64::NAN
            } else if e.iter().any(|v| v.is_infinite()) {
                f64::INFINITY
            } else {
                let quanta: i128 = e.iter().map(|v| (v * 2f64.powi(24)) as i128).sum();
                FloatFormat::FP32.round(quanta as f64 * 2f64.powi(-24))
            } as f32;
            for ((o, e), v) in os.iter().zip(&e).zip(xs) {
                let want = FP16.round(f64::from(*e as f32 / sum));
                assert_eq!(
                    nan_bits(*o),
                    nan_bits(want),
                    "lane {v:e} of a row of {lanes}"
                );
            }
        }
    }
    // The plain sum's bound by hand: fp16's values span 2^-24 to 2^16, 40 bits; 2^13
    // lanes add 13 (53); bf16's span is far wider.
    assert!(plain_sum_is_exact(&FP16, 1 << 13));
    assert!(!plain_sum_is_exact(&FP16, (1 << 13) + 1));
    assert!(!plain_sum_is_exact(&FloatFormat::BF16, 2));
}

#[test]
fn softmax_by_hand() {
    let exp = ActTable::load(Activation::Exp, &FP16, None).expect("built-in");
    // Two equal lanes: each e = 1, s = 2, y = 0.5. A pad lane of -65504 gives
    // exp(-inf...) = exp(fp16(-65504 - 0)) = 0 and does not change the others.
    let mut o = [0.0; 3];
    softmax(&exp, &[0.0, 0.0, -65504.0], 3, &mut o);
    assert_eq!(o, [0.5, 0.5, 0.0]);
    // A zero pad lane takes its share: three lanes of 0 -> 1/3 each, fp16(f32(1/3)).
    let mut o = [0.0; 3];
    softmax(&exp, &[0.0, 0.0, 0.0], 3, &mut o);
    let third = FP16.round(f64::from(1.0f32 / 3.0f32));
    assert_eq!(o, [third; 3]);
    // A NaN lane makes the row NaN.
    let mut o = [0.0; 2];
    softmax(&exp, &[f64::NAN, 1.0], 2, &mut o);
    assert!(o.iter().all(|v| v.is_nan()));
}
