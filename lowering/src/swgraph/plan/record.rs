//! What a plan holds ([`Plan`], its [`Schedule`]) and the graph's cache of it ([`PlanCell`]);
//! `plan.rs` computes them.

use crate::swgraph::{NodeMap, ValueId};
use nnp_numerics::FloatFormat;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// What a run of a graph can know before any data arrives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Nodes whose value depends on no input (batch 1, the same in every run).
    pub constant: NodeMap<bool>,
    /// Constant values that a non-constant node or a non-finite check reads: what a warm run
    /// needs of the first run's constants (a session adds the values it hands back).
    pub keep: NodeMap<bool>,
    /// The evaluation order, its last uses and fused regions, for graph order
    /// ([`Schedule::new`] without products first).
    pub schedule: Schedule,
    /// Constant values that only products read, as their matrix, with one `(rows, cols)` for
    /// all of them, and no check reads: `(rows, cols)` per value, `None` for every other. The
    /// session prepares those in one pass and may keep them as integers alone.
    pub stacks: NodeMap<Option<(usize, usize)>>,
    /// `quantize` nodes that only products read, as their vector, quantized one native tile
    /// at a time, no check reads, and not kept constants: the candidates for quantizing
    /// straight to the integer kernel's integers (whether the format allows it is the
    /// executor's to say).
    pub vectors: NodeMap<bool>,
    /// Elements of the distinct weight stacks that products read.
    pub weight_elements: usize,
    /// The float format every value of a node is rounded to, where the graph shows one
    /// (`rounded`): an engine whose rounder keeps such values may skip rounding them again.
    pub rounded: NodeMap<Option<FloatFormat>>,
    /// The non-finite checks of each value ([`SwGraph::checks`]' indices, in execution order).
    ///
    /// [`SwGraph::checks`]: crate::swgraph::SwGraph::checks
    pub checks: NodeMap<Vec<usize>>,
}

/// An evaluation order of the nodes, with what follows from it alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The nodes, each after its operands.
    pub order: Vec<ValueId>,
    /// Position in `order` of the last node that reads each value (0 for a value nothing
    /// reads), so a run frees it there.
    pub last_use: NodeMap<usize>,
    /// Runs of `order` (positions) of two or more consecutive [`fusable`] nodes of one vector
    /// length: each is evaluated in one pass (a single op gains nothing).
    ///
    /// [`fusable`]: crate::swgraph::fusable
    pub regions: Vec<Range<usize>>,
}

/// A graph's plan, once computed ([`SwGraph::plan`]). Not part of the graph's JSON form (a
/// loaded graph plans itself) nor of its equality (the plan follows from the rest), and not
/// cloned: a clone is planned anew on first use, because callers clone a graph to edit it.
///
/// [`SwGraph::plan`]: crate::swgraph::SwGraph::plan
#[derive(Default)]
pub struct PlanCell(pub(super) OnceLock<Arc<Plan>>);

impl Clone for PlanCell {
    fn clone(&self) -> PlanCell {
        PlanCell::default()
    }
}

impl PartialEq for PlanCell {
    fn eq(&self, _: &PlanCell) -> bool {
        true
    }
}

impl std::fmt::Debug for PlanCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0.get() {
            Some(_) => "PlanCell(planned)",
            None => "PlanCell(not yet)",
        })
    }
}
