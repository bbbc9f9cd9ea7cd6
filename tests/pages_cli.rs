//! The web pages end to end: `nnpc diff --report` and `nnpc graph --format html` written,
//! checked as text (the report's numbers, escaped firmware text, no network resource), then
//! opened in headless Chromium (no script error, the elements the page's script makes, a
//! screenshot in `target/pages/`). Without Chromium the browser half is skipped with a
//! printed message (`.ci/run` installs it).

use half::f16;
use nnp_runtime::io::{Dtype, read_tensors, write_tensors};
use nnp_runtime::trace::{read_trace, write_trace};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::{arg as s, nnpc, root, scratch, stderr};

/// The Chromium binary, if installed.
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            let ok = Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            ok.then(|| PathBuf::from(name))
        })
}

/// Headless Chromium on `page` (with `fragment`, `#...` or empty): the DOM after its scripts
/// ran, and a screenshot of `size` written to `target/pages/<shot>.png`. `None` (and a
/// printed message) where Chromium is absent.
fn browse(page: &Path, fragment: &str, shot: &str, size: &str) -> Option<String> {
    let Some(chrome) = chromium() else {
        println!("skipped: no chromium on PATH (apt-get install chromium) to open {shot}");
        return None;
    };
    let url = format!("file://{}{fragment}", page.display());
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
    ];
    let dom = Command::new(&chrome)
        .args(flags)
        .args(["--virtual-time-budget=5000", "--dump-dom", &url])
        .output()
        .expect("chromium runs");
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dir = root().join("target/pages");
    std::fs::create_dir_all(&dir).expect("artefact dir");
    let png = dir.join(format!("{shot}.png"));
    let _ = std::fs::remove_file(&png);
    let o = Command::new(&chrome)
        .args(flags)
        .arg(format!("--window-size={size}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&png).expect("a screenshot");
    assert_eq!(&bytes[1..4], b"PNG", "{}", png.display());
    Some(String::from_utf8_lossy(&dom.stdout).into_owned())
}

/// The page's scripts ran to their end (`data-ready`) and caught no error.
fn assert_ran(dom: &str, ready: &str) {
    assert!(
        dom.contains(&format!("data-ready=\"{ready}\"")),
        "script did not finish: {ready}"
    );
    let errors = dom
        .split("<div id=\"nnpc-errors\"")
        .nth(1)
        .and_then(|rest| rest.split("</div>").next())
        .unwrap_or("");
    assert!(!errors.contains("script error"), "{errors}");
    assert!(
        errors.contains("hidden"),
        "the error box is shown: {errors}"
    );
}

/// No `src`, `href` or CSS `url(...)`/`@import` names a network address (an `xmlns` is a
/// name, not a resource).
fn assert_self_contained(page: &str) {
    for attr in ["src=", "href=", "url(", "@import"] {
        for (at, _) in page.match_indices(attr) {
            let value = page[at + attr.len()..].trim_start_matches(['"', '\'', ' ']);
            for scheme in ["http:", "https:", "//", "ftp:"] {
                assert!(
                    !value.starts_with(scheme),
                    "a network resource: {}",
                    &page[at..at + 60.min(page.len() - at)]
                );
            }
        }
    }
    assert!(!page.contains("<link"), "a linked resource");
}

/// `prog.nnp` in `dir`: `y = x` whose `v_wr` line has markup in its comment.
fn marked_up(dir: &Path) -> PathBuf {
    let prog = dir.join("prog.nnp");
    let text = "input x : [1, 4]\noutput y : [1, 4]\n\nv_rd netq\nv_wr netq // </script><script>alert(1)</script><img src=x onerror=alert(2)>\nend_chain\n";
    std::fs::write(&prog, text).expect("write");
    prog
}

/// A dump of 3 items of `samples/mlp2_relu.nnp` with three elements changed (1 ULP, 300
/// ULPs, a NaN) and a trace with one lane changed: the page states the report's counts, draws
/// the histogram, the heatmaps and the divergent v_wr's feeders, and opens without error.
#[test]
fn diff_report_page() {
    let dir = scratch("report-page");
    let (hw, tr) = (dir.join("hw.safetensors"), dir.join("hw.jsonl"));
    let o = nnpc(&[
        "emulate",
        "samples/mlp2_relu.nnp",
        "--batch",
        "3",
        "--seed",
        "5",
        "-o",
        s(&hw),
        "--trace",
        s(&tr),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut dump = read_tensors(&hw).expect("dump");
    let y = dump.get_mut("y").expect("y");
    // y : [3, 4, 100]; item 1 step 2 lane 5, item 2 step 0 lane 99, item 0 step 3 lane 0.
    for (flat, change) in [(400 + 200 + 5, 1u16), (800 + 99, 300), (300, 0)] {
        let bits = f16::from_f32(y.data[flat]).to_bits();
        let new = match change {
            0 => 0x7E00,
            d => {
                if bits & 0x8000 == 0 {
                    bits + d
                } else {
                    bits - d
                }
            }
        };
        y.data[flat] = f16::from_bits(new).to_f32();
    }
    let bad = dir.join("bad.safetensors");
    write_tensors(&bad, &dump, Dtype::F16).expect("write");
    let mut records = read_trace(&tr).expect("trace");
    records[1].bits[3] ^= 1;
    let line = records[1].line;
    let bad_trace = dir.join("bad.jsonl");
    write_trace(&bad_trace, &records).expect("write trace");
    let page = dir.join("report.html");
    let o = nnpc(&[
        "diff",
        "samples/mlp2_relu.nnp",
        "--hardware",
        s(&bad),
        "--seed",
        "5",
        "--trace",
        s(&bad_trace),
        "--report",
        s(&page),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(
        html.contains("NOT concordant: 1197 of 1200 elements bit-exact"),
        "verdict"
    );
    assert!(html.contains("<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"histogram\""));
    assert!(
        html.contains("<title>1 ULP: 1</title>") && html.contains("<title>257-512 ULP: 1</title>")
    );
    assert!(html.contains("<title>NaN vs number ULP: 1</title>"));
    assert!(html.contains("data-grid=\"items\"") && html.contains("data-grid=\"rows\""));
    assert!(html.contains("image/bmp;base64,"));
    assert!(html.contains(&format!(
        "First divergent v_wr: <a href=\"#L{line}\">line {line}</a>"
    )));
    assert!(html.contains("id=\"feeders\"") && html.contains("class=\"node wr focus\""));
    assert!(html.contains("id=\"mismatches\"") && html.contains(&format!("id=\"L{line}\"")));
    assert_self_contained(&html);
    if let Some(dom) = browse(&page, "", "diff-report", "1280,2000") {
        assert_ran(&dom, "1 maps");
    }
}

/// Firmware text on the pages is escaped: a comment with `</script><script>` neither ends
/// the page's script nor opens one, in the report's source and mismatch lines and in the
/// graph page's drawing and data.
#[test]
fn firmware_text_cannot_inject() {
    let dir = scratch("inject");
    let prog = marked_up(&dir);
    let x = dir.join("x.npy");
    common::npy(&x, &[1, 1, 4], 0.5);
    let hw = dir.join("hw.npy");
    common::npy(&hw, &[1, 1, 4], 0.25);
    let page = dir.join("report.html");
    let o = nnpc(&[
        "diff",
        s(&prog),
        "--hardware",
        s(&hw),
        "--inputs",
        s(&x),
        "--report",
        s(&page),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let graph = dir.join("graph.html");
    let o = nnpc(&["graph", s(&prog), "--format", "html", "-o", s(&graph)]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (p, ready) in [(&page, "1 maps"), (&graph, "2 nodes")] {
        let html = std::fs::read_to_string(p).expect("page");
        assert!(!html.contains("<script>alert"), "{}", p.display());
        assert!(!html.contains("<img"), "{}", p.display());
        assert!(
            html.contains("&lt;/script&gt;&lt;script&gt;alert(1)")
                || html.contains("\\u003c/script>\\u003cscript>alert(1)")
        );
        assert_eq!(
            html.matches("<script").count(),
            html.matches("</script>").count()
        );
        assert_self_contained(&html);
        let shot = format!(
            "inject-{}",
            p.file_stem().and_then(|s| s.to_str()).unwrap_or("page")
        );
        if let Some(dom) = browse(p, "", &shot, "800,600") {
            assert_ran(&dom, ready);
        }
    }
}

/// The graph page of `samples/bench/lstm_1024.nnp`: every node drawn; `#node=700` selects a
/// node (its producers and consumers listed, from the graph's own edges), `#search=` finds
/// the nodes of a line.
#[test]
fn graph_page() {
    let dir = scratch("graph-page");
    let page = dir.join("graph.html");
    let o = nnpc(&[
        "graph",
        "samples/bench/lstm_1024.nnp",
        "--format",
        "html",
        "-o",
        s(&page),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).expect("page");
    let json = nnpc(&["graph", "samples/bench/lstm_1024.nnp", "--format", "json"]);
    let g: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    let nodes = g["nodes"].as_array().expect("nodes").len();
    assert_eq!(html.matches("<g class=\"node ").count(), nodes);
    assert_eq!(
        html.matches("<path class=\"e ").count(),
        g["edges"].as_array().expect("edges").len()
    );
    assert_self_contained(&html);
    let producers: Vec<u64> = g["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .filter(|e| e["to"] == 700)
        .filter_map(|e| e["from"].as_u64())
        .collect();
    let Some(dom) = browse(&page, "#node=700", "graph", "1400,900") else {
        return;
    };
    assert_ran(&dom, &format!("{nodes} nodes"));
    assert!(
        dom.contains("<aside id=\"panel\" data-node=\"700\">"),
        "node 700 selected"
    );
    assert!(dom.contains(&format!("<h4>producers ({})</h4>", producers.len())));
    for p in producers {
        assert!(dom.contains(&format!("<a>#{p} ")), "producer {p} listed");
        assert!(
            dom.contains(&format!("class=\"node rd prod\" id=\"n{p}\""))
                || dom.contains(&format!("prod\" id=\"n{p}\"")),
            "producer {p} marked"
        );
    }
    let line = g["nodes"][700]["line"].as_u64().expect("line");
    let at_line = g["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["line"] == line)
        .count();
    let dom = browse(
        &page,
        &format!("#search={line}"),
        "graph-search",
        "1400,900",
    )
    .expect("chromium");
    assert!(
        dom.contains(&format!("<span id=\"hits\">{at_line} found")),
        "search by line"
    );
}
