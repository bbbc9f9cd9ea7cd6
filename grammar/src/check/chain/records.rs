//! The records of a chain being assembled: its resolved memory operands ([`MemOp`]), reads, MFU
//! ops and writes, where its MFU ops landed, its body, and a complete vector chain waiting to be
//! checked.

use crate::check::state::Scalars;
use crate::program::{Addr, Mem, OpKind, QuantConfig, Span, Unit};

/// A resolved memory operand.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemOp {
    pub mem: Mem,
    pub addr: Addr,
    /// The whole operand (`ivrf[4] + 1`).
    pub span: Span,
    /// The memory name.
    pub mem_span: Span,
}

/// Where the chain's MFU ops landed so far.
#[derive(Clone, Debug, Default)]
pub(crate) struct Placement {
    /// MFU of the last placed op.
    pub k: u8,
    /// Op using each unit (add/sub, multiply, activation) of MFU `k`.
    pub used: [Option<Span>; 3],
    /// Why the ops moved to MFU `k`: (op that moved, unit, op already using that unit).
    pub moved: Option<(Span, Unit, Span)>,
    pub overflow_reported: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct ReadRec {
    pub op: MemOp,
    pub window: bool,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub(crate) struct OpRec {
    pub kind: OpKind,
    pub operand: Option<MemOp>,
    pub mfu: u8,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub(crate) struct WriteRec {
    pub op: MemOp,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub(crate) enum Body {
    Vector {
        read: ReadRec,
        mv_mul: Option<(MemOp, Span)>,
        ops: Vec<OpRec>,
        writes: Vec<WriteRec>,
        place: Placement,
    },
    Matrix {
        src: (MemOp, Span),
        dst: Option<(MemOp, Span)>,
    },
    /// A structural error was reported: swallow instructions up to `end_chain`.
    Broken,
}

/// The chain being assembled.
#[derive(Clone, Debug)]
pub(crate) struct OpenChain {
    pub first: Span,
    pub last: Span,
    pub scalars: Scalars,
    pub iterations: u32,
    pub quant: QuantConfig,
    pub body: Body,
    /// A chain opened by an instruction outside any chain (no `v_rd`): whether it swallowed a
    /// `v_wr` (past which only `v_wr` and `end_chain` belong to it). None for other chains.
    pub orphan_wrote: Option<bool>,
}

impl OpenChain {
    pub(super) fn complete(&self) -> bool {
        match &self.body {
            Body::Vector { writes, .. } => !writes.is_empty(),
            Body::Matrix { dst, .. } => dst.is_some(),
            Body::Broken => false,
        }
    }
}

/// A complete vector chain waiting to be checked.
pub(crate) struct VecChain {
    pub scalars: Scalars,
    pub iterations: u32,
    pub quant: QuantConfig,
    pub read: ReadRec,
    pub mv_mul: Option<(MemOp, Span)>,
    pub ops: Vec<OpRec>,
    pub writes: Vec<WriteRec>,
    pub span: Span,
}
