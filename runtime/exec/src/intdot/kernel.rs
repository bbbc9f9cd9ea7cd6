//! The tile kernel: integer partials of one packed tile with a task's vector tiles, by the
//! scalar reference or the SIMD kernels (`avx2`, `vnni`), handed to a [`Sink`].

#[cfg(target_arch = "x86_64")]
use super::avx2;
use super::sink::Sink;
use super::weights::Tile;
use super::{Kernel, ROW_BLOCK, ZERO_RUN, simd, supports, vnni};

/// Integer partials of one packed matrix tile with the vector tiles `xs` (`[items][n]`, with
/// their `units`, or none), handed to `sink`. A sink that adds each partial ([`Sink::adds`])
/// does not get the row blocks without a nonzero weight, nor (SIMD kernels) the register
/// blocks of items whose tiles are all zero (unit `ZERO_RUN`): their partials are 0. Every
/// other sink gets every block. The scalar loop multiplies every lane of every item (it is the
/// reference the tests hold the SIMD kernels, the tiles' reach and the items' units to).
pub(super) fn kernel(
    which: Kernel,
    tile: Tile<'_>,
    xs: XTiles<'_>,
    units: &[i32],
    n: usize,
    sink: &mut impl Sink,
) {
    let XTiles { ints, biased } = xs;
    let held = tile.ints.len() == n * n || (tile.ints.is_empty() && tile.narrow.is_some());
    assert!(supports(n) && held && ints.len().is_multiple_of(n));
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
        // A tile kept as bytes alone, whose stack was not widened (`IntWeights::widen`),
        // takes the scalar loop below.
        if which != Kernel::Scalar && simd() && tile.ints.len() == n * n {
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
                &std::array::from_fn(|k| dot_scalar(tile, x, n, r0 + k)),
            );
        }
    }
}

/// Vector tiles `[items][n]` for [`kernel`]: their integers, and the same plus 128 as bytes
/// where they all fit one (`IntVector`'s `biased`).
#[derive(Clone, Copy)]
pub(super) struct XTiles<'a> {
    pub(super) ints: &'a [i16],
    pub(super) biased: Option<&'a [u8]>,
}

/// The reference: row `r` of a tile times one vector tile, one lane at a time.
pub(super) fn dot_scalar(tile: Tile<'_>, x: &[i16], n: usize, r: usize) -> i32 {
    x.iter()
        .enumerate()
        .map(|(l, &xv)| i32::from(xv) * i32::from(tile.int(n, r, l)))
        .sum()
}
