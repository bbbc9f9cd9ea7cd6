//! Front-end speed: parse + check + dependency graph of a generated 100,000-instruction program.
//!
//! `cargo bench -p nnp-lowering --bench frontend` (release). The target is well under 1 s for
//! the whole front end.

use criterion::{Criterion, criterion_group, criterion_main};
use nnp_grammar::{SourceFile, check, parse};
use nnp_lowering::depgraph::DepGraph;
use std::hint::black_box;
use std::sync::Arc;

/// Instructions in the generated program (every line of code, `s_wr` and `end_chain` included).
const INSTRUCTIONS: usize = 100_000;

/// A long program of 4-tile dense chains (`y = m * (W x + b)`, ReLU) that pass their result
/// along a ring of 64 ivrf slots: every chain reads what the previous one wrote (RAW) and
/// overwrites what the chain 63 places back read (WAR).
fn generate(instructions: usize) -> String {
    let mut s = String::from(
        "matrix W : [512, 512] at mrf[0]\n\
         vector b : [512] at asvrf0[0]\n\
         vector m : [512] at mulvrf0[0]\n\
         input  x : [512]\n\
         output y : [512]\n\
         s_wr rows, 4\n\
         v_rd netq\n\
         v_wr ivrf[0]\n\
         end_chain\n\
         s_wr cols, 4\n",
    );
    let fixed = 5 + 3; // the pop chain and two s_wr above, the push chain below
    let chains = instructions.saturating_sub(fixed).div_ceil(7);
    for i in 0..chains {
        let (a, b) = ((i % 64) * 4, ((i + 1) % 64) * 4);
        s.push_str(&format!(
            "v_rd ivrf[{a}]\nmv_mul mrf[W]\nvv_add asvrf0[b]\nvv_mul mulvrf0[m]\nv_relu\n\
             v_wr ivrf[{b}]\nend_chain\n"
        ));
    }
    let last = (chains % 64) * 4;
    s.push_str(&format!("v_rd ivrf[{last}]\nv_wr netq\nend_chain\n"));
    s
}

fn frontend(c: &mut Criterion) {
    let text = generate(INSTRUCTIONS);
    // Every line after the five declarations is one instruction.
    let lines = text.lines().count() - 5;
    let src = Arc::new(SourceFile::new("generated.nnp", text));
    let out = match check(src.clone(), None) {
        Ok(out) => out,
        Err(d) => panic!("generated program does not check: {:?}", d.first()),
    };
    let g = DepGraph::build(&out.program);
    eprintln!(
        "generated program: {lines} instruction lines, {} chains, {} nodes, {} edges",
        out.program.chains.len(),
        g.node_count(),
        g.edge_count()
    );

    let mut group = c.benchmark_group("frontend_100k");
    group.sample_size(10);
    group.bench_function("parse", |b| b.iter(|| black_box(parse(&src).is_ok())));
    group.bench_function("parse+check", |b| {
        b.iter(|| black_box(check(src.clone(), None).is_ok()))
    });
    group.bench_function("depgraph", |b| {
        b.iter(|| black_box(DepGraph::build(&out.program).edge_count()))
    });
    group.bench_function("parse+check+depgraph", |b| {
        b.iter(|| {
            let out = check(src.clone(), None).ok();
            black_box(out.map(|o| DepGraph::build(&o.program).edge_count()))
        })
    });
    group.finish();
}

criterion_group!(benches, frontend);
criterion_main!(benches);
