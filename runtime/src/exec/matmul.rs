//! The exact tiled matrix-vector product.
//!
//! **Why a plain f64 matmul is exact per tile.** With BFP blocks that cover a whole native tile
//! (the default), every element of the vector tile `j` is `qx * 2^ex` and every element of row
//! `r` of matrix tile `(i, j)` is `qw * 2^ew`, with one shared `ex` and `ew` and integer
//! mantissas `|q| < 2^(m-1)`. Each product is an integer multiple of `2^(ex + ew)` below
//! `2^(2m-2)` of it, and so is every partial sum of N of them, below `N * 2^(2m-2)` units. While
//! that bound fits 53 bits every f64 addition on the way is exact, in any order, with or
//! without FMA: the per-tile partials a BLAS returns are the exact integer sums. The partials of
//! different tiles have unrelated exponents, so they are summed with an error-free expansion
//! ([`ExactSum`]) and rounded once.
//!
//! The same argument holds for any format whose values, inside aligned chunks of `k` lanes, are
//! integer multiples of one power of two with a bounded integer ([`Grid`]): [`exact_chunk`]
//! finds the largest such `k` for a pair of formats, the BLAS computes per-chunk partials, and
//! the expansion sums them. When the formats prove nothing (float formats, fine blocks), the
//! data itself is split into [`slices`] that obey the bound pairwise (one matmul per slice
//! pair); non-finite data takes [`matvec_exact`], every product exact by
//! [`two_prod`](super::exact::two_prod).

use super::exact::ExactSum;
use super::quant::Rounder;
use nnp_grammar::Accumulation;
use nnp_numerics::{FloatFormat, Format, IntScale, Rounding, pow2};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Proven chunks smaller than this are not worth a BLAS call of their own; the slices run instead.
pub const MIN_CHUNK: usize = 4;

/// What a format's quantized values look like inside one run of N: every aligned block of
/// `block` lanes holds integer multiples of one power of two `2^e` with magnitude below
/// `2^bits * 2^e`, where `min_exp <= e` and all magnitudes are below `2^max_exp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub block: usize,
    pub bits: u32,
    pub min_exp: i32,
    pub max_exp: i32,
}

/// Every [`Grid`] a format's values fit at native dimension `n` (a float format has two: each
/// value on its own, and the whole run on the grid of its smallest subnormal).
pub fn grids(fmt: &Format, n: usize) -> Vec<Grid> {
    match fmt {
        Format::Float(f) => {
            let one = float_grid(f);
            let mut run = one;
            run.block = n;
            run.bits = (one.max_exp - one.min_exp) as u32;
            vec![one, run]
        }
        _ => grid(fmt, n).into_iter().collect(),
    }
}

fn grid(fmt: &Format, n: usize) -> Option<Grid> {
    match fmt {
        Format::Bfp(b) => {
            let (lo, hi) = b.exp_range();
            let m = b.mant as i32;
            Some(Grid {
                block: b.block.len(n),
                // |q| <= 2^(m-1) - 1, or 2^(m-1) with the full two's complement range.
                bits: if b.full_range { b.mant } else { b.mant - 1 },
                min_exp: lo - (m - 2),
                max_exp: hi + 2,
            })
        }
        Format::Mx(mx) => {
            let e = mx.elem.mini();
            // Element grid: multiples of 2^(emin - mant_bits) up to max_sig * 2^(emax - mant_bits),
            // scaled by the E8M0 scale 2^s, s in [-127, 127].
            let sig_bits = 64 - e.max_sig.leading_zeros();
            Some(Grid {
                block: mx.block.len(n),
                bits: (e.emax - e.emin) as u32 + sig_bits,
                min_exp: -127 + e.emin - e.mant_bits as i32,
                max_exp: 127 + e.emax + 1,
            })
        }
        Format::Int(f) if f.scale == IntScale::Pow2 => Some(Grid {
            block: n,
            bits: f.bits - 1,
            min_exp: -200,
            max_exp: 200,
        }),
        Format::Fixed(f) => Some(Grid {
            block: n,
            bits: f.int + f.frac,
            min_exp: -(f.frac as i32),
            max_exp: f.int as i32,
        }),
        Format::Float(f) => Some(float_grid(f)),
        _ => None,
    }
}

/// A single float value: one integer significand times a power of two.
fn float_grid(f: &FloatFormat) -> Grid {
    let bias = f.bias();
    Grid {
        block: 1,
        bits: f.mant_bits + 1,
        min_exp: 1 - bias - f.mant_bits as i32,
        max_exp: bias + 1,
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The largest chunk `k` (dividing N, aligned with both formats' blocks) whose partial dot
/// products are exact in f64 whatever the data, or `None` when not even one product is.
pub fn exact_chunk(vec_fmt: &Format, mat_fmt: &Format, n: usize) -> Option<usize> {
    best_chunk(vec_fmt, mat_fmt, n, &F64_BOUNDS)
}

/// As [`exact_chunk`], for an f32 matmul: every value converts to f32 exactly and every
/// per-chunk partial (products and their sums, FMA or not, any order) is exact in f32. Twice
/// the BLAS throughput of f64 and half the memory traffic, for formats of up to ~8-bit
/// mantissas (BFP 8 at N = 128: 7 + 7 + 7 = 21 <= 24 bits).
pub fn exact_chunk_f32(vec_fmt: &Format, mat_fmt: &Format, n: usize) -> Option<usize> {
    best_chunk(vec_fmt, mat_fmt, n, &F32_BOUNDS)
}

/// What a floating-point type holds exactly: integers of `bits` bits times `2^e`, with the
/// unit `e >= min_unit` and magnitudes below `2^max_exp` (values and single products), sums
/// below `2^max_sum`.
struct Bounds {
    bits: u32,
    min_unit: i32,
    max_exp: i32,
    max_sum: i32,
}

const F64_BOUNDS: Bounds = Bounds {
    bits: 53,
    min_unit: -1074 + 2,
    max_exp: 1000,
    max_sum: 1023,
};

/// f32: 24-bit significands, subnormal quantum 2^-149, overflow at 2^128 (margins kept).
const F32_BOUNDS: Bounds = Bounds {
    bits: 24,
    min_unit: -149,
    max_exp: 120,
    max_sum: 127,
};

fn best_chunk(vec_fmt: &Format, mat_fmt: &Format, n: usize, t: &Bounds) -> Option<usize> {
    let mut best = None;
    for gx in grids(vec_fmt, n) {
        for gw in grids(mat_fmt, n) {
            best = best.max(chunk_of(&gx, &gw, n, t));
        }
    }
    best
}

fn chunk_of(gx: &Grid, gw: &Grid, n: usize, t: &Bounds) -> Option<usize> {
    // Every value must be exact in the type on its own (trivial for f64)...
    let fits = |g: &Grid| g.bits <= t.bits && g.min_exp >= t.min_unit && g.max_exp <= t.max_exp;
    if !fits(gx) || !fits(gw) {
        return None;
    }
    // ...and products (and their sums) must stay clear of underflow and overflow.
    if gx.min_exp + gw.min_exp < t.min_unit || gx.max_exp + gw.max_exp > t.max_exp {
        return None;
    }
    let mut k = gcd(gcd(gx.block, n), gcd(gw.block, n));
    // Largest power-of-two fraction of k whose sum bound fits: bits_x + bits_w + ceil(log2 k).
    loop {
        let log = usize::BITS - (k - 1).leading_zeros();
        if gx.bits + gw.bits + log <= t.bits && gx.max_exp + gw.max_exp + log as i32 <= t.max_sum {
            return Some(k);
        }
        if k == 1 || k % 2 == 1 {
            return None;
        }
        k /= 2;
    }
}

/// True when a plain f64 dot product of one N-lane tile of `vec_fmt` values with one tile row
/// of `mat_fmt` values is exact for every input (docs/numerics.md).
pub fn tile_partial_is_exact(vec_fmt: &Format, mat_fmt: &Format, n: usize) -> bool {
    exact_chunk(vec_fmt, mat_fmt, n) == Some(n)
}

/// The shape and numerics of one `TiledMatVec`.
#[derive(Clone, Copy, Debug)]
pub struct MatVec {
    pub rows: usize,
    pub cols: usize,
    pub n: usize,
    pub accumulation: Accumulation,
    pub output: FloatFormat,
}

/// The format a `-seq` accumulation mode adds its tile partials in.
pub(crate) fn seq_format(accumulation: Accumulation) -> Option<FloatFormat> {
    match accumulation {
        Accumulation::Exact => None,
        Accumulation::Fp32Seq => Some(FloatFormat::FP32),
        Accumulation::Fp16Seq => Some(FloatFormat::FP16),
    }
}

/// The `-seq` arithmetic ([`seq_add`]) on exact tile partials:
/// `tiles` is `[cols][m]`, tile column j's partial of each of `m` elements. Each partial is
/// rounded to the sequence format (an exact zero as `+0`, as [`ExactSum`] sums it), added in
/// tile order in that format ([`seq_format`]), and the result rounded to `output`.
pub(crate) fn seq_sums(
    seq: &FloatFormat,
    output: &FloatFormat,
    tiles: &[f64],
    m: usize,
) -> Vec<f64> {
    let seq = Rounder::new(seq);
    let mut p = vec![0.0f64; m];
    seq_add(&seq, output, tiles.len() / m.max(1), m, |j, rounded| {
        // `x + 0.0` is `x`, but `+0` for `-0`.
        p.iter_mut()
            .zip(&tiles[j * m..][..m])
            .for_each(|(p, x)| *p = x + 0.0);
        seq.round_all(&p, rounded);
    })
}

/// The `-seq` sum of `cols` tile partials of `m` elements each, `partial(j, out)` writing
/// tile j's partials rounded by `seq` already: added in tile order in that format, and the
/// result rounded to `output`.
fn seq_add(
    seq: &Rounder,
    output: &FloatFormat,
    cols: usize,
    m: usize,
    mut partial: impl FnMut(usize, &mut [f64]),
) -> Vec<f64> {
    let (mut acc, mut p, mut q) = (vec![0.0f64; m], vec![0.0f64; m], vec![0.0f64; m]);
    for j in 0..cols {
        if j == 0 {
            partial(j, &mut acc);
        } else {
            partial(j, &mut q);
            // Two values of a <= 25-bit format: one f64 addition and one rounding to nearest
            // is correct.
            p.iter_mut()
                .zip(acc.iter().zip(&q))
                .for_each(|(p, (a, q))| *p = a + q);
            seq.round_all(&p, &mut acc);
        }
    }
    Rounder::new(output).round_all(&acc, &mut p);
    p
}

/// Sum per-chunk partials: `partials` is `[pairs, chunks, rows * n, b]` (`chunks =
/// cols * n / k`; `pairs` slice products per chunk, see [`slices`]); the result `[b, rows * n]`.
/// The partials may be f32 (from an f32 matmul proven exact by [`exact_chunk_f32`]) or f64:
/// both widen to f64 exactly.
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
            let mut sum = ExactSum::new();
            let y = seq_add(&rounder, &spec.output, spec.cols, rn, |j, tile| {
                for (r, t) in tile.iter_mut().enumerate() {
                    for c in j * per_tile..(j + 1) * per_tile {
                        for p in 0..pairs {
                            sum.add(partials[p * pair_len + (c * rn + r) * b + bi].into());
                        }
                    }
                    *t = sum.round_with(&rounder, &seq);
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
/// one rounding finishes it, as [`ExactSum::round_to`] does for a one-component expansion. An
/// element with any non-zero (or NaN) error is summed again with [`ExactSum`]. The loops run
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
        mut terms: impl FnMut(usize, &mut ExactSum),
    ) {
        let inexact: Vec<(usize, Option<f64>)> = (s.iter().zip(err).enumerate())
            .filter(|(_, (_, e))| **e != 0.0)
            .map(|(i, (s, e))| (i, self.bounded(*s, *e)))
            .collect();
        self.round(s);
        let mut slow = ExactSum::new();
        for (i, bounded) in inexact {
            s[i] = bounded.unwrap_or_else(|| {
                slow.clear();
                terms(i, &mut slow);
                slow.round_with(&self.rounder, &self.out_fmt)
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

/// The rounding of a value known to lie within `bound` of `s`, where every value of that
/// interval rounds to the same bits; else `None`.
pub(crate) fn round_within(
    rounder: &Rounder,
    fmt: &FloatFormat,
    s: f64,
    bound: f64,
) -> Option<f64> {
    if !monotone(fmt) || !bound.is_finite() {
        return None;
    }
    let (lo, hi) = enclosure(s, bound);
    decided(rounder.round(lo), rounder.round(hi))
}

/// Every rounding mode but the stochastic one is monotone, and keeps the sign (a negative
/// value that rounds to zero is -0): where both ends of an interval round to the same bits,
/// they lie on one side of zero, and every value between them rounds to those bits (an exact
/// zero, +0 by the accumulator's rule, only where the ends do).
pub(crate) fn monotone(fmt: &FloatFormat) -> bool {
    !matches!(fmt.rounding, Rounding::Stochastic { .. })
}

/// Computed ends `(lo, hi)` of an interval holding every value within `bound` of `s` where
/// `bound < |s|` (wider intervals reach both signs, and never round alike): widened past the
/// rounding of the two additions by `2^-50 |s|`, and by `2^-1060` where the sum is subnormal.
/// NaN for non-finite `s` or `bound`.
#[inline]
fn enclosure(s: f64, bound: f64) -> (f64, f64) {
    let widened = bound + s.abs() * pow2(-50) + pow2(-1060);
    (s - widened, s + widened)
}

/// The rounding decided by an [`enclosure`] whose ends round to `a` and `b` ([`monotone`]);
/// never by NaN ends (a NaN or overflowing bound: finite values never round to NaN).
#[inline]
fn decided(a: f64, b: f64) -> Option<f64> {
    (!a.is_nan() && a.to_bits() == b.to_bits()).then_some(a)
}

/// An upper bound of the Euclidean norm of `v`: 0 only for a zero vector, NaN or infinite
/// where `v` holds a NaN or an infinity. The squares' sum in f64 falls short of the exact one
/// by at most a relative `len * 2^-53`, plus at most `2^-1075` per square that underflows:
/// `2^-20` (any `len` below 2^30) and `len * 2^-1074` cover both, and the second `2^-20` the
/// roundings of the square root and the products.
pub fn norm_bound(v: &[f64]) -> f64 {
    let squares: f64 = v.iter().map(|x| x * x).sum();
    if squares == 0.0 && v.iter().all(|x| *x == 0.0) {
        return 0.0;
    }
    let slack = 1.0 + pow2(-20);
    (squares * slack + v.len() as f64 * pow2(-1074)).sqrt() * slack
}

/// `exact` accumulation from one plain f64 matmul: `y` (`[b, R]`) holds `x W^T` as any f64
/// matmul sums it (`x` is `[b, K]`, `w` `[R, K]`, and every product `x_k w_k` is exact in
/// f64); `w_norms` holds [`norm_bound`] of each row of `w`. Each element is rounded in place
/// to `spec.output` (`round_sums`).
pub fn round_bounded(spec: &MatVec, x: &[f64], w: &[f64], w_norms: &[f64], y: &mut [f64]) {
    let rounder = Rounder::new(&spec.output);
    let k = w.len().checked_div(w_norms.len()).unwrap_or(0);
    y.par_chunks_mut(w_norms.len().max(1))
        .zip(x.par_chunks(k.max(1)))
        .for_each(|(y, x)| round_sums(&rounder, &spec.output, x, w, w_norms, y));
}

/// `-seq` accumulation (`seq`, of `seq_format`) from one f64 matmul per tile column: `y`
/// (`[cols, b, R]`) holds each tile's `x_j W_j^T` as any f64 matmul sums it (`x` is `[b, cols
/// * n]`, `w` `[cols, R, n]`, every product exact in f64); `w_norms` (`[cols, R]`) holds
/// [`norm_bound`] of each tile row. Each tile partial is rounded to `seq` (`round_sums`),
/// then they are added as `seq_sums` adds them; the result is `[b, R]`.
pub fn round_bounded_seq(
    spec: &MatVec,
    seq: &FloatFormat,
    x: &[f64],
    w: &[f64],
    w_norms: &[f64],
    y: &mut [f64],
) -> Vec<f64> {
    let rounder = Rounder::new(seq);
    let (n, cols, rn) = (spec.n, spec.cols, spec.rows * spec.n);
    let b = x.len().checked_div(cols * n).unwrap_or(0);
    y.par_chunks_mut(rn.max(1)).enumerate().for_each(|(e, y)| {
        let (j, bi) = (e / b.max(1), e % b.max(1));
        let x = &x[bi * cols * n + j * n..][..n];
        let w = &w[j * rn * n..][..rn * n];
        round_sums(&rounder, seq, x, w, &w_norms[j * rn..][..rn], y);
    });
    let m = b * rn;
    seq_add(&rounder, &spec.output, cols, m, |j, out| {
        out.copy_from_slice(&y[j * m..][..m]);
    })
}

/// Round in place each `y[r]`, a plain f64 sum of the K exact products of `x` and row r of `w`
/// (`[R, K]`, `w_norms` its rows' [`norm_bound`]), to the exact sum's rounding.
///
/// K exact products summed in any order, with or without FMA, are within `gamma_K * sum |x_k
/// w_k|` of their exact sum (`gamma_K = K u / (1 - K u) <= K 2^-52`), and by Cauchy-Schwarz
/// `sum |x_k w_k| <= |x| |w_r|`. Where every value of that interval rounds alike
/// ([`round_within`]), that is the exact sum's rounding; the rest (sums that cancel to near
/// zero, sums near a rounding boundary, non-finite data) are summed again ([`round_dot`]).
fn round_sums(
    rounder: &Rounder,
    fmt: &FloatFormat,
    x: &[f64],
    w: &[f64],
    w_norms: &[f64],
    y: &mut [f64],
) {
    let (k, rn) = (x.len(), y.len());
    // `gamma_K`, and 2^-19 for the rounding of the bound's two products.
    let gamma = k as f64 * pow2(-52) * (1.0 + pow2(-19));
    let xn = norm_bound(x);
    // Both ends of every element's interval, rounded in two vector passes.
    let (mut lo, mut hi) = (vec![0.0f64; rn], vec![0.0f64; rn]);
    for (((lo, hi), y), wn) in lo.iter_mut().zip(&mut hi).zip(&*y).zip(w_norms) {
        (*lo, *hi) = enclosure(*y, gamma * xn * wn);
    }
    let (mut a, mut b) = (vec![0.0f64; rn], vec![0.0f64; rn]);
    rounder.round_all(&lo, &mut a);
    rounder.round_all(&hi, &mut b);
    let (mut slow, monotone) = (ExactSum::new(), monotone(fmt));
    for (r, (y, wrow)) in y.iter_mut().zip(w.chunks(k.max(1))).enumerate() {
        let wn = w_norms[r];
        // Every product an exact zero (no NaN from 0 * inf): the sum is +0.
        *y = if (xn == 0.0 && wn.is_finite()) || (wn == 0.0 && xn.is_finite()) {
            0.0
        } else if let Some(v) = decided(a[r], b[r]).filter(|_| monotone) {
            v
        } else {
            round_dot(rounder, fmt, x, wrow, &mut slow)
        };
    }
}

/// The rounded exact sum of the products `x_k w_k`, each exact in f64: a compensated sum
/// (Ogita, Rump and Oishi's Sum2) decides it where its error bound does ([`round_within`]),
/// else an exact sum in `slow`. Every two-sum of the running sum `s` is exact, so the exact
/// sum is `s + sum e_k`; the `e_k` summed in f64 are within `gamma_K sum |e_k|` of theirs, and
/// the last addition within `2^-53 |r|`.
fn round_dot(
    rounder: &Rounder,
    fmt: &FloatFormat,
    x: &[f64],
    w: &[f64],
    slow: &mut ExactSum,
) -> f64 {
    let (mut s, mut c, mut e) = (0.0f64, 0.0f64, 0.0f64);
    for (a, b) in x.iter().zip(w) {
        let (t, err) = super::exact::two_sum(s, a * b);
        s = t;
        c += err;
        e += err.abs();
    }
    if e == 0.0 && s.is_finite() {
        // Every addition exact: `s` is the sum (an exact zero is +0).
        return if s == 0.0 { 0.0 } else { rounder.round(s) };
    }
    let r = s + c;
    let k = x.len() as f64;
    let bound = (k * pow2(-52) * e + pow2(-52) * r.abs()) * (1.0 + pow2(-19));
    round_within(rounder, fmt, r, bound).unwrap_or_else(|| {
        slow.clear();
        (x.iter().zip(w)).for_each(|(a, b)| slow.add_product(*a, *b));
        slow.round_with(rounder, fmt)
    })
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

/// Bits per slice for dot products of `n` terms: `2 beta + ceil(log2 n) <= 53`.
pub fn slice_bits(n: usize) -> u32 {
    let log = usize::BITS - (n.max(1) - 1).leading_zeros();
    (53 - log.min(51)) / 2
}

/// Most slices [`slices`] makes before giving up (then the element-wise path runs).
const MAX_SLICES: usize = 16;

/// Split every run of `len` values into slices (an error-free splitting in the manner of
/// Ozaki's scheme): with `E` the run's top exponent, slice `s` holds integer multiples of
/// `2^(E + 1 - (s+1) beta)` of magnitude below `2^beta` such units, and the slices of a value
/// add up to it exactly. A dot product of one x slice with one w slice over `len` lanes then
/// stays within `2 beta + log2 len <= 53` bits: exact in f64 in any order. `None` when a value
/// is not finite, or the data needs more than `MAX_SLICES` slices or units near f64
/// underflow.
pub fn slices(v: &[f64], len: usize, beta: u32) -> Option<Vec<Vec<f64>>> {
    if v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let len = len.max(1);
    // Top exponent + 1 of every run (None: an all-zero run).
    let tops: Vec<Option<i32>> = v
        .chunks(len)
        .map(|run| {
            let m = run.iter().fold(0.0f64, |a, x| a.max(x.abs()));
            (m != 0.0).then(|| nnp_numerics::floor_log2(m) + 1)
        })
        .collect();
    let mut rem = v.to_vec();
    let mut out = Vec::new();
    while rem.iter().any(|x| *x != 0.0) {
        let s = out.len() as i32 + 1;
        if out.len() == MAX_SLICES {
            return None;
        }
        let mut slice = vec![0.0; v.len()];
        for ((run, sl), top) in rem.chunks_mut(len).zip(slice.chunks_mut(len)).zip(&tops) {
            let Some(top) = top else { continue };
            let unit = top - s * beta as i32;
            if unit < -900 {
                return None;
            }
            let (down, up) = (2f64.powi(-unit), 2f64.powi(unit));
            for (r, o) in run.iter_mut().zip(sl.iter_mut()) {
                // Scaling by powers of two and truncating are exact; so is the remainder.
                // `|r * down| < 2^beta`, so the i64 conversion truncates it (one instruction;
                // `trunc` is a libm call here). A zero comes out `+0.0`: a product with it is
                // an exact zero, whose sum is `+0` whatever the zeros' signs.
                *o = ((*r * down) as i64 as f64) * up;
                *r -= *o;
            }
        }
        out.push(slice);
    }
    if out.is_empty() {
        out.push(vec![0.0; v.len()]);
    }
    Some(out)
}

/// The slow exact path: every product exact ([`two_prod`](super::exact::two_prod)), summed in
/// an expansion. `x` is `[b, cols * n]`, `w` the stack `[rows * cols, n, n]`; returns
/// `[b, rows * n]`.
pub fn matvec_exact(spec: &MatVec, x: &[f64], b: usize, w: &[f64]) -> Vec<f64> {
    let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
    let rn = rows * n;
    let seq = seq_format(spec.accumulation).map(|f| (Rounder::new(&f), f));
    let output = Rounder::new(&spec.output);
    let mut out = vec![0.0; b * rn];
    out.par_chunks_mut(n.max(1))
        .enumerate()
        .for_each(|(idx, otile)| {
            let (bi, i) = (idx / rows, idx % rows);
            let xb = &x[bi * cols * n..(bi + 1) * cols * n];
            let mut sum = ExactSum::new();
            // Adds the products of tile row `r` of tile column `j`.
            let add_tile = |sum: &mut ExactSum, j: usize, r: usize| {
                let tile = &w[((i * cols + j) * n + r) * n..][..n];
                for (a, v) in tile.iter().zip(&xb[j * n..(j + 1) * n]) {
                    sum.add_product(*a, *v);
                }
            };
            let round = |sum: &mut ExactSum, rounder: &Rounder, fmt: &FloatFormat| {
                let v = sum.round_with(rounder, fmt);
                sum.clear();
                v
            };
            match &seq {
                None => {
                    for (r, o) in otile.iter_mut().enumerate() {
                        (0..cols).for_each(|j| add_tile(&mut sum, j, r));
                        *o = round(&mut sum, &output, &spec.output);
                    }
                }
                Some((rounder, f)) => {
                    let y = seq_add(rounder, &spec.output, cols, n, |j, tile| {
                        for (r, t) in tile.iter_mut().enumerate() {
                            add_tile(&mut sum, j, r);
                            *t = round(&mut sum, rounder, f);
                        }
                    });
                    otile.copy_from_slice(&y);
                }
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(lit: &str) -> Format {
        lit.parse().expect("valid format")
    }

    #[test]
    fn exactness_from_format_parameters() {
        let bfp8 = f("bfp(mant = 8, exp_bits = 5)");
        // 7 + 7 bits of mantissa magnitude, + 7 bits of sum growth at N = 128: 21 <= 53.
        assert!(tile_partial_is_exact(&bfp8, &bfp8, 128));
        assert!(tile_partial_is_exact(&bfp8, &bfp8, 4096));
        // 24-bit mantissas: 23 + 23 + 7 = 53 fits at N = 128, not at 256.
        let bfp24 = f("bfp(mant = 24, exp_bits = 5)");
        assert!(tile_partial_is_exact(&bfp24, &bfp24, 128));
        assert!(!tile_partial_is_exact(&bfp24, &bfp24, 256));
        assert_eq!(exact_chunk(&bfp24, &bfp24, 256), Some(128));
        // Sub-tile blocks: exact only per block.
        let bfp_b16 = f("bfp(mant = 8, block = 16, exp_bits = 8)");
        assert!(!tile_partial_is_exact(&bfp_b16, &bfp8, 128));
        assert_eq!(exact_chunk(&bfp_b16, &bfp8, 128), Some(16));
        // fp16 values span 40 bits (2^-24 .. 2^16): no tile sum is exact, a single product is.
        assert!(!tile_partial_is_exact(&Format::FP16, &Format::FP16, 8));
        assert_eq!(exact_chunk(&Format::FP16, &Format::FP16, 8), Some(1));
        // fp(4, 3) spans 2^-9 .. 2^8 (17 bits): 17 + 17 + 7 = 41 bits, whole tiles at N = 128.
        let e4m3ish = f("fp(4, 3)");
        assert!(tile_partial_is_exact(&e4m3ish, &e4m3ish, 128));
        // fp(4, 3) vectors times BFP(8) matrices: 17 + 7 + 7 = 31 bits.
        assert!(tile_partial_is_exact(&e4m3ish, &bfp8, 128));
        // MX fp8 e4m3 (18-bit element grid) blocks of 32: 18 + 18 + 5 = 41 bits.
        let mx = f("mx(fp8e4m3, 32)");
        assert_eq!(exact_chunk(&mx, &mx, 128), Some(32));
    }

    fn spec(rows: usize, cols: usize, n: usize, accumulation: Accumulation) -> MatVec {
        MatVec {
            rows,
            cols,
            n,
            accumulation,
            output: FloatFormat::FP16,
        }
    }

    /// `w` as `[rows * cols, n, n]` from a dense row-major `[rows * n, cols * n]` matrix.
    fn tiles(dense: &[f64], rows: usize, cols: usize, n: usize) -> Vec<f64> {
        let mut w = vec![0.0; dense.len()];
        for i in 0..rows {
            for j in 0..cols {
                for r in 0..n {
                    for c in 0..n {
                        w[((i * cols + j) * n + r) * n + c] =
                            dense[(i * n + r) * cols * n + j * n + c];
                    }
                }
            }
        }
        w
    }

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

    #[test]
    fn slices_are_exact_and_bounded() {
        // beta = 23 at N = 128 (46 + 7 = 53); 2 at N = 2^47.
        assert_eq!(slice_bits(128), 23);
        assert_eq!(slice_bits(4), 25);
        // Run [1 + 2^-23 + 2^-40, 3, 0, -2^-30] with beta = 4: top = 2 (3 < 2^2), units
        // 2^-2, 2^-6, ...: every slice value is a multiple of its unit below 16 units, and the
        // slices add up to the values exactly.
        let v = [
            1.0 + 2f64.powi(-23) + 2f64.powi(-40),
            3.0,
            0.0,
            -(2f64.powi(-30)),
        ];
        let sl = slices(&v, 4, 4).expect("finite");
        for (i, x) in v.iter().enumerate() {
            let sum: f64 = sl.iter().rev().map(|s| s[i]).sum();
            assert_eq!(sum, *x, "lane {i}");
        }
        for (s, slice) in sl.iter().enumerate() {
            let unit = 2f64.powi(2 - 4 * (s as i32 + 1));
            for x in slice {
                assert_eq!((x / unit).fract(), 0.0);
                assert!((x / unit).abs() < 16.0);
            }
        }
        // 2^-40 needs slice 11 (unit 2^-42); 2^-30 lies in slice 8 (unit 2^-30).
        assert_eq!(sl.len(), 11);
        assert!(slices(&[f64::NAN, 1.0], 2, 4).is_none());
        assert_eq!(slices(&[0.0, 0.0], 2, 4).expect("zeros").len(), 1);
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

    /// `round_bounded` of one element, with `y0` the plain forward f64 sum.
    fn bounded_one(out: FloatFormat, x: &[f64], w: &[f64]) -> f64 {
        let spec = MatVec {
            output: out,
            ..spec(1, 1, x.len(), Accumulation::Exact)
        };
        let mut y = [x.iter().zip(w).map(|(a, b)| a * b).sum::<f64>()];
        round_bounded(&spec, x, w, &[norm_bound(w)], &mut y);
        y[0]
    }

    /// The bounded float path where a plain f64 sum rounds wrongly, each result by hand.
    #[test]
    fn bounded_products_by_hand() {
        let fp32 = FloatFormat::FP32;
        let ones = [1.0; 3];
        let t = |e: i32| 2f64.powi(e);
        // 1 + 2^-24 is the fp32 tie of 1 and 1 + 2^-23: even, 1. One more 2^-60 (lost by f64)
        // puts it above the tie: 1 + 2^-23.
        assert_eq!(bounded_one(fp32, &[1.0, t(-24), 0.0], &ones), 1.0);
        assert_eq!(
            bounded_one(fp32, &[1.0, t(-24), t(-60)], &ones),
            1.0 + t(-23)
        );
        assert_eq!(
            bounded_one(fp32, &[-1.0, -t(-24), -t(-60)], &ones),
            -1.0 - t(-23)
        );
        // 2^60 + 1 - 2^60 = 1 (f64 gives 0).
        assert_eq!(bounded_one(fp32, &[t(60), 1.0, -t(60)], &ones), 1.0);
        // 1 - 2^-100 toward zero: the fp32 value below 1 (f64 gives 1, which truncates to 1).
        let zero = FloatFormat {
            rounding: Rounding::TowardZero,
            ..fp32
        };
        let below_one = f64::from(f32::from_bits(0x3F7F_FFFF));
        assert_eq!(bounded_one(zero, &[1.0, -t(-100), 0.0], &ones), below_one);
        // Ties away from zero: the tie 1 + 2^-24 -> 1 + 2^-23, but 2^-60 below it -> 1 (f64
        // gives the tie).
        let away = FloatFormat {
            rounding: Rounding::NearestAway,
            ..fp32
        };
        assert_eq!(bounded_one(away, &[1.0, t(-24), 0.0], &ones), 1.0 + t(-23));
        assert_eq!(bounded_one(away, &[1.0, t(-24), -t(-60)], &ones), 1.0);
        // Far from any boundary the bound decides: 3 * 1.25 = 3.75.
        assert_eq!(bounded_one(fp32, &[1.25; 3], &ones), 3.75);
        // Exact zeros are +0: a cancelling sum, -0 products, a zero vector.
        for x in [[3.0, -3.0, 0.0], [-0.0, -0.0, -0.0], [0.0; 3]] {
            assert_eq!(bounded_one(fp32, &x, &ones).to_bits(), 0, "{x:?}");
        }
        // A zero vector against an infinite weight: 0 * inf is NaN; inf alone stays inf, and
        // inf - inf is NaN.
        let inf = f64::INFINITY;
        assert!(bounded_one(fp32, &[0.0; 3], &[inf, 1.0, 1.0]).is_nan());
        assert_eq!(bounded_one(fp32, &[1.0, 2.0, 0.0], &[inf, 1.0, 1.0]), inf);
        assert!(bounded_one(fp32, &[inf, -inf, 0.0], &ones).is_nan());
        assert!(bounded_one(fp32, &[f64::NAN, 1.0, 0.0], &ones).is_nan());
        // The compensated sum's own error: the two-sum errors 2^10, 2^-44 and -2^10 sum to 0
        // in f64, so its result is 1 + 2^-24 - 2^-45, below the fp32 tie 1 + 2^-24; the exact
        // sum is 2^-45 above the tie: 1 + 2^-23.
        let (big, tie) = (t(63) + t(12), 1.0 + t(-24));
        let x = [big, t(10), t(-44), -t(10), -big, tie - t(-45)];
        assert_eq!(bounded_one(fp32, &x, &[1.0; 6]), 1.0 + t(-23));
        // -seq over two tiles of N = 2: x = [2048, 1 | 2^-20, 0] against the row [1, 1 | 1, 0]
        // (the second row is zero: +0). Tile partials 2049 and 2^-20. fp16-seq: 2049 is the
        // fp16 tie of 2048 and 2050 (even: 2048), and 2048 + 2^-20 is 2048. fp32-seq: 2049 +
        // 2^-20 is 2049 in fp32 (half its spacing is 2^-13), which fp16 output ties to 2048
        // and fp32 output keeps. (Exact accumulation gives 2050.)
        let x = [2048.0, 1.0, t(-20), 0.0];
        // [cols, R, n]: tile 0 rows [1, 1], [0, 0]; tile 1 rows [1, 0], [0, 0].
        let w = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        let norms: Vec<f64> = w.chunks(2).map(norm_bound).collect();
        for (acc, out, want) in [
            (Accumulation::Fp16Seq, FloatFormat::FP16, 2048.0),
            (Accumulation::Fp16Seq, fp32, 2048.0),
            (Accumulation::Fp32Seq, FloatFormat::FP16, 2048.0),
            (Accumulation::Fp32Seq, fp32, 2049.0),
        ] {
            let spec = MatVec {
                output: out,
                ..spec(1, 2, 2, acc)
            };
            // [cols, b = 1, R = 2] plain tile sums.
            let mut y = [2049.0, 0.0, t(-20), 0.0];
            let seq = seq_format(acc).expect("a -seq mode");
            let got = round_bounded_seq(&spec, &seq, &x, &w, &norms, &mut y);
            assert_eq!(got[0], want, "{acc:?} to {out:?}");
            assert_eq!(got[1].to_bits(), 0);
        }
        // |x|^2 overflows f64 though x and every product are finite: the bound is no help
        // (against a zero row it is inf * 0, NaN), the sums are 0 and 1.
        assert_eq!(
            bounded_one(fp32, &[t(600), t(600), 0.0], &[0.0; 3]).to_bits(),
            0
        );
        assert_eq!(
            bounded_one(fp32, &[t(600), 1.0, 0.0], &[0.0, 1.0, 0.0]),
            1.0
        );
        // fp16's overflow tie 65520 rounds to inf; 65504 + 15 to 65504.
        let fp16 = FloatFormat::FP16;
        assert_eq!(bounded_one(fp16, &[65504.0, 16.0, 0.0], &ones), inf);
        assert_eq!(bounded_one(fp16, &[65504.0, 15.0, 0.0], &ones), 65504.0);
    }

    /// `round_bounded` equals the exact sum rounded once (`ExactSum`, rounded by the format's
    /// reference) on adversarial rows, for every rounding mode and several output formats,
    /// whichever order the f64 matmul summed in.
    #[test]
    fn bounded_products_match_exact_sums_on_adversarial_data() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 11
        };
        let k = 16;
        let (b, rn) = (48, 12);
        // Vectors: random fp32 values across 60 binades, ties and near-ties of fp16 and fp32
        // (a value of the grid plus half its spacing, give or take a far smaller term),
        // cancellations, zeros, near-overflow values, and now and then a NaN or an infinity.
        let mut x = vec![0.0f64; b * k];
        for row in x.chunks_mut(k) {
            let e = |r: u64| 2f64.powi((r % 61) as i32 - 30);
            let rnd = |r: u64| f64::from(f32::from_bits((r as u32 & 0x007F_FFFF) | 0x3F80_0000));
            match next() % 8 {
                0 | 1 => row.iter_mut().for_each(|v| {
                    let r = next();
                    *v = f64::from((rnd(r) * e(r >> 24)) as f32)
                        * if r & 1 == 0 { 1.0 } else { -1.0 };
                }),
                2 => {
                    let m = f64::from(half::f16::from_f64(rnd(next()) * 64.0));
                    let tail = [0.0, 2f64.powi(-40), -(2f64.powi(-40)), 2f64.powi(-149)];
                    row[..3].copy_from_slice(&[m, m * 2f64.powi(-11), tail[(next() % 4) as usize]]);
                }
                3 => {
                    let m = rnd(next());
                    row[..3].copy_from_slice(&[
                        m,
                        2f64.powi(-24),
                        [0.0, 2f64.powi(-70)][(next() % 2) as usize],
                    ]);
                }
                4 => {
                    let big = e(next()) * 2f64.powi(40);
                    row[..4].copy_from_slice(&[
                        big,
                        rnd(next()),
                        -big,
                        [0.0, 1.0][(next() % 2) as usize],
                    ]);
                }
                5 => {
                    row[..2].copy_from_slice(&[65504.0, [15.0, 16.0, 17.0][(next() % 3) as usize]])
                }
                6 => {
                    let v = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0];
                    row[(next() % k as u64) as usize] = v[(next() % 5) as usize];
                }
                _ => {}
            }
        }
        // Weight rows: ones over the first lanes (the vector's sum), random fp32 values, powers
        // of two, a zero row.
        let mut w = vec![0.0f64; rn * k];
        for (r, row) in w.chunks_mut(k).enumerate() {
            for v in row.iter_mut() {
                *v = match r % 4 {
                    0 | 1 => 1.0,
                    2 => f64::from(f32::from_bits((next() as u32 & 0x3FFF_FFFF) | 0x3000_0000)),
                    _ => 2f64.powi((next() % 9) as i32 - 4),
                };
            }
        }
        w[(rn - 1) * k..].fill(0.0);
        let norms: Vec<f64> = w.chunks(k).map(norm_bound).collect();
        let formats = [
            "fp32",
            "fp16",
            "bf16",
            "fp(8, 10)",
            "fp(5, 2, overflow = sat)",
            "fp(4, 3, subnormals = false)",
            "fp(8, 23, round = zero)",
            "fp(8, 23, round = away)",
            "fp(5, 10, round = zero)",
            "fp(5, 10, round = away)",
            "fp(8, 23, round = stochastic(seed = 3))",
        ];
        let mut plain_wrong = 0;
        for lit in formats {
            let Format::Float(out) = f(lit) else {
                panic!("{lit} is a float format")
            };
            let spec = MatVec {
                output: out,
                ..spec(1, 1, k, Accumulation::Exact)
            };
            for reversed in [false, true] {
                let mut y = vec![0.0f64; b * rn];
                for (bi, xr) in x.chunks(k).enumerate() {
                    for (r, wr) in w.chunks(k).enumerate() {
                        let terms = xr.iter().zip(wr).map(|(a, c)| a * c);
                        y[bi * rn + r] = match reversed {
                            false => terms.sum(),
                            true => terms.rev().fold(0.0, |s, p| s + p),
                        };
                    }
                }
                let plain = y.clone();
                round_bounded(&spec, &x, &w, &norms, &mut y);
                for (e, got) in y.iter().enumerate() {
                    let (bi, r) = (e / rn, e % rn);
                    let mut want = ExactSum::new();
                    for (a, c) in x[bi * k..][..k].iter().zip(&w[r * k..][..k]) {
                        want.add_product(*a, *c);
                    }
                    let want = want.round_to(&out);
                    let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
                    assert!(same, "{lit}, item {bi}, row {r}: {got:e} vs {want:e}");
                    if out.round(plain[e]).to_bits() != want.to_bits() {
                        plain_wrong += 1;
                    }
                }
            }
        }
        // The data reaches the cases where the plain sum rounds wrongly.
        assert!(plain_wrong > 50, "{plain_wrong} plain sums rounded wrongly");

        // The -seq modes on the same data, as 3 x 4 tiles of N = 4 (R = 12, K = 16): each
        // tile's plain sum rounded by `round_bounded_seq` against `matvec_exact` (every
        // product exact in an expansion, each tile partial rounded once from it).
        let (n, rows, cols) = (4, 3, 4);
        let stack = tiles(&w, rows, cols, n);
        // [cols, R, n] and its tile rows' norms.
        let mut per_tile = vec![0.0f64; w.len()];
        for j in 0..cols {
            for r in 0..rn {
                per_tile[(j * rn + r) * n..][..n].copy_from_slice(&w[r * k + j * n..][..n]);
            }
        }
        let tile_norms: Vec<f64> = per_tile.chunks(n).map(norm_bound).collect();
        for accumulation in [Accumulation::Fp32Seq, Accumulation::Fp16Seq] {
            let seq = seq_format(accumulation).expect("a -seq mode");
            for lit in ["fp16", "fp32", "fp(5, 10, round = zero)", "bf16"] {
                let Format::Float(output) = f(lit) else {
                    panic!("{lit} is a float format")
                };
                let spec = MatVec {
                    output,
                    ..spec(rows, cols, n, accumulation)
                };
                // [cols, b, R] plain tile sums.
                let mut y = vec![0.0f64; cols * b * rn];
                for j in 0..cols {
                    for bi in 0..b {
                        for r in 0..rn {
                            let xs = &x[bi * k + j * n..][..n];
                            let ws = &per_tile[(j * rn + r) * n..][..n];
                            y[(j * b + bi) * rn + r] = xs.iter().zip(ws).map(|(a, c)| a * c).sum();
                        }
                    }
                }
                let got = round_bounded_seq(&spec, &seq, &x, &per_tile, &tile_norms, &mut y);
                let want = matvec_exact(&spec, &x, b, &stack);
                for (e, (g, w)) in got.iter().zip(&want).enumerate() {
                    let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
                    assert!(same, "{accumulation:?} {lit}, element {e}: {g:e} vs {w:e}");
                }
            }
        }
    }

    #[test]
    fn saturation_zero_and_nan() {
        let s = spec(1, 1, 2, Accumulation::Exact);
        // 65504 + 16 = 65520: the overflow tie, -> inf. Zero products give +0 even from -0.
        let w = tiles(&[1.0, 1.0, 0.0, 0.0], 1, 1, 2);
        assert_eq!(matvec_exact(&s, &[65504.0, 16.0], 1, &w)[0], f64::INFINITY);
        let y = matvec_exact(&s, &[-0.0, -0.0], 1, &w);
        assert_eq!(y[0].to_bits(), 0);
        assert_eq!(y[1].to_bits(), 0);
        assert!(matvec_exact(&s, &[f64::NAN, 1.0], 1, &w)[0].is_nan());
        // inf * 0 is NaN (row 1 has zero weights), inf * 1 stays inf.
        let y = matvec_exact(&s, &[f64::INFINITY, 1.0], 1, &w);
        assert_eq!(y[0], f64::INFINITY);
        assert!(y[1].is_nan());
    }
}
