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
/// [`intdot::supports`], so a block's rows lie in one row tile), and the blocks one product
/// aims at (two per multiprocessor of an H100) when it splits the column tiles between them.
const ROWS: u32 = 16;
const ITEMS: u32 = 64;
const THREADS: u32 = 256;
const TARGET_BLOCKS: usize = 264;
/// Products per launch: their descriptions travel as the kernel's parameter (`Jobs`, 1160
/// bytes, under CUDA's 4 KiB).
const MAX_JOBS: usize = 16;

/// The kernels. `int_matvec` computes up to 16 products (`Jobs`) in one launch: its blocks are
/// numbered through the products (`first`), and block `(bx, by, bz)` of a product computes rows
/// `16 bx..` for items `64 by..` over column tiles `bz * per_split..`; thread `t` owns rows
/// `2 (t % 8) + {0, 1}` and items `2 (t / 8) + {0, 1}` of them. Per column tile: the integer
/// dot products of up to 64 lanes at a time from shared memory, in `int` (exact, `qmax`), then
/// `acc += P * (sw * sx)` per output in f64; the blocks of one output add their sums with
/// `atomicAdd`. Every sum is exact, so the order of the additions (and of the atomics) cannot
/// change a bit.
const SOURCE: &str = r#"
#define ROWS 16
#define ITEMS 64
#define STAGE 64
#define PAD 4
#define MAX_JOBS 16
struct Job {
    const short* w;     // [rows * cols][n][n]
    const double* sw;   // [rows * cols][n]
    const short* x;     // [cols][b][n]
    const double* sx;   // [cols][b]
    double* y;          // [b][rows * n], zeroed
    int cols, n, b, out_len, per_split;
    int gx, gy;         // blocks along rows and items
    int first;          // the product's first block
};
struct Jobs {
    Job job[MAX_JOBS];
    int count;
};
extern "C" __global__ void int_matvec(const Jobs jobs)
{
    __shared__ __align__(8) short ws[ROWS][STAGE + PAD];
    __shared__ __align__(8) short xs[ITEMS][STAGE + PAD];
    int k = 0;
    while (k + 1 < jobs.count && (int)blockIdx.x >= jobs.job[k + 1].first) ++k;
    const Job& jb = jobs.job[k];
    const int local = (int)blockIdx.x - jb.first;
    const int bx = local % jb.gx, by = (local / jb.gx) % jb.gy, bz = local / (jb.gx * jb.gy);
    const short* __restrict__ w = jb.w;
    const double* __restrict__ sw = jb.sw;
    const short* __restrict__ x = jb.x;
    const double* __restrict__ sx = jb.sx;
    double* __restrict__ y = jb.y;
    const int cols = jb.cols, n = jb.n, b = jb.b, out_len = jb.out_len;
    const int t = threadIdx.x;
    const int g0 = bx * ROWS;                    // first output row
    const int i = g0 / n, r0 = g0 % n;           // row tile, first row inside it
    const int b0 = by * ITEMS;
    const int j0 = bz * jb.per_split;
    const int j1 = min(cols, j0 + jb.per_split);
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

/// A product's thread blocks: `gx` along its rows, `gy` along the batch, `blocks` in all (the
/// column tiles split in runs of `per_split`).
#[derive(Clone, Copy, Debug)]
struct Grid {
    gx: i32,
    gy: i32,
    blocks: i32,
    per_split: i32,
}

/// The blocks of `W x`: `None` where an index would exceed `int`, or a launch of
/// [`MAX_JOBS`] such products its block count (the product then stays on the CPU).
fn grid(w: &IntWeights, x: &IntVector) -> Option<Grid> {
    let (rows, cols, n) = w.dims();
    let fits_int = |v: usize| i32::try_from(v).is_ok();
    let ok = fits_int(rows * n) && fits_int(rows * cols * n) && fits_int(x.batch());
    let (gx, gy) = (rows * n / ROWS as usize, x.batch().div_ceil(ITEMS as usize));
    let per_split = cols.div_ceil(TARGET_BLOCKS.div_ceil(gx * gy).clamp(1, cols));
    let blocks = gx.checked_mul(gy)?.checked_mul(cols.div_ceil(per_split))?;
    let limit = i32::MAX as usize / MAX_JOBS;
    (ok && blocks <= limit).then_some(Grid {
        gx: gx as i32,
        gy: gy as i32,
        blocks: blocks as i32,
        per_split: per_split as i32,
    })
}

/// One product for [`Gpu::products`]: its spec, and both operands as integers on the host
/// and on the device.
pub struct Product<'a> {
    pub spec: MatVec,
    pub w: (&'a IntWeights, &'a GpuWeights),
    pub x: (&'a IntVector, &'a GpuVector),
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::quant::FastRound;
    use cudarc::driver::{
        CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr,
        DriverError, LaunchConfig, PinnedHostSlice, PushKernelArg, ValidAsZeroBits, sys,
    };
    use rayon::prelude::*;
    use std::ops::Range;
    use std::sync::{Arc, Mutex, OnceLock};

    /// The first CUDA device, with the kernels loaded.
    pub struct Gpu {
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        /// `int_matvec` and `round_sums_f32`.
        matvec: CudaFunction,
        round: CudaFunction,
        name: String,
        /// Buffers not in use. A call takes one set (or makes one) and puts it back, holding no
        /// lock meanwhile: a rayon thread waiting inside a call may run another session's
        /// run, whose calls then take another set.
        spare: Mutex<Vec<Buffers>>,
    }

    /// Memory that [`Gpu::products`] calls reuse, grown as needed: the sums and their rounded
    /// values on the device, and the page-locked host memory they are copied into (a copy into
    /// pageable memory goes through a driver buffer at a fraction of the speed).
    #[derive(Default)]
    struct Buffers {
        sums: Option<CudaSlice<f64>>,
        rounded: Option<CudaSlice<f32>>,
        host64: Option<PinnedHostSlice<f64>>,
        host32: Option<PinnedHostSlice<f32>>,
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

    // A run executes on one of rayon's threads and a session may be dropped on another, so
    // each thread binds the context before it frees device memory (cudarc's free does not,
    // and a free without it fails, its error surfacing in a later call).
    impl Drop for GpuWeights {
        fn drop(&mut self) {
            bound(self.w.context());
        }
    }

    impl Drop for GpuVector {
        fn drop(&mut self) {
            bound(self.x.context());
        }
    }

    /// Make `ctx` current on this thread; a failure shows in the next call that checks.
    fn bound(ctx: &CudaContext) {
        if let Err(e) = ctx.bind_to_thread() {
            ctx.record_err::<()>(Err(e));
        }
    }

    /// The kernel's `Job`, field for field.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Job {
        w: sys::CUdeviceptr,
        sw: sys::CUdeviceptr,
        x: sys::CUdeviceptr,
        sx: sys::CUdeviceptr,
        y: sys::CUdeviceptr,
        cols: i32,
        n: i32,
        b: i32,
        out_len: i32,
        per_split: i32,
        gx: i32,
        gy: i32,
        first: i32,
    }

    /// The kernel's `Jobs`: the parameter of one `int_matvec` launch.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Jobs {
        job: [Job; MAX_JOBS],
        count: i32,
    }

    // SAFETY: plain integers in C layout, the same fields in the same order as the kernel's
    // `Jobs` (8-byte pointers, 4-byte ints).
    unsafe impl DeviceRepr for Jobs {}

    /// A product the GPU takes: its index in the call, blocks, place in the buffers, and the
    /// output format when the device rounds to it.
    struct Taken {
        k: usize,
        grid: Grid,
        at: Range<usize>,
        rounds_to: Option<(FloatFormat, FastRound)>,
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
    fn pinned<'a, T: DeviceRepr + ValidAsZeroBits>(
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

    /// Device memory of at least `len` elements in `slot`.
    fn on_device<'a, T: DeviceRepr>(
        stream: &Arc<CudaStream>,
        slot: &'a mut Option<CudaSlice<T>>,
        len: usize,
    ) -> Result<&'a mut CudaSlice<T>, ExecError> {
        if slot.as_ref().is_none_or(|s| s.len() < len) {
            *slot = None;
            // SAFETY: every element a call reads is written first in that call (zeroed, or by
            // the rounding kernel).
            *slot = Some(unsafe { stream.alloc::<T>(len.max(1)) }.map_err(cuda)?);
        }
        slot.as_mut()
            .ok_or_else(|| ExecError::Device("CUDA: no device buffer".into()))
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
            // SAFETY: every buffer of this context is used on its one stream, in order, so
            // cudarc's events between streams (two driver calls per buffer per use) are moot.
            unsafe { ctx.disable_event_tracking() };
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
                spare: Mutex::new(Vec::new()),
            })
        }

        /// The device's name.
        pub fn name(&self) -> &str {
            &self.name
        }

        pub fn weights(&self, w: &IntWeights) -> Result<GpuWeights, ExecError> {
            self.ctx.bind_to_thread().map_err(cuda)?;
            Ok(GpuWeights {
                w: self.stream.clone_htod(&w.tiles_row_major()).map_err(cuda)?,
                sw: self.stream.clone_htod(w.row_scales()).map_err(cuda)?,
            })
        }

        pub fn vector(&self, x: &IntVector) -> Result<GpuVector, ExecError> {
            self.ctx.bind_to_thread().map_err(cuda)?;
            Ok(GpuVector {
                x: self.stream.clone_htod(x.ints()).map_err(cuda)?,
                sx: self.stream.clone_htod(x.tile_scales()).map_err(cuda)?,
            })
        }

        /// `y = W x` of every product as [`intdot::matvec`] computes it (`[b, rows * n]`), in
        /// order; `None` for a product where the GPU cannot give the same bits (or the grid is
        /// too large) and the CPU kernel must run. All of them go in a few launches (16
        /// products each) and one rounding launch per run of products with one output
        /// format, then one copy back per run and one wait.
        pub fn products(&self, products: &[Product]) -> Result<Vec<Option<Vec<f64>>>, ExecError> {
            let mut taken = Vec::new();
            let mut total = 0;
            for (k, p) in products.iter().enumerate() {
                let Some(grid) = grid(p.w.0, p.x.0) else {
                    continue;
                };
                if !intdot::sums_exact_in_any_order(&p.spec, p.w.0, p.x.0) {
                    continue;
                }
                let (rows, _, n) = p.w.0.dims();
                let len = p.x.0.batch() * rows * n;
                // Rounded on the device where the output format allows: then the copy back is
                // f32, half the bytes, and the host has nothing left to do.
                let rounds_to = FastRound::new(&p.spec.output)
                    .filter(|_| f32_holds(&p.spec.output))
                    .map(|f| (p.spec.output, f));
                taken.push(Taken {
                    k,
                    grid,
                    at: total..total + len,
                    rounds_to,
                });
                total += len;
            }
            let mut out: Vec<Option<Vec<f64>>> = products.iter().map(|_| None).collect();
            if taken.is_empty() {
                return Ok(out);
            }
            // Every call may come from another thread (runs execute on rayon's).
            self.ctx.bind_to_thread().map_err(cuda)?;
            let spare = || self.spare.lock().unwrap_or_else(|e| e.into_inner());
            let mut buffers = spare().pop().unwrap_or_default();
            let values = self.compute(products, &taken, total, &mut buffers);
            spare().push(buffers);
            for (k, v) in values? {
                out[k] = Some(v);
            }
            Ok(out)
        }

        /// The products `taken` of `products`, `total` sums in all, with `buffers`: their
        /// values by index.
        fn compute(
            &self,
            products: &[Product],
            taken: &[Taken],
            total: usize,
            buffers: &mut Buffers,
        ) -> Result<Vec<(usize, Vec<f64>)>, ExecError> {
            let Buffers {
                sums,
                rounded,
                host64,
                host32,
            } = buffers;
            let sums = on_device(&self.stream, sums, total)?;
            let rounded = on_device(&self.stream, rounded, total)?;
            self.stream
                .memset_zeros(&mut sums.slice_mut(..total))
                .map_err(cuda)?;
            for group in taken.chunks(MAX_JOBS) {
                self.launch_products(products, group, sums)?;
            }
            // Runs of products with one output format (or none the device rounds to): one
            // rounding launch and one copy each.
            let runs: Vec<&[Taken]> = taken
                .chunk_by(|a, b| a.rounds_to.map(|r| r.0) == b.rounds_to.map(|r| r.0))
                .collect();
            // Host memory as far as each kind of copy reaches (the LSTM's products all come
            // back as f32).
            let reach = |rounded: bool| {
                let ends = taken.iter().filter(|t| t.rounds_to.is_some() == rounded);
                ends.map(|t| t.at.end).max().unwrap_or(0)
            };
            let h64 = pinned(&self.ctx, host64, reach(false))?;
            let h32 = pinned(&self.ctx, host32, reach(true))?;
            for run in &runs {
                let at = run[0].at.start..run[run.len() - 1].at.end;
                match run[0].rounds_to {
                    Some((_, f)) => {
                        self.round(&f, sums, rounded, at.clone())?;
                        // Into page-locked memory given as a plain slice: queued, not waited
                        // for.
                        self.stream
                            .memcpy_dtoh(&rounded.slice(at.clone()), &mut h32[at])
                            .map_err(cuda)?;
                    }
                    None => self
                        .stream
                        .memcpy_dtoh(&sums.slice(at.clone()), &mut h64[at])
                        .map_err(cuda)?,
                }
            }
            self.stream.synchronize().map_err(cuda)?;
            // Then the host's part, in parallel: f32 widened, or the sums rounded as
            // `intdot::matvec` rounds them.
            let (h64, h32) = (&*h64, &*h32);
            let values: Vec<(usize, Vec<f64>)> = taken
                .par_iter()
                .map(|t| {
                    let v = match t.rounds_to {
                        // Split further: a step of an LSTM brings four products.
                        Some(_) => h32[t.at.clone()]
                            .par_iter()
                            .with_min_len(super::super::quant::PAR_MIN)
                            .map(|&v| f64::from(v))
                            .collect(),
                        None => {
                            let mut v = h64[t.at.clone()].to_vec();
                            intdot::round_sums(&products[t.k].spec, &mut v);
                            v
                        }
                    };
                    (t.k, v)
                })
                .collect();
            Ok(values)
        }

        /// One `int_matvec` launch for up to [`MAX_JOBS`] products, summing into `sums` (zeroed)
        /// at their places.
        fn launch_products(
            &self,
            products: &[Product],
            group: &[Taken],
            sums: &mut CudaSlice<f64>,
        ) -> Result<(), ExecError> {
            let stream = &self.stream;
            let (y, _y) = sums.device_ptr_mut(stream);
            let mut jobs = Jobs {
                job: [Job::default(); MAX_JOBS],
                count: group.len() as i32,
            };
            // The pointers' guards live until the launch is queued.
            let mut guards = Vec::with_capacity(4 * group.len());
            let mut first = 0i32;
            for (job, t) in jobs.job.iter_mut().zip(group) {
                let p = &products[t.k];
                let (rows, cols, n) = p.w.0.dims();
                let [w, sw, x, sx] = [
                    p.w.1.w.device_ptr(stream),
                    p.w.1.sw.device_ptr(stream),
                    p.x.1.x.device_ptr(stream),
                    p.x.1.sx.device_ptr(stream),
                ]
                .map(|(ptr, guard)| {
                    guards.push(guard);
                    ptr
                });
                // `grid` checked that these fit i32, and that MAX_JOBS products' blocks do.
                *job = Job {
                    w,
                    sw,
                    x,
                    sx,
                    y: y + (t.at.start * std::mem::size_of::<f64>()) as u64,
                    cols: cols as i32,
                    n: n as i32,
                    b: p.x.0.batch() as i32,
                    out_len: (rows * n) as i32,
                    per_split: t.grid.per_split,
                    gx: t.grid.gx,
                    gy: t.grid.gy,
                    first,
                };
                first += t.grid.blocks;
            }
            let cfg = LaunchConfig {
                grid_dim: (first as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = stream.launch_builder(&self.matvec);
            launch.arg(&jobs);
            // SAFETY: `Jobs` matches the kernel's parameter; the grid is the sum of the jobs'
            // blocks, each job's blocks cover its rows * n rows in blocks of 16 (16 divides n),
            // its batch in blocks of 64 and its column tiles in runs of per_split; every index
            // the kernel forms is inside the job's buffers ([rows * cols][n][n],
            // [rows * cols][n], [cols][b][n], [cols][b], and its [b][rows * n] place in `sums`),
            // and `grid` checked that they fit `int`.
            unsafe { launch.launch(cfg) }.map_err(cuda)?;
            drop(guards);
            Ok(())
        }

        /// `round_sums_f32` over the elements `at` of `sums` into `rounded`.
        fn round(
            &self,
            f: &FastRound,
            sums: &CudaSlice<f64>,
            rounded: &mut CudaSlice<f32>,
            at: Range<usize>,
        ) -> Result<(), ExecError> {
            let len = at.len();
            let blocks = u32::try_from(len.div_ceil(256))
                .map_err(|_| ExecError::Device("CUDA: too many sums for one launch".into()))?;
            let len64 = len as i64;
            let (src, mut dst) = (sums.slice(at.clone()), rounded.slice_mut(at));
            let mut launch = self.stream.launch_builder(&self.round);
            launch
                .arg(&src)
                .arg(&mut dst)
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
            // SAFETY: the arguments match `round_sums_f32`'s parameters in order and type; the
            // kernel touches elements below `len`, both views' length.
            unsafe { launch.launch(cfg) }.map_err(cuda)?;
            Ok(())
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

        pub fn products(&self, _: &[Product]) -> Result<Vec<Option<Vec<f64>>>, ExecError> {
            match self.0 {}
        }
    }
}

// The GPU against the exact float reference (`gpu/tests.rs`), in a build with the feature.
#[cfg(all(test, feature = "cuda"))]
mod tests;

#[cfg(all(test, not(feature = "cuda")))]
mod tests_off {
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
