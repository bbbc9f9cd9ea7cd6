//! `nnpc._nnpc.Weights`: a set of weights the extension holds, frozen. A graph's warm session
//! prepared with them knows them by identity, so a call with them reads no weight at all
//! (arrays from Python are compared with the prepared ones, element by element, every call).

use crate::convert::{OutDtype, to_array, to_tensors};
use nnp_runtime::host::Tensor;
use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Weights copied once into the extension (float32, C order) and never changed after.
#[pyclass(frozen, module = "nnpc._nnpc", name = "Weights")]
pub struct Weights {
    /// Shared with the sessions prepared with them: while one holds them, no other
    /// `Weights` has this address.
    pub tensors: Arc<BTreeMap<String, Tensor>>,
}

#[pymethods]
impl Weights {
    /// The arrays of `arrays` (`{name: array}`, as `run`'s `weights=`), copied.
    #[new]
    fn new(arrays: &Bound<'_, PyDict>) -> PyResult<Weights> {
        let tensors = Arc::new(to_tensors(Some(arrays))?.0);
        Ok(Weights { tensors })
    }

    /// The names, in order.
    fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    /// The shape of `name`.
    fn shape(&self, name: &str) -> PyResult<Vec<usize>> {
        Ok(self.tensor(name)?.shape.clone())
    }

    /// A float32 copy of `name`.
    fn get<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        to_array(py, self.tensor(name)?.clone(), OutDtype::F32)
    }
}

impl Weights {
    fn tensor(&self, name: &str) -> PyResult<&Tensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| PyKeyError::new_err(name.to_string()))
    }
}

/// A call's `weights=`: arrays (`{name: array}`) or [`Weights`].
#[derive(Clone, Copy)]
pub enum WeightsArg<'a> {
    Arrays(&'a Bound<'a, PyDict>),
    Held(&'a Weights),
}

impl<'a> WeightsArg<'a> {
    /// `weights=` as the Python wrapper passes it: a dict or the core of `nnpc.Weights`.
    pub fn of(value: &'a Bound<'a, PyAny>) -> PyResult<WeightsArg<'a>> {
        if let Ok(held) = value.cast::<Weights>() {
            return Ok(WeightsArg::Held(held.get()));
        }
        match value.cast::<PyDict>() {
            Ok(dict) => Ok(WeightsArg::Arrays(dict)),
            Err(_) => Err(PyTypeError::new_err(
                "weights must be a mapping of declaration names to arrays, or nnpc.Weights",
            )),
        }
    }

    /// The tensors (a copy).
    pub fn tensors(&self) -> PyResult<BTreeMap<String, Tensor>> {
        match self {
            WeightsArg::Arrays(dict) => Ok(to_tensors(Some(dict))?.0),
            WeightsArg::Held(w) => Ok((*w.tensors).clone()),
        }
    }
}
