//! The products: their operands (weight stacks prepared, vectors quantized to integers) and
//! the path each takes (integer kernel, GPU, float matmul, slices, element by element).

use super::executor::{Executor, Failure};
use super::matmul::{MIN_CHUNK, MatVec};
use super::session::{Caches, Kept, Path, tally};
use super::tensors::{Map1, host_vec, with_host, with_host_rows};
use super::{ExecError, gpu, intdot, internal, matmul, prepare, quant};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};
use nnp_lowering::swgraph::{Op, SwGraph, ValueId};
use nnp_numerics::Format;
use std::collections::HashMap;
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
    pub(super) fn matvec(
        &mut self,
        node: usize,
        spec: &MatVec,
        x: ValueId,
        w: ValueId,
        path: FloatPath,
    ) -> Result<Tensor, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let b = self.batch_of(x)?;
        let s = *spec;
        let sum = |parts: Vec<Tensor>, k: usize| -> Result<Tensor, Failure> {
            let pairs = parts.len();
            let p = match parts.as_slice() {
                [one] => one.clone(),
                _ => Tensor::cat(&parts, 0)?,
            };
            let p = p.contiguous()?.to_device(&Device::Cpu)?;
            Ok(p.apply_op1_no_bwd(&SumPartials {
                spec: s,
                k,
                pairs,
                b,
            })?)
        };
        let operands = self.operands(x, w, b);
        let cacheable = operands.cacheable;
        // The integer kernel on the CPU: the GPU took this product already where it gives the
        // same bits (`prefetch_products`). Operands with more bits per run than one integer
        // unit holds take it in slices (exact accumulation only: no weights are sliced for
        // the others, which `SlicedWeights::matvec` refuses).
        if self.int && intdot::supports(n) {
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
            if let Some(y) = y {
                self.paths.insert((Path::IntKernel, node));
                return Ok(Tensor::from_vec(y, (b, rows * n), &self.dev)?);
            }
        }
        let xt = self.vector(x)?;
        if path == FloatPath::Bounded {
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
            return Ok(Tensor::from_vec(y, (b, rows * n), &self.dev)?);
        }
        if let FloatPath::Chunked(k, dtype) = path {
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
            // The vector side, once per run for every product that reads it (the four gates
            // of an LSTM step share x_t and h_t): transposed and converted in one pass.
            let xa = match self.arranged_x.get(&(x, k)) {
                Some(t) if t.dtype() == dtype => t.clone(),
                _ => {
                    let t = xt
                        .contiguous()?
                        .to_device(&Device::Cpu)?
                        .apply_op1_no_bwd(&TransposeTo(dtype))?
                        .reshape((cols * n / k, k, b))?
                        .to_device(&self.dev)?;
                    self.arranged_x.insert((x, k), t.clone());
                    t
                }
            };
            // [chunks, rows*n, b], exact per chunk.
            let y = sum(vec![wa.matmul(&xa)?], k)?;
            return Ok(y.to_device(&self.dev)?);
        }
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
        let xv = host_vec(&xt)?;
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
            return Ok(sum(parts, n)?.to_device(&self.dev)?);
        }
        let wv = Arc::new(host_vec(&self.weights(w)?)?);
        let xc = xt.contiguous()?.to_device(&Device::Cpu)?;
        let y = xc.apply_op1_no_bwd(&Map1("matvec_exact", move |xs: &[f64]| {
            (
                matmul::matvec_exact(&s, xs, b, &wv),
                Shape::from((b, rows * n)),
            )
        }))?;
        Ok(y.to_device(&self.dev)?)
    }

    /// Keep the weight stack `w` (value `t`, read by products of `(rows, cols)` only) as
    /// integers alone, when the integer kernel runs and the f64 tensor can be restored bit
    /// for bit; whether it is.
    pub(super) fn keep_as_ints(
        &mut self,
        w: ValueId,
        t: &Tensor,
        (rows, cols): (usize, usize),
    ) -> Result<bool, Failure> {
        if !self.int || !intdot::supports(self.n) || t.dtype() != DType::F64 {
            return Ok(false);
        }
        let wi = int_weights(t, rows, cols, self.n)?;
        Ok(self.cache_ints(w, wi, t.dims()))
    }

    /// Compute the weight stack `w` (read only by products on the bounded matmul in the layout
    /// `per_tile` says) straight from the host's weights into that matmul's matrix
    /// ([`prepare::bounded_stack`]), and keep it in that form alone: the products read
    /// nothing else, and [`BoundedWeights::stack`] gives the stack back where another path
    /// asks for it. Whether the parts make it.
    pub(super) fn prepare_bounded(
        &mut self,
        w: ValueId,
        stack: &prepare::Stack,
        per_tile: bool,
    ) -> Result<bool, Failure> {
        let ((rows, cols), n) = (stack.dims, self.n);
        let Some(v) = prepare::bounded_stack(&self.sources(stack)?, (rows, cols, n), per_tile)
        else {
            return Ok(false);
        };
        let m = match per_tile {
            false => Tensor::from_vec(v, (rows * n, cols * n), &Device::Cpu)?,
            true => Tensor::from_vec(v, (cols, rows * n, n), &Device::Cpu)?,
        };
        // Its runs are the stack's tile rows, in another order: where one holds a value no
        // slicing takes, the first run's look for slices is answered here, with no stack
        // made again.
        if with_host(&m, |v| intdot::SlicedWeights::refuses(v, n))? {
            self.caches.int_sliced.insert(w, None);
        }
        let bw = BoundedWeights::of_matrix(m, (rows, cols, n, per_tile))?;
        self.caches.bounded.insert((w, per_tile), Arc::new(bw));
        self.caches.kept.insert(w, Kept::Bounded(per_tile));
        Ok(true)
    }

    /// Cache `wi` as the integers of weight stack `w`, and keep them as its only form when
    /// they give back its f64 tensor of `shape` ([`intdot::IntWeights::restore`]); whether
    /// they do.
    fn cache_ints(
        &mut self,
        w: ValueId,
        wi: Option<Arc<intdot::IntWeights>>,
        shape: &[usize],
    ) -> bool {
        let as_ints = wi.as_ref().is_some_and(|wi| wi.restorable());
        self.caches.int.insert(w, wi);
        if as_ints {
            self.caches.kept.insert(w, Kept::Ints(shape.to_vec()));
        }
        as_ints
    }

    /// The parts of `stack` on the host's weights, checked.
    fn sources<'s>(&self, stack: &'s prepare::Stack) -> Result<Vec<prepare::Source<'s>>, ExecError>
    where
        'a: 's,
    {
        stack
            .parts
            .iter()
            .map(|p| {
                let Op::Weight { name, shape } = &self.g.nodes[p.chain.weight].op else {
                    return Err(internal("a weight chain without weights"));
                };
                Ok(prepare::Source {
                    w: self.host_tensor(name, false, shape)?,
                    shape,
                    round: p.chain.round.as_ref().map(|(_, f)| f),
                    format: &p.chain.format,
                    start: p.start,
                    count: p.count,
                })
            })
            .collect()
    }

    /// Compute the weight stack `w` (read by products only) straight from the host's weights
    /// to the integers it is kept as ([`prepare`]); whether it could (else its chains are
    /// evaluated node by node, [`Executor::eval_chains`]).
    pub(super) fn prepare_ints(
        &mut self,
        w: ValueId,
        stack: &prepare::Stack,
    ) -> Result<bool, Failure> {
        let ((rows, cols), n) = (stack.dims, self.n);
        let sources = self.sources(stack)?;
        match prepare::int_stack(&sources, (rows, cols, n)) {
            Some(wi) if wi.restorable() => {
                Ok(self.cache_ints(w, Some(Arc::new(wi)), &[1, rows * cols, n, n]))
            }
            // The stack has no integer form: its products need not look for one.
            None if prepare::makes_stack(&sources, (rows, cols, n)) => {
                self.caches.int.insert(w, None);
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// Compute the weight stack `w` (read only by chunked matmuls of chunk and dtype `key`)
    /// straight from the host's weights into that matmul's layout ([`arrange_w`], converted),
    /// and keep it in that form alone (the products read nothing else).
    pub(super) fn prepare_arranged(
        &mut self,
        w: ValueId,
        stack: &prepare::Stack,
        (k, dtype): (usize, DType),
    ) -> Result<(), Failure> {
        let ((rows, cols), n) = (stack.dims, self.n);
        let (sources, grid) = (self.sources(stack)?, (rows, cols, n));
        let shape = (cols * n / k, rows * n, k);
        fn tensor<T: candle_core::WithDType>(
            v: Option<Vec<T>>,
            shape: (usize, usize, usize),
            dev: &Device,
        ) -> Result<Tensor, Failure> {
            let v = v.ok_or_else(|| internal("a weight stack's parts do not make it"))?;
            Ok(Tensor::from_vec(v, shape, dev)?)
        }
        // `as f32` is candle's `to_dtype(F32)`: exact for the values `float_chunk` admits.
        let t = match dtype {
            DType::F32 => {
                let v = prepare::arranged_stack(&sources, grid, k, |v| v as f32);
                tensor(v, shape, &self.dev)?
            }
            _ => tensor(
                prepare::arranged_stack(&sources, grid, k, |v| v),
                shape,
                &self.dev,
            )?,
        };
        self.caches.arranged.insert((w, k, dtype), t);
        Ok(())
    }

    /// The value of the input chain `chain` (its `round`), straight from the host's input
    /// ([`prepare::rounded_input`]).
    pub(super) fn rounded_input(&self, chain: &prepare::InputChain) -> Result<Tensor, Failure> {
        let Op::Input { name, shape } = &self.g.nodes[chain.input].op else {
            return Err(internal("an input chain without its input").into());
        };
        let batch = self.batch();
        let t = self.host_tensor(name, true, shape)?;
        let (c, rows) = match shape.split_last() {
            Some((c, lead)) => (*c, lead.iter().product::<usize>()),
            None => return Err(internal("an input chain of a scalar").into()),
        };
        let width = c.div_ceil(self.n) * self.n;
        let v = prepare::rounded_input(t, c, width, chain.pad_value, &chain.format)
            .ok_or_else(|| internal("an input's values are not whole rows"))?;
        Ok(Tensor::from_vec(v, (batch, rows * width), &self.dev)?)
    }

    /// The weight stack `stack` computed straight from the host's weights as f64 values
    /// ([`prepare`], for the float path).
    pub(super) fn prepare_f64(&self, stack: &prepare::Stack) -> Result<Tensor, Failure> {
        let ((rows, cols), n) = (stack.dims, self.n);
        let v = prepare::f64_stack(&self.sources(stack)?, (rows, cols, n))
            .ok_or_else(|| internal("a weight stack's parts do not make it"))?;
        Ok(Tensor::from_vec(v, (1, rows * cols, n, n), &self.dev)?)
    }

    /// Evaluate what the stack `s` made of `parts` reads and is not computed: the links of
    /// each chain and, for a chain whose value is another node, that value. Each node is freed
    /// once the next is computed; the last ones by the stack's evaluation.
    pub(super) fn eval_chains(&mut self, s: usize, parts: &[prepare::Part]) -> Result<(), Failure> {
        for part in parts {
            let q = part.chain.quantize;
            if q != s && self.ready(ValueId(q as u32)) {
                continue;
            }
            let mut prev = None;
            for l in part.chain.links().chain((q != s).then_some(q)) {
                let t = self.eval(l)?;
                self.values[l] = Some(t);
                if let Some(p) = prev.replace(l) {
                    self.values[p] = None;
                }
            }
        }
        Ok(())
    }

    /// Whether value `v` is computed and not yet freed in this run.
    fn ready(&self, v: ValueId) -> bool {
        self.values.get(v.index()).is_some_and(Option::is_some)
    }

    /// Whether the weight stack `w` is available: computed, or kept in another form.
    fn weights_ready(&self, w: ValueId) -> bool {
        self.ready(w) || self.caches.kept.contains_key(&w)
    }

    /// The weight stack `w` as a tensor: its value, or restored from the form it is kept in
    /// ([`Kept`]; from integers, then held for the rest of the run).
    fn weights(&mut self, w: ValueId) -> Result<Tensor, Failure> {
        if let Some(t) = self.values.get(w.index()).and_then(Option::as_ref) {
            return Ok(t.clone());
        }
        let restored = match self.caches.kept.get(&w) {
            Some(Kept::Ints(shape)) => match self.caches.int.get(&w) {
                Some(Some(wi)) => match wi.restore() {
                    Some(v) => Some(Tensor::from_vec(v, shape.clone(), &self.dev)?),
                    None => None,
                },
                _ => None,
            },
            // Not held: only the first run's look for exact slices asks for it (where
            // `SlicedWeights::refuses` did not answer it), once, and its answer is kept.
            Some(Kept::Bounded(per_tile)) => match self.caches.bounded.get(&(w, *per_tile)) {
                Some(bw) => return Ok(bw.stack()?.to_device(&self.dev)?),
                None => None,
            },
            None => None,
        };
        let Some(t) = restored else {
            return Ok(self.value(w)?.clone());
        };
        self.values[w.index()] = Some(t.clone());
        Ok(t)
    }

    /// Quantize node `q` (BFP in blocks of the native dimension, `f`) straight to the integer
    /// kernel's integers, which its products then read ([`intdot::IntVector::quantized`]);
    /// `false` when its vector has no such form (the node is then evaluated as usual).
    pub(super) fn quantize_to_ints(
        &mut self,
        q: usize,
        f: &quant::BfpInts,
    ) -> Result<bool, Failure> {
        let Op::Quantize { src, .. } = &self.g.nodes[q].op else {
            return Ok(false);
        };
        if !self.ready(*src)
            && let Op::Concat { parts } = &self.g.nodes[src.index()].op
        {
            if self.quantize_parts_to_ints(q, parts, f)? {
                return Ok(true);
            }
            // The quantize falls back to its f64 value: the concat it reads, made now.
            let t = self.eval(src.index())?;
            self.values[src.index()] = Some(t);
        }
        let n = self.n;
        let t = self.value(*src)?;
        let &[b, len] = t.dims() else {
            return Ok(false);
        };
        let quantized =
            |v: &[f64], stride| intdot::IntVector::quantized(v, stride, b, len / n, n, f);
        let Some(xi) = with_host_rows(t, quantized)? else {
            return Ok(false);
        };
        self.int_x.insert(ValueId(q as u32), Some(Arc::new(xi)));
        Ok(true)
    }

    /// [`Executor::quantize_to_ints`] of a quantize node `q` whose concat of `parts` the run
    /// skipped: each tile of each part quantized once per run ([`Executor::tile_ints`]), then
    /// the vector assembled from them; `false` when a tile has no integer form.
    fn quantize_parts_to_ints(
        &mut self,
        q: usize,
        parts: &[nnp_lowering::swgraph::TileSlice],
        f: &quant::BfpInts,
    ) -> Result<bool, Failure> {
        let mut columns = Vec::new();
        let mut b = 1;
        for p in parts {
            for k in p.start as usize..(p.start + p.count) as usize {
                let Some(c) = self.tile_ints(p.value, k, f)? else {
                    return Ok(false);
                };
                b = b.max(c.batch());
                columns.push(c);
            }
        }
        let columns: Vec<&intdot::IntVector> = columns.iter().map(|c| &**c).collect();
        let Some(xi) = intdot::IntVector::from_columns(&columns, b) else {
            return Ok(false);
        };
        self.int_x.insert(ValueId(q as u32), Some(Arc::new(xi)));
        self.paths.insert((Path::ConcatSkipped, q));
        Ok(true)
    }

    /// Tile `k` of value `v` ([b, len]) quantized in format `f` to one column of integers,
    /// once per run.
    fn tile_ints(
        &mut self,
        v: ValueId,
        k: usize,
        f: &quant::BfpInts,
    ) -> Result<Option<Arc<intdot::IntVector>>, Failure> {
        let slot = match self.int_tiles.iter().position(|(g, _)| g == f) {
            Some(s) => s,
            None => {
                self.int_tiles.push((*f, HashMap::new()));
                self.int_tiles.len() - 1
            }
        };
        if let Some(c) = self.int_tiles[slot].1.get(&(v, k)) {
            return Ok(c.clone());
        }
        let n = self.n;
        let t = self.value(v)?;
        let &[b, _] = t.dims() else { return Ok(None) };
        let column = with_host_rows(t, |x, stride| {
            let x = x.get(k * n..(k * n + (b.max(1) - 1) * stride + n))?;
            intdot::IntVector::quantized(x, stride, b, 1, n, f)
        })?
        .map(Arc::new);
        self.int_tiles[slot].1.insert((v, k), column.clone());
        Ok(column)
    }

    /// Whether a product's vector `x` is available: computed, or as integers.
    fn vector_ready(&self, x: ValueId) -> bool {
        self.ready(x) || matches!(self.int_x.get(&x), Some(Some(_)))
    }

    /// The batch of a product's vector `x`.
    fn batch_of(&self, x: ValueId) -> Result<usize, ExecError> {
        match self.int_x.get(&x) {
            Some(Some(xi)) => Ok(xi.batch()),
            _ => Ok(self.value(x)?.dims()[0]),
        }
    }

    /// A product's vector `x` as a tensor: its value, or restored from the integers it was
    /// quantized to ([`Executor::quantize_to_ints`]; then held for the rest of the run).
    fn vector(&mut self, x: ValueId) -> Result<Tensor, Failure> {
        if let Some(t) = self.values.get(x.index()).and_then(Option::as_ref) {
            return Ok(t.clone());
        }
        let Some(Some(xi)) = self.int_x.get(&x) else {
            return Ok(self.value(x)?.clone());
        };
        let (b, v) = (xi.batch(), xi.restore());
        let t = Tensor::from_vec(v, (b, xi.ints().len() / b.max(1)), &self.dev)?;
        self.values[x.index()] = Some(t.clone());
        Ok(t)
    }

    /// The operands of a product of `w` and `x` at batch `b`.
    fn operands(&self, x: ValueId, w: ValueId, b: usize) -> Operands {
        Operands {
            x,
            w,
            b,
            // Weight-side work is cached for the session when the stack is a constant.
            cacheable: self.constant.get(w.index()).copied().unwrap_or(false),
        }
    }

    /// A weight stack's form in the cache `pick` picks, kept for the session when `cacheable`
    /// (a constant stack), else made anew by `make`.
    fn weight_side<V: Clone>(
        &mut self,
        pick: fn(&mut Caches) -> &mut HashMap<ValueId, V>,
        w: ValueId,
        cacheable: bool,
        make: impl FnOnce(&mut Self) -> Result<V, Failure>,
    ) -> Result<V, Failure> {
        if cacheable && let Some(v) = pick(self.caches).get(&w) {
            return Ok(v.clone());
        }
        let v = make(self)?;
        if cacheable {
            pick(self.caches).insert(w, v.clone());
        }
        Ok(v)
    }

    /// The integer operands of a product (weights cached for the session when `cacheable`,
    /// the vector for the run), when both fit the integer kernel.
    #[allow(clippy::type_complexity)]
    fn int_operands(
        &mut self,
        spec: &MatVec,
        Operands { x, w, b, cacheable }: Operands,
    ) -> Result<Option<(Arc<intdot::IntWeights>, Arc<intdot::IntVector>)>, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let wi = self.weight_side(
            |c| &mut c.int,
            w,
            cacheable,
            |ex| Ok(int_weights(&ex.weights(w)?, rows, cols, n)?),
        )?;
        let Some(wi) = wi else { return Ok(None) };
        let xi = match self.int_x.get(&x) {
            Some(xi) => xi.clone(),
            None => {
                let xi = with_host(self.value(x)?, |v| intdot::IntVector::new(v, b, cols, n))?
                    .map(Arc::new);
                self.int_x.insert(x, xi.clone());
                xi
            }
        };
        Ok(xi.filter(|xi| intdot::fits(&wi, xi)).map(|xi| (wi, xi)))
    }

    /// The product of weight stack `w` (sliced once for the session when `cacheable`) and
    /// vector `x` on integer slices ([`intdot::SlicedWeights`]), or `None` where the operands
    /// take too many slices (the float path then computes it).
    fn sliced_product(
        &mut self,
        spec: &MatVec,
        Operands { x, w, b, cacheable }: Operands,
    ) -> Result<Option<Vec<f64>>, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        let xt = self.vector(x)?;
        // Sliced for vectors like this first one.
        let sw = self.weight_side(
            |c| &mut c.int_sliced,
            w,
            cacheable,
            |ex| {
                let wt = ex.weights(w)?;
                let sw = with_host(&wt, |wv| {
                    with_host(&xt, |xv| intdot::SlicedWeights::new(wv, xv, rows, cols, n))
                })??;
                Ok(sw.map(Arc::new))
            },
        )?;
        let Some(sw) = sw else { return Ok(None) };
        Ok(with_host(&xt, |v| {
            sw.matvec(spec, v, b, intdot::Kernel::best())
        })?)
    }

    /// Integer operands on the GPU, uploaded once (weights per session when `cacheable`, the
    /// vector per run).
    fn gpu_operands(
        &mut self,
        gpu: &gpu::Gpu,
        (x, xi): (ValueId, &intdot::IntVector),
        (w, wi): (ValueId, &intdot::IntWeights),
        cacheable: bool,
    ) -> Result<(Arc<gpu::GpuWeights>, Arc<gpu::GpuVector>), ExecError> {
        let gw = match self.caches.gpu.get(&w) {
            Some(gw) if cacheable => gw.clone(),
            _ => {
                let gw = Arc::new(gpu.weights(wi)?);
                if cacheable {
                    self.caches.gpu.insert(w, gw.clone());
                }
                gw
            }
        };
        let gx = match self.gpu_x.get(&x) {
            Some(gx) => gx.clone(),
            None => {
                let gx = Arc::new(gpu.vector(xi)?);
                self.gpu_x.insert(x, gx.clone());
                gx
            }
        };
        Ok((gw, gx))
    }

    /// With a GPU: compute the product at `upcoming[0]` and every product among the next nodes
    /// of the evaluation order whose operands are ready, in one [`gpu::Gpu::products`] call (a
    /// few launches, one wait): at an LSTM's first product, the `W x_t` products of every step
    /// (the products-first order, [`super::fused::schedule`]), then each step's four `U h_(t-1)`. The
    /// values wait in `prefetched` until the main loop reaches their nodes; a product the GPU
    /// refuses is left to [`Executor::matvec`] (the CPU).
    pub(super) fn prefetch_products(&mut self, upcoming: &[usize]) -> Result<(), Failure> {
        // Nodes scanned (the products-first order puts an LSTM's 128 `W x_t` products and
        // their operands side by side), and the most output bytes one batch holds.
        const LOOKAHEAD: usize = 1024;
        const MAX_BYTES: usize = 1 << 28;
        let mut bytes = 0;
        let Some(gpu) = self.gpu.filter(|_| self.int && intdot::supports(self.n)) else {
            return Ok(());
        };
        // The products found, with their operands (held here so `Product` can borrow them).
        let mut found = Vec::new();
        for &k in upcoming.iter().take(LOOKAHEAD) {
            let Some((spec, x, w)) = product_spec(&self.g.nodes[k].op, self.n) else {
                continue;
            };
            if bytes >= MAX_BYTES {
                break;
            }
            // Constants ahead are computed in the first run only (and kept): they wait for it.
            let constant_ahead = self.constant[k] && k != upcoming[0];
            let waiting = !constant_ahead && !self.prefetched.contains_key(&k);
            if !waiting || !self.vector_ready(x) || !self.weights_ready(w) {
                continue;
            }
            let b = self.batch_of(x)?;
            let operands = self.operands(x, w, b);
            let cacheable = operands.cacheable;
            let t0 = std::time::Instant::now();
            let Some((wi, xi)) = self.int_operands(&spec, operands)? else {
                continue;
            };
            tally(&mut self.prof, "gpu: to ints", t0, 1);
            let t0 = std::time::Instant::now();
            let (gw, gx) = self.gpu_operands(gpu, (x, &xi), (w, &wi), cacheable)?;
            tally(&mut self.prof, "gpu: upload", t0, 1);
            bytes += b * spec.rows * spec.n * std::mem::size_of::<f64>();
            found.push((k, spec, b, (wi, gw), (xi, gx)));
        }
        let t0 = std::time::Instant::now();
        let products: Vec<gpu::Product> = found
            .iter()
            .map(|(_, spec, _, w, x)| gpu::Product {
                spec: *spec,
                w: (&w.0, &w.1),
                x: (&x.0, &x.1),
            })
            .collect();
        let values = gpu.products(&products)?;
        tally(&mut self.prof, "gpu: products", t0, 1);
        let t0 = std::time::Instant::now();
        for ((k, spec, b, ..), y) in found.iter().zip(values) {
            // A product the GPU refused is left to the main loop (the CPU kernel).
            if let Some(y) = y {
                self.prefetched.insert(
                    *k,
                    Tensor::from_vec(y, (*b, spec.rows * spec.n), &self.dev)?,
                );
                self.paths.insert((Path::IntKernel, *k));
                self.paths.insert((Path::Gpu, *k));
            }
        }
        tally(&mut self.prof, "gpu: tensors", t0, 1);
        Ok(())
    }
}

/// The product of a `TiledMatVec` node at native dimension `n`: its spec, vector and weights.
pub(super) fn product_spec(op: &Op, n: usize) -> Option<(MatVec, ValueId, ValueId)> {
    match op {
        Op::TiledMatVec {
            x,
            w,
            rows,
            cols,
            accumulation,
            output,
            ..
        } => Some((
            MatVec {
                rows: *rows as usize,
                cols: *cols as usize,
                n,
                accumulation: *accumulation,
                output: *output,
            },
            *x,
            *w,
        )),
        _ => None,
    }
}

/// A weight stack as integers for [`intdot`], `None` when it does not fit.
fn int_weights(
    t: &Tensor,
    rows: usize,
    cols: usize,
    n: usize,
) -> candle_core::Result<Option<Arc<intdot::IntWeights>>> {
    Ok(with_host(t, |v| intdot::IntWeights::new(v, rows, cols, n))?.map(Arc::new))
}

/// A weight stack `[1, rows*cols, n, n]` as `[chunks, rows*n, k]` for the chunked matmul:
/// `[rows, cols, n, n/k, k] -> [cols, n/k, rows, n, k]`.
pub(super) fn arrange_w(
    t: &Tensor,
    rows: usize,
    cols: usize,
    n: usize,
    k: usize,
) -> candle_core::Result<Tensor> {
    t.reshape((rows, cols, n, n / k, k))?
        .permute((1, 3, 0, 2, 4))?
        .contiguous()?
        .reshape((cols * n / k, rows * n, k))
}

/// The operands of one product: vector `x` at batch `b`, weight stack `w`, and whether work on
/// the weights is kept for the session (a constant stack).
#[derive(Clone, Copy)]
struct Operands {
    x: ValueId,
    w: ValueId,
    b: usize,
    cacheable: bool,
}

/// A weight stack for [`FloatPath::Bounded`] on the host, and [`matmul::norm_bound`] of each
/// of its rows: under `exact` accumulation one `[rows * n, cols * n]` matrix, under the `-seq`
/// modes one `[rows * n, n]` matrix per tile column (`[cols, rows * n, n]`).
pub(super) struct BoundedWeights {
    w: Tensor,
    norms: Vec<f64>,
    /// `(rows, cols, n, per_tile)`: the stack's grid and which layout `w` has.
    grid: (usize, usize, usize, bool),
}

impl BoundedWeights {
    /// From the stack `[1, rows * cols, n, n]`, `[rows, cols, n, n]` permuted to `[rows, n, cols,
    /// n]`, or to `[cols, rows, n, n]` with `per_tile`.
    fn new(
        t: &Tensor,
        rows: usize,
        cols: usize,
        n: usize,
        per_tile: bool,
    ) -> candle_core::Result<BoundedWeights> {
        let t = t.to_device(&Device::Cpu)?.reshape((rows, cols, n, n))?;
        let w = match per_tile {
            false => t.permute((0, 2, 1, 3))?.reshape((rows * n, cols * n))?,
            true => t.permute((1, 0, 2, 3))?.reshape((cols, rows * n, n))?,
        };
        Self::of_matrix(w.contiguous()?, (rows, cols, n, per_tile))
    }

    /// From its matrix, laid out as [`new`](Self::new) lays it out: the row norms added.
    fn of_matrix(
        w: Tensor,
        grid: (usize, usize, usize, bool),
    ) -> candle_core::Result<BoundedWeights> {
        let (_, cols, n, per_tile) = grid;
        let row_len = if per_tile { n } else { cols * n };
        let norms = with_host(&w, |v| {
            v.chunks(row_len.max(1)).map(matmul::norm_bound).collect()
        })?;
        Ok(BoundedWeights { w, norms, grid })
    }

    /// The stack it was made from, `[1, rows * cols, n, n]`, the same bits (the permutation
    /// undone).
    fn stack(&self) -> candle_core::Result<Tensor> {
        let (rows, cols, n, per_tile) = self.grid;
        let t = match per_tile {
            false => self.w.reshape((rows, n, cols, n))?.permute((0, 2, 1, 3))?,
            true => self.w.reshape((cols, rows, n, n))?.permute((1, 0, 2, 3))?,
        };
        t.contiguous()?.reshape((1, rows * cols, n, n))
    }
}

/// How the float path computes a product the integer kernel does not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FloatPath {
    /// One matmul whose partials over chunks of `k` lanes are proven exact from the formats:
    /// f32 where that proves the same chunk exact (twice the BLAS speed), else f64.
    Chunked(usize, DType),
    /// One f64 matmul over whole rows (per tile under the `-seq` modes), each sum's rounding
    /// proven from an error bound ([`matmul::round_bounded`], [`matmul::round_bounded_seq`]):
    /// every product is exact in f64, but not the sums of a whole tile, and the rounding is
    /// monotone.
    Bounded,
    /// Exact slices, or element by element.
    Sliced,
}

/// The float path of a product of these formats ([`FloatPath`]).
pub(super) fn float_path(vector: &Format, matrix: &Format, spec: &MatVec) -> FloatPath {
    let n = spec.n;
    // The bound decides roundings to the output (`exact`), or of the tile partials (`-seq`).
    let bounded = matmul::monotone(&matmul::seq_format(spec.accumulation).unwrap_or(spec.output));
    let dtype = |k| match matmul::exact_chunk_f32(vector, matrix, n) == Some(k) {
        true => DType::F32,
        false => DType::F64,
    };
    match matmul::exact_chunk(vector, matrix, n) {
        Some(k) if k == n || (k >= MIN_CHUNK.min(n) && !bounded) => FloatPath::Chunked(k, dtype(k)),
        Some(_) if bounded => FloatPath::Bounded,
        _ => FloatPath::Sliced,
    }
}

/// For each weight stack, the `key` that every product reading it has (`None` where one has
/// none, or two differ), from the product's [`float_path`] and spec.
fn stack_keys<K: Copy + PartialEq>(
    graph: &SwGraph,
    key: impl Fn(FloatPath, &MatVec) -> Option<K>,
) -> Vec<Option<K>> {
    let mut keys: Vec<Option<Option<K>>> = vec![None; graph.nodes.len()];
    for node in &graph.nodes {
        let Op::TiledMatVec {
            w,
            vector_format,
            matrix_format,
            ..
        } = &node.op
        else {
            continue;
        };
        let Some((spec, _, _)) = product_spec(&node.op, graph.native) else {
            continue;
        };
        let this = key(float_path(vector_format, matrix_format, &spec), &spec);
        let seen = &mut keys[w.index()];
        *seen = Some(match *seen {
            Some(before) if before != this => None,
            _ => this,
        });
    }
    keys.into_iter().map(Option::flatten).collect()
}

/// The plan's stacks whose every product takes the chunked matmul with one chunk and dtype
/// ([`float_path`]): that `(chunk, dtype)` by node.
pub(super) fn chunked_stacks(graph: &SwGraph, plan: &prepare::Plan) -> Vec<Option<(usize, DType)>> {
    let keys = stack_keys(graph, |path, _| match path {
        FloatPath::Chunked(k, dtype) => Some((k, dtype)),
        FloatPath::Bounded | FloatPath::Sliced => None,
    });
    keys.into_iter()
        .zip(&plan.stacks)
        .map(|(k, s)| k.filter(|_| s.is_some()))
        .collect()
}

/// The stacks whose every product takes the bounded matmul in one layout: per tile column
/// (`true`, the `-seq` modes) or whole rows, by node.
pub(super) fn bounded_stacks(graph: &SwGraph) -> Vec<Option<bool>> {
    stack_keys(graph, |path, spec| {
        (path == FloatPath::Bounded).then(|| matmul::seq_format(spec.accumulation).is_some())
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use nnp_grammar::Accumulation;

    /// A 3 x 2 stack of 4 x 4 tiles (value `1000 i + 100 j + 10 r + c` at row r, lane c of
    /// tile (i, j), a `-0` in tile (2, 1)) as the bounded matmul's matrices, by hand, and
    /// given back bit for bit.
    #[test]
    fn bounded_weights_give_back_their_stack() {
        let (rows, cols, n) = (3, 2, 4);
        let value = |i: usize, j: usize, r: usize, c: usize| {
            let v = (1000 * i + 100 * j + 10 * r + c) as f64;
            if (i, j, r, c) == (2, 1, 0, 0) {
                -0.0
            } else {
                v
            }
        };
        let mut stack = Vec::new();
        for i in 0..rows {
            for j in 0..cols {
                for r in 0..n {
                    (0..n).for_each(|c| stack.push(value(i, j, r, c)));
                }
            }
        }
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let t = Tensor::from_vec(stack.clone(), (1, rows * cols, n, n), &Device::Cpu).unwrap();
        for per_tile in [false, true] {
            let bw = BoundedWeights::new(&t, rows, cols, n, per_tile).unwrap();
            let m = bw.w.flatten_all().unwrap().to_vec1::<f64>().unwrap();
            // Whole rows: element (i n + r, j n + c). Per tile column: (j, i n + r, c).
            let want = |e: usize| match per_tile {
                false => {
                    let (row, lane) = (e / (cols * n), e % (cols * n));
                    value(row / n, lane / n, row % n, lane % n)
                }
                true => {
                    let (j, row, c) = (e / (rows * n * n), e / n % (rows * n), e % n);
                    value(row / n, j, row % n, c)
                }
            };
            let want: Vec<f64> = (0..m.len()).map(want).collect();
            assert_eq!(bits(&m), bits(&want), "per tile: {per_tile}");
            let back = bw
                .stack()
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f64>()
                .unwrap();
            assert_eq!(bits(&back), bits(&stack), "per tile: {per_tile}");
            // One norm bound per matrix row, each of its own row.
            let row_len = if per_tile { n } else { cols * n };
            let want: Vec<u64> = m
                .chunks(row_len)
                .map(|r| matmul::norm_bound(r).to_bits())
                .collect();
            assert_eq!(
                bw.norms.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want
            );
        }
    }

    fn path(
        vector: &str,
        matrix: &str,
        n: usize,
        accumulation: Accumulation,
        out: &str,
    ) -> FloatPath {
        let f = |lit: &str| lit.parse::<Format>().expect("valid format");
        let output = *f(out).as_float().expect("a float format");
        let spec = MatVec {
            rows: 1,
            cols: 1,
            n,
            accumulation,
            output,
        };
        float_path(&f(vector), &f(matrix), &spec)
    }

    /// Bits by hand ([`matmul::grids`]): a float value alone is its significand (fp16 11,
    /// bf16 8, fp32 24 bits), a run of floats spans the format's whole range; a tile of N adds
    /// `log2 N` bits of carries.
    #[test]
    fn float_paths_by_hand() {
        use Accumulation::{Exact, Fp32Seq};
        use FloatPath::{Bounded, Chunked, Sliced};
        // BFP 8 at N = 128: 7 + 7 + 7 = 21 <= 24 bits: whole tiles in f32.
        let bfp8 = "bfp(mant = 8, exp_bits = 5)";
        assert_eq!(
            path(bfp8, bfp8, 128, Exact, "fp16"),
            Chunked(128, DType::F32)
        );
        // fp(4, 3) runs span 2^-9 .. 2^8: 17 + 17 + 7 = 41 <= 53: whole tiles in f64.
        assert_eq!(
            path("fp(4, 3)", "fp(4, 3)", 128, Exact, "fp16"),
            Chunked(128, DType::F64)
        );
        // fp16 runs span 40 bits (80 > 53 a tile), one product 11 + 11 = 22 bits; fp32 24 +
        // 24 = 48; bf16 8 + 8 = 16: each product exact, no sum of a tile.
        assert_eq!(path("fp16", "fp16", 128, Exact, "fp16"), Bounded);
        assert_eq!(path("fp32", "fp32", 128, Exact, "fp32"), Bounded);
        assert_eq!(path("bf16", "bf16", 8, Exact, "bf16"), Bounded);
        // The -seq modes: one matmul per tile column, whose partials the bound rounds to fp32.
        assert_eq!(path("fp32", "fp32", 128, Fp32Seq, "fp32"), Bounded);
        // Stochastic rounding is not monotone: where the bound would decide it (`exact`), the
        // slices; under -seq it only rounds the sum of the rounded partials.
        let stochastic = "fp(8, 23, round = stochastic(seed = 1))";
        assert_eq!(path("fp32", "fp32", 128, Exact, stochastic), Sliced);
        assert_eq!(path("fp32", "fp32", 128, Fp32Seq, stochastic), Bounded);
        // 31 + 31 = 62 > 53: not even one product is exact.
        assert_eq!(path("fp(8, 30)", "fp(8, 30)", 8, Exact, "fp32"), Sliced);
        // 27 + 26 = 53 bits, but products down to 2^-2095 underflow f64.
        assert_eq!(path("fp(11, 26)", "fp(11, 25)", 8, Exact, "fp32"), Sliced);
    }
}
