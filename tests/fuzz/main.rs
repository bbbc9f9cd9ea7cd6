//! Fuzzing the three kinds of untrusted input nnpc reads, in process through the library (a few
//! whole commands through the binary): firmware text (`firmware.rs`), compiled graphs
//! (`graphs.rs`: `nnpc compile`'s JSON, `SwGraph::from_json`) and tensor file headers
//! (`tensors.rs`: safetensors and `.npy`). Each target mutates a corpus (the samples, their
//! compiled graphs, small tensor files; plus `tests/fuzz/corpus/`, every input that once found
//! a bug) and checks a property that can fail, not only "no panic" (docs/testing.md,
//! docs/fuzzing.md).
//!
//! Stable Rust: seeded loops, no libFuzzer. CI runs the default case counts (about a minute in
//! all); a long run: `NNPC_FUZZ_SECONDS=300 cargo test --release -p nnpc --test fuzz --
//! --nocapture` (each target for that long), or `NNPC_FUZZ_CASES=N` cases per target.
//! `NNPC_FUZZ_SEED=S NNPC_FUZZ_CASES=1` reproduces case S; a failing input is written to
//! `target/fuzz-failures/` (add it to the corpus with the fix).

mod commands;
#[path = "../common/mod.rs"]
mod common;
mod engine;
mod firmware;
mod graphs;
mod oracle;
mod tensors;
