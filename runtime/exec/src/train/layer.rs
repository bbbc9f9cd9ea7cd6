//! The concordant layer's gradients, for the loops of other frameworks (torch, candle) as for
//! `nnpc train`'s own: a forward run that keeps what its backward pass reads ([`record`]),
//! and the twin's vector-Jacobian product at those values ([`backward`]), for the weights and
//! the inputs. Every caller differentiates through [`gradients`], one code path.

use super::TrainError;
use super::ste::Points;
use super::twin;
use crate::{ExecOptions, Session, WrittenValue};
use candle_core::{DType, Device, Tensor, Var};
use nnp_host::{HostData, Outputs, ShapeDisplay, Tensor as HostTensor};
use nnp_lowering::swgraph::{SwGraph, ValueId};
use std::collections::{BTreeMap, HashMap};

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
/// (an [`crate::Execution::written`] of a `keep_values` run on the same data, as
/// [`Recorded`] keeps), else at the float model's. What a training step differentiates.
pub fn gradients(
    graph: &SwGraph,
    weights: &BTreeMap<String, Tensor>,
    inputs: &BTreeMap<String, Tensor>,
    exact: Option<&HashMap<ValueId, WrittenValue>>,
    loss: impl Fn(&BTreeMap<String, Tensor>) -> candle_core::Result<Tensor>,
) -> Result<Gradients, TrainError> {
    let err = |e: candle_core::Error| TrainError::tensor(&e);
    let variables = |ts: &BTreeMap<String, Tensor>| {
        ts.iter()
            .map(|(n, t)| Ok((n.clone(), Var::from_tensor(t).map_err(err)?)))
            .collect::<Result<BTreeMap<String, Var>, TrainError>>()
    };
    let (weight_vars, input_vars) = (variables(weights)?, variables(inputs)?);
    let tensors = |vs: &BTreeMap<String, Var>| {
        vs.iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let mode = match exact {
        Some(e) => twin::Mode::Exact(e),
        None => twin::Mode::Float,
    };
    let pass = twin::forward(graph, &tensors(&weight_vars), &tensors(&input_vars), mode)?;
    let l = loss(&pass.outputs).map_err(err)?;
    let value = l.to_scalar::<f64>().map_err(err)?;
    let grads = l.backward().map_err(err)?;
    let gradient_of = |vs: &BTreeMap<String, Var>| {
        vs.iter()
            .map(|(n, v)| {
                let g = match grads.get(v.as_tensor()) {
                    Some(g) => g.clone(),
                    None => v.as_tensor().zeros_like().map_err(err)?,
                };
                Ok((n.clone(), g))
            })
            .collect::<Result<BTreeMap<_, _>, TrainError>>()
    };
    let outputs = pass
        .outputs
        .iter()
        .map(|(n, t)| (n.clone(), t.detach()))
        .collect();
    Ok(Gradients {
        loss: value,
        outputs,
        weights: gradient_of(&weight_vars)?,
        inputs: gradient_of(&input_vars)?,
        points: pass.points,
    })
}

/// The outputs of `graph`'s float model (the twin's own values) on `inputs` with `weights`:
/// for the gradient checks' finite differences.
pub fn float_outputs(
    graph: &SwGraph,
    weights: &BTreeMap<String, Tensor>,
    inputs: &BTreeMap<String, Tensor>,
) -> Result<BTreeMap<String, Tensor>, TrainError> {
    Ok(twin::forward(graph, weights, inputs, twin::Mode::Float)?.outputs)
}

/// A concordant forward pass and what its backward pass reads: the data it ran on and the
/// value of every node.
#[derive(Debug)]
pub struct Recorded {
    data: HostData,
    pub(super) written: HashMap<ValueId, WrittenValue>,
}

impl Recorded {
    /// The data the pass ran on.
    pub fn data(&self) -> &HostData {
        &self.data
    }

    /// Every node's value (what [`gradients`]' `exact` takes).
    pub fn written(&self) -> &HashMap<ValueId, WrittenValue> {
        &self.written
    }
}

/// The concordant graph on `data` (the bits of `nnpc run`), keeping every node's value for
/// [`backward`].
pub fn record(graph: &SwGraph, data: HostData) -> Result<(Outputs, Recorded), TrainError> {
    let opts = ExecOptions {
        keep_values: true,
        // One pass over the whole batch: every kept value holds every item.
        batch_shards: Some(1),
        chunk_items: Some(data.batch.max(1)),
        ..ExecOptions::default()
    };
    let run = Session::new(graph, &opts)?.run(&data)?;
    let recorded = Recorded {
        data,
        written: run.written,
    };
    Ok((run.outputs, recorded))
}

/// The vector-Jacobian product of the concordant layer at `recorded`'s values: with
/// `output_grads` the gradient of some loss by output (`[batch, ...declared shape]`, any
/// float dtype; a missing output takes none), the loss's gradient by weight and by input
/// (f64, in their shapes). What `torch.autograd` and candle's `backward` ask of the layer.
pub fn backward(
    graph: &SwGraph,
    recorded: &Recorded,
    output_grads: &BTreeMap<String, Tensor>,
) -> Result<Gradients, TrainError> {
    let batch = recorded.data.batch;
    let mut grads = Vec::new();
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
            .and_then(|g| g.to_dtype(DType::F64))
            .map_err(|e| TrainError::tensor(&e))?;
        grads.push((name.clone(), g));
    }
    let dot = |outputs: &BTreeMap<String, Tensor>| {
        let mut total = Tensor::zeros((), DType::F64, &Device::Cpu)?;
        for (name, g) in &grads {
            let y = outputs.get(name).ok_or_else(|| {
                candle_core::Error::Msg(format!("the twin made no output `{name}`"))
            })?;
            total = (total + y.mul(g)?.sum_all()?)?;
        }
        Ok(total)
    };
    gradients(
        graph,
        &f64_tensors(&recorded.data.weights)?,
        &f64_tensors(&recorded.data.inputs)?,
        Some(&recorded.written),
        dot,
    )
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
