//! Chains: assembling instructions into chains (docs/language.md), MFU placement, and checking a
//! finished chain (widths, address ranges, read-modify-write, register simulation, netq).
//! The chain records are in `records.rs`; the work is in the other child modules.

mod access;
mod assemble;
mod close;
mod finish;
mod open;
mod records;
mod vector;

pub(crate) use records::{MemOp, OpenChain, VecChain};
