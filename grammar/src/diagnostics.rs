//! Diagnostics: errors and warnings with a code, labelled source spans and a help line,
//! rendered by `miette`.

use crate::program::{SourceFile, Span};
use crate::source_text::SourceText;
use miette::{LabeledSpan, SourceCode};
use std::fmt;
use std::sync::Arc;

/// Diagnostic codes (the list in `docs/language.md`).
pub mod codes {
    pub const SYNTAX: &str = "nnp::syntax";
    pub const INVALID_CHARACTER: &str = "nnp::invalid-character";
    pub const UNKNOWN_MNEMONIC: &str = "nnp::unknown-mnemonic";
    pub const BAD_NUMBER: &str = "nnp::bad-number";
    pub const OPERANDS: &str = "nnp::operands";
    pub const UNKNOWN_MEMORY: &str = "nnp::unknown-memory";
    pub const WRONG_MEMORY: &str = "nnp::wrong-memory";
    pub const INCREMENT: &str = "nnp::increment";
    pub const UNKNOWN_NAME: &str = "nnp::unknown-name";
    pub const DUPLICATE_NAME: &str = "nnp::duplicate-name";
    pub const EXPR: &str = "nnp::expr";
    pub const TARGET: &str = "nnp::target";
    pub const UNKNOWN_REGISTER: &str = "nnp::unknown-register";
    pub const SCALAR_VALUE: &str = "nnp::scalar-value";
    pub const FORMAT: &str = "nnp::format";
    pub const QUANT_POINT: &str = "nnp::quant-point";
    pub const DECL: &str = "nnp::decl";
    pub const DECL_OVERLAP: &str = "nnp::decl-overlap";
    pub const ADDRESS_RANGE: &str = "nnp::address-range";
    pub const CHAIN_START: &str = "nnp::chain-start";
    pub const CHAIN_READ: &str = "nnp::chain-read";
    pub const MISSING_END_CHAIN: &str = "nnp::missing-end-chain";
    pub const MISSING_WRITE: &str = "nnp::missing-write";
    pub const END_CHAIN: &str = "nnp::end-chain";
    pub const CHAIN_ORDER: &str = "nnp::chain-order";
    pub const MV_MUL_SOURCE: &str = "nnp::mv-mul-source";
    pub const MATRIX_CHAIN: &str = "nnp::matrix-chain";
    pub const MFU_OPERAND: &str = "nnp::mfu-operand";
    pub const TOO_MANY_MFUS: &str = "nnp::too-many-mfus";
    pub const READ_MODIFY_WRITE: &str = "nnp::read-modify-write";
    pub const WIDTH: &str = "nnp::width";
    pub const NETQ_WIDTH: &str = "nnp::netq-width";
    pub const NETQ_COUNT: &str = "nnp::netq-count";
    pub const NETQ_ADDRESS: &str = "nnp::netq-address";
    pub const UNINIT_READ: &str = "nnp::uninit-read";
    pub const INSIDE_CHAIN: &str = "nnp::inside-chain";
    pub const REPEAT: &str = "nnp::repeat";
    pub const TOO_LARGE: &str = "nnp::too-large";
    pub const DEAD_WRITE: &str = "nnp::dead-write";
    pub const UNREAD_DECL: &str = "nnp::unread-decl";
    pub const PAD_LANES: &str = "nnp::pad-lanes";
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

/// A labelled source span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub span: Span,
    pub text: String,
    /// The span the diagnostic is about (the first label added).
    pub primary: bool,
}

/// One error or warning about a firmware file.
#[derive(Clone)]
pub struct Diagnostic {
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
    pub labels: Vec<Label>,
    pub help: Option<String>,
    source: Option<Arc<SourceText>>,
}

impl fmt::Debug for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Diagnostic")
            .field("code", &self.code)
            .field("severity", &self.severity)
            .field("message", &self.message)
            .field("labels", &self.labels)
            .field("help", &self.help)
            .finish()
    }
}

impl PartialEq for Diagnostic {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code
            && self.severity == other.severity
            && self.message == other.message
            && self.labels == other.labels
            && self.help == other.help
    }
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: shorten_quotes(message.into()),
            labels: Vec::new(),
            help: None,
            source: None,
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    /// Add a label; the first one is the primary span.
    pub fn label(mut self, span: Span, text: impl Into<String>) -> Self {
        let primary = self.labels.is_empty();
        self.labels.push(Label {
            span,
            text: shorten_quotes(text.into()),
            primary,
        });
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(shorten_quotes(help.into()));
        self
    }

    /// Attach the source text used to render the labels.
    pub fn with_source(mut self, source: Arc<SourceText>) -> Self {
        self.source = Some(source);
        self
    }

    /// The primary span (empty at 0 when the diagnostic has no label).
    pub fn span(&self) -> Span {
        self.labels.first().map(|l| l.span).unwrap_or_default()
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}

impl miette::Diagnostic for Diagnostic {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display + 'a>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.source.as_deref().map(|s| s as &dyn SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            return None;
        }
        Some(Box::new(self.labels.iter().map(|l| {
            let text = (!l.text.is_empty()).then(|| l.text.clone());
            // A long span is underlined over its start, so that its line and column show.
            let span = match &self.source {
                Some(src) => {
                    let shown = src.shown_range(l.span.start as usize, l.span.end as usize);
                    Span::new(shown.start, shown.end)
                }
                None => l.span,
            };
            if l.primary {
                LabeledSpan::new_primary_with_span(text, span)
            } else {
                LabeledSpan::new_with_span(text, span)
            }
        })))
    }
}

/// Longest quoted text (between backticks) a message, label or help keeps whole.
const MAX_QUOTE: usize = 64;

/// Shorten each quoted part longer than [`MAX_QUOTE`] characters to its start and end, so a
/// long token (a 20,000-character name) is not printed whole.
fn shorten_quotes(s: String) -> String {
    if s.len() <= MAX_QUOTE {
        return s;
    }
    let parts: Vec<&str> = s.split('`').collect();
    if !parts
        .iter()
        .skip(1)
        .step_by(2)
        .any(|q| q.chars().count() > MAX_QUOTE)
    {
        return s;
    }
    let mut out = String::with_capacity(s.len().min(1024));
    for (k, part) in parts.iter().enumerate() {
        if k > 0 {
            out.push('`');
        }
        let n = part.chars().count();
        if k % 2 == 1 && n > MAX_QUOTE && k + 1 < parts.len() {
            out.extend(part.chars().take(40));
            out.push_str(&format!("...({n} characters)..."));
            out.extend(part.chars().skip(n - 10));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// All diagnostics of one file, as one reportable error (each rendered with its source).
#[derive(Debug)]
pub struct Diagnostics {
    pub file: String,
    pub items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Attach `src` to every diagnostic and sort them by position (errors and warnings mixed).
    pub fn new(src: &SourceFile, mut items: Vec<Diagnostic>) -> Self {
        let named = Arc::new(src.named());
        for d in &mut items {
            d.source = Some(named.clone());
        }
        items.sort_by_key(|d| (d.span().start, d.severity));
        Diagnostics {
            file: src.name.clone(),
            items,
        }
    }

    pub fn errors(&self) -> usize {
        self.items.iter().filter(|d| d.is_error()).count()
    }

    pub fn warnings(&self) -> usize {
        self.items.len() - self.errors()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (e, w) = (self.errors(), self.warnings());
        write!(
            f,
            "`{}`: {e} error{}, {w} warning{}",
            self.file,
            if e == 1 { "" } else { "s" },
            if w == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for Diagnostics {}

impl miette::Diagnostic for Diagnostics {
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        Some(Box::new(
            self.items.iter().map(|d| d as &dyn miette::Diagnostic),
        ))
    }
}

/// Line and column (both 1-based, column in characters) of a byte offset.
pub fn line_col(text: &str, offset: u32) -> (usize, usize) {
    let mut end = (offset as usize).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}
