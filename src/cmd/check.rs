//! `nnpc check`: parse and check a firmware file, print its diagnostics.

use nnp_grammar::diagnostics::line_col;
use nnp_grammar::{Diagnostic, Diagnostics, Severity, SourceFile};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Check a firmware file against the ISA rules and a target; print every error and warning.
///
/// Exit status: 0 when there are no errors (warnings allowed), 1 when the firmware has errors,
/// 2 when the file or the target cannot be read.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc check samples/lstm.nnp
  nnpc check samples/lstm.nnp --target samples/targets/n16.toml
  nnpc check prog.nnp --json | jq '.[] | select(.severity == \"error\")'")]
pub struct Args {
    /// The firmware file (.nnp).
    pub file: PathBuf,
    /// Target: a built-in name (`bw-default`) or a TOML target file. Overrides the file's
    /// `target` statement.
    #[arg(long, value_name = "NAME|FILE")]
    pub target: Option<String>,
    /// Print the diagnostics as a JSON array on stdout instead of rendering them.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    // Unreadable file or target: an `Err` here, exit 2 from main.
    let (src, result) = crate::check_file(&args.file, args.target.as_deref())?;
    let (diags, errors) = match result {
        Ok(out) => (out.warnings, false),
        Err(diags) => (diags, true),
    };
    let diags = Diagnostics::new(&src, diags);
    if args.json {
        let v: Vec<serde_json::Value> = diags.items.iter().map(|d| to_json(&src, d)).collect();
        let text = serde_json::to_string_pretty(&v)
            .map_err(|e| super::fail(format!("cannot write JSON: {e}")))?;
        // A closed pipe (`| head`) is not an error of the check.
        let _ = writeln!(std::io::stdout().lock(), "{text}");
    } else {
        for d in &diags.items {
            eprintln!("{:?}", miette::Report::new(d.clone()));
        }
        if errors {
            eprintln!("{diags}");
        } else {
            eprintln!(
                "{}: ok ({} warning{})",
                src.name,
                diags.warnings(),
                plural(diags.warnings())
            );
        }
    }
    Ok(ExitCode::from(u8::from(errors)))
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn to_json(src: &SourceFile, d: &Diagnostic) -> serde_json::Value {
    let pos = |offset: u32| {
        let (line, column) = line_col(&src.text, offset);
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
