//! The differentiable twin of a software graph: every node as candle ops on f64 tensors that
//! candle's autograd differentiates.
//!
//! In [`Mode::Exact`] each node's value is the concordant graph's own (the values a run of
//! [`crate::Session`] with `keep_values` handed back, put in place by the [`Exact`]
//! custom op), so the forward pass is bit-identical to `nnpc run`; the float op beside it only
//! carries the gradient. In [`Mode::Float`] the float ops' values are the values: the float
//! model the firmware stands for (no quantization, true activation functions), which the
//! gradient checks differentiate by finite differences.
//!
//! The gradient of each op (docs/training.md):
//! - `round` and `quantize`: straight through (identity), zero where the element saturates
//!   ([`super::ste`]);
//! - the product: the float matrix-vector product of the tiles, the tile layout undone;
//! - MFU ops: the float derivative of the true function (add, sub, mul, max, relu, pass,
//!   softmax over the value's lanes; a table activation's `Activation::derivative`);
//! - padding, slicing and concatenation: candle's own (pad lanes take no gradient).

use super::TrainError;
use super::ste::{self, Points};
use crate::WrittenValue;
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use nnp_lowering::swgraph::{BinOp, Op, SwGraph, TileLayout, Ty, UnOp, ValueId};
use nnp_numerics::Activation;
use std::collections::{BTreeMap, HashMap};

/// Where the twin's values come from.
pub(crate) enum Mode<'a> {
    /// The float ops' own values.
    Float,
    /// The concordant graph's values of a run on the same data, by node.
    Exact(&'a HashMap<ValueId, WrittenValue>),
}

/// What one pass of the twin made.
pub(crate) struct Pass {
    /// Every output by name, `[batch, ...declared shape]`, f64, tracking the gradient.
    pub outputs: BTreeMap<String, Tensor>,
    /// The point positions the `dynfixed` quantizers chose ([`ste::Points`]).
    pub points: Points,
}

/// The value `value` in place of its float op's, with the float op's gradient.
struct Exact {
    value: Vec<f64>,
}

impl CustomOp1 for Exact {
    fn name(&self) -> &'static str {
        "exact"
    }

    fn cpu_fwd(&self, _: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        if layout.shape().elem_count() != self.value.len() {
            candle_core::bail!(
                "exact value of {} elements for a {:?} tensor",
                self.value.len(),
                layout.shape()
            );
        }
        Ok((CpuStorage::F64(self.value.clone()), layout.shape().clone()))
    }

    fn bwd(&self, _: &Tensor, _: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.clone()))
    }
}

/// A table activation's true function (`Activation::eval`) with its derivative
/// (`Activation::derivative`), element by element in f64.
struct TableActivation(Activation);

impl CustomOp1 for TableActivation {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn cpu_fwd(&self, s: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F64(v), Some((start, end))) = (s, layout.contiguous_offsets()) else {
            candle_core::bail!("{}: not a contiguous f64 tensor", self.0.name());
        };
        let y = v[start..end].iter().map(|&x| self.0.eval(x)).collect();
        Ok((CpuStorage::F64(y), layout.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, y: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let xs = x.flatten_all()?.to_vec1::<f64>()?;
        let ys = y.flatten_all()?.to_vec1::<f64>()?;
        let d: Vec<f64> = xs
            .iter()
            .zip(&ys)
            .map(|(&x, &y)| self.0.derivative(x, y))
            .collect();
        Ok(Some(grad.mul(&Tensor::from_vec(
            d,
            x.shape(),
            x.device(),
        )?)?))
    }
}

/// One pass of `graph`'s twin on `inputs` (`[batch, ...shape]`) and `weights` (logical shape),
/// all f64 on the CPU.
pub(crate) fn forward(
    graph: &SwGraph,
    weights: &BTreeMap<String, Tensor>,
    inputs: &BTreeMap<String, Tensor>,
    mode: Mode,
) -> Result<Pass, TrainError> {
    let n = graph.native;
    let mut values: Vec<Option<Tensor>> = vec![None; graph.nodes.len()];
    let mut rows: BTreeMap<String, BTreeMap<usize, Tensor>> = BTreeMap::new();
    let mut points = Points::default();
    for (i, node) in graph.nodes.iter().enumerate() {
        let at = |e: candle_core::Error| TrainError::node(i, node.op.name(), &e);
        let get = |v: ValueId| -> Result<&Tensor, TrainError> {
            values[v.index()]
                .as_ref()
                .ok_or_else(|| TrainError::Internal(format!("{v} read before it is made")))
        };
        let float = match &node.op {
            Op::Input { name, .. } => named(inputs, name, "input")?.clone(),
            Op::Weight { name, .. } => named(weights, name, "weight")?.unsqueeze(0).map_err(at)?,
            Op::Zero { shape } => {
                let dims: Vec<usize> = std::iter::once(1).chain(shape.iter().copied()).collect();
                Tensor::zeros(dims, DType::F64, &Device::Cpu).map_err(at)?
            }
            Op::PadToTiles { src, layout, pad } => {
                let Ty::Logical { shape } = &graph.node(*src).ty else {
                    return Err(TrainError::Internal("pad_to_tiles of a tiled value".into()));
                };
                pad_to_tiles(get(*src)?, shape, *layout, *pad, n).map_err(at)?
            }
            Op::Unpad { src, len } => get(*src)?.narrow(1, 0, *len).map_err(at)?,
            Op::Round { src, format } => {
                let x = get(*src)?;
                let pass = ste::float_passes(format, &host(x).map_err(at)?);
                straight_through(x, pass).map_err(at)?
            }
            Op::Quantize { src, format, axis } => {
                let x = get(*src)?;
                let run = axis.run(n);
                let pass = ste::passes(format, &host(x).map_err(at)?, run, i, &mut points);
                straight_through(x, pass).map_err(at)?
            }
            Op::Concat { parts } => {
                let unit = if matches!(node.ty, Ty::TileStack { .. }) {
                    1
                } else {
                    n
                };
                let mut ts = Vec::with_capacity(parts.len());
                for p in parts {
                    let t = get(p.value)?;
                    let (start, len) = (p.start as usize * unit, p.count as usize * unit);
                    ts.push(t.narrow(1, start, len).map_err(at)?);
                }
                Tensor::cat(&same_batch(&ts).map_err(at)?, 1).map_err(at)?
            }
            Op::TiledMatVec {
                x, w, rows, cols, ..
            } => matvec(get(*x)?, get(*w)?, *rows as usize, *cols as usize, n).map_err(at)?,
            Op::Binary { op, a, b, .. } => {
                let (a, b) = (get(*a)?, get(*b)?);
                match op {
                    BinOp::Add => a.broadcast_add(b),
                    BinOp::Sub => a.broadcast_sub(b),
                    BinOp::Mul => a.broadcast_mul(b),
                    BinOp::Max => a.broadcast_maximum(b),
                }
                .map_err(at)?
            }
            Op::Unary { op, src, .. } => unary(*op, get(*src)?).map_err(at)?,
            Op::Output { name, row, src } => {
                let t = get(*src)?.clone();
                rows.entry(name.clone()).or_default().insert(*row, t);
                continue;
            }
        };
        let value = match (&mode, &node.op) {
            (Mode::Float, _) | (_, Op::Input { .. } | Op::Weight { .. } | Op::Zero { .. }) => float,
            (Mode::Exact(exact), _) => {
                let value = exact.get(&ValueId(i as u32)).ok_or_else(|| {
                    TrainError::Internal(format!("the run handed back no value for node {i}"))
                })?;
                let value = value.data.clone();
                float.apply_op1(Exact { value }).map_err(at)?
            }
        };
        values[i] = Some(value);
    }
    let mut outputs = BTreeMap::new();
    for o in &graph.outputs {
        let parts = rows.remove(&o.name).unwrap_or_default();
        if parts.len() != o.rows {
            return Err(TrainError::Internal(format!(
                "output `{}` has {} of its {} rows",
                o.name,
                parts.len(),
                o.rows
            )));
        }
        let at = |e: candle_core::Error| TrainError::node(0, "output", &e);
        let parts: Vec<Tensor> = parts.into_values().collect();
        let t = Tensor::stack(&same_batch(&parts).map_err(at)?, 1).map_err(at)?;
        let mut dims = vec![t.dim(0).map_err(at)?];
        dims.extend(&o.shape);
        outputs.insert(o.name.clone(), t.reshape(dims).map_err(at)?);
    }
    Ok(Pass { outputs, points })
}

fn named<'t>(
    tensors: &'t BTreeMap<String, Tensor>,
    name: &str,
    kind: &str,
) -> Result<&'t Tensor, TrainError> {
    tensors
        .get(name)
        .ok_or_else(|| TrainError::Internal(format!("no {kind} tensor `{name}`")))
}

/// The values of `t` on the host, in row-major order.
fn host(t: &Tensor) -> candle_core::Result<Vec<f64>> {
    t.flatten_all()?.to_vec1::<f64>()
}

/// `x`, with its gradient passed only where `pass` is set.
fn straight_through(x: &Tensor, pass: Option<Vec<u8>>) -> candle_core::Result<Tensor> {
    match pass {
        None => Ok(x.clone()),
        Some(mask) => {
            let mask = Tensor::from_vec(mask, x.shape(), x.device())?;
            mask.where_cond(x, &x.detach())
        }
    }
}

/// Parts of batch 1 broadcast to the batch of the others.
fn same_batch(ts: &[Tensor]) -> candle_core::Result<Vec<Tensor>> {
    let batch = ts.iter().map(|t| t.dim(0).unwrap_or(1)).max().unwrap_or(1);
    ts.iter()
        .map(|t| {
            let mut dims = t.dims().to_vec();
            if dims.first() == Some(&batch) {
                return Ok(t.clone());
            }
            dims[0] = batch;
            t.broadcast_as(dims)?.contiguous()
        })
        .collect()
}

/// A logical tensor `[b, ...shape]` as its register image (`docs/swgraph.md`).
fn pad_to_tiles(
    t: &Tensor,
    shape: &[usize],
    layout: TileLayout,
    pad: f64,
    n: usize,
) -> candle_core::Result<Tensor> {
    let b = t.dim(0)?;
    let c = shape.last().copied().unwrap_or(1);
    let rows: usize = shape[..shape.len().saturating_sub(1)].iter().product();
    let ct = c.div_ceil(n);
    match layout {
        TileLayout::Vector => {
            let t = t.reshape((b, rows, c))?;
            let t = if ct * n == c {
                t
            } else {
                let fill = (Tensor::ones((b, rows, ct * n - c), DType::F64, t.device())? * pad)?;
                Tensor::cat(&[&t, &fill], 2)?
            };
            t.reshape((b, rows * ct * n))
        }
        TileLayout::Matrix => {
            let r = shape.first().copied().unwrap_or(1);
            let rt = r.div_ceil(n);
            let t = t.reshape((b, r, c))?;
            let t = t.pad_with_zeros(2, 0, ct * n - c)?;
            let t = t.pad_with_zeros(1, 0, rt * n - r)?;
            // [b, rt, n, ct, n] -> [b, rt, ct, n, n]: tiles row-major, a tile's rows the
            // output lanes.
            t.reshape((b, rt, n, ct, n))?
                .permute((0, 1, 3, 2, 4))?
                .reshape((b, rt * ct, n, n))
        }
    }
}

/// `y = W x` of `rows x cols` tiles (row-major) as one float product: `x` `[bx, cols * N]`,
/// `w` `[bw, rows * cols, N, N]`.
fn matvec(
    x: &Tensor,
    w: &Tensor,
    rows: usize,
    cols: usize,
    n: usize,
) -> candle_core::Result<Tensor> {
    let bw = w.dim(0)?;
    // The tiles as one matrix [bw, rows * N, cols * N].
    let m = w
        .reshape((bw, rows, cols, n, n))?
        .permute((0, 1, 3, 2, 4))?
        .reshape((bw, rows * n, cols * n))?;
    if bw == 1 {
        return x.matmul(&m.squeeze(0)?.t()?);
    }
    let bx = x.dim(0)?;
    let x = if bx == bw {
        x.clone()
    } else {
        x.broadcast_as((bw, cols * n))?.contiguous()?
    };
    m.matmul(&x.unsqueeze(2)?)?.squeeze(2)
}

/// The true function of an MFU op on the carried vector.
fn unary(op: UnOp, x: &Tensor) -> candle_core::Result<Tensor> {
    match op {
        UnOp::Relu => x.relu(),
        UnOp::Pass => Ok(x.clone()),
        UnOp::Table(a) => x.contiguous()?.apply_op1(TableActivation(a)),
        UnOp::Softmax => {
            // Over every lane of the value, pad lanes included (as the hardware's).
            let top = x.max_keepdim(1)?.detach();
            let e = x.broadcast_sub(&top)?.exp()?;
            e.broadcast_div(&e.sum_keepdim(1)?)
        }
    }
}
