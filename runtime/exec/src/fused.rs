//! Runs of element-wise MFU ops evaluated together, a few rows at a time.
//!
//! The lowering emits one node per MFU instruction: an LSTM step has a dozen of them on
//! `[B, tiles * N]` values. One by one, every op reads and writes whole tensors (memory traffic,
//! an output buffer and a parallel dispatch per op). A [`Region`] is a run of consecutive nodes
//! of the evaluation order that are element-wise MFU ops (binary ops, relu, pass, table
//! activations) on vectors of one length, none of them constant: the graph's plan decides
//! which ([`Schedule::regions`]), the session which of their values it keeps. It is evaluated
//! in one parallel pass over chunks of whole rows: each node of the region on the chunk, from
//! its operands' rows (values from outside the region, or the chunk's rows of an earlier node
//! of the region), and only the values read after the region (or traced) become tensors.
//! Every element goes through the kernels of [`mfu`] exactly as in an op of its own, so the
//! bits are the same.

use super::f16c::F16c;
use super::finite::{ExponentField, all_finite};
use super::mfu::{self, ActTable};
use super::tensors::cpu_slice;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape};
use nnp_lowering::swgraph::{BinOp, Schedule, ValueId};
use nnp_numerics::FloatFormat;
use rayon::prelude::*;
use std::collections::HashSet;
use std::mem::MaybeUninit;

/// Consecutive fusable nodes of the evaluation order (positions `start..end`), all vectors of
/// one length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub start: usize,
    pub end: usize,
    /// Per node of the region: whether its value is read after the region or traced (it
    /// becomes a tensor; the others live only in the chunks' scratch rows).
    pub kept: Vec<bool>,
}

/// The regions of a schedule ([`Schedule::regions`]), with which of their values a run keeps:
/// those read after the region or `traced`.
pub(crate) fn regions(schedule: &Schedule, traced: &HashSet<ValueId>) -> Vec<Region> {
    let Schedule {
        order, last_use, ..
    } = schedule;
    let region = |r: &std::ops::Range<usize>| Region {
        start: r.start,
        end: r.end,
        kept: order[r.clone()]
            .iter()
            .map(|&k| last_use[k] >= r.end || traced.contains(&k))
            .collect(),
    };
    schedule.regions.iter().map(region).collect()
}

/// Where an operand's rows come from.
#[derive(Clone, Copy)]
pub(crate) enum Src {
    /// An earlier node of the region (its index in the region).
    Local(usize),
    /// A value from outside: its index in the outer slices (one row of a batch-1 value, a
    /// constant, is broadcast over the batch).
    Outer(usize),
}

/// One node of a region, ready to run.
pub(crate) enum Step {
    Binary {
        op: BinOp,
        format: FloatFormat,
        a: Src,
        b: Src,
        rounded: [bool; 2],
    },
    Relu(FloatFormat, Src),
    Pass(FloatFormat, Src),
    Activation {
        table: ActTable,
        x: Src,
        rounded: bool,
    },
}

/// One MFU op outside a region, as a candle op: a region of its one step, whose operands
/// (`Src::Outer(0)` and `Src::Outer(1)`) are the op's tensors, each `[batch or 1, len]`
/// contiguous f64 on the CPU (a batch-1 operand is broadcast). A binary op of two values is a
/// [`CustomOp2`]; a unary op, or a binary op of one value with itself, a [`CustomOp1`].
pub(crate) struct MfuOp {
    pub step: Step,
    pub len: usize,
}

impl MfuOp {
    fn forward(
        &self,
        operands: &[(&CpuStorage, &Layout)],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let len = self.len.max(1);
        let mut outer = Vec::with_capacity(operands.len());
        for (storage, layout) in operands {
            match cpu_slice(storage, layout) {
                Some(v) if v.len() % len == 0 => outer.push(v),
                _ => candle_core::bail!("mfu: an operand is not a contiguous f64 [batch, {len}]"),
            }
        }
        let batch = outer.iter().map(|v| v.len() / len).max().unwrap_or(1);
        if outer
            .iter()
            .any(|v| v.len() != len && v.len() != batch * len)
        {
            candle_core::bail!("mfu: operands of different batches");
        }
        let pass = RegionPass {
            steps: std::slice::from_ref(&self.step),
            kept: &[true],
            scanned: &[false],
            outer: &outer,
            batch,
            len: self.len,
        };
        let (mut values, _) = pass.run(|_, _, _, _: &mut ()| {});
        let Some(value) = values.pop() else {
            candle_core::bail!("mfu: no value")
        };
        Ok((CpuStorage::F64(value), Shape::from((batch, self.len))))
    }
}

impl CustomOp1 for MfuOp {
    fn name(&self) -> &'static str {
        "mfu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.forward(&[(s, l)])
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        match self.on_gpu(&[(s, l)])? {
            Some(out) => Ok(out),
            None => crate::device::via_host(s, l, |s, l| self.forward(&[(s, l)])),
        }
    }
}

impl CustomOp2 for MfuOp {
    fn name(&self) -> &'static str {
        "mfu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.forward(&[(s1, l1), (s2, l2)])
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        match self.on_gpu(&[(s1, l1), (s2, l2)])? {
            Some(out) => Ok(out),
            None => crate::device::via_host2((s1, l1), (s2, l2), |a, b| self.forward(&[a, b])),
        }
    }
}

#[cfg(feature = "cuda")]
impl MfuOp {
    /// The op on the GPU where its format has a kernel there (`device::mfu`); `None` where
    /// it has not (the caller runs the CPU kernel on a host copy).
    fn on_gpu(
        &self,
        operands: &[(&candle_core::CudaStorage, &Layout)],
    ) -> candle_core::Result<Option<(candle_core::CudaStorage, Shape)>> {
        use crate::device::{self, MfuKernel};
        use crate::quant::FastRound;
        let outer = |s: &Src| match *s {
            Src::Outer(k) => operands.get(k).copied(),
            Src::Local(_) => None,
        };
        let (kernel, format, table, ops) = match &self.step {
            Step::Binary {
                op,
                format,
                a,
                b,
                rounded,
            } => {
                if !mfu::binary_on_gpu(*op, format) {
                    return Ok(None);
                }
                let kernel = MfuKernel::Binary {
                    op: *op,
                    rounded: *rounded,
                };
                (kernel, *format, None, [outer(a), outer(b)])
            }
            Step::Relu(format, x) => (MfuKernel::Relu, *format, None, [outer(x), outer(x)]),
            Step::Pass(format, x) => (MfuKernel::Pass, *format, None, [outer(x), outer(x)]),
            Step::Activation { table, x, rounded } => match table.gpu_lookup(*rounded) {
                Some(k) => (k, *table.format(), Some(table), [outer(x), outer(x)]),
                None => return Ok(None),
            },
        };
        let (Some(f), [Some(a), Some(b)]) = (FastRound::new(&format), ops) else {
            return Ok(None);
        };
        let table = match table {
            Some(t) => Some(t.on_gpu(&a.0.device)?),
            None => None,
        };
        device::mfu(&kernel, &f, table, &[a, b], self.len).map(Some)
    }
}

/// How a region's rows are held and computed.
pub(crate) trait Lanes: Sync {
    type L: Copy + Default + Send + Sync + ExponentField;
    /// Whether operands from outside are converted (into a task's buffer) to be read.
    const CONVERTS: bool;
    /// Rows of an operand from outside the region as lanes: `x` itself, or converted into
    /// `buf` (rounded to the region's format unless `rounded`: every step that reads it
    /// knows it rounded already).
    fn outer<'a>(&self, x: &'a [f64], rounded: bool, buf: &'a mut [Self::L]) -> &'a [Self::L];
    /// One row of one step.
    fn step(&self, step: &Step, a: &[Self::L], b: &[Self::L], out: &mut [Self::L]);
    /// Rows as f64 into `out` (same length).
    fn write(&self, x: &[Self::L], out: &mut [MaybeUninit<f64>]);
    /// Rows as f64: `x` itself, or converted into `buf`.
    fn as_f64<'a>(&self, x: &'a [Self::L], buf: &'a mut Vec<f64>) -> &'a [f64];
}

/// f64 lanes and the [`mfu`] kernels: any format.
pub(crate) struct F64Lanes;

impl Lanes for F64Lanes {
    type L = f64;
    const CONVERTS: bool = false;

    fn outer<'a>(&self, x: &'a [f64], _: bool, _: &'a mut [f64]) -> &'a [f64] {
        x
    }

    fn step(&self, step: &Step, a: &[f64], b: &[f64], o: &mut [f64]) {
        match step {
            Step::Binary {
                op,
                format,
                rounded,
                ..
            } => mfu::binary(*op, format, a, b, o, *rounded),
            Step::Relu(f, _) => mfu::relu(f, a, o),
            Step::Pass(f, _) => mfu::pass(f, a, o),
            Step::Activation { table, rounded, .. } => mfu::activate(table, a, o, *rounded),
        }
    }

    fn write(&self, x: &[f64], out: &mut [MaybeUninit<f64>]) {
        out.write_copy_of_slice(x);
    }

    fn as_f64<'a>(&self, x: &'a [f64], _: &'a mut Vec<f64>) -> &'a [f64] {
        x
    }
}

/// fp16 values on f32 lanes with the [`F16c`] kernels: regions whose every step rounds to
/// fp16 (the default MFU format), on CPUs with F16C.
#[cfg(target_arch = "x86_64")]
impl Lanes for F16c {
    type L = f32;
    const CONVERTS: bool = true;

    fn outer<'a>(&self, x: &'a [f64], rounded: bool, buf: &'a mut [f32]) -> &'a [f32] {
        let buf = &mut buf[..x.len()];
        self.narrow(x, rounded, buf);
        buf
    }

    fn step(&self, step: &Step, a: &[f32], b: &[f32], o: &mut [f32]) {
        // Every operand is fp16 already (`F16c::for_steps`): rounded as it was read, or an
        // earlier step's fp16 value.
        match step {
            Step::Binary { op, .. } => self.binary(*op, a, b, o),
            Step::Relu(..) => self.relu(a, o),
            Step::Pass(..) => o.copy_from_slice(a),
            Step::Activation { table, .. } => self.activate(table, a, o),
        }
    }

    fn write(&self, x: &[f32], out: &mut [MaybeUninit<f64>]) {
        self.widen(x, out);
    }

    fn as_f64<'a>(&self, x: &'a [f32], buf: &'a mut Vec<f64>) -> &'a [f64] {
        buf.clear();
        buf.extend(x.iter().map(|v| f64::from(*v)));
        buf
    }
}

impl F16c {
    /// The kernels for a region's `steps` where they apply: every step rounds to IEEE fp16
    /// (an activation: its table is fp16's, with 16-bit outputs) and the CPU has F16C.
    pub(crate) fn for_steps(steps: &[Step]) -> Option<F16c> {
        let fp16 = |f: &FloatFormat| *f == FloatFormat::FP16;
        let all = steps.iter().all(|s| match s {
            Step::Binary { format, .. } | Step::Relu(format, _) | Step::Pass(format, _) => {
                fp16(format)
            }
            Step::Activation { table, .. } => table.fp16_bits().is_some(),
        });
        if all { F16c::new() } else { None }
    }
}

/// Whether every step that reads outer operand `i` knows it rounded to its format already
/// (relu and pass round their operand always).
fn outer_rounded(steps: &[Step], i: usize) -> bool {
    let is = |s: &Src| matches!(s, Src::Outer(j) if *j == i);
    steps.iter().all(|s| match s {
        Step::Binary { a, b, rounded, .. } => (!is(a) || rounded[0]) && (!is(b) || rounded[1]),
        Step::Relu(_, x) | Step::Pass(_, x) => !is(x),
        Step::Activation { x, rounded, .. } => !is(x) || *rounded,
    })
}

/// One pass of a region: its steps over `batch` rows of `len` elements. `outer[o]` holds the
/// values from outside (`batch * len` elements, or `len`: one row for every item); `kept[k]`:
/// step k's value is returned (in step order, one `batch * len` vector per kept step);
/// `scanned[k]`: step k's rows that hold a NaN or an infinity go to the pass's `scan`.
#[derive(Clone, Copy)]
pub(crate) struct RegionPass<'a> {
    pub steps: &'a [Step],
    pub kept: &'a [bool],
    pub scanned: &'a [bool],
    pub outer: &'a [&'a [f64]],
    pub batch: usize,
    pub len: usize,
}

impl RegionPass<'_> {
    /// The kept values, and the tasks' states of `scan(step, first_row, rows, state)`, called
    /// with each task's scanned rows while they are in its scratch (the non-finite checks).
    ///
    /// Regions of fp16 steps run on f32 lanes where the CPU has F16C ([`F16c`]), the others on
    /// f64 lanes; the bits are the same.
    pub(crate) fn run<S: Default + Send>(
        &self,
        scan: impl Fn(usize, usize, &[f64], &mut S) + Sync,
    ) -> (Vec<Vec<f64>>, Vec<S>) {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = F16c::for_steps(self.steps) {
            return self.run_on(&k, scan);
        }
        self.run_on(&F64Lanes, scan)
    }

    /// [`RegionPass::run`] on the lanes of `kernels`.
    fn run_on<K: Lanes, S: Default + Send>(
        &self,
        kernels: &K,
        scan: impl Fn(usize, usize, &[f64], &mut S) + Sync,
    ) -> (Vec<Vec<f64>>, Vec<S>) {
        let RegionPass {
            steps,
            kept,
            scanned,
            outer,
            batch,
            len,
        } = *self;
        // Chunks of whole rows, about 1024 elements: the steps' rows stay in L2.
        let rows_per = (1024 / len.max(1)).max(1);
        let tasks = batch.div_ceil(rows_per);
        let mut values: Vec<Vec<f64>> = kept
            .iter()
            .filter(|k| **k)
            .map(|_| Vec::with_capacity(batch * len))
            .collect();
        // Each task's pieces of the kept values, written once by that task.
        let mut pieces: Vec<Vec<&mut [MaybeUninit<f64>]>> = (0..tasks)
            .map(|_| Vec::with_capacity(values.len()))
            .collect();
        for v in values.iter_mut() {
            for (t, piece) in v.spare_capacity_mut()[..batch * len]
                .chunks_mut(rows_per * len)
                .enumerate()
            {
                pieces[t].push(piece);
            }
        }
        let rounded: Vec<bool> = (0..outer.len()).map(|i| outer_rounded(steps, i)).collect();
        // Per worker: scratch rows for every step (each step overwrites its rows before any
        // later step reads them), the outer operands' rows where they are converted, a buffer for
        // rows scanned as f64.
        let scratch_len = steps.len() * rows_per * len;
        let outer_len = if K::CONVERTS {
            outer.len() * rows_per * len
        } else {
            0
        };
        let states = pieces.into_par_iter().enumerate().map_init(
            || {
                let scratch = vec![K::L::default(); scratch_len];
                (scratch, vec![K::L::default(); outer_len], Vec::new())
            },
            |(scratch, outer_buf, wide), (t, mut pieces)| {
                let r0 = t * rows_per;
                let rows = rows_per.min(batch - r0);
                let size = rows * len;
                // The task's rows of each outer operand (one row: the same for every item).
                let mut free = &mut outer_buf[..];
                let ins: Vec<&[K::L]> = outer
                    .iter()
                    .zip(&rounded)
                    .map(|(x, &r)| {
                        let x = if x.len() == len {
                            *x
                        } else {
                            &x[r0 * len..][..size]
                        };
                        let buf = std::mem::take(&mut free);
                        let (buf, rest) = buf.split_at_mut(if K::CONVERTS { x.len() } else { 0 });
                        free = rest;
                        kernels.outer(x, r, buf)
                    })
                    .collect();
                let mut state = S::default();
                for (k, step) in steps.iter().enumerate() {
                    let (done, rest) = scratch.split_at_mut(k * size);
                    let out = &mut rest[..size];
                    for (r, o) in out.chunks_mut(len).enumerate() {
                        let row = |s: Src| -> &[K::L] {
                            match s {
                                Src::Local(j) => &done[j * size + r * len..][..len],
                                Src::Outer(i) if ins[i].len() == len => ins[i],
                                Src::Outer(i) => &ins[i][r * len..][..len],
                            }
                        };
                        let (a, b) = match step {
                            Step::Binary { a, b, .. } => (row(*a), row(*b)),
                            Step::Relu(_, x) | Step::Pass(_, x) | Step::Activation { x, .. } => {
                                (row(*x), row(*x))
                            }
                        };
                        kernels.step(step, a, b, o);
                    }
                    if scanned.get(k).copied().unwrap_or(false) && !all_finite(out) {
                        // Tested while its rows are in L1; only rows with a NaN or an infinity
                        // are scanned further (as f64).
                        scan(k, r0, kernels.as_f64(out, wide), &mut state);
                    }
                }
                // Every piece written in full (the `set_len` below relies on it).
                let kept_steps = kept.iter().enumerate().filter(|(_, k)| **k);
                assert_eq!(kept_steps.clone().count(), pieces.len());
                for ((k, _), piece) in kept_steps.zip(pieces.iter_mut()) {
                    assert_eq!(piece.len(), size);
                    kernels.write(&scratch[k * size..][..size], piece);
                }
                state
            },
        );
        let states: Vec<S> = states.collect();
        for v in values.iter_mut() {
            // SAFETY: the pieces partition the first batch * len elements of the capacity, and
            // every task wrote each of its pieces in full (asserted above).
            unsafe { v.set_len(batch * len) };
        }
        (values, states)
    }
}

#[cfg(test)]
mod tests;
