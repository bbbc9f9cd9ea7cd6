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

/// QSNR in dB over one tensor: `-10 log10(||q - x||^2 / ||x||^2)` (NUMERICS.md section 3).
pub fn qsnr(x: &[f64], q: &[f64]) -> f64 {
    error_stats(x, q).qsnr_db
}

/// QSNR averaged over vectors of `len` elements (seed 000: "averaging over many vectors"), as
/// the mean of the per-vector dB values (vectors with x = 0 are skipped).
pub fn qsnr_mean(x: &[f64], q: &[f64], len: usize) -> f64 {
    let mut sum = 0.0;
    let mut n = 0usize;
    for (xv, qv) in x.chunks(len.max(1)).zip(q.chunks(len.max(1))) {
        let v = qsnr(xv, qv);
        if v.is_finite() {
            sum += v;
            n += 1;
        }
    }
    if n == 0 {
        f64::INFINITY
    } else {
        sum / n as f64
    }
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
