//! The per-element meaning of the MFU ops that select rather than round (`v_relu`, `vv_max`):
//! one definition that the checker's pad-lane analysis, the emulator and the software graph's
//! kernels all take (docs/numerics.md). Their inputs are already rounded to the MFU format and
//! their results need no rounding.

/// `v_relu`: `x > 0 ? x : +0`; NaN stays NaN.
#[inline]
pub fn relu(x: f64) -> f64 {
    if x > 0.0 || x.is_nan() { x } else { 0.0 }
}

/// `vv_max`: NaN if either side is NaN (`f64::max` would drop it), and `max(-0, +0) = +0`.
#[inline]
pub fn max(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x > y {
        x
    } else if y > x {
        y
    } else if x.is_sign_negative() {
        // Equal: only the zeros differ, and -0 wins only against -0.
        y
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relu_keeps_nan_and_gives_positive_zero() {
        assert!(relu(f64::NAN).is_nan());
        assert_eq!(relu(-0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(relu(-3.5).to_bits(), 0.0f64.to_bits());
        assert_eq!(relu(2.25), 2.25);
        assert_eq!(relu(f64::INFINITY), f64::INFINITY);
    }

    #[test]
    fn max_propagates_nan_and_prefers_positive_zero() {
        assert!(max(f64::NAN, 1.0).is_nan() && max(1.0, f64::NAN).is_nan());
        assert_eq!(max(-0.0, 0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(max(0.0, -0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(max(-0.0, -0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(max(-1.0, -2.0), -1.0);
        assert_eq!(max(f64::NEG_INFINITY, -1e300), -1e300);
    }
}
