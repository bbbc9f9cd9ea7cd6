//! MX (OCP microscaling) quantization over slices: the fast path for the deterministic
//! rounding modes ([`FastMx`]).

use super::lanes::avx2_copy;
use nnp_numerics::format::MxElem;
use nnp_numerics::{Rounding, floor_log2, pow2};

/// MX (OCP microscaling) with a deterministic rounding mode, as `nnp_numerics`' reference
/// computes it per block: the shared exponent `s = floor_log2(amax) - emax_elem` (at least
/// -127; above 127, or a non-finite element, makes the block NaN), then every element `x *
/// 2^-s` rounded on the element type's grid (quantum `2^(max(e, emin) - mant)` for its
/// exponent `e`), saturated at the element's largest value, times `2^s` (an INT8 zero is +0,
/// an fp element keeps the sign of zero). The scaling by `2^-s` is exact except where
/// `x * 2^-s` falls below f64's normals, far below the element's smallest subnormal, where
/// every mode gives zero either way.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct FastMx {
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
    pub(super) fn new(m: &nnp_numerics::format::MxFormat, n: usize) -> Option<FastMx> {
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
        pub(super) fn runs / runs_avx2 / runs_avx512 / runs_body (&self, x: &[f64], out: &mut [f64], len: usize)
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

#[cfg(test)]
mod tests {
    use super::super::quantize_runs;
    use super::super::tests::{adversarial, bfp, same};
    use super::*;
    use nnp_numerics::Format;

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
                        let mut r = vec![0.0; src.len()];
                        for (xr, rr) in src.chunks(len).zip(r.chunks_mut(len)) {
                            fmt.quantize(xr, n, rr);
                        }
                        crate::quant::each_copy(|copy| {
                            let mut a = vec![0.0; src.len()];
                            fast.runs(src, &mut a, len);
                            for (i, (x, (a, r))) in src.iter().zip(a.iter().zip(&r)).enumerate() {
                                assert!(
                                    same(*a, *r),
                                    "{lit} n={n} {copy:?}: element {i} ({x:e}): fast {a:e} \
                                     reference {r:e}"
                                );
                            }
                        });
                    }
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
}
