//! Limits of the front end: every input, however long, deep or large, ends in a clear error or
//! a result, quickly, and renders without a panic.
//! - a diagnostic at any column renders (the renderer pads with `{:width$}`, which panics past
//!   65,535; the source shows a window of a long line);
//! - a `repeat` nest is bounded as a whole (steps: instructions plus iterations, nested ranges
//!   multiplied, checked arithmetic);
//! - rendering N diagnostics and parsing deep parentheses after a syntax error stay linear;
//! - a target file reports every unknown key, and a mistyped built-in name gets a suggestion.

use miette::{GraphicalReportHandler, GraphicalTheme};
use nnp_grammar::check::MAX_INSTRUCTIONS;
use nnp_grammar::lexer::MAX_PAREN_DEPTH;
use nnp_grammar::{
    Diagnostic, Diagnostics, SourceFile, SourceText, Span, Target, TargetError, check, codes,
};
use proptest::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn diags(src: &str) -> Vec<Diagnostic> {
    match check(Arc::new(SourceFile::new("t.nnp", src)), None) {
        Ok(out) => out.warnings,
        Err(d) => d,
    }
}

/// [`diags`] of `src`, checked to come within `secs` seconds: a bound far above the time it
/// takes (a hang guard, not a benchmark), which the unbounded walk it guards against exceeds.
fn diags_within(src: &str, secs: u64) -> Vec<Diagnostic> {
    let t = Instant::now();
    let all = diags(src);
    let dt = t.elapsed();
    assert!(dt < Duration::from_secs(secs), "{dt:?}");
    all
}

fn render(d: &dyn miette::Diagnostic) -> String {
    let mut out = String::new();
    GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
        .with_width(200)
        .render_report(&mut out, d)
        .expect("render");
    out
}

/// Every diagnostic of `src`, rendered.
fn render_all(src: &str) -> (Vec<Diagnostic>, String) {
    let file = SourceFile::new("t.nnp", src);
    let all = Diagnostics::new(&file, diags(src));
    let text = all.items.iter().map(|d| render(d)).collect();
    (all.items, text)
}

// ---- columns past 65,535 ----

/// `$` after 100,000 spaces: column 100,010 of line 2 (`let A = 1` is 9 characters).
#[test]
fn an_error_at_column_100010_renders_with_a_window_of_its_line() {
    let src = format!("// a long line\nlet A = 1{}$\n", " ".repeat(100_000));
    let (all, out) = render_all(&src);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0].code, codes::INVALID_CHARACTER);
    assert!(out.contains("[t.nnp:2:100010]"), "{out}");
    assert!(out.contains("no token starts with this character"), "{out}");
    // A window of the line, not the line.
    assert!(out.lines().all(|l| l.chars().count() < 400), "{out}");
    let file = SourceFile::new("t.nnp", src.as_str());
    assert_eq!(file.line_col(all[0].span().start), (2, 100_010));
}

/// Labels near the start and far along one long line (a diagnostic made by hand): each renders
/// in a window of the line, and a label over the whole long line is left out, never a panic.
#[test]
fn labels_far_apart_on_one_long_line_render() {
    let text = format!("let A = 1\nlet B = {}1\n// end\n", "1 + ".repeat(30_000));
    let second = text.find("let B").expect("line 2");
    let far = text.rfind("1 +").expect("far");
    let cases = [
        vec![Span::new(second, second + 3), Span::new(far, far + 1)],
        vec![Span::new(far, far + 1), Span::new(0, 3)],
        vec![Span::new(second, text.len() - 7)],
    ];
    let source = Arc::new(SourceText::new("t.nnp", text.clone()));
    for labels in cases {
        let mut d = Diagnostic::error(codes::SYNTAX, "test");
        for (k, s) in labels.iter().enumerate() {
            d = d.label(*s, format!("label {k}"));
        }
        let out = render(&d.with_source(source.clone()));
        assert!(out.lines().all(|l| l.chars().count() < 400), "{out}");
    }
}

/// Property: an invalid character at any column of any line renders, with its own line and
/// column in the header.
#[test]
fn an_error_at_any_column_renders() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(24));
    let strategy = (0usize..3, 0usize..140_000, prop::bool::ANY);
    runner
        .run(&strategy, |(lines_before, col, tabs)| {
            let pad = if tabs { "\t" } else { " " }.repeat(col);
            let src = format!("{}{pad}$\n// after\n", "// x\n".repeat(lines_before));
            let (all, out) = render_all(&src);
            prop_assert_eq!(all.len(), 1);
            let header = format!("[t.nnp:{}:{}]", lines_before + 1, col + 1);
            prop_assert!(
                out.contains(&header),
                "{} not in {}",
                header,
                &out[..out.len().min(600)]
            );
            Ok(())
        })
        .expect("renders");
}

/// A target file's error past column 65,535 renders too.
#[test]
fn a_target_error_at_column_100010_renders() {
    let text = format!("native ={}5000\n", " ".repeat(100_001));
    let e = Target::from_toml(&text, "t.toml").expect_err("native out of range");
    let out = render(&e);
    assert!(
        out.contains("native = 5000 must be between 1 and 4096"),
        "{out}"
    );
    assert!(out.contains("[t.toml:1:100010]"), "{out}");
    assert!(out.lines().all(|l| l.chars().count() < 400), "{out}");
}

// ---- the unrolled size of `repeat` nests ----

/// i64::MIN..i64::MAX has 2^64 - 1 iterations: its length overflows i64, and the error says
/// the size and the limit at once.
#[test]
fn an_empty_repeat_over_the_whole_i64_range_is_too_large() {
    let src = "repeat t in -9223372036854775807 - 1..9223372036854775807 {\n}\n";
    let all = diags_within(src, 2);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0].code, codes::TOO_LARGE);
    assert!(
        all[0]
            .message
            .contains("this `repeat` unrolls to 18446744073709551615 steps"),
        "{}",
        all[0].message
    );
    assert!(
        all[0]
            .help
            .as_deref()
            .is_some_and(|h| h.contains(&format!("at most {MAX_INSTRUCTIONS} steps"))),
        "{:?}",
        all[0].help
    );
}

/// Three nested empty ranges of 100,000 each, every one under the limit: 10^5 x (1 + 10^5 x
/// (1 + 10^5)) = 1,000,010,000,100,000 steps.
#[test]
fn nested_repeats_multiply() {
    let src =
        "repeat a in 0..100000 {\nrepeat b in 0..100000 {\nrepeat c in 0..100000 {\n}\n}\n}\n";
    let all = diags_within(src, 2);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(
        all[0]
            .message
            .contains("this `repeat` unrolls to 1000010000100000 steps"),
        "{}",
        all[0].message
    );
}

/// An inner range that grows with the outer variable is not known up front: the running count
/// stops it at the limit.
#[test]
fn an_inner_range_that_depends_on_the_outer_variable_stops_at_the_limit() {
    let src = "repeat a in 0..100000 {\nrepeat b in 0..a * a + 1 {\n}\n}\n";
    let all = diags_within(src, 30);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(
        all[0].message.contains(&format!(
            "the program unrolls to more than {MAX_INSTRUCTIONS} steps"
        )),
        "{}",
        all[0].message
    );
}

/// An empty range inside a long `repeat` whose body is large: the empty range is an error in
/// every iteration, reported once from the first, without walking the body once per outer
/// iteration (5 x 10^6 x 20,000 line visits).
#[test]
fn an_empty_inner_range_under_a_long_repeat_is_one_quick_error() {
    let src = format!(
        "repeat a in 0..4999990 {{\nrepeat b in 0..0 {{\n{}}}\n}}\n",
        "v_pass\n".repeat(20_000)
    );
    let all = diags_within(&src, 2);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0].code, codes::REPEAT);
    assert_eq!(all[0].message, "empty range 0..0");
    let at = src.find("0..0").expect("in source");
    assert_eq!(all[0].span(), Span::new(at, at + 4));
}

/// 200 nested `repeat`s whose ranges name the enclosing variable (so no enclosing `repeat` can
/// count them): each counts its own body when it runs, without walking every level below it
/// (that walk made each of the 4,096 runs of the deep levels cost the depth squared).
#[test]
fn a_deep_nest_of_ranges_that_name_outer_variables_checks_quickly() {
    let mut src = String::from("repeat v0 in 0..2 {\n");
    for k in 1..200 {
        let len = if k < 12 { 2 } else { 1 };
        src.push_str(&format!("repeat v{k} in 0..v{} * 0 + {len} {{\n", k - 1));
    }
    src.push_str("v_pass\n");
    src.push_str(&"}\n".repeat(200));
    let all = diags_within(&src, 3);
    // One error: `v_pass` with no chain, reported once for its span.
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(all[0].code, codes::CHAIN_START);
}

/// Steps of a nest of empty `repeat`s with these lengths (outermost first), saturating.
fn nest_steps(lens: &[u128]) -> u128 {
    lens.iter()
        .rev()
        .fold(0u128, |body, &n| n.saturating_mul(body.saturating_add(1)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Property: any nest of empty ranges (lengths up to 2^64 - 1) is refused with its exact
    /// size when over the limit, accepted otherwise, and either way quickly.
    #[test]
    fn any_repeat_nest_is_bounded(
        ranges in prop::collection::vec(
            prop::sample::select(vec![
                (0i64, 0i64), (5, 7), (-3, 7), (0, 1000), (0, 3000), (0, 1 << 40),
                (i64::MIN, i64::MAX), (i64::MAX - 2, i64::MAX), (-(1 << 62), 1 << 62),
            ]),
            1..5,
        )
    ) {
        let mut src = String::new();
        for (k, (a, b)) in ranges.iter().enumerate() {
            let start = if *a == i64::MIN { format!("{} - 1", i64::MIN + 1) } else { a.to_string() };
            src.push_str(&format!("repeat v{k} in {start}..{b} {{\n"));
        }
        src.push_str(&"}\n".repeat(ranges.len()));
        let lens: Vec<u128> = ranges.iter().map(|(a, b)| (i128::from(*b) - i128::from(*a)) as u128).collect();
        let steps = nest_steps(&lens);
        let t = Instant::now();
        let all = diags(&src);
        prop_assert!(t.elapsed() < Duration::from_secs(10));
        if steps > MAX_INSTRUCTIONS as u128 {
            prop_assert_eq!(all.len(), 1);
            prop_assert_eq!(all[0].code, codes::TOO_LARGE);
            let shown = if steps > u128::from(u64::MAX) {
                format!("more than {}", u64::MAX)
            } else {
                steps.to_string()
            };
            prop_assert!(all[0].message.contains(&format!("unrolls to {shown} steps")), "{}", all[0].message);
        } else {
            prop_assert!(all.iter().all(|d| d.code != codes::TOO_LARGE), "{:?}", all);
            // The first empty range (outermost) is reached and refused; nothing inside it runs.
            let empty = lens.iter().position(|&n| n == 0);
            let repeats: Vec<_> = all.iter().filter(|d| d.code == codes::REPEAT).collect();
            prop_assert_eq!(repeats.len(), usize::from(empty.is_some()), "{:?}", all);
        }
    }
}

// ---- linear time in the number of diagnostics and in parenthesis depth ----

/// 20,000 lines with an error each: check and render them all. Quadratic (each render scanning
/// the file from its start) is ~20,000 x 300 KB = 6e9 byte reads.
#[test]
fn many_diagnostics_render_in_linear_time() {
    let src = "v_rd $\n".repeat(20_000);
    let t = Instant::now();
    let (all, out) = render_all(&src);
    let dt = t.elapsed();
    eprintln!("check + render of 20,000 errors: {dt:?}");
    assert!(all.len() >= 20_000, "{}", all.len());
    assert!(out.contains("[t.nnp:20000:6]"));
    assert!(dt < Duration::from_secs(20), "{dt:?}");
}

/// Deep parentheses then a syntax error: past MAX_PAREN_DEPTH the line is one error, so the
/// parser's recovery never walks a deep stack once per skipped token.
#[test]
fn deep_parentheses_after_a_syntax_error_are_bounded() {
    let depth = 50_000;
    let src = format!("let A = {}1 ${}\n", "(".repeat(depth), " ) 1".repeat(depth));
    let t = Instant::now();
    let all = diags(&src);
    let dt = t.elapsed();
    eprintln!("{depth} parentheses then a syntax error: {dt:?}");
    assert!(dt < Duration::from_secs(5), "{dt:?}");
    let deep: Vec<_> = all.iter().filter(|d| d.code == codes::TOO_LARGE).collect();
    assert_eq!(deep.len(), 1, "{all:#?}");
    // The (MAX_PAREN_DEPTH + 1)-th `(`, at byte 8 + MAX_PAREN_DEPTH.
    let at = 8 + MAX_PAREN_DEPTH;
    assert_eq!((deep[0].span().start, deep[0].span().end), (at, at + 1));
    assert!(deep[0].message.contains("parentheses nested too deeply"));
    // 64 levels are fine.
    let ok = format!("let A = {}1{}\n", "(".repeat(64), ")".repeat(64));
    assert!(diags(&ok).iter().all(|d| !d.is_error()), "{:?}", diags(&ok));
}

// ---- target files ----

/// Three unknown keys, in three tables: all three reported, in file order, each with the
/// nearest known key.
#[test]
fn every_unknown_key_of_a_target_file_is_reported() {
    let text = "nativ = 16\nmfus = 3\n[memory]\nivfr = 10\n[numerics]\nstorag = \"fp16\"\n";
    let e = Target::from_toml(text, "t.toml").expect_err("three bad keys");
    let TargetError::Invalid { message, more, .. } = &e else {
        panic!("{e}")
    };
    assert!(
        message.contains("unknown field `nativ`") && message.contains("did you mean `native`?")
    );
    assert_eq!(e.span().map(|r| &text[r]), Some("nativ"));
    assert_eq!(more.len(), 2, "{more:#?}");
    assert!(
        more[0].message.contains("unknown field `ivfr`"),
        "{}",
        more[0].message
    );
    assert!(
        more[0].message.contains("did you mean `ivrf`?") && more[0].message.contains("[memory]")
    );
    assert_eq!(more[0].span().map(|r| &text[r]), Some("ivfr"));
    assert!(more[1].message.contains("did you mean `storage`?"));
    assert_eq!(more[1].span().map(|r| &text[r]), Some("storag"));
    let out = render(&e);
    for key in ["nativ", "ivfr", "storag"] {
        assert!(out.contains(&format!("unknown field `{key}`")), "{out}");
    }
}

/// Values out of range: each is reported.
#[test]
fn every_bad_value_of_a_target_file_is_reported() {
    let text = "native = 0\nmfus = 9\n[numerics]\nstorage = \"bfp(mant = 4)\"\n";
    let e = Target::from_toml(text, "t.toml").expect_err("three bad values");
    let TargetError::Invalid { message, more, .. } = &e else {
        panic!("{e}")
    };
    assert!(
        message.contains("native = 0 must be between 1 and 4096"),
        "{message}"
    );
    let rest: Vec<&str> = more.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert!(
        rest[0].contains("mfus = 9 must be between 1 and 8"),
        "{rest:?}"
    );
    assert!(rest[1].contains("must be a float format"), "{rest:?}");
}

/// A mistyped built-in name that is no file: the built-in name is suggested, from the
/// command line's loader and from a `target` statement.
#[test]
fn a_mistyped_builtin_target_suggests_the_nearest() {
    let e = Target::load("bw-defualt").expect_err("no such file");
    let out = render(&e);
    assert!(
        out.contains("did you mean the built-in target `bw-default`?"),
        "{out}"
    );
    let e = Target::load("no/such/file.toml").expect_err("no such file");
    assert!(miette::Diagnostic::help(&e).is_none());
    let all = diags("target \"bw-defult\"\n");
    let d = all
        .iter()
        .find(|d| d.code == codes::TARGET)
        .expect("target error");
    assert_eq!(
        d.help.as_deref(),
        Some("did you mean the built-in target `bw-default`?")
    );
}

// ---- the footprint once run ----

/// By hand: 3 iterations x 4 instructions (v_rd, v_relu, v_wr, end_chain) = 12 operations;
/// W [200, 300] at N = 128 is 2 x 3 tiles of 128 x 128 f32 = 393,216 bytes, v and y one
/// 128-lane register each = 512 bytes each.
#[test]
fn the_footprint_counts_instructions_and_padded_bytes() {
    let src = "matrix W : [200, 300] at mrf[0]\nvector v : [128] at ivrf[0]\n\
               output y : [128] at ivrf[1]\ns_wr iterations, 3\nv_rd ivrf[0] + 0\nv_relu\n\
               v_wr ivrf[1] + 0\nend_chain\n";
    let out = check(Arc::new(SourceFile::new("t.nnp", src)), None).expect("valid");
    let f = out.program.footprint();
    assert_eq!(f.operations, 12);
    assert_eq!(f.data_bytes, 393_216 + 512 + 512);
}
