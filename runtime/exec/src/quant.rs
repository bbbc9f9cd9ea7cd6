//! Quantize and round kernels over slices.
//!
//! Fast paths (bit tricks on f64, branch-light loops) for the common cases: BFP with a
//! deterministic rounding mode and an exponent range that fits f64 scaling, MX likewise, and
//! nearest-even, nearest-away and toward-zero rounding to an IEEE-style float format
//! (`FastRound`, `DirectedRound`). Everything else calls the scalar reference of
//! `nnp_numerics` (per run for [`Format::quantize`], per element for
//! [`FloatFormat::round`](nnp_numerics::FloatFormat::round)). The fast paths are tested
//! bit-equal against the reference on adversarial data.
//!
//! The round kernels are in `round` (`Rounder`, `FastRound`, `DirectedRound`), the BFP and MX
//! block quantizers in `bfp` (`FastBfp`, [`BfpInts`]) and `mx` (`FastMx`), what they share
//! (the AVX2 copies, the parallel split, the integer conversion) in `lanes`; this module holds
//! the per-run entry points.

use nnp_numerics::Format;
use rayon::prelude::*;

mod bfp;
mod lanes;
mod mx;
mod ops;
mod round;

pub use bfp::BfpInts;
#[cfg(feature = "cuda")]
pub(crate) use bfp::BfpParams;
use bfp::FastBfp;
#[cfg(test)]
pub(crate) use lanes::each_copy;
pub(crate) use lanes::{LoopCopy, widest_copy};
pub(crate) use lanes::{PAR_MIN, avx2_copy, par_pieces, to_i16, vectorized};
use mx::FastMx;
pub(crate) use ops::{QuantizeOp, RoundOp};
pub use round::round_slice;
pub(crate) use round::{FastRound, Rounder, round_seq};

/// Fake-quantize `x` in runs of `len` lanes along it, each run as [`Format::quantize`] sees it
/// at native dimension `native`.
pub fn quantize_runs(fmt: &Format, x: &[f64], len: usize, native: usize, out: &mut [f64]) {
    let len = len.max(1);
    let run = |(xs, os): (&[f64], &mut [f64])| quantize_seq(fmt, xs, len, native, os);
    if x.len() >= PAR_MIN && x.len().is_multiple_of(len) {
        let chunk = len * (4096 / len).max(1);
        x.par_chunks(chunk)
            .zip(out.par_chunks_mut(chunk))
            .for_each(run);
    } else {
        run((x, out));
    }
}

/// [`quantize_runs`] on the calling thread (for a caller that is one parallel task already).
pub(crate) fn quantize_seq(fmt: &Format, x: &[f64], len: usize, native: usize, out: &mut [f64]) {
    let len = len.max(1);
    match fmt {
        Format::Bfp(b) => {
            if let Some(f) = FastBfp::new(b, native) {
                return f.runs(x, out, len);
            }
        }
        Format::Mx(m) => {
            if let Some(f) = FastMx::new(m, native) {
                return f.runs(x, out, len);
            }
        }
        // Element by element: the run's positions matter to stochastic rounding only, which
        // has no fast rounder.
        Format::Float(f) => {
            let r = Rounder::new(f);
            if r.is_fast() {
                return r.round_all(x, out);
            }
        }
        _ => {}
    }
    for (xr, or) in x.chunks(len).zip(out.chunks_mut(len)) {
        fmt.quantize(xr, native, or);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Adversarial f64 values around the fp16/bf16/fp32 decision points: ties, one ulp either
    /// side, subnormal boundaries, overflow threshold, zeros, non-finite.
    pub(crate) fn adversarial() -> Vec<f64> {
        let mut v = vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
            5e-324,
            1e300,
            -1e300,
        ];
        for e in -160..140 {
            for m in [
                1.0,
                1.5,
                1.0 + 2f64.powi(-10),
                1.0 + 2f64.powi(-11),
                1.0 + 3.0 * 2f64.powi(-11),
            ] {
                let x = m * 2f64.powi(e);
                for d in [-2i64, -1, 0, 1, 2] {
                    let y = f64::from_bits((x.to_bits() as i64 + d) as u64);
                    v.push(y);
                    v.push(-y);
                }
            }
        }
        // A deterministic pseudo-random sweep (xorshift) over many binades.
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let e = (s % 120) as i32 - 70;
            let frac = (s >> 11) as f64 / (1u64 << 53) as f64;
            v.push((1.0 + frac) * 2f64.powi(e) * if s & 1 == 1 { -1.0 } else { 1.0 });
        }
        v
    }

    /// [`to_i16`] on every `i16` (both zeros, the extremes) gives it back and says it is
    /// whole; halfway and quarter points between them are not whole and give the nearest-even
    /// integer's low 16 bits (the caller refuses them).
    #[test]
    fn to_i16_is_exact_on_every_i16() {
        for k in i16::MIN..=i16::MAX {
            let y = f64::from(k);
            assert_eq!(to_i16(y), (k, true), "{k}");
            for d in [0.25, 0.5, 0.75] {
                let want = (y + d).round_ties_even() as i32 as i16;
                assert_eq!(to_i16(y + d), (want, false), "{k} + {d}");
            }
        }
        assert_eq!(to_i16(-0.0), (0, true));
    }

    pub(super) fn same(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    pub(super) fn bfp(lit: &str) -> Format {
        lit.parse().expect("valid literal")
    }

    /// Float MVM formats (ms-fp8 and ms-fp9 vectors: `fp(5, 2)`, `fp(5, 3)`) through
    /// `quantize_runs` against `Format::quantize` run by run, bit for bit: the fast rounder where
    /// the format rounds to nearest-even, the reference's own path for the other modes
    /// (stochastic draws by position in the run).
    #[test]
    fn float_runs_match_reference() {
        let data = adversarial();
        for lit in [
            "fp(5, 2)",
            "fp(5, 3)",
            "bf16",
            "fp(4, 3, overflow = sat)",
            "fp(5, 2, round = zero)",
            "fp(5, 3, round = stochastic(seed = 3))",
        ] {
            let fmt = bfp(lit);
            for len in [1usize, 16, 128] {
                let mut a = vec![0.0; data.len()];
                let mut r = vec![0.0; data.len()];
                quantize_runs(&fmt, &data, len, 128, &mut a);
                for (xr, rr) in data.chunks(len).zip(r.chunks_mut(len)) {
                    fmt.quantize(xr, 128, rr);
                }
                for (i, (x, (a, r))) in data.iter().zip(a.iter().zip(&r)).enumerate() {
                    assert!(
                        same(*a, *r),
                        "{lit}: element {i} ({x:e}): {a:e} against {r:e}"
                    );
                }
            }
        }
    }
}
