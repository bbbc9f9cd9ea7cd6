//! The vector operand: a batch of vectors as integers ([`IntVector`]), converted tile by
//! tile, or quantized straight from BFP.

use super::runs::{Aligned, Span, mag_bits, quantized_ints, scales, to_ints};
use super::{Kernel, qmax, supports};
use crate::quant::BfpInts;
use rayon::prelude::*;

/// Values per task, at least, when a vector is converted to integers: with 4 Ki, a task was a
/// few microseconds of work, less than waking one of a 16-thread machine's workers (the GPU
/// guest's LSTM runs were faster with 16 Ki in five of five pairs; 2 cores saw no change).
pub(super) const PAR_VALUES: usize = 16384;

/// One task's part of every tile column of an [`IntVector`] being built: its items'
/// integers and units, by column.
type ColumnParts<'a> = (Vec<&'a mut [i16]>, Vec<&'a mut [i32]>);

/// A vector `[b, cols * n]` as integers.
pub struct IntVector {
    pub(super) b: usize,
    /// Tile `j` of item `bi` at `(j * b + bi) * n`.
    pub(super) q: Vec<i16>,
    /// Unit of tile `j` of item `bi` at `j * b + bi`, and its `2^unit`.
    pub(super) unit: Vec<i32>,
    pub(super) scale: Vec<f64>,
    /// Every item on a common unit across its tiles (`base` by item, `shift` laid out as
    /// `unit`), for [`int_sums`](super::product::int_sums).
    pub(super) aligned: Aligned,
    pub(super) bits: u32,
    /// The largest magnitude an integer may have ([`qmax`], or a slice's width).
    pub(super) limit: i32,
    /// Each integer plus 128 as a byte, laid out as `q`, where the kernel is VNNI
    /// ([`Kernel::best`]) and every integer lies in `-128..=127`.
    pub(super) biased: Option<Vec<u8>>,
}

impl IntVector {
    /// `x` is `[b, cols * n]` row-major; `None` when a tile does not fit.
    pub fn new(x: &[f64], b: usize, cols: usize, n: usize) -> Option<IntVector> {
        Self::with_limit(x, b, cols, n, qmax(n))
    }

    /// [`IntVector::new`] with integers of magnitude up to `qm`.
    pub(super) fn with_limit(
        x: &[f64],
        b: usize,
        cols: usize,
        n: usize,
        qm: i32,
    ) -> Option<IntVector> {
        Self::from_runs(x, cols * n, b, cols, n, qm, |run, q| to_ints(run, q, qm))
    }

    /// The vector `quantize_runs` makes of `x` in `fmt` (BFP in blocks of `n` lanes), straight
    /// from `x` (item `bi` at `x[bi * stride..][..cols * n]`): the same integers and units as
    /// `new` of that vector, in one pass over `x` and none over the quantized values; `None`
    /// where `new` of it would be (a non-finite block), or could differ (`mantissa_unit`).
    pub fn quantized(
        x: &[f64],
        stride: usize,
        b: usize,
        cols: usize,
        n: usize,
        fmt: &BfpInts,
    ) -> Option<IntVector> {
        let qm = qmax(n);
        Self::from_runs(x, stride, b, cols, n, qm, |run, q| {
            quantized_ints(fmt, run, q, qm)
        })
    }

    /// Each tile of `x` (item `bi` at `x[bi * stride..][..cols * n]`) as integers and their
    /// unit by `ints(run, q)`, which keeps them within `qm`.
    fn from_runs(
        x: &[f64],
        stride: usize,
        b: usize,
        cols: usize,
        n: usize,
        qm: i32,
        ints: impl Fn(&[f64], &mut [i16]) -> Option<i32> + Sync,
    ) -> Option<IntVector> {
        let row = cols * n;
        let fits = b == 0 || (stride >= row && x.len() == (b - 1) * stride + row);
        if !supports(n) || !fits {
            return None;
        }
        let mut q = vec![0i16; b * row];
        let mut unit = vec![0i32; b * cols];
        // Items in parallel, a few thousand values per task (one tile is too little work to
        // hand to a thread), each item's tiles in the order of `x`. Tile j of item bi is run
        // `j * b + bi` of `q` and `unit`: a task holds its items' part of every tile column.
        let per_task = (PAR_VALUES / row.max(1)).max(1);
        let mut tasks: Vec<ColumnParts> = (0..b.div_ceil(per_task))
            .map(|_| (Vec::with_capacity(cols), Vec::with_capacity(cols)))
            .collect();
        for (qj, uj) in q.chunks_mut((b * n).max(1)).zip(unit.chunks_mut(b.max(1))) {
            let parts = qj.chunks_mut(per_task * n).zip(uj.chunks_mut(per_task));
            for (task, (qp, up)) in tasks.iter_mut().zip(parts) {
                task.0.push(qp);
                task.1.push(up);
            }
        }
        tasks
            .into_par_iter()
            .enumerate()
            .try_for_each(|(k, (mut qs, mut us))| {
                let items = us.first().map_or(0, |u| u.len());
                for i in 0..items {
                    let item = &x[(k * per_task + i) * stride..][..row];
                    for ((run, qj), uj) in item.chunks(n).zip(&mut qs).zip(&mut us) {
                        uj[i] = ints(run, &mut qj[i * n..][..n])?;
                    }
                }
                Some(())
            })?;
        Some(Self::assemble(b, q, unit, qm))
    }

    /// The vector whose tile columns are `columns`, in order: vectors of one tile column, of
    /// `b` items or of one item that stands for all `b` (a part every item shares). The same
    /// as [`IntVector::new`] of the concatenated values, since each tile's integers and unit
    /// depend on that tile alone; `None` for columns of another shape.
    pub fn from_columns(columns: &[&IntVector], b: usize) -> Option<IntVector> {
        let n = columns.first()?.q.len() / columns.first()?.b.max(1);
        let shaped =
            |c: &&IntVector| (c.b == b || c.b == 1) && c.unit.len() == c.b && c.q.len() == c.b * n;
        if b == 0 || !columns.iter().all(shaped) {
            return None;
        }
        let mut q = Vec::with_capacity(columns.len() * b * n);
        let mut unit = Vec::with_capacity(columns.len() * b);
        let limit = columns.iter().map(|c| c.limit).max().unwrap_or(0);
        for c in columns {
            if c.b == b {
                q.extend_from_slice(&c.q);
                unit.extend_from_slice(&c.unit);
            } else {
                for _ in 0..b {
                    q.extend_from_slice(&c.q);
                }
                unit.resize(unit.len() + b, c.unit[0]);
            }
        }
        Some(Self::assemble(b, q, unit, limit))
    }

    /// The items of each of `parts` in turn, as one vector: the same as [`IntVector::new`] of
    /// the concatenated batches, since each tile's integers and unit depend on that tile
    /// alone; `None` for parts of different tile columns or lanes.
    pub fn stacked(parts: &[&IntVector]) -> Option<IntVector> {
        let first = parts.first()?;
        let (cols, n) = (first.cols(), first.q.len() / first.unit.len().max(1));
        let shaped = |p: &&IntVector| p.b > 0 && p.cols() == cols && p.q.len() == p.b * cols * n;
        if cols == 0 || !parts.iter().all(shaped) {
            return None;
        }
        let b: usize = parts.iter().map(|p| p.b).sum();
        let mut q = Vec::with_capacity(b * cols * n);
        let mut unit = Vec::with_capacity(b * cols);
        // Tile column j of every part, then column j + 1 (tile j of item bi at j * b + bi).
        for j in 0..cols {
            for p in parts {
                q.extend_from_slice(&p.q[j * p.b * n..][..p.b * n]);
                unit.extend_from_slice(&p.unit[j * p.b..][..p.b]);
            }
        }
        let limit = parts.iter().map(|p| p.limit).max().unwrap_or(0);
        Some(Self::assemble(b, q, unit, limit))
    }

    /// The vector whose tile columns are those of each of `parts` (of one batch) in turn, each
    /// part's `times` over.
    pub(super) fn repeated(parts: &[IntVector], times: usize) -> IntVector {
        let b = parts.first().map_or(0, |p| p.b);
        let (mut q, mut unit) = (Vec::new(), Vec::new());
        for p in parts {
            for _ in 0..times {
                q.extend_from_slice(&p.q);
                unit.extend_from_slice(&p.unit);
            }
        }
        let limit = parts.iter().map(|p| p.limit).max().unwrap_or(0);
        Self::assemble(b, q, unit, limit)
    }

    /// The vector of `b` items with integers `q` (within `limit`) and units `unit` (tile `j`
    /// of item `bi` at run `j * b + bi`), and what the kernel derives from them.
    fn assemble(b: usize, q: Vec<i16>, unit: Vec<i32>, limit: i32) -> IntVector {
        let cols = unit.len() / b.max(1);
        let bits = mag_bits(&q);
        let scale = scales(&unit);
        let aligned = Aligned::new(&unit, b, cols, |bi, j| j * b + bi);
        let biased = Kernel::best().is_vnni().then(|| biased_bytes(&q)).flatten();
        IntVector {
            b,
            biased,
            q,
            unit,
            scale,
            aligned,
            bits,
            limit,
        }
    }

    /// The values, `[b, cols * n]` row-major: each integer times its tile's `2^unit` (exact;
    /// zeros come out as `+0.0`, as BFP quantization gives them).
    pub fn restore(&self) -> Vec<f64> {
        if self.q.is_empty() {
            return Vec::new();
        }
        let (b, n) = (self.b, self.q.len() / self.unit.len());
        let cols = self.unit.len() / b.max(1);
        let len = b * cols * n;
        debug_assert_eq!(len, self.q.len(), "a vector's tiles are whole");
        // Written in place, not zeroed first: a restore is one pass over the values.
        let mut out = Vec::with_capacity(len);
        out.spare_capacity_mut()[..len]
            .par_chunks_mut(cols * n)
            // A task of at least a few thousand values.
            .with_min_len((4096 / (cols * n)).max(1))
            .enumerate()
            .for_each(|(bi, row)| {
                for (j, run) in row.chunks_mut(n).enumerate() {
                    let t = j * b + bi;
                    let s = self.scale[t];
                    for (o, &q) in run.iter_mut().zip(&self.q[t * n..][..n]) {
                        o.write(f64::from(q) * s);
                    }
                }
            });
        // SAFETY: the `b` rows of `cols * n` values partition the first `len` values, and
        // each run of `n` of a row was written in full from its tile's `n` integers.
        unsafe { out.set_len(len) };
        out
    }

    /// Batch items.
    pub fn batch(&self) -> usize {
        self.b
    }

    /// The bits of its integers: each `|q| < 2^bits`.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The lowest and highest unit of its tiles (`None`: every tile is zero).
    pub fn units(&self) -> Option<(i32, i32)> {
        let s = self.span(0, self.b);
        (!s.is_empty()).then_some((s.lo, s.hi))
    }

    /// Tile columns.
    pub(super) fn cols(&self) -> usize {
        self.unit.len() / self.b.max(1)
    }

    /// The integers: tile `j` of item `bi` at `(j * b + bi) * n`.
    pub fn ints(&self) -> &[i16] {
        &self.q
    }

    /// `2^unit` of tile `j` of item `bi` at `j * b + bi` (0 for a zero tile).
    pub fn tile_scales(&self) -> &[f64] {
        &self.scale
    }

    /// Units of items `b0..b0 + items`, every tile.
    pub(super) fn span(&self, b0: usize, items: usize) -> Span {
        Span::of(
            self.unit
                .chunks(self.b)
                .flat_map(|u| u[b0..b0 + items].iter().copied()),
        )
    }
}

/// Each integer plus 128 as a byte, or `None` where one lies outside `-128..=127`.
fn biased_bytes(q: &[i16]) -> Option<Vec<u8>> {
    // One branch-free pass: the bytes, and whether every integer was in range.
    let mut fits = true;
    let bytes = q
        .iter()
        .map(|&v| {
            fits &= (-128..=127).contains(&v);
            v.wrapping_add(128) as u8
        })
        .collect();
    fits.then_some(bytes)
}
