//! Firmware as a trainable candle layer: its weights are [`Var`]s, and `forward`'s result
//! carries the layer's backward op, so candle's autograd and `candle_nn`'s optimizers train
//! it in a plain candle loop.
//!
//! ```no_run
//! use candle_core::{DType, Device, Module, Tensor};
//! use nnp_exec::module::{TrainableModule, Weights};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = TrainableModule::from_path("samples/mlp2_relu.nnp", None, Weights::Random { seed: 0 })?;
//! let x = Tensor::zeros(layer.module().batched_input_shape(8)?, DType::F32, &Device::Cpu)?;
//! let loss = layer.forward(&x)?.sqr()?.sum_all()?;
//! let grads = loss.backward()?; // a gradient for every `layer.vars()` and for `x`
//! # Ok(())
//! # }
//! ```
//!
//! The forward values are the concordant graph's (bit-identical to `nnpc run` on the
//! variables' current values, as [`FirmwareModule`]'s); the backward op is the twin's
//! straight-through gradient, [`crate::train::backward`], the one `nnpc train` and the Python
//! package use (docs/training.md). The layer runs on the CPU: inputs on another device are
//! refused.

use super::{FirmwareModule, ModuleError, Weights, candle_err};
use crate::train::{self, Recorded};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Module, Shape, Tensor, Var};
use nnp_host::{HostData, LoadOptions, Tensor as HostTensor};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

/// A firmware program whose weights train (see the module docs).
#[derive(Debug)]
pub struct TrainableModule {
    module: Arc<FirmwareModule>,
    /// The weights by name, f32 in their declared (logical) shapes.
    vars: Vec<(String, Var)>,
    /// The forward calls' recording session, planned once.
    recorder: Arc<train::SharedRecorder>,
}

impl TrainableModule {
    /// `module`'s program, with its weights as the variables' starting values.
    pub fn new(module: FirmwareModule) -> Result<TrainableModule, ModuleError> {
        let vars = module
            .weights()
            .into_iter()
            .map(|(name, t)| {
                let v = Var::from_vec(t.data, t.shape, &Device::Cpu)
                    .map_err(|e| candle_err(&format!("weight `{name}`"), e))?;
                Ok((name, v))
            })
            .collect::<Result<_, ModuleError>>()?;
        Ok(TrainableModule {
            recorder: Arc::new(train::SharedRecorder::new(module.graph.clone())),
            module: Arc::new(module),
            vars,
        })
    }

    /// The firmware file `path` (as [`FirmwareModule::from_path`]).
    pub fn from_path(
        path: impl AsRef<Path>,
        target: Option<&str>,
        weights: Weights,
    ) -> Result<TrainableModule, ModuleError> {
        TrainableModule::new(FirmwareModule::from_path(path, target, weights)?)
    }

    /// The program and graph the layer runs (its names and shapes).
    pub fn module(&self) -> &FirmwareModule {
        &self.module
    }

    /// The variables, for an optimizer (`candle_nn::AdamW::new(layer.vars(), ..)`).
    pub fn vars(&self) -> Vec<Var> {
        self.vars.iter().map(|(_, v)| v.clone()).collect()
    }

    /// The variables by weight name.
    pub fn named_vars(&self) -> impl Iterator<Item = (&str, &Var)> {
        self.vars.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// The variables' current values as host tensors (what a weights file holds).
    pub fn weights(&self) -> Result<BTreeMap<String, HostTensor>, ModuleError> {
        self.vars
            .iter()
            .map(|(name, v)| {
                let t = v.as_tensor();
                let data = t
                    .flatten_all()
                    .and_then(|t| t.to_vec1::<f32>())
                    .map_err(|e| candle_err(&format!("weight `{name}`"), e))?;
                let shape = t.dims().to_vec();
                Ok((name.clone(), HostTensor { shape, data }))
            })
            .collect()
    }

    /// A forward-only [`FirmwareModule`] with the variables' current values (for evaluation
    /// with a warm session, or to hand its [`FirmwareModule::host_data`] to the emulator).
    pub fn frozen(&self) -> Result<FirmwareModule, ModuleError> {
        let weights = self
            .weights()?
            .into_iter()
            .map(|(n, t)| {
                let t = Tensor::from_vec(t.data, t.shape, &Device::Cpu)
                    .map_err(|e| candle_err(&format!("weight `{n}`"), e))?;
                Ok((n, t))
            })
            .collect::<Result<_, ModuleError>>()?;
        FirmwareModule::from_program(
            self.module.program.clone(),
            Weights::Tensors(weights),
            &crate::ExecOptions::default(),
        )
    }

    /// Every input by name (`[batch, ...declared shape]`) to every output by name, f32, each
    /// carrying the gradient back to the variables and the inputs.
    pub fn forward_named(
        &self,
        inputs: &BTreeMap<String, Tensor>,
    ) -> Result<BTreeMap<String, Tensor>, ModuleError> {
        let (batch, _) = self.module.host_inputs(inputs)?;
        if let Some((name, t)) = inputs.iter().find(|(_, t)| !t.device().is_cpu()) {
            return Err(ModuleError::call(format!(
                "input `{name}` is on {:?}; the trainable layer runs on the CPU (move it with \
                 `.to_device(&Device::Cpu)`)",
                t.device()
            )));
        }
        let flat = |t: &Tensor| t.to_dtype(DType::F32).and_then(|t| t.flatten_all());
        let mut parts = Vec::new();
        let mut pieces = Vec::new();
        for (name, v) in &self.vars {
            parts.push(flat(v.as_tensor()).map_err(|e| candle_err(name, e))?);
            pieces.push((name.clone(), v.dims().to_vec()));
        }
        for (name, t) in inputs {
            parts.push(flat(t).map_err(|e| candle_err(name, e))?);
            pieces.push((name.clone(), t.dims().to_vec()));
        }
        let outputs: Vec<(String, Vec<usize>)> = self
            .module
            .program
            .outputs()
            .map(|d| {
                let shape = std::iter::once(batch).chain(d.shape.iter().copied());
                (d.name.clone(), shape.collect())
            })
            .collect();
        let op = LayerOp {
            module: self.module.clone(),
            recorder: self.recorder.clone(),
            batch,
            weights: self.vars.len(),
            pieces,
            outputs: outputs.clone(),
            recorded: Mutex::new(None),
        };
        let all = Tensor::cat(&parts, 0)
            .and_then(|t| t.apply_op1(op))
            .map_err(|e| ModuleError::call(first_line(&e)))?;
        let mut at = 0;
        outputs
            .into_iter()
            .map(|(name, shape)| {
                let n: usize = shape.iter().product();
                let t = all
                    .narrow(0, at, n)
                    .and_then(|t| t.reshape(shape))
                    .map_err(|e| candle_err(&format!("output `{name}`"), e))?;
                at += n;
                Ok((name, t))
            })
            .collect()
    }
}

impl Module for TrainableModule {
    /// The program's one input to its one output ([`TrainableModule::forward_named`] for
    /// programs with several).
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        super::forward_one(&self.module.program, xs, |inputs| {
            self.forward_named(inputs)
        })
    }
}

/// The first line of a candle error (its Display may carry a backtrace after it).
fn first_line(e: &candle_core::Error) -> String {
    let text = e.to_string();
    text.lines().next().unwrap_or("candle error").to_string()
}

/// The layer as one candle op on the concatenation of its variables and inputs (flattened,
/// f32), to the concatenation of its outputs: forward is the concordant graph, backward
/// [`train::backward`] at the values forward recorded.
struct LayerOp {
    module: Arc<FirmwareModule>,
    recorder: Arc<train::SharedRecorder>,
    batch: usize,
    /// How many of `pieces` are weights (the rest are inputs).
    weights: usize,
    /// Name and shape of each part of the op's argument, in order.
    pieces: Vec<(String, Vec<usize>)>,
    /// Name and shape of each part of the op's result, in order.
    outputs: Vec<(String, Vec<usize>)>,
    recorded: Mutex<Option<Recorded>>,
}

impl CustomOp1 for LayerOp {
    fn name(&self) -> &'static str {
        "firmware"
    }

    fn cpu_fwd(&self, s: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(v), Some((start, end))) = (s, layout.contiguous_offsets()) else {
            candle_core::bail!("firmware layer: not a contiguous f32 argument");
        };
        let mut values = &v[start..end];
        let mut tensors = BTreeMap::new();
        for (name, shape) in &self.pieces {
            let n: usize = shape.iter().product();
            let Some((part, rest)) = values.split_at_checked(n) else {
                candle_core::bail!("firmware layer: the argument ends inside `{name}`");
            };
            values = rest;
            let t = HostTensor {
                shape: shape.clone(),
                data: part.to_vec(),
            };
            tensors.insert(name.clone(), t);
        }
        let opts = LoadOptions {
            batch: Some(self.batch),
            random_missing: false,
            seed: 0,
        };
        let searched = "the layer's variables and inputs";
        let data = HostData::from_tensors(&self.module.program, tensors, &opts, searched)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let (outputs, recorded) = self
            .recorder
            .record(data)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let mut out = Vec::new();
        for (name, _) in &self.outputs {
            let Some(t) = outputs.get(name) else {
                candle_core::bail!("firmware layer: the run made no output `{name}`");
            };
            out.extend_from_slice(&t.data);
        }
        *self.recorded.lock().unwrap_or_else(PoisonError::into_inner) = Some(recorded);
        let n = out.len();
        Ok((CpuStorage::F32(out), Shape::from(n)))
    }

    fn bwd(&self, _: &Tensor, _: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(recorded) = recorded.as_ref() else {
            candle_core::bail!("firmware layer: backward before forward");
        };
        let mut grads = BTreeMap::new();
        let mut at = 0;
        for (name, shape) in &self.outputs {
            let n: usize = shape.iter().product();
            grads.insert(
                name.clone(),
                grad.narrow(0, at, n)?.reshape(shape.as_slice())?,
            );
            at += n;
        }
        let g = train::backward(&self.module.graph, recorded, &grads)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let mut parts = Vec::new();
        for (i, (name, _)) in self.pieces.iter().enumerate() {
            let by_name = if i < self.weights {
                &g.weights
            } else {
                &g.inputs
            };
            let Some(t) = by_name.get(name) else {
                candle_core::bail!("firmware layer: no gradient for `{name}`");
            };
            parts.push(t.flatten_all()?.to_dtype(DType::F32)?);
        }
        Ok(Some(Tensor::cat(&parts, 0)?))
    }
}
