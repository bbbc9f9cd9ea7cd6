//! The AVX2 kernel: one tile's `i16` integers times register blocks of items' integers
//! (`vpmaddwd`, 16 rows by up to 6 items), each block's `i32` partials handed to a [`Sink`]
//! ([`finish`], which the VNNI kernel shares). The scalar kernel (`dot_scalar`) computes the
//! same integers and is its reference.

use super::sink::{Epilogue, Sink, Sum, Sums};
use super::weights::Tile;
use super::{ITEM_BLOCK, ROW_BLOCK};
use std::arch::x86_64::*;

/// `f::<C, N>(args)` with `C` the register block's item count `c` (1 to 8), a constant in
/// each copy.
macro_rules! by_items {
    ($c:expr, $f:ident::<$n:ident>($($arg:expr),* $(,)?)) => {
        match $c {
            8 => $f::<8, $n>($($arg),*),
            7 => $f::<7, $n>($($arg),*),
            6 => $f::<6, $n>($($arg),*),
            5 => $f::<5, $n>($($arg),*),
            4 => $f::<4, $n>($($arg),*),
            3 => $f::<3, $n>($($arg),*),
            2 => $f::<2, $n>($($arg),*),
            _ => $f::<1, $n>($($arg),*),
        }
    };
}
pub(super) use by_items;

/// `f::<N>(args)` with `N` the tile size `n` where it is a common one, else `f::<0>` (any
/// `n`): with `n` a constant, the items' vector rows are constant offsets from one pointer,
/// so the inner loop spends no instructions on their addresses (it is bound by instruction
/// dispatch, not only by its multiply-adds).
macro_rules! by_tile_size {
    ($n:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $n {
            64 => $f::<64>($($arg),*),
            128 => $f::<128>($($arg),*),
            256 => $f::<256>($($arg),*),
            _ => $f::<0>($($arg),*),
        }
    };
}
pub(super) use by_tile_size;

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
    // SAFETY: as this function's contract.
    unsafe { by_tile_size!(n, tile_n(tile, skip_empty, xs, &zero, n, sink)) }
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
    for_blocks(
        tile.reach,
        skip_empty,
        xs.len() / n,
        ITEM_BLOCK,
        zero,
        |rb, pairs, b0, c| {
            // The lane pairs up to the block's last nonzero weight: the rest add zeros.
            let w = &tile.ints[rb * ROW_BLOCK * n..][..ROW_BLOCK * 2 * pairs as usize];
            // SAFETY: as the function's contract; block() reads the row block `w` and items
            // b0..b0 + c of `xs`.
            unsafe { by_items!(c, block::<N>(w, xs, n, rb, b0, sink)) }
        },
    );
}

/// Calls `block(rb, pairs, b0, c)` for every row block `rb` of a tile (its reach `pairs`)
/// and every register block of items `b0..b0 + c` (`c <= per_block`) of `items`, leaving
/// out, with `skip_empty`, the row blocks of reach 0, and the item blocks where `zero(b0, c)`.
#[inline(always)]
pub(super) fn for_blocks(
    reach: &[u32],
    skip_empty: bool,
    items: usize,
    per_block: usize,
    zero: &impl Fn(usize, usize) -> bool,
    mut block: impl FnMut(usize, u32, usize, usize),
) {
    for (rb, &pairs) in reach.iter().enumerate() {
        if skip_empty && pairs == 0 {
            continue;
        }
        let mut b0 = 0;
        while b0 < items {
            let c = (items - b0).min(per_block);
            if !zero(b0, c) {
                block(rb, pairs, b0, c);
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
    // SAFETY: as this function's contract.
    unsafe { finish(&acc, rb * ROW_BLOCK, b0, sink) };
}

/// Hands the partials of rows `r0..r0 + 16` of items `b0..b0 + C` to `sink`, item `b0 + c`'s
/// rows `r0..r0 + 8` in `acc[c][0]` and `r0 + 8..r0 + 16` in `acc[c][1]`: a [`Sums`] sink
/// adds them to its sums here, in vector registers; every other sink takes them one item at a
/// time.
///
/// # Safety
/// AVX2 and FMA must be present.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn finish<const C: usize>(
    acc: &[[__m256i; 2]; C],
    r0: usize,
    b0: usize,
    sink: &mut impl Sink,
) {
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
                        let total =
                            _mm256_add_epi32(_mm256_loadu_si256(sp), _mm256_sllv_epi32(*v, shift));
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
