//! The AVX-512 VNNI kernel: `vpdpbusd` multiplies 64 pairs of bytes, unsigned by signed, and
//! adds each four adjacent products to one of 16 `i32` lanes, the accumulation fused: 64
//! multiply-adds an instruction, where the AVX2 kernel does 16 with a `vpmaddwd` and a `vpaddd`.
//!
//! It takes a tile and vector tiles whose integers all lie in `-128..=127` (BFP 8 and
//! narrower: [`super::NarrowTile`], `IntVector`'s bytes). The vector is `i8`, so each item's
//! four bytes come as the instruction's broadcast memory operand (no instruction of their
//! own); the weights are `u8`, each integer plus 128. So an accumulator that starts at `-128
//! * sum_l x_l` over the lanes it takes (the vector's quad starts, `ByteVector`) ends at
//! `sum_l (w_rl + 128) x_l - 128 sum_l x_l = sum_l w_rl x_l`, the partial itself. Every step
//! wraps modulo `2^32` (`vpdpbusd` does not saturate) and the partial lies in `i32`
//! ([`super::fits`]), so the result is exact whatever the intermediate values. Lanes past a
//! row block's reach hold zero weights: the kernel takes no quad past it, and its start
//! leaves those lanes out. `i32` sums take the partials in 16 lanes here; every other sink
//! through the AVX2 kernel's epilogue ([`avx2::finish`]).

use super::avx2::{self, by_items, by_tile_size, for_blocks};
use super::sink::{Epilogue, Sink};
use super::vector::{ByteTiles, ByteVector};
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

/// The tile `narrow`, whose row blocks reach `reach` (`Tile::reach`), times the byte vector
/// tiles `xs`.
///
/// # Safety
/// AVX-512F, AVX-512 VNNI, AVX2 and FMA must be present; `n % ROW_BLOCK == 0`, the narrow
/// tile's integers `n * n` long, `reach.len() == n / ROW_BLOCK` and every `2 * reach[rb] <=
/// n`, `xs.ints.len()` a multiple of `n` and `xs.starts` `n / 4 + 1` per run of `n`. Blocks
/// are left out as [`avx2::tile`] leaves them out.
#[target_feature(enable = "avx512f,avx512vnni,avx2,fma")]
pub(super) unsafe fn tile(
    narrow: NarrowTile<'_>,
    reach: &[u32],
    skip_empty: bool,
    xs: ByteTiles<'_>,
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
    xs: ByteTiles<'_>,
    zero: &impl Fn(usize, usize) -> bool,
    n: usize,
    sink: &mut impl Sink,
) {
    let n = if N == 0 { n } else { N };
    for_blocks(
        reach,
        skip_empty,
        xs.ints.len() / n,
        VNNI_ITEM_BLOCK,
        zero,
        |rb, pairs, b0, c| {
            // The lane quads up to the block's last nonzero weight (4 quads <= 2 pairs + 2 <= n).
            let quads = pairs.div_ceil(2) as usize;
            let w = &narrow.ints[rb * ROW_BLOCK * n..][..ROW_BLOCK * 4 * quads];
            // SAFETY: as the function's contract; block() reads the row block `w` and items
            // b0..b0 + c of `xs`.
            unsafe { by_items_to_16!(c, block::<N>(w, xs, n, rb, b0, sink)) }
        },
    );
}

/// Rows `rb * 16..` + 16 of items `b0..b0 + C`: `w` is the row block's first lane quads,
/// `[quads][16][4]` biased bytes.
#[target_feature(enable = "avx512f,avx512vnni,avx2,fma")]
#[inline]
unsafe fn block<const C: usize, const N: usize>(
    w: &[u8],
    xs: ByteTiles<'_>,
    n: usize,
    rb: usize,
    b0: usize,
    sink: &mut impl Sink,
) {
    let n = if N == 0 { n } else { N };
    let quads = w.len() / (4 * ROW_BLOCK);
    let per_run = ByteVector::starts_per_run(n);
    assert!(xs.ints.len() >= (b0 + C) * n && w.len() <= ROW_BLOCK * n);
    assert!(xs.starts.len() >= (b0 + C) * per_run && quads < per_run);
    // Below 4 items, each item's sums go in `4 / C` chains over alternate lane quads, added at
    // the end: one chain would wait out `vpdpbusd`'s latency at every quad. Sums wrap modulo
    // 2^32, so any order gives the same partial.
    let chains = if C >= 4 { 1 } else { 4 / C };
    let mut acc = [[_mm512_setzero_si512(); C]; 4];
    acc[0] = std::array::from_fn(|c| _mm512_set1_epi32(xs.starts[(b0 + c) * per_run + quads]));
    let (wp, xp) = (w.as_ptr(), xs.ints.as_ptr());
    // Lane quad `kq` into the chain `acc`.
    macro_rules! quad {
        ($acc:expr, $kq:expr) => {
            let kq = $kq;
            // SAFETY: kq * 64 + 64 <= w.len(); (b0 + c) * n + 4 kq + 4 <= xs.ints.len() (4 kq
            // + 4 <= w.len() / 16 <= n, asserted above).
            unsafe {
                let wv = _mm512_loadu_si512(wp.add(kq * 64).cast());
                for (c, a) in $acc.iter_mut().enumerate() {
                    let xv = (xp.add((b0 + c) * n + 4 * kq) as *const i32).read_unaligned();
                    *a = _mm512_dpbusd_epi32(*a, wv, _mm512_set1_epi32(xv));
                }
            }
        };
    }
    let whole = quads - quads % chains;
    let mut kq = 0;
    while kq < whole {
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
