//! The product `y = W x` on the integer operands: which sums the data allows ([`fits`],
//! `int_sums`, `plain_sums`), the tasks over row tiles and batch items ([`matvec`]), and the
//! exact sums of their tile partials, rounded once.

use super::kernel::{XTiles, dot_scalar, kernel};
use super::runs::{Span, ceil_log2};
use super::sink::{Adds, Emit, Sum, Sums};
use super::vector::IntVector;
use super::weights::IntWeights;
use super::{ITEM_BLOCK, Kernel, ROW_BLOCK, ZERO_RUN, vnni};
use crate::matmul::{ExactSums, MatVec, seq_format, seq_sums};
use nnp_grammar::Accumulation;
use nnp_numerics::pow2;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Batch items per task, at most: the running sums of one task (`2 * ITEMS * N` f64) stay in
/// L2, and every weight tile is read once per this many items.
const ITEMS: usize = 64;

/// Batch items per task of a product with `rows` row tiles at batch `b`: [`ITEMS`], or fewer
/// where that would leave a thread idle (a product of one or two row tiles, as in convolutions
/// and classifier heads, was one or two tasks). A multiple of the SIMD kernel's register block
/// of items ([`ITEM_BLOCK`]), so that only the last block of a task is a partial one.
pub(super) fn items_per_task(b: usize, rows: usize, threads: usize) -> usize {
    let blocks = b.div_ceil(ITEMS);
    if rows * blocks >= 2 * threads {
        return ITEMS;
    }
    let want = (2 * threads).div_ceil(rows);
    b.div_ceil(want)
        .next_multiple_of(ITEM_BLOCK)
        .clamp(ITEM_BLOCK, ITEMS)
}

/// Whether `kernel` takes every tile of `w x` on bytes ([`Kernel::Vnni`]).
pub fn on_bytes(kernel: Kernel, w: &IntWeights, x: &IntVector) -> bool {
    kernel.is_vnni() && vnni() && w.narrow.is_some() && x.biased.is_some()
}

/// Whether the kernel computes every tile partial `P` of `w` times `x` exactly and every
/// scaled partial `P * 2^u_w * 2^u_x` is exact with room for the sums: `n` products of the
/// two sides' largest integers sum in `i32`, `P * 2^u_w` (below `2^31` units) is far from
/// overflow, the product at least f64's smallest normal and far from overflow too; and `x`
/// has the weights' tile columns, or a multiple of them that it reads in turn
/// ([`SlicedWeights`](super::SlicedWeights)).
pub fn fits(w: &IntWeights, x: &IntVector) -> bool {
    fits_spans(w, x.cols(), x.limit, x.span(0, x.b))
}

/// [`fits`] of a vector known by its column tiles, integer limit and units' span.
fn fits_spans(w: &IntWeights, cols: usize, limit: i32, xs: Span) -> bool {
    let ws = w.span();
    let sums_fit = w.n as i64 * i64::from(w.limit) * i64::from(limit) <= i64::from(i32::MAX);
    let columns = w.cols > 0 && cols.is_multiple_of(w.cols);
    // An all-zero side: every partial is zero.
    let zero = ws.is_empty() || xs.is_empty();
    sums_fit
        && columns
        && (zero || (ws.hi <= 900 && ws.lo + xs.lo >= -1022 && ws.hi + xs.hi <= 900))
}

/// `y = W x` as [`super::matmul::matvec_exact`](crate::matmul::matvec_exact) defines it, on
/// integer mantissas: `[b, rows * n]`. The caller checks [`fits`]; `which` picks the kernel
/// ([`Kernel::best`]; one the CPU lacks hands over to the next one down).
pub fn matvec(spec: &MatVec, w: &IntWeights, x: &IntVector, which: Kernel) -> Vec<f64> {
    let mut ys = matvecs(&[(spec, w, x)], which);
    ys.pop().unwrap_or_default()
}

/// Several products, each as [`matvec`] computes it, in one parallel pass over all their
/// tasks: one wait for the pool instead of one per product (the four gates of an LSTM step
/// at batch 1 are four products of a few microseconds each).
pub fn matvecs(products: &[(&MatVec, &IntWeights, &IntVector)], which: Kernel) -> Vec<Vec<f64>> {
    let threads = rayon::current_num_threads();
    let rows: usize = products.iter().map(|(_, w, _)| w.rows).sum();
    let per_task: Vec<usize> = products
        .iter()
        .map(|(_, _, x)| items_per_task(x.b, rows, threads))
        .collect();
    products_tasks(products, &per_task, which)
}

/// [`matvec`] with tasks of `per_task` batch items (and one row tile) each.
#[cfg(test)]
pub(super) fn matvec_tasks(
    spec: &MatVec,
    w: &IntWeights,
    x: &IntVector,
    which: Kernel,
    per_task: usize,
) -> Vec<f64> {
    let mut ys = products_tasks(&[(spec, w, x)], &[per_task], which);
    ys.pop().unwrap_or_default()
}

/// [`matvecs`] with tasks of `per_task[p]` batch items (and one row tile) each for product
/// `p`.
fn products_tasks(
    products: &[(&MatVec, &IntWeights, &IntVector)],
    per_task: &[usize],
    which: Kernel,
) -> Vec<Vec<f64>> {
    let sums: Vec<ExactSums> = products
        .iter()
        .map(|(spec, _, _)| ExactSums::new(&spec.output))
        .collect();
    let mut outs: Vec<Vec<f64>> = products
        .iter()
        .map(|(_, w, x)| Vec::with_capacity(x.b * w.rows * w.n))
        .collect();
    // Tasks: (product, block of items, row tile i). Each writes its runs of its product's
    // output ([b, rows * n], one run of n per item and row tile) in place, uninitialised
    // until then.
    let mut tasks = Vec::new();
    for (p, (out, &(spec, w, x))) in outs.iter_mut().zip(products).enumerate() {
        // Tile column j of x reads weight column j % w.cols (the same column when x has as
        // many).
        let (n, rows, b) = (w.n, w.rows, x.b);
        debug_assert_eq!((spec.n, spec.rows, spec.cols), (n, rows, x.cols()));
        // Tiles the byte kernel does not take are read as i16: a byte-only stack makes them
        // once.
        if which != Kernel::Scalar && !on_bytes(which, w, x) {
            w.widen();
        }
        let per = per_task[p];
        let blocks = b.div_ceil(per);
        let mut task_runs: Vec<Vec<&mut [MaybeUninit<f64>]>> = (0..blocks * rows)
            .map(|_| Vec::with_capacity(per))
            .collect();
        for (e, run) in out.spare_capacity_mut()[..b * rows * n]
            .chunks_mut(n)
            .enumerate()
        {
            let (item, i) = (e / rows, e % rows);
            task_runs[(item / per) * rows + i].push(run);
        }
        tasks.extend(
            task_runs
                .into_iter()
                .enumerate()
                .map(|(t, runs)| (p, t, runs)),
        );
    }
    tasks.into_par_iter().for_each(|(p, task, runs)| {
        let (spec, w, x) = products[p];
        product_task(spec, w, x, which, per_task[p], &sums[p], task, runs);
    });
    for (out, (_, w, x)) in outs.iter_mut().zip(products) {
        // SAFETY: the runs partition the first b * rows * n elements of the capacity, and
        // every task wrote each of its runs (one per item of its block) in full.
        unsafe { out.set_len(x.b * w.rows * w.n) };
    }
    outs
}

/// Task `task` of a product's tasks of `per_task` items: row tile `task % rows` of the items
/// of block `task / rows`, written to `runs` (one run of `n` per item).
#[allow(clippy::too_many_arguments)]
fn product_task(
    spec: &MatVec,
    w: &IntWeights,
    x: &IntVector,
    which: Kernel,
    per_task: usize,
    sums: &ExactSums,
    task: usize,
    mut runs: Vec<&mut [MaybeUninit<f64>]>,
) {
    let (n, rows, cols, b) = (w.n, w.rows, x.cols(), x.b);
    let (i, b0) = (task % rows, (task / rows) * per_task);
    let items = per_task.min(b - b0);
    let part = Items { x, b0, len: items };
    // The scaled partials of tile column j, 16 rows of one item at a time: P * 2^u_w *
    // 2^u_x, exact (fits).
    let scaled = |j: usize, bi: usize, r0: usize, p: &[i32; ROW_BLOCK]| {
        let (sw, sx) = (&w.scales(i, j)[r0..][..ROW_BLOCK], part.scales(j)[bi]);
        std::array::from_fn::<f64, ROW_BLOCK, _>(|k| f64::from(p[k]) * sw[k] * sx)
    };
    // The sums of the cheap paths cover the live rows only: the rows after them have no
    // nonzero weight, so their sums are exact zeros, written as +0.0.
    let live = w.live_rows[i];
    if int_sums(spec, w, x, i, b0, items, 32) {
        // One i32 sum per output across the tile columns, on the row's and the
        // item's common units; scaled and rounded once at the end, item by item in L1,
        // straight into the output.
        let mut acc = vec![0i32; items * live];
        sum_tiles(which, w, i, &part, &mut acc, live, |j| {
            (w.shifts(i, j), part.shifts(j))
        });
        let base_w = &w.aligned.base[i * n..][..live];
        write_runs(&mut runs, items, live, |k, out| {
            let a = &acc[k * live..][..live];
            sums.round_scaled_ints(a, base_w, x.aligned.base[b0 + k], out);
        });
        return;
    }
    if plain_sums(spec, w, x, i, b0, items) {
        let mut s = vec![0.0f64; items * live];
        sum_tiles(which, w, i, &part, &mut s, live, |j| {
            (w.scales(i, j), part.scales(j))
        });
        sums.round(&mut s);
        write_runs(&mut runs, items, live, |k, out| {
            out.write_copy_of_slice(&s[k * live..][..live]);
        });
        return;
    }
    if int_sums(spec, w, x, i, b0, items, 64) {
        // One i64 sum per output on the common units (fp8 and MX products on slices:
        // their units spread too far for i32 or plain f64 sums), then each sum as two
        // exact f64 terms, its high and low 32 bits scaled, rounded once as a running
        // sum of two (re-summed exactly where the two do not add exactly in f64).
        let mut acc = vec![0i64; items * live];
        sum_tiles(which, w, i, &part, &mut acc, live, |j| {
            (w.shifts(i, j), part.shifts(j))
        });
        let (base_w, m) = (&w.aligned.base[i * n..][..live], items * live);
        // The terms [hi; lo]: a = hi 2^32 + lo exactly, each below 2^32 in magnitude,
        // so exact in f64, and so are they scaled (fits keeps the units normal).
        let mut halves = vec![0.0f64; 2 * m];
        for (e, &a) in acc.iter().enumerate() {
            let scale = base_w[e % live] * x.aligned.base[b0 + e / live];
            halves[e] = (a >> 32) as f64 * pow2(32) * scale;
            halves[m + e] = (a & 0xffff_ffff) as f64 * scale;
        }
        let mut s = vec![0.0f64; m];
        sums.run(&halves, m, 2, &mut s);
        write_runs(&mut runs, items, live, |k, out| {
            out.write_copy_of_slice(&s[k * live..][..live]);
        });
        return;
    }
    let y: Vec<f64> = if let Some(seq) = seq_format(spec.accumulation) {
        // [cols][items * n] partials, then the per-tile rounding of the -seq modes.
        let mut all = vec![0.0f64; cols * items * n];
        for (j, t) in all.chunks_mut(items * n).enumerate() {
            let mut sink = Emit(|bi: usize, r0: usize, p: &[i32; ROW_BLOCK]| {
                t[bi * n + r0..][..ROW_BLOCK].copy_from_slice(&scaled(j, bi, r0, p));
            });
            kernel(which, w.tile(i, j), part.tiles(j), &[], n, &mut sink);
        }
        seq_sums(&seq, &spec.output, &all, items * n)
    } else {
        // Running two-sums over the tile columns, fed straight from the kernel (the
        // columns that are zero for every item add nothing: skipped).
        let (mut s, mut err) = (vec![0.0f64; items * n], vec![0.0f64; items * n]);
        for j in (0..cols).filter(|&j| !part.empty(j)) {
            let mut sink = Adds(|bi: usize, r0: usize, p: &[i32; ROW_BLOCK]| {
                let at = bi * n + r0..bi * n + r0 + ROW_BLOCK;
                ExactSums::add(&mut s[at.clone()], &mut err[at], &scaled(j, bi, r0, p));
            });
            kernel(
                which,
                w.tile(i, j),
                part.tiles(j),
                part.units(j),
                n,
                &mut sink,
            );
        }
        // Inexact running sums (rare): the row's partials again, one by one.
        sums.finish(&mut s, &err, |e, slow| {
            let (bi, r) = (e / n, e % n);
            for j in 0..cols {
                let xs = &part.ints(j)[bi * n..][..n];
                let p = dot_scalar(w.tile(i, j), xs, n, r);
                slow.add(f64::from(p) * w.scales(i, j)[r] * part.scales(j)[bi]);
            }
        });
        s
    };
    // Every run written in full (the `set_len` below relies on it).
    assert_eq!(y.len(), runs.len() * n);
    for (run, y) in runs.iter_mut().zip(y.chunks(n)) {
        run.write_copy_of_slice(y);
    }
}

/// Items `b0..b0 + len` of a vector: one task's part.
pub(super) struct Items<'a> {
    pub(super) x: &'a IntVector,
    pub(super) b0: usize,
    pub(super) len: usize,
}

impl<'a> Items<'a> {
    /// The integers of tile column `j`.
    pub(super) fn ints(&self, j: usize) -> &'a [i16] {
        &self.x.q[self.range(j)]
    }

    /// Tile column `j` for the kernel: its integers and their biased bytes.
    pub(super) fn tiles(&self, j: usize) -> XTiles<'a> {
        XTiles {
            ints: self.ints(j),
            biased: self.x.biased.as_ref().map(|v| &v[self.range(j)]),
        }
    }

    /// Where the integers of tile column `j` lie in the vector's.
    fn range(&self, j: usize) -> std::ops::Range<usize> {
        let n = self.x.q.len() / self.x.unit.len().max(1);
        let start = (j * self.x.b + self.b0) * n;
        start..start + self.len * n
    }

    /// `2^unit` of tile column `j`, by item.
    fn scales(&self, j: usize) -> &'a [f64] {
        &self.x.scale[j * self.x.b + self.b0..][..self.len]
    }

    /// The shifts of tile column `j` to each item's common unit
    /// ([`Aligned`](super::runs::Aligned)).
    fn shifts(&self, j: usize) -> &'a [i32] {
        &self.x.aligned.shift[j * self.x.b + self.b0..][..self.len]
    }

    /// Whether every item's run of tile column `j` is all zero (the unit `ZERO_RUN`, which
    /// `to_ints` and `mantissa_unit` give exactly the all-zero runs): the column's partials
    /// are all 0, and a sink that adds them ([`Sink::adds`](super::sink::Sink::adds)) can skip the
    /// column. A convolution's padding taps read such columns for every item, and a recurrence's
    /// zero initial state does at its first step.
    pub(super) fn empty(&self, j: usize) -> bool {
        self.units(j).iter().all(|&u| u == ZERO_RUN)
    }

    /// The units of tile column `j`, by item (`ZERO_RUN` for an all-zero run).
    fn units(&self, j: usize) -> &'a [i32] {
        &self.x.unit[j * self.x.b + self.b0..][..self.len]
    }
}

/// The sums of row tile `i` over every tile column into `s` (`live` per item): column `j`'s
/// partials of the items `part`, with the factors `factors(j)` (per row, per item). Columns
/// that are zero for every item add nothing and are skipped ([`Items::empty`]).
fn sum_tiles<'a, S: Sum>(
    which: Kernel,
    w: &IntWeights,
    i: usize,
    part: &Items<'a>,
    s: &mut [S],
    live: usize,
    factors: impl Fn(usize) -> (&'a [S::Factor], &'a [S::Factor]),
) {
    for j in (0..part.x.cols()).filter(|&j| !part.empty(j)) {
        let (fw, fx) = factors(j);
        let mut sink = Sums {
            s: &mut *s,
            w: fw,
            x: fx,
            n: live,
        };
        kernel(
            which,
            w.tile(i, j),
            part.tiles(j),
            part.units(j),
            w.n,
            &mut sink,
        );
    }
}

/// Each item's run of a row tile's outputs: the first `live` by `f(item, outputs)`, the rest
/// (rows with no nonzero weight) +0.0.
fn write_runs(
    runs: &mut [&mut [MaybeUninit<f64>]],
    items: usize,
    live: usize,
    mut f: impl FnMut(usize, &mut [MaybeUninit<f64>]),
) {
    // Every run written in full (`products_tasks`' `set_len` relies on it).
    assert_eq!(runs.len(), items);
    for (k, run) in runs.iter_mut().enumerate() {
        let (live_run, zero_run) = run.split_at_mut(live);
        f(k, live_run);
        zero_run.fill(MaybeUninit::new(0.0));
    }
}

/// Whether the outputs of row tile `i` for items `b0..b0 + items` are plain f64 sums of their
/// scaled partials, rounded once: `exact` accumulation, and every running sum exact in any
/// order. That holds when every term is a multiple of 2^lo and the sum of `cols` terms stays
/// below 2^53 of those units: |P| < 2^(log2 n + bits_w + bits_x) units of its own
/// 2^(u_w + u_x), at most 2^(width) above 2^lo.
pub(super) fn plain_sums(
    spec: &MatVec,
    w: &IntWeights,
    x: &IntVector,
    i: usize,
    b0: usize,
    items: usize,
) -> bool {
    spec.accumulation == Accumulation::Exact
        && sum_bits(
            w,
            x.cols(),
            x.bits,
            w.row_span[i].width() + x.span(b0, items).width(),
        ) <= 53
}

/// [`fits`] and [`sums_exact_in_any_order`] for a vector known by its column tiles, the bits
/// of its widest integer (each at most [`qmax`](super::qmax)) and the lowest and highest unit
/// of its tiles (`None`: every tile is zero): a vector made on the GPU (`gpu`).
pub fn sums_exact_with(
    spec: &MatVec,
    w: &IntWeights,
    cols: usize,
    bits: u32,
    units: Option<(i32, i32)>,
) -> bool {
    let xs = units.map_or(Span::EMPTY, |(lo, hi)| Span { lo, hi });
    fits_spans(w, cols, super::qmax(w.n), xs)
        && spec.accumulation == Accumulation::Exact
        && w.row_span
            .iter()
            .all(|s| sum_bits(w, cols, bits, s.width() + xs.width()) <= 53)
}

/// Bits a sum of `cols` partials of `w` and a vector of `bits`-bit integers needs, each
/// `|P| < n 2^(bits_w + bits)` moved up by at most `spread` binades: `|sum| < 2^sum_bits`.
fn sum_bits(w: &IntWeights, cols: usize, bits: u32, spread: u32) -> u32 {
    ceil_log2(cols) + ceil_log2(w.n) + w.bits + bits + spread
}

/// Whether the outputs of row tile `i` for items `b0..b0 + items` can be summed in integers
/// of `width` bits (`i32`: 32, `i64`: 64) on the rows' and items' common units
/// ([`Aligned`](super::runs::Aligned)), for `exact` accumulation: every shifted partial and every
/// sum of them below `2^(width - 1)` in magnitude. `|q| < 2^bits` on each side, so `|P| < n
/// 2^(bits_w + bits_x)`; a shift adds at most the spans; `cols` terms. The sum is then exact, and
/// so is its scaling by `2^(base_w + base_x)` (powers of two that [`fits`] keeps in range): the
/// same exact sum that [`plain_sums`] adds in f64, rounded once.
pub(super) fn int_sums(
    spec: &MatVec,
    w: &IntWeights,
    x: &IntVector,
    i: usize,
    b0: usize,
    items: usize,
    width: u32,
) -> bool {
    let span_x = (0..x.cols())
        .flat_map(|j| &x.aligned.shift[j * x.b + b0..][..items])
        .copied()
        .max()
        .unwrap_or(0) as u32;
    spec.accumulation == Accumulation::Exact
        && sum_bits(w, x.cols(), x.bits, w.shift_span[i] + span_x) < width
}

/// Whether every output of `w x` is such a plain sum (for the whole batch), so that a kernel
/// that adds the scaled partials in an order of its own (`gpu`) gets the same sums,
/// which [`round_sums`] then rounds as [`matvec`] does.
pub fn sums_exact_in_any_order(spec: &MatVec, w: &IntWeights, x: &IntVector) -> bool {
    (0..w.rows).all(|i| plain_sums(spec, w, x, i, 0, x.b))
}

/// Round exact sums of scaled partials to the product's output format, in place.
pub fn round_sums(spec: &MatVec, s: &mut [f64]) {
    ExactSums::new(&spec.output).round(s);
}
