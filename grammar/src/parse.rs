//! Source text to AST: runs the lexer and the generated LALRPOP parser, turns lexical and
//! syntax errors (several per run, thanks to error recovery) into diagnostics.

use crate::ast::{BinOp, Expr, ExprKind, File, Ident, Instr, Operand};
use crate::diagnostics::{Diagnostic, codes};
use crate::isa::{self, Mnemonic, Op};
use crate::lexer::{LexError, Lexer, MAX_PAREN_DEPTH, Tok};
use crate::program::{SourceFile, Span};
use lalrpop_util::ParseError;

lalrpop_util::lalrpop_mod!(
    #[allow(
        clippy::all,
        clippy::pedantic,
        unused_qualifications,
        unused_parens,
        dead_code
    )]
    grammar
);

/// State the grammar actions write to: diagnostics found while building the AST.
#[derive(Default)]
pub struct ParseCtx {
    pub diags: Vec<Diagnostic>,
    /// The last expression reported nested past [`MAX_EXPR_DEPTH`]: the nodes around it are
    /// not reported again.
    too_deep: Option<Span>,
}

/// Operators an expression may nest, at most: far beyond any address arithmetic, and shallow
/// enough for the checker's recursive evaluation (and the tree's drop) on any thread's stack.
pub const MAX_EXPR_DEPTH: u32 = 256;

impl ParseCtx {
    /// Build an instruction, classifying its mnemonic with the ISA table.
    pub fn instr(&mut self, name: Ident, operands: Vec<Operand>, span: Span) -> Instr {
        let mnemonic = isa::lookup(&name.name).unwrap_or_else(|| {
            let mut d = Diagnostic::error(
                codes::UNKNOWN_MNEMONIC,
                format!("unknown mnemonic `{}`", name.name),
            )
            .label(name.span, "not an instruction of the NNP ISA");
            let base = name
                .name
                .strip_suffix("_inc")
                .filter(|b| isa::lookup(b).is_some());
            d = match (base, isa::nearest(&name.name, isa::all_mnemonics())) {
                (Some(b), _) => d.help(format!(
                    "`{b}` takes no address, so it has no `_inc` spelling"
                )),
                (None, Some(s)) => d.help(format!("did you mean `{s}`?")),
                (None, None) => {
                    let names: Vec<&str> = isa::base_mnemonics().map(|(n, _)| n).collect();
                    d.help(format!(
                        "instructions are {} (and _inc spellings)",
                        names.join(", ")
                    ))
                }
            };
            self.diags.push(d);
            Mnemonic {
                op: Op::EndChain,
                inc: false,
            }
        });
        Instr {
            mnemonic,
            name,
            operands,
            span,
        }
    }

    /// A binary expression node.
    pub fn bin(&mut self, op: BinOp, a: Expr, b: Expr, l: usize, r: usize) -> Expr {
        let depth = 1 + a.depth.max(b.depth);
        self.capped(ExprKind::Bin(op, Box::new(a), Box::new(b)), depth, l, r)
    }

    /// A negation node.
    pub fn neg(&mut self, e: Expr, l: usize, r: usize) -> Expr {
        let depth = 1 + e.depth;
        self.capped(ExprKind::Neg(Box::new(e)), depth, l, r)
    }

    /// The node, or past [`MAX_EXPR_DEPTH`] an error and a leaf in its place (so that no tree
    /// grows deeper, whatever the input).
    fn capped(&mut self, kind: ExprKind, depth: u32, l: usize, r: usize) -> Expr {
        let span = Span::new(l, r);
        if depth <= MAX_EXPR_DEPTH {
            return Expr { kind, span, depth };
        }
        if !self
            .too_deep
            .is_some_and(|inner| l <= inner.start as usize && inner.end as usize <= r)
        {
            self.too_deep = Some(span);
            self.diags.push(
                Diagnostic::error(codes::TOO_LARGE, "expression nested too deeply")
                    .label(span, format!("more than {MAX_EXPR_DEPTH} operators deep"))
                    .help("split it with `let` constants"),
            );
        }
        Expr {
            kind: ExprKind::Int("0".into()),
            span,
            depth: 0,
        }
    }
}

/// Parse a firmware file. On failure returns every lexical and syntax error found.
pub fn parse(src: &SourceFile) -> Result<File, Vec<Diagnostic>> {
    let text = src.text.as_str();
    // Lines end at `\n` (or `\r\n`); a lone `\r` (old Mac line endings) would make the file
    // one line, a comment swallowing every statement: the file is refused instead.
    if let Some(at) = lone_carriage_return(text) {
        return Err(vec![
            Diagnostic::error(
                codes::INVALID_CHARACTER,
                "carriage return without a line feed (old Mac line endings)",
            )
            .label(Span::new(at, at + 1), "a `\\r` not followed by `\\n`")
            .help(
                "lines end with `\\n` or `\\r\\n`: convert the file's line endings \
                 (e.g. `tr '\\r' '\\n' < OLD > NEW`)",
            ),
        ]);
    }
    let mut lexer = Lexer::new(text);
    let mut ctx = ParseCtx::default();
    let mut recovered = Vec::new();
    let result = grammar::FileParser::new().parse(text, &mut ctx, &mut recovered, lexer.by_ref());

    let mut diags: Vec<Diagnostic> = lexer
        .errors
        .iter()
        .map(|e| lex_diagnostic(text, *e))
        .collect();
    for e in &lexer.too_deep {
        diags.push(
            Diagnostic::error(codes::TOO_LARGE, "parentheses nested too deeply")
                .label(
                    Span::new(e.start, e.end),
                    format!("more than {MAX_PAREN_DEPTH} `(` open on this line"),
                )
                .help("remove redundant parentheses, or split the expression with `let` constants"),
        );
    }
    // Sorted starts, so that each parser error is looked up in O(log errors).
    let mut lexed_at: Vec<usize> = lexer
        .errors
        .iter()
        .chain(&lexer.too_deep)
        .map(|e| e.start)
        .collect();
    lexed_at.sort_unstable();
    let lexed = |span: Span| lexed_at.binary_search(&(span.start as usize)).is_ok();
    let mut push = |d: Diagnostic| {
        // The parser also trips over the error token of a lexical error: say it once.
        if !lexed(d.span()) {
            diags.push(d);
        }
    };
    for r in recovered {
        push(syntax_diagnostic(r.error));
    }
    let file = match result {
        Ok(f) => Some(f),
        Err(e) => {
            push(syntax_diagnostic(e));
            None
        }
    };
    diags.extend(ctx.diags);
    match file {
        Some(f) if diags.is_empty() => Ok(f),
        _ => {
            diags.sort_by_key(|d| d.span().start);
            Err(diags)
        }
    }
}

/// The offset of the first `\r` not followed by `\n`.
fn lone_carriage_return(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    (0..b.len()).find(|&i| b[i] == b'\r' && b.get(i + 1) != Some(&b'\n'))
}

fn lex_diagnostic(text: &str, e: LexError) -> Diagnostic {
    let span = Span::new(e.start, e.end);
    let s = text.get(e.start..e.end).unwrap_or("");
    if s.starts_with('"') {
        Diagnostic::error(codes::SYNTAX, "unterminated string")
            .label(span, "this string has no closing `\"` on its line")
            .help("strings (target names) must end on the line they start")
    } else {
        Diagnostic::error(
            codes::INVALID_CHARACTER,
            format!("unexpected character `{}`", s.escape_debug()),
        )
        .label(span, "no token starts with this character")
        .help("comments start with `//`; names are letters, digits and `_`")
    }
}

/// Readable list of what the parser expected.
fn expected_list(expected: &[String]) -> String {
    let mut names: Vec<String> = expected
        .iter()
        .map(|e| {
            let e = e.trim_matches('"');
            match e {
                "newline" => "end of line".to_string(),
                "name" | "dotted name" | "integer" | "number" | "string" => e.to_string(),
                other => format!("`{other}`"),
            }
        })
        .collect();
    names.dedup();
    if names.len() > 8 {
        names.truncate(8);
        names.push("...".into());
    }
    names.join(", ")
}

fn syntax_diagnostic(e: ParseError<usize, Tok<'_>, LexError>) -> Diagnostic {
    match e {
        ParseError::UnrecognizedToken {
            token: (l, tok, r),
            expected,
        } => {
            let d = Diagnostic::error(codes::SYNTAX, format!("unexpected {tok}"))
                .label(Span::new(l, r), "not expected here");
            let d = if tok == Tok::Newline {
                Diagnostic::error(codes::SYNTAX, "unexpected end of line")
                    .label(Span::new(l, r), "the statement is incomplete")
            } else {
                d
            };
            if expected.is_empty() {
                d
            } else {
                d.help(format!("expected {}", expected_list(&expected)))
            }
        }
        ParseError::UnrecognizedEof { location, expected } => {
            let d = Diagnostic::error(codes::SYNTAX, "unexpected end of file")
                .label(Span::new(location, location), "the file ends here");
            let missing_brace = expected.iter().any(|e| e.trim_matches('"') == "}");
            if missing_brace {
                d.help("a `repeat` block is not closed: add `}` on its own line")
            } else {
                d.help(format!("expected {}", expected_list(&expected)))
            }
        }
        ParseError::ExtraToken { token: (l, tok, r) } => {
            Diagnostic::error(codes::SYNTAX, format!("unexpected {tok}"))
                .label(Span::new(l, r), "extra token")
        }
        ParseError::InvalidToken { location } => {
            Diagnostic::error(codes::INVALID_CHARACTER, "invalid token")
                .label(Span::new(location, location), "here")
        }
        ParseError::User { error } => Diagnostic::error(codes::INVALID_CHARACTER, "invalid token")
            .label(Span::new(error.start, error.end), "here"),
    }
}
