//! A diff report as one self-contained web page (`nnpc diff --report`, Python's
//! `DiffReport.to_html`): the verdict and counts, the provenance of both sides, the ULP
//! histogram, where the mismatches are (heatmaps, drawn by `heatmap.rs`), the first mismatches
//! with their firmware lines, the first divergent trace record with what feeds its `v_wr`,
//! and the explain search beside the target as given. Everything is inline; all firmware text
//! is escaped.

use super::heatmap::{colour, legend, map_html};
use super::{DiffReport, bucket_label, number};
use crate::explain::{ExplainRow, cmp_share};
use crate::io::Metadata;
use nnp_grammar::Program;
use nnp_lowering::depgraph::{DRAWING_CSS, DepGraph};
use nnp_lowering::html::{escape, page, script_json};
use std::collections::BTreeSet;
use std::fmt::Write as _;

const CSS: &str = include_str!("report.css");
const SCRIPT: &str = include_str!("report.js");

/// Levels of producers drawn back from a divergent `v_wr`, and the most nodes drawn.
const FEEDER_LEVELS: usize = 4;
const FEEDER_NODES: usize = 48;
/// Source lines shown around each line a mismatch or a trace record names.
const CONTEXT_LINES: usize = 3;

/// What a report page shows besides the report itself.
#[derive(Default)]
pub struct Context<'a> {
    /// The program compared: its source (each mismatch's line shown in context) and its
    /// dependency graph (what feeds the first divergent `v_wr`). `None`: the report alone
    /// (a campaign's merged report), whose mismatches carry their own source lines.
    pub program: Option<&'a Program>,
    /// The hardware dump, as named on the command line.
    pub hardware: String,
    /// How each side was made: the dump's recorded provenance (docs/files.md; `None` for a
    /// dump without it) and this run's, under the same keys.
    pub hardware_made: Option<Metadata>,
    pub software_made: Option<Metadata>,
}

/// The provenance key that names the program: a path, which may differ for the same text
/// (its hash tells).
const PROGRAM_KEY: &str = "nnpc.program";

/// A statistic as the text report prints it.
fn stat(v: f64, db: bool) -> String {
    let unit = if db { " dB" } else { "" };
    match v {
        v if v.is_nan() => "undefined".into(),
        v if v.is_infinite() => format!("{}inf{unit}", if v < 0.0 { "-" } else { "" }),
        v if db => format!("{v:.1}{unit}"),
        v => format!("{v:.3e}"),
    }
}

fn verdict(report: &DiffReport) -> String {
    let (class, text) = match (report.concordant, report.outputs_bit_exact()) {
        (true, _) => ("ok", "concordant"),
        (false, true) => ("bad", "NOT concordant: a v_wr trace record differs"),
        (false, false) => ("bad", "NOT concordant"),
    };
    format!(
        "<p id=\"verdict\" class=\"verdict {class}\">{text}: {} of {} elements bit-exact \
         (storage {})</p>",
        report.bit_exact,
        report.elements,
        escape(&report.storage),
    )
}

fn provenance(ctx: &Context) -> String {
    let (hw, sw) = (ctx.hardware_made.as_ref(), ctx.software_made.as_ref());
    if hw.is_none() && sw.is_none() {
        return String::new();
    }
    let keys: BTreeSet<&String> = hw.into_iter().chain(sw).flat_map(|m| m.keys()).collect();
    let mut s = String::from(
        "<h2>Provenance</h2><table id=\"provenance\"><tr><th>key</th><th>hardware dump</th><th>this diff's software run</th></tr>",
    );
    for k in keys {
        let (a, b) = (hw.and_then(|m| m.get(k)), sw.and_then(|m| m.get(k)));
        let differs = hw.is_some() && a != b && k != PROGRAM_KEY;
        let cell = |v: Option<&String>| v.map_or("<i>not recorded</i>".into(), |v| escape(v));
        let _ = write!(
            s,
            "<tr{}><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td></tr>",
            if differs { " class=\"differs\"" } else { "" },
            escape(k),
            cell(a),
            cell(b)
        );
    }
    s.push_str("</table>");
    if hw.is_none() {
        s.push_str("<p class=\"note\">The dump records no provenance (a board's dump).</p>");
    } else {
        s.push_str("<p class=\"note\">Rows whose sides disagree are highlighted (the program's path aside: its hash says whether the text differs).</p>");
    }
    s
}

fn outputs(report: &DiffReport) -> String {
    let mut s = String::from(
        "<h2>Outputs</h2><table id=\"outputs\"><tr><th>output</th><th>shape</th><th>bit-exact</th><th>mismatched</th>\
         <th>max ULP</th><th>max abs err</th><th>max rel err</th><th>QSNR</th><th>NaN vs number</th><th>inf</th><th>not storage values</th></tr>",
    );
    for o in &report.outputs {
        let bad = o.bit_exact != o.elements;
        let _ = write!(
            s,
            "<tr{}><td><code>{}</code></td><td class=\"mono\">{:?}</td><td>{} of {}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if bad { " class=\"differs\"" } else { "" },
            escape(&o.name),
            o.shape,
            o.bit_exact,
            o.elements,
            o.elements - o.bit_exact,
            o.max_ulps,
            stat(o.max_abs_err, false),
            stat(o.max_rel_err, false),
            stat(o.qsnr_db, true),
            o.nan_mismatches,
            o.inf_mismatches,
            o.not_storage_values
        );
    }
    s.push_str("</table>");
    s
}

/// The ULP histogram as bars, log-scaled counts.
fn histogram(report: &DiffReport) -> String {
    let h = &report.ulp_histogram;
    let n = h.len();
    let (bar, height, top) = (44usize, 160.0f64, 18usize);
    let max = h.iter().copied().max().unwrap_or(0).max(1) as f64;
    let width = 50 + n * bar;
    let mut s = format!(
        "<h2>ULP histogram</h2><svg xmlns=\"http://www.w3.org/2000/svg\" id=\"histogram\" width=\"{width}\" height=\"{}\" viewBox=\"0 0 {width} {}\">",
        top + height as usize + 44,
        top + height as usize + 44
    );
    for (k, &c) in h.iter().enumerate() {
        let x = 50 + k * bar;
        let y_base = top as f64 + height;
        let frac = if c == 0 {
            0.0
        } else {
            ((c as f64).ln_1p() / max.ln_1p()).max(0.02)
        };
        let bh = frac * height;
        let [r, g, b] = colour(k as u8, n);
        let label = bucket_label(k, n);
        let _ = write!(
            s,
            "<g class=\"bar\"><title>{} ULP: {c}</title><rect x=\"{}\" y=\"{:.1}\" width=\"{}\" height=\"{bh:.1}\" fill=\"rgb({r},{g},{b})\" stroke=\"#888\"/>\
             <text class=\"ax\" x=\"{}\" y=\"{:.1}\" text-anchor=\"middle\">{c}</text>\
             <text class=\"ax\" transform=\"translate({},{}) rotate(-35)\" text-anchor=\"end\">{}</text></g>",
            escape(&label),
            x + 2,
            y_base - bh,
            bar - 4,
            x + bar / 2,
            y_base - bh - 3.0,
            x + bar / 2,
            top as f64 + height + 12.0,
            escape(if k + 1 == n { "NaN" } else { &label }),
        );
    }
    s.push_str("</svg><p class=\"note\">Elements by distance in ULPs of the storage format (bar heights log-scaled; the counts are exact).</p>");
    s
}

/// The lines of `program` within [`CONTEXT_LINES`] of any of `lines`, with those lines
/// highlighted, each `id="L<n>"`.
fn source(program: &Program, lines: &BTreeSet<usize>) -> String {
    let text: Vec<&str> = program.source.text.lines().collect();
    let mut shown = BTreeSet::new();
    for &l in lines {
        let l = l.max(1);
        shown.extend(l.saturating_sub(CONTEXT_LINES).max(1)..=(l + CONTEXT_LINES).min(text.len()));
    }
    let mut s = format!(
        "<h2>Firmware</h2><p class=\"note\"><code>{}</code>: the lines the mismatches and the trace name, highlighted, with {CONTEXT_LINES} lines around each.</p><pre id=\"source\">",
        escape(&program.source.name)
    );
    let mut last = 0;
    for l in shown {
        if last != 0 && l != last + 1 {
            s.push_str("<span class=\"gap\">  ...</span>\n");
        }
        let class = if lines.contains(&l) { " hl" } else { "" };
        let _ = writeln!(
            s,
            "<span id=\"L{l}\" class=\"ln{class}\"><b>{l:>5}</b>  {}</span>",
            escape(text.get(l - 1).unwrap_or(&""))
        );
        last = l;
    }
    s.push_str("</pre>");
    s
}

fn mismatches(report: &DiffReport, linked: bool) -> String {
    if report.mismatches.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "<h2>First {} mismatches</h2><table id=\"mismatches\"><tr><th>output</th><th>index</th><th>tile</th><th>lane</th>\
         <th>hardware</th><th>software</th><th>ULP</th><th>v_wr that wrote it</th></tr>",
        report.mismatches.len()
    );
    for m in &report.mismatches {
        let hw = match m.hardware_f64 {
            Some(v) => number(v, v),
            None => number(m.hardware, f64::from(m.hardware)),
        };
        let note = if m.not_storage_value {
            format!(
                " (not a {} value; rounds to 0x{:04X})",
                report.storage, m.hardware_bits
            )
        } else {
            format!(" (0x{:04X})", m.hardware_bits)
        };
        let ulps = m.ulps.map_or("NaN vs number".into(), |u| u.to_string());
        let at = match (m.line, &m.source) {
            (Some(l), Some(src)) if linked => {
                format!(
                    "<a href=\"#L{l}\">line {l}</a>: <code>{}</code>",
                    escape(src.trim())
                )
            }
            (Some(l), Some(src)) => format!("line {l}: <code>{}</code>", escape(src.trim())),
            _ => "writer unknown".into(),
        };
        let _ = write!(
            s,
            "<tr><td><code>{}</code></td><td class=\"mono\">{:?}</td><td>{}</td><td>{}</td><td class=\"mono\">{}</td>\
             <td class=\"mono\">{} (0x{:04X})</td><td>{ulps}</td><td>{at}</td></tr>",
            escape(&m.output),
            m.index,
            m.tile,
            m.lane,
            escape(&format!("{hw}{note}")),
            escape(&number(m.software, f64::from(m.software))),
            m.software_bits
        );
    }
    s.push_str("</table>");
    s
}

fn trace(report: &DiffReport, program: Option<&Program>) -> String {
    let Some(t) = &report.trace else {
        return String::new();
    };
    let mut s = format!(
        "<h2>Trace</h2><p id=\"trace\">{} of {} v_wr records identical.</p>",
        t.identical, t.records
    );
    let Some(f) = &t.first else {
        return s;
    };
    let text = program.map_or(String::new(), |p| {
        p.source
            .text
            .lines()
            .nth(f.line.saturating_sub(1))
            .unwrap_or("")
            .trim()
            .to_string()
    });
    let _ = write!(
        s,
        "<p class=\"verdict bad\">First divergent v_wr: <a href=\"#L{}\">line {}</a> <code>{}</code>: chain {}, iteration {}, \
         writing {}[{}], batch item {}: {} lanes differ, lane {} hardware 0x{:04X} software 0x{:04X}.</p>",
        f.line,
        f.line,
        escape(&text),
        f.chain,
        f.iteration,
        escape(&f.dst),
        f.addr,
        f.item,
        f.lanes_differing,
        f.first_lane,
        f.hardware_bits,
        f.software_bits
    );
    if let Some(p) = program {
        let graph = DepGraph::build(p);
        if let Some(node) = graph.write_node(p, f.chain, f.iteration, f.line) {
            let nodes = graph.feeders(node, FEEDER_LEVELS, FEEDER_NODES);
            let d = graph.svg(p, &nodes, Some(node));
            let _ = write!(
                s,
                "<p class=\"note\">What feeds it: its producers back {FEEDER_LEVELS} levels ({} nodes; the divergent v_wr outlined in red). \
                 <code>nnpc graph FILE --format html</code> draws the whole graph.</p><div id=\"feeders\" class=\"scroll\">{}</div>",
                nodes.len(),
                d.svg
            );
        }
    }
    s
}

fn explain(report: &DiffReport) -> String {
    let Some(rows) = &report.explain else {
        return String::new();
    };
    let mut order: Vec<&ExplainRow> = rows.iter().collect();
    order.sort_by(|a, b| (b.concordant.cmp(&a.concordant)).then(cmp_share(b.share(), a.share())));
    let share = |n: usize, of: usize| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let bar = |f: f64| {
        format!(
            "<span class=\"share\"><i style=\"width:{:.1}%\"></i></span>",
            100.0 * f
        )
    };
    let mut s = String::from("<h2>Explain</h2><div class=\"beside\" id=\"explain-beside\">");
    let _ = write!(
        s,
        "<div class=\"side bad\"><h4>the target as given</h4><p>{} of {} bit-exact {}</p></div>",
        report.bit_exact,
        report.elements,
        bar(share(report.bit_exact, report.elements))
    );
    let best: Vec<&&ExplainRow> = order.iter().filter(|r| r.concordant).collect();
    match best.as_slice() {
        [] => s.push_str("<div class=\"side\"><h4>no change tried is concordant</h4><p>the board differs in more settings, or there is a fault (<code>--trace</code> names the first divergent v_wr)</p></div>"),
        found => {
            for r in found {
                let _ = write!(
                    s,
                    "<div class=\"side ok\"><h4>changed by</h4><pre>{}</pre><p>{} of {} bit-exact (concordant) {}</p></div>",
                    escape(&r.change),
                    r.bit_exact,
                    r.elements,
                    bar(1.0)
                );
            }
        }
    }
    s.push_str("</div><details><summary>every change tried</summary><table id=\"explain\"><tr><th>change</th><th>knobs</th><th>items</th><th>bit-exact</th><th></th></tr>");
    for r in order {
        let result = match &r.error {
            Some(e) => format!("cannot run: {}", escape(e)),
            None => format!(
                "{} of {}{}",
                r.bit_exact,
                r.elements,
                if r.concordant { " (concordant)" } else { "" }
            ),
        };
        let _ = write!(
            s,
            "<tr{}><td><code>{}</code></td><td>{}</td><td>{}</td><td>{result}</td><td>{}</td></tr>",
            if r.concordant { " class=\"ok\"" } else { "" },
            escape(&r.change.replace('\n', "; ")),
            r.knobs,
            r.items,
            bar(share(r.bit_exact, r.elements))
        );
    }
    s.push_str("</table></details>");
    s
}

/// The report as a self-contained page.
pub fn render(report: &DiffReport, ctx: &Context) -> String {
    let buckets = report.ulp_histogram.len();
    let name = ctx
        .program
        .map_or("diff report".to_string(), |p| p.source.name.clone());
    let mut title = format!("nnpc diff: {name}");
    if !ctx.hardware.is_empty() {
        title.push_str(&format!(" vs hardware {}", ctx.hardware));
    }
    let mut body = format!("<header><h1>{}</h1>", escape(&title));
    if let Some(p) = ctx.program {
        let _ = write!(
            body,
            "<p class=\"mono\">software graph on target {} (N = {})</p>",
            escape(&p.target.name),
            p.native()
        );
    }
    body.push_str("</header><main>");
    body.push_str(&verdict(report));
    body.push_str(&provenance(ctx));
    body.push_str(&outputs(report));
    if !report.outputs_bit_exact() {
        body.push_str(&histogram(report));
        if !report.maps.is_empty() {
            body.push_str("<h2>Where the mismatches are</h2>");
            body.push_str(&legend(buckets));
            for (i, m) in report.maps.iter().enumerate() {
                let shape = report
                    .outputs
                    .iter()
                    .find(|o| o.name == m.output)
                    .map_or(&[][..], |o| &o.shape[..]);
                body.push_str(&map_html(m, i, shape, buckets));
            }
        }
    }
    body.push_str(&mismatches(report, ctx.program.is_some()));
    body.push_str(&trace(report, ctx.program));
    body.push_str(&explain(report));
    if let Some(p) = ctx.program {
        let mut lines: BTreeSet<usize> = report.mismatches.iter().filter_map(|m| m.line).collect();
        lines.extend(
            report
                .trace
                .iter()
                .filter_map(|t| t.first.as_ref())
                .map(|f| f.line),
        );
        if !lines.is_empty() {
            body.push_str(&source(p, &lines));
        }
    }
    body.push_str("<div id=\"tip\" hidden></div></main>");
    let labels: Vec<String> = (0..buckets).map(|k| bucket_label(k, buckets)).collect();
    let data = serde_json::json!({ "maps": report.maps, "labels": labels }).to_string();
    body.push_str("<script type=\"application/json\" id=\"report-data\">");
    body.push_str(&script_json(&data));
    body.push_str("</script>");
    page(&title, &format!("{DRAWING_CSS}{CSS}"), &body, SCRIPT)
}
