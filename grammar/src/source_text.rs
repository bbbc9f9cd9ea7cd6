//! The text a diagnostic renders from: a file's name and text with its line index, read by
//! `miette` through [`SourceCode`].
//!
//! It differs from `miette::NamedSource<String>` in two ways:
//! - it finds a span's lines with the line index (O(log lines)) instead of scanning the text
//!   from its start, so rendering N diagnostics costs O(N log lines), not O(N x file size);
//! - it never hands the renderer a line longer than [`MAX_SHOWN_LINE`] bytes: on a long line
//!   it shows a window of [`WINDOW`] bytes either side of the span. (The renderer pads with
//!   `{:width$}`, which panics past column 65,535.) A span that cannot be shown so (one
//!   longer than the limit) is refused, and the renderer prints the message without the
//!   snippet.

use miette::{MietteError, MietteSpanContents, SourceCode, SourceSpan, SpanContents};
use std::fmt;

/// Byte offset -> 1-based line number, in O(log lines).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineIndex {
    starts: Vec<u32>,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let nl = text.bytes().enumerate().filter(|&(_, b)| b == b'\n');
        let starts = std::iter::once(0)
            .chain(nl.map(|(i, _)| i as u32 + 1))
            .collect();
        LineIndex { starts }
    }
    /// 1-based line holding byte `offset` (the last line past the end).
    pub fn line(&self, offset: u32) -> usize {
        self.starts.partition_point(|&s| s <= offset).max(1)
    }
    /// Byte offset where 0-based `line` starts, if the text has that line.
    pub fn start(&self, line: usize) -> Option<usize> {
        self.starts.get(line).map(|&s| s as usize)
    }
    /// Number of lines (a text without a line break has one).
    pub fn count(&self) -> usize {
        self.starts.len()
    }
}

/// Bytes shown on each side of a span that sits far into a long line.
pub const WINDOW: usize = 160;
/// Longest line (in bytes) given to the renderer: at most 4 columns a byte (a tab), well under
/// the renderer's 65,535-column limit.
pub const MAX_SHOWN_LINE: usize = 16_000;
/// Context lines longer than this are left out of a snippet.
const MAX_CONTEXT_LINE: usize = 1_000;

/// A named text with its line index, for rendering diagnostics.
#[derive(Clone, PartialEq, Eq)]
pub struct SourceText {
    name: String,
    text: String,
    lines: LineIndex,
}

impl fmt::Debug for SourceText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceText")
            .field("name", &self.name)
            .field("bytes", &self.text.len())
            .finish()
    }
}

impl SourceText {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        SourceText {
            name: name.into(),
            lines: LineIndex::new(&text),
            text,
        }
    }

    /// Built from an already indexed text.
    pub(crate) fn with_index(name: String, text: String, lines: LineIndex) -> Self {
        SourceText { name, text, lines }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The text (named like `NamedSource::inner`).
    pub fn inner(&self) -> &String {
        &self.text
    }

    /// Line (0-based) and its start and end (end without the line break) of byte `offset`.
    fn line_at(&self, offset: usize) -> (usize, usize, usize) {
        let line = self.lines.line(offset as u32) - 1;
        let (start, end) = self.line_bounds(line);
        (line, start, end)
    }

    /// Start and end (without `\n` or `\r\n`) of 0-based `line`.
    fn line_bounds(&self, line: usize) -> (usize, usize) {
        let start = self.lines.start(line).unwrap_or(self.text.len());
        let mut end = match self.lines.start(line + 1) {
            Some(next) => next - 1,
            None => self.text.len(),
        };
        if end > start && self.text.as_bytes().get(end - 1) == Some(&b'\r') {
            end -= 1;
        }
        (start, end.max(start))
    }

    fn floor_boundary(&self, mut i: usize) -> usize {
        while i > 0 && !self.text.is_char_boundary(i) {
            i -= 1;
        }
        i
    }

    fn ceil_boundary(&self, mut i: usize) -> usize {
        while i < self.text.len() && !self.text.is_char_boundary(i) {
            i += 1;
        }
        i.min(self.text.len())
    }

    /// The byte range `start..end`, or where it is longer than [`WINDOW`] bytes its first
    /// `WINDOW` bytes (to a character boundary), which the renderer can always show.
    pub(crate) fn shown_range(&self, start: usize, end: usize) -> std::ops::Range<usize> {
        if end.saturating_sub(start) <= WINDOW || end > self.text.len() {
            return start..end;
        }
        start..self.ceil_boundary(start + WINDOW)
    }

    /// The byte range shown for `start..end` with up to `before`/`after` context lines, or
    /// `None` when it would hold a line longer than [`MAX_SHOWN_LINE`].
    fn shown(
        &self,
        start: usize,
        end: usize,
        before: usize,
        after: usize,
    ) -> Option<(usize, usize)> {
        let (first, first_start, _) = self.line_at(start);
        let (last, _, last_end) = self.line_at(if end > start { end - 1 } else { start });
        let last_end = last_end.max(end);
        let from = if start - first_start > WINDOW {
            self.floor_boundary(start - WINDOW)
        } else {
            let mut from = first_start;
            for k in 1..=before.min(first) {
                let (s, e) = self.line_bounds(first - k);
                if e - s > MAX_CONTEXT_LINE {
                    break;
                }
                from = s;
            }
            from
        };
        let to = if last_end - end > WINDOW {
            self.ceil_boundary(end + WINDOW)
        } else {
            let mut to = last_end;
            for k in 1..=after {
                if self.lines.start(last + k).is_none() {
                    break;
                }
                let (s, e) = self.line_bounds(last + k);
                if e - s > MAX_CONTEXT_LINE {
                    break;
                }
                to = e;
            }
            to
        };
        // Every line shown must be short enough (the span's own lines, when it spans several).
        let mut line_start = from;
        for line in first..=last {
            let line_end = if line == last {
                to
            } else {
                self.line_bounds(line).1
            };
            if line_end.saturating_sub(line_start) > MAX_SHOWN_LINE {
                return None;
            }
            line_start = self.line_bounds(line + 1).0;
        }
        Some((from, to))
    }
}

impl SourceCode for SourceText {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let start = span.offset();
        let end = start
            .checked_add(span.len())
            .ok_or(MietteError::OutOfBounds)?;
        if end > self.text.len() {
            return Err(MietteError::OutOfBounds);
        }
        let (from, to) = if context_lines_before == 0 && context_lines_after == 0 {
            // The span itself (the renderer reads its line and column).
            (start, end)
        } else {
            self.shown(start, end, context_lines_before, context_lines_after)
                .ok_or(MietteError::OutOfBounds)?
        };
        let (line, line_start, _) = self.line_at(from);
        let column = self
            .text
            .get(line_start..from)
            .map_or(0, |s| s.chars().count());
        let line_count = self.lines.line(to as u32) - line;
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            &self.text.as_bytes()[from..to],
            (from, to - from).into(),
            line,
            column,
            line_count,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index() {
        let l = LineIndex::new("a\nbc\n\nd");
        // offsets: a=0 \n=1 b=2 c=3 \n=4 \n=5 d=6
        assert_eq!(l.line(0), 1);
        assert_eq!(l.line(1), 1);
        assert_eq!(l.line(2), 2);
        assert_eq!(l.line(5), 3);
        assert_eq!(l.line(6), 4);
        assert_eq!(l.line(100), 4);
    }
}
