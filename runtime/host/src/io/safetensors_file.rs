//! safetensors: the header read without the values, and the header of a file written in pieces.

use super::stored::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The tensors of a safetensors file from its header, checked as the crate's
/// `SafeTensors::deserialize` checks it (header size, JSON, offsets, the file's length),
/// without reading the values.
pub(super) fn safetensors_index(
    file: &mut std::fs::File,
    len: u64,
    path: &Path,
) -> Result<BTreeMap<String, StoredTensor>, IoError> {
    use ::safetensors::{Dtype as St, SafeTensorError as E, tensor::Metadata};
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
pub(super) fn safetensors_header(
    shapes: &BTreeMap<String, Vec<usize>>,
    spans: &[(usize, usize)],
    dtype: Dtype,
    meta: &Metadata,
    path: &Path,
) -> Result<Vec<u8>, IoError> {
    use ::safetensors::tensor::{Metadata, TensorInfo};
    let st_dtype = match dtype {
        Dtype::F16 => ::safetensors::Dtype::F16,
        Dtype::F32 => ::safetensors::Dtype::F32,
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
    if !meta.is_empty() {
        // `__metadata__` first, as the crate writes it, its keys in order (the crate's own
        // serialisation of a `HashMap` would put them in a different order each run).
        let entry = serde_json::to_string(meta).map_err(|e| err(e.to_string()))?;
        let comma = if shapes.is_empty() { "" } else { "," };
        let head = format!("{{\"__metadata__\":{entry}{comma}");
        json.splice(..1, head.into_bytes());
    }
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend(json);
    Ok(out)
}

/// The `__metadata__` of the safetensors file `path`, read from its header alone; `None`
/// where it has none or the header cannot be read.
pub(super) fn safetensors_metadata(path: &Path) -> Option<Metadata> {
    use std::io::Read;
    /// A header with metadata is far smaller than the crate's own limit on headers.
    const MAX_HEADER: u64 = 100_000_000;
    let (mut file, _) = nnp_grammar::read::open_regular(path).ok()?;
    let mut n = [0u8; 8];
    file.read_exact(&mut n).ok()?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER {
        return None;
    }
    let mut header = Vec::new();
    file.take(n).read_to_end(&mut header).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&header).ok()?;
    serde_json::from_value(value.get("__metadata__")?.clone()).ok()
}
