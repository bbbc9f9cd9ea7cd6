//! The fast f32 BFP kernel is bit-equal to the scalar reference.

use nnp_numerics::Format;
use nnp_numerics::kernel::{bfp_quantize_f32, quantize_f32};

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
        // Runs of 256: each run its own reference call.
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
