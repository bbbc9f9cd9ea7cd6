//! The small syntax of format literals: `name`, `name(arg, key = value, ...)`, where a value is
//! an identifier, an integer, a decimal number or itself a call (`stochastic(seed = 7)`).
//! This module only builds the syntax tree with byte spans; `format/parse.rs` gives it meaning.

use crate::format::FormatError;

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Span {
    pub offset: usize,
    pub len: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Ident(String),
    /// Integer or decimal number, kept as written.
    Number(String),
    Call(Call),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Arg {
    pub key: Option<(String, Span)>,
    pub value: Value,
    pub value_span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    pub name: String,
    pub name_span: Span,
    /// `None` for a bare name (`fp16`), `Some` for `name(...)` (possibly empty).
    pub args: Option<Vec<Arg>>,
    pub span: Span,
}

pub(crate) fn err(message: impl Into<String>, span: &Span, help: Option<String>) -> FormatError {
    FormatError {
        message: message.into(),
        offset: span.offset,
        len: span.len.max(1),
        help,
    }
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

/// Parse a whole literal into one call.
pub(crate) fn parse(src: &str) -> Result<Call, FormatError> {
    let mut p = Parser { src, pos: 0 };
    p.skip_ws();
    let call = p.call()?;
    p.skip_ws();
    if p.pos < src.len() {
        let rest = &src[p.pos..];
        return Err(err(
            format!("unexpected `{}` after the format", rest.trim_end()),
            &Span {
                offset: p.pos,
                len: rest.trim_end().len(),
            },
            Some("a literal is one format, e.g. `bfp(mant = 8)`".into()),
        ));
    }
    Ok(call)
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.pos += c.len_utf8();
            } else {
                break;
            }
        }
    }

    fn here(&self) -> Span {
        let len = self.peek().map_or(0, char::len_utf8);
        Span {
            offset: self.pos,
            len,
        }
    }

    fn found(&self) -> String {
        match self.peek() {
            Some(c) => format!("`{c}`"),
            None => "the end of the literal".into(),
        }
    }

    fn ident(&mut self) -> Option<(String, Span)> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '_' || (c == '-' && self.pos > start) {
                self.pos += 1;
            } else {
                break;
            }
        }
        if self.pos == start || !self.src[start..].starts_with(|c: char| c.is_ascii_alphabetic()) {
            self.pos = start;
            return None;
        }
        Some((
            self.src[start..self.pos].to_string(),
            Span {
                offset: start,
                len: self.pos - start,
            },
        ))
    }

    fn call(&mut self) -> Result<Call, FormatError> {
        let Some((name, name_span)) = self.ident() else {
            return Err(err(
                format!("expected a format name, found {}", self.found()),
                &self.here(),
                Some("formats: fp16, bf16, fp32, fp(e, m), bfp(...), msfp(...), mx(...), hbfp(...), mx9, mx6, mx4, int(...), fixed(...), dynfixed(...), pot(...), twohot(...)".into()),
            ));
        };
        self.skip_ws();
        if self.peek() != Some('(') {
            let span = name_span.clone();
            return Ok(Call {
                name,
                name_span,
                args: None,
                span,
            });
        }
        let open = self.pos;
        self.pos += 1;
        let mut args = Vec::new();
        self.skip_ws();
        if self.peek() == Some(')') {
            self.pos += 1;
        } else {
            loop {
                self.skip_ws();
                args.push(self.arg()?);
                self.skip_ws();
                match self.peek() {
                    Some(',') => {
                        self.pos += 1;
                    }
                    Some(')') => {
                        self.pos += 1;
                        break;
                    }
                    None => {
                        return Err(err(
                            format!("unclosed `(` of `{name}`"),
                            &Span {
                                offset: open,
                                len: 1,
                            },
                            Some("add the closing `)`".into()),
                        ));
                    }
                    Some(_) => {
                        return Err(err(
                            format!("expected `,` or `)`, found {}", self.found()),
                            &self.here(),
                            None,
                        ));
                    }
                }
            }
        }
        let span = Span {
            offset: name_span.offset,
            len: self.pos - name_span.offset,
        };
        Ok(Call {
            name,
            name_span,
            args: Some(args),
            span,
        })
    }

    fn arg(&mut self) -> Result<Arg, FormatError> {
        let save = self.pos;
        if let Some((key, key_span)) = self.ident() {
            self.skip_ws();
            if self.peek() == Some('=') {
                self.pos += 1;
                self.skip_ws();
                let (value, value_span) = self.value()?;
                return Ok(Arg {
                    key: Some((key, key_span)),
                    value,
                    value_span,
                });
            }
            self.pos = save;
        }
        let (value, value_span) = self.value()?;
        Ok(Arg {
            key: None,
            value,
            value_span,
        })
    }

    fn value(&mut self) -> Result<(Value, Span), FormatError> {
        let start = self.pos;
        match self.peek() {
            Some(c) if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => {
                self.pos += 1;
                while let Some(c) = self.peek() {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                let text = self.src[start..self.pos].to_string();
                Ok((
                    Value::Number(text),
                    Span {
                        offset: start,
                        len: self.pos - start,
                    },
                ))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let call = self.call()?;
                let span = call.span.clone();
                if call.args.is_none() {
                    Ok((Value::Ident(call.name), span))
                } else {
                    Ok((Value::Call(call), span))
                }
            }
            _ => Err(err(
                format!("expected a value, found {}", self.found()),
                &self.here(),
                None,
            )),
        }
    }
}

/// Edit distance with adjacent transpositions (optimal string alignment), for suggestions.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The closest candidate to `word` if it is close enough to be a plausible typo (ties: the
/// candidate whose length is closest to the word's).
pub(crate) fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (distance(&w, c), c.len().abs_diff(w.len()), *c))
        .filter(|(d, _, c)| *d <= 2.max(c.len() / 3) && *d < c.len().max(w.len()))
        .min_by_key(|(d, l, _)| (*d, *l))
        .map(|(_, _, c)| c)
}
