//! Baselines the software graph is measured against (`nnpc bench`, `runtime/exec/benches`):
//!
//! - [`Floor`]: every product of a graph (one per `TiledMatVec`) as a plain f32 candle matmul
//!   of the same shape, `[rows * N, cols * N] x [cols * N, batch]`: no quantization, no exact
//!   accumulation, weights already in place. What this machine needs for the arithmetic alone.
//!   This is candle's own f32 matmul (its CPU backend's `gemm`), not the machine's f32 peak:
//!   the fraction of it that matmul reaches is the machine's and candle's, not the graph's.
//! - [`IntProducts`]: the same products on the integer kernel ([`intdot::matvec`]) on random
//!   BFP 8 operands, nothing else: what the products alone take at this batch.
//! - [`int8_peak`]: the machine's int8 multiply-adds per second, on the CPU's best integer
//!   instruction, registers only (`peak`): the graph's and the products' multiply-adds per
//!   second are fractions of it.
//! - [`quantize_vs_elementwise`]: the quantize kernel the graph runs next to a plain
//!   element-wise candle op (`affine`) over the same tensor.
//! - [`interleave`]: rounds of several timed runs, each in every round or by a rule of its own
//!   (the emulator's: [`emulator_runs_again`]), so that all see the same machine load.

mod peak;

pub use peak::{FmaPeak, Peak, PeakKernel, f32_fma_peak, int8_peak};

use super::{ExecError, intdot, quant, short};
use crate::matmul::MatVec;
use crate::products::product_spec;
use candle_core::{DType, Device, Tensor};
use nnp_lowering::swgraph::{SwGraph, ValueId};
use nnp_numerics::Format;
use std::collections::HashMap;
use std::time::Instant;

fn err(e: candle_core::Error) -> ExecError {
    ExecError::Device(short(&e))
}

/// The shapes of a graph's products: one `(rows * N, cols * N)` per distinct weight stack,
/// one width `cols * N` per distinct vector width, and `(spec, stack, width)` of every product
/// in graph order.
struct Shapes {
    stacks: Vec<(usize, usize)>,
    widths: Vec<usize>,
    calls: Vec<(MatVec, usize, usize)>,
}

impl Shapes {
    fn of(graph: &SwGraph) -> Shapes {
        let n = graph.native;
        let (mut stacks, mut widths, mut calls) = (Vec::new(), Vec::new(), Vec::new());
        let mut by_w: HashMap<ValueId, usize> = HashMap::new();
        let mut by_cols: HashMap<usize, usize> = HashMap::new();
        for node in &graph.nodes {
            let Some((spec, _, w)) = product_spec(&node.op, n) else {
                continue;
            };
            let (r, c) = (spec.rows * n, spec.cols * n);
            let m = *by_w.entry(w).or_insert_with(|| {
                stacks.push((r, c));
                stacks.len() - 1
            });
            let v = *by_cols.entry(c).or_insert_with(|| {
                widths.push(c);
                widths.len() - 1
            });
            calls.push((spec, m, v));
        }
        Shapes {
            stacks,
            widths,
            calls,
        }
    }

    /// Multiply-accumulates of one pass at `batch`: every weight of every product's stack
    /// once per item (the padding to N included, as the kernel's tiles hold it).
    fn macs(&self, batch: usize) -> u64 {
        let each = |&(_, m, _): &(MatVec, usize, usize)| {
            let (r, c) = self.stacks[m];
            (r * c) as u64
        };
        self.calls.iter().map(each).sum::<u64>() * batch as u64
    }
}

/// Plain f32 matmuls of a graph's product shapes.
pub struct Floor {
    /// One matrix per distinct weight stack.
    mats: Vec<Tensor>,
    /// One batch of vectors per distinct width.
    vecs: Vec<Tensor>,
    shapes: Shapes,
    batch: usize,
}

impl Floor {
    /// The matrices and vectors of `graph`'s products at `batch`, filled with uniform values.
    pub fn new(graph: &SwGraph, batch: usize) -> Result<Floor, ExecError> {
        let shapes = Shapes::of(graph);
        let batch = batch.max(1);
        let rand = |shape: (usize, usize)| Tensor::rand(-1f32, 1f32, shape, &Device::Cpu);
        let mats = shapes.stacks.iter().map(|&rc| rand(rc));
        let mats = mats.collect::<Result<_, _>>().map_err(err)?;
        let vecs = shapes.widths.iter().map(|&c| rand((c, batch)));
        let vecs = vecs.collect::<Result<_, _>>().map_err(err)?;
        Ok(Floor {
            mats,
            vecs,
            shapes,
            batch,
        })
    }

    /// Number of products (the graph's `TiledMatVec` nodes).
    pub fn calls(&self) -> usize {
        self.shapes.calls.len()
    }

    /// Multiply-accumulates of one pass.
    pub fn macs(&self) -> u64 {
        self.shapes.macs(self.batch)
    }

    /// Run every product once.
    pub fn run(&self) -> Result<(), ExecError> {
        for &(_, m, v) in &self.shapes.calls {
            let y = self.mats[m].matmul(&self.vecs[v]).map_err(err)?;
            std::hint::black_box(y);
        }
        Ok(())
    }
}

/// A graph's products on the integer kernel alone ([`intdot::matvec`], the kernel
/// [`intdot::Kernel::best`]), on random operands of its shapes at one batch, their integers
/// in `-127..=127` (BFP 8 mantissas: bytes where the CPU has AVX-512 VNNI) with one unit per
/// run: each product as the graph's run computes it, with its accumulation and output format,
/// and nothing else of the run.
pub struct IntProducts {
    weights: Vec<intdot::IntWeights>,
    vectors: Vec<intdot::IntVector>,
    shapes: Shapes,
    batch: usize,
}

impl IntProducts {
    /// The operands of `graph`'s products at `batch`; `None` where the integer kernel does
    /// not run (no AVX2, a native dimension it does not take, or no product).
    pub fn new(graph: &SwGraph, batch: usize) -> Option<IntProducts> {
        let (n, batch) = (graph.native, batch.max(1));
        if !intdot::simd() || !intdot::supports(n) {
            return None;
        }
        let shapes = Shapes::of(graph);
        let mut weights = Vec::new();
        for &(r, c) in &shapes.stacks {
            // Tile by tile (a whole stack of f64 would be 8 bytes a weight).
            let tile = |t: usize, dst: &mut [f64], _: &mut [f64]| bfp8(t as u64, dst);
            let source = intdot::TileSource::Made(tile);
            weights.push(intdot::IntWeights::from_tiles(r / n, c / n, n, source)?);
        }
        let mut vectors = Vec::new();
        for (k, &c) in shapes.widths.iter().enumerate() {
            let mut x = vec![0.0; batch * c];
            bfp8(u64::MAX - k as u64, &mut x);
            vectors.push(intdot::IntVector::new(&x, batch, c / n, n)?);
        }
        let fit = |&(_, m, v): &(MatVec, usize, usize)| intdot::fits(&weights[m], &vectors[v]);
        (!shapes.calls.is_empty() && shapes.calls.iter().all(fit)).then_some(IntProducts {
            weights,
            vectors,
            shapes,
            batch,
        })
    }

    /// Multiply-accumulates of one pass.
    pub fn macs(&self) -> u64 {
        self.shapes.macs(self.batch)
    }

    /// Whether every product ran on bytes ([`intdot::Kernel::Vnni`]).
    pub fn on_bytes(&self) -> bool {
        let kernel = intdot::Kernel::best();
        let bytes = |&(_, m, v): &(MatVec, usize, usize)| {
            intdot::on_bytes(kernel, &self.weights[m], &self.vectors[v])
        };
        self.shapes.calls.iter().all(bytes)
    }

    /// Run every product once.
    pub fn run(&self) {
        let kernel = intdot::Kernel::best();
        for (spec, m, v) in &self.shapes.calls {
            let y = intdot::matvec(spec, &self.weights[*m], &self.vectors[*v], kernel);
            std::hint::black_box(y);
        }
    }
}

/// Fill `dst` with values `q / 128`, `q` uniform in `-127..=127` (a run of BFP 8 mantissas
/// with one unit), drawn from `seed`.
fn bfp8(seed: u64, dst: &mut [f64]) {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for v in dst {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *v = ((s >> 40) % 255) as f64 / 128.0 - 127.0 / 128.0;
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
    let mut runs = [Timed::every(&mut a), Timed::every(&mut b)];
    let times = interleave(reps.max(1), &mut runs)?;
    let med = |k: usize| {
        let mut ran: Vec<f64> = times[k].iter().flatten().copied().collect();
        median(&mut ran)
    };
    Ok((med(0), med(1)))
}

/// One timed run of [`interleave`]: the run, and whether it runs in a round given its times
/// so far (`None` for the rounds it sat out).
pub struct Timed<'a, E> {
    pub run: &'a mut dyn FnMut() -> Result<(), E>,
    pub when: &'a dyn Fn(&[Option<f64>]) -> bool,
}

impl<'a, E> Timed<'a, E> {
    /// A run timed in every round.
    pub fn every(run: &'a mut dyn FnMut() -> Result<(), E>) -> Timed<'a, E> {
        Timed {
            run,
            when: &|_| true,
        }
    }
}

/// `rounds` rounds of the runs `timed`, in turn: in each, every run whose rule says so
/// ([`Timed::when`]) runs once, timed. The seconds of each run by round, `None` where it sat
/// out; the caller warms the runs first.
pub fn interleave<E>(
    rounds: usize,
    timed: &mut [Timed<'_, E>],
) -> Result<Vec<Vec<Option<f64>>>, E> {
    let mut times = vec![Vec::with_capacity(rounds); timed.len()];
    for _ in 0..rounds {
        for (t, past) in timed.iter_mut().zip(&mut times) {
            if !(t.when)(past) {
                past.push(None);
                continue;
            }
            let s = Instant::now();
            (t.run)()?;
            past.push(Some(s.elapsed().as_secs_f64()));
        }
    }
    Ok(times)
}

/// Seconds under which one emulator run is timed at least [`EMU_MIN_RUNS`] times.
pub const EMU_SHORT_S: f64 = 10.0;
/// Emulator runs of a short program, at least.
pub const EMU_MIN_RUNS: usize = 3;
/// Seconds the emulator's runs of a short program may add up to before it stops at
/// [`EMU_MIN_RUNS`] (below them, it runs in every round).
pub const EMU_BUDGET_S: f64 = 1.0;

/// The emulator's rule in [`interleave`], given its times so far: its first round always; then,
/// where that run took under [`EMU_SHORT_S`], until it ran [`EMU_MIN_RUNS`] times, and after
/// that while its runs add up to under [`EMU_BUDGET_S`]; a long run once.
pub fn emulator_runs_again(past: &[Option<f64>]) -> bool {
    let ran: Vec<f64> = past.iter().flatten().copied().collect();
    match ran.first() {
        None => true,
        Some(&first) if first >= EMU_SHORT_S => false,
        Some(_) => ran.len() < EMU_MIN_RUNS || ran.iter().sum::<f64>() < EMU_BUDGET_S,
    }
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

    /// The emulator's runs, counted by hand from their times.
    #[test]
    fn the_emulator_runs_at_least_three_times_when_short() {
        let runs = |t: f64, rounds: usize| {
            let mut past = Vec::new();
            for _ in 0..rounds {
                past.push(emulator_runs_again(&past).then_some(t));
            }
            past.iter().flatten().count()
        };
        // 0.3 s each: three runs (0.9 s), then a fourth (under 1 s before it), then 1.2 s: stop.
        assert_eq!(runs(0.3, 10), 4);
        // 0.5 s each: three runs whatever the budget (1.5 s), no more.
        assert_eq!(runs(0.5, 10), 3);
        // 4.6 s (the LSTM at batch 64): three runs, 13.8 s.
        assert_eq!(runs(4.6, 10), 3);
        // Short runs go on in every round, up to the rounds there are.
        assert_eq!(runs(0.01, 5), 5);
        // A run of 10 s or more: once.
        assert_eq!(runs(12.0, 10), 1);
        assert_eq!(runs(0.01, 1), 1);
    }

    /// Rounds in turn: each run in the rounds its rule gives, in order.
    #[test]
    fn interleave_times_each_run_in_its_rounds() {
        let order = std::cell::RefCell::new(Vec::new());
        let mut a = || -> Result<(), ()> {
            order.borrow_mut().push('a');
            Ok(())
        };
        let mut b = || -> Result<(), ()> {
            order.borrow_mut().push('b');
            Ok(())
        };
        let twice = |past: &[Option<f64>]| past.iter().flatten().count() < 2;
        let mut runs = [
            Timed::every(&mut a),
            Timed {
                run: &mut b,
                when: &twice,
            },
        ];
        let times = interleave(3, &mut runs).expect("no run fails");
        assert_eq!(*order.borrow(), ['a', 'b', 'a', 'b', 'a']);
        assert_eq!(times[0].iter().flatten().count(), 3);
        assert_eq!(times[1][2], None);
        assert!(times[1][..2].iter().all(Option::is_some));
    }
}
