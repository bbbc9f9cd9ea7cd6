//! Safetensors files read and written by hand (the format's own layout: an 8-byte header
//! length, the JSON header, the data), so that the tests check nnpc's reader and writer
//! against the format rather than against themselves.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// One tensor: its dtype name (`F32`), shape and raw little-endian bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raw {
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl Raw {
    /// The values of an `F32` tensor.
    pub fn f32s(&self) -> Vec<f32> {
        assert_eq!(self.dtype, "F32");
        self.bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }
}

/// Every tensor of the safetensors file `path`, by name (metadata left out).
pub fn read(path: &Path) -> BTreeMap<String, Raw> {
    let bytes = std::fs::read(path).expect("read safetensors");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    let mut out = BTreeMap::new();
    for (name, t) in header.into_iter().filter(|(n, _)| n != "__metadata__") {
        let shape = t["shape"].as_array().expect("shape");
        let at = t["data_offsets"].as_array().expect("offsets");
        let (a, b) = (
            at[0].as_u64().unwrap() as usize,
            at[1].as_u64().unwrap() as usize,
        );
        let raw = Raw {
            dtype: t["dtype"].as_str().expect("dtype").to_string(),
            shape: shape.iter().map(|d| d.as_u64().unwrap() as usize).collect(),
            bytes: data[a..b].to_vec(),
        };
        out.insert(name, raw);
    }
    out
}

/// Write `tensors` to the safetensors file `path`.
pub fn write(path: &Path, tensors: &BTreeMap<String, Raw>) {
    let mut header = Map::new();
    let mut data: Vec<u8> = Vec::new();
    for (name, t) in tensors {
        let start = data.len();
        data.extend(&t.bytes);
        header.insert(
            name.clone(),
            json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut text = serde_json::to_string(&header).expect("JSON");
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend(text.as_bytes());
    bytes.extend(data);
    std::fs::write(path, bytes).expect("write safetensors");
}

/// An `F32` tensor of `shape` with `values`.
pub fn f32_tensor(shape: &[usize], values: &[f32]) -> Raw {
    Raw {
        dtype: "F32".to_string(),
        shape: shape.to_vec(),
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}
