//! The open chain's lifecycle: starting it, swallowing instructions after an error, `end_chain`.

use super::records::{Body, OpenChain};
use crate::ast::Instr;
use crate::check::checker::Checker;
use crate::diagnostics::{Diagnostic, codes};
use crate::isa::Op;
use crate::program::Span;

impl Checker {
    pub(super) fn start_chain(&mut self, span: Span, body: Body) {
        let iterations = self.scalars.iterations.take().map_or(1, |(k, _)| k);
        self.open = Some(OpenChain {
            first: span,
            last: span,
            scalars: self.scalars,
            iterations,
            quant: self.quant.clone(),
            body,
            orphan_wrote: None,
        });
    }

    /// A chain swallowing instructions after an error ends at a statement that only makes
    /// sense between chains (`s_wr`, `quant`), so that it does not cascade.
    pub(in crate::check) fn drop_broken_chain(&mut self) {
        if self
            .open
            .as_ref()
            .is_some_and(|o| matches!(o.body, Body::Broken))
        {
            self.open = None;
            self.incomplete = true;
        }
    }

    /// A chain-body instruction with no chain open: report, and swallow up to `end_chain`.
    fn no_chain(&mut self, i: &Instr) {
        self.emit(
            Diagnostic::error(
                codes::CHAIN_START,
                format!(
                    "`{}` outside a chain: a chain starts with `v_rd`",
                    i.name.name
                ),
            )
            .label(i.name.span, "no chain is open here")
            .help("start the chain with `v_rd SRC` (or `m_rd dram[A]` for a matrix copy)"),
        );
        self.start_chain(i.span, Body::Broken);
        if let Some(open) = &mut self.open {
            open.orphan_wrote = Some(i.mnemonic.op == Op::VWr);
        }
    }

    /// The open chain for a body instruction (None when the instruction is swallowed).
    pub(super) fn body_chain(&mut self, i: &Instr) -> Option<&mut OpenChain> {
        if self.open.is_none() {
            self.no_chain(i);
            return None;
        }
        let writes = i.mnemonic.op == Op::VWr;
        if !writes && self.open.as_ref()?.orphan_wrote == Some(true) {
            // Past an orphan's writes, anything but a write is outside a chain again.
            self.open = None;
            self.no_chain(i);
            return None;
        }
        let open = self.open.as_mut()?;
        open.last = i.span;
        if let Some(wrote) = &mut open.orphan_wrote {
            *wrote |= writes;
        }
        if matches!(open.body, Body::Broken) {
            return None;
        }
        Some(open)
    }

    /// Before a new read: close a chain that lacks `end_chain`, or report a second read.
    /// Returns false when the instruction is swallowed.
    pub(super) fn before_read(&mut self, i: &Instr) -> bool {
        let Some(open) = &self.open else { return true };
        if matches!(open.body, Body::Broken) {
            // A read after a broken chain most likely starts a new chain.
            self.open = None;
            self.incomplete = true;
            return true;
        }
        if open.complete() {
            let (first, last) = (open.first, open.last);
            self.emit(
                Diagnostic::error(codes::MISSING_END_CHAIN, "chain without `end_chain`")
                    .label(last, "the chain's last instruction")
                    .label(i.name.span, "a new chain starts here")
                    .label(first, "chain starts here")
                    .help("add `end_chain` after the chain's last `v_wr`"),
            );
            self.close_chain(last);
            return true;
        }
        let first = open.first;
        self.emit(
            Diagnostic::error(codes::CHAIN_READ, "a chain has exactly one read")
                .label(i.span, "second read")
                .label(first, "the chain's read")
                .help("end the first chain (`v_wr ...`, `end_chain`) before reading again"),
        );
        if let Some(o) = self.open.as_mut() {
            o.body = Body::Broken;
            o.last = i.span;
        }
        false
    }

    pub(in crate::check) fn end_chain(&mut self, i: &Instr) {
        if !i.operands.is_empty() {
            self.emit(
                Diagnostic::error(codes::OPERANDS, "`end_chain` takes no operand")
                    .label(i.operands[0].span(), "unexpected operand"),
            );
        }
        let Some(open) = self.open.as_mut() else {
            self.emit(
                Diagnostic::error(codes::END_CHAIN, "`end_chain` without a chain")
                    .label(i.span, "no chain is open here")
                    .help("remove it, or start the chain with `v_rd`"),
            );
            return;
        };
        open.last = i.span;
        self.close_chain(i.span);
    }
}
