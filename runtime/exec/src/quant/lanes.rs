//! What the quantize and round kernels share: the AVX2 copies of their loops, the parallel
//! split of a slice, and the conversion to integers by the FPU's rounding.

use rayon::prelude::*;

/// A function or method whose loop runs in a copy compiled for AVX2 where the CPU has it (4 f64
/// lanes instead of SSE2's 2; the same IEEE operations, so the same bits), else as built:
/// `avx2_copy! { fn name / name_avx2 / name_body (&self, args) -> R }` defines `name`, which
/// calls `name_body` (an `#[inline(always)]` function or method of the same arguments) from the
/// right copy (`&self` and `-> R` are optional). Unlike [`vectorized`]'s closure, an
/// `#[inline(always)]` body is always inlined.
macro_rules! avx2_copy {
    ($(#[$doc:meta])* $vis:vis fn $name:ident / $avx2:ident / $body:ident
        (&self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?) => {
        $(#[$doc])*
        $vis fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                return unsafe { self.$avx2($($arg),*) };
            }
            self.$body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2(&self $(, $arg: $ty)*) $(-> $ret)? {
            self.$body($($arg),*)
        }
    };
    ($(#[$doc:meta])* $vis:vis fn $name:ident / $avx2:ident / $body:ident
        ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                return unsafe { $avx2($($arg),*) };
            }
            $body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2($($arg: $ty),*) $(-> $ret)? {
            $body($($arg),*)
        }
    };
}
pub(crate) use avx2_copy;

/// Rows of at least this many elements are processed in parallel.
pub(crate) const PAR_MIN: usize = 1 << 14;

/// `run` over matching pieces of `x` and `out`: chunks of `chunk` elements in parallel when
/// there are at least [`PAR_MIN`] of them, else the whole slices at once.
pub(crate) fn par_pieces(
    x: &[f64],
    out: &mut [f64],
    chunk: usize,
    run: impl Fn((&[f64], &mut [f64])) + Sync + Send,
) {
    if x.len() >= PAR_MIN {
        x.par_chunks(chunk.max(1))
            .zip(out.par_chunks_mut(chunk.max(1)))
            .for_each(run);
    } else {
        run((x, out));
    }
}

/// Runs `f` compiled for AVX2 where the CPU has it, so that the element loops it inlines
/// (rounding, quantizing, MFU ops: branch-free bit tricks on f64) vectorise 4 lanes wide
/// instead of SSE2's 2; elsewhere `f` runs as built. Bits are unchanged: Rust never contracts
/// `a * b + c` into an FMA, and every instruction computes the same IEEE result at any width.
///
/// `f` runs in the AVX2 copy only where LLVM inlines the closure; a large one may stay a call
/// compiled for the baseline. The hottest loops ([`FastRound::round_all`], the BFP runs) are
/// methods with their own copy instead ([`avx2_copy!`]).
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { avx2(f) };
    }
    f()
}

/// `1.5 * 2^52`: for `|y| <= 2^51`, `y + MAGIC` lies in `[2^52, 2^53)`, where f64's unit is 1,
/// so the addition rounds `y` to an integer, held in the low bits of the sum.
const MAGIC: f64 = 6755399441055744.0;

/// Nearest-even to an integer for `|y| <= 2^51` (the FPU rounds the addition).
#[inline]
pub(super) fn round_even(y: f64) -> f64 {
    (y + MAGIC) - MAGIC
}

/// `y` rounded to the nearest integer (ties to even, for `|y| <= 2^51`), as the low 16 bits of
/// that integer in two's complement, and whether `y` was that integer: the conversion to
/// `i16` that vectorises (`as` saturates and maps NaN to 0, which costs a compare and a blend
/// per lane), exact for every integer `|y| < 2^15`.
#[inline(always)]
pub(crate) fn to_i16(y: f64) -> (i16, bool) {
    let r = y + MAGIC;
    (r.to_bits() as i16, r - MAGIC == y)
}
