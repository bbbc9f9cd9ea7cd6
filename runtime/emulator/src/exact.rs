//! The emulator's MFU arithmetic: add and multiply correctly rounded to any float format, one
//! rounding of the exact result. A result goes through its round-to-odd f64 (exact to 53 bits
//! with a sticky last bit, `nnp_numerics::rounding::to_odd_pair`), which rounds to any format
//! of at most 51 significant bits exactly as the exact value would; wider formats round the
//! exact pair as an [`IntegerSum`]. The sums themselves are `nnp_numerics::sums`.

use nnp_numerics::FloatFormat;
use nnp_numerics::rounding::to_odd_pair;
use nnp_numerics::sums::IntegerSum;

/// Round an f64 result known as `s + err` (exactly) to `fmt`.
fn round_pair(fmt: &FloatFormat, s: f64, err: f64) -> f64 {
    if fmt.mant_bits > 50 && err != 0.0 {
        // Round-to-odd needs two spare bits: a format this wide rounds the exact pair (f64's
        // nearest `s` would not do for a directed rounding: in `fp(11, 52, round = zero)`,
        // 1 - 2^-100 is 1 - 2^-53, not 1).
        let mut sum = IntegerSum::new();
        sum.add_f64(s);
        sum.add_f64(err);
        return sum.round(fmt);
    }
    fmt.round(to_odd_pair(s, err))
}

/// `fmt(a + b)`, correctly rounded (one rounding of the exact sum).
pub fn add(fmt: &FloatFormat, a: f64, b: f64) -> f64 {
    let s = a + b;
    if !s.is_finite() {
        return fmt.round(s);
    }
    // Knuth's two-sum: the exact rounding error of s.
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    round_pair(fmt, s, err)
}

/// `fmt(a * b)`, correctly rounded.
pub fn mul(fmt: &FloatFormat, a: f64, b: f64) -> f64 {
    let p = a * b;
    if !p.is_finite() || p == 0.0 {
        return fmt.round(p);
    }
    let err = a.mul_add(b, -p);
    round_pair(fmt, p, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_mul_round_once() {
        let f32f = FloatFormat::FP32;
        // 1 + 2^-24 + 2^-60: f64 sum RN gives 1 + 2^-24 (the 2^-60 is lost), then rounding to
        // fp32 would tie to 1.0; the exact sum is above the tie, so fp32 gives 1 + 2^-23.
        let a = 1.0 + 2f64.powi(-24);
        let b = 2f64.powi(-60);
        assert_eq!(a + b, a);
        assert_eq!(add(&f32f, a, b), 1.0 + 2f64.powi(-23));
        // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: in fp16 just above the tie 1 + 2^-11: rounds up.
        let x = 1.0 + 2f64.powi(-12);
        assert_eq!(mul(&FloatFormat::FP16, x, x), 1.0 + 2f64.powi(-10));
        assert!(add(&FloatFormat::FP16, f64::INFINITY, f64::NEG_INFINITY).is_nan());
    }

    /// A format as wide as f64, rounded toward zero: `1 - 2^-100` truncates to `1 - 2^-53` (f64's
    /// sum is 1.0), and `(1 + 2^-52)(1 - 2^-52) = 1 - 2^-104` to `1 - 2^-53` (f64's product is
    /// 1.0); to nearest both are 1.
    #[test]
    fn wide_formats_round_the_exact_pair() {
        let zero = FloatFormat {
            rounding: nnp_numerics::Rounding::TowardZero,
            ..FloatFormat::ieee(11, 52)
        };
        let below_one = 1.0 - 2f64.powi(-53);
        assert_eq!(add(&zero, 1.0, -(2f64.powi(-100))), below_one);
        let (a, b) = (1.0 + 2f64.powi(-52), 1.0 - 2f64.powi(-52));
        assert_eq!(mul(&zero, a, b), below_one);
        let even = FloatFormat::ieee(11, 52);
        assert_eq!(add(&even, 1.0, -(2f64.powi(-100))), 1.0);
        assert_eq!(mul(&even, a, b), 1.0);
        // An exact result keeps its sign: -0 + -0 is -0.
        assert_eq!(add(&zero, -0.0, -0.0).to_bits(), (-0.0f64).to_bits());
    }
}
