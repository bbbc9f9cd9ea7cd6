//! The operands of one product on the integer kernel (weights cached for the session, the
//! vector for the run), on integer slices and on the GPU, and the GPU's products computed
//! ahead in one call.

use super::stacks::int_weights;
use super::{Operands, product_spec};
use crate::executor::{Executor, Failure};
use crate::matmul::MatVec;
use crate::session::{Caches, Path, tally};
use crate::tensors::with_host;
use crate::{ExecError, gpu, intdot};
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
    pub(super) fn int_operands(
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
    /// (the products-first order, [`Schedule::new`](nnp_lowering::swgraph::Schedule::new)), then each step's four `U h_(t-1)`. The
    /// values wait in `prefetched` until the main loop reaches their nodes; a product the GPU
    /// refuses is left to [`Executor::matvec`] (the CPU).
    pub(crate) fn prefetch_products(&mut self, upcoming: &[usize]) -> Result<(), Failure> {
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
