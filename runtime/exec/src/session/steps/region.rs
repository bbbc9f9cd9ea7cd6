//! A fused region's step: its element-wise MFU ops evaluated together ([`crate::fused`]), the
//! values read after it made tensors, its checked values scanned in its scratch rows.

use super::pass_state::Pass;
use crate::finite;
use crate::state::Failure;
use nnp_lowering::swgraph::{Plan, ValueId};
use std::collections::HashSet;

/// The nodes of a region, and per node whether its value becomes a tensor (read after the
/// region, or traced), is traced, and is checked.
pub(in crate::session) struct Region {
    nodes: Vec<usize>,
    kept: Vec<bool>,
    traced: Vec<bool>,
    checked: Vec<bool>,
}

impl Region {
    /// The region `r` of the evaluation order, whose nodes are `nodes`.
    pub(super) fn new(
        plan: &Plan,
        nodes: &[ValueId],
        r: &crate::fused::Region,
        traced: &HashSet<ValueId>,
    ) -> Region {
        Region {
            // The fused kernels address nodes by their place in the graph's arena.
            nodes: nodes.iter().map(|id| id.index()).collect(),
            kept: r.kept.clone(),
            traced: nodes.iter().map(|id| traced.contains(id)).collect(),
            checked: nodes
                .iter()
                .map(|&id| !plan.checks[id].is_empty())
                .collect(),
        }
    }

    /// Evaluate the region: its profile line and node count.
    pub(super) fn run(&self, pass: &mut Pass) -> Result<(&'static str, usize), Failure> {
        let (graph, plan) = (pass.ex.graph, pass.plan);
        let scan = |k: usize, item, rows: &[f64], len, found: &mut finite::Found| {
            let id = ValueId(k as u32);
            finite::scan_rows(graph, id, &plan.checks[id], rows, len, item, found)
        };
        let (values, parts) = pass
            .ex
            .eval_mfu(&self.nodes, &self.kept, &self.checked, scan)?;
        parts
            .into_iter()
            .for_each(|part| pass.fused_found.merge(part));
        let kept = self.nodes.iter().zip(&self.kept).zip(&self.traced);
        let kept = kept.filter(|((_, kept), _)| **kept);
        for (((&k, _), &traced), t) in kept.zip(values) {
            let id = ValueId(k as u32);
            if traced {
                pass.trace(id, &t)?;
            }
            pass.ex.values[id] = Some(t);
        }
        Ok(("fused mfu", self.nodes.len()))
    }
}
