//! Firmware text: the samples and `corpus/firmware/*.nnp`, mutated by byte flips, token
//! splices, line duplication, deep nesting, huge numbers and long tokens. The front end never
//! panics; every diagnostic's span lies in the source on character boundaries and the
//! diagnostic renders; a program that checks clean runs on both engines (a few items,
//! `nnp_progen::run_differential`: the emulator's trace and outputs against the graph's, bit
//! for bit), or both refuse it alike at run time.

use super::common::samples::{Firmware, firmware_in, samples};
use super::common::text::{digit_runs, tokens_of};
use super::engine::{Budget, EDGES, Input, Verdict, corpus_dir, flip_bit, fuzz, vary};
use miette::{GraphicalReportHandler, GraphicalTheme};
use nnp_progen::{DataConfig, Outcome, Rng, refused_alike, run_differential};
use nnpc::grammar::{Diagnostic, Diagnostics, SourceFile, Target, check};
use std::sync::Arc;

/// Items per run on the engines.
const BATCH: usize = 2;
/// The largest mutant: a long token or many duplicated lines stop growing here.
const MAX_TEXT: usize = 1 << 20;

/// A firmware text and the target it is checked on.
struct Text {
    text: String,
    target: String,
    toml: String,
}

impl Input for Text {
    /// The text under a header naming its target: a corpus file as it is checked in.
    fn bytes(&self) -> Vec<u8> {
        format!("// nnpc: targets = {}\n{}", self.target, self.text).into_bytes()
    }
    fn ext(&self) -> &'static str {
        "nnp"
    }
}

/// Every seed: the samples, then the corpus's firmware, each with every target it names.
fn seeds() -> Vec<(String, Text)> {
    let mut files = samples();
    files.extend(firmware_in(&corpus_dir("firmware")));
    let mut out = Vec::new();
    for Firmware {
        name,
        text,
        targets,
    } in files
    {
        for toml in targets {
            let target = Target::from_toml(&toml, "seed.toml")
                .map(|t| t.name)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let text = text.clone();
            out.push((format!("{name} on {target}"), Text { text, target, toml }));
        }
    }
    out
}

#[test]
fn firmware_mutants_never_panic_and_run_alike_on_both_engines() {
    let seeds = seeds();
    let texts: Vec<&str> = seeds.iter().map(|(_, t)| t.text.as_str()).collect();
    let make = |_seed: u64, rng: &mut Rng| {
        let (_, base) = rng.pick(&seeds);
        let mut text = base.text.clone();
        for _ in 0..rng.range(1, 4) {
            mutate(&mut text, &texts, rng);
            if text.len() > MAX_TEXT {
                let end = (0..=MAX_TEXT).rev().find(|&k| text.is_char_boundary(k));
                text.truncate(end.unwrap_or(0));
            }
        }
        Text {
            text,
            target: base.target.clone(),
            toml: base.toml.clone(),
        }
    };
    fuzz("firmware", &Budget::from_env(400), &seeds, make, exercise);
}

/// The property on one text: diagnostics well formed and rendered; a clean program concordant
/// on both engines (or stopped or refused alike).
fn exercise(input: &Text, seed: u64) -> Result<Verdict, String> {
    let target = Target::from_toml(&input.toml, "fuzz.toml").map_err(|e| e.to_string())?;
    let text = input.text.as_str();
    let src = Arc::new(SourceFile::new("fuzz.nnp", text));
    let (diags, clean) = match check(src.clone(), Some(target)) {
        Ok(out) => (out.warnings, true),
        Err(d) if d.iter().any(Diagnostic::is_error) => (d, false),
        Err(d) => return Err(format!("refused without an error: {d:?}")),
    };
    well_formed(text, &src, diags)?;
    if !clean {
        return Ok("refused by the checker");
    }
    let data = DataConfig::default();
    let json = seed.is_multiple_of(4);
    match run_differential(text, &input.toml, seed, BATCH, &data, json) {
        Outcome::Concordant { .. } => Ok("concordant"),
        Outcome::SameError(_) => Ok("stopped alike"),
        Outcome::EmulatorError(e) if !e.starts_with("panicked") => {
            refused_alike(&e, text, &input.toml, seed, BATCH)
                .map(|()| "refused alike at run time")
                .map_err(|what| format!("the emulator refused ({e}); {what}"))
        }
        other => Err(other.to_string()),
    }
}

/// Every span inside `text` on character boundaries, and every diagnostic renders.
fn well_formed(text: &str, src: &SourceFile, diags: Vec<Diagnostic>) -> Result<(), String> {
    for d in &diags {
        for l in &d.labels {
            let (s, e) = (l.span.start as usize, l.span.end as usize);
            if !(s <= e && e <= text.len() && text.is_char_boundary(s) && text.is_char_boundary(e))
            {
                return Err(format!(
                    "span {s}..{e} not in a text of {} bytes: {}",
                    text.len(),
                    d.message
                ));
            }
        }
    }
    let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor());
    // The first few: rendering each is linear in its line, and there may be thousands.
    for d in Diagnostics::new(src, diags).items.iter().take(4) {
        let mut out = String::new();
        handler
            .render_report(&mut out, d)
            .map_err(|e| format!("`{}` does not render: {e}", d.message))?;
        if out.trim().is_empty() {
            return Err(format!("`{}` renders as nothing", d.message));
        }
    }
    Ok(())
}

/// One edit of `text`; `texts` are the seeds tokens are spliced from.
fn mutate(text: &mut String, texts: &[&str], rng: &mut Rng) {
    match rng.below(10) {
        0 => {
            // Byte flips: the text as the front end gets it from a damaged file (invalid UTF-8
            // replaced, as `nnpc` shows it).
            let mut bytes = std::mem::take(text).into_bytes();
            for _ in 0..rng.range(1, 3) {
                let all = 0..bytes.len();
                flip_bit(&mut bytes, all, rng);
            }
            *text = String::from_utf8_lossy(&bytes).into_owned();
        }
        1 | 2 => {
            // A token of some seed spliced in, in place of a token or between two.
            let from = *rng.pick(texts);
            let tokens: Vec<&str> = from.split_whitespace().collect();
            let token = *rng.pick(&tokens);
            let spans = tokens_of(text);
            if spans.is_empty() {
                text.push_str(token);
                return;
            }
            let (a, b) = *rng.pick(&spans);
            if rng.chance(0.5) {
                text.replace_range(a..b, token);
            } else {
                text.insert_str(a, &format!("{token} "));
            }
        }
        3 => {
            // A line duplicated in place, once or many times.
            let mut lines: Vec<&str> = text.lines().collect();
            if lines.is_empty() {
                return;
            }
            let i = rng.below(lines.len() as u64) as usize;
            let times = *rng.pick(&[1, 1, 2, 10, 300, 5000]);
            let line = lines[i];
            lines.splice(i..i, std::iter::repeat_n(line, times));
            *text = lines.join("\n") + "\n";
        }
        4 => nest(text, rng),
        5 | 6 => {
            // A number replaced: a small variation, an integer-width edge, or a long one.
            let runs = digit_runs(text);
            let Some(&(a, b)) = runs.get(rng.below(runs.len().max(1) as u64) as usize) else {
                return;
            };
            let n: u64 = text[a..b].parse().unwrap_or(u64::MAX);
            let new = match rng.below(8) {
                0 => "1".repeat(*rng.pick(&[20, 400, 5000])),
                1 => format!("-{}", rng.pick(EDGES)),
                2 => rng
                    .pick(&["1e308", "1e-400", "0x", "0xffffffffffffffffff", "1.5"])
                    .to_string(),
                _ => vary(n, rng),
            };
            text.replace_range(a..b, &new);
        }
        7 => {
            // A long token: a name, a number, a string or a comment.
            let len = *rng.pick(&[300, 16_001, 70_000]);
            let token = match rng.below(4) {
                0 => "w".repeat(len),
                1 => "9".repeat(len),
                2 => format!("\"{}\"", "s".repeat(len)),
                _ => format!("// {}\n", "é".repeat(len / 2)),
            };
            let spans = tokens_of(text);
            let at = spans.get(rng.below(spans.len().max(1) as u64) as usize);
            text.insert_str(at.map_or(0, |s| s.0), &format!("{token} "));
        }
        _ => {
            // A line deleted or two swapped: near-valid programs, so more reach the engines.
            let mut lines: Vec<&str> = text.lines().collect();
            if lines.len() < 2 {
                return;
            }
            let i = rng.below(lines.len() as u64) as usize;
            let j = rng.below(lines.len() as u64) as usize;
            if rng.chance(0.5) {
                lines.remove(i);
            } else {
                lines.swap(i, j);
            }
            *text = lines.join("\n") + "\n";
        }
    }
}

/// Deep nesting: lines wrapped in `repeat` blocks, or a number in parentheses or behind signs,
/// to depths around the front end's limits.
fn nest(text: &mut String, rng: &mut Rng) {
    let depth = *rng.pick(&[2, 8, 63, 64, 65, 256, 257, 3000]);
    match rng.below(3) {
        0 => {
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.is_empty() {
                return;
            }
            let a = rng.below(lines.len() as u64) as usize;
            let b = a + rng.below((lines.len() - a) as u64) as usize;
            let count = rng.pick(&["1", "2", "0"]);
            let open: Vec<String> = (0..depth)
                .map(|k| format!("repeat r{k} in 0..{count} {{"))
                .collect();
            lines.insert(b + 1, "}".repeat(depth));
            lines.insert(a, open.join(" "));
            *text = lines.join("\n") + "\n";
        }
        _ => {
            let runs = digit_runs(text);
            let Some(&(a, b)) = runs.get(rng.below(runs.len().max(1) as u64) as usize) else {
                return;
            };
            let inner = text[a..b].to_string();
            let new = if rng.chance(0.5) {
                format!("{}{inner}{}", "(".repeat(depth), ")".repeat(depth))
            } else {
                format!("{}{inner}", "-".repeat(depth))
            };
            text.replace_range(a..b, &new);
        }
    }
}

/// The mutations by hand: runs found where they are, and mutants that differ from their seed.
#[test]
fn firmware_mutations_by_hand() {
    assert_eq!(digit_runs("s_wr rows, 12"), vec![(11, 13)]);
    assert_eq!(tokens_of(" v_rd  netq\n"), vec![(1, 5), (7, 11)]);
    assert_eq!(tokens_of("é x"), vec![(0, 2), (3, 4)]);
    let text = "s_wr rows, 2\nv_rd netq\nv_wr netq\nend_chain\n";
    let mut changed = 0;
    for seed in 0..200 {
        let mut t = text.to_string();
        mutate(&mut t, &[text], &mut Rng::keyed(seed, "firmware"));
        changed += usize::from(t != text);
    }
    // A splice of a token for itself, or a swap of a line with itself, leaves the text.
    assert!(changed >= 150, "{changed} of 200 mutants differ");
}
