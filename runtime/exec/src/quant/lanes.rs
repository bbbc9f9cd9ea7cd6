//! What the quantize and round kernels share: the AVX2 copies of their loops, the parallel
//! split of a slice, and the conversion to integers by the FPU's rounding.

use rayon::prelude::*;

/// A function or method whose loop runs in a copy compiled for AVX-512 or AVX2 where the CPU has
/// it (8 or 4 f64 lanes instead of SSE2's 2; the same IEEE operations, so the same bits), else
/// as built: `avx2_copy! { fn name / name_avx2 / name_avx512 / name_body (&self, args) -> R }`
/// defines `name`, which calls `name_body` (an `#[inline(always)]` function or method of the
/// same arguments) from the widest copy the CPU runs ([`widest_copy`]; `&self` and `-> R` are
/// optional). Unlike [`vectorized`]'s closure, an `#[inline(always)]` body is always inlined.
macro_rules! avx2_copy {
    ($(#[$doc:meta])* $vis:vis fn $name:ident / $avx2:ident / $avx512:ident / $body:ident
        (&self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?) => {
        $(#[$doc])*
        $vis fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
            match $crate::quant::widest_copy() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX-512F, DQ, BW and VL (`widest_copy`).
                $crate::quant::LoopCopy::Avx512 => unsafe { self.$avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX2 (`widest_copy`).
                $crate::quant::LoopCopy::Avx2 => unsafe { self.$avx2($($arg),*) },
                _ => self.$body($($arg),*),
            }
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2(&self $(, $arg: $ty)*) $(-> $ret)? {
            self.$body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")]
        unsafe fn $avx512(&self $(, $arg: $ty)*) $(-> $ret)? {
            self.$body($($arg),*)
        }
    };
    ($(#[$doc:meta])* $vis:vis fn $name:ident / $avx2:ident / $avx512:ident / $body:ident
        ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            match $crate::quant::widest_copy() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX-512F, DQ, BW and VL (`widest_copy`).
                $crate::quant::LoopCopy::Avx512 => unsafe { $avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX2 (`widest_copy`).
                $crate::quant::LoopCopy::Avx2 => unsafe { $avx2($($arg),*) },
                _ => $body($($arg),*),
            }
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2($($arg: $ty),*) $(-> $ret)? {
            $body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")]
        unsafe fn $avx512($($arg: $ty),*) $(-> $ret)? {
            $body($($arg),*)
        }
    };
}
pub(crate) use avx2_copy;

/// The copies [`avx2_copy`] makes of a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LoopCopy {
    /// As built (SSE2 on x86-64).
    Build,
    Avx2,
    /// AVX-512F, DQ, BW and VL: 8 f64 lanes, and the 64-bit compares and shifts AVX2 lacks.
    Avx512,
}

impl LoopCopy {
    /// Every copy, narrowest first (a copy's index is its discriminant).
    #[cfg(test)]
    const ALL: [LoopCopy; 3] = [LoopCopy::Build, LoopCopy::Avx2, LoopCopy::Avx512];

    /// The widest copy this CPU runs.
    fn best() -> LoopCopy {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512bw") && has!("avx512vl") {
                return LoopCopy::Avx512;
            }
            if has!("avx2") {
                return LoopCopy::Avx2;
            }
        }
        LoopCopy::Build
    }
}

/// The copy [`avx2_copy`]'s loops run: the widest this CPU has (below a test's cap,
/// [`each_copy`]).
pub(crate) fn widest_copy() -> LoopCopy {
    use std::sync::OnceLock;
    static BEST: OnceLock<LoopCopy> = OnceLock::new();
    let best = *BEST.get_or_init(LoopCopy::best);
    // Every copy gives the same bits, so a cap set by one test changes no other test's.
    #[cfg(test)]
    let best = best.min(LoopCopy::ALL[usize::from(CAP.load(std::sync::atomic::Ordering::Relaxed))]);
    best
}

/// The widest copy tests let [`widest_copy`] pick (a [`LoopCopy`]'s discriminant).
#[cfg(test)]
static CAP: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(LoopCopy::Avx512 as u8);

/// `check(copy)` under each copy this CPU runs, widest last: the copies are the same loop
/// compiled for other instructions, so each must give the bits the others give.
#[cfg(test)]
pub(crate) fn each_copy(mut check: impl FnMut(LoopCopy)) {
    use std::sync::atomic::Ordering;
    let best = LoopCopy::best();
    for copy in LoopCopy::ALL.into_iter().filter(|&c| c <= best) {
        CAP.store(copy as u8, Ordering::Relaxed);
        check(copy);
    }
    CAP.store(LoopCopy::Avx512 as u8, Ordering::Relaxed);
}

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
