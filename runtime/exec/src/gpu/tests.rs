//! The GPU against the exact float reference ([`super::super::matmul::matvec_exact`], independent
//! of both integer kernels). These need a CUDA device: they run in a build with the feature.
use super::*;
use crate::intdot::tests::{extreme_operands, random_product, spec};
use crate::intdot::{self, IntVector};
use crate::matmul::MatVec;
use crate::matmul::matvec_exact;
use nnp_grammar::Accumulation;
use nnp_numerics::FloatFormat;

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn values(t: &candle_core::Tensor) -> Vec<f64> {
    t.flatten_all()
        .and_then(|t| t.to_device(&candle_core::Device::Cpu))
        .and_then(|t| t.to_vec1())
        .expect("values")
}

/// The product with the vector's integers made on the host and uploaded.
fn on_gpu(spec: &MatVec, w: &IntWeights, x: &IntVector) -> Option<Vec<f64>> {
    let gpu = Gpu::open().expect("a CUDA device");
    let (gw, gx) = (
        gpu.weights(w).expect("upload"),
        gpu.vector(x).expect("upload"),
    );
    gpu.product(spec, (w, &gw), &gx)
        .expect("kernels run")
        .map(|t| values(&t))
}

/// The vector's values `[b, cols * n]`, from its integers and tile scales (exact).
fn vector_values(x: &IntVector, cols: usize, n: usize) -> Vec<f64> {
    let b = x.batch();
    let (q, s) = (x.ints(), x.tile_scales());
    let mut v = vec![0.0; b * cols * n];
    for j in 0..cols {
        for bi in 0..b {
            for l in 0..n {
                v[bi * cols * n + j * n + l] = f64::from(q[(j * b + bi) * n + l]) * s[j * b + bi];
            }
        }
    }
    v
}

/// Batches that leave partial 64-item blocks and odd items in the 2 x 2 thread tiles (1,
/// 33, 70, 95, 5) and a full block (64); native dimensions that fill a 64-lane stage in
/// part (16, 32, 48) or twice (128); one to eight column tiles (split across blocks or
/// not); exponent spreads of 3 binades (the GPU takes them) and 61 (it must refuse them:
/// the sums are inexact in f64); saturated and zero runs.
#[test]
fn gpu_products_equal_the_exact_reference_bit_for_bit() {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut taken = 0;
    for (n, rows, cols, b, acc, out) in [
        (16, 1, 1, 1, Accumulation::Exact, FloatFormat::FP16),
        (48, 2, 3, 33, Accumulation::Exact, FloatFormat::FP16),
        (128, 3, 2, 70, Accumulation::Exact, FloatFormat::BF16),
        (128, 2, 8, 95, Accumulation::Exact, FloatFormat::FP32),
        (32, 4, 1, 64, Accumulation::Exact, FloatFormat::FP64),
        (128, 1, 2, 5, Accumulation::Fp32Seq, FloatFormat::FP16),
    ] {
        let spec = spec(n, rows, cols, acc, out);
        for spread in [3, 3, 61] {
            let (want, wi, xi) = random_product(&mut s, &spec, b, spread);
            assert!(intdot::fits(&wi, &xi));
            let exact = intdot::sums_exact_in_any_order(&spec, &wi, &xi);
            match on_gpu(&spec, &wi, &xi) {
                Some(got) => {
                    assert!(exact);
                    taken += 1;
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "n {n} rows {rows} cols {cols} b {b}"
                    );
                }
                None => assert!(!exact, "the GPU refused a product it can compute"),
            }
        }
    }
    // Every exact-accumulation case at spread 3 (5 cases x 2) went to the GPU.
    assert!(taken >= 10, "{taken} products on the GPU");
}

/// The vector's integers made on the GPU from its values (`Gpu::vector_of`), as the
/// executor makes them: 21 products of different shapes, batches and output formats (fp16
/// and bf16 sums rounded on the device, fp64 ones too), with products the GPU refuses (wide
/// spreads) among them. Each result equals the exact reference bit for bit; the refused ones
/// are those whose sums are not exact in any order.
#[test]
fn gpu_vectors_made_on_the_device_give_the_exact_products() {
    let gpu = Gpu::open().expect("a CUDA device");
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut taken = 0;
    for k in 0..21usize {
        let (n, rows, cols, b) = [(128, 2, 3, 64), (32, 1, 2, 70), (16, 3, 1, 5)][k % 3];
        let out = [
            FloatFormat::FP16,
            FloatFormat::FP16,
            FloatFormat::BF16,
            FloatFormat::FP64,
        ][(k / 2) % 4];
        let spread = if k % 7 == 3 { 61 } else { 3 };
        let spec = spec(n, rows, cols, Accumulation::Exact, out);
        let (want, wi, xi) = random_product(&mut s, &spec, b, spread);
        let x =
            candle_core::Tensor::from_vec(vector_values(&xi, cols, n), (b, cols * n), gpu.device())
                .expect("upload");
        let gw = gpu.weights(&wi).expect("upload");
        let gx = gpu
            .vector_of(&x, cols, n)
            .expect("kernels run")
            .expect("integers");
        match gpu.product(&spec, (&wi, &gw), &gx).expect("kernels run") {
            Some(got) => {
                assert_eq!(bits(&values(&got)), bits(&want), "product {k}");
                taken += 1;
            }
            None => assert_eq!(spread, 61, "the GPU refused product {k}"),
        }
    }
    // Products 3, 10 and 17 have the wide spread; the other 18 went to the GPU.
    assert_eq!(taken, 18);
}

/// A vector with a NaN, or finer than the integers hold, has no integer form on the GPU.
#[test]
fn gpu_vectors_without_integers_are_refused() {
    let gpu = Gpu::open().expect("a CUDA device");
    let n = 16;
    for bad in [f64::NAN, f64::INFINITY, 1.0 + f64::EPSILON] {
        let mut v = vec![1.0; 2 * n];
        v[n + 3] = bad;
        let x = candle_core::Tensor::from_vec(v, (1, 2 * n), gpu.device()).expect("upload");
        assert!(
            gpu.vector_of(&x, 2, n).expect("kernels run").is_none(),
            "{bad:e}"
        );
    }
}

#[test]
fn gpu_extreme_products_by_hand() {
    // As the CPU kernel's test: 128 * 4095^2 = 2,146,435,200, the largest i32 partial, and
    // its negative; rows 2.. are +0.
    let spec = spec(128, 1, 1, Accumulation::Exact, FloatFormat::FP64);
    let ((w, x), (wi, xi)) = extreme_operands();
    let y = on_gpu(&spec, &wi, &xi).expect("on the GPU");
    assert_eq!(y[0], 2_146_435_200.0);
    assert_eq!(y[1], -2_146_435_200.0);
    assert!(y[2..].iter().all(|v| v.to_bits() == 0));
    // Rounded on the device: to fp16 both overflow (to +-inf, fp16's overflow mode); to
    // bf16 they round to 2^31 = 2,147,483,648 (8 significant bits: 2,146,435,200 lies
    // between 2^31 - 2^23 and 2^31, nearer the latter); fp32 holds them exactly
    // (4095^2 = 16,769,025 < 2^24, times 2^7).
    for (out, want) in [
        (FloatFormat::FP16, f64::INFINITY),
        (FloatFormat::BF16, 2_147_483_648.0),
        (FloatFormat::FP32, 2_146_435_200.0),
    ] {
        let spec = MatVec {
            output: out,
            ..spec
        };
        let y = on_gpu(&spec, &wi, &xi).expect("on the GPU");
        assert_eq!((y[0], y[1]), (want, -want), "{out:?}");
        assert_eq!(bits(&y), bits(&matvec_exact(&spec, &x, 1, &w)), "{out:?}");
    }
}
