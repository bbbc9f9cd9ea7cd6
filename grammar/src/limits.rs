//! How large a checked program is once run: the operations its chains unroll to and the bytes
//! its declarations hold. The checker refuses a program past these limits, and the lowering
//! and the emulator refuse one again before they allocate (a [`Program`] may be built by
//! hand), so a program too large for memory is an error naming its size, never an abort.
//!
//! Both counts are upper bounds of what the software graph and the emulator hold, computed in
//! saturating u64 arithmetic from the program alone (no allocation):
//! - operations: per chain, `iterations x instructions` (`end_chain` included; about one graph
//!   node and one dependency-graph node each), plus `iterations x tiles` for a matrix chain;
//! - data: every declaration padded to whole N-lane registers (a matrix to N x N tiles), 4
//!   bytes a value.

use crate::program::{Chain, ChainBody, Decl, DeclKind, Program};

/// Most operations a program may unroll to (chain iterations x instructions).
pub const MAX_OPERATIONS: u64 = 4_000_000;
/// Most bytes a program's declarations may hold, padded to native tiles (2 GiB).
pub const MAX_DATA_BYTES: u64 = 2 << 30;

/// The size of a program (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub operations: u64,
    pub data_bytes: u64,
}

/// A program too large to lower or emulate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, miette::Diagnostic)]
pub enum SizeError {
    #[error(
        "the program unrolls to {operations} operations (chain iterations x instructions), over \
         the limit of {MAX_OPERATIONS}"
    )]
    #[diagnostic(help("shorten the iteration counts (`s_wr iterations`) or the number of chains"))]
    Operations { operations: u64 },
    #[error(
        "the program's declarations hold {bytes} bytes padded to native tiles, over the limit of \
         {MAX_DATA_BYTES}"
    )]
    #[diagnostic(help("shrink the declarations, or use a target with a smaller native dimension"))]
    Data { bytes: u64 },
}

/// Operations of one chain.
pub fn chain_operations(c: &Chain) -> u64 {
    let per_iteration = match &c.body {
        // `v_rd`, `mv_mul`, the MFU ops, the `v_wr`s and `end_chain`.
        ChainBody::Vector(v) => {
            2 + u64::from(v.mv_mul.is_some()) + v.ops.len() as u64 + v.writes.len() as u64
        }
        // `m_rd`, `m_wr`, `end_chain`, and each tile copied.
        ChainBody::Matrix(m) => 3 + u64::from(m.tiles),
    };
    u64::from(c.iterations).saturating_mul(per_iteration)
}

/// Bytes a declaration holds at native dimension `n`, padded to whole registers or tiles.
pub fn decl_bytes(d: &Decl, n: usize) -> u64 {
    let n = n.max(1) as u64;
    let dims: Vec<u64> = d.shape.iter().map(|&x| x as u64).collect();
    let values = match (d.kind, dims.as_slice()) {
        (DeclKind::Matrix, [r, c]) => r
            .div_ceil(n)
            .saturating_mul(c.div_ceil(n))
            .saturating_mul(n.saturating_mul(n)),
        (_, [rows @ .., last]) => rows
            .iter()
            .fold(1u64, |p, &x| p.saturating_mul(x))
            .saturating_mul(last.div_ceil(n).saturating_mul(n)),
        (_, []) => n,
    };
    values.saturating_mul(4)
}

/// The footprint of declarations and chains at native dimension `n`.
pub fn footprint(decls: &[Decl], chains: &[Chain], n: usize) -> Footprint {
    Footprint {
        operations: chains
            .iter()
            .fold(0u64, |s, c| s.saturating_add(chain_operations(c))),
        data_bytes: decls
            .iter()
            .fold(0u64, |s, d| s.saturating_add(decl_bytes(d, n))),
    }
}

impl Program {
    /// The program's footprint (see [`crate::limits`]).
    pub fn footprint(&self) -> Footprint {
        footprint(&self.decls, &self.chains, self.native())
    }

    /// The footprint, or the first limit it passes.
    pub fn check_size(&self) -> Result<Footprint, SizeError> {
        let f = self.footprint();
        if f.operations > MAX_OPERATIONS {
            return Err(SizeError::Operations {
                operations: f.operations,
            });
        }
        if f.data_bytes > MAX_DATA_BYTES {
            return Err(SizeError::Data {
                bytes: f.data_bytes,
            });
        }
        Ok(f)
    }
}
