//! The `logos` lexer: source text to tokens with byte spans.
//!
//! The language is line oriented (one statement per line), so newlines are tokens. Identifiers
//! are not split into mnemonics here: the parser classifies them with the ISA table
//! ([`crate::isa`]) so that an unknown mnemonic gets a "did you mean" diagnostic instead of a
//! syntax error.

use logos::Logos;

/// A token. Text-carrying variants borrow the source.
#[derive(Logos, Clone, Copy, Debug, PartialEq, Eq)]
#[logos(skip r"[ \t\r\f]+")]
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
pub enum Tok<'s> {
    #[token("\n")]
    Newline,

    #[token("target")]
    KwTarget,
    #[token("let")]
    KwLet,
    #[token("repeat")]
    KwRepeat,
    #[token("in")]
    KwIn,
    #[token("matrix")]
    KwMatrix,
    #[token("vector")]
    KwVector,
    #[token("input")]
    KwInput,
    #[token("output")]
    KwOutput,
    #[token("at")]
    KwAt,
    #[token("pad")]
    KwPad,
    #[token("quant")]
    KwQuant,

    #[regex(r"[A-Za-z_][A-Za-z0-9_]*")]
    Ident(&'s str),
    /// `mvm.vector`, `mfu.input`: quantization point names (and dotted format names).
    #[regex(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")]
    Dotted(&'s str),
    #[regex(r"[0-9]+|0[xX][0-9a-fA-F]+")]
    Int(&'s str),
    /// Needs digits after the point so that `0..T` stays `0`, `..`, `T`.
    #[regex(r"[0-9]+\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")]
    Float(&'s str),
    #[regex(r#""[^"\n]*""#)]
    Str(&'s str),

    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token("=")]
    Eq,
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("%")]
    Percent,
    #[token("..")]
    DotDot,
    #[token(".")]
    Dot,

    /// Never produced by logos: the lexer wrapper emits it for a character no token starts with
    /// (or an unterminated string), so that the parser recovers and reports further errors.
    Error,
}

impl std::fmt::Display for Tok<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Tok::Newline => "end of line",
            Tok::KwTarget => "`target`",
            Tok::KwLet => "`let`",
            Tok::KwRepeat => "`repeat`",
            Tok::KwIn => "`in`",
            Tok::KwMatrix => "`matrix`",
            Tok::KwVector => "`vector`",
            Tok::KwInput => "`input`",
            Tok::KwOutput => "`output`",
            Tok::KwAt => "`at`",
            Tok::KwPad => "`pad`",
            Tok::KwQuant => "`quant`",
            Tok::Ident(s) | Tok::Dotted(s) | Tok::Int(s) | Tok::Float(s) | Tok::Str(s) => {
                return write!(f, "`{s}`");
            }
            Tok::LBracket => "`[`",
            Tok::RBracket => "`]`",
            Tok::LParen => "`(`",
            Tok::RParen => "`)`",
            Tok::LBrace => "`{`",
            Tok::RBrace => "`}`",
            Tok::Comma => "`,`",
            Tok::Colon => "`:`",
            Tok::Eq => "`=`",
            Tok::Plus => "`+`",
            Tok::Minus => "`-`",
            Tok::Star => "`*`",
            Tok::Slash => "`/`",
            Tok::Percent => "`%`",
            Tok::DotDot => "`..`",
            Tok::Dot => "`.`",
            Tok::Error => "invalid character",
        };
        f.write_str(s)
    }
}

/// A character or sequence no token matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LexError {
    pub start: usize,
    pub end: usize,
}

/// Parentheses a line may have open at once. The parser's error recovery walks its stack once
/// per token it skips, so a syntax error after deep nesting costs depth x tokens; past this
/// depth the rest of the line is one error.
pub const MAX_PAREN_DEPTH: u32 = 64;

/// Tokens with byte spans, as the generated parser wants them. Lexical errors are recorded in
/// [`Lexer::errors`] and passed on as [`Tok::Error`]; a synthetic newline ends the last line.
/// A `(` nested past [`MAX_PAREN_DEPTH`] is recorded in [`Lexer::too_deep`], passed on as
/// [`Tok::Error`], and the rest of its line is skipped.
pub struct Lexer<'s> {
    inner: logos::SpannedIter<'s, Tok<'s>>,
    len: usize,
    last_was_newline: bool,
    done: bool,
    /// Parentheses open on this line.
    depth: u32,
    /// Skipping to the end of a line nested too deeply.
    skipping: bool,
    pub errors: Vec<LexError>,
    /// The `(` of each line where nesting passed [`MAX_PAREN_DEPTH`].
    pub too_deep: Vec<LexError>,
}

impl<'s> Lexer<'s> {
    pub fn new(src: &'s str) -> Self {
        Lexer {
            inner: Tok::lexer(src).spanned(),
            len: src.len(),
            last_was_newline: true,
            done: false,
            depth: 0,
            skipping: false,
            errors: Vec::new(),
            too_deep: Vec::new(),
        }
    }
}

pub type Spanned<'s> = Result<(usize, Tok<'s>, usize), LexError>;

impl<'s> Iterator for Lexer<'s> {
    type Item = Spanned<'s>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        while let Some((tok, span)) = self.inner.next() {
            let mut tok = tok.unwrap_or_else(|()| {
                self.errors.push(LexError {
                    start: span.start,
                    end: span.end,
                });
                Tok::Error
            });
            match tok {
                Tok::Newline => (self.depth, self.skipping) = (0, false),
                _ if self.skipping => continue,
                Tok::LParen => {
                    self.depth += 1;
                    if self.depth > MAX_PAREN_DEPTH {
                        self.too_deep.push(LexError {
                            start: span.start,
                            end: span.end,
                        });
                        self.skipping = true;
                        tok = Tok::Error;
                    }
                }
                Tok::RParen => self.depth = self.depth.saturating_sub(1),
                _ => {}
            }
            self.last_was_newline = tok == Tok::Newline;
            return Some(Ok((span.start, tok, span.end)));
        }
        self.done = true;
        if self.last_was_newline {
            None
        } else {
            Some(Ok((self.len, Tok::Newline, self.len)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok<'_>> {
        Lexer::new(s)
            .map(|r| r.map(|(_, t, _)| t).unwrap_or(Tok::Error))
            .collect()
    }

    #[test]
    fn ranges_and_floats() {
        assert_eq!(
            toks("0..T"),
            vec![Tok::Int("0"), Tok::DotDot, Tok::Ident("T"), Tok::Newline]
        );
        assert_eq!(
            toks("pad -65504 1e-3 2.5"),
            vec![
                Tok::KwPad,
                Tok::Minus,
                Tok::Int("65504"),
                Tok::Float("1e-3"),
                Tok::Float("2.5"),
                Tok::Newline
            ]
        );
    }

    #[test]
    fn comments_dotted_and_errors() {
        assert_eq!(
            toks("quant mvm.vector // c\n$"),
            vec![
                Tok::KwQuant,
                Tok::Dotted("mvm.vector"),
                Tok::Newline,
                Tok::Error,
                Tok::Newline
            ]
        );
    }
}
