//! The weight stacks of the products: prepared in one pass from the host's weights, kept as
//! integers or as the bounded matmul's matrix alone, and given back as f64 tensors where a
//! path needs them.

use super::bounded::BoundedWeights;
use crate::state::Kept;
use crate::state::{Executor, Failure};
use crate::tensors::with_host;
use crate::{ExecError, intdot, internal, prepare};
use candle_core::{DType, Device, Tensor};
use nnp_lowering::swgraph::{Op, ValueId};
use std::sync::Arc;

impl<'a> Executor<'a> {
    /// Keep the weight stack `w` (value `t`, read by products of `(rows, cols)` only) as
    /// integers alone, when the integer kernel runs and the f64 tensor can be restored bit
    /// for bit; whether it is.
    pub(crate) fn keep_as_ints(
        &mut self,
        w: ValueId,
        t: &Tensor,
        (rows, cols): (usize, usize),
    ) -> Result<bool, Failure> {
        if !self.int_products || !intdot::supports(self.native) || t.dtype() != DType::F64 {
            return Ok(false);
        }
        let wi = int_weights(t, rows, cols, self.native)?;
        Ok(self.cache_ints(w, wi, t.dims()))
    }

    /// Compute the weight stack `w` (read only by products on the bounded matmul in the layout
    /// `per_tile` says) straight from the host's weights into that matmul's matrix
    /// ([`prepare::bounded_stack`]), and keep it in that form alone: the products read
    /// nothing else, and [`BoundedWeights::stack`] gives the stack back where another path
    /// asks for it. Whether the parts make it.
    pub(crate) fn prepare_bounded(
        &mut self,
        w: ValueId,
        stack: &prepare::Stack,
        per_tile: bool,
    ) -> Result<bool, Failure> {
        let ((rows, cols), n) = (stack.dims, self.native);
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
        self.caches.kept.insert(w, Kept::Bounded { per_tile });
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
                let Op::Weight { name, shape } = &self.graph.nodes[p.chain.weight].op else {
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
    pub(crate) fn prepare_ints(
        &mut self,
        w: ValueId,
        stack: &prepare::Stack,
    ) -> Result<bool, Failure> {
        let ((rows, cols), n) = (stack.dims, self.native);
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
    /// straight from the host's weights into that matmul's layout ([`arrange_w`](super::float::arrange_w), converted),
    /// and keep it in that form alone (the products read nothing else).
    pub(crate) fn prepare_arranged(
        &mut self,
        w: ValueId,
        stack: &prepare::Stack,
        (k, dtype): (usize, DType),
    ) -> Result<(), Failure> {
        let ((rows, cols), n) = (stack.dims, self.native);
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
    pub(crate) fn rounded_input(&self, chain: &prepare::InputChain) -> Result<Tensor, Failure> {
        let Op::Input { name, shape } = &self.graph.nodes[chain.input].op else {
            return Err(internal("an input chain without its input").into());
        };
        let batch = self.batch();
        let t = self.host_tensor(name, true, shape)?;
        let (c, rows) = match shape.split_last() {
            Some((c, lead)) => (*c, lead.iter().product::<usize>()),
            None => return Err(internal("an input chain of a scalar").into()),
        };
        let width = c.div_ceil(self.native) * self.native;
        let v = prepare::rounded_input(t, c, width, chain.pad_value, &chain.format)
            .ok_or_else(|| internal("an input's values are not whole rows"))?;
        Ok(Tensor::from_vec(v, (batch, rows * width), &self.dev)?)
    }

    /// The weight stack `stack` computed straight from the host's weights as f64 values
    /// ([`prepare`], for the float path).
    pub(crate) fn prepare_f64(&self, stack: &prepare::Stack) -> Result<Tensor, Failure> {
        let ((rows, cols), n) = (stack.dims, self.native);
        let v = prepare::f64_stack(&self.sources(stack)?, (rows, cols, n))
            .ok_or_else(|| internal("a weight stack's parts do not make it"))?;
        Ok(Tensor::from_vec(v, (1, rows * cols, n, n), &self.dev)?)
    }

    /// Evaluate what the stack `s` made of `parts` reads and is not computed: the links of
    /// each chain and, for a chain whose value is another node, that value. Each node is freed
    /// once the next is computed; the last ones by the stack's evaluation.
    pub(crate) fn eval_chains(&mut self, s: usize, parts: &[prepare::Part]) -> Result<(), Failure> {
        for part in parts {
            let q = part.chain.quantize;
            if q != s && self.ready(ValueId(q as u32)) {
                continue;
            }
            let mut prev = None;
            for l in part.chain.links().chain((q != s).then_some(q)) {
                let t = self.eval(l)?;
                let id = ValueId(l as u32);
                self.values[id] = Some(t);
                if let Some(p) = prev.replace(id) {
                    self.values[p] = None;
                }
            }
        }
        Ok(())
    }

    /// Whether value `v` is computed and not yet freed in this run.
    pub(super) fn ready(&self, v: ValueId) -> bool {
        self.values.get(v).is_some_and(Option::is_some)
    }

    /// The weight stack `w` as a tensor: its value, or restored from the form it is kept in
    /// ([`Kept`]; from integers, then held for the rest of the run).
    pub(crate) fn weights(&mut self, w: ValueId) -> Result<Tensor, Failure> {
        if let Some(t) = self.values.get(w).and_then(Option::as_ref) {
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
            Some(Kept::Bounded { per_tile }) => match self.caches.bounded.get(&(w, *per_tile)) {
                Some(bw) => return Ok(bw.stack()?.to_device(&self.dev)?),
                None => None,
            },
            None => None,
        };
        let Some(t) = restored else {
            return Ok(self.value(w)?.clone());
        };
        self.values[w] = Some(t.clone());
        Ok(t)
    }
}

/// A weight stack as integers for [`intdot`], `None` when it does not fit.
pub(super) fn int_weights(
    t: &Tensor,
    rows: usize,
    cols: usize,
    n: usize,
) -> candle_core::Result<Option<Arc<intdot::IntWeights>>> {
    Ok(with_host(t, |v| intdot::IntWeights::new(v, rows, cols, n))?.map(Arc::new))
}
