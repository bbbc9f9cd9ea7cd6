//! The compiled graph's file (docs/swgraph.md, "The graph's file"): a graph read back from its JSON is
//! the graph compiled, pads' bits included, and runs to the same output bits (every sample on
//! every target it names, and random programs); files of version 2 (checked in, written by the
//! previous writer) still load and run as their firmware emulates; the file's bytes per
//! executed instruction are bounded; a bad file is a clear error, never a panic.

mod common;

use common::root;
use common::samples::{Firmware, samples};
use nnp_lowering::depgraph::DepGraph;
use nnp_lowering::swgraph::{GraphError, Op, Roots, SWGRAPH_VERSION, SwGraph, compile};
use nnp_progen::{DataConfig, GenConfig, generate, host_data};
use nnp_runtime::emulator::{EmuOptions, emulate};
use nnp_runtime::exec::{ExecOptions, Session};
use nnp_runtime::host::{HostData, Tensor};
use nnpc::grammar::{SourceFile, Target, check};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Items per run.
const BATCH: usize = 2;

/// Each output's shape and bit patterns.
type Bits = BTreeMap<String, (Vec<usize>, Vec<u32>)>;

fn program(name: &str, text: &str, toml: &str) -> nnpc::Program {
    let target = Target::from_toml(toml, "t.toml").unwrap_or_else(|e| panic!("{name}: {e}"));
    let src = Arc::new(SourceFile::new(name, text));
    check(src, Some(target))
        .unwrap_or_else(|e| panic!("{name}: {e:?}"))
        .program
}

/// The graph's outputs on `data`, or the run's error.
fn run(g: &SwGraph, data: &HostData) -> Result<Bits, String> {
    let run = Session::new(g, &ExecOptions::default())
        .and_then(|mut s| s.run(data))
        .map_err(|e| e.to_string())?;
    Ok(bits(&run.outputs))
}

/// Each output's shape and bits.
fn bits<'a>(outputs: impl IntoIterator<Item = (&'a String, &'a Tensor)>) -> Bits {
    outputs
        .into_iter()
        .map(|(name, t)| {
            let bits = t.data.iter().map(|v| v.to_bits()).collect();
            (name.clone(), (t.shape.clone(), bits))
        })
        .collect()
}

/// Every f64 of a graph as bits (graph equality compares them as numbers, `-0.0 == 0.0`).
fn pads(g: &SwGraph) -> Vec<u64> {
    let nodes = g.nodes.iter().filter_map(|n| match n.op {
        Op::PadToTiles { pad, .. } => Some(pad.to_bits()),
        _ => None,
    });
    nodes
        .chain(g.decls.iter().map(|d| d.pad.to_bits()))
        .collect()
}

/// `g` written and read back: the same graph, the same bits on a run.
fn round_trip(label: &str, g: &SwGraph, data: &HostData) {
    let back = SwGraph::from_json(&g.to_json()).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(back == *g, "{label}: the graph read back differs");
    assert_eq!(pads(&back), pads(g), "{label}: pads");
    assert_eq!(run(&back, data), run(g, data), "{label}: the runs differ");
}

#[test]
fn sample_graphs_read_back_run_bit_identically() {
    for Firmware {
        name,
        text,
        targets,
    } in samples()
    {
        for toml in targets {
            let p = program(&name, &text, &toml);
            let label = format!("{name} on {}", p.target.name);
            let data = host_data(&p, BATCH, 1, &DataConfig::default());
            for roots in [Roots::OutputsAndWrites, Roots::Outputs] {
                let g = compile(&p, roots).unwrap_or_else(|e| panic!("{label}: {e}"));
                round_trip(&label, &g, &data);
            }
        }
    }
}

/// Random programs (`nnp_progen`: random pads, formats of every family, many targets).
#[test]
fn random_graphs_read_back_run_bit_identically() {
    let cfg = GenConfig::default();
    for seed in 0..40 {
        let generated = generate(seed, &cfg);
        let p = program("gen.nnp", &generated.source, &generated.target_toml);
        let g = compile(&p, Roots::OutputsAndWrites).unwrap_or_else(|e| panic!("{seed}: {e}"));
        let data = host_data(&p, BATCH, seed, &DataConfig::default());
        round_trip(&format!("seed {seed}"), &g, &data);
    }
}

/// A table file named by unary nodes is written once (in `tables`) and read back.
#[test]
fn table_files_read_back() {
    let text = std::fs::read_to_string(root().join("samples/lstm.nnp")).expect("lstm");
    let p = program("lstm.nnp", &text, "name = \"bw-default\"\n");
    let mut g = compile(&p, Roots::Outputs).expect("compiles");
    for n in &mut g.nodes {
        if let Op::Unary { table, .. } = &mut n.op {
            *table = Some("/tables/\"odd\" name.bin".into());
        }
    }
    let text = g.to_json();
    assert_eq!(text.matches("odd").count(), 1, "one entry in `tables`");
    let back = SwGraph::from_json(&text).expect("reads back");
    assert!(back == g);
}

/// Files of version 2, written by the writer this format replaced (`tests/fixtures/
/// swgraph-v2/`: `nnpc compile` at the last commit that wrote them), load and run as their
/// firmware emulates, bit for bit; written again they are of this version.
#[test]
fn version_2_files_still_load_and_run_as_their_firmware() {
    let dir = root().join("tests/fixtures/swgraph-v2");
    let toml = |name: &str| common::samples::target_toml(name);
    let nonfinite = std::fs::read_to_string(dir.join("nonfinite-error.toml")).expect("toml");
    let cases = [
        (
            "softmax_classifier.swg.json",
            "softmax_classifier.nnp",
            toml("bw-default"),
            false,
        ),
        (
            "mixed_precision.mx-fp8.swg.json",
            "mixed_precision.nnp",
            toml("mx-fp8"),
            false,
        ),
        (
            "mlp2_relu.nonfinite-error.swg.json",
            "mlp2_relu.nnp",
            nonfinite,
            true,
        ),
    ];
    for (file, sample, toml, checked) in cases {
        let text = std::fs::read_to_string(dir.join(file)).expect("fixture");
        assert!(text.contains("\"version\": 2,"), "{file} is of version 2");
        let g = SwGraph::from_json(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(g.version, SWGRAPH_VERSION, "{file}");
        assert_eq!(!g.checks.is_empty(), checked, "{file}: non-finite checks");
        assert!(!g.writes.is_empty(), "{file}: write records");
        let firmware = std::fs::read_to_string(root().join("samples").join(sample)).expect("nnp");
        let p = program(sample, &firmware, &toml);
        // Data with and without NaN and infinity (under `nonfinite = "error"` a run may
        // stop, where and as the emulator does).
        let finite = DataConfig {
            nonfinite: 0.0,
            ..DataConfig::default()
        };
        for (seed, cfg) in [(7, finite), (8, DataConfig::default())] {
            let data = host_data(&p, BATCH, seed, &cfg);
            let hw = emulate(&p, &data, &EmuOptions::default())
                .map(|emu| bits(&emu.outputs))
                .map_err(|e| e.to_string());
            assert!(checked || hw.is_ok(), "{file}: {hw:?}");
            assert_eq!(run(&g, &data), hw, "{file}: graph against the emulator");
            round_trip(file, &g, &data);
        }
        let again = g.to_json();
        assert!(again.contains(&format!("\"version\": {SWGRAPH_VERSION},")));
    }
}

/// The README's LSTM at `steps` time steps: its graph file's bytes and executed instructions
/// (the dependency graph's nodes, one per instruction and iteration, as `nnpc graph` counts).
fn lstm_file(steps: usize) -> (usize, usize, SwGraph) {
    let text = std::fs::read_to_string(root().join("samples/lstm.nnp")).expect("lstm");
    let text = text.replacen("let T = 4\n", &format!("let T = {steps}\n"), 1);
    let p = program("lstm.nnp", &text, "name = \"bw-default\"\n");
    let instructions = DepGraph::build(&p).node_count();
    let g = compile(&p, Roots::OutputsAndWrites).expect("compiles");
    (g.to_json().len(), instructions, g)
}

/// An LSTM step is 46 executed instructions, which the graph keeps as 31 nodes and 11 write
/// records. At 10^4 instructions (node numbers of 4 digits) a node's row with its indent is
/// at most 49 bytes (a product's: `["tiled_mat_vec",6698,58,2,2,"exact",1,1,0],`, 8 numbers;
/// a binary op's 34) and a write record's at most 52 (10 fields), so a step takes at most
/// (31 * 49 + 11 * 52) / 46 = 45.5 bytes an instruction. The file grows with the program
/// only by the digits of its numbers: at ten times the steps, one digit more per number.
#[test]
fn graph_files_take_a_bounded_number_of_bytes_per_instruction() {
    let (bytes, instructions, g) = lstm_file(217);
    let steps = 217;
    assert_eq!(instructions, 46 * steps);
    let per_step = |n: usize| (n as f64 / steps as f64).round() as usize;
    assert_eq!(per_step(g.nodes.len()), 31);
    assert_eq!(per_step(g.writes.len()), 11);
    let per_instruction = bytes as f64 / instructions as f64;
    assert!(
        per_instruction < 45.5,
        "{per_instruction} bytes an instruction"
    );
    let (long, long_instructions, _) = lstm_file(10 * steps);
    let long_per_instruction = long as f64 / long_instructions as f64;
    assert!(
        long_per_instruction < per_instruction * 1.15,
        "{long_per_instruction} bytes an instruction at 10x the steps, {per_instruction} at 1x"
    );
}

/// A compiled sample's JSON, and its text parsed.
fn sample_json() -> (String, serde_json::Value) {
    let text = std::fs::read_to_string(root().join("samples/mlp2_relu.nnp")).expect("mlp");
    let p = program("mlp2_relu.nnp", &text, "name = \"bw-default\"\n");
    let json = compile(&p, Roots::OutputsAndWrites)
        .expect("compiles")
        .to_json();
    let value = serde_json::from_str(&json).expect("json");
    (json, value)
}

/// The first node row of `kind`.
fn row_of<'a>(v: &'a mut serde_json::Value, kind: &str) -> &'a mut Vec<serde_json::Value> {
    let nodes = v["nodes"].as_array_mut().expect("nodes");
    let row = nodes
        .iter_mut()
        .find(|n| n[0] == kind)
        .expect("a node of the kind");
    row.as_array_mut().expect("a row")
}

fn error(text: &str) -> GraphError {
    match SwGraph::from_json(text) {
        Ok(_) => panic!("accepted: {}", &text[..text.len().min(200)]),
        Err(e) => e,
    }
}

#[test]
fn truncated_files_and_other_versions_are_clear_errors() {
    let (json, _) = sample_json();
    for cut in (1..json.len()).step_by(json.len() / 23) {
        let e = error(&json[..cut]);
        assert!(matches!(e, GraphError::Json(_)), "cut at {cut}: {e}");
        assert!(
            e.to_string().contains("EOF while parsing"),
            "cut at {cut}: {e}"
        );
    }
    for version in ["99", "1", "0"] {
        let text = json.replacen(
            &format!("\"version\": {SWGRAPH_VERSION}"),
            &format!("\"version\": {version}"),
            1,
        );
        let e = error(&text);
        assert!(matches!(e, GraphError::Version { .. }), "{e}");
        assert!(e.to_string().contains("reads it and version 2"), "{e}");
        let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
        assert!(help.is_some_and(|h| h.contains("nnpc compile")));
    }
}

#[test]
fn rows_of_the_wrong_shape_are_clear_errors() {
    type Edit = fn(&mut serde_json::Value);
    let cases: [(Edit, &str); 11] = [
        (
            |v| row_of(v, "round")[1] = "x".into(),
            "invalid type: string \"x\"",
        ),
        (
            |v| row_of(v, "round")[2] = 99.into(),
            "`format`: format 99 is not in `formats`",
        ),
        (
            |v| row_of(v, "round")[2] = 1.into(),
            "format 1 (`bfp(mant = 8",
        ),
        (
            |v| row_of(v, "round")[0] = "frob".into(),
            "unknown variant `frob`",
        ),
        (
            |v| row_of(v, "round").push(0.into()),
            "has more fields than its kind's",
        ),
        (|v| drop(row_of(v, "round").pop()), "has no `format`"),
        (
            |v| row_of(v, "unary")[1] = "cosh".into(),
            "unknown unary op `cosh`",
        ),
        (
            |v| row_of(v, "unary").push(0.into()),
            "table 0 is not in `tables`",
        ),
        (
            |v| v["writes"][0][6] = 1.into(),
            "write 0: `storage`: format 1",
        ),
        (
            |v| drop(v.as_object_mut().map(|o| o.remove("nodes"))),
            "missing field `nodes`",
        ),
        (
            |v| v["native"] = 0.into(),
            "native dimension 0 is out of range",
        ),
    ];
    let (_, value) = sample_json();
    for (edit, says) in cases {
        let mut v = value.clone();
        edit(&mut v);
        let e = error(&v.to_string()).to_string();
        assert!(e.contains(says), "{says}: {e}");
    }
    // A row reading a later node is refused by validation, naming the node.
    let mut v = value.clone();
    let last = v["nodes"].as_array().map_or(0, Vec::len);
    row_of(&mut v, "round")[1] = last.into();
    let e = error(&v.to_string());
    assert!(matches!(e, GraphError::Node { op: "round", .. }), "{e}");
    assert!(
        e.to_string().contains("which is not an earlier node"),
        "{e}"
    );
    // A key twice, and an unknown key.
    let (json, _) = sample_json();
    let twice = json.replacen(
        "\"native\": 128,",
        "\"native\": 128,\n  \"native\": 128,",
        1,
    );
    assert!(
        error(&twice)
            .to_string()
            .contains("duplicate field `native`")
    );
    let unknown = json.replacen("\"native\": 128,", "\"natives\": 128,", 1);
    assert!(
        error(&unknown)
            .to_string()
            .contains("unknown field `natives`")
    );
}

/// An error in a row names the file's line, whatever the list's place in the file.
#[test]
fn errors_in_rows_name_the_line_of_the_file() {
    let (json, _) = sample_json();
    let start = json.find("\"nodes\": [").expect("nodes");
    let line = json[..start].matches('\n').count() + 2;
    let first = json[start..]
        .find("\n    [")
        .map(|k| start + k + 1)
        .expect("a row");
    let end = first + json[first..].find('\n').expect("a line");
    let bad = format!("{}    [\"zero\",\"x\"],{}", &json[..first], &json[end..]);
    let e = error(&bad).to_string();
    assert!(
        e.contains(&format!("at line {line} column")),
        "line {line}: {e}"
    );
}
