//! The GPU against the exact float reference ([`super::super::matmul::matvec_exact`], independent
//! of both integer kernels). These need a CUDA device: they run in a build with the feature.
use super::*;
use crate::intdot::tests::{extreme_operands, random_product, spec};
use crate::matmul::matvec_exact;
use nnp_grammar::Accumulation;
use nnp_numerics::FloatFormat;

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn on_gpu(spec: &MatVec, w: &IntWeights, x: &IntVector) -> Option<Vec<f64>> {
    let gpu = Gpu::open().expect("a CUDA device");
    let (gw, gx) = (
        gpu.weights(w).expect("upload"),
        gpu.vector(x).expect("upload"),
    );
    let product = Product {
        spec: *spec,
        w: (w, &gw),
        x: (x, &gx),
    };
    gpu.products(&[product])
        .expect("kernels run")
        .pop()
        .flatten()
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

/// Many products in one call, as the executor batches them: 21 products (two launches of
/// up to 16) of different shapes, batches and output formats (runs rounded on the device
/// to fp16 and bf16, runs of fp64 sums rounded on the host), with products the GPU refuses
/// (wide spreads) among them. Each result equals the exact reference bit for bit, and the
/// refused ones come back as `None` in their places.
#[test]
fn gpu_batched_products_equal_the_exact_reference_bit_for_bit() {
    let gpu = Gpu::open().expect("a CUDA device");
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut cases = Vec::new();
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
        let exact = intdot::sums_exact_in_any_order(&spec, &wi, &xi);
        let (gw, gx) = (
            gpu.weights(&wi).expect("upload"),
            gpu.vector(&xi).expect("upload"),
        );
        cases.push((spec, wi, xi, gw, gx, want, exact));
    }
    let products: Vec<Product> = cases
        .iter()
        .map(|(spec, wi, xi, gw, gx, ..)| Product {
            spec: *spec,
            w: (wi, gw),
            x: (xi, gx),
        })
        .collect();
    let got = gpu.products(&products).expect("kernels run");
    assert_eq!(got.len(), cases.len());
    let mut taken = 0;
    for (k, (got, (.., want, exact))) in got.iter().zip(&cases).enumerate() {
        match got {
            Some(got) => {
                assert!(exact, "product {k}");
                assert_eq!(bits(got), bits(want), "product {k}");
                taken += 1;
            }
            None => assert!(!exact, "the GPU refused product {k}, which it can compute"),
        }
    }
    // Products 3, 10 and 17 have the wide spread; the other 18 went to the GPU.
    assert_eq!(taken, 18);
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
