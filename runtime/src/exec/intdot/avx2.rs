//! The SIMD kernel: one tile's `i16` integers times register blocks of items' integers
//! (`vpmaddwd`, 16 rows by up to 6 items), each block's `i32` partials handed to a [`Sink`].
//! The scalar kernel (`dot_scalar`) computes the same integers and is its reference.

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
