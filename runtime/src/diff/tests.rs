//! Tests of the comparison: whole reports by hand, storage values, non-finite statistics,
//! traces.

use super::report::ULP_BUCKETS;
use super::*;
use crate::host::{Tensor, Unfilled};
use std::collections::BTreeMap;

/// A tensor whose values do not fill its shape (its fields are public) is an error naming
/// it, on either side, not a comparison of the common prefix.
#[test]
fn values_that_do_not_fill_their_shape_are_an_error() {
    let text = "input x : [1, 4]\noutput y : [1, 4]\n\nv_rd netq\nv_wr netq\nend_chain\n";
    let src = std::sync::Arc::new(nnp_grammar::SourceFile::new("t.nnp", text));
    let program = nnp_grammar::check(src, None).expect("checks").program;
    let full = Tensor::new(vec![2, 1, 4], vec![0.5; 8]).expect("fills its shape");
    let short = Tensor {
        shape: vec![2, 1, 4],
        data: vec![0.5; 4],
    };
    let outputs = |t: &Tensor| Outputs::from([("y".to_string(), t.clone())]);
    let same = diff_outputs(&program, &outputs(&full), &outputs(&full), 1).expect("diffs");
    assert!(same.concordant && same.elements == 8);
    for (hw, sw) in [(&short, &full), (&full, &short)] {
        let e = diff_outputs(&program, &outputs(hw), &outputs(sw), 1);
        assert!(
            matches!(
                &e,
                Err(DiffError::Elements(Unfilled { name, expected: 8, found: 4, .. })) if name == "y"
            ),
            "{e:?}"
        );
    }
}

/// Special values by hand (fp16 storage, one output of 4 lanes, 3 items): two NaNs of
/// different payloads are equal (canonical NaN); -0 and +0 differ (1 ULP, their sign);
/// 65504 and infinity are 1 ULP apart (an infinity against a finite value), as are 1 and
/// 1 + 2^-10; NaN against a number has no distance, and no error: the statistics are
/// undefined; -1 and 1 are 2 x 0x3C00 apart. The report made of two pieces (items 0..1 and
/// 1..3) is the report of one comparison.
#[test]
fn special_values_by_hand_and_pieces_give_the_whole_report() {
    let text = "input x : [1, 4]\noutput y : [1, 4]\n\nv_rd netq\nv_wr netq\nend_chain\n";
    let src = std::sync::Arc::new(nnp_grammar::SourceFile::new("t.nnp", text));
    let program = nnp_grammar::check(src, None).expect("checks").program;
    let nan2 = f32::from_bits(0x7FC0_0001);
    let hw = [
        [f32::NAN, 1.0, -0.0, 65504.0],
        [1.0, 2.0, f32::NAN, 0.5],
        [-1.0, 0.25, 0.0, 100.0],
    ];
    let sw = [
        [nan2, 1.0, 0.0, f32::INFINITY],
        [1.0 + 2f32.powi(-10), 2.0, 3.0, 0.5],
        [1.0, 0.25, 0.0, 100.0],
    ];
    let outputs = |rows: &[[f32; 4]]| {
        let data = rows.iter().flatten().copied().collect();
        let t = Tensor::new(vec![rows.len(), 1, 4], data).expect("fills its shape");
        Outputs::from([("y".to_string(), t)])
    };
    let whole = diff_outputs(&program, &outputs(&hw), &outputs(&sw), 3).expect("diffs");
    assert_eq!((whole.elements, whole.bit_exact), (12, 7));
    assert!(!whole.concordant);
    let mut histogram = vec![0; ULP_BUCKETS + 2];
    (histogram[0], histogram[1], histogram[16], histogram[18]) = (7, 3, 1, 1);
    assert_eq!(whole.ulp_histogram, histogram);
    assert_eq!(whole.max_ulps, 2 * 0x3C00);
    let y = &whole.outputs[0];
    assert_eq!(
        (y.nan_mismatches, y.inf_mismatches, y.not_storage_values),
        (1, 1, 0)
    );
    assert!(y.max_abs_err.is_nan() && y.max_rel_err.is_nan() && y.qsnr_db.is_nan());
    let listed: Vec<_> = whole
        .mismatches
        .iter()
        .map(|m| (m.index.clone(), m.hardware_bits, m.software_bits, m.ulps))
        .collect();
    let want = vec![
        (vec![0, 0, 2], 0x8000, 0x0000, Some(1)),
        (vec![0, 0, 3], 0x7BFF, 0x7C00, Some(1)),
        (vec![1, 0, 0], 0x3C00, 0x3C01, Some(1)),
    ];
    assert_eq!(listed, want);
    assert!(whole.mismatches.iter().all(|m| m.line == Some(5)));
    let mut pieces = DiffBuilder::new(&program, 3).expect("fp16 storage");
    pieces
        .add(0, &outputs(&hw[..1]), &outputs(&sw[..1]))
        .expect("diffs");
    pieces
        .add(1, &outputs(&hw[1..]), &outputs(&sw[1..]))
        .expect("diffs");
    // As JSON: NaN statistics are "nan" on both sides (NaN is not equal to itself).
    let json = |r: &DiffReport| serde_json::to_string(r).expect("serialises");
    assert_eq!(json(&pieces.finish()), json(&whole));
}

/// The one-output program `y = x` (fp16 storage on bw-default, or `storage`), its output
/// `[items, 1, 4]`.
fn pass_through(storage: Option<&str>) -> Program {
    let text = "input x : [1, 4]\noutput y : [1, 4]\n\nv_rd netq\nv_wr netq\nend_chain\n";
    let src = std::sync::Arc::new(nnp_grammar::SourceFile::new("t.nnp", text));
    let target = storage.map(|f| {
        let toml = format!("name = \"t\"\n[numerics]\nstorage = \"{f}\"\n");
        nnp_grammar::Target::from_toml(&toml, "t.toml").expect("a target")
    });
    nnp_grammar::check(src, target).expect("checks").program
}

fn one_output(rows: &[[f32; 4]]) -> Outputs {
    let data = rows.iter().flatten().copied().collect();
    let t = Tensor::new(vec![rows.len(), 1, 4], data).expect("fills its shape");
    Outputs::from([("y".to_string(), t)])
}

/// A hardware value that is not a value of the storage format is a mismatch, never
/// rounded into one (fp16 storage, by hand): 1 + 3 x 2^-12 lies between fp16's 1 (0x3C00)
/// and 1 + 2^-10 (0x3C01) and rounds to the latter, the software's value; 65536 is past
/// fp16's largest value 65504 and rounds to infinity (0x7C00), 1 ULP from 65504; an f64
/// value 1 + 2^-30 (read as f32 1.0, the software's value) rounds to 0x3C00. Each is 1 ULP
/// away, flagged, counted, with its error: 2^-12, 32 (not infinite: 65536 is finite) and
/// 2^-30; the largest relative error 32 / 65536 = 2^-11.
#[test]
fn values_that_are_not_storage_values_are_mismatches() {
    let program = pass_through(None);
    let hw = [[1.0 + 3.0 * 2f32.powi(-12), 0.5, 65536.0, 1.0]];
    let sw = [[1.0 + 2f32.powi(-10), 0.5, 65504.0, 1.0]];
    let wide = 1.0 + 2f64.powi(-30);
    let inexact = BTreeMap::from([("y".to_string(), vec![(3, wide)])]);
    let mut diff = DiffBuilder::new(&program, 10).expect("fp16 storage");
    diff.add_read(0, &one_output(&hw), &inexact, &one_output(&sw))
        .expect("diffs");
    let r = diff.finish();
    assert_eq!(r.storage, "fp16");
    assert_eq!((r.elements, r.bit_exact, r.concordant), (4, 1, false));
    let y = &r.outputs[0];
    assert_eq!((y.not_storage_values, y.max_ulps), (3, 1));
    assert_eq!((y.nan_mismatches, y.inf_mismatches), (0, 0));
    assert_eq!((y.max_abs_err, y.max_rel_err), (32.0, 2f64.powi(-11)));
    let listed: Vec<_> = r
        .mismatches
        .iter()
        .map(|m| {
            let bits = (m.hardware_bits, m.software_bits, m.ulps);
            (m.index[2], m.not_storage_value, bits, m.hardware_f64)
        })
        .collect();
    let want = vec![
        (0, true, (0x3C01, 0x3C01, Some(1)), None),
        (2, true, (0x7C00, 0x7BFF, Some(1)), None),
        (3, true, (0x3C00, 0x3C00, Some(1)), Some(wide)),
    ];
    assert_eq!(listed, want);
    assert_eq!(r.ulp_histogram[..2], [1, 3]);

    // Under bf16 storage, fp16's 1 + 2^-10 is not a value (bf16 has 7 fraction bits): it
    // rounds to 1 (0x3F80), the software's value, 1 ULP away.
    let bf16 = pass_through(Some("bf16"));
    let hw = [[1.0 + 2f32.powi(-10), 0.5, 2.0, 1.0]];
    let sw = [[1.0, 0.5, 2.0, 1.0]];
    let r = diff_outputs(&bf16, &one_output(&hw), &one_output(&sw), 10).expect("diffs");
    assert_eq!((r.storage.as_str(), r.bit_exact), ("bf16", 3));
    let m = &r.mismatches[0];
    assert!(m.not_storage_value);
    assert_eq!(
        (m.hardware_bits, m.software_bits, m.ulps),
        (0x3F80, 0x3F80, Some(1))
    );

    // The same values as the software's, and NaN against NaN: bit-exact.
    let same = [[1.0 + 2f32.powi(-10), f32::NAN, -0.0, f32::INFINITY]];
    let nan2 = f32::from_bits(0x7F80_0001);
    let other = [[1.0 + 2f32.powi(-10), nan2, -0.0, f32::INFINITY]];
    let r = diff_outputs(&program, &one_output(&same), &one_output(&other), 10);
    assert!(r.expect("diffs").concordant);
}

/// The statistics never claim perfection when elements differ (fp16 storage, by hand):
/// an infinity against a finite value, or against the other infinity, is an infinite
/// error (QSNR -inf); a NaN against a number makes every statistic undefined; equal
/// values give QSNR +inf. In JSON each is a string, never `null`, and reads back.
#[test]
fn statistics_of_non_finite_mismatches() {
    let program = pass_through(None);
    let sw = [[1.0, 2.0, 3.0, f32::NEG_INFINITY]];
    let stats = |hw: [f32; 4]| {
        let r = diff_outputs(&program, &one_output(&[hw]), &one_output(&sw), 10);
        let r = r.expect("diffs");
        let y = r.outputs[0].clone();
        (r, y)
    };
    // +inf against 1: 1 infinity; the finite 2 + 2^-9 against 2 alone would be 2^-9.
    let (r, y) = stats([f32::INFINITY, 2.0 + 2f32.powi(-9), 3.0, f32::NEG_INFINITY]);
    assert_eq!((y.inf_mismatches, y.nan_mismatches, r.bit_exact), (1, 0, 2));
    assert_eq!(
        (y.max_abs_err, y.max_rel_err),
        (f64::INFINITY, f64::INFINITY)
    );
    assert_eq!(y.qsnr_db, f64::NEG_INFINITY);
    let json = serde_json::to_value(&r).expect("serialises");
    assert_eq!(json["outputs"][0]["max_abs_err"], "inf");
    assert_eq!(json["outputs"][0]["qsnr_db"], "-inf");
    assert_eq!(json["mismatches"][0]["hardware"], "inf");
    assert_eq!(json["mismatches"][0]["software"], 1.0);
    let back: DiffReport = serde_json::from_value(json).expect("reads back");
    assert_eq!(back, r);
    // +inf against -inf: infinite too.
    let (_, y) = stats([1.0, 2.0, 3.0, f32::INFINITY]);
    assert_eq!((y.inf_mismatches, y.max_abs_err), (1, f64::INFINITY));
    // NaN against 3 (and an infinity elsewhere): undefined.
    let (r, y) = stats([f32::INFINITY, 2.0, f32::NAN, f32::NEG_INFINITY]);
    assert_eq!((y.inf_mismatches, y.nan_mismatches), (1, 1));
    assert!(y.max_abs_err.is_nan() && y.max_rel_err.is_nan() && y.qsnr_db.is_nan());
    let json = serde_json::to_value(&r).expect("serialises");
    assert_eq!(json["outputs"][0]["max_abs_err"], "nan");
    assert_eq!(json["outputs"][0]["qsnr_db"], "nan");
    // Equal: -inf against -inf counts as equal; QSNR +inf, no error.
    let (r, y) = stats(sw[0]);
    assert!(r.concordant);
    assert_eq!((y.max_abs_err, y.qsnr_db), (0.0, f64::INFINITY));
    assert_eq!(
        serde_json::to_value(&r).expect("json")["outputs"][0]["qsnr_db"],
        "inf"
    );
    // Finite only: 2 + 2^-9 against 2 (fp16's next value after 2, 1 ULP): error 2^-9,
    // relative to the hardware's value 2^-9 / (2 + 2^-9).
    let (_, y) = stats([1.0, 2.0 + 2f32.powi(-9), 3.0, f32::NEG_INFINITY]);
    assert_eq!((y.max_ulps, y.max_abs_err), (1, 2f64.powi(-9)));
    assert_eq!(y.max_rel_err, 2f64.powi(-9) / (2.0 + 2f64.powi(-9)));
}

/// A trace that diverges makes the report not concordant, whatever the outputs; one
/// that does not leaves it as the outputs say.
#[test]
fn a_divergent_trace_is_not_concordant() {
    use crate::trace::{TraceComparison, TraceDivergence};
    let program = pass_through(None);
    let y = [[1.0, 2.0, 3.0, 4.0]];
    let equal = diff_outputs(&program, &one_output(&y), &one_output(&y), 1).expect("diffs");
    assert!(equal.concordant);
    let identical = TraceComparison {
        records: 3,
        identical: 3,
        first: None,
    };
    let divergence = TraceDivergence {
        item: 0,
        position: 1,
        chain: 0,
        iteration: 0,
        dst: "netq".into(),
        addr: 0,
        line: 5,
        lanes_differing: 1,
        first_lane: 2,
        hardware_bits: 0x4200,
        software_bits: 0x4201,
    };
    let diverges = TraceComparison {
        records: 3,
        identical: 2,
        first: Some(divergence),
    };
    let mut r = equal.clone();
    r.set_trace(identical.clone());
    assert!(r.concordant && r.outputs_bit_exact());
    let mut r = equal.clone();
    r.set_trace(diverges);
    assert!(!r.concordant && r.outputs_bit_exact());
    let off = [[1.0, 2.0, 3.0, 4.0 + 2f32.powi(-8)]];
    let mut r = diff_outputs(&program, &one_output(&off), &one_output(&y), 1).expect("diffs");
    r.set_trace(identical);
    assert!(!r.concordant);
}

/// Values by hand: positional between 1e-5 and 1e16, else scientific, each the shortest
/// decimal that reads back to the value in its own type.
#[test]
fn values_print_short() {
    assert_eq!(number(0.040863037f32, 0.040863037), "0.040863037");
    assert_eq!(number(65520.0f32, 65520.0), "65520");
    assert_eq!(number(1e300f64, 1e300), "1e300");
    assert_eq!(number(-1e-9f64, -1e-9), "-1e-9");
    let tiny = 2f32.powi(-24); // the smallest fp16 subnormal
    assert_eq!(number(tiny, f64::from(tiny)), "5.9604645e-8");
    assert_eq!(number(f32::INFINITY, f64::INFINITY), "inf");
    assert_eq!(number(-0.0f32, -0.0), "-0");
}

#[test]
fn bucket_labels_follow_the_histogram_layout() {
    // 19 buckets: 0, 1, 2, 3-4, 5-8, ..., 2^14+1..2^15, >2^15, NaN.
    assert_eq!(bucket_label(3, 19), "3-4");
    assert_eq!(bucket_label(4, 19), "5-8");
    assert_eq!(bucket_label(16, 19), "16385-32768");
    assert_eq!(bucket_label(17, 19), ">32768");
    assert_eq!(bucket_label(18, 19), "NaN vs number");
}
