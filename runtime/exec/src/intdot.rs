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
//!
//! The work is split by job: `runs` turns runs of values into integers and units, `weights`
//! and `vector` hold the two operands ([`IntWeights`], [`IntVector`]), `sliced` splits wider
//! weights into slices that fit ([`SlicedWeights`]), `product` computes and sums the product
//! ([`matvec`]), `kernel` computes the tile partials (scalar, or the `avx2` and `vnni`
//! kernels) and hands them to the sinks of `sink`.

mod kernel;
mod product;
mod runs;
mod sink;
mod sliced;
mod vector;
mod weights;

pub use product::{
    fits, matvec, matvecs, on_bytes, round_sums, sums_exact_in_any_order, sums_exact_with,
};
pub use runs::to_ints;
pub use sliced::SlicedWeights;
pub use vector::IntVector;
pub use weights::{IntWeights, NoMaker, TileSource};

/// Rows of one register block of the SIMD kernel (2 x 8 `i32` lanes); N must be a multiple.
pub const ROW_BLOCK: usize = 16;

/// Batch items of one register block of the SIMD kernel: 6 items x 2 row vectors = 12
/// accumulators, with the 2 weight vectors and the broadcast vector 15 of the 16 registers.
const ITEM_BLOCK: usize = 6;

/// Batch items of one register block of the VNNI kernel: 16 accumulators of 16 rows, with
/// the weight vector and the broadcast vector 18 of its 32 registers. Each lane quad's weights
/// are loaded once for 16 multiply-adds, and a task of 64 items is 4 whole blocks.
const VNNI_ITEM_BLOCK: usize = 16;

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

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod vnni;

#[cfg(test)]
pub(crate) mod tests;
