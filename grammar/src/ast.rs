//! The syntax tree, as written (nothing resolved). Every node carries its source span.

use crate::isa::Mnemonic;
use crate::program::Span;

/// A parsed firmware file.
#[derive(Clone, Debug, PartialEq)]
pub struct File {
    pub items: Vec<Item>,
}

/// One statement (one line, or a `repeat` block).
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Target(TargetStmt),
    Let(Let),
    Decl(Decl),
    Quant(Quant),
    Repeat(Repeat),
    Instr(Instr),
}

impl Item {
    pub fn span(&self) -> Span {
        match self {
            Item::Target(t) => t.span,
            Item::Let(l) => l.span,
            Item::Decl(d) => d.span,
            Item::Quant(q) => q.span,
            Item::Repeat(r) => r.span,
            Item::Instr(i) => i.span,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// `target "NAME-OR-PATH"`
#[derive(Clone, Debug, PartialEq)]
pub struct TargetStmt {
    /// Without the quotes.
    pub value: String,
    /// Of the string literal, quotes included.
    pub value_span: Span,
    pub span: Span,
}

/// `let NAME = EXPR`
#[derive(Clone, Debug, PartialEq)]
pub struct Let {
    pub name: Ident,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeclKeyword {
    Matrix,
    Vector,
    Input,
    Output,
}

/// `matrix|vector|input|output NAME : [dims] attrs...`
#[derive(Clone, Debug, PartialEq)]
pub struct Decl {
    pub keyword: DeclKeyword,
    pub keyword_span: Span,
    pub name: Ident,
    pub shape: Vec<Expr>,
    pub shape_span: Span,
    pub attrs: Vec<DeclAttr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum DeclAttrKind {
    /// `at MEM[EXPR]`
    At(MemRef),
    /// `= EXPR` (only `= 0` is meaningful)
    Init(Expr),
    /// `pad NUMBER`
    Pad(Number),
    /// `quant FORMAT`
    Quant(FormatLit),
}

#[derive(Clone, Debug, PartialEq)]
pub struct DeclAttr {
    pub kind: DeclAttrKind,
    pub span: Span,
}

/// A literal number as written (for `pad`): `-65504`, `1e-3`, `-inf`, `nan`.
#[derive(Clone, Debug, PartialEq)]
pub struct Number {
    pub negative: bool,
    /// The literal text without the sign.
    pub text: String,
    pub span: Span,
}

/// A format literal such as `bfp(mant = 5, round = even)`: its source text, parsed by
/// `nnp_numerics::Format::from_str` in the checker.
#[derive(Clone, Debug, PartialEq)]
pub struct FormatLit {
    pub text: String,
    pub span: Span,
}

/// `quant POINT = FORMAT`
#[derive(Clone, Debug, PartialEq)]
pub struct Quant {
    /// `mvm.vector`, `mvm.matrix`, `mvm.output`, `mfu.input`, `storage`.
    pub point: Ident,
    pub format: FormatLit,
    pub span: Span,
}

/// `repeat VAR in START..END { ... }` (END exclusive).
#[derive(Clone, Debug, PartialEq)]
pub struct Repeat {
    pub var: Ident,
    pub start: Expr,
    pub end: Expr,
    pub body: Vec<Item>,
    pub span: Span,
}

/// One instruction: a mnemonic and its comma-separated operands.
#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    pub mnemonic: Mnemonic,
    /// The mnemonic as written.
    pub name: Ident,
    pub operands: Vec<Operand>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// `MEM[ADDR]` or `MEM[ADDR] + INC`.
    Mem(MemRef),
    /// An expression; a bare name such as `netq` or `rows` is an `Expr::Name`.
    Expr(Expr),
}

impl Operand {
    pub fn span(&self) -> Span {
        match self {
            Operand::Mem(m) => m.span,
            Operand::Expr(e) => e.span,
        }
    }
}

/// `MEM[ADDR]` with an optional `+ INC`.
#[derive(Clone, Debug, PartialEq)]
pub struct MemRef {
    pub mem: Ident,
    pub addr: Expr,
    pub inc: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// An integer literal as written (decimal or `0x` hex); range checked by the checker.
    Int(String),
    /// A `let` constant, `repeat` variable or declared name (its base address).
    Name(String),
    Neg(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
}

/// An integer expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
    /// Operators on the longest path from here to a leaf (the parser caps it:
    /// [`crate::parse::MAX_EXPR_DEPTH`]).
    pub(crate) depth: u32,
}

impl Expr {
    /// The name, when the expression is a bare name (`netq`, `rows`, `ivrf`).
    pub fn as_name(&self) -> Option<&str> {
        match &self.kind {
            ExprKind::Name(n) => Some(n),
            _ => None,
        }
    }
}
