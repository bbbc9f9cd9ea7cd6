//! An output's step: its row put into the run's output tensors as it is produced, so the
//! value it came from is freed at its last reader like any other.

use crate::tensors::with_host;
use crate::{ExecError, item_lanes};
use candle_core::Tensor;
use nnp_host::{Outputs, Tensor as HostTensor, canonical_nan};
use nnp_lowering::swgraph::{GraphError, SwGraph};

/// A run's output tensors, filled row by row as their `Output` nodes are reached: per output
/// of the graph, its values `[batch, rows, row_len]` and which rows are in.
pub(in crate::session) struct OutputRows<'g> {
    graph: &'g SwGraph,
    batch: usize,
    outputs: Vec<(Vec<f32>, Vec<bool>)>,
}

impl<'g> OutputRows<'g> {
    pub(in crate::session) fn new(graph: &'g SwGraph, batch: usize) -> Self {
        let outputs = graph
            .outputs
            .iter()
            .map(|o| (vec![0f32; batch * o.rows * o.row_len], vec![false; o.rows]))
            .collect();
        OutputRows {
            graph,
            batch,
            outputs,
        }
    }

    /// Row `row` of output `name` from the value `t` (`[batch or 1, lanes]`, each item's
    /// first `row_len` lanes).
    pub(super) fn put(&mut self, name: &str, row: usize, t: &Tensor) -> candle_core::Result<()> {
        let Some(k) = self.graph.outputs.iter().position(|o| o.name == name) else {
            return Ok(());
        };
        let (o, (out, done)) = (&self.graph.outputs[k], &mut self.outputs[k]);
        if row >= o.rows {
            return Ok(());
        }
        // Read in place (`to_written` would copy every row first).
        let (items, batch) = (t.dims().first().copied().unwrap_or(1), self.batch);
        with_host(t, |v| {
            for b in 0..batch {
                let dst = &mut out[(b * o.rows + row) * o.row_len..][..o.row_len];
                for (d, s) in dst.iter_mut().zip(item_lanes(v, items, b)) {
                    *d = canonical_nan(*s as f32);
                }
            }
        })?;
        done[row] = true;
        Ok(())
    }

    /// The output tensors, or the error naming a row that no `Output` node produced.
    pub(in crate::session) fn finish(self) -> Result<Outputs, ExecError> {
        let mut outputs = Outputs::new();
        for (o, (data, done)) in self.graph.outputs.iter().zip(self.outputs) {
            if let Some(r) = done.iter().position(|d| !d) {
                return Err(ExecError::Graph(GraphError::Other(format!(
                    "output `{}` row {r} is never produced",
                    o.name
                ))));
            }
            let mut shape = vec![self.batch];
            shape.extend(&o.shape);
            outputs.insert(o.name.clone(), HostTensor { shape, data });
        }
        Ok(outputs)
    }
}
