//! What the tensor-file readers and writers share: the dtypes and layouts, the errors, a
//! tensor known by its file's header ([`StoredTensor`]), and the element conversions.

use crate::tensor::{ShapeDisplay, Tensor};
use half::{bf16, f16};
use nnp_grammar::read::{LimitedReadError, open_regular};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Element type written to files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Dtype {
    #[default]
    F16,
    F32,
}

impl Dtype {
    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            Dtype::F16 => 2,
            Dtype::F32 => 4,
        }
    }
}

/// How tensors are laid out in files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Layout {
    /// The declaration's logical shape.
    #[default]
    Logical,
    /// Native tiles: rows padded to whole N-lane tiles; matrices as `[tiles_r, tiles_c, N, N]`.
    Tiles,
}

/// A tensor file that cannot be read or written.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum IoError {
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read `{path}`: it is not a regular file but {kind}")]
    #[diagnostic(help("give the path of a file"))]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("cannot write `{path}`: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: its tensors would take more bytes than a file can hold (2^64)")]
    #[diagnostic(help("a smaller batch"))]
    TooLarge { path: PathBuf },
    #[error("`{path}` is not a valid safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("`{path}` is not a valid .npy file: {message}")]
    Npy { path: PathBuf, message: String },
    #[error("tensor `{name}` in `{path}` has dtype {dtype}; supported: f16, bf16, f32, f64")]
    #[diagnostic(help("convert it, e.g. `x.astype(numpy.float32)`"))]
    Dtype {
        path: PathBuf,
        name: String,
        dtype: String,
    },
    #[error("`{path}` holds more than one tensor ({count}); a single `.npy` file holds one")]
    #[diagnostic(help("write to a `.safetensors` file or a directory"))]
    NotOne { path: PathBuf, count: usize },
    #[error("cannot write tensors to `{path}`: it {what}")]
    #[diagnostic(help(
        "give a `.safetensors` file (every tensor), a `.npy` file (one tensor), or a directory \
         of `NAME.npy` files (an existing directory, or a path with no extension)"
    ))]
    OutputKind { path: PathBuf, what: String },
    #[error(
        "tensor `{name}` of shape {shape} cannot be converted: its value {value:e} at flat index \
         {index} is not an f16 value"
    )]
    #[diagnostic(help("write f32 (`--dtype f32`)"))]
    NotF16 {
        name: String,
        shape: String,
        value: f32,
        index: usize,
    },
    #[error("`{path}` is not a valid .npy file: Fortran-order arrays are not supported")]
    #[diagnostic(help("save `numpy.ascontiguousarray(x)`"))]
    FortranOrder { path: PathBuf },
    #[error("tensor `{name}` of shape {shape} cannot be converted: {message}")]
    Layout {
        name: String,
        shape: String,
        message: String,
    },
}

/// The tensor file `path`, open, and its length: a regular file only ([`open_regular`]).
pub(super) fn open_tensor_file(path: &Path) -> Result<(std::fs::File, u64), IoError> {
    open_regular(path).map_err(|e| match e {
        LimitedReadError::NotAFile { kind } => IoError::NotAFile {
            path: path.to_path_buf(),
            kind,
        },
        LimitedReadError::Io(e) => IoError::Read {
            path: path.to_path_buf(),
            source: e,
        },
        e => IoError::Read {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        },
    })
}

/// A tensor in a file, known by its header: its values are read when asked, whole or a range
/// of items (its first dimension) at a time, so a large file never sits whole in memory.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTensor {
    pub shape: Vec<usize>,
    pub(super) path: PathBuf,
    /// Where its values start in the file.
    pub(super) offset: u64,
    pub(super) ty: ReadType,
}

impl StoredTensor {
    /// Every value, as f32.
    pub fn read(&self) -> Result<Tensor, IoError> {
        self.read_values(0, self.shape.clone())
    }

    /// The values of items `items` (shape `[items.len(), ...shape[1..]]`), as f32.
    pub fn read_items(&self, items: Range<usize>) -> Result<Tensor, IoError> {
        let (first, shape) = self.item_span(items)?;
        self.read_values(first, shape)
    }

    /// [`read`](Self::read), with the values that reading rounds ([`Inexact`]).
    pub fn read_checked(&self) -> Result<(Tensor, Inexact), IoError> {
        self.read_values_checked(0, self.shape.clone())
    }

    /// [`read_items`](Self::read_items), with the values that reading rounds ([`Inexact`],
    /// indexed within the items read).
    pub fn read_items_checked(&self, items: Range<usize>) -> Result<(Tensor, Inexact), IoError> {
        let (first, shape) = self.item_span(items)?;
        self.read_values_checked(first, shape)
    }

    /// The first value of items `items` and their shape, or the error naming items the
    /// tensor does not have.
    fn item_span(&self, items: Range<usize>) -> Result<(usize, Vec<usize>), IoError> {
        let (&count, rest) = self.shape.split_first().unwrap_or((&1, &[]));
        if items.start > items.end || items.end > count {
            return Err(layout_err(
                &self.path.display().to_string(),
                &self.shape,
                &format!("it has no items {}..{}", items.start, items.end),
            ));
        }
        let per_item: usize = rest.iter().product();
        let shape = std::iter::once(items.len()).chain(rest.iter().copied());
        Ok((items.start * per_item, shape.collect()))
    }

    /// The values from value `first` on, as many as `shape` holds.
    fn read_values(&self, first: usize, shape: Vec<usize>) -> Result<Tensor, IoError> {
        let bytes = self.read_bytes(first, &shape)?;
        Ok(Tensor {
            data: self.ty.decode(&bytes),
            shape,
        })
    }

    /// [`read_values`](Self::read_values), with the values that reading rounds.
    fn read_values_checked(
        &self,
        first: usize,
        shape: Vec<usize>,
    ) -> Result<(Tensor, Inexact), IoError> {
        let bytes = self.read_bytes(first, &shape)?;
        let inexact = self.ty.inexact(&bytes);
        let data = self.ty.decode(&bytes);
        Ok((Tensor { data, shape }, inexact))
    }

    /// The bytes of the values from value `first` on, as many as `shape` holds.
    fn read_bytes(&self, first: usize, shape: &[usize]) -> Result<Vec<u8>, IoError> {
        use std::io::{Read, Seek, SeekFrom};
        let err = |source| IoError::Read {
            path: self.path.clone(),
            source,
        };
        let size = self.ty.size();
        let mut bytes = vec![0u8; shape.iter().product::<usize>() * size];
        let (mut file, _) = open_tensor_file(&self.path)?;
        file.seek(SeekFrom::Start(self.offset + (first * size) as u64))
            .map_err(err)?;
        file.read_exact(&mut bytes).map_err(err)?;
        Ok(bytes)
    }
}

/// The values of a file that f32 does not hold, which reading rounds to the nearest f32: each
/// one's flat index among the values read, and its value in the file. Only an f64 file has
/// any (f16, bf16 and f32 values are f32 values; a NaN is a NaN in f32 too).
pub type Inexact = Vec<(usize, f64)>;

/// What a tensor file records about how it was made (`nnpc.seed = "7"`): string keys and
/// values, as a safetensors header's `__metadata__` holds them.
pub type Metadata = BTreeMap<String, String>;

pub(super) fn layout_err(name: &str, shape: &[usize], message: &str) -> IoError {
    IoError::Layout {
        name: name.to_string(),
        shape: ShapeDisplay(shape).to_string(),
        message: message.to_string(),
    }
}

/// A value an f16 file cannot hold: the first one, at flat `index`.
#[derive(Debug)]
pub(super) struct NotF16 {
    pub index: usize,
    pub value: f32,
}

/// The little-endian bytes of `data` as `dtype`; an error naming the first value an f16
/// does not hold (a file never holds another value than the one made).
pub(super) fn encode_values(data: &[f32], dtype: Dtype) -> Result<Vec<u8>, NotF16> {
    // Sized once and filled in place (a `flat_map` collect grows its buffer as it goes).
    match dtype {
        Dtype::F16 => {
            use half::slice::HalfFloatSliceExt;
            let halves = crate::tensor::to_f16(data);
            // Each value read back, a piece at a time; a NaN passes (its payload is not kept).
            const PIECE: usize = 1024;
            let mut back = [0f32; PIECE];
            for (k, (h, v)) in halves.chunks(PIECE).zip(data.chunks(PIECE)).enumerate() {
                let back = &mut back[..h.len()];
                h.convert_to_f32_slice(back);
                let lost = |(b, v): (&f32, &f32)| b.to_bits() != v.to_bits() && !v.is_nan();
                if let Some(i) = back.iter().zip(v).position(lost) {
                    return Err(NotF16 {
                        index: k * PIECE + i,
                        value: v[i],
                    });
                }
            }
            let mut out = Vec::with_capacity(data.len() * 2);
            halves
                .iter()
                .for_each(|h| out.extend_from_slice(&h.to_le_bytes()));
            Ok(out)
        }
        Dtype::F32 => {
            let mut out = Vec::with_capacity(data.len() * 4);
            data.iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
            Ok(out)
        }
    }
}

/// Little-endian element types we read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReadType {
    F16,
    Bf16,
    F32,
    F64,
}

impl ReadType {
    pub(super) fn size(self) -> usize {
        match self {
            ReadType::F16 | ReadType::Bf16 => 2,
            ReadType::F32 => 4,
            ReadType::F64 => 8,
        }
    }
    pub(super) fn decode(self, bytes: &[u8]) -> Vec<f32> {
        let w = self.size();
        bytes
            .chunks_exact(w)
            .map(|c| match self {
                ReadType::F16 => f16::from_le_bytes([c[0], c[1]]).to_f32(),
                ReadType::Bf16 => bf16::from_le_bytes([c[0], c[1]]).to_f32(),
                ReadType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                ReadType::F64 => {
                    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                }
            })
            .collect()
    }
    /// The values that [`decode`](Self::decode) rounds ([`Inexact`]).
    pub(super) fn inexact(self, bytes: &[u8]) -> Inexact {
        if self != ReadType::F64 {
            return Vec::new();
        }
        bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .enumerate()
            .filter(|(_, v)| !v.is_nan() && f64::from(*v as f32).to_bits() != v.to_bits())
            .collect()
    }
}

pub(super) fn has_ext(path: &Path, ext: &str) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}
