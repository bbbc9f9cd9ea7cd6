//! nnpc facade.
