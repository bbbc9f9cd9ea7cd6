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
//! ([`Expansion`]) and rounded once.
//!
//! The same argument holds for any format whose values, inside aligned chunks of `k` lanes, are
//! integer multiples of one power of two with a bounded integer ([`Grid`]): [`exact_chunk`]
//! finds the largest such `k` for a pair of formats, the BLAS computes per-chunk partials, and
//! the expansion sums them. When the formats prove nothing (float formats, fine blocks), the
//! data itself is split into [`slices`] that obey the bound pairwise (one matmul per slice
//! pair); non-finite data takes [`matvec_exact`], every product exact by
//! [`two_prod`](nnp_numerics::sums::two_prod).
//!
//! Here: the product's shape ([`MatVec`]), the `-seq` accumulation and the slow exact path
//! ([`matvec_exact`]). Which chunks a pair of formats makes exact is in `grid`, the exact sums
//! of partials in `sums`, the rounding of plain f64 matmuls from an error bound in `bounded`,
//! the error-free splitting into slices in `slicing`.

use super::exact::round_with;
use super::quant::Rounder;
use nnp_grammar::Accumulation;
use nnp_numerics::FloatFormat;
use nnp_numerics::sums::Expansion;
use rayon::prelude::*;

mod bounded;
mod grid;
mod slicing;
mod sums;

pub(crate) use bounded::monotone;
pub use bounded::{norm_bound, round_bounded, round_bounded_seq};
pub use grid::{Grid, MIN_CHUNK, exact_chunk, exact_chunk_f32, grids, tile_partial_is_exact};
pub use slicing::{slice_bits, slices};
pub(crate) use sums::ExactSums;
pub use sums::{sum_partials, transpose_map};

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
/// rounded to the sequence format (an exact zero as `+0`, as [`Expansion`] sums it), added in
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
/// The slow exact path: every product exact ([`two_prod`](nnp_numerics::sums::two_prod)), summed in
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
            let mut sum = Expansion::new();
            // Adds the products of tile row `r` of tile column `j`.
            let add_tile = |sum: &mut Expansion, j: usize, r: usize| {
                let tile = &w[((i * cols + j) * n + r) * n..][..n];
                for (a, v) in tile.iter().zip(&xb[j * n..(j + 1) * n]) {
                    sum.add_product(*a, *v);
                }
            };
            let round = |sum: &mut Expansion, rounder: &Rounder, fmt: &FloatFormat| {
                let v = round_with(sum, rounder, fmt);
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
    use nnp_numerics::Format;

    pub(super) fn f(lit: &str) -> Format {
        lit.parse().expect("valid format")
    }
    pub(super) fn spec(rows: usize, cols: usize, n: usize, accumulation: Accumulation) -> MatVec {
        MatVec {
            rows,
            cols,
            n,
            accumulation,
            output: FloatFormat::FP16,
        }
    }

    /// `w` as `[rows * cols, n, n]` from a dense row-major `[rows * n, cols * n]` matrix.
    pub(super) fn tiles(dense: &[f64], rows: usize, cols: usize, n: usize) -> Vec<f64> {
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
