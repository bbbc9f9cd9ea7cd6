//! Arrays across the boundary: numpy arrays in as host tensors (f32 values, f64 values that
//! f32 does not hold kept aside), tensors out as numpy arrays that own the Rust buffers.

use crate::errors::BUG;
use half::f16;
use nnp_runtime::host::Tensor;
use nnp_runtime::io::Inexact;
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::prelude::*;
use numpy::{Element, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArray};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;

/// The element type of the arrays a run returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutDtype {
    F16,
    F32,
}

/// The values of `array` (float16, float32 or float64, any layout) as a host tensor named
/// `name`, in logical (C) order: f16 and f32 values exactly, f64 values rounded to the nearest
/// f32 (as reading an f64 file does), those f32 does not hold listed with their flat index
/// ([`Inexact`]).
pub fn to_tensor(name: &str, array: &Bound<'_, PyAny>) -> PyResult<(Tensor, Inexact)> {
    let untyped = array.cast::<PyUntypedArray>().map_err(|_| {
        let kind = array
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!(
            "`{name}`: expected a numpy array (or a torch.Tensor), not {kind}"
        ))
    })?;
    let shape = untyped.shape().to_vec();
    // A buffer is read as one slice only where it is C-contiguous and aligned; numpy copies
    // every other layout (F order, transposes, steps, negative or zero strides, strides that
    // are not a multiple of the element size) into C order first.
    let c_order = if untyped.is_c_contiguous() && untyped.is_aligned() {
        array.clone()
    } else {
        array.call_method1("copy", ("C",))?
    };
    if let Ok(a) = c_order.cast::<PyArrayDyn<f32>>() {
        let data = c_slice(name, &a.readonly(), |v| v)?;
        return Ok((Tensor { shape, data }, Inexact::new()));
    }
    if let Ok(a) = c_order.cast::<PyArrayDyn<f16>>() {
        let data = c_slice(name, &a.readonly(), f16::to_f32)?;
        return Ok((Tensor { shape, data }, Inexact::new()));
    }
    if let Ok(a) = c_order.cast::<PyArrayDyn<f64>>() {
        let mut inexact = Inexact::new();
        let mut i = 0;
        let data = c_slice(name, &a.readonly(), |v| {
            let x = v as f32;
            if !v.is_nan() && f64::from(x).to_bits() != v.to_bits() {
                inexact.push((i, v));
            }
            i += 1;
            x
        })?;
        return Ok((Tensor { shape, data }, inexact));
    }
    let dtype = untyped
        .dtype()
        .str()
        .map(|s| s.to_string())
        .unwrap_or_default();
    Err(PyTypeError::new_err(format!(
        "`{name}` has dtype {dtype}; nnpc takes float16, bfloat16, float32 or float64 arrays \
         (in the machine's byte order): convert it with `.astype(numpy.float32)` (or \
         `.float()` for a torch.Tensor)"
    )))
}

/// The elements of a C-contiguous, aligned array in C order, each through `f`.
fn c_slice<T: Element + Copy>(
    name: &str,
    array: &PyReadonlyArrayDyn<'_, T>,
    f: impl FnMut(T) -> f32,
) -> PyResult<Vec<f32>> {
    let slice = array.as_slice().map_err(|e| {
        PyTypeError::new_err(format!(
            "{BUG}: `{name}` is not C-contiguous after a copy: {e}"
        ))
    })?;
    Ok(slice.iter().copied().map(f).collect())
}

/// The tensors of a `{name: array}` dict (none for `None`), and the values f32 does not hold.
pub fn to_tensors(
    arrays: Option<&Bound<'_, PyDict>>,
) -> PyResult<(BTreeMap<String, Tensor>, BTreeMap<String, Inexact>)> {
    let mut tensors = BTreeMap::new();
    let mut inexact = BTreeMap::new();
    for (key, value) in arrays.into_iter().flat_map(|d| d.iter()) {
        let name: String = key.extract().map_err(|_| {
            PyTypeError::new_err("array names must be strings (the declarations' names)")
        })?;
        let (t, wide) = to_tensor(&name, &value)?;
        if !wide.is_empty() {
            inexact.insert(name.clone(), wide);
        }
        tensors.insert(name, t);
    }
    Ok((tensors, inexact))
}

/// `tensor` as a numpy array of `dtype` that owns its buffer (no copy for f32).
pub fn to_array<'py>(
    py: Python<'py>,
    tensor: Tensor,
    dtype: OutDtype,
) -> PyResult<Bound<'py, PyAny>> {
    let shape = IxDyn(&tensor.shape);
    let bad = |e: numpy::ndarray::ShapeError| PyTypeError::new_err(format!("{BUG}: {e}"));
    Ok(match dtype {
        OutDtype::F32 => ArrayD::from_shape_vec(shape, tensor.data)
            .map_err(bad)?
            .into_pyarray(py)
            .into_any(),
        OutDtype::F16 => {
            let data = py.detach(|| nnp_runtime::host::to_f16(&tensor.data));
            ArrayD::from_shape_vec(shape, data)
                .map_err(bad)?
                .into_pyarray(py)
                .into_any()
        }
    })
}

/// A `{name: array}` dict of `tensors`.
pub fn to_dict<'py>(
    py: Python<'py>,
    tensors: BTreeMap<String, Tensor>,
    dtype: OutDtype,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, t) in tensors {
        dict.set_item(name, to_array(py, t, dtype)?)?;
    }
    Ok(dict)
}

/// `tensor` with the values f32 does not hold put back, as an f64 array; f32 where there are
/// none.
pub fn to_array_wide<'py>(
    py: Python<'py>,
    tensor: Tensor,
    inexact: &Inexact,
) -> PyResult<Bound<'py, PyAny>> {
    if inexact.is_empty() {
        return to_array(py, tensor, OutDtype::F32);
    }
    let mut data: Vec<f64> = tensor.data.iter().map(|&v| f64::from(v)).collect();
    for &(i, v) in inexact {
        if let Some(slot) = data.get_mut(i) {
            *slot = v;
        }
    }
    let array = ArrayD::from_shape_vec(IxDyn(&tensor.shape), data)
        .map_err(|e| PyTypeError::new_err(format!("{BUG}: {e}")))?;
    Ok(array.into_pyarray(py).into_any())
}
