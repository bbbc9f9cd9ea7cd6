//! Pad lanes that change real results: warning `nnp::pad-lanes`.
//!
//! A row whose length is not a multiple of N ends in a partial register: its pad lanes hold the
//! declared `pad` (0 by default), and a product's output tile past the matrix's last row holds 0.
//! MFU ops treat pad lanes like any other lane, so after `v_sigm` they hold sigm(0) = 0.5.
//! docs/numerics.md says pad lanes must not change any result. Two places let them:
//! - a product's vector quantization, where nonzero pad lanes share a block (one exponent) with
//!   real lanes. Their products are zero (the matrix's pad columns are), but their magnitude can
//!   raise the block's exponent and round the real lanes more coarsely;
//! - `v_softmax`, whose max and sum run over every carried lane.
//!
//! The checker follows each register's pad value through every chain and iteration and warns
//! there. Where it cannot know the value (after a softmax), it stops following: no warning.

use super::chain::VecChain;
use super::checker::Checker;
use super::state::{Pad, Space};
use crate::diagnostics::{Diagnostic, codes};
use crate::program::{DeclKind, Mem, OpKind, Span};
use nnp_numerics::Format;
use nnp_numerics::format::Per;

/// The most negative fp16: the idiomatic pad before a softmax (exp(-65504 - max) is 0).
const SOFTMAX_PAD: f64 = -65504.0;

/// How many consecutive lanes of a product's vector share one scale (1: each lane its own;
/// `usize::MAX`: the whole vector).
fn scale_group(format: &Format, native: usize) -> usize {
    match format {
        Format::Float(_) | Format::Fixed(_) => 1,
        Format::Bfp(f) => f.block.len(native),
        Format::Mx(f) => f.block.len(native),
        Format::Hbfp(f) => f.block.len(native),
        Format::Pot(f) => f.block.len(native),
        Format::TwoHot(f) => f.block.len(native),
        Format::Int(f) if f.per == Per::Tensor => usize::MAX,
        Format::DynFixed(f) if f.per == Per::Tensor => usize::MAX,
        Format::Int(_) | Format::DynFixed(_) => native,
    }
}

/// `v` rounded to a float format (MFU and storage formats are floats).
fn round_to(format: &Format, v: f64) -> f64 {
    format.as_float().map_or(v, |f| f.round(v))
}

/// The pad value after one MFU op (`operand`: the operand's pad value), before the MFU's
/// rounding: the op's own reference semantics ([`OpKind::reference`]). None when it is not
/// known.
fn apply(kind: OpKind, v: f64, operand: Option<f64>) -> Option<f64> {
    // exp(pad - max) is 0 when the pad is the most negative value.
    if kind == OpKind::Softmax && v <= SOFTMAX_PAD {
        return Some(0.0);
    }
    kind.reference(v, operand)
}

impl Checker {
    /// Pad lanes of the registers a declaration loads: the last register of each row, when the
    /// row is not a multiple of N.
    pub(super) fn load_pads(&mut self, space: Space, start: u32, decl: usize) {
        let d = &self.decls[decl];
        let data = (d.row_len() % self.n) as u32;
        if d.kind == DeclKind::Matrix || data == 0 {
            return;
        }
        let value = self.storage_round(d.pad);
        let row_tiles = d.row_tiles(self.n) as u32;
        let origin = self.decl_names[decl];
        for r in 0..d.rows() as u32 {
            let pad = Pad {
                data,
                value,
                op: None,
                origin,
            };
            self.pads
                .set(space, start + r * row_tiles + row_tiles - 1, Some(pad));
        }
    }

    /// Pad lanes exist only where some row (or a matrix's column of tiles) is partial.
    pub(super) fn any_pads(&self) -> bool {
        let partial = |len: usize| !len.is_multiple_of(self.n);
        self.decls
            .iter()
            .any(|d| partial(d.row_len()) || (d.kind == DeclKind::Matrix && partial(d.rows())))
    }

    fn storage_round(&self, v: f64) -> f64 {
        round_to(&self.quant.storage, v)
    }

    /// Follow the pad lanes through iteration `t` of a chain whose registers were just
    /// simulated: warn where they reach a product's blocks or a softmax, and record what the
    /// chain writes. `popped`: the input declaration a `v_rd netq` popped a row of.
    pub(super) fn follow_pads(
        &mut self,
        c: &VecChain,
        t: u32,
        popped: Option<usize>,
        tiles: &[u32],
    ) {
        if !self.pads.active {
            return;
        }
        let n = self.n as u32;
        let mut carried: Vec<Option<Pad>> = match (popped, Space::of(c.read.op.mem, false)) {
            (Some(decl), _) => {
                let d = &self.decls[decl];
                let data = (d.row_len() % self.n) as u32;
                let last = tiles.len().saturating_sub(1);
                let pad = (data != 0).then(|| Pad {
                    data,
                    value: self.storage_round(d.pad),
                    op: None,
                    origin: self.decl_names[decl],
                });
                (0..tiles.len())
                    .map(|j| pad.filter(|_| j == last))
                    .collect()
            }
            (None, Some(space)) => tiles.iter().map(|&r| self.pads.get(space, r)).collect(),
            (None, None) => vec![None; tiles.len()],
        };

        if let Some((m, span)) = &c.mv_mul {
            let a = m.addr.at(t);
            let s = c.scalars;
            let group = scale_group(&c.quant.mvm_vector, self.n);
            // Real columns of each of the block's column tiles, and real rows of its row tiles.
            let extent = |ck: &Checker, tile: u32| {
                let &(d, idx) = ck.mrf_tiles.get(&tile)?;
                let d = &ck.decls[d];
                let col_tiles = d.row_tiles(ck.n) as u32;
                let clip = |len: usize, k: u32| {
                    (len as u64)
                        .saturating_sub(u64::from(k) * u64::from(n))
                        .min(u64::from(n)) as u32
                };
                Some((
                    clip(d.row_len(), idx % col_tiles),
                    clip(d.rows(), idx / col_tiles),
                ))
            };
            for (j, pad) in carried.iter().enumerate().take(s.cols as usize) {
                let Some(pad) = pad.filter(|p| p.value != 0.0) else {
                    continue;
                };
                let Some((cols, _)) = extent(self, a + j as u32) else {
                    continue;
                };
                let first = cols.max(pad.data);
                let shares = group > 1
                    && first < n
                    && cols > 0
                    && (first as usize / group) * group < cols as usize;
                if shares {
                    self.warn_product_pads(*span, j, first, pad);
                    break;
                }
            }
            let origin = *span;
            carried = (0..s.rows)
                .map(|r| {
                    let (_, rows) = extent(self, a + r * s.cols)?;
                    (rows < n).then_some(Pad {
                        data: rows,
                        value: 0.0,
                        op: None,
                        origin,
                    })
                })
                .collect();
        }

        for op in &c.ops {
            let operand: Option<Vec<Option<Pad>>> = op.operand.as_ref().map(|m| {
                let space = Space::of(m.mem, false);
                let a = m.addr.at(t);
                (0..carried.len() as u32)
                    .map(|j| space.and_then(|s| self.pads.get(s, a + j)))
                    .collect()
            });
            if op.kind == OpKind::Softmax
                && let Some((j, pad)) = carried.iter().enumerate().find_map(|(j, p)| {
                    p.filter(|p| p.value.is_nan() || p.value > SOFTMAX_PAD)
                        .map(|p| (j, p))
                })
            {
                self.warn_softmax_pads(op.span, j, pad);
            }
            for (j, slot) in carried.iter_mut().enumerate() {
                let Some(pad) = *slot else { continue };
                let other = match &operand {
                    // A full operand register: its lanes are data where the carried pad lanes are.
                    Some(regs) => match regs[j] {
                        Some(b) => Some(b),
                        None => {
                            *slot = None;
                            continue;
                        }
                    },
                    None => None,
                };
                let Some(value) = apply(op.kind, pad.value, other.map(|b| b.value)) else {
                    *slot = None;
                    continue;
                };
                let value = round_to(&self.quant.mfu_input, value);
                let changed = value.to_bits() != pad.value.to_bits();
                *slot = Some(Pad {
                    data: pad.data.max(other.map_or(0, |b| b.data)),
                    value,
                    op: if changed {
                        Some((op.kind, op.span))
                    } else {
                        pad.op
                    },
                    origin: pad.origin,
                });
            }
        }

        for w in &c.writes {
            if w.op.mem == Mem::Netq {
                continue;
            }
            let Some(space) = Space::of(w.op.mem, false) else {
                continue;
            };
            let a = w.op.addr.at(t);
            for (j, pad) in carried.iter().enumerate() {
                let pad = pad.map(|p| Pad {
                    value: self.storage_round(p.value),
                    ..p
                });
                self.pads.set(space, a + j as u32, pad);
            }
        }
    }

    fn pad_source(d: Diagnostic, pad: &Pad) -> Diagnostic {
        match pad.op {
            Some((kind, span)) => d.label(
                span,
                format!("`{}` makes the pad lanes {}", kind.mnemonic(), pad.value),
            ),
            None => d.label(pad.origin, "the pad lanes start here"),
        }
    }

    fn warn_product_pads(&mut self, span: Span, tile: usize, first: u32, pad: Pad) {
        let n = self.n;
        let d = Diagnostic::warning(
            codes::PAD_LANES,
            format!(
                "pad lanes holding {} share a block exponent with real lanes in this product",
                pad.value
            ),
        )
        .label(
            span,
            format!(
                "input tile {tile}: lanes {first}..{n} hold {} where the matrix's columns are zero",
                pad.value
            ),
        );
        let d = Self::pad_source(d, &pad).help(
            "their products are zero, but they can raise the block's shared exponent and round the \
             real lanes more coarsely (docs/numerics.md). Make them 0 before the product: a \
             `pad` the ops map to 0 (e.g. `pad -65504` on the vector before `v_sigm` or `v_exp`), \
             or `vv_mul` by a mask vector whose pad lanes are 0",
        );
        self.emit(d);
    }

    fn warn_softmax_pads(&mut self, span: Span, tile: usize, pad: Pad) {
        let n = self.n;
        let d = Diagnostic::warning(
            codes::PAD_LANES,
            format!("`v_softmax` runs over pad lanes holding {}", pad.value),
        )
        .label(
            span,
            format!(
                "tile {tile}: lanes {}..{n} hold {}: each adds exp({} - max) to the sum",
                pad.data, pad.value, pad.value
            ),
        );
        let d = Self::pad_source(d, &pad).help(
            "the max and the sum run over every carried lane (docs/numerics.md). Give the \
             pad lanes the most negative value, `pad -65504` on the vector they come from, so \
             that they drop out (as samples/softmax_classifier.nnp does)",
        );
        self.emit(d);
    }
}
