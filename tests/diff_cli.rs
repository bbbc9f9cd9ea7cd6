//! `nnpc diff` end to end: a dump of the emulator is concordant; one flipped bit is reported as
//! exactly that element with the `v_wr` line that wrote it; bad dumps give exit 2 and a message
//! naming the tensor; traces name the first divergent `v_wr`.

use half::f16;
use nnp_runtime::host::Tensor;
use nnp_runtime::io::{Dtype, read_tensors, write_tensors};
use nnp_runtime::trace::{read_trace, write_trace};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;

use common::dumps::{diff_mlp, emulate_mlp16, pass_inputs, pass_through};
use common::{arg as s, message, nnpc, root, scratch, stderr, stdout};

/// 1-based line numbers of `sample` lines containing `needle`.
fn lines_with(sample: &str, needle: &str) -> Vec<usize> {
    let src = std::fs::read_to_string(root().join(sample)).expect("sample");
    src.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle) && !l.trim_start().starts_with("//"))
        .map(|(i, _)| i + 1)
        .collect()
}

/// Emulate `sample` at batch 3 into `dir/hw.safetensors` (and a trace).
fn emulate(sample: &str, dir: &Path) -> (PathBuf, PathBuf) {
    emulate_batch(sample, dir, "3")
}

/// Emulate `sample` at batch `batch` with seed 5 into `dir/hw.safetensors` (and a trace).
fn emulate_batch(sample: &str, dir: &Path, batch: &str) -> (PathBuf, PathBuf) {
    let (hw, tr) = (dir.join("hw.safetensors"), dir.join("hw.jsonl"));
    let o = nnpc(&[
        "emulate",
        sample,
        "--batch",
        batch,
        "--seed",
        "5",
        "-o",
        s(&hw),
        "--trace",
        s(&tr),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    (hw, tr)
}

#[test]
fn emulator_dump_is_concordant() {
    let dir = scratch("concordant");
    let (hw, tr) = emulate("samples/mlp2_relu.nnp", &dir);
    let o = diff_mlp(&hw, 5, &["--trace", s(&tr)]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    // y : [T = 4, 100] per item, batch 3 (read from the dump): 1200 elements.
    assert!(out.contains("batch 3"), "{out}");
    assert!(
        out.contains("bit-exact: 1200 of 1200 (concordant)"),
        "{out}"
    );
    assert!(out.contains("v_wr records identical"), "{out}");
    assert!(!out.contains("--explain"), "nothing to explain: {out}");
}

#[test]
fn one_flipped_bit_is_reported_with_its_element_and_line() {
    let dir = scratch("flip");
    let (hw, _) = emulate("samples/mlp2_relu.nnp", &dir);
    let mut dump = read_tensors(&hw).expect("dump");
    let y = dump.get_mut("y").expect("output y");
    assert_eq!(y.shape, vec![3, 4, 100]);
    // Item 2, step 1, element 37 of y: flat index 2*400 + 1*100 + 37; lane 37 of tile 0.
    let flat = 2 * 400 + 100 + 37;
    let bits = f16::from_f32(y.data[flat]).to_bits();
    let flipped = bits ^ 1; // lowest mantissa bit: one ULP away
    y.data[flat] = f16::from_bits(flipped).to_f32();
    let bad = dir.join("bad.safetensors");
    write_tensors(&bad, &dump, Dtype::F16).expect("write");

    let o = diff_mlp(&bad, 5, &["--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(r["schema"], "nnpc.diff/1");
    assert_eq!(r["elements"], 1200);
    assert_eq!(r["bit_exact"], 1199);
    assert_eq!(r["concordant"], false);
    assert_eq!(r["max_ulps"], 1);
    assert_eq!(r["ulp_histogram"][0], 1199);
    assert_eq!(r["ulp_histogram"][1], 1);
    let m = &r["mismatches"].as_array().expect("mismatches")[..];
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["output"], "y");
    assert_eq!(m[0]["index"], serde_json::json!([2, 1, 37]));
    assert_eq!(
        (m[0]["tile"].clone(), m[0]["lane"].clone()),
        (0.into(), 37.into())
    );
    assert_eq!(m[0]["hardware_bits"], u64::from(flipped));
    assert_eq!(m[0]["software_bits"], u64::from(bits));
    assert_eq!(m[0]["ulps"], 1);
    // The only `v_wr netq` of the sample writes every row of y.
    let netq = lines_with("samples/mlp2_relu.nnp", "v_wr netq");
    assert_eq!(netq.len(), 1);
    assert_eq!(m[0]["line"], netq[0]);

    // The human report names the same element and line.
    let o = diff_mlp(&bad, 5, &[]);
    let out = stdout(&o);
    assert!(out.contains("y[2, 1, 37] tile 0 lane 37"), "{out}");
    assert!(
        out.contains(&format!("line {}: v_wr netq", netq[0])),
        "{out}"
    );
    assert!(
        out.contains("bit-exact: 1199 of 1200 (NOT concordant)"),
        "{out}"
    );
    assert!(
        out.contains("(`--explain` reruns the software graph"),
        "{out}"
    );
}

#[test]
fn wrong_data_is_not_concordant() {
    // Same dump, different seed: the software graph sees other data, so outputs differ.
    let dir = scratch("seed");
    let (hw, _) = emulate("samples/mlp2_relu.nnp", &dir);
    let o = diff_mlp(&hw, 6, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn a_dump_of_the_wrong_shape_is_a_clear_error() {
    let dir = scratch("shape");
    let (hw, _) = emulate("samples/mlp2_relu.nnp", &dir);
    let mut dump = read_tensors(&hw).expect("dump");
    let y = dump.get_mut("y").expect("y");
    y.shape = vec![3, 4, 10, 10];
    let bad = dir.join("bad.safetensors");
    write_tensors(&bad, &dump, Dtype::F16).expect("write");
    let o = diff_mlp(&bad, 5, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = message(&o);
    assert!(err.contains("tensor `y` has shape [3, 4, 10, 10]"), "{err}");
    assert!(err.contains("output `y` is [3, 4, 100]"), "{err}");
    assert!(!err.contains("stack backtrace"), "{err}");

    // A dump without the output at all.
    dump.remove("y");
    dump.insert(
        "z".into(),
        nnp_runtime::host::Tensor::zeros(vec![3, 4, 100]),
    );
    write_tensors(&bad, &dump, Dtype::F16).expect("write");
    let o = diff_mlp(&bad, 5, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(message(&o).contains("no tensor `y`"), "{}", message(&o));

    // An unreadable dump.
    let o = nnpc(&[
        "diff",
        "samples/mlp2_relu.nnp",
        "--hardware",
        s(&dir.join("nope.safetensors")),
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_tile_layout_dump_is_read_back() {
    let dir = scratch("tiles");
    let hw = dir.join("hw_tiles.safetensors");
    let o = nnpc(&[
        "emulate",
        "samples/dense_300x200.nnp",
        "--batch",
        "2",
        "--layout",
        "tiles",
        "-o",
        s(&hw),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = nnpc(&[
        "diff",
        "samples/dense_300x200.nnp",
        "--hardware",
        s(&hw),
        "--layout",
        "tiles",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(
        out.contains("batch 2") && out.contains("(concordant)"),
        "{out}"
    );
}

#[test]
fn the_first_divergent_v_wr_is_named() {
    let dir = scratch("trace");
    let (hw, tr) = emulate("samples/mlp2_relu.nnp", &dir);
    let mut records = read_trace(&tr).expect("trace");
    // Perturb one lane of item 1's third record: the earliest divergence in execution order.
    let pos = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.item == 1)
        .nth(2)
        .map(|(i, _)| i)
        .expect("item 1 has three records");
    records[pos].bits[5] ^= 1;
    let expected_line = records[pos].line;
    let bad = dir.join("bad.jsonl");
    write_trace(&bad, &records).expect("write");
    let o = diff_mlp(&hw, 5, &["--trace", s(&bad), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    // Outputs agree; only the trace differs: not concordant, as the exit status says.
    assert_eq!(
        (r["elements"].clone(), r["bit_exact"].clone()),
        (1200.into(), 1200.into())
    );
    assert_eq!(r["concordant"], false);
    let f = &r["trace"]["first"];
    assert_eq!(f["item"], 1);
    assert_eq!(f["position"], 2);
    assert_eq!(f["line"], expected_line);
    assert_eq!(f["first_lane"], 5);
    assert_eq!(f["lanes_differing"], 1);
    assert_eq!(
        r["trace"]["identical"],
        r["trace"]["records"].as_u64().expect("n") - 1
    );
    // The report's last line says so too, and `--explain` has no outputs to explain.
    let o = diff_mlp(&hw, 5, &["--trace", s(&bad), "--explain"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let last = out.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "bit-exact: 1200 of 1200, but a v_wr trace record differs (NOT concordant)"
    );
    assert!(
        !out.contains("(concordant)") && !out.contains("explain"),
        "{out}"
    );
    assert!(out.contains("first divergent v_wr"), "{out}");

    // A trace of a different program is out of step: bad input.
    records.truncate(records.len() - 1);
    write_trace(&bad, &records).expect("write");
    let o = diff_mlp(&hw, 5, &["--trace", s(&bad)]);
    assert_eq!(o.status.code(), Some(2));
    let err = message(&o);
    assert!(err.contains("has 11 records for batch item 2"), "{err}");
    assert!(err.contains("software graph wrote 12"), "{err}");
}

/// A dump is compared a chunk at a time as the run produces its outputs: with chunks of 3 of
/// 7 items, three flipped bits (items 1, 5 and 6) are all counted, the first two are listed
/// with their indices in the whole batch, and the report is the one-chunk report to the bit
/// (counts, histogram, errors, QSNR), for a dump in logical and in tile layout.
#[test]
fn a_dump_is_compared_chunk_by_chunk() {
    let dir = scratch("chunks");
    let (hw, _) = emulate_batch("samples/mlp2_relu.nnp", &dir, "7");
    let mut dump = read_tensors(&hw).expect("dump");
    let y = dump.get_mut("y").expect("output y");
    assert_eq!(y.shape, vec![7, 4, 100]);
    // y[1, 2, 5], y[5, 0, 99], y[6, 3, 0]: one ULP each.
    for flat in [400 + 200 + 5, 5 * 400 + 99, 6 * 400 + 300] {
        let bits = f16::from_f32(y.data[flat]).to_bits();
        y.data[flat] = f16::from_bits(bits ^ 1).to_f32();
    }
    let bad = dir.join("bad.safetensors");
    write_tensors(&bad, &dump, Dtype::F16).expect("write");
    let tiles: BTreeMap<String, Tensor> = dump
        .iter()
        .map(|(n, t)| {
            (
                n.clone(),
                nnp_runtime::io::to_tiles(n, t, 128, false).expect("tiles"),
            )
        })
        .collect();
    let bad_tiles = dir.join("bad_tiles.safetensors");
    write_tensors(&bad_tiles, &tiles, Dtype::F16).expect("write");

    let report = |dump: &Path, chunk: &str, layout: &str| -> serde_json::Value {
        let o = diff_mlp(
            dump,
            5,
            &[
                "--chunk-items",
                chunk,
                "--first",
                "2",
                "--layout",
                layout,
                "--json",
            ],
        );
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("json")
    };
    let r = report(&bad, "3", "logical");
    assert_eq!(
        (r["elements"].clone(), r["bit_exact"].clone()),
        (2800.into(), 2797.into())
    );
    assert_eq!(r["ulp_histogram"][1], 3);
    let m = r["mismatches"].as_array().expect("mismatches");
    let indices: Vec<_> = m.iter().map(|m| m["index"].clone()).collect();
    assert_eq!(
        indices,
        vec![serde_json::json!([1, 2, 5]), serde_json::json!([5, 0, 99])]
    );
    assert_eq!(r["outputs"][0]["shape"], serde_json::json!([7, 4, 100]));
    assert_eq!(
        r,
        report(&bad, "7", "logical"),
        "chunks of 3 against one chunk"
    );
    assert_eq!(
        r,
        report(&bad_tiles, "2", "tiles"),
        "the tile layout's dump"
    );
}

/// A trace is compared a chunk of items at a time, whatever the order of its records: the
/// emulator's trace of 7 items, written item after item in turn (round robin, with a blank
/// line), with lanes flipped in item 2 (position 3) and item 5 (position 1), gives in chunks
/// of 3 the one-chunk report, whose first divergence is item 5's (the earlier position, found
/// in a later chunk). A record of an item past the batch is a trace of another run: exit 2.
#[test]
fn a_trace_is_compared_chunk_by_chunk_in_any_order() {
    let dir = scratch("trace-chunks");
    let (hw, tr) = emulate_batch("samples/mlp2_relu.nnp", &dir, "7");
    let mut records = read_trace(&tr).expect("trace");
    assert_eq!(records.len(), 7 * 12);
    records[2 * 12 + 3].bits[7] ^= 1;
    records[5 * 12 + 1].bits[4] ^= 1;
    let expected_line = records[5 * 12 + 1].line;
    let mut lines: Vec<String> = (0..12)
        .flat_map(|position| (0..7).map(move |item| item * 12 + position))
        .map(|k| serde_json::to_string(&records[k]).expect("json"))
        .collect();
    lines.insert(20, String::new());
    let mixed = dir.join("mixed.jsonl");
    std::fs::write(&mixed, lines.join("\n") + "\n").expect("write");

    let report = |chunk: &str| -> serde_json::Value {
        let o = diff_mlp(
            &hw,
            5,
            &["--trace", s(&mixed), "--chunk-items", chunk, "--json"],
        );
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("json")
    };
    let r = report("3");
    assert_eq!(r["concordant"], false, "the trace diverges");
    assert_eq!(
        (
            r["trace"]["records"].clone(),
            r["trace"]["identical"].clone()
        ),
        (84.into(), 82.into())
    );
    let f = &r["trace"]["first"];
    assert_eq!(
        (
            f["item"].clone(),
            f["position"].clone(),
            f["first_lane"].clone()
        ),
        (5.into(), 1.into(), 4.into())
    );
    assert_eq!(f["line"], expected_line);
    assert_eq!(r, report("7"), "chunks of 3 against one chunk");

    let mut extra = records[0].clone();
    extra.item = 7;
    lines.push(serde_json::to_string(&extra).expect("json"));
    std::fs::write(&mixed, lines.join("\n")).expect("write");
    let o = diff_mlp(&hw, 5, &["--trace", s(&mixed), "--chunk-items", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = message(&o);
    assert!(err.contains("has 1 records for batch item 7"), "{err}");
    assert!(err.contains("software graph wrote 0"), "{err}");
}

/// `--explain`: a board whose numerics differ from the target in one setting (here the
/// emulator run on a target file with that setting) is concordant under exactly that change
/// of the target, which the report names as the line to put in the target file; a board that
/// differs in two, under exactly the pair of them, tried on top of the closest single one; a
/// dump with a fault (one flipped bit) is concordant under none. The changes that the first 8
/// of the 16 items already rule out run no further.
#[test]
fn explain_names_the_one_setting_a_board_differs_in() {
    let dir = scratch("explain");
    let fp8 = "mvm_vector = \"fp(5, 2)\"\nmvm_matrix = \"fp(5, 2)\"";
    let two = format!("{fp8}\naccumulation = \"fp16-seq\"");
    // (the board's settings, how many knobs they turn)
    let boards = [
        ("accumulation = \"fp16-seq\"", 1),
        (
            "mvm_vector = \"bfp(mant = 8, block = native, exp_bits = 5, round = away)\"",
            1,
        ),
        ("mfu_input = \"bf16\"", 1),
        // A board built for another MVM format of the catalogue (as msfp8-like.toml).
        (fp8, 1),
        // That board accumulating in fp16 tile by tile too.
        (two.as_str(), 2),
    ];
    for (k, (setting, knobs)) in boards.into_iter().enumerate() {
        let board = dir.join(format!("board{k}.toml"));
        std::fs::write(&board, format!("[numerics]\n{setting}\n")).expect("target file");
        let hw = emulate_mlp16(
            &dir.join(format!("hw{k}.safetensors")),
            &["--target", s(&board)],
        );
        let o = diff_mlp(&hw, 5, &["--explain", "--json"]);
        assert_eq!(o.status.code(), Some(1), "{setting}: {}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(r["concordant"], false, "{setting}");
        let rows = r["explain"].as_array().expect("explain rows");
        let concordant: Vec<(&str, u64)> = rows
            .iter()
            .filter(|row| row["concordant"] == true)
            .map(|row| {
                (
                    row["change"].as_str().expect("change"),
                    row["knobs"].as_u64().expect("knobs"),
                )
            })
            .collect();
        assert_eq!(concordant, [(setting, knobs)], "{setting}");
        // Pairs only when no single change is concordant: on top of the MVM format, 18 (as
        // `explain::tests` counts them for MX: the float formats round three ways too).
        let pairs = rows.iter().filter(|row| row["knobs"] == 2).count();
        assert_eq!(pairs, if knobs == 2 { 18 } else { 0 }, "{setting}");
        // 400 output elements per item; a row on the first 8 items is a change they rule out.
        let mut screened = 0;
        for row in rows {
            assert!(row.get("error").is_none(), "{row}");
            let items = row["items"].as_u64().expect("items");
            assert_eq!(row["elements"].as_u64(), Some(400 * items), "{row}");
            match items {
                16 => {}
                8 => {
                    screened += 1;
                    assert!(
                        row["bit_exact"].as_u64() < row["elements"].as_u64(),
                        "{row}"
                    );
                }
                _ => panic!("items compared: {row}"),
            }
        }
        assert!(screened >= rows.len() - 3, "{setting}: {screened} screened");
        // The human report says the same.
        let out = stdout(&diff_mlp(&hw, 5, &["--explain"]));
        assert!(
            out.contains(&format!(
                "the dump is concordant with `bw-default` changed by `{}`",
                setting.replace('\n', "; ")
            )),
            "{out}"
        );
    }
    // A fault: the emulator's own dump with one bit flipped.
    let hw = emulate_mlp16(&dir.join("hw_ok.safetensors"), &[]);
    let mut dump = read_tensors(&hw).expect("dump");
    let y = dump.get_mut("y").expect("output y");
    y.data[123] = f16::from_bits(f16::from_f32(y.data[123]).to_bits() ^ 1).to_f32();
    let bad = dir.join("bad.safetensors");
    write_tensors(&bad, &dump, Dtype::F16).expect("write");
    let o = diff_mlp(&bad, 5, &["--explain"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("no single change of the numerics makes the dump concordant"),
        "{out}"
    );
    assert!(!out.contains("(concordant)"), "{out}");
    // No single change comes closer than bw-default itself: no pairs are tried.
    let o = diff_mlp(&bad, 5, &["--explain", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = r["explain"].as_array().expect("explain rows");
    assert!(rows.iter().all(|row| row["knobs"] == 1), "{r}");
    // A concordant dump has nothing to explain.
    let o = diff_mlp(&hw, 5, &["--explain", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(r.get("explain").is_none(), "{r}");
}

/// `--explain=all-pairs`: a board that keeps f32 from the MVM's output through the MFUs'
/// inputs (two settings, each of which alone leaves the dump about as far as other single
/// changes do) is not found on top of the closest single change; every pair finds it, and
/// it alone.
#[test]
fn explain_all_pairs_finds_a_board_the_closest_change_does_not_lead_to() {
    let dir = scratch("explain_all_pairs");
    let setting = "mvm_output = \"fp32\"\nmfu_input = \"fp32\"";
    let board = dir.join("board.toml");
    std::fs::write(&board, format!("[numerics]\n{setting}\n")).expect("target file");
    let hw = emulate_mlp16(&dir.join("hw.safetensors"), &["--target", s(&board)]);
    let concordant = |extra: &[&str]| {
        let o = diff_mlp(&hw, 5, extra);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let rows = r["explain"].as_array().expect("explain rows").clone();
        let found: Vec<(String, u64)> = (rows.iter())
            .filter(|row| row["concordant"] == true)
            .map(|row| {
                (
                    row["change"].as_str().expect("change").into(),
                    row["knobs"].as_u64().expect("knobs"),
                )
            })
            .collect();
        (found, rows.iter().filter(|row| row["knobs"] == 2).count())
    };
    let (found, _) = concordant(&["--explain", "--json"]);
    assert!(found.is_empty(), "{found:?}");
    let out = stdout(&diff_mlp(&hw, 5, &["--explain"]));
    assert!(
        out.contains("`--explain=all-pairs` tries every pair of two changes"),
        "{out}"
    );
    // Every pair of bw-default's changes: as `explain::tests` lists them.
    let (found, pairs) = concordant(&["--explain=all-pairs", "--json"]);
    assert_eq!(found, [(setting.to_string(), 2)]);
    assert_eq!(pairs, 497);
    let out = stdout(&diff_mlp(&hw, 5, &["--explain=all-pairs"]));
    assert!(out.contains("every pair of two changes, 497 more"), "{out}");
    assert!(
        out.contains("the dump is concordant with `bw-default` changed by `mvm_output = \"fp32\"; mfu_input = \"fp32\"`"),
        "{out}"
    );
}

/// `nnpc diff --device cuda`: in a build with the feature (on a machine with a GPU) the
/// emulator's dump is concordant with the graph on the GPU; without it, the error says how
/// to get one, with exit 2 and no panic.
#[test]
fn diff_on_cuda_is_concordant_or_says_how_to_get_it() {
    let dir = scratch("cuda");
    let hw = emulate_mlp16(&dir.join("hw.safetensors"), &[]);
    let o = diff_mlp(&hw, 5, &["--device", "cuda"]);
    let err = stderr(&o);
    if cfg!(feature = "cuda") {
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(stdout(&o).contains("(concordant)"), "{}", stdout(&o));
        return;
    }
    assert_eq!(o.status.code(), Some(2), "{err}");
    let words: Vec<&str> = err.split_whitespace().filter(|w| *w != "│").collect();
    assert!(
        words
            .join(" ")
            .contains("build it with `scripts/cuda-build.sh`"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A dump of `y` (one item, `[1, 1, 4]`) in `dtype`, at `path`.
fn pass_dump(path: &Path, y: [f32; 4], dtype: Dtype) -> PathBuf {
    let t = Tensor::new(vec![1, 1, 4], y.to_vec()).expect("shape");
    write_tensors(path, &BTreeMap::from([("y".into(), t)]), dtype).expect("write");
    path.to_path_buf()
}

/// A `.npy` file of f64 values (little-endian `<f8`, C order), written by hand.
fn npy_f64(path: &Path, shape: &[usize], values: &[f64]) {
    let dims: Vec<String> = shape.iter().map(|d| format!("{d}, ")).collect();
    let header = format!(
        "{{'descr': '<f8', 'fortran_order': False, 'shape': ({}), }}\n",
        dims.concat()
    );
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    values
        .iter()
        .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
    std::fs::write(path, bytes).expect("write");
}

/// `nnpc diff PROG --hardware HW --inputs X EXTRA... --json`: the exit status and the report.
fn diff_json(prog: &Path, hw: &Path, x: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut args = vec!["diff", s(prog), "--hardware", s(hw), "--inputs", s(x)];
    args.extend(extra);
    args.push("--json");
    let o = nnpc(&args);
    let r = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    (o.status.code(), r)
}

/// A dump value that is not exactly a value of the storage format is a mismatch, never
/// rounded into one: (1) the emulator's fp16 dump of `dense_300x200` saved as f32 with one
/// element's last f32 bit flipped (a value between two fp16 values, less than half an fp16
/// ULP from the original, so it rounds back to it: reported as 1 ULP, its pattern the
/// software's); (2) an f16 dump whose 3 + 2^-9 (fp16's next value after 3) bf16 does not hold
/// (bf16's step at 3 is 2^-6), under `storage = "bf16"`: rounds to 3 (0x4040), error 2^-9;
/// (3) an f64 dump whose 3 + 3 x 2^-30 f32 does not hold (it needs 32 significant bits),
/// under `samples/targets/fp32.toml`: rounds to 3 (0x40400000), its error 3 x 2^-30 measured
/// on the f64 value, in logical and in tile layout (where an inexact pad lane is ignored).
#[test]
fn a_value_that_is_not_a_storage_value_is_a_mismatch() {
    let dir = scratch("not-storage");
    let hw = dir.join("hw.safetensors");
    let o = nnpc(&[
        "emulate",
        "samples/dense_300x200.nnp",
        "--batch",
        "3",
        "--seed",
        "5",
        "-o",
        s(&hw),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut dump = read_tensors(&hw).expect("dump");
    let y = dump.get_mut("y").expect("output y");
    assert_eq!(y.shape, vec![3, 4, 200]);
    // y[1, 2, 77]: flat 1 * 800 + 2 * 200 + 77; tile 0, lane 77.
    let flat = 800 + 400 + 77;
    let original = f16::from_f32(y.data[flat]).to_bits();
    y.data[flat] = f32::from_bits(y.data[flat].to_bits() ^ 1);
    let off = dir.join("off.safetensors");
    write_tensors(&off, &dump, Dtype::F32).expect("write");
    let o = nnpc(&[
        "diff",
        "samples/dense_300x200.nnp",
        "--hardware",
        s(&off),
        "--seed",
        "5",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(r["storage"], "fp16");
    assert_eq!(
        (r["elements"].clone(), r["bit_exact"].clone()),
        (2400.into(), 2399.into())
    );
    assert_eq!(r["concordant"], false);
    assert_eq!(r["outputs"][0]["not_storage_values"], 1);
    let m = &r["mismatches"][0];
    assert_eq!(m["index"], serde_json::json!([1, 2, 77]));
    assert_eq!(m["not_storage_value"], true);
    assert_eq!(
        (m["hardware_bits"].clone(), m["software_bits"].clone()),
        (original.into(), original.into())
    );
    assert_eq!(m["ulps"], 1);
    let o = nnpc(&[
        "diff",
        "samples/dense_300x200.nnp",
        "--hardware",
        s(&off),
        "--seed",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("2399 of 2400 bit-exact"), "{out}");
    assert!(out.contains("; 1 not a fp16 value"), "{out}");
    assert!(
        out.contains(&format!("(not a fp16 value; rounds to 0x{original:04X})")),
        "{out}"
    );
    assert!(
        out.contains("bit-exact: 2399 of 2400 (NOT concordant)"),
        "{out}"
    );

    // (2) f16 values that bf16 does not hold.
    let prog = pass_through(&dir);
    let x = pass_inputs(&dir, [1.0, 0.5, -2.0, 3.0]);
    let bf16 = dir.join("bf16.toml");
    std::fs::write(&bf16, "name = \"bf16\"\n[numerics]\nstorage = \"bf16\"\n").expect("write");
    let board = [1.0, 0.5, -2.0, 3.0 + 2f32.powi(-9)];
    let hw16 = pass_dump(&dir.join("hw16.safetensors"), board, Dtype::F16);
    let (code, r) = diff_json(&prog, &hw16, &x, &["--target", s(&bf16)]);
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(
        (r["storage"].clone(), r["bit_exact"].clone()),
        ("bf16".into(), 3.into())
    );
    let (y, m) = (&r["outputs"][0], &r["mismatches"][0]);
    assert_eq!(y["not_storage_values"], 1);
    assert_eq!(y["max_abs_err"], 2f64.powi(-9));
    assert_eq!(m["index"], serde_json::json!([0, 0, 3]));
    assert_eq!(m["not_storage_value"], true);
    assert_eq!(
        (m["hardware_bits"].clone(), m["software_bits"].clone()),
        (0x4040.into(), 0x4040.into())
    );
    // The same values as the software's, in an f16 dump: concordant.
    let ok16 = pass_dump(
        &dir.join("ok16.safetensors"),
        [1.0, 0.5, -2.0, 3.0],
        Dtype::F16,
    );
    let (code, r) = diff_json(&prog, &ok16, &x, &["--target", s(&bf16)]);
    assert_eq!(
        (code, r["concordant"].clone()),
        (Some(0), true.into()),
        "{r}"
    );

    // (3) f64 values that f32 does not hold, under fp32 storage: two items, the wide value
    // in item 1 (logical flat index 7; in tiles, 128 + 3), and in tiles a pad lane of item 0
    // (flat 5) that f32 does not hold either, ignored.
    let fp32 = ["--target", "samples/targets/fp32.toml"];
    std::fs::create_dir_all(dir.join("two")).expect("dir");
    let x2 = dir.join("two").join("x.npy");
    let xs = [1.0, 0.5, -2.0, 3.0, 1.0, 0.5, -2.0, 3.0];
    let t = Tensor::new(vec![2, 1, 4], xs.to_vec()).expect("shape");
    write_tensors(&x2, &BTreeMap::from([("x".into(), t)]), Dtype::F32).expect("write");
    let wide = 3.0 + 3.0 * 2f64.powi(-30);
    let mut logical = xs.map(f64::from);
    logical[7] = wide;
    let hw64 = dir.join("y.npy");
    npy_f64(&hw64, &[2, 1, 4], &logical);
    let mut lanes = vec![0.0; 256];
    lanes[..4].copy_from_slice(&logical[..4]);
    lanes[128..132].copy_from_slice(&logical[4..]);
    lanes[5] = 0.1;
    let tiles = dir.join("tiles").join("y.npy");
    std::fs::create_dir_all(dir.join("tiles")).expect("dir");
    npy_f64(&tiles, &[2, 1, 1, 128], &lanes);
    for (dump, layout) in [(&hw64, "logical"), (&tiles, "tiles")] {
        let (code, r) = diff_json(&prog, dump, &x2, &[fp32[0], fp32[1], "--layout", layout]);
        assert_eq!(code, Some(1), "{layout}: {r}");
        assert_eq!(
            (r["storage"].clone(), r["bit_exact"].clone()),
            ("fp32".into(), 7.into()),
            "{layout}"
        );
        let (y, m) = (&r["outputs"][0], &r["mismatches"][0]);
        assert_eq!(y["not_storage_values"], 1, "{layout}");
        assert_eq!(y["max_abs_err"], 3.0 * 2f64.powi(-30), "{layout}");
        assert_eq!(m["index"], serde_json::json!([1, 0, 3]), "{layout}");
        assert_eq!((m["tile"].clone(), m["lane"].clone()), (0.into(), 3.into()));
        assert_eq!(m["hardware_f64"], wide, "{layout}");
        assert_eq!(m["hardware"], 3.0, "{layout}");
        let bits = 3f32.to_bits();
        assert_eq!(
            (m["hardware_bits"].clone(), m["software_bits"].clone()),
            (bits.into(), bits.into())
        );
        assert_eq!(m["ulps"], 1, "{layout}");
    }
}

/// A single `.npy` dump is the program's output when the program has one, whatever the
/// file's name (`board.npy` for output `y`); one flipped bit in it is found. A program with
/// two outputs cannot take a single `.npy`: exit 2, naming both.
#[test]
fn a_single_npy_dump_is_the_programs_one_output() {
    let dir = scratch("one-npy");
    let board = dir.join("board.npy");
    let emulate = nnpc(&[
        "emulate",
        "samples/dense_300x200.nnp",
        "--batch",
        "2",
        "--seed",
        "5",
        "-o",
        s(&board),
    ]);
    assert!(emulate.status.success(), "{}", stderr(&emulate));
    let diff = |hw: &Path| {
        nnpc(&[
            "diff",
            "samples/dense_300x200.nnp",
            "--hardware",
            s(hw),
            "--seed",
            "5",
        ])
    };
    let o = diff(&board);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.contains("batch 2"), "{out}");
    assert!(
        out.contains("bit-exact: 1600 of 1600 (concordant)"),
        "{out}"
    );
    // The file's one tensor (named `board`) with one bit flipped, in `flipped.npy`.
    let mut dump = read_tensors(&board).expect("dump");
    let mut t = dump.remove("board").expect("named by the file");
    t.data[5] = f16::from_bits(f16::from_f32(t.data[5]).to_bits() ^ 1).to_f32();
    let flipped = dir.join("flipped.npy");
    write_tensors(&flipped, &BTreeMap::from([("y".into(), t)]), Dtype::F16).expect("write");
    let o = diff(&flipped);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("bit-exact: 1599 of 1600 (NOT concordant)"),
        "{}",
        stdout(&o)
    );

    // Two outputs.
    let two = dir.join("two.nnp");
    let text = "input x : [1, 4]\ninput w : [1, 4]\noutput y : [1, 4]\noutput z : [1, 4]\n\n\
                v_rd netq\nv_wr netq\nend_chain\n\nv_rd netq\nv_wr netq\nend_chain\n";
    std::fs::write(&two, text).expect("write");
    let o = nnpc(&["diff", s(&two), "--hardware", s(&board)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = message(&o);
    assert!(err.contains("board.npy` is a single .npy file"), "{err}");
    assert!(
        err.contains("the program has 2 outputs (`y`, `z`)"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// Statistics that say what they cannot measure (`y = x` on fp16 storage, x = [1, 2, 3, 4]):
/// +inf against 1 (0x7C00 against 0x3C00, 0x4000 ULPs apart) is an infinite error, QSNR
/// -inf dB; NaN against 1 leaves the error undefined; equal outputs have QSNR +inf. JSON
/// carries each as a string, never `null`.
#[test]
fn non_finite_mismatches_have_statistics_that_say_so() {
    let dir = scratch("non-finite");
    let prog = pass_through(&dir);
    let x = pass_inputs(&dir, [1.0, 2.0, 3.0, 4.0]);
    let dump =
        |name: &str, first: f32| pass_dump(&dir.join(name), [first, 2.0, 3.0, 4.0], Dtype::F32);
    let text = |hw: &Path| {
        let o = nnpc(&["diff", s(&prog), "--hardware", s(hw), "--inputs", s(&x)]);
        stdout(&o)
    };

    let inf = dump("inf.safetensors", f32::INFINITY);
    let (code, r) = diff_json(&prog, &inf, &x, &[]);
    assert_eq!(code, Some(1), "{r}");
    let (y, m) = (&r["outputs"][0], &r["mismatches"][0]);
    assert_eq!(
        (y["inf_mismatches"].clone(), y["nan_mismatches"].clone()),
        (1.into(), 0.into())
    );
    assert_eq!(
        (y["max_abs_err"].clone(), y["max_rel_err"].clone()),
        ("inf".into(), "inf".into())
    );
    assert_eq!(y["qsnr_db"], "-inf");
    assert_eq!(
        (m["hardware"].clone(), m["software"].clone()),
        ("inf".into(), 1.0.into())
    );
    assert_eq!(
        (m["hardware_bits"].clone(), m["ulps"].clone()),
        (0x7C00.into(), 0x4000.into())
    );
    let out = text(&inf);
    assert!(
        out.contains("3 of 4 bit-exact, max 16384 ULP, max abs err inf, QSNR -inf dB; 1 infinity against another value"),
        "{out}"
    );

    let nan = dump("nan.safetensors", f32::NAN);
    let (code, r) = diff_json(&prog, &nan, &x, &[]);
    assert_eq!(code, Some(1), "{r}");
    let (y, m) = (&r["outputs"][0], &r["mismatches"][0]);
    assert_eq!(
        (y["inf_mismatches"].clone(), y["nan_mismatches"].clone()),
        (0.into(), 1.into())
    );
    for field in ["max_abs_err", "max_rel_err", "qsnr_db"] {
        assert_eq!(y[field], "nan", "{field}");
    }
    assert_eq!(
        (m["hardware"].clone(), m["ulps"].clone()),
        ("nan".into(), serde_json::Value::Null)
    );
    let out = text(&nan);
    assert!(
        out.contains("max abs err undefined, QSNR undefined; 1 NaN against a number"),
        "{out}"
    );

    let equal = dump("equal.safetensors", 1.0);
    let (code, r) = diff_json(&prog, &equal, &x, &[]);
    assert_eq!(code, Some(0), "{r}");
    let y = &r["outputs"][0];
    assert_eq!(
        (y["max_abs_err"].clone(), y["qsnr_db"].clone()),
        (0.0.into(), "inf".into())
    );
    assert!(text(&equal).contains("max abs err 0.000e0, QSNR inf dB\n"));
}

/// A board's NaN need not be the emulator's canonical one, in a trace as in the outputs
/// (docs/diff.md, "What equal means"). `y = (x * c) - (x * c)` with x = [1000, 1, 2, 3] and
/// c = [1000, 1, 1, 1], by hand on fp16 storage: 1000 x 1000 = 10^6 overflows fp16 (largest
/// 65504) to +inf, so lane 0 is inf - inf = NaN (0x7E00, canonical) and lanes 1..3 are 0.
/// The hardware's dump and trace carry the NaN as 0x7E01 (another payload) and 0xFE00
/// (negative): bit-exact and every record identical, exit 0. A lane of 0x10000 is no fp16
/// pattern: exit 2, naming the record and the lane. A not-storage-value count above 1 reads
/// "N not fp16 values", and an f64 dump value of 1e300 prints as `1e300`, not 301 digits.
#[test]
fn a_trace_compares_nans_as_the_outputs_do() {
    let dir = scratch("trace-nan");
    let prog = dir.join("nan.nnp");
    std::fs::write(
        &prog,
        "input x : [1, 4]\nvector c : [4] at mulvrf0[0]\noutput y : [1, 4]\n\
         v_rd netq\nvv_mul mulvrf0[c]\nv_wr asvrf0[1]\nend_chain\n\
         v_rd asvrf0[1]\nvv_a_sub_b asvrf0[1]\nv_wr netq\nend_chain\n",
    )
    .expect("write");
    let x = pass_inputs(&dir, [1000.0, 1.0, 2.0, 3.0]);
    let c = dir.join("c.safetensors");
    let t = Tensor::new(vec![4], vec![1000.0, 1.0, 1.0, 1.0]).expect("shape");
    write_tensors(&c, &BTreeMap::from([("c".into(), t)]), Dtype::F32).expect("write");
    let (hw, tr) = (dir.join("hw.safetensors"), dir.join("hw.jsonl"));
    let data = ["--inputs", s(&x), "--weights", s(&c)];
    let mut args = vec!["emulate", s(&prog), "-o", s(&hw), "--trace", s(&tr)];
    args.extend(data);
    let o = nnpc(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut records = read_trace(&tr).expect("trace");
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].bits[..4], [0x7C00, 0x3C00, 0x4000, 0x4200]);
    assert_eq!(records[1].bits[..4], [0x7E00, 0, 0, 0]);

    // The dump's NaN with another payload: bit-exact.
    let board = dir.join("board.safetensors");
    let y = f32::from_bits(0x7FC0_2000); // f16 0x7E01 widened
    let y = Tensor::new(vec![1, 1, 4], vec![y, 0.0, 0.0, 0.0]).expect("shape");
    write_tensors(&board, &BTreeMap::from([("y".into(), y)]), Dtype::F16).expect("write");
    let diff = |trace: &Path, json: bool| {
        let mut args = vec![
            "diff",
            s(&prog),
            "--hardware",
            s(&board),
            "--trace",
            s(trace),
        ];
        args.extend(data);
        if json {
            args.push("--json");
        }
        nnpc(&args)
    };
    for nan in [0x7E01, 0xFE00] {
        records[1].bits[0] = nan;
        let path = dir.join(format!("nan-{nan:X}.jsonl"));
        write_trace(&path, &records).expect("write");
        let o = diff(&path, true);
        assert_eq!(o.status.code(), Some(0), "{nan:#X}: {}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(r["concordant"], true);
        assert_eq!(
            (
                r["trace"]["records"].clone(),
                r["trace"]["identical"].clone()
            ),
            (2.into(), 2.into())
        );
    }
    // A number where the software has NaN still differs.
    records[1].bits[0] = 0x3C00;
    let path = dir.join("one.jsonl");
    write_trace(&path, &records).expect("write");
    assert_eq!(diff(&path, false).status.code(), Some(1));
    // No fp16 pattern.
    records[1].bits[0] = 0x1_0000;
    let path = dir.join("wide.jsonl");
    write_trace(&path, &records).expect("write");
    let o = diff(&path, false);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let err = message(&o);
    assert!(
        err.contains("record 1 of batch item 0")
            && err.contains("holds 0x10000 in lane 0")
            && err.contains("not a bit pattern of the storage format `fp16` (16 bits)"),
        "{err}"
    );

    // Two values that are not fp16 values, one of them 1e300 (an f64 dump).
    let px = pass_inputs(&dir, [1.0, 2.0, 3.0, 4.0]);
    let pass = pass_through(&dir);
    let far = dir.join("far.npy");
    npy_f64(&far, &[1, 1, 4], &[1e300, 2.0 + 1e-9, 3.0, 4.0]);
    let o = nnpc(&["diff", s(&pass), "--hardware", s(&far), "--inputs", s(&px)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("; 2 not fp16 values"), "{out}");
    assert!(
        out.contains("hardware 1e300 (not a fp16 value; rounds to 0x7C00) software 1 (0x3C00)"),
        "{out}"
    );
}
