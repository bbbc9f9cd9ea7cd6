//! `nonfinite = "error"` in the software graph: every checked value ([`SwGraph::checks`]) is
//! scanned for NaN and infinity as a run computes it, each item's earliest failing check kept,
//! so a chunk fails with the emulator's error (docs/semantics.md, "Emulator and host data")
//! without holding any value longer than the run itself does.

use super::ExecError;
use candle_core::Tensor;
use nnp_lowering::swgraph::{FiniteCheck, SwGraph, Ty, ValueId};
use std::collections::BTreeMap;

/// A NaN or infinity a check found: the check, the lane, the value.
#[derive(Clone, Copy, Debug)]
struct Bad {
    check: usize,
    lane: usize,
    value: f64,
}

/// What the checks found in a part of a run: a weight's earliest failing check, and each item's
/// (by its number in the run's data).
#[derive(Clone, Debug, Default)]
pub(super) struct Found {
    weight: Option<Bad>,
    items: BTreeMap<usize, Bad>,
}

/// Keep the earlier (in execution order) of `slot` and `bad`.
fn keep_earliest(slot: &mut Option<Bad>, bad: Bad) {
    if slot.is_none_or(|b| bad.check < b.check) {
        *slot = Some(bad);
    }
}

/// Keep item `item`'s earlier of what it had and `bad`.
fn keep_item(items: &mut BTreeMap<usize, Bad>, item: usize, bad: Bad) {
    let slot = items.entry(item).or_insert(bad);
    if bad.check < slot.check {
        *slot = bad;
    }
}

/// Scan value `id` against its checks `checks` (indices into the graph's, [`Plan::checks`]),
/// computed as `t` (`[items, ...]`, or one item for a constant) for the items from `first` on
/// (numbered in the run's data), into `found`.
///
/// [`Plan::checks`]: nnp_lowering::swgraph::Plan::checks
pub(super) fn scan(
    graph: &SwGraph,
    id: ValueId,
    checks: &[usize],
    t: &Tensor,
    first: usize,
    found: &mut Found,
) -> candle_core::Result<()> {
    if checks.is_empty() {
        return Ok(());
    }
    let batch = t.dims().first().copied().unwrap_or(1).max(1);
    super::tensors::with_host(t, |data| {
        scan_rows(graph, id, checks, data, data.len() / batch, first, found)
    })
}

/// Scan rows of value `id` (`lanes` values each, the first of them item `first` of the run's
/// data) against its checks `checks`, into `found`. Rows that are all finite, nearly always
/// all of them, cost one pass that the compiler vectorizes.
pub(super) fn scan_rows(
    graph: &SwGraph,
    id: ValueId,
    checks: &[usize],
    rows: &[f64],
    lanes: usize,
    first: usize,
    found: &mut Found,
) {
    if checks.is_empty() || lanes == 0 || all_finite(rows) {
        return;
    }
    let ty = &graph.nodes[id.index()].ty;
    let tiles = ty.tiles().unwrap_or(1).max(1) as usize;
    let unit = lanes / tiles;
    // A matrix's lanes are numbered within each tile (the emulator checks it tile by tile), a
    // vector's across the checked tiles.
    let per_tile = matches!(ty, Ty::TileStack { .. });
    for &k in checks {
        let c: &FiniteCheck = &graph.checks[k];
        let (start, len) = (c.first_tile as usize * unit, c.tiles as usize * unit);
        for (item, values) in rows.chunks(lanes).enumerate() {
            let Some(checked) = values.get(start..start + len) else {
                continue;
            };
            let Some(i) = checked.iter().position(|v| !v.is_finite()) else {
                continue;
            };
            let lane = if per_tile { i % unit.max(1) } else { i };
            let bad = Bad {
                check: k,
                lane,
                value: checked[i],
            };
            if c.weight {
                keep_earliest(&mut found.weight, bad);
            } else {
                keep_item(&mut found.items, first + item, bad);
            }
        }
    }
}

/// A float whose exponent field tells whether it is finite.
pub(super) trait ExponentField: Copy {
    /// The exponent field (all ones: a NaN or an infinity).
    const EXP: u64;
    fn bits(self) -> u64;
}

impl ExponentField for f64 {
    const EXP: u64 = 0x7ff0_0000_0000_0000;
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

impl ExponentField for f32 {
    const EXP: u64 = 0x7f80_0000;
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

/// Whether every value is finite: a branch-free pass over the exponent fields.
pub(super) fn all_finite<T: ExponentField>(v: &[T]) -> bool {
    !v.iter()
        .fold(false, |bad, x| bad | (x.bits() & T::EXP == T::EXP))
}

impl Found {
    /// Add what another part of the run found (other items, the same weights).
    pub(super) fn merge(&mut self, other: Found) {
        if let Some(bad) = other.weight {
            keep_earliest(&mut self.weight, bad);
        }
        for (item, bad) in other.items {
            keep_item(&mut self.items, item, bad);
        }
    }

    /// The emulator's error for what was found: a weight's (item 0), else the lowest item's
    /// earliest.
    pub(super) fn error(&self, graph: &SwGraph) -> Option<ExecError> {
        let (item, bad) = match self.weight {
            Some(bad) => (0, bad),
            None => self.items.first_key_value().map(|(&i, &b)| (i, b))?,
        };
        let c = &graph.checks[bad.check];
        Some(ExecError::NonFinite {
            op: c.op.clone(),
            value: bad.value,
            lane: bad.lane,
            line: c.line,
            span: c.span,
            chain: c.chain,
            iteration: c.iteration,
            item,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{ExponentField, all_finite};
    use std::fmt::Display;

    /// `finite` all pass; each of `bad` alone fails at every position of `len` ones.
    fn finds<T: ExponentField + Display>(finite: &[T], bad: &[T], one: T, len: usize) {
        assert!(all_finite(finite));
        assert!(all_finite::<T>(&[]));
        for &b in bad {
            for at in 0..len {
                let mut v = vec![one; len];
                v[at] = b;
                assert!(!all_finite(&v), "{b} at {at}");
            }
        }
    }

    /// The exponent-field test against `f64::is_finite`, each special value alone at every
    /// position of a run longer than a vector register.
    #[test]
    fn all_finite_finds_every_nan_and_infinity() {
        let finite = [
            0.0,
            -0.0,
            1.0,
            -2.5,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            5e-324,
        ];
        let bad = [
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7ff0_0000_0000_0001),
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        finds(&finite, &bad, 1.0, 11);
    }

    /// The same for f32 (the fused regions' f32 lanes).
    #[test]
    fn all_finite_finds_every_f32_nan_and_infinity() {
        let finite = [
            0.0f32,
            -0.0,
            1.0,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-45,
        ];
        let bad = [
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        finds(&finite, &bad, 1.0, 19);
    }
}
