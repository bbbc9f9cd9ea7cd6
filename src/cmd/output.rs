//! Every result and message the commands write goes through here, so one rule decides what a
//! failed write means:
//!
//! - a closed pipe (`nnpc ... | head -1`) is not an error: the reader has what it wanted, so
//!   the rest of the output to that stream is dropped, silently, and the command ends with the
//!   status of its work;
//! - any other error (`> /dev/full`, a full disk) is: the command fails with exit status 2,
//!   saying so on stderr (where stderr itself cannot be written, with the status alone).
//!
//! (`println!` and `eprintln!` panic on either.)
//!
//! It also holds the two process-wide settings of how the commands speak, set once by `main`
//! from the global flags before any command runs: `--quiet` ([`set_quiet`]: [`note`]s and
//! progress bars are dropped; results, warnings and errors are not) and `--color`
//! ([`set_color`]: how miette renders errors and diagnostics).

use std::io::{ErrorKind, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// The two streams, and whether each has been found closed.
#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);
static QUIET: AtomicBool = AtomicBool::new(false);

impl Stream {
    fn closed(self) -> &'static AtomicBool {
        match self {
            Stream::Stdout => &STDOUT_CLOSED,
            Stream::Stderr => &STDERR_CLOSED,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    /// Write and flush all of `bytes`.
    fn write_all(self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()
            }
            Stream::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(bytes)?;
                err.flush()
            }
        }
    }

    /// Write `bytes` by the rule of this module.
    fn emit(self, bytes: &[u8]) -> miette::Result<()> {
        if self.closed().load(Ordering::SeqCst) {
            return Ok(());
        }
        match self.write_all(bytes) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                self.closed().store(true, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => Err(miette::miette!(
                help = format!(
                    "{} goes to a file or device that refuses writes: free space there, or \
                     send it elsewhere",
                    self.name()
                ),
                "cannot write to {}: {e}",
                self.name()
            )),
        }
    }
}

/// Write `text` (with its newlines) to stdout: a closed pipe ends the output quietly, another
/// error is an error.
pub fn stdout(text: impl AsRef<[u8]>) -> miette::Result<()> {
    Stream::Stdout.emit(text.as_ref())
}

/// Write `text` (with its newlines) to stderr, as [`stdout`].
pub fn stderr(text: impl AsRef<[u8]>) -> miette::Result<()> {
    Stream::Stderr.emit(text.as_ref())
}

/// Write `text` to stderr, as [`stderr`], unless `--quiet`: a confirmation or progress message
/// (`... written to FILE`) that says nothing the results, the warnings or the errors do not.
pub fn note(text: impl AsRef<[u8]>) -> miette::Result<()> {
    if quiet() {
        return Ok(());
    }
    stderr(text)
}

/// Set `--quiet` for the whole process (`main`, once, before the command runs).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::SeqCst);
}

/// Whether `--quiet` was given: no [`note`]s, no progress bars.
pub fn quiet() -> bool {
    QUIET.load(Ordering::SeqCst)
}

/// Render every miette report made from now on by `--color` `choice`: `Auto` leaves miette's
/// own choice (colour where stderr is a terminal and `NO_COLOR` is unset), `Always` colours
/// whatever stderr is, `Never` writes no escape sequences at all (no colours, no hyperlinks).
/// Call it before the first report is made (a report keeps the handler it was made with).
pub fn set_color(choice: clap::ColorChoice) {
    let color = match choice {
        clap::ColorChoice::Auto => return,
        clap::ColorChoice::Always => true,
        clap::ColorChoice::Never => false,
    };
    // Err only where a hook is already installed: then that one renders, as before.
    let _ = miette::set_hook(Box::new(move |_| {
        let opts = miette::MietteHandlerOpts::new().color(color);
        let opts = if color {
            opts
        } else {
            opts.terminal_links(false)
        };
        Box::new(opts.build())
    }));
}

/// Render `report` on stderr and return `code`, the status of the failure it reports; 2 where
/// stderr cannot be written (there is nowhere to say why, but the status still says it
/// failed).
pub fn report(report: &miette::Report, code: ExitCode) -> ExitCode {
    match stderr(format!("{report:?}\n")) {
        Ok(()) => code,
        Err(_) => ExitCode::from(2),
    }
}

/// `n noun`, with the noun's plural where `n` is not 1 (`1 output`, `2 outputs`, `0 outputs`).
/// Regular plurals only: `noun` + `s`.
pub fn count(n: usize, noun: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{n} {noun}{s}")
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_take_the_plural_except_for_one() {
        assert_eq!(count(0, "output"), "0 outputs");
        assert_eq!(count(1, "output"), "1 output");
        assert_eq!(count(2, "input vector"), "2 input vectors");
    }
}
