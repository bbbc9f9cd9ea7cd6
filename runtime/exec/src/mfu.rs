//! MFU kernels over slices: element-wise ops with one rounding, table activations, softmax
//! (docs/numerics.md, semantics.md "Numerics in the pipeline").

use super::quant::{FastRound, PAR_MIN, Rounder, avx2_copy, par_pieces, vectorized};
use nnp_lowering::swgraph::BinOp;
use nnp_numerics::sums::{Expansion, two_prod, two_sum};
use nnp_numerics::{Activation, FloatFormat, Rounding, activation, elementwise, floor_log2};
use rayon::prelude::*;
use std::sync::Arc;

/// Sum, difference and product of two values of a format with at most 25 significand bits are
/// correctly rounded to nearest by one f64 operation and one rounding (53 >= 2p + 2: the f64
/// result never lands on or crosses a midpoint of the format that the exact one does not);
/// wider formats go through the error-free transformations.
pub(crate) fn narrow(fmt: &FloatFormat) -> bool {
    fmt.mant_bits < 25
}

/// Whether `mfu_binary` computes `op` in `format`: max in any (it selects one of its rounded
/// operands), the others where one f64 operation and one rounding are correct
/// ([`narrow`]).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn binary_on_gpu(op: BinOp, format: &FloatFormat) -> bool {
    match op {
        BinOp::Max => true,
        BinOp::Add | BinOp::Sub | BinOp::Mul => narrow(format),
    }
}

/// [`narrow`], and the format rounds to nearest. A directed or stochastic rounding needs the
/// exact result: `1 - 2^-100` is `1.0` in f64, which truncates to 1 where the exact value
/// truncates to the value below 1 (a wide format, or a wide storage format, meets such sums).
fn narrow_nearest(fmt: &FloatFormat) -> bool {
    narrow(fmt) && matches!(fmt.rounding, Rounding::NearestEven | Rounding::NearestAway)
}

/// `fmt(op(fmt(a), fmt(b)))` element-wise; `a` and `b` have equal lengths. `rounded[i]`: the
/// operand is known to be rounded to `fmt` already (`exec::rounded`), so its rounding (a
/// no-op on it) is skipped.
pub fn binary(
    op: BinOp,
    fmt: &FloatFormat,
    a: &[f64],
    b: &[f64],
    out: &mut [f64],
    rounded: [bool; 2],
) {
    let fast = FastRound::new(fmt).filter(|_| narrow(fmt)).and_then(|r| {
        Some(Zip {
            r,
            op: Arith::of(op)?,
            rounded,
        })
    });
    let run = |(a, b, o): (&[f64], &[f64], &mut [f64])| match &fast {
        // The common case, one tight loop per op and operand kind: a narrow format with the
        // fast rounder.
        Some(z) => z.run(a, b, o),
        None => vectorized(|| {
            let r = Rounder::new(fmt);
            for ((x, y), z) in a.iter().zip(b).zip(o.iter_mut()) {
                *z = binary1(op, fmt, &r, *x, *y);
            }
        }),
    };
    if a.len() >= PAR_MIN {
        a.par_chunks(4096)
            .zip(b.par_chunks(4096))
            .zip(out.par_chunks_mut(4096))
            .for_each(|((a, b), o)| run((a, b, o)));
    } else {
        run((a, b, out));
    }
}

/// The ops that are one f64 operation and one rounding in a narrow format ([`narrow`]).
#[derive(Clone, Copy)]
enum Arith {
    Add,
    Sub,
    Mul,
}

impl Arith {
    fn of(op: BinOp) -> Option<Arith> {
        match op {
            BinOp::Add => Some(Arith::Add),
            BinOp::Sub => Some(Arith::Sub),
            BinOp::Mul => Some(Arith::Mul),
            BinOp::Max => None,
        }
    }
}

/// Add, subtract or multiply of a narrow format with the fast rounder: `r(f(r(x), r(y)))`, one
/// f64 operation of two narrow-format values and one rounding.
struct Zip {
    r: FastRound,
    op: Arith,
    rounded: [bool; 2],
}

impl Zip {
    avx2_copy! {
        fn run / run_avx2 / run_avx512 / run_body (&self, a: &[f64], b: &[f64], o: &mut [f64])
    }

    #[inline(always)]
    fn run_body(&self, a: &[f64], b: &[f64], o: &mut [f64]) {
        match self.op {
            Arith::Add => self.each(a, b, o, |x, y| x + y),
            Arith::Sub => self.each(a, b, o, |x, y| x - y),
            Arith::Mul => self.each(a, b, o, |x, y| x * y),
        }
    }

    #[inline(always)]
    fn each(&self, a: &[f64], b: &[f64], o: &mut [f64], f: impl Fn(f64, f64) -> f64) {
        match self.rounded {
            [false, false] => self.zip::<false, false>(a, b, o, f),
            [false, true] => self.zip::<false, true>(a, b, o, f),
            [true, false] => self.zip::<true, false>(a, b, o, f),
            [true, true] => self.zip::<true, true>(a, b, o, f),
        }
    }

    #[inline(always)]
    fn zip<const RA: bool, const RB: bool>(
        &self,
        a: &[f64],
        b: &[f64],
        o: &mut [f64],
        f: impl Fn(f64, f64) -> f64,
    ) {
        let r = &self.r;
        for ((x, y), z) in a.iter().zip(b).zip(o.iter_mut()) {
            let x = if RA { *x } else { r.round(*x) };
            let y = if RB { *y } else { r.round(*y) };
            *z = r.round(f(x, y));
        }
    }
}

/// One element of [`binary`], any format.
fn binary1(op: BinOp, fmt: &FloatFormat, r: &Rounder, x: f64, y: f64) -> f64 {
    let (x, y) = (r.round(x), r.round(y));
    let op = match op {
        BinOp::Max => return max(x, y),
        BinOp::Add => Arith::Add,
        BinOp::Sub => Arith::Sub,
        BinOp::Mul => Arith::Mul,
    };
    match narrow_nearest(fmt) {
        true => r.round(match op {
            Arith::Add => x + y,
            Arith::Sub => x - y,
            Arith::Mul => x * y,
        }),
        false => {
            let (hi, lo) = match op {
                Arith::Add => two_sum(x, y),
                Arith::Sub => two_sum(x, -y),
                Arith::Mul => two_prod(x, y),
            };
            if !hi.is_finite() || lo == 0.0 {
                return r.round(hi);
            }
            let mut s = Expansion::new();
            s.add(hi);
            s.add(lo);
            s.round_to(fmt)
        }
    }
}

pub use nnp_numerics::elementwise::max;

/// An activation function as a lookup: 65,536-entry table for 16-bit formats, else the f64
/// function rounded once.
#[derive(Clone)]
pub struct ActTable {
    fmt: FloatFormat,
    kind: Activation,
    /// Output value for every input bit pattern (16-bit formats).
    values: Option<Values>,
    /// The output bit patterns themselves, for an fp16 table (half the bytes of the f32
    /// values: [`super::f16c`]'s lookups).
    fp16: Option<Arc<[u16; 1 << 16]>>,
    /// The outputs on the GPU, uploaded at the first use there.
    #[cfg(feature = "cuda")]
    on_gpu: Arc<std::sync::OnceLock<candle_core::cuda_backend::cudarc::driver::CudaSlice<f64>>>,
}

/// A table's outputs: as f32 where every value of the format is one (fp16, bf16: the table is
/// then 256 KiB and stays in L2), else as f64.
#[derive(Clone)]
enum Values {
    F32(Arc<Vec<f32>>),
    F64(Arc<Vec<f64>>),
}

/// A table file that cannot be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum TableError {
    #[error("activation table `{path}` {message}")]
    File { path: String, message: String },
}

impl ActTable {
    /// The built-in table (correctly rounded function) or a target's table file. Tables are
    /// for 16-bit formats; other formats compute the function (a file is then unused).
    pub fn load(
        kind: Activation,
        fmt: &FloatFormat,
        file: Option<&str>,
    ) -> Result<ActTable, TableError> {
        let file = file.filter(|_| fmt.bits() == 16);
        let bits: Option<Vec<u16>> = match file {
            Some(path) => Some(
                nnp_host::io::read_table(std::path::Path::new(path)).map_err(|message| {
                    TableError::File {
                        path: path.to_string(),
                        message,
                    }
                })?,
            ),
            None => activation::table_ref(kind, fmt).map(<[u16]>::to_vec),
        };
        let narrow = fmt.exp_bits <= 8 && fmt.mant_bits <= 23;
        let fp16 = bits
            .as_ref()
            .filter(|_| *fmt == FloatFormat::FP16)
            .and_then(|t| Box::<[u16; 1 << 16]>::try_from(t.clone().into_boxed_slice()).ok())
            .map(Arc::from);
        let values = bits.map(|t| {
            let v = t.iter().map(|&b| fmt.decode(u64::from(b)));
            if narrow {
                // Exact: a format of at most f32's exponent and significand widths.
                Values::F32(Arc::new(v.map(|x| x as f32).collect()))
            } else {
                Values::F64(Arc::new(v.collect()))
            }
        });
        Ok(ActTable {
            fmt: *fmt,
            kind,
            values,
            fp16,
            #[cfg(feature = "cuda")]
            on_gpu: Arc::default(),
        })
    }

    /// What the GPU's lookup needs (`device::MfuKernel::Table`), for a table of fp16 or bf16
    /// (with subnormals), whose encodings `device`'s `bits16` forms: `None` for other formats.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn gpu_lookup(&self, rounded: bool) -> Option<crate::device::MfuKernel> {
        let f = &self.fmt;
        let ok = self.values.is_some()
            && f.subnormals
            && matches!((f.exp_bits, f.mant_bits), (5, 10) | (8, 7));
        ok.then(|| crate::device::MfuKernel::Table {
            rounded,
            mant_bits: f.mant_bits,
            bias: f.bias(),
            nan_index: u32::from(bits16(f, f64::NAN)),
        })
    }

    /// The table's outputs on the GPU of `dev`, uploaded once.
    #[cfg(feature = "cuda")]
    pub(crate) fn on_gpu(
        &self,
        dev: &candle_core::cuda_backend::CudaDevice,
    ) -> candle_core::Result<&candle_core::cuda_backend::cudarc::driver::CudaSlice<f64>> {
        if let Some(t) = self.on_gpu.get() {
            return Ok(t);
        }
        let values: Vec<f64> = match &self.values {
            Some(Values::F32(v)) => v.iter().map(|&x| f64::from(x)).collect(),
            Some(Values::F64(v)) => v.to_vec(),
            None => candle_core::bail!("mfu: a table op without a table"),
        };
        let t = dev.clone_htod(&values)?;
        Ok(self.on_gpu.get_or_init(|| t))
    }

    /// The table's format.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn format(&self) -> &FloatFormat {
        &self.fmt
    }

    /// `out[i] = apply(r.round(x[i]))`, with the common case (an fp16 table, the fast
    /// rounder) as one tight loop; `rounded`: `x` is rounded to the format already (the
    /// rounding is skipped).
    #[inline(always)]
    fn apply_all(&self, r: &Rounder, x: &[f64], out: &mut [f64], rounded: bool) {
        // A table of a fixed 2^16 entries indexed by u16 (no bounds checks), and locals
        // (nothing reloaded through `self` in the loop).
        let fp16 = (self.fmt.exp_bits, self.fmt.mant_bits) == (5, 10);
        let fast = match (&self.values, r.nearest_even()) {
            (Some(Values::F32(v)), Some(f)) if fp16 => <&[f32; 1 << 16]>::try_from(v.as_slice())
                .ok()
                .map(|v| (v, *f)),
            _ => None,
        };
        let Some((v, f)) = fast else {
            for (x, o) in x.iter().zip(out.iter_mut()) {
                *o = self.apply_with(r, r.round(*x));
            }
            return;
        };
        let nan = bits16(&self.fmt, f64::NAN);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            // Rounded in blocks on the stack, then looked up 4 lanes at a time.
            const BLOCK: usize = 256;
            let mut buf = [0.0f64; BLOCK];
            for (xs, os) in x.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
                let xs = if rounded {
                    xs
                } else {
                    let b = &mut buf[..xs.len()];
                    f.round_all(xs, b);
                    &*b
                };
                // SAFETY: the CPU has AVX2 and F16C (checked above).
                unsafe { lookup_fp16_x86(v, nan, xs, os) };
            }
            return;
        }
        for (x, o) in x.iter().zip(out.iter_mut()) {
            *o = lookup_fp16(v, nan, if rounded { *x } else { f.round(*x) });
        }
    }

    /// The table's output bit patterns and the index of its NaN entry, for an fp16 table.
    pub(crate) fn fp16_bits(&self) -> Option<(&[u16; 1 << 16], u16)> {
        Some((self.fp16.as_deref()?, bits16(&self.fmt, f64::NAN)))
    }

    /// The activation of a value already rounded to the format.
    pub fn apply(&self, x: f64) -> f64 {
        self.apply_with(&Rounder::Reference(self.fmt), x)
    }

    /// [`apply`](Self::apply), `r` (one of the format's rounders) rounding where no table
    /// holds the results.
    #[inline]
    fn apply_with(&self, r: &Rounder, x: f64) -> f64 {
        match &self.values {
            Some(Values::F32(v)) => f64::from(v[bits16(&self.fmt, x) as usize]),
            Some(Values::F64(v)) => v[bits16(&self.fmt, x) as usize],
            None => r.round(activation::eval(self.kind, x)),
        }
    }
}

/// The 16-bit pattern of a value of a 16-bit format (exact: the value is representable).
#[inline]
fn bits16(fmt: &FloatFormat, x: f64) -> u16 {
    if x.is_nan() {
        // Every NaN indexes the table at the canonical quiet NaN, as the machine encodes it
        // (x86 produces NaNs with the sign bit set: inf - inf, 0 * inf).
        return fmt.encode(x) as u16;
    }
    match (fmt.exp_bits, fmt.mant_bits) {
        (5, 10) => fp16_bits(x),
        // f64 -> f32 is exact for these values, so half's conversions cannot double-round.
        (8, 7) => half::bf16::from_f64(x).to_bits(),
        _ => fmt.encode(x) as u16,
    }
}

/// `out[i] = v[fp16 bits of x[i]]` (`nan` for every NaN) for fp16 values `x`, 4 lanes at a
/// time: f64 -> f32 -> fp16 conversions are exact on fp16 values (no double rounding), then
/// four scalar loads from the f32 table (on Zen 3 a `vgatherdps` of the same four was slower:
/// activations took 4.9% of a warm LSTM run with it, 3.0% without).
///
/// # Safety
/// The CPU must have AVX2 and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn lookup_fp16_x86(v: &[f32; 1 << 16], nan: u16, x: &[f64], out: &mut [f64]) {
    use std::arch::x86_64::*;
    let nan_at = _mm_set1_epi32(i32::from(nan));
    let mut xs = x.chunks_exact(4);
    let mut os = out.chunks_exact_mut(4);
    for (x4, o4) in (&mut xs).zip(&mut os) {
        // SAFETY: x4 and o4 hold 4 elements; every index is a u16 (or `nan`), inside the
        // table of 2^16 entries.
        unsafe {
            let f = _mm256_cvtpd_ps(_mm256_loadu_pd(x4.as_ptr()));
            let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(f);
            let at = _mm_cvtepu16_epi32(h);
            let at = _mm_blendv_epi8(at, nan_at, _mm_castps_si128(_mm_cmpunord_ps(f, f)));
            let lo = _mm_cvtsi128_si64(at) as u64;
            let hi = _mm_extract_epi64::<1>(at) as u64;
            let t = v.as_ptr();
            o4[0] = f64::from(*t.add((lo & 0xFFFF_FFFF) as usize));
            o4[1] = f64::from(*t.add((lo >> 32) as usize));
            o4[2] = f64::from(*t.add((hi & 0xFFFF_FFFF) as usize));
            o4[3] = f64::from(*t.add((hi >> 32) as usize));
        }
    }
    for (x, o) in xs.remainder().iter().zip(os.into_remainder()) {
        *o = lookup_fp16(v, nan, *x);
    }
}

/// `v[fp16 bits of x]` (`nan` for every NaN) for an fp16 value `x`.
#[inline(always)]
fn lookup_fp16(v: &[f32; 1 << 16], nan: u16, x: f64) -> f64 {
    let i = if x.is_nan() { nan } else { fp16_bits(x) };
    f64::from(v[usize::from(i)])
}

/// The fp16 bit pattern of an f64 holding a non-NaN fp16 value, from its bits. Branch-free
/// (both forms computed, then selected), so table lookups over slices vectorise.
#[inline(always)]
fn fp16_bits(x: f64) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 48) as u16) & 0x8000;
    let a = x.abs();
    // Normal: rebias the exponent, keep the top 10 fraction bits (the rest are zero); an
    // infinity's rebiased exponent is 0x7F0 and takes the same form after the clamp below.
    let e = (((b >> 52) & 0x7FF) as i64 - 1023 + 15).clamp(0, 31) as u16;
    let frac = if a.is_infinite() {
        0
    } else {
        ((b >> 42) & 0x3FF) as u16
    };
    let normal = (e << 10) | frac;
    // Subnormal (or zero): an exact multiple of 2^-24 (the product is < 2^10 here).
    let sub = (a.min(1.0) * 2f64.powi(24)) as u16;
    sign | if a >= 2f64.powi(-14) { normal } else { sub }
}

/// `v_relu`: `x > 0 ? x : +0`, NaN stays NaN (on the rounded input).
pub fn relu(fmt: &FloatFormat, x: &[f64], out: &mut [f64]) {
    let r = Rounder::new(fmt);
    par_pieces(x, out, 4096, |(xs, os)| {
        r.round_all(xs, os);
        // The select on its own vectorises as it is.
        os.iter_mut().for_each(|o| *o = elementwise::relu(*o));
    });
}

/// `v_pass`: the rounding to the MFU format only.
pub fn pass(fmt: &FloatFormat, x: &[f64], out: &mut [f64]) {
    let r = Rounder::new(fmt);
    par_pieces(x, out, 4096, |(xs, os)| r.round_all(xs, os));
}

/// `v_sigm`, `v_tanh`, `v_exp`; `rounded`: `x` is rounded to the table's format already
/// (`exec::rounded`).
pub fn activate(t: &ActTable, x: &[f64], out: &mut [f64], rounded: bool) {
    let r = Rounder::new(&t.fmt);
    par_pieces(x, out, 4096, |(xs, os)| t.apply_all(&r, xs, os, rounded));
}

/// `v_softmax` over each row of `lanes` values: m = max (NaN-propagating) over the row;
/// e_i = exp_table(fmt(x_i - m)); s = the exact sum of the e_i rounded to f32;
/// y_i = fmt(f32(e_i) / s) with the division in f32.
pub fn softmax(exp: &ActTable, x: &[f64], lanes: usize, out: &mut [f64]) {
    let fmt = exp.fmt;
    let r = Rounder::new(&fmt);
    let lanes = lanes.max(1);
    let plain = plain_sum_is_exact(&fmt, lanes);
    let row = |xs: &[f64], os: &mut [f64], tmp: &mut [f64]| {
        r.round_all(xs, tmp);
        let m = tmp.iter().fold(f64::NEG_INFINITY, |m, &v| max(m, v));
        if narrow_nearest(&fmt) {
            // f64's difference rounds to the format as the exact one does (the table rounds
            // it on the way in).
            tmp.iter_mut().for_each(|v| *v -= m);
            exp.apply_all(&r, tmp, os, false);
        } else {
            // `fmt(x_i - m)` of the exact difference, as every MFU subtraction.
            tmp.iter_mut()
                .for_each(|v| *v = binary1(BinOp::Sub, &fmt, &r, *v, m));
            exp.apply_all(&r, tmp, os, true);
        }
        // Finite: the same exact value that `Expansion` gives, rounded once alike.
        let plain_sum = plain
            .then(|| os.iter().sum::<f64>())
            .filter(|s| s.is_finite());
        let s = match plain_sum {
            Some(s) => FloatFormat::FP32.round(s),
            None => {
                let mut e = Expansion::new();
                os.iter().for_each(|&v| e.add(v));
                e.round_to(&FloatFormat::FP32)
            }
        } as f32;
        tmp.iter_mut()
            .zip(os.iter())
            .for_each(|(t, &e)| *t = f64::from(e as f32 / s));
        r.round_all(tmp, os);
    };
    par_pieces(x, out, lanes, |(xs, os)| {
        let mut tmp = vec![0.0; lanes];
        for (xs, os) in xs.chunks(lanes).zip(os.chunks_mut(lanes)) {
            row(xs, os, &mut tmp[..xs.len()]);
        }
    });
}

/// `v_softmax` over rows of `lanes` values as a candle op: [`softmax`] in `cpu_fwd` (and in
/// `cuda_fwd`, on a host copy).
pub(crate) struct SoftmaxOp {
    pub exp: ActTable,
    pub lanes: usize,
}

impl candle_core::CustomOp1 for SoftmaxOp {
    fn name(&self) -> &'static str {
        "softmax"
    }

    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        l: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        super::tensors::map_cpu("softmax", s, l, |x, o| softmax(&self.exp, x, self.lanes, o))
    }

    /// On a GPU: the CPU kernel on a host copy (no GPU kernel: docs/swgraph.md).
    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
        crate::device::via_host(s, l, |s, l| self.cpu_fwd(s, l))
    }
}

/// Whether a plain f64 sum of `lanes` finite values of `fmt` is exact in any order: each is a
/// multiple of the format's quantum 2^(emin - mant_bits) below 2^(emax + 1), so every partial
/// sum is an integer number of quanta below `lanes * 2^(emax + 1 - emin + mant_bits)`, which
/// f64 holds exactly while that stays within 2^53.
fn plain_sum_is_exact(fmt: &FloatFormat, lanes: usize) -> bool {
    let emin = 1 - fmt.bias();
    let emax = floor_log2(fmt.max_value());
    let span = i64::from(emax + 1 - emin) + i64::from(fmt.mant_bits);
    span + i64::from(lanes.next_power_of_two().trailing_zeros()) <= 53
}

/// Bits of a value, every NaN as one pattern (NaN payloads are not part of the contract): what
/// the kernels' tests compare.
#[cfg(test)]
pub(crate) fn nan_bits(v: f64) -> u64 {
    if v.is_nan() { u64::MAX } else { v.to_bits() }
}

#[cfg(test)]
mod tests;
