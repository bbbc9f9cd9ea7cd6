//! Weights whose runs span more bits than one `i16` unit holds, split into slices that each
//! fit ([`SlicedWeights`]), and their products.

use super::product::{fits, matvec};
use super::runs::ceil_log2;
use super::vector::IntVector;
use super::weights::{IntWeights, TileSource};
use super::{Kernel, ROW_BLOCK, supports};
use crate::matmul::MatVec;
use nnp_grammar::Accumulation;
use rayon::prelude::*;

/// Most kernel passes (weight slices times vector slices) of a [`SlicedWeights`] product:
/// each pass costs about one product of BFP data, and past six the float path's f64 matmuls
/// are as fast.
const MAX_PASSES: usize = 6;

/// Most significant bits of one value of a [`SlicedWeights`] product's operands (8: bf16,
/// int8, and every fp8, fp6, fp4 and MX element). Short products keep the running f64 sums
/// of the partials exact almost always; with fp16 or fp32 values most of them are not, and
/// re-summing those element by element made an fp32 product ten times slower than the float
/// path.
const MAX_VALUE_BITS: u32 = 8;

/// The bits of a run of values as integers on its finest unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct RunBits {
    /// From the top bit of the largest magnitude down to the lowest set bit of any value.
    pub(super) span: u32,
    /// The most significant bits of one value (top bit to lowest set bit).
    pub(super) value: u32,
}

impl RunBits {
    /// The bits of `run`, or `None` for a non-finite value (all zero for an all-zero run).
    pub(super) fn of(run: &[f64]) -> Option<RunBits> {
        let (mut top, mut low, mut value) = (i32::MIN, i32::MAX, 0);
        for &v in run {
            if !v.is_finite() {
                return None;
            }
            if v == 0.0 {
                continue;
            }
            // The significand as an integer and the exponent of its last bit.
            let (_, sig, last) = nnp_numerics::decompose(v);
            let lowest = last + sig.trailing_zeros() as i32;
            let above = last + (u64::BITS - sig.leading_zeros()) as i32;
            low = low.min(lowest);
            top = top.max(above);
            value = value.max(above - lowest);
        }
        Some(match top {
            i32::MIN => RunBits::default(),
            _ => RunBits {
                span: (top - low) as u32,
                value: value as u32,
            },
        })
    }

    /// The widest of every run of `len` values of `v`.
    fn widest(v: &[f64], len: usize) -> Option<RunBits> {
        v.par_chunks(len.max(1))
            .map(RunBits::of)
            .try_reduce(RunBits::default, |a, b| {
                Some(RunBits {
                    span: a.span.max(b.span),
                    value: a.value.max(b.value),
                })
            })
    }
}

/// A weight stack whose runs span more bits than one `i16` unit holds (fp8 and MX formats,
/// where each value has an exponent of its own), split into slices that each fit: `W = W_0 +
/// ... + W_(S-1)` exactly, slice `s` of each run integers of at most `beta` bits on a unit of
/// its own ([`super::matmul::slices`](crate::matmul::slices), Ozaki's error-free splitting).
/// A vector is split the same way into `x_0 .. x_(T-1)` of at most `beta_x` bits, with `beta +
/// beta_x` small enough that `n` products of a weight and a vector integer sum in `i32` ([`fits`]).
/// Then `W x` is the sum of every `W_s x_t`, and the kernel computes it as one product of `S * T *
/// cols` tile columns: the weights' slices stored as tile columns `s * cols + j` and read in turn,
/// each vector slice's columns repeated `S` times. The exact sum over all of them is rounded once,
/// as every product's is.
pub struct SlicedWeights {
    pub(super) w: IntWeights,
    pub(super) slices: usize,
    pub(super) beta_x: u32,
}

/// The span of a run that slices can take: `None` for a non-finite value or one wider than
/// [`MAX_VALUE_BITS`].
fn run_span(run: &[f64]) -> Option<u32> {
    RunBits::of(run)
        .filter(|b| b.value <= MAX_VALUE_BITS)
        .map(|b| b.span)
}

impl SlicedWeights {
    /// Whether [`new`](Self::new) refuses every stack whose tile rows are the runs of `n`
    /// values of `w`, whatever their order: one of them holds a value it cannot take.
    pub fn refuses(w: &[f64], n: usize) -> bool {
        n == 0 || w.par_chunks(n).any(|run| run_span(run).is_none())
    }

    /// The stack `[rows * cols, n, n]` row-major, sliced for products with vectors like `x`
    /// (`[b, cols * n]`); `None` for a non-finite weight, a weight of more than
    /// `MAX_VALUE_BITS`, or when every split takes more than `MAX_PASSES` passes.
    ///
    /// The weights' width is the one with the least work for such vectors: the row blocks
    /// each weight slice holds a nonzero integer in (the kernel skips the others), times the
    /// vector's slices at the width left to it. Slice `s` of a run is nonzero only where the
    /// run spans more than `s * beta` bits, so where a few runs span far more than the rest
    /// (MX data: about one run in fifty of the MLP's 4096 x 4096 weights spans more than 15
    /// bits) the widest slices leave the second slice mostly empty.
    pub fn new(w: &[f64], x: &[f64], rows: usize, cols: usize, n: usize) -> Option<SlicedWeights> {
        if !supports(n) || w.len() != rows * cols * n * n {
            return None;
        }
        // n products of integers below 2^bw and 2^bx sum in i32 when bw + bx <= budget;
        // every integer is an i16.
        let budget = 31u32.checked_sub(ceil_log2(n)).filter(|b| *b >= 2)?;
        let (lo, hi) = (budget.saturating_sub(15).max(1), (budget - 1).min(15));
        let spans: Vec<u32> = w.par_chunks(n).map(run_span).collect::<Option<_>>()?;
        // A vector the slices cannot take (non-finite or wide values) says nothing of the next
        // ones, and this split is kept for the session: then split for the narrowest vectors.
        let x_span = RunBits::widest(x, n)
            .filter(|b| b.value <= MAX_VALUE_BITS)
            .map_or(0, |b| b.span);
        // The widest run of every row block (16 rows of one tile).
        let blocks: Vec<u32> = spans
            .chunks(ROW_BLOCK)
            .map(|b| b.iter().copied().max().unwrap_or(0))
            .collect();
        let widest = blocks.iter().copied().max().unwrap_or(0);
        let (_, slices, beta) = (lo..=hi)
            .filter_map(|beta| {
                let slices = widest.div_ceil(beta).max(1) as usize;
                let parts = x_span.div_ceil((budget - beta).min(15)).max(1) as usize;
                let busy: usize = (0..slices as u32)
                    .map(|s| blocks.iter().filter(|&&m| m > s * beta).count())
                    .sum();
                (slices * parts <= MAX_PASSES).then_some((busy * parts, slices, beta))
            })
            .min()?;
        let (wide, nn) = (slices * cols, n * n);
        let make = |t: usize, tile: &mut [f64], _: &mut [f64]| {
            let (i, c) = (t / wide, t % wide);
            let (s, j) = (c / cols, c % cols);
            match crate::matmul::slices(&w[(i * cols + j) * nn..][..nn], n, beta) {
                Some(sl) => match sl.get(s) {
                    Some(v) => tile.copy_from_slice(v),
                    None => tile.fill(0.0),
                },
                // Units beyond f64's range: no integer form, which `with_limit` refuses.
                None => tile.fill(f64::NAN),
            }
        };
        let w = IntWeights::with_limit(rows, wide, n, (1 << beta) - 1, TileSource::Made(make))?;
        Some(SlicedWeights {
            w,
            slices,
            beta_x: (budget - beta).min(15),
        })
    }

    /// `y = W x` for `x` `[b, cols * n]`, as [`matvec`] computes it with `spec` (that of the
    /// unsliced product; exact accumulation only, since the `-seq` modes round each tile's
    /// partial, which the slices split), or `None` when `x` has a value of more than
    /// `MAX_VALUE_BITS`, needs more slices than `MAX_PASSES` allows, or the product does
    /// not [`fits`].
    pub fn matvec(&self, spec: &MatVec, x: &[f64], b: usize, which: Kernel) -> Option<Vec<f64>> {
        let (n, cols) = (self.w.n, self.w.cols / self.slices);
        if spec.accumulation != Accumulation::Exact || b == 0 || x.len() != b * cols * n {
            return None;
        }
        RunBits::widest(x, n).filter(|b| b.value <= MAX_VALUE_BITS)?;
        let parts = crate::matmul::slices(x, n, self.beta_x)?;
        if parts.len() * self.slices > MAX_PASSES {
            return None;
        }
        let limit = (1 << self.beta_x) - 1;
        let parts = parts
            .iter()
            .map(|p| IntVector::with_limit(p, b, cols, n, limit))
            .collect::<Option<Vec<_>>>()?;
        let wide = IntVector::repeated(&parts, self.slices);
        if !fits(&self.w, &wide) {
            return None;
        }
        let spec = MatVec {
            cols: wide.cols(),
            ..*spec
        };
        Some(matvec(&spec, &self.w, &wide, which))
    }
}
