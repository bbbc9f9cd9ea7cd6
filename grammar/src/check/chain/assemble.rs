//! Chain-body instructions: the read (`v_rd`, `m_rd`), `mv_mul`, MFU ops and their placement
//! on MFUs, the writes (`v_wr`, `m_wr`).

use super::records::{Body, MemOp, OpRec, OpenChain, Placement, ReadRec, WriteRec};
use crate::ast::Instr;
use crate::check::checker::Checker;
use crate::diagnostics::{Diagnostic, codes};
use crate::program::{Mem, OpKind, Span, Unit};

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

impl Checker {
    pub(in crate::check) fn v_rd(&mut self, i: &Instr) {
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

    pub(in crate::check) fn m_rd(&mut self, i: &Instr) {
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

    pub(in crate::check) fn m_wr(&mut self, i: &Instr) {
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

    pub(in crate::check) fn mv_mul(&mut self, i: &Instr) {
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

    pub(in crate::check) fn mfu_op(&mut self, i: &Instr, kind: OpKind) {
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
                self.too_many_mfus(i, k, moved, (mfus, &target_name));
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
                    self.operand_of_another_mfu(i, &op, (j, k), moved, want);
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

    /// The error of an op placed on MFU`k` where the target has `mfus` (`target_name`);
    /// `moved` is where the chain moved on to a new MFU.
    fn too_many_mfus(
        &mut self,
        i: &Instr,
        k: u8,
        moved: Option<(Span, Unit, Span)>,
        (mfus, target_name): (usize, &str),
    ) {
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

    /// The error of an op on MFU`k` whose operand `op` belongs to MFU`j`; `moved` is where the
    /// chain moved on to a new MFU, `want` where the operand must be.
    fn operand_of_another_mfu(
        &mut self,
        i: &Instr,
        op: &MemOp,
        (j, k): (u8, u8),
        moved: Option<(Span, Unit, Span)>,
        want: Mem,
    ) {
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

    pub(in crate::check) fn v_wr(&mut self, i: &Instr) {
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
}
