//! The products on a CUDA GPU (`--device cuda`, the `cuda` feature): integer tile products
//! with exact sums, on the GPU candle's CUDA backend runs the rest of the graph on
//! ([`super::device`] has the other kernels).
//!
//! **What runs where.** The weight stack's integers ([`IntWeights`]) are uploaded once per
//! session; the vector's integers are made on the GPU from its quantized values
//! ([`device::to_ints`](super::device)); a kernel computes every output's sum of scaled
//! partials `P * 2^(u_w + u_x)` in f64, and the sums are rounded to the output format on the
//! GPU (the host's [`intdot::round_sums`] where the format has no fast rounder).
//!
//! **Why the bits are the same.** The GPU takes a product only where its sums are exact in any
//! order ([`intdot::sums_exact_with`]): `exact` accumulation, and every running sum of an
//! output's scaled partials exact whatever the order of the additions (all terms are multiples
//! of one power of two and their sum stays below 2^53 of it). Each partial `P` is an exact
//! `i32` (the integers are bounded by [`intdot::qmax`]), `P * 2^(u_w + u_x)` is exact, so the
//! f64 sum the GPU forms is the exact sum, the same number the CPU kernel's sums reach. Every
//! other product (the `-seq` accumulation modes, wide exponent spreads) takes the CPU's paths
//! on a host copy of the vector. The kernels are compiled at run time by NVRTC.

// The kernel and its grid are only launched in a build with the feature.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use super::ExecError;
use super::intdot::IntWeights;

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
pub(crate) const SOURCE: &str = r#"
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
"#;

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
fn grid(w: &IntWeights, batch: usize) -> Option<Grid> {
    let (rows, cols, n) = w.dims();
    let fits_int = |v: usize| i32::try_from(v).is_ok();
    let ok = fits_int(rows * n) && fits_int(rows * cols * n) && fits_int(batch);
    let (gx, gy) = (rows * n / ROWS as usize, batch.div_ceil(ITEMS as usize));
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

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::device;
    use crate::intdot;
    use crate::matmul::MatVec;
    use crate::quant::FastRound;
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{
        CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DriverError,
        LaunchConfig, PushKernelArg, sys,
    };
    use candle_core::cuda_backend::{CudaDevice, CudaStorage};
    use candle_core::{Device, Storage, Tensor, op::BackpropOp};
    use std::sync::{Arc, OnceLock};

    /// The first CUDA device, as candle's backend opened it, and the products' kernel.
    pub struct Gpu {
        device: Device,
        cuda: CudaDevice,
        stream: Arc<CudaStream>,
        matvec: CudaFunction,
        name: String,
    }

    /// A weight stack's integers and row scales on the GPU.
    pub struct GpuWeights {
        w: CudaSlice<i16>,
        sw: CudaSlice<f64>,
    }

    /// A vector's integers `[cols][b][n]` and tile scales `[cols][b]` on the GPU, with the
    /// bits of its widest integer and its tiles' lowest and highest unit (for the checks).
    pub struct GpuVector {
        x: CudaSlice<i16>,
        sx: CudaSlice<f64>,
        b: usize,
        cols: usize,
        bits: u32,
        units: Option<(i32, i32)>,
    }

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

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Jobs {
        job: [Job; MAX_JOBS],
        count: i32,
    }

    unsafe impl DeviceRepr for Jobs {}

    fn cuda(e: DriverError) -> ExecError {
        ExecError::Device(format!("CUDA: {e}"))
    }

    fn candle(e: candle_core::Error) -> ExecError {
        ExecError::Device(format!("CUDA: {e}"))
    }

    impl Gpu {
        /// The first CUDA device, opened once per process.
        pub fn open() -> Result<Arc<Gpu>, ExecError> {
            type Failed = (String, Option<&'static str>);
            static SHARED: OnceLock<Result<Arc<Gpu>, Failed>> = OnceLock::new();
            let start = || {
                Gpu::start().map(Arc::new).map_err(|e| match e {
                    ExecError::NoGpu { message, help } => (message, Some(help)),
                    e => (e.to_string(), None),
                })
            };
            SHARED
                .get_or_init(start)
                .clone()
                .map_err(|(message, help)| match help {
                    Some(help) => ExecError::NoGpu { message, help },
                    None => ExecError::Device(message),
                })
        }

        fn start() -> Result<Gpu, ExecError> {
            let device = Device::new_cuda(0).map_err(|e| {
                let e = e.to_string();
                let e = e.lines().next().unwrap_or_default();
                ExecError::NoGpu {
                    message: format!("no usable CUDA device: {e}"),
                    help: "run with `--device cpu`",
                }
            })?;
            let Device::Cuda(cuda) = device.clone() else {
                return Err(ExecError::Device("candle opened no CUDA device".into()));
            };
            let stream = cuda.cuda_stream();
            let name = stream.context().name().map_err(self::cuda)?;
            let matvec =
                device::kernel(&cuda, "nnpc-products", SOURCE, "int_matvec").map_err(candle)?;
            Ok(Gpu {
                device,
                cuda,
                stream,
                matvec,
                name,
            })
        }

        pub fn name(&self) -> &str {
            &self.name
        }

        /// The candle device the graph's values live on.
        pub fn device(&self) -> &Device {
            &self.device
        }

        /// Makes the device's context current on the calling thread (CUDA's driver calls act
        /// on the thread's current context; a session may run on any thread).
        pub fn bind_to_thread(&self) -> Result<(), ExecError> {
            self.stream.context().bind_to_thread().map_err(cuda)
        }

        pub fn weights(&self, w: &IntWeights) -> Result<GpuWeights, ExecError> {
            Ok(GpuWeights {
                w: self.stream.clone_htod(&w.tiles_row_major()).map_err(cuda)?,
                sw: self.stream.clone_htod(w.row_scales()).map_err(cuda)?,
            })
        }

        /// A vector's integers made on the host, uploaded (the tests' way in).
        #[cfg(test)]
        pub fn vector(&self, x: &intdot::IntVector) -> Result<GpuVector, ExecError> {
            Ok(GpuVector {
                x: self.stream.clone_htod(x.ints()).map_err(cuda)?,
                sx: self.stream.clone_htod(x.tile_scales()).map_err(cuda)?,
                b: x.batch(),
                cols: x.tile_scales().len() / x.batch().max(1),
                bits: x.bits(),
                units: x.units(),
            })
        }

        /// The integers of the quantized vector `x` (`[b, cols * n]`, f64 on this GPU), or
        /// `None` where a run has none.
        pub fn vector_of(
            &self,
            x: &Tensor,
            cols: usize,
            n: usize,
        ) -> Result<Option<GpuVector>, ExecError> {
            let b = x.dims().first().copied().unwrap_or(1);
            let x = x.contiguous().map_err(candle)?;
            let (storage, layout) = x.storage_and_layout();
            let Storage::Cuda(s) = &*storage else {
                return Err(ExecError::Device("a vector that is not on the GPU".into()));
            };
            let bits = intdot::mantissa_limit(n).trailing_zeros() as i32;
            Ok(device::to_ints(s, layout, (b, cols, n), bits)
                .map_err(candle)?
                .map(|(x, sx, bits, units)| GpuVector {
                    x,
                    sx,
                    b,
                    cols,
                    bits,
                    units,
                }))
        }

        /// `W x` rounded to the spec's output format, `[b, rows * n]` on the GPU; `None`
        /// where its sums are not exact in any order (the caller takes the CPU's paths).
        pub fn product(
            &self,
            spec: &MatVec,
            w: (&IntWeights, &GpuWeights),
            x: &GpuVector,
        ) -> Result<Option<Tensor>, ExecError> {
            let (rows, _, n) = w.0.dims();
            let Some(grid) = grid(w.0, x.b) else {
                return Ok(None);
            };
            if !intdot::sums_exact_with(spec, w.0, x.cols, x.bits, x.units) {
                return Ok(None);
            }
            let len = x.b * rows * n;
            let mut sums = self.stream.alloc_zeros::<f64>(len.max(1)).map_err(cuda)?;
            self.launch(w, x, grid, &mut sums)?;
            let shape = (x.b, rows * n);
            let storage = CudaStorage::wrap_cuda_slice(sums, self.cuda.clone());
            let storage = match FastRound::new(&spec.output) {
                Some(f) => {
                    let layout = candle_core::Layout::contiguous(shape);
                    device::round(&f, &storage, &layout, true)
                        .map_err(candle)?
                        .0
                }
                None => {
                    let mut host = match storage.to_cpu_storage().map_err(candle)? {
                        candle_core::CpuStorage::F64(v) => v,
                        _ => return Err(ExecError::Device("CUDA: sums not f64".into())),
                    };
                    intdot::round_sums(spec, &mut host);
                    let sums = self.stream.clone_htod(&host).map_err(cuda)?;
                    CudaStorage::wrap_cuda_slice(sums, self.cuda.clone())
                }
            };
            let t = Tensor::from_storage(Storage::Cuda(storage), shape, BackpropOp::none(), false);
            Ok(Some(t))
        }

        /// One `int_matvec` launch of one product, summing into `sums` (zeroed).
        fn launch(
            &self,
            (wi, gw): (&IntWeights, &GpuWeights),
            x: &GpuVector,
            grid: Grid,
            sums: &mut CudaSlice<f64>,
        ) -> Result<(), ExecError> {
            let stream = &self.stream;
            let (rows, cols, n) = wi.dims();
            let (y, _y) = sums.device_ptr_mut(stream);
            let (w, _w) = gw.w.device_ptr(stream);
            let (sw, _sw) = gw.sw.device_ptr(stream);
            let (xp, _x) = x.x.device_ptr(stream);
            let (sx, _sx) = x.sx.device_ptr(stream);
            let mut jobs = Jobs {
                job: [Job::default(); MAX_JOBS],
                count: 1,
            };
            // `grid` checked that these fit i32.
            jobs.job[0] = Job {
                w,
                sw,
                x: xp,
                sx,
                y,
                cols: cols as i32,
                n: n as i32,
                b: x.b as i32,
                out_len: (rows * n) as i32,
                per_split: grid.per_split,
                gx: grid.gx,
                gy: grid.gy,
                first: 0,
            };
            let cfg = LaunchConfig {
                grid_dim: (grid.blocks as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = stream.launch_builder(&self.matvec);
            launch.arg(&jobs);
            // SAFETY: `Jobs` matches the kernel's parameter; the grid is the job's blocks,
            // covering its rows * n rows in blocks of 16 (16 divides n), its batch in blocks of
            // 64 and its column tiles in runs of per_split; every index the kernel forms is
            // inside the buffers ([rows * cols][n][n], [rows * cols][n], [cols][b][n], [cols][b],
            // [b][rows * n]), and `grid` checked that they fit `int`.
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
            Err(ExecError::NoGpu {
                message: "this nnpc was built without CUDA support".into(),
                help: "build it with `scripts/cuda-build.sh` (docs/swgraph.md) or run with \
                       `--device cpu`",
            })
        }

        pub fn name(&self) -> &str {
            match self.0 {}
        }

        pub fn device(&self) -> &candle_core::Device {
            match self.0 {}
        }

        pub fn bind_to_thread(&self) -> Result<(), ExecError> {
            match self.0 {}
        }

        pub fn weights(&self, _: &IntWeights) -> Result<GpuWeights, ExecError> {
            match self.0 {}
        }

        pub fn vector_of(
            &self,
            _: &candle_core::Tensor,
            _: usize,
            _: usize,
        ) -> Result<Option<GpuVector>, ExecError> {
            match self.0 {}
        }

        pub fn product(
            &self,
            _: &crate::matmul::MatVec,
            _: (&IntWeights, &GpuWeights),
            _: &GpuVector,
        ) -> Result<Option<candle_core::Tensor>, ExecError> {
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
        let Err(ExecError::NoGpu { message, help }) = Gpu::open() else {
            panic!("no GPU without the feature");
        };
        assert!(message.contains("without CUDA support"), "{message}");
        assert!(
            help.contains("`scripts/cuda-build.sh`") && help.contains("`--device cpu`"),
            "{help}"
        );
    }
}
