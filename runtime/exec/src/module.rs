//! Firmware as a candle [`Module`]: a program checked, lowered and planned once, its weights
//! fixed, then called on candle tensors like any other layer.
//!
//! ```no_run
//! use candle_core::{DType, Device, Module, Tensor};
//! use nnp_exec::module::{FirmwareModule, Weights};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = FirmwareModule::from_path("samples/lstm.nnp", None, Weights::Random { seed: 0 })?;
//! let x = Tensor::zeros(layer.batched_input_shape(8)?, DType::F32, &Device::Cpu)?;
//! let y = layer.forward(&x)?; // [8, ...the output's declared shape], f32
//! # Ok(())
//! # }
//! ```
//!
//! The values are the software graph's ([`crate`]), bit-identical to `nnpc run`: inputs of
//! any float dtype on any device are taken as f32 (the host's data type, as a tensor file's are:
//! f64 rounds to nearest), the outputs come back as f32 on the input's device, `[batch,
//! ...declared shape]`. Storage values are exact in f32, so the bits are the hardware's.
//!
//! The module keeps one warm [`Session`]: the first call prepares the weights (quantized,
//! packed as integers, tables built) and every later call reuses them, as a warm `nnpc run`
//! does.

mod trainable;

pub use trainable::TrainableModule;

use crate::{ExecError, ExecOptions, Session};
use candle_core::{DType, Device, Module, Tensor};
use nnp_grammar::{Decl, DeclKind, Diagnostics, Program, SourceFile, Target, TargetError};
use nnp_host::io::{self, IoError};
use nnp_host::{
    HostData, HostError, LoadOptions, ShapeDisplay, Tensor as HostTensor, TensorSource,
};
use nnp_lowering::swgraph::{self, LowerError, Roots, SwGraph};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Where a module's weights come from.
#[derive(Clone, Debug)]
pub enum Weights {
    /// The seeded random weights every nnpc command uses without `--weights` (the same values
    /// for the same seed).
    Random { seed: u64 },
    /// Candle tensors by declaration name, each in its declaration's logical shape.
    Tensors(BTreeMap<String, Tensor>),
    /// A weights file (safetensors, `.npy`, or a directory of `.npy`), as `--weights` takes.
    File(PathBuf),
    /// A weights file with a selection (`FILE:NAME=STORED,...`, as `--weights` takes):
    /// the selected tensors under their new names, each a matrix or vector the program loads.
    Source(TensorSource),
}

/// Why a module could not be built or called.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ModuleError {
    #[error("cannot read firmware file `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Target(#[from] TargetError),
    /// The firmware has errors; render them with miette (`miette::Report::new(diagnostics)`)
    /// to see each one with its source line.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Firmware(Diagnostics),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Lower(#[from] LowerError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Io(#[from] IoError),
    #[error("{0}")]
    Call(String),
}

impl ModuleError {
    fn call(message: impl Into<String>) -> ModuleError {
        ModuleError::Call(message.into())
    }
}

/// A short message of a candle error (its Display may carry a backtrace after the first line).
fn candle_err(what: &str, e: candle_core::Error) -> ModuleError {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("candle error");
    ModuleError::call(format!("{what}: {first}"))
}

/// What a call runs: the warm session and the host data it was first run with (the weights;
/// each call sets the inputs and the batch).
struct Warm {
    session: Session<'static>,
    data: HostData,
}

/// A firmware program as a candle [`Module`] (see the module docs).
pub struct FirmwareModule {
    program: Program,
    graph: Arc<SwGraph>,
    warm: Mutex<Warm>,
}

impl std::fmt::Debug for FirmwareModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirmwareModule")
            .field("source", &self.program.source.name)
            .field("target", &self.program.target.name)
            .field("nodes", &self.graph.nodes.len())
            .finish()
    }
}

impl FirmwareModule {
    /// The firmware file `path`, on `target` (a built-in name or a TOML file; `None`: the
    /// file's own `target` statement, else the default target).
    pub fn from_path(
        path: impl AsRef<Path>,
        target: Option<&str>,
        weights: Weights,
    ) -> Result<FirmwareModule, ModuleError> {
        let path = path.as_ref();
        let name = path.to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).map_err(|source| ModuleError::Read {
            path: name.clone(),
            source,
        })?;
        FirmwareModule::from_source(&name, &text, target, weights)
    }

    /// Firmware source text (`name` labels its diagnostics).
    pub fn from_source(
        name: &str,
        text: &str,
        target: Option<&str>,
        weights: Weights,
    ) -> Result<FirmwareModule, ModuleError> {
        let target = target.map(Target::load).transpose()?;
        let src = Arc::new(SourceFile::new(name, text));
        let program = nnp_grammar::check(src.clone(), target)
            .map_err(|diags| ModuleError::Firmware(Diagnostics::new(&src, diags)))?
            .program;
        FirmwareModule::from_program(program, weights, &ExecOptions::default())
    }

    /// A checked program, run with `opts` (for instance [`crate::DeviceKind::Cuda`] with
    /// the `cuda` feature).
    pub fn from_program(
        program: Program,
        weights: Weights,
        opts: &ExecOptions,
    ) -> Result<FirmwareModule, ModuleError> {
        let graph = Arc::new(swgraph::compile(&program, Roots::Outputs)?);
        let opts = ExecOptions {
            keep_writes: false,
            ..*opts
        };
        let session = Session::shared(graph.clone(), &opts)?;
        let data = host_weights(&program, weights)?;
        Ok(FirmwareModule {
            program,
            graph,
            warm: Mutex::new(Warm { session, data }),
        })
    }

    /// The checked program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The software graph the module runs.
    pub fn graph(&self) -> &SwGraph {
        &self.graph
    }

    /// The weights the module runs with, as host tensors (for the emulator: [`Self::host_data`]).
    pub fn weights(&self) -> BTreeMap<String, HostTensor> {
        self.lock().data.weights.clone()
    }

    /// The names of the program's inputs, in declaration order.
    pub fn input_names(&self) -> Vec<&str> {
        self.program.inputs().map(|d| d.name.as_str()).collect()
    }

    /// The names of the program's outputs, in declaration order.
    pub fn output_names(&self) -> Vec<&str> {
        self.program.outputs().map(|d| d.name.as_str()).collect()
    }

    /// The declared shape of the program's one input (without the batch dimension).
    pub fn input_shape(&self) -> Result<Vec<usize>, ModuleError> {
        Ok(self.only_input()?.shape.clone())
    }

    /// `[batch, ...]` of the program's one input.
    pub fn batched_input_shape(&self, batch: usize) -> Result<Vec<usize>, ModuleError> {
        Ok(std::iter::once(batch)
            .chain(self.only_input()?.shape.iter().copied())
            .collect())
    }

    fn only_input(&self) -> Result<&Decl, ModuleError> {
        one("input", self.program.inputs(), "forward_named")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Warm> {
        // A panic inside a run leaves nothing half-written that a later run reads: the session
        // recomputes what it had not finished.
        self.warm.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The host data of a call on `inputs` (the module's weights, the inputs as f32): what
    /// the emulator takes to compute the same outputs independently.
    pub fn host_data(&self, inputs: &BTreeMap<String, Tensor>) -> Result<HostData, ModuleError> {
        let (batch, inputs) = self.host_inputs(inputs)?;
        Ok(HostData {
            batch,
            weights: self.weights(),
            inputs,
        })
    }

    /// Every input of the program by name (`[batch, ...declared shape]`, one batch for all),
    /// to every output by name, f32 on the device of the first input.
    pub fn forward_named(
        &self,
        inputs: &BTreeMap<String, Tensor>,
    ) -> Result<BTreeMap<String, Tensor>, ModuleError> {
        let device = inputs
            .values()
            .next()
            .map_or(Device::Cpu, |t| t.device().clone());
        let (batch, host) = self.host_inputs(inputs)?;
        let outputs = {
            let mut warm = self.lock();
            let Warm { session, data } = &mut *warm;
            data.batch = batch;
            data.inputs = host;
            let run = session.run(data);
            data.inputs = BTreeMap::new();
            run?.outputs
        };
        outputs
            .into_iter()
            .map(|(name, t)| {
                let out = Tensor::from_vec(t.data, t.shape, &device)
                    .map_err(|e| candle_err(&format!("output `{name}`"), e))?;
                Ok((name, out))
            })
            .collect()
    }

    /// Check `inputs` against the program's input declarations and take them to the host.
    fn host_inputs(
        &self,
        inputs: &BTreeMap<String, Tensor>,
    ) -> Result<(usize, BTreeMap<String, HostTensor>), ModuleError> {
        let declared: Vec<&Decl> = self.program.inputs().collect();
        if let Some(extra) = inputs
            .keys()
            .find(|n| !declared.iter().any(|d| &d.name == *n))
        {
            return Err(ModuleError::call(format!(
                "`{extra}` is not an input of the program; its inputs are {}",
                names(&declared)
            )));
        }
        let mut batch = None;
        let mut host = BTreeMap::new();
        for d in declared {
            let t = inputs.get(&d.name).ok_or_else(|| {
                ModuleError::call(format!(
                    "no tensor for input `{}` {}; pass one of shape [batch, {}]",
                    d.name,
                    ShapeDisplay(&d.shape),
                    dims(&d.shape)
                ))
            })?;
            let dims_found = t.dims();
            let b = dims_found.first().copied().unwrap_or(0);
            if dims_found.len() != d.shape.len() + 1 || dims_found[1..] != d.shape[..] || b == 0 {
                return Err(ModuleError::call(format!(
                    "input `{}` has shape {}; the program takes [batch, {}] (batch first, batch \
                     at least 1)",
                    d.name,
                    ShapeDisplay(dims_found),
                    dims(&d.shape)
                )));
            }
            if *batch.get_or_insert(b) != b {
                return Err(ModuleError::call(format!(
                    "input `{}` has a batch of {b}, another input one of {}; every input takes \
                     the same batch",
                    d.name,
                    batch.unwrap_or_default()
                )));
            }
            host.insert(d.name.clone(), to_host(&d.name, t)?);
        }
        Ok((batch.unwrap_or(1), host))
    }
}

impl Module for FirmwareModule {
    /// The program's one input to its one output ([`FirmwareModule::forward_named`] for
    /// programs with several).
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        forward_one(&self.program, xs, |inputs| self.forward_named(inputs))
    }
}

/// `named` (a `forward_named`) on `program`'s one input `xs`, its one output.
fn forward_one(
    program: &Program,
    xs: &Tensor,
    named: impl FnOnce(&BTreeMap<String, Tensor>) -> Result<BTreeMap<String, Tensor>, ModuleError>,
) -> candle_core::Result<Tensor> {
    let run = || -> Result<Tensor, ModuleError> {
        let input = one("input", program.inputs(), "forward_named")?
            .name
            .clone();
        let output = one("output", program.outputs(), "forward_named")?
            .name
            .clone();
        let mut outs = named(&BTreeMap::from([(input, xs.clone())]))?;
        outs.remove(&output)
            .ok_or_else(|| ModuleError::call(format!("the run made no output `{output}`")))
    };
    // candle's own errors carry a backtrace where RUST_BACKTRACE is set; this message is the
    // module's, so it goes as a plain message.
    run().map_err(|e| candle_core::Error::Msg(e.to_string()))
}

/// The one declaration of `what` the program has, or an error pointing at `instead`.
fn one<'p>(
    what: &str,
    mut decls: impl Iterator<Item = &'p Decl>,
    instead: &str,
) -> Result<&'p Decl, ModuleError> {
    let all: Vec<&Decl> = decls.by_ref().collect();
    match all[..] {
        [d] => Ok(d),
        _ => Err(ModuleError::call(format!(
            "the program has {} {what}s ({}); `forward` takes a program with one {what}, use \
             `{instead}` with tensors by name",
            all.len(),
            names(&all)
        ))),
    }
}

fn names(decls: &[&Decl]) -> String {
    let names: Vec<String> = decls.iter().map(|d| format!("`{}`", d.name)).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn dims(shape: &[usize]) -> String {
    let d: Vec<String> = shape.iter().map(usize::to_string).collect();
    d.join(", ")
}

/// A candle tensor of a float dtype, on any device, as host f32 values in row-major order.
fn to_host(name: &str, t: &Tensor) -> Result<HostTensor, ModuleError> {
    if !matches!(
        t.dtype(),
        DType::F16 | DType::BF16 | DType::F32 | DType::F64
    ) {
        return Err(ModuleError::call(format!(
            "tensor `{name}` is {:?}; the program takes float values (f16, bf16, f32 or f64)",
            t.dtype()
        )));
    }
    let data = t
        .to_device(&Device::Cpu)
        .and_then(|t| t.to_dtype(DType::F32))
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| candle_err(&format!("tensor `{name}`"), e))?;
    if let Some(at) = data.iter().position(|v| !v.is_finite()) {
        return Err(HostError::NonFinite {
            name: name.to_string(),
            index: at,
            value: data[at],
        }
        .into());
    }
    Ok(HostTensor {
        shape: t.dims().to_vec(),
        data,
    })
}

/// The host data holding `weights` for `program` (checked by name, shape and value as
/// `--weights` files are), with no inputs yet.
pub fn host_weights(program: &Program, weights: Weights) -> Result<HostData, ModuleError> {
    let (tensors, seed, searched) = match weights {
        Weights::Random { seed } => (BTreeMap::new(), Some(seed), "no tensors (random weights)"),
        Weights::Tensors(ts) => {
            if let Some(name) = ts.keys().find(|n| !is_weight(program, n)) {
                return Err(ModuleError::call(format!(
                    "weight tensor `{name}` names no matrix or vector the program loads; it \
                     loads {}",
                    names(&weight_decls(program))
                )));
            }
            let host = ts
                .iter()
                .map(|(n, t)| Ok((n.clone(), to_host(n, t)?)))
                .collect::<Result<_, ModuleError>>()?;
            (host, None, "the module's weight tensors")
        }
        Weights::File(path) => (io::read_tensors(&path)?, None, "the module's weights file"),
        Weights::Source(source) if source.select.is_empty() => (
            io::read_tensors(&source.path)?,
            None,
            "the module's weights file",
        ),
        Weights::Source(source) => (selected(program, &source)?, None, "the selection"),
    };
    // Inputs come with each call: a zero set of each stands in while the weights are checked.
    let mut tensors = tensors;
    for d in program.inputs() {
        tensors
            .entry(d.name.clone())
            .or_insert_with(|| HostTensor::zeros(d.shape.clone()));
    }
    let opts = LoadOptions {
        batch: Some(1),
        random_missing: seed.is_some(),
        seed: seed.unwrap_or_default(),
    };
    let mut data = HostData::from_tensors(program, tensors, &opts, searched)?;
    data.inputs = BTreeMap::new();
    Ok(data)
}

/// The weights a selection gives, read as `nnpc run --weights FILE:NAME=STORED` reads them.
/// Inputs come with each call, so selecting one is an error, not a tensor silently unused.
fn selected(
    program: &Program,
    source: &TensorSource,
) -> Result<BTreeMap<String, HostTensor>, ModuleError> {
    let input = |n: &str| program.inputs().any(|d| d.name == n);
    if let Some((name, stored)) = source.select.iter().find(|(n, _)| input(n)) {
        return Err(ModuleError::call(format!(
            "`{}:{name}={stored}` selects a tensor for the input `{name}`; the weights are the \
             matrices and vectors the program loads ({}), and the inputs come with the data",
            source.path.display(),
            names(&weight_decls(program))
        )));
    }
    let opts = LoadOptions {
        batch: Some(1),
        ..LoadOptions::default()
    };
    let (mut tensors, _) = HostData::open_sources(program, Some(source), None, &opts)?;
    tensors.retain(|n, _| is_weight(program, n));
    Ok(tensors)
}

/// The matrices and vectors the program loads from its weights.
fn weight_decls(program: &Program) -> Vec<&Decl> {
    program
        .loaded()
        .filter(|d| matches!(d.kind, DeclKind::Matrix | DeclKind::Vector))
        .collect()
}

fn is_weight(program: &Program, name: &str) -> bool {
    weight_decls(program).iter().any(|d| d.name == name)
}
