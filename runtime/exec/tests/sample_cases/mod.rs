//! The samples and the targets each names (`// nnpc: targets = ...`), shared by the tests that
//! run every sample on every target it declares.

// Each test crate that includes this module uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples")
}

/// `(sample path, target name)` for every sample and every target it declares.
pub fn cases() -> Vec<(PathBuf, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .expect("samples/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "nnp"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable sample");
        let line = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("// nnpc: targets ="))
            .unwrap_or_else(|| panic!("{} has no `// nnpc: targets =` line", f.display()));
        for t in line.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            out.push((f.clone(), t.to_string()));
        }
    }
    assert!(
        out.len() >= 10,
        "expected many (sample, target) cases, found {}",
        out.len()
    );
    out
}

/// The `--target` argument of a sample target's name: `bw-default`, or the path of its file.
pub fn target_arg(target: &str) -> String {
    match target {
        "bw-default" => target.to_string(),
        t => samples_dir()
            .join("targets")
            .join(format!("{t}.toml"))
            .display()
            .to_string(),
    }
}
