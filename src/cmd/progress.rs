//! Progress bars (indicatif), drawn where stderr is a terminal, and never with `--quiet`.

use indicatif::{ProgressBar, ProgressStyle};
use nnp_runtime::host::Progress;
use std::sync::Arc;

/// A bar of `len` steps of `what`, labelled `verb` (indicatif draws nothing when stderr is not
/// a terminal; with `--quiet`, a hidden bar).
pub fn bar(verb: &str, len: usize, what: &str) -> ProgressBar {
    if super::output::quiet() {
        return ProgressBar::hidden();
    }
    ProgressBar::new(len as u64).with_style(
        ProgressStyle::with_template(&format!(
            "{verb} {{bar:30}} {{pos}}/{{len}} {what}, {{eta}} left"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    )
}

/// A bar of `batch` input sets labelled `verb`, and the progress callback that advances it.
pub fn input_sets_bar(verb: &str, batch: usize) -> (ProgressBar, Progress) {
    let bar = bar(verb, batch, "input sets");
    let tick = bar.clone();
    (bar, Progress(Arc::new(move |n| tick.inc(n as u64))))
}
