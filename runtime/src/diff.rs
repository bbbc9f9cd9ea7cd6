//! Hardware vs software: compare two sets of outputs bit for bit and say where they differ.
//!
//! Concordance is bit equality of the storage-format encodings (NaN canonicalised, so any two NaNs
//! are equal). For elements that differ the report gives the distance in units in the last place
//! of the storage format, and for the first few the output name, logical index, native tile and
//! lane, and the firmware line of the `v_wr` that produced the element.

use crate::host::{Outputs, ShapeDisplay, Tensor, Unfilled, storage_bits};
use nnp_grammar::{ChainBody, DeclKind, Mem, Program};
use nnp_numerics::{ErrorAcc, FloatFormat};
use serde::{Deserialize, Serialize};

/// Why two output sets cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error(
        "the hardware dump has no tensor `{0}` (an `output` of the program); help: dump every \
         output declared in the firmware, under its declared name"
    )]
    MissingOutput(String),
    #[error(
        "hardware tensor `{name}` has shape {found} but output `{name}` is {expected} (batch of \
         {batch}); help: dump the output in logical layout with shape [batch, ...declared shape], \
         or pass --batch to match the dump"
    )]
    Shape {
        name: String,
        expected: String,
        found: String,
        batch: usize,
    },
    #[error("the program's storage format `{0}` is not a float format")]
    Storage(String),
    #[error(transparent)]
    Elements(#[from] Unfilled),
}

/// Upper bounds of the ULP histogram buckets: 0, 1, 2, 4, 8, ... 2^15, then larger, then NaN.
const ULP_BUCKETS: usize = 17;

/// One element that differs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    pub output: String,
    /// Logical index `[item, ...]` into the output (batch item first).
    pub index: Vec<usize>,
    /// Native tile of the element within its output row, and its lane in that tile.
    pub tile: usize,
    pub lane: usize,
    pub hardware: f32,
    pub software: f32,
    pub hardware_bits: u32,
    pub software_bits: u32,
    /// Distance in storage-format ULPs (`None` when exactly one side is NaN).
    pub ulps: Option<u64>,
    /// The `v_wr` that produced the element: source line and its text.
    pub line: Option<usize>,
    pub source: Option<String>,
}

/// Comparison of one output tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputDiff {
    pub name: String,
    pub shape: Vec<usize>,
    pub elements: usize,
    pub bit_exact: usize,
    pub max_ulps: u64,
    /// Elements where one side is NaN and the other is not.
    pub nan_mismatches: usize,
    pub max_abs_err: f64,
    pub max_rel_err: f64,
    /// QSNR of software against hardware in dB (infinite when equal).
    pub qsnr_db: f64,
}

/// The whole comparison. Serialised as the `--json` output of `nnpc diff` (schema in
/// `docs/diff.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffReport {
    pub schema: String,
    pub elements: usize,
    pub bit_exact: usize,
    pub concordant: bool,
    pub max_ulps: u64,
    /// `ulp_histogram[0]` counts equal elements, `[k]` (1 <= k <= 16) elements at distance in
    /// `(2^(k-2), 2^(k-1)]`, i.e. 1, 2, 3-4, 5-8, ...; `[17]` larger, `[18]` NaN vs number.
    pub ulp_histogram: Vec<u64>,
    pub outputs: Vec<OutputDiff>,
    /// The first mismatches in output order, at most the requested count.
    pub mismatches: Vec<Mismatch>,
    /// The per-`v_wr` trace comparison, when a hardware trace was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::TraceComparison>,
    /// The software graph under each one-knob change of the target's numerics, when asked
    /// for a dump that is not concordant ([`crate::explain`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Vec<crate::explain::ExplainRow>>,
}

/// Position of a bit pattern on the number line of a sign-magnitude format (monotone).
fn ordinal(bits: u32, width: u32) -> i64 {
    let sign = 1u32 << (width - 1);
    let mag = i64::from(bits & (sign - 1));
    if bits & sign != 0 { -mag } else { mag }
}

fn histogram_bucket(ulps: Option<u64>) -> usize {
    match ulps {
        None => ULP_BUCKETS + 1,
        Some(0) => 0,
        Some(d) => {
            // d in (2^(k-2), 2^(k-1)] -> k; d = 1 -> 1, 2 -> 2, 3..4 -> 3.
            let k = 64 - (d - 1).leading_zeros() as usize + 1;
            k.min(ULP_BUCKETS)
        }
    }
}

/// Compare `software` against `hardware` for every output of `program`: one piece of a
/// [`DiffBuilder`].
pub fn diff_outputs(
    program: &Program,
    hardware: &Outputs,
    software: &Outputs,
    first: usize,
) -> Result<DiffReport, DiffError> {
    let mut diff = DiffBuilder::new(program, first)?;
    diff.add(0, hardware, software)?;
    Ok(diff.finish())
}

/// A comparison made a range of items at a time, so that the outputs of a run in chunks are
/// compared with the same items of the dump as each chunk is done, never held whole. Pieces
/// added in item order give the report of one comparison of the whole tensors (every count,
/// maximum and sum runs in the same order).
pub struct DiffBuilder<'p> {
    program: &'p Program,
    storage: FloatFormat,
    /// How many mismatches to list.
    first: usize,
    ulp_histogram: Vec<u64>,
    /// Every output, in declaration order: its declaration's index and what is counted so far.
    outputs: Vec<(usize, OutputAcc)>,
}

/// One output's comparison so far.
struct OutputAcc {
    diff: OutputDiff,
    stats: ErrorAcc,
    /// Its first mismatches, at most the builder's `first`.
    mismatches: Vec<Mismatch>,
}

impl<'p> DiffBuilder<'p> {
    /// A comparison of the outputs of `program` listing the `first` mismatches.
    pub fn new(program: &'p Program, first: usize) -> Result<DiffBuilder<'p>, DiffError> {
        let storage = *program
            .target
            .numerics
            .storage
            .as_float()
            .ok_or_else(|| DiffError::Storage(program.target.numerics.storage.to_string()))?;
        let outputs = program.decls.iter().enumerate();
        let outputs = outputs
            .filter(|(_, d)| d.kind == DeclKind::Output)
            .map(|(i, d)| {
                let diff = OutputDiff {
                    name: d.name.clone(),
                    shape: Vec::new(),
                    elements: 0,
                    bit_exact: 0,
                    max_ulps: 0,
                    nan_mismatches: 0,
                    max_abs_err: 0.0,
                    max_rel_err: 0.0,
                    qsnr_db: f64::INFINITY,
                };
                let acc = OutputAcc {
                    diff,
                    stats: ErrorAcc::default(),
                    mismatches: Vec::new(),
                };
                (i, acc)
            })
            .collect();
        Ok(DiffBuilder {
            program,
            storage,
            first,
            ulp_histogram: vec![0; ULP_BUCKETS + 2],
            outputs,
        })
    }

    /// Compare the items from `first_item` on that `hardware` and `software` hold (the same
    /// items of every output; `[items, ...declared shape]`, or a hardware tensor without the
    /// batch dimension where the software holds one item).
    pub fn add(
        &mut self,
        first_item: usize,
        hardware: &Outputs,
        software: &Outputs,
    ) -> Result<(), DiffError> {
        let (program, storage) = (self.program, self.storage);
        let width = storage.bits().min(32);
        let n = program.native();
        let exact_bucket = histogram_bucket(Some(0));
        for (decl_idx, acc) in &mut self.outputs {
            let decl = &program.decls[*decl_idx];
            let sw = software
                .get(&decl.name)
                .ok_or_else(|| DiffError::MissingOutput(decl.name.clone()))?;
            let hw = hardware
                .get(&decl.name)
                .ok_or_else(|| DiffError::MissingOutput(decl.name.clone()))?;
            let hw = batched_like(&decl.name, hw, sw)?;
            // Both compared element for element, none left over (a tensor's fields are public).
            hw.check_filled(&decl.name)?;
            sw.check_filled(&decl.name)?;
            let out = &mut acc.diff;
            // The whole tensor's shape: the first piece's, with every later piece's items.
            match (out.shape.first_mut(), sw.shape.first()) {
                (Some(total), Some(items)) => *total += items,
                _ => out.shape = sw.shape.clone(),
            }
            out.elements += sw.len();
            let (row_len, rows) = (decl.row_len(), decl.rows());
            let per_item = (rows * row_len).max(1);
            for (flat, (&h, &s)) in hw.data.iter().zip(&sw.data).enumerate() {
                // Equal values have equal encodings and no error: only the others are encoded
                // and measured (most of a dump's elements are equal).
                if h.to_bits() == s.to_bits() {
                    self.ulp_histogram[exact_bucket] += 1;
                    acc.stats.add_equal(f64::from(h));
                    out.bit_exact += 1;
                    continue;
                }
                let (hb, sb) = (storage_bits(&storage, h), storage_bits(&storage, s));
                // Concordance is equality of the encodings. Two that differ are at least one
                // ULP apart: -0 and +0 (0 apart on the number line) differ in their sign.
                let ulps = if hb == sb {
                    Some(0)
                } else if h.is_nan() || s.is_nan() {
                    None
                } else {
                    Some(ordinal(hb, width).abs_diff(ordinal(sb, width)).max(1))
                };
                self.ulp_histogram[histogram_bucket(ulps)] += 1;
                acc.stats.add(f64::from(h), f64::from(s));
                match ulps {
                    Some(0) => out.bit_exact += 1,
                    Some(d) => out.max_ulps = out.max_ulps.max(d),
                    None => out.nan_mismatches += 1,
                }
                if ulps != Some(0) && acc.mismatches.len() < self.first {
                    let (item, within) = (first_item + flat / per_item, flat % per_item);
                    let (row, col) = (within / row_len.max(1), within % row_len.max(1));
                    let mut index = vec![item];
                    index.extend(unflatten(within, &decl.shape));
                    let writer = writer_of(program, *decl_idx, row);
                    acc.mismatches.push(Mismatch {
                        output: decl.name.clone(),
                        index,
                        tile: col / n,
                        lane: col % n,
                        hardware: h,
                        software: s,
                        hardware_bits: hb,
                        software_bits: sb,
                        ulps,
                        line: writer.map(|(l, _)| l),
                        source: writer.map(|(_, t)| t.to_string()),
                    });
                }
            }
        }
        Ok(())
    }

    /// The report of every piece added.
    pub fn finish(self) -> DiffReport {
        let mut report = DiffReport {
            schema: "nnpc.diff/1".into(),
            elements: 0,
            bit_exact: 0,
            concordant: true,
            max_ulps: 0,
            ulp_histogram: self.ulp_histogram,
            outputs: Vec::new(),
            mismatches: Vec::new(),
            trace: None,
            explain: None,
        };
        for (_, acc) in self.outputs {
            let mut out = acc.diff;
            let stats = acc.stats.stats();
            out.max_abs_err = stats.max_abs_err;
            out.max_rel_err = stats.max_rel_err;
            out.qsnr_db = stats.qsnr_db;
            report.elements += out.elements;
            report.bit_exact += out.bit_exact;
            report.max_ulps = report.max_ulps.max(out.max_ulps);
            report.outputs.push(out);
            // In output order, as one comparison of the whole tensors lists them.
            let room = self.first - report.mismatches.len();
            report
                .mismatches
                .extend(acc.mismatches.into_iter().take(room));
        }
        report.concordant = report.bit_exact == report.elements;
        report
    }
}

/// The hardware tensor with the software tensor's shape: a dump of one input set may omit the
/// batch dimension.
fn batched_like<'a>(
    name: &str,
    hw: &'a Tensor,
    sw: &Tensor,
) -> Result<std::borrow::Cow<'a, Tensor>, DiffError> {
    if hw.shape == sw.shape {
        return Ok(std::borrow::Cow::Borrowed(hw));
    }
    if sw.shape.first() == Some(&1) && hw.shape[..] == sw.shape[1..] {
        let mut t = hw.clone();
        t.shape = sw.shape.clone();
        return Ok(std::borrow::Cow::Owned(t));
    }
    Err(DiffError::Shape {
        name: name.to_string(),
        expected: ShapeDisplay(&sw.shape).to_string(),
        found: ShapeDisplay(&hw.shape).to_string(),
        batch: sw.shape.first().copied().unwrap_or(1),
    })
}

fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (slot, &dim) in idx.iter_mut().zip(shape).rev() {
        *slot = flat % dim.max(1);
        flat /= dim.max(1);
    }
    idx
}

/// The source line (number and text) of the `v_wr` that produced row `row` of output `decl`:
/// netq outputs through the push schedule, memory outputs through the last write of the row's
/// first register.
fn writer_of(program: &Program, decl: usize, row: usize) -> Option<(usize, &str)> {
    let d = program.decls.get(decl)?;
    let span = match d.place {
        None => {
            let slot = program
                .pushes
                .iter()
                .find(|p| p.decl == decl && p.row == row)?;
            let ChainBody::Vector(v) = &program.chains.get(slot.chain)?.body else {
                return None;
            };
            v.writes.iter().find(|w| w.dst == Mem::Netq)?.span
        }
        Some(place) => {
            let reg = place.addr + (row * d.row_tiles(program.native())) as u32;
            last_write(program, place.mem, reg)?
        }
    };
    Some((program.line(span), program.source.line_text(span.start)))
}

/// The span of the last `v_wr` (or `m_wr`) in program order that writes register `reg` of `mem`.
fn last_write(program: &Program, mem: Mem, reg: u32) -> Option<nnp_grammar::Span> {
    program
        .chains
        .iter()
        .rev()
        .find_map(|chain| match &chain.body {
            ChainBody::Vector(v) => v.writes.iter().find_map(|w| {
                let hit = w.dst == mem
                    && (0..chain.iterations)
                        .any(|t| (w.addr.at(t)..w.addr.at(t) + v.width).contains(&reg));
                hit.then_some(w.span)
            }),
            ChainBody::Matrix(m) => {
                let hit = m.dst == mem
                    && (0..chain.iterations)
                        .any(|t| (m.dst_addr.at(t)..m.dst_addr.at(t) + m.tiles).contains(&reg));
                hit.then_some(m.dst_span)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    /// 65504 and infinity are 1 ULP apart, as are 1 and 1 + 2^-10; NaN against a number has no
    /// distance; -1 and 1 are 2 x 0x3C00 apart. The report made of two pieces (items 0..1 and
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
        assert_eq!((y.nan_mismatches, y.max_abs_err), (1, 2.0));
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
        assert_eq!(pieces.finish(), whole);
    }

    #[test]
    fn ordinal_distance_counts_representable_steps() {
        // fp16: 1.0 = 0x3C00 and its successor 0x3C01 are 1 ULP apart; +0 (0x0000) and the
        // smallest negative subnormal (0x8001) are 1 apart; -0 and +0 are 0 apart.
        assert_eq!(ordinal(0x3C01, 16) - ordinal(0x3C00, 16), 1);
        assert_eq!(ordinal(0x0000, 16) - ordinal(0x8001, 16), 1);
        assert_eq!(ordinal(0x8000, 16), ordinal(0x0000, 16));
        // 1.0 vs -1.0: 2 * 0x3C00 steps.
        assert_eq!(
            ordinal(0x3C00, 16).abs_diff(ordinal(0xBC00, 16)),
            2 * 0x3C00
        );
    }

    #[test]
    fn histogram_buckets_are_powers_of_two() {
        assert_eq!(histogram_bucket(Some(0)), 0);
        assert_eq!(histogram_bucket(Some(1)), 1);
        assert_eq!(histogram_bucket(Some(2)), 2);
        assert_eq!(histogram_bucket(Some(3)), 3);
        assert_eq!(histogram_bucket(Some(4)), 3);
        assert_eq!(histogram_bucket(Some(5)), 4);
        assert_eq!(histogram_bucket(Some(1 << 40)), ULP_BUCKETS);
        assert_eq!(histogram_bucket(None), ULP_BUCKETS + 1);
    }

    #[test]
    fn unflatten_is_row_major() {
        assert_eq!(unflatten(7, &[3, 4]), vec![1, 3]);
        assert_eq!(unflatten(0, &[5]), vec![0]);
    }
}
