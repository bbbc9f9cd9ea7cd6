//! The twin of a software graph: the float model the firmware stands for, every node as
//! candle ops on f64 tensors (no quantization, true activation functions), and the values the
//! reverse pass ([`super::reverse`]) differentiates where no concordant run gave them (the
//! gradient checks' finite differences differentiate this model).
//!
//! The gradient of each op (docs/training.md, `reverse.rs`):
//! - `round` and `quantize`: straight through (identity), zero where the element saturates
//!   ([`super::ste`]);
//! - the product: the float matrix-vector product of the tiles, the tile layout undone;
//! - MFU ops: the float derivative of the true function (add, sub, mul, max, relu, pass,
//!   softmax over the value's lanes; a table activation's `Activation::derivative`);
//! - padding, slicing and concatenation: pad lanes take no gradient.

use super::TrainError;
use super::reverse::{Shaped, Value, Values};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use nnp_lowering::swgraph::{BinOp, Op, SwGraph, TileLayout, Ty, UnOp, ValueId};
use nnp_numerics::Activation;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// A table activation's true function (`Activation::eval`), element by element in f64.
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
}

/// Every node's value in the float model on `inputs` (`[batch, ...shape]`) and `weights`
/// (logical shape), all f64 on the CPU.
pub(crate) fn forward(
    graph: &SwGraph,
    weights: &BTreeMap<String, Tensor>,
    inputs: &BTreeMap<String, Tensor>,
) -> Result<Values<'static>, TrainError> {
    let n = graph.native;
    let mut values: Vec<Option<Tensor>> = vec![None; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        let at = |e: candle_core::Error| TrainError::node(i, node.op.name(), &e);
        let get = |v: ValueId| -> Result<&Tensor, TrainError> {
            values[v.index()]
                .as_ref()
                .ok_or_else(|| TrainError::Internal(format!("{v} read before it is made")))
        };
        let value = match &node.op {
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
            // The float model rounds and quantizes nothing.
            Op::Round { src, .. } | Op::Quantize { src, .. } => get(*src)?.clone(),
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
            Op::Output { .. } => continue,
        };
        values[i] = Some(value);
    }
    values
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let Some(t) = t else { return Ok(None) };
            let at = |e: candle_core::Error| TrainError::node(i, "value", &e);
            let batch = t.dim(0).map_err(at)?;
            let data = t.flatten_all().and_then(|t| t.to_vec1()).map_err(at)?;
            Ok(Some(Value::new(batch, Cow::Owned(data))))
        })
        .collect()
}

/// Every node's value of a concordant run: `written` (an [`crate::Execution::written`] of a
/// `keep_values` run, or of a run that kept the values the reverse pass reads) for the nodes
/// it computed, `weights` (logical shapes, flattened) and `inputs` (`[batch, ...]`, flattened)
/// for the leaves; a node the run did not keep, its shape alone.
pub(crate) fn exact<'a>(
    graph: &SwGraph,
    written: &'a HashMap<ValueId, crate::WrittenValue>,
    weights: &'a Shaped,
    inputs: &'a Shaped,
    batch: usize,
) -> Result<Values<'a>, TrainError> {
    let leaf = |map: &'a Shaped, name: &str, kind: &str| {
        map.get(name)
            .map(|(_, v)| Cow::Borrowed(v.as_slice()))
            .ok_or_else(|| TrainError::Internal(format!("no {kind} tensor `{name}`")))
    };
    let constant = &graph.plan().constant;
    let mut values = Vec::with_capacity(graph.nodes.len());
    for (i, node) in graph.nodes.iter().enumerate() {
        let value = match &node.op {
            Op::Output { .. } => None,
            Op::Input { name, .. } => Some(Value::new(batch, leaf(inputs, name, "input")?)),
            Op::Weight { name, .. } => Some(Value::new(1, leaf(weights, name, "weight")?)),
            Op::Zero { shape } => {
                Some(Value::new(1, Cow::Owned(vec![0.0; shape.iter().product()])))
            }
            _ => match written.get(&ValueId(i as u32)) {
                Some(w) => Some(Value::new(w.batch, Cow::Borrowed(w.data.as_slice()))),
                None => {
                    let batch = if constant[ValueId(i as u32)] {
                        1
                    } else {
                        batch
                    };
                    Some(Value::shape_only(batch, node.ty.elements(graph.native)))
                }
            },
        };
        values.push(value);
    }
    Ok(values)
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
