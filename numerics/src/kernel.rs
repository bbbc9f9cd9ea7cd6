//! Fast tensor kernels, bit-equal to the scalar reference ([`Format::quantize`]) on f32 data.
//!
//! `bfp_quantize_f32`: the shared exponent comes from one integer max over the blocks' bit
//! patterns (sign cleared); mantissas are rounded in f64, where scaling an f32 by a power of two
//! is exact and `y + 1.5 * 2^52 - 1.5 * 2^52` rounds to the nearest integer, ties to even
//! (f32 inputs have at most 24 significant bits and are clamped below 2^33 first, so every
//! step is exact).

use crate::block::bfp_block;
use crate::format::{BfpFormat, Format, MxElem, MxFormat};
use crate::rounding::{Rounding, floor_log2, pow2};

/// Fake-quantize one run of f32 data with a BFP format, blocks laid consecutively along `x` as
/// [`Format::quantize`] lays them (`native` is what `block = native` means). The result equals
/// the reference's f64 result rounded to f32 (bit for bit; exactly the reference value whenever
/// `mant <= 24` and the value is within the f32 range). Stochastic rounding takes the reference
/// path. Uses AVX2 when the CPU has it (same results).
pub fn bfp_quantize_f32(fmt: &BfpFormat, x: &[f32], native: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { bfp_run_avx2(fmt, x, native, out) };
        return;
    }
    bfp_run(fmt, x, native, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn bfp_run_avx2(fmt: &BfpFormat, x: &[f32], native: usize, out: &mut [f32]) {
    bfp_run(fmt, x, native, out);
}

#[inline(always)]
fn bfp_run(fmt: &BfpFormat, x: &[f32], native: usize, out: &mut [f32]) {
    let len = fmt.block.len(native);
    let n = x.len().min(out.len());
    for (i, (xb, ob)) in x[..n].chunks(len).zip(out[..n].chunks_mut(len)).enumerate() {
        match fmt.rounding {
            Rounding::NearestEven => block_f32(
                fmt,
                xb,
                ob,
                |y| {
                    const MAGIC: f64 = 6755399441055744.0; // 1.5 * 2^52
                    (y + MAGIC) - MAGIC
                },
                |y| {
                    const MAGIC: f32 = 12582912.0; // 1.5 * 2^23
                    (y + MAGIC) - MAGIC
                },
            ),
            Rounding::TowardZero => block_f32(fmt, xb, ob, f64::trunc, f32::trunc),
            Rounding::NearestAway => block_f32(
                fmt,
                xb,
                ob,
                |y| {
                    // y - trunc(y) is exact; `|y| + 0.5` would round for small y.
                    let t = y.trunc();
                    if (y - t).abs() >= 0.5 {
                        t + 1.0f64.copysign(y)
                    } else {
                        t
                    }
                },
                |y| round32(y, Rounding::NearestAway),
            ),
            Rounding::Stochastic { .. } => reference_block(fmt, xb, ob, (i * len) as u64),
        }
    }
}

/// One block. `round` / `round32` round to an integer, exactly, for magnitudes below 2^33 /
/// 2^22.
#[inline(always)]
fn block_f32(
    fmt: &BfpFormat,
    x: &[f32],
    out: &mut [f32],
    round: impl Fn(f64) -> f64,
    round32: impl Fn(f32) -> f32,
) {
    // Largest magnitude by its bits (non-negative floats order like their bit patterns).
    let max_abs = x
        .iter()
        .fold(0i32, |m, v| m.max((v.to_bits() & 0x7FFF_FFFF) as i32)) as u32;
    if max_abs >= 0x7F80_0000 {
        out.fill(f32::NAN);
        return;
    }
    let (lo, hi) = fmt.exp_range();
    let e = if max_abs == 0 {
        lo
    } else {
        floor_log2(f64::from(f32::from_bits(max_abs))).clamp(lo, hi)
    };
    let lsb = e - (fmt.mant as i32 - 2);
    let qmax = fmt.max_mant() as f64;
    let qmin = if fmt.full_range { -qmax - 1.0 } else { -qmax };
    let (down, up) = (pow2(-lsb), pow2(lsb));
    if fmt.mant <= 22 && (-126..=127).contains(&-lsb) && lsb >= -149 {
        // Common case: everything in f32 (8 lanes per AVX2 op). x * 2^-lsb is exact, the
        // rounding is exact below 2^22, q * 2^lsb rounds once like the reference's f64 -> f32
        // cast. `+ 0.0` makes a -0 mantissa +0, as the reference's two's complement 0.
        let (down, up) = (down as f32, up as f32);
        let (qmin, qmax) = (qmin as f32, qmax as f32);
        let bound = qmax + 2.0;
        for (o, v) in out.iter_mut().zip(x) {
            // Plain comparisons (no NaN here) vectorize to min/max instructions.
            let y = clamp32(v * down, -bound, bound);
            let q = clamp32(round32(y), qmin, qmax) + 0.0;
            *o = q * up;
        }
        return;
    }
    if !down.is_finite() || up == 0.0 {
        // Scale factors outside the f64 range (16-bit shared exponents): reference path.
        reference_block(fmt, x, out, 0);
        return;
    }
    // Clamp bound: above qmax + 1, below 2^33 so the rounding stays exact.
    let bound = qmax + 2.0;
    for (o, v) in out.iter_mut().zip(x) {
        let y = (f64::from(*v) * down).max(-bound).min(bound);
        let q = round(y).max(qmin).min(qmax) + 0.0;
        *o = (q * up) as f32;
    }
}

/// Round an f32 of magnitude below 2^22 to an integer (exact).
#[inline(always)]
fn round32(y: f32, rounding: Rounding) -> f32 {
    const MAGIC: f32 = 12582912.0; // 1.5 * 2^23
    match rounding {
        Rounding::TowardZero => y.trunc(),
        Rounding::NearestAway => {
            // y - trunc(y) is exact; `|y| + 0.5` would round for small y (0.49999997 -> 1).
            let t = y.trunc();
            if (y - t).abs() >= 0.5 {
                t + 1.0f32.copysign(y)
            } else {
                t
            }
        }
        _ => (y + MAGIC) - MAGIC,
    }
}

#[inline(always)]
fn clamp32(v: f32, lo: f32, hi: f32) -> f32 {
    let v = if v < lo { lo } else { v };
    if v > hi { hi } else { v }
}

fn reference_block(fmt: &BfpFormat, x: &[f32], out: &mut [f32], base: u64) {
    let xs: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
    let mut q = vec![0.0; xs.len()];
    if xs.iter().any(|v| !v.is_finite()) {
        q.fill(f64::NAN);
    } else {
        bfp_block(fmt, &xs, &mut q, base);
    }
    for (o, v) in out.iter_mut().zip(q) {
        *o = v as f32;
    }
}

/// Fake-quantize one run of f32 data with an MX format (blocks along `x`), bit-equal to the
/// reference rounded to f32. Per element: `y = x * 2^-s` (exact, or below every element
/// subnormal), quantum `2^(max(floor_log2 y, emin) - m)` from y's exponent bits, magic-number
/// rounding, saturation, `* 2^s` (one rounding, like the reference's f64 -> f32 cast).
/// Stochastic rounding takes the reference path.
pub fn mx_quantize_f32(fmt: &MxFormat, x: &[f32], native: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { mx_run_avx2(fmt, x, native, out) };
        return;
    }
    mx_run(fmt, x, native, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn mx_run_avx2(fmt: &MxFormat, x: &[f32], native: usize, out: &mut [f32]) {
    mx_run(fmt, x, native, out);
}

#[inline(always)]
fn mx_run(fmt: &MxFormat, x: &[f32], native: usize, out: &mut [f32]) {
    let len = fmt.block.len(native);
    let n = x.len().min(out.len());
    if let Rounding::Stochastic { .. } = fmt.rounding {
        // Draws depend on positions in the run: the reference over the whole run.
        let xs: Vec<f64> = x[..n].iter().map(|v| f64::from(*v)).collect();
        let mut q = vec![0.0; n];
        Format::Mx(*fmt).quantize(&xs, native, &mut q);
        for (o, v) in out.iter_mut().zip(q) {
            *o = v as f32;
        }
        return;
    }
    let elem = fmt.elem.mini();
    let m = elem.mant_bits as i32;
    let max = elem.max_value() as f32;
    // Added to every result: -0 keeps an fp element's sign of zero, +0 turns INT8's -0 into
    // +0 (two's complement has no -0), leaving every other value as it is.
    let zero = if fmt.elem == MxElem::Int8 {
        0.0
    } else {
        -0.0f32
    };
    for (xb, ob) in x[..n].chunks(len).zip(out[..n].chunks_mut(len)) {
        let max_abs =
            xb.iter()
                .fold(0i32, |a, v| a.max((v.to_bits() & 0x7FFF_FFFF) as i32)) as u32;
        if max_abs >= 0x7F80_0000 {
            ob.fill(f32::NAN);
            continue;
        }
        let s = if max_abs == 0 {
            -127
        } else {
            (floor_log2(f64::from(f32::from_bits(max_abs))) - fmt.elem.emax()).max(-127)
        };
        let down = pow2(-s) as f32;
        let up = pow2(s) as f32;
        for (o, v) in ob.iter_mut().zip(xb) {
            let y = v * down;
            let e = ((y.to_bits() >> 23) & 0xFF) as i32 - 127;
            let q = if e > elem.emin { e } else { elem.emin } - m;
            let inv = f32::from_bits(((127 - q) as u32) << 23);
            let unit = f32::from_bits(((127 + q) as u32) << 23);
            let r = round32(y * inv, fmt.rounding) * unit;
            let r = clamp32(r, -max, max).copysign(y);
            *o = r * up + zero;
        }
    }
}

/// Fake-quantize f32 data laid out in runs of `run` with any format, as
/// [`Format::quantize_tensor`] does (a `per = tensor` format shares one scale over all of
/// `x`): the BFP and MX fast paths where they apply, the f64 reference otherwise (results
/// rounded to f32).
pub fn quantize_f32(fmt: &Format, x: &[f32], run: usize, native: usize, out: &mut [f32]) {
    let n = x.len().min(out.len());
    let run = match fmt.per_tensor() {
        true => n.max(1),
        false => run.max(1),
    };
    if let Format::Bfp(b) = fmt {
        for (xr, or) in x[..n].chunks(run).zip(out[..n].chunks_mut(run)) {
            bfp_quantize_f32(b, xr, native, or);
        }
        return;
    }
    if let Format::Mx(m) = fmt {
        for (xr, or) in x[..n].chunks(run).zip(out[..n].chunks_mut(run)) {
            mx_quantize_f32(m, xr, native, or);
        }
        return;
    }
    let mut xs = vec![0.0f64; run];
    let mut qs = vec![0.0f64; run];
    for (xr, or) in x[..n].chunks(run).zip(out[..n].chunks_mut(run)) {
        let k = xr.len();
        for (d, v) in xs.iter_mut().zip(xr) {
            *d = f64::from(*v);
        }
        fmt.quantize(&xs[..k], native, &mut qs[..k]);
        for (o, v) in or.iter_mut().zip(&qs) {
            *o = *v as f32;
        }
    }
}
