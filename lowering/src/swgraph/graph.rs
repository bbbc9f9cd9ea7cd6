//! The software graph of one program ([`SwGraph`]): its nodes, outputs, declarations, write
//! records and non-finite checks, its JSON schema version, and the errors of a graph that is
//! not well formed ([`GraphError`]). The JSON form is in `file.rs`, its validation in
//! `validate.rs`, the plan in `plan.rs`.

use super::node::{Node, Op, ValueId};
use super::plan::PlanCell;
use nnp_grammar::{Decl, Interface, Mem, Provenance, Span};
use nnp_numerics::FloatFormat;
use serde::{Deserialize, Serialize};

/// Version of the JSON schema written by [`SwGraph::to_json`].
pub const SWGRAPH_VERSION: u32 = 3;

/// A value written by a `v_wr`: what the emulator's trace reports for that instruction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WriteRecord {
    pub chain: usize,
    pub iteration: u32,
    pub dst: Mem,
    /// First register written; for `netq`, the 0-based index of the push in the run.
    pub addr: u32,
    /// Registers written (the chain's width).
    pub tiles: u32,
    /// The vector value written (`[batch, tiles * N]`, storage format).
    pub value: ValueId,
    /// The chain's storage format (what the trace's bit patterns encode).
    pub storage: FloatFormat,
    /// 1-based source line and span of the `v_wr`.
    pub line: usize,
    pub span: Span,
}

/// An output declaration: how the `Output` rows assemble into a tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputInfo {
    pub name: String,
    pub shape: Vec<usize>,
    /// Rows (product of the leading dims) of `row_len` values each.
    pub rows: usize,
    pub row_len: usize,
}

/// The software graph of one program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwGraph {
    /// Schema version ([`SWGRAPH_VERSION`]).
    pub version: u32,
    /// Source file the graph was compiled from.
    pub source: String,
    /// FNV-1a of the firmware's text ([`nnp_grammar::fnv1a64`]).
    pub program_hash: String,
    pub target: String,
    /// FNV-1a of the target's settings ([`nnp_grammar::target_hash`]).
    pub target_hash: String,
    /// Native dimension N.
    pub native: usize,
    /// The storage format the host rounds loaded values to (the first vector chain's).
    pub storage: FloatFormat,
    /// A float format holding every value the outputs can hold
    /// ([`nnp_grammar::output_storage`]: the target's and every chain's storage).
    pub output_storage: FloatFormat,
    pub nodes: Vec<Node>,
    /// Every output declaration, in declaration order.
    pub outputs: Vec<OutputInfo>,
    /// The program's declarations (what host data a run of the graph needs, and how seeded
    /// random data is drawn for it).
    pub decls: Vec<Decl>,
    /// One record per executed `v_wr` (per iteration), in execution order.
    pub writes: Vec<WriteRecord>,
    /// Under the target's `nonfinite = "error"`: the values checked for NaN/Inf, in execution
    /// order (none otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<FiniteCheck>,
    /// The plan, once computed ([`SwGraph::plan`]); a graph built by hand starts with
    /// `PlanCell::default()`. Edit a graph's other fields before its plan is first asked
    /// for (or edit a clone, which plans anew).
    #[serde(skip)]
    pub planned: PlanCell,
}

/// A value that must hold no NaN or infinity under `nonfinite = "error"` (docs/semantics.md,
/// "Emulator and host data"): a weight or input as loaded, a `mv_mul` result, an MFU op's
/// result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FiniteCheck {
    pub value: ValueId,
    /// The tiles of each item's value that are checked: `tiles` of them from `first_tile`
    /// (one input row as netq pops it; else the whole value).
    pub first_tile: u32,
    pub tiles: u32,
    /// A weight, which every batch item shares: its error is item 0's.
    pub weight: bool,
    /// What made the value: `mv_mul`, an MFU op's mnemonic, or the host load.
    pub op: String,
    pub chain: usize,
    pub iteration: u32,
    /// 1-based source line and span of the instruction (of the declaration for a load).
    pub line: usize,
    pub span: Span,
}

/// A graph that is not well formed (a hand-edited or foreign JSON file).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum GraphError {
    #[error("not a software graph: {0}")]
    Json(String),
    #[error(
        "software graph schema version {found} is not supported (this nnpc writes version \
         {expected} and reads it and version 2)"
    )]
    #[diagnostic(help("recompile the firmware with `nnpc compile`"))]
    Version { found: u32, expected: u32 },
    #[error("output storage {output} does not hold the storage format {storage}")]
    #[diagnostic(help("recompile the firmware with `nnpc compile`"))]
    OutputStorage { output: String, storage: String },
    #[error("node {node} ({op}): {message}")]
    Node {
        node: usize,
        op: &'static str,
        message: String,
    },
    #[error("{0}")]
    Other(String),
}

/// A compiled graph's host side is its firmware's, recorded when it was lowered.
impl Interface for SwGraph {
    fn decls(&self) -> &[Decl] {
        &self.decls
    }
    fn native(&self) -> usize {
        self.native
    }
    fn output_storage(&self) -> Option<FloatFormat> {
        Some(self.output_storage)
    }
    fn provenance(&self) -> Provenance {
        Provenance {
            program: self.source.clone(),
            program_hash: self.program_hash.clone(),
            target: self.target.clone(),
            target_hash: self.target_hash.clone(),
        }
    }
}

impl SwGraph {
    /// Each node with its id, in arena order.
    pub fn nodes_by_id(&self) -> impl Iterator<Item = (ValueId, &Node)> {
        let id = |i: usize| ValueId(i as u32);
        self.nodes.iter().enumerate().map(move |(i, n)| (id(i), n))
    }

    pub fn node(&self, id: ValueId) -> &Node {
        &self.nodes[id.index()]
    }

    /// Values with no remaining readers are sinks; this lists the `Output` nodes.
    pub fn output_nodes(&self) -> impl Iterator<Item = (ValueId, &str, usize, ValueId)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.op {
                Op::Output { name, row, src } => {
                    Some((ValueId(i as u32), name.as_str(), *row, *src))
                }
                _ => None,
            })
    }

    /// Counts of nodes per op name, for summaries.
    pub fn op_counts(&self) -> Vec<(&'static str, usize)> {
        let mut counts: Vec<(&'static str, usize)> = Vec::new();
        for n in &self.nodes {
            match counts.iter_mut().find(|(k, _)| *k == n.op.name()) {
                Some((_, c)) => *c += 1,
                None => counts.push((n.op.name(), 1)),
            }
        }
        counts
    }
}
