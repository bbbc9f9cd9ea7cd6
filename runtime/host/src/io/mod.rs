//! Tensor files: safetensors and `.npy`, logical or native-tile layout.
//!
//! - Reading ([`read_tensors`]) goes by the path: a directory loads every `*.npy` (named by file
//!   stem) and `*.safetensors` inside it; `*.npy` is one tensor named by its stem; anything else is
//!   read as safetensors. Dtypes f16, bf16 (safetensors only), f32 and f64 are accepted and
//!   converted to f32 (f64 is rounded to nearest f32; the `_checked` reads say which values
//!   were, [`Inexact`]). [`index_tensors`] reads only the headers: its [`StoredTensor`]s read
//!   their values when asked, whole or a range of items.
//! - Writing ([`write_tensors`]) goes by the path too: `*.safetensors` writes one file; `*.npy`
//!   writes one file when there is exactly one tensor; anything else is a directory of
//!   `NAME.npy`. Values are written as f16 or f32 ([`Dtype`]).
//! - `.npy` support is our own small reader/writer: little-endian `<f2`, `<f4`, `<f8`, C order,
//!   format versions 1.0 to 3.0.
//! - Layouts ([`Layout`]): `logical` keeps the declaration's shape; `tiles` is the machine's
//!   native layout (N = native dimension): a vector-like `[..., C]` becomes
//!   `[..., ceil(C/N), N]` (each row padded with zeros to whole tiles), a matrix `[R, C]` becomes
//!   `[ceil(R/N), ceil(C/N), N, N]` (tile-major, zero padded). [`to_tiles`] and [`from_tiles`]
//!   convert.

use crate::tensor::{ShapeDisplay, Tensor};
use half::{bf16, f16};
use std::borrow::Cow;
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

/// Read every tensor from a file or directory (see the module docs): [`index_tensors`], each
/// read whole.
pub fn read_tensors(path: &Path) -> Result<BTreeMap<String, Tensor>, IoError> {
    index_tensors(path)?
        .into_iter()
        .map(|(name, t)| Ok((name, t.read()?)))
        .collect()
}

/// Every tensor of a file or directory (see the module docs) as its file's header describes
/// it, no values read: each is read when asked ([`StoredTensor`]). The headers are checked
/// against the file's length here, so a truncated file fails before anything runs.
pub fn index_tensors(path: &Path) -> Result<BTreeMap<String, StoredTensor>, IoError> {
    let read_err = |source| IoError::Read {
        path: path.to_path_buf(),
        source,
    };
    if path.is_dir() {
        let mut out = BTreeMap::new();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for p in entries {
            match p.extension().and_then(|e| e.to_str()) {
                Some("npy") | Some("safetensors") => out.extend(index_tensors(&p)?),
                _ => {}
            }
        }
        return Ok(out);
    }
    let (mut file, len) = open_tensor_file(path)?;
    if has_ext(path, "npy") {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(BTreeMap::from([(name, npy_index(&mut file, len, path)?)]))
    } else {
        safetensors_index(&mut file, len, path)
    }
}

/// The tensor file `path`, open, and its length: a regular file only ([`open_regular`]).
fn open_tensor_file(path: &Path) -> Result<(std::fs::File, u64), IoError> {
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
    path: PathBuf,
    /// Where its values start in the file.
    offset: u64,
    ty: ReadType,
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

/// Write tensors to a file or directory (see the module docs): one piece of an
/// [`ItemWriter`] per tensor.
pub fn write_tensors(
    path: &Path,
    tensors: &BTreeMap<String, Tensor>,
    dtype: Dtype,
) -> Result<(), IoError> {
    write_tensors_with(path, tensors, dtype, &Metadata::new())
}

/// [`write_tensors`], recording `metadata` with them ([`ItemWriter::create_with`]).
pub fn write_tensors_with(
    path: &Path,
    tensors: &BTreeMap<String, Tensor>,
    dtype: Dtype,
    metadata: &Metadata,
) -> Result<(), IoError> {
    let shapes = tensors
        .iter()
        .map(|(name, t)| (name.clone(), t.shape.clone()))
        .collect();
    let mut writer = ItemWriter::create_with(path, &shapes, dtype, metadata)?;
    writer.write_items(0, tensors)?;
    writer.finish()
}

/// What a tensor file records about how it was made (`nnpc.seed = "7"`): string keys and
/// values, as a safetensors header's `__metadata__` holds them.
pub type Metadata = BTreeMap<String, String>;

/// The largest sidecar metadata file read ([`read_metadata`]).
const MAX_SIDECAR_BYTES: u64 = 1 << 20;

/// The metadata recorded with the tensors at `path` ([`ItemWriter::create_with`]): a
/// safetensors file's `__metadata__`, or the sidecar file of a `.npy` file or a directory
/// ([`sidecar_path`]). `None` where there is none, or it cannot be read.
pub fn read_metadata(path: &Path) -> Option<Metadata> {
    if path.is_dir() || has_ext(path, "npy") {
        let sidecar = if path.is_dir() {
            path.join("nnpc.json")
        } else {
            sidecar_path(path)?
        };
        let bytes = read_limited(&sidecar, MAX_SIDECAR_BYTES).ok()?;
        return serde_json::from_slice(&bytes).ok();
    }
    safetensors_file::safetensors_metadata(path)
}

/// Whether `path` is a single `.npy` file (not a directory of them).
pub fn is_npy_file(path: &Path) -> bool {
    has_ext(path, "npy") && path.is_file()
}

fn has_ext(path: &Path, ext: &str) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

// ---------------------------------------------------------------------------------------------
// Layouts

/// Native-tile layout of a logical tensor (see the module docs). `matrix` selects the matrix
/// layout (2-D tensors only).
pub fn to_tiles(name: &str, t: &Tensor, native: usize, matrix: bool) -> Result<Tensor, IoError> {
    let n = native.max(1);
    if matrix {
        let [r, c] = t.shape[..] else {
            return Err(layout_err(name, &t.shape, "a matrix must be 2-D"));
        };
        let (tr, tc) = (r.div_ceil(n), c.div_ceil(n));
        let mut data = vec![0.0f32; tr * tc * n * n];
        for i in 0..r {
            for j in 0..c {
                let tile = (i / n) * tc + j / n;
                data[tile * n * n + (i % n) * n + j % n] = t.data[i * c + j];
            }
        }
        return Ok(Tensor {
            shape: vec![tr, tc, n, n],
            data,
        });
    }
    let c = t.shape.last().copied().unwrap_or(1);
    let rows = t.len().checked_div(c).unwrap_or(0);
    let tiles = c.div_ceil(n);
    let mut data = vec![0.0f32; rows * tiles * n];
    for r in 0..rows {
        data[r * tiles * n..r * tiles * n + c].copy_from_slice(&t.data[r * c..(r + 1) * c]);
    }
    Ok(Tensor {
        shape: tiles_shape(&t.shape, n, false),
        data,
    })
}

/// The shape [`to_tiles`] gives a tensor of shape `shape` (a matrix: its first two
/// dimensions as rows and columns).
pub fn tiles_shape(shape: &[usize], native: usize, matrix: bool) -> Vec<usize> {
    let n = native.max(1);
    if matrix {
        let (r, c) = (
            shape.first().copied().unwrap_or(1),
            shape.get(1).copied().unwrap_or(1),
        );
        return vec![r.div_ceil(n), c.div_ceil(n), n, n];
    }
    let c = shape.last().copied().unwrap_or(1);
    let mut out = shape[..shape.len().saturating_sub(1)].to_vec();
    out.extend([c.div_ceil(n), n]);
    out
}

/// Every tensor in `layout`: unchanged for [`Layout::Logical`], [`to_tiles`] for
/// [`Layout::Tiles`] (`is_matrix(name)` picks the matrix layout).
pub fn to_layout<'t>(
    tensors: &'t BTreeMap<String, Tensor>,
    layout: Layout,
    native: usize,
    is_matrix: impl Fn(&str) -> bool,
) -> Result<Cow<'t, BTreeMap<String, Tensor>>, IoError> {
    match layout {
        // No copy: a large batch's outputs are the largest thing `nnpc run` holds.
        Layout::Logical => Ok(Cow::Borrowed(tensors)),
        Layout::Tiles => tensors
            .iter()
            .map(|(name, t)| Ok((name.clone(), to_tiles(name, t, native, is_matrix(name))?)))
            .collect::<Result<_, _>>()
            .map(Cow::Owned),
    }
}

/// The logical tensor of shape `logical` from its native-tile layout (pad lanes dropped).
pub fn from_tiles(
    name: &str,
    t: &Tensor,
    logical: &[usize],
    native: usize,
    matrix: bool,
) -> Result<Tensor, IoError> {
    let n = native.max(1);
    if matrix && logical.len() != 2 {
        return Err(layout_err(name, logical, "a matrix must be 2-D"));
    }
    let expected = tiles_shape(logical, n, matrix);
    if t.shape != expected {
        return Err(layout_err(
            name,
            &t.shape,
            &format!(
                "the native-tile layout of logical shape {} with N = {n} is {}",
                ShapeDisplay(logical),
                ShapeDisplay(&expected)
            ),
        ));
    }
    let mut out = Tensor::zeros(logical.to_vec());
    if matrix {
        let (r, c) = (logical[0], logical[1]);
        let tc = c.div_ceil(n);
        for i in 0..r {
            for j in 0..c {
                out.data[i * c + j] = t.data[((i / n) * tc + j / n) * n * n + (i % n) * n + j % n];
            }
        }
    } else {
        let c = logical.last().copied().unwrap_or(1);
        let tiles = c.div_ceil(n);
        let rows = out.len().checked_div(c).unwrap_or(0);
        for r in 0..rows {
            out.data[r * c..(r + 1) * c].copy_from_slice(&t.data[r * tiles * n..r * tiles * n + c]);
        }
    }
    Ok(out)
}

fn layout_err(name: &str, shape: &[usize], message: &str) -> IoError {
    IoError::Layout {
        name: name.to_string(),
        shape: ShapeDisplay(shape).to_string(),
        message: message.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Element conversion

/// A value an f16 file cannot hold: the first one, at flat `index`.
#[derive(Debug)]
struct NotF16 {
    index: usize,
    value: f32,
}

/// The little-endian bytes of `data` as `dtype`; an error naming the first value an f16
/// does not hold (a file never holds another value than the one made).
fn encode_values(data: &[f32], dtype: Dtype) -> Result<Vec<u8>, NotF16> {
    // Sized once and filled in place (a `flat_map` collect grows its buffer as it goes).
    match dtype {
        Dtype::F16 => {
            let mut out = Vec::with_capacity(data.len() * 2);
            for (i, &v) in data.iter().enumerate() {
                let h = f16::from_f32(v);
                if h.to_f32().to_bits() != v.to_bits() && !v.is_nan() {
                    return Err(NotF16 { index: i, value: v });
                }
                out.extend_from_slice(&h.to_le_bytes());
            }
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
enum ReadType {
    F16,
    Bf16,
    F32,
    F64,
}

impl ReadType {
    fn size(self) -> usize {
        match self {
            ReadType::F16 | ReadType::Bf16 => 2,
            ReadType::F32 => 4,
            ReadType::F64 => 8,
        }
    }
    fn decode(self, bytes: &[u8]) -> Vec<f32> {
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
    fn inexact(self, bytes: &[u8]) -> Inexact {
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

mod npy;
mod pylit;
mod safetensors_file;
mod write;

use npy::{npy_header, npy_index};
use safetensors_file::{safetensors_header, safetensors_index};
pub use write::{ItemWriter, OutputKind, TempFile, output_kind, sidecar_path, write_file_atomic};

// ---------------------------------------------------------------------------------------------
// Activation table files

/// Bytes of an activation table file: 65,536 little-endian u16.
pub const TABLE_BYTES: u64 = 2 * 65536;

/// Read an activation table file: 65,536 little-endian u16 (input bits -> output bits). The
/// error is a sentence to follow the file's name. Only a regular file is read, and no more
/// than a table's bytes of it ([`read_limited`]): a path naming `/dev/zero` or a FIFO is an
/// error, never a read without end or a wait.
pub fn read_table(path: &Path) -> Result<Vec<u16>, String> {
    let bytes = read_limited(path, TABLE_BYTES).map_err(|e| match e {
        LimitedReadError::TooLarge { size, .. } => {
            format!("has {size} bytes; a table is 65,536 little-endian u16 (131,072 bytes)")
        }
        e => format!("cannot be read: {e}"),
    })?;
    if bytes.len() as u64 != TABLE_BYTES {
        return Err(format!(
            "has {} bytes; a table is 65,536 little-endian u16 (131,072 bytes)",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect())
}

pub use nnp_grammar::read::{LimitedReadError, open_regular, read_limited};

#[cfg(test)]
mod tests;
