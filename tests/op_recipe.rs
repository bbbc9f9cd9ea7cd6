//! docs/architecture.md's recipe for another MFU op names exactly the files a new binary op
//! touches: the non-test sources that name an existing binary op's variants (`vv_max`:
//! `OpKind::Max`, `BinOp::Max`). Every match over the ops is exhaustive, so each of these is
//! a place that does not compile without the new op; the doc and the code cannot drift.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The source folders of the workspace.
const SOURCES: [&str; 10] = [
    "numerics/src",
    "grammar/src",
    "lowering/src",
    "runtime/host/src",
    "runtime/emulator/src",
    "runtime/exec/src",
    "runtime/src",
    "src",
    "progen/src",
    "python/src",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir` that is not a test (`tests.rs`, under a `tests` folder).
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() && name != "tests" {
                stack.push(path);
            } else if name.ends_with(".rs") && name != "tests.rs" {
                out.push(path);
            }
        }
    }
    out
}

/// `text` without `//` comments and without an inline `#[cfg(test)] mod tests { ... }`.
fn code(text: &str) -> String {
    let stripped: String = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    match stripped.find("#[cfg(test)]\nmod tests {") {
        Some(i) => stripped[..i].to_string(),
        None => stripped,
    }
}

/// Whether `code` names `path` as a whole path (not the start of a longer name).
fn names(code: &str, path: &str) -> bool {
    code.match_indices(path).any(|(i, _)| {
        !code[i + path.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The files that name `vv_max`'s variants, relative to the workspace root.
fn files_naming_max() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for dir in SOURCES {
        for file in sources(&root().join(dir)) {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            let code = code(&text);
            if names(&code, "OpKind::Max") || names(&code, "BinOp::Max") {
                let rel = file.strip_prefix(root()).expect("under the root");
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out
}

/// The source files the doc's "Another MFU op" paragraph names before its tests: every
/// backticked path under a crate's `src/`, except the optional shared definition
/// (`numerics/src/elementwise.rs`).
fn recipe() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).expect("the doc");
    let start = doc
        .find("**Another MFU op**")
        .expect("the MFU op recipe in docs/architecture.md");
    let para = &doc[start..];
    let para = &para[..para.find("\n\n").unwrap_or(para.len())];
    let para = &para[..para.find("Then tests").expect("the recipe's tests")];
    para.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".rs") && s.contains("src/"))
        .filter(|s| *s != "numerics/src/elementwise.rs")
        .map(str::to_string)
        .collect()
}

#[test]
fn the_mfu_op_recipe_names_every_file_a_binary_op_touches() {
    let have = files_naming_max();
    assert!(have.contains("runtime/exec/src/device.rs"), "{have:#?}");
    assert_eq!(
        recipe(),
        have,
        "docs/architecture.md's \"Another MFU op\" lists other files than the sources that \
         name `OpKind::Max` / `BinOp::Max`"
    );
}

#[test]
fn names_is_whole_paths() {
    assert!(names("x = BinOp::Max;", "BinOp::Max"));
    assert!(!names("x = BinOp::MaxAbs;", "BinOp::Max"));
}
