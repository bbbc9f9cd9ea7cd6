//! The two exact sums check each other: `IntegerSum` (wide integers, the emulator's) and
//! `Expansion` (two-sum expansions, the software graph's) must round every sum of the same
//! terms to the same bits, in every format and rounding, on adversarial terms: far-apart
//! exponents, cancellation to zero and to tiny remainders, ties, subnormals, overflow, NaN and
//! infinities. Hand-computed sums check that they agree with the value, not only each other.

use nnp_numerics::rounding::decompose_odd;
use nnp_numerics::sums::{Expansion, IntegerSum};
use nnp_numerics::{FloatFormat, Rounding};
use proptest::prelude::*;

fn formats() -> Vec<FloatFormat> {
    let with = |f: FloatFormat, rounding| FloatFormat { rounding, ..f };
    let mut out = Vec::new();
    for f in [
        FloatFormat::FP16,
        FloatFormat::BF16,
        FloatFormat::FP32,
        FloatFormat::FP64,
        FloatFormat::ieee(5, 2),
        FloatFormat::ieee(4, 3),
    ] {
        for r in [
            Rounding::NearestEven,
            Rounding::NearestAway,
            Rounding::TowardZero,
            Rounding::Stochastic { seed: 7 },
        ] {
            out.push(with(f, r));
        }
    }
    out
}

/// Both sums of `terms`, rounded to every format: bit-equal, or both NaN.
fn agree(terms: &[f64]) -> Result<(), String> {
    let (mut int, mut exp) = (IntegerSum::new(), Expansion::new());
    for &t in terms {
        int.add_f64(t);
        exp.add(t);
    }
    for f in formats() {
        let (a, b) = (int.round(&f), exp.round_to(&f));
        if a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()) {
            return Err(format!(
                "{terms:?} in {f:?}: integer {a:e}, expansion {b:e}"
            ));
        }
    }
    Ok(())
}

/// Products through both: `IntegerSum` from the factors' odd significands, `Expansion` by
/// two-products (exact where a product does not underflow, which the factors' range keeps).
fn agree_products(pairs: &[(f64, f64)]) -> Result<(), String> {
    let (mut int, mut exp) = (IntegerSum::new(), Expansion::new());
    for &(a, b) in pairs {
        exp.add_product(a, b);
        if a == 0.0 || b == 0.0 {
            continue;
        }
        let ((ma, ea), (mb, eb)) = (decompose_odd(a), decompose_odd(b));
        let m = i128::from(ma) * i128::from(mb);
        int.add(if (a < 0.0) != (b < 0.0) { -m } else { m }, ea + eb);
    }
    for f in formats() {
        let (a, b) = (int.round(&f), exp.round_to(&f));
        if a.to_bits() != b.to_bits() {
            return Err(format!(
                "{pairs:?} in {f:?}: integer {a:e}, expansion {b:e}"
            ));
        }
    }
    Ok(())
}

#[test]
fn hand_computed_sums() {
    let p = |e: i32| 2f64.powi(e);
    // (terms, format, the exact sum rounded by hand)
    let cases: Vec<(Vec<f64>, FloatFormat, f64)> = vec![
        // 2^100 + 1 - 2^100 = 1.
        (vec![p(100), 1.0, -p(100)], FloatFormat::FP32, 1.0),
        // 1 + 2^-11 is fp16's tie between 1 and 1 + 2^-10: even, 1.
        (vec![1.0, p(-11)], FloatFormat::FP16, 1.0),
        // The tie broken upward by 2^-1000: 1 + 2^-10.
        (vec![1.0, p(-11), p(-1000)], FloatFormat::FP16, 1.0 + p(-10)),
        // Broken downward: 1.
        (vec![1.0, p(-11), -p(-1000)], FloatFormat::FP16, 1.0),
        // The smallest subnormals cancel to exactly 2^-1074.
        (
            vec![f64::from_bits(3), -f64::from_bits(2)],
            FloatFormat::FP64,
            f64::from_bits(1),
        ),
        // 65504 + 16 is fp16's overflow tie: infinity; a hair below it: 65504.
        (vec![65504.0, 16.0], FloatFormat::FP16, f64::INFINITY),
        (vec![65504.0, 16.0, -p(-60)], FloatFormat::FP16, 65504.0),
        // Everything cancels: +0, whatever the signs of the zeros.
        (vec![-3.0, 3.0, -0.0], FloatFormat::FP16, 0.0),
    ];
    for (terms, f, want) in cases {
        let (mut int, mut exp) = (IntegerSum::new(), Expansion::new());
        terms.iter().for_each(|&t| {
            int.add_f64(t);
            exp.add(t);
        });
        assert_eq!(int.round(&f).to_bits(), want.to_bits(), "{terms:?}");
        assert_eq!(exp.round_to(&f).to_bits(), want.to_bits(), "{terms:?}");
    }
}

#[test]
fn non_finite_terms_follow_ieee() {
    for terms in [
        vec![1.0, f64::NAN],
        vec![f64::INFINITY, f64::NEG_INFINITY],
        vec![f64::NEG_INFINITY, 1e300],
        vec![f64::INFINITY, 5.0, f64::INFINITY],
    ] {
        agree(&terms).unwrap();
    }
}

/// Terms built to be hard: exponents from the subnormals to the top of f64, signs and
/// magnitudes that cancel, repeated values (ties).
fn term() -> impl Strategy<Value = f64> {
    prop_oneof![
        (any::<bool>(), 0u64..(1 << 53), -1074i32..1000).prop_map(|(neg, m, e)| {
            let v = m as f64 * 2f64.powi(e.clamp(-1074, 970) - 52).max(f64::from_bits(1));
            if neg { -v } else { v }
        }),
        (any::<bool>(), -1074i32..1023).prop_map(|(neg, e)| {
            let v = 2f64.powi(e);
            if neg { -v } else { v }
        }),
        any::<u64>().prop_map(f64::from_bits),
        Just(0.0),
        Just(-0.0),
        Just(1.0),
        Just(-1.0),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn both_sums_round_alike(terms in prop::collection::vec(term(), 0..24)) {
        agree(&terms).map_err(TestCaseError::fail)?;
    }

    /// A sum and its negation (as separate terms, shuffled in after) leave exactly the rest.
    #[test]
    fn cancellation_leaves_the_remainder(
        terms in prop::collection::vec(term(), 1..12),
        rest in term(),
    ) {
        let mut all: Vec<f64> = terms.iter().copied().filter(|t| t.is_finite()).collect();
        all.push(rest);
        all.extend(terms.iter().filter(|t| t.is_finite()).map(|t| -t));
        agree(&all).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn both_product_sums_round_alike(
        pairs in prop::collection::vec(
            ((any::<bool>(), 0u64..(1 << 53), -250i32..250), (any::<bool>(), 0u64..(1 << 53), -250i32..250)),
            0..16,
        ),
    ) {
        let v = |(neg, m, e): (bool, u64, i32)| {
            let v = m as f64 * 2f64.powi(e - 52);
            if neg { -v } else { v }
        };
        let pairs: Vec<(f64, f64)> = pairs.into_iter().map(|(a, b)| (v(a), v(b))).collect();
        agree_products(&pairs).map_err(TestCaseError::fail)?;
    }
}
