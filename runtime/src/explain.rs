//! Why a dump is not concordant: the one-knob changes of the target's numerics that
//! `nnpc diff --explain` runs the software graph under.
//!
//! A board whose numerics differ from its target file in one setting (it accumulates in f32
//! tile by tile, its quantizer rounds ties away from zero, its output register is bf16) gives
//! outputs that differ from the software graph everywhere, by a little: the same picture as a
//! firmware bug that perturbs every element. Rerunning the software graph with each setting
//! changed in turn tells them apart: if one change makes the dump concordant bit for bit, that
//! change is what the target file gets wrong; if none does, a rounding difference of one
//! setting is ruled out. A board that differs in two settings (another MVM format and
//! another accumulation) usually has one of them bring the dump closer on its own: the
//! changes of a second knob [`on_top_of`] the closest one find the pair. Where neither of
//! its two does (an f32 MVM output and f32 MFU inputs: each alone changes little), only the
//! changes on top of every one-knob change, every pair, find it.
//!
//! The changes touch the target's numerics only: a chain with its own `quant` line, or a
//! declaration with its own `quant FORMAT`, keeps that format.

use nnp_grammar::target::TargetNumerics;
use nnp_grammar::{Accumulation, Target};
use nnp_numerics::{BfpFormat, Block, Format, MxElem, Rounding};
use serde::{Deserialize, Serialize};

/// One change of a target's numerics: the target with it, and how to write it in the
/// `[numerics]` table of a target file (docs/targets.md).
#[derive(Clone, Debug)]
pub struct NumericsChange {
    /// The `[numerics]` keys it sets, each with its TOML value: `("accumulation",
    /// "\"fp32-seq\"")`.
    pub settings: Vec<(&'static str, String)>,
    pub target: Target,
}

impl NumericsChange {
    /// The change as TOML lines of `[numerics]`: `accumulation = "fp32-seq"`.
    pub fn lines(&self) -> String {
        let lines: Vec<String> = self
            .settings
            .iter()
            .map(|(key, value)| format!("{key} = {value}"))
            .collect();
        lines.join("\n")
    }
}

/// How many items (from the first) every change runs on first: a change that is not
/// bit-exact on all of them is not concordant and runs no further; one that is runs on the
/// whole batch. Its counts are then of these items only ([`ExplainRow::items`]).
pub const SCREEN_ITEMS: usize = 8;

/// The software graph under one change, against the dump.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainRow {
    /// The change as TOML lines of `[numerics]` ([`NumericsChange::lines`]).
    pub change: String,
    /// How many knobs it turns: 1 (a one-knob change), or 2 (a change [`on_top_of`] a
    /// one-knob change, the closest or every one, tried when none is concordant).
    pub knobs: usize,
    /// The batch items compared, from the first: the whole batch, or [`SCREEN_ITEMS`] where
    /// they already tell that the change is not concordant.
    pub items: usize,
    /// The output elements of those items, and how many of them are bit-exact.
    pub elements: usize,
    pub bit_exact: usize,
    pub concordant: bool,
    /// Why the software graph could not run under the change (it is then not concordant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ExplainRow {
    /// Its bit-exact elements against the elements compared.
    pub fn share(&self) -> (usize, usize) {
        (self.bit_exact, self.elements)
    }
}

/// Orders two shares `(bit_exact, elements)` exactly (no rounding; none compared is 0).
pub fn cmp_share(a: (usize, usize), b: (usize, usize)) -> std::cmp::Ordering {
    let wide = |(n, of): (usize, usize)| (n as u128, of.max(1) as u128);
    let ((an, aof), (bn, bof)) = (wide(a), wide(b));
    (an * bof).cmp(&(bn * aof))
}

/// The row with the largest share of bit-exact elements among those that ran (the first of
/// equals).
pub fn closest(rows: &[ExplainRow]) -> Option<usize> {
    (0..rows.len())
        .rev()
        .filter(|&i| rows[i].error.is_none())
        .max_by(|&a, &b| cmp_share(rows[a].share(), rows[b].share()))
}

const ROUNDINGS: [Rounding; 3] = [
    Rounding::NearestEven,
    Rounding::NearestAway,
    Rounding::TowardZero,
];

const FLOATS: [Format; 3] = [Format::FP16, Format::BF16, Format::FP32];

/// The catalogue's formats for the MVM's inputs (docs/numerics.md): ms-fp8 and ms-fp9,
/// MSFP12/13/16, OCP MX in blocks of 32 with each element type, and the `mxN` presets. A
/// board built for one of them, diffed against a target of another, is concordant under
/// that one. (Each literal parses: `explain::tests`.)
fn mvm_catalogue() -> Vec<Format> {
    let floats_and_msfp = [
        "fp(5, 2)",
        "fp(5, 3)",
        "msfp(mant = 4)",
        "msfp(mant = 5)",
        "msfp(mant = 8)",
    ];
    let mx = MxElem::ALL.map(|e| format!("mx(elem = {}, block = 32)", e.name()));
    (floats_and_msfp.into_iter())
        .chain(mx.iter().map(String::as_str))
        .chain(["mx9", "mx6", "mx4"])
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// A quantization point of a target's numerics: its `[numerics]` key and where it lives.
#[derive(Clone, Copy)]
struct Point {
    key: &'static str,
    slot: fn(&mut TargetNumerics) -> &mut Format,
}

/// The point whose `[numerics]` key is the name of its field.
macro_rules! point {
    ($field:ident) => {
        Point {
            key: stringify!($field),
            slot: |n| &mut n.$field,
        }
    };
}

const STORAGE: Point = point!(storage);
const MVM_VECTOR: Point = point!(mvm_vector);
const MVM_MATRIX: Point = point!(mvm_matrix);
const MVM_OUTPUT: Point = point!(mvm_output);
const MFU_INPUT: Point = point!(mfu_input);

/// `t` with the points of `set` in their new formats, and the `[numerics]` lines that say so.
fn with_formats(t: &Target, set: &[(Point, Format)]) -> NumericsChange {
    let mut target = t.clone();
    let settings = set
        .iter()
        .map(|(p, f)| {
            *(p.slot)(&mut target.numerics) = *f;
            (p.key, format!("\"{f}\""))
        })
        .collect();
    NumericsChange { settings, target }
}

/// `t` with both MVM inputs in new formats.
fn mvm_inputs(t: &Target, vector: Format, matrix: Format) -> NumericsChange {
    with_formats(t, &[(MVM_VECTOR, vector), (MVM_MATRIX, matrix)])
}

/// Every one-knob change of `t`'s numerics, in this order: the accumulation; the rounding of
/// each MVM input, then of both; the mantissa width of both MVM inputs one bit narrower and
/// wider, and their block (block floating point); both MVM inputs in each other MVM format
/// of the catalogue; the MVM output's and the MFU input's float format; their rounding, then
/// the storage format's.
pub fn one_knob_changes(t: &Target) -> Vec<NumericsChange> {
    let num = &t.numerics;
    let mut out: Vec<NumericsChange> = Accumulation::ALL
        .into_iter()
        .filter(|a| *a != num.accumulation)
        .map(|a| {
            let mut target = t.clone();
            target.numerics.accumulation = a;
            NumericsChange {
                settings: vec![("accumulation", format!("\"{}\"", a.name()))],
                target,
            }
        })
        .collect();
    let (vector, matrix) = (num.mvm_vector, num.mvm_matrix);
    for r in ROUNDINGS {
        let (v, m) = (vector.with_rounding(r), matrix.with_rounding(r));
        if v != vector {
            out.push(with_formats(t, &[(MVM_VECTOR, v)]));
        }
        if m != matrix {
            out.push(with_formats(t, &[(MVM_MATRIX, m)]));
        }
        if v != vector && m != matrix {
            out.push(mvm_inputs(t, v, m));
        }
    }
    if let (Format::Bfp(v), Format::Bfp(m)) = (vector, matrix) {
        // Both inputs edited alike, where the edit applies to both.
        let mut both = |edit: &dyn Fn(BfpFormat) -> Option<BfpFormat>| {
            if let (Some(v), Some(m)) = (edit(v), edit(m)) {
                out.push(mvm_inputs(t, Format::Bfp(v), Format::Bfp(m)));
            }
        };
        for step in [-1i32, 1] {
            both(&|b| {
                let mant = b.mant.checked_add_signed(step)?;
                (2..=32).contains(&mant).then_some(BfpFormat { mant, ..b })
            });
        }
        // The block: each power of two from 16 below the native dimension, or native.
        let sizes = std::iter::successors(Some(16), |b| Some(b * 2)).take_while(|b| *b < t.native);
        for block in sizes.map(Block::Size).chain([Block::Native]) {
            let len = block.len(t.native);
            if (v.block.len(t.native), m.block.len(t.native)) != (len, len) {
                both(&|b| Some(BfpFormat { block, ..b }));
            }
        }
    }
    for f in mvm_catalogue() {
        if (f, f) != (vector, matrix) {
            out.push(mvm_inputs(t, f, f));
        }
    }
    for (p, current) in [(MVM_OUTPUT, num.mvm_output), (MFU_INPUT, num.mfu_input)] {
        for f in FLOATS.into_iter().filter(|f| *f != current) {
            out.push(with_formats(t, &[(p, f)]));
        }
    }
    let rounded = [
        (MVM_OUTPUT, num.mvm_output),
        (MFU_INPUT, num.mfu_input),
        (STORAGE, num.storage),
    ];
    for (p, current) in rounded {
        for r in ROUNDINGS {
            let f = current.with_rounding(r);
            if f != current {
                out.push(with_formats(t, &[(p, f)]));
            }
        }
    }
    out
}

/// The line of [`default_target`]'s change.
pub const DEFAULT_TARGET_LINE: &str = "target = \"bw-default\"";

/// The built-in target `bw-default` whole, as a change of `t` where `t` differs from it (in
/// its numerics, native dimension, MFUs or memories): a board that ran the default target
/// while the diff's `--target` (or the firmware's `target` line) named another. Its line is
/// [`DEFAULT_TARGET_LINE`].
pub fn default_target(t: &Target) -> Option<NumericsChange> {
    let d = Target::bw_default();
    let same =
        (t.native, t.mfus, &t.memory, &t.numerics) == (d.native, d.mfus, &d.memory, &d.numerics);
    (!same).then(|| NumericsChange {
        settings: vec![("target", "\"bw-default\"".to_string())],
        target: d,
    })
}

/// Two knobs of `t` at once: each one-knob change of each of `firsts`' targets (each a
/// change of `t`), written as its first's settings with the second's in place of those of the
/// same key. Left out: those that come back to `t`, those equal to a one-knob change of `t`
/// (tried already), and those equal to one listed before. On top of the closest one-knob
/// change alone, this is `--explain`'s greedy step; on top of every one, every pair.
pub fn on_top_of(t: &Target, firsts: &[NumericsChange]) -> Vec<NumericsChange> {
    let mut seen: Vec<TargetNumerics> = one_knob_changes(t)
        .into_iter()
        .map(|c| c.target.numerics)
        .collect();
    seen.push(t.numerics.clone());
    let mut out = Vec::new();
    for first in firsts {
        for second in one_knob_changes(&first.target) {
            if seen.contains(&second.target.numerics) {
                continue;
            }
            seen.push(second.target.numerics.clone());
            let replaced = |key: &str| second.settings.iter().any(|(k, _)| *k == key);
            let mut settings: Vec<_> = (first.settings.iter())
                .filter(|(key, _)| !replaced(key))
                .cloned()
                .collect();
            settings.extend(second.settings);
            out.push(NumericsChange {
                settings,
                target: second.target,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `c`'s lines, under `[numerics]` in a target file, give exactly its target.
    fn assert_parses_back(c: &NumericsChange) {
        let toml = format!("[numerics]\n{}\n", c.lines());
        let parsed = Target::from_toml(&toml, "bw-default.toml")
            .unwrap_or_else(|e| panic!("{}: {e}", c.lines()));
        assert_eq!(parsed.numerics, c.target.numerics, "{}", c.lines());
    }

    /// The default target is a candidate of every other target, and of none that is the
    /// default target (by its settings, whatever its name).
    #[test]
    fn the_default_target_is_a_candidate_of_any_other() {
        let base = Target::bw_default();
        assert!(default_target(&base).is_none());
        let mut renamed = base.clone();
        renamed.name = "my-board.toml".into();
        assert!(default_target(&renamed).is_none());
        let mut fp32 = base.clone();
        fp32.numerics.storage = Format::FP32;
        let change = default_target(&fp32).expect("a change");
        assert_eq!(change.lines(), DEFAULT_TARGET_LINE);
        assert_eq!(change.target, base);
        let mut n16 = base.clone();
        n16.native = 16;
        assert!(default_target(&n16).is_some());
    }

    /// bw-default's changes, one knob each, written as the TOML a target file takes: each
    /// parses back (under `[numerics]`) to exactly the changed target.
    #[test]
    fn changes_of_bw_default_are_target_file_lines() {
        // 2 + 3 + 6 + 3 literals, every one parsed.
        assert_eq!(mvm_catalogue().len(), 14, "every literal parses");
        let base = Target::bw_default();
        let changes = one_knob_changes(&base);
        let text: Vec<String> = changes.iter().map(NumericsChange::lines).collect();
        // 2 accumulations; 2 roundings x (vector, matrix, both); mantissa 7 and 9; blocks of
        // 16, 32 and 64; the 14 MVM formats of the catalogue; 2 float formats x 2 points; 2
        // roundings x 2 points; 2 storage roundings.
        assert_eq!(changes.len(), 2 + 6 + 2 + 3 + 14 + 4 + 4 + 2, "{text:#?}");
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
        assert_eq!(
            text[10],
            "mvm_vector = \"bfp(mant = 8, block = 16, exp_bits = 5, round = even)\"\n\
             mvm_matrix = \"bfp(mant = 8, block = 16, exp_bits = 5, round = even)\""
        );
        assert_eq!(
            text[13],
            "mvm_vector = \"fp(5, 2)\"\nmvm_matrix = \"fp(5, 2)\""
        );
        assert_eq!(text[27], "mvm_output = \"bf16\"");
        assert_eq!(text[36], "storage = \"fp(5, 10, round = zero)\"");
        // On a target of blocks of 32 (N = 128): 16, 64 and native instead.
        let mut b32 = base.clone();
        for f in [&mut b32.numerics.mvm_vector, &mut b32.numerics.mvm_matrix] {
            if let Format::Bfp(b) = f {
                b.block = Block::Size(32);
            }
        }
        let blocks: Vec<String> = one_knob_changes(&b32)
            .iter()
            .map(NumericsChange::lines)
            .filter(|l| l.starts_with("mvm_vector = \"bfp(mant = 8, block = "))
            .filter(|l| l.contains("round = even"))
            .collect();
        assert_eq!(blocks.len(), 3, "{blocks:#?}");
        for (line, block) in blocks.iter().zip(["16", "64", "native"]) {
            assert!(line.contains(&format!("block = {block},")), "{line}");
        }
        for c in &changes {
            assert_parses_back(c);
            assert_ne!(c.target.numerics, base.numerics, "{}", c.lines());
        }
    }

    /// Two knobs of bw-default: on top of its MX change (both MVM inputs), and on top of
    /// `fp16-seq` accumulation. Counted by hand from the one-knob list: a change that comes
    /// back to bw-default or equals one of its one-knob changes is left out.
    #[test]
    fn two_knobs_are_target_file_lines_not_tried_before() {
        let base = Target::bw_default();
        let singles = one_knob_changes(&base);
        let mx = "mvm_vector = \"mx(elem = fp8e4m3, block = 32)\"\n\
                  mvm_matrix = \"mx(elem = fp8e4m3, block = 32)\"";
        let first = singles
            .iter()
            .find(|c| c.lines() == mx)
            .expect("the MX change");
        let pairs = on_top_of(&base, std::slice::from_ref(first));
        let text: Vec<String> = pairs.iter().map(NumericsChange::lines).collect();
        // 2 accumulations; MX's 2 other roundings x (vector, matrix, both); the catalogue's
        // other 13 formats are one-knob changes of bw-default (left out); 2 float formats x 2
        // points; 2 roundings x 2 points; 2 storage roundings.
        assert_eq!(pairs.len(), 2 + 6 + 4 + 4 + 2, "{text:#?}");
        assert_eq!(text[0], format!("{mx}\naccumulation = \"fp32-seq\""));
        assert_eq!(
            text[2],
            "mvm_matrix = \"mx(elem = fp8e4m3, block = 32)\"\n\
             mvm_vector = \"mx(elem = fp8e4m3, block = 32, round = away)\""
        );
        let acc = singles
            .iter()
            .find(|c| c.lines() == "accumulation = \"fp16-seq\"")
            .expect("fp16-seq");
        let on_acc = on_top_of(&base, std::slice::from_ref(acc));
        // Every one-knob change of the fp16-seq target but the two accumulations (`exact`
        // is bw-default, `fp32-seq` a one-knob change of it).
        assert_eq!(on_acc.len(), singles.len() - 2);
        for c in pairs.iter().chain(&on_acc) {
            assert_parses_back(c);
            assert_ne!(c.target.numerics, base.numerics, "{}", c.lines());
            assert!(
                singles
                    .iter()
                    .all(|s| s.target.numerics != c.target.numerics),
                "{}",
                c.lines()
            );
        }
    }

    /// Every pair of bw-default: each two of its one-knob changes that set different keys,
    /// written into one target file by hand (not through `on_top_of`), give a target that is
    /// bw-default, one of its one-knob changes, or one of the pairs; and the pairs hold no
    /// target twice.
    #[test]
    fn every_pair_holds_each_two_changes_of_different_keys() {
        let base = Target::bw_default();
        let singles = one_knob_changes(&base);
        let pairs = on_top_of(&base, &singles);
        for (k, c) in pairs.iter().enumerate() {
            assert_parses_back(c);
            assert!(
                pairs[..k]
                    .iter()
                    .all(|p| p.target.numerics != c.target.numerics),
                "twice: {}",
                c.lines()
            );
        }
        let keys = |c: &NumericsChange| c.settings.iter().map(|(k, _)| *k).collect::<Vec<_>>();
        let mut merged = 0;
        for (i, a) in singles.iter().enumerate() {
            for b in &singles[i + 1..] {
                if keys(a).iter().any(|k| keys(b).contains(k)) {
                    continue;
                }
                let toml = format!("[numerics]\n{}\n{}\n", a.lines(), b.lines());
                let t = Target::from_toml(&toml, "pair.toml").expect("two changes parse");
                let known = t.numerics == base.numerics
                    || singles.iter().any(|s| s.target.numerics == t.numerics);
                let found = pairs.iter().any(|p| p.target.numerics == t.numerics);
                assert!(known || found, "not among the pairs: {toml}");
                merged += usize::from(found);
            }
        }
        // The 37 changes by the keys they set: accumulation 2, mvm_vector 2, mvm_matrix 2,
        // both MVM inputs 21, mvm_output 4, mfu_input 4, storage 2. Two of them share no key
        // in 666 - 226 (of one group) - 2 * 2 * 21 (one MVM input and both) = 356 pairs; the
        // vector and the matrix rounded alike (2 of them) are the one-knob change of both.
        assert_eq!(merged, 356 - 2, "pairs of different keys found");
        // Pairs that turn two knobs of the same keys, written by hand: the MVM inputs'
        // mantissa width and block; the vector and the matrix rounded differently; MX inputs
        // rounded away; a bf16 MVM output rounded toward zero.
        let bfp = |mant, block| format!("\"bfp(mant = {mant}, block = {block})\"");
        let same_keys = [
            format!("mvm_vector = {}\nmvm_matrix = {}", bfp(7, 32), bfp(7, 32)),
            format!("mvm_vector = {}\nmvm_matrix = {}", bfp(9, 16), bfp(9, 16)),
            "mvm_vector = \"bfp(mant = 8, round = away)\"\n\
             mvm_matrix = \"bfp(mant = 8, round = zero)\""
                .into(),
            "mvm_vector = \"mx(elem = fp8e4m3, block = 32, round = away)\"\n\
             mvm_matrix = \"mx(elem = fp8e4m3, block = 32, round = away)\""
                .into(),
            "mvm_output = \"fp(8, 7, round = zero)\"".into(),
        ];
        // Counted by hand, pairs whose two changes touch the same keys, beyond the 354:
        // - the MVM inputs (vector v, matrix m; B is bw-default's BFP 8 in native blocks):
        //   - on top of v or m rounded alone (4): mantissa 7 and 9, and blocks of 16, 32 and
        //     64, with that rounding kept: 5 each, 20; on top of both rounded alike (2): the
        //     same 5 each, 10 (v and m rounded differently are among the 354);
        //   - on top of mantissa 7 and 9: mantissa 6 and 10, and the 3 blocks, each 4, 8;
        //   - on top of a block: nothing new;
        //   - on top of the catalogue's formats: the 3 roundings' 6 (v, m, both) for each of
        //     the 2 floats, 6 MX and 3 `mxN` presets (66); the MSFP formats (BFP in blocks of
        //     16 with an 8-bit exponent) also their mantissa one narrower and wider, unless
        //     that is another MSFP of the catalogue (4: 3; 5: 6; 8: 7 and 9), and blocks of
        //     32, 64 and native: 6 + 1 + 3, 6 + 1 + 3 and 6 + 2 + 3, 31;
        // - the MVM output and the MFU input: bf16 and fp32 each rounded 2 ways, 4 each.
        assert_eq!(pairs.len(), 354 + (20 + 10 + 8 + 66 + 31) + 4 + 4);
        for lines in same_keys {
            let toml = format!("[numerics]\n{lines}\n");
            let t = Target::from_toml(&toml, "pair.toml").expect("a pair parses");
            assert!(
                pairs.iter().any(|p| p.target.numerics == t.numerics),
                "not among the pairs: {toml}"
            );
        }
    }
}
