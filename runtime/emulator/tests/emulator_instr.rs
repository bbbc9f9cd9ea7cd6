//! Hand-checked emulator tests on a small target (N = 4): every instruction, every
//! accumulation mode, BFP saturation and ties, zero blocks, far-apart tile exponents.
//!
//! Expected values are derived by hand in the comments (fp16: 10 fraction bits, so the ulp of
//! [1, 2) is 2^-10; BFP mant = 8: a block with largest exponent E is quantized in steps of
//! 2^(E - 6) to integers in [-127, 127]). Comparisons are on fp16 bit patterns.

mod emulator_util;
use emulator_util::*;
use nnp_emulator::{EmuError, EmuOptions, emulate};

const BFP8: &str = "";

/// `y = W x` with W `[4*r, 4*c]` at mrf[0], x pushed as one row of `c` tiles.
fn mvm_src(r: usize, c: usize) -> String {
    format!(
        "matrix W : [{}, {}] at mrf[0]\ninput x : [1, {}]\noutput y : [1, {}]\n\
         s_wr rows, {c}\nv_rd netq\nv_wr ivrf[0]\nend_chain\n\
         s_wr rows, {r}\ns_wr cols, {c}\nv_rd ivrf[0]\nmv_mul mrf[W]\nv_wr netq\nend_chain\n",
        4 * r,
        4 * c,
        4 * c,
        4 * r
    )
}

fn identity(n: usize, scale: f32) -> Vec<f32> {
    (0..n * n)
        .map(|i| if i / n == i % n { scale } else { 0.0 })
        .collect()
}

fn mvm(numerics: &str, r: usize, c: usize, w: &[f32], x: &[f32]) -> Vec<u16> {
    let p = program(&mvm_src(r, c), target(numerics));
    let e = run(
        &p,
        &[("W", t(&[4 * r, 4 * c], w)), ("x", t(&[1, 4 * c], x))],
    );
    bits(&e, "y")
}

#[test]
fn values_are_rounded_to_fp16_on_entry() {
    // 0.1f32 -> fp16 0x2E66 (0.0999755859375; the next value up, 0.10003662109375, is
    // farther). 65519 < 65520 (the midpoint between 65504 and 2^16) -> 65504 = 0x7BFF.
    // 65520 is the midpoint: ties-to-even picks 2^16, which overflows to +inf = 0x7C00.
    let src = "input x : [1, 4]\noutput y : [1, 4]\nv_rd netq\nv_wr netq\nend_chain\n";
    let p = program(src, target(BFP8));
    let e = run(&p, &[("x", t(&[1, 4], &[1.0, 0.1, 65519.0, 65520.0]))]);
    assert_eq!(bits(&e, "y"), vec![0x3C00, 0x2E66, 0x7BFF, 0x7C00]);
}

#[test]
fn bfp_vector_saturates_symmetrically() {
    // x = [2 - 2^-10, 0.5, -(2 - 2^-10), 0]: E = 0, step 2^-6. (2 - 2^-10) / 2^-6 = 127.9375
    // rounds to 128, saturates to 127 -> 127/64 = 1.984375 (0x3FF0); -128 -> -127 (symmetric)
    // -> 0xBFF0; 0.5 -> 32 -> 0.5 (0x3800). W = I (rows [1,0,0,0]: E = 0, q = 64, exact).
    let x = [2.0 - p2(-10), 0.5, -(2.0 - p2(-10)), 0.0];
    assert_eq!(
        mvm(BFP8, 1, 1, &identity(4, 1.0), &x),
        vec![0x3FF0, 0x3800, 0xBFF0, 0]
    );
}

#[test]
fn bfp_rounds_half_to_even() {
    // Vector: x = [1, 2^-7, 3*2^-7, -5*2^-7], E = 0, step 2^-6: q = [64, 0.5 -> 0, 1.5 -> 2,
    // -2.5 -> -2] -> [1, 0, 2^-5, -2^-5] = [0x3C00, 0, 0x2800, 0xA800].
    let x = [1.0, p2(-7), 3.0 * p2(-7), -5.0 * p2(-7)];
    assert_eq!(
        mvm(BFP8, 1, 1, &identity(4, 1.0), &x),
        vec![0x3C00, 0, 0x2800, 0xA800]
    );
    // Matrix row: [1, 5*2^-7, 3*2^-7, 0] -> q = [64, 2.5 -> 2, 1.5 -> 2, 0] -> [1, 2^-5, 2^-5, 0].
    // x = [0, 1, 1, 0] (exact): y0 = 2^-5 + 2^-5 = 2^-4 = 0x2C00; other rows are zero.
    let mut w = vec![0.0; 16];
    w[..3].copy_from_slice(&[1.0, 5.0 * p2(-7), 3.0 * p2(-7)]);
    assert_eq!(
        mvm(BFP8, 1, 1, &w, &[0.0, 1.0, 1.0, 0.0]),
        vec![0x2C00, 0, 0, 0]
    );
}

#[test]
fn all_zero_blocks_and_positive_zero() {
    // Two input tiles: tile 0 all zero, tile 1 = [0.75, 0, 0, 0].
    // Row 0 = [1,1,1,1 | 2,0,0,0]  -> 0 + 2 * 0.75 = 1.5 (0x3E00)
    // Row 1 = [-1,-1,0,0 | 0,0,0,0] -> every product is zero: the integer sum is +0 (0x0000)
    // Row 2 = [0,0,0,0 | -1,0,0,0] -> -0.75 (0xBA00)
    // Row 3 = 0                     -> +0
    #[rustfmt::skip]
    let w = [
        1.0, 1.0, 1.0, 1.0, 2.0, 0.0, 0.0, 0.0,
        -1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    let x = [0.0, 0.0, 0.0, 0.0, 0.75, 0.0, 0.0, 0.0];
    assert_eq!(mvm(BFP8, 1, 2, &w, &x), vec![0x3E00, 0, 0xBA00, 0]);
}

/// Two tiles whose partials lie 44 binades apart (shared exponents E_x + E_w: 7 + 7 = 14 for
/// tile 0, -15 + -15 = -30 for tile 1).
/// Tile 0: x = [2^7, 2^1, 0, 0] (E = 7, step 2: q = [64, 1]), W row 0 = [2^7, 2^2, 0, 0]
/// (q = [64, 2]): partial 2^14 + 2^3 = 16392, exactly halfway between the fp16 neighbours
/// 16384 (0x7400) and 16400 (0x7401).
/// Tile 1: x = [2^-15, 0, 0, 0] (fp16 subnormal; E = -15, step 2^-21, q = 64), same W:
/// partial 2^-30.
fn far_apart(acc: &str) -> u16 {
    let mut w = vec![0.0; 32];
    w[0] = p2(7);
    w[1] = p2(2);
    w[4] = p2(-15);
    let x = [p2(7), p2(1), 0.0, 0.0, p2(-15), 0.0, 0.0, 0.0];
    mvm(&format!("accumulation = \"{acc}\""), 1, 2, &w, &x)[0]
}

#[test]
fn exact_accumulation_across_far_apart_tiles() {
    // Exact: 16392 + 2^-30 is just above the midpoint -> 16400 (0x7401).
    assert_eq!(far_apart("exact"), 0x7401);
}

#[test]
fn fp32_seq_differs_from_exact() {
    // fp32-seq: f32(16392) + f32(2^-30) rounds in f32 (ulp 2^-9 at 2^14) to 16392, the exact
    // midpoint; fp16 ties-to-even -> 16384 (0x7400), not exact's 0x7401.
    assert_eq!(far_apart("fp32-seq"), 0x7400);
}

#[test]
fn fp16_seq_rounds_every_partial() {
    // fp16-seq on the far-apart case: fp16(16392) = 16384 (tie, even), fp16(2^-30) = 0 (below
    // half the smallest subnormal 2^-24) -> 16384.
    assert_eq!(far_apart("fp16-seq"), 0x7400);
    // Three tiles with partials 1, 2^-11, 2^-11 (x = [1|2^-11|2^-11] in lane 0 of each tile,
    // W row 0 = 1 there; 2^-11: E = -11, q = 64):
    //   exact    1 + 2^-10 (0x3C01)
    //   fp32-seq f32: 1 + 2^-11 + 2^-11 = 1 + 2^-10 exactly -> 0x3C01
    //   fp16-seq 1 + 2^-11 is a tie -> 1; again -> 1 (0x3C00)
    let mut w = vec![0.0; 48];
    w[0] = 1.0;
    w[4] = 1.0;
    w[8] = 1.0;
    let mut x = vec![0.0; 12];
    x[0] = 1.0;
    x[4] = p2(-11);
    x[8] = p2(-11);
    for (acc, want) in [
        ("exact", 0x3C01),
        ("fp32-seq", 0x3C01),
        ("fp16-seq", 0x3C00),
    ] {
        let got = mvm(&format!("accumulation = \"{acc}\""), 1, 3, &w, &x)[0];
        assert_eq!(got, want, "{acc}");
    }
}

#[test]
fn mfu_arithmetic_rounds_once_to_fp16() {
    let src = "\
vector a : [4] at asvrf0[0]
vector m : [4] at mulvrf0[0]
input x : [1, 4]
input z : [1, 4]
output y_add : [1, 4]
output y_asb : [1, 4]
output y_bsa : [1, 4]
output y_max : [1, 4]
output y_mul : [1, 4]
v_rd netq
v_wr ivrf[0]
end_chain
v_rd netq
v_wr ivrf[1]
end_chain
v_rd ivrf[0]
vv_add asvrf0[a]
v_wr netq
end_chain
v_rd ivrf[0]
vv_a_sub_b asvrf0[a]
v_wr netq
end_chain
v_rd ivrf[0]
vv_b_sub_a asvrf0[a]
v_wr netq
end_chain
v_rd ivrf[0]
vv_max asvrf0[a]
v_wr netq
end_chain
v_rd ivrf[1]
vv_mul mulvrf0[m]
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    let x = [1.0, 1.0, 1.0 + p2(-10), -0.0];
    let a = [p2(-11), 3.0 * p2(-11), p2(-11), 0.0];
    let z = [1.0 + p2(-5), 3.0, 1.0 + p2(-10), -0.0];
    let m = [1.0 + p2(-6), -0.5, 1.0 + p2(-10), 5.0];
    let e = run(
        &p,
        &[
            ("x", t(&[1, 4], &x)),
            ("z", t(&[1, 4], &z)),
            ("a", t(&[4], &a)),
            ("m", t(&[4], &m)),
        ],
    );
    // x + a: 1 + 2^-11 is a tie -> 1 (0x3C00); 1 + 3*2^-11 ties between 1 + 2^-10 (odd) and
    // 1 + 2^-9 (even) -> 0x3C02; (1 + 2^-10) + 2^-11 is the same tie -> 0x3C02; -0 + +0 = +0.
    assert_eq!(bits(&e, "y_add"), vec![0x3C00, 0x3C02, 0x3C02, 0x0000]);
    // x - a: 1 - 2^-11 and 1 - 3*2^-11 are exact below 1 (ulp 2^-11): 0x3BFF, 0x3BFD;
    // (1 + 2^-10) - 2^-11 = 1 + 2^-11, a tie -> 1 (0x3C00); -0 - +0 = -0 (0x8000).
    assert_eq!(bits(&e, "y_asb"), vec![0x3BFF, 0x3BFD, 0x3C00, 0x8000]);
    // a - x: the negations, except +0 - -0 = +0.
    assert_eq!(bits(&e, "y_bsa"), vec![0xBBFF, 0xBBFD, 0xBC00, 0x0000]);
    // max(x, a): [1, 1, 1 + 2^-10, max(-0, +0) = +0].
    assert_eq!(bits(&e, "y_max"), vec![0x3C00, 0x3C00, 0x3C01, 0x0000]);
    // z * m: (1 + 2^-5)(1 + 2^-6) = 1 + 48*2^-10 + 2^-11, a tie -> mantissa 48 (even):
    // 1.046875 = 0x3C30; 3 * -0.5 = -1.5 (0xBE00); (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 -> 1 + 2^-9
    // (0x3C02); -0 * 5 = -0 (0x8000).
    assert_eq!(bits(&e, "y_mul"), vec![0x3C30, 0xBE00, 0x3C02, 0x8000]);
}

#[test]
fn relu_pass_and_activation_tables() {
    let src = "\
input x : [5, 4]
output y_relu : [1, 4]
output y_pass : [1, 4]
output y_sigm : [1, 4]
output y_tanh : [1, 4]
output y_exp : [1, 4]
v_rd netq
v_relu
v_wr netq
end_chain
v_rd netq
v_pass
v_wr netq
end_chain
v_rd netq
v_sigm
v_wr netq
end_chain
v_rd netq
v_tanh
v_wr netq
end_chain
v_rd netq
v_exp
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    #[rustfmt::skip]
    let x = [
        -1.0, -0.0, 0.5, 1.0,   // relu
        -1.0, -0.0, 0.5, 1.0,   // pass
        1.0, -2.0, 0.0, -0.0,   // sigm
        0.5, 0.0, -0.5, 1.0,    // tanh
        1.0, -1.0, 0.0, -0.0,   // exp
    ];
    let e = run(&p, &[("x", t(&[5, 4], &x))]);
    // relu: negatives and -0 give +0.
    assert_eq!(bits(&e, "y_relu"), vec![0, 0, 0x3800, 0x3C00]);
    assert_eq!(bits(&e, "y_pass"), vec![0xBC00, 0x8000, 0x3800, 0x3C00]);
    // Correctly rounded (reference: libm in f64, numpy float16 rounding):
    // sigm(1) = 0.7310585786 -> 1497 * 2^-11 = 0.73095703125 (0x39D9);
    // sigm(-2) = 0.1192029220 -> 0.11920166015625 (0x2FA1); sigm(0) = 0.5 (0x3800).
    assert_eq!(bits(&e, "y_sigm"), vec![0x39D9, 0x2FA1, 0x3800, 0x3800]);
    // tanh(0.5) = 0.4621171573 -> 1893 * 2^-12 = 0.462158203125 (0x3765); tanh(0) = 0;
    // tanh(-0) = -0; tanh(1) = 0.7615941560 -> 0.76171875 (0x3A18).
    assert_eq!(bits(&e, "y_tanh"), vec![0x3765, 0, 0xB765, 0x3A18]);
    // exp(1) = 2.718281828 -> 2.71875 (0x4170); exp(-1) = 0.3678794412 -> 0.367919921875
    // (0x35E3); exp(+-0) = 1.
    assert_eq!(bits(&e, "y_exp"), vec![0x4170, 0x35E3, 0x3C00, 0x3C00]);
}

#[test]
fn softmax_follows_numerics_section_1() {
    // x = [1, 2, 3, 4]: m = 4, e = fp16(exp([-3, -2, -1, 0])) =
    // [0.049774169921875, 0.1353759765625, 0.367919921875, 1]; exact sum 1.553070068359375
    // (representable in f32); y = fp16(f32(e_i) / s):
    // [0.03204345703125 (0x281A), 0.087158203125 (0x2D94), 0.2369384765625 (0x3395),
    //  0.64404296875 (0x3927)].
    // z = [1, 2, 3] padded with -65504: the pad lane gives fp16(-65504 - 3) = -65504,
    // exp = 0, so y is the 3-lane softmax: s = 1.5032958984375,
    // y = [0.09002685546875 (0x2DC3), 0.2447509765625 (0x33D5), 0.6650390625 (0x3952)].
    let src = "\
input x : [1, 4]
input z : [1, 3] pad -65504
output y : [1, 4]
output w : [1, 3]
v_rd netq
v_softmax
v_wr netq
end_chain
v_rd netq
v_softmax
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    let e = run(
        &p,
        &[
            ("x", t(&[1, 4], &[1.0, 2.0, 3.0, 4.0])),
            ("z", t(&[1, 3], &[1.0, 2.0, 3.0])),
        ],
    );
    assert_eq!(bits(&e, "y"), vec![0x281A, 0x2D94, 0x3395, 0x3927]);
    assert_eq!(bits(&e, "w"), vec![0x2DC3, 0x33D5, 0x3952]);
}

#[test]
fn several_writes_trace_and_output_at() {
    let src = "\
input x : [1, 4]
output y : [1, 4]
output r : [4] at asvrf1[2]
v_rd netq
v_wr ivrf[3]
v_wr asvrf1[2]
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    let e = run(&p, &[("x", t(&[1, 4], &[1.0, -2.0, 0.5, 0.0]))]);
    assert_eq!(bits(&e, "y"), vec![0x3C00, 0xC000, 0x3800, 0]);
    assert_eq!(bits(&e, "r"), vec![0x3C00, 0xC000, 0x3800, 0]);
    let trace = e.trace.expect("trace asked for");
    let dsts: Vec<(&str, u32, usize)> = trace
        .iter()
        .map(|r| (r.dst.as_str(), r.addr, r.line))
        .collect();
    // One record per destination, in source order; lines 5, 6, 7; netq addr = push index 0.
    assert_eq!(dsts, vec![("ivrf", 3, 5), ("asvrf1", 2, 6), ("netq", 0, 7)]);
    for r in &trace {
        assert_eq!(r.bits, vec![0x3C00, 0xC000, 0x3800, 0]);
        assert_eq!((r.item, r.chain, r.iteration), (0, 0, 0));
    }
}

#[test]
fn matrix_chain_copies_dram_tiles_to_mrf() {
    // W = 2 I lives in dram; m_rd/m_wr copies its tile to mrf[5]; y = 2 x exactly.
    let src = "\
matrix W : [4, 4] at dram[0]
input x : [1, 4]
output y : [1, 4]
m_rd dram[W]
m_wr mrf[5]
end_chain
v_rd netq
v_wr ivrf[0]
end_chain
v_rd ivrf[0]
mv_mul mrf[5]
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    let e = run(
        &p,
        &[
            ("W", t(&[4, 4], &identity(4, 2.0))),
            ("x", t(&[1, 4], &[1.0, -0.5, 0.25, 3.0])),
        ],
    );
    assert_eq!(bits(&e, "y"), vec![0x4000, 0xBC00, 0x3800, 0x4600]);
}

#[test]
fn v_rd_2d_reads_the_window_in_order() {
    // img: 6 registers = 2 image rows x 3 pixels (pitch 3); register k holds [k, k, k, k]+lane.
    // A 2 x 2 window at register 1 reads registers 1, 2, 4, 5 (dy outer, dx inner).
    let src = "\
vector img : [6, 4] at ivrf[0]
output y : [1, 16]
s_wr win_w, 2
s_wr win_h, 2
s_wr pitch, 3
s_wr rows, 4
v_rd_2d ivrf[1]
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    let img: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let e = run(&p, &[("img", t(&[6, 4], &img))]);
    let want: Vec<f32> = [1, 2, 4, 5]
        .iter()
        .flat_map(|k| (0..4).map(move |l| (4 * k + l) as f32))
        .collect();
    assert_eq!(values(&e, "y"), want);
}

#[test]
fn iterations_step_every_address() {
    // Iteration t pops x_t into ivrf[2t]; then reads ivrf[2t], multiplies by s_t at
    // mulvrf0[t]: y_t = x_t * s_t (exact small integers).
    let src = "\
vector s : [3, 4] at mulvrf0[0]
input x : [3, 4]
output y : [3, 4]
s_wr iterations, 3
v_rd netq
v_wr ivrf[0] + 2
end_chain
s_wr iterations, 3
v_rd_inc ivrf[0], 2
vv_mul mulvrf0[s] + 1
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let s: Vec<f32> = (0..12).map(|i| (i / 4 + 1) as f32).collect();
    let e = run(&p, &[("x", t(&[3, 4], &x)), ("s", t(&[3, 4], &s))]);
    let want: Vec<f32> = (0..12).map(|i| (i * (i / 4 + 1)) as f32).collect();
    assert_eq!(values(&e, "y"), want);
}

#[test]
fn quant_directives_and_declaration_formats() {
    // bfp(mant = 4): step 2^(E - 2). x = [1, 0.375, 0.125, 0.0625]: E = 0, step 0.25,
    // q = [4, 1.5 -> 2, 0.5 -> 0, 0.25 -> 0] -> [1, 0.5, 0, 0].
    let x = [1.0, 0.375, 0.125, 0.0625];
    let src = format!("quant mvm.vector = bfp(mant = 4)\n{}", mvm_src(1, 1));
    let p = program(&src, target(BFP8));
    let e = run(
        &p,
        &[("W", t(&[4, 4], &identity(4, 1.0))), ("x", t(&[1, 4], &x))],
    );
    assert_eq!(values(&e, "y"), vec![1.0, 0.5, 0.0, 0.0]);
    // The same format on the matrix declaration: row 0 = x quantizes to [1, 0.5, 0, 0];
    // with input [1, 1, 1, 1] (exact in bfp 8), y0 = 1.5, other rows 0.
    let src = mvm_src(1, 1).replace("at mrf[0]", "at mrf[0] quant bfp(mant = 4)");
    let p = program(&src, target(BFP8));
    let mut w = vec![0.0; 16];
    w[..4].copy_from_slice(&x);
    let e = run(&p, &[("W", t(&[4, 4], &w)), ("x", t(&[1, 4], &[1.0; 4]))]);
    assert_eq!(values(&e, "y"), vec![1.5, 0.0, 0.0, 0.0]);
    // On a vector declaration the host quantizes on load: b = x -> [1, 0.5, 0, 0].
    let src = "\
vector b : [4] at asvrf0[0] quant bfp(mant = 4)
input z : [1, 4]
output y : [1, 4]
v_rd netq
vv_add asvrf0[b]
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    let e = run(&p, &[("b", t(&[4], &x)), ("z", t(&[1, 4], &[0.0; 4]))]);
    assert_eq!(values(&e, "y"), vec![1.0, 0.5, 0.0, 0.0]);
}

#[test]
fn table_file_replaces_the_built_in_table() {
    // A table mapping every input to 0x3C00 (1.0): v_exp gives 1.0 everywhere.
    let dir = std::env::temp_dir().join(format!("nnp-emu-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ones.bin");
    let bytes: Vec<u8> = (0..65536).flat_map(|_| 0x3C00u16.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    let mut tg = target(BFP8);
    tg.numerics
        .tables
        .set(nnp_numerics::Activation::Exp, path.clone());
    let src = "input x : [1, 4]\noutput y : [1, 4]\nv_rd netq\nv_exp\nv_wr netq\nend_chain\n";
    let p = program(src, tg);
    let e = run(&p, &[("x", t(&[1, 4], &[5.0, -3.0, 0.0, 1.0]))]);
    assert_eq!(bits(&e, "y"), vec![0x3C00; 4]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn nan_flows_through_when_allowed() {
    // 65520 is stored as +inf; inf - inf = NaN; max(NaN, 1) = NaN; relu(NaN) = NaN.
    // Stored NaN bits are canonical: 0x7E00.
    let src = "\
vector a : [4] at asvrf0[0]
vector one : [4] at asvrf1[0]
input x : [1, 4]
output y : [1, 4]
v_rd netq
vv_a_sub_b asvrf0[a]
vv_max asvrf1[one]
v_relu
v_wr netq
end_chain
";
    let p = program(src, target(BFP8));
    let e = run(
        &p,
        &[
            ("a", t(&[4], &[65520.0, 0.0, 0.0, 0.0])),
            ("one", t(&[4], &[1.0; 4])),
            ("x", t(&[1, 4], &[65520.0, 2.0, -3.0, 0.0])),
        ],
    );
    let y = &e.outputs["y"];
    assert!(y.data[0].is_nan());
    assert_eq!(
        nnp_host::storage_bits(&nnp_numerics::FloatFormat::FP16, y.data[0]),
        0x7E00
    );
    assert_eq!(&y.data[1..], &[2.0, 1.0, 1.0]);
}

#[test]
fn nonfinite_error_names_the_instruction() {
    // 60000 * 2 = 120000 > 65504: mv_mul's fp16 output overflows to inf.
    let p = program(&mvm_src(1, 1), target("nonfinite = \"error\""));
    let err = try_run(
        &p,
        &[
            ("W", t(&[4, 4], &identity(4, 2.0))),
            ("x", t(&[1, 4], &[60000.0, 0.0, 0.0, 0.0])),
        ],
    )
    .unwrap_err();
    match err {
        EmuError::NonFinite { site, op, lane, .. } => {
            assert_eq!(
                (op, site.chain, site.iteration, site.line, lane),
                ("mv_mul", 1, 0, 11, 0)
            );
        }
        other => panic!("wrong error: {other}"),
    }
    // On host load: 65520 rounds to inf in fp16.
    let err = try_run(
        &p,
        &[
            ("W", t(&[4, 4], &identity(4, 1.0))),
            ("x", t(&[1, 4], &[65520.0, 0.0, 0.0, 0.0])),
        ],
    )
    .unwrap_err();
    assert!(matches!(err, EmuError::NonFinite { .. }), "{err}");
}

/// Data for [`mvm_src`]`(1, 1)`: `W = 2 I` and the inputs `x` of shape `shape`.
fn doubled(p: &nnp_grammar::Program, x: &[f32], shape: &[usize]) -> nnp_host::HostData {
    data(
        p,
        &[("W", t(&[4, 4], &identity(4, 2.0))), ("x", t(shape, x))],
    )
}

/// A non-finite value names its item in the whole batch: item 3 of 5 overflows, emulated in
/// lockstep chunks of 2 (item 3 is the second of its chunk) as the piece of a larger batch
/// that starts at item 100 (`nnpc emulate` in pieces): batch item 103; an input of item 4
/// that becomes infinite on load: batch item 104.
#[test]
fn nonfinite_error_names_the_item_in_the_whole_batch() {
    let p = program(&mvm_src(1, 1), target("nonfinite = \"error\""));
    let mut x = vec![1.0; 5 * 4];
    x[3 * 4 + 2] = 60000.0;
    let d = doubled(&p, &x, &[5, 1, 4]);
    let opts = EmuOptions {
        chunk: Some(2),
        first_item: 100,
        ..EmuOptions::default()
    };
    match emulate(&p, &d, &opts).unwrap_err() {
        EmuError::NonFinite { site, op, lane, .. } => {
            assert_eq!((op, site.item, site.line, lane), ("mv_mul", 103, 11, 2));
        }
        other => panic!("wrong error: {other}"),
    }
    // On host load: 65520 in item 4 rounds to inf in fp16 as netq is read.
    let mut x = vec![1.0; 5 * 4];
    x[4 * 4 + 1] = 65520.0;
    let d = doubled(&p, &x, &[5, 1, 4]);
    match emulate(&p, &d, &opts).unwrap_err() {
        EmuError::NonFinite { site, lane, .. } => assert_eq!((site.item, lane), (104, 1)),
        other => panic!("wrong error: {other}"),
    }
}

/// Under `nonfinite = "error"` the batch fails with its lowest failing item, at that item's
/// first non-finite value, however the items are split into lockstep chunks: item 1
/// overflows at `mv_mul` (line 11), item 0 only at the later `v_exp` (line 12; e^12 >
/// 65504), item 2 never. Item 0's `v_exp` it is, in one chunk of 3 or in chunks of 1 or 2.
#[test]
fn nonfinite_error_is_the_lowest_items_first() {
    let src = mvm_src(1, 1).replace("mv_mul mrf[W]\n", "mv_mul mrf[W]\nv_exp\n");
    let p = program(&src, target("nonfinite = \"error\""));
    let x = [
        6.0, 0.0, 0.0, 0.0, 60000.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0,
    ];
    let d = doubled(&p, &x, &[3, 1, 4]);
    for chunk in [3, 2, 1] {
        let opts = EmuOptions {
            chunk: Some(chunk),
            ..EmuOptions::default()
        };
        match emulate(&p, &d, &opts).unwrap_err() {
            EmuError::NonFinite { site, op, lane, .. } => assert_eq!(
                (op, site.item, site.line, site.chain, lane),
                ("v_exp", 0, 12, 1, 0),
                "chunks of {chunk}"
            ),
            other => panic!("wrong error: {other}"),
        }
    }
    // An error that stops every item (a row left on netq at the end) is item 0's error
    // unless item 0 overflowed before it: item 1's overflow does not count.
    let mut leftover = p.clone();
    leftover.decls[1].shape = vec![2, 4];
    for (overflows, leftover_error) in [(1, true), (0, false)] {
        let mut x = vec![1.0; 3 * 2 * 4];
        x[overflows * 8] = 60000.0;
        let d = doubled(&leftover, &x, &[3, 2, 4]);
        for chunk in [3, 1] {
            let opts = EmuOptions {
                chunk: Some(chunk),
                ..EmuOptions::default()
            };
            let err = emulate(&leftover, &d, &opts).unwrap_err();
            let got = match err {
                EmuError::NetqLeftover { .. } => true,
                EmuError::NonFinite { site, .. } if site.item == overflows => false,
                other => panic!("wrong error: {other}"),
            };
            assert_eq!(got, leftover_error, "item {overflows}, chunks of {chunk}");
        }
    }
}

#[test]
fn netq_underflow_leftover_and_uninitialised_reads() {
    let src = "\
input x : [2, 4]
output y : [2, 4]
s_wr iterations, 2
v_rd netq
v_wr netq
end_chain
";
    let ok = program(src, target(BFP8));
    let x = t(&[2, 4], &[1.0; 8]);
    // The checked program runs.
    run(&ok, &[("x", x.clone())]);
    // One input row fewer than the program pops: underflow at iteration 1 of chain 0 (line 4).
    let mut p = ok.clone();
    p.decls[0].shape = vec![1, 4];
    p.decls[1].shape = vec![1, 4];
    match try_run(&p, &[("x", t(&[1, 4], &[1.0; 4]))]).unwrap_err() {
        EmuError::NetqUnderflow { site } => {
            assert_eq!((site.chain, site.iteration, site.line), (0, 1, 4))
        }
        other => panic!("wrong error: {other}"),
    }
    // One row more: left over after the program.
    let mut p = ok.clone();
    p.decls[0].shape = vec![3, 4];
    match try_run(&p, &[("x", t(&[3, 4], &[1.0; 12]))]).unwrap_err() {
        EmuError::NetqLeftover { left, row, .. } => assert_eq!((left, row), (1, 2)),
        other => panic!("wrong error: {other}"),
    }
    // A read of a register nothing wrote.
    let src = "\
input x : [1, 4]
output y : [1, 4]
v_rd netq
v_wr ivrf[0]
end_chain
v_rd ivrf[0]
v_wr netq
end_chain
";
    let mut p = program(src, target(BFP8));
    if let nnp_grammar::ChainBody::Vector(vc) = &mut p.chains[1].body {
        vc.read.addr.base = 9;
    }
    match try_run(&p, &[("x", t(&[1, 4], &[1.0; 4]))]).unwrap_err() {
        EmuError::Uninitialized { site, mem, addr } => {
            assert_eq!(
                (mem.as_str(), addr, site.chain, site.line),
                ("ivrf", 9, 1, 6)
            );
        }
        other => panic!("wrong error: {other}"),
    }
}

#[test]
fn batch_items_are_independent_of_chunking() {
    // Random data, batch 5: running in one lockstep chunk, in chunks of 2, and each item
    // alone gives the same bits.
    use nnp_emulator::{EmuOptions, emulate};
    use nnp_host::HostData;
    let p = program(&mvm_src(2, 2), target(BFP8));
    let data = HostData::random(&p, 5, 11);
    let run_with = |chunk| {
        emulate(
            &p,
            &data,
            &EmuOptions {
                chunk,
                ..EmuOptions::default()
            },
        )
        .unwrap()
        .outputs["y"]
            .clone()
    };
    let whole = run_with(Some(5));
    assert_eq!(whole.shape, vec![5, 1, 8]);
    assert_eq!(run_with(Some(2)), whole);
    for item in 0..5 {
        let mut one = data.clone();
        one.batch = 1;
        let x = &data.inputs["x"];
        one.inputs
            .insert("x".into(), t(&[1, 1, 8], &x.data[item * 8..(item + 1) * 8]));
        let y = emulate(&p, &one, &EmuOptions::default()).unwrap().outputs["y"].clone();
        assert_eq!(y.data, whole.data[item * 8..(item + 1) * 8]);
    }
}

#[test]
fn progress_counts_every_batch_item_once() {
    use nnp_emulator::{EmuOptions, PROGRESS_CHUNK, Progress, emulate};
    use nnp_host::HostData;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let p = program(&mvm_src(1, 1), target(BFP8));
    // Three and a half chunks: the reports must add up to the batch, in at least 4 calls.
    let batch = 3 * PROGRESS_CHUNK + PROGRESS_CHUNK / 2;
    let data = HostData::random(&p, batch, 3);
    let (items, calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (i2, c2) = (items.clone(), calls.clone());
    let opts = EmuOptions {
        progress: Some(Progress(Arc::new(move |n| {
            i2.fetch_add(n, Ordering::Relaxed);
            c2.fetch_add(1, Ordering::Relaxed);
        }))),
        ..EmuOptions::default()
    };
    let with = emulate(&p, &data, &opts).unwrap().outputs;
    assert_eq!(items.load(Ordering::Relaxed), batch);
    assert!(calls.load(Ordering::Relaxed) >= 4);
    // Reporting progress (smaller chunks) changes no bit.
    assert_eq!(
        with,
        emulate(&p, &data, &EmuOptions::default()).unwrap().outputs
    );
}
