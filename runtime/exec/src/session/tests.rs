//! Tests of sessions: chunks, shards, warm runs, the fast paths against the emulator.

use super::*;
use crate::execute;
use crate::state::Kept;
use candle_core::DType;
use nnp_emulator::EmuOptions;
use nnp_grammar::SourceFile;
use nnp_host::HostData;
use nnp_lowering::swgraph::{Op, Roots, compile};

/// The outputs' bit patterns, NaN canonical (NaN payloads are not part of the contract).
fn bits(o: &Outputs) -> Vec<(String, Vec<u32>)> {
    let canonical = |v: &f32| if v.is_nan() { 0x7FC0_0000 } else { v.to_bits() };
    o.iter()
        .map(|(k, t)| (k.clone(), t.data.iter().map(canonical).collect()))
        .collect()
}

/// `samples/lstm.nnp`, checked, and its optimized graph.
fn lstm_sample() -> (nnp_grammar::Program, SwGraph) {
    lstm_sample_on(None)
}

/// [`lstm_sample`] on `target`.
fn lstm_sample_on(target: Option<nnp_grammar::Target>) -> (nnp_grammar::Program, SwGraph) {
    checked(
        "lstm.nnp",
        include_str!("../../../../samples/lstm.nnp"),
        target,
    )
}

/// Firmware `text` (file `name`) checked for `target`, and its optimized graph.
fn checked(
    name: &str,
    text: &str,
    target: Option<nnp_grammar::Target>,
) -> (nnp_grammar::Program, SwGraph) {
    let src = Arc::new(SourceFile::new(name, text));
    let program = nnp_grammar::check(src, target)
        .expect("firmware checks")
        .program;
    let g = compile(&program, Roots::Outputs).expect("lowers");
    (program, g)
}

/// The products (`TiledMatVec` nodes) of `g`.
fn products(g: &SwGraph) -> usize {
    g.nodes
        .iter()
        .filter(|n| matches!(n.op, Op::TiledMatVec { .. }))
        .count()
}

/// The chunks of a run, by hand: `chunk_items` consecutive ranges of nearly equal size,
/// the first run too; by default none over what [`CHUNK_BYTES`] allow at the session's
/// bytes per item, or over 256 items where those allow fewer.
#[test]
fn chunks_by_hand() {
    let (program, g) = lstm_sample_on(None);
    let data = HostData::random(&program, 2, 1);
    let session = |k: Option<usize>| {
        let opts = ExecOptions {
            chunk_items: k,
            ..ExecOptions::default()
        };
        Session::new(&g, &opts).expect("session")
    };
    let s = session(Some(5));
    assert_eq!(s.chunks(13).collect::<Vec<_>>(), vec![0..4, 4..8, 8..13]);
    assert_eq!(s.chunks(5).collect::<Vec<_>>(), vec![0..5]);
    assert_eq!(s.chunks(1).collect::<Vec<_>>(), vec![0..1]);
    let mut warm = session(Some(5));
    warm.run(&data).expect("first run");
    assert_eq!(warm.chunks(11).collect::<Vec<_>>(), vec![0..3, 3..7, 7..11]);
    assert_eq!(
        session(Some(1)).chunks(3).collect::<Vec<_>>(),
        vec![0..1, 1..2, 2..3]
    );
    // By default: the README's LSTM holds at most a few tens of KiB per item (2 tiles of
    // h and c, 4 gates of 2 tiles, at f64), so a batch of 256 is one chunk, and a million
    // items go in chunks of at most CHUNK_BYTES.
    let d = session(None);
    assert!(
        (1_000..100_000).contains(&d.item_bytes()),
        "{}",
        d.item_bytes()
    );
    assert_eq!(d.chunks(256).collect::<Vec<_>>(), vec![0..256]);
    let big = d.chunks(1_000_000).collect::<Vec<_>>();
    assert!(big.len() > 1);
    assert_eq!((big[0].start, big[big.len() - 1].end), (0, 1_000_000));
    assert!(big.windows(2).all(|p| p[0].end == p[1].start));
    assert!(
        big.iter().all(|r| r.len() * d.item_bytes() <= CHUNK_BYTES),
        "{:?}",
        &big[..2]
    );
    // The default limit by hand: 8 MiB of 1 KiB items, 8192; of 64 KiB items, 128, so 256;
    // 4 MiB items, 256 (1 GiB); one byte more, 255 (1 GiB / (4 MiB + 1) = 255.99); the
    // README LSTM over 2,000 steps (6,144,000 bytes per item), 174; an item over 1 GiB, alone.
    assert_eq!(default_chunk_items(1 << 10), 8192);
    assert_eq!(default_chunk_items(64 << 10), 256);
    assert_eq!(default_chunk_items(4 << 20), 256);
    assert_eq!(default_chunk_items((4 << 20) + 1), 255);
    assert_eq!(default_chunk_items(6_144_000), 174);
    assert_eq!(default_chunk_items(3 << 30), 1);
    assert_eq!(default_chunk_items(0), CHUNK_BYTES);
    // Any batch that fits usize has its chunks, made as they are taken (`k * b` in u128).
    let huge = d.chunks(usize::MAX);
    let (first, last) = (huge.clone().next(), huge.clone().next_back());
    let (first, last) = (first.expect("a chunk"), last.expect("a chunk"));
    assert_eq!(
        (first.start, last.end, huge.len() > 1),
        (0, usize::MAX, true)
    );
    assert!(first.len().max(last.len()) * d.item_bytes() <= CHUNK_BYTES);
    // A graph of large values per item still takes chunks of up to 256 items, up to 4 MiB
    // per item (256 of them are 1 GiB); of 8 MiB per item, up to 128.
    let mut fat = session(None);
    fat.steps.item_bytes = 4 << 20;
    assert_eq!(
        fat.chunks(600).collect::<Vec<_>>(),
        vec![0..200, 200..400, 400..600]
    );
    assert_eq!(fat.chunks(512).collect::<Vec<_>>(), vec![0..256, 256..512]);
    assert_eq!(fat.chunks(100).collect::<Vec<_>>(), vec![0..100]);
    fat.steps.item_bytes = 8 << 20;
    assert_eq!(
        fat.chunks(600).collect::<Vec<_>>(),
        vec![0..120, 120..240, 240..360, 360..480, 480..600]
    );
    assert_eq!(fat.chunks(128).collect::<Vec<_>>(), vec![0..128]);
}

/// `run_each` hands every chunk's outputs to its sink in order, with the chunk's items,
/// and the pieces laid end to end are the outputs of one pass (and of `run`, cold and
/// warm); a chunk run in shards comes in one piece; a sink's error stops the run at that
/// chunk.
#[test]
fn run_each_hands_chunks_in_order() {
    let (program, g) = lstm_sample_on(None);
    let data = HostData::random(&program, 13, 4);
    let one_pass = execute(&g, &data, &ExecOptions::default()).expect("one pass");
    let opts = ExecOptions {
        chunk_items: Some(5),
        batch_shards: Some(2),
        ..ExecOptions::default()
    };
    let mut s = Session::new(&g, &opts).expect("session");
    for _ in 0..2 {
        let mut pieces = Vec::new();
        let run = s
            .run_each(&data, |items, outputs| {
                pieces.push((items, outputs));
                Ok::<_, ExecError>(())
            })
            .expect("run_each");
        assert!(run.outputs.is_empty());
        // A first run's first chunk computes the constants, whole; every later chunk goes
        // in 2 shards.
        assert_eq!((run.chunks, run.shards), (3, 2));
        let ranges: Vec<_> = pieces.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(ranges, vec![0..4, 4..8, 8..13]);
        for (name, whole) in &one_pass.outputs {
            let per_item = whole.len() / 13;
            for (items, outputs) in &pieces {
                let t = &outputs[name];
                assert_eq!(t.shape[0], items.len());
                assert_eq!(&t.shape[1..], &whole.shape[1..]);
                let want = &whole.data[items.start * per_item..items.end * per_item];
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&t.data), bits(want), "{name} {items:?}");
            }
        }
    }
    assert_eq!(
        bits(&s.run(&data).expect("run").outputs),
        bits(&one_pass.outputs)
    );
    let mut calls = 0;
    let stopped = s.run_each(&data, |items, _| {
        calls += 1;
        if items.start > 0 {
            return Err(ExecError::Device(format!("sink refused {items:?}")));
        }
        Ok(())
    });
    assert_eq!(calls, 2);
    let e = stopped.err().map(|e| e.to_string());
    assert_eq!(e.as_deref(), Some("sink refused 4..8"));
}

/// The shards of a run, by hand: none for a first run, `batch_shards` consecutive ranges
/// of nearly equal size (at most one per item) for warm ones, and by default one per
/// thread of at least 4 items for a graph of small weights only.
#[test]
fn shards_by_hand() {
    let (program, g) = lstm_sample_on(None);
    let data = HostData::random(&program, 2, 1);
    let shards = |k: Option<usize>, warm: bool, b: usize| {
        let opts = ExecOptions {
            batch_shards: k,
            ..ExecOptions::default()
        };
        let mut s = Session::new(&g, &opts).expect("session");
        if warm {
            s.run(&data).expect("first run");
        }
        s.shards(0..b)
    };
    assert_eq!(shards(Some(3), false, 13), None);
    assert_eq!(shards(Some(3), true, 13), Some(vec![0..4, 4..8, 8..13]));
    assert_eq!(shards(Some(5), true, 3), Some(vec![0..1, 1..2, 2..3]));
    assert_eq!(shards(Some(1), true, 64), None);
    // By default, for the README's LSTM (4 W of 2 x 1 tiles and 4 U of 2 x 2 tiles of
    // 128 x 128: 384 Ki elements): one shard per thread, none below 4 items each (at most
    // 16 at batch 64), consecutive, sizes apart by at most one item.
    let threads = rayon::current_num_threads();
    match shards(None, true, 64) {
        None => assert_eq!(threads, 1),
        Some(s) => {
            assert_eq!(s.len(), threads.min(16));
            assert_eq!((s[0].start, s[s.len() - 1].end), (0, 64));
            assert!(s.windows(2).all(|p| p[0].end == p[1].start));
            let sizes: Vec<usize> = s.iter().map(|r| r.len()).collect();
            let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{sizes:?}");
            if threads == 2 {
                assert_eq!(s, vec![0..32, 32..64]);
            }
        }
    }
    assert_eq!(shards(None, true, 3), None);
    // The benchmark LSTM's 8 Mi elements: whole batches.
    let big = include_str!("../../../../samples/bench/lstm_1024.nnp");
    let (_, big) = checked("lstm_1024.nnp", big, None);
    let small = |g: &SwGraph| Session::new(g, &ExecOptions::default()).map(|s| s.shard_warm_runs);
    assert!(small(&g).expect("session"));
    assert!(!small(&big).expect("session"));
}

/// A session's warm runs (weights prepared by the first run, new inputs and batch sizes)
/// give the bits of a fresh `execute` and of the emulator (the oracle).
#[test]
fn warm_session_runs_equal_fresh_runs_and_the_emulator() {
    let (program, g) = lstm_sample();
    let opts = ExecOptions::default();
    let mut session = Session::new(&g, &opts).expect("session");
    for (batch, seed) in [(3, 1), (2, 2), (3, 1)] {
        let data = HostData::random(&program, batch, seed);
        // Seeded weights differ by seed: a session keeps its first run's, so feed those.
        let mut fed = HostData::random(&program, batch, 1);
        fed.inputs = data.inputs.clone();
        let warm = session.run(&fed).expect("warm run");
        let fresh = execute(&g, &fed, &opts).expect("fresh run");
        let emu = nnp_emulator::emulate(&program, &fed, &EmuOptions::default()).expect("emulates");
        assert_eq!(
            bits(&warm.outputs),
            bits(&fresh.outputs),
            "batch {batch} seed {seed}"
        );
        assert_eq!(
            bits(&warm.outputs),
            bits(&emu.outputs),
            "batch {batch} seed {seed}"
        );
    }
}

/// A warm pass of at most [`steps::STACKED_ITEMS`] items takes the stacked steps: the LSTM
/// sample's `W x_t` products, which read no other product, as one product per weight stack
/// over every step's vector (four groups of four), and each step's `U h_t` products in one
/// parallel pass. The outputs are the emulator's bits and those of the unstacked order, at
/// batches that take the stacked steps (1, 2, 4) and one that does not (5); with a NaN in
/// one step's input (that step's vector has no integers: its group's products then run one
/// by one, on the float path where they read it) too.
#[test]
fn stacked_products_give_the_emulators_bits() {
    let (program, g) = lstm_sample();
    let opts = ExecOptions::default();
    let mut session = Session::new(&g, &opts).expect("session");
    if intdot::simd() {
        let stacked = session.steps.stacked.as_ref().expect("stacked steps");
        let groups: Vec<usize> = stacked
            .iter()
            .filter_map(|s| match &s.work {
                steps::Work::Products(groups) => Some(groups.iter().map(Vec::len)),
                _ => None,
            })
            .flatten()
            .filter(|&len| len > 1)
            .collect();
        assert_eq!(groups, vec![4; 4]);
    }
    let unstacked = ExecOptions {
        unstacked: true,
        ..opts
    };
    let mut plain = Session::new(&g, &unstacked).expect("session");
    assert!(plain.steps.stacked.is_none());
    let weights = HostData::random(&program, 1, 1).weights;
    for batch in [1, 2, 4, 5] {
        for nan in [false, true] {
            let mut data = HostData::random(&program, batch, 3);
            data.weights = weights.clone();
            if nan {
                // Item 0, step 1 (`x` is [batch, 4, 128]).
                data.inputs.get_mut("x").expect("x").data[128 + 5] = f32::NAN;
            }
            let emu =
                nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
            for _ in 0..2 {
                let out = session.run(&data).expect("runs");
                assert_eq!(
                    bits(&out.outputs),
                    bits(&emu.outputs),
                    "batch {batch} NaN {nan}"
                );
                let other = plain.run(&data).expect("runs");
                assert_eq!(
                    bits(&other.outputs),
                    bits(&emu.outputs),
                    "batch {batch} NaN {nan}"
                );
                assert_eq!(
                    out.paths.int_products, other.paths.int_products,
                    "batch {batch}"
                );
            }
        }
    }
}

/// Where the integer kernel runs, every weight stack of the LSTM sample is one chain that
/// the session prepares in one pass from the host's weights ([`prepare`]), and every
/// vector of a product goes straight to integers ([`intdot::IntVector::quantized`]). With
/// adversarial weights (fp16 ties, fp16 and f32 subnormals, `-0.0`, magnitudes 2^-30 to
/// 2^15 in one row) the outputs are the emulator's bits. A weight that rounds to
/// infinity gives its stack no integer form: that chain is evaluated node by node and its
/// stack kept as f64, with the emulator's bits still. On the float path every stack is
/// prepared in one pass straight into its matmul's f32 layout and kept in it alone, with
/// the emulator's bits too, in the first run and in a warm one.
#[test]
fn weight_stacks_prepared_in_one_pass_give_the_emulators_bits() {
    if !intdot::simd() {
        return;
    }
    let (program, g) = lstm_sample();
    let mut s = 0x5851_f42d_4c95_7f2du64;
    let mut data = HostData::random(&program, 3, 4);
    for (k, t) in data.weights.values_mut().enumerate() {
        for (i, x) in t.data.iter_mut().enumerate() {
            let r = intdot::tests::xorshift(&mut s);
            *x = match (i / 16 + k) % 5 {
                0 => [0.0, -0.0, *x][(r % 3) as usize],
                1 => (1.0 + (2.0 * (r % 1024) as f32 + 1.0) / 2048.0) * 2f32.powi(-3),
                2 => [2f32.powi(-25), 3.0 * 2f32.powi(-26), 1e-40][(r % 3) as usize],
                3 => *x * 2f32.powi((r % 46) as i32 - 30),
                _ => *x,
            };
        }
    }
    let stack_of = |session: &Session, name: &str| {
        session.steps.stacks().find_map(|(id, stack)| {
            let named = |p: &crate::prepare::Part| {
                matches!(&g.nodes[p.chain.weight].op, Op::Weight { name: w, .. } if w == name)
            };
            stack.parts.iter().any(named).then_some(id)
        })
    };
    for (float_matmul, overflow) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut fed = data.clone();
        if overflow {
            fed.weights.get_mut("Uc").expect("Uc").data[300] = 70000.0;
        }
        let opts = ExecOptions {
            float_matmul,
            ..ExecOptions::default()
        };
        let mut session = Session::new(&g, &opts).expect("session");
        let stacks = session
            .steps
            .keeps()
            .filter(|(_, k)| k.as_ints.is_some())
            .count();
        assert_eq!(session.steps.stacks().count(), stacks);
        let out = session.run(&fed).expect("run");
        // The float path's f64 stacks have no integer form to miss.
        let fallbacks = usize::from(overflow && !float_matmul);
        assert_eq!(out.paths.one_pass_stacks, stacks - fallbacks);
        // The vectors of the products, x_t and h_(t-1) of T = 4 steps, go straight to
        // integers where the kernel runs (Uc's NaN block makes h_1 onwards NaN: those are
        // quantized as f64). On the float path no step quantizes to integers.
        let to_ints = if float_matmul { 0 } else { 8 };
        assert_eq!(session.steps.to_ints(), to_ints);
        let quantized = match (float_matmul, overflow) {
            (true, _) => 0,
            (false, true) => 5,
            (false, false) => 8,
        };
        assert_eq!(
            out.paths.quantized_to_ints, quantized,
            "{float_matmul} {overflow}"
        );
        let emu = nnp_emulator::emulate(&program, &fed, &EmuOptions::default()).expect("emulates");
        let case = format!("float_matmul {float_matmul}, overflow {overflow}");
        assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{case}");
        let uc = stack_of(&session, "Uc").expect("Uc has a chain");
        let kept = session.caches.kept.get(&uc);
        let as_ints = matches!(kept, Some(Kept::Ints(_)));
        assert_eq!(
            as_ints,
            !overflow && !float_matmul,
            "{case}: Uc kept as integers"
        );
        // The float path keeps every stack in its matmul's layout alone, f32 here (BFP 8);
        // on the integer path Uc's NaN block sends its products to the float path too.
        let arranged = session.caches.arranged.keys();
        let arranged: Vec<_> = arranged.filter(|key| key.0 == uc).collect();
        let expected = usize::from(float_matmul || overflow);
        assert_eq!(arranged.len(), expected, "{case}: Uc arranged");
        assert!(arranged.iter().all(|key| key.2 == DType::F32), "{case}");
        assert_eq!(
            session.consts[uc].is_some(),
            overflow && !float_matmul,
            "{case}: Uc kept as f64"
        );
        let expected = if float_matmul { 0 } else { stacks - fallbacks };
        assert_eq!(ints_kept(&session).len(), expected, "{case}");
        let kept_f64 = session
            .steps
            .keeps()
            .filter(|(id, k)| k.as_ints.is_some() && session.consts[*id].is_some());
        let kept_f64 = kept_f64.count();
        assert_eq!(kept_f64, fallbacks, "{case}: stacks kept as f64");
        // A warm run reads the kept forms alone.
        let warm = session.run(&fed).expect("warm run");
        assert_eq!(bits(&warm.outputs), bits(&emu.outputs), "{case}: warm");
        if !overflow {
            assert!(
                out.outputs
                    .values()
                    .all(|t| t.data.iter().all(|v| v.is_finite())),
                "the finite case stays finite"
            );
        }
    }
}

/// A product whose weights have no integer form (Uc stored in fp16: its rows span more
/// bits than the kernel's integers hold) reads its vector, which went straight to integers,
/// as f64 values restored from them: the outputs are the emulator's bits, in the first run
/// and a warm one.
#[test]
fn vectors_quantized_to_ints_serve_float_products_too() {
    if !intdot::simd() {
        return;
    }
    let text = include_str!("../../../../samples/lstm.nnp").replace(
        "matrix Uc : [256, 256] at mrf[20]",
        "matrix Uc : [256, 256] at mrf[20] quant fp16",
    );
    let (program, g) = checked("lstm_fp16_uc.nnp", &text, None);
    let data = HostData::random(&program, 3, 7);
    let emu = nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
    let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
    // Uc's four products (one per step) take the float path; a warm run keeps the
    // products of the constant h_0 (three of them integer ones) from the first, and
    // quantizes h_0 no more.
    for (run, int_products, quantized) in [("first", 28, 8), ("warm", 28 - 3, 7)] {
        let out = session.run(&data).expect("run");
        assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{run} run");
        assert_eq!(out.paths.quantized_to_ints, quantized, "{run} run");
        assert_eq!(out.paths.int_products, int_products, "{run} run");
    }
}

/// A convolution's windows (`samples/conv3x3.nnp`: each a concat of 9 pixel tiles of the
/// frame and the image, only quantized for the product) are assembled from their tiles,
/// each quantized once per run, without the concat: the emulator's bits, 16 windows in
/// the first run and in a warm one. With a NaN pixel in one item, the 9 windows that hold
/// its tile have no integer form: they make their concat and take the float path, with
/// the emulator's bits still.
#[test]
fn concats_quantized_part_by_part_give_the_emulators_bits() {
    if !intdot::simd() {
        return;
    }
    let text = include_str!("../../../../samples/conv3x3.nnp");
    // Also with the frame as random weights instead of zeros: the windows' parts of three
    // frame tiles (one item standing for every item) then hold data, in an order that
    // matters.
    let loaded = text.replace("at ivrf[0] = 0", "at ivrf[0]");
    assert_ne!(loaded, text);
    let open = |text: &str| checked("conv3x3.nnp", text, None);
    for text in [loaded.as_str(), text] {
        let (program, g) = open(text);
        let data = HostData::random(&program, 5, 3);
        let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
        let emu = nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
        for run in ["first", "warm"] {
            let out = session.run(&data).expect("run");
            assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{run} run");
            let counts = (
                out.paths.concats_skipped,
                out.paths.quantized_to_ints,
                out.paths.int_products,
            );
            assert_eq!(counts, (16, 16, 16), "{run} run");
        }
    }
    let (program, g) = open(text);
    let mut data = HostData::random(&program, 5, 3);
    let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
    session.run(&data).expect("run");
    // Pixel (1, 1) of item 2 (row 5 of `img`, 128 lanes per pixel) is in the windows of
    // the 9 output pixels around it.
    let img = data.inputs.get_mut("img").expect("input img");
    img.data[(2 * 16 + 5) * 128 + 7] = f32::NAN;
    let emu = nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
    let out = session.run(&data).expect("run");
    assert_eq!(bits(&out.outputs), bits(&emu.outputs), "NaN pixel");
    assert_eq!(
        (out.paths.concats_skipped, out.paths.quantized_to_ints),
        (7, 7),
        "NaN pixel"
    );
    assert_eq!(out.paths.int_products, 7, "NaN pixel");
}

/// Missing or mis-shaped weights are errors that name the tensor, on the one-pass path as
/// on the nodes' (`float_matmul`); so are a missing or mis-shaped input.
#[test]
fn missing_or_misshaped_tensors_are_named() {
    let (program, g) = lstm_sample();
    for float_matmul in [false, true] {
        let opts = ExecOptions {
            float_matmul,
            ..ExecOptions::default()
        };
        let mut missing = HostData::random(&program, 2, 1);
        missing.weights.remove("Uc");
        let err = execute(&g, &missing, &opts).err().map(|e| e.to_string());
        let err = err.expect("missing weights are an error");
        assert!(
            err.contains("no host tensor `Uc` for the graph's weights"),
            "{err}"
        );
        let mut misshaped = HostData::random(&program, 2, 1);
        let uc = misshaped.weights.get_mut("Uc").expect("Uc");
        uc.shape = vec![128, 512];
        let err = execute(&g, &misshaped, &opts).err().map(|e| e.to_string());
        let err = err.expect("mis-shaped weights are an error");
        assert!(
            err.contains("host tensor `Uc` has shape [128, 512], the graph expects [256, 256]"),
            "{err}"
        );
    }
    // The input, which the session converts, pads and rounds in one pass, likewise.
    let session = Session::new(&g, &ExecOptions::default()).expect("session");
    assert_eq!(session.steps.inputs(), 1, "x's chain");
    let mut missing = HostData::random(&program, 2, 1);
    let x = missing.inputs.remove("x").expect("x");
    let err = execute(&g, &missing, &ExecOptions::default()).err();
    let err = err
        .map(|e| e.to_string())
        .expect("a missing input is an error");
    assert!(err.contains("no host tensor `x`"), "{err}");
    let (mut misshaped, mut x) = (missing, x);
    x.shape = vec![2, x.data.len() / 2];
    misshaped.inputs.insert("x".into(), x);
    let err = execute(&g, &misshaped, &ExecOptions::default()).err();
    let err = err
        .map(|e| e.to_string())
        .expect("a mis-shaped input is an error");
    assert!(err.contains("host tensor `x` has shape [2, "), "{err}");
}

/// Where the integer kernel runs, a session keeps its weight stacks as integers only; a
/// later run whose vectors do not fit the kernel (non-finite inputs) takes the float path
/// on stacks restored from those integers, and still gives the emulator's bits.
#[test]
fn weights_kept_as_integers_are_restored_for_the_float_path() {
    if !intdot::simd() {
        return;
    }
    let (program, g) = lstm_sample();
    let products = products(&g);
    let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
    let first = session
        .run(&HostData::random(&program, 2, 1))
        .expect("first run");
    assert_eq!(
        first.paths.int_products, products,
        "every product on the kernel"
    );
    let stacks = session
        .steps
        .keeps()
        .filter(|(_, k)| k.as_ints.is_some())
        .count();
    assert!(stacks > 0, "the sample's weights are read by products only");
    assert_eq!(ints_kept(&session).len(), stacks);
    for w in ints_kept(&session) {
        assert!(session.consts[w].is_none(), "{w} kept as f64 too");
    }
    // Infinities and a NaN in the inputs: their vectors take the float path.
    let mut fed = HostData::random(&program, 2, 1);
    for t in fed.inputs.values_mut() {
        t.data[0] = f32::INFINITY;
        t.data[3] = f32::NEG_INFINITY;
        t.data[7] = f32::NAN;
    }
    let warm = session.run(&fed).expect("run with non-finite inputs");
    assert!(
        warm.paths.int_products < products,
        "no product took the float path"
    );
    let emu = nnp_emulator::emulate(&program, &fed, &EmuOptions::default()).expect("emulates");
    assert_eq!(bits(&warm.outputs), bits(&emu.outputs));
    assert!(
        warm.outputs
            .values()
            .any(|t| t.data.iter().any(|v| !v.is_nan())),
        "some outputs stay finite"
    );
}

/// On the fp8 and MX targets of `samples/targets/` every product of the LSTM sample runs
/// on integer slices ([`intdot::SlicedWeights`]: its runs span more bits than one integer
/// unit holds), in a first run and a warm one, with the emulator's bits. A NaN input sends
/// the products that read it to the float path, with the emulator's bits still.
#[test]
fn fp8_and_mx_products_on_integer_slices_give_the_emulators_bits() {
    if !intdot::simd() {
        return;
    }
    let targets = [
        (
            "mx-fp8",
            include_str!("../../../../samples/targets/mx-fp8.toml"),
        ),
        (
            "msfp8-like",
            include_str!("../../../../samples/targets/msfp8-like.toml"),
        ),
    ];
    for (name, toml) in targets {
        let target = nnp_grammar::Target::from_toml(toml, name).expect("target parses");
        let (program, g) = lstm_sample_on(Some(target));
        let products = products(&g);
        let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
        let mut warm = 0;
        for seed in [1, 2] {
            // A session keeps its first run's weights: new inputs only.
            let mut data = HostData::random(&program, 3, 1);
            data.inputs = HostData::random(&program, 3, seed).inputs;
            let out = session.run(&data).expect("runs");
            let emu =
                nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
            assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{name} seed {seed}");
            // Every product on slices; a warm run reuses the products of constants.
            assert_eq!(
                out.paths.int_products, out.paths.sliced_products,
                "{name} seed {seed}"
            );
            if seed == 1 {
                assert_eq!(out.paths.sliced_products, products, "{name} first run");
            }
            warm = out.paths.sliced_products;
        }
        let mut nan = HostData::random(&program, 3, 1);
        nan.inputs.get_mut("x").expect("x").data[5] = f32::NAN;
        let out = session.run(&nan).expect("runs");
        let emu = nnp_emulator::emulate(&program, &nan, &EmuOptions::default()).expect("emulates");
        assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{name} NaN input");
        assert!(out.paths.sliced_products < products, "{name} NaN input");
        // A session whose first run has a NaN in every x_t (so that the first vector of
        // every W stack has one) slices its weights all the same: the next run takes the
        // slices for every product, as a warm run does.
        let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
        let x = nan.inputs.get_mut("x").expect("x");
        x.data.iter_mut().step_by(128).for_each(|v| *v = f32::NAN);
        let emu = nnp_emulator::emulate(&program, &nan, &EmuOptions::default()).expect("emulates");
        let first = session.run(&nan).expect("runs");
        assert_eq!(bits(&first.outputs), bits(&emu.outputs), "{name} NaN first");
        let clean = HostData::random(&program, 3, 1);
        let out = session.run(&clean).expect("runs");
        let emu =
            nnp_emulator::emulate(&program, &clean, &EmuOptions::default()).expect("emulates");
        assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{name} after NaN");
        assert_eq!(
            out.paths.int_products, out.paths.sliced_products,
            "{name} after NaN"
        );
        assert_eq!(out.paths.sliced_products, warm, "{name} after NaN");
        assert!(first.paths.sliced_products < warm, "{name} NaN first");
    }
}

/// The stacks a session keeps as integers alone.
fn ints_kept(session: &Session) -> Vec<ValueId> {
    let kept = session.caches.kept.iter();
    kept.filter(|(_, k)| matches!(k, Kept::Ints(_)))
        .map(|(w, _)| *w)
        .collect()
}

/// On fp32 MVM inputs (`samples/targets/fp32.toml`, and the same with `fp32-seq`
/// accumulation) every product of the LSTM sample takes the float path's bounded matmul, in a
/// first run and warm ones (which reuse the products of constants), with the emulator's bits;
/// with a NaN input too (its sums are summed exactly where the bound cannot decide them).
/// Every weight stack is kept as the bounded matmul's matrix alone.
#[test]
fn products_on_the_bounded_matmul_give_the_emulators_bits() {
    let fp32 = include_str!("../../../../samples/targets/fp32.toml");
    let seq = format!("{fp32}accumulation = \"fp32-seq\"\n");
    for (name, toml) in [("fp32", fp32.to_string()), ("fp32 with fp32-seq", seq)] {
        let target = nnp_grammar::Target::from_toml(&toml, name).expect("target parses");
        let (program, g) = lstm_sample_on(Some(target));
        let mut session = Session::new(&g, &ExecOptions::default()).expect("session");
        let mut counts = Vec::new();
        for seed in [1, 2, 3] {
            let mut data = HostData::random(&program, 3, 1);
            data.inputs = HostData::random(&program, 3, seed).inputs;
            if seed == 3 {
                data.inputs.get_mut("x").expect("x").data[5] = f32::NAN;
            }
            let out = session.run(&data).expect("runs");
            let emu =
                nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
            assert_eq!(bits(&out.outputs), bits(&emu.outputs), "{name} seed {seed}");
            assert_eq!(out.paths.int_products, 0, "{name}");
            counts.push(out.paths.bounded_products);
            // Every weight stack kept as the bounded matmul's matrix alone, in the layout of
            // its accumulation, and made straight from the host's weights.
            let stacks = session
                .steps
                .keeps()
                .filter(|(_, k)| k.as_ints.is_some())
                .count();
            let per_tile = name.contains("seq");
            let bounded = session.caches.kept.iter().filter(|(w, k)| {
                matches!(k, Kept::Bounded { per_tile: t } if *t == per_tile)
                    && session.consts[**w].is_none()
            });
            assert_eq!((bounded.count(), stacks > 0), (stacks, true), "{name}");
            if seed == 1 {
                assert_eq!(out.paths.one_pass_stacks, stacks, "{name}");
            }
        }
        let (all, warm) = (products(&g), counts[1]);
        assert_eq!(counts, [all, warm, warm], "{name}");
        assert!(0 < warm && warm < all, "{name}: {warm} of {all}");
    }
}

/// Each output row goes into its output's buffer at its `Output` node: the rows of the
/// README LSTM's `h` (one per step) come out in place. A hand-edited `.swg.json` whose last
/// `Output` node writes step 2's row again is refused, naming both nodes; one that declares a
/// fifth row that no node writes names the row nothing produced instead of returning zeros
/// there.
#[test]
fn output_rows_fill_in_place_and_a_missing_row_is_named() {
    let (program, mut g) = lstm_sample();
    let data = HostData::random(&program, 3, 5);
    let run = execute(&g, &data, &ExecOptions::default()).expect("runs");
    let emu = nnp_emulator::emulate(&program, &data, &EmuOptions::default()).expect("emulates");
    let (h, want) = (&run.outputs["h"], &emu.outputs["h"]);
    assert_eq!(h.shape, vec![3, 4, 256]);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&h.data), bits(&want.data));
    let last = g
        .nodes
        .iter_mut()
        .rev()
        .find_map(|n| match &mut n.op {
            Op::Output { row, .. } => Some(row),
            _ => None,
        })
        .expect("an output node");
    assert_eq!(*last, 3);
    *last = 2;
    let e = execute(&g, &data, &ExecOptions::default()).expect_err("row 2 twice");
    assert!(
        e.to_string().contains("both write row 2 of output `h`"),
        "{e}"
    );
    let mut g5 = lstm_sample().1;
    let h = g5.outputs.iter_mut().find(|o| o.name == "h").expect("h");
    assert_eq!((h.rows, &h.shape), (4, &vec![4, 256]));
    (h.rows, h.shape) = (5, vec![5, 256]);
    let e = execute(&g5, &data, &ExecOptions::default()).expect_err("row 4 is missing");
    assert!(
        e.to_string().contains("output `h` row 4 is never produced"),
        "{e}"
    );
}
