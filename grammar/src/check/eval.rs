//! Names and integer expressions: `let` constants, `repeat` variables and declared names.

use crate::ast::{BinOp, Expr, ExprKind};
use crate::diagnostics::{Diagnostic, codes};
use crate::isa;
use crate::program::Span;
use std::collections::HashMap;

/// What a name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// A `let` constant or `repeat` variable.
    Int(i64),
    /// A declaration (index into the checker's declarations): its base address.
    Decl(usize),
}

/// Names reserved by the language (memories and scalar registers); they cannot be redefined.
pub const RESERVED: &[&str] = &[
    "netq",
    "dram",
    "ivrf",
    "mrf",
    "rows",
    "cols",
    "iterations",
    "win_w",
    "win_h",
    "pitch",
];

fn is_reserved(name: &str) -> bool {
    RESERVED.contains(&name)
        || isa::lookup(name).is_some()
        || name
            .strip_prefix("asvrf")
            .or_else(|| name.strip_prefix("mulvrf"))
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

/// Scoped name table. Names never shadow each other: redefining a visible name is an error.
#[derive(Default)]
pub struct Env {
    names: HashMap<String, (Value, Span)>,
    /// Names defined in each open scope (a `repeat` body iteration).
    scopes: Vec<Vec<String>>,
}

impl Env {
    /// Define a name, or explain why it cannot be.
    pub fn define(&mut self, name: &str, span: Span, value: Value) -> Result<(), Diagnostic> {
        if is_reserved(name) {
            return Err(Diagnostic::error(
                codes::DUPLICATE_NAME,
                format!("`{name}` is a reserved name"),
            )
            .label(span, "names a memory, scalar register or instruction")
            .help("choose another name"));
        }
        if let Some(&(_, first)) = self.names.get(name) {
            return Err(Diagnostic::error(
                codes::DUPLICATE_NAME,
                format!("`{name}` is defined twice"),
            )
            .label(span, "defined again here")
            .label(first, "first defined here")
            .help("names of constants, declarations and repeat variables must be unique"));
        }
        self.names.insert(name.to_string(), (value, span));
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(name.to_string());
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<Value> {
        self.names.get(name).map(|(v, _)| *v)
    }

    pub fn push_scope(&mut self) {
        self.scopes.push(Vec::new());
    }

    pub fn pop_scope(&mut self) {
        for name in self.scopes.pop().unwrap_or_default() {
            self.names.remove(&name);
        }
    }

    /// Whether every name `e` reads is defined (so evaluating it cannot fail on an unknown
    /// name, whose diagnostic searches every name for the nearest).
    pub fn defines_all(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Int(_) => true,
            ExprKind::Name(n) => self.names.contains_key(n.as_str()),
            ExprKind::Neg(a) => self.defines_all(a),
            ExprKind::Bin(_, a, b) => self.defines_all(a) && self.defines_all(b),
        }
    }

    pub fn nearest(&self, name: &str) -> Option<String> {
        isa::nearest(name, self.names.keys())
    }
}

/// Parse an integer literal (decimal or `0x` hex).
pub fn parse_int(text: &str) -> Option<i64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Evaluates expressions; `base_of` maps a declaration to its base address (or explains why it
/// has none).
pub struct Eval<'a> {
    pub env: &'a Env,
    pub base_of: &'a dyn Fn(usize, Span) -> Result<i64, Diagnostic>,
}

impl Eval<'_> {
    pub fn eval(&self, e: &Expr) -> Result<i64, Diagnostic> {
        match &e.kind {
            ExprKind::Int(t) => parse_int(t).ok_or_else(|| {
                Diagnostic::error(codes::BAD_NUMBER, format!("integer `{t}` is too large"))
                    .label(e.span, "does not fit in 64 bits")
            }),
            ExprKind::Name(n) => match self.env.get(n) {
                Some(Value::Int(v)) => Ok(v),
                Some(Value::Decl(d)) => (self.base_of)(d, e.span),
                None => {
                    let d = Diagnostic::error(codes::UNKNOWN_NAME, format!("unknown name `{n}`"))
                        .label(e.span, "not defined");
                    Err(match self.env.nearest(n) {
                        Some(s) => d.help(format!("did you mean `{s}`?")),
                        None => d.help(
                            "define it with `let NAME = VALUE` or a declaration before using it",
                        ),
                    })
                }
            },
            ExprKind::Neg(a) => {
                let a = self.eval(a)?;
                a.checked_neg().ok_or_else(|| overflow(e.span))
            }
            ExprKind::Bin(op, a, b) => {
                let (x, y) = (self.eval(a)?, self.eval(b)?);
                let r = match op {
                    BinOp::Add => x.checked_add(y),
                    BinOp::Sub => x.checked_sub(y),
                    BinOp::Mul => x.checked_mul(y),
                    BinOp::Div | BinOp::Rem if y == 0 => {
                        return Err(Diagnostic::error(codes::EXPR, "division by zero")
                            .label(b.span, "this is 0"));
                    }
                    // Euclidean: `%` is never negative, so `(t - 1) % 2` works for t = 0.
                    BinOp::Div => x.checked_div_euclid(y),
                    BinOp::Rem => x.checked_rem_euclid(y),
                };
                r.ok_or_else(|| overflow(e.span))
            }
        }
    }
}

fn overflow(span: Span) -> Diagnostic {
    Diagnostic::error(codes::EXPR, "integer overflow").label(span, "overflows 64 bits")
}
