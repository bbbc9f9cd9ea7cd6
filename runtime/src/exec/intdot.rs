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
//! then summed exactly and rounded once, or per the `-seq` accumulation modes (`seq_sums`),
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
//! `i32` lanes (twice the multiply-adds per instruction of an f32 FMA, half the bytes). Where
//! the CPU has AVX-512 VNNI, tiles and vectors whose integers all fit a byte (BFP 8, the
//! default target's) are also held as bytes, and `vpdpbusd` multiplies 64 pairs of them an
//! instruction ([`Kernel::Vnni`]). The scalar kernel computes the same integers from the same
//! layout: it is the reference the SIMD kernels are tested against. The session takes this
//! path only where the CPU has AVX2 and FMA ([`simd`]); elsewhere the f32/f64 BLAS path runs.

use super::matmul::{ExactSums, MatVec, seq_format, seq_sums};
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

/// Batch items of one register block of the VNNI kernel: 8 accumulators of 16 rows (of its
/// 32 registers), so that a task of 64 items is 8 whole blocks.
const VNNI_ITEM_BLOCK: usize = 8;

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

/// Whether the CPU has AVX-512 VNNI (with AVX2 and FMA): tiles and vectors whose integers fit
/// a byte are then also held as bytes, for [`Kernel::Vnni`].
pub fn vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        simd()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The kernel that computes the tile partials. Each gives the same integers; a kernel the CPU
/// lacks, or that the data does not fit, hands over to the next one down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kernel {
    /// One lane at a time: the reference the SIMD kernels are tested against.
    Scalar,
    /// `vpmaddwd` on the `i16` integers (AVX2 and FMA).
    Avx2,
    /// `vpdpbusd` on bytes (AVX-512 VNNI) where the tile and the vector tiles fit a byte
    /// (`NarrowTile`), else [`Kernel::Avx2`].
    Vnni,
}

impl Kernel {
    /// The fastest kernel this CPU has, or a slower one that the environment variable
    /// `NNPC_INT_KERNEL` names (`scalar`, `avx2`; any other value changes nothing): to compare
    /// the kernels on one machine (BENCHMARKS.md). Every kernel gives the same bits.
    pub fn best() -> Kernel {
        static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let cpu = if vnni() {
                Kernel::Vnni
            } else if simd() {
                Kernel::Avx2
            } else {
                Kernel::Scalar
            };
            let cap = match std::env::var("NNPC_INT_KERNEL").as_deref() {
                Ok("scalar") => Kernel::Scalar,
                Ok("avx2") => Kernel::Avx2,
                _ => Kernel::Vnni,
            };
            cpu.min(cap)
        })
    }

    /// Every kernel that [`Kernel::best`] allows, the scalar one first (the tests hold each
    /// to it).
    pub fn available() -> Vec<Kernel> {
        let best = Kernel::best();
        [Kernel::Scalar, Kernel::Avx2, Kernel::Vnni]
            .into_iter()
            .filter(|&k| k <= best)
            .collect()
    }

    /// Whether this is the VNNI kernel, which reads the bytes that tiles and vectors keep for
    /// it.
    pub fn is_vnni(self) -> bool {
        self == Kernel::Vnni
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

/// The offset of lane `l` of row `r` in a packed `n x n` tile of `i16`: row blocks of
/// [`ROW_BLOCK`] rows, inside one `[n / 2][ROW_BLOCK][2]`, so one 32-byte load is 2
/// consecutive lanes of 8 rows and a row block's `n / 2` loads are contiguous.
#[inline]
fn packed_at(n: usize, r: usize, l: usize) -> usize {
    grouped_at::<2>(n, r, l)
}

/// Row blocks of [`ROW_BLOCK`] rows, each `[n / G][ROW_BLOCK][G]`: `G` consecutive lanes of a
/// row together, then the block's other rows.
#[inline]
fn grouped_at<const G: usize>(n: usize, r: usize, l: usize) -> usize {
    (((r / ROW_BLOCK) * (n / G) + l / G) * ROW_BLOCK + r % ROW_BLOCK) * G + l % G
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
    /// The same integers as bytes, where they all fit one.
    narrow: Option<NarrowTile<'a>>,
}

/// A tile's integers as bytes, for [`Kernel::Vnni`] (its module says why this is exact).
#[derive(Clone, Copy)]
struct NarrowTile<'a> {
    /// The integers, laid out by `grouped_at::<4>`: `[n / 4][ROW_BLOCK][4]` per row block, so
    /// one 64-byte load is 4 consecutive lanes of its 16 rows.
    ints: &'a [i8],
    /// Per row: `-128` times the sum of its integers (wrapping; exact modulo `2^32`).
    offset: &'a [i32],
}

/// A weight stack's integers as bytes ([`NarrowTile`]), laid out as [`IntWeights`]' `packed`
/// and `scale` are.
struct NarrowWeights {
    ints: Vec<i8>,
    offset: Vec<i32>,
}

impl NarrowWeights {
    /// The packed `i16` tiles as bytes, or `None` where an integer does not fit one.
    fn new(packed: &[i16], n: usize) -> Option<NarrowWeights> {
        let byte = |q: i16| i8::try_from(q).ok();
        if !packed.par_iter().all(|&q| byte(q).is_some()) {
            return None;
        }
        let mut ints = vec![0i8; packed.len()];
        let mut offset = vec![0i32; packed.len() / n];
        // Row block by row block, in the order of both layouts: lane pair `2 kq + h` of a row
        // (`grouped_at::<2>`) is lanes `2 h, 2 h + 1` of its quad `kq` (`grouped_at::<4>`).
        let block = ROW_BLOCK * n;
        ints.par_chunks_mut(block)
            .zip(offset.par_chunks_mut(ROW_BLOCK))
            .zip(packed.par_chunks(block))
            .for_each(|((dst, off), src)| {
                let mut sums = [0i32; ROW_BLOCK];
                for (quad, pairs) in dst.chunks_mut(4 * ROW_BLOCK).zip(src.chunks(4 * ROW_BLOCK)) {
                    for (h, pair) in pairs.chunks(2 * ROW_BLOCK).enumerate() {
                        for (r, two) in pair.chunks(2).enumerate() {
                            sums[r] = sums[r]
                                .wrapping_add(i32::from(two[0]))
                                .wrapping_add(i32::from(two[1]));
                            quad[4 * r + 2 * h] = two[0] as i8;
                            quad[4 * r + 2 * h + 1] = two[1] as i8;
                        }
                    }
                }
                for (o, sum) in off.iter_mut().zip(sums) {
                    *o = sum.wrapping_mul(-128);
                }
            });
        Some(NarrowWeights { ints, offset })
    }
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
    /// The integers as bytes, where the kernel is VNNI ([`Kernel::best`]) and they all fit
    /// one.
    narrow: Option<NarrowWeights>,
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
        let narrow = Kernel::best()
            .is_vnni()
            .then(|| NarrowWeights::new(&packed, n))
            .flatten();
        Some(IntWeights {
            rows,
            cols,
            n,
            narrow,
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
            narrow: self.narrow.as_ref().map(|w| NarrowTile {
                ints: &w.ints[t * nn..][..nn],
                offset: &w.offset[t * self.n..][..self.n],
            }),
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
    /// Each integer plus 128 as a byte, laid out as `q`, where the kernel is VNNI
    /// ([`Kernel::best`]) and every integer lies in `-128..=127`.
    biased: Option<Vec<u8>>,
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
    /// where `new` of it would be (a non-finite block), or could differ (`mantissa_unit`).
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
        let biased = Kernel::best().is_vnni().then(|| biased_bytes(&q)).flatten();
        IntVector {
            b,
            biased,
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

/// Whether `kernel` takes every tile of `w x` on bytes ([`Kernel::Vnni`]).
pub fn on_bytes(kernel: Kernel, w: &IntWeights, x: &IntVector) -> bool {
    kernel.is_vnni() && vnni() && w.narrow.is_some() && x.biased.is_some()
}

/// Each integer plus 128 as a byte, or `None` where one lies outside `-128..=127`.
fn biased_bytes(q: &[i16]) -> Option<Vec<u8>> {
    // One branch-free pass: the bytes, and whether every integer was in range.
    let mut fits = true;
    let bytes = q
        .iter()
        .map(|&v| {
            fits &= (-128..=127).contains(&v);
            v.wrapping_add(128) as u8
        })
        .collect();
    fits.then_some(bytes)
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
    /// `MAX_VALUE_BITS`, needs more slices than `MAX_PASSES` allows, or the product does
    /// not [`fits`].
    pub fn matvec(&self, spec: &MatVec, x: &[f64], b: usize, which: Kernel) -> Option<Vec<f64>> {
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
        Some(matvec(&spec, &self.w, &wide, which))
    }
}

/// `y = W x` as [`super::matmul::matvec_exact`] defines it, on integer mantissas: `[b, rows *
/// n]`. The caller checks [`fits`]; `which` picks the kernel ([`Kernel::best`]; one the CPU
/// lacks hands over to the next one down).
pub fn matvec(spec: &MatVec, w: &IntWeights, x: &IntVector, which: Kernel) -> Vec<f64> {
    let per_task = items_per_task(x.b, w.rows, rayon::current_num_threads());
    matvec_tasks(spec, w, x, which, per_task)
}

/// [`matvec`] with tasks of `per_task` batch items (and one row tile) each.
fn matvec_tasks(
    spec: &MatVec,
    w: &IntWeights,
    x: &IntVector,
    which: Kernel,
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
                        let p = dot_scalar(w.tile(i, j).ints, xs, n, r);
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
        &self.x.q[self.range(j)]
    }

    /// Tile column `j` for the kernel: its integers and their biased bytes.
    fn tiles(&self, j: usize) -> XTiles<'a> {
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
/// that adds the scaled partials in an order of its own (`gpu`) gets the same sums,
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
/// does not get the row blocks without a nonzero weight, nor (SIMD kernels) the register
/// blocks of items whose tiles are all zero (unit `ZERO_RUN`): their partials are 0. Every
/// other sink gets every block. The scalar loop multiplies every lane of every item (it is the
/// reference the tests hold the SIMD kernels, the tiles' reach and the items' units to).
fn kernel(
    which: Kernel,
    tile: Tile<'_>,
    xs: XTiles<'_>,
    units: &[i32],
    n: usize,
    sink: &mut impl Sink,
) {
    let XTiles { ints, biased } = xs;
    assert!(supports(n) && tile.ints.len() == n * n && ints.len().is_multiple_of(n));
    assert!(tile.reach.len() == n / ROW_BLOCK && tile.reach.iter().all(|&p| 2 * p as usize <= n));
    assert!(units.is_empty() || units.len() == ints.len() / n);
    let skip_empty = sink.adds();
    #[cfg(target_arch = "x86_64")]
    {
        let zero = |b0: usize, c: usize| {
            skip_empty && !units.is_empty() && units[b0..b0 + c].iter().all(|&u| u == ZERO_RUN)
        };
        if which.is_vnni()
            && vnni()
            && let (Some(narrow), Some(bytes)) = (tile.narrow, biased)
        {
            assert!(narrow.ints.len() == n * n && narrow.offset.len() == n);
            assert_eq!(bytes.len(), ints.len());
            // SAFETY: AVX-512 VNNI, AVX2 and FMA are present (checked just above), the tile
            // is narrow, `n` is a multiple of ROW_BLOCK and the lengths and reaches are
            // asserted above; every access of `vnni::tile` is inside them.
            unsafe { vnni::tile(narrow, tile.reach, skip_empty, bytes, zero, n, sink) };
            return;
        }
        if which != Kernel::Scalar && simd() {
            // SAFETY: AVX2 and FMA are present (checked just above), `n` is a multiple of
            // ROW_BLOCK and the lengths and reaches are asserted above; every access of
            // `avx2::tile` is inside them.
            unsafe { avx2::tile(tile, skip_empty, ints, zero, n, sink) };
            return;
        }
    }
    let _ = (which, biased);
    for (bi, x) in ints.chunks(n).enumerate() {
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

/// Vector tiles `[items][n]` for [`kernel`]: their integers, and the same plus 128 as bytes
/// where they all fit one (`IntVector`'s `biased`).
#[derive(Clone, Copy)]
struct XTiles<'a> {
    ints: &'a [i16],
    biased: Option<&'a [u8]>,
}

/// The reference: row `r` of a packed tile times one vector tile, one lane at a time.
fn dot_scalar(tile: &[i16], x: &[i16], n: usize, r: usize) -> i32 {
    x.iter()
        .enumerate()
        .map(|(l, &xv)| i32::from(xv) * i32::from(tile[packed_at(n, r, l)]))
        .sum()
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod vnni;

#[cfg(test)]
pub(crate) mod tests;
