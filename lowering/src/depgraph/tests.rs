//! Tests of the dependency graph (hand-built programs, edges derived by hand).
