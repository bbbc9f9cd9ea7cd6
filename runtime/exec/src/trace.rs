//! The per-`v_wr` trace of a software-graph run, in the emulator's JSON-lines format
//! (`docs/emulator.md`): one record per batch item, per destination of every executed `v_wr`,
//! item-major then execution order, with the storage bit patterns of every lane written.

use super::{ExecError, Execution, WrittenValue};
use nnp_host::storage_bits;
use nnp_host::trace::TraceRecord;
use nnp_lowering::swgraph::SwGraph;
use std::ops::Range;

/// The trace of a run made with `keep_writes` of the batch items `items` (the run's items,
/// numbered from `items.start`: a chunk of a larger batch); `None` when the run did not keep
/// the values.
pub fn records(graph: &SwGraph, exec: &Execution, items: Range<usize>) -> Option<Vec<TraceRecord>> {
    let mut out = Vec::with_capacity(graph.writes.len() * items.len());
    for (item, global) in items.enumerate() {
        for w in &graph.writes {
            let v: &WrittenValue = exec.written.get(&w.value)?;
            out.push(TraceRecord {
                item: global,
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

/// [`records`] of a run that must have kept its values (`keep_writes`): a run that did not is
/// an internal error.
pub fn kept_records(
    graph: &SwGraph,
    exec: &Execution,
    items: Range<usize>,
) -> Result<Vec<TraceRecord>, ExecError> {
    records(graph, exec, items)
        .ok_or_else(|| ExecError::Internal("the run kept no written values".into()))
}
