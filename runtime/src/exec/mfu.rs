//! MFU kernels over slices: element-wise ops with one rounding, table activations, softmax
//! (docs/numerics.md, semantics.md "Numerics in the pipeline").

use super::exact::{ExactSum, two_prod, two_sum};
use super::quant::{FastRound, PAR_MIN, Rounder, avx2_copy, par_pieces, vectorized};
use nnp_lowering::swgraph::{BinOp, TableFn};
use nnp_numerics::{Activation, FloatFormat, Rounding, activation, elementwise, floor_log2};
use rayon::prelude::*;
use std::sync::Arc;

/// Sum, difference and product of two values of a format with at most 25 significand bits are
/// correctly rounded to nearest by one f64 operation and one rounding (53 >= 2p + 2: the f64
/// result never lands on or crosses a midpoint of the format that the exact one does not);
/// wider formats go through the error-free transformations.
fn narrow(fmt: &FloatFormat) -> bool {
    fmt.mant_bits < 25
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
    let fast = FastRound::new(fmt)
        .filter(|_| narrow(fmt) && matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul))
        .map(|r| Zip { r, op, rounded });
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

/// Add, subtract or multiply of a narrow format with the fast rounder: `r(f(r(x), r(y)))`, one
/// f64 operation of two narrow-format values and one rounding.
struct Zip {
    r: FastRound,
    op: BinOp,
    rounded: [bool; 2],
}

impl Zip {
    avx2_copy! {
        fn run / run_avx2 / run_body (&self, a: &[f64], b: &[f64], o: &mut [f64])
    }

    #[inline(always)]
    fn run_body(&self, a: &[f64], b: &[f64], o: &mut [f64]) {
        match self.op {
            BinOp::Add => self.each(a, b, o, |x, y| x + y),
            BinOp::Sub => self.each(a, b, o, |x, y| x - y),
            _ => self.each(a, b, o, |x, y| x * y),
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
    match op {
        BinOp::Max => max(x, y),
        _ if narrow_nearest(fmt) => r.round(match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            _ => x * y,
        }),
        _ => {
            let (hi, lo) = match op {
                BinOp::Add => two_sum(x, y),
                BinOp::Sub => two_sum(x, -y),
                _ => two_prod(x, y),
            };
            if !hi.is_finite() || lo == 0.0 {
                return r.round(hi);
            }
            let mut s = ExactSum::new();
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
}

/// A table's outputs: as f32 where every value of the format is one (fp16, bf16: the table is
/// then 256 KiB and stays in L2), else as f64.
#[derive(Clone)]
enum Values {
    F32(Arc<Vec<f32>>),
    F64(Arc<Vec<f64>>),
}

/// A table file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("activation table `{path}` {message}")]
    File { path: String, message: String },
}

pub fn activation_kind(f: TableFn) -> Activation {
    match f {
        TableFn::Sigm => Activation::Sigmoid,
        TableFn::Tanh => Activation::Tanh,
        TableFn::Exp => Activation::Exp,
    }
}

impl ActTable {
    /// The built-in table (correctly rounded function) or a target's table file. Tables are
    /// for 16-bit formats; other formats compute the function (a file is then unused).
    pub fn load(f: TableFn, fmt: &FloatFormat, file: Option<&str>) -> Result<ActTable, TableError> {
        let kind = activation_kind(f);
        let file = file.filter(|_| fmt.bits() == 16);
        let bits: Option<Vec<u16>> = match file {
            Some(path) => Some(crate::io::read_table(std::path::Path::new(path)).map_err(
                |message| TableError::File {
                    path: path.to_string(),
                    message,
                },
            )?),
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
        })
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
        // Finite: the same exact value that `ExactSum` gives, rounded once alike.
        let plain_sum = plain
            .then(|| os.iter().sum::<f64>())
            .filter(|s| s.is_finite());
        let s = match plain_sum {
            Some(s) => FloatFormat::FP32.round(s),
            None => {
                let mut e = ExactSum::new();
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
mod tests {
    use super::*;

    const FP16: FloatFormat = FloatFormat::FP16;

    fn bin(op: BinOp, a: f64, b: f64) -> f64 {
        let mut o = [0.0];
        binary(op, &FP16, &[a], &[b], &mut o, [false, false]);
        o[0]
    }

    /// On operands that are fp16 values already, skipping their rounding (`rounded`) gives
    /// the contract's `fp16(op(a, b))` (`nnp_numerics`' rounding) for every op, on specials
    /// (signed zeros, subnormals, the largest value, infinities, NaNs) and random pairs, on
    /// both sides of the parallel threshold.
    #[test]
    fn binary_skips_the_rounding_of_rounded_operands() {
        let mut vals: Vec<f64> = vec![
            0.0,
            -0.0,
            2f64.powi(-24),
            -2f64.powi(-24),
            6.1e-5,
            65504.0,
            -65504.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            1.0,
            2048.0,
        ];
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        while vals.len() < 40_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            vals.push(half::f16::from_bits(s as u16).to_f64());
        }
        let (a, b): (Vec<f64>, Vec<f64>) = vals
            .iter()
            .zip(vals.iter().rev())
            .map(|(x, y)| (*x, *y))
            .unzip();
        for op in [BinOp::Add, BinOp::Sub, BinOp::Mul] {
            let f = |x: f64, y: f64| match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                _ => x * y,
            };
            for rounded in [[false, false], [true, false], [false, true], [true, true]] {
                for len in [a.len(), 1000] {
                    let mut out = vec![0.0; len];
                    binary(op, &FP16, &a[..len], &b[..len], &mut out, rounded);
                    for ((x, y), o) in a.iter().zip(&b).zip(&out) {
                        let want = FP16.round(f(*x, *y));
                        assert_eq!(
                            nan_bits(*o),
                            nan_bits(want),
                            "{op:?} {x:e} {y:e} {rounded:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn binary_ops_round_once() {
        // 2048 + 1 = 2049 is a tie between 2048 and 2050 in fp16 (spacing 2): even -> 2048.
        assert_eq!(bin(BinOp::Add, 2048.0, 1.0), 2048.0);
        // 2050 + 1 = 2051 ties to 2052 (even mantissa).
        assert_eq!(bin(BinOp::Add, 2050.0, 1.0), 2052.0);
        // Inputs are rounded first: 1 + 2^-12 becomes 1.
        assert_eq!(bin(BinOp::Sub, 1.0 + 2f64.powi(-12), 1.0).to_bits(), 0);
        // (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 -> 1 + 2^-9.
        let a = 1.0 + 2f64.powi(-10);
        assert_eq!(bin(BinOp::Mul, a, a), 1.0 + 2f64.powi(-9));
        // Overflow: 256 * 256 = 65536 -> inf.
        assert_eq!(bin(BinOp::Mul, 256.0, 256.0), f64::INFINITY);
        // x - x = +0; -0 + -0 = -0.
        assert_eq!(bin(BinOp::Sub, 3.0, 3.0).to_bits(), 0);
        assert_eq!(bin(BinOp::Add, -0.0, -0.0).to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn fp16_bits_match_half() {
        // Every fp16 value (all 65,536 patterns but NaNs) back to its own bits.
        for bits in 0..=u16::MAX {
            let v = half::f16::from_bits(bits);
            if v.is_nan() {
                continue;
            }
            assert_eq!(fp16_bits(v.to_f64()), bits, "pattern {bits:#06x}");
        }
        // Any NaN, whatever its sign and payload, indexes the canonical quiet NaN 0x7E00
        // (docs/emulator.md), as the emulator's `encode` does.
        for nan in [f64::NAN, -f64::NAN, f64::from_bits(0xFFF8_0000_0000_1234)] {
            assert_eq!(bits16(&FloatFormat::FP16, nan), 0x7E00);
            assert_eq!(
                bits16(&FloatFormat::BF16, nan),
                FloatFormat::BF16.encode(nan) as u16
            );
        }
    }

    /// Toward-zero roundings of sums that f64 cannot hold, by hand: `1 - 2^-100` truncates to
    /// fp32's value below 1, `1 - 2^-24` (f64 rounds the sum to 1.0, which truncates to 1);
    /// `-0.5 + 2^-115` to bf16's `-(0.5 - 2^-9)`; in an f64-wide format, `1 - 2^-53`. The
    /// nearest modes keep the f64 shortcut: `1 + 2^-100` and `1 - 2^-100` are 1.
    #[test]
    fn directed_roundings_of_far_apart_sums_by_hand() {
        let with = |fmt: FloatFormat, rounding| FloatFormat { rounding, ..fmt };
        let tiny = 2f64.powi(-100);
        let cases = [
            (
                with(FloatFormat::FP32, Rounding::TowardZero),
                1.0,
                -tiny,
                1.0 - 2f64.powi(-24),
            ),
            (
                with(FloatFormat::BF16, Rounding::TowardZero),
                -0.5,
                2f64.powi(-115),
                -(0.5 - 2f64.powi(-9)),
            ),
            (
                with(FloatFormat::FP32, Rounding::NearestAway),
                1.0,
                tiny,
                1.0,
            ),
            (
                with(FloatFormat::FP32, Rounding::NearestEven),
                1.0,
                -tiny,
                1.0,
            ),
            // As wide as f64 (the error-free path): 1 - 2^-53.
            (
                with(FloatFormat::ieee(11, 52), Rounding::TowardZero),
                1.0,
                -tiny,
                1.0 - 2f64.powi(-53),
            ),
        ];
        for (fmt, a, b, want) in cases {
            let mut out = [0.0];
            binary(BinOp::Add, &fmt, &[a], &[b], &mut out, [false, false]);
            assert_eq!(out[0].to_bits(), want.to_bits(), "{fmt:?}: {a:e} + {b:e}");
        }
    }

    #[test]
    fn max_rules() {
        assert!(bin(BinOp::Max, f64::NAN, 1.0).is_nan());
        assert!(bin(BinOp::Max, 1.0, f64::NAN).is_nan());
        assert_eq!(bin(BinOp::Max, -0.0, 0.0).to_bits(), 0);
        assert_eq!(bin(BinOp::Max, 0.0, -0.0).to_bits(), 0);
        assert_eq!(bin(BinOp::Max, -0.0, -0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(bin(BinOp::Max, -3.0, -2.0), -2.0);
    }

    /// Every fp16 pattern (the first 2^16 values, in order), each finite one times
    /// `1 + 2^k` for every `k` of `between` (ties and the points beside them), then `extra`,
    /// then a negative NaN and one with a payload.
    fn fp16_inputs(between: &[i32], extra: &[f64]) -> Vec<f64> {
        let mut x: Vec<f64> = (0..=u16::MAX)
            .map(|b| half::f16::from_bits(b).to_f64())
            .collect();
        let finite: Vec<f64> = x.iter().copied().filter(|v| v.is_finite()).collect();
        for &k in between {
            x.extend(finite.iter().map(|v| v * (1.0 + 2f64.powi(k))));
        }
        x.extend(extra);
        x.extend([-f64::NAN, f64::from_bits(0x7FF0_0000_0000_0F00)]);
        x
    }

    #[test]
    fn relu_rules() {
        let mut o = [9.0; 5];
        relu(&FP16, &[-0.0, -1.0, 2.5, f64::NAN, 1e-9], &mut o);
        assert_eq!(o[0].to_bits(), 0);
        assert_eq!(o[1].to_bits(), 0);
        assert_eq!(o[2], 2.5);
        assert!(o[3].is_nan());
        // 1e-9 rounds to fp16 +0 first (below half of 2^-24), so relu gives +0.
        assert_eq!(o[4].to_bits(), 0);
    }

    /// `relu` and `pass` round first, as `nnp_numerics` rounds (the contract: `fmt(x)`, then
    /// the select), on every fp16 pattern, the points between them (ties and their
    /// neighbours), beyond the range, subnormals and signed NaNs; above and below the parallel
    /// threshold; in formats that take the fast rounder (fp16, bf16, a saturating one) and one
    /// that does not (toward zero).
    #[test]
    fn relu_and_pass_round_as_the_format_does() {
        let x = fp16_inputs(
            &[-11, -12, -8],
            &[
                65520.0,
                -65520.0,
                1e300,
                -1e300,
                2f64.powi(-25),
                -2f64.powi(-25),
            ],
        );
        let saturating = FloatFormat {
            overflow: nnp_numerics::Overflow::Saturate,
            ..FP16
        };
        let toward_zero = FloatFormat {
            rounding: nnp_numerics::Rounding::TowardZero,
            ..FP16
        };
        for fmt in [FP16, FloatFormat::BF16, saturating, toward_zero] {
            for len in [x.len(), 1000] {
                let mut out = vec![9.0; len];
                relu(&fmt, &x[..len], &mut out);
                for (v, o) in x[..len].iter().zip(&out) {
                    let r = fmt.round(*v);
                    let want = if r > 0.0 || r.is_nan() { r } else { 0.0 };
                    assert_eq!(nan_bits(*o), nan_bits(want), "relu({v:e}) in {fmt:?}");
                }
                pass(&fmt, &x[..len], &mut out);
                for (v, o) in x[..len].iter().zip(&out) {
                    assert_eq!(
                        nan_bits(*o),
                        nan_bits(fmt.round(*v)),
                        "pass({v:e}) in {fmt:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn tables_by_hand() {
        let sigm = ActTable::load(TableFn::Sigm, &FP16, None).expect("built-in");
        let exp = ActTable::load(TableFn::Exp, &FP16, None).expect("built-in");
        assert_eq!(sigm.apply(0.0), 0.5);
        assert_eq!(exp.apply(0.0), 1.0);
        // exp(12) = 162754.8 > 65504: inf. exp(-20) = 2.06e-9 < 2^-25: 0.
        assert_eq!(exp.apply(12.0), f64::INFINITY);
        assert_eq!(exp.apply(-20.0), 0.0);
        assert!(exp.apply(f64::NAN).is_nan());
    }

    /// The slice path (`activate`: fast rounder, f32 table, fp16 bits from the f64 bits) on
    /// every fp16 pattern, on values between patterns (they round first: ties, the subnormal
    /// range, overflow), and on NaNs with a sign and a payload, against the function in f64
    /// rounded by `nnp_numerics` (the contract: `fmt(f(fmt(x)))`), for sigm, tanh and exp, on
    /// both sides of the parallel threshold.
    #[test]
    fn activate_matches_the_rounded_function_on_every_fp16_input() {
        let x = fp16_inputs(
            &[-11],
            &[
                65520.0,
                -65520.0,
                2f64.powi(-25),
                3.0 * 2f64.powi(-26),
                1e300,
            ],
        );
        for f in [TableFn::Sigm, TableFn::Tanh, TableFn::Exp] {
            let t = ActTable::load(f, &FP16, None).expect("built-in");
            let kind = activation_kind(f);
            for len in [x.len(), 1000] {
                let mut out = vec![0.0; len];
                activate(&t, &x[..len], &mut out, false);
                for (v, o) in x[..len].iter().zip(&out) {
                    let want = FP16.round(activation::eval(kind, FP16.round(*v)));
                    assert_eq!(nan_bits(*o), nan_bits(want), "{f:?}({v:e})");
                }
                // The first 2^16 inputs are the fp16 values: their rounding may be skipped.
                let n = len.min(1 << 16);
                activate(&t, &x[..n], &mut out[..n], true);
                for (v, o) in x[..n].iter().zip(&out) {
                    let want = FP16.round(activation::eval(kind, *v));
                    assert_eq!(nan_bits(*o), nan_bits(want), "{f:?}({v:e}), rounded");
                }
            }
        }
    }

    /// `softmax` against the contract computed here from `nnp_numerics` alone: the rounded
    /// inputs' NaN-propagating max, exp(fmt(x - m)) rounded to fp16, the exact sum as an
    /// integer count of fp16's quantum 2^-24 rounded once to f32, and the f32 division rounded
    /// to fp16. Rows of 3, 128 and 1000 lanes: random fp16 values over the whole range, pads of
    /// -65504, equal lanes, overflowing inputs, NaN and infinite lanes, values between fp16
    /// patterns; rows above and below the parallel threshold.
    #[test]
    fn softmax_equals_the_contract_on_adversarial_rows() {
        let exp = ActTable::load(TableFn::Exp, &FP16, None).expect("built-in");
        let kind = activation_kind(TableFn::Exp);
        let mut s = 0x51f1_5e7a_u64;
        let mut next = || crate::exec::intdot::tests::xorshift(&mut s);
        for lanes in [3usize, 128, 1000] {
            let rows = (40_000 / lanes).max(8);
            let mut x = Vec::with_capacity(rows * lanes);
            for row in 0..rows {
                for _ in 0..lanes {
                    let v = match (row % 8, next() % 8) {
                        (0, _) => 0.0,
                        (1, k) if k < 4 => -65504.0,
                        (2, 0) => f64::NAN,
                        (3, 0) => f64::INFINITY,
                        (4, 0) => f64::NEG_INFINITY,
                        (5, _) => 1e6,
                        (6, _) => (next() % 64) as f64 * 0.125 * (1.0 + 2f64.powi(-12)),
                        _ => half::f16::from_bits(
                            (next() % 0x7C00) as u16 | (0x8000 * (next() % 2) as u16),
                        )
                        .to_f64(),
                    };
                    x.push(v);
                }
            }
            let mut out = vec![9.0; x.len()];
            softmax(&exp, &x, lanes, &mut out);
            for (xs, os) in x.chunks(lanes).zip(out.chunks(lanes)) {
                let xr: Vec<f64> = xs.iter().map(|v| FP16.round(*v)).collect();
                let m = xr.iter().fold(f64::NEG_INFINITY, |m, &v| max(m, v));
                let e: Vec<f64> = xr
                    .iter()
                    .map(|v| FP16.round(activation::eval(kind, FP16.round(v - m))))
                    .collect();
                let sum = if e.iter().any(|v| v.is_nan()) {
                    f64::NAN
                } else if e.iter().any(|v| v.is_infinite()) {
                    f64::INFINITY
                } else {
                    let quanta: i128 = e.iter().map(|v| (v * 2f64.powi(24)) as i128).sum();
                    FloatFormat::FP32.round(quanta as f64 * 2f64.powi(-24))
                } as f32;
                for ((o, e), v) in os.iter().zip(&e).zip(xs) {
                    let want = FP16.round(f64::from(*e as f32 / sum));
                    assert_eq!(
                        nan_bits(*o),
                        nan_bits(want),
                        "lane {v:e} of a row of {lanes}"
                    );
                }
            }
        }
        // The plain sum's bound by hand: fp16's values span 2^-24 to 2^16, 40 bits; 2^13
        // lanes add 13 (53); bf16's span is far wider.
        assert!(plain_sum_is_exact(&FP16, 1 << 13));
        assert!(!plain_sum_is_exact(&FP16, (1 << 13) + 1));
        assert!(!plain_sum_is_exact(&FloatFormat::BF16, 2));
    }

    #[test]
    fn softmax_by_hand() {
        let exp = ActTable::load(TableFn::Exp, &FP16, None).expect("built-in");
        // Two equal lanes: each e = 1, s = 2, y = 0.5. A pad lane of -65504 gives
        // exp(-inf...) = exp(fp16(-65504 - 0)) = 0 and does not change the others.
        let mut o = [0.0; 3];
        softmax(&exp, &[0.0, 0.0, -65504.0], 3, &mut o);
        assert_eq!(o, [0.5, 0.5, 0.0]);
        // A zero pad lane takes its share: three lanes of 0 -> 1/3 each, fp16(f32(1/3)).
        let mut o = [0.0; 3];
        softmax(&exp, &[0.0, 0.0, 0.0], 3, &mut o);
        let third = FP16.round(f64::from(1.0f32 / 3.0f32));
        assert_eq!(o, [third; 3]);
        // A NaN lane makes the row NaN.
        let mut o = [0.0; 2];
        softmax(&exp, &[f64::NAN, 1.0], 2, &mut o);
        assert!(o.iter().all(|v| v.is_nan()));
    }
}
