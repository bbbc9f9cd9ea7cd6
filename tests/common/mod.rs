//! Helpers shared by the end-to-end tests: those that run the `nnpc` binary, and the
//! differential runs sized by environment variables.
#![allow(dead_code)] // each test crate uses its own subset

pub mod dumps;
pub mod samples;
pub mod tensors;
pub mod text;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (samples are found relative to it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Run `nnpc ARGS` in the repository root.
pub fn nnpc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nnpc"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("nnpc runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Stderr with miette's line wrapping undone: one line, single spaces.
pub fn message(o: &Output) -> String {
    stderr(o)
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A fresh scratch directory for one test (per process, so parallel runs do not collide).
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nnpc-test-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A path as the `&str` a command line takes.
pub fn arg(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// The environment variable `name` as a number (a long run's size or seed), else `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A little-endian f32 `.npy` file of `shape`, every value `v`.
pub fn npy(path: &std::path::Path, shape: &[usize], v: f32) {
    let dims: Vec<String> = shape.iter().map(|d| format!("{d},")).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}",
        dims.join(" ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for _ in 0..shape.iter().product::<usize>() {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(path, bytes).expect("write npy");
}
