//! Concordance campaigns in parts: the comparison of one block of a dataset's input sets as a
//! [`Partial`] that crosses processes as JSON, and [`merge`], which folds the parts of a whole
//! dataset, in any order and any grouping, into one.
//!
//! A part is what [`DiffBuilder`] reports for its block (counts, ULP histogram, maxima), with
//! three things more, so that parts merge into the report of one comparison of the whole
//! dataset: each output's first mismatches (not cut across outputs), numbered by the items'
//! ids in the dataset; the sums behind the QSNR; and the block's largest mismatches. A part
//! holds at most `first` mismatches per output and `worst` in all, whatever the block's size:
//! what a campaign merges grows with the number of blocks, never with their items.
//!
//! [`finish`] turns the merged part into the report of `nnpc diff` on the same data: the same
//! counts, histogram, maxima and first mismatches; its QSNR is the sums' ratio, equal to
//! `nnpc diff`'s up to the order in which the blocks' f64 sums were added (identical where
//! the elements are all equal: `+inf`).

use crate::diff::{DiffBuilder, DiffError, DiffReport, Mismatch};
use crate::host::Outputs;
use crate::io::Inexact;
use nnp_grammar::Program;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// The schema name of a [`Partial`] in JSON.
pub const PARTIAL_SCHEMA: &str = "nnpc.campaign-part/1";

/// The comparison of some of a dataset's input sets, to be merged with the others'.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Partial {
    pub schema: String,
    /// Input sets compared.
    pub items: usize,
    /// Mismatches listed per output (`report.mismatches` holds each output's first `first`,
    /// in output order then item order), and in `worst`.
    pub first: usize,
    pub worst_count: usize,
    /// The counts, histogram and maxima of the part ([`DiffBuilder::finish`]).
    pub report: DiffReport,
    /// Per output, in declaration order: the sums whose ratio is the QSNR.
    pub sums: Vec<Sums>,
    /// The part's largest mismatches ([`by_severity`] order), at most `worst_count`.
    pub worst: Vec<Mismatch>,
}

/// The sums of one output over the pairs of finite values: `sig = sum(hw^2)` and
/// `err = sum((sw - hw)^2)` (QSNR = `-10 log10(err / sig)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sums {
    pub sig: f64,
    pub err: f64,
}

/// Why parts cannot be made or merged.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum CampaignError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Diff(#[from] DiffError),
    #[error("{ids} item ids for a block of {items} input sets")]
    #[diagnostic(help("give one id per input set"))]
    Ids { ids: usize, items: usize },
    #[error("the parts compare different outputs or storage formats ({a} and {b})")]
    #[diagnostic(help("merge only parts of one program on one target"))]
    Mismatched { a: String, b: String },
    #[error("no parts to merge")]
    Empty,
    #[error("not a campaign part (schema `{0}`, expected `{PARTIAL_SCHEMA}`)")]
    Schema(String),
}

/// The comparison of a block of input sets whose ids are `ids` (in increasing order: the
/// block's rows sorted by id, so that its first mismatches are its lowest ids): `hardware`
/// against `software`, `[items, ...declared shape]` each, with the hardware's values that
/// f32 does not hold in `inexact` (as for [`DiffBuilder::add_read`]).
pub fn compare_block(
    program: &Program,
    hardware: &Outputs,
    inexact: &BTreeMap<String, Inexact>,
    software: &Outputs,
    ids: &[u64],
    (first, worst): (usize, usize),
) -> Result<Partial, CampaignError> {
    let items = software
        .values()
        .next()
        .and_then(|t| t.shape.first())
        .copied()
        .unwrap_or(0);
    if ids.len() != items {
        return Err(CampaignError::Ids {
            ids: ids.len(),
            items,
        });
    }
    // Each output's first mismatches and the block's worst, kept as the block is compared.
    let mut diff = DiffBuilder::new(program, first)?.keep_worst(worst);
    diff.add_read(0, hardware, inexact, software)?;
    let (mut report, firsts, mut worst_list) = diff.finish_lists();
    let mut firsts: Vec<Mismatch> = firsts.into_iter().flatten().collect();
    for m in firsts.iter_mut().chain(&mut worst_list) {
        if let Some(item) = m.index.first_mut() {
            *item = ids.get(*item).map_or(*item, |&id| id as usize);
        }
    }
    report.mismatches = firsts;
    let sums = report
        .outputs
        .iter()
        .map(|o| {
            let none = Inexact::new();
            let wide = inexact.get(&o.name).unwrap_or(&none);
            match (hardware.get(&o.name), software.get(&o.name)) {
                (Some(h), Some(s)) => sums(&h.data, wide, &s.data),
                _ => Sums::default(),
            }
        })
        .collect();
    Ok(Partial {
        schema: PARTIAL_SCHEMA.into(),
        items,
        first,
        worst_count: worst,
        report,
        sums,
        worst: worst_list,
    })
}

/// The QSNR sums of one output's pairs, in element order (the order of [`DiffBuilder`]'s):
/// pairs where either value is not finite (or a NaN) add nothing.
fn sums(hardware: &[f32], inexact: &Inexact, software: &[f32]) -> Sums {
    let mut s = Sums::default();
    for (flat, (&h, &sw)) in hardware.iter().zip(software).enumerate() {
        let hv = match inexact.binary_search_by_key(&flat, |&(i, _)| i) {
            Ok(k) => inexact[k].1,
            Err(_) => f64::from(h),
        };
        let sv = f64::from(sw);
        if hv.is_finite() && sv.is_finite() {
            let d = sv - hv;
            s.sig += hv * hv;
            s.err += d * d;
        }
    }
    s
}

/// Each output's position in the report (declaration order), by name.
fn output_order(report: &DiffReport) -> BTreeMap<String, usize> {
    let names = report.outputs.iter().enumerate();
    names.map(|(i, o)| (o.name.clone(), i)).collect()
}

/// Where a mismatch is: its output's position, then its index (item id first).
fn place<'a>(order: &BTreeMap<String, usize>, m: &'a Mismatch) -> (usize, &'a [usize]) {
    (
        order.get(&m.output).copied().unwrap_or(usize::MAX),
        &m.index,
    )
}

/// The order of the worst list: a NaN against a number first, then the larger distance in
/// ULPs, then the first place.
pub fn by_severity(order: &BTreeMap<String, usize>, a: &Mismatch, b: &Mismatch) -> Ordering {
    b.severity()
        .cmp(&a.severity())
        .then_with(|| place(order, a).cmp(&place(order, b)))
}

/// The first `first` mismatches of each output, in output order then index order.
fn first_per_output(
    order: &BTreeMap<String, usize>,
    mut all: Vec<Mismatch>,
    first: usize,
) -> Vec<Mismatch> {
    all.sort_by(|a, b| place(order, a).cmp(&place(order, b)));
    let mut kept = Vec::new();
    let mut count = BTreeMap::<usize, usize>::new();
    for m in all {
        let n = count.entry(place(order, &m).0).or_default();
        if *n < first {
            *n += 1;
            kept.push(m);
        }
    }
    kept
}

/// The part of every part's items: counts and histograms added, maxima taken, sums added,
/// mismatches merged by output and item id. Any order and grouping of the same parts gives
/// the same merged part, but for the rounding of the QSNR sums.
pub fn merge(parts: impl IntoIterator<Item = Partial>) -> Result<Partial, CampaignError> {
    let mut parts = parts.into_iter();
    let mut acc = parts.next().ok_or(CampaignError::Empty)?;
    check_schema(&acc)?;
    for part in parts {
        check_schema(&part)?;
        add(&mut acc, part)?;
    }
    Ok(acc)
}

fn check_schema(p: &Partial) -> Result<(), CampaignError> {
    match p.schema == PARTIAL_SCHEMA {
        true => Ok(()),
        false => Err(CampaignError::Schema(p.schema.clone())),
    }
}

/// What a part compares: its storage format and outputs.
fn signature(p: &Partial) -> String {
    let names: Vec<&str> = p.report.outputs.iter().map(|o| o.name.as_str()).collect();
    format!("{} [{}]", p.report.storage, names.join(", "))
}

fn add(acc: &mut Partial, part: Partial) -> Result<(), CampaignError> {
    if signature(acc) != signature(&part) || acc.sums.len() != part.sums.len() {
        return Err(CampaignError::Mismatched {
            a: signature(acc),
            b: signature(&part),
        });
    }
    acc.items += part.items;
    acc.first = acc.first.max(part.first);
    acc.worst_count = acc.worst_count.max(part.worst_count);
    let (r, p) = (&mut acc.report, part.report);
    r.elements += p.elements;
    r.bit_exact += p.bit_exact;
    r.max_ulps = r.max_ulps.max(p.max_ulps);
    for (h, k) in r.ulp_histogram.iter_mut().zip(&p.ulp_histogram) {
        *h += k;
    }
    for (o, q) in r.outputs.iter_mut().zip(&p.outputs) {
        match (o.shape.first_mut(), q.shape.first()) {
            (Some(total), Some(items)) => *total += items,
            _ => o.shape = q.shape.clone(),
        }
        o.elements += q.elements;
        o.bit_exact += q.bit_exact;
        o.max_ulps = o.max_ulps.max(q.max_ulps);
        o.nan_mismatches += q.nan_mismatches;
        o.inf_mismatches += q.inf_mismatches;
        o.not_storage_values += q.not_storage_values;
        // NaN (undefined) and infinite maxima are set again from the counts in `finish`.
        o.max_abs_err = max_finite(o.max_abs_err, q.max_abs_err);
        o.max_rel_err = max_finite(o.max_rel_err, q.max_rel_err);
    }
    for (s, t) in acc.sums.iter_mut().zip(&part.sums) {
        s.sig += t.sig;
        s.err += t.err;
    }
    let order = output_order(r);
    let mut all = std::mem::take(&mut r.mismatches);
    all.extend(p.mismatches);
    r.mismatches = first_per_output(&order, all, acc.first);
    acc.worst.extend(part.worst);
    acc.worst.sort_by(|a, b| by_severity(&order, a, b));
    acc.worst.truncate(acc.worst_count);
    r.concordant = r.bit_exact == r.elements;
    Ok(())
}

/// The larger of two maxima of finite errors (a part's NaN or infinity, set by its counts,
/// is set again from the merged counts).
fn max_finite(a: f64, b: f64) -> f64 {
    match (a.is_finite(), b.is_finite()) {
        (true, true) => a.max(b),
        (true, false) => a,
        (false, true) => b,
        (false, false) => 0.0,
    }
}

/// The report of the merged part: `nnpc diff`'s report of the same data (its `first`
/// mismatches in output order), and the worst mismatches.
pub fn finish(part: &Partial) -> (DiffReport, Vec<Mismatch>) {
    let mut r = part.report.clone();
    for (o, s) in r.outputs.iter_mut().zip(&part.sums) {
        let (undefined, infinite) = (o.nan_mismatches > 0, o.inf_mismatches > 0);
        let qsnr = match s.err == 0.0 {
            true => f64::INFINITY,
            false => -10.0 * (s.err / s.sig).log10(),
        };
        (o.max_abs_err, o.max_rel_err, o.qsnr_db) = match (undefined, infinite) {
            (true, _) => (f64::NAN, f64::NAN, f64::NAN),
            (false, true) => (f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY),
            (false, false) => (o.max_abs_err, o.max_rel_err, qsnr),
        };
    }
    r.mismatches.truncate(part.first);
    r.concordant = r.bit_exact == r.elements;
    (r, part.worst.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::diff_outputs;
    use crate::host::Tensor;

    /// Two outputs `y = x` and `z = x` of 4 lanes (fp16 storage): the program of the tests.
    fn two_outputs() -> Program {
        let text = "input x : [1, 4]\noutput y : [1, 4]\noutput z : [1, 4] at dram[0]\n\n\
                    v_rd netq\nv_wr netq\nv_wr dram[0]\nend_chain\n";
        let src = std::sync::Arc::new(nnp_grammar::SourceFile::new("t.nnp", text));
        nnp_grammar::check(src, None).expect("checks").program
    }

    fn outputs(rows: &[[f32; 4]]) -> Outputs {
        let data: Vec<f32> = rows.iter().flatten().copied().collect();
        let t = Tensor::new(vec![rows.len(), 1, 4], data).expect("fills its shape");
        Outputs::from([("y".to_string(), t.clone()), ("z".to_string(), t)])
    }

    /// Six items in three blocks, merged in a scrambled order, by hand: the hardware differs
    /// from the software at item 1 lane 0 (1 ULP: fp16 1 against 1 + 2^-10), item 4 lane 3
    /// (2 + 2^-9 against 2: 1 ULP) and item 5 lane 1 (1.5 against 1: 0x3E00 - 0x3C00 = 512
    /// ULPs), in both outputs. The merged report is `diff_outputs` of the whole batch, count
    /// for count and mismatch for mismatch (its first 4: y's three, then z's first), and the
    /// worst are the 512-ULP pair, y's first.
    #[test]
    fn blocks_merged_in_any_order_give_the_whole_report() {
        let program = two_outputs();
        let base = [0.5f32, 1.0, 2.0, 0.25];
        let sw: Vec<[f32; 4]> = (0..6).map(|_| base).collect();
        let mut hw = sw.clone();
        hw[1][1] = 1.0 + 2f32.powi(-10);
        hw[4][2] = 2.0 + 2f32.powi(-9);
        hw[5][1] = 1.5;
        let whole = diff_outputs(&program, &outputs(&hw), &outputs(&sw), 4).expect("diffs");
        let block = |items: std::ops::Range<usize>| {
            let ids: Vec<u64> = items.clone().map(|i| i as u64).collect();
            let (h, s) = (outputs(&hw[items.clone()]), outputs(&sw[items]));
            compare_block(&program, &h, &BTreeMap::new(), &s, &ids, (4, 2)).expect("compares")
        };
        let parts = vec![block(4..6), block(0..2), block(2..4)];
        let merged = merge(parts).expect("merges");
        assert_eq!(merged.items, 6);
        let (report, worst) = finish(&merged);
        assert_eq!((report.elements, report.bit_exact), (48, 42));
        assert_eq!(report.ulp_histogram[1], 4);
        assert_eq!(report.max_ulps, 512);
        // As JSON, so that the NaN-free statistics compare as numbers.
        let json = |r: &DiffReport| serde_json::to_value(r).expect("serialises");
        assert_eq!(json(&report), json(&whole));
        let places: Vec<_> = worst
            .iter()
            .map(|m| (m.output.as_str(), m.index[0]))
            .collect();
        assert_eq!(places, vec![("y", 5), ("z", 5)]);
        // Through JSON and back, as parts cross processes.
        let text = serde_json::to_string(&merged).expect("serialises");
        let back: Partial = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, merged);
    }

    /// Item ids that are not the block's positions number the mismatches; a NaN against a
    /// number is the worst; the statistics are undefined after the merge too.
    #[test]
    fn ids_number_the_mismatches_and_nan_is_the_worst() {
        let program = two_outputs();
        let sw = [[0.5f32, 1.0, 2.0, 0.25], [0.5, 1.0, 2.0, 0.25]];
        let mut hw = sw;
        hw[1][0] = f32::NAN;
        hw[0][3] = 0.5;
        let (h, s) = (outputs(&hw), outputs(&sw));
        let part = compare_block(&program, &h, &BTreeMap::new(), &s, &[70, 90], (10, 1));
        let part = part.expect("compares");
        let ok = compare_block(&program, &s, &BTreeMap::new(), &s, &[3, 4], (10, 1));
        let (report, worst) = finish(&merge([ok.expect("compares"), part]).expect("merges"));
        assert_eq!(worst.len(), 1);
        assert_eq!((worst[0].index[0], worst[0].ulps), (90, None));
        let items: Vec<usize> = report.mismatches.iter().map(|m| m.index[0]).collect();
        assert_eq!(items, vec![70, 90, 70, 90]);
        assert!(report.outputs[0].qsnr_db.is_nan() && !report.concordant);
        let e = compare_block(&program, &h, &BTreeMap::new(), &s, &[1], (1, 1));
        assert!(matches!(e, Err(CampaignError::Ids { ids: 1, items: 2 })));
    }

    /// The worst list kept as the block is compared, by hand: distances 1 (item 0), 512
    /// (item 1: 1.5 against 1), 512 (item 2), a NaN (item 3) in y and z; the 3 worst are the
    /// NaNs (y's first: the first place of equal severity), then y's item 1; each output's
    /// first mismatch is listed (`first` = 1 per output, not cut across outputs).
    #[test]
    fn the_worst_and_each_outputs_first_are_kept_as_the_block_is_compared() {
        let program = two_outputs();
        let sw = [[1.0f32; 4]; 4];
        let mut hw = sw;
        hw[0][0] = 1.0 + 2f32.powi(-10);
        hw[1][1] = 1.5;
        hw[2][2] = 1.5;
        hw[3][3] = f32::NAN;
        let (h, s) = (outputs(&hw), outputs(&sw));
        let ids = [10, 11, 12, 13];
        let part = compare_block(&program, &h, &BTreeMap::new(), &s, &ids, (1, 3));
        let part = part.expect("compares");
        let places = |ms: &[Mismatch]| -> Vec<(String, usize, Option<u64>)> {
            let m = ms.iter();
            m.map(|m| (m.output.clone(), m.index[0], m.ulps)).collect()
        };
        let at = |o: &str, i: usize, u: Option<u64>| (o.to_string(), i, u);
        assert_eq!(
            places(&part.worst),
            vec![at("y", 13, None), at("z", 13, None), at("y", 11, Some(512))]
        );
        assert_eq!(
            places(&part.report.mismatches),
            vec![at("y", 10, Some(1)), at("z", 10, Some(1))]
        );
    }
}
