//! Front-end speed: parse + check of a generated 100,000-instruction program.
//! `cargo bench -p nnp-grammar --bench front_end`

use criterion::{Criterion, criterion_group, criterion_main};
use nnp_grammar::{SourceFile, check, parse, synthetic_program};
use std::hint::black_box;
use std::sync::Arc;

fn front_end(c: &mut Criterion) {
    let text = synthetic_program(100_000);
    let src = Arc::new(SourceFile::new("synthetic.nnp", text));
    let mut g = c.benchmark_group("front_end_100k_instructions");
    g.sample_size(10);
    g.bench_function("parse", |b| b.iter(|| black_box(parse(&src).is_ok())));
    g.bench_function("parse_and_check", |b| {
        b.iter(|| black_box(check(src.clone(), None).is_ok()))
    });
    g.finish();
}

criterion_group!(benches, front_end);
criterion_main!(benches);
