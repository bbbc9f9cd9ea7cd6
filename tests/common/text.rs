//! Where the edits of the mutation tests apply: runs of characters in a text.

/// Byte ranges of the runs of ASCII digits in `text`.
pub fn digit_runs(text: &str) -> Vec<(usize, usize)> {
    runs(text, |c| c.is_ascii_digit())
}

/// Byte ranges of the whitespace-separated tokens of `text`.
pub fn tokens_of(text: &str) -> Vec<(usize, usize)> {
    runs(text, |c| !c.is_whitespace())
}

/// Byte ranges of the maximal runs of characters for which `inside` holds.
fn runs(text: &str, inside: impl Fn(char) -> bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (k, c) in text.char_indices().chain([(text.len(), ' ')]) {
        match (inside(c) && k < text.len(), start) {
            (true, None) => start = Some(k),
            (false, Some(s)) => {
                out.push((s, k));
                start = None;
            }
            _ => {}
        }
    }
    out
}
