//! The integer products on a CUDA GPU (`--device cuda`, the `cuda` feature).
//!
//! **What runs where.** Only the tile products of [`intdot`] move to the GPU: the weight
//! stack's integers are uploaded once per session, the vector's once per run, and a kernel
//! computes every output's sum of scaled partials `P * 2^(u_w + u_x)` in f64, then rounds
//! them to the output format where the fast rounder applies and f32 holds the format
//! (`round_sums_f32`, else the host rounds them with the CPU kernel's [`intdot::round_sums`]).
//! Everything else (quantizing, MFU ops, data movement) stays on the host.
//!
//! **Why the bits are the same.** The GPU takes a product only where
//! [`intdot::sums_exact_in_any_order`] holds: `exact` accumulation, and every running sum of
//! an output's scaled partials exact whatever the order of the additions (all terms are
//! multiples of one power of two and their sum stays below 2^53 of it). Each partial `P` is an
//! exact `i32` (the integers are bounded by [`intdot::qmax`]), `P * 2^(u_w + u_x)` is exact
//! (`intdot::fits`), so the f64 sum the GPU forms is the exact sum, the same number the CPU
//! kernel's sums reach. Every other product (the `-seq` accumulation modes, wide exponent
//! spreads) stays on the CPU kernel. The kernel is compiled at run time by NVRTC; the driver and
//! NVRTC are loaded at run time too, so the build needs no CUDA toolkit.

// The kernel and its grid are only launched in a build with the feature.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use super::ExecError;
#[cfg(feature = "cuda")]
use super::intdot;
use super::intdot::{IntVector, IntWeights};
use super::matmul::MatVec;
use nnp_numerics::FloatFormat;

#[cfg(feature = "cuda")]
pub use imp::{Gpu, GpuVector, GpuWeights};

#[cfg(not(feature = "cuda"))]
pub use off::{Gpu, GpuVector, GpuWeights};

/// Rows and batch items of one thread block's outputs (16 divides the native dimension,
/// [`intdot::supports`], so a block's rows lie in one row tile), and the blocks the launch
/// aims at (two per multiprocessor of an H100) when it splits the column tiles between them.
const ROWS: u32 = 16;
const ITEMS: u32 = 64;
const THREADS: u32 = 256;
const TARGET_BLOCKS: usize = 264;

/// The kernel. Block `(bx, by, bz)` computes rows `16 bx..` for items `64 by..` over column
/// tiles `bz * per_split..`; thread `t` owns rows `2 (t % 8) + {0, 1}` and items `2 (t / 8) +
/// {0, 1}` of them. Per column tile: the integer dot products of up to 64 lanes at a time from
/// shared memory, in `int` (exact, `qmax`), then `acc += P * (sw * sx)` per output in f64; the
/// blocks of one output add their sums with `atomicAdd`. Every sum is exact, so the order of
/// the additions (and of the atomics) cannot change a bit.
const SOURCE: &str = r#"
#define ROWS 16
#define ITEMS 64
#define STAGE 64
#define PAD 4
extern "C" __global__ void int_matvec(
    const short* __restrict__ w,    // [rows * cols][n][n]
    const double* __restrict__ sw,  // [rows * cols][n]
    const short* __restrict__ x,    // [cols][b][n]
    const double* __restrict__ sx,  // [cols][b]
    double* __restrict__ y,         // [b][rows * n], zeroed
    int cols, int n, int b, int out_len, int per_split)
{
    __shared__ __align__(8) short ws[ROWS][STAGE + PAD];
    __shared__ __align__(8) short xs[ITEMS][STAGE + PAD];
    const int t = threadIdx.x;
    const int g0 = blockIdx.x * ROWS;            // first output row
    const int i = g0 / n, r0 = g0 % n;           // row tile, first row inside it
    const int b0 = blockIdx.y * ITEMS;
    const int j0 = blockIdx.z * per_split;
    const int j1 = min(cols, j0 + per_split);
    const int tr = 2 * (t % 8), ti = 2 * (t / 8);
    double acc[2][2] = {{0.0, 0.0}, {0.0, 0.0}};
    for (int j = j0; j < j1; ++j) {
        const short* wt = w + ((size_t)(i * cols + j) * n + r0) * n;
        const short* xt = x + (size_t)j * b * n;
        int p[2][2] = {{0, 0}, {0, 0}};
        for (int l0 = 0; l0 < n; l0 += STAGE) {
            const int lanes = min(STAGE, n - l0);   // a multiple of 16
            const int quads = lanes / 4;
            for (int e = t; e < ROWS * quads; e += blockDim.x) {
                const int r = e / quads, q = e % quads;
                *(short4*)&ws[r][4 * q] = *(const short4*)&wt[(size_t)r * n + l0 + 4 * q];
            }
            for (int e = t; e < ITEMS * quads; e += blockDim.x) {
                const int it = e / quads, q = e % quads;
                const int item = b0 + it;
                *(short4*)&xs[it][4 * q] = item < b
                    ? *(const short4*)&xt[(size_t)item * n + l0 + 4 * q]
                    : make_short4(0, 0, 0, 0);
            }
            __syncthreads();
            for (int l = 0; l < lanes; l += 16) {
#pragma unroll
                for (int k = l; k < l + 16; ++k) {
                    const int w0 = ws[tr][k], w1 = ws[tr + 1][k];
                    const int x0 = xs[ti][k], x1 = xs[ti + 1][k];
                    p[0][0] += w0 * x0; p[0][1] += w0 * x1;
                    p[1][0] += w1 * x0; p[1][1] += w1 * x1;
                }
            }
            __syncthreads();
        }
        const double* swt = sw + (size_t)(i * cols + j) * n + r0 + tr;
        for (int c = 0; c < 2; ++c) {
            const int item = b0 + ti + c;
            if (item < b) {
                const double s = sx[(size_t)j * b + item];
                acc[0][c] += (double)p[0][c] * (swt[0] * s);
                acc[1][c] += (double)p[1][c] * (swt[1] * s);
            }
        }
    }
    for (int c = 0; c < 2; ++c) {
        const int item = b0 + ti + c;
        if (item < b) {
            atomicAdd(&y[(size_t)item * out_len + g0 + tr], acc[0][c]);
            atomicAdd(&y[(size_t)item * out_len + g0 + tr + 1], acc[1][c]);
        }
    }
}

// quant::FastRound::round_sums, element by element: nearest-even rounding of an exact sum to
// the output format, an exact zero +0, then narrowed to f32 (which holds every value of the
// format, so the narrowing is exact).
extern "C" __global__ void round_sums_f32(
    const double* __restrict__ y, float* __restrict__ out, long long len,
    unsigned int shift, unsigned long long half, unsigned long long mask,
    unsigned long long emin_bits, double magic, double max, double over)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= len) return;
    const double x = y[e];
    const unsigned long long bits = __double_as_longlong(x);
    const unsigned long long sign = bits & (1ull << 63);
    const unsigned long long mag = bits & ~(1ull << 63);
    const unsigned long long odd = (mag >> shift) & 1ull;
    const double normal = __longlong_as_double((mag + half + odd) & ~mask);
    const double ax = __longlong_as_double(mag);
    const double sub = __dsub_rn(__dadd_rn(ax, magic), magic);
    double r = mag >= emin_bits ? normal : sub;
    r = r > max ? over : r;
    r = __longlong_as_double(__double_as_longlong(r) | sign);
    out[e] = x == 0.0 ? 0.0f : (float)r;
}
"#;

/// Whether f32 holds every value of `fmt`, so its rounded values travel as f32 exactly.
fn f32_holds(fmt: &FloatFormat) -> bool {
    fmt.mant_bits <= 23
        && 1 - fmt.bias() - fmt.mant_bits as i32 >= -149
        && fmt.max_value() <= f64::from(f32::MAX)
}

/// The launch grid of a product and the column tiles per split: `None` where it exceeds
/// CUDA's grid limits or `int` indexing (the product then stays on the CPU).
fn grid(w: &IntWeights, x: &IntVector) -> Option<((u32, u32, u32), i32)> {
    let (rows, cols, n) = w.dims();
    let fits_int = |v: usize| i32::try_from(v).is_ok();
    let ok = fits_int(rows * n) && fits_int(rows * cols * n) && fits_int(x.batch());
    let (gx, gy) = (rows * n / ROWS as usize, x.batch().div_ceil(ITEMS as usize));
    let per_split = cols.div_ceil(TARGET_BLOCKS.div_ceil(gx * gy).clamp(1, cols));
    let gz = cols.div_ceil(per_split);
    let dims = (
        u32::try_from(gx).ok()?,
        u32::try_from(gy).ok()?,
        u32::try_from(gz).ok()?,
    );
    (ok && dims.1 <= 65_535 && dims.2 <= 65_535).then_some((dims, per_split as i32))
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::exec::quant::FastRound;
    use cudarc::driver::{
        CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig,
        PinnedHostSlice, PushKernelArg,
    };
    use rayon::prelude::*;
    use std::sync::{Arc, Mutex, OnceLock};

    /// The first CUDA device, with the kernels loaded.
    pub struct Gpu {
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        /// `int_matvec` and `round_sums_f32`.
        matvec: CudaFunction,
        round: CudaFunction,
        name: String,
        /// Page-locked host buffers that results are copied into ([`Gpu::collect`]).
        staging: Mutex<Staging>,
    }

    /// Page-locked host memory, grown as needed: a copy into pageable memory goes through a
    /// driver buffer at a fraction of the speed, and cannot overlap other work.
    #[derive(Default)]
    struct Staging {
        f64: Option<PinnedHostSlice<f64>>,
        f32: Option<PinnedHostSlice<f32>>,
    }

    /// A weight stack's integers and row scales on the device.
    pub struct GpuWeights {
        w: CudaSlice<i16>,
        sw: CudaSlice<f64>,
    }

    /// A vector's integers and tile scales on the device.
    pub struct GpuVector {
        x: CudaSlice<i16>,
        sx: CudaSlice<f64>,
    }

    /// A product queued on the device, not yet copied back ([`Gpu::collect`]).
    pub struct Launched {
        spec: MatVec,
        /// The exact sums; rounded on the host when `rounded` is `None`.
        sums: CudaSlice<f64>,
        /// The sums rounded to the output format, as f32.
        rounded: Option<CudaSlice<f32>>,
    }

    /// A launched product's values in the staging buffers.
    enum Copied<'a> {
        Rounded(&'a [f32]),
        Sums(&'a [f64]),
    }

    fn cuda(e: DriverError) -> ExecError {
        ExecError::Device(format!("CUDA: {e}"))
    }

    /// Whether a shared library loads under one of the names cudarc tries (cudarc panics
    /// when none does, so this is asked first).
    fn loadable(lib: &str) -> bool {
        cudarc::get_lib_name_candidates(lib).iter().any(|name| {
            // SAFETY: loading the CUDA driver or NVRTC runs their initialisers, which is what
            // using them through cudarc does anyway.
            unsafe { libloading::Library::new(name) }.is_ok()
        })
    }

    /// Page-locked memory of at least `len` elements in `slot`.
    fn grown<'a, T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        ctx: &Arc<CudaContext>,
        slot: &'a mut Option<PinnedHostSlice<T>>,
        len: usize,
    ) -> Result<&'a mut [T], ExecError> {
        if slot.as_ref().is_none_or(|s| s.len() < len) {
            *slot = None;
            // SAFETY: every element is written by a copy before it is read. Flags 0: not
            // write-combined, which the host could not read at speed.
            *slot = Some(unsafe { ctx.alloc_pinned_with_flags(len.max(1), 0) }.map_err(cuda)?);
        }
        match slot.as_mut() {
            Some(s) => s.as_mut_slice().map_err(cuda),
            None => Err(ExecError::Device("CUDA: no staging buffer".into())),
        }
    }

    impl Gpu {
        /// Device 0 with the kernels compiled, once per process (sessions share it).
        pub fn open() -> Result<Arc<Gpu>, ExecError> {
            static SHARED: OnceLock<Result<Arc<Gpu>, String>> = OnceLock::new();
            SHARED
                .get_or_init(|| Gpu::start().map(Arc::new).map_err(|e| e.to_string()))
                .clone()
                .map_err(ExecError::Device)
        }

        fn start() -> Result<Gpu, ExecError> {
            for (lib, what) in [("cuda", "the CUDA driver"), ("nvrtc", "NVRTC")] {
                if !loadable(lib) {
                    return Err(ExecError::Device(format!(
                        "{what} (lib{lib}.so) was not found; help: install it or add its \
                         folder to LD_LIBRARY_PATH, or run with `--device cpu`"
                    )));
                }
            }
            let ctx = CudaContext::new(0).map_err(|e| {
                ExecError::Device(format!(
                    "no usable CUDA device: {e}; help: run with `--device cpu`"
                ))
            })?;
            let name = ctx.name().map_err(cuda)?;
            // NVRTC 13's default target (compute_75) has the f64 atomicAdd; the driver compiles
            // the PTX for the device.
            let ptx = cudarc::nvrtc::compile_ptx(SOURCE).map_err(|e| {
                ExecError::Device(format!("NVRTC could not compile the product kernel: {e}"))
            })?;
            let module = ctx.load_module(ptx).map_err(cuda)?;
            Ok(Gpu {
                stream: ctx.default_stream(),
                matvec: module.load_function("int_matvec").map_err(cuda)?,
                round: module.load_function("round_sums_f32").map_err(cuda)?,
                ctx,
                name,
                staging: Mutex::new(Staging::default()),
            })
        }

        /// The device's name.
        pub fn name(&self) -> &str {
            &self.name
        }

        pub fn weights(&self, w: &IntWeights) -> Result<GpuWeights, ExecError> {
            Ok(GpuWeights {
                w: self.stream.clone_htod(&w.tiles_row_major()).map_err(cuda)?,
                sw: self.stream.clone_htod(w.row_scales()).map_err(cuda)?,
            })
        }

        pub fn vector(&self, x: &IntVector) -> Result<GpuVector, ExecError> {
            Ok(GpuVector {
                x: self.stream.clone_htod(x.ints()).map_err(cuda)?,
                sx: self.stream.clone_htod(x.tile_scales()).map_err(cuda)?,
            })
        }

        /// Queue the kernels of `y = W x` as [`intdot::matvec`] computes it (`[b, rows * n]`,
        /// copied back by [`Gpu::collect`], so that several products share one wait); `None`
        /// where the GPU cannot give the same bits (or the grid is too large) and the CPU
        /// kernel must run.
        pub fn launch(
            &self,
            spec: &MatVec,
            (w, gw): (&IntWeights, &GpuWeights),
            (x, gx): (&IntVector, &GpuVector),
        ) -> Result<Option<Launched>, ExecError> {
            let Some((grid_dim, per_split)) = grid(w, x) else {
                return Ok(None);
            };
            if !intdot::sums_exact_in_any_order(spec, w, x) {
                return Ok(None);
            }
            let (rows, cols, n) = w.dims();
            let len = x.batch() * rows * n;
            let mut sums = self.stream.alloc_zeros::<f64>(len).map_err(cuda)?;
            // `grid` checked that these fit i32.
            let (cols, n, b, out_len) =
                (cols as i32, n as i32, x.batch() as i32, (rows * n) as i32);
            let mut launch = self.stream.launch_builder(&self.matvec);
            launch
                .arg(&gw.w)
                .arg(&gw.sw)
                .arg(&gx.x)
                .arg(&gx.sx)
                .arg(&mut sums)
                .arg(&cols)
                .arg(&n)
                .arg(&b)
                .arg(&out_len)
                .arg(&per_split);
            let cfg = LaunchConfig {
                grid_dim,
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the arguments match `int_matvec`'s parameters in order and type; the grid
            // covers rows * n rows in blocks of 16 (16 divides n), the batch in blocks of 64
            // and the column tiles in runs of per_split; every index the kernel forms is inside
            // the buffers' lengths ([rows * cols][n][n], [rows * cols][n], [cols][b][n],
            // [cols][b], [b][rows * n]), and `grid` checked that they fit `int`.
            unsafe { launch.launch(cfg) }.map_err(cuda)?;
            // Rounded on the device where the output format allows: then the copy back is
            // f32, half the bytes, and the host has nothing left to do.
            let fast = FastRound::new(&spec.output).filter(|_| f32_holds(&spec.output));
            let rounded = match (fast, u32::try_from(len.div_ceil(256))) {
                (Some(f), Ok(blocks)) => {
                    // SAFETY: `round_sums_f32` writes every element before anything reads it.
                    let mut r = unsafe { self.stream.alloc::<f32>(len) }.map_err(cuda)?;
                    let len64 = len as i64;
                    let mut launch = self.stream.launch_builder(&self.round);
                    launch
                        .arg(&sums)
                        .arg(&mut r)
                        .arg(&len64)
                        .arg(&f.shift)
                        .arg(&f.half)
                        .arg(&f.mask)
                        .arg(&f.emin_bits)
                        .arg(&f.magic)
                        .arg(&f.max)
                        .arg(&f.over);
                    let cfg = LaunchConfig {
                        grid_dim: (blocks, 1, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    // SAFETY: the arguments match `round_sums_f32`'s parameters in order and
                    // type; the kernel touches elements below `len`, both buffers' length.
                    unsafe { launch.launch(cfg) }.map_err(cuda)?;
                    Some(r)
                }
                _ => None,
            };
            Ok(Some(Launched {
                spec: *spec,
                sums,
                rounded,
            }))
        }

        /// The outputs of launched products, in order: every copy queued into page-locked
        /// memory, one wait, then the host's part (f32 widened; sums the device did not round
        /// rounded as [`intdot::matvec`] rounds them).
        pub fn collect(&self, launched: Vec<Launched>) -> Result<Vec<Vec<f64>>, ExecError> {
            if launched.is_empty() {
                return Ok(Vec::new());
            }
            let len = |l: &Launched| l.sums.len();
            let n32: usize = launched
                .iter()
                .filter(|l| l.rounded.is_some())
                .map(len)
                .sum();
            let n64: usize = launched
                .iter()
                .filter(|l| l.rounded.is_none())
                .map(len)
                .sum();
            let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
            let Staging { f64: s64, f32: s32 } = &mut *staging;
            let h64 = grown(&self.ctx, s64, n64)?;
            let h32 = grown(&self.ctx, s32, n32)?;
            // Each product's part of its staging buffer, in order.
            let (mut o64, mut o32) = (0, 0);
            let at: Vec<std::ops::Range<usize>> = launched
                .iter()
                .map(|l| {
                    let o = if l.rounded.is_some() {
                        &mut o32
                    } else {
                        &mut o64
                    };
                    *o += len(l);
                    *o - len(l)..*o
                })
                .collect();
            for (l, at) in launched.iter().zip(&at) {
                // Copies into page-locked memory given as plain slices: queued, not waited for.
                match &l.rounded {
                    Some(r) => self.stream.memcpy_dtoh(r, &mut h32[at.clone()]),
                    None => self.stream.memcpy_dtoh(&l.sums, &mut h64[at.clone()]),
                }
                .map_err(cuda)?;
            }
            self.stream.synchronize().map_err(cuda)?;
            // Then the host's work on them, in parallel.
            let (h64, h32) = (&*h64, &*h32);
            let parts: Vec<(&Launched, Copied)> = launched
                .iter()
                .zip(at)
                .map(|(l, at)| match &l.rounded {
                    Some(_) => (l, Copied::Rounded(&h32[at])),
                    None => (l, Copied::Sums(&h64[at])),
                })
                .collect();
            Ok(parts
                .into_par_iter()
                .map(|(l, part)| match part {
                    Copied::Rounded(r) => r.iter().map(|&v| f64::from(v)).collect(),
                    Copied::Sums(sums) => {
                        let mut out = sums.to_vec();
                        intdot::round_sums(&l.spec, &mut out);
                        out
                    }
                })
                .collect())
        }
    }
}

/// The same interface in a build without the feature: [`Gpu::open`] says so, and there is
/// never a value to call the rest on.
#[cfg(not(feature = "cuda"))]
mod off {
    use super::*;
    use std::convert::Infallible;

    pub struct Gpu(Infallible);
    pub struct GpuWeights(Infallible);
    pub struct GpuVector(Infallible);
    /// [`Gpu::launch`]'s queued product.
    pub struct Launched(Infallible);

    impl Gpu {
        pub fn open() -> Result<std::sync::Arc<Gpu>, ExecError> {
            Err(ExecError::Device(
                "this nnpc was built without CUDA support; help: rebuild with `--features \
                 cuda` or run with `--device cpu`"
                    .into(),
            ))
        }

        pub fn name(&self) -> &str {
            match self.0 {}
        }

        pub fn weights(&self, _: &IntWeights) -> Result<GpuWeights, ExecError> {
            match self.0 {}
        }

        pub fn vector(&self, _: &IntVector) -> Result<GpuVector, ExecError> {
            match self.0 {}
        }

        pub fn launch(
            &self,
            _: &MatVec,
            _: (&IntWeights, &GpuWeights),
            _: (&IntVector, &GpuVector),
        ) -> Result<Option<Launched>, ExecError> {
            match self.0 {}
        }

        pub fn collect(&self, _: Vec<Launched>) -> Result<Vec<Vec<f64>>, ExecError> {
            match self.0 {}
        }
    }
}

/// The GPU against the exact float reference ([`super::matmul::matvec_exact`], independent of
/// both integer kernels). These need a CUDA device: they run in a build with the feature.
#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;
    use crate::exec::intdot::tests::{extreme_operands, run_values, spec};
    use crate::exec::matmul::matvec_exact;
    use nnp_grammar::Accumulation;
    use nnp_numerics::FloatFormat;

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn on_gpu(spec: &MatVec, w: &IntWeights, x: &IntVector) -> Option<Vec<f64>> {
        let gpu = Gpu::open().expect("a CUDA device");
        let (gw, gx) = (
            gpu.weights(w).expect("upload"),
            gpu.vector(x).expect("upload"),
        );
        let launched = gpu.launch(spec, (w, &gw), (x, &gx)).expect("kernels run")?;
        gpu.collect(vec![launched]).expect("copied back").pop()
    }

    /// Batches that leave partial 64-item blocks and odd items in the 2 x 2 thread tiles (1,
    /// 33, 70, 95, 5) and a full block (64); native dimensions that fill a 64-lane stage in
    /// part (16, 32, 48) or twice (128); one to eight column tiles (split across blocks or
    /// not); exponent spreads of 3 binades (the GPU takes them) and 61 (it must refuse them:
    /// the sums are inexact in f64); saturated and zero runs.
    #[test]
    fn gpu_products_equal_the_exact_reference_bit_for_bit() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut taken = 0;
        for (n, rows, cols, b, acc, out) in [
            (16, 1, 1, 1, Accumulation::Exact, FloatFormat::FP16),
            (48, 2, 3, 33, Accumulation::Exact, FloatFormat::FP16),
            (128, 3, 2, 70, Accumulation::Exact, FloatFormat::BF16),
            (128, 2, 8, 95, Accumulation::Exact, FloatFormat::FP32),
            (32, 4, 1, 64, Accumulation::Exact, FloatFormat::FP64),
            (128, 1, 2, 5, Accumulation::Fp32Seq, FloatFormat::FP16),
        ] {
            let spec = spec(n, rows, cols, acc, out);
            for spread in [3, 3, 61] {
                let w = run_values(&mut s, n, rows * cols * n, spread);
                let x = run_values(&mut s, n, b * cols, spread);
                let want = matvec_exact(&spec, &x, b, &w);
                let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
                let xi = IntVector::new(&x, b, cols, n).expect("fits");
                assert!(intdot::fits(&wi, &xi));
                let exact = intdot::sums_exact_in_any_order(&spec, &wi, &xi);
                match on_gpu(&spec, &wi, &xi) {
                    Some(got) => {
                        assert!(exact);
                        taken += 1;
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "n {n} rows {rows} cols {cols} b {b}"
                        );
                    }
                    None => assert!(!exact, "the GPU refused a product it can compute"),
                }
            }
        }
        // Every exact-accumulation case at spread 3 (5 cases x 2) went to the GPU.
        assert!(taken >= 10, "{taken} products on the GPU");
    }

    #[test]
    fn gpu_extreme_products_by_hand() {
        // As the CPU kernel's test: 128 * 4095^2 = 2,146,435,200, the largest i32 partial, and
        // its negative; rows 2.. are +0.
        let spec = spec(128, 1, 1, Accumulation::Exact, FloatFormat::FP64);
        let ((w, x), (wi, xi)) = extreme_operands();
        let y = on_gpu(&spec, &wi, &xi).expect("on the GPU");
        assert_eq!(y[0], 2_146_435_200.0);
        assert_eq!(y[1], -2_146_435_200.0);
        assert!(y[2..].iter().all(|v| v.to_bits() == 0));
        // Rounded on the device: to fp16 both overflow (to +-inf, fp16's overflow mode); to
        // bf16 they round to 2^31 = 2,147,483,648 (8 significant bits: 2,146,435,200 lies
        // between 2^31 - 2^23 and 2^31, nearer the latter); fp32 holds them exactly
        // (4095^2 = 16,769,025 < 2^24, times 2^7).
        for (out, want) in [
            (FloatFormat::FP16, f64::INFINITY),
            (FloatFormat::BF16, 2_147_483_648.0),
            (FloatFormat::FP32, 2_146_435_200.0),
        ] {
            let spec = MatVec {
                output: out,
                ..spec
            };
            let y = on_gpu(&spec, &wi, &xi).expect("on the GPU");
            assert_eq!((y[0], y[1]), (want, -want), "{out:?}");
            assert_eq!(bits(&y), bits(&matvec_exact(&spec, &x, 1, &w)), "{out:?}");
        }
    }
}

#[cfg(all(test, not(feature = "cuda")))]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_the_feature_says_how_to_get_it() {
        let Err(ExecError::Device(m)) = Gpu::open() else {
            panic!("no GPU without the feature");
        };
        assert!(
            m.contains("`--features cuda`") && m.contains("`--device cpu`"),
            "{m}"
        );
    }
}
