//! Block formats: BFP (docs/numerics.md), OCP MX golden cases, seed 000's worked examples.

use nnp_numerics::{Format, HbfpFormat, MxFormat};

fn q(lit: &str, x: &[f64]) -> Vec<f64> {
    let f: Format = lit.parse().unwrap();
    let mut out = vec![0.0; x.len()];
    f.quantize(x, x.len(), &mut out);
    out
}

fn mx(lit: &str) -> MxFormat {
    match lit.parse::<Format>().unwrap() {
        Format::Mx(m) => m,
        other => panic!("not mx: {other}"),
    }
}

fn hbfp(lit: &str) -> HbfpFormat {
    match lit.parse::<Format>().unwrap() {
        Format::Hbfp(h) => h,
        other => panic!("not hbfp: {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// BFP

#[test]
fn bfp_section2_hand_example() {
    // mant 8 (incl. sign), max |x| = 3.0 -> E = 1, LSB = 2^(1 - 6) = 1/32.
    // 1.0 -> 32/32; 0.51 -> round(16.32) = 16 -> 0.5; -3.0 -> -96/32; 0.015625 = 0.5 LSB ties
    // to even 0; 0.047 -> round(1.504) = 2 -> 1/16.
    let got = q("bfp(mant = 8)", &[1.0, 0.51, -3.0, 0.015625, 0.047]);
    assert_eq!(got, vec![1.0, 0.5, -3.0, 0.0, 0.0625]);
    // Saturation: 3.99 -> round(127.68) = 128 -> clamped to 127 (symmetric).
    let got = q("bfp(mant = 8)", &[3.99, -3.99]);
    assert_eq!(got, vec![127.0 / 32.0, -127.0 / 32.0]);
    // With range = full the negative side reaches -128.
    let got = q("bfp(mant = 8, range = full)", &[3.99, -3.99]);
    assert_eq!(got, vec![127.0 / 32.0, -4.0]);
    // Round away / toward zero on the 0.5-LSB tie.
    assert_eq!(
        q("bfp(mant = 8, round = away)", &[3.0, 0.015625])[1],
        1.0 / 32.0
    );
    assert_eq!(
        q("bfp(mant = 8, round = zero)", &[3.0, 0.047])[1],
        1.0 / 32.0
    );
}

#[test]
fn bfp_exponent_clamp() {
    // exp_bits = 5: E in [-15, 16]. A block with max 2^20: E clamped to 16, LSB 2^10, mantissa
    // saturates at 127 -> 127 * 1024.
    assert_eq!(q("bfp(mant = 8)", &[2f64.powi(20)]), vec![127.0 * 1024.0]);
    // A block of tiny values, max 2^-20: E clamped up to -15, LSB 2^-21, 2^-20 -> 2 LSB exactly;
    // 2^-23 -> 0.25 LSB -> 0.
    assert_eq!(
        q("bfp(mant = 8)", &[2f64.powi(-20), 2f64.powi(-23)]),
        vec![2f64.powi(-20), 0.0]
    );
}

#[test]
fn bfp_log2_edge_values_use_bits() {
    // 0x40FFFFFF = 7.9999995 (f32). A correctly rounded f32 log2 says 3.0, the bits say 2.
    let x = f64::from(f32::from_bits(0x40FF_FFFF));
    assert_eq!(f32::from_bits(0x40FF_FFFF).log2(), 3.0);
    assert_eq!(nnp_numerics::floor_log2(x), 2);
    // E = 2, LSB 2^-4: 127.99999 -> 128 -> saturates to 127 -> 7.9375.
    assert_eq!(q("bfp(mant = 8)", &[x]), vec![7.9375]);
}

#[test]
fn bfp_blocks_and_nonfinite() {
    let f: Format = "bfp(mant = 4, block = 2)".parse().unwrap();
    let x = [1.0, 0.1, 100.0, 3.0, f64::INFINITY, 1.0, 0.0, 0.0];
    let mut out = [0.0; 8];
    f.quantize(&x, 128, &mut out);
    // Block [1, 0.1]: E = 0, LSB 2^-2: 0.1 -> round(0.4) = 0.
    assert_eq!(&out[..2], &[1.0, 0.0]);
    // Block [100, 3]: E = 6, LSB 2^4: 100 -> round(6.25) = 6 -> 96; 3 -> 0.
    assert_eq!(&out[2..4], &[96.0, 0.0]);
    // Block with inf: all NaN.
    assert!(out[4].is_nan() && out[5].is_nan());
    // All-zero block.
    assert_eq!(&out[6..], &[0.0, 0.0]);
}

#[test]
fn msfp_is_bfp_with_8bit_exponent_over_16() {
    let f: Format = "msfp(mant = 5)".parse().unwrap();
    let g: Format = "bfp(mant = 5, block = 16, exp_bits = 8)".parse().unwrap();
    assert_eq!(f, g);
    assert_eq!(g.to_string(), "msfp(mant = 5)");
    // MSFP13: 5 + 8/16 = 5.5 bits per element.
    assert_eq!(f.bits_per_element(128, 128), 5.5);
}

// ---------------------------------------------------------------------------------------------
// OCP MX v1.0

#[test]
fn mx_e4m3_saturates_485_to_448() {
    // amax 485: floor(log2) = 8 = emax(e4m3) -> scale 2^0. 485 rounds (step 32) to 480, beyond
    // the max normal 448: saturates.
    let m = mx("mx(elem = fp8e4m3, block = 32)");
    assert_eq!(m.shared_exponent(&[485.0, 1.0]), Some(0));
    assert_eq!(
        q("mx(elem = fp8e4m3, block = 32)", &[485.0, 1.0]),
        vec![448.0, 1.0]
    );
    assert_eq!(q("mx(elem = fp8e4m3)", &[-485.0]), vec![-448.0]);
}

#[test]
fn mx_e4m3_tie_400() {
    // Scale 2^0; 400 lies halfway between 384 (1.100b * 2^8) and 416 (1.101b * 2^8).
    assert_eq!(q("mx(elem = fp8e4m3)", &[400.0]), vec![384.0]);
    assert_eq!(q("mx(elem = fp8e4m3, round = away)", &[400.0]), vec![416.0]);
}

#[test]
fn mx_e5m2_block_max_saturates() {
    // amax 127.9999: floor(log2) = 6, emax(e5m2) = 15 -> scale 2^-9. 127.9999 * 2^9 = 65535.95
    // rounds (step 2^13) to 65536 > 57344 = max normal: the element saturates to 57344, the value
    // is 57344 * 2^-9 = 112.
    let m = mx("mx(elem = fp8e5m2)");
    let x = [127.9999, 1.0];
    assert_eq!(m.shared_exponent(&x), Some(-9));
    let (s, elems) = m.encode_block(&x, 0).unwrap();
    assert_eq!((s, elems[0]), (-9, 57344.0));
    assert_eq!(q("mx(elem = fp8e5m2)", &x)[0], 112.0);
}

#[test]
fn mx_log2_edge_values() {
    // 0x40FFFFFF = 7.9999995: floor(log2) = 2 from the bits (an f32 log2 rounds to 3.0).
    // e4m3: scale 2^(2 - 8) = 2^-6; 7.9999995 * 64 = 511.99997 rounds to 512 > 448 -> 448 ->
    // 448 / 64 = 7.0. (The wrong exponent 3 would give scale 2^-5 and 8.0.)
    let x = f64::from(f32::from_bits(0x40FF_FFFF));
    let m = mx("mx(elem = fp8e4m3)");
    assert_eq!(m.shared_exponent(&[x]), Some(-6));
    assert_eq!(q("mx(elem = fp8e4m3)", &[x]), vec![7.0]);
    // 0x437FFFFF = 255.99998: floor(log2) = 7 (f32 log2 says 8.0): scale 2^-1, element
    // 511.99997 -> 512 -> saturates to 448 -> 224.
    let y = f64::from(f32::from_bits(0x437F_FFFF));
    assert_eq!(f32::from_bits(0x437F_FFFF).log2(), 8.0);
    assert_eq!(m.shared_exponent(&[y]), Some(-1));
    assert_eq!(q("mx(elem = fp8e4m3)", &[y]), vec![224.0]);
}

#[test]
fn mx_other_elements() {
    // fp4 e2m1, emax 2: amax 5 -> floor(log2) = 2 -> scale 2^0; grid 0, .5, 1, 1.5, 2, 3, 4, 6.
    // 5 is a tie between 4 and 6: even mantissa -> 4; 2.5 tie between 2 and 3 -> 2;
    // 0.2 -> 0 (below 0.25).
    assert_eq!(
        q("mx(elem = fp4e2m1)", &[5.0, 2.5, 0.2, -1.4]),
        vec![4.0, 2.0, 0.0, -1.5]
    );
    // int8, emax 0: amax 3 -> scale 2^1; elements x/2 on the grid of 1/64: 1.0 -> 0.5 exact;
    // 3 -> 1.5 exact; 0.01 -> 0.005 * 64 = 0.32 -> 0.
    assert_eq!(q("mx(elem = int8)", &[1.0, 3.0, 0.01]), vec![1.0, 3.0, 0.0]);
    // int8 saturates symmetrically at 127/64: amax 3.99 -> scale 2 -> 1.995 * 64 = 127.68 -> 127.
    assert_eq!(
        q("mx(elem = int8)", &[3.99, -3.99]),
        vec![127.0 / 32.0, -127.0 / 32.0]
    );
    // fp6 e3m2 (emax 4, max 28) and e2m3 (emax 2, max 7.5) saturate too.
    assert_eq!(q("mx(elem = fp6e3m2)", &[31.9])[0], 28.0);
    assert_eq!(q("mx(elem = fp6e2m3)", &[7.9])[0], 7.5);
}

#[test]
fn mx_nonfinite_and_zero_blocks() {
    let got = q(
        "mx(elem = fp8e4m3, block = 2)",
        &[1.0, f64::NAN, 0.0, 0.0, 2.0, 3.0],
    );
    assert!(got[0].is_nan() && got[1].is_nan());
    assert_eq!(&got[2..], &[0.0, 0.0, 2.0, 3.0]);
    // MXFP8: 8 + 8/32 bits per element.
    assert_eq!(
        "mx(elem = fp8e4m3)"
            .parse::<Format>()
            .unwrap()
            .bits_per_element(128, 128),
        8.25
    );
}

/// `decode(encode(x)) == quantize(x)` with stochastic rounding past the first block: the
/// packed encoder draws with each element's position in the run, as `quantize` does (64
/// values, two blocks of 32; the second block alone, at positions 0..32, draws differently).
#[test]
fn mx_stochastic_encode_matches_quantize_past_the_first_block() {
    let lit = "mx(elem = fp4e2m1, block = 32, round = stochastic(seed = 1))";
    let f: Format = lit.parse().unwrap();
    // Values spread over a few binades, none on the fp4 grid of their block.
    let x: Vec<f64> = (0..64)
        .map(|i| {
            let v = 0.3 + 0.173 * f64::from(i % 23) + 0.011 * f64::from(i);
            if i % 3 == 0 { -v } else { v }
        })
        .collect();
    let mut want = vec![0.0; 64];
    f.quantize(&x, 64, &mut want);
    let got = f.decode(&f.encode(&x, 64).unwrap(), 64, 64).unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want));
    // The positions matter: the second block quantized on its own draws differently.
    let mut alone = vec![0.0; 32];
    f.quantize(&x[32..], 64, &mut alone);
    assert_ne!(bits(&alone), bits(&want[32..]));
    // And the block API draws from its `base` argument.
    let Format::Mx(m) = f else { panic!() };
    let (s, elems) = m.encode_block(&x[32..], 32).unwrap();
    let scaled: Vec<f64> = elems.iter().map(|e| e * 2f64.powi(s)).collect();
    assert_eq!(bits(&scaled), bits(&want[32..]));
}

/// A zero element: INT8 is two's complement (no -0), so -0.001 in a block of amax 1 (scale
/// 2^0, grid 2^-6: -0.064 units -> 0) is +0 in `quantize`, in `decode(encode)` and in the f32
/// kernel, and so is -0; an fp element keeps the sign (fp4e2m1, scale 2^-2: -0.004 -> -0;
/// fp8e4m3, scale 2^-8, smallest subnormal 2^-9: -0.001 is -0.256, 131 subnormal units, so
/// -1e-6 there: -0.000256 -> -0).
#[test]
fn mx_int8_zero_is_positive_fp_zero_keeps_sign() {
    let x = [-0.001, 1.0, -0.0, 0.0];
    for (lit, zero) in [
        ("mx(elem = int8, block = 4)", [0.0, 0.0]),
        ("mx(elem = int8, block = 4, round = zero)", [0.0, 0.0]),
        (
            "mx(elem = int8, block = 4, round = stochastic(seed = 3))",
            [0.0, 0.0],
        ),
        ("mx(elem = fp4e2m1, block = 4)", [-0.0, -0.0]),
        ("mx(elem = fp8e4m3, block = 4, round = zero)", [-0.0, -0.0]),
    ] {
        let mut x = x;
        if lit.contains("e4m3") {
            x[0] = -1e-6;
        }
        let want = [zero[0], 1.0, zero[1], 0.0];
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let got = q(lit, &x);
        assert_eq!(bits(&got), bits(&want), "{lit}: quantize {got:?}");
        let f: Format = lit.parse().unwrap();
        let d = f.decode(&f.encode(&x, 4).unwrap(), 4, 4).unwrap();
        assert_eq!(bits(&d), bits(&want), "{lit}: decode(encode) {d:?}");
        let Format::Mx(m) = f else { panic!() };
        let x32: Vec<f32> = x.iter().map(|v| *v as f32).collect();
        let mut k = vec![0.0f32; 4];
        nnp_numerics::kernel::mx_quantize_f32(&m, &x32, 4, &mut k);
        let want32: Vec<u32> = want.iter().map(|v| (*v as f32).to_bits()).collect();
        let k32: Vec<u32> = k.iter().map(|v| v.to_bits()).collect();
        assert_eq!(k32, want32, "{lit}: f32 kernel {k:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Seed 000: hierarchical shared exponents.

/// Values with element exponents [-3, -3, -4, -2] (the notes' synthetic inputs for Fig. 2).
const FIG_X: [f64; 4] = [0.15, -0.2, 0.07, 0.3];

#[test]
fn seed000_fig2_three_levels() {
    // Fig. 2: per-element 1-bit level-1 scales, per-pair 1-bit level-2 scales, 2-bit mantissas.
    let h = hbfp("hbfp(mant = 2, levels = 2, scale_cap = 1, block = 4, sub = 1)");
    let enc = h.encode_block(&FIG_X, 4, 0);
    assert_eq!(enc.top, -2); // row 230
    assert_eq!(enc.top + 127, 125); // Fig. 3 stored exponent
    assert_eq!(enc.scales[0], vec![0, 0, 1, 0]); // row 225 (third: raw 2 clipped to 1)
    assert_eq!(enc.scales[1], vec![1, 0]); // row 235
    assert_eq!(enc.exps, vec![-3, -3, -3, -2]); // rows 245/260
    // Row 255: the third element (gap 1 >= 1 magnitude bit) is flushed, the others are the best
    // 1-bit approximation 1 * 2^q.
    assert_eq!(enc.mants, vec![1, -1, 0, 1]);
    assert_eq!(
        q(
            "hbfp(mant = 2, levels = 2, scale_cap = 1, block = 4, sub = 1)",
            &FIG_X
        ),
        vec![0.125, -0.125, 0.0, 0.25]
    );
    // Fig. 3: 4 x 2-bit mantissas + 4 x 1-bit + 2 x 1-bit scales + 8-bit exponent = 22 bits.
    assert_eq!(h.block_bits(4), 22);
    // The packed block: exponent field 125, level-1 scales 0,0,1,0, level-2 scales 1,0, then
    // sign-magnitude mantissas (magnitude bit first, then sign): +1, -1, +0, +1.
    let f = Format::Hbfp(h);
    let p = f.encode(&FIG_X, 4).unwrap();
    assert_eq!(p.bits, 22);
    let bit = |i: usize| (p.bytes[i / 8] >> (i % 8)) & 1;
    let field = |from: usize, n: usize| (0..n).map(|i| u32::from(bit(from + i)) << i).sum::<u32>();
    assert_eq!(field(0, 8), 125);
    assert_eq!((8..14).map(bit).collect::<Vec<_>>(), vec![0, 0, 1, 0, 1, 0]);
    assert_eq!(
        (14..22).map(bit).collect::<Vec<_>>(),
        vec![1, 0, 1, 1, 0, 0, 1, 0]
    );
}

#[test]
fn seed000_fig4_two_levels() {
    // Fig. 4: pairs share an exponent, one scale per pair stored in 2 bits (Fig. 5), cap 1.
    let lit = "hbfp(mant = 2, levels = 1, scale_cap = 1, block = 4, sub = 2, scale_bits = 2)";
    let h = hbfp(lit);
    let enc = h.encode_block(&FIG_X, 4, 0);
    assert_eq!(enc.top, -2); // row 420
    assert_eq!(enc.top + 127, 125); // Fig. 5
    assert_eq!(enc.scales[0], vec![1, 0]); // row 425
    assert_eq!(enc.exps, vec![-3, -3, -2, -2]); // rows 435/450, gaps [0, 0, 2, 0]
    assert_eq!(enc.mants[2], 0); // row 445: gap 2 > 1 flushed
    // Fig. 5: 4 x 2-bit mantissas + 2 x 2-bit scales + 8-bit exponent = 20 bits.
    assert_eq!(h.block_bits(4), 20);
    // The text's "3-bit mantissa" reading (2 magnitude bits): flush rule gap >= 2 still
    // flushes the third element, the others gain a bit: 0.15 -> 1.0b * 2^-3 (0.15 / 0.0625 =
    // 2.4 -> 2 -> 0.125), -0.2 -> 3.2 -> 3 -> -0.1875, 0.3 -> 2.4 -> 2 -> 0.25.
    let got = q(
        "hbfp(mant = 3, levels = 1, scale_cap = 1, block = 4, sub = 2)",
        &FIG_X,
    );
    assert_eq!(got, vec![0.125, -0.1875, 0.0, 0.25]);
}

/// Seed 000's rule with a clipped scale (¶32-35, Fig. 2): a scale is the clipped difference of
/// two shared exponents that are maxima (the pair max against the level-2 max), not of the
/// parent's effective exponent. mant 4 (3 magnitude bits, flush when q - e >= 3), cap 1.
/// Exponents [-2, -7, -4, -6]; pair maxima [-2, -4]; top -2. Level-2 scales [0, min(2, 1)] =
/// [0, 1]; level-1 scales [0, min(5, 1), 0, min(2, 1)] = [0, 1, 0, 1]; effective exponents
/// [-2, -3, -3, -4]. 0.3125 = 5 * 2^-4 (grid 2^-4) exact; 2^-7: gap 4 -> flushed; 0.078125 on
/// grid 2^-5 is 2.5 -> 2 (even) -> 0.0625; 0.017578125 on grid 2^-6 is 1.125 -> 1 -> 0.015625.
/// (Top-down from the pair's effective exponent -3 would give the third element -4 and keep
/// 0.078125.)
#[test]
fn seed000_clipped_scale_from_pair_maxima() {
    let lit = "hbfp(mant = 4, levels = 2, scale_cap = 1, block = 4, sub = 1)";
    let x = [0.3125, 0.0078125, 0.078125, 0.017578125];
    let enc = hbfp(lit).encode_block(&x, 4, 0);
    assert_eq!(enc.top, -2);
    assert_eq!(enc.scales, vec![vec![0, 1, 0, 1], vec![0, 1]]);
    assert_eq!(enc.exps, vec![-2, -3, -3, -4]);
    let got = q(lit, &x);
    assert_eq!(got, vec![0.3125, 0.0, 0.0625, 0.015625]);
    assert_eq!((got[2] as f32).to_bits(), 0x3d80_0000);
    let f: Format = lit.parse().unwrap();
    let d = f.decode(&f.encode(&x, 4).unwrap(), 4, 4).unwrap();
    assert_eq!(d, got);
}

/// Three scale levels (per element, per pair, per quad), worked by hand:
/// `hbfp(mant = 4, levels = 3, scale_cap = 1, block = 8, sub = 1)`, 3 magnitude bits.
/// Element exponents [0, -3, -2, -4 | -3, -6, -5, -4] (1.4, 0.2 = 1.6 * 2^-3, 0.3125 = 1.25 *
/// 2^-2, 0.07 = 1.12 * 2^-4, 0.22 = 1.76 * 2^-3, 0.025 = 1.6 * 2^-6, 0.035 = 1.12 * 2^-5,
/// 0.08 = 1.28 * 2^-4). Pair maxima [0, -2, -3, -4], quad maxima [0, -3], top 0.
/// Quad scales (against top): [0, min(3, 1)] = [0, 1]. Pair scales (against their quad's
/// max): [0, min(2, 1), 0, 1] = [0, 1, 0, 1]. Element scales (against their pair's max):
/// [0, min(3, 1), 0, min(2, 1), 0, min(3, 1), min(1, 1), 0] = [0, 1, 0, 1, 0, 1, 1, 0].
/// Effective exponents q = top - sum: [0, -1, -1, -2, -1, -2, -3, -2]; grid 2^(q - 2):
/// 1.4 / 0.25 = 5.6 -> 6 -> 1.5; 0.2 / 0.125 = 1.6 -> 2 -> 0.25; 0.3125 / 0.125 = 2.5 -> 2
/// (even) -> 0.25; 0.07 / 0.0625 = 1.12 -> 1 -> 0.0625; 0.22 / 0.125 = 1.76 -> 2 -> 0.25;
/// 0.025: gap -2 - (-6) = 4 >= 3 -> flushed; 0.035 / 2^-5 = 1.12 -> 1 -> 0.03125;
/// 0.08 / 0.0625 = 1.28 -> 1 -> 0.0625. (Top-down, 0.22's pair would sit at -3 and give
/// 7 * 2^-5 = 0.21875.)
#[test]
fn seed000_three_levels_by_hand() {
    let lit = "hbfp(mant = 4, levels = 3, scale_cap = 1, block = 8, sub = 1)";
    let x = [1.4, 0.2, 0.3125, 0.07, 0.22, 0.025, 0.035, 0.08];
    let enc = hbfp(lit).encode_block(&x, 8, 0);
    assert_eq!(enc.top, 0);
    assert_eq!(
        enc.scales,
        vec![vec![0, 1, 0, 1, 0, 1, 1, 0], vec![0, 1, 0, 1], vec![0, 1]]
    );
    assert_eq!(enc.exps, vec![0, -1, -1, -2, -1, -2, -3, -2]);
    let want = vec![1.5, 0.25, 0.25, 0.0625, 0.25, 0.0, 0.03125, 0.0625];
    assert_eq!(q(lit, &x), want);
    let f: Format = lit.parse().unwrap();
    assert_eq!(f.decode(&f.encode(&x, 8).unwrap(), 8, 8).unwrap(), want);
}

/// The top exponent clamped up to its field (exp_bits = 3: [-3, 4]) is the top level's parent:
/// exponents [-6, -6, -8, -9], pair maxima [-6, -8], top -3. Pair scales against -3: [min(3,
/// 1), min(5, 1)] = [1, 1]; element scales against the pair maxima: [0, 0, 0, min(1, 1)];
/// q = [-4, -4, -4, -5]. 1.5 * 2^-6 on grid 2^-6 is 1.5 -> 2 (even) -> 2^-5; 2^-6 -> 1 unit;
/// 2^-8 (gap 4) and 2^-9 (gap 4) are flushed.
#[test]
fn hbfp_clamped_top_is_the_top_parent() {
    let lit = "hbfp(mant = 4, levels = 2, scale_cap = 1, block = 4, sub = 1, exp_bits = 3)";
    let x = [1.5 / 64.0, 1.0 / 64.0, 1.0 / 256.0, 1.0 / 512.0];
    let enc = hbfp(lit).encode_block(&x, 4, 0);
    assert_eq!(enc.top, -3);
    assert_eq!(enc.scales, vec![vec![0, 0, 0, 1], vec![1, 1]]);
    assert_eq!(enc.exps, vec![-4, -4, -4, -5]);
    assert_eq!(q(lit, &x), vec![1.0 / 32.0, 1.0 / 64.0, 0.0, 0.0]);
}

/// Why `hbfp` with two levels is not idempotent (docs/numerics.md), by hand:
/// `hbfp(mant = 4, levels = 2, scale_cap = 1, block = 8, sub = 2)` (3 magnitude bits; pairs,
/// then quads). Exponents [-2, -3, -4, -1 | -4, -3, -4, -4]: pair maxima [-2, -1, -3, -4], quad
/// maxima [-1, -3], top -1. Quad scales [0, min(2, 1) = 1]; pair scales [1, 0, 0, 1]; q per
/// pair [-2, -1, -2, -3]. The last pair sits at -3 above its max -4 (the quad's clipped scale):
/// 0.09375 on grid 2^-5 is 3; -0.109375 is 3.5 -> 4 (even) -> -0.125, exponent -3. Second
/// pass: that pair's max is -3, its scale 0, q -2: 0.09375 on grid 2^-4 is 1.5 -> 2 -> 0.125.
/// First pass, the others: -0.46875 = 7.5 * 2^-4 -> 8, saturated to 7 -> -0.4375; 0.1875 ->
/// 3 * 2^-4; 0.1171875 (gap 3) flushed; 0.75 = 6 * 2^-3; -0.0703125 = 1.125 * 2^-4 -> -0.0625;
/// -0.125 exact.
#[test]
fn hbfp_two_levels_not_idempotent() {
    let lit = "hbfp(mant = 4, levels = 2, scale_cap = 1, block = 8, sub = 2)";
    let x = [
        -0.46875, 0.1875, 0.1171875, 0.75, -0.0703125, -0.125, 0.09375, -0.109375,
    ];
    let once = q(lit, &x);
    assert_eq!(
        once,
        vec![-0.4375, 0.1875, 0.0, 0.75, -0.0625, -0.125, 0.09375, -0.125]
    );
    let twice = q(lit, &once);
    assert_eq!(
        twice,
        vec![-0.4375, 0.1875, 0.0, 0.75, -0.0625, -0.125, 0.125, -0.125]
    );
}

#[test]
fn mx_presets_bits() {
    for (lit, bits) in [("mx9", 9.0), ("mx6", 6.0), ("mx4", 4.0)] {
        let f: Format = lit.parse().unwrap();
        assert_eq!(f.bits_per_element(128, 128), bits, "{lit}");
        assert_eq!(f.to_string(), lit);
    }
}

#[test]
fn hbfp_without_flush_rounds_small_elements() {
    // flush = false: the third element (0.07, gap 1 with 1 magnitude bit) rounds on the grid
    // 2^-3: 0.56 -> 1 -> 0.125.
    let got = q(
        "hbfp(mant = 2, levels = 2, scale_cap = 1, block = 4, sub = 1, flush = false)",
        &FIG_X,
    );
    assert_eq!(got, vec![0.125, -0.125, 0.125, 0.25]);
}
