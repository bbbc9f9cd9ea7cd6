//! Conversions against golden files produced by `numerics/golden/gen.py` with the `ml_dtypes`
//! package (the independent reference; see that script for the record layouts and semantics).
//! Every fp16 bit pattern and a fixed-seed sample of f32 inputs, compared bit for bit.

use nnp_numerics::{FloatFormat, MiniFloat, MiniOverflow, MxElem, Specials};

static FP16_ALL: &[u8] = include_bytes!("../golden/fp16_all.bin");
static F32_SAMPLE: &[u8] = include_bytes!("../golden/f32_sample.bin");

/// The five small types with ml_dtypes' semantics: e4m3fn overflows to NaN, e5m2 to infinity,
/// fp6/fp4 saturate. The grids are the OCP MX element grids (`MxElem::mini`); only the overflow
/// behaviour differs from MX's saturating conversion.
fn ml_dtypes_small() -> [(&'static str, MiniFloat); 5] {
    let with = |e: MxElem, overflow| MiniFloat {
        overflow,
        ..e.mini()
    };
    [
        ("float8_e4m3fn", with(MxElem::Fp8E4M3, MiniOverflow::Nan)),
        ("float8_e5m2", with(MxElem::Fp8E5M2, MiniOverflow::Infinity)),
        (
            "float6_e3m2fn",
            with(MxElem::Fp6E3M2, MiniOverflow::Saturate),
        ),
        (
            "float6_e2m3fn",
            with(MxElem::Fp6E2M3, MiniOverflow::Saturate),
        ),
        (
            "float4_e2m1fn",
            with(MxElem::Fp4E2M1, MiniOverflow::Saturate),
        ),
    ]
}

/// Compare our encoding of `x` with ml_dtypes' byte; NaN results compare as "is NaN".
fn check_small(name: &str, f: &MiniFloat, x: f64, want: u8, what: &str) {
    if x.is_nan() {
        // ml_dtypes maps NaN to the NaN code where one exists (fp6/fp4 have none).
        if f.specials != Specials::None {
            assert!(f.decode(u64::from(want)).is_nan(), "{name}: NaN of {what}");
        }
        return;
    }
    let got = f.encode(x);
    if f.decode(u64::from(want)).is_nan() {
        assert!(
            f.decode(got).is_nan(),
            "{name}({x:e}) [{what}]: want NaN, got {got:#04x}"
        );
    } else {
        assert_eq!(got, u64::from(want), "{name}({x:e}) [{what}]");
    }
}

#[test]
fn every_fp16_pattern() {
    assert_eq!(FP16_ALL.len(), 65536 * 7);
    let small = ml_dtypes_small();
    for (i, rec) in FP16_ALL.chunks_exact(7).enumerate() {
        let x = FloatFormat::FP16.decode(i as u64);
        let bf = u16::from_le_bytes([rec[0], rec[1]]);
        if x.is_nan() {
            assert!(FloatFormat::BF16.decode(u64::from(bf)).is_nan());
        } else {
            assert_eq!(
                FloatFormat::BF16.encode(x),
                u64::from(bf),
                "bf16 of fp16 {i:#06x}"
            );
        }
        for (k, (name, f)) in small.iter().enumerate() {
            check_small(name, f, x, rec[2 + k], &format!("fp16 {i:#06x}"));
        }
    }
}

#[test]
fn f32_sample() {
    assert_eq!(F32_SAMPLE.len() % 13, 0);
    assert!(F32_SAMPLE.len() / 13 > 100_000);
    let small = ml_dtypes_small();
    for rec in F32_SAMPLE.chunks_exact(13) {
        let bits = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let x = f64::from(f32::from_bits(bits));
        let what = format!("f32 {bits:#010x}");
        for (fmt, want) in [
            (FloatFormat::FP16, u16::from_le_bytes([rec[4], rec[5]])),
            (FloatFormat::BF16, u16::from_le_bytes([rec[6], rec[7]])),
        ] {
            if x.is_nan() {
                assert!(fmt.decode(u64::from(want)).is_nan(), "{what}");
            } else {
                assert_eq!(fmt.encode(x), u64::from(want), "{fmt:?} of {x:e} ({what})");
            }
        }
        for (k, (name, f)) in small.iter().enumerate() {
            check_small(name, f, x, rec[8 + k], &what);
        }
    }
}

/// Decoding every code of each small type and re-encoding it gives the code back (the NaN
/// codes excepted), and the grids' extreme values are the OCP ones.
#[test]
fn small_types_code_roundtrip_and_extremes() {
    for (name, f) in ml_dtypes_small() {
        for code in 0..(1u64 << f.bits()) {
            let v = f.decode(code);
            if v.is_nan() {
                continue;
            }
            // -0 and +0 keep their sign bit.
            assert_eq!(f.encode(v), code, "{name} code {code:#x}");
        }
    }
    let max = |e: MxElem| e.mini().max_value();
    assert_eq!(max(MxElem::Fp8E4M3), 448.0);
    assert_eq!(max(MxElem::Fp8E5M2), 57344.0);
    assert_eq!(max(MxElem::Fp6E3M2), 28.0);
    assert_eq!(max(MxElem::Fp6E2M3), 7.5);
    assert_eq!(max(MxElem::Fp4E2M1), 6.0);
    assert_eq!(MxElem::Fp8E4M3.mini().min_positive(), 2f64.powi(-9));
    assert_eq!(MxElem::Fp8E5M2.mini().min_positive(), 2f64.powi(-16));
    assert_eq!(MxElem::Fp6E3M2.mini().min_positive(), 0.0625);
    assert_eq!(MxElem::Fp6E2M3.mini().min_positive(), 0.125);
    assert_eq!(MxElem::Fp4E2M1.mini().min_positive(), 0.5);
}
