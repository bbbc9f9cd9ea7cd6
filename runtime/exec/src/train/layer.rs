//! The concordant layer's gradients, for the loops of other frameworks (torch, candle) as for
//! `nnpc train`'s own: a forward run that keeps what its backward pass reads ([`record`]),
//! and the twin's vector-Jacobian product at those values ([`backward`], the reverse pass of
//! `reverse.rs`), for the weights and the inputs. Every caller differentiates through the
//! one reverse pass; a loss given as candle ops ([`gradients`]) is differentiated by candle's
//! autograd to the outputs only.

use super::TrainError;
use super::reverse::{self, Shaped};
use super::ste::Points;
use super::twin;
use crate::{ExecOptions, Session, WrittenValue};
use candle_core::{DType, Device, Tensor, Var};
use nnp_host::{HostData, Outputs, ShapeDisplay, Tensor as HostTensor};
use nnp_lowering::swgraph::{SwGraph, ValueId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// One differentiated pass of the twin ([`gradients`]).
#[derive(Debug)]
pub struct Gradients {
    pub loss: f64,
    /// The outputs' values by name, `[batch, ...declared shape]`, f64.
    pub outputs: BTreeMap<String, Tensor>,
    /// The gradient of the loss by weight name, in the weight's shape.
    pub weights: BTreeMap<String, Tensor>,
    /// The gradient of the loss by input name, `[batch, ...declared shape]`.
    pub inputs: BTreeMap<String, Tensor>,
    /// The `dynfixed` point positions of the pass.
    pub points: Points,
}

/// The gradient of `loss(outputs)` with respect to every weight (logical shapes, f64) and every
/// input (`[batch, ...]`, f64): at the concordant graph's values where `exact` holds them
/// (an [`crate::Execution::written`] of a `keep_values` run on the same data, or the values a
/// [`Recorded`] keeps), else at the float model's. candle's autograd differentiates `loss` to
/// the outputs; the reverse pass, the one a training step runs, does the rest.
pub fn gradients(
    graph: &SwGraph,
    weights: &BTreeMap<String, Tensor>,
    inputs: &BTreeMap<String, Tensor>,
    exact: Option<&HashMap<ValueId, WrittenValue>>,
    loss: impl Fn(&BTreeMap<String, Tensor>) -> candle_core::Result<Tensor>,
) -> Result<Gradients, TrainError> {
    let leaves = Leaves {
        weights: flat(weights)?,
        inputs: flat(inputs)?,
        batch: batch_of(inputs),
    };
    let floats;
    let values = match exact {
        Some(written) => leaves.exact(graph, written)?,
        None => {
            floats = twin::forward(graph, &f64s(weights)?, &f64s(inputs)?)?;
            floats
                .iter()
                .map(|v| v.as_ref().map(reverse::Value::borrowed))
                .collect()
        }
    };
    let outputs = output_tensors(graph, reverse::outputs(graph, &values)?)?;
    let (value, output_grads) = loss_gradients(&outputs, loss)?;
    let grads = reverse::backward(graph, &values, &output_grads, true)?;
    leaves.gradients(value, outputs, grads)
}

/// The outputs of `graph`'s float model (the twin's own values) on `inputs` with `weights`:
/// for the gradient checks' finite differences.
pub fn float_outputs(
    graph: &SwGraph,
    weights: &BTreeMap<String, Tensor>,
    inputs: &BTreeMap<String, Tensor>,
) -> Result<BTreeMap<String, Tensor>, TrainError> {
    let values = twin::forward(graph, &f64s(weights)?, &f64s(inputs)?)?;
    output_tensors(graph, reverse::outputs(graph, &values)?)
}

/// The leaves of a pass, flattened f64 (weights in their logical shapes, inputs `[batch, ...]`)
/// with their shapes.
#[derive(Debug)]
pub(super) struct Leaves {
    weights: Shaped,
    inputs: Shaped,
    batch: usize,
}

impl Leaves {
    fn of_host(data: &HostData) -> Leaves {
        let flat = |ts: &BTreeMap<String, HostTensor>| {
            ts.iter()
                .map(|(n, t)| {
                    let v = t.data.iter().map(|&x| f64::from(x)).collect();
                    (n.clone(), (t.shape.clone(), v))
                })
                .collect()
        };
        Leaves {
            weights: flat(&data.weights),
            inputs: flat(&data.inputs),
            batch: data.batch,
        }
    }

    /// Every node's value: the run's `written` ones and the leaves (the rest, shapes alone).
    pub(super) fn exact<'a>(
        &'a self,
        graph: &SwGraph,
        written: &'a HashMap<ValueId, WrittenValue>,
    ) -> Result<reverse::Values<'a>, TrainError> {
        twin::exact(graph, written, &self.weights, &self.inputs, self.batch)
    }

    /// The gradients by leaf, as tensors of the leaves' shapes (zeros for a leaf the loss
    /// does not reach; inputs only where the pass gave them).
    fn gradients(
        &self,
        loss: f64,
        outputs: BTreeMap<String, Tensor>,
        mut grads: reverse::Grads,
    ) -> Result<Gradients, TrainError> {
        let tensors = |leaves: &Shaped, got: &mut BTreeMap<String, Vec<f64>>| {
            leaves
                .iter()
                .map(|(name, (shape, v))| {
                    let g = got.remove(name).unwrap_or_else(|| vec![0.0; v.len()]);
                    let t = Tensor::from_vec(g, shape.as_slice(), &Device::Cpu)
                        .map_err(|e| TrainError::tensor(&e))?;
                    Ok((name.clone(), t))
                })
                .collect::<Result<BTreeMap<_, _>, TrainError>>()
        };
        Ok(Gradients {
            loss,
            outputs,
            weights: tensors(&self.weights, &mut grads.weights)?,
            inputs: tensors(&self.inputs, &mut grads.inputs)?,
            points: grads.points,
        })
    }
}

/// Tensors flattened to f64, with their shapes.
fn flat(ts: &BTreeMap<String, Tensor>) -> Result<Shaped, TrainError> {
    ts.iter()
        .map(|(n, t)| {
            let v = t
                .flatten_all()
                .and_then(|t| t.to_dtype(DType::F64))
                .and_then(|t| t.to_vec1::<f64>())
                .map_err(|e| TrainError::tensor(&e))?;
            Ok((n.clone(), (t.dims().to_vec(), v)))
        })
        .collect()
}

/// Tensors as f64 tensors on the CPU.
fn f64s(ts: &BTreeMap<String, Tensor>) -> Result<BTreeMap<String, Tensor>, TrainError> {
    ts.iter()
        .map(|(n, t)| {
            let t = t
                .to_device(&Device::Cpu)
                .and_then(|t| t.to_dtype(DType::F64))
                .map_err(|e| TrainError::tensor(&e))?;
            Ok((n.clone(), t))
        })
        .collect()
}

/// The batch of a pass on `inputs` (1 without inputs).
fn batch_of(inputs: &BTreeMap<String, Tensor>) -> usize {
    inputs
        .values()
        .next()
        .and_then(|t| t.dims().first().copied())
        .unwrap_or(1)
}

/// The outputs ([`reverse::outputs`]) by name as `[batch, ...declared shape]` f64 tensors.
pub(super) fn output_tensors(
    graph: &SwGraph,
    mut outputs: BTreeMap<String, (usize, Vec<f64>)>,
) -> Result<BTreeMap<String, Tensor>, TrainError> {
    graph
        .outputs
        .iter()
        .map(|o| {
            let (batch, data) = outputs
                .remove(&o.name)
                .ok_or_else(|| TrainError::Internal(format!("no output `{}`", o.name)))?;
            let dims: Vec<usize> = std::iter::once(batch)
                .chain(o.shape.iter().copied())
                .collect();
            let t =
                Tensor::from_vec(data, dims, &Device::Cpu).map_err(|e| TrainError::tensor(&e))?;
            Ok((o.name.clone(), t))
        })
        .collect()
}

/// The value of `loss(outputs)` and its gradient by output (flattened; zeros for an output it
/// does not read), by candle's autograd over the loss's own ops.
pub(super) fn loss_gradients(
    outputs: &BTreeMap<String, Tensor>,
    loss: impl Fn(&BTreeMap<String, Tensor>) -> candle_core::Result<Tensor>,
) -> Result<(f64, BTreeMap<String, Vec<f64>>), TrainError> {
    let err = |e: candle_core::Error| TrainError::tensor(&e);
    let vars = outputs
        .iter()
        .map(|(n, t)| Ok((n.clone(), Var::from_tensor(t).map_err(err)?)))
        .collect::<Result<BTreeMap<String, Var>, TrainError>>()?;
    let tracked = vars
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
        .collect();
    let l = loss(&tracked).map_err(err)?;
    let value = l.to_scalar::<f64>().map_err(err)?;
    let store = l.backward().map_err(err)?;
    let grads = vars
        .iter()
        .map(|(n, v)| {
            let g = match store.get(v.as_tensor()) {
                Some(g) => g
                    .flatten_all()
                    .and_then(|g| g.to_dtype(DType::F64))
                    .and_then(|g| g.to_vec1::<f64>())
                    .map_err(err)?,
                None => vec![0.0; v.elem_count()],
            };
            Ok((n.clone(), g))
        })
        .collect::<Result<_, TrainError>>()?;
    Ok((value, grads))
}

/// A concordant forward pass and what its backward pass reads: the data it ran on and the
/// values its rules read (`read_values` in `train/reverse.rs`).
#[derive(Debug)]
pub struct Recorded {
    data: HostData,
    pub(super) written: HashMap<ValueId, WrittenValue>,
    /// The data's weights and inputs in f64, as the reverse pass reads them.
    pub(super) leaves: Leaves,
}

impl Recorded {
    /// The data the pass ran on.
    pub fn data(&self) -> &HostData {
        &self.data
    }

    /// The values the pass kept (what [`gradients`]' `exact` takes).
    pub fn written(&self) -> &HashMap<ValueId, WrittenValue> {
        &self.written
    }

    /// Every node's value for the reverse pass: the kept ones, the leaves, the rest's shapes.
    pub(super) fn values(&self, graph: &SwGraph) -> Result<reverse::Values<'_>, TrainError> {
        self.leaves.exact(graph, &self.written)
    }
}

/// The concordant graph on `data` (the bits of `nnpc run`), keeping the values [`backward`]
/// reads (for the weights' and the inputs' gradients): one pass of a fresh [`Recorder`].
pub fn record(graph: &SwGraph, data: HostData) -> Result<(Outputs, Recorded), TrainError> {
    Recorder::new(graph, true)?.record(data)
}

/// Forward passes that keep what the backward pass reads, one after another with weights that
/// may change between them (a training loop's steps, a framework layer's forward calls): the
/// recording session is planned once, and each pass prepares its own weights
/// ([`Session::change_weights`]). Each pass gives the bits of [`record`] on its data.
pub struct Recorder<'g> {
    session: Session<'g>,
}

/// The options of a recording session: one chunk, whatever the batch, so that every kept
/// value holds every item, in one pass.
fn recording_options() -> ExecOptions {
    ExecOptions {
        batch_shards: Some(1),
        chunk_items: Some(usize::MAX),
        ..ExecOptions::default()
    }
}

impl<'g> Recorder<'g> {
    /// Passes of `graph` that keep what the weights' gradients read, and the inputs' too
    /// where `want_inputs` (`reverse::read_values`): every other value is computed as a plain
    /// run computes it (fused regions, vectors quantized straight to integers, weight stacks
    /// prepared in one pass).
    pub fn new(graph: &'g SwGraph, want_inputs: bool) -> Result<Recorder<'g>, TrainError> {
        let keep = reverse::read_values(graph, want_inputs);
        Ok(Recorder {
            session: Session::recording(graph, &recording_options(), &keep)?,
        })
    }

    /// The concordant graph on `data` (its own weights, whatever the last pass's were).
    pub fn record(&mut self, data: HostData) -> Result<(Outputs, Recorded), TrainError> {
        self.session.change_weights();
        let run = self.session.run(&data)?;
        let recorded = Recorded {
            leaves: Leaves::of_host(&data),
            data,
            written: run.written,
        };
        Ok((run.outputs, recorded))
    }

    /// The graph the passes run.
    pub fn graph(&self) -> &SwGraph {
        self.session.graph()
    }
}

impl Recorder<'static> {
    /// [`Recorder::new`] on a graph it shares ownership of, so it can live as long as its
    /// owner, keeping what every gradient reads.
    pub fn shared(graph: Arc<SwGraph>) -> Result<Recorder<'static>, TrainError> {
        let keep = reverse::read_values(&graph, true);
        Ok(Recorder {
            session: Session::shared_recording(graph, &recording_options(), &keep)?,
        })
    }
}

/// A [`Recorder`] that a layer object keeps for its forward calls (a Python graph's `record`, a
/// candle [`crate::module::TrainableModule`]'s), opened at the first and shared by reference:
/// a call while another records (on another thread) takes a fresh [`record`] instead of
/// waiting. Every call gives the bits of [`record`].
pub struct SharedRecorder {
    graph: Arc<SwGraph>,
    recorder: Mutex<Option<Recorder<'static>>>,
}

impl std::fmt::Debug for SharedRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRecorder")
            .field("nodes", &self.graph.nodes.len())
            .finish_non_exhaustive()
    }
}

impl SharedRecorder {
    pub fn new(graph: Arc<SwGraph>) -> SharedRecorder {
        SharedRecorder {
            graph,
            recorder: Mutex::new(None),
        }
    }

    /// [`record`] of the graph on `data`.
    pub fn record(&self, data: HostData) -> Result<(Outputs, Recorded), TrainError> {
        let Ok(mut slot) = self.recorder.try_lock() else {
            return record(&self.graph, data);
        };
        let recorder = match &mut *slot {
            Some(r) => r,
            None => slot.insert(Recorder::shared(self.graph.clone())?),
        };
        recorder.record(data)
    }
}

/// The vector-Jacobian product of the concordant layer at `recorded`'s values: with
/// `output_grads` the gradient of some loss by output (`[batch, ...declared shape]`, any
/// float dtype; a missing output takes none), the loss's gradient by weight and by input
/// (f64, in their shapes), and the loss `sum(g * y)`. What `torch.autograd` and candle's
/// `backward` ask of the layer: [`gradients`] of that loss.
pub fn backward(
    graph: &SwGraph,
    recorded: &Recorded,
    output_grads: &BTreeMap<String, Tensor>,
) -> Result<Gradients, TrainError> {
    let batch = recorded.data.batch;
    let mut grads = BTreeMap::new();
    for (name, g) in output_grads {
        let Some(out) = graph.outputs.iter().find(|o| &o.name == name) else {
            let names: Vec<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
            return Err(TrainError::Data(format!(
                "a gradient for `{name}`, which is not an output of the program; its outputs \
                 are {}",
                names.join(", ")
            )));
        };
        let want: Vec<usize> = std::iter::once(batch)
            .chain(out.shape.iter().copied())
            .collect();
        if g.dims() != want {
            return Err(TrainError::Data(format!(
                "the gradient of output `{name}` has shape {}; the pass made {}",
                ShapeDisplay(g.dims()),
                ShapeDisplay(&want)
            )));
        }
        let g = g
            .to_device(&Device::Cpu)
            .and_then(|g| g.flatten_all())
            .and_then(|g| g.to_dtype(DType::F64))
            .and_then(|g| g.to_vec1::<f64>())
            .map_err(|e| TrainError::tensor(&e))?;
        grads.insert(name.clone(), g);
    }
    let values = recorded.values(graph)?;
    let outputs = reverse::outputs(graph, &values)?;
    let mut loss = 0.0;
    for (name, (_, y)) in &outputs {
        if let Some(g) = grads.get(name) {
            loss += y.iter().zip(g).map(|(y, g)| y * g).sum::<f64>();
        }
    }
    let outputs = output_tensors(graph, outputs)?;
    let g = reverse::backward(graph, &values, &grads, true)?;
    recorded.leaves.gradients(loss, outputs, g)
}

/// Host tensors as f64 candle tensors on the CPU.
pub(super) fn f64_tensors(
    ts: &BTreeMap<String, HostTensor>,
) -> Result<BTreeMap<String, Tensor>, TrainError> {
    ts.iter()
        .map(|(n, t)| {
            let v: Vec<f64> = t.data.iter().map(|&x| f64::from(x)).collect();
            let t = Tensor::from_vec(v, t.shape.clone(), &Device::Cpu)
                .map_err(|e| TrainError::tensor(&e))?;
            Ok((n.clone(), t))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnp_grammar::{SourceFile, Target};
    use std::path::Path;

    /// The sample `name` (under `samples/`) checked for `target` and its graph.
    fn sample(name: &str, target: &str) -> (nnp_grammar::Program, SwGraph) {
        let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples");
        let text = std::fs::read_to_string(samples.join(name)).expect("sample");
        let target = Target::load(target).expect("target");
        let src = std::sync::Arc::new(SourceFile::new(name, text));
        let program = nnp_grammar::check(src, Some(target))
            .expect("checks")
            .program;
        let graph = super::super::compile(&program).expect("compiles");
        (program, graph)
    }

    /// The bits of each output and kept value, by name or node.
    fn bits(
        outputs: &Outputs,
        recorded: &Recorded,
    ) -> (BTreeMap<String, Vec<u32>>, BTreeMap<ValueId, Vec<u64>>) {
        let outputs = outputs
            .iter()
            .map(|(n, t)| (n.clone(), t.data.iter().map(|v| v.to_bits()).collect()))
            .collect();
        let written = recorded
            .written
            .iter()
            .map(|(id, w)| (*id, w.data.iter().map(|v| v.to_bits()).collect()))
            .collect();
        (outputs, written)
    }

    /// A recorder's passes, one after another on other weights and batch sizes, give the bits
    /// of a fresh [`record`] of each (outputs and every kept value) and outputs of a plain
    /// fresh run's bits: a pass prepares its own weights, never the last pass's.
    #[test]
    fn a_recorders_passes_on_changing_weights_give_fresh_records_bits() {
        let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples");
        for (name, target) in [
            ("train/digits_mlp.nnp", "bw-default".to_string()),
            (
                "bn_clip_n16.nnp",
                samples.join("targets/n16.toml").display().to_string(),
            ),
            ("gru.nnp", "bw-default".to_string()),
        ] {
            let (program, graph) = sample(name, &target);
            let graph = Arc::new(graph);
            let mut recorder = Recorder::shared(graph.clone()).expect("a recorder");
            for (batch, seed) in [(5, 1), (3, 2), (9, 3), (9, 3), (4, 4)] {
                let data = HostData::random(&program, batch, seed);
                // A pass that fails after preparing its weights (every input one element
                // short), then the next with other weights: nothing of the failed pass's
                // weights is left to the next.
                let mut short = HostData::random(&program, batch, seed + 100);
                short.inputs.values_mut().for_each(|t| {
                    t.data.pop();
                });
                let failed = recorder
                    .record(short)
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                assert!(
                    failed.as_ref().is_err_and(|e| e.contains("holds")),
                    "{name}: a short input: {failed:?}"
                );
                let (outputs, recorded) = recorder.record(data.clone()).expect("records");
                let (fresh_outputs, fresh) = record(&graph, data.clone()).expect("records");
                assert_eq!(
                    bits(&outputs, &recorded),
                    bits(&fresh_outputs, &fresh),
                    "{name}: batch {batch}, seed {seed}, after a failed pass"
                );
                let plain = crate::execute(&graph, &data, &ExecOptions::default()).expect("a run");
                assert_eq!(
                    bits(&outputs, &recorded).0,
                    bits(&plain.outputs, &recorded).0,
                    "{name}: batch {batch}, seed {seed}: a plain run"
                );
            }
        }
    }

    /// A training step's record (the weights' gradients alone) keeps fewer values than
    /// [`record`] and gives the same weight gradients, bit for bit: on the digits sample (BFP
    /// products, relu) and on `bn_clip_n16` (mul, max, tanh, a vector weight).
    #[test]
    fn a_weights_only_record_gives_the_same_weight_gradients() {
        let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples");
        let cases = [
            ("train/digits_mlp.nnp", "bw-default".to_string()),
            (
                "bn_clip_n16.nnp",
                samples.join("targets/n16.toml").display().to_string(),
            ),
        ];
        for (name, target) in cases {
            let (program, graph) = sample(name, &target);
            let data = HostData::random(&program, 4, 3);
            let (_, whole) = record(&graph, data.clone()).expect("records");
            let (_, weights_only) = Recorder::new(&graph, false)
                .and_then(|mut r| r.record(data))
                .expect("records");
            assert!(weights_only.written.len() < whole.written.len(), "{name}");
            let grads = |r: &Recorded| {
                let values = r.values(&graph).expect("values");
                let outputs = reverse::outputs(&graph, &values).expect("outputs");
                let g: BTreeMap<String, Vec<f64>> = outputs
                    .into_iter()
                    .map(|(n, (_, y))| (n, y.iter().map(|v| v.sin()).collect()))
                    .collect();
                reverse::backward(&graph, &values, &g, false).expect("backward")
            };
            let (a, b) = (grads(&whole), grads(&weights_only));
            assert!(!a.weights.is_empty(), "{name}");
            for (n, g) in &a.weights {
                let same = g
                    .iter()
                    .zip(&b.weights[n])
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same && g.len() == b.weights[n].len(), "{name}: d/d{n}");
            }
        }
    }
}
