//! The two benchmark programs of BENCHMARKS.md, whole, and three small samples (README's LSTM,
//! a convolution, a softmax classifier: milliseconds per run, where per-op overheads show):
//! warm runs of the software graph (weights prepared once per session, as `nnpc bench` times
//! them) next to the floor, the same products as plain f32 candle matmuls with no quantization
//! (`cargo bench -p nnpc --bench graph`). Where the warm runs go in shards of items (the small
//! samples), also the same runs with each batch whole. `nnpc bench` adds the emulator, the
//! quantize kernel, memory and the ratios.

use criterion::{Criterion, criterion_group, criterion_main};
use nnp_lowering::swgraph::{self, Roots};
use nnp_runtime::exec::baseline::Floor;
use nnp_runtime::exec::{ExecOptions, Session};
use nnp_runtime::host::HostData;
use std::hint::black_box;
use std::time::Duration;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: nnpc::memory::HugePages = nnpc::memory::HugePages;

fn bench(c: &mut Criterion) {
    nnpc::memory::keep_large_buffers_on_the_heap();
    for (name, file, batch) in [
        ("lstm_1024_b64", "bench/lstm_1024.nnp", 64),
        ("mlp_4096_b64", "bench/mlp_4096.nnp", 64),
        ("mlp_4096_b256", "bench/mlp_4096.nnp", 256),
        ("lstm_sample_b64", "lstm.nnp", 64),
        ("conv3x3_b64", "conv3x3.nnp", 64),
        ("softmax_classifier_b64", "softmax_classifier.nnp", 64),
    ] {
        let path = format!("{}/samples/{file}", env!("CARGO_MANIFEST_DIR"));
        let program = nnpc::load_program(&path, None).expect("the sample checks");
        let graph = swgraph::compile(&program, Roots::Outputs).expect("lowers");
        let data = HostData::random(&program, batch, 0);
        let mut session = Session::new(&graph, &ExecOptions::default()).expect("a session");
        session.run(&data).expect("the first run");
        let sharded = session.run(&data).expect("a warm run").shards > 1;
        // The same runs with each batch whole, where the warm runs go in shards.
        let mut whole = sharded.then(|| {
            let opts = ExecOptions {
                batch_shards: Some(1),
                ..ExecOptions::default()
            };
            let mut whole = Session::new(&graph, &opts).expect("a session");
            whole.run(&data).expect("the first run");
            whole
        });
        let floor = Floor::new(&graph, batch).expect("the floor");
        let mut g = c.benchmark_group(name);
        g.sample_size(10);
        g.warm_up_time(Duration::from_secs(1));
        g.measurement_time(Duration::from_secs(5));
        g.bench_function("software_graph", |b| {
            b.iter(|| black_box(session.run(&data).expect("a warm run")))
        });
        if let Some(whole) = &mut whole {
            g.bench_function("software_graph_whole_batch", |b| {
                b.iter(|| black_box(whole.run(&data).expect("a warm run")))
            });
        }
        g.bench_function("floor_f32_matmuls", |b| {
            b.iter(|| floor.run().expect("the floor runs"))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
