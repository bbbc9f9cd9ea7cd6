//! The lexer, parser and checker never panic, and every diagnostic span lies inside the source
//! on character boundaries (so rendering cannot fail). Inputs: arbitrary bytes, token soup, and
//! mutated valid programs (the samples plus built-in seeds).
//!
//! CI runs `NNPC_FUZZ_CASES` (default 2,000) cases per property; for a long run:
//! `NNPC_FUZZ_CASES=100000 cargo test -p nnp-grammar --release --test fuzz`.

use miette::{GraphicalReportHandler, GraphicalTheme};
use nnp_grammar::{Diagnostics, SourceFile, Target, check};
use proptest::prelude::*;
use std::sync::{Arc, OnceLock};

fn cases() -> u32 {
    std::env::var("NNPC_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// A small target, so that sizes and MFU counts are hit more often.
fn small_target() -> Target {
    let mut t = Target::bw_default();
    t.native = 16;
    t.mfus = 1;
    t.memory.ivrf = 64;
    t.memory.asvrf = 32;
    t.memory.mulvrf = 32;
    t.memory.mrf = 64;
    t.memory.dram = 256;
    t.memory.dram_tiles = 64;
    t
}

/// Check `text` on two targets; assert the diagnostics are well formed and render them.
fn exercise(text: &str) {
    for target in [None, Some(small_target())] {
        let src = Arc::new(SourceFile::new("fuzz.nnp", text));
        let diags = match check(src.clone(), target) {
            Ok(out) => out.warnings,
            Err(d) => {
                assert!(d.iter().any(|d| d.is_error()), "Err without an error");
                d
            }
        };
        for d in &diags {
            for l in &d.labels {
                let (s, e) = (l.span.start as usize, l.span.end as usize);
                assert!(
                    s <= e && e <= text.len(),
                    "span {s}..{e} outside text of {} bytes: {d:?}",
                    text.len()
                );
                assert!(
                    text.is_char_boundary(s) && text.is_char_boundary(e),
                    "span {s}..{e} splits a character: {d:?}"
                );
            }
        }
        // Rendering the first few exercises miette with our spans.
        let all = Diagnostics::new(&src, diags.into_iter().take(3).collect());
        let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor());
        for d in &all.items {
            let mut out = String::new();
            let _ = handler.render_report(&mut out, d);
        }
    }
}

fn seeds() -> &'static Vec<String> {
    static SEEDS: OnceLock<Vec<String>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut v: Vec<String> = [
            "let H = 2\nmatrix W : [256, 300] at mrf[4] quant bfp(mant = 5)\nvector b : [256] at asvrf0[10]\n\
             vector z : [256] at asvrf1[0] = 0\nvector m : [256] at mulvrf1[0] pad -65504\ninput x : [2, 300]\n\
             output y : [2, 256]\ns_wr rows, 3\ns_wr iterations, 2\nv_rd netq\nv_wr ivrf[0] + 3\nend_chain\n\
             s_wr rows, H\ns_wr cols, 3\nrepeat t in 0..2 {\n  v_rd ivrf[t * 3]\n  mv_mul mrf[W]\n  vv_add asvrf0[b]\n\
             v_relu\n  vv_max asvrf1[z]\n  vv_mul mulvrf1[m]\n  v_wr netq\n  end_chain\n}\n",
            "matrix D : [256, 256] at dram[0]\nvector v : [256] at ivrf[0]\noutput y : [256]\ns_wr rows, 2\n\
             s_wr cols, 2\nm_rd dram[D]\nm_wr mrf[8]\nend_chain\nv_rd_inc ivrf[v], 0\nmv_mul_inc mrf[8], 0\nv_wr netq\nend_chain\n",
            "target \"bw-default\"\nlet F = 6\nmatrix W : [96, 1152] at mrf[0]\nvector f : [36, 128] at ivrf[0] = 0\n\
             output y : [4, 96]\ns_wr win_w, 3\ns_wr win_h, 3\ns_wr pitch, F\ns_wr cols, 9\ns_wr iterations, 4\n\
             v_rd_2d ivrf[6] + 1\nmv_mul mrf[W]\nv_softmax\nv_wr netq\nend_chain\nquant mfu.input = bf16\n",
        ]
        .map(String::from)
        .to_vec();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples");
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            paths.sort();
            for p in paths {
                // Samples valid on bw-default (some are written for other targets).
                if p.extension().is_some_and(|x| x == "nnp")
                    && let Ok(t) = std::fs::read_to_string(&p)
                    && check(Arc::new(SourceFile::new("s.nnp", t.as_str())), None).is_ok()
                {
                    v.push(t);
                }
            }
        }
        v
    })
}

const VOCAB: &[&str] = &[
    "v_rd",
    "v_rd_inc",
    "v_rd_2d",
    "mv_mul",
    "vv_add",
    "vv_a_sub_b",
    "vv_mul",
    "v_relu",
    "v_softmax",
    "v_wr",
    "v_wr_inc",
    "m_rd",
    "m_wr",
    "s_wr",
    "end_chain",
    "netq",
    "ivrf",
    "mrf",
    "dram",
    "asvrf0",
    "asvrf1",
    "asvrf9",
    "mulvrf0",
    "mulvrf1",
    "rows",
    "cols",
    "iterations",
    "win_w",
    "pitch",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ",",
    ":",
    "=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "..",
    ".",
    "\n",
    " ",
    "0",
    "1",
    "7",
    "-1",
    "128",
    "4096",
    "99999999999",
    "4294967296",
    "9223372036854775807",
    "0x",
    "0xffffffff",
    "1e-3",
    "-65504",
    "\"",
    "\"bw-default\"",
    "let",
    "repeat",
    "in",
    "matrix",
    "vector",
    "input",
    "output",
    "at",
    "pad",
    "quant",
    "mvm.vector",
    "mfu.input",
    "storage",
    "bfp(mant = 5)",
    "fp(5, 2)",
    "mx(fp8_e4m3, 32)",
    "t",
    "H",
    "W",
    "x",
    "y",
    "//",
    "é",
    "\u{0}",
    "target",
];

/// One edit of a program's text.
#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, usize),
    Replace(usize, usize, usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..20usize).prop_map(|(p, n)| Mutation::Delete(p, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(p, t)| Mutation::Insert(p, t)),
        (any::<usize>(), 1..8usize, any::<usize>())
            .prop_map(|(p, n, t)| Mutation::Replace(p, n, t)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// Nearest char boundary at or below `p % (len + 1)`.
fn boundary(s: &str, p: usize) -> usize {
    let mut i = p % (s.len() + 1);
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &mut String, m: &Mutation) {
    match *m {
        Mutation::Delete(p, n) => {
            let a = boundary(text, p);
            let b = boundary(text, a + n.min(text.len() - a));
            text.replace_range(a..b.max(a), "");
        }
        Mutation::Insert(p, t) => {
            let a = boundary(text, p);
            text.insert_str(a, VOCAB[t % VOCAB.len()]);
        }
        Mutation::Replace(p, n, t) => {
            let a = boundary(text, p);
            let b = boundary(text, a + n.min(text.len() - a));
            text.replace_range(a..b.max(a), VOCAB[t % VOCAB.len()]);
        }
        Mutation::DuplicateLine(l) => {
            let mut lines: Vec<&str> = text.lines().collect();
            let i = l % lines.len().max(1);
            if let Some(&line) = lines.get(i) {
                lines.insert(i, line);
            }
            *text = lines.join("\n");
        }
        Mutation::SwapLines(a, b) => {
            let mut lines: Vec<&str> = text.lines().collect();
            let n = lines.len().max(1);
            if !lines.is_empty() {
                lines.swap(a % n, b % n);
            }
            *text = lines.join("\n");
        }
        Mutation::Truncate(p) => {
            let a = boundary(text, p);
            text.truncate(a);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        exercise(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn token_soup_never_panics(tokens in proptest::collection::vec(0..VOCAB.len(), 0..120)) {
        let text: String = tokens.iter().map(|&t| VOCAB[t]).collect::<Vec<_>>().join(" ");
        exercise(&text);
    }

    #[test]
    fn mutated_programs_never_panic(
        seed in any::<usize>(),
        edits in proptest::collection::vec(mutation(), 1..6),
    ) {
        let seeds = seeds();
        let mut text = seeds[seed % seeds.len()].clone();
        for m in &edits {
            apply(&mut text, m);
        }
        exercise(&text);
    }
}

#[test]
fn seeds_are_valid() {
    // The mutation seeds start valid, so mutants are near-valid programs.
    for s in seeds() {
        let r = check(Arc::new(SourceFile::new("seed.nnp", s.as_str())), None);
        assert!(r.is_ok(), "{s}\n{r:#?}");
    }
}
