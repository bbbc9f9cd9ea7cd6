//! Gradients across the boundary (`Graph.record`/`Graph.backward`, which `nnpc.torch` and
//! `Graph.gradients` are built on): the recorded forward pass as a Python object, and f64
//! arrays both ways. The gradient itself is `nnp_runtime::train`'s (`record`, `backward`).

use crate::errors::BUG;
use nnp_runtime::train::{Gradients, Recorded};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::prelude::*;
use numpy::{PyArrayDyn, PyReadonlyArrayDyn};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;

/// A concordant forward pass and the values its backward pass reads (made by
/// `Graph.record`, used once or more by `Graph.backward`).
#[pyclass(frozen, module = "nnpc._nnpc", name = "Tape")]
pub struct Tape {
    pub recorded: Recorded,
    /// The graph it was recorded on (`Graph.backward` refuses another's).
    pub graph: usize,
}

#[pymethods]
impl Tape {
    /// The batch of the recorded pass.
    #[getter]
    fn batch(&self) -> usize {
        self.recorded.data().batch
    }
}

/// The f64 tensors of a `{name: array}` dict of C-contiguous float64 arrays (the Python side
/// makes them so).
pub fn f64_tensors(dict: &Bound<'_, PyDict>) -> PyResult<BTreeMap<String, candle_core::Tensor>> {
    let mut out = BTreeMap::new();
    for (key, value) in dict.iter() {
        let name: String = key.extract().map_err(|_| {
            PyTypeError::new_err("gradient names must be strings (the outputs' names)")
        })?;
        let array: PyReadonlyArrayDyn<'_, f64> = value.extract().map_err(|_| {
            PyTypeError::new_err(format!("gradient `{name}` must be a float64 numpy array"))
        })?;
        let data = array
            .as_slice()
            .map_err(|_| PyTypeError::new_err(format!("gradient `{name}` must be C-contiguous")))?;
        let t = candle_core::Tensor::from_slice(data, array.shape(), &candle_core::Device::Cpu)
            .map_err(|e| PyTypeError::new_err(format!("gradient `{name}`: {e}")))?;
        out.insert(name, t);
    }
    Ok(out)
}

/// `(weight gradients, input gradients)` as dicts of float64 arrays.
pub fn gradient_dicts<'py>(
    py: Python<'py>,
    g: &Gradients,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    Ok((f64_dict(py, &g.weights)?, f64_dict(py, &g.inputs)?))
}

fn f64_dict<'py>(
    py: Python<'py>,
    ts: &BTreeMap<String, candle_core::Tensor>,
) -> PyResult<Bound<'py, PyDict>> {
    let internal = |e: String| PyTypeError::new_err(format!("{BUG}: {e}"));
    let dict = PyDict::new(py);
    for (name, t) in ts {
        let data = t
            .flatten_all()
            .and_then(|f| f.to_vec1::<f64>())
            .map_err(|e| internal(e.to_string()))?;
        let array: Bound<'py, PyArrayDyn<f64>> = ArrayD::from_shape_vec(IxDyn(t.dims()), data)
            .map_err(|e| internal(e.to_string()))?
            .into_pyarray(py);
        dict.set_item(name, array)?;
    }
    Ok(dict)
}
