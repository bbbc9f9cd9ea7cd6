//! Every sample program in `samples/` passes the checker (warnings allowed) on each target its
//! `// nnpc: targets = A, B` line names (built-in names or `samples/targets/NAME.toml`), or on
//! `bw-default` when it names none.

use nnp_grammar::{SourceFile, Target, check};
use std::path::Path;
use std::sync::Arc;

fn targets_of(text: &str, dir: &Path) -> Vec<Target> {
    let Some(line) = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("// nnpc: targets ="))
    else {
        return vec![Target::bw_default()];
    };
    line.split(',')
        .map(|n| {
            let n = n.trim();
            Target::builtin(n)
                .or_else(|_| {
                    Target::load(
                        &dir.join("targets")
                            .join(format!("{n}.toml"))
                            .to_string_lossy(),
                    )
                })
                .unwrap_or_else(|e| panic!("target `{n}`: {e}"))
        })
        .collect()
}

#[test]
fn samples_pass() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../samples"));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "nnp") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let src = Arc::new(SourceFile::new(path.to_string_lossy(), text.as_str()));
        for target in targets_of(&text, dir) {
            checked += 1;
            let name = target.name.clone();
            match check(src.clone(), Some(target)) {
                Ok(out) => {
                    for w in &out.warnings {
                        eprintln!(
                            "{} [{name}]: warning {}: {}",
                            path.display(),
                            w.code,
                            w.message
                        );
                    }
                }
                Err(diags) => failures.push(format!("{} [{name}]: {diags:#?}", path.display())),
            }
        }
    }
    eprintln!("checked {checked} sample/target pairs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every sample, in `samples/` and `samples/bench/`, checks with no target given: a sample
/// that needs another target than `bw-default` says so with a `target` line (a path relative
/// to the sample), and its footprint is well under the limits ([`nnp_grammar::limits`]: at
/// most a tenth of each).
#[test]
fn every_sample_checks_with_no_flags() {
    use nnp_grammar::limits::{MAX_DATA_BYTES, MAX_OPERATIONS};
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../samples"));
    let mut checked = 0;
    for dir in [root.to_path_buf(), root.join("bench")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "nnp") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let src = Arc::new(SourceFile::new(path.to_string_lossy(), text.as_str()));
            let out = check(src, None)
                .unwrap_or_else(|d| panic!("{}: {:#?}", path.display(), &d[..d.len().min(3)]));
            let f = out.program.footprint();
            eprintln!("{}: {f:?}", path.display());
            assert!(
                f.operations <= MAX_OPERATIONS / 10 && f.data_bytes <= MAX_DATA_BYTES / 10,
                "{}: {f:?}",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 12, "{checked} samples");
}
