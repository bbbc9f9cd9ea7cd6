//! Format literals: parsing, canonical printing (which parses back to the same value), serde,
//! and the errors for bad literals.

use nnp_numerics::{Block, Format, Rounding};

fn parse(s: &str) -> Format {
    s.parse().unwrap_or_else(|e| panic!("`{s}`: {e:?}"))
}

#[test]
fn catalogue_roundtrips() {
    let lits = [
        "fp16",
        "bf16",
        "fp32",
        "fp(5, 2)",
        "fp(5, 3)",
        "fp(4, 3, overflow = sat, subnormals = false, round = zero)",
        "bfp(mant = 8, exp_bits = 5, round = even)",
        "bfp(mant = 5)",
        "bfp(8, 16, 6, away)",
        "bfp(mant = 4, block = 32, round = stochastic(seed = 42), range = full)",
        "msfp(mant = 5)",
        "msfp(4)",
        "mx(elem = fp8e4m3, block = 32)",
        "mx(fp8e5m2)",
        "mx(elem = fp6e3m2, block = native)",
        "mx(elem = fp6e2m3, block = 16, round = away)",
        "mx(elem = fp4e2m1)",
        "mx(elem = int8)",
        "hbfp(mant = 4, levels = 1, scale_cap = 1, block = 16)",
        "hbfp(mant = 2, levels = 2, scale_cap = 1, block = 4, sub = 1)",
        "hbfp(mant = 2, levels = 1, scale_cap = 1, block = 4, sub = 2, scale_bits = 2, flush = false)",
        "mx9",
        "mx6",
        "mx4",
        "int(bits = 8, scale = pow2, per = tensor)",
        "int(bits = 4, scale = f32, per = row, round = zero)",
        "int(8)",
        "fixed(int = 3, frac = 4)",
        "fixed(1, 15)",
        "dynfixed(bits = 8, policy = max)",
        "dynfixed(bits = 16, policy = overflow(ppm = 100), per = row)",
        "pot(bits = 4)",
        "pot(bits = 5, block = 16)",
        "twohot(bits = 6)",
        "twohot(bits = 8, r = 2, block = 8)",
    ];
    for lit in lits {
        let f = parse(lit);
        let printed = f.to_string();
        let back = parse(&printed);
        assert_eq!(back, f, "`{lit}` printed as `{printed}`");
        assert_eq!(
            back.to_string(),
            printed,
            "printing is canonical for `{lit}`"
        );
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, format!("\"{printed}\""));
        let de: Format = serde_json::from_str(&json).unwrap();
        assert_eq!(de, f);
    }
}

#[test]
fn defaults() {
    let Format::Bfp(b) = parse("bfp(mant = 8)") else {
        panic!()
    };
    assert_eq!(
        (b.block, b.exp_bits, b.rounding),
        (Block::Native, 5, Rounding::NearestEven)
    );
    assert_eq!(
        parse("bfp(mant = 8)"),
        parse("bfp(mant = 8, block = native, exp_bits = 5, round = even)")
    );
    assert_eq!(parse("  fp( 5 ,2 ) "), parse("fp(e = 5, m = 2)"));
    let Format::Mx(m) = parse("mx(elem = fp8e4m3)") else {
        panic!()
    };
    assert_eq!(m.block, Block::Size(32));
    assert_eq!(
        parse("bfp(mant = 5, round = stochastic(seed = 9))").rounding(),
        Rounding::Stochastic { seed: 9 }
    );
}

fn error(s: &str) -> nnp_numerics::FormatError {
    match s.parse::<Format>() {
        Ok(f) => panic!("`{s}` parsed as {f}"),
        Err(e) => e,
    }
}

#[test]
fn errors_point_at_the_problem() {
    // Unknown keyword: suggests the nearest.
    let e = error("bfp(mant = 8, exp_bit = 5)");
    assert!(
        e.message.contains("unknown keyword `exp_bit`"),
        "{}",
        e.message
    );
    assert_eq!((e.offset, e.len), (14, 7));
    assert!(
        e.help
            .as_deref()
            .unwrap()
            .contains("did you mean `exp_bits`")
    );
    // Unknown format name.
    let e = error("bpf(mant = 8)");
    assert_eq!((e.offset, e.len), (0, 3));
    assert!(e.help.as_deref().unwrap().contains("`bfp`"));
    // Bad choice value.
    let e = error("mx(elem = fp8e4m4)");
    assert_eq!(e.offset, 10);
    assert!(e.help.as_deref().unwrap().contains("fp8e4m3"));
    // Bad rounding.
    let e = error("bfp(mant = 8, round = nearest)");
    assert_eq!(e.offset, 22);
    let e = error("bfp(mant = 8, round = stochastic)");
    assert!(e.help.as_deref().unwrap().contains("seed"));
    // Missing required argument.
    let e = error("bfp(block = 16)");
    assert!(e.message.contains("needs `mant`"));
    // Out of range.
    let e = error("bfp(mant = 1)");
    assert!(e.message.contains("2..=32"));
    assert_eq!(e.offset, 11);
    // Duplicates, positional after keyword, unclosed, trailing junk.
    assert!(error("bfp(mant = 8, mant = 4)").message.contains("twice"));
    assert!(error("bfp(mant = 8, 16)").message.contains("positional"));
    assert!(error("bfp(mant = 8").message.contains("unclosed"));
    assert!(error("fp16 fp32").message.contains("unexpected"));
    assert!(error("fp16(1)").message.contains("no arguments"));
    assert!(error("twohot(bits = 5)").message.contains("even"));
    assert!(
        error("hbfp(mant = 4, block = 3)")
            .message
            .contains("multiple")
    );
    assert!(error("").message.contains("expected a format name"));
}
