//! The operands of one product on the integer kernel (weights cached for the session, the
//! vector for the run), on integer slices, and the product on the GPU.

use super::Operands;
use super::stacks::int_weights;
use crate::intdot;
use crate::matmul::MatVec;
use crate::state::{Caches, Path, tally};
use crate::state::{Executor, Failure};
use crate::tensors::with_host;
use candle_core::Tensor;
use nnp_lowering::swgraph::ValueId;
use std::collections::HashMap;
use std::sync::Arc;

impl<'a> Executor<'a> {
    /// The operands of a product of `w` and `x` at batch `b`.
    pub(super) fn operands(&self, x: ValueId, w: ValueId, b: usize) -> Operands {
        Operands {
            x,
            w,
            b,
            // Weight-side work is cached for the session when the stack is a constant.
            cacheable: self.constant.get(w).copied().unwrap_or(false),
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

    /// The weight stack `w` of a product as integers, kept for the session when `cacheable`;
    /// `None` where it has none.
    fn int_weights(
        &mut self,
        spec: &MatVec,
        w: ValueId,
        cacheable: bool,
    ) -> Result<Option<Arc<intdot::IntWeights>>, Failure> {
        let (n, rows, cols) = (spec.n, spec.rows, spec.cols);
        self.weight_side(
            |c| &mut c.int,
            w,
            cacheable,
            |ex| Ok(int_weights(&ex.weights(w)?, rows, cols, n)?),
        )
    }

    /// The integer operands of a product (weights cached for the session when `cacheable`,
    /// the vector for the run), when both fit the integer kernel.
    #[allow(clippy::type_complexity)]
    pub(super) fn int_operands(
        &mut self,
        spec: &MatVec,
        Operands { x, w, b, cacheable }: Operands,
    ) -> Result<Option<(Arc<intdot::IntWeights>, Arc<intdot::IntVector>)>, Failure> {
        let (n, cols) = (spec.n, spec.cols);
        let Some(wi) = self.int_weights(spec, w, cacheable)? else {
            return Ok(None);
        };
        let xi = match self.vectors.ints.get(&x) {
            Some(xi) => xi.clone(),
            None => {
                let xi = with_host(self.value(x)?, |v| intdot::IntVector::new(v, b, cols, n))?
                    .map(Arc::new);
                self.vectors.ints.insert(x, xi.clone());
                xi
            }
        };
        Ok(xi.filter(|xi| intdot::fits(&wi, xi)).map(|xi| (wi, xi)))
    }

    /// The product of weight stack `w` (sliced once for the session when `cacheable`) and
    /// vector `x` on integer slices ([`intdot::SlicedWeights`]), or `None` where the operands
    /// take too many slices (the float path then computes it).
    pub(super) fn sliced_product(
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

    /// `W x` on the GPU, where the values live there and the product's sums are exact in any
    /// order ([`gpu::Gpu::product`]): the weights' integers uploaded once per session when
    /// `cacheable`, the vector's made on the GPU once per run. `None`: the CPU's paths take it.
    pub(super) fn gpu_product(
        &mut self,
        node: usize,
        spec: &MatVec,
        Operands {
            x, w, cacheable, ..
        }: Operands,
    ) -> Result<Option<Tensor>, Failure> {
        let Some(gpu) = self
            .gpu
            .filter(|_| self.int_products && intdot::supports(self.native))
        else {
            return Ok(None);
        };
        let (n, cols) = (spec.n, spec.cols);
        let t0 = std::time::Instant::now();
        let Some(wi) = self.int_weights(spec, w, cacheable)? else {
            return Ok(None);
        };
        let gw = self.weight_side(
            |c| &mut c.gpu,
            w,
            cacheable,
            |_| Ok(Arc::new(gpu.weights(&wi)?)),
        )?;
        let gx = match self.vectors.gpu.get(&x) {
            Some(gx) => gx.clone(),
            None => {
                let t = self.vector(x)?;
                let gx = gpu.vector_of(&t, cols, n)?.map(Arc::new);
                self.vectors.gpu.insert(x, gx.clone());
                gx
            }
        };
        tally(&mut self.prof, "gpu: operands", t0, 1);
        let Some(gx) = gx else { return Ok(None) };
        let t0 = std::time::Instant::now();
        let y = gpu.product(spec, (&wi, &gw), &gx)?;
        tally(&mut self.prof, "gpu: products", t0, 1);
        if y.is_some() {
            self.paths.insert((Path::IntKernel, node));
            self.paths.insert((Path::Gpu, node));
        }
        Ok(y)
    }
}
