//! The evaluation of one node by the pass's [`Executor`]: every op but the products' operands
//! ([`super::products`]) and the weight stacks and vectors prepared in one pass.

use super::mfu::ActTable;
use super::products::{float_path, product_spec};
use super::state::{Executor, Failure};
use super::tensors::{Map1, broadcast_batch, host_slice, pad_dim};
use super::{ExecError, fused, internal, mfu, quant};
use candle_core::{DType, Device, Shape, Tensor};
use nnp_lowering::swgraph::{Op, TileLayout, Ty, UnOp, ValueId};
use nnp_numerics::FloatFormat;
use rayon::prelude::*;

impl<'a> Executor<'a> {
    pub(super) fn value(&self, v: ValueId) -> Result<&Tensor, ExecError> {
        self.values
            .get(v)
            .and_then(Option::as_ref)
            .ok_or_else(|| internal(&format!("{v} is used after it was freed")))
    }

    /// The values of host tensor `name`: this run's items of an input (`input`), or the
    /// weights; checked to be `[data.batch, shape]` (weights: `shape`).
    pub(super) fn host_tensor(
        &self,
        name: &str,
        input: bool,
        shape: &[usize],
    ) -> Result<&'a [f32], ExecError> {
        let (tensors, kind) = match input {
            true => (&self.data.inputs, "input"),
            false => (&self.data.weights, "weights"),
        };
        let t = tensors.get(name).ok_or_else(|| ExecError::Missing {
            name: name.to_string(),
            kind,
        })?;
        let mut want: Vec<usize> = input.then_some(self.data.batch).into_iter().collect();
        want.extend(shape);
        if t.shape != want {
            return Err(ExecError::Shape {
                name: name.to_string(),
                found: t.shape.clone(),
                expected: want,
            });
        }
        // The fields are public: a tensor built by hand may not fill its shape.
        t.check_filled(name)?;
        if !input {
            return Ok(&t.data);
        }
        let per_item: usize = shape.iter().product();
        Ok(&t.data[self.items.start * per_item..self.items.end * per_item])
    }

    /// This run's batch: its items of the inputs.
    pub(super) fn batch(&self) -> usize {
        self.items.len()
    }

    /// The host tensor `name` ([`Executor::host_tensor`]) as an f64 tensor `[batch or 1,
    /// shape]`.
    fn host(&self, name: &str, input: bool, shape: &[usize]) -> Result<Tensor, Failure> {
        let t = self.host_tensor(name, input, shape)?;
        let mut dims = vec![if input { self.batch() } else { 1 }];
        dims.extend(shape);
        // In parallel: a benchmark's inputs are megabytes, converted once per run.
        let v: Vec<f64> = t
            .par_iter()
            .with_min_len(quant::PAR_MIN)
            .map(|&x| f64::from(x))
            .collect();
        Ok(Tensor::from_vec(v, dims, &self.dev)?)
    }

    pub(super) fn eval(&mut self, i: usize) -> Result<Tensor, Failure> {
        let node = &self.graph.nodes[i];
        let n = self.native;
        Ok(match &node.op {
            Op::Input { name, shape } => self.host(name, true, shape)?,
            Op::Weight { name, shape } => self.host(name, false, shape)?,
            Op::Zero { shape } => {
                let mut dims = vec![1];
                dims.extend(shape);
                Tensor::zeros(dims, DType::F64, &self.dev)?
            }
            Op::PadToTiles { src, layout, pad } => {
                let t = self.value(*src)?;
                let Ty::Logical { shape } = &self.graph.node(*src).ty else {
                    return Err(internal("pad_to_tiles of a non-logical value").into());
                };
                let b = t.dims()[0];
                let c = shape.last().copied().unwrap_or(1);
                let rows: usize = shape[..shape.len() - 1].iter().product();
                let ct = c.div_ceil(n);
                match layout {
                    TileLayout::Vector => {
                        let t = t.reshape((b, rows, c))?;
                        let t = pad_dim(&t, 2, ct * n, *pad)?;
                        t.reshape((b, rows * ct * n))?
                    }
                    TileLayout::Matrix => {
                        let r = shape[0];
                        let rt = r.div_ceil(n);
                        let t = pad_dim(&pad_dim(t, 2, ct * n, 0.0)?, 1, rt * n, 0.0)?;
                        // [b, rt, n, ct, n] -> [b, rt, ct, n, n]: row runs of n copied, one row
                        // band per task (candle's strided copy of this permute was 4x slower).
                        let host = t.contiguous()?.to_device(&Device::Cpu)?;
                        host.apply_op1_no_bwd(&Map1("pad_to_tiles", |xs: &[f64]| {
                            let mut out = vec![0.0; xs.len()];
                            out.par_chunks_mut(ct * n * n)
                                .zip(xs.par_chunks(ct * n * n))
                                .for_each(|(o, band)| {
                                    for (r, row) in band.chunks(ct * n).enumerate() {
                                        for (j, run) in row.chunks(n).enumerate() {
                                            o[(j * n + r) * n..][..n].copy_from_slice(run);
                                        }
                                    }
                                });
                            (out, Shape::from((b, rt * ct, n, n)))
                        }))?
                        .to_device(&self.dev)?
                    }
                }
            }
            Op::Unpad { src, len } => self.value(*src)?.narrow(1, 0, *len)?.contiguous()?,
            // Rounding a value that is rounded to the format already changes nothing.
            Op::Round { src, format } if self.is_rounded(*src, format) => self.value(*src)?.clone(),
            Op::Round { src, format } => self
                .value(*src)?
                .contiguous()?
                .apply_op1_no_bwd(&quant::RoundOp(*format))?,
            Op::Quantize { src, format, axis } => {
                let op = quant::QuantizeOp {
                    format: *format,
                    len: axis.run(n),
                    native: n,
                };
                self.value(*src)?.contiguous()?.apply_op1_no_bwd(&op)?
            }
            Op::Concat { parts } => {
                let stack = matches!(node.ty, Ty::TileStack { .. });
                let unit = if stack { 1 } else { n };
                let mut ts = Vec::with_capacity(parts.len());
                for p in parts {
                    let t = self.value(p.value)?;
                    ts.push(t.narrow(1, p.start as usize * unit, p.count as usize * unit)?);
                }
                let ts = broadcast_batch(&ts)?;
                Tensor::cat(&ts, 1)?
            }
            Op::TiledMatVec {
                vector_format,
                matrix_format,
                ..
            } => {
                let (spec, x, w) = product_spec(&node.op, n)
                    .ok_or_else(|| internal("a product node without a product spec"))?;
                let path = float_path(vector_format, matrix_format, &spec);
                self.matvec(i, &spec, x, w, path)?
            }
            Op::Unary {
                op: UnOp::Softmax,
                src,
                format,
                table,
            } => {
                let tab = self.table(UnOp::Softmax, format, table.as_deref())?;
                let t = self.value(*src)?.clone();
                let lanes = t.dims().get(1).copied().unwrap_or(1);
                t.contiguous()?
                    .apply_op1_no_bwd(&mfu::SoftmaxOp { exp: tab, lanes })?
            }
            // Every other MFU op outside a region: a candle op of its own (`fused::MfuOp`).
            Op::Binary { .. } | Op::Unary { .. } => self.eval_mfu_op(i)?,
            Op::Output { .. } => return Err(internal("output evaluated as a value").into()),
        })
    }

    /// Element-wise MFU nodes (binary ops, relu, pass, table activations on vectors of one
    /// length, each after its operands), evaluated together ([`fused`]): the values of the
    /// nodes whose `kept` is set, in node order, and what `scan` found in the values of the
    /// nodes whose `scanned` is set (`scan(node, first_item, rows, lanes, state)`: whole rows
    /// of `lanes` values, items numbered in the run).
    pub(super) fn eval_mfu<S: Default + Send>(
        &mut self,
        nodes: &[usize],
        kept: &[bool],
        scanned: &[bool],
        scan: impl Fn(usize, usize, &[f64], usize, &mut S) + Sync,
    ) -> Result<(Vec<Tensor>, Vec<S>), Failure> {
        let len = match nodes.first() {
            Some(&k) => self.mfu_len(k)?,
            None => return Err(internal("an empty region").into()),
        };
        let (steps, outer) = self.mfu_steps(nodes)?;
        let outer = outer
            .into_iter()
            .map(|v| self.host_operand(v))
            .collect::<Result<Vec<_>, _>>()?;
        // The batch is that of the widest operand; a batch-1 operand is broadcast.
        let batch_of = |t: &Tensor| t.dims().first().copied().unwrap_or(1);
        let batch = outer.iter().map(batch_of).max().unwrap_or(1);
        let guards: Vec<_> = outer.iter().map(Tensor::storage_and_layout).collect();
        let mut slices: Vec<&[f64]> = Vec::with_capacity(guards.len());
        for (storage, layout) in &guards {
            match host_slice(storage, layout) {
                Some(v) if v.len() == len || v.len() == batch * len => slices.push(v),
                _ => return Err(internal("a region operand is not a contiguous f64 vector").into()),
            }
        }
        let first = self.items.start;
        let pass = fused::RegionPass {
            steps: &steps,
            kept,
            scanned,
            outer: &slices,
            batch,
            len,
        };
        let (values, found) = pass.run(|k, r0, rows, s| scan(nodes[k], first + r0, rows, len, s));
        let values = values
            .into_iter()
            .map(|v| Tensor::from_vec(v, (batch, len), &self.dev))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok((values, found))
    }

    /// The length of the vectors MFU node `i` computes on.
    fn mfu_len(&self, i: usize) -> Result<usize, Failure> {
        match &self.graph.nodes[i].ty {
            Ty::Vector { tiles } => Ok(*tiles as usize * self.native),
            _ => Err(internal("an MFU op whose value is not a vector").into()),
        }
    }

    /// The steps that compute MFU nodes `nodes` together, and the values from outside they
    /// read, each once, in the order of their `Src::Outer` indices (an operand that is an
    /// earlier node of `nodes` is `Src::Local`).
    fn mfu_steps(&mut self, nodes: &[usize]) -> Result<(Vec<fused::Step>, Vec<ValueId>), Failure> {
        let mut outer: Vec<ValueId> = Vec::new();
        let mut src = |v: ValueId| match nodes.iter().position(|&k| k == v.index()) {
            Some(j) => fused::Src::Local(j),
            None => fused::Src::Outer(match outer.iter().position(|w| *w == v) {
                Some(at) => at,
                None => {
                    outer.push(v);
                    outer.len() - 1
                }
            }),
        };
        let steps = nodes
            .iter()
            .map(|&k| self.mfu_step(k, &mut src))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((steps, outer))
    }

    /// The step that computes MFU node `k`, its operands' rows found by `src`.
    fn mfu_step(
        &mut self,
        k: usize,
        src: &mut impl FnMut(ValueId) -> fused::Src,
    ) -> Result<fused::Step, Failure> {
        use fused::Step;
        let g = self.graph;
        Ok(match &g.nodes[k].op {
            Op::Binary { op, a, b, format } => Step::Binary {
                op: *op,
                format: *format,
                a: src(*a),
                b: src(*b),
                rounded: [self.is_rounded(*a, format), self.is_rounded(*b, format)],
            },
            Op::Unary {
                op: UnOp::Relu,
                src: x,
                format,
                ..
            } => Step::Relu(*format, src(*x)),
            Op::Unary {
                op: UnOp::Pass,
                src: x,
                format,
                ..
            } => Step::Pass(*format, src(*x)),
            Op::Unary {
                op,
                src: x,
                format,
                table,
            } => Step::Activation {
                table: self.table(*op, format, table.as_deref())?,
                x: src(*x),
                rounded: self.is_rounded(*x, format),
            },
            _ => return Err(internal("a node that is not an MFU op").into()),
        })
    }

    /// The value `v` as an MFU kernel reads it: contiguous on the host.
    fn host_operand(&self, v: ValueId) -> Result<Tensor, Failure> {
        Ok(self.value(v)?.contiguous()?.to_device(&Device::Cpu)?)
    }

    /// MFU node `i` alone, as a candle op ([`fused::MfuOp`]) on its operands' tensors.
    fn eval_mfu_op(&mut self, i: usize) -> Result<Tensor, Failure> {
        let len = self.mfu_len(i)?;
        let (mut steps, operands) = self.mfu_steps(&[i])?;
        let step = steps
            .pop()
            .ok_or_else(|| internal("an MFU op gave no step"))?;
        let op = fused::MfuOp { step, len };
        // On the values' own device: the op's `cpu_fwd` or `cuda_fwd`.
        let operand = |v| -> Result<Tensor, Failure> { Ok(self.value(v)?.contiguous()?) };
        Ok(match operands[..] {
            [x] => operand(x)?.apply_op1_no_bwd(&op)?,
            [a, b] => operand(a)?.apply_op2_no_bwd(&operand(b)?, &op)?,
            _ => return Err(internal("an MFU op of no or three operands").into()),
        })
    }

    /// Whether every element of `v` is rounded to `f` already ([`super::rounded`]).
    fn is_rounded(&self, v: ValueId, f: &FloatFormat) -> bool {
        self.rounded.get(v).copied().flatten() == Some(*f)
    }

    fn table(
        &mut self,
        op: UnOp,
        f: &FloatFormat,
        file: Option<&str>,
    ) -> Result<ActTable, ExecError> {
        let key = (op, file.map(str::to_string), *f);
        if let Some(t) = self.caches.tables.get(&key) {
            return Ok(t.clone());
        }
        let kind = op
            .table()
            .ok_or_else(|| internal("table for a table-less op"))?;
        let t = ActTable::load(kind, f, file)?;
        self.caches.tables.insert(key, t.clone());
        Ok(t)
    }
}
