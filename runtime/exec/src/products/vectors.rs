//! The vectors of the products: quantized straight to the integer kernel's integers (from a
//! skipped concat's parts, tile by tile) and given back as tensors where a path needs them.

use crate::state::Path;
use crate::state::{Executor, Failure};
use crate::tensors::with_host_rows;
use crate::{ExecError, intdot, quant};
use candle_core::Tensor;
use nnp_lowering::swgraph::{Op, ValueId};
use std::collections::HashMap;
use std::sync::Arc;

impl<'a> Executor<'a> {
    /// Quantize node `q` (BFP in blocks of the native dimension, `f`) straight to the integer
    /// kernel's integers, which its products then read ([`intdot::IntVector::quantized`]);
    /// `false` when its vector has no such form (the node is then evaluated as usual).
    pub(crate) fn quantize_to_ints(
        &mut self,
        q: usize,
        f: &quant::BfpInts,
    ) -> Result<bool, Failure> {
        let Op::Quantize { src, .. } = &self.graph.nodes[q].op else {
            return Ok(false);
        };
        if !self.ready(*src)
            && let Op::Concat { parts } = &self.graph.nodes[src.index()].op
        {
            if self.quantize_parts_to_ints(q, parts, f)? {
                return Ok(true);
            }
            // The quantize falls back to its f64 value: the concat it reads, made now.
            let t = self.eval(src.index())?;
            self.values[*src] = Some(t);
        }
        let n = self.native;
        let t = self.value(*src)?;
        let &[b, len] = t.dims() else {
            return Ok(false);
        };
        let quantized =
            |v: &[f64], stride| intdot::IntVector::quantized(v, stride, b, len / n, n, f);
        let Some(xi) = with_host_rows(t, quantized)? else {
            return Ok(false);
        };
        self.vectors
            .ints
            .insert(ValueId(q as u32), Some(Arc::new(xi)));
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
        self.vectors
            .ints
            .insert(ValueId(q as u32), Some(Arc::new(xi)));
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
        let slot = match self.vectors.tiles.iter().position(|(g, _)| g == f) {
            Some(s) => s,
            None => {
                self.vectors.tiles.push((*f, HashMap::new()));
                self.vectors.tiles.len() - 1
            }
        };
        if let Some(c) = self.vectors.tiles[slot].1.get(&(v, k)) {
            return Ok(c.clone());
        }
        let n = self.native;
        let t = self.value(v)?;
        let &[b, _] = t.dims() else { return Ok(None) };
        let column = with_host_rows(t, |x, stride| {
            let x = x.get(k * n..(k * n + (b.max(1) - 1) * stride + n))?;
            intdot::IntVector::quantized(x, stride, b, 1, n, f)
        })?
        .map(Arc::new);
        self.vectors.tiles[slot].1.insert((v, k), column.clone());
        Ok(column)
    }

    /// The batch of a product's vector `x`.
    pub(super) fn batch_of(&self, x: ValueId) -> Result<usize, ExecError> {
        match self.vectors.ints.get(&x) {
            Some(Some(xi)) => Ok(xi.batch()),
            _ => Ok(self.value(x)?.dims()[0]),
        }
    }

    /// A product's vector `x` as a tensor: its value, or restored from the integers it was
    /// quantized to ([`Executor::quantize_to_ints`]; then held for the rest of the run).
    pub(super) fn vector(&mut self, x: ValueId) -> Result<Tensor, Failure> {
        if let Some(t) = self.values.get(x).and_then(Option::as_ref) {
            return Ok(t.clone());
        }
        let Some(Some(xi)) = self.vectors.ints.get(&x) else {
            return Ok(self.value(x)?.clone());
        };
        let (b, v) = (xi.batch(), xi.restore());
        let t = Tensor::from_vec(v, (b, xi.ints().len() / b.max(1)), &self.dev)?;
        self.values[x] = Some(t.clone());
        Ok(t)
    }
}
