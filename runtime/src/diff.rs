//! Hardware vs software: compare two sets of outputs bit for bit and say where they differ.
//!
//! Concordance is bit equality of the values (any two NaNs are equal, whatever their payloads),
//! and a hardware value must be a value of the storage format: one that is not (an f32 dump's
//! value between two fp16 values, an fp16 value that bf16 does not hold, an f64 value that f32
//! does not hold) is a mismatch, never rounded into one. For elements that differ the report
//! gives the distance in units in the last place of the storage format, and for the first few
//! the output name, logical index, native tile and lane, and the firmware line of the `v_wr`
//! that produced the element.

use crate::host::{Outputs, ShapeDisplay, Tensor, Unfilled, storage_bits};
use crate::io::Inexact;
use nnp_grammar::{ChainBody, DeclKind, Mem, Program};
use nnp_numerics::{ErrorAcc, FloatFormat, Format, Rounding};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

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
         {batch}); help: dump the output with shape [batch, ...declared shape] (`--layout \
         logical`, the default) or in native tiles [batch, ...rows, tiles, N] (`--layout tiles`), \
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
    #[error(
        "`{path}` is a single .npy file, which holds one tensor, but the program has {count} \
         outputs ({outputs}); help: dump them into a .safetensors file, or into a directory of \
         .npy files named after the outputs (`NAME.npy`)"
    )]
    OneNpyForOutputs {
        path: PathBuf,
        count: usize,
        outputs: String,
    },
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
    /// The hardware's value as f32 (an f64 dump's value rounded to nearest: see
    /// `hardware_f64`); a non-finite value is a string in JSON ([`nonfinite`]).
    #[serde(with = "nonfinite")]
    pub hardware: f32,
    #[serde(with = "nonfinite")]
    pub software: f32,
    /// The storage pattern of the hardware's value; where the value is not a storage value,
    /// the pattern it rounds to (by the storage format's rounding).
    pub hardware_bits: u32,
    pub software_bits: u32,
    /// Distance in storage-format ULPs (`None` when exactly one side is NaN); at least 1.
    pub ulps: Option<u64>,
    /// The hardware's value is not a value of the storage format (so it cannot be the
    /// firmware's result, whatever the software's value).
    #[serde(default)]
    pub not_storage_value: bool,
    /// The dump's value where f32 does not hold it (an f64 dump).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_f64: Option<f64>,
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
    /// Elements where neither side is NaN, one is infinite and they differ: an infinity
    /// against a finite value or against the other infinity.
    #[serde(default)]
    pub inf_mismatches: usize,
    /// Hardware values that are not values of the storage format (each one a mismatch).
    #[serde(default)]
    pub not_storage_values: usize,
    /// Largest `|hardware - software|`: infinite where an infinity differs
    /// (`inf_mismatches`), NaN (undefined) where a NaN is against a number (`nan_mismatches`).
    #[serde(with = "nonfinite")]
    pub max_abs_err: f64,
    /// Largest `|hardware - software| / |hardware|` (hardware not zero), likewise.
    #[serde(with = "nonfinite")]
    pub max_rel_err: f64,
    /// QSNR of software against hardware in dB: `+inf` when every value is equal (`+0` and
    /// `-0` are), `-inf` when an infinity differs (infinite noise), NaN (undefined) when a NaN
    /// is against a number.
    #[serde(with = "nonfinite")]
    pub qsnr_db: f64,
}

/// The whole comparison. Serialised as the `--json` output of `nnpc diff` (schema in
/// `docs/diff.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffReport {
    pub schema: String,
    /// The storage format the hardware's values must be values of (`fp16` on `bw-default`).
    #[serde(default)]
    pub storage: String,
    pub elements: usize,
    pub bit_exact: usize,
    /// Every element bit-exact and, with a trace ([`DiffReport::set_trace`]), every record
    /// identical.
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

impl DiffReport {
    /// Whether every output element is bit-exact (the trace aside).
    pub fn outputs_bit_exact(&self) -> bool {
        self.bit_exact == self.elements
    }

    /// Add the comparison of the traces: the report is concordant when every output element
    /// is bit-exact and every record is identical.
    pub fn set_trace(&mut self, trace: crate::trace::TraceComparison) {
        let identical = trace.first.is_none() && trace.identical == trace.records;
        self.concordant = self.outputs_bit_exact() && identical;
        self.trace = Some(trace);
    }
}

/// Serde of a float that may be infinite or NaN, which JSON has no number for: a finite value
/// is a number, the others are the strings `"inf"`, `"-inf"` and `"nan"` (which Python's
/// `float()` reads).
pub mod nonfinite {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// f32 or f64.
    pub trait Float: Copy + Serialize + serde::de::DeserializeOwned {
        fn to_f64(self) -> f64;
        fn from_f64(x: f64) -> Self;
    }
    impl Float for f32 {
        fn to_f64(self) -> f64 {
            f64::from(self)
        }
        fn from_f64(x: f64) -> Self {
            x as f32
        }
    }
    impl Float for f64 {
        fn to_f64(self) -> f64 {
            self
        }
        fn from_f64(x: f64) -> Self {
            x
        }
    }

    pub fn serialize<F: Float, S: Serializer>(v: &F, s: S) -> Result<S::Ok, S::Error> {
        let x = v.to_f64();
        if x.is_finite() {
            v.serialize(s)
        } else if x.is_nan() {
            s.serialize_str("nan")
        } else if x > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr<F> {
        Number(F),
        Text(String),
    }

    pub fn deserialize<'de, F: Float, D: Deserializer<'de>>(d: D) -> Result<F, D::Error> {
        match Repr::<F>::deserialize(d)? {
            Repr::Number(v) => Ok(v),
            Repr::Text(t) => match t.as_str() {
                "inf" => Ok(F::from_f64(f64::INFINITY)),
                "-inf" => Ok(F::from_f64(f64::NEG_INFINITY)),
                "nan" => Ok(F::from_f64(f64::NAN)),
                other => Err(serde::de::Error::custom(format!(
                    "expected a number, \"inf\", \"-inf\" or \"nan\", not \"{other}\""
                ))),
            },
        }
    }
}

/// The name of a float format's set of values: its rounding left out (`fp16`, `bf16`,
/// `fp(5, 2)`).
pub fn values_name(format: &FloatFormat) -> String {
    let values = FloatFormat {
        rounding: Rounding::NearestEven,
        ..*format
    };
    Format::Float(values).to_string()
}

/// Whether `x` (not NaN) is a value of `storage`, whose pattern for `x` is `bits`
/// ([`storage_bits`]): whether that pattern's value is `x` itself, the sign of a zero included.
fn is_value_of(storage: &FloatFormat, x: f32, bits: u32) -> bool {
    let x = f64::from(x);
    let back = if storage.bits() <= 32 {
        storage.decode(u64::from(bits))
    } else {
        storage.decode(storage.encode(x))
    };
    back.to_bits() == x.to_bits()
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
        // The format every output value is one of: the target's storage, or one holding
        // each chain's own (`quant storage = ...`).
        let storage = crate::host::output_storage(program)
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
                    inf_mismatches: 0,
                    not_storage_values: 0,
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
        self.add_read(first_item, hardware, &BTreeMap::new(), software)
    }

    /// [`add`](Self::add) for hardware values read from a dump, with each output's values
    /// that the dump holds but f32 does not (`inexact`, indexed within the output's piece in
    /// `hardware`, in increasing order: an f64 dump's, [`Inexact`]). None of those is a value
    /// of the storage format, so each is a mismatch, whatever its f32 rounding.
    pub fn add_read(
        &mut self,
        first_item: usize,
        hardware: &Outputs,
        inexact: &BTreeMap<String, Inexact>,
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
            let wides = inexact.get(&decl.name).map_or(&[][..], Vec::as_slice);
            for (flat, (&h, &s)) in hw.data.iter().zip(&sw.data).enumerate() {
                // The dump's value where f32 does not hold it.
                let wide = match wides.binary_search_by_key(&flat, |&(i, _)| i) {
                    Ok(k) => Some(wides[k].1),
                    Err(_) => None,
                };
                // Equal: the same value, bit for bit (so the same storage pattern), or two
                // NaNs. Most of a dump's elements are equal: only the others are encoded and
                // measured.
                if wide.is_none() && (h.to_bits() == s.to_bits() || (h.is_nan() && s.is_nan())) {
                    self.ulp_histogram[exact_bucket] += 1;
                    acc.stats.add_equal(f64::from(h));
                    out.bit_exact += 1;
                    continue;
                }
                let (hv, sv) = (wide.unwrap_or(f64::from(h)), f64::from(s));
                let hb = match wide {
                    Some(v) => storage.encode(v) as u32,
                    None => storage_bits(&storage, h),
                };
                let sb = storage_bits(&storage, s);
                // A value that is not a storage value is not rounded into one: it differs.
                let in_storage = wide.is_none() && (h.is_nan() || is_value_of(&storage, h, hb));
                // Two that differ are at least one ULP apart: -0 and +0 (0 apart on the number
                // line) differ in their sign, a value that is not a storage value from the one
                // it rounds to.
                let ulps = if h.is_nan() || s.is_nan() {
                    None
                } else {
                    Some(ordinal(hb, width).abs_diff(ordinal(sb, width)).max(1))
                };
                self.ulp_histogram[histogram_bucket(ulps)] += 1;
                match ulps {
                    None => out.nan_mismatches += 1,
                    Some(d) => out.max_ulps = out.max_ulps.max(d),
                }
                if ulps.is_some() {
                    if hv.is_infinite() || sv.is_infinite() {
                        out.inf_mismatches += 1;
                    } else {
                        acc.stats.add(hv, sv);
                    }
                }
                if !in_storage {
                    out.not_storage_values += 1;
                }
                if acc.mismatches.len() < self.first {
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
                        not_storage_value: !in_storage,
                        hardware_f64: wide,
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
            storage: values_name(&self.storage),
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
            // The statistics of the pairs of finite values, unless a NaN is against a number
            // (its error is not a number: every statistic is undefined, NaN) or an infinity
            // differs (an infinite error and noise).
            let stats = acc.stats.stats();
            let (undefined, infinite) = (out.nan_mismatches > 0, out.inf_mismatches > 0);
            let worst = |finite: f64, infinite_is: f64| match (undefined, infinite) {
                (true, _) => f64::NAN,
                (false, true) => infinite_is,
                (false, false) => finite,
            };
            out.max_abs_err = worst(stats.max_abs_err, f64::INFINITY);
            out.max_rel_err = worst(stats.max_rel_err, f64::INFINITY);
            out.qsnr_db = worst(stats.qsnr_db, f64::NEG_INFINITY);
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
        report.concordant = report.outputs_bit_exact();
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

    /// Which values a storage format holds, by hand: fp16's 1, -0, its smallest subnormal
    /// 2^-24, its largest 65504 and infinity, not 1 + 2^-11, 2^-25 or 65520; bf16's 1 + 2^-7
    /// and smallest subnormal 2^-133, not 1 + 2^-8; a format without subnormals not 2^-24, and
    /// one that saturates not infinity.
    #[test]
    fn storage_values_by_hand() {
        let holds = |f: &FloatFormat, x: f32| is_value_of(f, x, storage_bits(f, x));
        let fp16 = FloatFormat::FP16;
        for x in [1.0, -0.0, 2f32.powi(-24), 65504.0, f32::INFINITY] {
            assert!(holds(&fp16, x), "fp16 holds {x:e}");
        }
        for x in [1.0 + 2f32.powi(-11), 2f32.powi(-25), 65520.0] {
            assert!(!holds(&fp16, x), "fp16 does not hold {x:e}");
        }
        let bf16 = FloatFormat::BF16;
        assert!(holds(&bf16, 1.0 + 2f32.powi(-7)) && holds(&bf16, 2f32.powi(-133)));
        assert!(!holds(&bf16, 1.0 + 2f32.powi(-8)));
        let flushing = FloatFormat {
            subnormals: false,
            ..fp16
        };
        assert!(!holds(&flushing, 2f32.powi(-24)) && holds(&flushing, 2f32.powi(-14)));
        let saturating = FloatFormat {
            overflow: nnp_numerics::Overflow::Saturate,
            ..fp16
        };
        assert!(!holds(&saturating, f32::INFINITY) && holds(&saturating, 65504.0));
        assert_eq!(values_name(&bf16), "bf16");
        let truncating = FloatFormat {
            rounding: Rounding::TowardZero,
            ..bf16
        };
        assert_eq!(values_name(&truncating), "bf16");
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
