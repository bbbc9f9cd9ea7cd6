//! `exact` and `-seq` accumulation from one plain f64 matmul: each sum rounded from an error
//! bound where every value within it rounds alike ([`round_bounded`], [`round_within`]), the
//! rest summed again exactly.

use super::{MatVec, seq_add};
use crate::exact::round_with;
use crate::quant::Rounder;
use nnp_numerics::sums::Expansion;
use nnp_numerics::{FloatFormat, Rounding, pow2};
use rayon::prelude::*;

/// The rounding of a value known to lie within `bound` of `s`, where every value of that
/// interval rounds to the same bits; else `None`.
pub(crate) fn round_within(
    rounder: &Rounder,
    fmt: &FloatFormat,
    s: f64,
    bound: f64,
) -> Option<f64> {
    if !monotone(fmt) || !bound.is_finite() {
        return None;
    }
    let (lo, hi) = enclosure(s, bound);
    decided(rounder.round(lo), rounder.round(hi))
}

/// Every rounding mode but the stochastic one is monotone, and keeps the sign (a negative
/// value that rounds to zero is -0): where both ends of an interval round to the same bits,
/// they lie on one side of zero, and every value between them rounds to those bits (an exact
/// zero, +0 by the accumulator's rule, only where the ends do).
pub(crate) fn monotone(fmt: &FloatFormat) -> bool {
    !matches!(fmt.rounding, Rounding::Stochastic { .. })
}

/// Computed ends `(lo, hi)` of an interval holding every value within `bound` of `s` where
/// `bound < |s|` (wider intervals reach both signs, and never round alike): widened past the
/// rounding of the two additions by `2^-50 |s|`, and by `2^-1060` where the sum is subnormal.
/// NaN for non-finite `s` or `bound`.
#[inline]
fn enclosure(s: f64, bound: f64) -> (f64, f64) {
    let widened = bound + s.abs() * pow2(-50) + pow2(-1060);
    (s - widened, s + widened)
}

/// The rounding decided by an [`enclosure`] whose ends round to `a` and `b` ([`monotone`]);
/// never by NaN ends (a NaN or overflowing bound: finite values never round to NaN).
#[inline]
fn decided(a: f64, b: f64) -> Option<f64> {
    (!a.is_nan() && a.to_bits() == b.to_bits()).then_some(a)
}

/// An upper bound of the Euclidean norm of `v`: 0 only for a zero vector, NaN or infinite
/// where `v` holds a NaN or an infinity. The squares' sum in f64 falls short of the exact one
/// by at most a relative `len * 2^-53`, plus at most `2^-1075` per square that underflows:
/// `2^-20` (any `len` below 2^30) and `len * 2^-1074` cover both, and the second `2^-20` the
/// roundings of the square root and the products.
pub fn norm_bound(v: &[f64]) -> f64 {
    let squares: f64 = v.iter().map(|x| x * x).sum();
    if squares == 0.0 && v.iter().all(|x| *x == 0.0) {
        return 0.0;
    }
    let slack = 1.0 + pow2(-20);
    (squares * slack + v.len() as f64 * pow2(-1074)).sqrt() * slack
}

/// `exact` accumulation from one plain f64 matmul: `y` (`[b, R]`) holds `x W^T` as any f64
/// matmul sums it (`x` is `[b, K]`, `w` `[R, K]`, and every product `x_k w_k` is exact in
/// f64); `w_norms` holds [`norm_bound`] of each row of `w`. Each element is rounded in place
/// to `spec.output` (`round_sums`).
pub fn round_bounded(spec: &MatVec, x: &[f64], w: &[f64], w_norms: &[f64], y: &mut [f64]) {
    let rounder = Rounder::new(&spec.output);
    let k = w.len().checked_div(w_norms.len()).unwrap_or(0);
    y.par_chunks_mut(w_norms.len().max(1))
        .zip(x.par_chunks(k.max(1)))
        .for_each(|(y, x)| round_sums(&rounder, &spec.output, x, w, w_norms, y));
}

/// `-seq` accumulation (`seq`, of `seq_format`) from one f64 matmul per tile column: `y`
/// (`[cols, b, R]`) holds each tile's `x_j W_j^T` as any f64 matmul sums it (`x` is `[b, cols
/// * n]`, `w` `[cols, R, n]`, every product exact in f64); `w_norms` (`[cols, R]`) holds
/// [`norm_bound`] of each tile row. Each tile partial is rounded to `seq` (`round_sums`),
/// then they are added as `seq_sums` adds them; the result is `[b, R]`.
pub fn round_bounded_seq(
    spec: &MatVec,
    seq: &FloatFormat,
    x: &[f64],
    w: &[f64],
    w_norms: &[f64],
    y: &mut [f64],
) -> Vec<f64> {
    let rounder = Rounder::new(seq);
    let (n, cols, rn) = (spec.n, spec.cols, spec.rows * spec.n);
    let b = x.len().checked_div(cols * n).unwrap_or(0);
    y.par_chunks_mut(rn.max(1)).enumerate().for_each(|(e, y)| {
        let (j, bi) = (e / b.max(1), e % b.max(1));
        let x = &x[bi * cols * n + j * n..][..n];
        let w = &w[j * rn * n..][..rn * n];
        round_sums(&rounder, seq, x, w, &w_norms[j * rn..][..rn], y);
    });
    let m = b * rn;
    seq_add(&rounder, &spec.output, cols, m, |j, out| {
        out.copy_from_slice(&y[j * m..][..m]);
    })
}

/// Round in place each `y[r]`, a plain f64 sum of the K exact products of `x` and row r of `w`
/// (`[R, K]`, `w_norms` its rows' [`norm_bound`]), to the exact sum's rounding.
///
/// K exact products summed in any order, with or without FMA, are within `gamma_K * sum |x_k
/// w_k|` of their exact sum (`gamma_K = K u / (1 - K u) <= K 2^-52`), and by Cauchy-Schwarz
/// `sum |x_k w_k| <= |x| |w_r|`. Where every value of that interval rounds alike
/// ([`round_within`]), that is the exact sum's rounding; the rest (sums that cancel to near
/// zero, sums near a rounding boundary, non-finite data) are summed again ([`round_dot`]).
fn round_sums(
    rounder: &Rounder,
    fmt: &FloatFormat,
    x: &[f64],
    w: &[f64],
    w_norms: &[f64],
    y: &mut [f64],
) {
    let (k, rn) = (x.len(), y.len());
    // `gamma_K`, and 2^-19 for the rounding of the bound's two products.
    let gamma = k as f64 * pow2(-52) * (1.0 + pow2(-19));
    let xn = norm_bound(x);
    // Both ends of every element's interval, rounded in two vector passes.
    let (mut lo, mut hi) = (vec![0.0f64; rn], vec![0.0f64; rn]);
    for (((lo, hi), y), wn) in lo.iter_mut().zip(&mut hi).zip(&*y).zip(w_norms) {
        (*lo, *hi) = enclosure(*y, gamma * xn * wn);
    }
    let (mut a, mut b) = (vec![0.0f64; rn], vec![0.0f64; rn]);
    rounder.round_all(&lo, &mut a);
    rounder.round_all(&hi, &mut b);
    let (mut slow, monotone) = (Expansion::new(), monotone(fmt));
    for (r, (y, wrow)) in y.iter_mut().zip(w.chunks(k.max(1))).enumerate() {
        let wn = w_norms[r];
        // Every product an exact zero (no NaN from 0 * inf): the sum is +0.
        *y = if (xn == 0.0 && wn.is_finite()) || (wn == 0.0 && xn.is_finite()) {
            0.0
        } else if let Some(v) = decided(a[r], b[r]).filter(|_| monotone) {
            v
        } else {
            round_dot(rounder, fmt, x, wrow, &mut slow)
        };
    }
}

/// The rounded exact sum of the products `x_k w_k`, each exact in f64: a compensated sum
/// (Ogita, Rump and Oishi's Sum2) decides it where its error bound does ([`round_within`]),
/// else an exact sum in `slow`. Every two-sum of the running sum `s` is exact, so the exact
/// sum is `s + sum e_k`; the `e_k` summed in f64 are within `gamma_K sum |e_k|` of theirs, and
/// the last addition within `2^-53 |r|`.
fn round_dot(
    rounder: &Rounder,
    fmt: &FloatFormat,
    x: &[f64],
    w: &[f64],
    slow: &mut Expansion,
) -> f64 {
    let (mut s, mut c, mut e) = (0.0f64, 0.0f64, 0.0f64);
    for (a, b) in x.iter().zip(w) {
        let (t, err) = nnp_numerics::sums::two_sum(s, a * b);
        s = t;
        c += err;
        e += err.abs();
    }
    if e == 0.0 && s.is_finite() {
        // Every addition exact: `s` is the sum (an exact zero is +0).
        return if s == 0.0 { 0.0 } else { rounder.round(s) };
    }
    let r = s + c;
    let k = x.len() as f64;
    let bound = (k * pow2(-52) * e + pow2(-52) * r.abs()) * (1.0 + pow2(-19));
    round_within(rounder, fmt, r, bound).unwrap_or_else(|| {
        slow.clear();
        (x.iter().zip(w)).for_each(|(a, b)| slow.add_product(*a, *b));
        round_with(slow, rounder, fmt)
    })
}
#[cfg(test)]
mod tests {
    use super::super::tests::{f, spec, tiles};
    use super::super::{matvec_exact, seq_format};
    use super::*;
    use nnp_grammar::Accumulation;
    use nnp_numerics::Format;

    /// `round_bounded` of one element, with `y0` the plain forward f64 sum.
    fn bounded_one(out: FloatFormat, x: &[f64], w: &[f64]) -> f64 {
        let spec = MatVec {
            output: out,
            ..spec(1, 1, x.len(), Accumulation::Exact)
        };
        let mut y = [x.iter().zip(w).map(|(a, b)| a * b).sum::<f64>()];
        round_bounded(&spec, x, w, &[norm_bound(w)], &mut y);
        y[0]
    }

    /// The bounded float path where a plain f64 sum rounds wrongly, each result by hand.
    #[test]
    fn bounded_products_by_hand() {
        let fp32 = FloatFormat::FP32;
        let ones = [1.0; 3];
        let t = |e: i32| 2f64.powi(e);
        // 1 + 2^-24 is the fp32 tie of 1 and 1 + 2^-23: even, 1. One more 2^-60 (lost by f64)
        // puts it above the tie: 1 + 2^-23.
        assert_eq!(bounded_one(fp32, &[1.0, t(-24), 0.0], &ones), 1.0);
        assert_eq!(
            bounded_one(fp32, &[1.0, t(-24), t(-60)], &ones),
            1.0 + t(-23)
        );
        assert_eq!(
            bounded_one(fp32, &[-1.0, -t(-24), -t(-60)], &ones),
            -1.0 - t(-23)
        );
        // 2^60 + 1 - 2^60 = 1 (f64 gives 0).
        assert_eq!(bounded_one(fp32, &[t(60), 1.0, -t(60)], &ones), 1.0);
        // 1 - 2^-100 toward zero: the fp32 value below 1 (f64 gives 1, which truncates to 1).
        let zero = FloatFormat {
            rounding: Rounding::TowardZero,
            ..fp32
        };
        let below_one = f64::from(f32::from_bits(0x3F7F_FFFF));
        assert_eq!(bounded_one(zero, &[1.0, -t(-100), 0.0], &ones), below_one);
        // Ties away from zero: the tie 1 + 2^-24 -> 1 + 2^-23, but 2^-60 below it -> 1 (f64
        // gives the tie).
        let away = FloatFormat {
            rounding: Rounding::NearestAway,
            ..fp32
        };
        assert_eq!(bounded_one(away, &[1.0, t(-24), 0.0], &ones), 1.0 + t(-23));
        assert_eq!(bounded_one(away, &[1.0, t(-24), -t(-60)], &ones), 1.0);
        // Far from any boundary the bound decides: 3 * 1.25 = 3.75.
        assert_eq!(bounded_one(fp32, &[1.25; 3], &ones), 3.75);
        // Exact zeros are +0: a cancelling sum, -0 products, a zero vector.
        for x in [[3.0, -3.0, 0.0], [-0.0, -0.0, -0.0], [0.0; 3]] {
            assert_eq!(bounded_one(fp32, &x, &ones).to_bits(), 0, "{x:?}");
        }
        // A zero vector against an infinite weight: 0 * inf is NaN; inf alone stays inf, and
        // inf - inf is NaN.
        let inf = f64::INFINITY;
        assert!(bounded_one(fp32, &[0.0; 3], &[inf, 1.0, 1.0]).is_nan());
        assert_eq!(bounded_one(fp32, &[1.0, 2.0, 0.0], &[inf, 1.0, 1.0]), inf);
        assert!(bounded_one(fp32, &[inf, -inf, 0.0], &ones).is_nan());
        assert!(bounded_one(fp32, &[f64::NAN, 1.0, 0.0], &ones).is_nan());
        // The compensated sum's own error: the two-sum errors 2^10, 2^-44 and -2^10 sum to 0
        // in f64, so its result is 1 + 2^-24 - 2^-45, below the fp32 tie 1 + 2^-24; the exact
        // sum is 2^-45 above the tie: 1 + 2^-23.
        let (big, tie) = (t(63) + t(12), 1.0 + t(-24));
        let x = [big, t(10), t(-44), -t(10), -big, tie - t(-45)];
        assert_eq!(bounded_one(fp32, &x, &[1.0; 6]), 1.0 + t(-23));
        // -seq over two tiles of N = 2: x = [2048, 1 | 2^-20, 0] against the row [1, 1 | 1, 0]
        // (the second row is zero: +0). Tile partials 2049 and 2^-20. fp16-seq: 2049 is the
        // fp16 tie of 2048 and 2050 (even: 2048), and 2048 + 2^-20 is 2048. fp32-seq: 2049 +
        // 2^-20 is 2049 in fp32 (half its spacing is 2^-13), which fp16 output ties to 2048
        // and fp32 output keeps. (Exact accumulation gives 2050.)
        let x = [2048.0, 1.0, t(-20), 0.0];
        // [cols, R, n]: tile 0 rows [1, 1], [0, 0]; tile 1 rows [1, 0], [0, 0].
        let w = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        let norms: Vec<f64> = w.chunks(2).map(norm_bound).collect();
        for (acc, out, want) in [
            (Accumulation::Fp16Seq, FloatFormat::FP16, 2048.0),
            (Accumulation::Fp16Seq, fp32, 2048.0),
            (Accumulation::Fp32Seq, FloatFormat::FP16, 2048.0),
            (Accumulation::Fp32Seq, fp32, 2049.0),
        ] {
            let spec = MatVec {
                output: out,
                ..spec(1, 2, 2, acc)
            };
            // [cols, b = 1, R = 2] plain tile sums.
            let mut y = [2049.0, 0.0, t(-20), 0.0];
            let seq = seq_format(acc).expect("a -seq mode");
            let got = round_bounded_seq(&spec, &seq, &x, &w, &norms, &mut y);
            assert_eq!(got[0], want, "{acc:?} to {out:?}");
            assert_eq!(got[1].to_bits(), 0);
        }
        // |x|^2 overflows f64 though x and every product are finite: the bound is no help
        // (against a zero row it is inf * 0, NaN), the sums are 0 and 1.
        assert_eq!(
            bounded_one(fp32, &[t(600), t(600), 0.0], &[0.0; 3]).to_bits(),
            0
        );
        assert_eq!(
            bounded_one(fp32, &[t(600), 1.0, 0.0], &[0.0, 1.0, 0.0]),
            1.0
        );
        // fp16's overflow tie 65520 rounds to inf; 65504 + 15 to 65504.
        let fp16 = FloatFormat::FP16;
        assert_eq!(bounded_one(fp16, &[65504.0, 16.0, 0.0], &ones), inf);
        assert_eq!(bounded_one(fp16, &[65504.0, 15.0, 0.0], &ones), 65504.0);
    }

    /// `round_bounded` equals the exact sum rounded once (`Expansion`, rounded by the format's
    /// reference) on adversarial rows, for every rounding mode and several output formats,
    /// whichever order the f64 matmul summed in.
    #[test]
    fn bounded_products_match_exact_sums_on_adversarial_data() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 11
        };
        let k = 16;
        let (b, rn) = (48, 12);
        // Vectors: random fp32 values across 60 binades, ties and near-ties of fp16 and fp32
        // (a value of the grid plus half its spacing, give or take a far smaller term),
        // cancellations, zeros, near-overflow values, and now and then a NaN or an infinity.
        let mut x = vec![0.0f64; b * k];
        for row in x.chunks_mut(k) {
            let e = |r: u64| 2f64.powi((r % 61) as i32 - 30);
            let rnd = |r: u64| f64::from(f32::from_bits((r as u32 & 0x007F_FFFF) | 0x3F80_0000));
            match next() % 8 {
                0 | 1 => row.iter_mut().for_each(|v| {
                    let r = next();
                    *v = f64::from((rnd(r) * e(r >> 24)) as f32)
                        * if r & 1 == 0 { 1.0 } else { -1.0 };
                }),
                2 => {
                    let m = f64::from(half::f16::from_f64(rnd(next()) * 64.0));
                    let tail = [0.0, 2f64.powi(-40), -(2f64.powi(-40)), 2f64.powi(-149)];
                    row[..3].copy_from_slice(&[m, m * 2f64.powi(-11), tail[(next() % 4) as usize]]);
                }
                3 => {
                    let m = rnd(next());
                    row[..3].copy_from_slice(&[
                        m,
                        2f64.powi(-24),
                        [0.0, 2f64.powi(-70)][(next() % 2) as usize],
                    ]);
                }
                4 => {
                    let big = e(next()) * 2f64.powi(40);
                    row[..4].copy_from_slice(&[
                        big,
                        rnd(next()),
                        -big,
                        [0.0, 1.0][(next() % 2) as usize],
                    ]);
                }
                5 => {
                    row[..2].copy_from_slice(&[65504.0, [15.0, 16.0, 17.0][(next() % 3) as usize]])
                }
                6 => {
                    let v = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0];
                    row[(next() % k as u64) as usize] = v[(next() % 5) as usize];
                }
                _ => {}
            }
        }
        // Weight rows: ones over the first lanes (the vector's sum), random fp32 values, powers
        // of two, a zero row.
        let mut w = vec![0.0f64; rn * k];
        for (r, row) in w.chunks_mut(k).enumerate() {
            for v in row.iter_mut() {
                *v = match r % 4 {
                    0 | 1 => 1.0,
                    2 => f64::from(f32::from_bits((next() as u32 & 0x3FFF_FFFF) | 0x3000_0000)),
                    _ => 2f64.powi((next() % 9) as i32 - 4),
                };
            }
        }
        w[(rn - 1) * k..].fill(0.0);
        let norms: Vec<f64> = w.chunks(k).map(norm_bound).collect();
        let formats = [
            "fp32",
            "fp16",
            "bf16",
            "fp(8, 10)",
            "fp(5, 2, overflow = sat)",
            "fp(4, 3, subnormals = false)",
            "fp(8, 23, round = zero)",
            "fp(8, 23, round = away)",
            "fp(5, 10, round = zero)",
            "fp(5, 10, round = away)",
            "fp(8, 23, round = stochastic(seed = 3))",
        ];
        let mut plain_wrong = 0;
        for lit in formats {
            let Format::Float(out) = f(lit) else {
                panic!("{lit} is a float format")
            };
            let spec = MatVec {
                output: out,
                ..spec(1, 1, k, Accumulation::Exact)
            };
            for reversed in [false, true] {
                let mut y = vec![0.0f64; b * rn];
                for (bi, xr) in x.chunks(k).enumerate() {
                    for (r, wr) in w.chunks(k).enumerate() {
                        let terms = xr.iter().zip(wr).map(|(a, c)| a * c);
                        y[bi * rn + r] = match reversed {
                            false => terms.sum(),
                            true => terms.rev().fold(0.0, |s, p| s + p),
                        };
                    }
                }
                let plain = y.clone();
                round_bounded(&spec, &x, &w, &norms, &mut y);
                for (e, got) in y.iter().enumerate() {
                    let (bi, r) = (e / rn, e % rn);
                    let mut want = Expansion::new();
                    for (a, c) in x[bi * k..][..k].iter().zip(&w[r * k..][..k]) {
                        want.add_product(*a, *c);
                    }
                    let want = want.round_to(&out);
                    let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
                    assert!(same, "{lit}, item {bi}, row {r}: {got:e} vs {want:e}");
                    if out.round(plain[e]).to_bits() != want.to_bits() {
                        plain_wrong += 1;
                    }
                }
            }
        }
        // The data reaches the cases where the plain sum rounds wrongly.
        assert!(plain_wrong > 50, "{plain_wrong} plain sums rounded wrongly");

        // The -seq modes on the same data, as 3 x 4 tiles of N = 4 (R = 12, K = 16): each
        // tile's plain sum rounded by `round_bounded_seq` against `matvec_exact` (every
        // product exact in an expansion, each tile partial rounded once from it).
        let (n, rows, cols) = (4, 3, 4);
        let stack = tiles(&w, rows, cols, n);
        // [cols, R, n] and its tile rows' norms.
        let mut per_tile = vec![0.0f64; w.len()];
        for j in 0..cols {
            for r in 0..rn {
                per_tile[(j * rn + r) * n..][..n].copy_from_slice(&w[r * k + j * n..][..n]);
            }
        }
        let tile_norms: Vec<f64> = per_tile.chunks(n).map(norm_bound).collect();
        for accumulation in [Accumulation::Fp32Seq, Accumulation::Fp16Seq] {
            let seq = seq_format(accumulation).expect("a -seq mode");
            for lit in ["fp16", "fp32", "fp(5, 10, round = zero)", "bf16"] {
                let Format::Float(output) = f(lit) else {
                    panic!("{lit} is a float format")
                };
                let spec = MatVec {
                    output,
                    ..spec(rows, cols, n, accumulation)
                };
                // [cols, b, R] plain tile sums.
                let mut y = vec![0.0f64; cols * b * rn];
                for j in 0..cols {
                    for bi in 0..b {
                        for r in 0..rn {
                            let xs = &x[bi * k + j * n..][..n];
                            let ws = &per_tile[(j * rn + r) * n..][..n];
                            y[(j * b + bi) * rn + r] = xs.iter().zip(ws).map(|(a, c)| a * c).sum();
                        }
                    }
                }
                let got = round_bounded_seq(&spec, &seq, &x, &per_tile, &tile_norms, &mut y);
                let want = matvec_exact(&spec, &x, b, &stack);
                for (e, (g, w)) in got.iter().zip(&want).enumerate() {
                    let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
                    assert!(same, "{accumulation:?} {lit}, element {e}: {g:e} vs {w:e}");
                }
            }
        }
    }
}
