//! Exact tile products on integer mantissas with SIMD integer multiply-adds (AVX2 `vpmaddwd`).
//!
//! **Why this is exact.** A run of N values (one vector tile, or one row of a matrix tile)
//! that are all `q * 2^u` with one unit `u` and integers `|q| <= qmax` is held as those
//! integers and `u`. [`to_ints`] finds `u` from the data and *checks* every value, so the path
//! needs no proof from the format: BFP with mantissas of up to 12 bits (at N = 128) fits,
//! anything else that happens to fit does too, and data that does not fit takes the float
//! path. `qmax` ([`qmax`]) is chosen so that N products of two such integers sum in `i32`
//! without overflow whatever their signs, so the dot product of two runs is `P * 2^(u_w +
//! u_x)` with `P` an exact `i32`, and exact as an f64 once scaled by a power of two that
//! [`fits`] checks to be normal with room for the sums. The partials of one output row are
//! then summed exactly and rounded once, or per the `-seq` accumulation modes (`RowAcc`),
//! exactly as the float path sums its partials. The exact sum takes the cheapest of four
//! forms the data admits, checked per task: one `i32` per output, each partial shifted to the
//! row's and the item's smallest unit (where the integers' bits and the units' spread across
//! tile columns bound every sum below `2^31`, `int_sums`: BFP 8 data a few binades apart);
//! plain f64 sums (where every term is a multiple of the smallest unit below `2^53` of them);
//! one `i64` per output the same way as the `i32` (sums below `2^63`: fp8 and MX products on
//! slices), rounded from its two exact f64 halves; else running two-sums (`ExactSums`; a row
//! whose sums were inexact is summed again exactly from recomputed partials).
//!
//! The integers are `i16`; `vpmaddwd` multiplies 16 pairs and adds adjacent products into 8
//! `i32` lanes (twice the multiply-adds per instruction of an f32 FMA, half the bytes). The
//! scalar kernel computes the same integers from the same layout: it is the reference the SIMD
//! kernel is tested against. The session takes this path only where the CPU has AVX2 and FMA
//! ([`simd`]); elsewhere the f32/f64 BLAS path runs.

use super::matmul::{ExactSums, MatVec, RowAcc};
use super::quant::{BfpInts, avx2_copy, to_i16};
use nnp_grammar::Accumulation;
use nnp_numerics::{floor_log2, pow2};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Rows of one register block of the SIMD kernel (2 x 8 `i32` lanes); N must be a multiple.
pub const ROW_BLOCK: usize = 16;

/// Batch items of one register block of the SIMD kernel: 6 items x 2 row vectors = 12
/// accumulators, with the 2 weight vectors and the broadcast vector 15 of the 16 registers.
const ITEM_BLOCK: usize = 6;

/// Batch items per task, at most: the running sums of one task (`2 * ITEMS * N` f64) stay in
/// L2, and every weight tile is read once per this many items.
const ITEMS: usize = 64;

/// Batch items per task of a product with `rows` row tiles at batch `b`: [`ITEMS`], or fewer
/// where that would leave a thread idle (a product of one or two row tiles, as in convolutions
/// and classifier heads, was one or two tasks). A multiple of the SIMD kernel's register block
/// of items ([`ITEM_BLOCK`]), so that only the last block of a task is a partial one.
fn items_per_task(b: usize, rows: usize, threads: usize) -> usize {
    let blocks = b.div_ceil(ITEMS);
    if rows * blocks >= 2 * threads {
        return ITEMS;
    }
    let want = (2 * threads).div_ceil(rows);
    b.div_ceil(want)
        .next_multiple_of(ITEM_BLOCK)
        .clamp(ITEM_BLOCK, ITEMS)
}

/// Values per task, at least, when a vector is converted to integers: with 4 Ki, a task was a
/// few microseconds of work, less than waking one of a 16-thread machine's workers (the GPU
/// guest's LSTM runs were faster with 16 Ki in five of five pairs; 2 cores saw no change).
const PAR_VALUES: usize = 16384;

/// Whether the session should take this path: the CPU has AVX2 and FMA.
pub fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the kernel handles native dimension `n` at all.
pub fn supports(n: usize) -> bool {
    n > 0 && n.is_multiple_of(ROW_BLOCK)
}

/// The largest mantissa magnitude at native dimension `n`: `n * qmax^2 <= i32::MAX`, so every
/// partial sum of a tile's products fits `i32`, and `qmax` fits `i16`. 4095 at N = 128.
pub fn qmax(n: usize) -> i32 {
    let cap = i32::MAX as u64 / n.max(1) as u64;
    let mut q = (cap as f64).sqrt() as u64;
    while q * q > cap {
        q -= 1;
    }
    while (q + 1) * (q + 1) <= cap {
        q += 1;
    }
    q.min(i16::MAX as u64) as i32
}

/// `2^bits` for the most bits `bits` whose integers `|q| < 2^bits` are all within [`qmax`]:
/// [`to_ints`] holds every run's integers below it.
pub fn mantissa_limit(n: usize) -> i32 {
    1 << int_bits(qmax(n))
}

/// The `bits` of [`mantissa_limit`] for `qmax`.
fn int_bits(qmax: i32) -> i32 {
    31 - ((qmax + 1) as u32).leading_zeros() as i32
}

/// The unit of an all-zero run: far below any real unit, so spans skip it and [`scale`] clamps
/// it (its partials are zero).
const ZERO_RUN: i32 = -(1 << 29);

avx2_copy! {
    /// The integers and unit of one run: `v[i] = q[i] * 2^u` with every `|q| <= qmax`, or `None`
    /// when the run has no such form (non-finite values, more significant bits across the run than
    /// `qmax` holds, units outside f64's normal scaling range). An all-zero run has the unit
    /// `ZERO_RUN`.
    ///
    /// The unit is the coarsest that holds every value: first `2^(top + 1 - bits)` for the largest
    /// magnitude `m < 2^(top + 1)`, with `2^bits - 1 <= qmax` (so every `|q| < 2^bits`; a value
    /// that is not a whole number of such units refuses the run), then coarser by the trailing zero
    /// bits all the integers share (BFP 8 mantissas come out as they are, `|q| <= 127`).
    pub fn to_ints / to_ints_avx2 / to_ints_body
        (v: &[f64], q: &mut [i16], qmax: i32) -> Option<i32>
}

#[inline(always)]
fn to_ints_body(v: &[f64], q: &mut [i16], qmax: i32) -> Option<i32> {
    // The largest magnitude by bit pattern, in one branch-free pass: non-negative f64 order
    // as their bits, and every NaN and infinity lies above every finite value.
    let top = v
        .iter()
        .fold(0u64, |a, x| a.max(x.to_bits() & !(1u64 << 63)));
    if top >= f64::INFINITY.to_bits() {
        return None;
    }
    let m = f64::from_bits(top);
    if m == 0.0 {
        // All zeros (-0.0 included: a product with it is an exact zero).
        q.fill(0);
        return Some(ZERO_RUN);
    }
    let bits = int_bits(qmax);
    let u = floor_log2(m) + 1 - bits;
    if !(-1022..=1000).contains(&u) {
        return None;
    }
    let down = pow2(-u);
    let (mut ok, mut all) = (true, 0i32);
    for (x, o) in v.iter().zip(q.iter_mut()) {
        // |x * down| < 2^bits <= 2^15: the conversion is exact exactly when it is an integer.
        let (i, whole) = to_i16(x * down);
        ok &= whole;
        all |= i32::from(i);
        *o = i;
    }
    if !ok {
        return None;
    }
    Some(u + coarsest(q, all))
}

avx2_copy! {
    /// One run of `v` quantized in `fmt` straight to integers at their coarsest unit: what
    /// [`to_ints`] gives for the run's quantized values, or `None` where it would give `None`
    /// (a non-finite element) or could differ ([`mantissa_unit`]).
    fn quantized_ints / quantized_ints_avx2 / quantized_ints_body
        (fmt: &BfpInts, v: &[f64], q: &mut [i16], qmax: i32) -> Option<i32>
}

#[inline(always)]
fn quantized_ints_body(fmt: &BfpInts, v: &[f64], q: &mut [i16], qmax: i32) -> Option<i32> {
    let lsb = fmt.run(v, q)?;
    mantissa_unit(q, lsb, qmax)
}

/// The bits of a run's integers at its coarsest unit: a run of BFP mantissas `q * 2^lsb`
/// (`quant::BfpInts`) as [`to_ints`] holds the same values, or `None` where `to_ints` could
/// differ (the largest `|q|` not below `2^bits` of [`qmax`], or the unit out of its range).
#[inline(always)]
fn mantissa_unit(q: &mut [i16], lsb: i32, qmax: i32) -> Option<i32> {
    let (top, all) = q.iter().fold((0u16, 0i32), |(m, a), &x| {
        (m.max(x.unsigned_abs()), a | i32::from(x))
    });
    if top == 0 {
        return Some(ZERO_RUN);
    }
    // `to_ints` takes `u = floor_log2(max) + 1 - bits` and holds the values as integers of
    // `2^u`, which these are (as `|q| < 2^bits`, `u <= lsb`); both then strip the trailing
    // zero bits all the integers share, so they end at the same unit and integers.
    let bits = int_bits(qmax);
    let log = 15 - top.leading_zeros() as i32;
    let u = log + lsb + 1 - bits;
    if log >= bits || !(-1022..=1000).contains(&u) {
        return None;
    }
    Some(lsb + coarsest(q, all))
}

/// Shifts out the trailing zero bits that all of `q` share (`all`: their bitwise or, not zero:
/// both callers hand a run with a nonzero integer) and returns how many.
#[inline(always)]
fn coarsest(q: &mut [i16], all: i32) -> i32 {
    debug_assert_ne!(all, 0, "a zero run has no coarsest unit");
    let tz = all.trailing_zeros();
    if tz > 0 {
        q.iter_mut().for_each(|x| *x >>= tz);
    }
    tz as i32
}

/// Bits of the largest magnitude of `q`.
fn mag_bits(q: &[i16]) -> u32 {
    let m = q.iter().map(|x| x.unsigned_abs()).max().unwrap_or(0);
    u16::BITS - m.leading_zeros()
}

/// `ceil(log2 k)` for `k >= 1`.
fn ceil_log2(k: usize) -> u32 {
    usize::BITS - k.max(1).saturating_sub(1).leading_zeros()
}

/// The smallest and largest unit of a set of runs, all-zero runs left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    lo: i32,
    hi: i32,
}

impl Span {
    const EMPTY: Span = Span {
        lo: i32::MAX,
        hi: i32::MIN,
    };

    fn of(units: impl IntoIterator<Item = i32>) -> Span {
        units.into_iter().fold(Span::EMPTY, |s, u| {
            if u == ZERO_RUN {
                s
            } else {
                Span {
                    lo: s.lo.min(u),
                    hi: s.hi.max(u),
                }
            }
        })
    }

    fn merge(self, o: Span) -> Span {
        Span {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    fn is_empty(&self) -> bool {
        self.lo > self.hi
    }

    /// Binades between the smallest and largest unit (0 when empty).
    fn width(&self) -> u32 {
        if self.is_empty() {
            0
        } else {
            (self.hi - self.lo) as u32
        }
    }
}

/// One `n x n` tile `src` (row-major) as integers packed into `tile` ([`packed_at`]), with
/// the unit of each row in `units` and the [`Tile::reach`] of each row block in `reach`: the
/// bits of its largest integer and whether it held a `-0.0`, or `None` when a row does not
/// fit.
fn tile_to_ints(
    src: &[f64],
    tile: &mut [i16],
    units: &mut [i32],
    reach: &mut [u32],
    n: usize,
    qm: i32,
) -> Option<(u32, bool)> {
    let mut q = vec![0i16; n];
    let mut bits = 0;
    reach.fill(0);
    for (r, (run, u)) in src.chunks(n).zip(units.iter_mut()).enumerate() {
        *u = to_ints(run, &mut q, qm)?;
        bits = bits.max(mag_bits(&q));
        let pairs = q.iter().rposition(|&v| v != 0).map_or(0, |l| l / 2 + 1);
        let block = &mut reach[r / ROW_BLOCK];
        *block = (*block).max(pairs as u32);
        // Lanes (2 kp, 2 kp + 1) of row r go to packed_at(n, r, 2 kp): one pair every
        // 2 * ROW_BLOCK values.
        let row = &mut tile[packed_at(n, r, 0)..];
        for (pair, dst) in q.chunks(2).zip(row.chunks_mut(2 * ROW_BLOCK)) {
            dst[..2].copy_from_slice(pair);
        }
    }
    // A fold rather than `any`: no early exit, so it vectorises.
    let neg_zero = src
        .iter()
        .fold(false, |z, x| z | (x.to_bits() == (-0.0f64).to_bits()));
    Some((bits, neg_zero))
}

/// The offset of lane `l` of row `r` in a packed `n x n` tile: row blocks of [`ROW_BLOCK`]
/// rows, inside one `[n / 2][ROW_BLOCK][2]`, so one 32-byte load is 2 consecutive lanes of 8
/// rows and a row block's `n / 2` loads are contiguous.
#[inline]
fn packed_at(n: usize, r: usize, l: usize) -> usize {
    (((r / ROW_BLOCK) * (n / 2) + l / 2) * ROW_BLOCK + r % ROW_BLOCK) * 2 + l % 2
}

/// One packed `n x n` tile of an [`IntWeights`], as the kernel reads it.
#[derive(Clone, Copy)]
struct Tile<'a> {
    /// The integers, laid out by [`packed_at`].
    ints: &'a [i16],
    /// Per row block: the lane pairs up to the last that holds a nonzero integer in any of its
    /// rows (0 for an all-zero block). The SIMD kernel stops there: the lanes beyond add
    /// exact zeros, and a matrix padded to the native dimension (16 x 16 in a 128 x 128 tile)
    /// is mostly such lanes.
    reach: &'a [u32],
}

/// A weight stack `[rows * cols, n, n]` as integers, packed for the kernel.
pub struct IntWeights {
    rows: usize,
    cols: usize,
    n: usize,
    /// Tile `(i, j)` at `(i * cols + j) * n * n`, laid out by [`packed_at`].
    packed: Vec<i16>,
    /// [`Tile::reach`] of row block `rb` of tile `(i, j)` at `(i * cols + j) * n / ROW_BLOCK
    /// + rb`.
    reach: Vec<u32>,
    /// `2^unit` of row `r` of tile `(i, j)` at `(i * cols + j) * n + r` (0 for a zero row).
    scale: Vec<f64>,
    /// Units of every row tile `i` (all its column tiles).
    row_span: Vec<Span>,
    /// Every row on a common unit across its tile columns (`base` by row `i * n + r`, `shift`
    /// laid out as `scale`), for [`int_sums`].
    aligned: Aligned,
    /// The largest shift of every row tile `i`.
    shift_span: Vec<u32>,
    /// Per row tile `i`: the rows up to the end of its last row block with a nonzero integer
    /// in any tile column. The rows below are zero rows (a matrix padded to the native
    /// dimension), whose outputs are exact zeros, `+0.0`.
    live_rows: Vec<usize>,
    /// Bits of the largest integer.
    bits: u32,
    /// The largest magnitude an integer may have ([`qmax`], or a slice's width).
    limit: i32,
    /// Whether the stack held a `-0.0` (its integer is 0, so [`IntWeights::restore`] cannot
    /// give its sign back).
    neg_zero: bool,
}

/// Where the tiles of a stack `[rows * cols, n, n]` come from (row-major `n x n` each).
pub enum TileSource<'w, F> {
    /// The whole stack in memory.
    Stack(&'w [f64]),
    /// A function that writes tile `t` into its first argument (`n * n` values), with a
    /// scratch buffer of the same length: a stack prepared tile by tile, never whole.
    Made(F),
}

/// A [`TileSource`] that is never `Made` (for [`TileSource::Stack`]).
pub type NoMaker = fn(usize, &mut [f64], &mut [f64]);

impl IntWeights {
    /// `w` is the stack `[rows * cols, n, n]` row-major; `None` when a row does not fit.
    pub fn new(w: &[f64], rows: usize, cols: usize, n: usize) -> Option<IntWeights> {
        if w.len() != rows * cols * n * n {
            return None;
        }
        Self::from_tiles(rows, cols, n, TileSource::<NoMaker>::Stack(w))
    }

    /// The stack of `rows x cols` tiles that `source` gives, as integers; `None` when a row
    /// does not fit.
    pub fn from_tiles<F>(
        rows: usize,
        cols: usize,
        n: usize,
        source: TileSource<'_, F>,
    ) -> Option<IntWeights>
    where
        F: Fn(usize, &mut [f64], &mut [f64]) + Sync,
    {
        Self::with_limit(rows, cols, n, qmax(n), source)
    }

    /// [`IntWeights::from_tiles`] with integers of magnitude up to `qm`.
    fn with_limit<F>(
        rows: usize,
        cols: usize,
        n: usize,
        qm: i32,
        source: TileSource<'_, F>,
    ) -> Option<IntWeights>
    where
        F: Fn(usize, &mut [f64], &mut [f64]) + Sync,
    {
        if !supports(n) {
            return None;
        }
        let nn = n * n;
        let mut packed = vec![0i16; rows * cols * nn];
        let mut unit = vec![0i32; rows * cols * n];
        let blocks = n / ROW_BLOCK;
        let mut reach = vec![0u32; rows * cols * blocks];
        // Per tile: the bits of its largest integer and whether it held a `-0.0`.
        let tiles: Vec<Option<(u32, bool)>> = packed
            .par_chunks_mut(nn)
            .zip(unit.par_chunks_mut(n))
            .zip(reach.par_chunks_mut(blocks))
            .enumerate()
            .map_init(
                || (Vec::new(), Vec::new()),
                |(buf, scratch), (t, ((tile, units), reach))| {
                    let src = match &source {
                        TileSource::Stack(w) => &w[t * nn..][..nn],
                        TileSource::Made(make) => {
                            buf.resize(nn, 0.0);
                            scratch.resize(nn, 0.0);
                            make(t, buf, scratch);
                            &buf[..]
                        }
                    };
                    tile_to_ints(src, tile, units, reach, n, qm)
                },
            )
            .collect();
        let (bits, neg_zero) = tiles.into_iter().try_fold((0, false), |(b, z), t| {
            t.map(|(tb, tz)| (b.max(tb), z | tz))
        })?;
        let row_span = unit
            .chunks(cols * n)
            .map(|u| Span::of(u.iter().copied()))
            .collect();
        let aligned = Aligned::new(&unit, rows * n, cols, |row, j| {
            ((row / n) * cols + j) * n + row % n
        });
        let shift_span = aligned
            .shift
            .chunks(cols * n)
            .map(|s| s.iter().copied().max().unwrap_or(0) as u32)
            .collect();
        let live_rows = reach
            .chunks(cols * blocks)
            .map(|r| {
                let live = |rb: usize| (0..cols).any(|j| r[j * blocks + rb] > 0);
                (0..blocks)
                    .rev()
                    .find(|&rb| live(rb))
                    .map_or(0, |rb| rb + 1)
                    * ROW_BLOCK
            })
            .collect();
        Some(IntWeights {
            rows,
            cols,
            n,
            packed,
            reach,
            live_rows,
            scale: scales(&unit),
            row_span,
            aligned,
            shift_span,
            bits,
            limit: qm,
            neg_zero,
        })
    }

    /// The stack these integers came from, bit for bit (`[rows * cols, n, n]` row-major), or
    /// `None` when it held a `-0.0`. Every other value is `q * 2^unit` exactly: [`to_ints`]
    /// checked that the integer times the unit is the value, the unit is a normal power of
    /// two, and a zero (or a zero row, scale 0) comes back as `+0.0`. A session keeps only
    /// this form of a weight stack and restores the f64 one for a product that takes the float
    /// path.
    pub fn restore(&self) -> Option<Vec<f64>> {
        self.restorable()
            .then(|| self.unpacked(|q, scale| f64::from(q) * scale))
    }

    /// Whether [`IntWeights::restore`] gives the stack back.
    pub fn restorable(&self) -> bool {
        !self.neg_zero
    }

    /// `(rows, cols, n)`: row tiles, column tiles, native dimension.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.rows, self.cols, self.n)
    }

    /// The integers as the stack `[rows * cols, n, n]`, row-major (the packing undone).
    pub fn tiles_row_major(&self) -> Vec<i16> {
        self.unpacked(|q, _| q)
    }

    /// `f(integer, row scale)` of every element, as the stack `[rows * cols, n, n]` row-major.
    fn unpacked<T: Copy + Default + Send>(&self, f: impl Fn(i16, f64) -> T + Sync) -> Vec<T> {
        let n = self.n;
        let mut out = vec![T::default(); self.packed.len()];
        out.par_chunks_mut(n * n)
            .zip(self.packed.par_chunks(n * n))
            .zip(self.scale.par_chunks(n))
            .for_each(|((dst, tile), scale)| {
                for (e, v) in dst.iter_mut().enumerate() {
                    let (r, l) = (e / n, e % n);
                    *v = f(tile[packed_at(n, r, l)], scale[r]);
                }
            });
        out
    }

    /// `2^unit` of row `r` of tile `(i, j)` at `(i * cols + j) * n + r` (0 for a zero row).
    pub fn row_scales(&self) -> &[f64] {
        &self.scale
    }

    /// Tile `(i, j)`; here and below, a vector with a multiple of the stack's tile columns
    /// reads column `j` as `j % cols` ([`fits`]).
    fn tile(&self, i: usize, j: usize) -> Tile<'_> {
        let (t, nn, blocks) = (self.at(i, j), self.n * self.n, self.n / ROW_BLOCK);
        Tile {
            ints: &self.packed[t * nn..][..nn],
            reach: &self.reach[t * blocks..][..blocks],
        }
    }

    fn span(&self) -> Span {
        self.row_span.iter().fold(Span::EMPTY, |a, s| a.merge(*s))
    }

    /// The row scales of tile `(i, j)`.
    fn scales(&self, i: usize, j: usize) -> &[f64] {
        &self.scale[self.at(i, j) * self.n..][..self.n]
    }

    /// The rows' shifts to their common unit in tile `(i, j)` ([`Aligned`]).
    fn shifts(&self, i: usize, j: usize) -> &[i32] {
        &self.aligned.shift[self.at(i, j) * self.n..][..self.n]
    }

    /// The index of tile `(i, j % cols)`.
    fn at(&self, i: usize, j: usize) -> usize {
        i * self.cols + j % self.cols
    }
}

/// `2^u` of every unit, 0 for all-zero runs (their partials are zero).
fn scales(units: &[i32]) -> Vec<f64> {
    units
        .iter()
        .map(|&u| if u == ZERO_RUN { 0.0 } else { pow2(u) })
        .collect()
}

/// The runs of one output row (a weight row, or a vector item) across the tile columns, on a
/// common unit: the row's smallest unit (`base`, as `2^base`; 1 for a row of zero runs) and
/// each run's unit above it (`shift`, 0 for a zero run), so that a tile partial `P` of runs
/// with shifts `a` and `b` is `(P << (a + b)) * 2^(base_w + base_x)`. `unit_of(row, j)` is the
/// index of run `j` of `row` in `units`; the shifts come in the same layout.
struct Aligned {
    base: Vec<f64>,
    shift: Vec<i32>,
}

impl Aligned {
    fn new(
        units: &[i32],
        rows: usize,
        cols: usize,
        unit_of: impl Fn(usize, usize) -> usize,
    ) -> Aligned {
        let mut shift = vec![0; units.len()];
        let base = (0..rows)
            .map(|row| {
                let span = Span::of((0..cols).map(|j| units[unit_of(row, j)]));
                let lo = if span.is_empty() { 0 } else { span.lo };
                for j in 0..cols {
                    let k = unit_of(row, j);
                    shift[k] = if units[k] == ZERO_RUN {
                        0
                    } else {
                        units[k] - lo
                    };
                }
                pow2(lo)
            })
            .collect();
        Aligned { base, shift }
    }
}

/// One task's part of every tile column of an [`IntVector`] being built: its items'
/// integers and units, by column.
type ColumnParts<'a> = (Vec<&'a mut [i16]>, Vec<&'a mut [i32]>);

/// A vector `[b, cols * n]` as integers.
pub struct IntVector {
    b: usize,
    /// Tile `j` of item `bi` at `(j * b + bi) * n`.
    q: Vec<i16>,
    /// Unit of tile `j` of item `bi` at `j * b + bi`, and its `2^unit`.
    unit: Vec<i32>,
    scale: Vec<f64>,
    /// Every item on a common unit across its tiles (`base` by item, `shift` laid out as
    /// `unit`), for [`int_sums`].
    aligned: Aligned,
    bits: u32,
    /// The largest magnitude an integer may have ([`qmax`], or a slice's width).
    limit: i32,
}

impl IntVector {
    /// `x` is `[b, cols * n]` row-major; `None` when a tile does not fit.
    pub fn new(x: &[f64], b: usize, cols: usize, n: usize) -> Option<IntVector> {
        Self::with_limit(x, b, cols, n, qmax(n))
    }

    /// [`IntVector::new`] with integers of magnitude up to `qm`.
    fn with_limit(x: &[f64], b: usize, cols: usize, n: usize, qm: i32) -> Option<IntVector> {
        Self::from_runs(x, cols * n, b, cols, n, qm, |run, q| to_ints(run, q, qm))
    }

    /// The vector `quantize_runs` makes of `x` in `fmt` (BFP in blocks of `n` lanes), straight
    /// from `x` (item `bi` at `x[bi * stride..][..cols * n]`): the same integers and units as
    /// `new` of that vector, in one pass over `x` and none over the quantized values; `None`
    /// where `new` of it would be (a non-finite block), or could differ ([`mantissa_unit`]).
    pub fn quantized(
        x: &[f64],
        stride: usize,
        b: usize,
        cols: usize,
        n: usize,
        fmt: &BfpInts,
    ) -> Option<IntVector> {
        let qm = qmax(n);
        Self::from_runs(x, stride, b, cols, n, qm, |run, q| {
            quantized_ints(fmt, run, q, qm)
        })
    }

    /// Each tile of `x` (item `bi` at `x[bi * stride..][..cols * n]`) as integers and their
    /// unit by `ints(run, q)`, which keeps them within `qm`.
    fn from_runs(
        x: &[f64],
        stride: usize,
        b: usize,
        cols: usize,
        n: usize,
        qm: i32,
        ints: impl Fn(&[f64], &mut [i16]) -> Option<i32> + Sync,
    ) -> Option<IntVector> {
        let row = cols * n;
        let fits = b == 0 || (stride >= row && x.len() == (b - 1) * stride + row);
        if !supports(n) || !fits {
            return None;
        }
        let mut q = vec![0i16; b * row];
        let mut unit = vec![0i32; b * cols];
        // Items in parallel, a few thousand values per task (one tile is too little work to
        // hand to a thread), each item's tiles in the order of `x`. Tile j of item bi is run
        // `j * b + bi` of `q` and `unit`: a task holds its items' part of every tile column.
        let per_task = (PAR_VALUES / row.max(1)).max(1);
        let mut tasks: Vec<ColumnParts> = (0..b.div_ceil(per_task))
            .map(|_| (Vec::with_capacity(cols), Vec::with_capacity(cols)))
            .collect();
        for (qj, uj) in q.chunks_mut((b * n).max(1)).zip(unit.chunks_mut(b.max(1))) {
            let parts = qj.chunks_mut(per_task * n).zip(uj.chunks_mut(per_task));
            for (task, (qp, up)) in tasks.iter_mut().zip(parts) {
                task.0.push(qp);
                task.1.push(up);
            }
        }
        tasks
            .into_par_iter()
            .enumerate()
            .try_for_each(|(k, (mut qs, mut us))| {
                let items = us.first().map_or(0, |u| u.len());
                for i in 0..items {
                    let item = &x[(k * per_task + i) * stride..][..row];
                    for ((run, qj), uj) in item.chunks(n).zip(&mut qs).zip(&mut us) {
                        uj[i] = ints(run, &mut qj[i * n..][..n])?;
                    }
                }
                Some(())
            })?;
        Some(Self::assemble(b, q, unit, qm))
    }

    /// The vector whose tile columns are `columns`, in order: vectors of one tile column, of
    /// `b` items or of one item that stands for all `b` (a part every item shares). The same
    /// as [`IntVector::new`] of the concatenated values, since each tile's integers and unit
    /// depend on that tile alone; `None` for columns of another shape.
    pub fn from_columns(columns: &[&IntVector], b: usize) -> Option<IntVector> {
        let n = columns.first()?.q.len() / columns.first()?.b.max(1);
        let shaped =
            |c: &&IntVector| (c.b == b || c.b == 1) && c.unit.len() == c.b && c.q.len() == c.b * n;
        if b == 0 || !columns.iter().all(shaped) {
            return None;
        }
        let mut q = Vec::with_capacity(columns.len() * b * n);
        let mut unit = Vec::with_capacity(columns.len() * b);
        let limit = columns.iter().map(|c| c.limit).max().unwrap_or(0);
        for c in columns {
            if c.b == b {
                q.extend_from_slice(&c.q);
                unit.extend_from_slice(&c.unit);
            } else {
                for _ in 0..b {
                    q.extend_from_slice(&c.q);
                }
                unit.resize(unit.len() + b, c.unit[0]);
            }
        }
        Some(Self::assemble(b, q, unit, limit))
    }

    /// The vector whose tile columns are those of each of `parts` (of one batch) in turn, each
    /// part's `times` over.
    fn repeated(parts: &[IntVector], times: usize) -> IntVector {
        let b = parts.first().map_or(0, |p| p.b);
        let (mut q, mut unit) = (Vec::new(), Vec::new());
        for p in parts {
            for _ in 0..times {
                q.extend_from_slice(&p.q);
                unit.extend_from_slice(&p.unit);
            }
        }
        let limit = parts.iter().map(|p| p.limit).max().unwrap_or(0);
        Self::assemble(b, q, unit, limit)
    }

    /// The vector of `b` items with integers `q` (within `limit`) and units `unit` (tile `j`
    /// of item `bi` at run `j * b + bi`), and what the kernel derives from them.
    fn assemble(b: usize, q: Vec<i16>, unit: Vec<i32>, limit: i32) -> IntVector {
        let cols = unit.len() / b.max(1);
        let bits = mag_bits(&q);
        let scale = scales(&unit);
        let aligned = Aligned::new(&unit, b, cols, |bi, j| j * b + bi);
        IntVector {
            b,
            q,
            unit,
            scale,
            aligned,
            bits,
            limit,
        }
    }

    /// The values, `[b, cols * n]` row-major: each integer times its tile's `2^unit` (exact;
    /// zeros come out as `+0.0`, as BFP quantization gives them).
    pub fn restore(&self) -> Vec<f64> {
        if self.q.is_empty() {
            return Vec::new();
        }
        let (b, n) = (self.b, self.q.len() / self.unit.len());
        let cols = self.unit.len() / b.max(1);
        let mut out = vec![0.0; self.q.len()];
        out.par_chunks_mut(cols * n)
            .enumerate()
            .for_each(|(bi, row)| {
                for (j, run) in row.chunks_mut(n).enumerate() {
                    let t = j * b + bi;
                    let s = self.scale[t];
                    for (o, &q) in run.iter_mut().zip(&self.q[t * n..][..n]) {
                        *o = f64::from(q) * s;
                    }
                }
            });
        out
    }

    /// Batch items.
    pub fn batch(&self) -> usize {
        self.b
    }

    /// Tile columns.
    fn cols(&self) -> usize {
        self.unit.len() / self.b.max(1)
    }

    /// The integers: tile `j` of item `bi` at `(j * b + bi) * n`.
    pub fn ints(&self) -> &[i16] {
        &self.q
    }

    /// `2^unit` of tile `j` of item `bi` at `j * b + bi` (0 for a zero tile).
    pub fn tile_scales(&self) -> &[f64] {
        &self.scale
    }

    /// Units of items `b0..b0 + items`, every tile.
    fn span(&self, b0: usize, items: usize) -> Span {
        Span::of(
            self.unit
                .chunks(self.b)
                .flat_map(|u| u[b0..b0 + items].iter().copied()),
        )
    }
}

/// Whether the kernel computes every tile partial `P` of `w` times `x` exactly and every
/// scaled partial `P * 2^u_w * 2^u_x` is exact with room for the sums: `n` products of the
/// two sides' largest integers sum in `i32`, `P * 2^u_w` (below `2^31` units) is far from
/// overflow, the product at least f64's smallest normal and far from overflow too; and `x`
/// has the weights' tile columns, or a multiple of them that it reads in turn
/// ([`SlicedWeights`]).
pub fn fits(w: &IntWeights, x: &IntVector) -> bool {
    let (ws, xs) = (w.span(), x.span(0, x.b));
    let sums_fit = w.n as i64 * i64::from(w.limit) * i64::from(x.limit) <= i64::from(i32::MAX);
    let columns = w.cols > 0 && x.cols().is_multiple_of(w.cols);
    // An all-zero side: every partial is zero.
    let zero = ws.is_empty() || xs.is_empty();
    sums_fit
        && columns
        && (zero || (ws.hi <= 900 && ws.lo + xs.lo >= -1022 && ws.hi + xs.hi <= 900))
}

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
struct RunBits {
    /// From the top bit of the largest magnitude down to the lowest set bit of any value.
    span: u32,
    /// The most significant bits of one value (top bit to lowest set bit).
    value: u32,
}

impl RunBits {
    /// The bits of `run`, or `None` for a non-finite value (all zero for an all-zero run).
    fn of(run: &[f64]) -> Option<RunBits> {
        let (mut top, mut low, mut value) = (i32::MIN, i32::MAX, 0);
        for &v in run {
            if !v.is_finite() {
                return None;
            }
            if v == 0.0 {
                continue;
            }
            // The significand as an integer and the exponent of its last bit.
            let (_, sig, last) = super::exact::decompose(v);
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
/// its own ([`super::matmul::slices`], Ozaki's error-free splitting). A vector is split the
/// same way into `x_0 .. x_(T-1)` of at most `beta_x` bits, with `beta + beta_x` small enough
/// that `n` products of a weight and a vector integer sum in `i32` ([`fits`]). Then `W x` is
/// the sum of every `W_s x_t`, and the kernel computes it as one product of `S * T * cols`
/// tile columns: the weights' slices stored as tile columns `s * cols + j` and read in turn,
/// each vector slice's columns repeated `S` times. The exact sum over all of them is rounded
/// once, as every product's is.
pub struct SlicedWeights {
    w: IntWeights,
    slices: usize,
    beta_x: u32,
}

impl SlicedWeights {
    /// The stack `[rows * cols, n, n]` row-major, sliced for products with vectors like `x`
    /// (`[b, cols * n]`); `None` for a non-finite weight, a weight of more than
    /// [`MAX_VALUE_BITS`], or when every split takes more than [`MAX_PASSES`] passes.
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
        let short = |b: RunBits| (b.value <= MAX_VALUE_BITS).then_some(b.span);
        let spans: Vec<u32> = w
            .par_chunks(n)
            .map(|run| RunBits::of(run).and_then(short))
            .collect::<Option<_>>()?;
        // A vector the slices cannot take (non-finite or wide values) says nothing of the next
        // ones, and this split is kept for the session: then split for the narrowest vectors.
        let x_span = RunBits::widest(x, n).and_then(short).unwrap_or(0);
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
            match super::matmul::slices(&w[(i * cols + j) * nn..][..nn], n, beta) {
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
    /// [`MAX_VALUE_BITS`], needs more slices than [`MAX_PASSES`] allows, or the product does
    /// not [`fits`].
    pub fn matvec(&self, spec: &MatVec, x: &[f64], b: usize, simd: bool) -> Option<Vec<f64>> {
        let (n, cols) = (self.w.n, self.w.cols / self.slices);
        if spec.accumulation != Accumulation::Exact || b == 0 || x.len() != b * cols * n {
            return None;
        }
        RunBits::widest(x, n).filter(|b| b.value <= MAX_VALUE_BITS)?;
        let parts = super::matmul::slices(x, n, self.beta_x)?;
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
        Some(matvec(&spec, &self.w, &wide, simd))
    }
}

/// `y = W x` as [`super::matmul::matvec_exact`] defines it, on integer mantissas: `[b, rows *
/// n]`. The caller checks [`fits`]; `simd` picks the AVX2 kernel (the caller checks [`simd`]).
pub fn matvec(spec: &MatVec, w: &IntWeights, x: &IntVector, simd: bool) -> Vec<f64> {
    let per_task = items_per_task(x.b, w.rows, rayon::current_num_threads());
    matvec_tasks(spec, w, x, simd, per_task)
}

/// [`matvec`] with tasks of `per_task` batch items (and one row tile) each.
fn matvec_tasks(
    spec: &MatVec,
    w: &IntWeights,
    x: &IntVector,
    simd: bool,
    per_task: usize,
) -> Vec<f64> {
    // Tile column j of x reads weight column j % w.cols (the same column when x has as many).
    let (n, rows, cols, b) = (w.n, w.rows, x.cols(), x.b);
    debug_assert_eq!((spec.n, spec.rows, spec.cols), (n, rows, cols));
    let blocks = b.div_ceil(per_task);
    let sums = ExactSums::new(&spec.output);
    // Tasks: (block of items, row tile i). Each writes its runs of the output ([b, rows * n],
    // one run of n per item and row tile) in place, uninitialised until then.
    let mut out: Vec<f64> = Vec::with_capacity(b * rows * n);
    let mut task_runs: Vec<Vec<&mut [MaybeUninit<f64>]>> = (0..blocks * rows)
        .map(|_| Vec::with_capacity(per_task))
        .collect();
    for (e, run) in out.spare_capacity_mut()[..b * rows * n]
        .chunks_mut(n)
        .enumerate()
    {
        let (item, i) = (e / rows, e % rows);
        task_runs[(item / per_task) * rows + i].push(run);
    }
    task_runs
        .into_par_iter()
        .enumerate()
        .for_each(|(task, mut runs)| {
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
                sum_tiles(simd, w, i, &part, &mut acc, live, |j| {
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
                sum_tiles(simd, w, i, &part, &mut s, live, |j| {
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
                sum_tiles(simd, w, i, &part, &mut acc, live, |j| {
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
            let y: Vec<f64> = if spec.accumulation == Accumulation::Exact {
                // Running two-sums over the tile columns, fed straight from the kernel (the
                // columns that are zero for every item add nothing: skipped).
                let (mut s, mut err) = (vec![0.0f64; items * n], vec![0.0f64; items * n]);
                for j in (0..cols).filter(|&j| !part.empty(j)) {
                    let mut sink = Adds(|bi: usize, r0: usize, p: &[i32; ROW_BLOCK]| {
                        let at = bi * n + r0..bi * n + r0 + ROW_BLOCK;
                        ExactSums::add(&mut s[at.clone()], &mut err[at], &scaled(j, bi, r0, p));
                    });
                    kernel(
                        simd,
                        w.tile(i, j),
                        part.ints(j),
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
                        let p = dot_scalar(w.tile(i, j).ints, xs, n, r);
                        slow.add(f64::from(p) * w.scales(i, j)[r] * part.scales(j)[bi]);
                    }
                });
                s
            } else {
                // [cols][items * n] partials, then the per-tile rounding of the -seq modes.
                let mut all = vec![0.0f64; cols * items * n];
                for (j, t) in all.chunks_mut(items * n).enumerate() {
                    let mut sink = Emit(|bi: usize, r0: usize, p: &[i32; ROW_BLOCK]| {
                        t[bi * n + r0..][..ROW_BLOCK].copy_from_slice(&scaled(j, bi, r0, p));
                    });
                    kernel(simd, w.tile(i, j), part.ints(j), &[], n, &mut sink);
                }
                let mut acc = RowAcc::new(spec);
                (0..items * n)
                    .map(|e| {
                        for j in 0..cols {
                            acc.add(all[j * items * n + e]);
                            acc.end_tile();
                        }
                        acc.finish()
                    })
                    .collect()
            };
            // Every run written in full (the `set_len` below relies on it).
            assert_eq!(y.len(), runs.len() * n);
            for (run, y) in runs.iter_mut().zip(y.chunks(n)) {
                run.write_copy_of_slice(y);
            }
        });
    // SAFETY: the runs partition the first b * rows * n elements of the capacity, and every
    // task wrote each of its runs (one per item of its block) in full.
    unsafe { out.set_len(b * rows * n) };
    out
}

/// Items `b0..b0 + len` of a vector: one task's part.
struct Items<'a> {
    x: &'a IntVector,
    b0: usize,
    len: usize,
}

impl<'a> Items<'a> {
    /// The integers of tile column `j`.
    fn ints(&self, j: usize) -> &'a [i16] {
        let n = self.x.q.len() / self.x.unit.len().max(1);
        &self.x.q[(j * self.x.b + self.b0) * n..][..self.len * n]
    }

    /// `2^unit` of tile column `j`, by item.
    fn scales(&self, j: usize) -> &'a [f64] {
        &self.x.scale[j * self.x.b + self.b0..][..self.len]
    }

    /// The shifts of tile column `j` to each item's common unit ([`Aligned`]).
    fn shifts(&self, j: usize) -> &'a [i32] {
        &self.x.aligned.shift[j * self.x.b + self.b0..][..self.len]
    }

    /// Whether every item's run of tile column `j` is all zero (the unit `ZERO_RUN`, which
    /// `to_ints` and `mantissa_unit` give exactly the all-zero runs): the column's partials
    /// are all 0, and a sink that adds them ([`Sink::adds`]) can skip the column. A
    /// convolution's padding taps read such columns for every item, and a recurrence's zero
    /// initial state does at its first step.
    fn empty(&self, j: usize) -> bool {
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
    simd: bool,
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
            simd,
            w.tile(i, j),
            part.ints(j),
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
    // Every run written in full (`matvec_tasks`' `set_len` relies on it).
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
fn plain_sums(
    spec: &MatVec,
    w: &IntWeights,
    x: &IntVector,
    i: usize,
    b0: usize,
    items: usize,
) -> bool {
    spec.accumulation == Accumulation::Exact
        && sum_bits(w, x, w.row_span[i].width() + x.span(b0, items).width()) <= 53
}

/// Bits a sum of `cols` partials of `w` and `x` needs, each `|P| < n 2^(bits_w + bits_x)`
/// moved up by at most `spread` binades: `|sum| < 2^sum_bits`.
fn sum_bits(w: &IntWeights, x: &IntVector, spread: u32) -> u32 {
    ceil_log2(x.cols()) + ceil_log2(w.n) + w.bits + x.bits + spread
}

/// Whether the outputs of row tile `i` for items `b0..b0 + items` can be summed in integers
/// of `width` bits (`i32`: 32, `i64`: 64) on the rows' and items' common units
/// ([`Aligned`]), for `exact` accumulation: every shifted partial and every sum of them below
/// `2^(width - 1)` in magnitude. `|q| < 2^bits` on each side, so `|P| < n 2^(bits_w +
/// bits_x)`; a shift adds at most the spans; `cols` terms. The sum is then exact, and so is
/// its scaling by `2^(base_w + base_x)` (powers of two that [`fits`] keeps in range): the
/// same exact sum that [`plain_sums`] adds in f64, rounded once.
fn int_sums(
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
    spec.accumulation == Accumulation::Exact && sum_bits(w, x, w.shift_span[i] + span_x) < width
}

/// Whether every output of `w x` is such a plain sum (for the whole batch), so that a kernel
/// that adds the scaled partials in an order of its own ([`super::gpu`]) gets the same sums,
/// which [`round_sums`] then rounds as [`matvec`] does.
pub fn sums_exact_in_any_order(spec: &MatVec, w: &IntWeights, x: &IntVector) -> bool {
    (0..w.rows).all(|i| plain_sums(spec, w, x, i, 0, x.b))
}

/// Round exact sums of scaled partials to the product's output format, in place.
pub fn round_sums(spec: &MatVec, s: &mut [f64]) {
    ExactSums::new(&spec.output).round(s);
}

/// What the kernel does with the partials of rows `r0..r0 + ROW_BLOCK` of one item, block by
/// block, while they are in registers or L1.
trait Sink {
    fn take(&mut self, item: usize, r0: usize, p: &[i32; ROW_BLOCK]);

    /// The sums a [`Sums`] sink adds into, for the SIMD kernel's own vector epilogue; `None`
    /// for every other sink.
    fn sums(&mut self) -> Option<Epilogue<'_>> {
        None
    }

    /// Whether the sink only adds its partials to running sums, so that the kernel may skip
    /// row blocks without a nonzero weight: a zero added changes nothing (an `i32`, or an f64
    /// sum, which is never -0.0: it starts at +0.0, and x + y is -0.0 only when both are).
    fn adds(&self) -> bool {
        false
    }
}

/// Running sums of one task over the tile columns: `s[item * n + r] += term(P, w[r],
/// x[item])`, with the factors of the current tile column per row (`w`) and per item (`x`).
/// Plain f64 sums of the scaled partials (`w`, `x` the scales `2^u`; the common case of
/// `exact` accumulation), or integer sums on common units (`w`, `x` the shifts of
/// [`Aligned`]): `i32` where [`int_sums`] bounds them below `2^31`, `i64` below `2^63`. The
/// SIMD kernel does the same in vector registers. `n` is the sums per item: the tile's N, or
/// fewer where the rows after them have no nonzero weight (`live_rows` of [`IntWeights`]; the
/// kernel skips such row blocks for this sink, whose partials would add zeros).
struct Sums<'a, S: Sum> {
    s: &'a mut [S],
    w: &'a [S::Factor],
    x: &'a [S::Factor],
    n: usize,
}

/// A sum of [`Sums`]: what one partial adds, from its row's and its item's factors.
trait Sum: Copy + std::ops::AddAssign + Sized {
    type Factor: Copy + 'static;
    fn term(p: i32, w: Self::Factor, x: Self::Factor) -> Self;
    fn epilogue<'a>(sums: Sums<'a, Self>) -> Epilogue<'a>;
}

impl Sum for f64 {
    type Factor = f64;
    #[inline(always)]
    fn term(p: i32, w: f64, x: f64) -> f64 {
        f64::from(p) * w * x
    }
    fn epilogue<'a>(sums: Sums<'a, f64>) -> Epilogue<'a> {
        Epilogue::Plain(sums)
    }
}

impl Sum for i32 {
    type Factor = i32;
    #[inline(always)]
    fn term(p: i32, w: i32, x: i32) -> i32 {
        p << (w + x)
    }
    fn epilogue<'a>(sums: Sums<'a, i32>) -> Epilogue<'a> {
        Epilogue::Int(sums)
    }
}

impl Sum for i64 {
    type Factor = i32;
    #[inline(always)]
    fn term(p: i32, w: i32, x: i32) -> i64 {
        i64::from(p) << (w + x)
    }
    fn epilogue<'a>(sums: Sums<'a, i64>) -> Epilogue<'a> {
        Epilogue::Wide(sums)
    }
}

/// The sums of a [`Sums`] sink, by kind.
enum Epilogue<'a> {
    Plain(Sums<'a, f64>),
    Int(Sums<'a, i32>),
    Wide(Sums<'a, i64>),
}

impl<S: Sum> Sums<'_, S> {
    /// Whether rows `r0..r0 + ROW_BLOCK` of items `b0..b0 + items` lie inside every buffer.
    fn covers(&self, r0: usize, b0: usize, items: usize) -> bool {
        self.w.len() >= r0 + ROW_BLOCK
            && r0 + ROW_BLOCK <= self.n
            && self.x.len() >= b0 + items
            && self.s.len() >= (b0 + items) * self.n
    }
}

impl<S: Sum> Sink for Sums<'_, S> {
    #[inline(always)]
    fn take(&mut self, item: usize, r0: usize, p: &[i32; ROW_BLOCK]) {
        let (w, x) = (&self.w[r0..][..ROW_BLOCK], self.x[item]);
        let s = &mut self.s[item * self.n + r0..][..ROW_BLOCK];
        for k in 0..ROW_BLOCK {
            s[k] += S::term(p[k], w[k], x);
        }
    }

    fn sums(&mut self) -> Option<Epilogue<'_>> {
        Some(S::epilogue(Sums {
            s: &mut *self.s,
            w: self.w,
            x: self.x,
            n: self.n,
        }))
    }

    fn adds(&self) -> bool {
        true
    }
}

/// A closure as a sink (the rarer accumulation paths, tests).
struct Emit<F>(F);

impl<F: FnMut(usize, usize, &[i32; ROW_BLOCK])> Sink for Emit<F> {
    #[inline]
    fn take(&mut self, item: usize, r0: usize, p: &[i32; ROW_BLOCK]) {
        (self.0)(item, r0, p)
    }
}

/// A closure that adds the partials to running sums, as a sink ([`Sink::adds`]).
struct Adds<F>(F);

impl<F: FnMut(usize, usize, &[i32; ROW_BLOCK])> Sink for Adds<F> {
    #[inline]
    fn take(&mut self, item: usize, r0: usize, p: &[i32; ROW_BLOCK]) {
        (self.0)(item, r0, p)
    }

    fn adds(&self) -> bool {
        true
    }
}

/// Integer partials of one packed matrix tile with the vector tiles `xs` (`[items][n]`, with
/// their `units`, or none), handed to `sink`. A sink that adds each partial ([`Sink::adds`])
/// does not get the row blocks without a nonzero weight, nor (SIMD kernel) the register
/// blocks of items whose tiles are all zero (unit `ZERO_RUN`): their partials are 0. Every
/// other sink gets every block. The scalar loop multiplies every lane of every item (it is the
/// reference the tests hold the SIMD kernel, the tiles' reach and the items' units to).
fn kernel(simd: bool, tile: Tile<'_>, xs: &[i16], units: &[i32], n: usize, sink: &mut impl Sink) {
    assert!(supports(n) && tile.ints.len() == n * n && xs.len().is_multiple_of(n));
    assert!(tile.reach.len() == n / ROW_BLOCK && tile.reach.iter().all(|&p| 2 * p as usize <= n));
    assert!(units.is_empty() || units.len() == xs.len() / n);
    let skip_empty = sink.adds();
    #[cfg(target_arch = "x86_64")]
    if simd && self::simd() {
        // SAFETY: AVX2 and FMA are present (checked just above), `n` is a multiple of
        // ROW_BLOCK and the lengths and reaches are asserted above; every access of
        // `avx2::tile` is inside them.
        let zero = |b0: usize, c: usize| {
            skip_empty && !units.is_empty() && units[b0..b0 + c].iter().all(|&u| u == ZERO_RUN)
        };
        unsafe { avx2::tile(tile, skip_empty, xs, zero, n, sink) };
        return;
    }
    let _ = simd;
    for (bi, x) in xs.chunks(n).enumerate() {
        for r0 in (0..n).step_by(ROW_BLOCK) {
            if skip_empty && tile.reach[r0 / ROW_BLOCK] == 0 {
                continue;
            }
            sink.take(
                bi,
                r0,
                &std::array::from_fn(|k| dot_scalar(tile.ints, x, n, r0 + k)),
            );
        }
    }
}

/// The reference: row `r` of a packed tile times one vector tile, one lane at a time.
fn dot_scalar(tile: &[i16], x: &[i16], n: usize, r: usize) -> i32 {
    x.iter()
        .enumerate()
        .map(|(l, &xv)| i32::from(xv) * i32::from(tile[packed_at(n, r, l)]))
        .sum()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Epilogue, ITEM_BLOCK, ROW_BLOCK, Sink, Sum, Sums, Tile};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX2 and FMA must be present; `n % ROW_BLOCK == 0`, `tile.ints.len() == n * n`,
    /// `tile.reach.len() == n / ROW_BLOCK` and every `2 * tile.reach[rb] <= n`, `xs.len()` a
    /// multiple of `n`. With `skip_empty`, row blocks of reach 0 are not handed to `sink`;
    /// register blocks of items `b0..b0 + c` where `zero(b0, c)` are not either.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile(
        tile: Tile<'_>,
        skip_empty: bool,
        xs: &[i16],
        zero: impl Fn(usize, usize) -> bool,
        n: usize,
        sink: &mut impl Sink,
    ) {
        // A copy per common tile size: with `n` a constant, the items' vector rows are
        // constant offsets from one pointer, so the inner loop spends no instructions on their
        // addresses (it is bound by instruction dispatch, not only by `vpmaddwd`).
        // SAFETY: as this function's contract.
        unsafe {
            match n {
                64 => tile_n::<64>(tile, skip_empty, xs, &zero, n, sink),
                128 => tile_n::<128>(tile, skip_empty, xs, &zero, n, sink),
                256 => tile_n::<256>(tile, skip_empty, xs, &zero, n, sink),
                _ => tile_n::<0>(tile, skip_empty, xs, &zero, n, sink),
            }
        }
    }

    /// [`tile`] for `n == N`, or any `n` where `N == 0`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile_n<const N: usize>(
        tile: Tile<'_>,
        skip_empty: bool,
        xs: &[i16],
        zero: &impl Fn(usize, usize) -> bool,
        n: usize,
        sink: &mut impl Sink,
    ) {
        let n = if N == 0 { n } else { N };
        let items = xs.len() / n;
        for (rb, &pairs) in tile.reach.iter().enumerate() {
            if skip_empty && pairs == 0 {
                continue;
            }
            // The lane pairs up to the block's last nonzero weight: the rest add zeros.
            let w = &tile.ints[rb * ROW_BLOCK * n..][..ROW_BLOCK * 2 * pairs as usize];
            let mut b0 = 0;
            while b0 < items {
                let c = (items - b0).min(ITEM_BLOCK);
                if zero(b0, c) {
                    b0 += c;
                    continue;
                }
                // SAFETY: as the function's contract; block() reads the row block `w` and
                // items b0..b0 + c of `xs`.
                unsafe {
                    match c {
                        6 => block::<6, N>(w, xs, n, rb, b0, sink),
                        5 => block::<5, N>(w, xs, n, rb, b0, sink),
                        4 => block::<4, N>(w, xs, n, rb, b0, sink),
                        3 => block::<3, N>(w, xs, n, rb, b0, sink),
                        2 => block::<2, N>(w, xs, n, rb, b0, sink),
                        _ => block::<1, N>(w, xs, n, rb, b0, sink),
                    }
                }
                b0 += c;
            }
        }
    }

    /// The shifts of rows `r0..r0 + 16` of an integer sink, once it is checked to cover rows
    /// `r0..r0 + 16` of items `b0..b0 + c` (the epilogue's stores rely on it).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn row_shifts<S: Sum<Factor = i32>>(
        sums: &Sums<'_, S>,
        r0: usize,
        b0: usize,
        c: usize,
    ) -> [__m256i; 2] {
        assert!(sums.covers(r0, b0, c));
        // SAFETY: r0 + 16 <= w.len() (asserted above).
        unsafe {
            [
                _mm256_loadu_si256(sums.w.as_ptr().add(r0) as *const __m256i),
                _mm256_loadu_si256(sums.w.as_ptr().add(r0 + 8) as *const __m256i),
            ]
        }
    }

    /// Rows `rb * 16..` + 16 of items `b0..b0 + C`: `w` is the row block's first lane pairs,
    /// `[pairs][16][2]` (all `n / 2` of them, or up to its last nonzero weight).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn block<const C: usize, const N: usize>(
        w: &[i16],
        xs: &[i16],
        n: usize,
        rb: usize,
        b0: usize,
        sink: &mut impl Sink,
    ) {
        let n = if N == 0 { n } else { N };
        let mut acc = [[_mm256_setzero_si256(); 2]; C];
        let (wp, xp) = (w.as_ptr(), xs.as_ptr());
        for kp in 0..w.len() / (2 * ROW_BLOCK) {
            // SAFETY: kp * 32 + 32 <= w.len() <= 16 * n; (b0 + c) * n + 2 * kp + 2 <=
            // xs.len() (2 kp + 2 <= n).
            unsafe {
                let w0 = _mm256_loadu_si256(wp.add(kp * 32) as *const __m256i);
                let w1 = _mm256_loadu_si256(wp.add(kp * 32 + 16) as *const __m256i);
                for (c, a) in acc.iter_mut().enumerate() {
                    let xv = (xp.add((b0 + c) * n + 2 * kp) as *const i32).read_unaligned();
                    let xb = _mm256_set1_epi32(xv);
                    a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(w0, xb));
                    a[1] = _mm256_add_epi32(a[1], _mm256_madd_epi16(w1, xb));
                }
            }
        }
        let r0 = rb * ROW_BLOCK;
        match sink.sums() {
            Some(Epilogue::Int(sums)) => {
                // s[item * n + r] += P << (w[r] + x[item]).
                let row_shift = row_shifts(&sums, r0, b0, C);
                let (s, n) = (sums.s, sums.n);
                for (c, a) in acc.iter().enumerate() {
                    let item_shift = _mm256_set1_epi32(sums.x[b0 + c]);
                    for (t, v) in a.iter().enumerate() {
                        let shift = _mm256_add_epi32(row_shift[t], item_shift);
                        // SAFETY: (b0 + c) * n + r0 + 8 t + 8 <= (b0 + C) * n <= s.len()
                        // (r0 + 16 <= n and the length, asserted above).
                        unsafe {
                            let sp = s.as_mut_ptr().add((b0 + c) * n + r0 + 8 * t) as *mut __m256i;
                            let total = _mm256_add_epi32(
                                _mm256_loadu_si256(sp),
                                _mm256_sllv_epi32(*v, shift),
                            );
                            _mm256_storeu_si256(sp, total);
                        }
                    }
                }
                return;
            }
            Some(Epilogue::Wide(sums)) => {
                // s[item * n + r] += P << (w[r] + x[item]), in i64: each half of a register's
                // eight partials sign-extended, shifted by its rows' shifts, added.
                let row_shift = row_shifts(&sums, r0, b0, C);
                let (s, n) = (sums.s, sums.n);
                let wide = |v: __m256i| {
                    [
                        _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)),
                        _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(v)),
                    ]
                };
                for (c, a) in acc.iter().enumerate() {
                    let item_shift = _mm256_set1_epi32(sums.x[b0 + c]);
                    for (t, v) in a.iter().enumerate() {
                        let shift = wide(_mm256_add_epi32(row_shift[t], item_shift));
                        for (h, p) in wide(*v).into_iter().enumerate() {
                            // SAFETY: (b0 + c) * n + r0 + 8 t + 4 h + 4 <= (b0 + C) * n <=
                            // s.len() (r0 + 16 <= n and the length, asserted above).
                            unsafe {
                                let sp = s.as_mut_ptr().add((b0 + c) * n + r0 + 8 * t + 4 * h)
                                    as *mut __m256i;
                                let total = _mm256_add_epi64(
                                    _mm256_loadu_si256(sp),
                                    _mm256_sllv_epi64(p, shift[h]),
                                );
                                _mm256_storeu_si256(sp, total);
                            }
                        }
                    }
                }
                return;
            }
            Some(Epilogue::Plain(sums)) => {
                // s[item * n + r] += P * w[r] * x[item], as one FMA: w * x = 2^(u_w + u_x)
                // is exact (`fits` keeps the units inside the normal range), so is P *
                // 2^(u_w + u_x), and the FMA's one rounding is the addition's.
                assert!(sums.covers(r0, b0, C));
                let (s, n) = (sums.s, sums.n);
                for (c, a) in acc.iter().enumerate() {
                    let sxv = _mm256_set1_pd(sums.x[b0 + c]);
                    for (t, v) in a.iter().enumerate() {
                        let halves = [
                            _mm256_cvtepi32_pd(_mm256_castsi256_si128(*v)),
                            _mm256_cvtepi32_pd(_mm256_extracti128_si256::<1>(*v)),
                        ];
                        for (h, p) in halves.into_iter().enumerate() {
                            let r = r0 + 8 * t + 4 * h;
                            // SAFETY: r + 4 <= r0 + 16 <= w.len() and (b0 + c) * n + r + 4 <=
                            // (b0 + C) * n <= s.len() (asserted above; r0 + 16 <= n).
                            unsafe {
                                let w = _mm256_loadu_pd(sums.w.as_ptr().add(r));
                                let sp = s.as_mut_ptr().add((b0 + c) * n + r);
                                let wsx = _mm256_mul_pd(w, sxv);
                                _mm256_storeu_pd(sp, _mm256_fmadd_pd(p, wsx, _mm256_loadu_pd(sp)));
                            }
                        }
                    }
                }
                return;
            }
            None => {}
        }
        let mut p = [0i32; ROW_BLOCK];
        for (c, a) in acc.iter().enumerate() {
            for (t, v) in a.iter().enumerate() {
                // SAFETY: 8 * t + 8 <= ROW_BLOCK = p.len().
                unsafe { _mm256_storeu_si256(p.as_mut_ptr().add(8 * t) as *mut __m256i, *v) };
            }
            sink.take(b0 + c, r0, &p);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::exec::matmul::matvec_exact;
    use nnp_numerics::FloatFormat;

    #[test]
    fn qmax_by_hand() {
        // 128 * 4095^2 = 2,146,435,200 <= 2^31 - 1 < 128 * 4096^2.
        assert_eq!(qmax(128), 4095);
        // 16 * 11585^2 = 2,147,395,600 <= 2^31 - 1 < 16 * 11586^2.
        assert_eq!(qmax(16), 11585);
        // Small N: capped by i16.
        assert_eq!(qmax(1), 32767);
    }

    #[test]
    fn runs_to_integers_by_hand() {
        let mut q = [0i16; 16];
        let qm = qmax(16);
        assert_eq!(qm, 11585);
        // 11585 holds 13 bits: the largest magnitude 15.875 < 2^4 gives the unit 2^(4 - 13),
        // q = [8128, -512, 64, 0, -7936]; all share 6 trailing zero bits: unit 2^-3.
        let v = [
            15.875,
            -1.0,
            0.125,
            0.0,
            -16.0 + 0.5,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
        ];
        let mut v16 = [0.0; 16];
        v16[..12].copy_from_slice(&v);
        assert_eq!(to_ints(&v16, &mut q, qm), Some(-3));
        assert_eq!(q[..5], [127, -8, 1, 0, -124]);
        // -16 = -2^4: top 4, unit 2^(5 - 13) = 2^-8, q = -4096, then 2^-3 again: -128.
        v16[0] = -16.0;
        assert_eq!(to_ints(&v16, &mut q, qm), Some(-3));
        assert_eq!(q[0], -128);
        // 8191 * 2^-9 next to 15.875 needs all 13 bits at the unit 2^-9 (8191 is odd).
        v16[0] = 15.875;
        v16[1] = 8191.0 * 2f64.powi(-9);
        assert_eq!(to_ints(&v16, &mut q, qm), Some(-9));
        assert_eq!(q[..2], [8128, 8191]);
        // 2^-10 is half a unit of 2^-9: refused.
        v16[0] = 15.875;
        v16[1] = 2f64.powi(-10);
        assert_eq!(to_ints(&v16, &mut q, qm), None);
        // Non-finite and all-zero runs.
        let mut w = [0.0; 16];
        w[3] = f64::INFINITY;
        assert_eq!(to_ints(&w, &mut q, qm), None);
        w[3] = f64::NAN;
        assert_eq!(to_ints(&w, &mut q, qm), None);
        w[3] = -0.0;
        assert_eq!(to_ints(&w, &mut q, qm), Some(ZERO_RUN));
        assert!(q.iter().all(|&x| x == 0));
        // Units outside f64's normal scaling: 2^-1040 (subnormal) is refused, not mis-scaled.
        w[3] = 2f64.powi(-1040);
        assert_eq!(to_ints(&w, &mut q, qm), None);
        // BFP mantissas at unit 2^lsb (N = 128: 12 bits): the shared trailing zeros go to the
        // unit; all zeros are a zero run; 4096 needs 13 bits and a unit whose
        // `floor_log2(max) + 1 - 12` is past -1022 is refused.
        let qm = qmax(128);
        let mut m = [4i16, -8, 0, 12];
        assert_eq!(mantissa_unit(&mut m, 3, qm), Some(5));
        assert_eq!(m, [1, -2, 0, 3]);
        let mut m = [127i16, -2, 0, 0];
        assert_eq!(mantissa_unit(&mut m, -6, qm), Some(-6));
        assert_eq!(m, [127, -2, 0, 0]);
        assert_eq!(mantissa_unit(&mut [0i16; 4], 7, qm), Some(ZERO_RUN));
        assert_eq!(mantissa_unit(&mut [4096i16, 0, 0, 0], 0, qm), None);
        assert_eq!(mantissa_unit(&mut [-4095i16, 0, 0, 0], 0, qm), Some(0));
        assert_eq!(mantissa_unit(&mut [1i16, 0, 0, 0], -1011, qm), Some(-1011));
        assert_eq!(mantissa_unit(&mut [1i16, 0, 0, 0], -1012, qm), None);
    }

    /// Every tile of a vector built by tasks of several items ([`PAR_VALUES`]; the last task
    /// shorter) holds what [`to_ints`] gives for that tile alone, at its place in the layout
    /// (tile `j` of item `bi` at `j * b + bi`), read from items laid out with gaps too.
    #[test]
    fn int_vectors_split_into_tasks_hold_every_tile() {
        let (n, cols) = (128, 3);
        let per_task = PAR_VALUES / (cols * n);
        let mut s = 0x1234_5678_9abc_def1u64;
        for b in [1, per_task, per_task + 1, 2 * per_task + 7] {
            let x = run_values(&mut s, n, b * cols, 3);
            let stride = cols * n + 5;
            let mut wide = vec![f64::NAN; (b - 1) * stride + cols * n];
            for (bi, item) in x.chunks(cols * n).enumerate() {
                wide[bi * stride..][..cols * n].copy_from_slice(item);
            }
            let fmt = "bfp(mant = 8, block = native, exp_bits = 8)";
            let fmt: nnp_numerics::Format = fmt.parse().expect("format");
            let bfp = BfpInts::new(&fmt, n, mantissa_limit(n)).expect("bfp 8");
            let xi = IntVector::new(&x, b, cols, n).expect("fits");
            let xq = IntVector::quantized(&wide, stride, b, cols, n, &bfp).expect("fits");
            let mut q = vec![0i16; n];
            let mut quantized = vec![0.0; n];
            for bi in 0..b {
                for j in 0..cols {
                    let (t, run) = (j * b + bi, &x[(bi * cols + j) * n..][..n]);
                    let u = to_ints(run, &mut q, qmax(n));
                    assert_eq!(Some(xi.unit[t]), u, "b {b}, item {bi}, tile {j}");
                    assert_eq!(xi.q[t * n..][..n], q[..], "b {b}, item {bi}, tile {j}");
                    // The quantized vector: the tile quantized, then to integers.
                    crate::exec::quant::quantize_runs(&fmt, run, n, n, &mut quantized);
                    let u = to_ints(&quantized, &mut q, qmax(n));
                    assert_eq!(Some(xq.unit[t]), u, "b {b}, item {bi}, tile {j}: quantized");
                    assert_eq!(xq.q[t * n..][..n], q[..], "b {b}, item {bi}, tile {j}");
                }
            }
        }
    }

    /// A vector quantized straight to integers ([`IntVector::quantized`]) is the vector that
    /// `quantize_runs` then [`IntVector::new`] give, field by field (integers, units, scales,
    /// bits, common units), or `None` exactly where that is; and its [`IntVector::restore`] is
    /// `quantize_runs`' output, bit for bit. Formats: BFP at mantissas of 2 to 13 bits (13
    /// only symmetric: the full range's -4096 is past `to_ints`' 12 bits at N = 128 and is
    /// refused, as are 14 bits, blocks other than the run, stochastic rounding and non-BFP
    /// formats), every deterministic rounding, 3- to 8-bit exponents, N = 16 and 128. Data:
    /// mantissa ties on both sides of zero, saturation (values past the largest exponent and
    /// past the largest mantissa), exponents clamped from below (a block of values under the
    /// smallest exponent, f64 subnormals), zeros and `-0.0`, all-zero runs, fp16 values and
    /// tiles whose magnitudes lie 2^-40 to 2^40 apart; a NaN or an infinity in one run makes
    /// both `None`. Items laid out with gaps between them (a slice of wider rows) give the
    /// same vector.
    #[test]
    fn quantized_vectors_equal_quantize_then_to_ints() {
        use crate::exec::quant::quantize_runs;
        use nnp_numerics::Format;
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let (mut taken, mut refused) = (0, 0);
        for n in [16usize, 128] {
            let limit = mantissa_limit(n);
            for round in ["even", "away", "zero"] {
                for (mant, exp_bits, range) in [
                    (2, 5, "sym"),
                    (3, 3, "full"),
                    (5, 5, "sym"),
                    (8, 5, "sym"),
                    (8, 8, "full"),
                    (12, 4, "full"),
                    (13, 5, "sym"),
                    (13, 5, "full"),
                    (14, 5, "sym"),
                ] {
                    let text = format!(
                        "bfp(mant = {mant}, block = native, exp_bits = {exp_bits}, \
                         round = {round}, range = {range})"
                    );
                    let fmt: Format = text.parse().expect("format");
                    let Format::Bfp(bfp) = &fmt else {
                        panic!("{text} is BFP")
                    };
                    let Some(f) = BfpInts::new(&fmt, n, limit) else {
                        // Refused exactly where a mantissa could reach `to_ints`' limit.
                        let widest = bfp.max_mant() + i64::from(range == "full");
                        assert!(widest >= i64::from(limit), "{text} refused at N = {n}");
                        continue;
                    };
                    let (lo, hi) = bfp.exp_range();
                    let (b, cols) = (3, 4);
                    for case in 0..24 {
                        let mut x = vec![0.0; b * cols * n];
                        for (r, run) in x.chunks_mut(n).enumerate() {
                            let kind = (r + case) % 8;
                            let e = match kind {
                                // Past the largest exponent, or under the smallest.
                                3 => hi + 2,
                                4 => lo - 3,
                                _ => (xorshift(&mut s) % 81) as i32 - 40,
                            }
                            .clamp(-1000, 1000);
                            let lsb = e.clamp(lo, hi) - (mant - 2);
                            for (i, v) in run.iter_mut().enumerate() {
                                let r = xorshift(&mut s);
                                let sign = if r & 1 == 1 { -1.0 } else { 1.0 };
                                let m = (r >> 8) % (1 << (mant - 1)) as u64;
                                *v = sign
                                    * match kind {
                                        // Ties of the mantissa's unit, the largest one too.
                                        0 if i == 0 => pow2(e) * 1.5,
                                        0 => (m as f64 + 0.5) * pow2(lsb),
                                        1 => ((1u64 << (mant - 1)) as f64 - 0.5) * pow2(lsb),
                                        2 => [0.0, -0.0][i % 2],
                                        5 => 5e-324 * (m + 1) as f64,
                                        6 => half::f16::from_f64(
                                            (r >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0,
                                        )
                                        .to_f64(),
                                        _ => {
                                            (1.0 + (r >> 11) as f64 / (1u64 << 53) as f64)
                                                * pow2(e - (i % 7) as i32)
                                        }
                                    };
                            }
                        }
                        // Now and then a non-finite value in one run.
                        if case % 11 == 10 {
                            x[n + 3] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][case % 3];
                        }
                        let mut quantized = vec![0.0; x.len()];
                        quantize_runs(&fmt, &x, n, n, &mut quantized);
                        let want = IntVector::new(&quantized, b, cols, n);
                        let got = IntVector::quantized(&x, cols * n, b, cols, n, &f);
                        let case = format!("{text}, N = {n}, case {case}");
                        // The same items `2n + 3` values apart, NaN between them (never read).
                        let stride = cols * n + 2 * n + 3;
                        let mut wide = vec![f64::NAN; (b - 1) * stride + cols * n];
                        for (bi, item) in x.chunks(cols * n).enumerate() {
                            wide[bi * stride..][..cols * n].copy_from_slice(item);
                        }
                        let strided = IntVector::quantized(&wide, stride, b, cols, n, &f);
                        match (&got, &strided) {
                            (Some(g), Some(w)) => assert!(same_vector(g, w), "{case}: strided"),
                            (None, None) => {}
                            _ => panic!("{case}: strided differs"),
                        }
                        match (&want, &got) {
                            (Some(w), Some(g)) => {
                                assert!(same_vector(w, g), "{case}");
                                let back: Vec<u64> =
                                    g.restore().iter().map(|v| v.to_bits()).collect();
                                let want: Vec<u64> =
                                    quantized.iter().map(|v| v.to_bits()).collect();
                                assert_eq!(back, want, "{case}: restored");
                                taken += 1;
                            }
                            (None, None) => refused += 1,
                            _ => panic!("{case}: {} vs {}", want.is_some(), got.is_some()),
                        }
                    }
                }
            }
        }
        assert!(
            taken > 200 && refused > 10,
            "{taken} taken, {refused} refused"
        );
        // Not BFP in runs of N: refused.
        for text in [
            "bfp(mant = 8, block = 16, exp_bits = 5)",
            "bfp(mant = 8, exp_bits = 5, round = stochastic(seed = 1))",
            "mx(elem = fp8e4m3, block = 32)",
        ] {
            let fmt: Format = text.parse().expect("format");
            assert!(
                BfpInts::new(&fmt, 128, mantissa_limit(128)).is_none(),
                "{text}"
            );
        }
    }

    #[test]
    fn packed_layout_by_hand() {
        // n = 32: row 17 is in row block 1, lane 5 in pair 2 (second of the pair).
        assert_eq!(packed_at(32, 17, 5), ((16 + 2) * 16 + 1) * 2 + 1);
        // Every (row, lane) lands on its own offset.
        let n = 32;
        let mut seen = vec![false; n * n];
        for r in 0..n {
            for l in 0..n {
                let o = packed_at(n, r, l);
                assert!(!seen[o]);
                seen[o] = true;
            }
        }
    }

    pub(crate) fn spec(
        n: usize,
        rows: usize,
        cols: usize,
        acc: Accumulation,
        out: FloatFormat,
    ) -> MatVec {
        MatVec {
            rows,
            cols,
            n,
            accumulation: acc,
            output: out,
        }
    }

    pub(crate) fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    /// Random operands of `spec` at batch `b` (weights, then vector: [`run_values`] with
    /// `spread`) as integers, and the exact reference's result for them.
    pub(crate) fn random_product(
        s: &mut u64,
        spec: &MatVec,
        b: usize,
        spread: u64,
    ) -> (Vec<f64>, IntWeights, IntVector) {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let w = run_values(s, n, rows * cols * n, spread);
        let x = run_values(s, n, b * cols, spread);
        let want = matvec_exact(spec, &x, b, &w);
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        let xi = IntVector::new(&x, b, cols, n).expect("fits");
        (want, wi, xi)
    }

    /// Runs of q * 2^u with adversarial units: per-run units 60 binades apart, all-zero runs,
    /// -128 and +-127 mantissas (saturated BFP), 12-bit mantissas (the largest that fit), and
    /// values that make fp16 ties and the inexact-running-sum path likely. `spread` binades of
    /// units: 61 takes the two-sum path, 3 mostly the plain one.
    pub(crate) fn run_values(s: &mut u64, len: usize, runs: usize, spread: u64) -> Vec<f64> {
        let mut v = vec![0.0; len * runs];
        for run in v.chunks_mut(len) {
            let kind = xorshift(s) % 6;
            let u = (xorshift(s) % spread) as i32 - 40;
            for x in run.iter_mut() {
                let q = match kind {
                    0 => 0,
                    1 => -128,
                    2 => [127, -127][(xorshift(s) % 2) as usize],
                    3 => (xorshift(s) % 8191) as i64 - 4095,
                    _ => (xorshift(s) % 255) as i64 - 127,
                };
                *x = q as f64 * 2f64.powi(u);
            }
        }
        v
    }

    /// [`IntWeights::restore`] gives back every bit of the stack the integers came from:
    /// adversarial runs ([`run_values`]), runs at both ends of the units the kernel accepts,
    /// zero rows. A stack with a `-0.0` (whose integer has no sign) is not restorable.
    #[test]
    fn restored_stacks_equal_their_source_bit_for_bit() {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for (n, rows, cols, spread) in [(16, 3, 2, 61), (128, 2, 3, 3), (32, 1, 1, 61)] {
            let mut w = run_values(&mut s, n, rows * cols * n, spread);
            // 2^-1010 and 2^900 units next to the others (-40 to +20).
            for (x, k) in w[..n].iter_mut().zip(0i32..) {
                *x = f64::from(127 - 2 * k) * 2f64.powi(-1010);
            }
            for (x, k) in w[n..2 * n].iter_mut().zip(0i32..) {
                *x = f64::from(-4095 + 3 * k) * 2f64.powi(900);
            }
            let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
            assert!(wi.restorable());
            assert_eq!(bits(&wi.restore().expect("restorable")), bits(&w), "n {n}");
            w[2 * n + 5] = -0.0;
            let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
            assert!(!wi.restorable());
            assert_eq!(wi.restore(), None);
        }
    }

    /// Batches cover every remainder of the SIMD kernel's 6-item register blocks: b = 1, 8, 9,
    /// 5 leave 1, 2, 3, 5; b = 70 is a task of 64 items (10 blocks of 6 and 4) and one of 6.
    /// Tile sizes cover the kernel's copies for n = 64, 128 and 256, and the general one (16,
    /// 32).
    #[test]
    fn kernels_agree_with_the_exact_reference_bit_for_bit() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for (n, rows, cols, b, acc, out) in [
            (16, 1, 1, 1, Accumulation::Exact, FloatFormat::FP16),
            (16, 1, 2, 8, Accumulation::Exact, FloatFormat::FP16),
            (128, 2, 3, 7, Accumulation::Exact, FloatFormat::FP16),
            (128, 1, 2, 70, Accumulation::Exact, FloatFormat::FP32),
            (128, 1, 2, 5, Accumulation::Fp32Seq, FloatFormat::FP16),
            (64, 2, 2, 9, Accumulation::Fp16Seq, FloatFormat::FP16),
            (32, 3, 4, 13, Accumulation::Exact, FloatFormat::BF16),
            (16, 2, 2, 3, Accumulation::Exact, FloatFormat::FP64),
        ] {
            let spec = spec(n, rows, cols, acc, out);
            for spread in [61, 61, 3, 3] {
                let (want, wi, xi) = random_product(&mut s, &spec, b, spread);
                assert!(fits(&wi, &xi));
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for simd in [false, true] {
                    let got = matvec(&spec, &wi, &xi, simd);
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "n {n} rows {rows} cols {cols} b {b}"
                    );
                }
                // Tasks of fewer items, as a product of few row tiles takes on more threads.
                for per_task in [6, 12, 18] {
                    let got = matvec_tasks(&spec, &wi, &xi, true, per_task);
                    assert_eq!(bits(&got), bits(&want), "{per_task} items per task, b {b}");
                }
                // The SIMD kernel (where present) and the scalar one give the same integers,
                // at every remainder of the item blocks.
                let tile = wi.tile(0, 0);
                let xs = &xi.q[..b * n];
                let blocks = |simd: bool| {
                    let mut v = Vec::new();
                    kernel(
                        simd,
                        tile,
                        xs,
                        // Units given: an emitting sink still gets every block.
                        &xi.unit[..b],
                        n,
                        &mut Emit(|bi, r0, p: &_| v.push((bi, r0, *p))),
                    );
                    v.sort_by_key(|e| (e.0, e.1));
                    v
                };
                let (a, c) = (blocks(true), blocks(false));
                assert_eq!(a.len(), b * n / ROW_BLOCK);
                assert_eq!(a, c);
            }
        }
        // n = 256 takes its own copy of the SIMD kernel. 12-bit mantissas do not fit there
        // (`qmax(256)` is 2896), so BFP 8's: +-127 at most, a unit per run of n.
        let (n, rows, cols, b) = (256, 2, 2, 11);
        let spec = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
        let values = |s: &mut u64, runs: usize| -> Vec<f64> {
            (0..runs * n)
                .map(|k| ((xorshift(s) % 255) as f64 - 127.0) * 2f64.powi((k / n % 7) as i32 - 3))
                .collect()
        };
        let (w, x) = (values(&mut s, rows * cols * n), values(&mut s, b * cols));
        let want = matvec_exact(&spec, &x, b, &w);
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        let xi = IntVector::new(&x, b, cols, n).expect("fits");
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for simd in [false, true] {
            assert_eq!(bits(&matvec(&spec, &wi, &xi, simd)), bits(&want), "n 256");
        }
    }

    /// Weights padded to the native dimension. Rows that end early: each row block's reach is
    /// its last nonzero lane pair (by hand), and the SIMD kernel, which stops there, gives the
    /// exact reference's bits and the scalar kernel's integers (which multiply every lane);
    /// the vectors are nonzero in every lane, so a reach one pair short drops a product. Zero
    /// rows at the end of a row tile: their outputs are +0.0 without a sum, as the exact
    /// reference gives them.
    #[test]
    fn padded_weights_skip_their_zero_lanes_and_rows() {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut s = 0x5851_f42d_4c95_7f2du64;
        // Row lengths in lanes (the rest of the row is zero), cycled over the rows.
        let lengths = [0, 1, 2, 3, 17, 0, 0, 31, 32, 5];
        for (n, rows, cols, b) in [(32, 2, 2, 7), (128, 1, 2, 13), (64, 1, 1, 6)] {
            let product = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
            let mut w = vec![0.0; rows * cols * n * n];
            for (r, row) in w.chunks_mut(n).enumerate() {
                let len = lengths[r % lengths.len()].min(n);
                for x in &mut row[..len] {
                    // Nonzero: 1..=127 with a random sign.
                    let q = (xorshift(&mut s) % 127 + 1) as f64;
                    *x = if xorshift(&mut s).is_multiple_of(2) {
                        q
                    } else {
                        -q
                    } * 2f64.powi(-7);
                }
            }
            // Row block 1 of the first tile all zero (n >= 32 has a second block).
            for row in w[..n * n].chunks_mut(n).skip(ROW_BLOCK).take(ROW_BLOCK) {
                row.fill(0.0);
            }
            let x: Vec<f64> = (0..b * cols * n)
                .map(|_| ((xorshift(&mut s) % 127 + 1) as f64) * 2f64.powi(-6))
                .collect();
            let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
            let xi = IntVector::new(&x, b, cols, n).expect("fits");
            // Tile (0, 0), block 0: rows 0..16 have lengths 0, 1, 2, 3, 17, 0, 0, 31, 32, 5,
            // 0, 1, 2, 3, 17, 0, the longest 32 lanes (16 pairs), or n when shorter.
            let tile = wi.tile(0, 0);
            assert_eq!(tile.reach[0], (32.min(n) / 2) as u32, "n {n}");
            assert_eq!(tile.reach[1], 0, "n {n}");
            let want = matvec_exact(&product, &x, b, &w);
            for simd in [false, true] {
                let got = matvec(&product, &wi, &xi, simd);
                assert_eq!(bits(&got), bits(&want), "n {n} simd {simd}");
            }
            for i in 0..rows {
                for j in 0..cols {
                    let xs = &xi.q[j * b * n..][..b * n];
                    let blocks = |simd: bool| {
                        let mut v = Vec::new();
                        kernel(
                            simd,
                            wi.tile(i, j),
                            xs,
                            &xi.unit[j * b..][..b],
                            n,
                            &mut Emit(|bi, r0, p: &_| v.push((bi, r0, *p))),
                        );
                        v.sort_by_key(|e| (e.0, e.1));
                        v
                    };
                    assert_eq!(blocks(true), blocks(false), "n {n} tile ({i}, {j})");
                }
            }
        }
        // A 16 x 16 matrix padded to a 128 x 128 tile (`elman_rnn_small`'s shape): one block
        // of 8 lane pairs, seven empty ones.
        let mut w = vec![0.0; 128 * 128];
        for (r, row) in w.chunks_mut(128).take(16).enumerate() {
            for (l, x) in row[..16].iter_mut().enumerate() {
                *x = ((r * 16 + l) % 255) as f64 - 127.0;
            }
        }
        let wi = IntWeights::new(&w, 1, 1, 128).expect("fits");
        assert_eq!(wi.tile(0, 0).reach, &[8, 0, 0, 0, 0, 0, 0, 0]);
        // Its outputs: the 16 rows summed in `i32`, the 112 padding rows +0.0 without a sum.
        assert_eq!(wi.live_rows, [16]);
        let padded = spec(128, 1, 1, Accumulation::Exact, FloatFormat::FP16);
        let x: Vec<f64> = (0..5 * 128)
            .map(|k| ((xorshift(&mut s) % 255) as f64 - 127.0) * 2f64.powi(k % 5 - 2))
            .collect();
        let xi = IntVector::new(&x, 5, 1, 128).expect("fits");
        assert!(int_sums(&padded, &wi, &xi, 0, 0, 5, 32));
        let want = matvec_exact(&padded, &x, 5, &w);
        for simd in [false, true] {
            assert_eq!(
                bits(&matvec(&padded, &wi, &xi, simd)),
                bits(&want),
                "padded, {simd}"
            );
        }
        // Row tiles whose live rows end at different blocks, and one that is all zero, with
        // empty row blocks between live ones: on `i32` sums, and on f64 sums (a row 30 binades
        // above the others spreads the units past what `i32` holds).
        let (n, rows, cols) = (32, 3, 2);
        let stack = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
        let x: Vec<f64> = (0..4 * cols * n).map(|k| (k % 7) as f64 - 3.0).collect();
        let xi = IntVector::new(&x, 4, cols, n).expect("fits");
        for high in [1.0, 2f64.powi(30)] {
            let mut w = vec![0.0; rows * cols * n * n];
            for (t, tile) in w.chunks_mut(n * n).enumerate() {
                let (i, j) = (t / cols, t % cols);
                // Row tile 0: row 20 in column tile 1, row 2 in both (times `high` in column
                // tile 0); row tile 1: row 3 in both; row tile 2: none.
                let live: &[(usize, usize, f64)] = match i {
                    0 => &[(20, 1, -3.0), (2, 0, 5.0 * high), (2, 1, 3.0)],
                    1 => &[(3, 0, 7.0), (3, 1, -1.0)],
                    _ => &[],
                };
                for &(r, _, v) in live.iter().filter(|e| e.1 == j) {
                    tile[r * n + n - 1] = v;
                }
            }
            let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
            assert_eq!(wi.live_rows, [32, 16, 0]);
            // Tile (0, 0): block 0 holds row 2, block 1 is empty.
            assert_eq!(wi.tile(0, 0).reach, &[16, 0]);
            let int_path = int_sums(&stack, &wi, &xi, 0, 0, 4, 32);
            assert_eq!(int_path, high == 1.0);
            assert!(int_path || plain_sums(&stack, &wi, &xi, 0, 0, 4));
            let want = matvec_exact(&stack, &x, 4, &w);
            for simd in [false, true] {
                let got = matvec(&stack, &wi, &xi, simd);
                assert_eq!(bits(&got), bits(&want), "high {high}, simd {simd}");
            }
        }
    }

    /// Every field of two vectors, floats by their bits.
    fn same_vector(a: &IntVector, b: &IntVector) -> bool {
        let f64_bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        a.b == b.b
            && a.q == b.q
            && a.unit == b.unit
            && f64_bits(&a.scale) == f64_bits(&b.scale)
            && a.bits == b.bits
            && f64_bits(&a.aligned.base) == f64_bits(&b.aligned.base)
            && a.aligned.shift == b.aligned.shift
    }

    /// A vector assembled from one-column vectors (some of one item, standing for every item)
    /// is `IntVector::new` of the concatenated values, field by field: adversarial runs
    /// ([`run_values`]) with units 61 binades apart, columns of both kinds interleaved.
    /// Columns of another batch, none at all, or a batch of 0 are refused.
    #[test]
    fn vectors_from_columns_equal_new_of_the_concatenation() {
        let mut s = 0x6a09_e667_f3bc_c908u64;
        let (n, b) = (16, 5);
        for spread in [61, 3] {
            // (items, values) per column: a column of one item stands for all five.
            let cols: Vec<(usize, Vec<f64>)> = [b, 1, b, b, 1, b]
                .into_iter()
                .map(|items| (items, run_values(&mut s, n, items, spread)))
                .collect();
            let columns: Vec<IntVector> = cols
                .iter()
                .map(|(items, v)| IntVector::new(v, *items, 1, n).expect("fits"))
                .collect();
            let mut full = vec![0.0; b * cols.len() * n];
            for (j, (items, v)) in cols.iter().enumerate() {
                for bi in 0..b {
                    let item = if *items == 1 { 0 } else { bi };
                    full[(bi * cols.len() + j) * n..][..n].copy_from_slice(&v[item * n..][..n]);
                }
            }
            let want = IntVector::new(&full, b, cols.len(), n).expect("fits");
            let refs: Vec<&IntVector> = columns.iter().collect();
            let got = IntVector::from_columns(&refs, b).expect("assembled");
            assert!(same_vector(&got, &want), "spread {spread}");
        }
        let three = IntVector::new(&run_values(&mut s, n, 3, 3), 3, 1, n).expect("fits");
        assert!(IntVector::from_columns(&[&three], b).is_none());
        assert!(IntVector::from_columns(&[], b).is_none());
        assert!(IntVector::from_columns(&[&three], 0).is_none());
    }

    /// Tile columns that are zero for every item of a task (a convolution's padding taps, a
    /// zero initial state) are skipped by the sums, with the exact reference's bits on each
    /// sum path: a column zero for the whole batch (`-0.0` in one item), one zero for the
    /// first task's items only, one zero for a single item (not skipped with the others).
    /// Which columns a task skips, by hand.
    #[test]
    fn columns_zero_for_every_item_are_skipped_exactly() {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut s = 0x3c6e_f372_fe94_f82bu64;
        let (n, rows, cols, b) = (32, 2, 4, 13);
        // Spread 61: running two-sums; spread 3: sums in i32 or plain f64.
        for spread in [61, 3] {
            let product = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
            let w = run_values(&mut s, n, rows * cols * n, spread);
            let mut x = run_values(&mut s, n, b * cols, spread);
            for (bi, item) in x.chunks_mut(cols * n).enumerate() {
                for (j, run) in item.chunks_mut(n).enumerate() {
                    let zero = match j {
                        1 => Some(if bi == 3 { -0.0 } else { 0.0 }),
                        2 => (bi < 6).then_some(0.0),
                        3 => (bi == 7).then_some(0.0),
                        _ => None,
                    };
                    match zero {
                        Some(z) => run.fill(z),
                        // Every other run has a nonzero value.
                        None if run.iter().all(|v| *v == 0.0) => run.fill(2f64.powi(-40)),
                        None => {}
                    }
                }
            }
            let want = matvec_exact(&product, &x, b, &w);
            let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
            let xi = IntVector::new(&x, b, cols, n).expect("fits");
            let skipped = |b0: usize, len: usize| -> Vec<usize> {
                let part = Items { x: &xi, b0, len };
                (0..cols).filter(|&j| part.empty(j)).collect()
            };
            assert_eq!(skipped(0, 6), [1, 2]);
            assert_eq!(skipped(6, 6), [1]);
            assert_eq!(skipped(12, 1), [1]);
            assert_eq!(skipped(0, 13), [1]);
            assert_eq!(skipped(7, 1), [1, 3]);
            let cheap = int_sums(&product, &wi, &xi, 0, 0, 6, 32)
                || plain_sums(&product, &wi, &xi, 0, 0, 6);
            assert_eq!(cheap, spread == 3, "spread {spread}");
            for per_task in [6, 12, 18] {
                for simd in [false, true] {
                    let got = matvec_tasks(&product, &wi, &xi, simd, per_task);
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "spread {spread}, {per_task} per task"
                    );
                }
            }
        }
    }

    /// The SIMD kernel skips the register blocks (6 items) whose vector tiles are all zero
    /// for a sink that adds: with items 0..6 zero (a whole block), item 8 (one of a block)
    /// and item 12 (the last block, alone), only items 6..12 reach the sink, and every sum
    /// equals the scalar kernel's, which multiplies every item.
    #[test]
    fn kernel_skips_register_blocks_of_zero_vectors() {
        let mut s = 0x1f83_d9ab_fb41_bd6bu64;
        let (n, b) = (128, 13);
        let w = run_values(&mut s, n, n, 3);
        let mut x = run_values(&mut s, n, b, 3);
        for (bi, run) in x.chunks_mut(n).enumerate() {
            if bi < 6 || bi == 8 || bi == 12 {
                run.fill(0.0);
            } else if run.iter().all(|v| *v == 0.0) {
                run.fill(1.0);
            }
        }
        let wi = IntWeights::new(&w, 1, 1, n).expect("fits");
        let xi = IntVector::new(&x, b, 1, n).expect("fits");
        assert!(
            xi.unit
                .iter()
                .enumerate()
                .all(|(bi, &u)| (u == ZERO_RUN) == (bi < 6 || bi == 8 || bi == 12))
        );
        let sums = |simd: bool| {
            let (mut sum, mut items) = (vec![0i64; b * n], std::collections::BTreeSet::new());
            let mut sink = Adds(|bi: usize, r0: usize, p: &[i32; ROW_BLOCK]| {
                items.insert(bi);
                for (k, &v) in p.iter().enumerate() {
                    sum[bi * n + r0 + k] += i64::from(v);
                }
            });
            kernel(simd, wi.tile(0, 0), &xi.q, &xi.unit, n, &mut sink);
            (sum, items)
        };
        let (want, all) = sums(false);
        assert_eq!(all.len(), b, "the scalar kernel takes every item");
        let (got, taken) = sums(true);
        assert_eq!(got, want);
        if simd() {
            assert_eq!(
                taken.into_iter().collect::<Vec<_>>(),
                (6..12).collect::<Vec<_>>()
            );
        }
    }

    /// Items per task, by hand: 64 where the row tiles alone give every thread two tasks;
    /// otherwise about two tasks per thread, in multiples of 6 items.
    #[test]
    fn items_per_task_by_hand() {
        // LSTM 1024 at batch 64 on 2 threads: 8 row tiles x 1 block of 64.
        assert_eq!(items_per_task(64, 8, 2), 64);
        // A 96-row convolution (1 row tile) at batch 64 on 2 threads: 4 tasks of 18, 18, 18, 10.
        assert_eq!(items_per_task(64, 1, 2), 18);
        // 2 row tiles at batch 64 on 2 threads: 2 x 2 blocks of 32 -> 36 items (36 + 28).
        assert_eq!(items_per_task(64, 2, 2), 36);
        // 1 row tile at batch 256 on 2 threads: 4 blocks of 64 already.
        assert_eq!(items_per_task(256, 1, 2), 64);
        // Small batches: never fewer than one register block of 6.
        assert_eq!(items_per_task(5, 1, 16), 6);
        assert_eq!(items_per_task(1, 1, 1), 6);
        // 8 row tiles at batch 64 on 16 threads: 4 blocks each, 16 -> 18 items.
        assert_eq!(items_per_task(64, 8, 16), 18);
    }

    /// One tile at n = 128 with qmax = 4095 on both sides: x = -4095 everywhere, w row 0 =
    /// -4095, so its partial is 128 * 4095^2 = 2,146,435,200 (the largest i32 partial); row 1 =
    /// +4095: its negative; the other rows zero. Returns `(w, x)` as values and as integers.
    pub(crate) fn extreme_operands() -> ((Vec<f64>, Vec<f64>), (IntWeights, IntVector)) {
        let n = 128;
        let mut w = vec![0.0; n * n];
        w[..n].fill(-4095.0);
        w[n..2 * n].fill(4095.0);
        let x = vec![-4095.0; n];
        let wi = IntWeights::new(&w, 1, 1, n).expect("fits");
        let xi = IntVector::new(&x, 1, 1, n).expect("fits");
        ((w, x), (wi, xi))
    }

    #[test]
    fn extreme_products_by_hand() {
        let n = 128;
        let spec = spec(n, 1, 1, Accumulation::Exact, FloatFormat::FP64);
        let (_, (wi, xi)) = extreme_operands();
        for simd in [false, true] {
            let y = matvec(&spec, &wi, &xi, simd);
            assert_eq!(y[0], 2_146_435_200.0);
            assert_eq!(y[1], -2_146_435_200.0);
            // Rows 2.. are zero: +0 (never -0).
            assert!(y[2..].iter().all(|v| v.to_bits() == 0));
        }
        // One more significant bit than qmax holds is refused.
        assert!(IntVector::new(&vec![-4096.0 - 1.0; n], 1, 1, n).is_none());
        // Units whose sum leaves f64's normal range are refused by `fits`.
        let tiny = vec![2f64.powi(-600); n];
        let xt = IntVector::new(&tiny, 1, 1, n).expect("fits");
        let wt = IntWeights::new(&vec![2f64.powi(-500); n * n], 1, 1, n).expect("fits");
        assert!(!fits(&wt, &xt));
    }

    /// Vectors for the integer sums' bound tests (two tile columns): column 0 in units
    /// `2^base`, column 1 in `2^(base + c)`; item 4 all zero, item 5 with mixed signs, the
    /// others 123 to 127 (7 bits, as BFP 8 mantissas at their largest).
    fn bound_items(b: usize, cols: usize, n: usize, base: i32, c: i32) -> Vec<f64> {
        (0..b * cols * n)
            .map(|e| {
                let (item, j, l) = (e / (cols * n), e / n % cols, e % n);
                let q = match item {
                    4 => 0.0,
                    5 => [127.0, -127.0, 99.0][l % 3],
                    _ => 127.0 - (l % 5) as f64,
                };
                q * 2f64.powi(if j == 1 { base + c } else { base })
            })
            .collect()
    }

    /// The i64 sums on common units ([`int_sums`] of width 64) give the exact reference's bits
    /// where neither i32 nor plain f64 sums are exact, up to their bound: BFP 8 mantissas at
    /// their largest with weight and vector units `a` and `c` binades apart across two tile
    /// columns (both up in tile column 1, so its partials move up `a + c` binades), `1 + 7 + 7 +
    /// 7 + a + c <= 63` taken and one binade more refused (the running two-sums then give the
    /// same bits). At `a + c >= 32` the sums pass `2^53`: their two f64 halves do not add
    /// exactly and are summed again exactly (fp64 outputs keep the low half's bits). Outputs
    /// in fp64, fp32 and fp16, mixed signs, an all-zero weight row run and an all-zero item.
    #[test]
    fn wide_int_sums_equal_the_exact_reference_up_to_their_bound() {
        let (n, rows, cols, b) = (128, 1, 2, 9);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (a, c) in [
            (16, 15),
            (16, 16),
            (20, 10),
            (30, 11),
            (20, 21),
            (21, 21),
            (0, 42),
        ] {
            let mut w = vec![0.0; rows * cols * n * n];
            for (e, v) in w.iter_mut().enumerate() {
                // Every row run holds a 127: its unit is the tile's.
                let (t, r) = (e / (n * n), e / n % n);
                let q = [127.0, -127.0, 126.0][(r + e) % 3];
                *v = match (t, r) {
                    (1, 3) => 0.0,
                    (1, _) => q * 2f64.powi(a - 40),
                    _ => q * 2f64.powi(-40),
                };
            }
            let x = bound_items(b, cols, n, -20, c);
            let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
            let xi = IntVector::new(&x, b, cols, n).expect("fits");
            assert!(fits(&wi, &xi));
            let wide = a + c <= 41;
            for out in [FloatFormat::FP64, FloatFormat::FP32, FloatFormat::FP16] {
                let product = spec(n, rows, cols, Accumulation::Exact, out);
                assert!(!int_sums(&product, &wi, &xi, 0, 0, b, 32), "a {a} c {c}");
                assert_eq!(plain_sums(&product, &wi, &xi, 0, 0, b), a + c <= 31);
                assert_eq!(
                    int_sums(&product, &wi, &xi, 0, 0, b, 64),
                    wide,
                    "a {a} c {c}"
                );
                let want = matvec_exact(&product, &x, b, &w);
                for simd in [false, true] {
                    let got = matvec(&product, &wi, &xi, simd);
                    assert_eq!(bits(&got), bits(&want), "a {a} c {c} {out:?} simd {simd}");
                }
            }
        }
    }

    /// The i32 sums on common units ([`int_sums`]) give the exact reference's bits where the
    /// bound admits them, up to the bound: BFP 8 mantissas at their largest (+-127, so a tile
    /// partial is +-128 * 127^2) with weight and vector units `a` and `c` binades apart across
    /// two tile columns, `1 + 7 + 7 + 7 + a + c <= 31` taken and one binade more refused (then
    /// the f64 sums give the same bits). Mixed signs, an all-zero weight row run and an
    /// all-zero item ride along, and a random BFP 8 product (the LSTM's kind of data) takes the
    /// path too.
    #[test]
    fn int_sums_equal_the_exact_reference_up_to_their_bound() {
        let (n, rows, cols, b) = (128, 1, 2, 9);
        let to_fp32 = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP32);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut s = 0x1234_5678_9abc_def1u64;
        for (a, c) in [(5, 4), (0, 9), (9, 0), (5, 5), (0, 10), (3, 3)] {
            // Weights: tile 0 rows in units 2^a, tile 1 in 2^0; row 3 of tile 1 all zero.
            let mut w = vec![0.0; rows * cols * n * n];
            for (e, v) in w.iter_mut().enumerate() {
                let (t, r) = (e / (n * n), e / n % n);
                let q = if r % 2 == 0 { 127.0 } else { -127.0 };
                *v = match (t, r) {
                    (1, 3) => 0.0,
                    (0, _) => q * 2f64.powi(a),
                    _ => q,
                };
            }
            let x = bound_items(b, cols, n, 0, c);
            let want = matvec_exact(&to_fp32, &x, b, &w);
            let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
            let xi = IntVector::new(&x, b, cols, n).expect("fits");
            assert!(fits(&wi, &xi));
            let taken = int_sums(&to_fp32, &wi, &xi, 0, 0, b, 32);
            assert_eq!(taken, a + c <= 9, "a {a} c {c}");
            for simd in [false, true] {
                assert_eq!(
                    bits(&matvec(&to_fp32, &wi, &xi, simd)),
                    bits(&want),
                    "a {a} c {c}"
                );
            }
        }
        // Random BFP 8 rows and tiles, units a few binades apart.
        let (n, rows, cols, b) = (128, 2, 3, 70);
        let to_fp16 = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
        let values = |s: &mut u64, runs: usize| -> Vec<f64> {
            let mut v = vec![0.0; runs * n];
            for run in v.chunks_mut(n) {
                let u = (xorshift(s) % 3) as i32 - 12;
                for x in run.iter_mut() {
                    *x = ((xorshift(s) % 255) as f64 - 127.0) * 2f64.powi(u);
                }
            }
            v
        };
        let (w, x) = (values(&mut s, rows * cols * n), values(&mut s, b * cols));
        let want = matvec_exact(&to_fp16, &x, b, &w);
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        let xi = IntVector::new(&x, b, cols, n).expect("fits");
        assert!((0..rows).all(|i| int_sums(&to_fp16, &wi, &xi, i, 0, 64, 32)));
        for simd in [false, true] {
            assert_eq!(
                bits(&matvec(&to_fp16, &wi, &xi, simd)),
                bits(&want),
                "random BFP 8"
            );
        }
    }

    #[test]
    fn tiles_whose_exponents_differ_by_more_than_53_binades_sum_exactly() {
        // Row 0 of two column tiles: 2049 (tile 0) and t (tile 1), rounded to fp16. 2049 is
        // halfway between 2048 and 2050: alone it rounds to even, 2048; any positive t breaks
        // the tie up, 2050. With t = 2^-30 the running f64 sum is exact (fast path); with t =
        // 2^-60 it is not (71 binades apart) and the row is summed again exactly.
        let n = 16;
        let spec = spec(n, 1, 2, Accumulation::Exact, FloatFormat::FP16);
        let mut w = vec![0.0; 2 * n * n];
        w[0] = 1.0;
        w[n * n] = 1.0;
        let wi = IntWeights::new(&w, 1, 2, n).expect("fits");
        for (t, want) in [
            (0.0, 2048.0),
            (2f64.powi(-30), 2050.0),
            (2f64.powi(-60), 2050.0),
        ] {
            let mut x = vec![0.0; 2 * n];
            x[0] = 2049.0;
            x[n] = t;
            let xi = IntVector::new(&x, 1, 2, n).expect("fits");
            assert!(fits(&wi, &xi));
            for simd in [false, true] {
                assert_eq!(matvec(&spec, &wi, &xi, simd)[0], want, "t = {t:e}");
            }
        }
    }

    #[test]
    fn run_bits_by_hand() {
        let bits = |v: &[f64]| RunBits::of(v).map(|b| (b.span, b.value));
        // 1 and 11b; 1.1b; e4m3's largest value (111b * 2^6) down to its smallest subnormal
        // (2^-9); f64's smallest subnormal; fp16's 1 + 2^-10 (11 bits); f64's 1 + 2^-52.
        assert_eq!(bits(&[1.0, 3.0]), Some((2, 2)));
        assert_eq!(bits(&[1.5]), Some((2, 2)));
        assert_eq!(bits(&[-448.0, 0.0, 2f64.powi(-9)]), Some((18, 3)));
        assert_eq!(bits(&[f64::from_bits(1)]), Some((1, 1)));
        assert_eq!(bits(&[1.0 + 2f64.powi(-10), 4.0]), Some((13, 11)));
        assert_eq!(bits(&[-(1.0 + f64::EPSILON)]), Some((53, 53)));
        assert_eq!(bits(&[0.0, -0.0]), Some((0, 0)));
        assert_eq!(bits(&[1.0, f64::NAN]), None);
        assert_eq!(bits(&[f64::INFINITY]), None);
    }

    /// Runs of fp8-like values (4-bit significands, each value with an exponent of its own)
    /// that span exactly `span` bits: the first value's top bit is `span` above the second's
    /// lowest; one value in 8 is `+0.0` or `-0.0`. Runs start anywhere in 2^-40 .. 2^30, so
    /// tiles of one row lie up to 70 binades apart.
    fn fp8_like(s: &mut u64, runs: usize, len: usize, span: u32) -> Vec<f64> {
        let mut v = vec![0.0; runs * len];
        for run in v.chunks_mut(len) {
            let base = (xorshift(s) % 71) as i32 - 40;
            for (k, x) in run.iter_mut().enumerate() {
                let r = xorshift(s);
                let sign = if r.is_multiple_of(2) { 1.0 } else { -1.0 };
                let (sig, e) = match k {
                    0 => (15.0, base + span as i32 - 4),
                    1 => (9.0, base),
                    _ if r % 8 == 1 => (0.0, 0),
                    _ => (
                        (8 + (r >> 8) % 8) as f64,
                        base + ((r >> 16) % (span as u64 - 3)) as i32,
                    ),
                };
                *x = sign * sig * 2f64.powi(e);
            }
        }
        v
    }

    /// Products of fp8-like operands (runs spanning 11 to 28 bits, more than one `i16` unit holds
    /// whole) on integer slices: the slice counts and widths by hand at N = 128 (24 bits for
    /// both sides' integers), the outputs the exact reference's bits on both kernels, and
    /// operands that would take more than six passes refused.
    #[test]
    fn sliced_products_equal_the_exact_reference_bit_for_bit() {
        let (n, rows, cols, b) = (128, 2, 3, 13);
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let spec = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
        // (weights' span, vector's span, weight slices, their width, the vector's width,
        // vector slices), the split with the fewest passes (every run spans the same bits, so
        // every row block is busy in every slice), then the fewest weight slices, then the
        // narrowest: 20 and 14 bits take 2 x 1 passes at widths 10 + 14 (at 9 + 15: 3 x 1;
        // at 11 + 13 and above: 2 x 2); 20 and 15 bits 3 x 1 at 9 + 15 (2 x 2 at the others);
        // 20 and 28 bits 2 x 2 at 10 + 14 (3 x 2 at 9 + 15, 2 x 3 at 11 + 13 to 14 + 10);
        // 13 and 11 bits 1 x 1 at 13 + 11; 13 and 12 bits 1 x 2 at 13 + 11 (as few passes,
        // but more weight slices, below 13; as many at 14 and 15, but wider); 15 and 24
        // bits 1 x 3 at 15 + 9 (2 x 2 up to 12 + 12, 2 x 3 at 13 + 11 and 14 + 10).
        let cases = [
            (20, 14, 2, 10, 14, 1),
            (20, 15, 3, 9, 15, 1),
            (20, 28, 2, 10, 14, 2),
            (13, 11, 1, 13, 11, 1),
            (13, 12, 1, 13, 11, 2),
            (15, 24, 1, 15, 9, 3),
        ];
        for (span_w, span_x, slices, beta, beta_x, parts) in cases {
            let case = format!("weights {span_w} bits, vector {span_x} bits");
            let w = fp8_like(&mut s, rows * cols * n, n, span_w);
            let x = fp8_like(&mut s, b * cols, n, span_x);
            assert!(
                IntWeights::new(&w, rows, cols, n).is_none(),
                "{case}: no unsliced form"
            );
            let sw = SlicedWeights::new(&w, &x, rows, cols, n).expect("slices");
            assert_eq!(
                (sw.slices, sw.w.limit, sw.beta_x),
                (slices, (1 << beta) - 1, beta_x),
                "{case}"
            );
            let xs = super::super::matmul::slices(&x, n, sw.beta_x).expect("slices");
            assert_eq!(xs.len(), parts, "{case}");
            let want = matvec_exact(&spec, &x, b, &w);
            for simd in [false, simd()] {
                let got = sw.matvec(&spec, &x, b, simd).expect("sliced product");
                assert_eq!(got.len(), want.len());
                for (k, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), e.to_bits(), "{case}, simd {simd}, output {k}");
                }
            }
        }
        // Too many passes: 7 weight slices; 2 weight slices times 4 vector slices; the `-seq`
        // modes (which round each tile's partial, split by the slices); values of 9 bits.
        let x = fp8_like(&mut s, b * cols, n, 14);
        let w = fp8_like(&mut s, rows * cols * n, n, 91);
        assert!(SlicedWeights::new(&w, &x, rows, cols, n).is_none());
        let w = fp8_like(&mut s, rows * cols * n, n, 20);
        let sw = SlicedWeights::new(&w, &x, rows, cols, n).expect("slices");
        assert_eq!(sw.beta_x, 14);
        let x = fp8_like(&mut s, b * cols, n, 43);
        assert!(sw.matvec(&spec, &x, b, simd()).is_none());
        let x = fp8_like(&mut s, b * cols, n, 42);
        assert!(sw.matvec(&spec, &x, b, simd()).is_some());
        let seq = super::super::matmul::MatVec {
            accumulation: Accumulation::Fp32Seq,
            ..spec
        };
        assert!(sw.matvec(&seq, &x, b, simd()).is_none());
        // The kernel's i32 sums: 128 * 1023 * 16383 <= 2^31 - 1 < 128 * 1023 * 32767.
        let x = fp8_like(&mut s, b * cols, n, 14);
        let sw = SlicedWeights::new(&w, &x, rows, cols, n).expect("slices");
        assert_eq!(sw.w.limit, 1023);
        let fourteen = IntVector::with_limit(&x, b, cols, n, (1 << 14) - 1).expect("fits");
        let fifteen = IntVector::with_limit(&x, b, cols, n, (1 << 15) - 1).expect("fits");
        assert!(fits(&sw.w, &IntVector::repeated(&[fourteen], sw.slices)));
        assert!(!fits(&sw.w, &IntVector::repeated(&[fifteen], sw.slices)));
        // Lane 1 of a run is 9 * 2^base: 257 * 2^base (9 bits) is refused, 129 * 2^base (8)
        // taken, neither moving the run's span.
        assert!(sw.matvec(&spec, &nine_x(&x), b, simd()).is_none());
        let mut nine = w.clone();
        nine[1] = w[1] / 9.0 * 257.0;
        assert!(SlicedWeights::new(&nine, &x, rows, cols, n).is_none());
        nine[1] = w[1] / 9.0 * 129.0;
        assert!(SlicedWeights::new(&nine, &x, rows, cols, n).is_some());
        // A first vector the slices cannot take splits the weights for the narrowest vectors
        // (13 bits take one slice of 13), and takes the float path itself.
        let w = fp8_like(&mut s, rows * cols * n, n, 13);
        let mut nan = x.clone();
        nan[3] = f64::NAN;
        for first in [nine_x(&x), nan] {
            let sw = SlicedWeights::new(&w, &first, rows, cols, n).expect("slices");
            assert_eq!((sw.slices, sw.w.limit), (1, (1 << 13) - 1));
            assert!(sw.matvec(&spec, &first, b, simd()).is_none());
            assert!(sw.matvec(&spec, &x, b, simd()).is_some());
        }
    }

    /// `x` with a value of 9 bits in place of lane 1's `9 * 2^base`.
    fn nine_x(x: &[f64]) -> Vec<f64> {
        let mut nine = x.to_vec();
        nine[1] = x[1] / 9.0 * 257.0;
        nine
    }

    /// Where a few runs span far more bits than the rest (MX data), the weights take slices
    /// wide enough for the rest: their second slice is then nonzero in few row blocks, which
    /// the kernel skips. Here every run spans 12 bits but one, which spans 20, and vectors
    /// span 9: at widths 12 + 12 to 15 + 9 the work is every row block once plus the wide
    /// run's block (2 slices; 12 + 12 the narrowest of them), at 10 + 14 and 11 + 13 every
    /// block twice (12 > 11), at 9 + 15 twice and one block a third time. The product is the
    /// exact reference's, bit for bit.
    #[test]
    fn sparse_wide_runs_keep_the_second_weight_slice_sparse() {
        let (n, rows, cols, b) = (128, 2, 3, 7);
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut w = fp8_like(&mut s, rows * cols * n, n, 12);
        let wide = fp8_like(&mut s, 1, n, 20);
        w[(3 * n + 5) * n..][..n].copy_from_slice(&wide);
        let x = fp8_like(&mut s, b * cols, n, 9);
        let sw = SlicedWeights::new(&w, &x, rows, cols, n).expect("slices");
        assert_eq!((sw.slices, sw.w.limit, sw.beta_x), (2, (1 << 12) - 1, 12));
        // Tile 3, row 5: the second slice of its row block alone has a nonzero integer.
        let busy: Vec<usize> = (0..rows * 2 * cols)
            .filter(|&t| {
                sw.w.reach[t * n / ROW_BLOCK..][..n / ROW_BLOCK]
                    .iter()
                    .any(|&r| r > 0)
            })
            .collect();
        assert_eq!(busy.len(), rows * cols + 1);
        let spec = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
        let want = matvec_exact(&spec, &x, b, &w);
        for simd in [false, simd()] {
            let got = sw.matvec(&spec, &x, b, simd).expect("sliced product");
            let same = got
                .iter()
                .zip(&want)
                .all(|(g, e)| g.to_bits() == e.to_bits());
            assert!(same && got.len() == want.len(), "simd {simd}");
        }
    }
}
