use super::kernel::*;
use super::product::*;
use super::runs::*;
use super::sink::*;
use super::sliced::*;
use super::vector::*;
use super::weights::*;
use super::*;
use crate::matmul::{MatVec, matvec_exact};
use crate::quant::BfpInts;
use nnp_grammar::Accumulation;
use nnp_numerics::{FloatFormat, pow2};

#[test]
fn qmax_by_hand() {
    // 128 * 4095^2 = 2,146,435,200 <= 2^31 - 1 < 128 * 4096^2.
    assert_eq!(qmax(128), 4095);
    // 16 * 11585^2 = 2,147,395,600 <= 2^31 - 1 < 16 * 11586^2.
    assert_eq!(qmax(16), 11585);
    // Small N: capped by i16.
    assert_eq!(qmax(1), 32767);
}

#[test]
fn runs_to_integers_by_hand() {
    let mut q = [0i16; 16];
    let qm = qmax(16);
    assert_eq!(qm, 11585);
    // 11585 holds 13 bits: the largest magnitude 15.875 < 2^4 gives the unit 2^(4 - 13),
    // q = [8128, -512, 64, 0, -7936]; all share 6 trailing zero bits: unit 2^-3.
    let v = [
        15.875,
        -1.0,
        0.125,
        0.0,
        -16.0 + 0.5,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ];
    let mut v16 = [0.0; 16];
    v16[..12].copy_from_slice(&v);
    assert_eq!(to_ints(&v16, &mut q, qm), Some(-3));
    assert_eq!(q[..5], [127, -8, 1, 0, -124]);
    // -16 = -2^4: top 4, unit 2^(5 - 13) = 2^-8, q = -4096, then 2^-3 again: -128.
    v16[0] = -16.0;
    assert_eq!(to_ints(&v16, &mut q, qm), Some(-3));
    assert_eq!(q[0], -128);
    // 8191 * 2^-9 next to 15.875 needs all 13 bits at the unit 2^-9 (8191 is odd).
    v16[0] = 15.875;
    v16[1] = 8191.0 * 2f64.powi(-9);
    assert_eq!(to_ints(&v16, &mut q, qm), Some(-9));
    assert_eq!(q[..2], [8128, 8191]);
    // 2^-10 is half a unit of 2^-9: refused.
    v16[0] = 15.875;
    v16[1] = 2f64.powi(-10);
    assert_eq!(to_ints(&v16, &mut q, qm), None);
    // Non-finite and all-zero runs.
    let mut w = [0.0; 16];
    w[3] = f64::INFINITY;
    assert_eq!(to_ints(&w, &mut q, qm), None);
    w[3] = f64::NAN;
    assert_eq!(to_ints(&w, &mut q, qm), None);
    w[3] = -0.0;
    assert_eq!(to_ints(&w, &mut q, qm), Some(ZERO_RUN));
    assert!(q.iter().all(|&x| x == 0));
    // Units outside f64's normal scaling: 2^-1040 (subnormal) is refused, not mis-scaled.
    w[3] = 2f64.powi(-1040);
    assert_eq!(to_ints(&w, &mut q, qm), None);
    // BFP mantissas at unit 2^lsb (N = 128: 12 bits): the shared trailing zeros go to the
    // unit; all zeros are a zero run; 4096 needs 13 bits and a unit whose
    // `floor_log2(max) + 1 - 12` is past -1022 is refused.
    let qm = qmax(128);
    let mut m = [4i16, -8, 0, 12];
    assert_eq!(mantissa_unit(&mut m, 3, qm), Some(5));
    assert_eq!(m, [1, -2, 0, 3]);
    let mut m = [127i16, -2, 0, 0];
    assert_eq!(mantissa_unit(&mut m, -6, qm), Some(-6));
    assert_eq!(m, [127, -2, 0, 0]);
    assert_eq!(mantissa_unit(&mut [0i16; 4], 7, qm), Some(ZERO_RUN));
    assert_eq!(mantissa_unit(&mut [4096i16, 0, 0, 0], 0, qm), None);
    assert_eq!(mantissa_unit(&mut [-4095i16, 0, 0, 0], 0, qm), Some(0));
    assert_eq!(mantissa_unit(&mut [1i16, 0, 0, 0], -1011, qm), Some(-1011));
    assert_eq!(mantissa_unit(&mut [1i16, 0, 0, 0], -1012, qm), None);
}

/// Every tile of a vector built by tasks of several items ([`PAR_VALUES`]; the last task
/// shorter) holds what [`to_ints`] gives for that tile alone, at its place in the layout
/// (tile `j` of item `bi` at `j * b + bi`), read from items laid out with gaps too.
#[test]
fn int_vectors_split_into_tasks_hold_every_tile() {
    let (n, cols) = (128, 3);
    let per_task = PAR_VALUES / (cols * n);
    let mut s = 0x1234_5678_9abc_def1u64;
    for b in [1, per_task, per_task + 1, 2 * per_task + 7] {
        let x = run_values(&mut s, n, b * cols, 3);
        let stride = cols * n + 5;
        let mut wide = vec![f64::NAN; (b - 1) * stride + cols * n];
        for (bi, item) in x.chunks(cols * n).enumerate() {
            wide[bi * stride..][..cols * n].copy_from_slice(item);
        }
        let fmt = "bfp(mant = 8, block = native, exp_bits = 8)";
        let fmt: nnp_numerics::Format = fmt.parse().expect("format");
        let bfp = BfpInts::new(&fmt, n, mantissa_limit(n)).expect("bfp 8");
        let xi = IntVector::new(&x, b, cols, n).expect("fits");
        let xq = IntVector::quantized(&wide, stride, b, cols, n, &bfp).expect("fits");
        let mut q = vec![0i16; n];
        let mut quantized = vec![0.0; n];
        for bi in 0..b {
            for j in 0..cols {
                let (t, run) = (j * b + bi, &x[(bi * cols + j) * n..][..n]);
                let u = to_ints(run, &mut q, qmax(n));
                assert_eq!(Some(xi.unit[t]), u, "b {b}, item {bi}, tile {j}");
                assert_eq!(xi.q[t * n..][..n], q[..], "b {b}, item {bi}, tile {j}");
                // The quantized vector: the tile quantized, then to integers.
                crate::quant::quantize_runs(&fmt, run, n, n, &mut quantized);
                let u = to_ints(&quantized, &mut q, qmax(n));
                assert_eq!(Some(xq.unit[t]), u, "b {b}, item {bi}, tile {j}: quantized");
                assert_eq!(xq.q[t * n..][..n], q[..], "b {b}, item {bi}, tile {j}");
            }
        }
    }
}

/// A vector quantized straight to integers ([`IntVector::quantized`]) is the vector that
/// `quantize_runs` then [`IntVector::new`] give, field by field (integers, units, scales,
/// bits, common units), or `None` exactly where that is; and its [`IntVector::restore`] is
/// `quantize_runs`' output, bit for bit. Formats: BFP at mantissas of 2 to 13 bits (13
/// only symmetric: the full range's -4096 is past `to_ints`' 12 bits at N = 128 and is
/// refused, as are 14 bits, blocks other than the run, stochastic rounding and non-BFP
/// formats), every deterministic rounding, 3- to 8-bit exponents, N = 16 and 128. Data:
/// mantissa ties on both sides of zero, saturation (values past the largest exponent and
/// past the largest mantissa), exponents clamped from below (a block of values under the
/// smallest exponent, f64 subnormals), zeros and `-0.0`, all-zero runs, fp16 values and
/// tiles whose magnitudes lie 2^-40 to 2^40 apart; a NaN or an infinity in one run makes
/// both `None`. Items laid out with gaps between them (a slice of wider rows) give the
/// same vector.
#[test]
fn quantized_vectors_equal_quantize_then_to_ints() {
    use crate::quant::quantize_runs;
    use nnp_numerics::Format;
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let (mut taken, mut refused) = (0, 0);
    for n in [16usize, 128] {
        let limit = mantissa_limit(n);
        for round in ["even", "away", "zero"] {
            for (mant, exp_bits, range) in [
                (2, 5, "sym"),
                (3, 3, "full"),
                (5, 5, "sym"),
                (8, 5, "sym"),
                (8, 8, "full"),
                (12, 4, "full"),
                (13, 5, "sym"),
                (13, 5, "full"),
                (14, 5, "sym"),
            ] {
                let text = format!(
                    "bfp(mant = {mant}, block = native, exp_bits = {exp_bits}, \
                     round = {round}, range = {range})"
                );
                let fmt: Format = text.parse().expect("format");
                let Format::Bfp(bfp) = &fmt else {
                    panic!("{text} is BFP")
                };
                let Some(f) = BfpInts::new(&fmt, n, limit) else {
                    // Refused exactly where a mantissa could reach `to_ints`' limit.
                    let widest = bfp.max_mant() + i64::from(range == "full");
                    assert!(widest >= i64::from(limit), "{text} refused at N = {n}");
                    continue;
                };
                let (lo, hi) = bfp.exp_range();
                let (b, cols) = (3, 4);
                for case in 0..24 {
                    let mut x = vec![0.0; b * cols * n];
                    for (r, run) in x.chunks_mut(n).enumerate() {
                        let kind = (r + case) % 8;
                        let e = match kind {
                            // Past the largest exponent, or under the smallest.
                            3 => hi + 2,
                            4 => lo - 3,
                            _ => (xorshift(&mut s) % 81) as i32 - 40,
                        }
                        .clamp(-1000, 1000);
                        let lsb = e.clamp(lo, hi) - (mant - 2);
                        for (i, v) in run.iter_mut().enumerate() {
                            let r = xorshift(&mut s);
                            let sign = if r & 1 == 1 { -1.0 } else { 1.0 };
                            let m = (r >> 8) % (1 << (mant - 1)) as u64;
                            *v = sign
                                * match kind {
                                    // Ties of the mantissa's unit, the largest one too.
                                    0 if i == 0 => pow2(e) * 1.5,
                                    0 => (m as f64 + 0.5) * pow2(lsb),
                                    1 => ((1u64 << (mant - 1)) as f64 - 0.5) * pow2(lsb),
                                    2 => [0.0, -0.0][i % 2],
                                    5 => 5e-324 * (m + 1) as f64,
                                    6 => half::f16::from_f64(
                                        (r >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0,
                                    )
                                    .to_f64(),
                                    _ => {
                                        (1.0 + (r >> 11) as f64 / (1u64 << 53) as f64)
                                            * pow2(e - (i % 7) as i32)
                                    }
                                };
                        }
                    }
                    // Now and then a non-finite value in one run.
                    if case % 11 == 10 {
                        x[n + 3] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][case % 3];
                    }
                    let mut quantized = vec![0.0; x.len()];
                    quantize_runs(&fmt, &x, n, n, &mut quantized);
                    let want = IntVector::new(&quantized, b, cols, n);
                    let got = IntVector::quantized(&x, cols * n, b, cols, n, &f);
                    let case = format!("{text}, N = {n}, case {case}");
                    // The same items `2n + 3` values apart, NaN between them (never read).
                    let stride = cols * n + 2 * n + 3;
                    let mut wide = vec![f64::NAN; (b - 1) * stride + cols * n];
                    for (bi, item) in x.chunks(cols * n).enumerate() {
                        wide[bi * stride..][..cols * n].copy_from_slice(item);
                    }
                    let strided = IntVector::quantized(&wide, stride, b, cols, n, &f);
                    match (&got, &strided) {
                        (Some(g), Some(w)) => assert!(same_vector(g, w), "{case}: strided"),
                        (None, None) => {}
                        _ => panic!("{case}: strided differs"),
                    }
                    match (&want, &got) {
                        (Some(w), Some(g)) => {
                            assert!(same_vector(w, g), "{case}");
                            let back: Vec<u64> = g.restore().iter().map(|v| v.to_bits()).collect();
                            let want: Vec<u64> = quantized.iter().map(|v| v.to_bits()).collect();
                            assert_eq!(back, want, "{case}: restored");
                            taken += 1;
                        }
                        (None, None) => refused += 1,
                        _ => panic!("{case}: {} vs {}", want.is_some(), got.is_some()),
                    }
                }
            }
        }
    }
    assert!(
        taken > 200 && refused > 10,
        "{taken} taken, {refused} refused"
    );
    // Not BFP in runs of N: refused.
    for text in [
        "bfp(mant = 8, block = 16, exp_bits = 5)",
        "bfp(mant = 8, exp_bits = 5, round = stochastic(seed = 1))",
        "mx(elem = fp8e4m3, block = 32)",
    ] {
        let fmt: Format = text.parse().expect("format");
        assert!(
            BfpInts::new(&fmt, 128, mantissa_limit(128)).is_none(),
            "{text}"
        );
    }
}

#[test]
fn packed_layout_by_hand() {
    // n = 32: row 17 is in row block 1, lane 5 in pair 2 (second of the pair).
    assert_eq!(packed_at(32, 17, 5), ((16 + 2) * 16 + 1) * 2 + 1);
    // Every (row, lane) lands on its own offset.
    let n = 32;
    let mut seen = vec![false; n * n];
    for r in 0..n {
        for l in 0..n {
            let o = packed_at(n, r, l);
            assert!(!seen[o]);
            seen[o] = true;
        }
    }
}

/// The bytes of a stack lie at `grouped_at::<4>` of each row and lane, and each row's offset
/// is -128 times its integers' sum. n = 32: row 17 is in row block 1 and lane 6 in quad 1
/// (third lane of it); row 17 holds `l - 16` in lane `l`, whose sum is 496 - 512 = -16, so its
/// offset is 2048. A 128 anywhere leaves no bytes.
#[test]
fn narrow_layout_by_hand() {
    let n = 32;
    assert_eq!(grouped_at::<4>(n, 17, 6), ((8 + 1) * 16 + 1) * 4 + 2);
    let mut w: Vec<f64> = (0..n * n)
        .map(|e| ((e / n * 7 + e % n * 13) % 255) as f64 - 127.0)
        .collect();
    w.iter_mut().step_by(n).for_each(|v| *v = 1.0);
    for (l, v) in w[17 * n..18 * n].iter_mut().enumerate() {
        *v = l as f64 - 16.0;
    }
    let wi = IntWeights::new(&w, 1, 1, n).expect("fits");
    let rows = wi.tiles_row_major();
    assert_eq!(rows, w.iter().map(|&v| v as i16).collect::<Vec<_>>());
    // Where the kernel is VNNI the stack keeps its bytes alone, and its i16 tiles are made
    // from them: the same integers at `packed_at` either way.
    assert_eq!(wi.packed.is_empty(), wi.narrow.is_some());
    assert_eq!(wi.narrow.is_some(), Kernel::best().is_vnni());
    let packed = wi.packed_ints();
    for r in 0..n {
        for l in 0..n {
            assert_eq!(
                packed[packed_at(n, r, l)],
                w[r * n + l] as i16,
                "({r}, {l})"
            );
        }
    }
    let bytes = NarrowWeights::new(&packed, n).expect("bytes");
    for r in 0..n {
        for l in 0..n {
            assert_eq!(
                i16::from(bytes.ints[grouped_at::<4>(n, r, l)]),
                rows[r * n + l]
            );
        }
        let sum: i32 = rows[r * n..][..n].iter().map(|&q| i32::from(q)).sum();
        assert_eq!(bytes.offset[r], -128 * sum, "row {r}");
    }
    assert_eq!(bytes.offset[17], 2048);
    w[5] = 128.0;
    let wide = IntWeights::new(&w, 1, 1, n).expect("fits");
    assert!(NarrowWeights::new(&wide.packed_ints(), n).is_none() && wide.narrow.is_none());
}

pub(crate) fn spec(
    n: usize,
    rows: usize,
    cols: usize,
    acc: Accumulation,
    out: FloatFormat,
) -> MatVec {
    MatVec {
        rows,
        cols,
        n,
        accumulation: acc,
        output: out,
    }
}

pub(crate) fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Random operands of `spec` at batch `b` (weights, then vector: [`run_values`] with
/// `spread`) as integers, and the exact reference's result for them.
pub(crate) fn random_product(
    s: &mut u64,
    spec: &MatVec,
    b: usize,
    spread: u64,
) -> (Vec<f64>, IntWeights, IntVector) {
    let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
    let w = run_values(s, n, rows * cols * n, spread);
    let x = run_values(s, n, b * cols, spread);
    let want = matvec_exact(spec, &x, b, &w);
    let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
    let xi = IntVector::new(&x, b, cols, n).expect("fits");
    (want, wi, xi)
}

/// Runs of q * 2^u with adversarial units: per-run units 60 binades apart, all-zero runs,
/// -128 and +-127 mantissas (saturated BFP), 12-bit mantissas (the largest that fit), and
/// values that make fp16 ties and the inexact-running-sum path likely. `spread` binades of
/// units: 61 takes the two-sum path, 3 mostly the plain one.
pub(crate) fn run_values(s: &mut u64, len: usize, runs: usize, spread: u64) -> Vec<f64> {
    let mut v = vec![0.0; len * runs];
    for run in v.chunks_mut(len) {
        let kind = xorshift(s) % 6;
        let u = (xorshift(s) % spread) as i32 - 40;
        for x in run.iter_mut() {
            let q = match kind {
                0 => 0,
                1 => -128,
                2 => [127, -127][(xorshift(s) % 2) as usize],
                3 => (xorshift(s) % 8191) as i64 - 4095,
                _ => (xorshift(s) % 255) as i64 - 127,
            };
            *x = q as f64 * 2f64.powi(u);
        }
    }
    v
}

/// [`IntWeights::restore`] gives back every bit of the stack the integers came from:
/// adversarial runs ([`run_values`]), runs at both ends of the units the kernel accepts,
/// zero rows. A stack with a `-0.0` (whose integer has no sign) is not restorable.
#[test]
fn restored_stacks_equal_their_source_bit_for_bit() {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for (n, rows, cols, spread) in [(16, 3, 2, 61), (128, 2, 3, 3), (32, 1, 1, 61)] {
        let mut w = run_values(&mut s, n, rows * cols * n, spread);
        // 2^-1010 and 2^900 units next to the others (-40 to +20).
        for (x, k) in w[..n].iter_mut().zip(0i32..) {
            *x = f64::from(127 - 2 * k) * 2f64.powi(-1010);
        }
        for (x, k) in w[n..2 * n].iter_mut().zip(0i32..) {
            *x = f64::from(-4095 + 3 * k) * 2f64.powi(900);
        }
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        assert!(wi.restorable());
        assert_eq!(bits(&wi.restore().expect("restorable")), bits(&w), "n {n}");
        w[2 * n + 5] = -0.0;
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        assert!(!wi.restorable());
        assert_eq!(wi.restore(), None);
        // Integers that fit a byte, with zero rows between the others: on VNNI the stack
        // keeps the bytes alone, and restores from them.
        let mut w: Vec<f64> = (0..rows * cols * n * n)
            .map(|k| ((xorshift(&mut s) % 255) as f64 - 127.0) * 2f64.powi((k / n % 7) as i32 - 3))
            .collect();
        for row in w.chunks_mut(n).skip(1).step_by(3) {
            row.fill(0.0);
        }
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        assert_eq!(
            wi.narrow.is_some(),
            Kernel::best().is_vnni(),
            "n {n}: bytes"
        );
        assert_eq!(
            bits(&wi.restore().expect("restorable")),
            bits(&w),
            "n {n}: bytes"
        );
    }
}

/// Batches cover every remainder of the SIMD kernel's 6-item register blocks: b = 1, 8, 9,
/// 5 leave 1, 2, 3, 5; b = 70 is a task of 64 items (10 blocks of 6 and 4) and one of 6.
/// Tile sizes cover the kernel's copies for n = 64, 128 and 256, and the general one (16,
/// 32).
#[test]
fn kernels_agree_with_the_exact_reference_bit_for_bit() {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for (n, rows, cols, b, acc, out) in [
        (16, 1, 1, 1, Accumulation::Exact, FloatFormat::FP16),
        (16, 1, 2, 8, Accumulation::Exact, FloatFormat::FP16),
        (128, 2, 3, 7, Accumulation::Exact, FloatFormat::FP16),
        (128, 1, 2, 70, Accumulation::Exact, FloatFormat::FP32),
        (128, 1, 2, 5, Accumulation::Fp32Seq, FloatFormat::FP16),
        (64, 2, 2, 9, Accumulation::Fp16Seq, FloatFormat::FP16),
        (32, 3, 4, 13, Accumulation::Exact, FloatFormat::BF16),
        (16, 2, 2, 3, Accumulation::Exact, FloatFormat::FP64),
    ] {
        let spec = spec(n, rows, cols, acc, out);
        for spread in [61, 61, 3, 3] {
            let (want, wi, xi) = random_product(&mut s, &spec, b, spread);
            assert!(fits(&wi, &xi));
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for which in Kernel::available() {
                let got = matvec(&spec, &wi, &xi, which);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "n {n} rows {rows} cols {cols} b {b}"
                );
            }
            // Tasks of fewer items, as a product of few row tiles takes on more threads.
            for per_task in [6, 12, 18] {
                let got = matvec_tasks(&spec, &wi, &xi, Kernel::best(), per_task);
                assert_eq!(bits(&got), bits(&want), "{per_task} items per task, b {b}");
            }
            // The SIMD kernels (where present) and the scalar one give the same integers,
            // at every remainder of the item blocks.
            let tile = wi.tile(0, 0);
            let xs = column(&xi, 0);
            let blocks = |which: Kernel| {
                let mut v = Vec::new();
                kernel(
                    which,
                    tile,
                    xs,
                    // Units given: an emitting sink still gets every block.
                    &xi.unit[..b],
                    n,
                    &mut Emit(|bi, r0, p: &_| v.push((bi, r0, *p))),
                );
                v.sort_by_key(|e| (e.0, e.1));
                v
            };
            let c = blocks(Kernel::Scalar);
            assert_eq!(c.len(), b * n / ROW_BLOCK);
            for which in Kernel::available() {
                assert_eq!(blocks(which), c, "{which:?}");
            }
        }
    }
    // n = 256 takes its own copy of the SIMD kernel. 12-bit mantissas do not fit there
    // (`qmax(256)` is 2896), so BFP 8's: +-127 at most, a unit per run of n.
    let (n, rows, cols, b) = (256, 2, 2, 11);
    let spec = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
    let values = |s: &mut u64, runs: usize| -> Vec<f64> {
        (0..runs * n)
            .map(|k| ((xorshift(s) % 255) as f64 - 127.0) * 2f64.powi((k / n % 7) as i32 - 3))
            .collect()
    };
    let (w, x) = (values(&mut s, rows * cols * n), values(&mut s, b * cols));
    let want = matvec_exact(&spec, &x, b, &w);
    let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
    let xi = IntVector::new(&x, b, cols, n).expect("fits");
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for which in Kernel::available() {
        assert_eq!(bits(&matvec(&spec, &wi, &xi, which)), bits(&want), "n 256");
    }
}

/// Weights padded to the native dimension. Rows that end early: each row block's reach is
/// its last nonzero lane pair (by hand), and the SIMD kernel, which stops there, gives the
/// exact reference's bits and the scalar kernel's integers (which multiply every lane);
/// the vectors are nonzero in every lane, so a reach one pair short drops a product. Zero
/// rows at the end of a row tile: their outputs are +0.0 without a sum, as the exact
/// reference gives them.
#[test]
fn padded_weights_skip_their_zero_lanes_and_rows() {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut s = 0x5851_f42d_4c95_7f2du64;
    // Row lengths in lanes (the rest of the row is zero), cycled over the rows.
    let lengths = [0, 1, 2, 3, 17, 0, 0, 31, 32, 5];
    for (n, rows, cols, b) in [(32, 2, 2, 7), (128, 1, 2, 13), (64, 1, 1, 6)] {
        let product = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
        let mut w = vec![0.0; rows * cols * n * n];
        for (r, row) in w.chunks_mut(n).enumerate() {
            let len = lengths[r % lengths.len()].min(n);
            for x in &mut row[..len] {
                // Nonzero: 1..=127 with a random sign.
                let q = (xorshift(&mut s) % 127 + 1) as f64;
                *x = if xorshift(&mut s).is_multiple_of(2) {
                    q
                } else {
                    -q
                } * 2f64.powi(-7);
            }
        }
        // Row block 1 of the first tile all zero (n >= 32 has a second block).
        for row in w[..n * n].chunks_mut(n).skip(ROW_BLOCK).take(ROW_BLOCK) {
            row.fill(0.0);
        }
        let x: Vec<f64> = (0..b * cols * n)
            .map(|_| ((xorshift(&mut s) % 127 + 1) as f64) * 2f64.powi(-6))
            .collect();
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        let xi = IntVector::new(&x, b, cols, n).expect("fits");
        // Tile (0, 0), block 0: rows 0..16 have lengths 0, 1, 2, 3, 17, 0, 0, 31, 32, 5,
        // 0, 1, 2, 3, 17, 0, the longest 32 lanes (16 pairs), or n when shorter.
        let tile = wi.tile(0, 0);
        assert_eq!(tile.reach[0], (32.min(n) / 2) as u32, "n {n}");
        assert_eq!(tile.reach[1], 0, "n {n}");
        let want = matvec_exact(&product, &x, b, &w);
        for which in Kernel::available() {
            let got = matvec(&product, &wi, &xi, which);
            assert_eq!(bits(&got), bits(&want), "n {n} {which:?}");
        }
        for i in 0..rows {
            for j in 0..cols {
                let xs = column(&xi, j);
                let blocks = |which: Kernel| {
                    let mut v = Vec::new();
                    kernel(
                        which,
                        wi.tile(i, j),
                        xs,
                        &xi.unit[j * b..][..b],
                        n,
                        &mut Emit(|bi, r0, p: &_| v.push((bi, r0, *p))),
                    );
                    v.sort_by_key(|e| (e.0, e.1));
                    v
                };
                for which in Kernel::available() {
                    let scalar = blocks(Kernel::Scalar);
                    assert_eq!(blocks(which), scalar, "n {n} tile ({i}, {j}) {which:?}");
                }
            }
        }
    }
    // A 16 x 16 matrix padded to a 128 x 128 tile (`elman_rnn_small`'s shape): one block
    // of 8 lane pairs, seven empty ones.
    let mut w = vec![0.0; 128 * 128];
    for (r, row) in w.chunks_mut(128).take(16).enumerate() {
        for (l, x) in row[..16].iter_mut().enumerate() {
            *x = ((r * 16 + l) % 255) as f64 - 127.0;
        }
    }
    let wi = IntWeights::new(&w, 1, 1, 128).expect("fits");
    assert_eq!(wi.tile(0, 0).reach, &[8, 0, 0, 0, 0, 0, 0, 0]);
    // Its outputs: the 16 rows summed in `i32`, the 112 padding rows +0.0 without a sum.
    assert_eq!(wi.live_rows, [16]);
    let padded = spec(128, 1, 1, Accumulation::Exact, FloatFormat::FP16);
    let x: Vec<f64> = (0..5 * 128)
        .map(|k| ((xorshift(&mut s) % 255) as f64 - 127.0) * 2f64.powi(k % 5 - 2))
        .collect();
    let xi = IntVector::new(&x, 5, 1, 128).expect("fits");
    assert!(int_sums(&padded, &wi, &xi, 0, 0, 5, 32));
    let want = matvec_exact(&padded, &x, 5, &w);
    for which in Kernel::available() {
        assert_eq!(
            bits(&matvec(&padded, &wi, &xi, which)),
            bits(&want),
            "padded, {which:?}"
        );
    }
    // Row tiles whose live rows end at different blocks, and one that is all zero, with
    // empty row blocks between live ones: on `i32` sums, and on f64 sums (a row 30 binades
    // above the others spreads the units past what `i32` holds).
    let (n, rows, cols) = (32, 3, 2);
    let stack = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
    let x: Vec<f64> = (0..4 * cols * n).map(|k| (k % 7) as f64 - 3.0).collect();
    let xi = IntVector::new(&x, 4, cols, n).expect("fits");
    for high in [1.0, 2f64.powi(30)] {
        let mut w = vec![0.0; rows * cols * n * n];
        for (t, tile) in w.chunks_mut(n * n).enumerate() {
            let (i, j) = (t / cols, t % cols);
            // Row tile 0: row 20 in column tile 1, row 2 in both (times `high` in column
            // tile 0); row tile 1: row 3 in both; row tile 2: none.
            let live: &[(usize, usize, f64)] = match i {
                0 => &[(20, 1, -3.0), (2, 0, 5.0 * high), (2, 1, 3.0)],
                1 => &[(3, 0, 7.0), (3, 1, -1.0)],
                _ => &[],
            };
            for &(r, _, v) in live.iter().filter(|e| e.1 == j) {
                tile[r * n + n - 1] = v;
            }
        }
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        assert_eq!(wi.live_rows, [32, 16, 0]);
        // Tile (0, 0): block 0 holds row 2, block 1 is empty.
        assert_eq!(wi.tile(0, 0).reach, &[16, 0]);
        let int_path = int_sums(&stack, &wi, &xi, 0, 0, 4, 32);
        assert_eq!(int_path, high == 1.0);
        assert!(int_path || plain_sums(&stack, &wi, &xi, 0, 0, 4));
        let want = matvec_exact(&stack, &x, 4, &w);
        for which in Kernel::available() {
            let got = matvec(&stack, &wi, &xi, which);
            assert_eq!(bits(&got), bits(&want), "high {high}, {which:?}");
        }
    }
}

/// Every field of two vectors, floats by their bits.
fn same_vector(a: &IntVector, b: &IntVector) -> bool {
    let f64_bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    a.b == b.b
        && a.q == b.q
        && a.unit == b.unit
        && f64_bits(&a.scale) == f64_bits(&b.scale)
        && a.bits == b.bits
        && f64_bits(&a.aligned.base) == f64_bits(&b.aligned.base)
        && a.aligned.shift == b.aligned.shift
}

/// A vector assembled from one-column vectors (some of one item, standing for every item)
/// is `IntVector::new` of the concatenated values, field by field: adversarial runs
/// ([`run_values`]) with units 61 binades apart, columns of both kinds interleaved.
/// Columns of another batch, none at all, or a batch of 0 are refused.
#[test]
fn vectors_from_columns_equal_new_of_the_concatenation() {
    let mut s = 0x6a09_e667_f3bc_c908u64;
    let (n, b) = (16, 5);
    for spread in [61, 3] {
        // (items, values) per column: a column of one item stands for all five.
        let cols: Vec<(usize, Vec<f64>)> = [b, 1, b, b, 1, b]
            .into_iter()
            .map(|items| (items, run_values(&mut s, n, items, spread)))
            .collect();
        let columns: Vec<IntVector> = cols
            .iter()
            .map(|(items, v)| IntVector::new(v, *items, 1, n).expect("fits"))
            .collect();
        let mut full = vec![0.0; b * cols.len() * n];
        for (j, (items, v)) in cols.iter().enumerate() {
            for bi in 0..b {
                let item = if *items == 1 { 0 } else { bi };
                full[(bi * cols.len() + j) * n..][..n].copy_from_slice(&v[item * n..][..n]);
            }
        }
        let want = IntVector::new(&full, b, cols.len(), n).expect("fits");
        let refs: Vec<&IntVector> = columns.iter().collect();
        let got = IntVector::from_columns(&refs, b).expect("assembled");
        assert!(same_vector(&got, &want), "spread {spread}");
    }
    let three = IntVector::new(&run_values(&mut s, n, 3, 3), 3, 1, n).expect("fits");
    assert!(IntVector::from_columns(&[&three], b).is_none());
    assert!(IntVector::from_columns(&[], b).is_none());
    assert!(IntVector::from_columns(&[&three], 0).is_none());
}

/// Vectors stacked item-wise (batches 3, 1 and 4; three tile columns) are `IntVector::new`
/// of the concatenated batches, field by field, on adversarial runs ([`run_values`]) with
/// units 61 binades apart; and one product over the stack gives each part's product's bits
/// (`matvecs` of the parts in one pass too). Parts of other tile columns, or none, are
/// refused.
#[test]
fn stacked_vectors_equal_new_of_the_concatenated_batches() {
    let f64_bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut s = 0x3c6e_f372_fe94_f82bu64;
    let (n, cols) = (16, 3);
    let mut multiplied = 0;
    for spread in [61, 3] {
        let parts: Vec<(usize, Vec<f64>)> = [3, 1, 4]
            .into_iter()
            .map(|b| (b, run_values(&mut s, n, b * cols, spread)))
            .collect();
        let vectors: Vec<IntVector> = parts
            .iter()
            .map(|(b, v)| IntVector::new(v, *b, cols, n).expect("fits"))
            .collect();
        let all: Vec<f64> = parts.iter().flat_map(|(_, v)| v.iter().copied()).collect();
        let want = IntVector::new(&all, 8, cols, n).expect("fits");
        let refs: Vec<&IntVector> = vectors.iter().collect();
        let got = IntVector::stacked(&refs).expect("stacked");
        assert!(same_vector(&got, &want), "spread {spread}");
        // The products: the stack's rows by part are the parts' own products, bit for bit.
        let rows = 2;
        let spec = MatVec {
            rows,
            cols,
            n,
            accumulation: Accumulation::Exact,
            output: FloatFormat::FP32,
        };
        let w = run_values(&mut s, n, rows * cols * n, 5);
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        if !(fits(&wi, &got) && vectors.iter().all(|x| fits(&wi, x))) {
            continue;
        }
        let whole = f64_bits(&matvec(&spec, &wi, &got, Kernel::best()));
        let each: Vec<u64> = vectors
            .iter()
            .flat_map(|x| f64_bits(&matvec(&spec, &wi, x, Kernel::best())))
            .collect();
        assert_eq!(whole, each, "spread {spread}");
        let products: Vec<_> = vectors.iter().map(|x| (&spec, &wi, x)).collect();
        let together: Vec<u64> = matvecs(&products, Kernel::best())
            .iter()
            .flat_map(|y| f64_bits(y))
            .collect();
        assert!(!whole.is_empty());
        assert_eq!(together, each, "spread {spread}");
        multiplied += 1;
    }
    assert!(multiplied > 0, "no spread fits the kernel");
    let two = IntVector::new(&run_values(&mut s, n, 2, 3), 1, 2, n).expect("fits");
    let three = IntVector::new(&run_values(&mut s, n, 3, 3), 1, 3, n).expect("fits");
    assert!(IntVector::stacked(&[&two, &three]).is_none());
    assert!(IntVector::stacked(&[]).is_none());
}

/// Tile columns that are zero for every item of a task (a convolution's padding taps, a
/// zero initial state) are skipped by the sums, with the exact reference's bits on each
/// sum path: a column zero for the whole batch (`-0.0` in one item), one zero for the
/// first task's items only, one zero for a single item (not skipped with the others).
/// Which columns a task skips, by hand.
#[test]
fn columns_zero_for_every_item_are_skipped_exactly() {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut s = 0x3c6e_f372_fe94_f82bu64;
    let (n, rows, cols, b) = (32, 2, 4, 13);
    // Spread 61: running two-sums; spread 3: sums in i32 or plain f64.
    for spread in [61, 3] {
        let product = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
        let w = run_values(&mut s, n, rows * cols * n, spread);
        let mut x = run_values(&mut s, n, b * cols, spread);
        for (bi, item) in x.chunks_mut(cols * n).enumerate() {
            for (j, run) in item.chunks_mut(n).enumerate() {
                let zero = match j {
                    1 => Some(if bi == 3 { -0.0 } else { 0.0 }),
                    2 => (bi < 6).then_some(0.0),
                    3 => (bi == 7).then_some(0.0),
                    _ => None,
                };
                match zero {
                    Some(z) => run.fill(z),
                    // Every other run has a nonzero value.
                    None if run.iter().all(|v| *v == 0.0) => run.fill(2f64.powi(-40)),
                    None => {}
                }
            }
        }
        let want = matvec_exact(&product, &x, b, &w);
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        let xi = IntVector::new(&x, b, cols, n).expect("fits");
        let skipped = |b0: usize, len: usize| -> Vec<usize> {
            let part = Items { x: &xi, b0, len };
            (0..cols).filter(|&j| part.empty(j)).collect()
        };
        assert_eq!(skipped(0, 6), [1, 2]);
        assert_eq!(skipped(6, 6), [1]);
        assert_eq!(skipped(12, 1), [1]);
        assert_eq!(skipped(0, 13), [1]);
        assert_eq!(skipped(7, 1), [1, 3]);
        let cheap =
            int_sums(&product, &wi, &xi, 0, 0, 6, 32) || plain_sums(&product, &wi, &xi, 0, 0, 6);
        assert_eq!(cheap, spread == 3, "spread {spread}");
        for per_task in [6, 12, 18] {
            for which in Kernel::available() {
                let got = matvec_tasks(&product, &wi, &xi, which, per_task);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "spread {spread}, {per_task} per task"
                );
            }
        }
    }
}

/// The SIMD kernels skip the register blocks of `k` items (AVX2: 6; VNNI: 16) whose vector
/// tiles are all zero for a sink that adds: at batch `2k + 1`, with items `0..k` zero (a whole
/// block), item `k + 2` (one of a block) and item `2k` (the last block, alone), only items
/// `k..2k` reach the sink, and every sum equals the scalar kernel's, which multiplies every
/// item. On 13-bit data (no bytes) the VNNI kernel hands over to the AVX2 one; on bytes it
/// runs itself.
#[test]
fn kernel_skips_register_blocks_of_zero_vectors() {
    let mut s = 0x1f83_d9ab_fb41_bd6bu64;
    let n = 128;
    let bytes = |s: &mut u64, runs: usize| -> Vec<f64> {
        (0..n * runs)
            .map(|_| ((xorshift(s) % 255) as f64 - 127.0) * 0.25)
            .collect()
    };
    for which in Kernel::available().into_iter().skip(1) {
        for bytes_data in [false, true] {
            let k = if bytes_data && which == Kernel::Vnni {
                VNNI_ITEM_BLOCK
            } else {
                ITEM_BLOCK
            };
            let b = 2 * k + 1;
            let zero = |bi: usize| bi < k || bi == k + 2 || bi == 2 * k;
            let (w, mut x) = if bytes_data {
                (bytes(&mut s, n), bytes(&mut s, b))
            } else {
                // 13-bit integers, each run's first 4095: no bytes.
                let wide = |s: &mut u64, runs: usize| -> Vec<f64> {
                    let mut v: Vec<f64> = (0..n * runs)
                        .map(|_| (xorshift(s) % 8191) as f64 - 4095.0)
                        .collect();
                    v.iter_mut().step_by(n).for_each(|q| *q = 4095.0);
                    v
                };
                (wide(&mut s, n), wide(&mut s, b))
            };
            for (bi, run) in x.chunks_mut(n).enumerate() {
                if zero(bi) {
                    run.fill(0.0);
                }
            }
            let wi = IntWeights::new(&w, 1, 1, n).expect("fits");
            let xi = IntVector::new(&x, b, 1, n).expect("fits");
            assert!(
                xi.unit
                    .iter()
                    .enumerate()
                    .all(|(bi, &u)| (u == ZERO_RUN) == zero(bi))
            );
            assert_eq!(
                on_bytes(which, &wi, &xi),
                bytes_data && which == Kernel::Vnni
            );
            // As a product does for the kernels that read i16.
            if !on_bytes(which, &wi, &xi) {
                wi.widen();
            }
            let sums = |which: Kernel| {
                let (mut sum, mut items) = (vec![0i64; b * n], std::collections::BTreeSet::new());
                let mut sink = Adds(|bi: usize, r0: usize, p: &[i32; ROW_BLOCK]| {
                    items.insert(bi);
                    for (k, &v) in p.iter().enumerate() {
                        sum[bi * n + r0 + k] += i64::from(v);
                    }
                });
                kernel(which, wi.tile(0, 0), column(&xi, 0), &xi.unit, n, &mut sink);
                (sum, items)
            };
            let (want, all) = sums(Kernel::Scalar);
            assert_eq!(all.len(), b, "the scalar kernel takes every item");
            let (got, taken) = sums(which);
            assert_eq!(got, want, "{which:?}, bytes {bytes_data}");
            assert_eq!(
                taken.into_iter().collect::<Vec<_>>(),
                (k..2 * k).collect::<Vec<_>>(),
                "{which:?}, bytes {bytes_data}"
            );
        }
    }
}

/// Tile column `j` of every item of `x`, as the kernel takes it.
fn column(x: &IntVector, j: usize) -> XTiles<'_> {
    Items { x, b0: 0, len: x.b }.tiles(j)
}

/// Items per task, by hand: 64 where the row tiles alone give every thread two tasks;
/// otherwise about two tasks per thread, in multiples of 6 items.
#[test]
fn items_per_task_by_hand() {
    // LSTM 1024 at batch 64 on 2 threads: 8 row tiles x 1 block of 64.
    assert_eq!(items_per_task(64, 8, 2), 64);
    // A 96-row convolution (1 row tile) at batch 64 on 2 threads: 4 tasks of 18, 18, 18, 10.
    assert_eq!(items_per_task(64, 1, 2), 18);
    // 2 row tiles at batch 64 on 2 threads: 2 x 2 blocks of 32 -> 36 items (36 + 28).
    assert_eq!(items_per_task(64, 2, 2), 36);
    // 1 row tile at batch 256 on 2 threads: 4 blocks of 64 already.
    assert_eq!(items_per_task(256, 1, 2), 64);
    // Small batches: never fewer than one register block of 6.
    assert_eq!(items_per_task(5, 1, 16), 6);
    assert_eq!(items_per_task(1, 1, 1), 6);
    // 8 row tiles at batch 64 on 16 threads: 4 blocks each, 16 -> 18 items.
    assert_eq!(items_per_task(64, 8, 16), 18);
}

/// One tile at n = 128 with qmax = 4095 on both sides: x = -4095 everywhere, w row 0 =
/// -4095, so its partial is 128 * 4095^2 = 2,146,435,200 (the largest i32 partial); row 1 =
/// +4095: its negative; the other rows zero. Returns `(w, x)` as values and as integers.
pub(crate) fn extreme_operands() -> ((Vec<f64>, Vec<f64>), (IntWeights, IntVector)) {
    let n = 128;
    let mut w = vec![0.0; n * n];
    w[..n].fill(-4095.0);
    w[n..2 * n].fill(4095.0);
    let x = vec![-4095.0; n];
    let wi = IntWeights::new(&w, 1, 1, n).expect("fits");
    let xi = IntVector::new(&x, 1, 1, n).expect("fits");
    ((w, x), (wi, xi))
}

#[test]
fn extreme_products_by_hand() {
    let n = 128;
    let spec = spec(n, 1, 1, Accumulation::Exact, FloatFormat::FP64);
    let (_, (wi, xi)) = extreme_operands();
    for which in Kernel::available() {
        let y = matvec(&spec, &wi, &xi, which);
        assert_eq!(y[0], 2_146_435_200.0);
        assert_eq!(y[1], -2_146_435_200.0);
        // Rows 2.. are zero: +0 (never -0).
        assert!(y[2..].iter().all(|v| v.to_bits() == 0));
    }
    // One more significant bit than qmax holds is refused.
    assert!(IntVector::new(&vec![-4096.0 - 1.0; n], 1, 1, n).is_none());
    // Units whose sum leaves f64's normal range are refused by `fits`.
    let tiny = vec![2f64.powi(-600); n];
    let xt = IntVector::new(&tiny, 1, 1, n).expect("fits");
    let wt = IntWeights::new(&vec![2f64.powi(-500); n * n], 1, 1, n).expect("fits");
    assert!(!fits(&wt, &xt));
}

/// Vectors for the integer sums' bound tests (two tile columns): column 0 in units
/// `2^base`, column 1 in `2^(base + c)`; item 4 all zero, item 5 with mixed signs, the
/// others 123 to 127 (7 bits, as BFP 8 mantissas at their largest).
fn bound_items(b: usize, cols: usize, n: usize, base: i32, c: i32) -> Vec<f64> {
    (0..b * cols * n)
        .map(|e| {
            let (item, j, l) = (e / (cols * n), e / n % cols, e % n);
            let q = match item {
                4 => 0.0,
                5 => [127.0, -127.0, 99.0][l % 3],
                _ => 127.0 - (l % 5) as f64,
            };
            q * 2f64.powi(if j == 1 { base + c } else { base })
        })
        .collect()
}

/// The i64 sums on common units ([`int_sums`] of width 64) give the exact reference's bits
/// where neither i32 nor plain f64 sums are exact, up to their bound: BFP 8 mantissas at
/// their largest with weight and vector units `a` and `c` binades apart across two tile
/// columns (both up in tile column 1, so its partials move up `a + c` binades), `1 + 7 + 7 +
/// 7 + a + c <= 63` taken and one binade more refused (the running two-sums then give the
/// same bits). At `a + c >= 32` the sums pass `2^53`: their two f64 halves do not add
/// exactly and are summed again exactly (fp64 outputs keep the low half's bits). Outputs
/// in fp64, fp32 and fp16, mixed signs, an all-zero weight row run and an all-zero item.
#[test]
fn wide_int_sums_equal_the_exact_reference_up_to_their_bound() {
    let (n, rows, cols, b) = (128, 1, 2, 9);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (a, c) in [
        (16, 15),
        (16, 16),
        (20, 10),
        (30, 11),
        (20, 21),
        (21, 21),
        (0, 42),
    ] {
        let mut w = vec![0.0; rows * cols * n * n];
        for (e, v) in w.iter_mut().enumerate() {
            // Every row run holds a 127: its unit is the tile's.
            let (t, r) = (e / (n * n), e / n % n);
            let q = [127.0, -127.0, 126.0][(r + e) % 3];
            *v = match (t, r) {
                (1, 3) => 0.0,
                (1, _) => q * 2f64.powi(a - 40),
                _ => q * 2f64.powi(-40),
            };
        }
        let x = bound_items(b, cols, n, -20, c);
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        let xi = IntVector::new(&x, b, cols, n).expect("fits");
        assert!(fits(&wi, &xi));
        let wide = a + c <= 41;
        for out in [FloatFormat::FP64, FloatFormat::FP32, FloatFormat::FP16] {
            let product = spec(n, rows, cols, Accumulation::Exact, out);
            assert!(!int_sums(&product, &wi, &xi, 0, 0, b, 32), "a {a} c {c}");
            assert_eq!(plain_sums(&product, &wi, &xi, 0, 0, b), a + c <= 31);
            assert_eq!(
                int_sums(&product, &wi, &xi, 0, 0, b, 64),
                wide,
                "a {a} c {c}"
            );
            let want = matvec_exact(&product, &x, b, &w);
            for which in Kernel::available() {
                let got = matvec(&product, &wi, &xi, which);
                assert_eq!(bits(&got), bits(&want), "a {a} c {c} {out:?} {which:?}");
            }
        }
    }
}

/// The i32 sums on common units ([`int_sums`]) give the exact reference's bits where the
/// bound admits them, up to the bound: BFP 8 mantissas at their largest (+-127, so a tile
/// partial is +-128 * 127^2) with weight and vector units `a` and `c` binades apart across
/// two tile columns, `1 + 7 + 7 + 7 + a + c <= 31` taken and one binade more refused (then
/// the f64 sums give the same bits). Mixed signs, an all-zero weight row run and an
/// all-zero item ride along, and a random BFP 8 product (the LSTM's kind of data) takes the
/// path too.
#[test]
fn int_sums_equal_the_exact_reference_up_to_their_bound() {
    let (n, rows, cols, b) = (128, 1, 2, 9);
    let to_fp32 = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP32);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut s = 0x1234_5678_9abc_def1u64;
    for (a, c) in [(5, 4), (0, 9), (9, 0), (5, 5), (0, 10), (3, 3)] {
        // Weights: tile 0 rows in units 2^a, tile 1 in 2^0; row 3 of tile 1 all zero.
        let mut w = vec![0.0; rows * cols * n * n];
        for (e, v) in w.iter_mut().enumerate() {
            let (t, r) = (e / (n * n), e / n % n);
            let q = if r % 2 == 0 { 127.0 } else { -127.0 };
            *v = match (t, r) {
                (1, 3) => 0.0,
                (0, _) => q * 2f64.powi(a),
                _ => q,
            };
        }
        let x = bound_items(b, cols, n, 0, c);
        let want = matvec_exact(&to_fp32, &x, b, &w);
        let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
        let xi = IntVector::new(&x, b, cols, n).expect("fits");
        assert!(fits(&wi, &xi));
        let taken = int_sums(&to_fp32, &wi, &xi, 0, 0, b, 32);
        assert_eq!(taken, a + c <= 9, "a {a} c {c}");
        for which in Kernel::available() {
            assert_eq!(
                bits(&matvec(&to_fp32, &wi, &xi, which)),
                bits(&want),
                "a {a} c {c}"
            );
        }
    }
    // Random BFP 8 rows and tiles, units a few binades apart.
    let (n, rows, cols, b) = (128, 2, 3, 70);
    let to_fp16 = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
    let values = |s: &mut u64, runs: usize| -> Vec<f64> {
        let mut v = vec![0.0; runs * n];
        for run in v.chunks_mut(n) {
            let u = (xorshift(s) % 3) as i32 - 12;
            for x in run.iter_mut() {
                *x = ((xorshift(s) % 255) as f64 - 127.0) * 2f64.powi(u);
            }
        }
        v
    };
    let (w, x) = (values(&mut s, rows * cols * n), values(&mut s, b * cols));
    let want = matvec_exact(&to_fp16, &x, b, &w);
    let wi = IntWeights::new(&w, rows, cols, n).expect("fits");
    let xi = IntVector::new(&x, b, cols, n).expect("fits");
    assert!((0..rows).all(|i| int_sums(&to_fp16, &wi, &xi, i, 0, 64, 32)));
    for which in Kernel::available() {
        assert_eq!(
            bits(&matvec(&to_fp16, &wi, &xi, which)),
            bits(&want),
            "random BFP 8"
        );
    }
}

#[test]
fn tiles_whose_exponents_differ_by_more_than_53_binades_sum_exactly() {
    // Row 0 of two column tiles: 2049 (tile 0) and t (tile 1), rounded to fp16. 2049 is
    // halfway between 2048 and 2050: alone it rounds to even, 2048; any positive t breaks
    // the tie up, 2050. With t = 2^-30 the running f64 sum is exact (fast path); with t =
    // 2^-60 it is not (71 binades apart) and the row is summed again exactly.
    let n = 16;
    let spec = spec(n, 1, 2, Accumulation::Exact, FloatFormat::FP16);
    let mut w = vec![0.0; 2 * n * n];
    w[0] = 1.0;
    w[n * n] = 1.0;
    let wi = IntWeights::new(&w, 1, 2, n).expect("fits");
    for (t, want) in [
        (0.0, 2048.0),
        (2f64.powi(-30), 2050.0),
        (2f64.powi(-60), 2050.0),
    ] {
        let mut x = vec![0.0; 2 * n];
        x[0] = 2049.0;
        x[n] = t;
        let xi = IntVector::new(&x, 1, 2, n).expect("fits");
        assert!(fits(&wi, &xi));
        for which in Kernel::available() {
            assert_eq!(matvec(&spec, &wi, &xi, which)[0], want, "t = {t:e}");
        }
    }
}

#[test]
fn run_bits_by_hand() {
    let bits = |v: &[f64]| RunBits::of(v).map(|b| (b.span, b.value));
    // 1 and 11b; 1.1b; e4m3's largest value (111b * 2^6) down to its smallest subnormal
    // (2^-9); f64's smallest subnormal; fp16's 1 + 2^-10 (11 bits); f64's 1 + 2^-52.
    assert_eq!(bits(&[1.0, 3.0]), Some((2, 2)));
    assert_eq!(bits(&[1.5]), Some((2, 2)));
    assert_eq!(bits(&[-448.0, 0.0, 2f64.powi(-9)]), Some((18, 3)));
    assert_eq!(bits(&[f64::from_bits(1)]), Some((1, 1)));
    assert_eq!(bits(&[1.0 + 2f64.powi(-10), 4.0]), Some((13, 11)));
    assert_eq!(bits(&[-(1.0 + f64::EPSILON)]), Some((53, 53)));
    assert_eq!(bits(&[0.0, -0.0]), Some((0, 0)));
    assert_eq!(bits(&[1.0, f64::NAN]), None);
    assert_eq!(bits(&[f64::INFINITY]), None);
}

/// Runs of fp8-like values (4-bit significands, each value with an exponent of its own)
/// that span exactly `span` bits: the first value's top bit is `span` above the second's
/// lowest; one value in 8 is `+0.0` or `-0.0`. Runs start anywhere in 2^-40 .. 2^30, so
/// tiles of one row lie up to 70 binades apart.
fn fp8_like(s: &mut u64, runs: usize, len: usize, span: u32) -> Vec<f64> {
    let mut v = vec![0.0; runs * len];
    for run in v.chunks_mut(len) {
        let base = (xorshift(s) % 71) as i32 - 40;
        for (k, x) in run.iter_mut().enumerate() {
            let r = xorshift(s);
            let sign = if r.is_multiple_of(2) { 1.0 } else { -1.0 };
            let (sig, e) = match k {
                0 => (15.0, base + span as i32 - 4),
                1 => (9.0, base),
                _ if r % 8 == 1 => (0.0, 0),
                _ => (
                    (8 + (r >> 8) % 8) as f64,
                    base + ((r >> 16) % (span as u64 - 3)) as i32,
                ),
            };
            *x = sign * sig * 2f64.powi(e);
        }
    }
    v
}

/// Products of fp8-like operands (runs spanning 11 to 28 bits, more than one `i16` unit holds
/// whole) on integer slices: the slice counts and widths by hand at N = 128 (24 bits for
/// both sides' integers), the outputs the exact reference's bits on both kernels, and
/// operands that would take more than six passes refused.
#[test]
fn sliced_products_equal_the_exact_reference_bit_for_bit() {
    let (n, rows, cols, b) = (128, 2, 3, 13);
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let spec = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
    // (weights' span, vector's span, weight slices, their width, the vector's width,
    // vector slices), the split with the fewest passes (every run spans the same bits, so
    // every row block is busy in every slice), then the fewest weight slices, then the
    // narrowest: 20 and 14 bits take 2 x 1 passes at widths 10 + 14 (at 9 + 15: 3 x 1;
    // at 11 + 13 and above: 2 x 2); 20 and 15 bits 3 x 1 at 9 + 15 (2 x 2 at the others);
    // 20 and 28 bits 2 x 2 at 10 + 14 (3 x 2 at 9 + 15, 2 x 3 at 11 + 13 to 14 + 10);
    // 13 and 11 bits 1 x 1 at 13 + 11; 13 and 12 bits 1 x 2 at 13 + 11 (as few passes,
    // but more weight slices, below 13; as many at 14 and 15, but wider); 15 and 24
    // bits 1 x 3 at 15 + 9 (2 x 2 up to 12 + 12, 2 x 3 at 13 + 11 and 14 + 10).
    let cases = [
        (20, 14, 2, 10, 14, 1),
        (20, 15, 3, 9, 15, 1),
        (20, 28, 2, 10, 14, 2),
        (13, 11, 1, 13, 11, 1),
        (13, 12, 1, 13, 11, 2),
        (15, 24, 1, 15, 9, 3),
    ];
    for (span_w, span_x, slices, beta, beta_x, parts) in cases {
        let case = format!("weights {span_w} bits, vector {span_x} bits");
        let w = fp8_like(&mut s, rows * cols * n, n, span_w);
        let x = fp8_like(&mut s, b * cols, n, span_x);
        assert!(
            IntWeights::new(&w, rows, cols, n).is_none(),
            "{case}: no unsliced form"
        );
        let sw = SlicedWeights::new(&w, &x, rows, cols, n).expect("slices");
        assert_eq!(
            (sw.slices, sw.w.limit, sw.beta_x),
            (slices, (1 << beta) - 1, beta_x),
            "{case}"
        );
        let xs = super::super::matmul::slices(&x, n, sw.beta_x).expect("slices");
        assert_eq!(xs.len(), parts, "{case}");
        let want = matvec_exact(&spec, &x, b, &w);
        for which in Kernel::available() {
            let got = sw.matvec(&spec, &x, b, which).expect("sliced product");
            assert_eq!(got.len(), want.len());
            for (k, (g, e)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), e.to_bits(), "{case}, {which:?}, output {k}");
            }
        }
    }
    // Too many passes: 7 weight slices; 2 weight slices times 4 vector slices; the `-seq`
    // modes (which round each tile's partial, split by the slices); values of 9 bits.
    let x = fp8_like(&mut s, b * cols, n, 14);
    let w = fp8_like(&mut s, rows * cols * n, n, 91);
    assert!(SlicedWeights::new(&w, &x, rows, cols, n).is_none());
    let w = fp8_like(&mut s, rows * cols * n, n, 20);
    let sw = SlicedWeights::new(&w, &x, rows, cols, n).expect("slices");
    assert_eq!(sw.beta_x, 14);
    let x = fp8_like(&mut s, b * cols, n, 43);
    assert!(sw.matvec(&spec, &x, b, Kernel::best()).is_none());
    let x = fp8_like(&mut s, b * cols, n, 42);
    assert!(sw.matvec(&spec, &x, b, Kernel::best()).is_some());
    let seq = super::super::matmul::MatVec {
        accumulation: Accumulation::Fp32Seq,
        ..spec
    };
    assert!(sw.matvec(&seq, &x, b, Kernel::best()).is_none());
    // The kernel's i32 sums: 128 * 1023 * 16383 <= 2^31 - 1 < 128 * 1023 * 32767.
    let x = fp8_like(&mut s, b * cols, n, 14);
    let sw = SlicedWeights::new(&w, &x, rows, cols, n).expect("slices");
    assert_eq!(sw.w.limit, 1023);
    let fourteen = IntVector::with_limit(&x, b, cols, n, (1 << 14) - 1).expect("fits");
    let fifteen = IntVector::with_limit(&x, b, cols, n, (1 << 15) - 1).expect("fits");
    assert!(fits(&sw.w, &IntVector::repeated(&[fourteen], sw.slices)));
    assert!(!fits(&sw.w, &IntVector::repeated(&[fifteen], sw.slices)));
    // Lane 1 of a run is 9 * 2^base: 257 * 2^base (9 bits) is refused, 129 * 2^base (8)
    // taken, neither moving the run's span.
    assert!(sw.matvec(&spec, &nine_x(&x), b, Kernel::best()).is_none());
    // `refuses` says so from the runs alone, in any order of them (the last run first
    // here), and refuses nothing that slices: too many passes are `new`'s to find.
    let mut nine = w.clone();
    nine[1] = w[1] / 9.0 * 257.0;
    assert!(SlicedWeights::new(&nine, &x, rows, cols, n).is_none());
    let mut reordered = nine[n..].to_vec();
    reordered.extend_from_slice(&nine[..n]);
    assert!(SlicedWeights::refuses(&reordered, n));
    nine[1] = w[1] / 9.0 * 129.0;
    assert!(SlicedWeights::new(&nine, &x, rows, cols, n).is_some());
    assert!(!SlicedWeights::refuses(&nine, n));
    let too_many = fp8_like(&mut s, rows * cols * n, n, 91);
    assert!(!SlicedWeights::refuses(&too_many, n));
    nine[n + 2] = f64::NAN;
    assert!(SlicedWeights::refuses(&nine, n));
    // A first vector the slices cannot take splits the weights for the narrowest vectors
    // (13 bits take one slice of 13), and takes the float path itself.
    let w = fp8_like(&mut s, rows * cols * n, n, 13);
    let mut nan = x.clone();
    nan[3] = f64::NAN;
    for first in [nine_x(&x), nan] {
        let sw = SlicedWeights::new(&w, &first, rows, cols, n).expect("slices");
        assert_eq!((sw.slices, sw.w.limit), (1, (1 << 13) - 1));
        assert!(sw.matvec(&spec, &first, b, Kernel::best()).is_none());
        assert!(sw.matvec(&spec, &x, b, Kernel::best()).is_some());
    }
}

/// `x` with a value of 9 bits in place of lane 1's `9 * 2^base`.
fn nine_x(x: &[f64]) -> Vec<f64> {
    let mut nine = x.to_vec();
    nine[1] = x[1] / 9.0 * 257.0;
    nine
}

/// Where a few runs span far more bits than the rest (MX data), the weights take slices
/// wide enough for the rest: their second slice is then nonzero in few row blocks, which
/// the kernel skips. Here every run spans 12 bits but one, which spans 20, and vectors
/// span 9: at widths 12 + 12 to 15 + 9 the work is every row block once plus the wide
/// run's block (2 slices; 12 + 12 the narrowest of them), at 10 + 14 and 11 + 13 every
/// block twice (12 > 11), at 9 + 15 twice and one block a third time. The product is the
/// exact reference's, bit for bit.
#[test]
fn sparse_wide_runs_keep_the_second_weight_slice_sparse() {
    let (n, rows, cols, b) = (128, 2, 3, 7);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut w = fp8_like(&mut s, rows * cols * n, n, 12);
    let wide = fp8_like(&mut s, 1, n, 20);
    w[(3 * n + 5) * n..][..n].copy_from_slice(&wide);
    let x = fp8_like(&mut s, b * cols, n, 9);
    let sw = SlicedWeights::new(&w, &x, rows, cols, n).expect("slices");
    assert_eq!((sw.slices, sw.w.limit, sw.beta_x), (2, (1 << 12) - 1, 12));
    // Tile 3, row 5: the second slice of its row block alone has a nonzero integer.
    let busy: Vec<usize> = (0..rows * 2 * cols)
        .filter(|&t| {
            sw.w.reach[t * n / ROW_BLOCK..][..n / ROW_BLOCK]
                .iter()
                .any(|&r| r > 0)
        })
        .collect();
    assert_eq!(busy.len(), rows * cols + 1);
    let spec = spec(n, rows, cols, Accumulation::Exact, FloatFormat::FP16);
    let want = matvec_exact(&spec, &x, b, &w);
    for which in Kernel::available() {
        let got = sw.matvec(&spec, &x, b, which).expect("sliced product");
        let same = got
            .iter()
            .zip(&want)
            .all(|(g, e)| g.to_bits() == e.to_bits());
        assert!(same && got.len() == want.len(), "{which:?}");
    }
}

/// The VNNI kernel's bytes at their extremes. With n = 128, row 0 of the tile is -128 in
/// every lane but the last (-127), row 1 is 127 in every lane, rows 2.. are random bytes that
/// end at lane 2 r (reaches of every parity, so that a row block's lane quads run past its
/// last nonzero pair). Vector items: all -128 but the last lane (-127), all 127, random bytes
/// (13 items: every remainder of the register blocks). Every run holds an odd integer, so
/// that `to_ints` keeps them as they are. By hand: row 0 times item 0 is 127 * 16384 + 16129
/// = 2,096,897, row 1 times item 0 is 127 * (127 * -128 - 127) = -2,080,641; every partial is
/// checked against its sum in `i64`. A weight of 128 or a vector integer of -129 leaves that
/// side without bytes, and the same products take the AVX2 kernel.
#[test]
fn vnni_kernel_takes_bytes_at_their_extremes() {
    let n = 128;
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut byte = || (xorshift(&mut s) % 256) as i64 - 128;
    let mut w = vec![0i64; n * n];
    for (r, row) in w.chunks_mut(n).enumerate() {
        match r {
            0 => row.fill(-128),
            1 => row.fill(127),
            _ => {
                row[..(2 * r).min(n)].iter_mut().for_each(|v| *v = byte());
                row[0] |= 1;
            }
        }
    }
    w[n - 1] = -127;
    // Two register blocks of the VNNI kernel: 16 items and 9.
    let b = 25;
    let mut x = vec![0i64; b * n];
    for (bi, item) in x.chunks_mut(n).enumerate() {
        match bi {
            0 => item.fill(-128),
            1 => item.fill(127),
            _ => {
                item.iter_mut().for_each(|v| *v = byte());
                item[0] |= 1;
            }
        }
    }
    x[n - 1] = -127;
    let floats = |v: &[i64]| v.iter().map(|&q| q as f64).collect::<Vec<_>>();
    let dot = |r: usize, bi: usize| -> i64 { (0..n).map(|l| w[r * n + l] * x[bi * n + l]).sum() };
    assert_eq!(dot(0, 0), 2_096_897);
    assert_eq!(dot(1, 0), -2_080_641);
    let partials = |wi: &IntWeights, xi: &IntVector, which: Kernel| {
        let mut got = vec![0i64; xi.b * n];
        kernel(
            which,
            wi.tile(0, 0),
            column(xi, 0),
            &[],
            n,
            &mut Emit(|bi, r0, p: &[i32; ROW_BLOCK]| {
                for (k, &v) in p.iter().enumerate() {
                    got[bi * n + r0 + k] = i64::from(v);
                }
            }),
        );
        got
    };
    let want: Vec<i64> = (0..b * n).map(|e| dot(e % n, e / n)).collect();
    let wi = IntWeights::new(&floats(&w), 1, 1, n).expect("fits");
    let xi = IntVector::new(&floats(&x), b, 1, n).expect("fits");
    assert_eq!(
        wi.tiles_row_major(),
        w.iter().map(|&q| q as i16).collect::<Vec<_>>()
    );
    assert_eq!(
        (wi.narrow.is_some(), xi.biased.is_some()),
        (
            Kernel::best() == Kernel::Vnni,
            Kernel::best() == Kernel::Vnni
        )
    );
    for which in Kernel::available() {
        assert_eq!(partials(&wi, &xi, which), want, "{which:?}");
    }
    // Fewer items, each count one register block of its own (rows of every reach): the first
    // items alone.
    for items in [1, 2, 3, 8, 9, 16] {
        let few = IntVector::new(&floats(&x[..items * n]), items, 1, n).expect("fits");
        for which in Kernel::available() {
            let got = partials(&wi, &few, which);
            assert_eq!(got, want[..items * n], "{items} items, {which:?}");
        }
    }

    // One integer out of a byte's range on either side: no bytes, the same partials.
    let (mut w2, mut x2) = (w.clone(), x.clone());
    w2[5] = 128;
    x2[7] = -129;
    let wide_w = IntWeights::new(&floats(&w2), 1, 1, n).expect("fits");
    let wide_x = IntVector::new(&floats(&x2), b, 1, n).expect("fits");
    assert!(wide_w.narrow.is_none() && wide_x.biased.is_none());
    let want2 = |w: &[i64], x: &[i64]| -> Vec<i64> {
        (0..b * n)
            .map(|e| {
                (0..n)
                    .map(|l| w[(e % n) * n + l] * x[(e / n) * n + l])
                    .sum()
            })
            .collect()
    };
    for which in Kernel::available() {
        assert_eq!(partials(&wide_w, &xi, which), want2(&w2, &x), "{which:?}");
        assert_eq!(partials(&wi, &wide_x, which), want2(&w, &x2), "{which:?}");
    }
    // A byte-only stack under such a vector: its tiles took the scalar loop above; widened
    // (once, as a product does), the i16 kernels read them, with the same partials.
    assert_eq!(wi.tile(0, 0).ints.is_empty(), wi.narrow.is_some());
    wi.widen();
    assert_eq!(wi.tile(0, 0).ints.len(), n * n);
    for which in Kernel::available() {
        assert_eq!(partials(&wi, &wide_x, which), want2(&w, &x2), "{which:?}");
        assert_eq!(partials(&wi, &xi, which), want, "{which:?}");
    }
}

/// A vector's bytes for the VNNI kernel are its integers plus 128, by hand: -128, -1, 0 and 127
/// become 0, 127, 128 and 255; a 128 anywhere leaves no bytes.
#[test]
fn vector_bytes_by_hand() {
    let n = 16;
    let mut x = vec![0.0f64; n];
    x[..4].copy_from_slice(&[-128.0, -1.0, 0.0, 127.0]);
    let xi = IntVector::new(&x, 1, 1, n).expect("fits");
    let Some(bytes) = &xi.biased else {
        assert!(!Kernel::best().is_vnni(), "a VNNI kernel keeps the bytes");
        return;
    };
    assert_eq!(bytes[..5], [0, 127, 128, 255, 128]);
    x[7] = 128.0;
    assert!(IntVector::new(&x, 1, 1, n).expect("fits").biased.is_none());
}
