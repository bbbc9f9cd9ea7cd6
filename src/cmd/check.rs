//! `nnpc check`: parse and check a firmware file, print its diagnostics.

use super::output;
use nnp_grammar::{Diagnostic, Diagnostics, Severity, SourceFile, Span, TargetError, codes};
use nnpc::LoadError;
use std::process::ExitCode;

/// Check a firmware file against the ISA rules and a target; print every error and warning.
///
/// Exit status: 0 when there are no errors (warnings allowed), 1 when the firmware has errors,
/// 2 when the file or the target cannot be read.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc check samples/lstm.nnp
  nnpc check samples/elman_rnn_small.nnp --target samples/targets/n16.toml
  nnpc check samples/lstm.nnp --json | jq '.[] | select(.severity == \"error\")'")]
pub struct Args {
    #[command(flatten)]
    pub firmware: super::Firmware,
    /// Print the diagnostics as a JSON array on stdout instead of rendering them.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    // Unreadable file or target: an `Err` here, exit 2 from main (with --json, the error as
    // the array's one object, on stdout).
    let (src, result) = match nnpc::check_file(&args.firmware.file, args.firmware.target()) {
        Ok(checked) => checked,
        Err(e) if args.json => {
            print_json(&[load_error_json(&e)])?;
            return Ok(e.exit_code());
        }
        Err(e) => return Err(e.into()),
    };
    let (diags, errors) = match result {
        Ok(out) => (out.warnings, false),
        Err(diags) => (diags, true),
    };
    let diags = Diagnostics::new(&src, diags);
    if args.json {
        let v: Vec<serde_json::Value> = diags.items.iter().map(|d| to_json(&src, d)).collect();
        print_json(&v)?;
    } else {
        for d in &diags.items {
            output::stderr(format!("{:?}\n", miette::Report::new(d.clone())))?;
        }
        if errors {
            output::stderr(format!("{diags}\n"))?;
        } else {
            let warnings = output::count(diags.warnings(), "warning");
            // The result goes to stdout, as a command's result does; the diagnostics above
            // it (warnings) and errors go to stderr.
            output::stdout(format!("{}: ok ({warnings})\n", src.name))?;
        }
    }
    Ok(ExitCode::from(u8::from(errors)))
}

fn print_json(v: &[serde_json::Value]) -> miette::Result<()> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| super::fail(format!("cannot write JSON: {e}")))?;
    output::stdout(text + "\n")
}

/// A file or target that cannot be loaded, as a diagnostic object: an invalid target file's
/// at its place in that file, any other without a place (`start`/`end` null).
fn load_error_json(e: &LoadError) -> serde_json::Value {
    if let LoadError::Target(
        t @ TargetError::Invalid {
            path,
            src: Some(text),
            ..
        },
    ) = e
        && let Some(at) = t.span()
    {
        let file = SourceFile::new(path.clone(), text.inner().clone());
        let d = Diagnostic::error(codes::TARGET, t.to_string())
            .label(Span::new(at.start, at.end), "here");
        return to_json(&file, &d);
    }
    if let LoadError::NotUtf8(bad) = e {
        // At its place in the text (the invalid bytes shown as U+FFFD).
        let file = SourceFile::new(bad.path.clone(), bad.text.inner().clone());
        let at = bad.offset;
        let mut d = Diagnostic::error("nnp::encoding", e.to_string())
            .label(Span::new(at, at + '\u{FFFD}'.len_utf8()), "not UTF-8");
        if let Some(help) = miette::Diagnostic::help(e) {
            d = d.help(help.to_string());
        }
        return to_json(&file, &d);
    }
    let file = match e {
        LoadError::Target(TargetError::Read { path, .. } | TargetError::Invalid { path, .. })
        | LoadError::Read { path, .. }
        | LoadError::NotFirmware { path, .. } => path.clone(),
        LoadError::NotUtf8(bad) => bad.path.clone(),
        LoadError::Target(TargetError::UnknownBuiltin(name)) => name.clone(),
        LoadError::Firmware(_) => String::new(),
    };
    let code = miette::Diagnostic::code(e).map(|c| c.to_string());
    // The message with its causes (a firmware file's read error keeps its cause apart).
    let mut message = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        message = format!("{message}: {c}");
        cause = c.source();
    }
    serde_json::json!({
        "severity": "error",
        "code": code,
        "message": message,
        "file": file,
        "start": null,
        "end": null,
        "labels": [],
        "help": null,
    })
}

fn to_json(src: &SourceFile, d: &Diagnostic) -> serde_json::Value {
    let pos = |offset: u32| {
        let (line, column) = src.line_col(offset);
        serde_json::json!({ "offset": offset, "line": line, "column": column })
    };
    let span = d.span();
    serde_json::json!({
        "severity": match d.severity { Severity::Error => "error", Severity::Warning => "warning" },
        "code": d.code,
        "message": d.message,
        "file": src.name,
        "start": pos(span.start),
        "end": pos(span.end),
        "labels": d.labels.iter().map(|l| serde_json::json!({
            "start": pos(l.span.start),
            "end": pos(l.span.end),
            "text": l.text,
            "primary": l.primary,
        })).collect::<Vec<_>>(),
        "help": d.help,
    })
}
