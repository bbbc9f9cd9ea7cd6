//! Tests of the dependency graph: small hand-built programs whose edges are derived by hand in
//! the comments, and the samples.

use super::*;
use nnp_grammar::{SourceFile, Target, check};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A small target so that hand-built programs stay tiny: N = 4, 2 MFUs.
fn n4() -> Target {
    let mut t = Target::bw_default();
    t.name = "n4".into();
    t.native = 4;
    t
}

fn build(src: &str) -> (Program, DepGraph) {
    let src = Arc::new(SourceFile::new("t.nnp", src));
    let out = match check(src, Some(n4())) {
        Ok(o) => o,
        Err(diags) => panic!("program does not check: {diags:#?}"),
    };
    let g = DepGraph::build(&out.program);
    (out.program, g)
}

/// Edges as `(from, to, kind, "mem[addr..]")`, sorted, for comparison with hand-derived lists.
fn edges(g: &DepGraph) -> Vec<(usize, usize, DepKind, String)> {
    let mut v: Vec<_> = g
        .graph
        .edge_references()
        .map(|e| {
            let at = e.weight().at.map(|a| a.to_string()).unwrap_or_default();
            (e.source().index(), e.target().index(), e.weight().kind, at)
        })
        .collect();
    v.sort();
    v
}

fn e(from: usize, to: usize, kind: DepKind, at: &str) -> (usize, usize, DepKind, String) {
    (from, to, kind, at.to_string())
}

use DepKind::{Fifo, Pipeline as Pipe, Raw, War, Waw};

#[test]
fn dense_chain_pipeline_and_raw() {
    // N = 4: x has 2 tiles (6 values), y 1 tile, W is 1 x 2 tiles.
    let (p, g) = build(
        "matrix W : [4, 6] at mrf[0]\n\
         vector b : [4] at asvrf0[0]\n\
         input x : [6]\n\
         output y : [4]\n\
         s_wr rows, 2\n\
         v_rd netq\n\
         v_wr ivrf[0]\n\
         end_chain\n\
         s_wr rows, 1\n\
         s_wr cols, 2\n\
         v_rd ivrf[0]\n\
         mv_mul mrf[W]\n\
         vv_add asvrf0[b]\n\
         v_wr netq\n\
         end_chain\n",
    );
    // Nodes in execution order: 0 v_rd netq, 1 v_wr ivrf[0..2], 2 v_rd ivrf[0..2],
    // 3 mv_mul mrf[0..2], 4 vv_add asvrf0[0], 5 v_wr netq.
    assert_eq!(g.node_count(), 6);
    let names: Vec<_> = g.graph.node_weights().map(|n| n.resolved()).collect();
    assert_eq!(
        names,
        [
            "v_rd netq",
            "v_wr ivrf[0..2]",
            "v_rd ivrf[0..2]",
            "mv_mul mrf[0..2]",
            "vv_add asvrf0[0]",
            "v_wr netq"
        ]
    );
    // Pipeline 0->1, 2->3->4->5; RAW 1->2 over the two ivrf tiles (one merged edge). The pop
    // and the push are on different queues: no edge between them. W and b are host data.
    assert_eq!(
        edges(&g),
        vec![
            e(0, 1, Pipe, ""),
            e(1, 2, Raw, "ivrf[0..2]"),
            e(2, 3, Pipe, ""),
            e(3, 4, Pipe, ""),
            e(4, 5, Pipe, ""),
        ]
    );
    let n = NodeIndex::new;
    assert_eq!(g.producers(n(2)).len(), 1);
    assert_eq!(g.producers(n(2))[0].0, n(1));
    assert_eq!(g.consumers(n(1))[0].0, n(2));
    assert!(g.producers(n(3)).is_empty());
    assert_eq!(
        g.node(n(0)).netq.map(|q| p.decls[q.decl].name.as_str()),
        Some("x")
    );
    assert_eq!(
        g.node(n(5)).netq.map(|q| p.decls[q.decl].name.as_str()),
        Some("y")
    );
    assert_eq!(g.chain_deps(), vec![vec![], vec![0]]);
    assert!(g.independent_pairs().is_empty());
}

/// N = 4, every vector 1 tile. Chain 0 (2 iterations) pops x_t into ivrf[t]; chain 1 copies
/// ivrf[0] to asvrf0[5]; chain 2 overwrites ivrf[0] (which chain 1 read: WAR) with ivrf[1];
/// chain 3 copies the new ivrf[0] to asvrf0[5] again (nothing read asvrf0[5] in between: WAW).
const WAR_WAW: &str = "input x : [2, 4]\n\
    output y : [4] at asvrf0[5]\n\
    s_wr iterations, 2\n\
    v_rd netq\n\
    v_wr_inc ivrf[0], 1\n\
    end_chain\n\
    v_rd ivrf[0]\n\
    v_wr asvrf0[5]\n\
    end_chain\n\
    v_rd ivrf[1]\n\
    v_wr ivrf[0]\n\
    end_chain\n\
    v_rd ivrf[0]\n\
    v_wr asvrf0[5]\n\
    end_chain\n";

#[test]
fn war_waw_and_iterations() {
    let (_, g) = build(WAR_WAW);
    // Nodes: chain 0 it 0: 0 v_rd netq, 1 v_wr ivrf[0]; it 1: 2 v_rd netq, 3 v_wr ivrf[1];
    // chain 1: 4 v_rd ivrf[0], 5 v_wr asvrf0[5]; chain 2: 6 v_rd ivrf[1], 7 v_wr ivrf[0];
    // chain 3: 8 v_rd ivrf[0], 9 v_wr asvrf0[5].
    // Edges: pipeline within each iteration; fifo 0->2 (pop order); RAW 1->4 (ivrf[0]),
    // RAW 3->6 (ivrf[1]); WAR 4->7 (chain 2 overwrites what chain 1 read); RAW 7->8 (ivrf[0]);
    // WAW 5->9 (asvrf0[5] written twice, never read in between).
    assert_eq!(
        edges(&g),
        vec![
            e(0, 1, Pipe, ""),
            e(0, 2, Fifo, "netq"),
            e(1, 4, Raw, "ivrf[0]"),
            e(2, 3, Pipe, ""),
            e(3, 6, Raw, "ivrf[1]"),
            e(4, 5, Pipe, ""),
            e(4, 7, War, "ivrf[0]"),
            e(5, 9, Waw, "asvrf0[5]"),
            e(6, 7, Pipe, ""),
            e(7, 8, Raw, "ivrf[0]"),
            e(8, 9, Pipe, ""),
        ]
    );
    assert_eq!(g.chains[0].iterations, 2);
    assert_eq!(g.chains[0].per_iteration, 2);
    let it1: Vec<_> = g.chains[0].iteration(1).map(|n| n.index()).collect();
    assert_eq!(it1, [2, 3]);
    assert_eq!(g.node(NodeIndex::new(3)).iteration, 1);
    // Chain 1 and chain 2 are ordered (WAR); every chain is connected to every other.
    assert_eq!(
        g.chain_deps(),
        vec![vec![], vec![0], vec![0, 1], vec![1, 2]]
    );
    assert!(g.independent_pairs().is_empty());
}

#[test]
fn independent_chains_and_operands() {
    // Two chains fed by different pops (ordered only by the fifo), each with an MFU operand
    // written by an earlier chain.
    let (_, g) = build(
        "input x : [2, 4]\n\
         vector m : [4] at mulvrf0[0]\n\
         output y : [4] at ivrf[4]\n\
         output z : [4] at ivrf[5]\n\
         v_rd netq\n\
         v_wr ivrf[0]\n\
         end_chain\n\
         v_rd netq\n\
         v_wr ivrf[1]\n\
         end_chain\n\
         v_rd ivrf[0]\n\
         vv_mul mulvrf0[m]\n\
         v_wr ivrf[4]\n\
         end_chain\n\
         v_rd ivrf[1]\n\
         v_relu\n\
         v_wr ivrf[5]\n\
         end_chain\n",
    );
    // Nodes: 0 pop, 1 wr ivrf[0]; 2 pop, 3 wr ivrf[1]; 4 rd ivrf[0], 5 vv_mul, 6 wr ivrf[4];
    // 7 rd ivrf[1], 8 relu, 9 wr ivrf[5].
    // Chain 2 depends on chain 0 only (RAW ivrf[0]), chain 3 on chain 1 only (RAW ivrf[1]);
    // chain 1 comes after chain 0 through the fifo (second pop). Paths: 0 -> 1 -> 3 and 0 -> 2,
    // so the pairs with no path are (1, 2) and (2, 3).
    assert_eq!(g.chain_deps(), vec![vec![], vec![0], vec![0], vec![1]]);
    assert_eq!(g.independent_pairs(), vec![(1, 2), (2, 3)]);
    assert_eq!(g.independent_of(2), vec![1, 3]);
    assert!(!g.chains_dependent(2, 3));
    assert!(g.chains_dependent(0, 3));
    // vv_mul reads the declared m: no producer node; its MFU is 0.
    let mul = g.node(NodeIndex::new(5));
    assert_eq!(mul.instr, Instr::Op(OpKind::Mul));
    assert_eq!(mul.mfu, Some(0));
    assert_eq!(mul.reads[0].to_string(), "mulvrf0[0]");
    assert!(g.producers(NodeIndex::new(5)).is_empty());
}

#[test]
fn window_reads_and_matrix_chain() {
    // A 3 x 3 frame of pixel tiles in ivrf (zeroed), a 2 x 2 window: at iteration 0 tiles
    // 0, 1, 3, 4; at iteration 1 (address + 1) tiles 1, 2, 4, 5. The pop chain writes ivrf[4]
    // (the centre pixel), so both window iterations read it: RAW edges 1 -> each window read.
    // The matrix chain copies 4 tiles dram -> mrf[0..4]; mv_mul reads them: RAW from m_wr.
    let (_, g) = build(
        "matrix W : [4, 16] at dram[0]\n\
         vector frame : [9, 4] at ivrf[0] = 0\n\
         input x : [4]\n\
         output y : [2, 4]\n\
         v_rd netq\n\
         v_wr ivrf[4]\n\
         end_chain\n\
         s_wr cols, 4\n\
         m_rd dram[W]\n\
         m_wr mrf[0]\n\
         end_chain\n\
         s_wr win_w, 2\n\
         s_wr win_h, 2\n\
         s_wr pitch, 3\n\
         s_wr iterations, 2\n\
         v_rd_2d ivrf[0] + 1\n\
         mv_mul mrf[0]\n\
         v_wr netq\n\
         end_chain\n",
    );
    // Nodes: 0 pop, 1 wr ivrf[4]; 2 m_rd dram.tiles[0..4], 3 m_wr mrf[0..4];
    // it 0: 4 v_rd_2d, 5 mv_mul, 6 wr netq; it 1: 7 v_rd_2d, 8 mv_mul, 9 wr netq.
    let n = |i| g.node(NodeIndex::new(i));
    assert_eq!(n(2).resolved(), "m_rd dram.tiles[0..4]");
    assert_eq!(n(3).resolved(), "m_wr mrf[0..4]");
    assert_eq!(n(4).resolved(), "v_rd_2d ivrf[0..2], ivrf[3..5]");
    assert_eq!(n(7).resolved(), "v_rd_2d ivrf[1..3], ivrf[4..6]");
    assert_eq!(
        edges(&g),
        vec![
            e(0, 1, Pipe, ""),
            e(1, 4, Raw, "ivrf[4]"),
            e(1, 7, Raw, "ivrf[4]"),
            e(2, 3, Pipe, ""),
            e(3, 5, Raw, "mrf[0..4]"),
            e(3, 8, Raw, "mrf[0..4]"),
            e(4, 5, Pipe, ""),
            e(5, 6, Pipe, ""),
            e(6, 9, Fifo, "netq"),
            e(7, 8, Pipe, ""),
            e(8, 9, Pipe, ""),
        ]
    );
    // The window chain depends on both copies; the pop chain and the matrix chain are
    // independent.
    assert_eq!(g.independent_pairs(), vec![(0, 1)]);
}

#[test]
fn same_iteration_write_of_read_register_has_no_self_edge() {
    // The second chain (2 iterations) reads ivrf[0] and writes ivrf[0] (allowed). Inside one
    // iteration the WAR is already ordered by the pipeline: no edge. Iteration 1 reads what
    // iteration 0 wrote: RAW 3 -> 4. Nodes: 0 pop, 1 wr; it 0: 2 rd, 3 wr; it 1: 4 rd, 5 wr.
    let (_, g) = build(
        "input x : [4]\n\
         output y : [4] at ivrf[0]\n\
         v_rd netq\n\
         v_wr ivrf[0]\n\
         end_chain\n\
         s_wr iterations, 2\n\
         v_rd ivrf[0]\n\
         v_wr ivrf[0]\n\
         end_chain\n",
    );
    assert_eq!(
        edges(&g),
        vec![
            e(0, 1, Pipe, ""),
            e(1, 2, Raw, "ivrf[0]"),
            e(2, 3, Pipe, ""),
            e(3, 4, Raw, "ivrf[0]"),
            e(4, 5, Pipe, ""),
        ]
    );
}

#[test]
fn overlapping_writes_of_one_chain_are_ordered() {
    // rows = 2. Chain 0 pops x into ivrf[0..2]. Chain 1 reads ivrf[0..2] and writes the carried
    // vector twice: ivrf[2..4], then ivrf[3..5]. Both hang off the read (no MFU op), so only a
    // WAW edge can say that the second write is what ivrf[3] holds: 3 -> 4 on ivrf[3]. Chain 2
    // reads ivrf[3..5]: RAW from the second write only (4 -> 6 on ivrf[3..5]); ivrf[2], which
    // only the first write wrote, nobody reads.
    // Nodes: 0 pop, 1 wr ivrf[0..2]; 2 rd ivrf[0..2], 3 wr ivrf[2..4], 4 wr ivrf[3..5];
    // 5 rd ivrf[3..5], 6 push.
    let (_, g) = build(
        "input x : [8]\n\
         output y : [8]\n\
         s_wr rows, 2\n\
         v_rd netq\n\
         v_wr ivrf[0]\n\
         end_chain\n\
         v_rd ivrf[0]\n\
         v_wr ivrf[2]\n\
         v_wr ivrf[3]\n\
         end_chain\n\
         v_rd ivrf[3]\n\
         v_wr netq\n\
         end_chain\n",
    );
    assert_eq!(
        edges(&g),
        vec![
            e(0, 1, Pipe, ""),
            e(1, 2, Raw, "ivrf[0..2]"),
            e(2, 3, Pipe, ""),
            e(2, 4, Pipe, ""),
            e(3, 4, Waw, "ivrf[3]"),
            e(4, 5, Raw, "ivrf[3..5]"),
            e(5, 6, Pipe, ""),
        ]
    );
    // Two writes of the same registers in one iteration: one WAW over both.
    let (_, g) = build(
        "input x : [4]\n\
         output y : [4] at ivrf[1]\n\
         v_rd netq\n\
         v_wr ivrf[1]\n\
         v_wr ivrf[1]\n\
         end_chain\n",
    );
    assert_eq!(
        edges(&g),
        vec![
            e(0, 1, Pipe, ""),
            e(0, 2, Pipe, ""),
            e(1, 2, Waw, "ivrf[1]")
        ]
    );
}

#[test]
fn dot_and_json_exports() {
    let (p, g) = build(WAR_WAW);
    let dot = g.to_dot(&p);
    // One cluster per chain; chain 0 (iterated) nests one cluster per iteration.
    for c in 0..4 {
        assert!(dot.contains(&format!("subgraph cluster_c{c} {{")), "{dot}");
    }
    assert!(dot.contains("subgraph cluster_c0_i0 {") && dot.contains("subgraph cluster_c0_i1 {"));
    assert!(!dot.contains("cluster_c1_i0"));
    assert!(
        dot.contains("n1 [label=\"v_wr ivrf[0]\\nline 5\"];"),
        "{dot}"
    );
    assert!(dot.contains("n0 -> n1 [color=black];"));
    assert!(dot.contains("n1 -> n4 [color=blue, fontcolor=blue, label=\"ivrf[0]\"];"));
    assert!(dot.contains("n4 -> n7 [color=orange, fontcolor=orange, label=\"ivrf[0]\"];"));
    assert!(dot.contains("n5 -> n9 [color=red, fontcolor=red, label=\"asvrf0[5]\"];"));
    assert!(dot.contains("n0 -> n2 [color=darkgreen"));

    let v: serde_json::Value = serde_json::from_str(&g.to_json(&p)).expect("valid JSON");
    assert_eq!(v["schema"], "nnpc-depgraph");
    assert_eq!(v["version"], JSON_SCHEMA_VERSION);
    assert_eq!(v["nodes"].as_array().map(Vec::len), Some(10));
    assert_eq!(v["nodes"][3]["iteration"], 1);
    assert_eq!(v["nodes"][3]["text"], "v_wr_inc ivrf[0], 1");
    assert_eq!(v["nodes"][3]["writes"][0]["addr"], 1);
    assert_eq!(v["nodes"][2]["netq"]["decl"], "x");
    assert_eq!(v["nodes"][2]["netq"]["row"], 1);
    assert_eq!(v["chains"][3]["depends_on"], serde_json::json!([1, 2]));
    let raw = v["edges"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["from"] == 7 && e["to"] == 8))
        .expect("RAW 7 -> 8");
    // Node 7 is `v_wr ivrf[0]` on line 11, node 8 `v_rd ivrf[0]` on line 13.
    assert_eq!(raw["kind"], "raw");
    assert_eq!(raw["mem"], "ivrf");
    assert_eq!(raw["addr"], 0);
    assert_eq!(raw["tiles"], 1);
    assert_eq!(raw["from_line"], 11);
    assert_eq!(raw["to_line"], 13);
    assert_eq!(raw["from_text"], "v_wr ivrf[0]");
    assert_eq!(raw["to_text"], "v_rd ivrf[0]");
    let war = v["edges"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["kind"] == "war"))
        .expect("a WAR edge");
    assert!(war.get("from_text").is_none() && war["from_line"] == 7);
    let pipe = &v["edges"][0];
    assert_eq!(pipe["kind"], "pipeline");
    assert!(pipe.get("mem").is_none());
}

// ---- samples ----

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples")
}

/// The targets a sample declares on its `// nnpc: targets = ...` line.
fn declared_targets(text: &str) -> Vec<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("// nnpc: targets ="))
        .map(|l| l.split(',').map(|t| t.trim().to_string()).collect())
        .unwrap_or_default()
}

fn load_target(name: &str) -> Target {
    if name == "bw-default" {
        return Target::bw_default();
    }
    let path = samples_dir().join("targets").join(format!("{name}.toml"));
    match Target::load(&path.to_string_lossy()) {
        Ok(t) => t,
        Err(e) => panic!("target {name}: {e}"),
    }
}

/// Every sample, checked under every target it declares, builds a graph in which each node
/// has its pipeline predecessor and RAW edges only go forward.
#[test]
fn samples_check_and_build() {
    let mut files: Vec<_> = std::fs::read_dir(samples_dir())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "nnp"));
    files.sort();
    assert!(
        files.len() >= 7,
        "expected at least 7 samples, found {files:?}"
    );
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let targets = declared_targets(&text);
        assert!(
            !targets.is_empty(),
            "{}: no `// nnpc: targets =` line",
            path.display()
        );
        for t in &targets {
            let src = Arc::new(SourceFile::new(path.display().to_string(), text.clone()));
            match check(src, Some(load_target(t))) {
                Ok(out) => {
                    let g = DepGraph::build(&out.program);
                    for e in g.graph.edge_references() {
                        assert!(
                            e.source() < e.target(),
                            "backward edge in {}",
                            path.display()
                        );
                    }
                    assert!(g.node_count() > 0);
                }
                Err(d) => failures.push(format!("{} under {t}: {d:#?}", path.display())),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `cargo test -p nnp-lowering print_sample_graphs -- --ignored --nocapture`: sizes and
/// warnings of every sample under every target it declares.
#[test]
#[ignore]
fn print_sample_graphs() {
    for entry in std::fs::read_dir(samples_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "nnp") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for t in declared_targets(&text) {
            let src = Arc::new(SourceFile::new(path.display().to_string(), text.clone()));
            let out = check(src, Some(load_target(&t)));
            match out {
                Ok(o) => {
                    let g = DepGraph::build(&o.program);
                    eprintln!(
                        "{} [{t}]: {} chains, {} nodes, {} edges, {} warnings",
                        path.display(),
                        o.program.chains.len(),
                        g.node_count(),
                        g.edge_count(),
                        o.warnings.len()
                    );
                    for w in &o.warnings {
                        eprintln!("   {:?}", w);
                    }
                }
                Err(d) => eprintln!("{} [{t}]: ERR {d:#?}", path.display()),
            }
        }
    }
}
