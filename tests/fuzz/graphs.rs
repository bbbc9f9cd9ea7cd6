//! Compiled graphs: every sample compiled for every target it names (`nnpc compile`'s JSON, made
//! here so it tracks the format) and `corpus/graphs/*.json`, mutated at the JSON level (numbers,
//! ids, shapes, formats and strings changed; fields and nodes dropped, duplicated or swapped;
//! a field repeated in the text; a byte flipped). `SwGraph::from_json` either refuses with an
//! error or gives a graph that runs (as `nnpc run GRAPH` runs it) to its outputs or to an error,
//! never a panic; an unmutated graph's run is the firmware's emulation, bit for bit.

use super::common::samples::{Firmware, samples};
use super::engine::{Budget, Input, Verdict, corpus, flip_bit, fuzz, vary};
use nnp_lowering::swgraph::{Roots, SwGraph, Ty, compile, optimize};
use nnp_progen::{DataConfig, Rng, host_data};
use nnp_runtime::emulator::{EmuOptions, emulate};
use nnp_runtime::exec::{ExecOptions, Session};
use nnpc::grammar::{SourceFile, Target, check};
use serde_json::Value;
use std::sync::Arc;

/// Items per run.
const BATCH: usize = 2;
/// A valid mutant whose values hold more elements per item than this is not run here (its
/// run would be correct but slow, or need more memory than a test may take).
const MAX_RUN_ELEMENTS: u64 = 1 << 22;

/// A graph's JSON text.
struct Graph {
    text: String,
}

impl Input for Graph {
    fn bytes(&self) -> Vec<u8> {
        self.text.clone().into_bytes()
    }
    fn ext(&self) -> &'static str {
        "swg.json"
    }
}

/// Every sample checked and compiled (writes kept, as `nnpc compile` does by default) on every
/// target it names: (label, program, graph).
fn compiled() -> Vec<(String, nnpc::Program, SwGraph)> {
    let mut out = Vec::new();
    for Firmware {
        name,
        text,
        targets,
    } in samples()
    {
        for toml in targets {
            let target = Target::from_toml(&toml, "t.toml").unwrap_or_else(|e| panic!("{e}"));
            let label = format!("{name} on {}", target.name);
            let src = Arc::new(SourceFile::new(name.as_str(), text.as_str()));
            let program = check(src, Some(target))
                .unwrap_or_else(|e| panic!("{label}: {e:?}"))
                .program;
            let graph = compile(&program, Roots::OutputsAndWrites)
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            out.push((label, program, graph));
        }
    }
    out
}

/// Seeds: the compiled samples' JSON, then the corpus's graphs.
fn seeds() -> Vec<(String, Graph)> {
    let mut out: Vec<(String, Graph)> = compiled()
        .into_iter()
        .map(|(label, _, g)| (label, Graph { text: g.to_json() }))
        .collect();
    for (name, bytes) in corpus("graphs", "json") {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        out.push((name, Graph { text }));
    }
    out
}

#[test]
fn compiled_sample_graphs_run_as_their_firmware() {
    for (label, program, graph) in compiled() {
        let g = SwGraph::from_json(&graph.to_json()).unwrap_or_else(|e| panic!("{label}: {e}"));
        let data = host_data(&program, BATCH, 1, &DataConfig::default());
        let emu = emulate(&program, &data, &EmuOptions::default())
            .unwrap_or_else(|e| panic!("{label}: the emulator: {e}"));
        let g = optimize(&g, Roots::Outputs);
        let run = Session::new(&g, &ExecOptions::default())
            .and_then(|mut s| s.run(&data))
            .unwrap_or_else(|e| panic!("{label}: the graph: {e}"));
        assert_eq!(emu.outputs.len(), run.outputs.len(), "{label}");
        for (name, hw) in &emu.outputs {
            let sw = &run.outputs[name];
            assert_eq!(hw.shape, sw.shape, "{label}: `{name}`");
            let bits = |t: &nnp_runtime::host::Tensor| -> Vec<u32> {
                t.data.iter().map(|v| v.to_bits()).collect()
            };
            assert!(bits(hw) == bits(sw), "{label}: `{name}` differs");
        }
    }
}

#[test]
fn graph_mutants_are_refused_or_run() {
    let seeds = seeds();
    let make = |_seed: u64, rng: &mut Rng| {
        let (_, base) = rng.pick(&seeds);
        let text = match serde_json::from_str::<Value>(&base.text) {
            Ok(mut v) => {
                for _ in 0..rng.range(1, 3) {
                    mutate(&mut v, rng);
                }
                serde_json::to_string_pretty(&v).unwrap_or_default()
            }
            Err(_) => base.text.clone(),
        };
        Graph {
            text: mutate_text(text, rng),
        }
    };
    fuzz("graphs", &Budget::from_env(3000), &seeds, make, exercise);
}

/// The property on one text: refused with an error, or a run to outputs or to an error.
fn exercise(input: &Graph, seed: u64) -> Result<Verdict, String> {
    let g = match SwGraph::from_json(&input.text) {
        Ok(g) => g,
        Err(e) => return clear(&e.to_string()).map(|()| "refused by from_json"),
    };
    if elements(&g) > MAX_RUN_ELEMENTS {
        return Ok("valid, too large to run here");
    }
    // The graph's own host side (its firmware's declarations and native dimension).
    let data = host_data(&g, BATCH, seed, &DataConfig::default());
    let g = optimize(&g, Roots::Outputs);
    let opts = ExecOptions {
        products_first: seed % 2 == 1,
        ..ExecOptions::default()
    };
    match Session::new(&g, &opts).and_then(|mut s| s.run(&data)) {
        Ok(_) => Ok("ran"),
        Err(e) => clear(&e.to_string()).map(|()| "refused at run time"),
    }
}

/// An error a user can read: some text, no backtrace.
fn clear(message: &str) -> Result<(), String> {
    if message.trim().is_empty() || message.to_lowercase().contains("backtrace") {
        return Err(format!("unclear error: {message:?}"));
    }
    Ok(())
}

/// Elements per item of every value and declaration of `g`, saturating.
fn elements(g: &SwGraph) -> u64 {
    let n = g.native as u64;
    let nodes = g.nodes.iter().map(|node| match &node.ty {
        Ty::Vector { tiles } => u64::from(*tiles).saturating_mul(n),
        Ty::TileStack { tiles } => u64::from(*tiles).saturating_mul(n * n),
        Ty::Logical { shape } => product(shape),
        Ty::None => 0,
    });
    let decls = g.decls.iter().map(|d| product(&d.shape));
    nodes.chain(decls).fold(0, u64::saturating_add)
}

fn product(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |p, &d| p.saturating_mul(d as u64))
}

/// JSON pointers to every value in `v` (the root included).
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let key = k.replace('~', "~0").replace('/', "~1");
                pointers(item, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// One edit of a value somewhere in `root`.
fn mutate(root: &mut Value, rng: &mut Rng) {
    let mut ptrs = Vec::new();
    pointers(root, String::new(), &mut ptrs);
    let at = rng.pick(&ptrs).clone();
    // Values of the same document to put elsewhere: ids, shapes, formats, whole nodes.
    let other = root
        .pointer(rng.pick(&ptrs).as_str())
        .cloned()
        .unwrap_or(Value::Null);
    let Some(v) = root.pointer_mut(&at) else {
        return;
    };
    if rng.chance(0.15) {
        *v = match rng.below(6) {
            0 => Value::Null,
            1 => Value::from(0),
            2 => Value::from("x"),
            3 => Value::Array(Vec::new()),
            4 => Value::Object(Default::default()),
            _ => other,
        };
        return;
    }
    match v {
        Value::Number(n) => {
            let text = match rng.below(4) {
                0 => rng
                    .pick(&["-1", "0.5", "-9223372036854775808", "1e300", "-0"])
                    .to_string(),
                1 if other.is_number() => other.to_string(),
                _ => vary(n.as_u64().unwrap_or(0), rng),
            };
            *v = serde_json::from_str(&text).unwrap_or(Value::Null);
        }
        Value::String(s) => {
            *s = match rng.below(3) {
                0 => rng
                    .pick(&["", "f32", "bf16", "fp16", "x", "\u{0}", "relu"])
                    .to_string(),
                _ => other
                    .as_str()
                    .map_or_else(|| s.clone() + "x", str::to_string),
            };
        }
        Value::Bool(b) => *b = !*b,
        Value::Null => *v = Value::from(1),
        Value::Array(items) if !items.is_empty() => {
            let i = rng.below(items.len() as u64) as usize;
            let j = rng.below(items.len() as u64) as usize;
            match rng.below(5) {
                0 => {
                    items.remove(i);
                }
                1 => items.insert(i, items[j].clone()),
                2 => items.swap(i, j),
                3 => items.truncate(i),
                _ => items.push(other),
            }
        }
        Value::Array(items) => items.push(other),
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            if keys.is_empty() || rng.chance(0.3) {
                map.insert("extra".into(), other);
            } else {
                map.remove(rng.pick(&keys));
            }
        }
    }
}

/// Sometimes an edit of the text itself: a line repeated (a field given twice) or deleted, or
/// a bit flipped.
fn mutate_text(text: String, rng: &mut Rng) -> String {
    match rng.below(8) {
        0 | 1 => {
            let mut lines: Vec<&str> = text.lines().collect();
            if lines.is_empty() {
                return text;
            }
            let i = rng.below(lines.len() as u64) as usize;
            if rng.chance(0.7) {
                lines.insert(i, lines[i]);
            } else {
                lines.remove(i);
            }
            lines.join("\n")
        }
        2 => {
            let mut bytes = text.into_bytes();
            let all = 0..bytes.len();
            flip_bit(&mut bytes, all, rng);
            String::from_utf8_lossy(&bytes).into_owned()
        }
        _ => text,
    }
}

/// The edits by hand: every value is reachable, and most mutants differ from their seed.
#[test]
fn graph_mutations_by_hand() {
    let v: Value = serde_json::from_str(r#"{"a": [1, {"b/c": true}], "d": "e"}"#).unwrap();
    let mut ptrs = Vec::new();
    pointers(&v, String::new(), &mut ptrs);
    assert_eq!(ptrs, ["/a/0", "/a/1/b~1c", "/a/1", "/a", "/d", ""]);
    assert!(ptrs.iter().all(|p| v.pointer(p).is_some()));
    let mut changed = 0;
    for seed in 0..200 {
        let mut m = v.clone();
        mutate(&mut m, &mut Rng::keyed(seed, "graphs"));
        changed += usize::from(m != v);
    }
    assert!(changed >= 150, "{changed} of 200 mutants differ");
}
