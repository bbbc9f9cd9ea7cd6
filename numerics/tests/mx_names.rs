//! The names ML engineers type for the OCP MX formats: OCP's format names, microxcaling's and
//! PyTorch's element spellings and microxcaling's keywords each parse to the canonical `mx`
//! format (printed canonically) and quantize and encode with its bits; near misses get help
//! that names the MX family, never another format.

use nnp_numerics::{Block, Format, MxElem, MxFormat, Rounding};

fn parse(s: &str) -> Format {
    s.parse().unwrap_or_else(|e| panic!("`{s}`: {e:?}"))
}

fn mx(elem: MxElem, block: usize) -> Format {
    Format::Mx(MxFormat {
        elem,
        block: Block::Size(block),
        rounding: Rounding::NearestEven,
    })
}

/// Every alias, with the canonical literal it means (from OCP MX v1.0 table 1 and
/// microxcaling's `ElemFormat`).
const ALIASES: &[(&str, &str)] = &[
    ("mxfp8_e4m3", "mx(elem = fp8e4m3, block = 32)"),
    ("mxfp8_e5m2", "mx(elem = fp8e5m2, block = 32)"),
    ("mxfp6_e3m2", "mx(elem = fp6e3m2, block = 32)"),
    ("mxfp6_e2m3", "mx(elem = fp6e2m3, block = 32)"),
    ("mxfp4", "mx(elem = fp4e2m1, block = 32)"),
    ("mxfp4_e2m1", "mx(elem = fp4e2m1, block = 32)"),
    ("mxint8", "mx(elem = int8, block = 32)"),
    ("mxfp8_e4m3(block = 16)", "mx(elem = fp8e4m3, block = 16)"),
    (
        "mxfp4(block_size = 64, round = away)",
        "mx(elem = fp4e2m1, block = 64, round = away)",
    ),
    ("mxint8(scale_bits = 8)", "mx(elem = int8, block = 32)"),
    ("mx(elem = fp8_e4m3)", "mx(elem = fp8e4m3, block = 32)"),
    ("mx(elem = float8_e4m3fn)", "mx(elem = fp8e4m3, block = 32)"),
    ("mx(elem = fp8_e5m2)", "mx(elem = fp8e5m2, block = 32)"),
    ("mx(elem = float8_e5m2)", "mx(elem = fp8e5m2, block = 32)"),
    ("mx(elem = fp6_e3m2)", "mx(elem = fp6e3m2, block = 32)"),
    ("mx(elem = float6_e3m2fn)", "mx(elem = fp6e3m2, block = 32)"),
    ("mx(elem = fp6_e2m3)", "mx(elem = fp6e2m3, block = 32)"),
    ("mx(elem = float6_e2m3fn)", "mx(elem = fp6e2m3, block = 32)"),
    ("mx(elem = fp4)", "mx(elem = fp4e2m1, block = 32)"),
    ("mx(elem = fp4_e2m1)", "mx(elem = fp4e2m1, block = 32)"),
    ("mx(elem = float4_e2m1fn)", "mx(elem = fp4e2m1, block = 32)"),
    (
        "mx(elem_format = fp8_e4m3, block_size = 16, scale_bits = 8)",
        "mx(elem = fp8e4m3, block = 16)",
    ),
];

#[test]
fn aliases_print_canonically() {
    for (alias, canonical) in ALIASES {
        let f = parse(alias);
        assert_eq!(f.to_string(), *canonical, "`{alias}`");
        assert_eq!(f, parse(canonical), "`{alias}`");
    }
    assert_eq!(parse("mxfp8_e4m3"), mx(MxElem::Fp8E4M3, 32));
    assert_eq!(parse("mxfp4"), mx(MxElem::Fp4E2M1, 32));
    assert_eq!(parse("mxint8"), mx(MxElem::Int8, 32));
}

/// Same bits as the canonical literal, by quantizing and encoding one run of values that
/// reach saturation, subnormals and zeros; and OCP's own values by hand: the block
/// `[485, 1, 0.001, ...]` of E4M3 has `s = floor(log2 485) - 8 = 0`, so 485 saturates to
/// 448, 1 stays, 0.001 lands on the subnormal grid (2^-9 steps: 0.001 = 0.512 * 2^-9 -> 2^-9).
#[test]
fn aliases_quantize_with_the_canonical_bits() {
    let x: Vec<f64> = (0..96)
        .map(|i| match i {
            0 => 485.0,
            1 => 1.0,
            2 => 0.001,
            i if i % 7 == 0 => 0.0,
            i => (i as f64 * 0.7312).sin() * 2f64.powi(i % 11 - 4),
        })
        .collect();
    let bits = |f: &Format| {
        let mut out = vec![0.0; x.len()];
        f.quantize(&x, 128, &mut out);
        let q: Vec<u64> = out.iter().map(|v| v.to_bits()).collect();
        (q, format!("{:?}", f.encode(&x, 128)))
    };
    for (alias, canonical) in ALIASES {
        let (a, c) = (parse(alias), parse(canonical));
        assert_eq!(bits(&a), bits(&c), "`{alias}` against `{canonical}`");
    }
    let mut out = vec![0.0; x.len()];
    parse("mxfp8_e4m3").quantize(&x, 128, &mut out);
    assert_eq!(&out[..3], &[448.0, 1.0, 2f64.powi(-9)]);
}

fn help(s: &str) -> String {
    let e = s.parse::<Format>().expect_err(s);
    e.help.unwrap_or_default()
}

#[test]
fn near_misses_name_the_mx_family() {
    // A width without its element: both OCP choices, never `msfp`.
    let h = help("mxfp8");
    assert!(h.contains("mxfp8_e4m3") && h.contains("mxfp8_e5m2"), "{h}");
    assert!(!h.contains("msfp"), "{h}");
    let h = help("mxfp6");
    assert!(h.contains("mxfp6_e3m2") && h.contains("mxfp6_e2m3"), "{h}");
    // Any other mx name: the OCP names, and what mx9/mx6/mx4 are.
    let h = help("mxfp5");
    assert!(h.contains("mxfp4") && h.contains("hbfp"), "{h}");
    // An element name used as a format: the MX literal that holds it.
    let h = help("fp8_e4m3");
    assert!(h.contains("mx(elem = fp8e4m3)"), "{h}");
    // OCP scales are E8M0.
    let e = "mxfp8_e4m3(scale_bits = 5)"
        .parse::<Format>()
        .expect_err("E8M0");
    assert!(e.message.contains("scale_bits"), "{}", e.message);
    // microxcaling's keywords are `mx`'s only.
    assert!("bfp(mant = 8, block_size = 16)".parse::<Format>().is_err());
}
