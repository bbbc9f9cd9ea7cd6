//! Front-end speed on a generated program. The 100,000-instruction figure is for release builds:
//! `cargo test -p nnp-grammar --release --test perf -- --ignored --nocapture`.

use nnp_grammar::{SourceFile, check, synthetic_program};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn time_check(instructions: usize) -> (Duration, usize) {
    let text = synthetic_program(instructions);
    let lines = text.lines().filter(|l| !l.starts_with("//")).count();
    let src = Arc::new(SourceFile::new("synthetic.nnp", text));
    let t = Instant::now();
    let out = check(src, None)
        .unwrap_or_else(|d| panic!("synthetic program invalid: {:#?}", &d[..d.len().min(3)]));
    let dt = t.elapsed();
    // 512 chains' results are never read: one dead-write warning each.
    assert_eq!(out.warnings.len(), 512);
    (dt, lines)
}

#[test]
fn check_is_linear_enough() {
    // Debug build, small size: generous bound that still catches quadratic behaviour
    // (20,000 instructions quadratically would be ~4e8 steps).
    let (dt, lines) = time_check(20_000);
    eprintln!("parse + check of {lines} lines: {dt:?}");
    assert!(dt < Duration::from_secs(10), "{dt:?}");
}

#[test]
#[ignore = "timing: run in release"]
fn check_100k_instructions_under_a_second() {
    let (dt, lines) = time_check(100_000);
    eprintln!("parse + check of {lines} lines (100,000+ instructions): {dt:?}");
    assert!(dt < Duration::from_secs(1), "{dt:?}");
}
