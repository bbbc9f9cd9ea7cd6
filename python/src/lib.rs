//! `nnpc._nnpc`: the Rust core of the Python package `nnpc`. Every computation is the Rust
//! crates' (`nnpc`, `nnp-grammar`, `nnp-lowering`, `nnp-runtime`, `nnp-numerics`); this module
//! converts arrays and errors, and the Python package (`python/nnpc/`) adds typing, torch
//! interop and the Ray plumbing.

mod convert;
mod errors;
mod grad;
mod graph;
mod warm;
mod weights;

use convert::{OutDtype, to_array, to_array_wide, to_tensor};
use errors::{data_error, exec_error};
use nnp_numerics::Format;
use nnp_runtime::campaign::{self, Partial};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Fake-quantize a C-contiguous array whose runs lie along its last axis (the Python wrapper
/// moves the axis there) with the format literal `format`, as `nnpc quantize` does: f64
/// values are rounded to f32 first; the result is float32.
#[pyfunction]
#[pyo3(signature = (array, format, native=128))]
fn quantize<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyAny>,
    format: &str,
    native: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let fmt = parse_format(py, format, native)?;
    let (t, _) = to_tensor("array", array)?;
    let run = t.shape.last().copied().unwrap_or(1).max(1);
    let mut out = vec![0.0f32; t.data.len()];
    py.detach(|| nnp_numerics::kernel::quantize_f32(&fmt, &t.data, run, native, &mut out));
    let shape = t.shape.clone();
    to_array(
        py,
        nnp_runtime::host::Tensor { shape, data: out },
        OutDtype::F32,
    )
}

/// The format literal `format`, with `native` checked.
fn parse_format(py: Python<'_>, format: &str, native: usize) -> PyResult<Format> {
    let fmt: Format = format.parse().map_err(|e: nnp_numerics::FormatError| {
        let help = e.help.map(|h| format!("; help: {h}")).unwrap_or_default();
        PyValueError::new_err(format!(
            "invalid format literal `{format}` at offset {}: {}{help}",
            e.offset, e.message
        ))
    })?;
    if native == 0 {
        let message = format!("`native` = 0 is out of range: it takes 1 to {}", usize::MAX);
        return Err(errors::raise(py, "ArgumentError", (message,)));
    }
    Ok(fmt)
}

/// The element codes and shared scales of `array` quantized as [`quantize`] does
/// (`Format::tensor_codes`): `(codes, scales)`, int64 arrays of the packed layout's fields,
/// codes of the array's shape, scales of its shape with the last axis counting scale groups
/// (one dimension holding one scale with `per = tensor`); `int(scale = f32)` scales are
/// float32 (the field's bits).
#[pyfunction]
#[pyo3(signature = (array, format, native=128))]
fn quantize_codes<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyAny>,
    format: &str,
    native: usize,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    use numpy::ndarray::{ArrayD, IxDyn};
    let fmt = parse_format(py, format, native)?;
    let (t, _) = to_tensor("array", array)?;
    let run = t.shape.last().copied().unwrap_or(1).max(1);
    let x: Vec<f64> = t.data.iter().map(|&v| f64::from(v)).collect();
    let codes = py.detach(|| fmt.tensor_codes(&x, run, native));
    let codes = codes.map_err(|e| errors::raise(py, "ArgumentError", (e.to_string(),)))?;
    let last = t.shape.len().saturating_sub(1);
    let scale_shape = fmt.scale_shape(&t.shape, last, native, codes.scales.len());
    let array_of = |shape: &[usize], data| {
        ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| exec_error(py, e.to_string()))
    };
    let elems = array_of(&t.shape, codes.elems)?;
    let elems = numpy::PyArray::from_owned_array(py, elems).into_any();
    let scales = match fmt.f32_scales() {
        true => {
            let bits = codes
                .scales
                .iter()
                .map(|&v| f32::from_bits(v as u32))
                .collect();
            let a = ArrayD::from_shape_vec(IxDyn(&scale_shape), bits)
                .map_err(|e| exec_error(py, e.to_string()))?;
            numpy::PyArray::from_owned_array(py, a).into_any()
        }
        false => {
            numpy::PyArray::from_owned_array(py, array_of(&scale_shape, codes.scales)?).into_any()
        }
    };
    Ok((elems, scales))
}

fn read_part(py: Python<'_>, text: &str) -> PyResult<Partial> {
    serde_json::from_str(text).map_err(|e| data_error(py, format!("not a campaign part: {e}")))
}

/// Merge campaign parts (JSON, `nnpc.campaign-part/1`) into one part's JSON.
#[pyfunction]
fn merge_parts(py: Python<'_>, parts: Vec<String>) -> PyResult<String> {
    let parts = parts
        .iter()
        .map(|p| read_part(py, p))
        .collect::<PyResult<Vec<_>>>()?;
    let merged = py.detach(|| campaign::merge(parts));
    let merged = merged.map_err(|e| data_error(py, e))?;
    serde_json::to_string(&merged).map_err(|e| exec_error(py, e))
}

/// The report of a merged part: `(report JSON (nnpc.diff/1), worst mismatches JSON, items)`.
#[pyfunction]
fn finish_part(py: Python<'_>, part: &str) -> PyResult<(String, String, usize)> {
    let part = read_part(py, part)?;
    let (report, worst) = campaign::finish(&part);
    let report = serde_json::to_string(&report).map_err(|e| exec_error(py, e))?;
    let worst = serde_json::to_string(&worst).map_err(|e| exec_error(py, e))?;
    Ok((report, worst, part.items))
}

/// A report's JSON (`nnpc.diff/1`) as the self-contained page of `nnpc diff --report`
/// (`nnp_runtime::diff::html::render`, without the program: each mismatch shows its own
/// source line).
#[pyfunction]
fn report_html(py: Python<'_>, report: &str) -> PyResult<String> {
    let report: nnp_runtime::diff::DiffReport = serde_json::from_str(report)
        .map_err(|e| data_error(py, format!("not a diff report: {e}")))?;
    let ctx = nnp_runtime::diff::html::Context::default();
    Ok(py.detach(|| nnp_runtime::diff::html::render(&report, &ctx)))
}

/// The tensors of a `.safetensors` file, a `.npy` file or a directory of `.npy` files, as the
/// command line reads them: float32 arrays (float64 where the file holds values float32 does
/// not); `FILE:NAME=STORED,...` gives the selected tensors under new names.
#[pyfunction]
fn load_tensors<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
    let read = py.detach(|| graph::read_file(path));
    let tensors = read.map_err(|e| match e {
        // A selection the file does not match is bad data; anything else, the file's.
        nnp_runtime::host::HostError::Source(nnp_runtime::host::SourceError::Io(e)) => {
            PyOSError::new_err(e.to_string())
        }
        nnp_runtime::host::HostError::Source(e) => data_error(py, errors::Message::of(&e)),
        e => PyOSError::new_err(e.to_string()),
    })?;
    let dict = PyDict::new(py);
    for (name, (t, inexact)) in tensors {
        dict.set_item(name, to_array_wide(py, t, &inexact)?)?;
    }
    Ok(dict)
}

/// The command line's allocator: large blocks ask for transparent huge pages
/// (`nnpc::memory`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: nnpc::memory::HugePages = nnpc::memory::HugePages;

#[pymodule]
fn _nnpc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // As `nnpc`'s main: the buffers of a run's ops are reused from the heap, not mapped
    // and faulted in again by every op (`NNPC_MALLOC=system` leaves glibc's settings).
    nnpc::memory::keep_large_buffers_on_the_heap();
    m.add_class::<graph::Graph>()?;
    m.add_class::<grad::Tape>()?;
    m.add_class::<weights::Weights>()?;
    m.add_function(wrap_pyfunction!(graph::compile, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(quantize_codes, m)?)?;
    m.add_function(wrap_pyfunction!(merge_parts, m)?)?;
    m.add_function(wrap_pyfunction!(finish_part, m)?)?;
    m.add_function(wrap_pyfunction!(load_tensors, m)?)?;
    m.add_function(wrap_pyfunction!(report_html, m)?)?;
    m.add("PARTIAL_SCHEMA", campaign::PARTIAL_SCHEMA)?;
    Ok(())
}
