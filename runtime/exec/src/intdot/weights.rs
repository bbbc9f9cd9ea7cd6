//! The weight operand: a stack of tiles as packed integers ([`IntWeights`]), the tile the
//! kernel reads ([`Tile`]) and the same integers as bytes for the VNNI kernel
//! ([`NarrowWeights`]). A stack whose integers all fit a byte, where the kernel is VNNI, keeps
//! them as bytes alone (one byte a weight, not three): the `i16` tile the AVX2 kernel reads is
//! made from the bytes, once per stack, where a vector that does not fit a byte needs it
//! ([`IntWeights::widen`]).

use super::runs::{Aligned, Span, mag_bits, scales, to_ints_body};
use super::{Kernel, ROW_BLOCK, qmax, supports};
use crate::quant::avx2_copy;
use rayon::prelude::*;
use std::sync::OnceLock;

avx2_copy! {
    /// One `n x n` tile `src` (row-major) as integers packed into `tile` ([`packed_at`]), with
    /// the unit of each row in `units` and the [`Tile::reach`] of each row block in `reach`: the
    /// bits of its largest integer and whether it held a `-0.0`, or `None` when a row does not
    /// fit.
    fn tile_to_ints / tile_to_ints_avx2 / tile_to_ints_avx512 / tile_to_ints_body (
        src: &[f64],
        tile: &mut [i16],
        units: &mut [i32],
        reach: &mut [u32],
        n: usize,
        qm: i32,
    ) -> Option<(u32, bool)>
}

#[inline(always)]
fn tile_to_ints_body(
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
        *u = to_ints_body(run, &mut q, qm)?;
        bits = bits.max(mag_bits(&q));
        let pairs = q.iter().rposition(|&v| v != 0).map_or(0, |l| l / 2 + 1);
        let block = &mut reach[r / ROW_BLOCK];
        *block = (*block).max(pairs as u32);
        // Lanes (2 kp, 2 kp + 1) of row r go to packed_at(n, r, 2 kp): one pair every
        // 2 * ROW_BLOCK values (as one [i16; 2], so no bounds check per pair).
        let row = &mut tile[packed_at(n, r, 0)..];
        for (pair, dst) in q.chunks_exact(2).zip(row.chunks_mut(2 * ROW_BLOCK)) {
            if let (Ok(pair), Some(dst)) = (<&[i16; 2]>::try_from(pair), dst.first_chunk_mut::<2>())
            {
                *dst = *pair;
            }
        }
    }
    // A fold rather than `any`: no early exit, so it vectorises.
    let neg_zero = src
        .iter()
        .fold(false, |z, x| z | (x.to_bits() == (-0.0f64).to_bits()));
    Some((bits, neg_zero))
}

/// The offset of lane `l` of row `r` in a packed `n x n` tile of `i16`: row blocks of
/// [`ROW_BLOCK`] rows, inside one `[n / 2][ROW_BLOCK][2]`, so one 32-byte load is 2
/// consecutive lanes of 8 rows and a row block's `n / 2` loads are contiguous.
#[inline]
pub(super) fn packed_at(n: usize, r: usize, l: usize) -> usize {
    grouped_at::<2>(n, r, l)
}

/// Row blocks of [`ROW_BLOCK`] rows, each `[n / G][ROW_BLOCK][G]`: `G` consecutive lanes of a
/// row together, then the block's other rows.
#[inline]
pub(super) fn grouped_at<const G: usize>(n: usize, r: usize, l: usize) -> usize {
    (((r / ROW_BLOCK) * (n / G) + l / G) * ROW_BLOCK + r % ROW_BLOCK) * G + l % G
}

/// One packed `n x n` tile of an [`IntWeights`], as the kernel reads it.
#[derive(Clone, Copy)]
pub(super) struct Tile<'a> {
    /// The integers, laid out by [`packed_at`]; empty where the stack keeps them as bytes
    /// alone (`narrow`) and no product has needed them yet ([`IntWeights::widen`]).
    pub(super) ints: &'a [i16],
    /// Per row block: the lane pairs up to the last that holds a nonzero integer in any of its
    /// rows (0 for an all-zero block). The SIMD kernel stops there: the lanes beyond add
    /// exact zeros, and a matrix padded to the native dimension (16 x 16 in a 128 x 128 tile)
    /// is mostly such lanes.
    pub(super) reach: &'a [u32],
    /// The same integers as bytes, where they all fit one.
    pub(super) narrow: Option<NarrowTile<'a>>,
}

impl<'a> Tile<'a> {
    /// Lane `l` of row `r`: from the `i16` integers, or from the bytes where the stack keeps
    /// them alone.
    pub(super) fn int(&self, n: usize, r: usize, l: usize) -> i16 {
        match (self.ints.is_empty(), self.narrow) {
            (true, Some(bytes)) => i16::from(bytes.ints[grouped_at::<4>(n, r, l)]),
            _ => self.ints[packed_at(n, r, l)],
        }
    }
}

/// A tile's integers as bytes, for [`Kernel::Vnni`] (its module says why this is exact).
#[derive(Clone, Copy)]
pub(super) struct NarrowTile<'a> {
    /// The integers, laid out by `grouped_at::<4>`: `[n / 4][ROW_BLOCK][4]` per row block, so
    /// one 64-byte load is 4 consecutive lanes of its 16 rows.
    pub(super) ints: &'a [i8],
    /// Per row: `-128` times the sum of its integers (wrapping; exact modulo `2^32`).
    pub(super) offset: &'a [i32],
}

/// A weight stack's integers as bytes ([`NarrowTile`]), laid out as [`IntWeights`]' `packed`
/// and `scale` are.
pub(super) struct NarrowWeights {
    pub(super) ints: Vec<i8>,
    pub(super) offset: Vec<i32>,
}

impl NarrowWeights {
    /// The packed `i16` tiles as bytes, or `None` where an integer does not fit one.
    pub(super) fn new(packed: &[i16], n: usize) -> Option<NarrowWeights> {
        let mut ints = vec![0i8; packed.len()];
        let mut offset = vec![0i32; packed.len() / n];
        let block = ROW_BLOCK * n;
        let fits = ints
            .par_chunks_mut(block)
            .zip(offset.par_chunks_mut(ROW_BLOCK))
            .zip(packed.par_chunks(block))
            // A task of at least 16 Ki integers: a small stack's blocks on one thread.
            .with_min_len(((1 << 14) / block.max(1)).max(1))
            .map(|((dst, off), src)| narrow_block(src, dst, off))
            .reduce(|| true, |a, b| a & b);
        fits.then_some(NarrowWeights { ints, offset })
    }
}

/// One row block of packed `i16` (`grouped_at::<2>`) as bytes (`grouped_at::<4>`), with its
/// rows' offsets `-128 * s_r`; whether every integer fits a byte (else `dst` is not used).
/// Lane pair `2 kq + h` of a row is lanes `2 h, 2 h + 1` of its quad `kq`. Each part a loop of
/// its own over fixed-size pieces, with no early exit, so that each vectorises.
fn narrow_block(src: &[i16], dst: &mut [i8], off: &mut [i32]) -> bool {
    const PAIRS: usize = 2 * ROW_BLOCK;
    let fits = src.iter().fold(true, |f, &q| f & (i16::from(q as i8) == q));
    // Lane pair kp of every row: [ROW_BLOCK][2], summed lane by lane, then row by row.
    let mut lanes = [0i32; PAIRS];
    for pairs in src.chunks_exact(PAIRS) {
        for (a, &q) in lanes.iter_mut().zip(pairs) {
            *a = a.wrapping_add(i32::from(q));
        }
    }
    for (r, o) in off.iter_mut().enumerate() {
        *o = lanes[2 * r]
            .wrapping_add(lanes[2 * r + 1])
            .wrapping_mul(-128);
    }
    for (quad, pairs) in dst
        .chunks_exact_mut(2 * PAIRS)
        .zip(src.chunks_exact(2 * PAIRS))
    {
        let (lo, hi) = pairs.split_at(PAIRS);
        for (r, out) in quad.chunks_exact_mut(4).enumerate() {
            out[0] = lo[2 * r] as i8;
            out[1] = lo[2 * r + 1] as i8;
            out[2] = hi[2 * r] as i8;
            out[3] = hi[2 * r + 1] as i8;
        }
    }
    fits
}

/// A weight stack `[rows * cols, n, n]` as integers, packed for the kernel.
pub struct IntWeights {
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) n: usize,
    /// Tile `(i, j)` at `(i * cols + j) * n * n`, laid out by [`packed_at`]; empty where
    /// `narrow` holds the integers (the stack keeps them as bytes alone).
    pub(super) packed: Vec<i16>,
    /// [`Tile::reach`] of row block `rb` of tile `(i, j)` at `(i * cols + j) * n / ROW_BLOCK
    /// + rb`.
    pub(super) reach: Vec<u32>,
    /// `2^unit` of row `r` of tile `(i, j)` at `(i * cols + j) * n + r` (0 for a zero row).
    pub(super) scale: Vec<f64>,
    /// Units of every row tile `i` (all its column tiles).
    pub(super) row_span: Vec<Span>,
    /// Every row on a common unit across its tile columns (`base` by row `i * n + r`, `shift`
    /// laid out as `scale`), for [`int_sums`](super::product::int_sums).
    pub(super) aligned: Aligned,
    /// The largest shift of every row tile `i`.
    pub(super) shift_span: Vec<u32>,
    /// Per row tile `i`: the rows up to the end of its last row block with a nonzero integer
    /// in any tile column. The rows below are zero rows (a matrix padded to the native
    /// dimension), whose outputs are exact zeros, `+0.0`.
    pub(super) live_rows: Vec<usize>,
    /// Bits of the largest integer.
    pub(super) bits: u32,
    /// The largest magnitude an integer may have ([`qmax`], or a slice's width).
    pub(super) limit: i32,
    /// Whether the stack held a `-0.0` (its integer is 0, so [`IntWeights::restore`] cannot
    /// give its sign back).
    neg_zero: bool,
    /// The integers as bytes, where the kernel is VNNI ([`Kernel::best`]) and they all fit
    /// one.
    pub(super) narrow: Option<NarrowWeights>,
    /// A byte-only stack's `i16` integers ([`packed_at`]), made once, the first time a
    /// product needs them ([`IntWeights::widen`]: a vector that does not fit a byte), and kept
    /// from then on, as a stack without bytes keeps `packed`.
    wide: OnceLock<Vec<i16>>,
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
    pub(super) fn with_limit<F>(
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
        let narrow = Kernel::best()
            .is_vnni()
            .then(|| NarrowWeights::new(&packed, n))
            .flatten();
        // The bytes alone where they hold every integer: the `i16` are made from them where
        // a kernel needs those (`IntWeights::widen`).
        let packed = match narrow {
            Some(_) => Vec::new(),
            None => packed,
        };
        Some(IntWeights {
            rows,
            cols,
            n,
            narrow,
            packed,
            wide: OnceLock::new(),
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
    /// `None` when it held a `-0.0`. Every other value is `q * 2^unit` exactly:
    /// [`to_ints`](super::runs::to_ints) checked that the integer times the unit is the value,
    /// the unit is a normal power of two, and a zero (or a zero row, scale 0) comes back as
    /// `+0.0`. A session keeps only this form of a weight stack and restores the f64 one for a
    /// product that takes the float path.
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
        let (n, tiles) = (self.n, self.rows * self.cols);
        let mut out = vec![T::default(); tiles * n * n];
        out.par_chunks_mut(n * n)
            .zip(self.scale.par_chunks(n))
            .enumerate()
            .for_each(|(t, (dst, scale))| {
                let tile = self.tile(t / self.cols, t % self.cols);
                for (r, (row, &s)) in dst.chunks_mut(n).zip(scale).enumerate() {
                    // A zero row (scale 0, the rows padding a matrix to whole tiles) holds
                    // only zeros.
                    if s == 0.0 {
                        row.fill(f(0, s));
                        continue;
                    }
                    // The row's lanes in the groups the packing keeps together.
                    match (tile.ints.is_empty(), tile.narrow) {
                        (true, Some(bytes)) => {
                            for (g, lanes) in row.chunks_mut(4).enumerate() {
                                let at = grouped_at::<4>(n, r, 4 * g);
                                for (v, &q) in lanes.iter_mut().zip(&bytes.ints[at..at + 4]) {
                                    *v = f(i16::from(q), s);
                                }
                            }
                        }
                        _ => {
                            for (g, lanes) in row.chunks_mut(2).enumerate() {
                                let at = packed_at(n, r, 2 * g);
                                for (v, &q) in lanes.iter_mut().zip(&tile.ints[at..at + 2]) {
                                    *v = f(q, s);
                                }
                            }
                        }
                    }
                }
            });
        out
    }

    /// The packed `i16` integers of every tile ([`packed_at`]), held or made from the bytes.
    #[cfg(test)]
    pub(super) fn packed_ints(&self) -> Vec<i16> {
        self.widen();
        (0..self.rows * self.cols)
            .flat_map(|t| self.tile(t / self.cols, t % self.cols).ints.to_vec())
            .collect()
    }

    /// `2^unit` of row `r` of tile `(i, j)` at `(i * cols + j) * n + r` (0 for a zero row).
    pub fn row_scales(&self) -> &[f64] {
        &self.scale
    }

    /// Tile `(i, j)`; here and below, a vector with a multiple of the stack's tile columns
    /// reads column `j` as `j % cols` ([`fits`](super::fits)).
    pub(super) fn tile(&self, i: usize, j: usize) -> Tile<'_> {
        let (t, nn, blocks) = (self.at(i, j), self.n * self.n, self.n / ROW_BLOCK);
        let ints = match (self.packed.is_empty(), self.wide.get()) {
            (false, _) => &self.packed[t * nn..][..nn],
            (true, Some(wide)) => &wide[t * nn..][..nn],
            (true, None) => &[],
        };
        Tile {
            ints,
            reach: &self.reach[t * blocks..][..blocks],
            narrow: self.narrow.as_ref().map(|w| NarrowTile {
                ints: &w.ints[t * nn..][..nn],
                offset: &w.offset[t * self.n..][..self.n],
            }),
        }
    }

    /// Make a byte-only stack's `i16` integers, once ([`IntWeights::wide`]): what the
    /// `i16` kernels read. A stack that has them already is left as it is.
    pub(super) fn widen(&self) {
        let Some(bytes) = self.narrow.as_ref().filter(|_| self.packed.is_empty()) else {
            return;
        };
        let n = self.n;
        self.wide.get_or_init(|| {
            let mut wide = vec![0i16; bytes.ints.len()];
            wide.par_chunks_mut(n * n)
                .zip(bytes.ints.par_chunks(n * n))
                .for_each(|(w, b)| {
                    for r in 0..n {
                        for l in 0..n {
                            w[packed_at(n, r, l)] = i16::from(b[grouped_at::<4>(n, r, l)]);
                        }
                    }
                });
            wide
        });
    }

    pub(super) fn span(&self) -> Span {
        self.row_span.iter().fold(Span::EMPTY, |a, s| a.merge(*s))
    }

    /// The row scales of tile `(i, j)`.
    pub(super) fn scales(&self, i: usize, j: usize) -> &[f64] {
        &self.scale[self.at(i, j) * self.n..][..self.n]
    }

    /// The rows' shifts to their common unit in tile `(i, j)` ([`Aligned`]).
    pub(super) fn shifts(&self, i: usize, j: usize) -> &[i32] {
        &self.aligned.shift[self.at(i, j) * self.n..][..self.n]
    }

    /// The index of tile `(i, j % cols)`.
    fn at(&self, i: usize, j: usize) -> usize {
        i * self.cols + j % self.cols
    }
}
