//! `nnpc._nnpc.Graph`: a checked program and its software graph, with a warm session. The
//! Python class `nnpc.Graph` wraps it (typing, torch and array conversion).

use crate::convert::{OutDtype, to_dict, to_tensors};
use crate::errors::{Message, data_error, diagnostic_dict, exec_error, raise, render};
use crate::grad::{self, Tape};
use crate::warm::{Prepared, RunWeights, same_bits};
use crate::weights::WeightsArg;
use nnp_grammar::{Diagnostic, Interface, Program, SourceFile, Target};
use nnp_lowering::depgraph::DepGraph;
use nnp_lowering::swgraph::{self, Roots, SwGraph};
use nnp_runtime::campaign;
use nnp_runtime::diff::{DiffBuilder, DiffReport};
use nnp_runtime::emulator::{self, EmuOptions};
use nnp_runtime::exec::{ExecError, ExecOptions, Session};
use nnp_runtime::host::{
    HostData, HostError, InputFeed, LoadOptions, Outputs, Tensor, TensorSource,
};
use nnp_runtime::io::Inexact;
use nnp_runtime::train::{self, TrainError};
use numpy::{PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A checked firmware program lowered to its software graph (made by `nnpc.compile`).
#[pyclass(frozen, module = "nnpc._nnpc", name = "Graph")]
pub struct Graph {
    program: Arc<Program>,
    graph: Arc<SwGraph>,
    /// The software graph's session and the weights it was warmed with (a session prepares
    /// its weights on its first run and reuses them): kept between runs with the same
    /// weights, bit for bit.
    session: Mutex<Option<(Prepared, Session<'static>)>>,
    /// The recording session of `record` (`nnpc.torch`'s forward calls), planned once: each
    /// call prepares its own weights.
    recorder: train::SharedRecorder,
    warnings: Vec<Diagnostic>,
}

/// The inputs of a run ([`Graph::run_warm`]).
enum Inputs {
    Seeded(InputFeed),
    Given(BTreeMap<String, Tensor>),
}

/// Why a run did not give outputs: the caller's data, or the run.
enum RunError {
    Data(HostError),
    Exec(ExecError),
}

/// Where a program's weights and inputs come from, as the command line's flags say.
struct Data<'a> {
    weights: Option<WeightsArg<'a>>,
    inputs: Option<&'a Bound<'a, PyDict>>,
    batch: Option<usize>,
    seed: u64,
    random_missing: bool,
}

impl<'a> Data<'a> {
    /// The data of a call's `weights=`, `inputs=`, `batch=`, `seed=` and `random_missing=`.
    fn new(
        weights: Option<&'a Bound<'a, PyAny>>,
        inputs: Option<&'a Bound<'a, PyDict>>,
        batch: Option<usize>,
        seed: u64,
        random_missing: bool,
    ) -> PyResult<Data<'a>> {
        let weights = weights.map(WeightsArg::of).transpose()?;
        Ok(Data {
            weights,
            inputs,
            batch,
            seed,
            random_missing,
        })
    }
}

/// Read and check firmware from `path` (or the text `source`, named `name`), on `target`,
/// and lower it: the graph, or `FirmwareError` with the rendered diagnostics and their list.
#[pyfunction]
#[pyo3(signature = (path=None, source=None, name=None, target=None))]
pub fn compile(
    py: Python<'_>,
    path: Option<String>,
    source: Option<String>,
    name: Option<String>,
    target: Option<String>,
) -> PyResult<Graph> {
    let (src, checked) = match (path, source) {
        (Some(path), _) => match nnpc::check_file(&path, target.as_deref()) {
            Ok(found) => found,
            Err(e @ nnpc::LoadError::Read { .. }) => {
                return Err(PyOSError::new_err(format!(
                    "{e}: {}",
                    std::error::Error::source(&e)
                        .map(|s| s.to_string())
                        .unwrap_or_default()
                )));
            }
            Err(e) => return Err(PyValueError::new_err(render(&e))),
        },
        (None, Some(text)) => {
            let target = target
                .map(|t| Target::load(&t))
                .transpose()
                .map_err(|e| PyValueError::new_err(render(&e)))?;
            let name = name.unwrap_or_else(|| "<source>".into());
            let src = Arc::new(SourceFile::new(name, text));
            let checked = nnp_grammar::check(src.clone(), target);
            (src, checked)
        }
        (None, None) => return Err(PyValueError::new_err("give a firmware path or source")),
    };
    let out = match checked {
        Ok(out) => out,
        Err(diags) => {
            let list = PyList::empty(py);
            for d in &diags {
                list.append(diagnostic_dict(py, &src, d)?)?;
            }
            let all = nnp_grammar::Diagnostics::new(&src, diags);
            return Err(raise(py, "FirmwareError", (render(&all), list)));
        }
    };
    let program = out.program;
    let graph = swgraph::compile(&program, Roots::Outputs).map_err(|e| {
        let message = format!("{}: cannot lower: {e}", program.source.name);
        raise(py, "FirmwareError", (message, PyList::empty(py)))
    })?;
    let graph = Arc::new(graph);
    Ok(Graph {
        program: Arc::new(program),
        graph: graph.clone(),
        session: Mutex::new(None),
        recorder: train::SharedRecorder::new(graph.clone()),
        warnings: out.warnings,
    })
}

impl Graph {
    /// The host data `data` describes (as `nnpc run`'s flags: seeded random data when
    /// neither weights nor inputs are given); `fallback_batch` as in `nnpc diff`.
    fn host_data(
        &self,
        py: Python<'_>,
        data: &Data,
        fallback: Option<usize>,
    ) -> PyResult<HostData> {
        let p = &*self.program;
        if let Some(batch) = data.batch.or(fallback) {
            self.batch_fits(py, batch)?;
        }
        if data.weights.is_none() && data.inputs.is_none() {
            let batch = data.batch.or(fallback).unwrap_or(1);
            if batch == 0 {
                return Err(data_error(py, HostError::ZeroBatch));
            }
            let weights = HostData::random_weights(p, data.seed);
            let feed = InputFeed::random(p, batch, data.seed);
            return HostData::whole(weights, feed).map_err(|e| data_error(py, e));
        }
        // A name in both: the weights' array is used (as the weights file's tensor is).
        let (mut tensors, _) = to_tensors(data.inputs)?;
        if let Some(w) = &data.weights {
            tensors.extend(w.tensors()?);
        }
        let opts = LoadOptions {
            batch: data.batch.or(fallback),
            random_missing: data.random_missing,
            seed: data.seed,
        };
        let searched = "the arrays given (weights= and inputs=)";
        HostData::from_tensors(p, tensors, &opts, searched).map_err(|e| data_error(py, e))
    }

    /// A batch of `batch` input sets held in memory whole, within the library's limit
    /// ([`nnp_runtime::stream::check_batch`]), or the `DataError` naming `batch=` and it.
    fn batch_fits(&self, py: Python<'_>, batch: usize) -> PyResult<()> {
        use nnp_runtime::stream::{Kept, check_batch, io_bytes_per_item};
        let per_item = io_bytes_per_item(&*self.program);
        check_batch("batch=", batch, per_item, Kept::Memory { per_item })
            .map_err(|e| data_error(py, e))
    }

    /// The software graph's outputs on `data`, the GIL released.
    fn execute(&self, py: Python<'_>, data: &HostData) -> PyResult<Outputs> {
        let run = py.detach(|| {
            let mut warm = self.session.lock().unwrap_or_else(|e| e.into_inner());
            if !warm.as_ref().is_some_and(
                |(w, _)| matches!(w, Prepared::Given(w) if same_bits(w, &data.weights)),
            ) {
                let session = Session::shared(self.graph.clone(), &ExecOptions::default())?;
                let prepared = Prepared::Given(Arc::new(data.weights.clone()));
                *warm = Some((prepared, session));
            }
            match warm.as_mut() {
                Some((_, s)) => s.run(data).map(|e| e.outputs),
                None => Err(ExecError::Internal(
                    "no warm session after making one".into(),
                )),
            }
        });
        run.map_err(|e| exec_error(py, self.runtime_message(&e, e.span())))
    }

    /// The outputs of `run` where its weights are seeded or every one is given as a
    /// C-contiguous float32 array of its declared shape (else `None`: [`Graph::host_data`]
    /// and [`Graph::execute`] take it). A warm session prepared with the same weights, bit
    /// for bit (compared in place), runs on the inputs alone: the weights are neither copied
    /// nor checked again. The lock is held from the comparison to the end of the run.
    fn run_warm(&self, py: Python<'_>, data: &Data) -> PyResult<Option<Outputs>> {
        let program = &*self.program;
        let opts = LoadOptions {
            batch: data.batch,
            random_missing: data.random_missing,
            seed: data.seed,
        };
        let mut borrowed = Vec::new();
        let weights = match data.weights {
            None if data.inputs.is_none() => RunWeights::Seeded(data.seed),
            None => return Ok(None),
            // Known by identity where it holds exactly the program's weights, as arrays are
            // compared: one that lacks a weight takes the call's seeded values for it, one
            // that holds an input overrides the call's (the copying way).
            Some(WeightsArg::Held(held)) => {
                let t = &held.tensors;
                let exact = t.len() == program.weights().count()
                    && program.weights().all(|d| t.contains_key(&d.name));
                if !exact {
                    return Ok(None);
                }
                RunWeights::Held(t)
            }
            Some(WeightsArg::Arrays(given)) => {
                // Exactly the program's weights (each one is looked up below).
                if given.len() != program.weights().count() {
                    return Ok(None);
                }
                for d in program.weights() {
                    let Some(Ok(a)) = given
                        .get_item(&d.name)?
                        .map(|v| v.cast_into::<numpy::PyArrayDyn<f32>>())
                    else {
                        return Ok(None);
                    };
                    if a.shape() != d.shape.as_slice() || !a.is_c_contiguous() || !a.is_aligned() {
                        return Ok(None);
                    }
                    borrowed.push((d, a.readonly()));
                }
                let mut views = BTreeMap::new();
                for (d, a) in &borrowed {
                    match a.as_slice() {
                        Ok(x) => views.insert(d.name.clone(), (x, d.shape.as_slice())),
                        Err(_) => return Ok(None),
                    };
                }
                RunWeights::Views(views)
            }
        };
        let inputs = match (&weights, data.inputs) {
            (RunWeights::Seeded(seed), _) => {
                let batch = data.batch.unwrap_or(1);
                self.batch_fits(py, batch)?;
                if batch == 0 {
                    return Err(data_error(py, HostError::ZeroBatch));
                }
                Inputs::Seeded(InputFeed::random(program, batch, *seed))
            }
            (RunWeights::Views(_) | RunWeights::Held(_), inputs) => {
                if let Some(batch) = data.batch {
                    self.batch_fits(py, batch)?;
                }
                Inputs::Given(to_tensors(inputs)?.0)
            }
        };
        let searched = "the arrays given (weights= and inputs=)";
        let run = py.detach(|| -> Result<Outputs, RunError> {
            let mut warm = self.session.lock().unwrap_or_else(|e| e.into_inner());
            let hit = warm.as_ref().is_some_and(|(p, _)| weights.prepared_by(p));
            let host = match (hit, inputs) {
                (true, Inputs::Seeded(feed)) => HostData::whole(BTreeMap::new(), feed),
                (true, Inputs::Given(tensors)) => {
                    HostData::inputs_only(program, tensors, &opts, searched)
                }
                (false, inputs) => {
                    let (w, prepared) = weights.owned(program);
                    let host = match inputs {
                        Inputs::Seeded(feed) => HostData::whole(w, feed),
                        Inputs::Given(mut tensors) => {
                            tensors.extend(w);
                            HostData::from_tensors(program, tensors, &opts, searched)
                        }
                    }
                    .map_err(RunError::Data)?;
                    let session = Session::shared(self.graph.clone(), &ExecOptions::default())
                        .map_err(RunError::Exec)?;
                    *warm = Some((prepared, session));
                    Ok(host)
                }
            }
            .map_err(RunError::Data)?;
            match warm.as_mut() {
                Some((_, s)) => s.run(&host).map(|e| e.outputs).map_err(RunError::Exec),
                None => Err(RunError::Exec(ExecError::Internal(
                    "no warm session after making one".into(),
                ))),
            }
        });
        match run {
            Ok(outputs) => Ok(Some(outputs)),
            Err(RunError::Data(e)) => Err(data_error(py, e)),
            Err(RunError::Exec(e)) => Err(exec_error(py, self.runtime_message(&e, e.span()))),
        }
    }

    /// A training error as the package's exception: `DataError` for what the caller passed,
    /// else `ExecutionError`.
    fn train_error(&self, py: Python<'_>, e: TrainError) -> PyErr {
        match e {
            TrainError::Exec(e) => exec_error(py, self.runtime_message(&e, e.span())),
            e if e.is_input_error() => data_error(py, e),
            e => exec_error(py, e),
        }
    }

    /// A runtime error's message, with the firmware line it points at, and its help.
    fn runtime_message(
        &self,
        e: &dyn miette::Diagnostic,
        span: Option<nnp_grammar::Span>,
    ) -> Message {
        let mut m = Message::of(e);
        if let Some(s) = span.filter(|s| (s.end as usize) <= self.program.source.text.len()) {
            m.message = format!(
                "{}\n  at line {}: {}",
                m.message,
                self.program.line(s),
                self.program.source.line_text(s.start).trim()
            );
        }
        m
    }

    /// The element type of `nnpc run -o`'s files (float16 where every value of the output
    /// storage formats is a float16 value, else float32), or the one asked for.
    fn out_dtype(&self, dtype: Option<&str>) -> PyResult<OutDtype> {
        let storage = nnp_grammar::Interface::output_storage(&*self.program);
        let f16 = storage.as_ref().is_some_and(nnp_runtime::host::fits_f16);
        match dtype {
            Some("float16" | "f16") if !f16 => Err(PyValueError::new_err(
                "dtype float16 cannot hold every value of the program's storage format; \
                 help: dtype=\"float32\", or none",
            )),
            Some("float16" | "f16") => Ok(OutDtype::F16),
            Some("float32" | "f32") => Ok(OutDtype::F32),
            Some(other) => Err(PyValueError::new_err(format!(
                "dtype `{other}`: outputs are float16 or float32"
            ))),
            None if f16 => Ok(OutDtype::F16),
            None => Ok(OutDtype::F32),
        }
    }

    /// The batch a hardware dump holds, as `nnpc diff` reads it: the leading dimension of the
    /// first output (in declaration order) that has one.
    fn dump_batch(&self, hardware: &Outputs) -> Option<usize> {
        self.program.outputs().find_map(|d| {
            let t = hardware.get(&d.name)?;
            (t.shape.len() > d.shape.len()).then(|| t.shape.first().copied())?
        })
    }
}

#[pymethods]
impl Graph {
    /// Run the software graph (`nnpc run`); outputs `{name: array}`, `[batch, ...shape]`.
    #[pyo3(signature = (weights=None, inputs=None, batch=None, seed=0, random_missing=false, dtype=None))]
    #[allow(clippy::too_many_arguments)] // the Python signature: the command line's flags
    fn run<'py>(
        &self,
        py: Python<'py>,
        weights: Option<&Bound<'py, PyAny>>,
        inputs: Option<&Bound<'py, PyDict>>,
        batch: Option<usize>,
        seed: u64,
        random_missing: bool,
        dtype: Option<&str>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let dtype = self.out_dtype(dtype)?;
        let data = Data::new(weights, inputs, batch, seed, random_missing)?;
        let outputs = match self.run_warm(py, &data)? {
            Some(outputs) => outputs,
            None => {
                let host = self.host_data(py, &data, None)?;
                self.execute(py, &host)?
            }
        };
        to_dict(py, outputs, dtype)
    }

    /// Run the emulator (`nnpc emulate`); outputs as `run`'s.
    #[pyo3(signature = (weights=None, inputs=None, batch=None, seed=0, random_missing=false, dtype=None))]
    #[allow(clippy::too_many_arguments)] // the Python signature: the command line's flags
    fn emulate<'py>(
        &self,
        py: Python<'py>,
        weights: Option<&Bound<'py, PyAny>>,
        inputs: Option<&Bound<'py, PyDict>>,
        batch: Option<usize>,
        seed: u64,
        random_missing: bool,
        dtype: Option<&str>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let dtype = self.out_dtype(dtype)?;
        let data = Data::new(weights, inputs, batch, seed, random_missing)?;
        let host = self.host_data(py, &data, None)?;
        let program = &*self.program;
        let emu = py.detach(|| emulator::emulate(program, &host, &EmuOptions::default()));
        match emu {
            Ok(e) => to_dict(py, e.outputs, dtype),
            Err(e @ (emulator::EmuError::Data { .. } | emulator::EmuError::Table { .. })) => {
                Err(data_error(py, e))
            }
            Err(e) => Err(exec_error(py, self.runtime_message(&e, e.span()))),
        }
    }

    /// Compare `hardware` with the software graph on the same data (`nnpc diff`): the
    /// report's JSON (schema `nnpc.diff/1`), with where the mismatches are when `maps`.
    #[pyo3(signature = (hardware, weights=None, inputs=None, batch=None, seed=0, random_missing=false, first=10, maps=false))]
    #[allow(clippy::too_many_arguments)]
    fn diff<'py>(
        &self,
        py: Python<'py>,
        hardware: &Bound<'py, PyDict>,
        weights: Option<&Bound<'py, PyAny>>,
        inputs: Option<&Bound<'py, PyDict>>,
        batch: Option<usize>,
        seed: u64,
        random_missing: bool,
        first: usize,
        maps: bool,
    ) -> PyResult<String> {
        let (hw, inexact) = to_tensors(Some(hardware))?;
        let data = Data::new(weights, inputs, batch, seed, random_missing)?;
        let host = self.host_data(py, &data, self.dump_batch(&hw))?;
        let software = self.execute(py, &host)?;
        let program = &*self.program;
        let report = py.detach(|| -> Result<DiffReport, nnp_runtime::diff::DiffError> {
            let mut diff = DiffBuilder::new(program, first)?;
            if maps {
                let items = software.values().next().and_then(|t| t.shape.first());
                diff = diff.with_maps(items.copied().unwrap_or(1));
            }
            diff.add_read(0, &hw, &inexact, &software)?;
            Ok(diff.finish())
        });
        let report = report.map_err(|e| data_error(py, format!("hardware: {e}")))?;
        serde_json::to_string(&report).map_err(|e| exec_error(py, e))
    }

    /// The campaign part of one block (`nnpc.ray`): the software graph on `inputs` (batched,
    /// the items `ids`, increasing) with `weights` (seeded random where `None`), compared
    /// with `hardware`; the part's JSON.
    #[pyo3(signature = (hardware, inputs, ids, weights=None, seed=0, first=10, worst=10))]
    #[allow(clippy::too_many_arguments)]
    fn diff_part<'py>(
        &self,
        py: Python<'py>,
        hardware: &Bound<'py, PyDict>,
        inputs: &Bound<'py, PyDict>,
        ids: Vec<u64>,
        weights: Option<&Bound<'py, PyDict>>,
        seed: u64,
        first: usize,
        worst: usize,
    ) -> PyResult<String> {
        let (hw, inexact) = to_tensors(Some(hardware))?;
        let (mut tensors, _) = to_tensors(Some(inputs))?;
        match weights {
            Some(w) => tensors.extend(to_tensors(Some(w))?.0),
            None => tensors.extend(HostData::random_weights(&*self.program, seed)),
        }
        let opts = LoadOptions {
            batch: Some(ids.len()),
            random_missing: false,
            seed,
        };
        let host = HostData::from_tensors(&*self.program, tensors, &opts, "the block's columns")
            .map_err(|e| data_error(py, e))?;
        let software = self.execute(py, &host)?;
        let program = &*self.program;
        let part = py.detach(|| {
            campaign::compare_block(program, &hw, &inexact, &software, &ids, (first, worst))
        });
        let part = part.map_err(|e| data_error(py, format!("hardware: {e}")))?;
        serde_json::to_string(&part).map_err(|e| exec_error(py, e))
    }

    /// The concordant graph on `weights` and `inputs` (every weight and input given), with
    /// what its backward pass reads: the outputs (f32, the bits of `run`) and the tape.
    fn record<'py>(
        &self,
        py: Python<'py>,
        weights: &Bound<'py, PyDict>,
        inputs: &Bound<'py, PyDict>,
    ) -> PyResult<(Bound<'py, PyDict>, Tape)> {
        let data = Data::new(Some(weights.as_any()), Some(inputs), None, 0, false)?;
        let host = self.host_data(py, &data, None)?;
        let (outputs, recorded) = py
            .detach(|| self.recorder.record(host))
            .map_err(|e| self.train_error(py, e))?;
        let tape = Tape {
            recorded,
            graph: Arc::as_ptr(&self.graph) as usize,
        };
        Ok((to_dict(py, outputs, OutDtype::F32)?, tape))
    }

    /// The gradients of a loss by weight and by input, `(weights, inputs)` of float64
    /// arrays, from the loss's gradients by output (`{output: float64 array}`) at `tape`'s
    /// values: the twin's straight-through gradient (docs/training.md).
    fn backward<'py>(
        &self,
        py: Python<'py>,
        tape: &Tape,
        output_grads: &Bound<'py, PyDict>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        if tape.graph != Arc::as_ptr(&self.graph) as usize {
            return Err(data_error(py, "the tape was recorded by another graph"));
        }
        let grads = grad::f64_tensors(output_grads)?;
        let graph = &*self.graph;
        let g = py
            .detach(|| train::backward(graph, &tape.recorded, &grads))
            .map_err(|e| self.train_error(py, e))?;
        grad::gradient_dicts(py, &g)
    }

    /// The loss and accuracy of the program on a split of `data` (`{name: array}`, as
    /// `nnpc train`'s data file), with the hardware's numerics (`nnpc score`).
    #[pyo3(signature = (data, weights=None, split="test", engine="graph", loss=None, seed=0))]
    #[allow(clippy::too_many_arguments)] // the Python signature: the command line's flags
    fn score<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyDict>,
        weights: Option<&Bound<'py, PyDict>>,
        split: &str,
        engine: &str,
        loss: Option<&str>,
        seed: u64,
    ) -> PyResult<(f64, Option<f64>, usize)> {
        use nnp_runtime::score::{self, Engine};
        use nnp_runtime::train::{Dataset, LossKind};
        let program = &*self.program;
        let engine = match engine {
            "graph" => Engine::Graph,
            "emulator" => Engine::Emulator,
            other => {
                return Err(data_error(
                    py,
                    format!("engine `{other}`: \"graph\" or \"emulator\""),
                ));
            }
        };
        let loss = match loss {
            None => None,
            Some("mse") => Some(LossKind::Mse),
            Some("xent") => Some(LossKind::CrossEntropy),
            Some(other) => {
                return Err(data_error(
                    py,
                    format!("loss `{other}`: \"mse\" or \"xent\""),
                ));
            }
        };
        let weights = match weights {
            None => HostData::random_weights(program, seed),
            Some(w) => {
                // Checked as a `--weights` file is; a zero input set stands in for the inputs.
                let mut tensors = to_tensors(Some(w))?.0;
                for d in program.inputs() {
                    tensors.insert(d.name.clone(), Tensor::zeros(d.shape.clone()));
                }
                let opts = LoadOptions {
                    batch: Some(1),
                    random_missing: false,
                    seed,
                };
                let host = HostData::from_tensors(program, tensors, &opts, "weights=")
                    .map_err(|e| data_error(py, e))?;
                host.weights
            }
        };
        let dataset = Dataset::from_tensors(program, to_tensors(Some(data))?.0)
            .map_err(|e| data_error(py, e))?;
        let split = match (split, &dataset.test) {
            ("test", Some(t)) => t,
            ("test", None) => {
                return Err(data_error(
                    py,
                    "the data has no test split (`NAME_test`); pass split=\"train\"",
                ));
            }
            ("train", _) => &dataset.train,
            (other, _) => {
                return Err(data_error(
                    py,
                    format!("split `{other}`: \"test\" or \"train\""),
                ));
            }
        };
        let items = split.items();
        let s = py
            .detach(|| score::score(program, &weights, split, loss, engine))
            .map_err(|e| exec_error(py, e))?;
        Ok((s.loss, s.accuracy, items))
    }

    /// The seeded random weights `nnpc run --seed S` uses.
    #[pyo3(signature = (seed=0))]
    fn random_weights<'py>(&self, py: Python<'py>, seed: u64) -> PyResult<Bound<'py, PyDict>> {
        let weights = HostData::random_weights(&*self.program, seed);
        to_dict(py, weights, OutDtype::F32)
    }

    /// The seeded random inputs of items `start..stop` of any batch `nnpc run --seed S` makes.
    #[pyo3(signature = (start, stop, seed=0))]
    fn random_inputs<'py>(
        &self,
        py: Python<'py>,
        start: usize,
        stop: usize,
        seed: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.batch_fits(py, stop.saturating_sub(start))?;
        let inputs = HostData::random_inputs(&*self.program, start..stop.max(start), seed);
        to_dict(py, inputs, OutDtype::F32)
    }

    /// The dependency graph as JSON (schema `nnpc-depgraph` 1, docs/depgraph.md).
    fn depgraph_json(&self) -> PyResult<String> {
        let mut buf = Vec::new();
        DepGraph::build(&self.program)
            .write_json(&self.program, &mut buf)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        String::from_utf8(buf).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The dependency graph as Graphviz DOT.
    fn to_dot(&self) -> PyResult<String> {
        let mut buf = Vec::new();
        DepGraph::build(&self.program)
            .write_dot(&self.program, &mut buf)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        String::from_utf8(buf).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The software graph as JSON (what `nnpc compile` writes).
    fn swgraph_json(&self) -> String {
        self.graph.to_json()
    }

    /// `[(name, kind, shape)]` of the declarations, in declaration order.
    fn declarations(&self) -> Vec<(String, String, Vec<usize>)> {
        let kind = |d: &nnp_grammar::Decl| format!("{:?}", d.kind).to_lowercase();
        let decls = self.program.decls.iter();
        decls
            .map(|d| (d.name.clone(), kind(d), d.shape.clone()))
            .collect()
    }

    /// Names of the declarations whose values come from the weights (loaded matrices and
    /// vectors).
    fn weight_names(&self) -> Vec<String> {
        HostData::random_weights(&*self.program, 0)
            .into_keys()
            .collect()
    }

    /// The target's name, native dimension and storage format.
    fn target(&self) -> (String, usize, String) {
        let t = &self.program.target;
        (
            t.name.clone(),
            self.program.native(),
            t.numerics.storage.to_string(),
        )
    }

    /// The checker's warnings, as `FirmwareError.diagnostics` lists errors.
    fn warnings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for d in &self.warnings {
            list.append(diagnostic_dict(py, &self.program.source, d)?)?;
        }
        Ok(list)
    }

    /// The firmware's file name (or the name given with its source).
    fn source_name(&self) -> String {
        self.program.source.name.clone()
    }
}

/// Tensors of a hardware dump or input file (`.safetensors`, `.npy`, a directory of `.npy`),
/// read as the command line reads them: `FILE:NAME=STORED,...` selects tensors under new
/// names as `--weights`/`--inputs` do ([`TensorSource::parse`]).
pub fn read_file(path: &str) -> Result<BTreeMap<String, (Tensor, Inexact)>, HostError> {
    let stored = TensorSource::parse(path)?.index()?;
    stored
        .into_iter()
        .map(|(name, t)| Ok((name, t.read_checked()?)))
        .collect()
}
