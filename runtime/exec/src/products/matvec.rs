//! One product `y = W x` on the first path that applies: the integer kernel, the float
//! path's chunked or bounded matmul, exact slices, or element by element; and the CPU custom
//! ops of the float path.

use super::bounded::BoundedWeights;
use super::float::{FloatPath, arrange_w};
use super::{Operands, product_spec};
use crate::matmul::MatVec;
use crate::state::Path;
use crate::state::{Executor, Failure};
use crate::tensors::{Map1, host_vec, with_host};
use crate::{intdot, matmul};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use nnp_lowering::swgraph::ValueId;
use std::sync::Arc;

impl<'a> Executor<'a> {
    /// `y = W x`, exactly, by the first of these paths that applies:
    /// 0. on CPUs with AVX2 and FMA (unless `float_matmul`), data whose runs are small
    ///    integers times a power of two (BFP up to 12-bit mantissas, checked on the data):
    ///    integer tile products with exact sums ([`intdot`]);
    /// 1. `FloatPath::Chunked`, chunks proven exact from the formats (BFP tiles by default): one
    ///    f32 or f64 matmul gives the exact per-chunk partials;
    /// 2. `FloatPath::Bounded`, products exact in f64 but not their tile sums (fp16, fp32):
    ///    one f64 matmul, each sum's rounding proven from an error bound or the sum redone
    ///    exactly ([`matmul::round_bounded`], [`matmul::round_bounded_seq`]);
    /// 3. otherwise the values are split into slices whose pairwise tile products are exact
    ///    ([`matmul::slices`]), one matmul per slice pair;
    /// 4. non-finite data (or data needing too many slices): every product exact, element-wise.
    ///
    /// The partials of 1, 3 and 4 are then summed exactly and rounded once
    /// ([`matmul::sum_partials`]).
    pub(crate) fn matvec(
        &mut self,
        node: usize,
        spec: &MatVec,
        x: ValueId,
        w: ValueId,
        path: FloatPath,
    ) -> Result<Tensor, Failure> {
        let b = self.batch_of(x)?;
        let operands = self.operands(x, w, b);
        if let Some(y) = self.gpu_product(node, spec, operands)? {
            return Ok(y);
        }
        if let Some(y) = self.int_product(node, spec, operands)? {
            return Ok(y);
        }
        let xt = self.vector(x)?;
        match path {
            FloatPath::Bounded => self.bounded_product(node, spec, operands, &xt),
            FloatPath::Chunked(k, dtype) => self.chunked_product(spec, operands, &xt, k, dtype),
            FloatPath::Sliced => self.float_slices_product(spec, operands, &xt),
        }
    }

    /// Path 0: the integer kernel on the CPU, where the operands have integer forms.
    /// Operands with more bits per run than one integer unit holds take it in slices (exact
    /// accumulation only: no weights are sliced for the others, which
    /// `SlicedWeights::matvec` refuses).
    fn int_product(
        &mut self,
        node: usize,
        spec: &MatVec,
        operands: Operands,
    ) -> Result<Option<Tensor>, Failure> {
        if !(self.int_products && intdot::supports(spec.n)) {
            return Ok(None);
        }
        let kernel = intdot::Kernel::best();
        let y = if let Some((wi, xi)) = self.int_operands(spec, operands)? {
            if intdot::on_bytes(kernel, &wi, &xi) {
                self.paths.insert((Path::Bytes, node));
            }
            Some(intdot::matvec(spec, &wi, &xi, kernel))
        } else if spec.accumulation == nnp_grammar::Accumulation::Exact
            && let Some(y) = self.sliced_product(spec, operands)?
        {
            self.paths.insert((Path::Slices, node));
            Some(y)
        } else {
            None
        };
        let Some(y) = y else { return Ok(None) };
        self.paths.insert((Path::IntKernel, node));
        let shape = (operands.b, spec.rows * spec.n);
        Ok(Some(Tensor::from_vec(y, shape, &self.dev)?))
    }

    /// Products that read no other's value, in `groups` of one weight stack and spec each,
    /// on the integer kernel in one parallel pass: each group as one product over its
    /// vectors' items stacked (an LSTM's `W x_t` of every step: the stack read once for all
    /// of them instead of once per step), and every group's tasks together (the four gates of
    /// a step: one wait for the pool instead of four). Each item's sums are its own, so each
    /// value is the bits of its product alone. By group, the values of its products; `None`
    /// (nothing done) where one of them does not take the integer kernel or the stacked
    /// vector does not fit it: the caller then computes them one by one.
    pub(crate) fn products_together(
        &mut self,
        groups: &[Vec<usize>],
    ) -> Result<Vec<Option<Vec<Tensor>>>, Failure> {
        if !(self.int_products && self.gpu.is_none() && intdot::supports(self.native)) {
            return Ok(vec![None; groups.len()]);
        }
        let mut ready = Vec::new();
        for (g, nodes) in groups.iter().enumerate() {
            if let Some(operands) = self.stacked_operands(nodes)? {
                ready.push((g, operands));
            }
        }
        let products: Vec<_> = ready
            .iter()
            .map(|(_, (spec, w, x, _))| (spec, w.as_ref(), x.as_ref()))
            .collect();
        let kernel = intdot::Kernel::best();
        let ys = intdot::matvecs(&products, kernel);
        let mut values: Vec<Option<Vec<Tensor>>> = vec![None; groups.len()];
        for ((g, (spec, w, x, items)), y) in ready.iter().zip(ys) {
            let bytes = intdot::on_bytes(kernel, w, x);
            let width = spec.rows * spec.n;
            let mut rest = y.as_slice();
            let mut group = Vec::with_capacity(items.len());
            for (&node, &b) in groups[*g].iter().zip(items) {
                let (mine, after) = rest.split_at(b * width);
                rest = after;
                group.push(Tensor::from_slice(mine, (b, width), &self.dev)?);
                self.paths.insert((Path::IntKernel, node));
                if bytes {
                    self.paths.insert((Path::Bytes, node));
                }
                if items.len() > 1 {
                    self.paths.insert((Path::Stacked, node));
                }
            }
            values[*g] = Some(group);
        }
        Ok(values)
    }

    /// The operands of products `nodes` of one weight stack and spec as one product on the
    /// integer kernel: its spec, the stack, the vectors stacked, and each one's items; `None`
    /// where one does not take the kernel or the stacked vector does not fit it.
    fn stacked_operands(&mut self, nodes: &[usize]) -> Result<Option<Stacked>, Failure> {
        let mut stack = None;
        let mut parts = Vec::with_capacity(nodes.len());
        for &node in nodes {
            let Some((spec, x, w)) = product_spec(&self.graph.nodes[node].op, self.native) else {
                return Err(
                    crate::internal("products together of a node that is no product").into(),
                );
            };
            let b = self.batch_of(x)?;
            let Some((wi, xi)) = self.int_operands(&spec, self.operands(x, w, b))? else {
                return Ok(None);
            };
            stack = Some((spec, wi));
            parts.push(xi);
        }
        let refs: Vec<&intdot::IntVector> = parts.iter().map(|p| p.as_ref()).collect();
        let Some((spec, wi)) = stack else {
            return Ok(None);
        };
        let items = parts.iter().map(|p| p.batch()).collect();
        let xs = match parts.as_slice() {
            [one] => one.clone(),
            _ => match intdot::IntVector::stacked(&refs) {
                Some(xs) => Arc::new(xs),
                None => return Ok(None),
            },
        };
        Ok(intdot::fits(&wi, &xs).then_some((spec, wi, xs, items)))
    }

    /// Path 2: one f64 matmul, each sum's rounding proven from an error bound or the sum
    /// redone exactly.
    fn bounded_product(
        &mut self,
        node: usize,
        spec: &MatVec,
        Operands {
            w, b, cacheable, ..
        }: Operands,
        xt: &Tensor,
    ) -> Result<Tensor, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let seq = matmul::seq_format(spec.accumulation);
        let key = (w, seq.is_some());
        let bw = match self.caches.bounded.get(&key) {
            Some(bw) if cacheable => bw.clone(),
            _ => {
                let t = self.weights(w)?;
                let bw = Arc::new(BoundedWeights::new(&t, rows, cols, n, seq.is_some())?);
                if cacheable {
                    self.caches.bounded.insert(key, bw.clone());
                }
                bw
            }
        };
        let xc = xt
            .contiguous()?
            .to_device(&Device::Cpu)?
            .to_dtype(DType::F64)?;
        let y = match seq {
            None => {
                let mut y = host_vec(&xc.matmul(&bw.w.t()?)?)?;
                with_host(&xc, |xs| {
                    with_host(&bw.w, |ws| {
                        matmul::round_bounded(spec, xs, ws, &bw.norms, &mut y)
                    })
                })??;
                y
            }
            Some(seq) => {
                // Each tile column's sums: [cols, b, n] x [cols, n, rows * n].
                let xj = xc.reshape((b, cols, n))?.transpose(0, 1)?.contiguous()?;
                let mut y = host_vec(&xj.matmul(&bw.w.transpose(1, 2)?)?)?;
                with_host(&xc, |xs| {
                    with_host(&bw.w, |ws| {
                        matmul::round_bounded_seq(spec, &seq, xs, ws, &bw.norms, &mut y)
                    })
                })??
            }
        };
        self.paths.insert((Path::Bounded, node));
        Ok(Tensor::from_vec(y, (b, rows * n), &self.dev)?)
    }

    /// Path 1: one f32 or f64 matmul of chunks of `k` proven exact, its partials summed
    /// exactly.
    fn chunked_product(
        &mut self,
        spec: &MatVec,
        Operands { x, w, b, cacheable }: Operands,
        xt: &Tensor,
        k: usize,
        dtype: DType,
    ) -> Result<Tensor, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let wa = match self.caches.arranged.get(&(w, k, dtype)) {
            Some(t) if cacheable => t.clone(),
            _ => {
                let t = arrange_w(&self.weights(w)?, rows, cols, n, k)?.to_dtype(dtype)?;
                if cacheable {
                    self.caches.arranged.insert((w, k, dtype), t.clone());
                }
                t
            }
        };
        // The vector side, once per run for every product that reads it (the four gates of an
        // LSTM step share x_t and h_t): transposed and converted in one pass.
        let xa = match self.vectors.arranged.get(&(x, k)) {
            Some(t) if t.dtype() == dtype => t.clone(),
            _ => {
                let t = xt
                    .contiguous()?
                    .to_device(&Device::Cpu)?
                    .apply_op1_no_bwd(&TransposeTo(dtype))?
                    .reshape((cols * n / k, k, b))?
                    .to_device(&self.dev)?;
                self.vectors.arranged.insert((x, k), t.clone());
                t
            }
        };
        // [chunks, rows*n, b], exact per chunk.
        let y = sum_partials(spec, vec![wa.matmul(&xa)?], k, b)?;
        Ok(y.to_device(&self.dev)?)
    }

    /// Paths 3 and 4: slices whose pairwise tile products are exact, one matmul per slice
    /// pair; else every product exact, element-wise.
    fn float_slices_product(
        &mut self,
        spec: &MatVec,
        Operands {
            w, b, cacheable, ..
        }: Operands,
        xt: &Tensor,
    ) -> Result<Tensor, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let beta = matmul::slice_bits(n);
        if !cacheable || !self.caches.sliced.contains_key(&w) {
            let wv = host_vec(&self.weights(w)?)?;
            let sl = match matmul::slices(&wv, n, beta) {
                Some(sl) => Some(
                    sl.into_iter()
                        .map(|v| {
                            let t = Tensor::from_vec(v, (1, rows * cols, n, n), &self.dev)?;
                            arrange_w(&t, rows, cols, n, n)
                        })
                        .collect::<candle_core::Result<Vec<_>>>()?,
                ),
                None => None,
            };
            // A non-constant stack is replaced by the next run's (or call's) value.
            self.caches.sliced.insert(w, sl);
        }
        let xv = host_vec(xt)?;
        let ws = self.caches.sliced.get(&w).cloned().flatten();
        if let (Some(ws), Some(xs)) = (ws, matmul::slices(&xv, n, beta)) {
            let mut parts = Vec::with_capacity(ws.len() * xs.len());
            for xsl in xs {
                let xa = arrange_x(
                    &Tensor::from_vec(xsl, (b, cols * n), &self.dev)?,
                    b,
                    cols,
                    n,
                    n,
                )?;
                for wsl in &ws {
                    parts.push(wsl.matmul(&xa)?);
                }
            }
            return Ok(sum_partials(spec, parts, n, b)?.to_device(&self.dev)?);
        }
        let wv = Arc::new(host_vec(&self.weights(w)?)?);
        let xc = xt.contiguous()?.to_device(&Device::Cpu)?;
        let s = *spec;
        let y = xc.apply_op1_no_bwd(&Map1("matvec_exact", move |xs: &[f64]| {
            (
                matmul::matvec_exact(&s, xs, b, &wv),
                Shape::from((b, rows * n)),
            )
        }))?;
        Ok(y.to_device(&self.dev)?)
    }
}

/// One product over the vectors of several stacked ([`Executor::stacked_operands`]): its
/// spec, weight stack and vector, and each part's items.
type Stacked = (
    MatVec,
    Arc<intdot::IntWeights>,
    Arc<intdot::IntVector>,
    Vec<usize>,
);

/// The partials `parts` of chunks of `k` (`[chunks, rows*n, b]` each) summed exactly and
/// rounded once ([`matmul::sum_partials`]).
fn sum_partials(spec: &MatVec, parts: Vec<Tensor>, k: usize, b: usize) -> Result<Tensor, Failure> {
    let pairs = parts.len();
    let p = match parts.as_slice() {
        [one] => one.clone(),
        _ => Tensor::cat(&parts, 0)?,
    };
    let p = p.contiguous()?.to_device(&Device::Cpu)?;
    Ok(p.apply_op1_no_bwd(&SumPartials {
        spec: *spec,
        k,
        pairs,
        b,
    })?)
}

/// A vector `[b, cols*n]` as `[chunks, k, b]`.
fn arrange_x(t: &Tensor, b: usize, cols: usize, n: usize, k: usize) -> candle_core::Result<Tensor> {
    t.reshape((b, cols * n / k, k))?
        .permute((1, 2, 0))?
        .contiguous()
}

/// A contiguous f64 matrix `[r, c]` transposed to `[c, r]` and converted to f32 (exact for
/// values [`matmul::exact_chunk_f32`] admits) or kept f64, in cache-sized tiles.
struct TransposeTo(DType);

impl CustomOp1 for TransposeTo {
    fn name(&self) -> &'static str {
        "transpose_to"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F64(v), Some((a, e))) = (s, l.contiguous_offsets()) else {
            candle_core::bail!("transpose_to: expected contiguous f64 data")
        };
        let (r, c) = l.shape().dims2()?;
        let v = &v[a..e];
        let storage = match self.0 {
            DType::F32 => CpuStorage::F32(matmul::transpose_map(v, r, c, |x| x as f32)),
            DType::F64 => CpuStorage::F64(matmul::transpose_map(v, r, c, |x| x)),
            other => candle_core::bail!("transpose_to: unsupported dtype {other:?}"),
        };
        Ok((storage, Shape::from((c, r))))
    }
}

/// [`matmul::sum_partials`] as a CPU custom op on f32 or f64 partials.
struct SumPartials {
    spec: MatVec,
    k: usize,
    pairs: usize,
    b: usize,
}

impl CustomOp1 for SumPartials {
    fn name(&self) -> &'static str {
        "sum_partials"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let Some((a, e)) = l.contiguous_offsets() else {
            candle_core::bail!("sum_partials: expected contiguous data")
        };
        let (spec, k, pairs, b) = (&self.spec, self.k, self.pairs, self.b);
        let out = match s {
            CpuStorage::F32(v) => matmul::sum_partials(spec, k, pairs, &v[a..e], b),
            CpuStorage::F64(v) => matmul::sum_partials(spec, k, pairs, &v[a..e], b),
            _ => candle_core::bail!("sum_partials: expected f32 or f64 data"),
        };
        Ok((CpuStorage::F64(out), Shape::from((b, spec.rows * spec.n))))
    }
}
