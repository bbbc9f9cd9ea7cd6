//! fp16 MFU ops on f32 lanes with the x86 F16C conversions: the fused regions' fast path for
//! the default MFU format (IEEE fp16: nearest-even, subnormals, overflow to infinity).
//!
//! **Why the bits are the same as [`super::mfu`]'s.** Every fp16 value is an f32, so a region
//! whose ops all round to fp16 can hold its rows as f32 (half the bytes of f64):
//! - add, subtract and multiply of two fp16 values are computed in f32 and rounded to fp16
//!   by `vcvtps2ph`. Rounding the exact result to f32 first and then to fp16 gives the
//!   correctly rounded fp16 result, as f32 has at least `2 * 11 + 2` significand bits
//!   (docs/numerics.md); a product of two fp16 values is exact in f32 anyway;
//! - max, relu and pass return one of their operands (or +0), which is fp16 already;
//! - the activations look the operand's fp16 bits up in the table's 16-bit outputs;
//! - an operand from outside the region is rounded to fp16 as it is read, which is what every
//!   op of the region does to its operands. An f64 that is not fp16 is first rounded to f32
//!   *to odd* (truncated, the last bit set if anything was dropped: exact in f32), so the
//!   second rounding, to fp16, is correct (round-to-odd with two spare bits does not
//!   double-round);
//! - NaNs stay NaNs (their sign and payload may differ from the f64 kernels'; every reader
//!   treats all NaNs alike: tables look every NaN up at the canonical one, storage encodes the
//!   canonical NaN).
//!
//! `exec::fused::tests` compare these kernels with the f64 ones bit for bit.

use super::mfu::ActTable;
use nnp_lowering::swgraph::BinOp;
use std::mem::MaybeUninit;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The kernels; a value exists only where the CPU has AVX2 and F16C.
#[derive(Clone, Copy, Debug)]
pub(crate) struct F16c(());

impl F16c {
    /// The kernels, where the CPU has AVX2 and F16C.
    pub(crate) fn new() -> Option<F16c> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            return Some(F16c(()));
        }
        None
    }
}

/// The op of [`map2`] for relu (of the first operand): a number that is no binary op's code
/// (the binary ops are theirs, [`BinOp::code`]).
#[cfg(target_arch = "x86_64")]
const RELU: u32 = u32::MAX;
#[cfg(target_arch = "x86_64")]
const _: () = assert!(BinOp::from_code(RELU).is_none());

#[cfg(target_arch = "x86_64")]
impl F16c {
    /// `out = fp16(op(a, b))` for fp16 values `a` and `b`.
    pub(crate) fn binary(self, op: BinOp, a: &[f32], b: &[f32], out: &mut [f32]) {
        // SAFETY (every call into this module's `unsafe fn`s): `self` exists only on a CPU with
        // AVX2 and F16C.
        unsafe {
            match op {
                BinOp::Add => map2::<{ BinOp::Add.code() }>(a, b, out),
                BinOp::Sub => map2::<{ BinOp::Sub.code() }>(a, b, out),
                BinOp::Mul => map2::<{ BinOp::Mul.code() }>(a, b, out),
                BinOp::Max => map2::<{ BinOp::Max.code() }>(a, b, out),
            }
        }
    }

    /// `v_relu` on fp16 values: `x > 0 ? x : +0`, NaN stays NaN.
    pub(crate) fn relu(self, x: &[f32], out: &mut [f32]) {
        // SAFETY: as in `binary`.
        unsafe { map2::<RELU>(x, x, out) }
    }

    /// A table activation of fp16 values: each value's fp16 bits index the table (every NaN
    /// the canonical NaN's entry, as [`ActTable::apply`] does).
    pub(crate) fn activate(self, t: &ActTable, x: &[f32], out: &mut [f32]) {
        match t.fp16_bits() {
            // SAFETY: as in `binary`.
            Some((v, nan)) => unsafe { lookup(v, nan, x, out) },
            // `F16c::for_steps` admits only tables with 16-bit outputs; any other is still
            // exact through the general lookup.
            None => {
                for (x, o) in x.iter().zip(out.iter_mut()) {
                    *o = t.apply(f64::from(*x)) as f32;
                }
            }
        }
    }

    /// `out = fp16(x)` as f32; `rounded`: every `x` is an fp16 value (or NaN) already, so the
    /// conversion is exact and nothing is rounded.
    pub(crate) fn narrow(self, x: &[f64], rounded: bool, out: &mut [f32]) {
        // SAFETY: as in `binary`.
        unsafe {
            match rounded {
                true => narrow4::<true>(x, out),
                false => narrow4::<false>(x, out),
            }
        }
    }

    /// `out = x` as f64 (exact).
    pub(crate) fn widen(self, x: &[f32], out: &mut [MaybeUninit<f64>]) {
        // SAFETY: as in `binary`.
        unsafe { widen4(x, out) }
    }
}

/// One group of 8 lanes of [`map2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn op8<const OP: u32>(x: __m256, y: __m256) -> __m256 {
    match const { BinOp::from_code(OP) } {
        Some(BinOp::Add) => round(_mm256_add_ps(x, y)),
        Some(BinOp::Sub) => round(_mm256_sub_ps(x, y)),
        Some(BinOp::Mul) => round(_mm256_mul_ps(x, y)),
        Some(BinOp::Max) => max(x, y),
        // `RELU`: not (x <= 0), that is x > 0 or NaN, keeps x.
        None => _mm256_and_ps(x, _mm256_cmp_ps::<_CMP_NLE_UQ>(x, _mm256_setzero_ps())),
    }
}

/// Runs `$group` (an expression on the pointers `$pa`, `$pb`, `$po`, which it reads and writes
/// `$w` lanes at) over the lanes of `a`, `b` and `out`: whole groups in place, then a last
/// partial group on zero-padded copies. (The shortest of the three lengths rules.) The loop of
/// [`map2`], [`narrow4`] and [`lookup`].
#[cfg(target_arch = "x86_64")]
macro_rules! by_groups {
    ($w:literal, $a:expr, $b:expr, $out:expr, |$pa:ident, $pb:ident, $po:ident| $group:expr) => {{
        let (a, b, out) = ($a, $b, $out);
        let n = out.len().min(a.len()).min(b.len());
        let whole = n - n % $w;
        let mut i = 0;
        while i < whole {
            // SAFETY: `$w` lanes from `i` lie inside every slice (`i + $w <= n`).
            unsafe {
                let ($pa, $pb, $po) = (
                    a.as_ptr().add(i),
                    b.as_ptr().add(i),
                    out.as_mut_ptr().add(i),
                );
                $group;
            }
            i += $w;
        }
        if whole < n {
            let mut ta = [Default::default(); $w];
            let mut tb = [Default::default(); $w];
            let mut to = [Default::default(); $w];
            ta[..n - whole].copy_from_slice(&a[whole..n]);
            tb[..n - whole].copy_from_slice(&b[whole..n]);
            // SAFETY: local arrays of `$w` lanes.
            unsafe {
                let ($pa, $pb, $po) = (ta.as_ptr(), tb.as_ptr(), to.as_mut_ptr());
                $group;
            }
            out[whole..n].copy_from_slice(&to[..n - whole]);
        }
    }};
}

/// `out[i] = OP(a[i], b[i])` eight lanes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn map2<const OP: u32>(a: &[f32], b: &[f32], out: &mut [f32]) {
    by_groups!(8, a, b, out, |pa, pb, po| {
        _mm256_storeu_ps(po, op8::<OP>(_mm256_loadu_ps(pa), _mm256_loadu_ps(pb)))
    });
}

/// f32 lanes rounded to fp16 (nearest-even, subnormals, overflow to infinity) and back.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn round(x: __m256) -> __m256 {
    _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
}

/// NaN-propagating maximum with `max(-0, +0) = +0`, as [`super::mfu::max`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn max(x: __m256, y: __m256) -> __m256 {
    // `maxps` gives y where x > y fails (equal, or a NaN)...
    let m = _mm256_max_ps(x, y);
    // ...so equal values take x AND y (+0 unless both are -0)...
    let equal = _mm256_cmp_ps::<_CMP_EQ_OQ>(x, y);
    let m = _mm256_blendv_ps(m, _mm256_and_ps(x, y), equal);
    // ...and a NaN operand makes all ones (a NaN).
    _mm256_or_ps(m, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, y))
}

/// Four f64 lanes as f32 rounded to fp16: exactly (`ROUNDED`: they are fp16 values), or
/// rounded to f32 *to odd* first (the 29 bits f32 lacks cleared, the lowest kept bit set where
/// any was set). That has 24 significant bits, so `vcvtpd2ps` converts it exactly wherever f32
/// is normal; far below (under 2^-126) and far above (over 2^128) the rounding to fp16 gives a
/// signed zero or an infinity either way.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn narrow_group<const ROUNDED: bool>(v: __m256d) -> __m128 {
    if ROUNDED {
        return _mm256_cvtpd_ps(v);
    }
    let bits = _mm256_castpd_si256(v);
    let dropped = _mm256_set1_epi64x((1 << 29) - 1);
    let exact = _mm256_cmpeq_epi64(_mm256_and_si256(bits, dropped), _mm256_setzero_si256());
    let sticky = _mm256_andnot_si256(exact, _mm256_set1_epi64x(1 << 29));
    let odd = _mm256_or_si256(_mm256_andnot_si256(dropped, bits), sticky);
    let f = _mm256_cvtpd_ps(_mm256_castsi256_pd(odd));
    _mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(f))
}

/// `out[i] = x[i]` rounded to fp16, as f32, four lanes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn narrow4<const ROUNDED: bool>(x: &[f64], out: &mut [f32]) {
    by_groups!(4, x, x, out, |px, _px, po| {
        _mm_storeu_ps(po, narrow_group::<ROUNDED>(_mm256_loadu_pd(px)))
    });
}

/// `out[i] = x[i]` as f64 (exact), four lanes at a time. (The shorter length rules.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn widen4(x: &[f32], out: &mut [MaybeUninit<f64>]) {
    let n = out.len().min(x.len());
    let whole = n - n % 4;
    let mut i = 0;
    while i < whole {
        // SAFETY: 4-element load and store inside the slices (MaybeUninit<f64> has f64's
        // layout).
        unsafe {
            let v = _mm256_cvtps_pd(_mm_loadu_ps(x.as_ptr().add(i)));
            _mm256_storeu_pd(out.as_mut_ptr().add(i).cast(), v);
        }
        i += 4;
    }
    for (o, v) in out[whole..n].iter_mut().zip(&x[whole..n]) {
        o.write(f64::from(*v));
    }
}

/// `out[i] = fp16 value of t[fp16 bits of x[i]]` (the entry `nan` for every NaN), eight lanes
/// at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn lookup(t: &[u16; 1 << 16], nan: u16, x: &[f32], out: &mut [f32]) {
    let nan_at = _mm256_set1_epi32(i32::from(nan));
    by_groups!(8, x, x, out, |px, _px, po| {
        _mm256_storeu_ps(po, lookup8(t, nan_at, _mm256_loadu_ps(px)))
    });
}

/// One group of 8 lanes of [`lookup`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn lookup8(t: &[u16; 1 << 16], nan_at: __m256i, x: __m256) -> __m256 {
    let bits = _mm256_cvtepu16_epi32(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x));
    let unordered = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
    let at = _mm256_blendv_epi8(bits, nan_at, unordered);
    // Every index is a u16 (an fp16 pattern or `nan`): no bounds checks.
    let lo = _mm256_castsi256_si128(at);
    let hi = _mm256_extracti128_si256::<1>(at);
    let e = |v: __m128i, k: i32| -> i32 {
        match k {
            0 => _mm_cvtsi128_si32(v),
            1 => _mm_extract_epi32::<1>(v),
            2 => _mm_extract_epi32::<2>(v),
            _ => _mm_extract_epi32::<3>(v),
        }
    };
    let g = |v, k| t[usize::from(e(v, k) as u16)] as i16;
    let h = _mm_setr_epi16(
        g(lo, 0),
        g(lo, 1),
        g(lo, 2),
        g(lo, 3),
        g(hi, 0),
        g(hi, 1),
        g(hi, 2),
        g(hi, 3),
    );
    _mm256_cvtph_ps(h)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::mfu::{self, nan_bits};
    use nnp_numerics::{Activation, FloatFormat, activation};

    const FP16: FloatFormat = FloatFormat::FP16;

    /// The kernels; every CPU these tests run on (x86-64 CI and workstations) has F16C.
    fn kernels() -> F16c {
        F16c::new().expect("the CPU has AVX2 and F16C")
    }

    /// Every fp16 value, in pattern order, as f32.
    fn every_fp16() -> Vec<f32> {
        (0..=u16::MAX)
            .map(|b| half::f16::from_bits(b).to_f32())
            .collect()
    }

    /// f32 NaNs with a sign and payloads (fp16 NaNs other than the canonical one).
    const ODD_NANS: [u32; 4] = [0xFFC0_0000, 0x7FC0_2000, 0x7F80_2000, 0xFFFF_E000];

    /// Add, subtract and multiply on every fp16 value against partners: each value's
    /// neighbours at a few distances in pattern order (pairs of every exponent gap, ties of
    /// the sum), and specials (signed zeros, the smallest subnormal, the largest value,
    /// infinities, NaNs) against every value, equal to `nnp_numerics`' rounding of the exact
    /// f64 result; max equal to the f64 kernel's rule (NaN-propagating, `max(-0, +0) = +0`).
    /// Lengths that are not multiples of 8 run the padded last group.
    #[test]
    fn binary_ops_round_as_the_contract_on_fp16_operands() {
        let k = kernels();
        let a = every_fp16();
        let mut partners: Vec<Vec<f32>> = [1usize, 7, 1024, 15_360, 32_768, 40_000]
            .iter()
            .map(|&d| (0..a.len()).map(|i| a[(i + d) % a.len()]).collect())
            .collect();
        for s in [
            0.0f32,
            -0.0,
            2f32.powi(-24),
            65504.0,
            -65504.0,
            f32::INFINITY,
            f32::NAN,
        ] {
            partners.push(vec![s; a.len()]);
        }
        let mut out = vec![0.0f32; a.len()];
        for b in &partners {
            for op in [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Max] {
                for len in [a.len(), 1001] {
                    k.binary(op, &a[..len], &b[..len], &mut out[..len]);
                    for ((x, y), o) in a.iter().zip(b).zip(&out[..len]) {
                        let (x, y) = (f64::from(*x), f64::from(*y));
                        let want = match op {
                            BinOp::Add => FP16.round(x + y),
                            BinOp::Sub => FP16.round(x - y),
                            BinOp::Mul => FP16.round(x * y),
                            BinOp::Max => mfu::max(x, y),
                        };
                        let got = f64::from(*o);
                        assert_eq!(nan_bits(got), nan_bits(want), "{op:?}({x:e}, {y:e})");
                    }
                }
            }
        }
    }

    /// Every pair of fp16 values (2^32 of them) for add, subtract and multiply, against the
    /// f64 kernels (`mfu::binary`, themselves tested against `nnp_numerics`). Minutes in a
    /// debug build, seconds in release:
    /// `cargo test --release -p nnp-exec every_fp16_pair -- --ignored`.
    #[test]
    #[ignore]
    fn every_fp16_pair_rounds_as_the_f64_kernels() {
        let k = kernels();
        let b = every_fp16();
        let b64: Vec<f64> = b.iter().map(|v| f64::from(*v)).collect();
        let (mut out, mut want, mut a64) = (vec![0.0f32; b.len()], vec![0.0; b.len()], vec![]);
        for op in [BinOp::Add, BinOp::Sub, BinOp::Mul] {
            for x in &b {
                let a = vec![*x; b.len()];
                a64.clear();
                a64.extend(a.iter().map(|v| f64::from(*v)));
                k.binary(op, &a, &b, &mut out);
                mfu::binary(op, &FP16, &a64, &b64, &mut want, [true, true]);
                for ((o, w), y) in out.iter().zip(&want).zip(&b) {
                    assert_eq!(
                        nan_bits(f64::from(*o)),
                        nan_bits(*w),
                        "{op:?}({x:e}, {y:e})"
                    );
                }
            }
        }
    }

    /// Rounding f64 operands to fp16 on the way in (to odd in f32, then to fp16): every fp16
    /// value, and each finite one times `1 + 2^j` for `j` from -8 to -52 (the ties of fp16,
    /// the points beside them, and bits that only a sticky bit below f32's precision keeps),
    /// beyond the range, at the subnormal boundary, below f32's normals, NaNs and infinities,
    /// equal to `nnp_numerics`' rounding. `rounded` converts fp16 values exactly.
    #[test]
    fn narrowing_rounds_f64_to_fp16_as_the_contract() {
        let k = kernels();
        let fp16: Vec<f64> = every_fp16().iter().map(|v| f64::from(*v)).collect();
        let mut x = fp16.clone();
        let finite: Vec<f64> = fp16.iter().copied().filter(|v| v.is_finite()).collect();
        for j in [-8, -11, -12, -13, -24, -25, -29, -30, -40, -52] {
            x.extend(finite.iter().map(|v| v * (1.0 + 2f64.powi(j))));
            x.extend(finite.iter().map(|v| v * (1.0 - 2f64.powi(j))));
        }
        x.extend([
            65519.0,
            65520.0,
            65520.0 - 2f64.powi(-30),
            -65520.0,
            1e300,
            -1e300,
            f64::MAX,
            2f64.powi(-25),
            2f64.powi(-25) * (1.0 + 2f64.powi(-40)),
            -2f64.powi(-25) * (1.0 + 2f64.powi(-52)),
            3.0 * 2f64.powi(-26),
            2f64.powi(-130),
            -2f64.powi(-140),
            f64::MIN_POSITIVE,
            5e-324,
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7FF0_0000_0000_0001),
        ]);
        let mut out = vec![0.0f32; x.len()];
        for len in [x.len(), 1003] {
            k.narrow(&x[..len], false, &mut out[..len]);
            for (v, o) in x.iter().zip(&out[..len]) {
                let got = f64::from(*o);
                assert_eq!(nan_bits(got), nan_bits(FP16.round(*v)), "fp16({v:e})");
            }
        }
        k.narrow(&fp16, true, &mut out[..fp16.len()]);
        for (v, o) in fp16.iter().zip(&out) {
            assert_eq!(nan_bits(f64::from(*o)), nan_bits(*v), "{v:e} as it is");
        }
    }

    /// relu on every fp16 value and NaNs with payloads: `x > 0 ? x : +0`, NaN stays NaN.
    #[test]
    fn relu_keeps_positives_and_nans() {
        let k = kernels();
        let mut x = every_fp16();
        x.extend(ODD_NANS.map(f32::from_bits));
        let mut out = vec![1.0f32; x.len()];
        k.relu(&x, &mut out);
        for (v, o) in x.iter().zip(&out) {
            let want = if *v > 0.0 || v.is_nan() { *v } else { 0.0 };
            assert_eq!(
                nan_bits(f64::from(*o)),
                nan_bits(f64::from(want)),
                "relu({v:e})"
            );
            if !v.is_nan() {
                assert_eq!(o.to_bits(), want.to_bits(), "relu({v:e}): +0");
            }
        }
    }

    /// The built-in tables on every fp16 value and NaNs with payloads, against the function
    /// in f64 rounded by `nnp_numerics`; and a table file whose entries are all finite and
    /// differ between NaN patterns, where every NaN must read the canonical NaN's entry, as
    /// the f64 lookup (`ActTable::apply`) does.
    #[test]
    fn activations_look_up_every_fp16_value_and_nans_at_the_canonical_entry() {
        let k = kernels();
        let mut x = every_fp16();
        x.extend(ODD_NANS.map(f32::from_bits));
        let mut out = vec![0.0f32; x.len()];
        for f in Activation::ALL {
            let t = mfu::ActTable::load(f, &FP16, None).expect("built-in");
            let kind = f;
            for len in [x.len(), 1005] {
                k.activate(&t, &x[..len], &mut out[..len]);
                for (v, o) in x.iter().zip(&out[..len]) {
                    let want = FP16.round(activation::eval(kind, f64::from(*v)));
                    assert_eq!(nan_bits(f64::from(*o)), nan_bits(want), "{f:?}({v:e})");
                }
            }
        }
        // Entry i = i without its top two bits: finite everywhere, and the NaN patterns
        // 0x7E00 (canonical), 0x7C01 and 0x7E08 read 1.5, 1.0009766 and 1.5078125.
        let dir = std::env::temp_dir().join(format!("nnpc-f16c-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("masked.bin");
        let bytes: Vec<u8> = (0..=u16::MAX)
            .flat_map(|i| (i & 0x3FFF).to_le_bytes())
            .collect();
        std::fs::write(&path, bytes).expect("table written");
        let t = mfu::ActTable::load(Activation::Sigmoid, &FP16, path.to_str()).expect("table file");
        std::fs::remove_dir_all(&dir).ok();
        k.activate(&t, &x, &mut out);
        for (v, o) in x.iter().zip(&out) {
            let want = if v.is_nan() {
                1.5
            } else {
                t.apply(f64::from(*v))
            };
            assert_eq!(f64::from(*o).to_bits(), want.to_bits(), "table({v:e})");
        }
    }
}
