//! `nnpc graph` end to end: DOT accepted by Graphviz, JSON with the fields docs/depgraph.md
//! promises, queries, and exit codes.

mod common;

use common::{nnpc, root, stdout};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// 1-based line of the first line of `text` at or after line `from` that contains `needle`.
fn line_of(text: &str, needle: &str, from: usize) -> usize {
    text.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .unwrap_or_else(|| panic!("`{needle}` not found"))
}

#[test]
fn lstm_dot_is_accepted_by_graphviz() {
    let o = nnpc(&["graph", "samples/lstm.nnp", "--format", "dot"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dot = stdout(&o);
    assert!(dot.starts_with("digraph depgraph {"));
    // 40 chains (10 per step, 4 steps), one cluster each; RAW edges blue, WAR orange.
    assert_eq!(dot.matches("subgraph cluster_c").count(), 40);
    assert!(dot.contains("color=blue") && dot.contains("color=orange"));
    let Ok(mut child) = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        eprintln!(
            "\n!!!!!!!! SKIPPED: Graphviz `dot` is not installed; the DOT output of `nnpc graph` \
             was NOT validated. Install graphviz (apt-get install graphviz) to run this check. \
             !!!!!!!!\n"
        );
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(dot.as_bytes()).expect("write to dot");
    }
    let out = child.wait_with_output().expect("dot runs");
    assert!(
        out.status.success(),
        "dot -Tsvg rejected the graph: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
}

#[test]
fn lstm_json_raw_edges_carry_memory_address_and_lines() {
    let o = nnpc(&["graph", "samples/lstm.nnp", "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    assert_eq!(v["schema"], "nnpc-depgraph");
    assert_eq!(v["version"], 1);
    let edges = v["edges"].as_array().expect("edges");
    let raw: Vec<_> = edges.iter().filter(|e| e["kind"] == "raw").collect();
    assert!(!raw.is_empty());
    for e in &raw {
        assert!(e["mem"].is_string(), "{e}");
        assert!(
            e["addr"].is_u64() && e["tiles"].as_u64().unwrap_or(0) >= 1,
            "{e}"
        );
        assert!(e["from_line"].is_u64() && e["to_line"].is_u64(), "{e}");
        assert!(
            e["from_text"].is_string() && e["to_text"].is_string(),
            "{e}"
        );
    }
    // Hand-derived: step 0's o chain writes h_0 to the second h buffer, ivrf[4..6]
    // (HV + ((0 + 1) % 2) * HT = 2 + 2), and step 1's recurrent chains read it from there
    // (HV + (1 % 2) * HT = 4). The first of them is the f chain (Uf).
    let text = std::fs::read_to_string(root().join("samples/lstm.nnp")).expect("sample");
    let write_line = line_of(&text, "v_wr ivrf[HV + ((t + 1) % 2) * HT]", 1);
    let f_read = line_of(&text, "v_rd ivrf[HV + (t % 2) * HT]", 1);
    let found = raw.iter().any(|e| {
        e["mem"] == "ivrf"
            && e["addr"] == 4
            && e["tiles"] == 2
            && e["from_line"] == write_line
            && e["to_line"] == f_read
            && e["from_text"] == "v_wr ivrf[HV + ((t + 1) % 2) * HT]"
            && e["to_text"] == "v_rd ivrf[HV + (t % 2) * HT]"
    });
    assert!(
        found,
        "no RAW edge ivrf[4..6] from line {write_line} to line {f_read}"
    );
    // c_t: the c chain writes mulvrf0[0..2]; the tanh chain reads it (RAW), and the next step's
    // f chain multiplies by it (RAW into its vv_mul).
    let c_write = line_of(&text, "v_wr mulvrf0[C]", 1);
    let f_mul = line_of(&text, "vv_mul mulvrf0[C]", 1);
    assert!(raw.iter().any(|e| e["mem"] == "mulvrf0"
        && e["addr"] == 0
        && e["from_line"] == c_write
        && e["to_line"] == f_mul));
    // Every node names its chain, iteration, mnemonic, line and text.
    for n in v["nodes"].as_array().expect("nodes") {
        assert!(
            n["chain"].is_u64() && n["iteration"].is_u64() && n["line"].is_u64(),
            "{n}"
        );
        assert!(n["mnemonic"].is_string() && n["text"].is_string(), "{n}");
    }
}

#[test]
fn output_file_and_target_option() {
    let dir = std::env::temp_dir().join(format!("nnpc-graph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = dir.join("g.json");
    let o = nnpc(&[
        "graph",
        "samples/bn_clip_n16.nnp",
        "--target",
        "samples/targets/n16.toml",
        "--format",
        "json",
        "-o",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The one line on stderr that confirms the write, as the other commands' -o do; nothing
    // on stdout.
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        said.contains("written to") && said.lines().count() == 1,
        "{said}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("written")).expect("JSON");
    assert_eq!(v["target"], "n16");
    assert_eq!(v["native"], 16);
    // The vv_max of the 3-MFU chain sits on MFU2.
    let max = v["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["mnemonic"] == "vv_max"))
        .expect("a vv_max node");
    assert_eq!(max["mfu"], 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn producers_query_names_the_writes() {
    // mlp2_relu: the output layer's read (`v_rd ivrf[HS] + 3`, 4 iterations) is fed by the
    // hidden layer's write (`v_wr ivrf[HS] + 3`), iteration t by iteration t: ivrf[8 + 3t ..].
    let text = std::fs::read_to_string(root().join("samples/mlp2_relu.nnp")).expect("sample");
    let read = line_of(&text, "v_rd ivrf[HS] + 3", 1);
    let write = line_of(&text, "v_wr ivrf[HS] + 3", 1);
    let o = nnpc(&[
        "graph",
        "samples/mlp2_relu.nnp",
        "--producers",
        &read.to_string(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = stdout(&o);
    for (t, addr) in [(0, 8), (1, 11), (2, 14), (3, 17)] {
        let want = format!("<- ivrf[{addr}..{}]", addr + 3);
        assert!(s.contains(&want), "missing `{want}` in:\n{s}");
        assert!(
            s.contains(&format!("line {write} (chain 1, iteration {t})")),
            "{s}"
        );
    }
    // The input copy reads only netq: the first chain's pop has no producer.
    let pop = line_of(&text, "v_rd netq", 1);
    let o = nnpc(&[
        "graph",
        "samples/mlp2_relu.nnp",
        "--producers",
        &pop.to_string(),
    ]);
    assert!(stdout(&o).contains("reads only data the host loaded"));
}

#[test]
fn independent_query_on_gru() {
    // gru.nnp chains and what they read from other chains (derived from the source):
    //   0 pop x -> ivrf[0..2]            1 pop h -> ivrf[2..4] (after 0: fifo)
    //   2 x Wz + bz (reads 0)            3 x Wr + br (reads 0)          4 x Wn + bn (reads 0)
    //   5 z (reads 1, 2)                 6 r (reads 1, 3)               7 n (reads 1, 6, 4)
    //   8 update (reads 1, 7, 5)
    // Reachability: 0 reaches all; 1 -> 5, 6, 7, 8; 2 -> 5, 8; 3 -> 6, 7, 8; 4 -> 7, 8;
    // 5 -> 8; 6 -> 7, 8; 7 -> 8. The pairs with no path either way:
    let want = [
        (1, 2),
        (1, 3),
        (1, 4),
        (2, 3),
        (2, 4),
        (2, 6),
        (2, 7),
        (3, 4),
        (3, 5),
        (4, 5),
        (4, 6),
        (5, 6),
        (5, 7),
    ];
    let o = nnpc(&["graph", "samples/gru.nnp", "--independent"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = stdout(&o);
    // Lines look like `  chain 1 (line 52) || chain 2 (line 62)`.
    let got: Vec<(usize, usize)> = s
        .lines()
        .filter(|l| l.contains("||"))
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let num = |i: usize| t.get(i).and_then(|x| x.parse().ok()).unwrap_or(usize::MAX);
            (num(1), num(6))
        })
        .collect();
    assert_eq!(got, want, "{s}");
    assert!(s.starts_with("13 independent pairs"), "{s}");
}

#[test]
fn firmware_errors_exit_1_and_missing_file_exit_2() {
    let dir = std::env::temp_dir().join(format!("nnpc-graph-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.nnp");
    std::fs::write(&bad, "v_rd ivrf[0]\nv_sigmoid\nv_wr netq\nend_chain\n").expect("write");
    let o = nnpc(&["graph", bad.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("v_sigm"));
    let o = nnpc(&[
        "graph",
        Path::new("no/such/file.nnp").to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_has_examples() {
    let o = nnpc(&["graph", "--help"]);
    let s = stdout(&o);
    assert!(s.contains("Examples:") && s.contains("--format") && s.contains("dot -Tsvg"));
}

/// A query on a line where no instruction of a chain starts (a comment, `end_chain`, past the
/// end) is an error, exit 2, naming the nearest lines that hold instructions, before and
/// after it.
#[test]
fn a_query_on_a_line_without_an_instruction_is_an_error_naming_lines_nearby() {
    let text = std::fs::read_to_string(root().join("samples/lstm.nnp")).expect("sample");
    let line = |n: usize| text.lines().nth(n - 1).unwrap_or_default().trim();
    // The comment before the i gate's chain: above it a blank line and the `end_chain` of the
    // chain before (whose last instructions are `vv_mul mulvrf0[C]`, `v_wr asvrf1[FC]`), under
    // it the i gate's chain.
    let comment = line_of(&text, "// i gate", 1);
    assert_eq!(
        [-4, -3, -2, -1, 1, 2].map(|d: isize| line(comment.saturating_add_signed(d))),
        [
            "vv_mul mulvrf0[C]",
            "v_wr asvrf1[FC]",
            "end_chain",
            "",
            "v_rd ivrf[HV + (t % 2) * HT]",
            "mv_mul mrf[Ui]"
        ]
    );
    let query = |flag: &str, at: usize| {
        let o = nnpc(&["graph", "samples/lstm.nnp", flag, &at.to_string()]);
        assert_eq!(o.status.code(), Some(2), "{flag} {at}: {}", stdout(&o));
        assert!(o.stdout.is_empty(), "{}", stdout(&o));
        common::message(&o)
    };
    let m = query("--producers", comment);
    // (miette may wrap the path after its slash: compared without spaces.)
    let what = format!(
        "--producers {comment}: no instruction of a chain starts on line {comment} of \
         `samples/lstm.nnp`"
    );
    assert!(m.replace(' ', "").contains(&what.replace(' ', "")), "{m}");
    let want = format!(
        "help: instructions nearby are on lines {} and {} before it and lines {} and {} after it",
        comment - 4,
        comment - 3,
        comment + 1,
        comment + 2
    );
    assert!(m.contains(&want), "{m}");
    // The `end_chain` under the c gate's `v_wr mulvrf0[C]`.
    let write = line_of(&text, "v_wr mulvrf0[C]", comment);
    assert_eq!(line(write + 1), "end_chain");
    let m = query("--consumers", write + 1);
    assert!(
        m.contains(&format!("lines {} and {write} before it", write - 1)),
        "{m}"
    );
    // Past the end: the last two instructions.
    let lines = text.lines().count();
    let m = query("--consumers", lines + 10);
    assert!(
        m.contains("help: the last instructions are on lines"),
        "{m}"
    );
}

/// `--format` with a query is refused (the queries answer in text), naming both flags; the
/// same query without it answers.
#[test]
fn format_with_a_query_is_refused() {
    let text = std::fs::read_to_string(root().join("samples/lstm.nnp")).expect("sample");
    let read = line_of(&text, "v_rd ivrf[HV + (t % 2) * HT]", 1).to_string();
    for query in [
        &["--producers", read.as_str()][..],
        &["--consumers", read.as_str()][..],
        &["--independent"][..],
    ] {
        for format in ["json", "dot"] {
            let mut args = vec!["graph", "samples/lstm.nnp", "--format", format];
            args.extend(query);
            let o = nnpc(&args);
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains("cannot be used with")
                    && err.contains("--format")
                    && err.contains(query[0]),
                "{args:?}: {err}"
            );
            assert!(o.stdout.is_empty(), "{args:?}");
        }
        let mut args = vec!["graph", "samples/lstm.nnp"];
        args.extend(query);
        let o = nnpc(&args);
        assert!(o.status.success() && !o.stdout.is_empty(), "{args:?}");
    }
}
