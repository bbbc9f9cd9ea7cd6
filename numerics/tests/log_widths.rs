//! Seed 002's `pot` / `twohot` at every accepted width (`pot(bits = 2..=8)`,
//! `twohot(bits = 4..=16)`, `r` up to 16): the largest code, ties, and both ends of the grid,
//! against values worked out from the definition (docs/numerics.md): a pot code `c` is
//! `2^(base + c - 1)`, a two-hot code `(t1 * 2^r + t2) * 2^base`, `base` the smallest with the
//! block's amax within the largest magnitude, nearest rounding with ties to the even index of
//! the sorted magnitudes. Where a tie's index parity is not evident by hand it comes from an
//! independent enumeration of the grid with Python integers (noted at the test).

use nnp_numerics::Format;
use nnp_numerics::log::PotCode;

fn q(lit: &str, x: &[f64]) -> Vec<f64> {
    let f: Format = lit.parse().unwrap();
    let mut out = vec![0.0; x.len()];
    f.quantize(x, x.len(), &mut out);
    out
}

fn p2(e: i32) -> f64 {
    nnp_numerics::pow2(e)
}

/// Bit-exact comparison (the sign of zero included), and the packed round trip: its 8-bit
/// header holds `base + 2^n - 2` in [-127, 127], else `encode` reports an error.
fn check(lit: &str, x: &[f64], want: &[f64]) {
    let got = q(lit, x);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&got),
        bits(want),
        "{lit} on {x:?}: {got:?} want {want:?}"
    );
    let f: Format = lit.parse().unwrap();
    match f.encode(x, x.len()) {
        Ok(p) => {
            let d = f.decode(&p, x.len(), x.len()).unwrap();
            assert_eq!(bits(&d), bits(want), "{lit}: decode(encode)");
        }
        Err(e) => assert!(e.to_string().contains("8-bit header"), "{lit}: {e}"),
    }
}

/// [`check`] where the header fits: the round trip must happen.
fn check_packed(lit: &str, x: &[f64], want: &[f64]) {
    let f: Format = lit.parse().unwrap();
    assert!(f.encode(x, x.len()).is_ok(), "{lit}: encode");
    check(lit, x, want);
}

/// The auditor's `pot(8)` block. n = 7-bit codes, the largest 127 -> 2^(base + 126); amax 3
/// needs 3 <= 2^(base + 126): base = -124, grid 2^-124 .. 2^2 (code c at sorted index c).
#[test]
fn pot8_block() {
    let x = [
        1.0,
        0.5,
        f64::from(0.3f32),
        p2(-40),
        -0.75,
        p2(-100),
        3.0,
        f64::from(1e-30f32),
    ];
    let want = [
        1.0,
        0.5,
        0.25, // 0.3 < 0.375, the midpoint of 0.25 and 0.5
        p2(-40),
        -0.5,     // 0.75: tie of 0.5 (code 124) and 1 (code 125): even index 124
        p2(-100), // exact: code 25
        2.0,      // 3: tie of 2 (code 126) and 4 (code 127): even index 126
        p2(-100), // 1e-30 = 2^-99.66 < 1.5 * 2^-100
    ];
    check_packed("pot(8, block = 8)", &x, &want);
    // The bits as f32 (the CLI's output): 2.0 = 0x40000000, -0.5 = 0xbf000000, 2^-100 =
    // 0x0d800000.
    let got = q("pot(8, block = 8)", &x);
    assert_eq!((got[6] as f32).to_bits(), 0x4000_0000);
    assert_eq!((got[4] as f32).to_bits(), 0xbf00_0000);
    assert_eq!((got[5] as f32).to_bits(), 0x0d80_0000);
    // The other modes on the top tie 3 (between 2 and 4), with 4 in the block (same base).
    assert_eq!(q("pot(8, block = 2, round = away)", &[4.0, 3.0])[1], 4.0);
    assert_eq!(q("pot(8, block = 2, round = zero)", &[4.0, 3.0])[1], 2.0);
    assert_eq!(q("pot(8, block = 2)", &[4.0, 3.0])[1], 2.0);
}

/// Every pot width with at least two codes above 1 (bits 3..=8: n = bits - 1, largest
/// exponent T = 2^n - 2 units, code c at sorted index c): a block with amax 1 (base = -T),
/// one at the top of f64 (amax 2^1023, base 1023 - T) and one at the bottom (base clamped at
/// -1074, the f64 subnormal unit).
#[test]
fn pot_every_width_extremes() {
    for bits in 3..=8u32 {
        let t = (1i32 << (bits - 1)) - 2;
        let lit = format!("pot(bits = {bits})");
        // amax 1: 1 = 2^(base + T) is the largest code.
        let x = [
            1.0,
            0.75,                           // tie of 0.5 (index T, even) and 1 (T + 1)
            -0.75,                          // the same, negative
            0.7,                            // below the midpoint 0.75
            p2(-t),                         // the smallest magnitude (code 1)
            1.5 * p2(-t),                   // tie of index 1 and index 2 -> 2^(1 - T)
            0.5 * p2(-t),                   // tie of 0 (index 0) and 2^-T (index 1) -> 0
            -0.5 * p2(-t),                  // the same, negative: code 0 is +0
            0.5 * p2(-t) * (1.0 + p2(-20)), // above that midpoint -> 2^-T
            0.25 * p2(-t),                  // below -> 0
        ];
        let want = [
            1.0,
            0.5,
            -0.5,
            0.5,
            p2(-t),
            p2(1 - t),
            0.0,
            0.0,
            p2(-t),
            0.0,
        ];
        check_packed(&lit, &x, &want);
        // The top of f64: base = 1023 - T.
        let b = 1023 - t;
        let x = [
            p2(1023),
            -p2(b),
            1.5 * p2(b),
            p2(b - 1),
            1.75 * p2(1022),
            1.25 * p2(1022),
        ];
        let want = [
            p2(1023),
            -p2(b),
            p2(b + 1),
            0.0,
            p2(1023), // above the midpoint 1.5 * 2^1022
            p2(1022),
        ];
        check(&lit, &x, &want);
        // The bottom: amax 3 * 2^-1074 would want base below -1074; clamped there, the grid is
        // 2^-1074 .. 2^(-1074 + T): 3 * 2^-1074 is the tie of 2^-1074 (index 1) and 2^-1073
        // (index 2).
        let x = [3.0 * p2(-1074), p2(-1074), -p2(-1073), 0.0];
        let want = [p2(-1073), p2(-1074), -p2(-1073), 0.0];
        check(&lit, &x, &want);
    }
    // pot(2): one code, the magnitudes are {0, 2^base}; amax 1 -> base 0; 0.5 is the tie of
    // index 0 and 1 -> 0.
    check(
        "pot(bits = 2)",
        &[1.0, 0.5, 0.75, -0.3, -1.0],
        &[1.0, 0.0, 1.0, 0.0, -1.0],
    );
    // amax 3 * 2^-1074: 3 * 2^-1074 <= 2^base needs base = -1072; 0.75 of it rounds up.
    check("pot(bits = 2)", &[3.0 * p2(-1074)], &[p2(-1072)]);
}

/// The auditor's two-hot blocks: twohot(16) (7-bit term codes, r = 0: largest magnitude
/// 2^126 + 2^126 = 2^127 units) and twohot(14, r = 3) (6-bit codes, 2^65 + 2^62 units).
#[test]
fn twohot_auditor_blocks() {
    // 1.7425899e16 (as f32) = 0.9674 * 2^54: base = 54 - 127 = -73 (2^127 * 2^-74 = 2^53 is
    // too small); in units 1.9348 * 2^126, between 2^126 + 2^125 and 2^127 (nothing between:
    // both terms are at most 2^126), above their midpoint 1.75 * 2^126 -> 2^127 units = 2^54.
    let x = f64::from(1.742_589_9e16f32);
    let got = q(
        "twohot(16, block = 8)",
        &[x, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    );
    assert_eq!(got[0], p2(54));
    assert_eq!((got[0] as f32).to_bits(), 0x5a80_0000);
    assert_eq!(got[1], 1.0); // 2^73 units: one term
    // twohot(14, r = 3): 3 <= (2^65 + 2^62) * 2^base first at base = -63 (at -64: 2.25 < 3).
    // In units 3 = 1.5 * 2^64; the neighbours are 2^64 + 2^62 (t1 = 2^61 << 3, t2 = 2^62) and
    // 2^65 - 2^62: a tie. Their sorted indices are 4095 and 4096 (Python enumeration of the
    // grid), so the even one, 1.75 * 2^64 = 3.5. -2.9 (as f32) = -1.45 * 2^64 units: nearer
    // 1.25 * 2^64 = 2.5.
    let got = q(
        "twohot(14, r = 3, block = 8)",
        &[3.0, f64::from(-2.9f32), 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    );
    assert_eq!(&got[..3], &[3.5, -2.5, 1.0]);
}

/// Every two-hot width and r in {0, 1, 16}: n = bits / 2 - 1, T = 2^n - 2; the largest
/// magnitude is 2^(T + r) + 2^T units (both terms at their largest code). A block whose amax is
/// exactly that (base = 0), its neighbour below 2^(T + r) + 2^(T - 1) and the midpoint's two
/// sides, a difference of terms, and the smallest magnitude 1 with its tie against 0.
#[test]
fn twohot_every_width_extremes() {
    for bits in (6..=16u32).step_by(2) {
        let t = (1i32 << (bits / 2 - 1)) - 2;
        for r in [0i32, 1, 16] {
            let lit = format!("twohot(bits = {bits}, r = {r})");
            let top = p2(t + r) + p2(t);
            let below = p2(t + r) + p2(t - 1);
            // The midpoint of `below` and `top` is 2^(T + r) + 2^(T - 1) + 2^(T - 2).
            let mid = below + p2(t - 2);
            let x = [
                top,
                mid + p2(t - 3),
                mid - p2(t - 3),
                below,
                -(p2(t + r) - p2(t - 1)), // t1 = 2^T << r, t2 = -2^(T - 1)
                1.0,
                0.5,                   // tie of 0 (index 0) and 1 (index 1) -> 0
                0.5 * (1.0 + p2(-20)), // -> 1
                -0.25,
            ];
            let want = [top, top, below, below, x[4], 1.0, 0.0, 1.0, 0.0];
            check_packed(&lit, &x, &want);
        }
    }
    // twohot(4): terms {0, ±1}; magnitudes 2^r * t1 + t2: r = 0 -> {0, 1, 2}; amax 2 -> base 0;
    // 1.5 is the tie of 1 (index 1) and 2 (index 2) -> 2; 0.5 -> 0.
    check(
        "twohot(bits = 4)",
        &[2.0, 1.5, 0.5, -1.0],
        &[2.0, 2.0, 0.0, -1.0],
    );
    // r = 16: {0, 1, 2^16 - 1, 2^16, 2^16 + 1}; amax 2^16 + 1 -> base 0; 2^15 is nearer
    // 2^16 - 1 than 1.
    check(
        "twohot(bits = 4, r = 16)",
        &[p2(16) + 1.0, p2(15), p2(16) - 0.5, 0.75],
        &[p2(16) + 1.0, p2(16) - 1.0, p2(16) - 1.0, 1.0],
    );
}

/// Ties at the top of the widest grids, whose index parity comes from an independent
/// enumeration with Python integers: twohot(16, r = 16) has 19,746 magnitudes (the top
/// 2^142 + 2^126 at index 19,745, 2^142 + 2^125 at 19,744; 2^142 + 2^91 at 19,710 and 2^142 +
/// 2^92 at 19,711); twohot(16) has 15,880 (2^127 at 15,879, 2^126 + 2^125 at 15,878; 2^126 +
/// 2^91 at 15,844, 2^126 + 2^92 at 15,845). Every tie below goes to the even, lower one.
#[test]
fn twohot16_top_ties() {
    // r = 16, base 0 (amax is the top).
    let top = p2(142) + p2(126);
    let x = [
        top,
        p2(142) + p2(125) + p2(124), // tie of indices 19,744 and 19,745
        p2(142) + p2(91) + p2(90),   // tie of indices 19,710 and 19,711
        p2(142) + p2(91) + p2(90) + p2(89), // above that midpoint
    ];
    let want = [top, p2(142) + p2(125), p2(142) + p2(91), p2(142) + p2(92)];
    check_packed("twohot(bits = 16, r = 16)", &x, &want);
    // r = 0, base 0.
    let x = [
        p2(127),
        p2(126) + p2(125) + p2(124),
        p2(126) + p2(91) + p2(90),
        p2(126) + p2(91) + p2(90) - p2(80),
    ];
    let want = [
        p2(127),
        p2(126) + p2(125),
        p2(126) + p2(91),
        p2(126) + p2(91),
    ];
    check_packed("twohot(bits = 16)", &x, &want);
}

/// Stochastic rounding on the widest pot grid rounds up with the exact fraction: 2.5 lies a
/// quarter of the way from 2 to 4 (amax 4: base -124), so about 1/4 of the positions go up.
#[test]
fn pot8_stochastic_fraction() {
    let mut x = vec![2.5; 4096];
    x[0] = 4.0;
    let got = q("pot(bits = 8, round = stochastic(seed = 5))", &x);
    let up = got[1..].iter().filter(|v| **v == 4.0).count();
    let down = got[1..].iter().filter(|v| **v == 2.0).count();
    assert_eq!(up + down, 4095);
    assert!(
        (900..1150).contains(&up),
        "{up} of 4095 up, expected about 1024"
    );
}

/// `PotCode::units` for the largest code: 2^126 (it overflowed i64).
#[test]
fn pot_code_units_largest() {
    let c = PotCode {
        neg: true,
        code: 127,
    };
    assert_eq!(c.units(), -(1i128 << 126));
    assert_eq!(c.exponent(), Some(126));
    assert_eq!(PotCode::default().units(), 0);
}

/// Decoding codes whose value f64 cannot hold (a hand-made twohot(16, r = 16) stream: header
/// 126 -> base 0, then per element t1 code, t1 sign, t2 code, t2 sign, LSB first) rounds it
/// to nearest-even instead of overflowing: 2^142 ± 1 -> 2^142; 2^142 - 2^88 is half an ulp
/// below 2^142 (the ulp there is 2^89): the tie goes to the even 2^142; 2^142 - 2^89 and
/// 2^142 + 2^90 are f64 values and stay.
#[test]
fn twohot16_decode_rounds_unrepresentable_codes() {
    let f: Format = "twohot(bits = 16, r = 16, block = 5)".parse().unwrap();
    let mut bits: Vec<bool> = Vec::new();
    let mut put = |v: u32, n: u32| (0..n).for_each(|i| bits.push((v >> i) & 1 == 1));
    put(126, 8);
    // (t2 code, t2 negative): t1 is always code 127, positive (2^126 << 16 = 2^142).
    for (c2, neg2) in [(1, false), (1, true), (89, true), (90, true), (91, false)] {
        put(127, 7);
        put(0, 1);
        put(c2, 7);
        put(u32::from(neg2), 1);
    }
    let mut bytes = vec![0u8; bits.len().div_ceil(8)];
    for (i, b) in bits.iter().enumerate() {
        bytes[i / 8] |= u8::from(*b) << (i % 8);
    }
    let p = nnp_numerics::pack::Packed {
        bytes,
        bits: bits.len(),
    };
    let d = f.decode(&p, 5, 5).unwrap();
    assert_eq!(
        d,
        vec![
            p2(142),
            p2(142),
            p2(142),
            p2(142) - p2(89),
            p2(142) + p2(90)
        ]
    );
}

/// Why `twohot` with `r >= 3` is not idempotent (docs/numerics.md): twohot(8, r = 3) has
/// 3-bit term codes (T = 6), magnitudes 8 t1 + t2 up to 8 * 64 + 64 = 576 units. Amax 19 needs
/// base -4 (576 / 32 = 18 < 19): -19 = 304 units, the tie of 288 = 256 + 32 (sorted index 62)
/// and 320 = 256 + 64 (index 63) -> 288 = -18; 11.75 = 188 units, nearest 192 = 12 (nothing
/// between 160 and 192). Again: amax 18 = 576 * 2^-5, base -5: 12 = 384 units is not on the
/// grid (t2 stops at 64): the tie of 320 (index 63) and 448 = 512 - 64 (index 64) -> 14.
/// (Indices from the Python enumeration; 79 magnitudes.)
#[test]
fn twohot_r3_not_idempotent() {
    let lit = "twohot(bits = 8, r = 3)";
    let once = q(lit, &[-19.0, 11.75]);
    assert_eq!(once, vec![-18.0, 12.0]);
    assert_eq!(q(lit, &once), vec![-18.0, 14.0]);
}
