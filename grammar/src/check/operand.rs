//! Memory operands: memory names on the target (`ivrf`, `asvrf1`, ...) and `MEM[A] + INC`.

use super::chain::MemOp;
use super::checker::Checker;
use super::eval::Value;
use crate::ast::{Ident, Instr, Operand};
use crate::diagnostics::{Diagnostic, codes};
use crate::isa;
use crate::program::{Addr, DeclKind, Mem, Place};

impl Checker {
    /// The memory a name refers to on this target.
    pub fn mem_of(&mut self, name: &Ident) -> Option<Mem> {
        let s = name.name.as_str();
        let simple = match s {
            "netq" => Some(Mem::Netq),
            "dram" => Some(Mem::Dram),
            "ivrf" => Some(Mem::Ivrf),
            "mrf" => Some(Mem::Mrf),
            _ => None,
        };
        if simple.is_some() {
            return simple;
        }
        let mfus = self.target.mfus;
        let indexed = |prefix: &str| {
            s.strip_prefix(prefix)
                .filter(|k| !k.is_empty() && k.len() <= 3 && k.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|k| k.parse::<u8>().ok())
        };
        let (k, mem) = match (indexed("asvrf"), indexed("mulvrf")) {
            (Some(k), _) => (k, Mem::AsVrf(k)),
            (_, Some(k)) => (k, Mem::MulVrf(k)),
            _ => {
                let names = self.mem_names();
                let d = Diagnostic::error(codes::UNKNOWN_MEMORY, format!("unknown memory `{s}`"))
                    .label(name.span, "not a memory of this target");
                let d = match (self.named_value(s), isa::nearest(s, &names)) {
                    (Some(what), _) => d.help(what),
                    (None, Some(n)) => d.help(format!(
                        "did you mean `{n}`? memories: {}",
                        names.join(", ")
                    )),
                    (None, None) => d.help(format!("memories: {}", names.join(", "))),
                };
                self.emit(d);
                return None;
            }
        };
        if usize::from(k) >= mfus {
            self.emit(
                Diagnostic::error(codes::UNKNOWN_MEMORY, format!("`{s}` does not exist"))
                    .label(
                        name.span,
                        format!("target `{}` has {mfus} MFUs", self.target.name),
                    )
                    .help(format!(
                        "MFU k has asvrf{{k}} and mulvrf{{k}} for k = 0..{}",
                        mfus.saturating_sub(1)
                    )),
            );
            return None;
        }
        Some(mem)
    }

    /// What a name written where a memory belongs stands for, and how to write it: the
    /// commonest slip is a declaration's name as the operand (`mv_mul W` for `mv_mul mrf[W]`).
    fn named_value(&self, s: &str) -> Option<String> {
        let decl = match self.env.get(s)? {
            Value::Int(v) => {
                return Some(format!(
                    "`{s}` is the constant {v}, not a memory; an operand is a memory and an \
                     address, as in `ivrf[{s}]`"
                ));
            }
            Value::Decl(idx) => self.decls.get(idx)?,
        };
        let kind = match decl.kind {
            DeclKind::Matrix => "matrix",
            DeclKind::Vector => "vector",
            DeclKind::Input => "input",
            DeclKind::Output => "output",
        };
        Some(match decl.place {
            Some(Place { mem, addr }) => format!(
                "`{s}` is the {kind} declared at `{mem}[{addr}]`; a declared name stands for its \
                 base address inside the brackets: write `{mem}[{s}]`"
            ),
            None if decl.kind == DeclKind::Input => format!(
                "`{s}` is an input, which the host pushes on netq: read it with `v_rd netq`"
            ),
            None => format!(
                "`{s}` is an {kind} that the host collects from netq: write it with `v_wr netq`"
            ),
        })
    }

    fn mem_names(&self) -> Vec<String> {
        let mut v: Vec<String> = ["netq", "dram", "ivrf", "mrf"].map(String::from).to_vec();
        for k in 0..self.target.mfus {
            v.push(format!("asvrf{k}"));
            v.push(format!("mulvrf{k}"));
        }
        v
    }

    /// The memory operand of an address-taking instruction (`MEM[A]`, `MEM[A] + INC`, the
    /// `_inc` spelling's extra operand, or a bare `netq`).
    pub fn mem_operand(&mut self, i: &Instr) -> Option<MemOp> {
        let want = 1 + usize::from(i.mnemonic.inc);
        if i.operands.len() != want {
            let form = if i.mnemonic.inc {
                format!("`{} MEM[ADDR], INC`", i.name.name)
            } else {
                format!("`{} MEM[ADDR]`", i.name.name)
            };
            self.emit(
                Diagnostic::error(
                    codes::OPERANDS,
                    format!(
                        "`{}` takes {want} operand{}, found {}",
                        i.name.name,
                        if want == 1 { "" } else { "s" },
                        i.operands.len()
                    ),
                )
                .label(i.span, format!("expected {form}")),
            );
            return None;
        }
        let first = i.operands.first()?;
        let (mem_ident, addr_expr, plus_inc, span) = match first {
            Operand::Mem(m) => (m.mem.clone(), Some(&m.addr), m.inc.as_ref(), m.span),
            Operand::Expr(e) => match e.as_name() {
                Some(n) => (
                    Ident {
                        name: n.to_string(),
                        span: e.span,
                    },
                    None,
                    None,
                    e.span,
                ),
                None => {
                    self.emit(
                        Diagnostic::error(
                            codes::OPERANDS,
                            format!("`{}` needs a memory operand", i.name.name),
                        )
                        .label(e.span, "not a memory")
                        .help("write a memory and address such as `ivrf[0]`, or `netq`"),
                    );
                    return None;
                }
            },
        };
        let mem = self.mem_of(&mem_ident)?;
        if mem == Mem::Netq {
            if addr_expr.is_some() || plus_inc.is_some() || i.mnemonic.inc {
                self.emit(
                    Diagnostic::error(codes::NETQ_ADDRESS, "netq has no address")
                        .label(span, "netq is a queue: no address or increment")
                        .help(format!("write `{} netq`", isa_base_name(i))),
                );
                return None;
            }
            return Some(MemOp {
                mem,
                addr: Addr::default(),
                span,
                mem_span: mem_ident.span,
            });
        }
        let Some(addr_expr) = addr_expr else {
            self.emit(
                Diagnostic::error(codes::OPERANDS, format!("`{mem}` needs an address"))
                    .label(span, "no address")
                    .help(format!("write `{mem}[ADDR]`, e.g. `{mem}[0]`")),
            );
            return None;
        };
        let base = self.eval(addr_expr)?;
        let size = self.target.mem_size(mem);
        if !(0..=i64::from(u32::MAX)).contains(&base) {
            self.emit(
                Diagnostic::error(
                    codes::ADDRESS_RANGE,
                    format!("address {base} is out of range: {mem} has {size} registers"),
                )
                .label(
                    addr_expr.span,
                    format!("must be between 0 and {}", size.saturating_sub(1)),
                ),
            );
            return None;
        }
        let inc_expr = match (plus_inc, i.mnemonic.inc) {
            (Some(e), true) => {
                self.emit(
                    Diagnostic::error(codes::INCREMENT, "increment given twice")
                        .label(e.span, "`+ INC` here")
                        .label(
                            i.name.span,
                            "and the `_inc` spelling takes it as the last operand",
                        )
                        .help(format!(
                            "write either `{} {mem}[A] + INC` or `{}_inc {mem}[A], INC`",
                            isa_base_name(i),
                            isa_base_name(i)
                        )),
                );
                return None;
            }
            (Some(e), false) => Some(e),
            (None, true) => match i.operands.get(1) {
                Some(Operand::Expr(e)) => Some(e),
                Some(other) => {
                    self.emit(
                        Diagnostic::error(codes::INCREMENT, "the increment must be an integer")
                            .label(other.span(), "a memory operand, not an increment")
                            .help(format!("e.g. `{} {mem}[0], 2`", i.name.name)),
                    );
                    return None;
                }
                None => None,
            },
            (None, false) => None,
        };
        let inc = match inc_expr {
            Some(e) => {
                let v = self.eval(e)?;
                match i32::try_from(v) {
                    Ok(v) => v,
                    Err(_) => {
                        self.emit(
                            Diagnostic::error(
                                codes::INCREMENT,
                                format!("increment {v} is too large"),
                            )
                            .label(e.span, "does not fit in 32 bits"),
                        );
                        return None;
                    }
                }
            }
            None => 0,
        };
        Some(MemOp {
            mem,
            addr: Addr {
                base: base as u32,
                inc,
            },
            span,
            mem_span: mem_ident.span,
        })
    }
}

/// The mnemonic without its `_inc` suffix.
fn isa_base_name(i: &Instr) -> &str {
    i.name.name.strip_suffix("_inc").unwrap_or(&i.name.name)
}
