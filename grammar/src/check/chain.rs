//! Chains: assembling instructions into chains (docs/language.md), MFU placement, and checking a
//! finished chain (widths, address ranges, read-modify-write, register simulation, netq).

use super::state::Space;
use super::{Checker, MAX_WORK, MemOp, Scalars};
use crate::ast::Instr;
use crate::diagnostics::{Diagnostic, codes};
use crate::program::{
    Chain, ChainBody, DeclKind, MatrixChain, Mem, MfuOp, MvMul, NetqSlot, OpKind, QuantConfig,
    Read, Span, Unit, VectorChain, Window, Write,
};
use nnp_numerics::Format;
use std::collections::HashMap;

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

fn unit_index(u: Unit) -> usize {
    match u {
        Unit::AddSub => 0,
        Unit::Mul => 1,
        Unit::Activation => 2,
    }
}

fn unit_name(u: Unit) -> &'static str {
    match u {
        Unit::AddSub => "add/sub",
        Unit::Mul => "multiply",
        Unit::Activation => "activation",
    }
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
}

impl OpenChain {
    fn complete(&self) -> bool {
        match &self.body {
            Body::Vector { writes, .. } => !writes.is_empty(),
            Body::Matrix { dst, .. } => dst.is_some(),
            Body::Broken => false,
        }
    }
}

impl Checker {
    fn start_chain(&mut self, span: Span, body: Body) {
        let iterations = self.scalars.iterations.take().map_or(1, |(k, _)| k);
        self.open = Some(OpenChain {
            first: span,
            last: span,
            scalars: self.scalars,
            iterations,
            quant: self.quant.clone(),
            body,
        });
    }

    /// A chain swallowing instructions after an error ends at a statement that only makes
    /// sense between chains (`s_wr`, `quant`), so that it does not cascade.
    pub(super) fn drop_broken_chain(&mut self) {
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
    }

    /// The open chain for a body instruction (None when the instruction is swallowed).
    fn body_chain(&mut self, i: &Instr) -> Option<&mut OpenChain> {
        if self.open.is_none() {
            self.no_chain(i);
            return None;
        }
        let open = self.open.as_mut()?;
        open.last = i.span;
        if matches!(open.body, Body::Broken) {
            return None;
        }
        Some(open)
    }

    /// Before a new read: close a chain that lacks `end_chain`, or report a second read.
    /// Returns false when the instruction is swallowed.
    fn before_read(&mut self, i: &Instr) -> bool {
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

    pub(super) fn v_rd(&mut self, i: &Instr) {
        if !self.before_read(i) {
            return;
        }
        let window = i.mnemonic.op == crate::isa::Op::VRd2d;
        let Some(op) = self.mem_operand(i) else {
            self.start_chain(i.span, Body::Broken);
            return;
        };
        let bad = match op.mem {
            Mem::Mrf => Some("mrf holds matrix tiles: `mv_mul` reads it"),
            Mem::Netq if window => Some("a window needs an address"),
            _ => None,
        };
        if let Some(why) = bad {
            self.emit(
                Diagnostic::error(
                    codes::WRONG_MEMORY,
                    format!("`{}` cannot read {}", i.name.name, op.mem),
                )
                .label(op.mem_span, why)
                .help(if window {
                    "`v_rd_2d` reads a vector memory, e.g. `v_rd_2d ivrf[0]`"
                } else {
                    "`v_rd` reads netq, ivrf, dram, asvrfK or mulvrfK"
                }),
            );
            self.start_chain(i.span, Body::Broken);
            return;
        }
        self.start_chain(
            i.span,
            Body::Vector {
                read: ReadRec {
                    op,
                    window,
                    span: i.span,
                },
                mv_mul: None,
                ops: Vec::new(),
                writes: Vec::new(),
                place: Placement::default(),
            },
        );
    }

    pub(super) fn m_rd(&mut self, i: &Instr) {
        if !self.before_read(i) {
            return;
        }
        let Some(op) = self.mem_operand(i) else {
            self.start_chain(i.span, Body::Broken);
            return;
        };
        if op.mem != Mem::Dram {
            self.emit(
                Diagnostic::error(
                    codes::WRONG_MEMORY,
                    format!("`m_rd` cannot read {}", op.mem),
                )
                .label(op.mem_span, "m_rd copies matrix tiles from dram")
                .help("write `m_rd dram[A]`, then `m_wr mrf[B]`"),
            );
            self.start_chain(i.span, Body::Broken);
            return;
        }
        self.start_chain(
            i.span,
            Body::Matrix {
                src: (op, i.span),
                dst: None,
            },
        );
    }

    pub(super) fn m_wr(&mut self, i: &Instr) {
        let Some(open) = self.body_chain(i) else {
            return;
        };
        let problem = match &open.body {
            Body::Matrix { dst: None, .. } => None,
            Body::Matrix { dst: Some(_), .. } => Some("a matrix chain has one `m_wr`"),
            _ => {
                Some("`m_wr` belongs to a matrix chain: `m_rd dram[A]`, `m_wr mrf[B]`, `end_chain`")
            }
        };
        let first = open.first;
        if let Some(p) = problem {
            self.matrix_chain_error(i, p, first);
            return;
        }
        let Some(op) = self.mrf_operand(
            i,
            "cannot write",
            "m_wr writes matrix tiles into mrf",
            "write `m_wr mrf[B]`",
        ) else {
            return;
        };
        if let Some(OpenChain {
            body: Body::Matrix { dst, .. },
            ..
        }) = self.open.as_mut()
        {
            *dst = Some((op, i.span));
        }
    }

    fn matrix_chain_error(&mut self, i: &Instr, problem: &str, first: Span) {
        self.emit(
            Diagnostic::error(codes::MATRIX_CHAIN, format!("`{}` does not fit this chain", i.name.name))
                .label(i.name.span, problem.to_string())
                .label(first, "chain starts here")
                .help("a matrix chain is exactly `m_rd dram[A]`, `m_wr mrf[B]`, `end_chain`; a vector chain starts with `v_rd`"),
        );
        self.break_chain();
    }

    /// The memory operand of `i` (`m_wr`, `mv_mul`) when it is in mrf. Else the error
    /// (`` `i` {verb} MEM ``, with `label` and `help`) and the chain broken.
    fn mrf_operand(&mut self, i: &Instr, verb: &str, label: &str, help: &str) -> Option<MemOp> {
        match self.mem_operand(i) {
            Some(op) if op.mem == Mem::Mrf => return Some(op),
            Some(op) => self.emit(
                Diagnostic::error(
                    codes::WRONG_MEMORY,
                    format!("`{}` {verb} {}", i.name.name, op.mem),
                )
                .label(op.mem_span, label.to_string())
                .help(help.to_string()),
            ),
            None => {}
        }
        self.break_chain();
        None
    }

    fn break_chain(&mut self) {
        if let Some(o) = self.open.as_mut() {
            o.body = Body::Broken;
        }
    }

    pub(super) fn mv_mul(&mut self, i: &Instr) {
        let Some(open) = self.body_chain(i) else {
            return;
        };
        let first = open.first;
        let (read_op, has_mul, prev_ops, first_write) = match &open.body {
            Body::Vector {
                read,
                mv_mul,
                ops,
                writes,
                ..
            } => (
                read.op,
                mv_mul.map(|m| m.1),
                ops.first().map(|o| o.span),
                writes.first().map(|w| w.span),
            ),
            _ => {
                self.matrix_chain_error(i, "a matrix chain has no `mv_mul`", first);
                return;
            }
        };
        if let Some(prev) = has_mul {
            self.emit(
                Diagnostic::error(codes::CHAIN_ORDER, "a chain has at most one `mv_mul`")
                    .label(i.span, "second mv_mul")
                    .label(prev, "first mv_mul")
                    .help("split the work into two chains"),
            );
            self.break_chain();
            return;
        }
        if let Some(prev) = prev_ops.or(first_write) {
            self.emit(
                Diagnostic::error(codes::CHAIN_ORDER, "`mv_mul` must come right after `v_rd`")
                    .label(i.span, "too late in the chain")
                    .label(prev, "this comes before it")
                    .help("the MVM is the first stage of the pipeline: put `mv_mul` right after the read"),
            );
            self.break_chain();
            return;
        }
        let Some(op) = self.mrf_operand(
            i,
            "cannot read",
            "mv_mul multiplies by matrix tiles in mrf",
            "write `mv_mul mrf[A]` (a declared matrix name stands for its address)",
        ) else {
            return;
        };
        if read_op.mem != Mem::Ivrf {
            self.emit(
                Diagnostic::error(
                    codes::MV_MUL_SOURCE,
                    format!("`mv_mul` in a chain that reads {}", read_op.mem),
                )
                .label(i.name.span, "the MVM takes its input vector from ivrf only")
                .label(read_op.mem_span, format!("the chain reads {}", read_op.mem))
                .help("write the vector to ivrf in an earlier chain and start this one with `v_rd ivrf[A]`"),
            );
            self.break_chain();
            return;
        }
        if let Some(OpenChain {
            body: Body::Vector { mv_mul, .. },
            ..
        }) = self.open.as_mut()
        {
            *mv_mul = Some((op, i.span));
        }
    }

    pub(super) fn mfu_op(&mut self, i: &Instr, kind: OpKind) {
        let mfus = self.target.mfus;
        let target_name = self.target.name.clone();
        let Some(open) = self.body_chain(i) else {
            return;
        };
        let first = open.first;
        let Body::Vector { writes, place, .. } = &mut open.body else {
            self.matrix_chain_error(i, "a matrix chain has no MFU ops", first);
            return;
        };
        if let Some(w) = writes.first() {
            let w = w.span;
            self.emit(
                Diagnostic::error(
                    codes::CHAIN_ORDER,
                    format!("`{}` after `v_wr`", i.name.name),
                )
                .label(i.span, "MFU ops come before the chain's writes")
                .label(w, "first write")
                .help("move the op before the `v_wr`, or start a new chain"),
            );
            self.break_chain();
            return;
        }
        // Placement: MFU0 until a unit would be used twice, then MFU1, ...
        let unit = kind.unit();
        let u = unit_index(unit);
        if let Some(prev) = place.used[u] {
            place.k += 1;
            place.used = [None; 3];
            place.moved = Some((i.span, unit, prev));
        }
        place.used[u] = Some(i.span);
        let k = place.k;
        let moved = place.moved;
        if usize::from(k) >= mfus {
            if !place.overflow_reported {
                place.overflow_reported = true;
                let mut d = Diagnostic::error(
                    codes::TOO_MANY_MFUS,
                    format!(
                        "this chain needs MFU{k} but target `{target_name}` has {mfus} MFU{}",
                        if mfus == 1 { "" } else { "s" }
                    ),
                )
                .label(i.span, format!("placed on MFU{k}"));
                if let Some((_, unit, prev)) = moved {
                    d = d.label(
                        prev,
                        format!(
                            "MFU{}'s {} unit is already used here",
                            k - 1,
                            unit_name(unit)
                        ),
                    );
                }
                let need = usize::from(k) + 1;
                self.emit(d.help(format!(
                    "each MFU has one add/sub, one multiply and one activation unit: split the \
                     chain (write the intermediate vector to a VRF and continue in a new chain), \
                     or run on a target with at least {need} MFUs (`--target FILE`, whose TOML \
                     says `mfus = {need}`)"
                )));
            }
            self.push_op(kind, None, k, i.span);
            return;
        }
        let operand = if kind.has_operand() {
            let Some(op) = self.mem_operand(i) else {
                self.break_chain();
                return;
            };
            let (class, want) = match unit {
                Unit::Mul => ("mulvrf", Mem::MulVrf(k)),
                _ => ("asvrf", Mem::AsVrf(k)),
            };
            let index = match (op.mem, unit) {
                (Mem::MulVrf(j), Unit::Mul) => Some(j),
                (Mem::AsVrf(j), Unit::AddSub) => Some(j),
                _ => None,
            };
            match index {
                None => {
                    self.emit(
                        Diagnostic::error(
                            codes::WRONG_MEMORY,
                            format!("`{}` cannot read its operand from {}", i.name.name, op.mem),
                        )
                        .label(
                            op.mem_span,
                            format!("{} ops read {class}{{k}} of their MFU", unit_name(unit)),
                        )
                        .help(format!("this op runs on MFU{k}: put the operand in {want}")),
                    );
                    self.break_chain();
                    return;
                }
                Some(j) if j != k => {
                    let mut d = Diagnostic::error(
                        codes::MFU_OPERAND,
                        format!("`{}` runs on MFU{k} but reads {}", i.name.name, op.mem),
                    )
                    .label(op.mem_span, format!("{} belongs to MFU{j}", op.mem));
                    d = match moved {
                        Some((mover, unit, prev)) => {
                            let what = if mover == i.span {
                                format!(
                                    "MFU{}'s {} unit is already used here, so this op moves to MFU{k}",
                                    k - 1,
                                    unit_name(unit)
                                )
                            } else {
                                format!(
                                    "MFU{}'s {} unit is used here, so a later op moved the chain to MFU{k}",
                                    k - 1,
                                    unit_name(unit)
                                )
                            };
                            d.label(prev, what)
                        }
                        None => d.label(
                            i.name.span,
                            "no unit is used twice before this op, so it stays on MFU0",
                        ),
                    };
                    self.emit(d.help(format!(
                        "ops are placed on MFU0 until a unit would be used twice, then on MFU1, \
                         and so on; this op's operand must be in {want}"
                    )));
                    self.break_chain();
                    return;
                }
                Some(_) => Some(op),
            }
        } else {
            if !i.operands.is_empty() {
                self.emit(
                    Diagnostic::error(
                        codes::OPERANDS,
                        format!("`{}` takes no operand", i.name.name),
                    )
                    .label(i.operands[0].span().join(i.span), "unexpected operand")
                    .help(format!("write `{}` alone on its line", i.name.name)),
                );
                self.break_chain();
                return;
            }
            None
        };
        self.push_op(kind, operand, k, i.span);
    }

    fn push_op(&mut self, kind: OpKind, operand: Option<MemOp>, mfu: u8, span: Span) {
        if let Some(OpenChain {
            body: Body::Vector { ops, .. },
            ..
        }) = self.open.as_mut()
        {
            ops.push(OpRec {
                kind,
                operand,
                mfu,
                span,
            });
        }
    }

    pub(super) fn v_wr(&mut self, i: &Instr) {
        let Some(open) = self.body_chain(i) else {
            return;
        };
        let first = open.first;
        if !matches!(open.body, Body::Vector { .. }) {
            self.matrix_chain_error(i, "a matrix chain ends with `m_wr mrf[B]`", first);
            return;
        }
        let Some(op) = self.mem_operand(i) else {
            self.break_chain();
            return;
        };
        if op.mem == Mem::Mrf {
            self.emit(
                Diagnostic::error(codes::WRONG_MEMORY, "`v_wr` cannot write mrf")
                    .label(op.mem_span, "mrf holds matrix tiles")
                    .help("load matrices with a matrix chain: `m_rd dram[A]`, `m_wr mrf[B]`, `end_chain`"),
            );
            self.break_chain();
            return;
        }
        if let Some(OpenChain {
            body: Body::Vector { writes, .. },
            ..
        }) = self.open.as_mut()
        {
            writes.push(WriteRec { op, span: i.span });
        }
    }

    pub(super) fn end_chain(&mut self, i: &Instr) {
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

    /// After the last item: an open chain, pending iterations, netq leftovers, warnings.
    pub(super) fn finish(&mut self) {
        if self.stopped {
            return;
        }
        if let Some(open) = &self.open {
            let (first, last) = (open.first, open.last);
            let broken = matches!(open.body, Body::Broken);
            self.incomplete |= broken;
            if !broken {
                self.emit(
                    Diagnostic::error(codes::MISSING_END_CHAIN, "chain without `end_chain`")
                        .label(last, "the file ends after this instruction")
                        .label(first, "chain starts here")
                        .help("add `end_chain` after the chain's last `v_wr`"),
                );
                self.close_chain(last);
            }
            self.open = None;
        }
        if let Some((_, span)) = self.scalars.iterations {
            self.emit(
                Diagnostic::error(
                    codes::SCALAR_VALUE,
                    "`s_wr iterations` with no chain after it",
                )
                .label(span, "applies to the next chain, but none follows")
                .help("remove it, or add the chain it should repeat"),
            );
        }
        // After a chain was dropped or not simulated (it had errors), or a size limit stopped
        // the walk, netq counts and unused data are unknown: saying more would only echo
        // those errors.
        if !self.incomplete && !self.stopped {
            self.netq_leftovers();
            self.unwritten_outputs();
            self.unused_warnings();
        }
    }

    fn netq_leftovers(&mut self) {
        let mut out = Vec::new();
        for (input, q) in [(true, &self.inputs), (false, &self.outputs)] {
            let mut done: HashMap<usize, usize> = HashMap::new();
            for &(d, _, _) in &q.rows[..q.next] {
                *done.entry(d).or_default() += 1;
            }
            let mut missing = Vec::new();
            for &(d, _, _) in &q.rows[q.next..] {
                if missing.last() != Some(&d) {
                    missing.push(d);
                }
            }
            for d in missing {
                let decl = &self.decls[d];
                let n = done.get(&d).copied().unwrap_or(0);
                let (what, verb, help) = if input {
                    (
                        "input",
                        "popped by `v_rd netq`",
                        "each `v_rd netq` (per iteration) pops one row: add the missing reads or fix the shape",
                    )
                } else {
                    (
                        "output",
                        "pushed by `v_wr netq`",
                        "each `v_wr netq` (per iteration) pushes one row: add the missing writes or fix the shape",
                    )
                };
                out.push(
                    Diagnostic::error(
                        codes::NETQ_COUNT,
                        format!(
                            "{what} `{}` has {} row{} but only {n} {} {verb}",
                            decl.name,
                            decl.rows(),
                            if decl.rows() == 1 { "" } else { "s" },
                            if n == 1 { "is" } else { "are" }
                        ),
                    )
                    .label(
                        self.decl_names[d],
                        format!(
                            "{} row{}",
                            decl.rows(),
                            if decl.rows() == 1 { "" } else { "s" }
                        ),
                    )
                    .help(help),
                );
            }
        }
        for d in out {
            self.emit(d);
        }
    }

    /// Outputs placed in memory are read back by the host after the run: every register of
    /// one must hold a value by then (the emulator and the software graph refuse to read one
    /// that nothing wrote).
    fn unwritten_outputs(&mut self) {
        let mut out = Vec::new();
        for &(space, start, end, i) in &self.decl_index {
            let d = &self.decls[i];
            let Some(place) = d.place.filter(|_| d.kind == DeclKind::Output) else {
                continue;
            };
            let unwritten: Vec<u32> = (start..end)
                .filter(|&r| self.regs.writer_at(space, r) == 0)
                .collect();
            let (Some(&first), Some(&last)) = (unwritten.first(), unwritten.last()) else {
                continue;
            };
            let mem = place.mem;
            let which = if unwritten.len() == 1 {
                format!("{mem}[{first}] is never written")
            } else {
                format!(
                    "{} of its {} registers are never written, {mem}[{first}] to {mem}[{last}]",
                    unwritten.len(),
                    end - start
                )
            };
            out.push(
                Diagnostic::error(
                    codes::UNINIT_READ,
                    format!(
                        "output `{}` is read back from {mem}[{first}] after the run, but nothing \
                         writes it",
                        d.name
                    ),
                )
                .label(self.decl_names[i], which)
                .help(format!(
                    "write all of {mem}[{start}..{end}] before the program ends (check the \
                     `rows` and `iterations` of the chains that write `{}`), or shrink its \
                     shape",
                    d.name
                )),
            );
        }
        for d in out {
            self.emit(d);
        }
    }

    fn unused_warnings(&mut self) {
        // Outputs placed in memory are read back by the host after the run.
        for &(space, start, end, i) in &self.decl_index.clone() {
            if self.decls[i].kind == DeclKind::Output {
                for r in start..end {
                    self.regs.keep(space, r);
                }
            }
        }
        let mut out = Vec::new();
        for w in self.regs.writers.iter().skip(1).filter(|w| !w.used) {
            if w.is_decl {
                let Some(d) = w.decl.and_then(|d| self.decls.get(d)) else {
                    continue;
                };
                if d.kind == DeclKind::Output {
                    continue; // written by the program, collected by the host
                }
                out.push(
                    Diagnostic::warning(codes::UNREAD_DECL, format!("`{}` is never read", d.name))
                        .label(w.span, "declared here")
                        .help("remove the declaration, or use it"),
                );
            } else {
                let mut d = Diagnostic::warning(codes::DEAD_WRITE, "this write is never read")
                    .label(w.span, "written here");
                d = match w.overwritten_by {
                    Some(s) => d
                        .label(s, "overwritten here before any read")
                        .help("remove the first write, or read its value before overwriting it"),
                    None => d.help(
                        "nothing reads it afterwards and it is not an output: remove it, or \
                         declare `output NAME : [...] at MEM[ADDR]` to read it back",
                    ),
                };
                out.push(d);
            }
        }
        for d in out {
            self.emit(d);
        }
    }

    /// Finish the open chain: check it as a whole and add it to the program.
    pub(super) fn close_chain(&mut self, end: Span) {
        let Some(open) = self.open.take() else { return };
        let span = open.first.join(end);
        match open.body {
            Body::Broken => self.incomplete = true,
            Body::Matrix { src, dst } => {
                let Some(dst) = dst else {
                    self.emit(
                        Diagnostic::error(codes::MATRIX_CHAIN, "matrix chain without `m_wr`")
                            .label(end, "the chain ends here")
                            .label(open.first, "chain starts here")
                            .help("a matrix chain is `m_rd dram[A]`, `m_wr mrf[B]`, `end_chain`"),
                    );
                    self.incomplete = true;
                    return;
                };
                self.matrix_chain(&open.scalars, open.iterations, src, dst, span);
            }
            Body::Vector {
                read,
                mv_mul,
                ops,
                writes,
                ..
            } => {
                if writes.is_empty() {
                    self.emit(
                        Diagnostic::error(codes::MISSING_WRITE, "chain without `v_wr`")
                            .label(end, "the chain ends here without writing its result")
                            .label(open.first, "chain starts here")
                            .help("add `v_wr DST` (netq, ivrf, dram, asvrfK, mulvrfK) before `end_chain`"),
                    );
                    self.incomplete = true;
                    return;
                }
                let c = VecChain {
                    scalars: open.scalars,
                    iterations: open.iterations,
                    quant: open.quant,
                    read,
                    mv_mul,
                    ops,
                    writes,
                    span,
                };
                self.vector_chain(c);
            }
        }
    }

    /// Check that `extent` registers from `addr` stay inside the memory for every iteration.
    fn in_range(
        &mut self,
        op: &MemOp,
        tile_space: bool,
        extent: u32,
        iterations: u32,
        what: &str,
    ) -> bool {
        if op.mem == Mem::Netq {
            return true;
        }
        let size = if tile_space {
            i64::from(self.target.memory.dram_tiles)
        } else {
            i64::from(self.target.mem_size(op.mem))
        };
        let last = i64::from(iterations.max(1) - 1);
        let at = |t: i64| i64::from(op.addr.base) + t * i64::from(op.addr.inc);
        let (unit, mem) = if tile_space || op.mem == Mem::Mrf {
            (
                "tiles",
                if tile_space {
                    "dram (matrix tiles)".to_string()
                } else {
                    "mrf".to_string()
                },
            )
        } else {
            ("registers", op.mem.to_string())
        };
        let iter_note = |t: i64| {
            if iterations > 1 {
                format!(" at iteration {t}")
            } else {
                String::new()
            }
        };
        // Affine in t: the extremes are at the first or the last iteration.
        if at(last) < 0 {
            let t = (0..=last).find(|&t| at(t) < 0).unwrap_or(last);
            self.emit(
                Diagnostic::error(
                    codes::ADDRESS_RANGE,
                    format!("address {}{} is negative", at(t), iter_note(t)),
                )
                .label(
                    op.span,
                    format!("{what} {}[{} + t * {}]", op.mem, op.addr.base, op.addr.inc),
                )
                .help("the increment walks below address 0: check its sign or the iteration count"),
            );
            return false;
        }
        for t in [0, last] {
            let end = at(t) + i64::from(extent);
            if end > size {
                let first = at(t);
                self.emit(
                    Diagnostic::error(
                        codes::ADDRESS_RANGE,
                        format!(
                            "{}[{first}..{end}] is out of range{}: {mem} has {size} {unit}",
                            op.mem,
                            iter_note(t)
                        ),
                    )
                    .label(
                        op.span,
                        format!("{what} {extent} {unit} from {}[{first}]", op.mem),
                    )
                    .help(format!(
                        "the last valid {} is {}",
                        if unit == "tiles" { "tile" } else { "register" },
                        size - 1
                    )),
                );
                return false;
            }
        }
        true
    }

    fn count_work(&mut self, amount: u64, span: Span) -> bool {
        self.work = self.work.saturating_add(amount);
        if self.work > MAX_WORK {
            self.emit(
                Diagnostic::error(codes::TOO_LARGE, "program too large to check")
                    .label(
                        span,
                        format!("more than {MAX_WORK} register accesses by here"),
                    )
                    .help("reduce iteration counts or widths"),
            );
            self.stopped = true;
            return false;
        }
        true
    }

    fn read_reg(
        &mut self,
        space: Space,
        reg: u32,
        mem: Mem,
        t: u32,
        iterations: u32,
        span: Span,
    ) -> Option<u32> {
        let w = self.regs.read(space, reg);
        // After a dropped chain its writes are missing: an uninitialised read may be an echo.
        if w.is_none() && !self.incomplete && !self.reported(codes::UNINIT_READ, span) {
            let when = if iterations > 1 {
                format!(" (iteration {t})")
            } else {
                String::new()
            };
            self.emit(
                Diagnostic::error(
                    codes::UNINIT_READ,
                    format!("{mem}[{reg}] is read before anything writes it{when}"),
                )
                .label(span, format!("{mem}[{reg}] holds no value yet"))
                .help(format!(
                    "declare the data the host loads there (e.g. `vector NAME : [LEN] at \
                     {mem}[{reg}]`, or `= 0` for zeros) or write it in an earlier chain"
                )),
            );
        }
        w
    }

    fn matrix_chain(
        &mut self,
        s: &Scalars,
        iterations: u32,
        src: (MemOp, Span),
        dst: (MemOp, Span),
        span: Span,
    ) {
        let tiles = s.rows * s.cols;
        let ok = self.in_range(&src.0, true, tiles, iterations, "copies")
            & self.in_range(&dst.0, false, tiles, iterations, "writes");
        self.incomplete |= !ok;
        if ok && self.count_work(u64::from(iterations) * u64::from(tiles) * 2, span) {
            let src_space = Space::of(Mem::Dram, true);
            let dst_space = Space::of(Mem::Mrf, false);
            if let (Some(ss), Some(ds)) = (src_space, dst_space) {
                let w = self.regs.instr_writer(dst.1);
                for t in 0..iterations {
                    let (a, b) = (src.0.addr.at(t), dst.0.addr.at(t));
                    // Each tile's data: a tile of the matrix declared at dram there.
                    let held: Vec<Option<(usize, u32)>> = (0..tiles)
                        .map(|j| {
                            self.read_reg(ss, a + j, Mem::Dram, t, iterations, src.0.span)?;
                            let d = self.decl_at(ss, a + j)?;
                            let base = self.decls[d].place.map_or(0, |p| p.addr);
                            Some((d, a + j - base))
                        })
                        .collect();
                    for (j, held) in (0..tiles).zip(held) {
                        self.regs.write(ds, b + j, w);
                        match held {
                            Some(h) => self.mrf_tiles.insert(b + j, h),
                            None => self.mrf_tiles.remove(&(b + j)),
                        };
                    }
                }
            }
        }
        let index = self.chains.len();
        self.chains.push(Chain {
            index,
            iterations,
            rows: s.rows,
            cols: s.cols,
            body: ChainBody::Matrix(MatrixChain {
                src: Mem::Dram,
                src_addr: src.0.addr,
                dst: Mem::Mrf,
                dst_addr: dst.0.addr,
                tiles,
                src_span: src.1,
                dst_span: dst.1,
            }),
            span,
        });
    }
}

/// A complete vector chain waiting to be checked.
pub(super) struct VecChain {
    pub scalars: Scalars,
    pub iterations: u32,
    pub quant: QuantConfig,
    pub read: ReadRec,
    pub mv_mul: Option<(MemOp, Span)>,
    pub ops: Vec<OpRec>,
    pub writes: Vec<WriteRec>,
    pub span: Span,
}

impl Checker {
    fn vector_chain(&mut self, c: VecChain) {
        let s = c.scalars;
        let k = c.iterations;
        let width = s.rows;
        let needed = if c.mv_mul.is_some() { s.cols } else { s.rows };
        let needed_name = if c.mv_mul.is_some() { "cols" } else { "rows" };
        let mut ok = true;

        // Read width and window.
        let window = c.read.window.then_some(Window {
            w: s.win_w,
            h: s.win_h,
            pitch: s.pitch,
        });
        let (read_tiles, read_extent) = match window {
            Some(w) => {
                let tiles = w.w * w.h;
                if tiles != needed {
                    self.emit(
                        Diagnostic::error(
                            codes::WIDTH,
                            format!(
                                "the window is {} x {} = {tiles} tiles but the chain reads {needed_name} = {needed}",
                                w.h, w.w
                            ),
                        )
                        .label(c.read.span, format!("reads win_h x win_w = {tiles} tiles"))
                        .help(format!("set `s_wr {needed_name}, {tiles}` before the chain, or change win_w/win_h")),
                    );
                    ok = false;
                }
                if w.pitch < w.w {
                    self.emit(
                        Diagnostic::error(
                            codes::SCALAR_VALUE,
                            format!("pitch = {} is smaller than win_w = {}", w.pitch, w.w),
                        )
                        .label(c.read.span, "the window's rows would overlap")
                        .help("set `s_wr pitch, P` to the number of tiles per image row"),
                    );
                    ok = false;
                }
                (tiles, (w.h - 1) * w.pitch + w.w)
            }
            None => (needed, needed),
        };
        if ok {
            ok &= self.in_range(&c.read.op, false, read_extent, k, "reads");
        }
        if let Some((m, _)) = &c.mv_mul {
            ok &= self.in_range(m, false, s.rows * s.cols, k, "multiplies by");
        }
        for op in c.ops.iter().filter_map(|o| o.operand.as_ref()) {
            ok &= self.in_range(op, false, width, k, "reads");
        }
        for w in &c.writes {
            ok &= self.in_range(&w.op, false, width, k, "writes");
        }
        let index = self.chains.len();
        if ok {
            // Register accesses over all iterations (the read-modify-write check and the
            // simulation are both linear in it).
            let per_iter = u64::from(read_extent)
                + u64::from(s.rows * s.cols) * u64::from(c.mv_mul.is_some())
                + u64::from(width) * (c.ops.len() + c.writes.len()) as u64;
            ok = self.count_work(per_iter * u64::from(k), c.span);
            if ok {
                let layout = c.mv_mul.is_none_or(|(m, _)| {
                    self.matrix_layout(&m, &s, k) && self.one_matrix_format(&m, &s, k, &c.quant)
                });
                ok = self.read_modify_write(&c, width) & layout;
            }
        }
        self.incomplete |= !ok;
        if ok {
            self.simulate(&c, index, read_tiles, window, width);
        }

        // The matrix format of each iteration: that of its tiles (`one_matrix_format`).
        let mv_mul = c.mv_mul.map(|(m, span)| {
            let format = |t: u32| self.tile_format(m.addr.at(t), &c.quant);
            let matrix_format = format(0);
            let mut iteration_formats = Vec::new();
            if ok && (1..k).any(|t| format(t) != matrix_format) {
                iteration_formats = (0..k).map(format).collect();
            }
            MvMul {
                addr: m.addr,
                matrix_format,
                iteration_formats,
                span,
            }
        });
        self.chains.push(Chain {
            index,
            iterations: k,
            rows: s.rows,
            cols: s.cols,
            body: ChainBody::Vector(VectorChain {
                read: Read {
                    src: c.read.op.mem,
                    addr: c.read.op.addr,
                    window,
                    tiles: read_tiles,
                    span: c.read.span,
                },
                mv_mul,
                ops: c
                    .ops
                    .iter()
                    .map(|o| MfuOp {
                        kind: o.kind,
                        operand: o.operand.map(|m| (m.mem, m.addr)),
                        mfu: o.mfu,
                        span: o.span,
                    })
                    .collect(),
                writes: c
                    .writes
                    .iter()
                    .map(|w| Write {
                        dst: w.op.mem,
                        addr: w.op.addr,
                        span: w.span,
                    })
                    .collect(),
                width,
                quant: c.quant,
            }),
            span: c.span,
        });
    }

    /// `mv_mul` on the tiles of a matrix declared in mrf, while they hold its data, must use
    /// its layout in every iteration: `cols` = its column tiles, starting on a tile row, each
    /// tile the next of that matrix (not running past its end, nor into another's data).
    /// Tiles copied from dram are not held to a layout.
    fn matrix_layout(&mut self, m: &MemOp, s: &Scalars, k: u32) -> bool {
        let tiles = s.rows * s.cols;
        for t in 0..k.max(1) {
            let a = m.addr.at(t);
            let Some(&(d, first)) = self.mrf_tiles.get(&a) else {
                continue; // uninitialised: the simulation says so
            };
            let decl = &self.decls[d];
            // Copied tiles may be multiplied a block at a time (a tile, a column of tiles).
            if decl.place.is_none_or(|p| p.mem != Mem::Mrf) {
                continue;
            }
            let n = self.n;
            let (rt, ct) = (
                decl.shape[0].div_ceil(n) as u32,
                decl.shape[1].div_ceil(n) as u32,
            );
            let dims = format!("[{}, {}]", decl.shape[0], decl.shape[1]);
            let name = decl.name.clone();
            let iteration = match k > 1 {
                true => format!(" (iteration {t})"),
                false => String::new(),
            };
            // The first tile that is not the next of `d`'s tiles.
            let stray = (1..tiles).find(|&j| self.mrf_tiles.get(&(a + j)) != Some(&(d, first + j)));
            let problem = if s.cols != ct {
                Some((
                    format!(
                        "`mv_mul` uses rows x cols = {} x {} tiles but matrix `{name}` {dims} is {rt} x {ct} tiles (N = {n})",
                        s.rows, s.cols
                    ),
                    format!("set `s_wr cols, {ct}` before the chain"),
                ))
            } else if !first.is_multiple_of(ct) {
                Some((
                    format!("`mv_mul` starts in the middle of a tile row of `{name}`{iteration}"),
                    format!(
                        "start at a tile of `{name}` whose index is a multiple of {ct} (its tiles per row)"
                    ),
                ))
            } else if first + tiles > rt * ct {
                Some((
                    format!(
                        "`mv_mul` reads past the end of `{name}`{iteration} ({} x {} tiles from tile {first})",
                        s.rows, s.cols
                    ),
                    format!(
                        "`{name}` {dims} has {rt} tile rows: set `s_wr rows, {}` at most",
                        rt - first / ct
                    ),
                ))
            } else {
                stray.map(|j| {
                    let holds = match self.mrf_tiles.get(&(a + j)) {
                        Some(&(o, i)) => format!("tile {i} of `{}`", self.decls[o].name),
                        None => "no matrix's data".to_string(),
                    };
                    (
                        format!(
                            "`mv_mul`'s tile {j}{iteration} (mrf[{}]) holds {holds}, not tile {} of `{name}`",
                            a + j,
                            first + j
                        ),
                        format!(
                            "copy `{name}`'s tiles in order (`m_rd`/`m_wr`), or multiply by each matrix in its own chain"
                        ),
                    )
                })
            };
            if let Some((msg, help)) = problem {
                let name_span = self.decl_names[d];
                self.emit(
                    Diagnostic::error(codes::WIDTH, msg)
                        .label(m.span, format!("{} x {} tiles", s.rows, s.cols))
                        .label(name_span, format!("{rt} x {ct} tiles"))
                        .help(help),
                );
                return false;
            }
        }
        true
    }

    /// The `mvm.matrix` format of mrf tile `a`: that of the matrix declaration whose data it
    /// holds, else the chain's.
    fn tile_format(&self, a: u32, quant: &QuantConfig) -> Format {
        let held = self.mrf_tiles.get(&a);
        held.and_then(|&(d, _)| self.decls[d].format)
            .unwrap_or(quant.mvm_matrix)
    }

    /// One `mv_mul` quantizes its tiles with one format: the tiles of each iteration hold
    /// matrices of one `mvm.matrix` format (each matrix's own `quant`, else the chain's).
    fn one_matrix_format(&mut self, m: &MemOp, s: &Scalars, k: u32, quant: &QuantConfig) -> bool {
        let tiles = s.rows * s.cols;
        for t in 0..k.max(1) {
            let a = m.addr.at(t);
            let first = self.tile_format(a, quant);
            let Some(j) = (1..tiles).find(|&j| self.tile_format(a + j, quant) != first) else {
                continue;
            };
            let holds = |a: u32| match self.mrf_tiles.get(&a) {
                Some(&(d, _)) => format!("`{}`", self.decls[d].name),
                None => "no matrix's data".to_string(),
            };
            let message = format!(
                "`mv_mul`'s tiles hold matrices of different formats: tile 0 ({}, {first}) and \
                 tile {j} ({}, {})",
                holds(a),
                holds(a + j),
                self.tile_format(a + j, quant)
            );
            self.emit(
                Diagnostic::error(codes::WIDTH, message)
                    .label(m.span, format!("{} x {} tiles", s.rows, s.cols))
                    .help(
                        "multiply by each matrix in its own chain, or give them the same `quant`",
                    ),
            );
            return false;
        }
        true
    }

    /// No write of the chain may hit a register it reads as an MFU operand (any iteration).
    fn read_modify_write(&mut self, c: &VecChain, width: u32) -> bool {
        if c.ops.iter().all(|o| o.operand.is_none()) {
            return true;
        }
        let k = c.iterations;
        let mut operands: HashMap<(Mem, u32), usize> = HashMap::new();
        for (oi, o) in c.ops.iter().enumerate() {
            if let Some(m) = &o.operand {
                for t in 0..k {
                    let a = m.addr.at(t);
                    for r in a..a + width {
                        operands.entry((m.mem, r)).or_insert(oi);
                    }
                }
            }
        }
        for w in &c.writes {
            for t in 0..k {
                let a = w.op.addr.at(t);
                for r in a..a + width {
                    if let Some(&oi) = operands.get(&(w.op.mem, r)) {
                        let o = &c.ops[oi];
                        let Some(m) = o.operand else { continue };
                        self.emit(
                            Diagnostic::error(
                                codes::READ_MODIFY_WRITE,
                                format!("the chain writes {}[{r}], which it reads as an MFU operand", w.op.mem),
                            )
                            .label(w.op.span, format!("writes {}[{r}]", w.op.mem))
                            .label(m.span, format!("operand of `{}`", o.kind.mnemonic()))
                            .help("an operand VRF cannot be read and written by the same chain: write the result elsewhere (e.g. double-buffer) and copy it in a later chain"),
                        );
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Run the chain's register traffic in order, iteration by iteration.
    fn simulate(
        &mut self,
        c: &VecChain,
        index: usize,
        read_tiles: u32,
        window: Option<Window>,
        width: u32,
    ) {
        let k = c.iterations;
        let s = c.scalars;
        let writers: Vec<Option<u32>> = c
            .writes
            .iter()
            .map(|w| (w.op.mem != Mem::Netq).then(|| self.regs.instr_writer(w.span)))
            .collect();
        let mut tiles = Vec::new();
        for t in 0..k {
            // Reads: v_rd, then the matrix, then the operands.
            let r = &c.read.op;
            let mut popped = None;
            tiles.clear();
            if r.mem == Mem::Netq {
                let before = self.pops.len();
                self.netq_slot(Netq::Pop, read_tiles, index, t, r.span);
                popped = self.pops.get(before).map(|slot| slot.decl);
                tiles.extend(0..read_tiles);
            } else if let Some(space) = Space::of(r.mem, false) {
                let a = r.addr.at(t);
                match window {
                    Some(w) => tiles.extend(w.offsets().map(|off| a + off)),
                    None => tiles.extend(a..a + read_tiles),
                }
                for &reg in &tiles {
                    self.read_reg(space, reg, r.mem, t, k, r.span);
                }
            }
            if let Some((m, _)) = &c.mv_mul
                && let Some(space) = Space::of(Mem::Mrf, false)
            {
                let a = m.addr.at(t);
                for reg in a..a + s.rows * s.cols {
                    self.read_reg(space, reg, Mem::Mrf, t, k, m.span);
                }
            }
            for o in &c.ops {
                if let Some(m) = &o.operand
                    && let Some(space) = Space::of(m.mem, false)
                {
                    let a = m.addr.at(t);
                    for reg in a..a + width {
                        self.read_reg(space, reg, m.mem, t, k, m.span);
                    }
                }
            }
            // Writes.
            for (w, writer) in c.writes.iter().zip(&writers) {
                match (Space::of(w.op.mem, false), writer) {
                    (Some(space), Some(writer)) => {
                        let a = w.op.addr.at(t);
                        for reg in a..a + width {
                            self.regs.write(space, reg, *writer);
                        }
                    }
                    _ => self.netq_slot(Netq::Push, width, index, t, w.op.span),
                }
            }
            self.follow_pads(c, t, popped, &tiles);
        }
    }

    /// Take the next input row (pop) or output row (push) for a chain's iteration:
    /// record it, or report a width or count that does not match the declarations.
    fn netq_slot(&mut self, dir: Netq, tiles: u32, chain: usize, iteration: u32, span: Span) {
        let pop = dir == Netq::Pop;
        let queue = if pop {
            &mut self.inputs
        } else {
            &mut self.outputs
        };
        match queue.take() {
            Some((decl, row, row_tiles)) => {
                if row_tiles != tiles && !self.incomplete && !self.reported(codes::NETQ_WIDTH, span)
                {
                    let d = &self.decls[decl];
                    let shape = format!("{:?}", d.shape);
                    let (what, verb, kind) = if pop {
                        ("v_rd", "pops", "input")
                    } else {
                        ("v_wr", "pushes", "output")
                    };
                    // A chain that pops netq has no mv_mul (only ivrf feeds the MVM), so
                    // both widths are `rows`.
                    let help = if pop {
                        format!(
                            "a pop reads `rows` tiles: set `s_wr rows, {row_tiles}` before the chain"
                        )
                    } else {
                        format!("the carried vector is `rows` tiles: set `s_wr rows, {row_tiles}`")
                    };
                    let count = |k: u32| format!("{k} tile{}", if k == 1 { "" } else { "s" });
                    self.emit(
                        Diagnostic::error(
                            codes::NETQ_WIDTH,
                            format!(
                                "`{what} netq` {verb} {} but row {row} of {kind} `{}` is {}",
                                count(tiles),
                                d.name,
                                count(row_tiles)
                            ),
                        )
                        .label(span, format!("{verb} {}", count(tiles)))
                        .label(
                            self.decl_names[decl],
                            format!("{shape}: {row_tiles} tiles per row (N = {})", self.n),
                        )
                        .help(help),
                    );
                }
                let slot = NetqSlot {
                    chain,
                    iteration,
                    decl,
                    row,
                };
                if pop {
                    self.pops.push(slot);
                } else {
                    self.pushes.push(slot);
                }
            }
            None if self.incomplete => {}
            None => {
                let total = queue.rows.len();
                let diag = if pop {
                    Diagnostic::error(
                        codes::NETQ_COUNT,
                        format!("`v_rd netq` pops more rows than the inputs declare ({total})"),
                    )
                    .label(span, "nothing left on netq here")
                    .help("declare every vector the host pushes with `input NAME : [ROWS, LEN]`")
                } else {
                    Diagnostic::error(
                        codes::NETQ_COUNT,
                        format!("`v_wr netq` pushes more rows than the outputs declare ({total})"),
                    )
                    .label(span, "no output row left to fill")
                    .help("declare what the host collects with `output NAME : [ROWS, LEN]` (without `at`)")
                };
                self.emit(diag);
            }
        }
    }
}

/// Direction of a netq access.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Netq {
    Pop,
    Push,
}
