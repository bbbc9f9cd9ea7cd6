//! Scalar float rounding: hand-checked cases, the half crate as an independent fp16/bf16
//! reference over many inputs, and `round_exact` against `round`.

use half::{bf16, f16};
use nnp_numerics::{FloatFormat, Format, Overflow, Rounding};

fn fp(e: u32, m: u32, r: Rounding) -> FloatFormat {
    FloatFormat {
        rounding: r,
        ..FloatFormat::ieee(e, m)
    }
}

#[test]
fn fp16_hand_cases() {
    let f = FloatFormat::FP16;
    // 1 + 2^-11 is the midpoint of 1 and 1 + 2^-10: ties to even -> 1.
    assert_eq!(f.round(1.0 + 2f64.powi(-11)).to_bits(), 1.0f64.to_bits());
    // 1 + 3 * 2^-11 is the midpoint of 1 + 2^-10 and 1 + 2^-9: even -> 1 + 2^-9.
    assert_eq!(f.round(1.0 + 3.0 * 2f64.powi(-11)), 1.0 + 2f64.powi(-9));
    // Max fp16 is 65504; 65520 is the midpoint to 2^16 and rounds (to even) to infinity.
    assert_eq!(f.round(65519.99), 65504.0);
    assert_eq!(f.round(65520.0), f64::INFINITY);
    assert_eq!(fp(5, 10, Rounding::TowardZero).round(1e9), 65504.0);
    // Smallest subnormal 2^-24; half of it ties to 0 (even), just above rounds up.
    assert_eq!(f.round(2f64.powi(-25)), 0.0);
    assert_eq!(f.round(2f64.powi(-25) * 1.0000001), 2f64.powi(-24));
    assert_eq!(
        fp(5, 10, Rounding::NearestAway).round(2f64.powi(-25)),
        2f64.powi(-24)
    );
    assert!(f.round(-2f64.powi(-26)).is_sign_negative());
    assert!(f.round(f64::NAN).is_nan());
    let sat = FloatFormat {
        overflow: Overflow::Saturate,
        ..FloatFormat::FP16
    };
    assert_eq!(sat.round(-1e10), -65504.0);
    assert_eq!(sat.round(f64::NEG_INFINITY), -65504.0);
    // fp(5, 2) (ms-fp8): 1.25, 1.5, 1.75, 2 around 1.6: nearest is 1.5.
    assert_eq!(fp(5, 2, Rounding::NearestEven).round(1.6), 1.5);
    assert_eq!(fp(5, 2, Rounding::NearestEven).max_value(), 57344.0);
}

#[test]
fn fp16_encode_decode_all_patterns() {
    let f = FloatFormat::FP16;
    for bits in 0..=u16::MAX {
        let h = f16::from_bits(bits);
        let v = f.decode(u64::from(bits));
        if h.is_nan() {
            assert!(v.is_nan());
            continue;
        }
        assert_eq!(v.to_bits(), f64::from(h).to_bits(), "decode {bits:#06x}");
        assert_eq!(f.encode(v), u64::from(bits), "encode {bits:#06x}");
    }
}

/// The `half` crate converts f32 -> f16/bf16 with round-to-nearest-even: an independent
/// reference on a deterministic sweep of f32 bit patterns.
#[test]
fn f32_to_fp16_bf16_matches_half() {
    let mut s = 0x1234_5678_9abc_def0u64;
    for i in 0..400_000u32 {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let bits = if i % 2 == 0 {
            (s >> 32) as u32
        } else {
            0x3000_0000 + (s >> 35) as u32
        };
        let x = f32::from_bits(bits);
        if x.is_nan() {
            continue;
        }
        let h = f16::from_f32(x);
        let r = FloatFormat::FP16.round(f64::from(x));
        assert_eq!(
            r.to_bits(),
            f64::from(h).to_bits(),
            "fp16 of {x:e} ({bits:#010x})"
        );
        let b = bf16::from_f32(x);
        let r = FloatFormat::BF16.round(f64::from(x));
        assert_eq!(
            r.to_bits(),
            f64::from(b).to_bits(),
            "bf16 of {x:e} ({bits:#010x})"
        );
    }
}

/// f64 -> f32 by `as` is IEEE nearest-even: reference for fp32 rounding of f64 values.
#[test]
fn f64_to_fp32_matches_as_cast() {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Exponents around the f32 range, including its subnormals and overflow.
        let e = ((s >> 52) % 320) as i64 - 170 + 1023;
        let x = f64::from_bits((s & 0x800F_FFFF_FFFF_FFFF) | ((e as u64) << 52));
        let want = f64::from(x as f32);
        assert_eq!(
            FloatFormat::FP32.round(x).to_bits(),
            want.to_bits(),
            "{x:e}"
        );
    }
}

/// `round_exact(neg, mant, exp, sticky)` equals `round` of the exact value when it is an f64,
/// and with `sticky` it breaks exact ties upward in magnitude.
#[test]
fn round_exact_matches_round() {
    for fmt in [
        FloatFormat::FP16,
        FloatFormat::BF16,
        fp(4, 3, Rounding::NearestEven),
    ] {
        for r in [
            Rounding::NearestEven,
            Rounding::NearestAway,
            Rounding::TowardZero,
        ] {
            let f = FloatFormat { rounding: r, ..fmt };
            // Every 12-bit significand at every exponent that reaches the format's range.
            for exp in -40..20 {
                for mant in 0u128..(1 << 12) {
                    for neg in [false, true] {
                        let x = (mant as f64) * 2f64.powi(exp);
                        let x = if neg { -x } else { x };
                        let want = f.round(x);
                        let got = f.round_exact(neg, mant, exp, false);
                        assert_eq!(got.to_bits(), want.to_bits(), "{f:?} {mant} 2^{exp}");
                        // Sticky: the value is x plus an infinitesimal (in magnitude): like
                        // x nudged by a relative 1e-12, which crosses no grid point of these
                        // formats, so exact ties break away from zero in the nearest modes.
                        if mant != 0 {
                            let got_s = f.round_exact(neg, mant << 1, exp - 1, true);
                            let want_s = f.round(x * (1.0 + 1e-12));
                            assert_eq!(
                                got_s.to_bits(),
                                want_s.to_bits(),
                                "sticky {f:?} {mant} 2^{exp}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Round-to-odd to f64, by hand: exact values come back; a value f64 cannot hold is
/// truncated with its last bit set (in the normal and the subnormal range); past f64's range,
/// its largest value; an infinitesimal above zero, the smallest subnormal.
#[test]
fn to_odd_f64_by_hand() {
    use nnp_numerics::rounding::to_odd_f64;
    let bits = |v: f64| v.to_bits();
    assert_eq!(bits(to_odd_f64(false, 3, 1, false)), bits(6.0));
    assert_eq!(bits(to_odd_f64(true, 0, 5, false)), bits(-0.0));
    // 2^60 + 1: 53 bits from 2^60 end at 2^8; the dropped 1 sets that last bit.
    let v = to_odd_f64(false, (1 << 60) + 1, 0, false);
    assert_eq!(bits(v), bits(2f64.powi(60) + 2f64.powi(8)));
    // 1 plus an infinitesimal: 1 + 2^-52.
    assert_eq!(
        bits(to_odd_f64(false, 1, 0, true)),
        bits(1.0 + 2f64.powi(-52))
    );
    // 3 * 2^-1074 is a subnormal; 1.5 * 2^-1074 truncates to 2^-1074, odd.
    assert_eq!(bits(to_odd_f64(false, 3, -1074, false)), 3);
    assert_eq!(bits(to_odd_f64(false, 3, -1075, false)), 1);
    assert_eq!(
        bits(to_odd_f64(true, 1, -2000, false)),
        bits(-f64::from_bits(1))
    );
    assert_eq!(bits(to_odd_f64(false, 1, 2000, false)), bits(f64::MAX));
    assert_eq!(bits(to_odd_f64(false, 0, 0, true)), 1);
}

/// Stochastic rounding of an exact value draws from the value, not from how it is written:
/// `round_exact` of `mant * 2^exp` equals `round` of that f64 (position 0) and of the same
/// value with a wider mantissa; a 128-bit value whose lowest bit is set rounds as its top 127
/// bits with `sticky` (the two differ 70 bits below the lead, where no format of these
/// decides, and round to the same f64 by round-to-odd). Before, the draw hashed `(mant,
/// exp)`: a board's MVM sum and the software graph's, written differently, rounded apart.
#[test]
fn stochastic_round_exact_draws_from_the_value() {
    for fmt in [FloatFormat::FP16, FloatFormat::BF16, FloatFormat::FP32] {
        let f = FloatFormat {
            rounding: Rounding::Stochastic { seed: 7 },
            ..fmt
        };
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut ups = 0;
        for k in 0..20_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let mant = u128::from(s >> (11 + k % 30));
            let exp = (k % 60) - 40;
            let neg = s & 1 == 1;
            let x = (mant as f64) * 2f64.powi(exp);
            let x = if neg { -x } else { x };
            let want = f.round(x);
            assert_eq!(
                f.round_exact(neg, mant, exp, false).to_bits(),
                want.to_bits()
            );
            let wide = f.round_exact(neg, mant << 7, exp - 7, false);
            assert_eq!(wide.to_bits(), want.to_bits(), "{mant} 2^{exp}");
            ups += usize::from(want.abs() > x.abs());
            let m128 = (u128::from(s) << 64) | u128::from(s.rotate_left(29)) | (1 << 127) | 1;
            assert_eq!(
                f.round_exact(neg, m128, exp - 200, false).to_bits(),
                f.round_exact(neg, m128 >> 1, exp - 199, true).to_bits(),
                "{m128} 2^{exp}"
            );
        }
        // The draws still decide: some values round up in magnitude, others down.
        assert!(ups > 1000 && ups < 19_000, "{fmt:?}: {ups} of 20000 up");
    }
}

#[test]
fn wide_mantissa_round_exact() {
    // A 100-bit integer: 2^99 + 2^88 + 1 rounds to fp16's 2^99 * (1 + 2^-11)? No: fp16 max is
    // 65504, so scale down: value = mant * 2^-95 = 16 + 2^-7 + 2^-95; fp16 ulp at 16 is 2^-6,
    // so 2^-7 is exactly half an ulp plus 2^-95: rounds up to 16 + 2^-6.
    let mant = (1u128 << 99) | (1u128 << 88) | 1;
    assert_eq!(
        FloatFormat::FP16.round_exact(false, mant, -95, false),
        16.0 + 2f64.powi(-6)
    );
    // Without the low bit it is an exact tie: even -> 16.
    let mant = (1u128 << 99) | (1u128 << 88);
    assert_eq!(FloatFormat::FP16.round_exact(false, mant, -95, false), 16.0);
    assert_eq!(
        FloatFormat::FP16.round_exact(true, mant, -95, true),
        -(16.0 + 2f64.powi(-6))
    );
}

#[test]
fn parse_fp_literals() {
    let f: Format = "fp(5, 2)".parse().unwrap();
    assert_eq!(f.as_float(), Some(&FloatFormat::ieee(5, 2)));
    assert_eq!("fp16".parse::<Format>().unwrap(), Format::FP16);
    assert_eq!("fp(5, 10)".parse::<Format>().unwrap().to_string(), "fp16");
}

/// Stochastic rounding depends on the value only, not on how wide a significand carries it:
/// `2^-11` as `1 * 2^-11` and as a wide sum's `2^127 * 2^-138` round alike in `fp(4, 3)`,
/// where it is a quarter of the smallest subnormal `2^-9` (so some seeds round it up), and
/// alike as the f64 `round` takes it.
#[test]
fn stochastic_rounding_of_a_wide_significand_below_the_quantum() {
    let mut ups = 0;
    for seed in 0..64 {
        let f = FloatFormat {
            rounding: Rounding::Stochastic { seed },
            ..FloatFormat::ieee(4, 3)
        };
        for neg in [false, true] {
            let narrow = f.round_exact(neg, 1, -11, false);
            let wide = f.round_exact(neg, 1 << 127, -138, false);
            let x = if neg {
                -(2f64.powi(-11))
            } else {
                2f64.powi(-11)
            };
            assert_eq!(wide.to_bits(), narrow.to_bits(), "seed {seed}");
            assert_eq!(f.round(x).to_bits(), narrow.to_bits(), "seed {seed}");
            ups += usize::from(narrow != 0.0);
        }
    }
    // Up with probability 1/4: some seeds, not all.
    assert!(ups > 0 && ups < 128, "{ups} of 128 rounded up");
}
