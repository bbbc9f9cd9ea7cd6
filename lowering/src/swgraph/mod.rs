//! The software graph: an SSA graph of tensor ops that computes, bit for bit, what the NNP
//! computes for a checked [`Program`](nnp_grammar::Program).
//!
//! Nodes live in an arena (`SwGraph::nodes`) and refer to earlier nodes by [`ValueId`] (their
//! index), so the arena order is a topological order. Every value carries a leading batch
//! dimension: host inputs have `B` items, weights and constants 1 (broadcast). Register images
//! are tile-shaped:
//!
//! - a *vector* value of `t` tiles is `[batch, t * N]` (native tile `k` = lanes `kN .. (k+1)N`);
//! - a *tile stack* of `t` matrix tiles is `[batch, t, N, N]` (row = output lane, column = input
//!   lane);
//! - *logical* values (`Input`, `Weight`, `Zero`, `Unpad`) have the declaration's shape.
//!
//! [`lower`] builds the graph by symbolic execution of the program; [`optimize`] merges identical
//! work and drops dead values; [`compile`] does both and plans the result ([`Plan`]: order,
//! constants, fused regions, last uses, product candidates). The JSON form is versioned ([`SWGRAPH_VERSION`]); see
//! `docs/swgraph.md`.
//!
//! This file declares the parts and re-exports them: the nodes in `node.rs`, the graph in
//! `graph.rs`, its JSON form in `file.rs`, its validation in `validate.rs`, the side tables in
//! `node_map.rs`, the lowering in `lower.rs`, the passes in `passes.rs`, the plan in `plan.rs`.

mod file;
mod graph;
mod lower;
mod node;
mod node_map;
mod passes;
mod plan;
mod validate;

pub use file::SWGRAPH_OLDEST;
pub use graph::{FiniteCheck, GraphError, OutputInfo, SWGRAPH_VERSION, SwGraph, WriteRecord};
pub use lower::{LowerError, compile, lower};
pub use node::{BinOp, BlockAxis, Node, Op, TileLayout, TileSlice, Ty, UnOp, ValueId};
pub use node_map::NodeMap;
pub use passes::{Roots, optimize};
pub use plan::{Plan, PlanCell, Schedule, fusable};
pub use validate::MAX_VALUE_ELEMENTS;
pub(crate) use validate::infer_ty;
