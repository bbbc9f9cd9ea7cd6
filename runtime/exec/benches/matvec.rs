//! Shapes of one LSTM-1024 product at batch 64 (`samples/bench/lstm_1024.nnp`, N = 128):
//! the chunked f32/f64 matmul the software graph runs (`[8, 1024, 128] x [8, 128, 64]`, one
//! exact partial per tile), the exact summation of its partials, and the plain f32 matmul
//! `[1024, 1024] x [1024, 64]` that is the floor (`cargo bench -p nnp-exec --bench matvec`).

use candle_core::{DType, Device, Tensor};
use criterion::{Criterion, criterion_group, criterion_main};
use nnp_exec::matmul::{MatVec, sum_partials};
use nnp_exec::{intdot, mfu, quant};
use nnp_grammar::Accumulation;
use nnp_lowering::swgraph::BinOp;
use nnp_numerics::{Activation, FloatFormat};
use std::hint::black_box;

const N: usize = 128;
const TILES: usize = 8;
const B: usize = 64;

fn bench(c: &mut Criterion) {
    let dev = Device::Cpu;
    let k = TILES * N;
    let mut g = c.benchmark_group("lstm1024_matvec_b64");
    g.sample_size(20);
    g.warm_up_time(std::time::Duration::from_millis(500));
    g.measurement_time(std::time::Duration::from_secs(2));
    let w = Tensor::rand(-1f32, 1f32, (k, k), &dev).expect("w");
    let x = Tensor::rand(-1f32, 1f32, (k, B), &dev).expect("x");
    g.bench_function("floor_f32_matmul", |b| {
        b.iter(|| black_box(w.matmul(&x).expect("mm")))
    });
    for dt in [DType::F32, DType::F64] {
        let xb = Tensor::rand(-1f32, 1f32, (B, k), &dev)
            .and_then(|t| t.to_dtype(dt))
            .expect("xb");
        let wt = Tensor::rand(-1f32, 1f32, (k, k), &dev)
            .and_then(|t| t.to_dtype(dt))
            .expect("wt");
        g.bench_function(format!("wide_xw_{dt:?}"), |b| {
            b.iter(|| black_box(xb.matmul(&wt).expect("mm")))
        });
        let xc = xb.t().and_then(|t| t.contiguous()).expect("xc");
        g.bench_function(format!("wide_wx_{dt:?}"), |b| {
            b.iter(|| black_box(wt.matmul(&xc).expect("mm")))
        });
        let wa = Tensor::rand(-1f32, 1f32, (TILES, k, N), &dev)
            .and_then(|t| t.to_dtype(dt))
            .expect("wa");
        let xa = Tensor::rand(-1f32, 1f32, (TILES, N, B), &dev)
            .and_then(|t| t.to_dtype(dt))
            .expect("xa");
        g.bench_function(format!("chunked_{dt:?}"), |b| {
            b.iter(|| black_box(wa.matmul(&xa).expect("mm")))
        });
        let xt = Tensor::rand(-1f32, 1f32, (TILES, B, N), &dev)
            .and_then(|t| t.to_dtype(dt))
            .expect("xt");
        let wt = Tensor::rand(-1f32, 1f32, (TILES, N, k), &dev)
            .and_then(|t| t.to_dtype(dt))
            .expect("wt");
        g.bench_function(format!("chunked_transposed_{dt:?}"), |b| {
            b.iter(|| black_box(xt.matmul(&wt).expect("mm")))
        });
    }
    let spec = MatVec {
        rows: TILES,
        cols: TILES,
        n: N,
        accumulation: Accumulation::Exact,
        output: FloatFormat::FP16,
    };
    let parts: Vec<f32> = (0..TILES * k * B)
        .map(|i| (i % 977) as f32 - 488.0)
        .collect();
    g.bench_function("sum_partials_f32", |b| {
        b.iter(|| black_box(sum_partials(&spec, N, 1, black_box(&parts), B)))
    });
    // The integer path, whole product (kernel, scaling, exact sums): BFP-8-like data.
    let grid = |i: usize, len: usize| -> Vec<f64> {
        (0..len)
            .map(|j| ((j * 37 + i) % 255) as f64 - 127.0)
            .map(|q| q * 2f64.powi((i % 7) as i32 - 10))
            .collect()
    };
    let wi = intdot::IntWeights::new(&grid(1, k * k), TILES, TILES, N).expect("w fits");
    // A stack of BFP 8 integers made from its f64 values (what a first run does to each
    // weight stack): the LSTM's 8 x 8 tiles, and one tile alone (a small layer's).
    let wv = grid(1, k * k);
    g.bench_function("int_weights_new", |b| {
        b.iter(|| black_box(intdot::IntWeights::new(black_box(&wv), TILES, TILES, N)))
    });
    g.bench_function("int_weights_new_one_tile", |b| {
        b.iter(|| black_box(intdot::IntWeights::new(black_box(&wv[..N * N]), 1, 1, N)))
    });
    let xv = grid(2, B * k);
    g.bench_function("int_vector", |b| {
        b.iter(|| black_box(intdot::IntVector::new(black_box(&xv), B, TILES, N)))
    });
    // A vector of fp16 values to BFP 8 integers: quantized, then converted (the nodes one by
    // one), or in one pass (`IntVector::quantized`, what a run does for a product's vector).
    let fmt: nnp_numerics::Format = "bfp(mant = 8, block = native, exp_bits = 5, round = even)"
        .parse()
        .expect("format");
    let hv: Vec<f64> = (0..B * k)
        .map(|i| half::f16::from_f64(((i * 7919) % 4001) as f64 / 1000.0 - 2.0).to_f64())
        .collect();
    g.bench_function("quantize_then_int_vector", |b| {
        let mut q = vec![0.0; hv.len()];
        b.iter(|| {
            quant::quantize_runs(&fmt, black_box(&hv), N, N, &mut q);
            black_box(intdot::IntVector::new(&q, B, TILES, N))
        })
    });
    let bfp = quant::BfpInts::new(&fmt, N, intdot::mantissa_limit(N)).expect("bfp 8");
    g.bench_function("int_vector_quantized", |b| {
        b.iter(|| {
            black_box(intdot::IntVector::quantized(
                black_box(&hv),
                k,
                B,
                TILES,
                N,
                &bfp,
            ))
        })
    });
    // Each SIMD kernel this CPU has (`int_matvec_Avx2`, `int_matvec_Vnni`), at batch 64 and
    // at batch 1 (one item: each weight multiplied once).
    for which in intdot::Kernel::available().into_iter().skip(1) {
        g.bench_function(format!("int_matvec_{which:?}"), |b| {
            b.iter(|| {
                let xi = intdot::IntVector::new(black_box(&xv), B, TILES, N).expect("x fits");
                black_box(intdot::matvec(&spec, &wi, &xi, which))
            })
        });
        let one = intdot::IntVector::new(&xv[..k], 1, TILES, N).expect("x fits");
        g.bench_function(format!("int_matvec_b1_{which:?}"), |b| {
            b.iter(|| black_box(intdot::matvec(&spec, &wi, black_box(&one), which)))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("lstm1024_mfu_b64");
    g.sample_size(20);
    g.warm_up_time(std::time::Duration::from_millis(300));
    g.measurement_time(std::time::Duration::from_secs(1));
    let a: Vec<f64> = (0..B * k)
        .map(|i| ((i % 2001) as f64 - 1000.0) / 512.0)
        .collect();
    let bv: Vec<f64> = (0..B * k)
        .map(|i| ((i % 1999) as f64 - 999.0) / 256.0)
        .collect();
    let mut out = vec![0.0; B * k];
    g.bench_function("binary_add_fp16", |b| {
        b.iter(|| {
            mfu::binary(
                BinOp::Add,
                &FloatFormat::FP16,
                &a,
                &bv,
                &mut out,
                [false, false],
            );
            black_box(&out);
        })
    });
    g.bench_function("relu_fp16", |b| {
        b.iter(|| {
            mfu::relu(&FloatFormat::FP16, &a, &mut out);
            black_box(&out);
        })
    });
    let sigm = mfu::ActTable::load(Activation::Sigmoid, &FloatFormat::FP16, None).expect("table");
    g.bench_function("sigm_fp16", |b| {
        b.iter(|| {
            mfu::activate(&sigm, &a, &mut out, false);
            black_box(&out);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
