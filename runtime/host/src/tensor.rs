//! The host's tensor: dense f32 values in a logical row-major shape, and how a shape prints.
//! Host data and tensor files both hold it.

use half::f16;
use std::fmt;

/// `values` as float16, each rounded to the nearest (ties to even): half's slice conversion
/// (F16C where the CPU has it), in pieces of 64 Ki values on the pool's threads. What a
/// float16 file (`-o`, `--dtype f16`) and the Python package's float16 arrays hold.
pub fn to_f16(values: &[f32]) -> Vec<f16> {
    use half::slice::HalfFloatSliceExt;
    use rayon::prelude::*;
    const PIECE: usize = 1 << 16;
    let mut out = vec![f16::ZERO; values.len()];
    out.par_chunks_mut(PIECE)
        .zip(values.par_chunks(PIECE))
        .for_each(|(out, values)| out.convert_from_f32_slice(values));
    out
}

/// A dense tensor of f32 values, logical row-major layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Tensor {
    /// A tensor; `None` when `data.len()` is not the product of `shape`.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Option<Tensor> {
        (shape.iter().product::<usize>() == data.len()).then_some(Tensor { shape, data })
    }
    pub fn zeros(shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        Tensor {
            shape,
            data: vec![0.0; n],
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// `Err` when its values do not fill its shape (the fields are public, so a tensor built
    /// by hand may not); `name` names it in the error.
    pub fn check_filled(&self, name: &str) -> Result<(), Unfilled> {
        let expected: usize = self.shape.iter().product();
        if self.len() == expected {
            return Ok(());
        }
        Err(Unfilled {
            name: name.to_string(),
            shape: ShapeDisplay(&self.shape).to_string(),
            expected,
            found: self.len(),
        })
    }
}

/// A tensor whose values do not fill its shape ([`Tensor::check_filled`]).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("tensor `{name}` holds {found} values but its shape {shape} has {expected}")]
#[diagnostic(help("a tensor's values must fill its shape exactly"))]
pub struct Unfilled {
    pub name: String,
    pub shape: String,
    pub expected: usize,
    pub found: usize,
}

/// Shapes printed as `[2, 3]`.
pub struct ShapeDisplay<'a>(pub &'a [usize]);

impl fmt::Display for ShapeDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
