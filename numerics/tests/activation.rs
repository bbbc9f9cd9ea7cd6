//! The 16-bit activation tables are correctly rounded: for every input the f64 value of the
//! function lies farther than 2^-40 (relative) from every rounding midpoint of the output
//! format, so rounding the f64 value (error ~2^-52) gives the same result as rounding the exact
//! value. Also spot values computed by hand.

use nnp_numerics::FloatFormat;
use nnp_numerics::activation::{self, Activation};

/// Whether `y` is within `2^-40 |y|` of a midpoint between two neighbours of its rounding in
/// `fmt` (including the overflow threshold `max + ulp/2`).
fn near_midpoint(fmt: &FloatFormat, y: f64) -> bool {
    if !y.is_finite() || y == 0.0 {
        return false;
    }
    let tol = y.abs() * 2f64.powi(-40);
    let code = fmt.encode(y.abs());
    let here = fmt.decode(code);
    let mut mids = Vec::new();
    if here.is_infinite() {
        let max = fmt.max_value();
        let ulp = max - fmt.decode(fmt.encode(max) - 1);
        mids.push(max + ulp / 2.0);
    } else {
        if code > 0 {
            mids.push((here + fmt.decode(code - 1)) / 2.0);
        }
        let next = fmt.decode(code + 1);
        mids.push(if next.is_finite() {
            (here + next) / 2.0
        } else {
            here + (here - fmt.decode(code - 1)) / 2.0
        });
    }
    mids.iter().any(|m| (y.abs() - m).abs() <= tol)
}

#[test]
fn tables_are_provably_correctly_rounded() {
    for fmt in [FloatFormat::FP16, FloatFormat::BF16] {
        for kind in Activation::ALL {
            let mut near = 0;
            for i in 0..=u16::MAX {
                let x = fmt.decode(u64::from(i));
                if near_midpoint(&fmt, activation::eval(kind, x)) {
                    near += 1;
                }
            }
            assert_eq!(
                near, 0,
                "{kind:?} over {fmt:?}: {near} values too close to a midpoint"
            );
        }
    }
}

#[test]
fn table_entries() {
    let fp16 = FloatFormat::FP16;
    let sig = activation::table(Activation::Sigmoid, &fp16).unwrap();
    let tanh = activation::table(Activation::Tanh, &fp16).unwrap();
    let exp = activation::table(Activation::Exp, &fp16).unwrap();
    assert_eq!(sig.len(), 65536);
    // sigmoid(0) = 0.5 = 0x3800; tanh(0) = 0; exp(0) = 1 = 0x3C00; tanh(-0) = -0.
    assert_eq!(sig[0], 0x3800);
    assert_eq!(tanh[0], 0);
    assert_eq!(tanh[0x8000], 0x8000);
    assert_eq!(exp[0], 0x3C00);
    // exp(1) = 2.71828...: fp16 neighbours 2.716796875 (0x416F) and 2.71875 (0x4170); the
    // midpoint 2.7177734375 is below e, so 0x4170.
    assert_eq!(exp[0x3C00], 0x4170);
    // exp(65504) overflows to +inf (0x7C00); exp(-inf) = 0; sigmoid(+inf) = 1; NaN -> NaN.
    assert_eq!(exp[0x7BFF], 0x7C00);
    assert_eq!(exp[0xFC00], 0);
    assert_eq!(sig[0x7C00], 0x3C00);
    assert!(fp16.decode(u64::from(sig[0x7E00])).is_nan());
    // tanh(2^-24) = 2^-24 - 2^-72/3: nearest fp16 is 2^-24 itself.
    assert_eq!(tanh[1], 1);
    // Only 16-bit formats have tables.
    assert!(activation::table(Activation::Exp, &FloatFormat::FP32).is_none());
    // bf16 table: exp(1) in bf16: neighbours 2.703125 and 2.71875; e is nearer 2.71875 (0x402E).
    let bexp = activation::table(Activation::Exp, &FloatFormat::BF16).unwrap();
    assert_eq!(bexp[0x3F80], 0x402E);
}

/// Toward zero, the decision points are the grid points, and f64 cannot tell which side of
/// one a value within its error lies on. Every 16-bit input whose f64 value is within 2^-40
/// of a grid point is one whose side the function's shape gives (`activation::below`), and the
/// table entries by hand: bf16 sigmoid(40) and tanh(10) (f64: 1.0) truncate to 1 - 2^-8,
/// sigmoid(-2^-60) (f64: 0.5) to 0.5 - 2^-9, exp(-2^-60) (f64: 1.0) to 1 - 2^-8 and exp(2^-60)
/// to 1; fp16 tanh(2^-20) (f64: 2^-20) to 2^-20 - 2^-24.
#[test]
fn toward_zero_tables_are_correctly_rounded() {
    use nnp_numerics::Rounding;
    let zero = |f: FloatFormat| FloatFormat {
        rounding: Rounding::TowardZero,
        ..f
    };
    let mut shaped = 0;
    for base in [FloatFormat::FP16, FloatFormat::BF16] {
        let fmt = zero(base);
        for kind in Activation::ALL {
            for i in 0..=u16::MAX {
                let x = fmt.decode(u64::from(i));
                let v = activation::eval(kind, x);
                if !v.is_finite() || v == 0.0 || x == 0.0 {
                    continue;
                }
                let g = base.round(v);
                if g.is_finite() && (v - g).abs() <= g.abs() * 2f64.powi(-40) {
                    assert!(
                        activation::below(kind, x, g).is_some(),
                        "{kind:?} over {fmt:?}: f({x:e}) = {v:e} is within f64's reach of {g:e}"
                    );
                    shaped += 1;
                }
            }
        }
    }
    assert!(shaped > 1000, "{shaped} inputs met a grid point");
    let entry = |kind, fmt: FloatFormat, x: f64| {
        let t = activation::table(kind, &fmt).expect("16-bit");
        fmt.decode(u64::from(t[fmt.encode(x) as usize]))
    };
    let bf16 = zero(FloatFormat::BF16);
    let tiny = 2f64.powi(-60);
    assert_eq!(entry(Activation::Sigmoid, bf16, 40.0), 1.0 - 2f64.powi(-8));
    assert_eq!(entry(Activation::Tanh, bf16, 10.0), 1.0 - 2f64.powi(-8));
    assert_eq!(entry(Activation::Tanh, bf16, -10.0), -(1.0 - 2f64.powi(-8)));
    assert_eq!(entry(Activation::Sigmoid, bf16, -tiny), 0.5 - 2f64.powi(-9));
    assert_eq!(entry(Activation::Sigmoid, bf16, tiny), 0.5);
    assert_eq!(entry(Activation::Exp, bf16, -tiny), 1.0 - 2f64.powi(-8));
    assert_eq!(entry(Activation::Exp, bf16, tiny), 1.0);
    let fp16 = zero(FloatFormat::FP16);
    let x = 2f64.powi(-20);
    assert_eq!(entry(Activation::Tanh, fp16, x), x - 2f64.powi(-24));
}
