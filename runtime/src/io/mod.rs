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

use crate::host::{ShapeDisplay, Tensor};
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
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot write `{path}`: its tensors would take more bytes than a file can hold (2^64); \
         help: a smaller batch"
    )]
    TooLarge { path: PathBuf },
    #[error("`{path}` is not a valid safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("`{path}` is not a valid .npy file: {message}")]
    Npy { path: PathBuf, message: String },
    #[error(
        "tensor `{name}` in `{path}` has dtype {dtype}; supported: f16, bf16, f32, f64; \
         help: convert it, e.g. `x.astype(numpy.float32)`"
    )]
    Dtype {
        path: PathBuf,
        name: String,
        dtype: String,
    },
    #[error(
        "`{path}` holds more than one tensor ({count}); a single `.npy` file holds one; \
         help: write to a `.safetensors` file or a directory"
    )]
    NotOne { path: PathBuf, count: usize },
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
    let mut file = std::fs::File::open(path).map_err(read_err)?;
    let len = file.metadata().map_err(read_err)?.len();
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
        let mut file = std::fs::File::open(&self.path).map_err(err)?;
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
    let shapes = tensors
        .iter()
        .map(|(name, t)| (name.clone(), t.shape.clone()))
        .collect();
    let mut writer = ItemWriter::create(path, &shapes, dtype)?;
    writer.write_items(0, tensors)?;
    writer.finish()
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

fn encode_values(data: &[f32], dtype: Dtype) -> Vec<u8> {
    // Sized once and filled in place (a `flat_map` collect grows its buffer as it goes).
    match dtype {
        Dtype::F16 => {
            let mut out = Vec::with_capacity(data.len() * 2);
            data.iter()
                .for_each(|&v| out.extend_from_slice(&f16::from_f32(v).to_le_bytes()));
            out
        }
        Dtype::F32 => {
            let mut out = Vec::with_capacity(data.len() * 4);
            data.iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
            out
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

// ---------------------------------------------------------------------------------------------
// safetensors

/// The tensors of a safetensors file from its header, checked as the crate's
/// `SafeTensors::deserialize` checks it (header size, JSON, offsets, the file's length),
/// without reading the values.
fn safetensors_index(
    file: &mut std::fs::File,
    len: u64,
    path: &Path,
) -> Result<BTreeMap<String, StoredTensor>, IoError> {
    use safetensors::{Dtype as St, SafeTensorError as E, tensor::Metadata};
    use std::io::Read;
    /// The crate's own limit.
    const MAX_HEADER: u64 = 100_000_000;
    let invalid = |message: String| IoError::Safetensors {
        path: path.to_path_buf(),
        message,
    };
    let read_err = |source| IoError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut n = [0u8; 8];
    if len < 8 {
        return Err(invalid(E::HeaderTooSmall.to_string()));
    }
    file.read_exact(&mut n).map_err(read_err)?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER {
        return Err(invalid(E::HeaderTooLarge.to_string()));
    }
    if 8 + n > len {
        return Err(invalid(E::InvalidHeaderLength.to_string()));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact(&mut header).map_err(read_err)?;
    let header =
        std::str::from_utf8(&header).map_err(|e| invalid(E::InvalidHeader(e).to_string()))?;
    let metadata: Metadata = serde_json::from_str(header)
        .map_err(|e| invalid(E::InvalidHeaderDeserialization(e).to_string()))?;
    if 8 + n + metadata.data_len() as u64 != len {
        return Err(invalid(E::MetadataIncompleteBuffer.to_string()));
    }
    let mut out = BTreeMap::new();
    for (name, info) in metadata.tensors() {
        let ty = match info.dtype {
            St::F16 => ReadType::F16,
            St::BF16 => ReadType::Bf16,
            St::F32 => ReadType::F32,
            St::F64 => ReadType::F64,
            other => {
                return Err(IoError::Dtype {
                    path: path.to_path_buf(),
                    name,
                    dtype: other.to_string(),
                });
            }
        };
        let stored = StoredTensor {
            shape: info.shape.clone(),
            path: path.to_path_buf(),
            offset: 8 + n + info.data_offsets.0 as u64,
            ty,
        };
        out.insert(name, stored);
    }
    Ok(out)
}

/// The header of a safetensors file of `shapes`, all of `dtype`, their values in name order:
/// the 8-byte length and the JSON, padded with spaces to a multiple of 8 as the crate's
/// `serialize` does (the same bytes: `safetensors_files_are_the_crates_bytes`).
fn safetensors_header(
    shapes: &BTreeMap<String, Vec<usize>>,
    spans: &[(usize, usize)],
    dtype: Dtype,
    path: &Path,
) -> Result<Vec<u8>, IoError> {
    use safetensors::tensor::{Metadata, TensorInfo};
    let st_dtype = match dtype {
        Dtype::F16 => safetensors::Dtype::F16,
        Dtype::F32 => safetensors::Dtype::F32,
    };
    let infos = shapes
        .iter()
        .zip(spans)
        .map(|((name, shape), &data_offsets)| {
            let info = TensorInfo {
                dtype: st_dtype,
                shape: shape.clone(),
                data_offsets,
            };
            (name.clone(), info)
        })
        .collect();
    let err = |message: String| IoError::Safetensors {
        path: path.to_path_buf(),
        message,
    };
    let metadata = Metadata::new(None, infos).map_err(|e| err(e.to_string()))?;
    let mut json = serde_json::to_string(&metadata)
        .map_err(|e| err(e.to_string()))?
        .into_bytes();
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend(json);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Writing in pieces

/// Tensor files written in pieces of consecutive items (the first dimension) as a run
/// produces them, so a large batch's outputs never sit whole in memory. The files go by the
/// path as in [`write_tensors`] (which writes each tensor as one piece). Each file is written
/// under a temporary name next to its place (`.NAME.nnpc-PID.tmp`) and renamed there by
/// [`ItemWriter::finish`]: a run that fails or is dropped leaves no file half-written and an
/// existing one untouched.
pub struct ItemWriter {
    dtype: Dtype,
    files: Vec<TempFile>,
    /// Each tensor's file (an index into `files`), where its values start there, and its
    /// shape.
    slots: BTreeMap<String, (usize, u64, Vec<usize>)>,
}

/// A file written under a temporary name next to its place (`.NAME.nnpc-PID.tmp`) and
/// renamed there by [`TempFile::finish`]; dropped before that, it is removed, so a failed or
/// interrupted run leaves no file half-written and an existing one untouched. A symbolic
/// link, a FIFO or a device in the file's place (`/dev/stdout`, a pipe to another program) is
/// written through, never replaced: the file is then written under a temporary name in the
/// system's temporary directory and its bytes copied there by `finish`.
pub struct TempFile {
    pub file: std::fs::File,
    temp: PathBuf,
    path: PathBuf,
    /// Whether `finish` copies the bytes into `path` instead of renaming the file there.
    through: bool,
}

impl TempFile {
    /// Create the temporary file of `path`. A directory in `path`'s place is refused now,
    /// since the rename at the end would fail.
    pub fn create(path: &Path) -> Result<TempFile, std::io::Error> {
        // `metadata` follows links: what a write would reach.
        let target = std::fs::metadata(path).ok();
        if target.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(std::io::ErrorKind::IsADirectory.into());
        }
        let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        let through = link || target.is_some_and(|m| !m.is_file());
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = format!(
            ".{}.nnpc-{}.tmp",
            name.unwrap_or_default(),
            std::process::id()
        );
        let temp = if through {
            // One process may write several files through (outputs and a trace).
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::env::temp_dir().join(format!("{name}.{k}"))
        } else {
            path.with_file_name(name)
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        Ok(TempFile {
            file,
            temp,
            path: path.to_path_buf(),
            through,
        })
    }

    /// The place the file goes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Put the file in its place: rename it there, or copy its bytes through the link, FIFO
    /// or device there.
    pub fn finish(mut self) -> Result<(), std::io::Error> {
        use std::io::{Seek, Write};
        if !self.through {
            return std::fs::rename(&self.temp, &self.path);
            // `Drop` then finds no temporary file to remove (or removes it if the rename
            // failed).
        }
        self.file.rewind()?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.path)?;
        std::io::copy(&mut self.file, &mut out)?;
        out.flush()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.temp);
    }
}

impl ItemWriter {
    /// Create the files for tensors of `shapes`, holding their headers (the values read as
    /// zeros until written).
    pub fn create(
        path: &Path,
        shapes: &BTreeMap<String, Vec<usize>>,
        dtype: Dtype,
    ) -> Result<ItemWriter, IoError> {
        let mut writer = ItemWriter {
            dtype,
            files: Vec::new(),
            slots: BTreeMap::new(),
        };
        // Every byte count below fits (with room for the headers), or none is made.
        let total = shapes.values().try_fold(0usize, |sum, shape| {
            let one = shape
                .iter()
                .try_fold(dtype.size(), |a, &d| a.checked_mul(d))?;
            sum.checked_add(one)?.checked_add(1 << 20)
        });
        if total.is_none() {
            return Err(IoError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let bytes = |shape: &[usize]| shape.iter().product::<usize>() * dtype.size();
        if has_ext(path, "safetensors") {
            // Each tensor's values after the previous one's, in name order.
            let mut end = 0;
            let spans: Vec<(usize, usize)> = shapes
                .values()
                .map(|shape| {
                    let start = end;
                    end += bytes(shape);
                    (start, end)
                })
                .collect();
            let header = safetensors_header(shapes, &spans, dtype, path)?;
            writer.open(path, &header, end as u64)?;
            for ((name, shape), (start, _)) in shapes.iter().zip(spans) {
                let start = (header.len() + start) as u64;
                writer.slots.insert(name.clone(), (0, start, shape.clone()));
            }
            return Ok(writer);
        }
        let one = has_ext(path, "npy");
        if one && shapes.len() != 1 {
            return Err(IoError::NotOne {
                path: path.to_path_buf(),
                count: shapes.len(),
            });
        }
        if !one {
            std::fs::create_dir_all(path).map_err(|source| IoError::Write {
                path: path.to_path_buf(),
                source,
            })?;
        }
        for (name, shape) in shapes {
            let file = if one {
                path.to_path_buf()
            } else {
                path.join(format!("{name}.npy"))
            };
            let header = npy_header(shape, dtype);
            let index = writer.open(&file, &header, bytes(shape) as u64)?;
            let start = header.len() as u64;
            writer
                .slots
                .insert(name.clone(), (index, start, shape.clone()));
        }
        Ok(writer)
    }

    /// Open a temporary file for `path` holding `header` and room for `values` bytes after
    /// it; its index in `files`.
    fn open(&mut self, path: &Path, header: &[u8], values: u64) -> Result<usize, IoError> {
        use std::io::Write;
        let err = |source| IoError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut file = TempFile::create(path).map_err(err)?;
        let ready = file
            .file
            .write_all(header)
            .and_then(|()| file.file.set_len(header.len() as u64 + values));
        // Kept even when that failed, so that it is removed with the writer.
        self.files.push(file);
        ready.map_err(err)?;
        Ok(self.files.len() - 1)
    }

    /// Write the values of `tensors`, each holding consecutive items from item `first` of its
    /// tensor (all of a tensor's dimensions but the first are whole).
    pub fn write_items(
        &mut self,
        first: usize,
        tensors: &BTreeMap<String, Tensor>,
    ) -> Result<(), IoError> {
        use std::io::{Seek, SeekFrom, Write};
        for (name, t) in tensors {
            let piece_err = |message: String| layout_err(name, &t.shape, &message);
            let Some((index, start, shape)) = self.slots.get(name) else {
                return Err(piece_err("the file was created without it".into()));
            };
            let per_item = shape.iter().skip(1).product::<usize>();
            let at = first * per_item;
            if at + t.len() > shape.iter().product::<usize>() {
                return Err(piece_err(format!(
                    "items from {first} do not fit its file's shape {}",
                    ShapeDisplay(shape)
                )));
            }
            let pending = &mut self.files[*index];
            let offset = start + (at * self.dtype.size()) as u64;
            let bytes = encode_values(&t.data, self.dtype);
            let written = (pending.file.seek(SeekFrom::Start(offset)))
                .and_then(|_| pending.file.write_all(&bytes));
            written.map_err(|source| IoError::Write {
                path: pending.path().to_path_buf(),
                source,
            })?;
        }
        Ok(())
    }

    /// Put every file in its place.
    pub fn finish(self) -> Result<(), IoError> {
        for file in self.files {
            let path = file.path().to_path_buf();
            file.finish()
                .map_err(|source| IoError::Write { path, source })?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// .npy

const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// The header of a `.npy` version 1.0 file of `shape` (padded to a multiple of 64 bytes): the
/// values follow it, in C order.
fn npy_header(shape: &[usize], dtype: Dtype) -> Vec<u8> {
    let descr = match dtype {
        Dtype::F16 => "<f2",
        Dtype::F32 => "<f4",
    };
    let shape = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len());
    out.extend_from_slice(NPY_MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out
}

/// The tensor of a `.npy` file from its header, checked against the file's length `len`.
fn npy_index(file: &mut std::fs::File, len: u64, path: &Path) -> Result<StoredTensor, IoError> {
    use std::io::{Read, Seek, SeekFrom};
    let read_err = |source| IoError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut read_head = |bytes: u64| {
        let mut head = vec![0u8; len.min(bytes) as usize];
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.read_exact(&mut head))
            .map(|()| head)
            .map_err(read_err)
    };
    // Magic, version and the header's length, then the whole header.
    let start = npy_header_end(&read_head(12)?, path)?;
    let head = read_head(start as u64)?;
    let (ty, shape) = npy_parse_header(&head, start, path)?;
    npy_check_length(&shape, ty, len.saturating_sub(start as u64), path)?;
    Ok(StoredTensor {
        shape,
        path: path.to_path_buf(),
        offset: start as u64,
        ty,
    })
}

fn npy_err(path: &Path, message: String) -> IoError {
    IoError::Npy {
        path: path.to_path_buf(),
        message,
    }
}

/// Where the values of a `.npy` file start, from its first 12 bytes (or all it has): the
/// magic, the version and the header's length.
fn npy_header_end(bytes: &[u8], path: &Path) -> Result<usize, IoError> {
    if bytes.len() < 10 || &bytes[..6] != NPY_MAGIC {
        return Err(npy_err(
            path,
            "missing the `\\x93NUMPY` magic; is this a .npy file?".into(),
        ));
    }
    match bytes[6] {
        1 => Ok(10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        2 | 3 if bytes.len() >= 12 => {
            Ok(12 + u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize)
        }
        v => Err(npy_err(
            path,
            format!("unsupported format version {v}.{}", bytes[7]),
        )),
    }
}

/// The element type and shape in the header of a `.npy` file whose values start at `start`
/// (`bytes` holds at least its first `start` bytes).
fn npy_parse_header(
    bytes: &[u8],
    start: usize,
    path: &Path,
) -> Result<(ReadType, Vec<usize>), IoError> {
    let err = |message: String| npy_err(path, message);
    let header_start = if bytes.get(6) == Some(&1) { 10 } else { 12 };
    let header = bytes
        .get(header_start..start)
        .ok_or_else(|| err("truncated header".into()))?;
    let header = std::str::from_utf8(header).map_err(|_| err("header is not text".into()))?;
    let descr = dict_value(header, "descr").ok_or_else(|| err("header has no 'descr'".into()))?;
    let descr = descr.trim().trim_matches(|c| c == '\'' || c == '"');
    let ty = match descr {
        "<f2" => ReadType::F16,
        "<f4" => ReadType::F32,
        "<f8" => ReadType::F64,
        other => {
            return Err(IoError::Dtype {
                path: path.to_path_buf(),
                name: path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                dtype: format!("`{other}` (only little-endian f2, f4, f8 .npy files are read)"),
            });
        }
    };
    let fortran = dict_value(header, "fortran_order")
        .ok_or_else(|| err("header has no 'fortran_order'".into()))?;
    if fortran.trim() != "False" {
        return Err(err(
            "Fortran-order arrays are not supported; help: save `numpy.ascontiguousarray(x)`"
                .into(),
        ));
    }
    let shape_text =
        dict_value(header, "shape").ok_or_else(|| err("header has no 'shape'".into()))?;
    let inner = shape_text
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| err(format!("malformed shape `{shape_text}`")))?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| err(format!("malformed shape `{shape_text}`")))?;
    Ok((ty, shape))
}

/// The bytes of values a `.npy` file of `shape` holds, checked against the `have` bytes
/// after its header.
fn npy_check_length(shape: &[usize], ty: ReadType, have: u64, path: &Path) -> Result<u64, IoError> {
    let need = shape
        .iter()
        .try_fold(ty.size(), |n, &d| n.checked_mul(d))
        .map(|n| n as u64);
    match need {
        Some(need) if need <= have => Ok(need),
        _ => Err(npy_err(
            path,
            format!(
                "truncated data: shape {} needs {} bytes, the file has {have}",
                ShapeDisplay(shape),
                need.map_or("more than 2^64".to_string(), |n| n.to_string())
            ),
        )),
    }
}

/// The raw text of `'key': VALUE` in a numpy header dict (VALUE up to the next top-level comma).
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let pat_a = format!("'{key}'");
    let pat_b = format!("\"{key}\"");
    let at = header.find(&pat_a).or_else(|| header.find(&pat_b))? + pat_a.len();
    let rest = header[at..].trim_start().strip_prefix(':')?;
    let mut depth = 0i32;
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Activation table files

/// Read an activation table file: 65,536 little-endian u16 (input bits -> output bits). The
/// error is a sentence to follow the file's name.
pub fn read_table(path: &Path) -> Result<Vec<u16>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() != 2 * 65536 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Range;

    #[test]
    fn table_files_are_little_endian_and_sized() {
        let dir = std::env::temp_dir().join(format!("nnpc-io-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Entry i = i + 1 (wrapping): bytes [1, 0] then [2, 0], ...
        let good: Vec<u8> = (0..=u16::MAX)
            .flat_map(|i| i.wrapping_add(1).to_le_bytes())
            .collect();
        std::fs::write(dir.join("good.bin"), &good).unwrap();
        let t = read_table(&dir.join("good.bin")).unwrap();
        assert_eq!((t.len(), t[0], t[0x3C00], t[0xFFFF]), (65536, 1, 0x3C01, 0));
        std::fs::write(dir.join("short.bin"), [0u8; 10]).unwrap();
        assert_eq!(
            read_table(&dir.join("short.bin")).unwrap_err(),
            "has 10 bytes; a table is 65,536 little-endian u16 (131,072 bytes)"
        );
        assert!(
            read_table(&dir.join("none.bin"))
                .unwrap_err()
                .starts_with("cannot be read")
        );
    }

    /// A file goes to its place by a rename, or through a symbolic link, a FIFO or a device
    /// that stands there: the link stays a link (its target gets the bytes, a dangling one's
    /// target is made), the FIFO's reader gets the bytes and the FIFO stays a FIFO. A file
    /// dropped unfinished leaves nothing behind, in either place.
    #[test]
    fn temp_files_go_through_links_fifos_and_devices() {
        use std::io::{Read, Write};
        use std::os::unix::fs::FileTypeExt;
        let dir = scratch("through");
        let write = |path: &Path, bytes: &[u8]| {
            let mut f = TempFile::create(path).unwrap();
            f.file.write_all(bytes).unwrap();
            f.finish().unwrap();
        };
        let kind = |p: &Path| std::fs::symlink_metadata(p).unwrap().file_type();
        // A plain path: renamed there, over an older file.
        let plain = dir.join("plain.bin");
        std::fs::write(&plain, b"old and longer").unwrap();
        write(&plain, b"new");
        assert_eq!(std::fs::read(&plain).unwrap(), b"new");
        // A link to a file, and a dangling link.
        let (real, link) = (dir.join("real.bin"), dir.join("link.bin"));
        std::fs::write(&real, b"old and longer").unwrap();
        std::os::unix::fs::symlink("real.bin", &link).unwrap();
        write(&link, b"through");
        assert!(kind(&link).is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"through");
        let dangling = dir.join("dangling.bin");
        std::os::unix::fs::symlink("made.bin", &dangling).unwrap();
        write(&dangling, b"made");
        assert!(kind(&dangling).is_symlink());
        assert_eq!(std::fs::read(dir.join("made.bin")).unwrap(), b"made");
        // A FIFO, read by another thread (a device goes the same way; none is written here,
        // since a regression would replace it for the whole machine).
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                std::fs::File::open(fifo)
                    .unwrap()
                    .read_to_end(&mut got)
                    .unwrap();
                got
            })
        };
        write(&fifo, b"piped");
        assert_eq!(reader.join().unwrap(), b"piped");
        assert!(kind(&fifo).is_fifo());
        // Unfinished: no file, and no temporary file, in either place.
        drop(TempFile::create(&dir.join("never.bin")).unwrap());
        drop(TempFile::create(&link).unwrap());
        assert!(!dir.join("never.bin").exists());
        assert_eq!(std::fs::read(&real).unwrap(), b"through");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            names.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")),
            "{names:?}"
        );
        let ours = format!(".link.bin.nnpc-{}.tmp", std::process::id());
        let left = std::fs::read_dir(std::env::temp_dir()).unwrap();
        assert!(
            left.flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with(&ours))
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A scratch directory of its own for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nnpc-io-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Tensors of several shapes (a scalar, a vector, batches of rows) with values an f16
    /// holds exactly, so both dtypes round-trip.
    fn sample_tensors() -> BTreeMap<String, Tensor> {
        let values = |n: usize| (0..n).map(|i| i as f32 * 0.25 - 3.0).collect::<Vec<_>>();
        [
            ("a_scalar", vec![]),
            ("b_vec", vec![5]),
            ("c_rows", vec![7, 2, 3]),
            ("d_empty", vec![0, 4]),
        ]
        .into_iter()
        .map(|(name, shape): (&str, Vec<usize>)| {
            let n = shape.iter().product();
            (name.to_string(), Tensor::new(shape, values(n)).unwrap())
        })
        .collect()
    }

    /// The safetensors file we write is byte for byte what the crate's own `serialize` makes
    /// of the same tensors (the reference implementation of the format), for both dtypes.
    #[test]
    fn safetensors_files_are_the_crates_bytes() {
        let dir = scratch("st-bytes");
        let tensors = sample_tensors();
        for (dtype, st) in [
            (Dtype::F16, safetensors::Dtype::F16),
            (Dtype::F32, safetensors::Dtype::F32),
        ] {
            let path = dir.join("t.safetensors");
            write_tensors(&path, &tensors, dtype).unwrap();
            let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
                .iter()
                .map(|(n, t)| (n.clone(), t.shape.clone(), encode_values(&t.data, dtype)))
                .collect();
            let views = bytes.iter().map(|(n, shape, b)| {
                let view = safetensors::tensor::TensorView::new(st, shape.clone(), b).unwrap();
                (n.as_str(), view)
            });
            let want = safetensors::serialize(views, None).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), want, "{dtype:?}");
            assert_eq!(read_tensors(&path).unwrap(), tensors);
        }
    }

    /// Tensors indexed by their headers read, whole and by ranges of items, the values the
    /// files hold: safetensors files made by the crate's own `serialize` in every dtype we
    /// read, a `.npy` file of format version 2.0 made by hand, and a directory. A file that
    /// is short is refused when it is indexed, and one cut short after that fails to read.
    #[test]
    fn stored_tensors_read_the_files_values_by_items() {
        use safetensors::Dtype as St;
        let dir = scratch("stored");
        // Every value is a multiple of 0.25 below 8 in magnitude: exact in f16 and bf16.
        let tensors = sample_tensors();
        let le = |dtype: St, v: &[f32]| -> Vec<u8> {
            v.iter()
                .flat_map(|&x| match dtype {
                    St::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
                    St::BF16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
                    St::F32 => x.to_le_bytes().to_vec(),
                    _ => f64::from(x).to_le_bytes().to_vec(),
                })
                .collect()
        };
        let items = |t: &Tensor, r: Range<usize>| {
            let per: usize = t.shape[1..].iter().product();
            t.data[r.start * per..r.end * per].to_vec()
        };
        for dtype in [St::F16, St::BF16, St::F32, St::F64] {
            let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
                .iter()
                .map(|(n, t)| (n.clone(), t.shape.clone(), le(dtype, &t.data)))
                .collect();
            let views = bytes.iter().map(|(n, shape, b)| {
                let view = safetensors::tensor::TensorView::new(dtype, shape.clone(), b).unwrap();
                (n.as_str(), view)
            });
            let file = safetensors::serialize(views, None).unwrap();
            let path = dir.join("t.safetensors");
            std::fs::write(&path, &file).unwrap();
            let stored = index_tensors(&path).unwrap();
            assert_eq!(stored.len(), tensors.len());
            for (name, t) in &tensors {
                let s = &stored[name];
                assert_eq!(s.shape, t.shape, "{dtype:?} {name}");
                assert_eq!(&s.read().unwrap(), t, "{dtype:?} {name}");
            }
            let rows = &stored["c_rows"];
            for r in [0..7, 0..1, 3..5, 6..7, 4..4] {
                let got = rows.read_items(r.clone()).unwrap();
                assert_eq!(got.shape, vec![r.len(), 2, 3], "{dtype:?} {r:?}");
                assert_eq!(
                    got.data,
                    items(&tensors["c_rows"], r.clone()),
                    "{dtype:?} {r:?}"
                );
            }
            assert!(rows.read_items(5..8).is_err(), "past the end");
            // One byte short: refused at the index, before any value is read.
            std::fs::write(&path, &file[..file.len() - 1]).unwrap();
            let e = index_tensors(&path).unwrap_err().to_string();
            assert!(e.contains("incomplete metadata"), "{e}");
        }
        // A `.npy` of format version 2.0 (a 4-byte header length), f8 values.
        let t = &tensors["c_rows"];
        let mut header =
            "{'descr': '<f8', 'fortran_order': False, 'shape': (7, 2, 3), }".to_string();
        while !(12 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        let mut file = b"\x93NUMPY\x02\x00".to_vec();
        file.extend((header.len() as u32).to_le_bytes());
        file.extend(header.as_bytes());
        file.extend(le(St::F64, &t.data));
        let npy = dir.join("rows.npy");
        std::fs::write(&npy, &file).unwrap();
        let stored = index_tensors(&npy).unwrap();
        let rows = &stored["rows"];
        assert_eq!(&rows.read().unwrap(), t);
        assert_eq!(rows.read_items(2..5).unwrap().data, items(t, 2..5));
        // The same file in a directory, named by its stem.
        let sub = dir.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("x.npy"), &file).unwrap();
        assert_eq!(
            index_tensors(&sub).unwrap()["x"]
                .read_items(6..7)
                .unwrap()
                .data,
            items(t, 6..7)
        );
        // Cut short after it was indexed: reading fails, naming the file.
        std::fs::write(&npy, &file[..file.len() - 8]).unwrap();
        let e = rows.read_items(6..7).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot read `{}`", npy.display())),
            "{e}"
        );
        assert_eq!(rows.read_items(0..6).unwrap().data, items(t, 0..6));
        // Short when indexed: refused with the sizes.
        let e = index_tensors(&npy).unwrap_err().to_string();
        assert!(
            e.contains("truncated data: shape [7, 2, 3] needs 336 bytes"),
            "{e}"
        );
    }

    /// Pieces of items written in any order give the bytes of one whole write, in every kind
    /// of file; until `finish` only the temporary files exist, and a writer dropped before it
    /// leaves neither them nor a changed file behind.
    #[test]
    fn pieces_give_the_bytes_of_one_write() {
        let dir = scratch("pieces");
        let whole = sample_tensors();
        // c_rows in pieces of items 4..7, 0..1, 1..4, the other tensors whole.
        let piece = |items: Range<usize>| {
            let t = &whole["c_rows"];
            let data = t.data[items.start * 6..items.end * 6].to_vec();
            let t = Tensor::new(vec![items.len(), 2, 3], data).unwrap();
            BTreeMap::from([("c_rows".to_string(), t)])
        };
        let rest: BTreeMap<String, Tensor> = whole
            .iter()
            .filter(|(n, _)| *n != "c_rows")
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        let shapes = whole
            .iter()
            .map(|(n, t)| (n.clone(), t.shape.clone()))
            .collect();
        let one = BTreeMap::from([("c_rows".to_string(), whole["c_rows"].clone())]);
        let one_shape = BTreeMap::from([("c_rows".to_string(), vec![7, 2, 3])]);
        let listing = |d: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        for dtype in [Dtype::F16, Dtype::F32] {
            for (name, tensors, shapes) in [
                ("t.safetensors", &whole, &shapes),
                ("dir", &whole, &shapes),
                ("one.npy", &one, &one_shape),
            ] {
                let (a, b) = (
                    dir.join(format!("whole-{dtype:?}")).join(name),
                    dir.join(format!("pieces-{dtype:?}")).join(name),
                );
                std::fs::create_dir_all(a.parent().unwrap()).unwrap();
                std::fs::create_dir_all(b.parent().unwrap()).unwrap();
                write_tensors(&a, tensors, dtype).unwrap();
                let mut w = ItemWriter::create(&b, shapes, dtype).unwrap();
                for items in [4..7, 0..1, 1..4] {
                    w.write_items(items.start, &piece(items)).unwrap();
                }
                if tensors.len() > 1 {
                    w.write_items(0, &rest).unwrap();
                }
                assert!(!b.exists() || b.is_dir(), "{name} before finish");
                if b.is_dir() {
                    assert!(listing(&b).iter().all(|n| n.ends_with(".tmp")), "{name}");
                }
                w.finish().unwrap();
                let files = |p: &Path| -> Vec<Vec<u8>> {
                    if p.is_dir() {
                        let names = listing(p);
                        names
                            .iter()
                            .map(|n| std::fs::read(p.join(n)).unwrap())
                            .collect()
                    } else {
                        vec![std::fs::read(p).unwrap()]
                    }
                };
                assert_eq!(files(&a), files(&b), "{name} {dtype:?}");
                // (A `.npy` file's tensor is named by its stem.)
                let back: Vec<Tensor> = read_tensors(&b).unwrap().into_values().collect();
                let want: Vec<Tensor> = tensors.values().cloned().collect();
                assert_eq!(back, want, "{name} {dtype:?}");
            }
        }
        let pieces = dir.join("pieces-F32");
        assert_eq!(
            listing(&pieces.join("dir")),
            ["a_scalar.npy", "b_vec.npy", "c_rows.npy", "d_empty.npy"]
        );
        // Dropped before finish: the existing file keeps its bytes, no temporary file stays.
        let kept = pieces.join("t.safetensors");
        let before = std::fs::read(&kept).unwrap();
        let mut w = ItemWriter::create(&kept, &shapes, Dtype::F32).unwrap();
        w.write_items(0, &piece(0..2)).unwrap();
        assert_eq!(listing(&pieces).len(), 4, "the temporary file is there");
        drop(w);
        assert_eq!(std::fs::read(&kept).unwrap(), before);
        assert_eq!(listing(&pieces), ["dir", "one.npy", "t.safetensors"]);
    }

    /// A piece that does not fit its tensor, a tensor the file was not made for and a place
    /// that cannot be written are errors naming the tensor or the file.
    #[test]
    fn pieces_that_do_not_fit_are_errors() {
        let dir = scratch("misfit");
        let shapes = BTreeMap::from([("x".to_string(), vec![3, 2])]);
        let path = dir.join("x.safetensors");
        let mut w = ItemWriter::create(&path, &shapes, Dtype::F16).unwrap();
        let two = |name: &str| {
            let t = Tensor::new(vec![2, 2], vec![1.0; 4]).unwrap();
            BTreeMap::from([(name.to_string(), t)])
        };
        let e = w.write_items(2, &two("x")).unwrap_err().to_string();
        assert!(
            e.contains("items from 2 do not fit its file's shape [3, 2]"),
            "{e}"
        );
        let e = w.write_items(0, &two("y")).unwrap_err().to_string();
        assert!(e.contains("`y`") && e.contains("created without it"), "{e}");
        w.write_items(1, &two("x")).unwrap();
        drop(w);
        assert!(!path.exists());
        let nowhere = dir.join("no").join("such").join("x.safetensors");
        let e = ItemWriter::create(&nowhere, &shapes, Dtype::F16)
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with(&format!("cannot write `{}`", nowhere.display())),
            "{e}"
        );
        let e = ItemWriter::create(&dir.join("two.npy"), &BTreeMap::new(), Dtype::F16);
        assert!(matches!(e, Err(IoError::NotOne { count: 0, .. })));
        // A file's place taken by a directory: refused when the writer is made.
        let taken = dir.join("taken.safetensors");
        std::fs::create_dir_all(&taken).unwrap();
        let e = ItemWriter::create(&taken, &shapes, Dtype::F16)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            format!("cannot write `{}`: is a directory", taken.display())
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary file"
        );
    }

    #[test]
    fn npy_round_trip_and_header_alignment() {
        let dir = scratch("npy");
        let path = dir.join("x.npy");
        let t = Tensor::new(vec![2, 3], vec![1.0, -2.0, 0.5, 3.0, 4.0, -0.25]).unwrap();
        let one = BTreeMap::from([("x".to_string(), t.clone())]);
        for dtype in [Dtype::F16, Dtype::F32] {
            write_tensors(&path, &one, dtype).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + header_len) % 64, 0);
            assert_eq!(read_tensors(&path).unwrap(), one);
        }
    }

    /// An f64 file's values that f32 does not hold are named by the checked reads, with
    /// their values (by hand): 1 + 2^-30 (31 significant bits), 0.1 and 1e300 (past f32's
    /// range) are; 1, -0, f32's smallest subnormal 2^-149, infinity and NaN are not. Indices
    /// are within the items read; an f32 file has none.
    #[test]
    fn checked_reads_name_the_values_f32_does_not_hold() {
        let dir = scratch("inexact");
        let path = dir.join("x.npy");
        let values = [
            1.0,
            1.0 + 2f64.powi(-30),
            f64::NAN,
            1e300,
            0.1,
            2f64.powi(-149),
            -0.0,
            f64::INFINITY,
        ];
        let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 4), }";
        let mut bytes = NPY_MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        values
            .iter()
            .for_each(|v: &f64| bytes.extend_from_slice(&v.to_le_bytes()));
        std::fs::write(&path, &bytes).unwrap();
        let stored = &index_tensors(&path).unwrap()["x"];
        let (whole, inexact) = stored.read_checked().unwrap();
        let bits = |t: &Tensor| t.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&whole), bits(&stored.read().unwrap()));
        assert_eq!(
            inexact,
            vec![(1, 1.0 + 2f64.powi(-30)), (3, 1e300), (4, 0.1)]
        );
        let (item, inexact) = stored.read_items_checked(1..2).unwrap();
        assert_eq!(item.data[..2], [0.1f32, 2f32.powi(-149)]);
        assert_eq!(inexact, vec![(0, 0.1)]);
        assert!(stored.read_items_checked(2..3).is_err(), "past the end");
        let t = Tensor::new(vec![2], vec![0.1, 1.5]).unwrap();
        write_tensors(&path, &BTreeMap::from([("x".into(), t)]), Dtype::F32).unwrap();
        let stored = &index_tensors(&path).unwrap()["x"];
        assert!(stored.read_checked().unwrap().1.is_empty());
    }

    #[test]
    fn npy_errors_are_clear() {
        let dir = scratch("npy-errors");
        let path = dir.join("x.npy");
        let t = Tensor::new(vec![4], vec![1.0; 4]).unwrap();
        write_tensors(&path, &BTreeMap::from([("x".to_string(), t)]), Dtype::F32).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let decode = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            read_tensors(&path).unwrap_err()
        };
        let e = decode(&bytes[..bytes.len() - 3]);
        assert!(e.to_string().contains("truncated data"), "{e}");
        let mut fortran = bytes.clone();
        let pos = fortran.windows(5).position(|w| w == b"False").unwrap();
        fortran[pos..pos + 5].copy_from_slice(b"True ");
        let e = decode(&fortran);
        assert!(e.to_string().contains("Fortran"), "{e}");
        let mut be = bytes.clone();
        let pos = be.windows(3).position(|w| w == b"<f4").unwrap();
        be[pos] = b'>';
        let e = decode(&be);
        assert!(e.to_string().contains(">f4"), "{e}");
    }

    /// Damaged files are errors, never panics: every cut of a safetensors file and of `.npy`
    /// files of format versions 1 and 2, and seeded random damage (bytes overwritten, a byte
    /// inserted or removed, a number in the header made huge, zero or negative), each indexed
    /// and then read whole and by items. The undamaged files read back their tensors.
    #[test]
    fn damaged_files_are_errors_never_panics() {
        let dir = scratch("damaged");
        let tensors = sample_tensors();
        let rows = BTreeMap::from([("rows".to_string(), tensors["c_rows"].clone())]);
        let mut files = Vec::new();
        for (name, set, dtype) in [
            ("t.safetensors", &tensors, Dtype::F16),
            ("rows.npy", &rows, Dtype::F32),
        ] {
            let path = dir.join(name);
            write_tensors(&path, set, dtype).unwrap();
            assert_eq!(&read_tensors(&path).unwrap(), set, "{name}");
            files.push((path.clone(), std::fs::read(&path).unwrap()));
        }
        // Version 2.0 of the same `.npy`: a 4-byte header length.
        let v1 = &files[1].1;
        let header_len = usize::from(u16::from_le_bytes([v1[8], v1[9]]));
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        v2.extend(u32::try_from(header_len + 2).unwrap().to_le_bytes());
        v2.extend(&v1[10..10 + header_len - 1]);
        v2.extend(b"  \n");
        v2.extend(&v1[10 + header_len..]);
        let path = dir.join("rows2.npy");
        std::fs::write(&path, &v2).unwrap();
        assert_eq!(read_tensors(&path).unwrap()["rows2"], rows["rows"]);
        files.push((path, v2));

        let exercise = |path: &Path, what: &str| {
            let run = std::panic::catch_unwind(|| {
                if let Ok(index) = index_tensors(path) {
                    for t in index.values() {
                        let _ = t.read();
                        if let Some(&n) = t.shape.first() {
                            let _ = t.read_items(0..n.min(1));
                            let _ = t.read_items(n.saturating_sub(2)..n);
                        }
                    }
                }
                let _ = read_tensors(path);
            });
            assert!(run.is_ok(), "{}: {what} panicked", path.display());
        };
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n as u64) as usize
        };
        for (path, bytes) in &files {
            for cut in 0..bytes.len() {
                std::fs::write(path, &bytes[..cut]).unwrap();
                exercise(path, &format!("cut at {cut}"));
            }
            // Half the damage lands in the first 160 bytes, where the headers are.
            let head = bytes.len().min(160);
            for case in 0..1500 {
                let mut b = bytes.clone();
                let at = |r: usize, next: &mut dyn FnMut(usize) -> usize| {
                    if next(2) == 0 { next(head) } else { next(r) }
                };
                match case % 4 {
                    0 => {
                        for _ in 0..=next(3) {
                            let i = at(b.len(), &mut next);
                            b[i] = next(256) as u8;
                        }
                    }
                    1 => {
                        let i = at(b.len(), &mut next);
                        b.insert(i, next(256) as u8);
                    }
                    2 => {
                        let i = at(b.len(), &mut next);
                        b.remove(i);
                    }
                    _ => {
                        // A run of digits in the header replaced by another number.
                        let digits: Vec<usize> =
                            (0..head).filter(|&i| b[i].is_ascii_digit()).collect();
                        if let Some(&i) = digits.get(next(digits.len().max(1))) {
                            let end = (i..head).find(|&j| !b[j].is_ascii_digit()).unwrap_or(head);
                            let with: &[u8] = [
                                &b"0"[..],
                                b"-1",
                                b"4294967296",
                                b"18446744073709551615",
                                b"99999999999999999999999",
                            ][next(5)];
                            b.splice(i..end, with.iter().copied());
                        }
                    }
                }
                std::fs::write(path, &b).unwrap();
                exercise(path, &format!("damage case {case}"));
            }
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn tile_layouts() {
        // Vector [2, 3] with N = 2: rows padded to 4 lanes -> [2, 2, 2].
        let v = Tensor::new(vec![2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap();
        let t = to_tiles("v", &v, 2, false).unwrap();
        assert_eq!(t.shape, vec![2, 2, 2]);
        assert_eq!(t.data, vec![1., 2., 3., 0., 4., 5., 6., 0.]);
        assert_eq!(from_tiles("v", &t, &[2, 3], 2, false).unwrap(), v);
        // Matrix [3, 3] with N = 2: tiles (0,0) = [[1,2],[4,5]], (0,1) = [[3,0],[6,0]],
        // (1,0) = [[7,8],[0,0]], (1,1) = [[9,0],[0,0]].
        let m = Tensor::new(vec![3, 3], (1..=9).map(|v| v as f32).collect()).unwrap();
        let t = to_tiles("m", &m, 2, true).unwrap();
        assert_eq!(t.shape, vec![2, 2, 2, 2]);
        assert_eq!(
            t.data,
            vec![
                1., 2., 4., 5., 3., 0., 6., 0., 7., 8., 0., 0., 9., 0., 0., 0.
            ]
        );
        assert_eq!(from_tiles("m", &t, &[3, 3], 2, true).unwrap(), m);
    }
}
