//! `nnpc compile`'s stages on the README's LSTM (`samples/lstm.nnp`) at `T = 2174` steps
//! (100,004 executed instructions, 46 a step): check, lower, optimize, plan, write the JSON form, read
//! it back. BENCHMARKS.md ("Compiling large programs") times the whole command at 10^3 to
//! 10^6 instructions; this names the stage that grows.
//!
//! `cargo bench -p nnp-lowering --bench compile` (release).

use criterion::{Criterion, criterion_group, criterion_main};
use nnp_grammar::{SourceFile, check};
use nnp_lowering::swgraph::{Plan, Roots, SwGraph, compile, lower, optimize};
use std::hint::black_box;
use std::sync::Arc;

/// Steps of the LSTM: 46 executed instructions each.
const STEPS: usize = 2174;

fn stages(c: &mut Criterion) {
    let text = include_str!("../../samples/lstm.nnp").replacen(
        "let T = 4\n",
        &format!("let T = {STEPS}\n"),
        1,
    );
    let src = Arc::new(SourceFile::new("lstm.nnp", text));
    let program = match check(src.clone(), None) {
        Ok(out) => out.program,
        Err(d) => panic!("the LSTM does not check: {:?}", d.first()),
    };
    let lowered = match lower(&program) {
        Ok(g) => g,
        Err(e) => panic!("the LSTM does not lower: {e}"),
    };
    let graph = optimize(&lowered, Roots::OutputsAndWrites);
    let json = graph.to_json();
    eprintln!(
        "LSTM T = {STEPS}: {} nodes lowered, {} after optimize, {} bytes of JSON",
        lowered.nodes.len(),
        graph.nodes.len(),
        json.len()
    );
    let mut group = c.benchmark_group("compile_lstm_100k");
    group.sample_size(10);
    group.bench_function("check", |b| {
        b.iter(|| black_box(check(src.clone(), None).is_ok()))
    });
    group.bench_function("lower", |b| b.iter(|| black_box(lower(&program).is_ok())));
    group.bench_function("optimize", |b| {
        b.iter(|| black_box(optimize(&lowered, Roots::OutputsAndWrites).nodes.len()))
    });
    group.bench_function("plan", |b| {
        b.iter(|| black_box(Plan::new(&graph).weight_elements))
    });
    group.bench_function("compile", |b| {
        b.iter(|| black_box(compile(&program, Roots::OutputsAndWrites).is_ok()))
    });
    group.bench_function("to_json", |b| b.iter(|| black_box(graph.to_json().len())));
    group.bench_function("from_json", |b| {
        b.iter(|| black_box(SwGraph::from_json(&json).is_ok()))
    });
    group.finish();
}

criterion_group!(benches, stages);
criterion_main!(benches);
