//! The AVX-512 VNNI kernel: `vpdpbusd` multiplies 64 pairs of bytes, unsigned by signed, and
//! adds each four adjacent products to one of 16 `i32` lanes, the accumulation fused: 64
//! multiply-adds an instruction, where the AVX2 kernel does 16 with a `vpmaddwd` and a `vpaddd`.
//!
//! It takes a tile and vector tiles whose integers all lie in `-128..=127` (BFP 8 and
//! narrower: [`super::NarrowTile`], `IntVector`'s biased bytes). The weights are `i8`; the
//! vector is `u8`, each integer plus 128. So an accumulator that starts at `-128 * s_r`, with
//! `s_r` the sum of row `r`'s integers, ends at `sum_l (x_l + 128) w_rl - 128 s_r = sum_l x_l
//! w_rl`, the partial itself. Every step wraps modulo `2^32` (`vpdpbusd` does not saturate)
//! and the partial lies in `i32` ([`super::fits`]), so the result is exact whatever the
//! intermediate values. Lanes past a row block's reach hold zero weights and add nothing.
//! `i32` sums take the partials in 16 lanes here; every other sink through the AVX2 kernel's
//! epilogue ([`avx2::finish`]).

use super::avx2::{self, by_items, by_tile_size, for_blocks};
use super::sink::{Epilogue, Sink};
use super::weights::NarrowTile;
use super::{ROW_BLOCK, VNNI_ITEM_BLOCK};
use std::arch::x86_64::*;

/// `f::<C, N>(args)` for `c` items up to [`VNNI_ITEM_BLOCK`] (16): `by_items` below 9.
macro_rules! by_items_to_16 {
    ($c:expr, $f:ident::<$n:ident>($($arg:expr),* $(,)?)) => {
        match $c {
            16 => $f::<16, $n>($($arg),*),
            15 => $f::<15, $n>($($arg),*),
            14 => $f::<14, $n>($($arg),*),
            13 => $f::<13, $n>($($arg),*),
            12 => $f::<12, $n>($($arg),*),
            11 => $f::<11, $n>($($arg),*),
            10 => $f::<10, $n>($($arg),*),
            9 => $f::<9, $n>($($arg),*),
            c => by_items!(c, $f::<$n>($($arg),*)),
        }
    };
}

/// The tile `narrow`, whose row blocks reach `reach` (`Tile::reach`), times the biased vector
/// tiles `xs`.
///
/// # Safety
/// AVX-512F, AVX-512 VNNI, AVX2 and FMA must be present; `n % ROW_BLOCK == 0`, the narrow
/// tile's integers `n * n` and its offsets `n` long, `reach.len() == n / ROW_BLOCK` and every
/// `2 * reach[rb] <= n`, `xs.len()` a multiple of `n`. Blocks are left out as [`avx2::tile`]
/// leaves them out.
#[target_feature(enable = "avx512f,avx512vnni,avx2,fma")]
pub(super) unsafe fn tile(
    narrow: NarrowTile<'_>,
    reach: &[u32],
    skip_empty: bool,
    xs: &[u8],
    zero: impl Fn(usize, usize) -> bool,
    n: usize,
    sink: &mut impl Sink,
) {
    // SAFETY: as this function's contract.
    unsafe { by_tile_size!(n, tile_n(narrow, reach, skip_empty, xs, &zero, n, sink)) }
}

/// [`tile`] for `n == N`, or any `n` where `N == 0`.
#[target_feature(enable = "avx512f,avx512vnni,avx2,fma")]
unsafe fn tile_n<const N: usize>(
    narrow: NarrowTile<'_>,
    reach: &[u32],
    skip_empty: bool,
    xs: &[u8],
    zero: &impl Fn(usize, usize) -> bool,
    n: usize,
    sink: &mut impl Sink,
) {
    let n = if N == 0 { n } else { N };
    let items = xs.len() / n;
    for_blocks(
        reach,
        skip_empty,
        items,
        VNNI_ITEM_BLOCK,
        zero,
        |rb, pairs, b0, c| {
            // The lane quads up to the block's last nonzero weight (4 quads <= 2 pairs + 2 <= n).
            let quads = pairs.div_ceil(2) as usize;
            let w = &narrow.ints[rb * ROW_BLOCK * n..][..ROW_BLOCK * 4 * quads];
            let offset = &narrow.offset[rb * ROW_BLOCK..][..ROW_BLOCK];
            // Where later item blocks reuse a row block's weights from L1, the first
            // prefetches the next row block's (in memory after this one: the next row block,
            // or the next tile's first) as it multiplies; a lone item block reads its weights
            // once, in order, as the hardware's prefetcher expects.
            let ahead = b0 == 0 && c < items;
            // SAFETY: as the function's contract; block() reads the row block `w` and items
            // b0..b0 + c of `xs`.
            unsafe { by_items_to_16!(c, block::<N>(w, offset, xs, n, rb, b0, ahead, sink)) }
        },
    );
}

/// Rows `rb * 16..` + 16 of items `b0..b0 + C`: `w` is the row block's first lane quads,
/// `[quads][16][4]` bytes, `offset` its rows' `-128 * s_r`; with `ahead`, as many lines after
/// it are prefetched.
#[target_feature(enable = "avx512f,avx512vnni,avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const C: usize, const N: usize>(
    w: &[i8],
    offset: &[i32],
    xs: &[u8],
    n: usize,
    rb: usize,
    b0: usize,
    ahead: bool,
    sink: &mut impl Sink,
) {
    let n = if N == 0 { n } else { N };
    assert!(offset.len() == ROW_BLOCK && xs.len() >= (b0 + C) * n && w.len() <= ROW_BLOCK * n);
    // SAFETY: offset holds 16 i32 (asserted).
    let start = unsafe { _mm512_loadu_si512(offset.as_ptr().cast()) };
    // Below 4 items, each item's sums go in `4 / C` chains over alternate lane quads, added at
    // the end: one chain would wait out `vpdpbusd`'s latency at every quad. Sums wrap modulo
    // 2^32, so any order gives the same partial.
    let chains = if C >= 4 { 1 } else { 4 / C };
    let mut acc = [[_mm512_setzero_si512(); C]; 4];
    acc[0] = [start; C];
    let (wp, xp) = (w.as_ptr(), xs.as_ptr());
    // Lane quad `kq` into the chain `acc`.
    macro_rules! quad {
        ($acc:expr, $kq:expr) => {
            let kq = $kq;
            // SAFETY: kq * 64 + 64 <= w.len(); (b0 + c) * n + 4 kq + 4 <= xs.len() (4 kq + 4
            // <= w.len() / 16 <= n, asserted above).
            unsafe {
                let wv = _mm512_loadu_si512(wp.add(kq * 64).cast());
                for (c, a) in $acc.iter_mut().enumerate() {
                    let xv = (xp.add((b0 + c) * n + 4 * kq) as *const i32).read_unaligned();
                    *a = _mm512_dpbusd_epi32(*a, _mm512_set1_epi32(xv), wv);
                }
            }
        };
    }
    let quads = w.len() / (4 * ROW_BLOCK);
    let whole = quads - quads % chains;
    let mut kq = 0;
    // A prefetch is a hint: past the allocation it fetches nothing and never faults.
    let next = wp.wrapping_add(ROW_BLOCK * n);
    while kq < whole {
        if ahead {
            for j in 0..chains {
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add((kq + j) * 64).cast());
            }
        }
        for (j, chain) in acc.iter_mut().take(chains).enumerate() {
            quad!(chain, kq + j);
        }
        kq += chains;
    }
    while kq < quads {
        quad!(acc[0], kq);
        kq += 1;
    }
    let [mut acc, rest @ ..] = acc;
    for chain in rest.iter().take(chains - 1) {
        for (s, a) in acc.iter_mut().zip(chain) {
            *s = _mm512_add_epi32(*s, *a);
        }
    }
    let r0 = rb * ROW_BLOCK;
    if let Some(Epilogue::Int(sums)) = sink.sums() {
        // As `avx2::finish`, 16 rows at a time: s[item * n + r] += P << (w[r] + x[item]).
        assert!(sums.covers(r0, b0, C));
        // SAFETY: r0 + 16 <= w.len() and (b0 + c) * n + r0 + 16 <= s.len() (covers).
        unsafe {
            let row_shift = _mm512_loadu_si512(sums.w.as_ptr().add(r0).cast());
            for (c, a) in acc.iter().enumerate() {
                let shift = _mm512_add_epi32(row_shift, _mm512_set1_epi32(sums.x[b0 + c]));
                let sp = sums.s.as_mut_ptr().add((b0 + c) * sums.n + r0);
                let total =
                    _mm512_add_epi32(_mm512_loadu_si512(sp.cast()), _mm512_sllv_epi32(*a, shift));
                _mm512_storeu_si512(sp.cast(), total);
            }
        }
        return;
    }
    // Rows r0..r0 + 8 and r0 + 8..r0 + 16 of each item, as the AVX2 kernel holds them.
    let halves: [[__m256i; 2]; C] = std::array::from_fn(|c| {
        [
            _mm512_castsi512_si256(acc[c]),
            _mm512_extracti64x4_epi64::<1>(acc[c]),
        ]
    });
    // SAFETY: AVX2 and FMA are present (this function's features).
    unsafe { avx2::finish(&halves, r0, b0, sink) };
}
