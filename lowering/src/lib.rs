//! Program analysis and lowering: dependency graph and software graph.
pub mod depgraph;
pub mod html;
pub mod swgraph;
