//! int, fixed, dynamic fixed point (seed 004), power-of-two / two-hot and seed 002's unit.

use nnp_numerics::fixed::{BitStats, MaxPolicy, OverflowPolicy, PointPolicy, convert};
use nnp_numerics::log::{PotCode, ShiftUnit, UnitMode, UnitRegister};
use nnp_numerics::{DynFixedFormat, Format, Rounding};

fn q(lit: &str, x: &[f64]) -> Vec<f64> {
    let f: Format = lit.parse().unwrap();
    let mut out = vec![0.0; x.len()];
    f.quantize(x, x.len(), &mut out);
    out
}

#[test]
fn int_pow2_and_f32_scales() {
    // amax 1.0, int8: smallest s with 1 <= 127 * 2^s is s = -6 (127/64 = 1.98 >= 1, 127/128 < 1).
    // 0.3 * 64 = 19.2 -> 19 -> 0.296875; -1 -> -64/64.
    assert_eq!(
        q("int(bits = 8, scale = pow2)", &[1.0, 0.3, -1.0]),
        vec![1.0, 19.0 / 64.0, -1.0]
    );
    // f32 scale: s = 1/127 in f32; 0.3 / s = 38.1 -> 38 -> 38 * s.
    let s = f64::from(1.0f32 / 127.0f32);
    assert_eq!(q("int(bits = 8)", &[1.0, 0.3]), vec![127.0 * s, 38.0 * s]);
    // int4: qmax 7, amax 7 -> s = 1 (pow2: 7 <= 7 * 2^0); 3.5 ties to even 4; 2.5 -> 2.
    assert_eq!(
        q("int(bits = 4, scale = pow2)", &[7.0, 3.5, 2.5]),
        vec![7.0, 4.0, 2.0]
    );
    assert_eq!(
        q("int(bits = 4, scale = pow2, round = away)", &[7.0, 2.5]),
        vec![7.0, 3.0]
    );
}

#[test]
fn int_per_tensor_vs_row() {
    let x = [4.0, 1.0, 0.5, 0.25];
    let f: Format = "int(bits = 4, scale = pow2, per = tensor)".parse().unwrap();
    let g: Format = "int(bits = 4, scale = pow2, per = row)".parse().unwrap();
    let (mut a, mut b) = ([0.0; 4], [0.0; 4]);
    f.quantize_tensor(&x, 2, 2, &mut a);
    g.quantize_tensor(&x, 2, 2, &mut b);
    // Per tensor: amax 4 -> s = 0 (4 <= 7): 0.5 -> 0 (tie to even), 0.25 -> 0.
    assert_eq!(a, [4.0, 1.0, 0.0, 0.0]);
    // Per row: row 2 amax 0.5 -> s = -3 (0.5 <= 7/8): exact.
    assert_eq!(b, [4.0, 1.0, 0.5, 0.25]);
    // The f32 kernel (what `nnpc quantize` and `nnpc.quantize` call) takes the same scales.
    let x32 = x.map(|v| v as f32);
    let (mut a32, mut b32) = ([0.0f32; 4], [0.0f32; 4]);
    nnp_numerics::kernel::quantize_f32(&f, &x32, 2, 2, &mut a32);
    nnp_numerics::kernel::quantize_f32(&g, &x32, 2, 2, &mut b32);
    assert_eq!(a32, [4.0, 1.0, 0.0, 0.0]);
    assert_eq!(b32, [4.0, 1.0, 0.5, 0.25]);
    // One scale for the tensor, one per row of 2 (shape [2, 2], runs along axis 1).
    assert_eq!(f.scale_shape(&[2, 2], 1, 2, 1), vec![1]);
    assert_eq!(g.scale_shape(&[2, 2], 1, 2, 2), vec![2, 1]);
    // Runs along axis 0 of a [4, 3] tensor: a scale per column.
    assert_eq!(g.scale_shape(&[4, 3], 0, 2, 3), vec![1, 3]);
    // MX blocks of 32 along a run of 70: ceil(70 / 32) = 3 scales per row; rank 0: a list.
    let mx: Format = "mx(elem = fp8e4m3, block = 32)".parse().unwrap();
    assert_eq!(mx.scale_shape(&[5, 70], 1, 128, 15), vec![5, 3]);
    assert_eq!(mx.scale_shape(&[], 0, 128, 1), vec![1]);
}

#[test]
fn fixed_q_format() {
    // fixed(int = 3, frac = 4): 7 bits, range [-4, 4 - 1/16], step 1/16.
    assert_eq!(
        q(
            "fixed(int = 3, frac = 4)",
            &[1.03125, 5.0, -5.0, -4.0, f64::INFINITY, 0.01]
        ),
        vec![1.0, 3.9375, -4.0, -4.0, 3.9375, 0.0]
    );
    assert!(q("fixed(int = 3, frac = 4)", &[f64::NAN])[0].is_nan());
    // q1.15 (seed 001's BFP short mantissa): [-1, 1 - 2^-15].
    assert_eq!(
        q("fixed(1, 15)", &[1.0, -1.0]),
        vec![1.0 - 2f64.powi(-15), -1.0]
    );
}

#[test]
fn bit_statistics() {
    // 6 = 110b: MSB 2, LSB 1; 0.375 = 0.011b: MSB -2, LSB -3; -4: two's complement MSB 1
    // (-4 = ...11100, the highest bit differing from the sign is bit 1); zero is counted apart.
    let s = BitStats::of(&[6.0, 0.375, -4.0, 0.0]);
    assert_eq!(s.nonzero, 3);
    assert_eq!(s.zeros, 1);
    assert_eq!(s.max_msb, Some(2));
    assert_eq!(s.min_lsb, Some(-3));
    assert_eq!(
        s.msb_hist.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
        vec![(-2, 1), (1, 1), (2, 1)]
    );
    let mut t = BitStats::of(&[1024.0]);
    t.merge(&s);
    assert_eq!((t.max_msb, t.min_lsb, t.nonzero), (Some(10), Some(-3), 4));
}

#[test]
fn dynfixed_policies() {
    // 8-bit word: 7 magnitude bits at positions 0..=6 of the integer.
    let s = BitStats::of(&[6.0, 0.375, -4.0]);
    // Max policy: f = min(8 - 2 - 2, 3) = 3 (all values exact: 6 = 48/8, 0.375 = 3/8).
    assert_eq!(MaxPolicy.frac_bits(&s, 8), Some(3));
    assert_eq!(
        q("dynfixed(bits = 8)", &[6.0, 0.375, -4.0]),
        vec![6.0, 0.375, -4.0]
    );
    // Values needing more fraction bits than the word has: 6 and 0.001 -> f = 4 (6 * 16 = 96
    // fits in 127); 0.001 * 16 = 0.016 -> 0.
    assert_eq!(q("dynfixed(bits = 8)", &[6.0, 0.001]), vec![6.0, 0.0]);
    // Overflow policy: 1 outlier in 100 at MSB 10 (1500), the rest at MSB 0 (1.5). ppm 10000
    // = 1% lets the outlier saturate: top position 0 -> f = 8 - 2 - 0 = 6, capped by the min
    // LSB (1.5 = 1.1b: LSB -1) to f = 1. 1500 saturates to 127/2.
    let mut x = vec![1.5; 99];
    x.push(1500.0);
    let stats = BitStats::of(&x);
    assert_eq!(OverflowPolicy { ppm: 10_000 }.frac_bits(&stats, 8), Some(1));
    // Below the budget (ppm 0): like the max policy, f = 8 - 2 - 10 = -4.
    assert_eq!(OverflowPolicy { ppm: 0 }.frac_bits(&stats, 8), Some(-4));
    assert_eq!(MaxPolicy.frac_bits(&stats, 8), Some(-4));
    let got = q("dynfixed(bits = 8, policy = overflow(ppm = 10000))", &x);
    assert_eq!(got[0], 1.5);
    assert_eq!(got[99], 63.5); // saturated
    // Without the LSB cap (values of many LSBs): 1.4 has a long mantissa, f = 6.
    let mut y = vec![1.4; 99];
    y.push(1500.0);
    assert_eq!(
        OverflowPolicy { ppm: 10_000 }.frac_bits(&BitStats::of(&y), 8),
        Some(6)
    );
    // A custom policy through the trait.
    struct Fixed3;
    impl PointPolicy for Fixed3 {
        fn frac_bits(&self, _: &BitStats, _: u32) -> Option<i32> {
            Some(3)
        }
    }
    let Format::DynFixed(d) = "dynfixed(bits = 8)".parse::<Format>().unwrap() else {
        panic!()
    };
    let d: DynFixedFormat = d;
    let mut out = [0.0; 2];
    assert_eq!(d.quantize_with(&Fixed3, &[0.3, 100.0], &mut out), Some(3));
    assert_eq!(out, [0.25, 127.0 / 8.0]);
}

#[test]
fn data_converter() {
    // 0b1011.0110 (4 fraction bits: 11.375) to 2 fraction bits: 45.5 -> 46 (even) = 11.5.
    assert_eq!(convert(182, 4, 2, 8, Rounding::NearestEven), 46);
    assert_eq!(convert(182, 4, 2, 8, Rounding::TowardZero), 45);
    // Saturate the high bits: 11.375 with 5 fraction bits needs 364 > 127.
    assert_eq!(convert(182, 4, 5, 8, Rounding::NearestEven), 127);
    assert_eq!(convert(-182, 4, 5, 8, Rounding::NearestEven), -128);
}

#[test]
fn pot_quantization() {
    // pot(bits = 4): codes 1..=7 -> 2^(base..base+6). amax 5: smallest base with 5 <= 2^(base+6)
    // is base = -3 (top 8). 5 -> nearest of 4, 8 (midpoint 6) -> 4; 3 is the tie between 2 and
    // 4: even index (sorted magnitudes 0, 1/8, ..., 2 is index 5, 4 is index 6) -> 4;
    // 0.1 -> between 1/16 (no: smallest is 2^-3 = 0.125) and 0: midpoint 1/16 -> 0.125.
    assert_eq!(
        q("pot(bits = 4)", &[5.0, 3.0, -0.1, 0.0]),
        vec![4.0, 4.0, -0.125, 0.0]
    );
    // Seed 002's example: 64 is stored as exponent 6 (2^6).
    let Format::Pot(p) = "pot(bits = 4)".parse::<Format>().unwrap() else {
        panic!()
    };
    let (base, codes) = p.encode_block(&[64.0], 0);
    // Block top is 64 = 2^(base + code - 1) with code 7: base = 0, exponent base + 6 = 6.
    assert_eq!(
        (base, codes[0]),
        (
            0,
            PotCode {
                neg: false,
                code: 7
            }
        )
    );
    assert_eq!(p.value(codes[0], base), 64.0);
}

#[test]
fn twohot_quantization() {
    // twohot(bits = 6): each term sign + 2-bit code: 0 or 2^(base + 0..2). Largest magnitude
    // 4 + 4 = 8 units. amax 7: base 0. 7 = 4 + 4 - 1? Terms: {0, 1, 2, 4} with signs:
    // 7 is not reachable (4 + 2 = 6, 4 + 4 = 8), a tie between 6 and 8: sorted magnitudes
    // 0,1,2,3,4,5,6,8: 6 is index 6 (even) -> 6. 3 = 4 - 1 (exact). 5 = 4 + 1.
    assert_eq!(
        q("twohot(bits = 6)", &[7.0, 3.0, -5.0]),
        vec![6.0, 3.0, -5.0]
    );
    // With r = 2 the first term is scaled by 4: magnitudes t1 * 4 + t2, max 16 + 4 = 20.
    // amax 20: base 0. Magnitudes 4 t1 + t2 (t in {0, +-1, +-2, +-4}): 0..=10, 12, 14..=18, 20
    // (11 and 13 and 19 are missing). 13 ties between 12 (sorted index 11) and 14 (index 12):
    // even index -> 14.
    let got = q("twohot(bits = 6, r = 2)", &[20.0, 13.0, 9.0]);
    assert_eq!(got[0], 20.0);
    assert_eq!(got[1], 14.0);
    assert_eq!(got[2], 9.0); // 8 + 1
}

#[test]
fn shift_unit_seed002_vectors() {
    // Two-hot without R: x = 3, e1 = 2, e2 = 0 -> (3 << 2) + (3 << 0) = 15 = 3 * 5.
    let mut u = ShiftUnit::new(UnitMode::TwoHot, 0);
    let out = u.step(
        3,
        UnitRegister {
            e1: 2,
            s1: false,
            e2: 0,
            s2: false,
        },
    );
    assert_eq!(out.b, 15);
    assert_eq!(u.accumulators(), (15, 0));
    // Subtractive (s1): x = 3, e1 = 3, e2 = 0 -> 24 - 3 = 21; accumulated with s2 negative.
    let out = u.step(
        3,
        UnitRegister {
            e1: 3,
            s1: true,
            e2: 0,
            s2: true,
        },
    );
    assert_eq!(out.b, 21);
    assert_eq!(u.accumulators(), (15 - 21, 0));
    // Two-hot with R = 2: x = 3, e1 = 1, e2 = 0 -> ((3 << 1) << 2) + 3 = 27 = 3 * 9.
    let mut r = ShiftUnit::new(UnitMode::TwoHot, 2);
    assert_eq!(
        r.step(
            3,
            UnitRegister {
                e1: 1,
                s1: false,
                e2: 0,
                s2: false
            }
        )
        .b,
        27
    );
    // Dual power-of-two mode: x = 7, exponents (first 1, second 2), signs (+, -):
    // C = 14 into 35b (+), A = 28 into 35a (-): (-28, 14), the further adder gives -14.
    let mut d = ShiftUnit::new(UnitMode::PowerOfTwo, 0);
    let out = d.step(
        7,
        UnitRegister {
            e1: 1,
            s1: false,
            e2: 2,
            s2: true,
        },
    );
    assert_eq!((out.a, out.c), (28, 14));
    assert_eq!(d.accumulators(), (-28, 14));
    assert_eq!(d.total(), -14);
    // Changing the configuration bit resets both accumulators; setting the same one does not.
    d.set_mode(UnitMode::PowerOfTwo);
    assert_eq!(d.accumulators(), (-28, 14));
    d.set_mode(UnitMode::TwoHot);
    assert_eq!(d.accumulators(), (0, 0));
}

/// A dot product run through the unit equals the integer dot product with the two-hot weights
/// the format decodes (in units of 2^base), and pot mode handles two weights per step.
#[test]
fn shift_unit_dot_products_match_format() {
    let Format::TwoHot(t) = "twohot(bits = 8, r = 1)".parse::<Format>().unwrap() else {
        panic!()
    };
    let w = [0.7, -0.3, 0.05, 0.9, -0.61, 0.2];
    let x: [i64; 6] = [3, -7, 12, 5, 9, -2];
    let (base, codes) = t.encode_block(&w, 0);
    let mut unit = ShiftUnit::new(UnitMode::TwoHot, t.r);
    let mut want = 0i64;
    for (xi, (c1, c2)) in x.iter().zip(&codes) {
        let wv = t.value((*c1, *c2), base);
        let units = (wv / 2f64.powi(base)) as i64;
        want += xi * units;
        // Run the unit only for codes with both terms non-zero (the unit has no zero term).
        if let Some(reg) = t.unit_register((*c1, *c2)) {
            unit.step(*xi, reg);
        } else {
            want -= xi * units;
        }
    }
    assert_eq!(unit.accumulators().0, want);
    let Format::Pot(p) = "pot(bits = 5)".parse::<Format>().unwrap() else {
        panic!()
    };
    let (pb, pc) = p.encode_block(&w, 0);
    let mut unit = ShiftUnit::new(UnitMode::PowerOfTwo, 0);
    let xi = 5i64;
    let mut want = 0i128;
    for pair in pc.chunks(2) {
        if pair.iter().any(|c| c.code == 0) {
            continue;
        }
        want += i128::from(xi) * (pair[0].units() + pair[1].units());
        unit.step(xi, p.unit_register(pair[0], pair[1]).unwrap());
    }
    let _ = pb;
    assert_eq!(i128::from(unit.total()), want);
}
