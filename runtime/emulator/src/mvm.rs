//! The matrix-vector multiplier: quantized runs as integer mantissas, dot products in integers,
//! and the accumulation modes of docs/numerics.md.

use super::exact;
use nnp_grammar::Accumulation;
use nnp_numerics::rounding::{bitlen, decompose_odd};
use nnp_numerics::sums::IntegerSum;
use nnp_numerics::{FloatFormat, Format};

/// One quantized run (a native tile of the input vector, or one row of a matrix tile) as
/// integers.
#[derive(Clone, Debug)]
pub enum QRun {
    /// `value[k] = mant[k] * 2^exp`, every `|mant[k]| < 2^bits` (`bits <= 62`); `m32` holds
    /// the same mantissas as i32 when `bits <= 31` (empty otherwise), for the fast dot product.
    Fixed {
        mant: Vec<i64>,
        m32: Vec<i32>,
        exp: i32,
        bits: u32,
    },
    /// Finite values too far apart for one exponent: each term is decomposed on use.
    Wide(Vec<f64>),
    /// The run holds a NaN or an infinity.
    NonFinite(Vec<f64>),
}

impl QRun {
    /// Quantize `x` with `fmt` (blocks along the run, `native` = N) and decompose the result.
    pub fn quantize(fmt: &Format, x: &[f64], native: usize, scratch: &mut Vec<f64>) -> QRun {
        scratch.clear();
        scratch.resize(x.len(), 0.0);
        fmt.quantize(x, native, scratch);
        QRun::from_values(scratch)
    }

    /// Integer form of exact values: each non-zero value is `m * 2^e` read from its bits.
    pub fn from_values(v: &[f64]) -> QRun {
        if v.iter().any(|x| !x.is_finite()) {
            return QRun::NonFinite(v.to_vec());
        }
        let mut emin = i32::MAX;
        let mut top = i32::MIN;
        for &x in v.iter().filter(|x| **x != 0.0) {
            let (m, e) = decompose_odd(x);
            emin = emin.min(e);
            top = top.max(e + bitlen(m as u128));
        }
        if emin == i32::MAX {
            return QRun::Fixed {
                mant: vec![0; v.len()],
                m32: vec![0; v.len()],
                exp: 0,
                bits: 0,
            };
        }
        if top - emin > 62 {
            return QRun::Wide(v.to_vec());
        }
        let mant = v
            .iter()
            .map(|&x| {
                if x == 0.0 {
                    return 0;
                }
                let (m, e) = decompose_odd(x);
                let m = (m << (e - emin)) as i64;
                if x < 0.0 { -m } else { m }
            })
            .collect::<Vec<i64>>();
        let bits = (top - emin) as u32;
        let m32 = if bits <= 31 {
            mant.iter().map(|&m| m as i32).collect()
        } else {
            Vec::new()
        };
        QRun::Fixed {
            mant,
            m32,
            exp: emin,
            bits,
        }
    }

    fn values(&self) -> Vec<f64> {
        match self {
            QRun::Fixed { mant, exp, .. } => {
                mant.iter().map(|&m| m as f64 * 2f64.powi(*exp)).collect()
            }
            QRun::Wide(v) | QRun::NonFinite(v) => v.clone(),
        }
    }
}

/// Add the exact dot product `a . b` to `acc`.
pub fn dot(a: &QRun, b: &QRun, acc: &mut IntegerSum) {
    match (a, b) {
        (
            QRun::Fixed {
                mant: ma,
                m32: ma32,
                exp: ea,
                bits: ba,
            },
            QRun::Fixed {
                mant: mb,
                m32: mb32,
                exp: eb,
                bits: bb,
            },
        ) => {
            let n = ma.len().min(mb.len());
            // |sum| < n * 2^(ba + bb): `headroom` bits for the count and one for the sign.
            let headroom = bitlen(n as u128) as u32 + 1;
            let e = ea + eb;
            if ba + bb + headroom <= 31 && !ma32.is_empty() && !mb32.is_empty() {
                let s: i32 = ma32.iter().zip(mb32).map(|(x, y)| x * y).sum();
                acc.add(s as i128, e);
            } else if ba + bb + headroom <= 63 {
                let s: i64 = ma.iter().zip(mb).map(|(x, y)| x * y).sum();
                acc.add(s as i128, e);
            } else if ba + bb + headroom <= 127 {
                let s: i128 = ma
                    .iter()
                    .zip(mb)
                    .map(|(&x, &y)| x as i128 * y as i128)
                    .sum();
                acc.add(s, e);
            } else {
                for (&x, &y) in ma.iter().zip(mb) {
                    acc.add(x as i128 * y as i128, e);
                }
            }
        }
        (QRun::NonFinite(_), _) | (_, QRun::NonFinite(_)) => {
            // IEEE: finite products cannot overflow here, so the non-finite terms decide.
            let s: f64 = a.values().iter().zip(b.values()).map(|(x, y)| x * y).sum();
            if s.is_finite() {
                // Unreachable in IEEE (inf * 0 and NaN * x are NaN); keep the NaN rule anyway.
                acc.add_special(f64::NAN);
            } else {
                acc.add_special(s);
            }
        }
        _ => {
            for (x, y) in a.values().into_iter().zip(b.values()) {
                if x != 0.0 && y != 0.0 {
                    let (mx, ex) = decompose_odd(x);
                    let (my, ey) = decompose_odd(y);
                    let p = mx as i128 * my as i128;
                    acc.add(if (x < 0.0) != (y < 0.0) { -p } else { p }, ex + ey);
                }
            }
        }
    }
}

/// Sum the per-tile partials of one output row and round to `out` per the accumulation mode.
///
/// - `exact`: every partial summed exactly, one rounding.
/// - `fp32-seq` / `fp16-seq`: each partial rounded to fp32 / fp16, added in increasing tile
///   order in that format (each addition correctly rounded), the result rounded to `out`.
pub fn accumulate(mode: Accumulation, partials: &[IntegerSum], out: &FloatFormat) -> f64 {
    let seq = |f: &FloatFormat| {
        let mut it = partials.iter().map(|p| p.round(f));
        let first = it.next().unwrap_or(0.0);
        it.fold(first, |acc, p| exact::add(f, acc, p))
    };
    match mode {
        Accumulation::Exact => {
            let mut total = IntegerSum::new();
            for p in partials {
                total.merge(p);
            }
            total.round(out)
        }
        Accumulation::Fp32Seq => out.round(seq(&FloatFormat::FP32)),
        Accumulation::Fp16Seq => out.round(seq(&FloatFormat::FP16)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splitmix64: a tiny deterministic generator for test data.
    fn next(s: &mut u64) -> u64 {
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Values `m * 2^e` with `|m| < 2^mbits` and `e` spread over `span` binades.
    fn run(s: &mut u64, n: usize, mbits: u32, span: i32) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let m = (next(s) % (1u64 << mbits)) as f64;
                let e = (next(s) % (span as u64 + 1)) as i32 - span / 2;
                let sign = if next(s) & 1 == 1 { -1.0 } else { 1.0 };
                sign * m * 2f64.powi(e)
            })
            .collect()
    }

    #[test]
    fn every_dot_path_gives_the_term_by_term_sum() {
        // The i32, i64, i128 and term-by-term paths (chosen by the bit widths) must all equal
        // the sum of individually decomposed products (the `Wide` path), rounded to fp64 and
        // to fp16.
        let mut s = 7u64;
        for (mbits, span) in [(7, 0), (7, 6), (11, 20), (24, 30), (24, 120), (40, 60)] {
            for _ in 0..20 {
                let a = run(&mut s, 16, mbits, span);
                let b = run(&mut s, 16, mbits, span);
                let mut fast = IntegerSum::new();
                dot(&QRun::from_values(&a), &QRun::from_values(&b), &mut fast);
                let mut slow = IntegerSum::new();
                dot(&QRun::Wide(a.clone()), &QRun::Wide(b.clone()), &mut slow);
                for f in [FloatFormat::FP64, FloatFormat::FP16, FloatFormat::FP32] {
                    assert_eq!(
                        fast.round(&f).to_bits(),
                        slow.round(&f).to_bits(),
                        "mbits {mbits} span {span}"
                    );
                }
            }
        }
    }

    #[test]
    fn non_finite_runs_give_ieee_results() {
        let a = QRun::from_values(&[f64::INFINITY, 1.0]);
        let mut acc = IntegerSum::new();
        dot(&a, &QRun::from_values(&[2.0, 3.0]), &mut acc);
        assert_eq!(acc.round(&FloatFormat::FP16), f64::INFINITY);
        let mut acc = IntegerSum::new();
        dot(&a, &QRun::from_values(&[0.0, 3.0]), &mut acc);
        assert!(acc.round(&FloatFormat::FP16).is_nan());
    }
}
