//! BFP quantization over slices: the fast path for the deterministic rounding modes
//! ([`FastBfp`]), and its integer mantissas for the integer kernel ([`BfpInts`]).

use super::lanes::{avx2_copy, round_even, to_i16};
use nnp_numerics::format::BfpFormat;
use nnp_numerics::{Format, Rounding, floor_log2, pow2};

/// BFP with the fast quantizer's scaling ([`FastBfp`]), as the GPU's kernel takes it
/// (`device::bfp_quantize`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct BfpParams {
    pub max: f64,
    pub min: f64,
    pub block: i32,
    pub lo: i32,
    pub hi: i32,
    pub mant: i32,
    /// 0: nearest-even, 1: nearest-away, 2: toward zero.
    pub rounding: i32,
}

/// BFP with nearest-even, nearest-away or toward-zero and a shared exponent range whose scale
/// factors are normal f64 powers of two: `x * 2^-lsb` is then exact (or far below 1/2, where
/// every mode gives 0), so the integer mantissa is one f64 rounding away.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct FastBfp {
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
    pub(super) fn new(b: &BfpFormat, n: usize) -> Option<FastBfp> {
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

    /// The quantizer as the GPU's `bfp_quantize` takes it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) fn params(&self) -> BfpParams {
        BfpParams {
            max: self.max,
            min: self.min,
            block: self.block as i32,
            lo: self.lo,
            hi: self.hi,
            mant: self.mant,
            rounding: match self.rounding {
                Rounding::NearestEven => 0,
                Rounding::NearestAway => 1,
                _ => 2,
            },
        }
    }

    #[inline(always)]
    fn run(&self, x: &[f64], out: &mut [f64]) {
        for (xb, ob) in x.chunks(self.block).zip(out.chunks_mut(self.block)) {
            self.block(xb, ob);
        }
    }

    avx2_copy! {
        /// [`FastBfp::run`] over every run of `len` lanes.
        pub(super) fn runs / runs_avx2 / runs_avx512 / runs_body (&self, x: &[f64], out: &mut [f64], len: usize)
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
/// mantissas for the integer kernel
/// ([`super::intdot::IntVector::quantized`](crate::intdot::IntVector::quantized)): the
/// one pass that stands for a vector's `quantize` and its conversion to integers.
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
    /// `None` for a run with a non-finite element: [`quantize_runs`](super::quantize_runs)
    /// gives `q * 2^lsb`.
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

#[cfg(test)]
mod tests {
    use super::super::quantize_runs;
    use super::super::tests::{adversarial, bfp, same};
    use super::*;

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
                    // The whole source in runs of n, through each copy of the loop.
                    let mut r = vec![0.0; src.len()];
                    for (xr, rr) in src.chunks(n).zip(r.chunks_mut(n)) {
                        fmt.quantize(xr, n, rr);
                    }
                    crate::quant::each_copy(|copy| {
                        let mut a = vec![0.0; src.len()];
                        fast.runs(src, &mut a, n);
                        for (i, (a, r)) in a.iter().zip(&r).enumerate() {
                            assert!(same(*a, *r), "{lit} n={n} {copy:?}: element {i} {a} {r}");
                        }
                    });
                }
            }
        }
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
