//! The twin's reverse pass, written out: the vector-Jacobian product of every node of a software
//! graph at given values (the concordant run's, or the float model's), from the last node to
//! the first, on f64 slices in the graph's own layout (docs/training.md, "A step").
//!
//! Each node's gradient is a buffer of its value's shape (`[batch, lanes]`, a batch-1 value
//! taking the sum over the items that read it); a node no weight (or wanted input) reaches is
//! never given one. The rules are the module docs' of `twin.rs`: straight through quantizers
//! ([`super::ste`]), the float derivatives of products and MFU ops at the values, and for
//! padding, slicing and concatenation each lane's gradient to the lane it came from (pad lanes
//! take none).
//!
//! A product's gradient is computed on the block of its matrix that is not padding: where the
//! matrix is a padded logical `[r, c]` tensor (through its quantizers and roundings), the pad
//! rows and columns are zeros, so they add exact zeros to the vector's gradient, and their
//! own gradient reaches no weight (the padding takes none). The block's two products are
//! float matrix products tile by tile, on the values where they lie ([`super::strided`]).

use super::TrainError;
use super::ste::{self, Points};
use super::strided::{View, ViewMut, add_product};
use nnp_lowering::swgraph::{BinOp, Op, SwGraph, TileLayout, Ty, UnOp, ValueId};
use nnp_numerics::Format;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The value of a node: `batch` items of `lanes` elements each, row-major (a constant's value
/// is one item that every item reads). A recorded run keeps only the values whose elements a
/// rule of the reverse pass reads ([`read_values`]); the others are their shape alone, and
/// reading their elements is an error, never an empty slice.
#[derive(Clone, Debug)]
pub(crate) struct Value<'a> {
    pub batch: usize,
    lanes: usize,
    data: Option<Cow<'a, [f64]>>,
}

impl<'a> Value<'a> {
    /// A value of `batch` items and their elements.
    pub fn new(batch: usize, data: Cow<'a, [f64]>) -> Value<'a> {
        Value {
            batch,
            lanes: data.len() / batch.max(1),
            data: Some(data),
        }
    }

    /// A value whose elements were not kept: its shape alone.
    pub fn shape_only(batch: usize, lanes: usize) -> Value<'a> {
        Value {
            batch,
            lanes,
            data: None,
        }
    }

    /// The same value, borrowed.
    pub fn borrowed(&self) -> Value<'_> {
        Value {
            batch: self.batch,
            lanes: self.lanes,
            data: self.data.as_deref().map(Cow::Borrowed),
        }
    }

    /// Elements per item.
    pub fn len(&self) -> usize {
        self.lanes
    }

    /// Elements in all.
    fn size(&self) -> usize {
        self.batch * self.lanes
    }

    /// Every element.
    fn data(&self) -> Result<&[f64], TrainError> {
        self.data.as_deref().ok_or_else(|| {
            TrainError::Internal("the reverse pass read a value the run did not keep".into())
        })
    }

    /// Every element where `wanted` (a rule reads them only then, and the run kept them only
    /// then: [`read_values`]), else none.
    fn data_if(&self, wanted: bool) -> Result<&[f64], TrainError> {
        if wanted { self.data() } else { Ok(&[]) }
    }

    /// Item `k` (a batch-1 value's one item for every `k`).
    fn item(&self, k: usize) -> Result<&[f64], TrainError> {
        let n = self.lanes;
        let k = if self.batch == 1 { 0 } else { k };
        Ok(&self.data()?[k * n..(k + 1) * n])
    }
}

/// Tensors by name as their shapes and their elements, flattened f64 (a pass's leaves).
pub(crate) type Shaped = BTreeMap<String, (Vec<usize>, Vec<f64>)>;

/// Every node's value, by node index (`None` for outputs).
pub(crate) type Values<'a> = Vec<Option<Value<'a>>>;

/// What the reverse pass gives: the gradient of every weight (its logical shape, flattened)
/// and, when asked for, of every input (`[batch, ...]`, flattened), with the point positions
/// the `dynfixed` quantizers chose at the values.
#[derive(Debug, Default)]
pub(crate) struct Grads {
    pub weights: BTreeMap<String, Vec<f64>>,
    pub inputs: BTreeMap<String, Vec<f64>>,
    pub points: Points,
}

/// The outputs of `values`, by name: `(batch, [batch, rows * row lanes])`.
pub(crate) fn outputs(
    graph: &SwGraph,
    values: &Values,
) -> Result<BTreeMap<String, (usize, Vec<f64>)>, TrainError> {
    let mut rows: BTreeMap<&str, BTreeMap<usize, &Value>> = BTreeMap::new();
    for node in &graph.nodes {
        if let Op::Output { name, row, src } = &node.op {
            rows.entry(name)
                .or_default()
                .insert(*row, value(values, *src)?);
        }
    }
    let mut out = BTreeMap::new();
    for o in &graph.outputs {
        let parts = rows.remove(o.name.as_str()).unwrap_or_default();
        if parts.len() != o.rows {
            return Err(TrainError::Internal(format!(
                "output `{}` has {} of its {} rows",
                o.name,
                parts.len(),
                o.rows
            )));
        }
        let batch = parts.values().map(|v| v.batch).max().unwrap_or(1);
        let width: usize = parts.values().map(|v| v.len()).sum();
        let mut data = Vec::with_capacity(batch * width);
        for k in 0..batch {
            for v in parts.values() {
                data.extend_from_slice(v.item(k)?);
            }
        }
        out.insert(o.name.clone(), (batch, data));
    }
    Ok(out)
}

fn value<'v, 'a>(values: &'v Values<'a>, v: ValueId) -> Result<&'v Value<'a>, TrainError> {
    values
        .get(v.index())
        .and_then(Option::as_ref)
        .ok_or_else(|| TrainError::Internal(format!("no value for {v}")))
}

/// The gradient buffers of the nodes, made on first use.
struct Buffers {
    grads: Vec<Option<Vec<f64>>>,
}

impl Buffers {
    /// The gradient buffer of `v` (of `len` elements: zeros when new).
    fn of(&mut self, v: ValueId, len: usize) -> Result<&mut [f64], TrainError> {
        let g = self.grads[v.index()].get_or_insert_with(|| vec![0.0; len]);
        if g.len() != len {
            return Err(TrainError::Internal(format!(
                "the gradient of {v} has {} elements, its value {len}",
                g.len()
            )));
        }
        Ok(g)
    }

    /// `g`, a gradient of `batch` items, added into the gradient of `v` (of value `x`; a
    /// batch-1 value takes the items' sum): moved in where `v` has none yet and as many items.
    fn deposit(
        &mut self,
        v: ValueId,
        x: &Value,
        g: Vec<f64>,
        batch: usize,
    ) -> Result<(), TrainError> {
        if self.grads[v.index()].is_none() && x.batch == batch && g.len() == x.size() {
            self.grads[v.index()] = Some(g);
            return Ok(());
        }
        let n = x.len();
        let dst = self.of(v, x.size())?;
        for k in 0..batch {
            add(&mut dst[item_range(x.batch, n, k)], &g[k * n..(k + 1) * n]);
        }
        Ok(())
    }
}

/// `d += g`, element by element.
fn add(d: &mut [f64], g: &[f64]) {
    d.iter_mut().zip(g).for_each(|(d, g)| *d += g);
}

/// Item `k`'s range in a value of `batch` items of `n` elements (a batch-1 value's one item).
fn item_range(batch: usize, n: usize, k: usize) -> std::ops::Range<usize> {
    let k = if batch == 1 { 0 } else { k };
    k * n..(k + 1) * n
}

/// The reverse pass of `graph` at `values`, from `output_grads` (by output name, `[batch, ...]`
/// flattened; a missing output takes none): the gradient of every weight, and of every input
/// where `want_inputs`.
pub(crate) fn backward(
    graph: &SwGraph,
    values: &Values,
    output_grads: &BTreeMap<String, Vec<f64>>,
    want_inputs: bool,
) -> Result<Grads, TrainError> {
    let needs = needs_gradient(graph, want_inputs);
    let mut bufs = Buffers {
        grads: vec![None; graph.nodes.len()],
    };
    seed_outputs(graph, values, output_grads, &needs, &mut bufs)?;
    let mut out = Grads::default();
    for (i, node) in graph.nodes.iter().enumerate().rev() {
        let g = bufs.grads[i].take();
        if let Op::Quantize { src, format, .. } = &node.op
            && g.is_none()
            && matches!(format, Format::DynFixed(_))
        {
            // No gradient passes, but the point positions are still the pass's.
            let x = value(values, *src)?;
            ste::passes(
                format,
                x.data()?,
                quant_run(graph, node),
                i,
                &mut out.points,
            );
        }
        let Some(g) = g else { continue };
        let y = value(values, ValueId(i as u32))?;
        match &node.op {
            Op::Input { name, .. } => {
                out.inputs.insert(name.clone(), g);
            }
            Op::Weight { name, .. } => {
                // A weight is one item; the gradient of every item reading it is summed in.
                out.weights.insert(name.clone(), g);
            }
            Op::Zero { .. } | Op::Output { .. } => {}
            Op::PadToTiles { src, layout, .. } => {
                let Ty::Logical { shape } = &graph.node(*src).ty else {
                    return Err(TrainError::Internal("pad_to_tiles of a tiled value".into()));
                };
                let x = value(values, *src)?;
                unpad_gradient(
                    &g,
                    y,
                    x,
                    shape,
                    *layout,
                    graph.native,
                    bufs.of(*src, x.size())?,
                );
            }
            Op::Unpad { src, len } => {
                let x = value(values, *src)?;
                let dst = bufs.of(*src, x.size())?;
                for k in 0..y.batch {
                    let d = &mut dst[item_range(x.batch, x.len(), k)];
                    for (d, g) in d[..*len].iter_mut().zip(&g[k * len..(k + 1) * len]) {
                        *d += g;
                    }
                }
            }
            Op::Round { src, format } => {
                let x = value(values, *src)?;
                let mask = ste::float_passes(format, x.data_if(ste::float_reads(format))?);
                bufs.deposit(*src, x, masked(g, y, x, mask.as_deref()), y.batch)?;
            }
            Op::Quantize { src, format, .. } => {
                let x = value(values, *src)?;
                let run = quant_run(graph, node);
                let data = x.data_if(ste::reads(format))?;
                let mask = ste::passes(format, data, run, i, &mut out.points);
                bufs.deposit(*src, x, masked(g, y, x, mask.as_deref()), y.batch)?;
            }
            Op::Concat { parts } => {
                let unit = match node.ty {
                    Ty::TileStack { .. } => graph.native * graph.native,
                    _ => graph.native,
                };
                let mut off = 0;
                for p in parts {
                    let (start, len) = (p.start as usize * unit, p.count as usize * unit);
                    if needs[p.value.index()] {
                        let x = value(values, p.value)?;
                        let dst = bufs.of(p.value, x.size())?;
                        for k in 0..y.batch {
                            let r = item_range(x.batch, x.len(), k);
                            let gk = &g[k * y.len() + off..k * y.len() + off + len];
                            for (d, g) in dst[r][start..start + len].iter_mut().zip(gk) {
                                *d += g;
                            }
                        }
                    }
                    off += len;
                }
            }
            Op::TiledMatVec {
                x, w, rows, cols, ..
            } => {
                let shape = MatVec {
                    cols: *cols as usize,
                    n: graph.native,
                    extent: matrix_extent(graph, *w, *rows as usize, *cols as usize),
                };
                matvec_gradient(&shape, &g, y, (values, &needs), (*x, *w), &mut bufs)?;
            }
            Op::Binary { op, a, b, .. } => {
                binary_gradient(*op, g, y, (*a, *b), (values, &needs), &mut bufs)?;
            }
            Op::Unary { op, src, .. } => {
                let x = value(values, *src)?;
                bufs.deposit(*src, x, unary_gradient(*op, g, y, x)?, y.batch)?;
            }
        }
    }
    Ok(out)
}

/// Which nodes take a gradient: those a weight reaches (or an input, with `want_inputs`).
fn needs_gradient(graph: &SwGraph, want_inputs: bool) -> Vec<bool> {
    let mut needs = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        needs[i] = match &node.op {
            Op::Weight { .. } => true,
            Op::Input { .. } => want_inputs,
            Op::Zero { .. } | Op::Output { .. } => false,
            op => op.inputs().iter().any(|v| needs[v.index()]),
        };
    }
    needs
}

/// The values whose elements the reverse pass reads (with `want_inputs`, for the inputs'
/// gradients too), leaves left out: what a recorded run keeps ([`super::layer::record`]). The
/// other rules read shapes alone.
/// - a saturating `round` or quantizer (float `overflow = saturate`, `fixed`, `dynfixed`): its
///   source, for the mask (a `dynfixed` one's always, for its point positions);
/// - a product: the vector for the matrix's gradient, the matrix for the vector's;
/// - `mul` and `max`: the operands the other's gradient reads; an MFU op but `pass`: its
///   source; an output: its row, for the loss.
pub(crate) fn read_values(graph: &SwGraph, want_inputs: bool) -> Vec<ValueId> {
    let needs = needs_gradient(graph, want_inputs);
    let mut read = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        let mut mark = |v: &ValueId| read[v.index()] = true;
        match &node.op {
            Op::Output { src, .. } => mark(src),
            Op::Quantize { src, format, .. }
                if matches!(format, Format::DynFixed(_)) || (needs[i] && ste::reads(format)) =>
            {
                mark(src)
            }
            Op::Round { src, format } if needs[i] && ste::float_reads(format) => mark(src),
            Op::TiledMatVec { x, w, .. } => {
                if needs[w.index()] {
                    mark(x);
                }
                if needs[x.index()] {
                    mark(w);
                }
            }
            Op::Binary { op, a, b, .. } => match op {
                BinOp::Add | BinOp::Sub => {}
                BinOp::Mul => {
                    if needs[b.index()] {
                        mark(a);
                    }
                    if needs[a.index()] {
                        mark(b);
                    }
                }
                BinOp::Max if needs[i] => {
                    mark(a);
                    mark(b);
                }
                BinOp::Max => {}
            },
            Op::Unary { op, src, .. } if needs[i] && *op != UnOp::Pass => mark(src),
            _ => {}
        }
    }
    graph
        .nodes_by_id()
        .filter(|(id, n)| {
            read[id.index()]
                && !matches!(n.op, Op::Input { .. } | Op::Weight { .. } | Op::Zero { .. })
        })
        .map(|(id, _)| id)
        .collect()
}

/// The output gradients into the rows' values.
fn seed_outputs(
    graph: &SwGraph,
    values: &Values,
    output_grads: &BTreeMap<String, Vec<f64>>,
    needs: &[bool],
    bufs: &mut Buffers,
) -> Result<(), TrainError> {
    // Each output's rows in order, with their offsets in an item.
    let mut rows: BTreeMap<&str, BTreeMap<usize, ValueId>> = BTreeMap::new();
    for node in &graph.nodes {
        if let Op::Output { name, row, src } = &node.op {
            rows.entry(name).or_default().insert(*row, *src);
        }
    }
    for (name, g) in output_grads {
        let Some(parts) = rows.get(name.as_str()) else {
            continue;
        };
        let width: usize = parts
            .values()
            .map(|v| value(values, *v).map(Value::len))
            .sum::<Result<usize, _>>()?;
        let batch = g.len() / width.max(1);
        let mut off = 0;
        for src in parts.values() {
            let x = value(values, *src)?;
            let n = x.len();
            if needs[src.index()] {
                let dst = bufs.of(*src, x.size())?;
                for k in 0..batch {
                    let gk = &g[k * width + off..k * width + off + n];
                    for (d, g) in dst[item_range(x.batch, n, k)].iter_mut().zip(gk) {
                        *d += g;
                    }
                }
            }
            off += n;
        }
    }
    Ok(())
}

/// Lanes per run of a quantize node.
fn quant_run(graph: &SwGraph, node: &nnp_lowering::swgraph::Node) -> usize {
    match &node.op {
        Op::Quantize { axis, .. } => axis.run(graph.native),
        _ => graph.native,
    }
}

/// `g` (of `y`, an element-wise function of `x`) zeroed where `mask` (over `x`) stops it.
fn masked(mut g: Vec<f64>, y: &Value, x: &Value, mask: Option<&[u8]>) -> Vec<f64> {
    let Some(mask) = mask else { return g };
    let n = x.len();
    for k in 0..y.batch {
        let m = &mask[item_range(x.batch, n, k)];
        for (g, m) in g[k * n..(k + 1) * n].iter_mut().zip(m) {
            if *m == 0 {
                *g = 0.0;
            }
        }
    }
    g
}

/// The gradient of a padded register image `y` (of `g`) into its logical source `x` of
/// per-item shape `shape`: the logical lanes' (pad lanes take none).
fn unpad_gradient(
    g: &[f64],
    y: &Value,
    x: &Value,
    shape: &[usize],
    layout: TileLayout,
    n: usize,
    dst: &mut [f64],
) {
    let c = shape.last().copied().unwrap_or(1);
    let ct = c.div_ceil(n);
    for k in 0..y.batch {
        let gk = &g[k * y.len()..(k + 1) * y.len()];
        let d = &mut dst[item_range(x.batch, x.len(), k)];
        match layout {
            TileLayout::Vector => {
                for (row, d) in d.chunks_exact_mut(c).enumerate() {
                    let from = &gk[row * ct * n..row * ct * n + c];
                    d.iter_mut().zip(from).for_each(|(d, g)| *d += g);
                }
            }
            TileLayout::Matrix => {
                for (r, d) in d.chunks_exact_mut(c).enumerate() {
                    let (ti, a) = (r / n, r % n);
                    for (col, d) in d.iter_mut().enumerate() {
                        let (tj, b) = (col / n, col % n);
                        *d += gk[((ti * ct + tj) * n + a) * n + b];
                    }
                }
            }
        }
    }
}

/// A product's shape: `cols` tiles of `n` lanes to a matrix row, of which the matrix block
/// `extent = (r, c)` is not padding.
struct MatVec {
    cols: usize,
    n: usize,
    extent: (usize, usize),
}

/// The block of the matrix `w` (`rows x cols` tiles) that is not padding: the logical shape
/// of the tensor padded to it, through quantizers and roundings (which keep zeros zero), else
/// the whole matrix.
fn matrix_extent(graph: &SwGraph, mut w: ValueId, rows: usize, cols: usize) -> (usize, usize) {
    let n = graph.native;
    let whole = (rows * n, cols * n);
    loop {
        match &graph.node(w).op {
            Op::Quantize { src, .. } | Op::Round { src, .. } => w = *src,
            Op::PadToTiles {
                src,
                layout: TileLayout::Matrix,
                ..
            } => {
                let Ty::Logical { shape } = &graph.node(*src).ty else {
                    return whole;
                };
                let (r, c) = match shape.as_slice() {
                    [r, c] => (*r, *c),
                    [c] => (1, *c),
                    _ => return whole,
                };
                return match r <= whole.0 && c <= whole.1 {
                    true => (r, c),
                    false => whole,
                };
            }
            _ => return whole,
        }
    }
}

/// The gradient of `y = W x` (`g` of `y`) into `x` and `w`: `dx = W^T g`, `dW = g x^T` summed
/// over the items (per item for a batch of matrices), tile by tile on the block that is not
/// padding, where the values lie.
fn matvec_gradient(
    s: &MatVec,
    g: &[f64],
    y: &Value,
    (values, needs): (&Values, &[bool]),
    (x, w): (ValueId, ValueId),
    bufs: &mut Buffers,
) -> Result<(), TrainError> {
    let (xv, wv) = (value(values, x)?, value(values, w)?);
    let (r, c) = s.extent;
    let (n, cols, glen, xlen) = (s.n, s.cols, y.len(), xv.len());
    // A vector shared by every item takes the items' gradients summed.
    let summed;
    let (g, items) = match (xv.batch, wv.batch, y.batch) {
        (1, 1, b) if b > 1 => {
            summed = (0..b).fold(vec![0.0; glen], |mut acc, k| {
                acc.iter_mut()
                    .zip(&g[k * glen..(k + 1) * glen])
                    .for_each(|(a, g)| *a += g);
                acc
            });
            (summed.as_slice(), 1)
        }
        (_, _, b) => (g, b),
    };
    // One product for every item (a shared matrix), or one per item.
    let runs: Vec<(usize, usize)> = match wv.batch {
        1 => vec![(0, items)],
        _ => (0..items).map(|k| (k, 1)).collect(),
    };
    let tiles: Vec<(usize, usize)> = (0..r.div_ceil(n))
        .flat_map(|i| (0..c.div_ceil(n)).map(move |j| (i, j)))
        .collect();
    for (k0, kn) in runs {
        // The matrix reaches `x`'s gradient alone, the vector `w`'s: each is read (and kept by
        // the run, `read_values`) only where that gradient is wanted.
        let wm = if needs[x.index()] { wv.item(k0)? } else { &[] };
        let xd = xv.data_if(needs[w.index()])?;
        // Item k0's rows of a value of `batch` items of `len` elements (a batch-1 value's).
        let row0 = |batch: usize, len: usize| if batch == 1 { 0 } else { k0 * len };
        for &(i, j) in &tiles {
            let (ri, cj) = ((r - i * n).min(n), (c - j * n).min(n));
            let base = (i * cols + j) * n * n;
            let tile = View {
                data: wm,
                offset: base,
                rows: ri,
                cols: cj,
                rs: n,
                cs: 1,
            };
            let grad = |transposed: bool| View {
                data: g,
                offset: k0 * glen + i * n,
                rows: if transposed { ri } else { kn },
                cols: if transposed { kn } else { ri },
                rs: if transposed { 1 } else { glen },
                cs: if transposed { glen } else { 1 },
            };
            if needs[x.index()] {
                let dst = ViewMut {
                    offset: row0(xv.batch, xlen) + j * n,
                    data: bufs.of(x, xv.size())?,
                    rows: kn,
                    cols: cj,
                    rs: xlen,
                    cs: 1,
                };
                add_product(dst, grad(false), tile).map_err(TrainError::Internal)?;
            }
            if needs[w.index()] {
                let xs = View {
                    data: xd,
                    offset: row0(xv.batch, xlen) + j * n,
                    rows: kn,
                    cols: cj,
                    rs: xlen,
                    cs: 1,
                };
                let dst = ViewMut {
                    offset: row0(wv.batch, wv.len()) + base,
                    data: bufs.of(w, wv.size())?,
                    rows: ri,
                    cols: cj,
                    rs: n,
                    cs: 1,
                };
                add_product(dst, grad(true), xs).map_err(TrainError::Internal)?;
            }
        }
    }
    Ok(())
}

/// The gradient of an MFU op with an operand (`g` of `y = a op b`) into both operands: the
/// float derivatives; `max` passes it to the larger operand, half to each on a tie.
fn binary_gradient(
    op: BinOp,
    mut g: Vec<f64>,
    y: &Value,
    (a, b): (ValueId, ValueId),
    (values, needs): (&Values, &[bool]),
    bufs: &mut Buffers,
) -> Result<(), TrainError> {
    let (av, bv) = (value(values, a)?, value(values, b)?);
    let n = y.len();
    if av.len() != n || bv.len() != n {
        return Err(TrainError::Internal(format!(
            "a binary op of {} and {} lanes to {n}",
            av.len(),
            bv.len()
        )));
    }
    // The share of `g` the first operand takes where the operands are `p` and `q` (`max`).
    let larger = |p: f64, q: f64| match () {
        _ if p > q => 1.0,
        _ if p == q => 0.5,
        _ => 0.0,
    };
    // `b`'s gradient added in from `g`, then `g` made `a`'s in place.
    if needs[b.index()] {
        let dst = bufs.of(b, bv.size())?;
        for k in 0..y.batch {
            let gk = &g[k * n..(k + 1) * n];
            let d = &mut dst[item_range(bv.batch, n, k)];
            match op {
                BinOp::Add => add(d, gk),
                BinOp::Sub => d.iter_mut().zip(gk).for_each(|(d, g)| *d -= g),
                BinOp::Mul => {
                    for ((d, g), a) in d.iter_mut().zip(gk).zip(av.item(k)?) {
                        *d += g * a;
                    }
                }
                BinOp::Max => {
                    let (ak, bk) = (av.item(k)?, bv.item(k)?);
                    for (((d, g), a), b) in d.iter_mut().zip(gk).zip(ak).zip(bk) {
                        *d += g * larger(*b, *a);
                    }
                }
            }
        }
    }
    if needs[a.index()] {
        for k in 0..y.batch {
            let gk = &mut g[k * n..(k + 1) * n];
            match op {
                BinOp::Add | BinOp::Sub => {}
                BinOp::Mul => gk.iter_mut().zip(bv.item(k)?).for_each(|(g, b)| *g *= b),
                BinOp::Max => {
                    let (ak, bk) = (av.item(k)?, bv.item(k)?);
                    for ((g, a), b) in gk.iter_mut().zip(ak).zip(bk) {
                        *g *= larger(*a, *b);
                    }
                }
            }
        }
        bufs.deposit(a, av, g, y.batch)?;
    }
    Ok(())
}

/// The gradient of an MFU op on the carried vector (`g` of `y = op(x)`) into `x`, made from `g`
/// in place: the true function's derivative at `x` (softmax: its Jacobian over every lane of
/// the value).
fn unary_gradient(op: UnOp, mut g: Vec<f64>, y: &Value, x: &Value) -> Result<Vec<f64>, TrainError> {
    if op == UnOp::Pass {
        return Ok(g);
    }
    let n = x.len();
    for k in 0..y.batch {
        let (xk, gk) = (x.item(k)?, &mut g[k * n..(k + 1) * n]);
        match op {
            UnOp::Relu => {
                for (g, x) in gk.iter_mut().zip(xk) {
                    *g = if *x > 0.0 { *g } else { 0.0 };
                }
            }
            UnOp::Pass => {}
            UnOp::Table(a) => {
                for (g, x) in gk.iter_mut().zip(xk) {
                    *g *= a.derivative(*x, a.eval(*x));
                }
            }
            UnOp::Softmax => {
                let top = xk.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = xk.iter().map(|x| (x - top).exp()).collect();
                let sum: f64 = e.iter().sum();
                let dot: f64 = e.iter().zip(gk.iter()).map(|(e, g)| e / sum * g).sum();
                for (g, e) in gk.iter_mut().zip(&e) {
                    *g = e / sum * (*g - dot);
                }
            }
        }
    }
    Ok(g)
}
