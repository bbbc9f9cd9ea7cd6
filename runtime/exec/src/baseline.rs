//! Baselines the software graph is measured against (`nnpc bench`, `runtime/exec/benches`):
//!
//! - [`Floor`]: every product of a graph (one per `TiledMatVec`) as a plain f32 candle matmul
//!   of the same shape, `[rows * N, cols * N] x [cols * N, batch]`: no quantization, no exact
//!   accumulation, weights already in place. What this machine needs for the arithmetic alone.
//! - [`quantize_vs_elementwise`]: the quantize kernel the graph runs next to a plain
//!   element-wise candle op (`affine`) over the same tensor.

use super::{ExecError, quant, short};
use candle_core::{DType, Device, Tensor};
use nnp_lowering::swgraph::{Op, SwGraph, ValueId};
use nnp_numerics::Format;
use std::collections::HashMap;
use std::time::Instant;

fn err(e: candle_core::Error) -> ExecError {
    ExecError::Device(short(&e))
}

/// Plain f32 matmuls of a graph's product shapes.
pub struct Floor {
    /// One matrix per distinct weight stack.
    mats: Vec<Tensor>,
    /// One batch of vectors per distinct width.
    vecs: Vec<Tensor>,
    /// (matrix, vectors) of every product, in graph order.
    calls: Vec<(usize, usize)>,
}

impl Floor {
    /// The matrices and vectors of `graph`'s products at `batch`, filled with uniform values.
    pub fn new(graph: &SwGraph, batch: usize) -> Result<Floor, ExecError> {
        let n = graph.native;
        let (mut mats, mut vecs, mut calls) = (Vec::new(), Vec::new(), Vec::new());
        let mut by_w: HashMap<ValueId, usize> = HashMap::new();
        let mut by_cols: HashMap<u32, usize> = HashMap::new();
        for node in &graph.nodes {
            let Op::TiledMatVec { w, rows, cols, .. } = &node.op else {
                continue;
            };
            let (r, c) = (*rows as usize * n, *cols as usize * n);
            let m = match by_w.get(w) {
                Some(&i) => i,
                None => {
                    mats.push(Tensor::rand(-1f32, 1f32, (r, c), &Device::Cpu).map_err(err)?);
                    by_w.insert(*w, mats.len() - 1);
                    mats.len() - 1
                }
            };
            let v = match by_cols.get(cols) {
                Some(&i) => i,
                None => {
                    let t = Tensor::rand(-1f32, 1f32, (c, batch.max(1)), &Device::Cpu);
                    vecs.push(t.map_err(err)?);
                    by_cols.insert(*cols, vecs.len() - 1);
                    vecs.len() - 1
                }
            };
            calls.push((m, v));
        }
        Ok(Floor { mats, vecs, calls })
    }

    /// Number of products (the graph's `TiledMatVec` nodes).
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// Multiply-accumulates of one pass.
    pub fn macs(&self) -> u64 {
        self.calls
            .iter()
            .map(|&(m, v)| {
                let (r, c) = self.mats[m].dims2().unwrap_or((0, 0));
                let b = self.vecs[v].dims().get(1).copied().unwrap_or(0);
                (r * c * b) as u64
            })
            .sum()
    }

    /// Run every product once.
    pub fn run(&self) -> Result<(), ExecError> {
        for &(m, v) in &self.calls {
            let y = self.mats[m].matmul(&self.vecs[v]).map_err(err)?;
            std::hint::black_box(y);
        }
        Ok(())
    }
}

/// Seconds of the quantize kernel and of a plain element-wise candle op over the same
/// `len`-element f64 tensor (medians of `reps` alternating timed passes after one warm-up pass
/// each).
#[derive(Clone, Copy, Debug)]
pub struct KernelTimes {
    pub len: usize,
    pub quantize_s: f64,
    pub elementwise_s: f64,
}

/// Time [`quant::quantize_runs`] with `fmt` (runs of `n`, the graph's vector quantization)
/// against `x * 1.5 + 0.25` (candle's `affine`) on the same f64 data.
pub fn quantize_vs_elementwise(
    fmt: &Format,
    n: usize,
    len: usize,
    reps: usize,
) -> Result<KernelTimes, ExecError> {
    let len = len.max(n).div_ceil(n) * n;
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let x: Vec<f64> = (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect();
    let mut out = vec![0.0f64; len];
    let t = Tensor::from_vec(x.clone(), len, &Device::Cpu).map_err(err)?;
    // The kernel writes into one output buffer (its throughput); candle's op allocates its
    // output, as candle ops do.
    let mut quantize = || {
        quant::quantize_runs(fmt, &x, n, n, &mut out);
        std::hint::black_box(&out);
    };
    let elementwise = || -> Result<(), ExecError> {
        let y = t.affine(1.5, 0.25).map_err(err)?;
        debug_assert_eq!(y.dtype(), DType::F64);
        std::hint::black_box(y);
        Ok(())
    };
    // Warm both, then alternate so both see the same machine load.
    quantize();
    elementwise()?;
    let (quantize_s, elementwise_s) = alternate(
        reps,
        || {
            quantize();
            Ok(())
        },
        elementwise,
    )?;
    Ok(KernelTimes {
        len,
        quantize_s,
        elementwise_s,
    })
}

/// Median seconds of `reps` (at least 1) timed calls of `a` and of `b`, alternating so both
/// see the same machine load (the caller warms them first).
pub fn alternate<E>(
    reps: usize,
    mut a: impl FnMut() -> Result<(), E>,
    mut b: impl FnMut() -> Result<(), E>,
) -> Result<(f64, f64), E> {
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        let s = Instant::now();
        a()?;
        ta.push(s.elapsed().as_secs_f64());
        let s = Instant::now();
        b()?;
        tb.push(s.elapsed().as_secs_f64());
    }
    Ok((median(&mut ta), median(&mut tb)))
}

/// The median (mean of the middle two for an even count); 0 for no values.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        l if l % 2 == 1 => v[l / 2],
        l => (v[l / 2 - 1] + v[l / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
