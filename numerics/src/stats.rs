//! Error statistics between a tensor and its quantized version.

use serde::{Deserialize, Serialize};

/// Error statistics of `q` against the reference `x` (finite pairs only; non-finite pairs are
/// counted in `nonfinite`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    pub count: usize,
    pub nonfinite: usize,
    /// `-10 log10(||q - x||^2 / ||x||^2)` in dB (infinite when exact, NaN for an all-zero x
    /// with a non-zero error).
    pub qsnr_db: f64,
    pub max_abs_err: f64,
    pub mean_abs_err: f64,
    pub rmse: f64,
    /// Largest |q - x| / |x| over non-zero x.
    pub max_rel_err: f64,
    /// Elements that became 0 although x was not.
    pub flushed: usize,
    /// Elements whose value changed.
    pub changed: usize,
}

/// QSNR in dB over one tensor: `-10 log10(||q - x||^2 / ||x||^2)` (docs/numerics.md).
pub fn qsnr(x: &[f64], q: &[f64]) -> f64 {
    error_stats(x, q).qsnr_db
}

pub fn error_stats(x: &[f64], q: &[f64]) -> ErrorStats {
    let mut acc = ErrorAcc::default();
    for (&a, &b) in x.iter().zip(q) {
        acc.add(a, b);
    }
    acc.stats()
}

/// [`error_stats`] a pair at a time: a tensor compared in pieces, in order, gives the stats
/// of the whole (the sums run in the same order).
#[derive(Clone, Debug, Default)]
pub struct ErrorAcc {
    s: ErrorStats,
    sig: f64,
    err: f64,
    abs: f64,
}

impl ErrorAcc {
    /// Count the pair of reference `a` and quantized `b`.
    pub fn add(&mut self, a: f64, b: f64) {
        let s = &mut self.s;
        if !a.is_finite() || !b.is_finite() {
            s.nonfinite += 1;
            return;
        }
        s.count += 1;
        let d = b - a;
        self.sig += a * a;
        self.err += d * d;
        self.abs += d.abs();
        s.max_abs_err = s.max_abs_err.max(d.abs());
        if a != 0.0 {
            s.max_rel_err = s.max_rel_err.max(d.abs() / a.abs());
            if b == 0.0 {
                s.flushed += 1;
            }
        }
        if a.to_bits() != b.to_bits() && a != b {
            s.changed += 1;
        }
    }

    /// Count a pair of bit-identical values `a` and `a`: [`ErrorAcc::add`]`(a, a)` without
    /// the error terms, which are zero and leave every sum and maximum as it was (most of a
    /// concordant diff's pairs).
    pub fn add_equal(&mut self, a: f64) {
        if !a.is_finite() {
            self.s.nonfinite += 1;
            return;
        }
        self.s.count += 1;
        self.sig += a * a;
    }

    /// The stats of every pair counted so far.
    pub fn stats(&self) -> ErrorStats {
        let mut s = self.s.clone();
        if s.count > 0 {
            s.mean_abs_err = self.abs / s.count as f64;
            s.rmse = (self.err / s.count as f64).sqrt();
        }
        s.qsnr_db = if self.err == 0.0 {
            f64::INFINITY
        } else {
            -10.0 * (self.err / self.sig).log10()
        };
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `add_equal(a)` leaves the accumulator exactly as `add(a, a)` does, bit for bit, from
    /// states with and without errors counted: zeros of both signs, subnormals, the largest
    /// finite values, infinities and NaN.
    #[test]
    fn add_equal_is_add_of_a_pair_of_equals() {
        let values = [
            0.0,
            -0.0,
            f64::from_bits(1),
            -f64::MIN_POSITIVE / 2.0,
            1.0,
            -3.5,
            65504.0,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        let bits = |acc: &ErrorAcc| {
            let s = acc.stats();
            [
                s.count as u64,
                s.nonfinite as u64,
                s.flushed as u64,
                s.changed as u64,
                s.qsnr_db.to_bits(),
                s.max_abs_err.to_bits(),
                s.mean_abs_err.to_bits(),
                s.rmse.to_bits(),
                s.max_rel_err.to_bits(),
                acc.sig.to_bits(),
                acc.err.to_bits(),
                acc.abs.to_bits(),
            ]
        };
        let mut errored = ErrorAcc::default();
        errored.add(2.0, 2.5);
        errored.add(-1.0, 0.0);
        for start in [ErrorAcc::default(), errored] {
            for &a in &values {
                let (mut by_add, mut by_equal) = (start.clone(), start.clone());
                by_add.add(a, a);
                by_equal.add_equal(a);
                assert_eq!(bits(&by_add), bits(&by_equal), "{a:e}");
            }
        }
    }
}
