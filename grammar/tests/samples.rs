//! Every sample program in `samples/` passes the checker (warnings allowed).

use nnp_grammar::{SourceFile, check};
use std::sync::Arc;

#[test]
fn samples_pass() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples");
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut failures = Vec::new();
    let mut checked = 0;
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "nnp") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let src = Arc::new(SourceFile::new(path.to_string_lossy(), text));
        checked += 1;
        match check(src, None) {
            Ok(out) => {
                for w in &out.warnings {
                    eprintln!("{}: warning {}: {}", path.display(), w.code, w.message);
                }
            }
            Err(diags) => failures.push(format!("{}: {diags:#?}", path.display())),
        }
    }
    eprintln!("checked {checked} samples");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
