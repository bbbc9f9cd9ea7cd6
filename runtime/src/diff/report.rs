//! The report of a comparison ([`DiffReport`]): per output, the counts, the ULP histogram and
//! the first mismatches; and why two output sets cannot be compared ([`DiffError`]).

use super::{MismatchMap, nonfinite};
use crate::host::Unfilled;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Why two output sets cannot be compared.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum DiffError {
    #[error("the hardware dump has no tensor `{0}` (an `output` of the program)")]
    #[diagnostic(help("dump every output declared in the firmware, under its declared name"))]
    MissingOutput(String),
    #[error(
        "hardware tensor `{name}` has shape {found} but output `{name}` is {expected} (batch of \
         {batch})"
    )]
    #[diagnostic(help(
        "dump the output with shape [batch, ...declared shape] (`--layout logical`, the default) \
         or in native tiles [batch, ...rows, tiles, N] (`--layout tiles`), or pass --batch to \
         match the dump"
    ))]
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
         outputs ({outputs})"
    )]
    #[diagnostic(help(
        "dump them into a .safetensors file, or into a directory of .npy files named after the \
         outputs (`NAME.npy`)"
    ))]
    OneNpyForOutputs {
        path: PathBuf,
        count: usize,
        outputs: String,
    },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Elements(#[from] Unfilled),
}

/// Upper bounds of the ULP histogram buckets: 0, 1, 2, 4, 8, ... 2^15, then larger, then NaN.
pub(super) const ULP_BUCKETS: usize = 17;

/// The label of bucket `k` of a ULP histogram of `buckets` buckets
/// ([`DiffReport::ulp_histogram`]): `0`, `1`, `2`, `3-4`, ..., `>32768`, `NaN vs number`.
pub fn bucket_label(k: usize, buckets: usize) -> String {
    match k {
        0 => "0".into(),
        1 => "1".into(),
        2 => "2".into(),
        k if k + 2 == buckets => format!(">{}", 1u64 << (k - 2)),
        k if k + 1 == buckets => "NaN vs number".into(),
        k => format!("{}-{}", (1u64 << (k - 2)) + 1, 1u64 << (k - 1)),
    }
}

/// A value as its shortest decimal that reads back to it: positional where that is short,
/// else in scientific notation (`1e300`, not 301 digits; `5.9604645e-8`, not `0.0000000596...`).
pub fn number<T: std::fmt::Display + std::fmt::LowerExp>(v: T, magnitude: f64) -> String {
    let m = magnitude.abs();
    if m.is_finite() && m != 0.0 && !(1e-5..1e16).contains(&m) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

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
    /// Per output, where its mismatches are, when asked for (`nnpc diff --report`,
    /// [`DiffBuilder::with_maps`](super::DiffBuilder::with_maps)); empty otherwise, and then left out of the JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maps: Vec<MismatchMap>,
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
