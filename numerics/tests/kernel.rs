//! The fast f32 BFP kernel is bit-equal to the scalar reference.

use nnp_numerics::Format;
use nnp_numerics::kernel::{bfp_quantize_f32, mx_quantize_f32, quantize_f32};

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (s >> 33) as u32;
            match i % 97 {
                // Specials and extremes now and then.
                0 => f32::from_bits(r & 0x807F_FFFF), // subnormal
                1 => 0.0,
                2 => -0.0,
                3 => f32::MAX,
                4 => f32::from_bits(0x40FF_FFFF),
                _ => {
                    // Random sign, exponent within +-40 of 1, random mantissa.
                    let e = 127 - 40 + (r % 80);
                    f32::from_bits((r & 0x8000_0000) | (e << 23) | ((r >> 7) & 0x7F_FFFF))
                }
            }
        })
        .collect()
}

#[test]
fn bfp_kernel_bit_equal_to_reference() {
    let lits = [
        "bfp(mant = 8)",
        "bfp(mant = 8, block = 16, round = away)",
        "bfp(mant = 5, block = 32, round = zero)",
        "bfp(mant = 4, block = 8, exp_bits = 3)",
        "bfp(mant = 12, block = 64, exp_bits = 8, range = full)",
        "bfp(mant = 24, block = 4, exp_bits = 9)",
        "bfp(mant = 6, round = stochastic(seed = 5))",
        "msfp(mant = 5)",
    ];
    let native = 128;
    for (k, lit) in lits.iter().enumerate() {
        let f: Format = lit.parse().unwrap();
        let Format::Bfp(b) = f else { panic!() };
        let mut x = data(128 * 40, k as u64 + 1);
        x[300] = f32::NAN;
        x[1000] = f32::NEG_INFINITY;
        let mut fast = vec![0.0f32; x.len()];
        bfp_quantize_f32(&b, &x, native, &mut fast);
        // The reference on the same run (f64), rounded to f32.
        assert_matches_reference(&f, lit, &x, native, &fast);
        // Runs of 256: each run its own reference call.
        let xs: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
        let mut generic = vec![0.0f32; x.len()];
        quantize_f32(&f, &x, 256, native, &mut generic);
        for (r, (xr, gr)) in xs.chunks(256).zip(generic.chunks(256)).enumerate() {
            let mut rr = vec![0.0; xr.len()];
            f.quantize(xr, native, &mut rr);
            for (i, (g, w)) in gr.iter().zip(&rr).enumerate() {
                let w = *w as f32;
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{lit} run {r} at {i}"
                );
            }
        }
    }
}

#[test]
fn mx_kernel_bit_equal_to_reference() {
    let lits = [
        "mx(elem = fp8e4m3)",
        "mx(elem = fp8e5m2, block = 16, round = away)",
        "mx(elem = fp6e3m2, round = zero)",
        "mx(elem = fp6e2m3)",
        "mx(elem = fp4e2m1, block = 8)",
        "mx(elem = int8)",
        "mx(elem = fp8e4m3, round = stochastic(seed = 2))",
    ];
    for (k, lit) in lits.iter().enumerate() {
        let f: Format = lit.parse().unwrap();
        let Format::Mx(m) = f else { panic!() };
        let mut x = data(32 * 100, k as u64 + 7);
        x[100] = f32::NAN;
        x[33] = f32::from_bits(0x40FF_FFFF);
        x[70] = 485.0;
        let mut fast = vec![0.0f32; x.len()];
        mx_quantize_f32(&m, &x, 128, &mut fast);
        assert_matches_reference(&f, lit, &x, 128, &fast);
    }
}

/// Round-away on values just below half an LSB: `|y| + 0.5` in f32 would round up to 1.
#[test]
fn away_just_below_half() {
    let v = 0.49999997f32; // 0.5 - 2^-25
    let f: Format = "bfp(mant = 8, round = away)".parse().unwrap();
    let Format::Bfp(b) = f else { panic!() };
    // Block max 1.0: E = 0, LSB 2^-6; v / 64 is 0.49999997 LSB -> 0.
    let x = [1.0, v / 64.0, -v / 64.0];
    let mut out = [0.0f32; 3];
    bfp_quantize_f32(&b, &x, 128, &mut out);
    assert_eq!(out, [1.0, 0.0, 0.0]);
    // MX e5m2: block max 2^35 -> scale 2^20; 7.9999995 * 2^-20 is 0.49999997 of the element
    // quantum 2^-16 -> 0 (the case the f32 `|y| + 0.5` trick got wrong).
    let f: Format = "mx(elem = fp8e5m2, round = away)".parse().unwrap();
    let Format::Mx(m) = f else { panic!() };
    let x = [f32::from_bits(0x40FF_FFFF), 2f32.powi(35)];
    let mut out = [0.0f32; 2];
    mx_quantize_f32(&m, &x, 128, &mut out);
    assert_eq!(out, [0.0, 2f32.powi(35)]);
}

/// Sweep of f32 values below a fixed block maximum (every rounding position relative to the
/// LSB, including just-below-half cases), fast vs reference, for each deterministic mode.
#[test]
fn sweep_against_reference() {
    for lit in [
        "bfp(mant = 8, round = even)",
        "bfp(mant = 5, round = away)",
        "bfp(mant = 4, round = zero)",
        "mx(elem = fp8e4m3, block = native, round = even)",
        "mx(elem = fp8e5m2, block = native, round = away)",
        "mx(elem = fp4e2m1, block = native, round = zero)",
        "mx(elem = int8, block = native, round = away)",
    ] {
        let f: Format = lit.parse().unwrap();
        let mut x = Vec::new();
        for b in (0x3000_0000u32..0x3F80_0000).step_by(997) {
            x.push(1.0f32);
            x.push(f32::from_bits(b));
        }
        // Exact half-quanta and their f32 neighbours at every scale.
        for e in -30..0 {
            for k in 0..16 {
                let v = (k as f32 + 0.5) * 2f32.powi(e);
                for w in [
                    v,
                    f32::from_bits(v.to_bits() - 1),
                    f32::from_bits(v.to_bits() + 1),
                ] {
                    if w < 1.0 {
                        x.extend([1.0, w, 1.0, -w]);
                    }
                }
            }
        }
        let mut fast = vec![0.0f32; x.len()];
        match f {
            Format::Bfp(b) => bfp_quantize_f32(&b, &x, 2, &mut fast),
            Format::Mx(m) => mx_quantize_f32(&m, &x, 2, &mut fast),
            _ => unreachable!(),
        }
        // Blocks of 2 (`block = native`, N = 2): the reference on each pair.
        for (i, pair) in x.chunks(2).enumerate() {
            let xs = [f64::from(pair[0]), f64::from(pair[1])];
            let mut r = [0.0; 2];
            f.quantize(&xs, 2, &mut r);
            assert_eq!(
                fast[2 * i + 1].to_bits(),
                (r[1] as f32).to_bits(),
                "{lit}: x = {:e}",
                pair[1]
            );
        }
    }
}

/// `fast` equals the f64 reference quantizer on the same run, rounded to f32, bit for bit (any
/// NaN equal to any NaN).
fn assert_matches_reference(f: &Format, lit: &str, x: &[f32], native: usize, fast: &[f32]) {
    let xs: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
    let mut reference = vec![0.0f64; x.len()];
    f.quantize(&xs, native, &mut reference);
    for i in 0..x.len() {
        let want = reference[i] as f32;
        assert!(
            fast[i].to_bits() == want.to_bits() || (fast[i].is_nan() && want.is_nan()),
            "{lit} at {i}: x = {:e} fast {:e} reference {:e}",
            x[i],
            fast[i],
            want
        );
    }
}
