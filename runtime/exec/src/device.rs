//! The graph's rounding ops on a CUDA GPU: the `cuda_fwd` of the custom ops (`round`,
//! `quantize`, the MFU ops) and the integer vectors of the products, computed where the values
//! live (`--device cuda`, the `cuda` feature; docs/swgraph.md "The graph on a GPU").
//!
//! Each kernel is the CPU kernel's recipe written again in CUDA C, element for element: the
//! nearest-even rounder from the bits ([`FastRound`](crate::quant::FastRound)), BFP blocks
//! with the fast quantizer's scaling (`quant::bfp::BfpParams`), the MFU ops of a narrow format
//! (one f64 operation and one rounding: `mfu::binary`), relu, pass and 16-bit table lookups.
//! The compiler may not contract a multiply and an add into one FMA (`--fmad=false`), so every
//! operation rounds as the CPU's does. Where an op's format has no such kernel (directed or
//! stochastic rounding, wide formats, MX, softmax), its `cuda_fwd` runs the CPU kernel on a
//! host copy ([`via_host`]): the same bits, at the cost of two copies.

#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use nnp_lowering::swgraph::{BinOp, UnOp};
use nnp_numerics::Activation;
use std::fmt::Write;
use std::sync::OnceLock;

/// What an MFU op computes on the GPU, per element.
#[derive(Clone, Copy, Debug)]
pub(crate) enum MfuKernel {
    /// `fmt(fmt(a) op fmt(b))` where `mfu::binary_on_gpu`; `rounded`: the operand is rounded already.
    Binary {
        op: BinOp,
        rounded: [bool; 2],
    },
    Relu,
    Pass,
    /// A 16-bit table: `(exp_bits, mant_bits, bias)` of its format, the index a NaN takes.
    Table {
        rounded: bool,
        mant_bits: u32,
        bias: i32,
        nan_index: u32,
    },
}

/// Binary op `op` in CUDA C, as `binary_op` returns it: of operands `x` and `z`, each rounded
/// to the format by `operand` unless it is already (`ra`, `rb`).
const fn binary_source(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "fr_round(f, __dadd_rn(operand(f, x, ra), operand(f, z, rb)))",
        BinOp::Sub => "fr_round(f, __dsub_rn(operand(f, x, ra), operand(f, z, rb)))",
        BinOp::Mul => "fr_round(f, __dmul_rn(operand(f, x, ra), operand(f, z, rb)))",
        BinOp::Max => "vmax(fr_round(f, x), fr_round(f, z))",
    }
}

/// The unary ops of `mfu_unary` by their kernel codes ([`UnOp::code`]): every table
/// activation is one kernel, which reads the op's table.
const UNARY: [(&str, UnOp); 3] = [
    ("UN_RELU", UnOp::Relu),
    ("UN_PASS", UnOp::Pass),
    ("UN_TABLE", UnOp::Table(Activation::Exp)),
];

/// The kernels' source: [`HEAD`], each op's code as a `#define` (`OP_ADD`, ...,
/// [`BinOp::code`]; `UN_RELU`, ..., [`UnOp::code`]) and `binary_op` made from the ops
/// themselves ([`binary_source`]), then [`KERNELS`]. Made once per process.
pub(crate) fn source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let mut s = String::from(HEAD);
        for op in BinOp::ALL {
            let _ = writeln!(s, "#define OP_{} {}", op.name().to_uppercase(), op.code());
        }
        for (name, op) in UNARY {
            let _ = writeln!(s, "#define {name} {}", op.code());
        }
        s.push_str(
            "\n__device__ __forceinline__ double binary_op(int op, double x, double z, int ra, \
             int rb, const Fr& f) {\n    switch (op) {\n",
        );
        for op in BinOp::ALL {
            let (name, body) = (op.name().to_uppercase(), binary_source(op));
            let _ = writeln!(s, "    case OP_{name}: return {body};");
        }
        s.push_str("    }\n    return __longlong_as_double(NAN_BITS);\n}\n");
        s.push_str(KERNELS);
        s
    })
}

/// The kernels' helpers. `fr_round` is `FastRound::round`; `bits16` is the encoding of a
/// value of a 16-bit format (exact: the value is representable).
const HEAD: &str = r#"
struct Fr {
    unsigned long long half, mask, emin_bits;
    double magic, max, over;
    unsigned int shift;
};
struct Bfp { double max, min; int block, lo, hi, mant, rounding; };

#define SIGN (1ull << 63)
#define INF_BITS 0x7ff0000000000000ull
#define NAN_BITS 0x7ff8000000000000ull

__device__ __forceinline__ double fr_round(const Fr& f, double x) {
    const unsigned long long bits = __double_as_longlong(x);
    const unsigned long long sign = bits & SIGN, mag = bits & ~SIGN;
    const unsigned long long odd = (mag >> f.shift) & 1ull;
    const double normal = __longlong_as_double((mag + f.half + odd) & ~f.mask);
    const double sub = __dsub_rn(__dadd_rn(__longlong_as_double(mag), f.magic), f.magic);
    double r = mag >= f.emin_bits ? normal : sub;
    r = r > f.max ? f.over : r;
    r = __longlong_as_double(__double_as_longlong(r) | sign);
    return isnan(x) ? x : r;
}

__device__ __forceinline__ int floor_log2(double a) {
    const unsigned long long bits = __double_as_longlong(a) & ~SIGN;
    const int field = (int)(bits >> 52);
    return field == 0 ? -1074 + 63 - __clzll((long long)bits) : field - 1023;
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}

__device__ __forceinline__ double vmax(double x, double y) {
    if (isnan(x) || isnan(y)) return __longlong_as_double(NAN_BITS);
    if (x > y) return x;
    if (y > x) return y;
    return signbit(x) ? y : x;
}

__device__ __forceinline__ unsigned int bits16(double v, unsigned int m, int bias) {
    const unsigned long long bits = __double_as_longlong(v);
    const unsigned int sign = (unsigned int)(bits >> 63) << 15;
    const unsigned long long mag = bits & ~SIGN;
    if (mag == 0) return sign;
    if (mag == INF_BITS) return sign | (((1u << (15 - m)) - 1u) << m);
    const int e = floor_log2(__longlong_as_double(mag));
    if (e >= 1 - bias)
        return sign | ((unsigned int)(e + bias) << m)
            | (unsigned int)((mag >> (52 - m)) & ((1ull << m) - 1ull));
    return sign | (unsigned int)(__longlong_as_double(mag) * ldexp(1.0, bias - 1 + (int)m));
}

// `x` rounded to the format unless it is already (`rounded`).
__device__ __forceinline__ double operand(const Fr& f, double x, int rounded) {
    return rounded ? x : fr_round(f, x);
}
"#;

/// The kernels. `mfu_binary` is `mfu::binary` of a narrow format; `bfp_quantize` is
/// `FastBfp::runs` with one warp per block; `to_ints` is `intdot::to_ints` (the integers of a
/// run at their coarsest unit) with one warp per (tile, item), gathering the vector's widest
/// integer and the span of its units for the host's exactness check.
const KERNELS: &str = r#"

#define GRID_STRIDE(e, total) \
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < (total); \
         e += (long long)gridDim.x * blockDim.x)

extern "C" __global__ void round_f64(const double* __restrict__ x, double* __restrict__ y,
                                     long long total, const Fr f, int sums) {
    GRID_STRIDE(e, total) {
        const double v = x[e];
        const double r = fr_round(f, v);
        y[e] = (sums && v == 0.0) ? 0.0 : r;
    }
}

extern "C" __global__ void mfu_binary(const double* __restrict__ a, const double* __restrict__ b,
                                      double* __restrict__ y, long long total, long long len,
                                      int a_all, int b_all, int op, int ra, int rb, const Fr f) {
    GRID_STRIDE(e, total) {
        y[e] = binary_op(op, a[a_all ? e : e % len], b[b_all ? e : e % len], ra, rb, f);
    }
}

extern "C" __global__ void mfu_unary(const double* __restrict__ x, double* __restrict__ y,
                                     long long total, long long len, int x_all, int kind,
                                     int rounded, const Fr f, const double* __restrict__ table,
                                     unsigned int m, int bias, unsigned int nan_index) {
    GRID_STRIDE(e, total) {
        double v = x[x_all ? e : e % len];
        if (kind == UN_RELU) {
            v = fr_round(f, v);
            y[e] = (v > 0.0 || isnan(v)) ? v : 0.0;
        } else if (kind == UN_PASS) {
            y[e] = fr_round(f, v);
        } else if (kind == UN_TABLE) {
            if (!rounded) v = fr_round(f, v);
            y[e] = table[isnan(v) ? nan_index : bits16(v, m, bias)];
        } else {
            y[e] = __longlong_as_double(NAN_BITS);
        }
    }
}

extern "C" __global__ void bfp_quantize(const double* __restrict__ x, double* __restrict__ y,
                                        long long runs, int len, const Bfp q) {
    const int per_run = (len + q.block - 1) / q.block;
    const int lane = threadIdx.x % 32;
    const long long warps = (long long)gridDim.x * blockDim.x / 32;
    for (long long k = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
         k < runs * per_run; k += warps) {
        const long long r = k / per_run;
        const int j = (int)(k % per_run);
        const long long start = r * len + (long long)j * q.block;
        const int count = min(q.block, len - j * q.block);
        unsigned long long top = 0;
        for (int l = lane; l < count; l += 32) {
            const unsigned long long m = __double_as_longlong(x[start + l]) & ~SIGN;
            top = m > top ? m : top;
        }
        top = warp_max(top);
        if (top >= INF_BITS) {
            for (int l = lane; l < count; l += 32) y[start + l] = __longlong_as_double(NAN_BITS);
            continue;
        }
        const double amax = __longlong_as_double(top);
        const int e = amax == 0.0 ? q.lo : min(max(floor_log2(amax), q.lo), q.hi);
        const int lsb = e - (q.mant - 2);
        const double down = ldexp(1.0, -lsb), up = ldexp(1.0, lsb), bound = q.max + 1.0;
        for (int l = lane; l < count; l += 32) {
            double t = __dmul_rn(x[start + l], down);
            t = t < -bound ? -bound : (t > bound ? bound : t);
            double m = q.rounding == 0 ? rint(t) : q.rounding == 1 ? round(t) : trunc(t);
            m = m < q.min ? q.min : (m > q.max ? q.max : m);
            y[start + l] = __dadd_rn(__dmul_rn(m, up), 0.0);
        }
    }
}

// x: [b][cols * n]; q: [cols][b][n]; sx: [cols][b] (2^unit, 0 for an all-zero run);
// stats: [not integers, widest integer's bits, lowest unit, highest unit].
extern "C" __global__ void to_ints(const double* __restrict__ x, short* __restrict__ q,
                                   double* __restrict__ sx, int* __restrict__ stats,
                                   int b, int cols, int n, int bits) {
    const int lane = threadIdx.x % 32;
    const long long warps = (long long)gridDim.x * blockDim.x / 32;
    for (long long k = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
         k < (long long)cols * b; k += warps) {
        const int j = (int)(k / b), bi = (int)(k % b);
        const double* v = x + (size_t)bi * cols * n + (size_t)j * n;
        short* qt = q + ((size_t)j * b + bi) * n;
        unsigned long long top = 0;
        for (int l = lane; l < n; l += 32) {
            const unsigned long long m = __double_as_longlong(v[l]) & ~SIGN;
            top = m > top ? m : top;
        }
        top = warp_max(top);
        if (top == 0) {
            for (int l = lane; l < n; l += 32) qt[l] = 0;
            if (lane == 0) sx[(size_t)j * b + bi] = 0.0;
            continue;
        }
        const int u = top >= INF_BITS ? 0 : floor_log2(__longlong_as_double(top)) + 1 - bits;
        if (top >= INF_BITS || u < -1022 || u > 1000) {
            if (lane == 0) atomicExch(&stats[0], 1);
            continue;
        }
        const double down = ldexp(1.0, -u);
        int whole = 1, all = 0;
        for (int l = lane; l < n; l += 32) {
            const double t = __dmul_rn(v[l], down);
            const double r = rint(t);
            whole &= r == t;
            all |= (int)r;
        }
        whole = __all_sync(0xffffffffu, whole);
        for (int o = 16; o > 0; o >>= 1) all |= __shfl_xor_sync(0xffffffffu, all, o);
        if (!whole) {
            if (lane == 0) atomicExch(&stats[0], 1);
            continue;
        }
        const int tz = __ffs(all) - 1;
        for (int l = lane; l < n; l += 32) qt[l] = (short)((int)rint(__dmul_rn(v[l], down)) >> tz);
        if (lane == 0) {
            sx[(size_t)j * b + bi] = ldexp(1.0, u + tz);
            atomicMax(&stats[1], bits - tz);
            atomicMin(&stats[2], u + tz);
            atomicMax(&stats[3], u + tz);
        }
    }
}
"#;

#[cfg(feature = "cuda")]
pub(crate) use imp::*;

#[cfg(feature = "cuda")]
mod imp {
    use super::{MfuKernel, source};
    use crate::quant::BfpParams;
    use crate::quant::FastRound;
    use candle_core::backend::{BackendDevice, BackendStorage};
    use candle_core::cuda_backend::cudarc::driver::{
        CudaFunction, CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg,
    };
    use candle_core::cuda_backend::cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
    use candle_core::cuda_backend::{CudaDevice, CudaStorage, WrapErr};
    use candle_core::{CpuStorage, Layout, Shape};
    use nnp_lowering::swgraph::UnOp;
    use nnp_numerics::Activation;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    /// [`FastRound`] as the kernels take it (`struct Fr`).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Fr {
        half: u64,
        mask: u64,
        emin_bits: u64,
        magic: f64,
        max: f64,
        over: f64,
        shift: u32,
    }

    unsafe impl DeviceRepr for Fr {}
    unsafe impl DeviceRepr for BfpParams {}

    impl From<&FastRound> for Fr {
        fn from(f: &FastRound) -> Fr {
            Fr {
                half: f.half,
                mask: f.mask,
                emin_bits: f.emin_bits,
                magic: f.magic,
                max: f.max,
                over: f.over,
                shift: f.shift,
            }
        }
    }

    /// The PTX of a kernel source, compiled once per process by NVRTC with `--fmad=false`.
    fn ptx(source: &'static str) -> candle_core::Result<&'static str> {
        type Compiled = Mutex<HashMap<usize, Result<&'static str, String>>>;
        static PTX: OnceLock<Compiled> = OnceLock::new();
        let mut cache = PTX
            .get_or_init(Compiled::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let compiled = cache.entry(source.as_ptr() as usize).or_insert_with(|| {
            let opts = CompileOptions {
                fmad: Some(false),
                ..Default::default()
            };
            compile_ptx_with_opts(source, opts)
                .map(|p| &*Box::leak(p.to_src().into_boxed_str()))
                .map_err(|e| format!("NVRTC could not compile nnpc's kernels: {e}"))
        });
        compiled
            .as_ref()
            .copied()
            .map_err(|e| candle_core::Error::Msg(e.clone()))
    }

    /// Kernel `name` of `source` (module `module` of the device: one per source).
    pub(crate) fn kernel(
        dev: &CudaDevice,
        module: &str,
        source: &'static str,
        name: &str,
    ) -> candle_core::Result<CudaFunction> {
        Ok(dev
            .get_or_load_custom_func(name, module, ptx(source)?)?
            .into_cuda_function())
    }

    /// Kernel `name` of [`source`].
    fn function(dev: &CudaDevice, name: &str) -> candle_core::Result<CudaFunction> {
        kernel(dev, "nnpc-ops", source(), name)
    }

    /// A grid-stride launch of `threads` threads in blocks of 256 (at most 64 blocks per
    /// multiprocessor of an H100; the kernels' loops stride over the rest).
    fn threads(threads: usize) -> LaunchConfig {
        let blocks = threads.div_ceil(256).clamp(1, 132 * 64) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// A thread per element of `total`.
    fn elements(total: usize) -> LaunchConfig {
        threads(total)
    }

    /// A warp per task of `tasks`.
    fn warps(tasks: usize) -> LaunchConfig {
        threads(tasks.saturating_mul(32))
    }

    /// The f64 elements of a contiguous operand.
    fn f64_view<'a>(
        s: &'a CudaStorage,
        l: &Layout,
        what: &str,
    ) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, f64>> {
        let Some((a, e)) = l.contiguous_offsets() else {
            candle_core::bail!("{what}: expected a contiguous operand")
        };
        Ok(s.as_cuda_slice::<f64>()?.slice(a..e))
    }

    /// An op's CPU kernel on a host copy of its operand, the result copied back: the same
    /// bits as on the CPU, for formats that have no GPU kernel.
    pub(crate) fn via_host(
        s: &CudaStorage,
        l: &Layout,
        cpu: impl FnOnce(&CpuStorage, &Layout) -> candle_core::Result<(CpuStorage, Shape)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (out, shape) = cpu(&s.to_cpu_storage()?, l)?;
        Ok((s.device().storage_from_cpu_storage(&out)?, shape))
    }

    /// [`via_host`] for an op of two operands.
    pub(crate) fn via_host2(
        (s1, l1): (&CudaStorage, &Layout),
        (s2, l2): (&CudaStorage, &Layout),
        cpu: impl FnOnce(
            (&CpuStorage, &Layout),
            (&CpuStorage, &Layout),
        ) -> candle_core::Result<(CpuStorage, Shape)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (out, shape) = cpu((&s1.to_cpu_storage()?, l1), (&s2.to_cpu_storage()?, l2))?;
        Ok((s1.device().storage_from_cpu_storage(&out)?, shape))
    }

    /// `round` (`sums`: an exact zero becomes +0, as [`FastRound::round_sums`]) on the GPU.
    pub(crate) fn round(
        f: &FastRound,
        s: &CudaStorage,
        l: &Layout,
        sums: bool,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = s.device();
        let x = f64_view(s, l, "round")?;
        let total = x.len();
        let mut y = unsafe { dev.alloc::<f64>(total.max(1)) }?;
        let (fr, total64, sums) = (Fr::from(f), total as i64, i32::from(sums));
        let func = function(dev, "round_f64")?;
        let stream = dev.cuda_stream();
        let mut b = stream.launch_builder(&func);
        b.arg(&x).arg(&mut y).arg(&total64).arg(&fr).arg(&sums);
        // SAFETY: the arguments are `round_f64`'s in order and type; it touches `total`
        // elements of each buffer.
        unsafe { b.launch(elements(total)) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            l.shape().clone(),
        ))
    }

    /// BFP quantization of runs of `len` lanes on the GPU (`quant::quantize_runs`).
    pub(crate) fn bfp_quantize(
        q: &BfpParams,
        s: &CudaStorage,
        l: &Layout,
        len: usize,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = s.device();
        let x = f64_view(s, l, "quantize")?;
        let total = x.len();
        let mut y = unsafe { dev.alloc::<f64>(total.max(1)) }?;
        let (runs, len32) = ((total / len) as i64, len as i32);
        let func = function(dev, "bfp_quantize")?;
        let stream = dev.cuda_stream();
        let mut b = stream.launch_builder(&func);
        b.arg(&x).arg(&mut y).arg(&runs).arg(&len32).arg(q);
        let tasks = total / len * len.div_ceil(q.block.max(1) as usize);
        // SAFETY: the arguments are `bfp_quantize`'s; `total` is `runs * len` (the caller
        // checked), and each warp touches its block's elements only.
        unsafe { b.launch(warps(tasks)) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            l.shape().clone(),
        ))
    }

    /// One MFU op over `[batch, len]` values, its operands `[batch or 1, len]` (a batch-1
    /// operand is broadcast): the result and its shape.
    pub(crate) fn mfu(
        k: &MfuKernel,
        f: &FastRound,
        table: Option<&CudaSlice<f64>>,
        operands: &[(&CudaStorage, &Layout)],
        len: usize,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let Some(&(first, _)) = operands.first() else {
            candle_core::bail!("mfu: no operand")
        };
        let dev = first.device();
        let mut views = Vec::with_capacity(operands.len());
        for (s, l) in operands {
            views.push(f64_view(s, l, "mfu")?);
        }
        let total = views.iter().map(|v| v.len()).max().unwrap_or(0);
        let len = len.max(1);
        if views.iter().any(|v| v.len() != len && v.len() != total) || total % len != 0 {
            candle_core::bail!("mfu: operands of different batches");
        }
        let all = |k: usize| i32::from(views[k.min(views.len() - 1)].len() == total);
        let mut y = unsafe { dev.alloc::<f64>(total.max(1)) }?;
        let (fr, total64, len64) = (Fr::from(f), total as i64, len as i64);
        let a = &views[0];
        let b = &views[views.len() - 1];
        // The unary kernel's (kind, rounded, mantissa bits, bias, NaN's index, table).
        let mut unary_args = None;
        match *k {
            MfuKernel::Binary { op, rounded } => {
                let func = function(dev, "mfu_binary")?;
                let stream = dev.cuda_stream();
                let mut l = stream.launch_builder(&func);
                let (a_all, b_all) = (all(0), all(1));
                let (ra, rb) = (i32::from(rounded[0]), i32::from(rounded[1]));
                let op = op.code() as i32;
                l.arg(a).arg(b).arg(&mut y).arg(&total64).arg(&len64);
                l.arg(&a_all)
                    .arg(&b_all)
                    .arg(&op)
                    .arg(&ra)
                    .arg(&rb)
                    .arg(&fr);
                // SAFETY: `mfu_binary`'s arguments; each operand holds `total` elements, or
                // `len` read at `e % len`.
                unsafe { l.launch(elements(total)) }.w()?;
            }
            // A table-less op reads no table: any f64 buffer stands in for the pointer.
            MfuKernel::Relu => unary_args = Some((UnOp::Relu, 0, 0, 0, 0, a.slice(..))),
            MfuKernel::Pass => unary_args = Some((UnOp::Pass, 0, 0, 0, 0, a.slice(..))),
            MfuKernel::Table {
                rounded,
                mant_bits,
                bias,
                nan_index,
            } => {
                let Some(t) = table else {
                    candle_core::bail!("mfu: a table op without its table")
                };
                // Every table activation is the one kernel of the table it reads.
                let op = UnOp::Table(Activation::Exp);
                let rounded = i32::from(rounded);
                unary_args = Some((op, rounded, mant_bits, bias, nan_index, t.slice(..)));
            }
        }
        if let Some((op, rounded, m, bias, nan, t)) = unary_args {
            let kind = op.code() as i32;
            let func = function(dev, "mfu_unary")?;
            let stream = dev.cuda_stream();
            let mut l = stream.launch_builder(&func);
            let x_all = all(0);
            l.arg(a)
                .arg(&mut y)
                .arg(&total64)
                .arg(&len64)
                .arg(&x_all)
                .arg(&kind);
            l.arg(&rounded)
                .arg(&fr)
                .arg(&t)
                .arg(&m)
                .arg(&bias)
                .arg(&nan);
            // SAFETY: `mfu_unary`'s arguments; a table holds 2^16 entries and every index
            // `bits16` forms is below it.
            unsafe { l.launch(elements(total)) }.w()?;
        }
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            Shape::from((total / len, len)),
        ))
    }

    /// The integers of a vector `[b, cols * n]` on the GPU (`intdot::IntVector`'s, each run
    /// at its coarsest unit): `(q [cols][b][n], 2^unit [cols][b], widest integer's bits, lowest
    /// and highest unit)`, or `None` where a run has no integer form (non-finite, or finer than
    /// `bits` bits).
    #[allow(clippy::type_complexity)]
    pub(crate) fn to_ints(
        s: &CudaStorage,
        l: &Layout,
        (b, cols, n): (usize, usize, usize),
        bits: i32,
    ) -> candle_core::Result<Option<(CudaSlice<i16>, CudaSlice<f64>, u32, Option<(i32, i32)>)>>
    {
        let dev = s.device();
        let x = f64_view(s, l, "to_ints")?;
        if x.len() != b * cols * n {
            candle_core::bail!("to_ints: expected [{b}, {}] values", cols * n)
        }
        let mut q = unsafe { dev.alloc::<i16>((b * cols * n).max(1)) }?;
        let mut sx = unsafe { dev.alloc::<f64>((b * cols).max(1)) }?;
        let mut stats = dev.clone_htod(&[0i32, 0, i32::MAX, i32::MIN])?;
        let (b32, cols32, n32) = (b as i32, cols as i32, n as i32);
        let func = function(dev, "to_ints")?;
        let stream = dev.cuda_stream();
        let mut launch = stream.launch_builder(&func);
        launch.arg(&x).arg(&mut q).arg(&mut sx).arg(&mut stats);
        launch.arg(&b32).arg(&cols32).arg(&n32).arg(&bits);
        // SAFETY: `to_ints`'s arguments; warp k reads run (k / b, k % b) of `x` and writes its
        // place in `q` and `sx`, all inside the buffers sized above.
        unsafe { launch.launch(warps(b * cols)) }.w()?;
        let st = dev.clone_dtoh(&stats)?;
        if st[0] != 0 {
            return Ok(None);
        }
        let units = (st[2] <= st[3]).then_some((st[2], st[3]));
        Ok(Some((q, sx, st[1].max(0) as u32, units)))
    }
}

// Each GPU kernel against its CPU kernel, bit for bit (`device/tests.rs`), in a build with the
// feature, on a machine with a GPU.
#[cfg(all(test, feature = "cuda"))]
mod tests;
