//! `.npy`: our own small reader and writer (little-endian `<f2`, `<f4`, `<f8`, C order,
//! format versions 1.0 to 3.0).

use super::pylit::Value;
use super::stored::*;
use crate::tensor::ShapeDisplay;
use std::path::Path;

pub(super) const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// The header of a `.npy` version 1.0 file of `shape` (padded to a multiple of 64 bytes): the
/// values follow it, in C order.
pub(super) fn npy_header(shape: &[usize], dtype: Dtype) -> Vec<u8> {
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
pub(super) fn npy_index(
    file: &mut std::fs::File,
    len: u64,
    path: &Path,
) -> Result<StoredTensor, IoError> {
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

pub(super) fn npy_err(path: &Path, message: String) -> IoError {
    IoError::Npy {
        path: path.to_path_buf(),
        message,
    }
}

/// Where the values of a `.npy` file start, from its first 12 bytes (or all it has): the
/// magic, the version and the header's length.
pub(super) fn npy_header_end(bytes: &[u8], path: &Path) -> Result<usize, IoError> {
    if bytes.len() < 10 || &bytes[..6] != NPY_MAGIC {
        return Err(npy_err(
            path,
            "missing the `\\x93NUMPY` magic; is this a .npy file?".into(),
        ));
    }
    // numpy reads versions 1.0, 2.0 and 3.0 only: another minor version may lay out
    // differently.
    match (bytes[6], bytes[7]) {
        (1, 0) => Ok(10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        (2 | 3, 0) if bytes.len() >= 12 => {
            Ok(12 + u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize)
        }
        (major, minor) => Err(npy_err(
            path,
            format!("unsupported format version {major}.{minor}"),
        )),
    }
}

/// The element type and shape in the header of a `.npy` file whose values start at `start`
/// (`bytes` holds at least its first `start` bytes).
pub(super) fn npy_parse_header(
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
    // numpy reads the header with `ast.literal_eval` and wants exactly these three keys.
    let mut dict = super::pylit::dict(header).map_err(|e| err(format!("header: {e}")))?;
    let keys: Vec<&str> = dict.keys().map(String::as_str).collect();
    if keys != ["descr", "fortran_order", "shape"] {
        let keys: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
        return Err(err(format!(
            "the header has the keys {{{}}}; numpy's reader needs exactly 'descr', \
             'fortran_order' and 'shape'",
            keys.join(", ")
        )));
    }
    let mut take = |key: &str| {
        dict.remove(key)
            .ok_or_else(|| err(format!("header has no '{key}'")))
    };
    let descr = match take("descr")? {
        Value::Str(s) => s,
        other => return Err(err(format!("'descr' is {}, not a string", other.repr()))),
    };
    let ty = match descr.as_str() {
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
    match take("fortran_order")? {
        Value::Bool(false) => {}
        Value::Bool(true) => {
            return Err(IoError::FortranOrder {
                path: path.to_path_buf(),
            });
        }
        other => {
            return Err(err(format!(
                "'fortran_order' is {}, not True or False",
                other.repr()
            )));
        }
    }
    let shape = match take("shape")? {
        Value::Tuple(dims) => dims
            .iter()
            .map(|d| match d {
                Value::Int(n) => usize::try_from(*n).ok(),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| {
                let text = Value::Tuple(dims.clone()).repr();
                err(format!(
                    "malformed shape `{text}`: dimensions are integers from 0"
                ))
            })?,
        other => {
            return Err(err(format!(
                "malformed shape `{}`: not a tuple",
                other.repr()
            )));
        }
    };
    Ok((ty, shape))
}

/// The bytes of values a `.npy` file of `shape` holds, checked against the `have` bytes
/// after its header.
pub(super) fn npy_check_length(
    shape: &[usize],
    ty: ReadType,
    have: u64,
    path: &Path,
) -> Result<u64, IoError> {
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
