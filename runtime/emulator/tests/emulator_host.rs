//! Host data and tensor files: loading rules, error messages, file round trips.

mod emulator_util;
use emulator_util::*;
use nnp_host::io::{self, Dtype};
use nnp_host::{HostData, HostError, LoadOptions, Tensor, Unfilled};
use std::collections::BTreeMap;
use std::path::PathBuf;

const SRC: &str = "\
matrix W : [4, 6] at mrf[0]
vector b : [4] at asvrf0[0]
vector z : [4] at asvrf0[1] = 0
input x : [2, 6]
output y : [2, 4]
s_wr iterations, 2
s_wr rows, 2
v_rd netq
v_wr ivrf[0]
end_chain
s_wr iterations, 2
s_wr rows, 1
s_wr cols, 2
v_rd ivrf[0]
mv_mul mrf[W]
vv_add asvrf0[b]
v_wr netq
end_chain
";

/// A fresh path inside a per-test temporary directory.
fn tmp(test: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nnp-emu-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn random_data_is_deterministic_and_shaped() {
    let p = program(SRC, target(""));
    let a = HostData::random(&p, 3, 9);
    assert_eq!(a, HostData::random(&p, 3, 9));
    assert_ne!(a, HostData::random(&p, 3, 10));
    // `= 0` declarations are not weights; inputs carry the batch.
    assert_eq!(a.weights.keys().collect::<Vec<_>>(), vec!["W", "b"]);
    assert_eq!(a.weights["W"].shape, vec![4, 6]);
    assert_eq!(a.inputs["x"].shape, vec![3, 2, 6]);
    // Ranges: W in [-1, 1) / sqrt(6), b in [-0.5, 0.5), x in [-1, 1).
    assert!(
        a.weights["W"]
            .data
            .iter()
            .all(|v| v.abs() <= 1.0 / 6f32.sqrt())
    );
    assert!(a.weights["b"].data.iter().all(|v| (-0.5..0.5).contains(v)));
    assert!(a.inputs["x"].data.iter().all(|v| (-1.0..1.0).contains(v)));
    // Item 0 does not depend on the batch size.
    let one = HostData::random(&p, 1, 9);
    assert_eq!(one.inputs["x"].data, a.inputs["x"].data[..12]);
}

/// The random inputs are the documented recipe's values (each input's ChaCha8 stream keyed by
/// the seed and the FNV-1a hash of its name, one 32-bit word per value, computed here from the
/// recipe with rand_chacha), and pieces of items (`random_inputs`) are those items' values.
/// The batch spans several of the generator's pieces (64 Ki values each, made on the pool's
/// threads), so the values across a piece's edge are checked too.
#[test]
fn random_inputs_in_pieces_are_the_recipes_values() {
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let p = program(SRC, target(""));
    let fnv1a64 = |s: &str| {
        s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&9u64.to_le_bytes());
    key[8..16].copy_from_slice(&fnv1a64("x").to_le_bytes());
    let mut rng = ChaCha8Rng::from_seed(key);
    const BATCH: usize = 16_500; // 198,000 values: three pieces and part of a fourth
    let want: Vec<u32> = (0..BATCH * 12)
        .map(|_| {
            let u = f64::from(rng.next_u32() >> 8) / f64::from(1u32 << 24);
            ((-1.0 + 2.0 * u) as f32).to_bits()
        })
        .collect();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&HostData::random(&p, BATCH, 9).inputs["x"].data), want);
    assert_eq!(
        bits(&HostData::random(&p, 7, 9).inputs["x"].data),
        want[..7 * 12]
    );
    // 5461..5462 holds the first piece's last value and the second's first.
    for items in [
        0..3,
        3..4,
        4..7,
        2..6,
        6..7,
        5461..5462,
        5000..16_500,
        10_923..10_924,
    ] {
        let piece = HostData::random_inputs(&p, items.clone(), 9);
        assert_eq!(piece["x"].shape, vec![items.len(), 2, 6]);
        assert_eq!(
            bits(&piece["x"].data),
            want[items.start * 12..items.end * 12],
            "{items:?}"
        );
    }
}

#[test]
fn load_errors_name_the_tensor_and_the_fix() {
    let p = program(SRC, target(""));
    let mut m = BTreeMap::new();
    m.insert("W".to_string(), Tensor::zeros(vec![4, 6]));
    // Missing b.
    let e = HostData::from_tensors(&p, m.clone(), &LoadOptions::default(), "`w.safetensors`")
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, HostError::Missing { .. }), "{msg}");
    assert!(
        msg.contains("`b`") && msg.contains("[4]") && msg.contains("w.safetensors"),
        "{msg}"
    );
    // The fix is the error's help, not part of its message.
    let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
    assert!(
        help.as_deref()
            .is_some_and(|h| h.contains("--random-missing")),
        "{help:?}"
    );
    assert!(!msg.contains("help:"), "{msg}");
    // It names what the files do hold, so a misnamed tensor shows at once.
    m.insert("bias".to_string(), Tensor::zeros(vec![4]));
    let msg = HostData::from_tensors(&p, m.clone(), &LoadOptions::default(), "`w.safetensors`")
        .unwrap_err()
        .to_string();
    assert!(
        msg.ends_with("in `w.safetensors`; tensors found: `W`, `bias`"),
        "{msg}"
    );
    m.remove("bias");
    // With the fallback flag, b (and x) come from the seeded random data.
    let opts = LoadOptions {
        random_missing: true,
        seed: 9,
        ..LoadOptions::default()
    };
    let d = HostData::from_tensors(&p, m.clone(), &opts, "f").unwrap();
    assert_eq!(d.weights["b"], HostData::random(&p, 1, 9).weights["b"]);
    // Wrong shape.
    m.insert("b".to_string(), Tensor::zeros(vec![5]));
    let msg = HostData::from_tensors(&p, m.clone(), &LoadOptions::default(), "f")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("`b`") && msg.contains("[5]") && msg.contains("[4]"),
        "{msg}"
    );
    // NaN entries.
    m.insert("b".to_string(), t(&[4], &[0.0, f32::NAN, 0.0, 0.0]));
    m.insert("x".to_string(), Tensor::zeros(vec![2, 6]));
    let msg = HostData::from_tensors(&p, m.clone(), &LoadOptions::default(), "f")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("`b`") && msg.contains("NaN") && msg.contains("index 1"),
        "{msg}"
    );
    // Values that do not fill the shape (the fields are public): an error, not a panic.
    let short = Tensor {
        shape: vec![3, 2, 6],
        data: vec![0.0; 12],
    };
    m.insert("b".to_string(), Tensor::zeros(vec![4]));
    m.insert("x".to_string(), short);
    let e = HostData::from_tensors(&p, m, &LoadOptions::default(), "f").unwrap_err();
    assert!(
        matches!(&e, HostError::Elements(Unfilled { name, expected: 36, found: 12, .. }) if name == "x"),
        "{e}"
    );
}

#[test]
fn inputs_broadcast_or_carry_the_batch() {
    let p = program(SRC, target(""));
    let mut m = BTreeMap::new();
    m.insert("W".to_string(), Tensor::zeros(vec![4, 6]));
    m.insert("b".to_string(), Tensor::zeros(vec![4]));
    // Declared shape: one set broadcast to the requested batch.
    m.insert("x".to_string(), t(&[2, 6], &[1.0; 12]));
    let opts = LoadOptions {
        batch: Some(3),
        ..LoadOptions::default()
    };
    let d = HostData::from_tensors(&p, m.clone(), &opts, "f").unwrap();
    assert_eq!(d.inputs["x"].shape, vec![3, 2, 6]);
    // A shape neither one set nor [B, ...shape]: with nothing to fix the batch, the error
    // writes it B; with --batch, the number.
    m.insert("x".to_string(), Tensor::zeros(vec![5, 2, 7]));
    let err = |opts: &LoadOptions| HostData::from_tensors(&p, m.clone(), opts, "f").unwrap_err();
    let any = err(&LoadOptions::default());
    let help = miette::Diagnostic::help(&any).map(|h| h.to_string());
    assert!(
        any.to_string().ends_with("expects [2, 6] or [B, 2, 6]"),
        "{any}"
    );
    assert!(
        help.as_deref()
            .is_some_and(|h| h.ends_with("leading batch dimension (B)")),
        "{help:?}"
    );
    assert!(
        err(&opts)
            .to_string()
            .ends_with("expects [2, 6] or [3, 2, 6]")
    );
    // [B, ...shape] sets the batch when none is given.
    m.insert("x".to_string(), Tensor::zeros(vec![5, 2, 6]));
    let d = HostData::from_tensors(&p, m.clone(), &LoadOptions::default(), "f").unwrap();
    assert_eq!(d.batch, 5);
    // ... and must agree with an explicit batch.
    let msg = HostData::from_tensors(&p, m, &opts, "f")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("[2, 6] or [3, 2, 6]") && msg.contains("[5, 2, 6]"),
        "{msg}"
    );
}

/// `HostData::open` reads the weights and only the headers of the inputs; its feed gives
/// any range of items, from a batched file or a broadcast one, with the values of the whole
/// batch (the random recipe they were written from), and finds a NaN in the range that holds
/// it, naming the same flat index as loading the whole batch does.
#[test]
fn input_feeds_read_ranges_of_items_from_files() {
    let p = program(SRC, target(""));
    let data = HostData::random(&p, 7, 5);
    let w = tmp("feed", "w.safetensors");
    io::write_tensors(&w, &data.weights, Dtype::F32).unwrap();
    let x = tmp("feed", "x.npy");
    io::write_tensors(&x, &data.inputs, Dtype::F32).unwrap();
    let (weights, feed) = HostData::open(&p, Some(&w), Some(&x), &LoadOptions::default()).unwrap();
    assert_eq!((feed.batch, &weights), (7, &data.weights));
    for r in [0..3, 3..6, 6..7, 2..5, 0..7] {
        let got = feed.items(r.clone()).unwrap();
        assert_eq!(got, HostData::random_inputs(&p, r.clone(), 5), "{r:?}");
    }
    assert!(matches!(feed.items(5..8), Err(HostError::NoItems { .. })));
    // One set in the declared shape: every item gets it.
    let one = tmp("feed", "one");
    let first = t(&[2, 6], &data.inputs["x"].data[..12]);
    io::write_tensors(
        &one,
        &BTreeMap::from([("x".to_string(), first.clone())]),
        Dtype::F32,
    )
    .unwrap();
    let opts = LoadOptions {
        batch: Some(4),
        ..LoadOptions::default()
    };
    let (_, feed) = HostData::open(&p, Some(&w), Some(&one), &opts).unwrap();
    let got = &feed.items(1..3).unwrap()["x"];
    assert_eq!(got.shape, vec![2, 2, 6]);
    assert_eq!(got.data, [first.data.clone(), first.data].concat());
    // A NaN in item 5 (value 7 of its 12): opening reads no input value, so it succeeds; the
    // range holding it fails with the index in the whole batch, 5 * 12 + 7.
    let mut bad = data.inputs.clone();
    bad.get_mut("x").unwrap().data[67] = f32::NAN;
    let xnan = tmp("feed-nan", "x.npy");
    io::write_tensors(&xnan, &bad, Dtype::F32).unwrap();
    let (_, feed) = HostData::open(&p, Some(&w), Some(&xnan), &LoadOptions::default()).unwrap();
    assert!(feed.items(0..5).is_ok());
    let e = feed.items(3..6).unwrap_err();
    assert!(
        matches!(&e, HostError::NonFinite { name, index: 67, .. } if name == "x"),
        "{e}"
    );
    let whole = HostData::load(&p, Some(&w), Some(&xnan), None).unwrap_err();
    assert_eq!(whole.to_string(), e.to_string());
}

#[test]
fn files_round_trip_and_load_by_name() {
    let p = program(SRC, target(""));
    let data = HostData::random(&p, 2, 3);
    // Weights as safetensors (f32), inputs as a directory of .npy (f32): exact round trip.
    let wpath = tmp("files", "w.safetensors");
    io::write_tensors(&wpath, &data.weights, Dtype::F32).unwrap();
    let xdir = tmp("files", "inputs");
    io::write_tensors(&xdir, &data.inputs, Dtype::F32).unwrap();
    let back = HostData::load(&p, Some(&wpath), Some(&xdir), None).unwrap();
    assert_eq!(back, data);
    // An f16 file holds f16 values exactly, and refuses a value f16 does not hold (it would
    // write another number): the random weights are not f16 values; their fp16 roundings
    // (half's conversion is nearest-even) are.
    let hpath = tmp("files", "w16.safetensors");
    let err = io::write_tensors(&hpath, &data.weights, Dtype::F16).unwrap_err();
    assert!(err.to_string().contains("is not an f16 value"), "{err}");
    let rounded: BTreeMap<String, Tensor> = data
        .weights
        .iter()
        .map(|(name, t)| {
            let data = t.data.iter().map(|v| half::f16::from_f32(*v).to_f32());
            (
                name.clone(),
                Tensor::new(t.shape.clone(), data.collect()).unwrap(),
            )
        })
        .collect();
    io::write_tensors(&hpath, &rounded, Dtype::F16).unwrap();
    let w16 = io::read_tensors(&hpath).unwrap();
    for (name, t) in &rounded {
        assert_eq!(w16[name].data, t.data, "{name}");
    }
    // A single .npy file is one tensor named by its stem.
    let one = tmp("files", "b.npy");
    let only_b: BTreeMap<String, Tensor> = [("b".to_string(), data.weights["b"].clone())]
        .into_iter()
        .collect();
    io::write_tensors(&one, &only_b, Dtype::F32).unwrap();
    assert_eq!(io::read_tensors(&one).unwrap(), only_b);
    // Emulating from files gives the same outputs as from memory.
    let opts = nnp_emulator::EmuOptions::default();
    let a = nnp_emulator::emulate(&p, &data, &opts).unwrap();
    let b = nnp_emulator::emulate(&p, &back, &opts).unwrap();
    assert_eq!(a.outputs, b.outputs);
    let _ = std::fs::remove_dir_all(wpath.parent().unwrap());
}

#[test]
fn trace_round_trips_through_json_lines() {
    let p = program(SRC, target(""));
    let data = HostData::random(&p, 2, 3);
    let opts = nnp_emulator::EmuOptions {
        trace: true,
        chunk: Some(1),
        ..Default::default()
    };
    let emu = nnp_emulator::emulate(&p, &data, &opts).unwrap();
    let trace = emu.trace.unwrap();
    // 2 items x (2 iterations of the pop chain + 2 of the multiply chain).
    assert_eq!(trace.len(), 8);
    assert_eq!(trace.iter().filter(|r| r.item == 1).count(), 4);
    let path = tmp("trace", "t.jsonl");
    nnp_emulator::write_trace(&path, &trace).unwrap();
    assert_eq!(nnp_emulator::read_trace(&path).unwrap(), trace);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// A warm run's data: the inputs checked and fed as `from_tensors` does them, no weights
/// (given ones, even malformed, are not read).
#[test]
fn inputs_only_checks_the_inputs_and_reads_no_weights() {
    let p = program(SRC, target(""));
    let x = HostData::random_inputs(&p, 0..3, 4)["x"].clone();
    let mut m = BTreeMap::new();
    m.insert("x".to_string(), x.clone());
    m.insert("W".to_string(), t(&[1], &[f32::NAN]));
    let d = HostData::inputs_only(&p, m.clone(), &LoadOptions::default(), "f").unwrap();
    assert!(d.weights.is_empty());
    assert_eq!((d.batch, &d.inputs["x"]), (3, &x));
    // The same inputs as a full load feeds them.
    m.insert("W".to_string(), Tensor::zeros(vec![4, 6]));
    m.insert("b".to_string(), Tensor::zeros(vec![4]));
    let full = HostData::from_tensors(&p, m.clone(), &LoadOptions::default(), "f").unwrap();
    assert_eq!(full.inputs, d.inputs);
    // A misshaped or missing input is the same error.
    m.insert("x".to_string(), Tensor::zeros(vec![3, 5]));
    let e = HostData::inputs_only(&p, m.clone(), &LoadOptions::default(), "f").unwrap_err();
    assert!(matches!(e, HostError::Shape { .. }), "{e}");
    m.remove("x");
    let e = HostData::inputs_only(&p, m, &LoadOptions::default(), "f").unwrap_err();
    assert!(matches!(e, HostError::Missing { .. }), "{e}");
}
