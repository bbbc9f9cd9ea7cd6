//! The per-`v_wr` trace of a software-graph run, in the emulator's JSON-lines format
//! (`docs/emulator.md`): one record per batch item, per destination of every executed `v_wr`,
//! item-major then execution order, with the storage bit patterns of every lane written.

use super::{Execution, WrittenValue};
use crate::host::storage_bits;
use nnp_lowering::swgraph::SwGraph;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// One destination of one `v_wr` at one iteration, for one batch item (same fields and JSON
/// as the emulator's trace records).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwTraceRecord {
    pub item: usize,
    pub chain: usize,
    pub iteration: u32,
    /// Destination memory as written in source (`ivrf`, `asvrf0`, `dram`, `netq`, ...).
    pub dst: String,
    /// First register written; for `netq`, the 0-based index of the push in the run.
    pub addr: u32,
    /// 1-based source line of the `v_wr`.
    pub line: usize,
    /// Storage-format bit patterns of every lane of every tile written (tile-major).
    pub bits: Vec<u32>,
}

/// The trace of a run made with `keep_writes`; `None` when the run did not keep the values.
pub fn records(graph: &SwGraph, exec: &Execution, batch: usize) -> Option<Vec<SwTraceRecord>> {
    let mut out = Vec::with_capacity(graph.writes.len() * batch);
    for item in 0..batch {
        for w in &graph.writes {
            let v: &WrittenValue = exec.written.get(&w.value)?;
            out.push(SwTraceRecord {
                item,
                chain: w.chain,
                iteration: w.iteration,
                dst: w.dst.to_string(),
                addr: w.addr,
                line: w.line,
                bits: v
                    .item(item)
                    .iter()
                    .map(|x| storage_bits(&w.storage, *x as f32))
                    .collect(),
            });
        }
    }
    Some(out)
}

/// Write records as JSON lines.
pub fn write(path: &Path, records: &[SwTraceRecord]) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in records {
        serde_json::to_writer(&mut w, r)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}
