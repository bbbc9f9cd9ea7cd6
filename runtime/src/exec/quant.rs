//! Quantize and round kernels over slices.
//!
//! Fast paths (bit tricks on f64, branch-light loops) for the common cases: BFP with a
//! deterministic rounding mode and an exponent range that fits f64 scaling, MX likewise, and
//! nearest-even, nearest-away and toward-zero rounding to an IEEE-style float format
//! (`FastRound`, `DirectedRound`). Everything else calls the scalar reference of
//! `nnp_numerics` (per run for [`Format::quantize`], per element for [`FloatFormat::round`]).
//! The fast paths are tested bit-equal against the reference on adversarial data.

use nnp_numerics::format::{BfpFormat, MxElem};
use nnp_numerics::{FloatFormat, Format, Overflow, Rounding, floor_log2, pow2};
use rayon::prelude::*;

/// A function or method whose loop runs in a copy compiled for AVX2 where the CPU has it (4 f64
/// lanes instead of SSE2's 2; the same IEEE operations, so the same bits), else as built:
/// `avx2_copy! { fn name / name_avx2 / name_body (&self, args) -> R }` defines `name`, which
/// calls `name_body` (an `#[inline(always)]` function or method of the same arguments) from the
/// right copy (`&self` and `-> R` are optional). Unlike [`vectorized`]'s closure, an
/// `#[inline(always)]` body is always inlined.
macro_rules! avx2_copy {
    ($(#[$doc:meta])* $vis:vis fn $name:ident / $avx2:ident / $body:ident
        (&self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?) => {
        $(#[$doc])*
        $vis fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                return unsafe { self.$avx2($($arg),*) };
            }
            self.$body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2(&self $(, $arg: $ty)*) $(-> $ret)? {
            self.$body($($arg),*)
        }
    };
    ($(#[$doc:meta])* $vis:vis fn $name:ident / $avx2:ident / $body:ident
        ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                return unsafe { $avx2($($arg),*) };
            }
            $body($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2($($arg: $ty),*) $(-> $ret)? {
            $body($($arg),*)
        }
    };
}
pub(crate) use avx2_copy;

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

/// Round every element of `x` to `fmt` (as [`FloatFormat::round`]).
pub fn round_slice(fmt: &FloatFormat, x: &[f64], out: &mut [f64]) {
    par_pieces(x, out, 4096, |(xs, os)| round_seq(fmt, xs, os));
}

/// [`round_slice`] on the calling thread (for a caller that is one parallel task already).
pub(crate) fn round_seq(fmt: &FloatFormat, x: &[f64], out: &mut [f64]) {
    Rounder::new(fmt).round_all(x, out)
}

/// Rounding to a float format by the fastest exact rounder that applies: nearest-even
/// ([`FastRound`]), away or toward zero ([`DirectedRound`]), else the reference
/// (`FloatFormat::round`, position 0 for stochastic rounding).
#[derive(Clone, Copy)]
pub(crate) enum Rounder {
    NearestEven(FastRound),
    Directed(DirectedRound),
    Reference(FloatFormat),
}

impl Rounder {
    pub(crate) fn new(fmt: &FloatFormat) -> Self {
        match (FastRound::new(fmt), DirectedRound::new(fmt)) {
            (Some(f), _) => Rounder::NearestEven(f),
            (None, Some(d)) => Rounder::Directed(d),
            (None, None) => Rounder::Reference(*fmt),
        }
    }

    /// The nearest-even rounder, where the format has one.
    pub(crate) fn nearest_even(&self) -> Option<&FastRound> {
        match self {
            Rounder::NearestEven(f) => Some(f),
            _ => None,
        }
    }

    /// Whether a fast rounder applies (the reference is the fallback).
    pub(crate) fn is_fast(&self) -> bool {
        !matches!(self, Rounder::Reference(_))
    }

    #[inline]
    pub(crate) fn round(&self, x: f64) -> f64 {
        match self {
            Rounder::NearestEven(f) => f.round(x),
            Rounder::Directed(d) => d.round(x),
            Rounder::Reference(fmt) => fmt.round(x),
        }
    }

    /// `out[i] = round(x[i])`, with a fast rounder's AVX2 copy where one applies.
    pub(crate) fn round_all(&self, x: &[f64], out: &mut [f64]) {
        match self {
            Rounder::NearestEven(f) => f.round_all(x, out),
            Rounder::Directed(d) => d.round_all(x, out),
            Rounder::Reference(fmt) => {
                (x.iter().zip(out.iter_mut())).for_each(|(v, o)| *o = fmt.round(*v))
            }
        }
    }
}

/// Whether rounding to `fmt` can work on f64's bits ([`FastRound`], [`DirectedRound`]): it
/// has subnormals, and its exponent and significand fit inside f64's with room for the
/// subnormal quantum's scaling.
fn bit_roundable(fmt: &FloatFormat) -> bool {
    fmt.subnormals && (2..=10).contains(&fmt.exp_bits) && fmt.mant_bits <= 50
}

/// Nearest-even rounding of an f64 to a float format with subnormals, from the bits.
/// Branch-free (both paths computed, then selected), so loops over it vectorise.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastRound {
    /// Mantissa bits dropped from f64's 52 for a normal result.
    pub(crate) shift: u32,
    /// `2^(shift - 1) - 1`: added with the kept lsb, rounds the dropped bits to nearest-even.
    pub(crate) half: u64,
    /// The dropped bits.
    pub(crate) mask: u64,
    /// Bits of `2^emin`, the smallest normal of the format: magnitudes below take the
    /// subnormal path.
    pub(crate) emin_bits: u64,
    /// `2^(emin - mant_bits + 52)`: adding and subtracting it rounds a subnormal-range value to
    /// the format's subnormal quantum with the FPU's own nearest-even.
    pub(crate) magic: f64,
    pub(crate) max: f64,
    /// What a magnitude above `max` becomes: `max` (saturating) or infinity.
    pub(crate) over: f64,
}

impl FastRound {
    /// The fast rounder for `fmt`, when its mode and range allow one.
    pub(crate) fn new(fmt: &FloatFormat) -> Option<FastRound> {
        if fmt.rounding != Rounding::NearestEven || !bit_roundable(fmt) {
            return None;
        }
        let emin = 1 - fmt.bias();
        let shift = 52 - fmt.mant_bits;
        let max = fmt.max_value();
        Some(FastRound {
            shift,
            half: (1u64 << (shift - 1)) - 1,
            mask: (1u64 << shift) - 1,
            emin_bits: pow2(emin).to_bits(),
            magic: pow2(emin - fmt.mant_bits as i32 + 52),
            max,
            over: if fmt.overflow == Overflow::Saturate {
                max
            } else {
                f64::INFINITY
            },
        })
    }

    avx2_copy! {
        /// `out[i] = round(x[i])`.
        pub(crate) fn round_all / round_all_avx2 / round_all_body
            (&self, x: &[f64], out: &mut [f64])
    }

    #[inline(always)]
    fn round_all_body(&self, x: &[f64], out: &mut [f64]) {
        for (v, o) in x.iter().zip(out.iter_mut()) {
            *o = self.round(*v);
        }
    }

    avx2_copy! {
        /// Round exact sums in place; an exact zero is +0 (an integer accumulator has no
        /// signed zero). Branch-free: both results computed, then selected.
        pub(crate) fn round_sums / round_sums_avx2 / round_sums_body (&self, s: &mut [f64])
    }

    #[inline(always)]
    fn round_sums_body(&self, s: &mut [f64]) {
        for v in s.iter_mut() {
            *v = self.round_sum(*v);
        }
    }

    avx2_copy! {
        /// `out[k]` = the exact sum `a[k] * (w[k] * x)` rounded as [`FastRound::round_sums`]
        /// does: integer sums on common units, scaled by powers of two (`w[k] * x` and the
        /// product are exact where the caller's units fit f64), in one pass straight into the
        /// output.
        pub(crate) fn round_scaled_ints / round_scaled_ints_avx2 / round_scaled_ints_body
            (&self, a: &[i32], w: &[f64], x: f64, out: &mut [std::mem::MaybeUninit<f64>])
    }

    #[inline(always)]
    fn round_scaled_ints_body(
        &self,
        a: &[i32],
        w: &[f64],
        x: f64,
        out: &mut [std::mem::MaybeUninit<f64>],
    ) {
        for ((o, &a), &w) in out.iter_mut().zip(a).zip(w) {
            o.write(self.round_sum(f64::from(a) * (w * x)));
        }
    }

    /// An exact sum rounded; an exact zero is +0.
    #[inline(always)]
    fn round_sum(&self, v: f64) -> f64 {
        let r = self.round(v);
        if v == 0.0 { 0.0 } else { r }
    }

    #[inline]
    pub(crate) fn round(&self, x: f64) -> f64 {
        let bits = x.to_bits();
        let sign = bits & (1u64 << 63);
        let mag = bits & !(1u64 << 63);
        // Normal range: round the significand to nearest-even at bit `shift`; a carry moves
        // the exponent (infinity stays infinity; a NaN's garbage is not selected).
        let odd = (mag >> self.shift) & 1;
        let normal = f64::from_bits(mag.wrapping_add(self.half + odd) & !self.mask);
        // Subnormal range of the format: round to its fixed quantum.
        let ax = f64::from_bits(mag);
        let sub = (ax + self.magic) - self.magic;
        let r = if mag >= self.emin_bits { normal } else { sub };
        let r = if r > self.max { self.over } else { r };
        let r = f64::from_bits(r.to_bits() | sign);
        if x.is_nan() { x } else { r }
    }
}

/// Nearest-away and toward-zero rounding of an f64 to a float format with subnormals, from the
/// bits, as [`FastRound`] rounds to nearest-even: in the normal range, half a unit added
/// (away) or nothing (toward zero), then the dropped bits cleared; in the subnormal range, at
/// the format's quantum `q`: `x / q` truncated and, away, 1 added where the dropped fraction
/// is a half or more (each step exact). Toward zero never overflows to infinity.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirectedRound {
    away: bool,
    half: u64,
    mask: u64,
    emin_bits: u64,
    quantum: f64,
    inv_quantum: f64,
    max: f64,
    /// What a finite magnitude above `max` becomes: infinity (away, `overflow = inf`) or `max`.
    over: f64,
    /// What an infinity becomes: itself, or `max` where the format saturates.
    inf: f64,
}

impl DirectedRound {
    /// The rounder for `fmt`, when it rounds away or toward zero and its range allows one.
    pub(crate) fn new(fmt: &FloatFormat) -> Option<DirectedRound> {
        let away = match fmt.rounding {
            Rounding::NearestAway => true,
            Rounding::TowardZero => false,
            _ => return None,
        };
        if !bit_roundable(fmt) {
            return None;
        }
        let emin = 1 - fmt.bias();
        let shift = 52 - fmt.mant_bits;
        let q = emin - fmt.mant_bits as i32;
        let max = fmt.max_value();
        let saturate = fmt.overflow == Overflow::Saturate;
        Some(DirectedRound {
            away,
            half: 1u64 << (shift - 1),
            mask: (1u64 << shift) - 1,
            emin_bits: pow2(emin).to_bits(),
            quantum: pow2(q),
            inv_quantum: pow2(-q),
            max,
            over: if saturate || !away {
                max
            } else {
                f64::INFINITY
            },
            inf: if saturate { max } else { f64::INFINITY },
        })
    }

    avx2_copy! {
        /// `out[i] = round(x[i])`.
        pub(crate) fn round_all / round_all_avx2 / round_all_body
            (&self, x: &[f64], out: &mut [f64])
    }

    #[inline(always)]
    fn round_all_body(&self, x: &[f64], out: &mut [f64]) {
        let pairs = x.iter().zip(out.iter_mut());
        match self.away {
            true => pairs.for_each(|(v, o)| *o = self.round_as::<true>(*v)),
            false => pairs.for_each(|(v, o)| *o = self.round_as::<false>(*v)),
        }
    }

    #[inline]
    pub(crate) fn round(&self, x: f64) -> f64 {
        match self.away {
            true => self.round_as::<true>(x),
            false => self.round_as::<false>(x),
        }
    }

    #[inline(always)]
    fn round_as<const AWAY: bool>(&self, x: f64) -> f64 {
        let bits = x.to_bits();
        let sign = bits & (1u64 << 63);
        let mag = bits & !(1u64 << 63);
        // Normal range (a carry moves the exponent; infinity stays infinity).
        let up = if AWAY { self.half } else { 0 };
        let normal = f64::from_bits(mag.wrapping_add(up) & !self.mask);
        // Subnormal range: whole quanta, exactly.
        let ax = f64::from_bits(mag);
        let y = ax * self.inv_quantum;
        let t = y.trunc();
        let t = if AWAY && y - t >= 0.5 { t + 1.0 } else { t };
        let sub = t * self.quantum;
        let r = if mag >= self.emin_bits { normal } else { sub };
        let r = if r <= self.max {
            r
        } else if ax == f64::INFINITY {
            self.inf
        } else {
            self.over
        };
        let r = f64::from_bits(r.to_bits() | sign);
        if x.is_nan() { x } else { r }
    }
}

/// Fake-quantize `x` in runs of `len` lanes along it, each run as [`Format::quantize`] sees it
/// at native dimension `native`.
pub fn quantize_runs(fmt: &Format, x: &[f64], len: usize, native: usize, out: &mut [f64]) {
    let len = len.max(1);
    let run = |(xs, os): (&[f64], &mut [f64])| quantize_seq(fmt, xs, len, native, os);
    if x.len() >= PAR_MIN && x.len().is_multiple_of(len) {
        let chunk = len * (4096 / len).max(1);
        x.par_chunks(chunk)
            .zip(out.par_chunks_mut(chunk))
            .for_each(run);
    } else {
        run((x, out));
    }
}

/// [`quantize_runs`] on the calling thread (for a caller that is one parallel task already).
pub(crate) fn quantize_seq(fmt: &Format, x: &[f64], len: usize, native: usize, out: &mut [f64]) {
    let len = len.max(1);
    match fmt {
        Format::Bfp(b) => {
            if let Some(f) = FastBfp::new(b, native) {
                return f.runs(x, out, len);
            }
        }
        Format::Mx(m) => {
            if let Some(f) = FastMx::new(m, native) {
                return f.runs(x, out, len);
            }
        }
        // Element by element: the run's positions matter to stochastic rounding only, which
        // has no fast rounder.
        Format::Float(f) => {
            let r = Rounder::new(f);
            if r.is_fast() {
                return r.round_all(x, out);
            }
        }
        _ => {}
    }
    for (xr, or) in x.chunks(len).zip(out.chunks_mut(len)) {
        fmt.quantize(xr, native, or);
    }
}

/// MX (OCP microscaling) with a deterministic rounding mode, as `nnp_numerics`' reference
/// computes it per block: the shared exponent `s = floor_log2(amax) - emax_elem` (at least
/// -127; above 127, or a non-finite element, makes the block NaN), then every element `x *
/// 2^-s` rounded on the element type's grid (quantum `2^(max(e, emin) - mant)` for its
/// exponent `e`), saturated at the element's largest value, times `2^s` (an INT8 zero is +0,
/// an fp element keeps the sign of zero). The scaling by `2^-s` is exact except where
/// `x * 2^-s` falls below f64's normals, far below the element's smallest subnormal, where
/// every mode gives zero either way.
#[derive(Clone, Copy, Debug, PartialEq)]
struct FastMx {
    block: usize,
    emax: i32,
    emin: i32,
    mant: i32,
    max: f64,
    /// Added to every result: -0 (an fp element keeps the sign of zero) or, for INT8 (two's
    /// complement, no -0), +0, which turns a -0 into +0 and leaves every other value alone.
    zero: f64,
    rounding: Rounding,
}

impl FastMx {
    fn new(m: &nnp_numerics::format::MxFormat, n: usize) -> Option<FastMx> {
        if matches!(m.rounding, Rounding::Stochastic { .. }) {
            return None;
        }
        let elem = m.elem.mini();
        Some(FastMx {
            block: m.block.len(n),
            emax: m.elem.emax(),
            emin: elem.emin,
            mant: elem.mant_bits as i32,
            max: elem.max_value(),
            zero: if m.elem == MxElem::Int8 { 0.0 } else { -0.0 },
            rounding: m.rounding,
        })
    }

    avx2_copy! {
        /// Every run of `len` lanes, in blocks of the format's length.
        fn runs / runs_avx2 / runs_body (&self, x: &[f64], out: &mut [f64], len: usize)
    }

    #[inline(always)]
    fn runs_body(&self, x: &[f64], out: &mut [f64], len: usize) {
        for (xr, or) in x.chunks(len).zip(out.chunks_mut(len)) {
            for (xb, ob) in xr.chunks(self.block).zip(or.chunks_mut(self.block)) {
                match self.rounding {
                    Rounding::NearestEven => self.block(xb, ob, f64::round_ties_even),
                    Rounding::NearestAway => self.block(xb, ob, f64::round),
                    _ => self.block(xb, ob, f64::trunc),
                }
            }
        }
    }

    #[inline(always)]
    fn block(&self, x: &[f64], out: &mut [f64], round: impl Fn(f64) -> f64) {
        // The largest magnitude by bit pattern; every non-finite pattern is above every
        // finite one (as in `FastBfp::scale`).
        let top = x
            .iter()
            .fold(0u64, |m, v| m.max(v.to_bits() & !(1u64 << 63)));
        if top >= f64::INFINITY.to_bits() {
            out.fill(f64::NAN);
            return;
        }
        let s = if top == 0 {
            -127
        } else {
            (floor_log2(f64::from_bits(top)) - self.emax).max(-127)
        };
        if s > 127 {
            // The E8M0 scale's NaN.
            out.fill(f64::NAN);
            return;
        }
        let (down, up) = (pow2(-s), pow2(s));
        for (v, o) in x.iter().zip(out.iter_mut()) {
            let y = v * down;
            // The element quantum's exponent from y's exponent field (a subnormal y counts
            // as below `emin`).
            let e = ((y.to_bits() >> 52) & 0x7FF) as i32 - 1023;
            let q = e.max(self.emin) - self.mant;
            let r = round(y * pow2_bits(-q)) * pow2_bits(q);
            *o = r.abs().min(self.max).copysign(y) * up + self.zero;
        }
    }
}

/// `2^e` for `-1022 <= e <= 1023`, from the bits (no table, no branch: it vectorises).
#[inline(always)]
fn pow2_bits(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// BFP with nearest-even, nearest-away or toward-zero and a shared exponent range whose scale
/// factors are normal f64 powers of two: `x * 2^-lsb` is then exact (or far below 1/2, where
/// every mode gives 0), so the integer mantissa is one f64 rounding away.
#[derive(Clone, Copy, Debug, PartialEq)]
struct FastBfp {
    block: usize,
    lo: i32,
    hi: i32,
    mant: i32,
    max: f64,
    /// Most negative mantissa (`-max` or `-max - 1` with `range = full`).
    min: f64,
    rounding: Rounding,
}

impl FastBfp {
    fn new(b: &BfpFormat, n: usize) -> Option<FastBfp> {
        let (lo, hi) = b.exp_range();
        let mant = b.mant as i32;
        let ok = !matches!(b.rounding, Rounding::Stochastic { .. })
            && (2..=32).contains(&mant)
            && lo - mant >= -1000
            && hi + mant <= 1000;
        if !ok {
            return None;
        }
        let max = b.max_mant() as f64;
        Some(FastBfp {
            block: b.block.len(n),
            lo,
            hi,
            mant,
            max,
            min: if b.full_range { -max - 1.0 } else { -max },
            rounding: b.rounding,
        })
    }

    #[inline(always)]
    fn run(&self, x: &[f64], out: &mut [f64]) {
        for (xb, ob) in x.chunks(self.block).zip(out.chunks_mut(self.block)) {
            self.block(xb, ob);
        }
    }

    avx2_copy! {
        /// [`FastBfp::run`] over every run of `len` lanes.
        fn runs / runs_avx2 / runs_body (&self, x: &[f64], out: &mut [f64], len: usize)
    }

    #[inline(always)]
    fn runs_body(&self, x: &[f64], out: &mut [f64], len: usize) {
        for (xr, or) in x.chunks(len).zip(out.chunks_mut(len)) {
            self.run(xr, or);
        }
    }

    #[inline(always)]
    fn block(&self, x: &[f64], out: &mut [f64]) {
        let Some((s, _)) = self.scale(x) else {
            // A non-finite element makes the whole block NaN.
            out.fill(f64::NAN);
            return;
        };
        // `+ 0.0` turns a -0 mantissa into +0, as the integer mantissa has no sign.
        self.apply(&s, x, out, |o: &mut f64, m: f64| *o = m * s.up + 0.0);
    }

    /// The integer mantissas of one block and the exponent of their unit (`block` gives
    /// `q * 2^lsb`), or `None` for a block with a non-finite element.
    #[inline(always)]
    fn mantissas(&self, x: &[f64], q: &mut [i16]) -> Option<i32> {
        let (s, lsb) = self.scale(x)?;
        // Every mantissa is a whole number within `[min, max]`, inside `i16` (`BfpInts`).
        self.apply(&s, x, q, |o: &mut i16, m: f64| *o = to_i16(m).0);
        Some(lsb)
    }

    /// `s` over the block with the format's rounding, each mantissa handed to `put`: one loop
    /// per rounding mode, so each vectorises.
    #[inline(always)]
    fn apply<T>(&self, s: &Scale, x: &[f64], out: &mut [T], put: impl Fn(&mut T, f64)) {
        match self.rounding {
            Rounding::NearestEven => s.apply(x, out, round_even, put),
            Rounding::NearestAway => s.apply(x, out, f64::round, put),
            _ => s.apply(x, out, f64::trunc, put),
        }
    }

    /// The block's scaling and the exponent of its mantissas' unit, or `None` for a block
    /// with a non-finite element.
    #[inline(always)]
    fn scale(&self, x: &[f64]) -> Option<(Scale, i32)> {
        // The largest magnitude gives the shared exponent (floor(log2) is monotone in |x|).
        // For non-negative f64 the bit patterns order as the values, and every non-finite
        // pattern is above every finite one: one branch-free integer max finds both.
        let top = x
            .iter()
            .fold(0u64, |m, v| m.max(v.to_bits() & !(1u64 << 63)));
        if top >= f64::INFINITY.to_bits() {
            return None;
        }
        let amax = f64::from_bits(top);
        let e = if amax == 0.0 {
            self.lo
        } else {
            floor_log2(amax).clamp(self.lo, self.hi)
        };
        let lsb = e - (self.mant - 2);
        // Clamp first (keeps the rounding trick in range), round, clamp to the mantissa range.
        let s = Scale {
            down: pow2(-lsb),
            up: pow2(lsb),
            bound: self.max + 1.0,
            lo: self.min,
            hi: self.max,
        };
        Some((s, lsb))
    }
}

/// BFP whose blocks are whole runs of the native dimension, quantized straight to integer
/// mantissas for the integer kernel ([`super::intdot::IntVector::quantized`]): the one pass
/// that stands for a vector's `quantize` and its conversion to integers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BfpInts(FastBfp);

impl BfpInts {
    /// `fmt` at native dimension `n`, when it is BFP with blocks of `n` lanes, a rounding
    /// `FastBfp` computes, and mantissas of magnitude below `limit`.
    pub fn new(fmt: &Format, n: usize, limit: i32) -> Option<BfpInts> {
        let Format::Bfp(b) = fmt else { return None };
        let f = FastBfp::new(b, n)?;
        (f.block == n && -f.min < f64::from(limit)).then_some(BfpInts(f))
    }

    /// The mantissas of one run of `n` lanes into `q` and the exponent of their unit, or
    /// `None` for a run with a non-finite element: [`quantize_runs`] gives `q * 2^lsb`.
    /// Inlined into its caller, so that an AVX2 copy of the caller vectorises it.
    #[inline(always)]
    pub fn run(&self, x: &[f64], q: &mut [i16]) -> Option<i32> {
        self.0.mantissas(x, q)
    }
}

/// One BFP block's scaling: `x * down`, clamped to `±bound`, rounded, clamped to `[lo, hi]`:
/// the mantissa, which `put` stores (times `up` for the quantized value).
struct Scale {
    down: f64,
    up: f64,
    bound: f64,
    lo: f64,
    hi: f64,
}

impl Scale {
    #[inline]
    fn apply<T>(
        &self,
        x: &[f64],
        out: &mut [T],
        round: impl Fn(f64) -> f64,
        put: impl Fn(&mut T, f64),
    ) {
        for (v, o) in x.iter().zip(out.iter_mut()) {
            let y = (v * self.down).clamp(-self.bound, self.bound);
            put(o, round(y).clamp(self.lo, self.hi));
        }
    }
}

/// `1.5 * 2^52`: for `|y| <= 2^51`, `y + MAGIC` lies in `[2^52, 2^53)`, where f64's unit is 1,
/// so the addition rounds `y` to an integer, held in the low bits of the sum.
const MAGIC: f64 = 6755399441055744.0;

/// Nearest-even to an integer for `|y| <= 2^51` (the FPU rounds the addition).
#[inline]
fn round_even(y: f64) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Adversarial f64 values around the fp16/bf16/fp32 decision points: ties, one ulp either
    /// side, subnormal boundaries, overflow threshold, zeros, non-finite.
    fn adversarial() -> Vec<f64> {
        let mut v = vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
            5e-324,
            1e300,
            -1e300,
        ];
        for e in -160..140 {
            for m in [
                1.0,
                1.5,
                1.0 + 2f64.powi(-10),
                1.0 + 2f64.powi(-11),
                1.0 + 3.0 * 2f64.powi(-11),
            ] {
                let x = m * 2f64.powi(e);
                for d in [-2i64, -1, 0, 1, 2] {
                    let y = f64::from_bits((x.to_bits() as i64 + d) as u64);
                    v.push(y);
                    v.push(-y);
                }
            }
        }
        // A deterministic pseudo-random sweep (xorshift) over many binades.
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let e = (s % 120) as i32 - 70;
            let frac = (s >> 11) as f64 / (1u64 << 53) as f64;
            v.push((1.0 + frac) * 2f64.powi(e) * if s & 1 == 1 { -1.0 } else { 1.0 });
        }
        v
    }

    /// [`to_i16`] on every `i16` (both zeros, the extremes) gives it back and says it is
    /// whole; halfway and quarter points between them are not whole and give the nearest-even
    /// integer's low 16 bits (the caller refuses them).
    #[test]
    fn to_i16_is_exact_on_every_i16() {
        for k in i16::MIN..=i16::MAX {
            let y = f64::from(k);
            assert_eq!(to_i16(y), (k, true), "{k}");
            for d in [0.25, 0.5, 0.75] {
                let want = (y + d).round_ties_even() as i32 as i16;
                assert_eq!(to_i16(y + d), (want, false), "{k} + {d}");
            }
        }
        assert_eq!(to_i16(-0.0), (0, true));
    }

    fn same(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// The nearest-even, nearest-away and toward-zero rounders against the reference, bit for
    /// bit, on the adversarial values (ties and one ulp either side at every binade, subnormal
    /// boundaries, the overflow thresholds, zeros, infinities, NaN), element by element and
    /// through their AVX2 loops, on formats with and without saturation, from 3 to 50 mantissa
    /// bits; and on every fp16 value halved, so that every fp16 tie is met.
    #[test]
    fn fast_rounders_match_reference() {
        let mut data = adversarial();
        data.extend((0..=u16::MAX).map(|b| f64::from(half::f16::from_bits(b)) * 0.5));
        let mut sat = FloatFormat::FP16;
        sat.overflow = Overflow::Saturate;
        for base in [
            FloatFormat::FP16,
            FloatFormat::BF16,
            FloatFormat::FP32,
            FloatFormat::ieee(5, 2),
            FloatFormat::ieee(4, 3),
            FloatFormat::ieee(10, 50),
            sat,
        ] {
            for rounding in [
                Rounding::NearestEven,
                Rounding::NearestAway,
                Rounding::TowardZero,
            ] {
                let fmt = FloatFormat { rounding, ..base };
                // Each mode has its bit rounder: nearest-even, or directed.
                let r = Rounder::new(&fmt);
                let nearest_even = rounding == Rounding::NearestEven;
                match r {
                    Rounder::NearestEven(_) => assert!(nearest_even, "{fmt:?}"),
                    Rounder::Directed(_) => assert!(!nearest_even, "{fmt:?}"),
                    Rounder::Reference(_) => panic!("{fmt:?} has no bit rounder"),
                }
                let one = |x: f64| r.round(x);
                let mut all = vec![0.0; data.len()];
                r.round_all(&data, &mut all);
                for (x, a) in data.iter().zip(&all) {
                    let want = fmt.round(*x);
                    assert!(
                        same(one(*x), want),
                        "{fmt:?} x = {x:e}: {} want {want:e}",
                        one(*x)
                    );
                    assert!(
                        same(*a, want),
                        "{fmt:?} x = {x:e} (loop): {a:e} want {want:e}"
                    );
                }
            }
        }
    }

    /// Integer sums on common units, scaled by powers of two and rounded in one pass, equal
    /// `FloatFormat::round` of the same exact value (an exact zero is +0): ties at every
    /// format's precision, sums near i32's limits, units that underflow to zero or subnormals
    /// and overflow to infinity or the saturation value. Through `ExactSums`, so a format with
    /// no fast rounder (stochastic) takes its element-by-element fallback, and toward zero its
    /// directed rounder.
    #[test]
    fn scaled_integer_sums_round_as_the_format_does() {
        use std::mem::MaybeUninit;
        let mut sat = FloatFormat::FP16;
        sat.overflow = Overflow::Saturate;
        let mut trunc = FloatFormat::FP16;
        trunc.rounding = Rounding::TowardZero;
        let mut a: Vec<i32> = vec![0, 1, -1, i32::MAX, i32::MIN, i32::MIN + 1, 65504, 65520];
        for bits in [8, 11, 12, 24, 25, 30] {
            let p = 1i32 << bits;
            a.extend([
                p + 1,
                p + 2,
                p + 3,
                p - 1,
                -(p + 1),
                -(p + 3),
                p + p / 2 + 1,
            ]);
        }
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2000 {
            let r = crate::exec::intdot::tests::xorshift(&mut s);
            a.push((r >> 32) as i32 >> (r % 31));
        }
        // Row units 2^-40 .. 2^20 in turn; item units chosen so the product spans fp16's
        // subnormals, normals and overflow.
        let w: Vec<f64> = (0..a.len()).map(|k| pow2((k % 61) as i32 - 40)).collect();
        let mut stochastic = FloatFormat::FP16;
        stochastic.rounding = Rounding::Stochastic { seed: 11 };
        for fmt in [FloatFormat::FP16, FloatFormat::BF16, sat, trunc, stochastic] {
            let sums = super::super::matmul::ExactSums::new(&fmt);
            for xu in [-30, -12, 0, 6] {
                let x = pow2(xu);
                let mut out = vec![MaybeUninit::new(f64::NAN); a.len()];
                sums.round_scaled_ints(&a, &w, x, &mut out);
                for ((o, &a), &w) in out.iter().zip(&a).zip(&w) {
                    // SAFETY: every element was initialised above.
                    let got = unsafe { o.assume_init() };
                    let exact = f64::from(a) * w * x;
                    let want = if a == 0 { 0.0 } else { fmt.round(exact) };
                    assert_eq!(got.to_bits(), want.to_bits(), "{fmt:?} {a} * {w:e} * {x:e}");
                }
            }
        }
        assert!(
            FastRound::new(&trunc).is_none() && DirectedRound::new(&trunc).is_some(),
            "the directed rounder is exercised"
        );
        assert!(
            FastRound::new(&stochastic).is_none() && DirectedRound::new(&stochastic).is_none(),
            "the fallback is exercised"
        );
    }

    #[test]
    fn fp16_rounding_by_hand() {
        let f = FastRound::new(&FloatFormat::FP16).expect("fp16");
        // 1 + 2^-11 is the tie between 1 and 1 + 2^-10: even is 1.
        assert_eq!(f.round(1.0 + 2f64.powi(-11)), 1.0);
        // 1 + 3 * 2^-11 ties to the even 1 + 2^-9.
        assert_eq!(f.round(1.0 + 3.0 * 2f64.powi(-11)), 1.0 + 2f64.powi(-9));
        // Half the smallest subnormal 2^-25 ties to 0; just above goes to 2^-24.
        assert_eq!(f.round(2f64.powi(-25)).to_bits(), 0);
        assert_eq!(f.round(2f64.powi(-25) * 1.0001), 2f64.powi(-24));
        // -2^-26 rounds to -0.
        assert_eq!(f.round(-(2f64.powi(-26))).to_bits(), (-0.0f64).to_bits());
        // 65519.99 -> 65504, 65520 -> inf.
        assert_eq!(f.round(65519.99), 65504.0);
        assert_eq!(f.round(65520.0), f64::INFINITY);
    }

    fn bfp(lit: &str) -> Format {
        lit.parse().expect("valid literal")
    }

    #[test]
    fn fast_bfp_matches_reference() {
        let data = adversarial();
        let finite: Vec<f64> = data.iter().copied().filter(|v| v.is_finite()).collect();
        for lit in [
            "bfp(mant = 8, exp_bits = 5, round = even)",
            "bfp(mant = 8, exp_bits = 5, round = away)",
            "bfp(mant = 5, exp_bits = 5, round = zero)",
            "bfp(mant = 4, block = 4, exp_bits = 8)",
            "bfp(mant = 12, block = 3, exp_bits = 5)",
            "msfp(8)",
        ] {
            let fmt = bfp(lit);
            let Format::Bfp(b) = fmt else {
                panic!("{lit} is not BFP")
            };
            for n in [4usize, 8, 16] {
                let fast = FastBfp::new(&b, n).expect("eligible");
                // Blocks mixing magnitudes (including huge and tiny) and with a NaN.
                for src in [&finite, &data] {
                    for window in src.chunks(n) {
                        let mut a = vec![0.0; window.len()];
                        let mut r = vec![0.0; window.len()];
                        fast.run(window, &mut a);
                        fmt.quantize(window, n, &mut r);
                        for i in 0..window.len() {
                            assert!(
                                same(a[i], r[i]),
                                "{lit} n={n} block {window:?}: lane {i} fast {} reference {}",
                                a[i],
                                r[i]
                            );
                        }
                    }
                }
            }
        }
    }

    /// The MX fast path against `nnp_numerics`' reference, bit for bit (NaN as NaN): every
    /// element type, the three deterministic roundings, blocks of 32 and of 4 lanes and the
    /// native dimension, on the adversarial values (ties at many precisions, both zeros,
    /// subnormals, NaN and infinities, values beyond f32's range whose scale is E8M0's NaN) in
    /// windows that mix magnitudes, and on every fp16 pattern in blocks of 32.
    #[test]
    fn fast_mx_matches_reference() {
        let data = adversarial();
        let finite: Vec<f64> = data.iter().copied().filter(|v| v.is_finite()).collect();
        let fp16: Vec<f64> = (0..=u16::MAX)
            .map(|b| f64::from(half::f16::from_bits(b)))
            .collect();
        for elem in [
            "fp8e4m3", "fp8e5m2", "fp6e3m2", "fp6e2m3", "fp4e2m1", "int8",
        ] {
            for (block, round) in [
                ("32", "even"),
                ("4", "away"),
                ("native", "zero"),
                ("32", "zero"),
            ] {
                let lit = format!("mx(elem = {elem}, block = {block}, round = {round})");
                let fmt = bfp(&lit);
                let Format::Mx(m) = fmt else {
                    panic!("{lit} is not MX")
                };
                for n in [8usize, 32] {
                    let fast = FastMx::new(&m, n).expect("eligible");
                    for (src, len) in [(&finite, n), (&data, n), (&fp16, 32)] {
                        let mut a = vec![0.0; src.len()];
                        let mut r = vec![0.0; src.len()];
                        fast.runs(src, &mut a, len);
                        for (xr, rr) in src.chunks(len).zip(r.chunks_mut(len)) {
                            fmt.quantize(xr, n, rr);
                        }
                        for (i, (x, (a, r))) in src.iter().zip(a.iter().zip(&r)).enumerate() {
                            assert!(
                                same(*a, *r),
                                "{lit} n={n}: element {i} ({x:e}): fast {a:e} reference {r:e}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Float MVM formats (ms-fp8 and ms-fp9 vectors: `fp(5, 2)`, `fp(5, 3)`) through
    /// `quantize_runs` against `Format::quantize` run by run, bit for bit: the fast rounder where
    /// the format rounds to nearest-even, the reference's own path for the other modes
    /// (stochastic draws by position in the run).
    #[test]
    fn float_runs_match_reference() {
        let data = adversarial();
        for lit in [
            "fp(5, 2)",
            "fp(5, 3)",
            "bf16",
            "fp(4, 3, overflow = sat)",
            "fp(5, 2, round = zero)",
            "fp(5, 3, round = stochastic(seed = 3))",
        ] {
            let fmt = bfp(lit);
            for len in [1usize, 16, 128] {
                let mut a = vec![0.0; data.len()];
                let mut r = vec![0.0; data.len()];
                quantize_runs(&fmt, &data, len, 128, &mut a);
                for (xr, rr) in data.chunks(len).zip(r.chunks_mut(len)) {
                    fmt.quantize(xr, 128, rr);
                }
                for (i, (x, (a, r))) in data.iter().zip(a.iter().zip(&r)).enumerate() {
                    assert!(
                        same(*a, *r),
                        "{lit}: element {i} ({x:e}): {a:e} against {r:e}"
                    );
                }
            }
        }
    }

    /// MX by hand: e4m3 (emax 8, 3 mantissa bits, largest 448), block [1.0, 0.3, -500, 0]:
    /// amax 500, floor_log2 = 8, s = 0. 0.3 = 1.2 * 2^-2 has quantum 2^-5: 0.3 * 32 = 9.6 -> 10,
    /// 0.3125; -500 saturates at -448.
    #[test]
    fn mx_by_hand() {
        let fmt = bfp("mx(elem = fp8e4m3, block = 4)");
        let mut out = [9.0; 4];
        quantize_runs(&fmt, &[1.0, 0.3, -500.0, 0.0], 4, 4, &mut out);
        assert_eq!(out, [1.0, 0.3125, -448.0, 0.0]);
        // Scaled: the same block times 2^-20 gives s = -20 and the same elements times 2^-20.
        let x = [1.0, 0.3, -500.0, 0.0].map(|v| v * 2f64.powi(-20));
        quantize_runs(&fmt, &x, 4, 4, &mut out);
        assert_eq!(out, [1.0, 0.3125, -448.0, 0.0].map(|v| v * 2f64.powi(-20)));
    }

    #[test]
    fn bfp_by_hand() {
        // bfp(mant = 8, exp_bits = 5), N = 4: block [1.0, 0.75, -0.01, 3.0]: E = 1,
        // lsb = 1 - 6 = -5, q = round(x * 32) = [32, 24, -0.32 -> -0 -> +0, 96].
        let fmt = bfp("bfp(mant = 8, exp_bits = 5, round = even)");
        let mut out = [9.0; 4];
        quantize_runs(&fmt, &[1.0, 0.75, -0.01, 3.0], 4, 4, &mut out);
        assert_eq!(out, [1.0, 0.75, 0.0, 3.0]);
        assert_eq!(out[2].to_bits(), 0);
        // Saturation: [200, 1]: E = 7, lsb = 1, q = [100, 0.5 -> 0 (tie to even)].
        let mut out = [9.0; 2];
        quantize_runs(&fmt, &[200.0, 1.0], 2, 2, &mut out);
        assert_eq!(out, [200.0, 0.0]);
        // E clamps at 16: 2^20 -> q = 2^20 / 2^10 = 1024, saturates at 127 -> 127 * 2^10.
        let mut out = [9.0; 2];
        quantize_runs(&fmt, &[2f64.powi(20), -(2f64.powi(20))], 2, 2, &mut out);
        assert_eq!(out, [127.0 * 1024.0, -127.0 * 1024.0]);
        // A NaN or infinity poisons its block only.
        let mut out = [9.0; 4];
        quantize_runs(&fmt, &[1.0, f64::INFINITY, 1.0, 2.0], 2, 2, &mut out);
        assert!(out[0].is_nan() && out[1].is_nan());
        assert_eq!(&out[2..], &[1.0, 2.0]);
    }
}
