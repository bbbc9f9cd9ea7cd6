//! Exact sums of tile partials, rounded once: per-chunk partials of a BLAS matmul
//! ([`sum_partials`]) and running sums with two-sum errors ([`ExactSums`]), which the integer
//! kernel feeds too.

use super::bounded::round_within;
use super::{MatVec, seq_add, seq_format};
use crate::exact::round_with;
use crate::quant::Rounder;
use nnp_numerics::sums::Expansion;
use nnp_numerics::{FloatFormat, pow2};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Sum per-chunk partials: `partials` is `[pairs, chunks, rows * n, b]` (`chunks =
/// cols * n / k`; `pairs` slice products per chunk, see [`slices`](super::slices)); the result
/// `[b, rows * n]`. The partials may be f32 (from an f32 matmul proven exact by
/// [`exact_chunk_f32`](super::exact_chunk_f32)) or f64: both widen to f64 exactly.
pub fn sum_partials<T: Copy + Into<f64> + Send + Sync>(
    spec: &MatVec,
    k: usize,
    pairs: usize,
    partials: &[T],
    b: usize,
) -> Vec<f64> {
    let Some(seq) = seq_format(spec.accumulation) else {
        return sum_exact(spec, partials, b);
    };
    let rn = spec.rows * spec.n;
    let per_tile = spec.n / k;
    let pair_len = spec.cols * per_tile * rn * b;
    let rounder = Rounder::new(&seq);
    let mut out = vec![0.0; b * rn];
    out.par_chunks_mut(rn.max(1))
        .enumerate()
        .for_each(|(bi, orow)| {
            let mut sum = Expansion::new();
            let y = seq_add(&rounder, &spec.output, spec.cols, rn, |j, tile| {
                for (r, t) in tile.iter_mut().enumerate() {
                    for c in j * per_tile..(j + 1) * per_tile {
                        for p in 0..pairs {
                            sum.add(partials[p * pair_len + (c * rn + r) * b + bi].into());
                        }
                    }
                    *t = round_with(&sum, &rounder, &seq);
                    sum.clear();
                }
            });
            orow.copy_from_slice(&y);
        });
    out
}

/// Elements per parallel block of [`sum_exact`] (its running sums and errors stay in L1).
const SUM_BLOCK: usize = 1024;

/// `exact` accumulation of `partials` (`[terms, rows * n, b]`) into `[b, rows * n]`
/// ([`ExactSums`] in blocks, then a blocked transpose puts the results in batch-major order).
fn sum_exact<T: Copy + Into<f64> + Send + Sync>(
    spec: &MatVec,
    partials: &[T],
    b: usize,
) -> Vec<f64> {
    let rn = spec.rows * spec.n;
    let m = rn * b;
    let terms = partials.len() / m.max(1);
    let sums_of = ExactSums::new(&spec.output);
    // Rounded sums in the partials' order, [rows * n, b].
    let mut sums = vec![0.0f64; m];
    let block =
        |(blk, acc): (usize, &mut [f64])| sums_of.run(&partials[blk * SUM_BLOCK..], m, terms, acc);
    if m >= 4 * SUM_BLOCK {
        sums.par_chunks_mut(SUM_BLOCK).enumerate().for_each(block);
    } else {
        sums.chunks_mut(SUM_BLOCK).enumerate().for_each(block);
    }
    transpose(&sums, rn, b)
}

/// `exact` accumulation of up to [`SUM_BLOCK`] elements at a time, rounded to one format.
///
/// Fast path: a plain f64 running sum per element, with Knuth's two-sum error of every
/// addition summed in absolute value alongside. When every error is zero the running sum *is*
/// the exact sum (the common case: the partials of one row rarely span more than 53 bits), and
/// one rounding finishes it, as [`Expansion::round_to`] does for a one-component expansion. An
/// element with any non-zero (or NaN) error is summed again with [`Expansion`]. The loops run
/// over contiguous elements term by term, so they vectorise.
pub(crate) struct ExactSums {
    out_fmt: FloatFormat,
    rounder: Rounder,
}

impl ExactSums {
    pub(crate) fn new(out_fmt: &FloatFormat) -> Self {
        ExactSums {
            out_fmt: *out_fmt,
            rounder: Rounder::new(out_fmt),
        }
    }

    /// `out[i]` = the rounded exact sum of `partials[t * stride + i]` over `t < terms`, in
    /// blocks of [`SUM_BLOCK`] elements.
    pub(crate) fn run<T: Copy + Into<f64>>(
        &self,
        partials: &[T],
        stride: usize,
        terms: usize,
        out: &mut [f64],
    ) {
        for (blk, out) in out.chunks_mut(SUM_BLOCK).enumerate() {
            let partials = &partials[blk * SUM_BLOCK..];
            let mut err = [0.0f64; SUM_BLOCK];
            let err = &mut err[..out.len()];
            out.fill(0.0);
            for t in 0..terms {
                Self::add(out, err, &partials[t * stride..][..out.len()]);
            }
            self.finish(out, err, |i, slow| {
                for t in 0..terms {
                    slow.add(partials[t * stride + i].into());
                }
            });
        }
    }

    /// Add one term to every running sum (`s[i] += terms[i]`), and the two-sum error of that
    /// addition to `err[i]` in absolute value.
    #[inline]
    pub(crate) fn add<T: Copy + Into<f64>>(s: &mut [f64], err: &mut [f64], terms: &[T]) {
        for ((s, e), p) in s.iter_mut().zip(err.iter_mut()).zip(terms) {
            let (a, p): (f64, f64) = (*s, (*p).into());
            let sum = a + p;
            let bb = sum - a;
            *e += ((a - (sum - bb)) + (p - bb)).abs();
            *s = sum;
        }
    }

    /// Round exact sums in place (an exact zero is +0, as the integer accumulator has no signed
    /// zero).
    pub(crate) fn round(&self, s: &mut [f64]) {
        match self.rounder.nearest_even() {
            Some(f) => f.round_sums(s),
            None => s.iter_mut().for_each(|s| *s = self.round_slow(*s)),
        }
    }

    /// `out[k]` = the exact sum `a[k] * (w[k] * x)` rounded (as [`ExactSums::round`]), in one
    /// pass straight into the output.
    pub(crate) fn round_scaled_ints(
        &self,
        a: &[i32],
        w: &[f64],
        x: f64,
        out: &mut [MaybeUninit<f64>],
    ) {
        match self.rounder.nearest_even() {
            Some(f) => f.round_scaled_ints(a, w, x, out),
            None => {
                for ((o, &a), &w) in out.iter_mut().zip(a).zip(w) {
                    o.write(self.round_slow(f64::from(a) * (w * x)));
                }
            }
        }
    }

    /// One exact sum rounded without the nearest-even loops (away or toward zero by their
    /// rounder, else by the format's reference); zero is +0.
    fn round_slow(&self, s: f64) -> f64 {
        if s == 0.0 { 0.0 } else { self.rounder.round(s) }
    }

    /// Round every running sum in place. An element whose errors are not all zero is rounded
    /// from its error bound where that decides it ([`ExactSums::bounded`]); the rest are
    /// summed again: `terms(i, slow)` adds its terms to the empty `slow`.
    pub(crate) fn finish(
        &self,
        s: &mut [f64],
        err: &[f64],
        mut terms: impl FnMut(usize, &mut Expansion),
    ) {
        let inexact: Vec<(usize, Option<f64>)> = (s.iter().zip(err).enumerate())
            .filter(|(_, (_, e))| **e != 0.0)
            .map(|(i, (s, e))| (i, self.bounded(*s, *e)))
            .collect();
        self.round(s);
        let mut slow = Expansion::new();
        for (i, bounded) in inexact {
            s[i] = bounded.unwrap_or_else(|| {
                slow.clear();
                terms(i, &mut slow);
                round_with(&slow, &self.rounder, &self.out_fmt)
            });
        }
    }

    /// The rounded exact sum from its running sum `s` and `err`, the sum of the absolute
    /// two-sum errors, where that decides it ([`round_within`]).
    fn bounded(&self, s: f64, err: f64) -> Option<f64> {
        // `err` summed in f64 falls short of the exact sum of its terms by at most a relative
        // `k * 2^-53` after k additions: 2^-20 covers any k below 2^33.
        let bound = err * (1.0 + pow2(-20));
        round_within(&self.rounder, &self.out_fmt, s, bound)
    }
}
/// `[rows, cols]` row-major to `[cols, rows]`, in cache-sized tiles.
fn transpose(v: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    transpose_map(v, rows, cols, |x| x)
}

/// `[rows, cols]` row-major to `[cols, rows]` with `f` applied to every value, in cache-sized
/// tiles.
pub fn transpose_map<T: Copy + Default>(
    v: &[f64],
    rows: usize,
    cols: usize,
    f: impl Fn(f64) -> T,
) -> Vec<T> {
    const B: usize = 32;
    let mut out = vec![T::default(); v.len()];
    for r0 in (0..rows).step_by(B) {
        for c0 in (0..cols).step_by(B) {
            for r in r0..(r0 + B).min(rows) {
                for c in c0..(c0 + B).min(cols) {
                    out[c * rows + r] = f(v[r * cols + c]);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::matvec_exact;
    use super::super::tests::{spec, tiles};
    use super::*;
    use nnp_grammar::Accumulation;

    #[test]
    fn tiles_fifty_seven_binades_apart_sum_exactly() {
        // N = 4, one output row, two column tiles; every value is a fixed point of
        // bfp(mant = 8, exp_bits = 5) (x tile 0: E = 15, q = [64, 1]; x tile 1: E clamps to -15,
        // lsb 2^-21, q = 1; w tile 0 row 0: E = 0, q = [64, 2]).
        // Tile 0 partial: 2^15 * 1 + 2^9 * 2^-5 = 32784, exactly the fp16 tie between 32768 and
        // 32800 (spacing 32). Tile 1 partial: 2^-21 * 2^-21 = 2^-42, 57 binades below 2^15.
        // Exact sum 32784 + 2^-42 is above the tie: 32800. A plain f64 sum gives 32784 (the
        // 2^-42 is lost), which rounds to the even 32768.
        let n = 4;
        let t = 2f64.powi(-21);
        let x = [2f64.powi(15), 2f64.powi(9), 0.0, 0.0, t, 0.0, 0.0, 0.0];
        let mut dense = vec![0.0; n * 2 * n];
        dense[0] = 1.0;
        dense[1] = 2f64.powi(-5);
        dense[4] = t;
        let w = tiles(&dense, 1, 2, n);
        assert_eq!(
            FloatFormat::FP16.round(32784.0 + t * t),
            32768.0,
            "f64 loses the tail"
        );
        for (sign, want) in [(1.0, 32800.0), (-1.0, -32800.0)] {
            let xs: Vec<f64> = x.iter().map(|v| v * sign).collect();
            let s = spec(1, 2, n, Accumulation::Exact);
            let y = matvec_exact(&s, &xs, 1, &w);
            assert_eq!(y[0], want);
            // Rows 1..3 have zero weights: +0.
            assert_eq!(y[1].to_bits(), 0);
            // The fast path (per-tile partials, then the expansion) agrees.
            // Partials are [chunks = 2, rows * n = 4, b = 1]; only output row 0 is non-zero.
            let mut p = vec![0.0; 2 * 4];
            p[0] = sign * 32784.0;
            p[4] = sign * t * t;
            assert_eq!(sum_partials(&s, n, 1, &p, 1)[0], want);
        }
    }

    #[test]
    fn the_small_tile_decides_a_tie() {
        // Tile 0 partial: 2048 + 1 = 2049 (a tie in fp16: 2048 or 2050). Tile 1 adds 2^-20:
        // the exact sum is above the tie, so the answer is 2050. Rounding tile 0 first (fp16-seq)
        // gives 2048, and 2048 + 2^-20 -> 2048.
        let p = [2049.0, 2f64.powi(-20)];
        let mut partials = vec![0.0; 2];
        partials[0] = p[0];
        partials[1] = p[1];
        let exact = sum_partials(&spec(1, 2, 1, Accumulation::Exact), 1, 1, &partials, 1);
        assert_eq!(exact[0], 2050.0);
        let seq16 = sum_partials(&spec(1, 2, 1, Accumulation::Fp16Seq), 1, 1, &partials, 1);
        assert_eq!(seq16[0], 2048.0);
        // fp32-seq: 2049 and 2^-20 are f32 values; 2049 + 2^-20 in f32 (spacing 2^-12 at
        // 2^11) gives 2049, then fp16: the tie -> 2048.
        let seq32 = sum_partials(&spec(1, 2, 1, Accumulation::Fp32Seq), 1, 1, &partials, 1);
        assert_eq!(seq32[0], 2048.0);
        // Without the tiny tile the exact answer is the tie itself: 2048.
        let exact = sum_partials(&spec(1, 2, 1, Accumulation::Exact), 1, 1, &[2049.0, 0.0], 1);
        assert_eq!(exact[0], 2048.0);
    }

    /// The `-seq` modes on chunked partials, two chunks a tile and two slice pairs a chunk:
    /// each tile partial is the exact sum of its four terms, rounded once. Layout `[pairs =
    /// 2, chunks = 4, rows * n = 4, b = 2]`; element (0, 0) has its terms below, (0, 1)
    /// their negatives, the rest `-0` terms.
    #[test]
    fn seq_partials_of_chunks_and_pairs_by_hand() {
        let tiny = 2f64.powi(-30);
        // [chunk][pair] of element (0, 0). Tile 0 (chunks 0, 1): 2048 + 1 + 2^-30, above
        // fp16's tie 2049. Tile 1 (chunks 2, 3): 1 + 2^-30.
        let terms = [[2048.0, 0.0], [1.0, tiny], [1.0, 0.0], [0.0, tiny]];
        let mut parts = vec![-0.0f64; 2 * 4 * 4 * 2];
        for (c, pair) in terms.iter().enumerate() {
            for (p, v) in pair.iter().enumerate() {
                parts[((p * 4 + c) * 4) * 2] = *v;
                parts[((p * 4 + c) * 4) * 2 + 1] = -*v;
            }
        }
        let run = |acc| sum_partials(&spec(1, 2, 4, acc), 2, 2, &parts, 2);
        // fp16-seq: tile 0 -> 2050, tile 1 -> 1; 2050 + 1 = 2051 is a tie -> 2052 (even).
        // fp32-seq: 2049 (f32's spacing at 2^11 is 2^-12) + 1 = 2050. exact: 2050 + 2^-29 ->
        // 2050. Output [b, rows * n]: item 1 at 4.
        for (acc, want) in [
            (Accumulation::Fp16Seq, 2052.0),
            (Accumulation::Fp32Seq, 2050.0),
            (Accumulation::Exact, 2050.0),
        ] {
            let y = run(acc);
            assert_eq!((y[0], y[4]), (want, -want), "{acc:?}");
            // Exact zeros are +0 whatever the terms' signs.
            for i in [1, 2, 3, 5, 6, 7] {
                assert_eq!(y[i].to_bits(), 0, "{acc:?} element {i}");
            }
        }
    }
    /// The fast running-sum path of `exact` accumulation against hand-derived results, where
    /// a plain f64 sum would be wrong. Layout `[terms = 3, rows * n = 2, b = 2]`, element
    /// `j = r * 2 + bi`.
    #[test]
    fn exact_sums_of_partials_by_hand() {
        let s = spec(1, 3, 2, Accumulation::Exact);
        let big = 2f64.powi(60);
        // Per element (r, bi): its three partials.
        let cols: [[f64; 3]; 4] = [
            // (0, 0): 2^60 + 1 - 2^60 = 1 (a plain f64 sum gives 0).
            [big, 1.0, -big],
            // (0, 1): 65504 + 8 + 8 = 65520, the fp16 overflow tie -> inf.
            [65504.0, 8.0, 8.0],
            // (1, 0): -0 + -0 + -0: an exact zero is +0.
            [-0.0, -0.0, -0.0],
            // (1, 1): 1 + 2^-11 + 2^-60: just above the tie of 1 and 1 + 2^-10 -> 1 + 2^-10
            // (a plain f64 sum drops 2^-60 and ties to 1).
            [1.0, 2f64.powi(-11), 2f64.powi(-60)],
        ];
        let mut parts = vec![0.0f64; 12];
        for (j, c) in cols.iter().enumerate() {
            for (t, v) in c.iter().enumerate() {
                parts[t * 4 + j] = *v;
            }
        }
        let y = sum_partials(&s, 2, 1, &parts, 2);
        // Output [b, rows * n]: y[bi * 2 + r].
        assert_eq!(y[0], 1.0);
        assert_eq!(y[2], f64::INFINITY);
        assert_eq!(y[1].to_bits(), 0);
        assert_eq!(y[3], 1.0 + 2f64.powi(-10));
        // f32 partials take the same path: 3 + 4 + 5 = 12 in every element.
        let p32 = vec![
            3.0f32, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0, 4.0, 5.0, 5.0, 5.0, 5.0,
        ];
        assert_eq!(sum_partials(&s, 2, 1, &p32, 2), vec![12.0; 4]);
        // NaN poisons its element only.
        let mut pn = parts.clone();
        pn[4] = f64::NAN;
        let y = sum_partials(&s, 2, 1, &pn, 2);
        assert!(y[0].is_nan());
        assert_eq!(y[3], 1.0 + 2f64.powi(-10));
    }
}
