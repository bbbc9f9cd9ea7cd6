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
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

mod npy;
mod pylit;
mod safetensors_file;
mod stored;
mod write;

pub use stored::{Dtype, Inexact, IoError, Layout, Metadata, StoredTensor};
use stored::{has_ext, layout_err, open_tensor_file};

use npy::npy_index;
use safetensors_file::safetensors_index;
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
