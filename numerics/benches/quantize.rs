//! Quantization throughput on a 4M-element tensor, next to a plain elementwise pass over the
//! same data in the same run (`cargo bench -p nnp-numerics --bench quantize`).
//!
//! - `elementwise`: y = x * a + b over f32 (the memory-bound floor).
//! - `bfp_fast_f32`: `kernel::bfp_quantize_f32`, bfp(mant = 8), block = native = 128.
//! - `bfp_reference_f64`: `Format::quantize` (the scalar reference) on f64 data, runs of 128.
//! - `mx_fp8e4m3_fast_f32`: `kernel::mx_quantize_f32`, mx(elem = fp8e4m3, block = 32).
//! - `mx_fp8e4m3_reference_f64`: `Format::quantize` with the same format.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nnp_numerics::Format;
use nnp_numerics::kernel::{bfp_quantize_f32, mx_quantize_f32};
use std::hint::black_box;

const N: usize = 4 << 20;
const NATIVE: usize = 128;

fn data() -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    (0..N)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Roughly normal-ish weights: sum of uniforms, scaled.
            let u = ((s >> 40) as f32 / (1u64 << 24) as f32)
                + ((s & 0xFF_FFFF) as f32 / (1u64 << 24) as f32)
                - 1.0;
            u * 0.05
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let x = data();
    let xd: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
    let mut out = vec![0.0f32; N];
    let mut outd = vec![0.0f64; N];
    let mut g = c.benchmark_group("quantize_4M");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    g.warm_up_time(std::time::Duration::from_millis(500));
    g.measurement_time(std::time::Duration::from_secs(3));

    g.bench_function("elementwise", |b| {
        b.iter(|| {
            for (o, v) in out.iter_mut().zip(black_box(&x)) {
                *o = v * 1.5 + 0.25;
            }
            black_box(&out);
        })
    });

    let bfp: Format = "bfp(mant = 8, block = native, exp_bits = 5, round = even)"
        .parse()
        .unwrap();
    let Format::Bfp(b8) = bfp else { unreachable!() };
    g.bench_function("bfp_fast_f32", |b| {
        b.iter(|| {
            for (xr, or) in black_box(&x).chunks(NATIVE).zip(out.chunks_mut(NATIVE)) {
                bfp_quantize_f32(&b8, xr, NATIVE, or);
            }
            black_box(&out);
        })
    });
    g.bench_function("bfp_reference_f64", |b| {
        b.iter(|| {
            for (xr, or) in black_box(&xd).chunks(NATIVE).zip(outd.chunks_mut(NATIVE)) {
                bfp.quantize(xr, NATIVE, or);
            }
            black_box(&outd);
        })
    });
    let mx: Format = "mx(elem = fp8e4m3, block = 32)".parse().unwrap();
    let Format::Mx(m8) = mx else { unreachable!() };
    g.bench_function("mx_fp8e4m3_fast_f32", |b| {
        b.iter(|| {
            for (xr, or) in black_box(&x).chunks(NATIVE).zip(out.chunks_mut(NATIVE)) {
                mx_quantize_f32(&m8, xr, NATIVE, or);
            }
            black_box(&out);
        })
    });
    g.bench_function("mx_fp8e4m3_reference_f64", |b| {
        b.iter(|| {
            for (xr, or) in black_box(&xd).chunks(NATIVE).zip(outd.chunks_mut(NATIVE)) {
                mx.quantize(xr, NATIVE, or);
            }
            black_box(&outd);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
