//! nnpc facade.

pub mod progen;
