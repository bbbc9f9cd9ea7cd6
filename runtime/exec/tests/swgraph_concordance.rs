//! Concordance: the software graph (`exec::run_program`) equals the emulator
//! (`emulator::emulate`, the hardware oracle) bit for bit, on every sample in `samples/` and every
//! target its `// nnpc: targets = ...` header names, on 64 seeded input sets each; in shards,
//! in chunks and on any number of threads. Also: the software graph's `--trace` records equal
//! the emulator's, record for record.

use nnp_emulator::EmuOptions;
use nnp_exec::ExecOptions;
use nnp_grammar::{Program, SourceFile, Target};
use nnp_host::{HostData, Outputs};
use nnp_lowering::swgraph::{self, Roots};
use std::path::Path;
use std::sync::Arc;

mod sample_cases;
use sample_cases::{cases, samples_dir, target_arg};

fn load(path: &Path, target: &str) -> Program {
    let t = Target::load(&target_arg(target)).expect("sample target loads");
    let text = std::fs::read_to_string(path).expect("readable sample");
    let src = Arc::new(SourceFile::new(path.display().to_string(), text));
    match nnp_grammar::check(src, Some(t)) {
        Ok(out) => out.program,
        Err(diags) => panic!("{} does not check for {target}: {diags:?}", path.display()),
    }
}

/// Bit patterns of output values, NaNs as they are: both engines write the canonical NaN.
fn bits(v: f32) -> u32 {
    v.to_bits()
}

fn assert_same(case: &str, hw: &Outputs, sw: &Outputs) {
    assert_eq!(
        hw.keys().collect::<Vec<_>>(),
        sw.keys().collect::<Vec<_>>(),
        "{case}: output names"
    );
    for (name, h) in hw {
        let s = &sw[name];
        assert_eq!(h.shape, s.shape, "{case}: shape of `{name}`");
        assert_eq!(h.data.len(), s.data.len(), "{case}: elements of `{name}`");
        let diff = h
            .data
            .iter()
            .zip(&s.data)
            .enumerate()
            .filter(|(_, (a, b))| bits(**a) != bits(**b))
            .map(|(i, (a, b))| (i, *a, *b))
            .collect::<Vec<_>>();
        assert!(
            diff.is_empty(),
            "{case}: `{name}` differs in {} of {} elements; first (index, emulator, graph): {:?}",
            diff.len(),
            h.data.len(),
            &diff[..diff.len().min(5)]
        );
    }
}

#[test]
fn every_sample_on_every_declared_target_matches_the_emulator() {
    let mut int_products = 0;
    for (path, target) in cases() {
        let program = load(&path, &target);
        let case = format!("{} on {target}", path.display());
        let data = HostData::random(&program, 64, 0x5eed);
        let t0 = std::time::Instant::now();
        let hw = nnp_emulator::emulate(&program, &data, &EmuOptions::default())
            .unwrap_or_else(|e| panic!("{case}: emulator: {e}"));
        let t1 = std::time::Instant::now();
        let sw = nnp_exec::run_program(&program, &data, &ExecOptions::default())
            .unwrap_or_else(|e| panic!("{case}: software graph: {e}"));
        eprintln!(
            "{case}: emulator {:.2} s, software graph {:.2} s",
            (t1 - t0).as_secs_f64(),
            t1.elapsed().as_secs_f64()
        );
        assert_same(&case, &hw.outputs, &sw.outputs);
        int_products += sw.paths.int_products;
        // The float BLAS path, which the integer kernel replaces where the CPU has AVX2, with
        // every MFU op a candle op of its own (no fused region).
        let float = ExecOptions {
            float_matmul: true,
            unfused: true,
            ..ExecOptions::default()
        };
        let sw = nnp_exec::run_program(&program, &data, &float)
            .unwrap_or_else(|e| panic!("{case}: software graph (float path, unfused): {e}"));
        assert_same(
            &format!("{case} (float path, unfused)"),
            &hw.outputs,
            &sw.outputs,
        );
        assert_eq!(
            sw.paths.int_products, 0,
            "{case}: float path took the integer kernel"
        );
    }
    // The BFP samples do take the integer kernel where it exists (so both paths were tested).
    eprintln!("{int_products} products on the integer kernel");
    assert_eq!(int_products > 0, nnp_exec::intdot::simd());
}

/// Warm runs in shards of items (`batch_shards`) equal the emulator bit for bit on every
/// sample and target, with a NaN in one item of the last shard; and they count a product on
/// the integer kernel where every shard took it, as a run of the whole batch does.
#[test]
fn warm_runs_in_shards_match_the_emulator() {
    let mut moved = 0;
    for (path, target) in cases() {
        let program = load(&path, &target);
        let case = format!("{} on {target} in shards", path.display());
        let clean = HostData::random(&program, 13, 0x5a4d);
        let mut nan = clean.clone();
        // A NaN in the first input value of item 11: shards 0..4, 4..8 and 8..13.
        let t = nan
            .inputs
            .values_mut()
            .next()
            .expect("every sample has an input");
        let per_item = t.data.len() / 13;
        t.data[11 * per_item] = f32::NAN;
        let hw = nnp_emulator::emulate(&program, &nan, &EmuOptions::default())
            .unwrap_or_else(|e| panic!("{case}: emulator: {e}"));
        let graph = swgraph::compile(&program, Roots::Outputs).expect("lowers");
        // A first run of clean data (always whole), then a warm run of the NaN data.
        let runs = |shards: usize| {
            let opts = ExecOptions {
                batch_shards: Some(shards),
                ..ExecOptions::default()
            };
            let mut session = nnp_exec::Session::new(&graph, &opts).expect("session");
            let first = session.run(&clean).expect("first run");
            (first, session.run(&nan).expect("warm run"))
        };
        let ((first, sharded), (_, whole)) = (runs(3), runs(1));
        assert_eq!(
            (first.shards, sharded.shards, whole.shards),
            (1, 3, 1),
            "{case}"
        );
        assert_same(&case, &hw.outputs, &sharded.outputs);
        // In chunks of at most 5 items (0..4, 4..8, 8..13), one after the other: the first run
        // computes the constants in its first chunk, whole; every later chunk, of the first
        // run or the warm one, goes in 2 shards.
        let opts = ExecOptions {
            batch_shards: Some(2),
            chunk_items: Some(5),
            ..ExecOptions::default()
        };
        let mut session = nnp_exec::Session::new(&graph, &opts).expect("session");
        let first = session.run(&clean).expect("first run in chunks");
        let chunked = session.run(&nan).expect("warm run in chunks");
        let counts = |e: &nnp_exec::Execution| (e.chunks, e.shards);
        assert_eq!(
            (counts(&first), counts(&chunked)),
            ((3, 2), (3, 2)),
            "{case}"
        );
        assert_same(&format!("{case}, chunks"), &hw.outputs, &chunked.outputs);
        let clean_whole = nnp_exec::execute(&graph, &clean, &ExecOptions::default()).expect("runs");
        assert_same(
            &format!("{case}, chunked first run"),
            &clean_whole.outputs,
            &first.outputs,
        );
        let paths = |e: &nnp_exec::Execution| {
            (
                e.paths.int_products,
                e.paths.quantized_to_ints,
                e.paths.concats_skipped,
            )
        };
        assert_eq!(paths(&sharded), paths(&whole), "{case}: paths");
        // A shard whose items fit the plain kernel takes it where the whole batch needs slices.
        assert!(
            sharded.paths.sliced_products <= whole.paths.sliced_products,
            "{case}: slices"
        );
        moved += first.paths.int_products - sharded.paths.int_products;
    }
    // The NaN sent products off the integer kernel in some cases (the shards disagreed there).
    assert_eq!(
        moved > 0,
        nnp_exec::intdot::simd(),
        "{moved} products moved"
    );
}

/// Warm runs of at most 4 items take the stacked steps (the products of one weight stack
/// that read no other product as one, over their vectors stacked: docs/swgraph.md): at
/// batches 1 and 4 on every sample and target, with a NaN in the last item at 4, the
/// emulator's bits, as an unstacked session's; the samples with such products (the LSTM, the
/// GRU, the convolutions' windows) stack some.
#[test]
fn stacked_warm_runs_match_the_emulator() {
    let mut stacked = 0;
    for (path, target) in cases() {
        let program = load(&path, &target);
        let graph = swgraph::compile(&program, Roots::Outputs).expect("lowers");
        let unstacked = ExecOptions {
            unstacked: true,
            ..ExecOptions::default()
        };
        let mut session = nnp_exec::Session::new(&graph, &ExecOptions::default()).expect("session");
        let mut plain = nnp_exec::Session::new(&graph, &unstacked).expect("session");
        let first = HostData::random(&program, 2, 0x57ac);
        session.run(&first).expect("first run");
        plain.run(&first).expect("first run");
        for batch in [1, 4] {
            let case = format!("{} on {target}, batch {batch}", path.display());
            let mut data = HostData::random(&program, batch, 0x57ac + batch as u64);
            data.weights = first.weights.clone();
            if batch == 4 {
                let t = data
                    .inputs
                    .values_mut()
                    .next()
                    .expect("every sample has an input");
                let per_item = t.data.len() / batch;
                t.data[3 * per_item] = f32::NAN;
            }
            let hw = nnp_emulator::emulate(&program, &data, &EmuOptions::default())
                .unwrap_or_else(|e| panic!("{case}: emulator: {e}"));
            let warm = session.run(&data).expect("warm run");
            assert_same(&case, &hw.outputs, &warm.outputs);
            let other = plain.run(&data).expect("warm run");
            assert_same(&format!("{case}, unstacked"), &hw.outputs, &other.outputs);
            assert_eq!(other.paths.stacked_products, 0, "{case}");
            stacked += warm.paths.stacked_products;
        }
    }
    eprintln!("{stacked} products stacked");
    assert_eq!(stacked > 0, nnp_exec::intdot::simd());
}

/// The thread count changes how the work is cut (the emulator's chunks of items, the warm
/// runs' shards, the integer kernel's tasks of items and rows, the weights' preparation) and
/// must change no bit: on thread pools of 1, 3 and 16 threads, a first run and a warm run of
/// the graph and a run of the emulator give the emulator's bits of the default pool, on every
/// sample and target. In `conv1x1`'s first run (13 items, whole) the kernel's tasks hold 6
/// items on 16 threads and 12 on 2; the emulator's chunks are 13, 5 and 1 item(s) on 1, 3
/// and 16 threads, and the warm runs' shards 4 or 5 items on 3 threads or more.
#[test]
fn the_thread_count_changes_no_bit() {
    for (path, target) in cases() {
        let program = load(&path, &target);
        let data = HostData::random(&program, 13, 0x7e4d);
        let hw = nnp_emulator::emulate(&program, &data, &EmuOptions::default())
            .unwrap_or_else(|e| panic!("{}: emulator: {e}", path.display()));
        let graph = swgraph::compile(&program, Roots::Outputs).expect("lowers");
        for threads in [1, 3, 16] {
            let case = format!("{} on {target}, {threads} threads", path.display());
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool");
            let (emu, first, warm) = pool.install(|| {
                let emu = nnp_emulator::emulate(&program, &data, &EmuOptions::default())
                    .unwrap_or_else(|e| panic!("{case}: emulator: {e}"));
                let mut session =
                    nnp_exec::Session::new(&graph, &ExecOptions::default()).expect("session");
                let first = session.run(&data).expect("first run");
                (emu, first, session.run(&data).expect("warm run"))
            });
            // One shard per thread, of at least 4 items (`Session::shards`): 13 items take 3.
            assert_eq!(warm.shards, threads.min(3), "{case}");
            assert_same(&format!("{case}, emulator"), &hw.outputs, &emu.outputs);
            assert_same(&format!("{case}, first run"), &hw.outputs, &first.outputs);
            assert_same(&format!("{case}, warm run"), &hw.outputs, &warm.outputs);
        }
    }
}

/// Runs side by side on one pool keep their bits and all finish: each run puts helpers on the
/// pool's other threads (`session/awake.rs`), which may land on a thread where another run
/// waits in a parallel loop, and a run may start on a thread that is running another's
/// helper. On pools of 2 and 3 threads, 5 callers (two of them inside the pool's own parallel
/// loop) each run warm sessions of batches 1 (stacked steps), 3 and 13 of every sample 3
/// times; every output is the emulator's bits.
#[test]
fn runs_side_by_side_on_one_pool_keep_their_bits() {
    let cases: Vec<_> = cases()
        .into_iter()
        .map(|(path, target)| {
            let program = load(&path, &target);
            let graph = swgraph::compile(&program, Roots::Outputs).expect("lowers");
            let data: Vec<HostData> = [1, 3, 13]
                .iter()
                .map(|&b| HostData::random(&program, b, 0x51de))
                .collect();
            let want: Vec<Outputs> = data
                .iter()
                .map(|d| {
                    nnp_emulator::emulate(&program, d, &EmuOptions::default())
                        .expect("emulates")
                        .outputs
                })
                .collect();
            (format!("{} on {target}", path.display()), graph, data, want)
        })
        .collect();
    let caller = |k: usize| {
        for (case, graph, data, want) in &cases {
            let mut session =
                nnp_exec::Session::new(graph, &ExecOptions::default()).expect("session");
            for round in 0..3 {
                for (d, w) in data.iter().zip(want) {
                    let got = session.run(d).expect("run");
                    let case = format!("{case}, caller {k}, round {round}, batch {}", d.batch);
                    assert_same(&case, w, &got.outputs);
                }
            }
        }
    };
    for threads in [2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        let (pool, caller) = (&pool, &caller);
        std::thread::scope(|s| {
            for k in 0..3 {
                s.spawn(move || pool.install(|| caller(k)));
            }
            // Two callers inside a parallel loop of the pool: their runs start on whichever
            // thread takes them.
            s.spawn(move || {
                pool.install(|| {
                    use rayon::prelude::*;
                    (3..5).into_par_iter().for_each(caller);
                })
            });
        });
    }
}

/// NaNs leave both engines as the canonical quiet NaN, whatever sign and payload they picked
/// up: `inf - inf` (a negative NaN on x86), `0 * inf`, `max` and `relu` of a NaN, an input NaN
/// through `mv_mul`, in a netq output and in one read back from memory. Expected bits by hand.
#[test]
fn nans_leave_both_engines_as_the_canonical_nan() {
    const SRC: &str = "\
vector a   : [4] at asvrf0[0]
vector one : [4] at mulvrf0[0]
vector m   : [4] at asvrf1[0]
matrix I   : [4, 4] at mrf[0]
input  x   : [1, 4]
input  u   : [1, 4]
output y   : [1, 4]
output r   : [1, 4]
output z   : [1, 4] at ivrf[1]

v_rd netq
vv_a_sub_b asvrf0[a]
vv_mul mulvrf0[one]
vv_max asvrf1[m]
v_wr netq
v_wr ivrf[0]
end_chain

v_rd netq
v_relu
v_wr netq
end_chain

v_rd ivrf[0]
mv_mul mrf[I]
v_relu
v_wr ivrf[1]
end_chain
";
    let path = std::env::temp_dir().join(format!("nnpc-nan-{}.nnp", std::process::id()));
    std::fs::write(&path, SRC).expect("temp file");
    let program = load(&path, "bw-default");
    std::fs::remove_file(&path).ok();
    let t = |shape: Vec<usize>, v: Vec<f32>| nnp_host::Tensor::new(shape, v).expect("shape");
    let mut data = HostData::random(&program, 2, 1);
    // 65520 rounds to +inf in fp16. Item 0, lane by lane: inf - inf = NaN; (5 - 0) * 0 = 0,
    // max with -1 = 0; (-inf - 0) * 1 = -inf, max with -1 = -1; (3 - 1) * inf = inf. Item 1: an
    // input NaN, then (1 - 0) * 0 = 0, (2 - 0) * 1 = 2 and (3 - 1) * inf = inf.
    data.weights
        .insert("a".into(), t(vec![4], vec![65520.0, 0.0, 0.0, 1.0]));
    data.weights
        .insert("one".into(), t(vec![4], vec![1.0, 0.0, 1.0, 65520.0]));
    data.weights.insert("m".into(), t(vec![4], vec![-1.0; 4]));
    let identity = (0..16)
        .map(|i| if i % 5 == 0 { 1.0 } else { 0.0 })
        .collect();
    data.weights.insert("I".into(), t(vec![4, 4], identity));
    data.inputs.insert(
        "x".into(),
        t(
            vec![2, 1, 4],
            vec![65520.0, 5.0, -65520.0, 3.0, f32::NAN, 1.0, 2.0, 3.0],
        ),
    );
    // Negative NaNs with payloads straight to relu, which keeps a NaN as it is.
    let neg = |payload: u32| f32::from_bits(0xFFC0_0000 | payload);
    data.inputs.insert(
        "u".into(),
        t(
            vec![2, 1, 4],
            vec![
                neg(0),
                1.0,
                neg(0x2000),
                -1.0,
                -2.0,
                neg(1 << 21),
                0.5,
                neg(0),
            ],
        ),
    );
    let nan = 0x7FC0_0000;
    let (inf, minus_one, two) = (0x7F80_0000, 0xBF80_0000, 0x4000_0000);
    let y = [nan, 0, minus_one, inf, nan, 0, two, inf];
    // Through the identity: a row holding a NaN or an infinity is NaN (BFP: a block with one
    // is NaN); relu keeps NaN. Item 1's row holds the input NaN.
    let z = [nan; 8];
    let hw = nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
    let sw = nnp_exec::run_program(&program, &data, &ExecOptions::default()).expect("runs");
    for (engine, out) in [("emulator", &hw.outputs), ("software graph", &sw.outputs)] {
        let got = |name: &str| {
            out[name]
                .data
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(got("y"), y, "{engine}: y");
        assert_eq!(
            got("r"),
            [nan, 0x3F80_0000, nan, 0, 0, nan, 0x3F00_0000, nan],
            "{engine}: r"
        );
        assert_eq!(got("z"), z, "{engine}: z");
    }
}

/// A matrix's own `quant` follows its tiles into every product, in both engines: through one
/// `m_wr` line that copies two matrices, and per iteration of an `mv_mul` whose iterations
/// read different matrices (grammar/tests/fixtures/matrix_formats.nnp). Every row of every
/// matrix is [4, 1, 1, 1] and x = [1, 1, 1, 1]: `bfp(mant = 3)` keeps 4 and rounds each 1
/// (half of its step 2) to even, 0, so the product is 4; `bfp(mant = 6)` (step 1/4) and the
/// default BFP keep the row, 7.
#[test]
fn matrix_formats_follow_their_tiles_in_both_engines() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../grammar/tests/fixtures/matrix_formats.nnp");
    let program = load(&path, "bw-default");
    let mut data = HostData::random(&program, 1, 1);
    let rows: Vec<f32> = [4.0, 1.0, 1.0, 1.0].repeat(4);
    for m in ["A", "B", "C", "D"] {
        let t = nnp_host::Tensor::new(vec![4, 4], rows.clone()).expect("shape");
        data.weights.insert(m.into(), t);
    }
    let ones = nnp_host::Tensor::new(vec![1, 1, 4], vec![1.0; 4]).expect("shape");
    data.inputs.insert("x".into(), ones);
    let hw = nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
    let sw = nnp_exec::run_program(&program, &data, &ExecOptions::default()).expect("runs");
    for (engine, out) in [("emulator", &hw.outputs), ("software graph", &sw.outputs)] {
        // y: A's tile (copied by the line's first iteration); z: B's (its second); w: D,
        // then the tile before it, C.
        assert_eq!(out["y"].data, [4.0; 4], "{engine}: y");
        assert_eq!(out["z"].data, [7.0; 4], "{engine}: z");
        assert_eq!(out["w"].data, [[7.0; 4], [4.0; 4]].concat(), "{engine}: w");
    }
}

/// A program that writes a constant (the relu of loaded weights) and a value of the input.
const WRITES_A_CONSTANT: &str = "\
vector a : [128] at mulvrf0[0]
input  x : [1, 128]
output y : [1, 128]

v_rd mulvrf0[0]
v_relu
v_wr asvrf0[0]
end_chain

v_rd netq
vv_add asvrf0[0]
v_wr netq
end_chain
";

#[test]
fn traces_match_the_emulator_record_for_record() {
    let inline = std::env::temp_dir().join(format!("nnpc-trace-{}.nnp", std::process::id()));
    std::fs::write(&inline, WRITES_A_CONSTANT).expect("temp file");
    let samples = ["mixed_precision.nnp", "gru.nnp", "conv1x1.nnp"].map(|s| samples_dir().join(s));
    for path in samples.iter().chain([&inline]) {
        let sample = path.display();
        let program = load(path, "bw-default");
        let data = HostData::random(&program, 3, 11);
        let hw = nnp_emulator::emulate(
            &program,
            &data,
            &EmuOptions {
                trace: true,
                ..EmuOptions::default()
            },
        )
        .expect("emulates");
        let opts = ExecOptions {
            keep_writes: true,
            ..ExecOptions::default()
        };
        let graph = swgraph::compile(&program, Roots::OutputsAndWrites).expect("lowers");
        let hw = hw.trace.expect("trace asked for");
        let same_records = |run: &nnp_exec::Execution, how: &str| {
            let sw = nnp_exec::trace::records(&graph, run, 0..data.batch).expect("kept writes");
            assert_eq!(hw.len(), sw.len(), "{sample} ({how}): record count");
            for (h, s) in hw.iter().zip(&sw) {
                // Same JSON, field for field.
                let hj = serde_json::to_value(h).expect("json");
                let sj = serde_json::to_value(s).expect("json");
                assert_eq!(hj, sj, "{sample} ({how}): first differing record");
            }
        };
        same_records(
            &nnp_exec::execute(&graph, &data, &opts).expect("runs"),
            "one run",
        );
        // A warm run in shards of 1 and 2 items: each written value from its shards, a
        // constant's (one item in every shard) once.
        let shards = ExecOptions {
            batch_shards: Some(2),
            ..opts
        };
        let mut session = nnp_exec::Session::new(&graph, &shards).expect("session");
        session.run(&data).expect("first run");
        let warm = session.run(&data).expect("warm run");
        assert_eq!(warm.shards, 2);
        same_records(&warm, "warm, in shards");
        // Chunks of 1 and 2 items, the first run's first chunk computing the constants.
        let chunks = ExecOptions {
            chunk_items: Some(2),
            ..opts
        };
        let first = nnp_exec::execute(&graph, &data, &chunks).expect("runs in chunks");
        assert_eq!(first.chunks, 2);
        same_records(&first, "first run, in chunks");
    }
    std::fs::remove_file(&inline).ok();
}

/// Every value a run hands back (`keep_values`, as the training's records do) has the float
/// path's bits on every sample and target, with a NaN in one item, in a first run and a warm
/// one: a vector quantized straight to the integer kernel's integers is handed back restored
/// from them, and a weight stack from the form its products read, where the float path
/// (`float_matmul`: no integers) computes both in f64 node by node.
#[test]
fn handed_back_values_are_the_float_paths_bits() {
    let (mut restored, mut stacks) = (0, 0);
    for (path, target) in cases() {
        let program = load(&path, &target);
        let case = format!("{} on {target}", path.display());
        let mut data = HostData::random(&program, 4, 0x5eed);
        if let Some(x) = data.inputs.values_mut().next() {
            let last = x.data.len() - 1;
            x.data[last] = f32::NAN;
        }
        let graph = swgraph::compile(&program, Roots::Outputs).expect("lowers");
        let opts = |float_matmul| ExecOptions {
            keep_values: true,
            float_matmul,
            ..ExecOptions::default()
        };
        let float = nnp_exec::execute(&graph, &data, &opts(true))
            .unwrap_or_else(|e| panic!("{case} (float path): {e}"));
        assert_eq!(float.paths.quantized_to_ints, 0, "{case}");
        // Every value; and the quantizers' alone, as a training record keeps them (so that
        // no link of a weight chain is traced and the stacks take their one pass).
        let quantized: Vec<_> = graph
            .nodes_by_id()
            .filter(|(_, n)| matches!(n.op, swgraph::Op::Quantize { .. }))
            .map(|(id, _)| id)
            .collect();
        let sessions = [
            ("every value", nnp_exec::Session::new(&graph, &opts(false))),
            (
                "quantizers",
                nnp_exec::Session::recording(&graph, &ExecOptions::default(), &quantized),
            ),
        ];
        for (kept, session) in sessions {
            let mut session = session.expect("session");
            for run in ["first", "warm"] {
                let case = format!("{case}, {kept}, {run} run");
                let ints = session.run(&data).unwrap_or_else(|e| panic!("{case}: {e}"));
                restored += ints.paths.quantized_to_ints;
                stacks += ints.paths.one_pass_stacks;
                let want: Vec<_> = match kept {
                    "quantizers" => quantized.iter().collect(),
                    _ => float.written.keys().collect(),
                };
                let got: Vec<_> = ints.written.keys().collect();
                assert_eq!(
                    got.into_iter().collect::<std::collections::BTreeSet<_>>(),
                    want.iter().copied().collect(),
                    "{case}: the values handed back"
                );
                for id in want {
                    let (got, want) = (&ints.written[id], &float.written[id]);
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    let case = format!("{case}: value {id}");
                    assert_eq!((got.batch, got.lanes), (want.batch, want.lanes), "{case}");
                    assert_eq!(bits(&got.data), bits(&want.data), "{case}");
                }
            }
        }
    }
    // The BFP samples' vectors and stacks do take those forms where the kernel exists.
    let simd = nnp_exec::intdot::simd();
    assert_eq!((restored > 0, stacks > 0), (simd, simd));
}
