//! The walk over items (pass 1's `let`s and declarations, then the code in order) and the
//! statements between chains: `let`, `quant` (with its format literal), the instruction
//! dispatch, `s_wr` and the scalar registers' ranges.

use super::checker::Checker;
use super::eval::Value;
use crate::ast::{self, File, Instr, Item, Operand};
use crate::diagnostics::{Diagnostic, codes};
use crate::isa::{self, Op};
use crate::program::Span;

/// Largest value of each scalar register. Widths in tiles stay small enough that products such
/// as `rows * cols` and window extents fit in 32 bits.
fn max_scalar(reg: &str) -> i64 {
    match reg {
        "iterations" => 1 << 20,
        "pitch" => 1 << 16,
        _ => 1 << 12,
    }
}
impl Checker {
    pub(super) fn run(&mut self, file: &File) {
        for item in &file.items {
            match item {
                Item::Let(l) => self.let_(l),
                Item::Decl(d) => self.decl(d),
                _ => {}
            }
        }
        self.finish_decls();
        self.items(&file.items, true);
        self.finish();
    }

    pub(super) fn items(&mut self, items: &[Item], top: bool) {
        for item in items {
            if self.stopped {
                return;
            }
            match item {
                Item::Target(t) if !top => self.emit(
                    Diagnostic::error(codes::TARGET, "`target` inside a `repeat` block")
                        .label(t.span, "not at the top level")
                        .help("put the `target` line at the top of the file"),
                ),
                Item::Target(_) => {}
                Item::Let(l) if !top => self.let_(l),
                Item::Let(_) => {}
                Item::Decl(d) if !top => self.emit(
                    Diagnostic::error(codes::DECL, "declaration inside a `repeat` block")
                        .label(d.span, "not at the top level")
                        .help("declarations describe what the host loads: write them at the top level"),
                ),
                Item::Decl(_) => {}
                Item::Quant(q) => self.quant(q),
                Item::Repeat(r) => self.repeat(r),
                Item::Instr(i) => self.instr(i),
            }
        }
    }

    fn let_(&mut self, l: &ast::Let) {
        let Some(v) = self.eval(&l.value) else { return };
        if let Err(d) = self.env.define(&l.name.name, l.name.span, Value::Int(v)) {
            self.emit(d);
        }
    }

    pub(super) fn quant(&mut self, q: &ast::Quant) {
        self.drop_broken_chain();
        if let Some(open) = &self.open {
            let first = open.first;
            self.emit(
                Diagnostic::error(codes::INSIDE_CHAIN, "`quant` inside a chain")
                    .label(q.span, "the chain starting above is not finished")
                    .label(first, "chain starts here")
                    .help(
                        "`quant` applies to the chains after it: move it before the chain's `v_rd`",
                    ),
            );
            return;
        }
        const POINTS: [&str; 5] = [
            "mvm.vector",
            "mvm.matrix",
            "mvm.output",
            "mfu.input",
            "storage",
        ];
        let point = q.point.name.as_str();
        if !POINTS.contains(&point) {
            let d = Diagnostic::error(
                codes::QUANT_POINT,
                format!("unknown quantization point `{point}`"),
            )
            .label(q.point.span, "not a quantization point");
            let help = match isa::nearest(point, POINTS) {
                Some(s) => format!("did you mean `{s}`? points: {}", POINTS.join(", ")),
                None => format!("points: {}", POINTS.join(", ")),
            };
            self.emit(d.help(help));
            return;
        }
        let float_only = matches!(point, "mvm.output" | "mfu.input" | "storage");
        let Some(format) = self.format(&q.format, float_only.then_some(point)) else {
            return;
        };
        if point == "storage"
            && let Some(f) = format.as_float()
            && !crate::target::storage_fits_f32(f)
        {
            self.emit(
                Diagnostic::error(
                    codes::FORMAT,
                    format!("storage format `{}` is wider than fp32", q.format.text),
                )
                .label(q.format.span, "more than 8 exponent or 23 mantissa bits")
                .help(
                    "registers, traces and output files hold f32 values (docs/files.md): use a \
                     storage format of at most fp(8, 23)",
                ),
            );
            return;
        }
        let slot = match point {
            "mvm.vector" => &mut self.quant.mvm_vector,
            "mvm.matrix" => &mut self.quant.mvm_matrix,
            "mvm.output" => &mut self.quant.mvm_output,
            "mfu.input" => &mut self.quant.mfu_input,
            _ => &mut self.quant.storage,
        };
        *slot = format;
    }

    /// Parse a format literal; `float_for` names the point when it must be a float format.
    pub fn format(
        &mut self,
        lit: &ast::FormatLit,
        float_for: Option<&str>,
    ) -> Option<nnp_numerics::Format> {
        match lit.text.parse::<nnp_numerics::Format>() {
            Ok(f) => {
                if let Some(point) = float_for
                    && f.as_float().is_none()
                {
                    self.emit(
                        Diagnostic::error(
                            codes::FORMAT,
                            format!("`{point}` needs a float format, not `{}`", lit.text),
                        )
                        .label(lit.span, "not a float format")
                        .help("use fp16, bf16, fp32 or fp(EXP_BITS, MANT_BITS)"),
                    );
                    return None;
                }
                Some(f)
            }
            Err(e) => {
                // Inside the literal, on character boundaries (miette slices the source there).
                let text = lit.text.as_str();
                let len = text.len();
                let mut start = e.offset.min(len);
                while !text.is_char_boundary(start) {
                    start -= 1;
                }
                let mut end = (start + e.len.max(1)).min(len);
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                let span = Span::new(
                    lit.span.start as usize + start,
                    lit.span.start as usize + end.max(start),
                );
                let mut d = Diagnostic::error(
                    codes::FORMAT,
                    format!("invalid format `{}`: {}", lit.text, e.message),
                )
                .label(span, e.message.clone());
                d = d.help(e.help.unwrap_or_else(|| {
                    "formats: fp16, bf16, fp32, fp(e, m), bfp(mant = M), msfp(mant = M), \
                     mx(elem, block), hbfp(...), int(bits), fixed(int, frac), dynfixed(bits), \
                     pot(bits), twohot(bits) (docs/numerics.md)"
                        .to_string()
                }));
                self.emit(d);
                None
            }
        }
    }

    pub(super) fn instr(&mut self, i: &Instr) {
        if !self.step(i.span) {
            return;
        }
        match i.mnemonic.op {
            Op::SWr => self.s_wr(i),
            Op::EndChain => self.end_chain(i),
            Op::VRd | Op::VRd2d => self.v_rd(i),
            Op::MvMul => self.mv_mul(i),
            Op::Mfu(kind) => self.mfu_op(i, kind),
            Op::VWr => self.v_wr(i),
            Op::MRd => self.m_rd(i),
            Op::MWr => self.m_wr(i),
        }
    }

    fn s_wr(&mut self, i: &Instr) {
        self.drop_broken_chain();
        if let Some(open) = &self.open {
            let first = open.first;
            self.emit(
                Diagnostic::error(codes::INSIDE_CHAIN, "`s_wr` inside a chain")
                    .label(i.span, "scalar registers cannot change while a chain runs")
                    .label(first, "chain starts here")
                    .help("move the `s_wr` before the chain's `v_rd` (or after its `end_chain`)"),
            );
            return;
        }
        let [reg, value] = i.operands.as_slice() else {
            self.emit(
                Diagnostic::error(
                    codes::OPERANDS,
                    format!("`s_wr` takes 2 operands, found {}", i.operands.len()),
                )
                .label(i.span, "expected `s_wr REGISTER, VALUE`")
                .help("e.g. `s_wr rows, 4`"),
            );
            return;
        };
        const REGS: [&str; 6] = ["rows", "cols", "iterations", "win_w", "win_h", "pitch"];
        let name = match reg {
            Operand::Expr(e) => e.as_name().map(|n| (n, e.span)),
            Operand::Mem(_) => None,
        };
        let Some((name, _)) = name.filter(|(n, _)| REGS.contains(n)) else {
            let written = name.map_or("this operand", |(n, _)| n);
            let help = match name.and_then(|(n, _)| isa::nearest(n, REGS)) {
                Some(s) => format!("did you mean `{s}`? registers: {}", REGS.join(", ")),
                None => format!("scalar registers: {}", REGS.join(", ")),
            };
            self.emit(
                Diagnostic::error(
                    codes::UNKNOWN_REGISTER,
                    format!("`{written}` is not a scalar register"),
                )
                .label(reg.span(), "unknown register")
                .help(help),
            );
            return;
        };
        let Operand::Expr(value_expr) = value else {
            self.emit(
                Diagnostic::error(codes::OPERANDS, "`s_wr` needs an integer value")
                    .label(value.span(), "a memory operand, not a value")
                    .help("e.g. `s_wr rows, 4`"),
            );
            return;
        };
        let Some(v) = self.eval(value_expr) else {
            return;
        };
        let max = max_scalar(name);
        if !(1..=max).contains(&v) {
            self.emit(
                Diagnostic::error(
                    codes::SCALAR_VALUE,
                    format!("`{name}` = {v} is out of range"),
                )
                .label(value_expr.span, format!("must be between 1 and {max}")),
            );
            return;
        }
        let v = v as u32;
        let s = &mut self.scalars;
        match name {
            "rows" => s.rows = v,
            "cols" => s.cols = v,
            "win_w" => s.win_w = v,
            "win_h" => s.win_h = v,
            "pitch" => s.pitch = v,
            _ => s.iterations = Some((v, i.span)),
        }
    }
}
