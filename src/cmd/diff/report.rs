//! The text report of `nnpc diff`: outputs, the ULP histogram, the first mismatches, the
//! trace, and `--explain`'s rows.

use super::args::{Args, ExplainPairs};
use nnp_grammar::Program;
use nnp_runtime::diff::{DiffReport, bucket_label, number};
use nnp_runtime::explain::{DEFAULT_TARGET_LINE, ExplainRow, closest, cmp_share};
use nnp_runtime::host::ShapeDisplay;
use nnp_runtime::trace::TraceComparison;

/// `println!` into `out`, the report's text (written to stdout whole, `output::stdout`).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

pub(super) fn print_report(
    out: &mut String,
    args: &Args,
    program: &Program,
    report: &DiffReport,
    batch: usize,
) {
    say!(
        out,
        "{}: hardware `{}` vs software graph on `{}` (N = {}), batch {batch}",
        program.source.name,
        args.hardware.display(),
        program.target.name,
        program.native()
    );
    print_outputs(out, report);
    if !report.outputs_bit_exact() {
        print_mismatches(out, report);
    }
    if let Some(t) = &report.trace {
        print_trace(out, program, t);
    }
    match &report.explain {
        Some(rows) => {
            let all_pairs = args.explain == Some(ExplainPairs::AllPairs);
            print_explain(out, program, rows, batch, all_pairs)
        }
        None if !report.outputs_bit_exact() => say!(
            out,
            "  (`--explain` reruns the software graph under one-knob changes of the target's \
             numerics, to tell a setting the target file gets wrong from a fault)"
        ),
        None => {}
    }
    say!(
        out,
        "bit-exact: {} of {}{}",
        report.bit_exact,
        report.elements,
        match (report.concordant, report.outputs_bit_exact()) {
            (true, _) => " (concordant)",
            (false, true) => ", but a v_wr trace record differs (NOT concordant)",
            (false, false) => " (NOT concordant)",
        }
    );
}

/// One line per output: its bit-exact elements, largest errors, and what they leave out.
fn print_outputs(out: &mut String, report: &DiffReport) {
    for o in &report.outputs {
        // What the statistics leave out, or cannot measure.
        let mut besides = Vec::new();
        if o.not_storage_values > 0 {
            let n = o.not_storage_values;
            let (a, s) = if n == 1 { ("a ", "") } else { ("", "s") };
            besides.push(format!("{n} not {a}{} value{s}", report.storage));
        }
        if o.inf_mismatches > 0 {
            besides.push(format!(
                "{} infinit{} against another value",
                o.inf_mismatches,
                if o.inf_mismatches == 1 { "y" } else { "ies" }
            ));
        }
        if o.nan_mismatches > 0 {
            besides.push(format!(
                "{} NaN{} against a number",
                o.nan_mismatches,
                plural(o.nan_mismatches)
            ));
        }
        let qsnr = match o.qsnr_db {
            q if q.is_finite() => format!("{q:.1} dB"),
            q if q.is_nan() => "undefined".into(),
            q if q > 0.0 => "inf dB".into(),
            _ => "-inf dB".into(),
        };
        say!(
            out,
            "  output {} {}: {} of {} bit-exact, max {} ULP, max abs err {}, QSNR {qsnr}{}",
            o.name,
            ShapeDisplay(&o.shape),
            o.bit_exact,
            o.elements,
            o.max_ulps,
            match o.max_abs_err {
                e if e.is_finite() => format!("{e:.3e}"),
                e if e.is_nan() => "undefined".into(),
                _ => "inf".into(),
            },
            if besides.is_empty() {
                String::new()
            } else {
                format!("; {}", besides.join(", "))
            }
        );
    }
}

/// The ULP histogram and the first mismatches, each at the firmware line that wrote it.
fn print_mismatches(out: &mut String, report: &DiffReport) {
    let buckets = report.ulp_histogram.len();
    let hist: Vec<String> = report
        .ulp_histogram
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(k, c)| format!("{}: {c}", bucket_label(k, buckets)))
        .collect();
    say!(out, "  ULP histogram: {}", hist.join(", "));
    if !report.mismatches.is_empty() {
        say!(out, "  first {} mismatches:", report.mismatches.len());
    }
    for m in &report.mismatches {
        let idx: Vec<String> = m.index.iter().map(ToString::to_string).collect();
        let ulps = m.ulps.map_or("NaN".into(), |u| format!("{u} ULP"));
        let at = match (m.line, &m.source) {
            (Some(l), Some(s)) => format!("line {l}: {}", s.trim()),
            _ => "writer unknown".into(),
        };
        let hardware = match m.hardware_f64 {
            Some(v) => number(v, v),
            None => number(m.hardware, f64::from(m.hardware)),
        };
        let bits = if m.not_storage_value {
            let storage = &report.storage;
            format!("not a {storage} value; rounds to 0x{:04X}", m.hardware_bits)
        } else {
            format!("0x{:04X}", m.hardware_bits)
        };
        say!(
            out,
            "    {}[{}] tile {} lane {}: hardware {hardware} ({bits}) software {} (0x{:04X}), {ulps}; {at}",
            m.output,
            idx.join(", "),
            m.tile,
            m.lane,
            number(m.software, f64::from(m.software)),
            m.software_bits
        );
    }
}

/// How the hardware's v_wr trace compares: identical, or its first divergent record.
fn print_trace(out: &mut String, program: &Program, t: &TraceComparison) {
    match &t.first {
        None => say!(
            out,
            "  trace: {} of {} v_wr records identical",
            t.identical,
            t.records
        ),
        Some(f) => {
            let text = program
                .source
                .text
                .lines()
                .nth(f.line.saturating_sub(1))
                .unwrap_or("")
                .trim();
            say!(
                out,
                "  trace: {} of {} v_wr records identical; first divergent v_wr: line {}: {text}",
                t.identical,
                t.records,
                f.line
            );
            say!(
                out,
                "    chain {} iteration {} -> {}[{}], batch item {}: {} lanes differ, lane {} hardware 0x{:04X} software 0x{:04X}",
                f.chain,
                f.iteration,
                f.dst,
                f.addr,
                f.item,
                f.lanes_differing,
                f.first_lane,
                f.hardware_bits,
                f.software_bits
            );
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The changes that make the dump concordant, else the closest few, and what that means.
fn print_explain(
    out: &mut String,
    program: &Program,
    rows: &[ExplainRow],
    batch: usize,
    all_pairs: bool,
) {
    let target = &program.target.name;
    let (singles, pairs): (Vec<&ExplainRow>, Vec<&ExplainRow>) =
        rows.iter().partition(|r| r.knobs == 1);
    say!(
        out,
        "  explain: the software graph under {} one-knob changes of `{target}`'s numerics:",
        singles.len()
    );
    print_explain_rows(out, &singles, batch);
    if !pairs.is_empty() {
        let n = pairs.len();
        let which = if all_pairs {
            format!("every pair of two changes, {n} more")
        } else {
            // The one-knob rows come first; the closest of them is the one the pairs build on.
            let first =
                closest(&rows[..singles.len()]).map_or(String::new(), |i| one_line(&rows[i]));
            format!("the closest, `{first}`, with each of {n} more changes on top")
        };
        say!(out, "  none is concordant; {which}:");
        print_explain_rows(out, &pairs, batch);
    }
    let fault = "or the firmware, the board or the data has a fault (`--trace` names the first \
                 divergent v_wr)";
    let every = "`--explain=all-pairs` tries every pair of two changes";
    let concordant: Vec<String> = rows
        .iter()
        .filter(|r| r.concordant)
        .map(|r| format!("`{}`", one_line(r)))
        .collect();
    match (concordant.as_slice(), all_pairs, pairs.is_empty()) {
        ([], true, _) => say!(
            out,
            "  no change of one knob, nor any pair of two, makes the dump concordant: the board \
             differs from `{target}` in more settings, {fault}"
        ),
        ([], false, true) => say!(
            out,
            "  no single change of the numerics makes the dump concordant: the board differs from \
             `{target}` in more than one setting ({every}), {fault}"
        ),
        ([], false, false) => say!(
            out,
            "  no change of one knob, nor of two with the closest, makes the dump concordant: the \
             board differs from `{target}` in other settings ({every}), {fault}"
        ),
        (changes, _, _)
            if changes
                .iter()
                .any(|c| c == &format!("`{DEFAULT_TARGET_LINE}`")) =>
        {
            say!(
                out,
                "  the dump is concordant with the built-in target `bw-default`: the board ran \
                 the default target, not `{target}` (diff with `--target bw-default`, or \
                 without `--target` where the firmware has no `target` line)"
            )
        }
        (changes, _, _) => say!(
            out,
            "  the dump is concordant with `{target}` changed by {}: if the board does that, put \
             it under [numerics] in its target file (docs/targets.md)",
            changes.join(" or by ")
        ),
    }
}

/// A change's lines on one line.
fn one_line(r: &ExplainRow) -> String {
    r.change.replace('\n', "; ")
}

/// The concordant rows, else the five closest by their share of bit-exact elements, then how
/// many more there are.
fn print_explain_rows(out: &mut String, rows: &[&ExplainRow], batch: usize) {
    const SHOWN: usize = 5;
    let mut order = rows.to_vec();
    order.sort_by(|a, b| (b.concordant.cmp(&a.concordant)).then(cmp_share(b.share(), a.share())));
    let shown = order.iter().filter(|r| r.concordant).count().max(SHOWN);
    for r in order.iter().take(shown) {
        let change = one_line(r);
        match &r.error {
            Some(e) => say!(out, "    {change}: cannot run ({e})"),
            None => say!(
                out,
                "    {} of {} bit-exact{}{}  {change}",
                r.bit_exact,
                r.elements,
                if r.items < batch {
                    format!(" in the first {} items", r.items)
                } else {
                    String::new()
                },
                if r.concordant { " (concordant)" } else { "" }
            ),
        }
    }
    if rows.len() > shown {
        say!(
            out,
            "    ({} more: `--json` lists every one)",
            rows.len() - shown
        );
    }
}
