//! The comparison itself, a range of items at a time ([`DiffBuilder`]): each element's bits
//! against the storage format's values, its distance in ULPs, and the firmware line that
//! wrote a mismatch.

use super::report::ULP_BUCKETS;
use super::{DiffError, DiffReport, Mismatch, MismatchMap, OutputDiff};
use crate::host::{Outputs, ShapeDisplay, Tensor, storage_bits, values_name};
use crate::io::Inexact;
use nnp_grammar::{ChainBody, DeclKind, Mem, Program};
use nnp_numerics::{ErrorAcc, FloatFormat};
use std::collections::BTreeMap;

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
    /// The most severe mismatches ([`DiffBuilder::keep_worst`]).
    worst: Worst,
}

/// The `count` most severe mismatches seen ([`Mismatch::severity`], the largest first; of
/// equal severity the one seen first, so the first place). Only a mismatch that enters the
/// list is made, so keeping it costs a comparison per mismatch.
#[derive(Default)]
struct Worst {
    count: usize,
    kept: Vec<Mismatch>,
}

impl Worst {
    /// Whether a mismatch of `severity` enters the list.
    fn takes(&self, severity: u64) -> bool {
        self.kept.len() < self.count || self.kept.last().is_some_and(|m| severity > m.severity())
    }

    fn insert(&mut self, m: Mismatch) {
        let at = self.kept.partition_point(|k| k.severity() >= m.severity());
        self.kept.insert(at, m);
        self.kept.truncate(self.count);
    }
}

/// A mismatch's severity: a NaN against a number above every distance, then the distance.
fn severity(ulps: Option<u64>) -> u64 {
    ulps.map_or(u64::MAX, |u| u.min(u64::MAX - 1))
}

impl Mismatch {
    /// The order of a list of the worst mismatches (larger first): a NaN against a number
    /// first, then the larger distance in ULPs.
    pub fn severity(&self) -> u64 {
        severity(self.ulps)
    }
}

/// One output's comparison so far.
struct OutputAcc {
    diff: OutputDiff,
    stats: ErrorAcc,
    /// Its first mismatches, at most the builder's `first`.
    mismatches: Vec<Mismatch>,
    /// Where its mismatches are, when asked for ([`DiffBuilder::with_maps`]).
    map: Option<MismatchMap>,
}

impl<'p> DiffBuilder<'p> {
    /// A comparison of the outputs of `program` listing the `first` mismatches.
    pub fn new(program: &'p Program, first: usize) -> Result<DiffBuilder<'p>, DiffError> {
        // The format every output value is one of: the target's storage, or one holding
        // each chain's own (`quant storage = ...`).
        let storage = nnp_grammar::Interface::output_storage(program)
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
                    map: None,
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
            worst: Worst::default(),
        })
    }

    /// Keep also the `count` most severe mismatches over every output
    /// ([`finish_lists`](Self::finish_lists)).
    pub fn keep_worst(mut self, count: usize) -> Self {
        self.worst.count = count;
        self
    }

    /// Keep also, per output, where its mismatches are over a batch of `batch` items
    /// ([`MismatchMap`], `DiffReport::maps`): a cell count and worst bucket per bin, bounded
    /// whatever the batch.
    pub fn with_maps(mut self, batch: usize) -> Self {
        let (program, n) = (self.program, self.program.native());
        for (decl, acc) in &mut self.outputs {
            let d = &program.decls[*decl];
            acc.map = Some(MismatchMap::new(&d.name, batch, d.rows(), d.row_len(), n));
        }
        self
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
                let bucket = histogram_bucket(ulps);
                self.ulp_histogram[bucket] += 1;
                if let Some(map) = &mut acc.map {
                    let item = first_item + flat / per_item;
                    map.add(item, flat % per_item, row_len, bucket as u8);
                }
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
                let listed = acc.mismatches.len() < self.first;
                if listed || self.worst.takes(severity(ulps)) {
                    let (item, within) = (first_item + flat / per_item, flat % per_item);
                    let (row, col) = (within / row_len.max(1), within % row_len.max(1));
                    let mut index = vec![item];
                    index.extend(unflatten(within, &decl.shape));
                    let writer = writer_of(program, *decl_idx, row);
                    let m = Mismatch {
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
                    };
                    if self.worst.takes(severity(ulps)) {
                        self.worst.insert(m.clone());
                    }
                    if listed {
                        acc.mismatches.push(m);
                    }
                }
            }
        }
        Ok(())
    }

    /// The report of every piece added.
    pub fn finish(self) -> DiffReport {
        let first = self.first;
        let (mut report, lists, _) = self.finish_lists();
        // In output order, as one comparison of the whole tensors lists them.
        for list in lists {
            let room = first.saturating_sub(report.mismatches.len());
            report.mismatches.extend(list.into_iter().take(room));
        }
        report
    }

    /// The report of every piece added without its list of mismatches; each output's first
    /// mismatches (at most `first` each, in declaration order, not cut across outputs); the
    /// most severe mismatches ([`keep_worst`](Self::keep_worst)).
    pub fn finish_lists(self) -> (DiffReport, Vec<Vec<Mismatch>>, Vec<Mismatch>) {
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
            maps: Vec::new(),
        };
        let mut lists = Vec::new();
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
            report.maps.extend(acc.map);
            lists.push(acc.mismatches);
        }
        report.concordant = report.outputs_bit_exact();
        (report, lists, self.worst.kept)
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
    use nnp_numerics::Rounding;

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
