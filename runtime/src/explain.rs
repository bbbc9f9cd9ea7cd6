//! Why a dump is not concordant: the one-knob changes of the target's numerics that
//! `nnpc diff --explain` runs the software graph under.
//!
//! A board whose numerics differ from its target file in one setting (it accumulates in f32
//! tile by tile, its quantizer rounds ties away from zero, its output register is bf16) gives
//! outputs that differ from the software graph everywhere, by a little: the same picture as a
//! firmware bug that perturbs every element. Rerunning the software graph with each setting
//! changed in turn tells them apart: if one change makes the dump concordant bit for bit, that
//! change is what the target file gets wrong; if none does, a rounding difference of one
//! setting is ruled out.
//!
//! The changes touch the target's numerics only: a chain with its own `quant` line, or a
//! declaration with its own `quant FORMAT`, keeps that format.

use nnp_grammar::{Accumulation, Target};
use nnp_numerics::{Format, Rounding};
use serde::{Deserialize, Serialize};

/// One change of a target's numerics: the target with it, and how to write it in the
/// `[numerics]` table of a target file (docs/targets.md).
#[derive(Clone, Debug)]
pub struct NumericsChange {
    /// The change as TOML lines of `[numerics]`: `accumulation = "fp32-seq"`.
    pub change: String,
    pub target: Target,
}

/// The software graph under one change, against the dump.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainRow {
    /// The change as TOML lines of `[numerics]` (see [`NumericsChange::change`]).
    pub change: String,
    pub elements: usize,
    pub bit_exact: usize,
    pub concordant: bool,
    /// Why the software graph could not run under the change (it is then not concordant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

const ROUNDINGS: [Rounding; 3] = [
    Rounding::NearestEven,
    Rounding::NearestAway,
    Rounding::TowardZero,
];

const ACCUMULATIONS: [(Accumulation, &str); 3] = [
    (Accumulation::Exact, "exact"),
    (Accumulation::Fp32Seq, "fp32-seq"),
    (Accumulation::Fp16Seq, "fp16-seq"),
];

const FLOATS: [Format; 3] = [Format::FP16, Format::BF16, Format::FP32];

/// Where a quantization point's format lives in a target.
type FormatSlot = fn(&mut Target) -> &mut Format;

/// Every one-knob change of `t`'s numerics, in this order: the accumulation; the rounding of
/// each MVM input, then of both; the mantissa width of both MVM inputs one bit narrower and
/// wider (block floating point); the MVM output's and the MFU input's float format; their
/// rounding; the storage format's rounding.
pub fn one_knob_changes(t: &Target) -> Vec<NumericsChange> {
    let mut out = Vec::new();
    let mut push = |change: String, edit: &dyn Fn(&mut Target)| {
        let mut target = t.clone();
        edit(&mut target);
        out.push(NumericsChange { change, target });
    };
    let num = &t.numerics;
    for (a, name) in ACCUMULATIONS {
        if a != num.accumulation {
            push(format!("accumulation = \"{name}\""), &|t| {
                t.numerics.accumulation = a
            });
        }
    }
    let line = |key: &str, f: &Format| format!("{key} = \"{f}\"");
    let (vector, matrix) = (num.mvm_vector, num.mvm_matrix);
    for r in ROUNDINGS {
        if r != vector.rounding() {
            let f = vector.with_rounding(r);
            push(line("mvm_vector", &f), &|t| t.numerics.mvm_vector = f);
        }
        if r != matrix.rounding() {
            let f = matrix.with_rounding(r);
            push(line("mvm_matrix", &f), &|t| t.numerics.mvm_matrix = f);
        }
        if r != vector.rounding() && r != matrix.rounding() {
            let (v, m) = (vector.with_rounding(r), matrix.with_rounding(r));
            let change = format!("{}\n{}", line("mvm_vector", &v), line("mvm_matrix", &m));
            push(change, &|t| {
                t.numerics.mvm_vector = v;
                t.numerics.mvm_matrix = m;
            });
        }
    }
    if let (Format::Bfp(v), Format::Bfp(m)) = (vector, matrix) {
        for step in [-1i32, 1] {
            let width = |mant: u32| {
                mant.checked_add_signed(step)
                    .filter(|w| (2..=32).contains(w))
            };
            if let (Some(vm), Some(mm)) = (width(v.mant), width(m.mant)) {
                let (mut v, mut m) = (v, m);
                (v.mant, m.mant) = (vm, mm);
                let (v, m) = (Format::Bfp(v), Format::Bfp(m));
                let change = format!("{}\n{}", line("mvm_vector", &v), line("mvm_matrix", &m));
                push(change, &|t| {
                    t.numerics.mvm_vector = v;
                    t.numerics.mvm_matrix = m;
                });
            }
        }
    }
    let points: [(&str, FormatSlot, Format); 2] = [
        ("mvm_output", |t| &mut t.numerics.mvm_output, num.mvm_output),
        ("mfu_input", |t| &mut t.numerics.mfu_input, num.mfu_input),
    ];
    for (key, slot, current) in points {
        for f in FLOATS {
            if f != current {
                push(line(key, &f), &|t| *slot(t) = f);
            }
        }
    }
    for (key, slot, current) in points {
        for r in ROUNDINGS {
            if r != current.rounding() {
                let f = current.with_rounding(r);
                push(line(key, &f), &|t| *slot(t) = f);
            }
        }
    }
    for r in ROUNDINGS {
        if r != num.storage.rounding() {
            let f = num.storage.with_rounding(r);
            push(line("storage", &f), &|t| t.numerics.storage = f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bw-default's changes, one knob each, written as the TOML a target file takes: each
    /// parses back (under `[numerics]`) to exactly the changed target.
    #[test]
    fn changes_of_bw_default_are_target_file_lines() {
        let base = Target::bw_default();
        let changes = one_knob_changes(&base);
        let text: Vec<&str> = changes.iter().map(|c| c.change.as_str()).collect();
        // 2 accumulations; 2 roundings x (vector, matrix, both); mantissa 7 and 9; 2 float
        // formats x 2 points; 2 roundings x 2 points; 2 storage roundings.
        assert_eq!(changes.len(), 2 + 6 + 2 + 4 + 4 + 2, "{text:#?}");
        assert_eq!(text[0], "accumulation = \"fp32-seq\"");
        assert_eq!(text[1], "accumulation = \"fp16-seq\"");
        assert_eq!(
            text[2],
            "mvm_vector = \"bfp(mant = 8, block = native, exp_bits = 5, round = away)\""
        );
        assert_eq!(
            text[8],
            "mvm_vector = \"bfp(mant = 7, block = native, exp_bits = 5, round = even)\"\n\
             mvm_matrix = \"bfp(mant = 7, block = native, exp_bits = 5, round = even)\""
        );
        assert_eq!(text[10], "mvm_output = \"bf16\"");
        assert_eq!(text[19], "storage = \"fp(5, 10, round = zero)\"");
        for c in &changes {
            let toml = format!("[numerics]\n{}\n", c.change);
            let parsed = Target::from_toml(&toml, "bw-default.toml")
                .unwrap_or_else(|e| panic!("{}: {e}", c.change));
            assert_eq!(parsed.numerics, c.target.numerics, "{}", c.change);
            assert_ne!(c.target.numerics, base.numerics, "{}", c.change);
        }
    }
}
