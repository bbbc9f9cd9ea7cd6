//! Program analysis and lowering: dependency graph and software graph.
