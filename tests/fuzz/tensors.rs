//! Tensor file headers: safetensors and `.npy` files generated here (values of every dtype the
//! reader takes, specials included) and `corpus/tensors/`, their headers mutated (dtype, shape,
//! offsets, lengths, keys, versions, padding, a bit flipped) and their data cut or lengthened.
//! Reading (`nnp_runtime::io::index_tensors`, then each tensor whole and a range of its items)
//! either refuses with an error naming the file, or yields exactly the values at the positions
//! the header says, as an independent reading of the same bytes here finds them (`oracle.rs`);
//! an unmutated file yields the values it was made of.

use super::common::scratch;
use super::engine::{Budget, EDGES, Input, Verdict, corpus, flip_bit, fuzz, vary};
use super::oracle::{self, Expected, Kind, Ty, read_independently};
use nnp_progen::Rng;
use nnp_runtime::io::index_tensors;
use std::path::Path;

/// A tensor file's bytes; with the tensors it was made of while it is unmutated.
struct File {
    kind: Kind,
    bytes: Vec<u8>,
    made_of: Option<Vec<Expected>>,
}

impl Input for File {
    fn bytes(&self) -> Vec<u8> {
        self.bytes.clone()
    }
    fn ext(&self) -> &'static str {
        match self.kind {
            Kind::Npy => "npy",
            Kind::Safetensors => "safetensors",
        }
    }
}

/// One random bit pattern of `ty`, specials (zeros, infinities, NaNs, subnormals, the largest
/// finite value) one time in three.
fn pattern(ty: Ty, rng: &mut Rng) -> u64 {
    let bits = ty.size() * 8;
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    let (sign, exp_all, mant_bits) = match ty {
        Ty::F16 => (1 << 15, 0x1f << 10, 10),
        Ty::Bf16 => (1 << 15, 0xff << 7, 7),
        Ty::F32 => (1 << 31, 0xff << 23, 23),
        Ty::F64 => (1 << 63, 0x7ff << 52, 52),
    };
    let s = if rng.chance(0.5) { sign } else { 0 };
    if rng.chance(0.67) {
        return rng.next_u64() & mask;
    }
    s | match rng.below(6) {
        0 => 0,
        1 => exp_all,
        2 => exp_all | 1 << (mant_bits - 1),
        3 => 1,
        4 => (exp_all - (1 << mant_bits)) | ((1 << mant_bits) - 1),
        _ => exp_all | 1,
    }
}

/// `count` tensors of random dtypes (f16 to f64; bf16 only in safetensors) and shapes (rank 0
/// to 3, dimensions 0 to 4), with random values.
fn tensors(kind: Kind, count: usize, rng: &mut Rng) -> Vec<(String, Ty, Vec<usize>, Vec<u8>)> {
    let names = ["x", "w", "b", "h0", "é"];
    let tys: &[Ty] = match kind {
        Kind::Npy => &[Ty::F16, Ty::F32, Ty::F64],
        Kind::Safetensors => &[Ty::F16, Ty::Bf16, Ty::F32, Ty::F64],
    };
    (0..count)
        .map(|k| {
            let ty = *rng.pick(tys);
            let shape: Vec<usize> = (0..rng.below(4)).map(|_| rng.below(5) as usize).collect();
            let n: usize = shape.iter().product();
            let data = (0..n)
                .flat_map(|_| pattern(ty, rng).to_le_bytes()[..ty.size()].to_vec())
                .collect();
            (names[k].to_string(), ty, shape, data)
        })
        .collect()
}

/// A valid safetensors file: its header made by hand (the entries in a random order, their
/// data in another, padding or none), as the format's specification describes it.
fn safetensors(rng: &mut Rng) -> File {
    let ts = tensors(Kind::Safetensors, rng.range(1, 3) as usize, rng);
    // The data in one order, the header's entries in another.
    let mut order: Vec<usize> = (0..ts.len()).collect();
    shuffle(&mut order, rng);
    let (mut data, mut entries, mut made_of) = (Vec::new(), Vec::new(), Vec::new());
    for &k in &order {
        let (name, ty, shape, bytes) = &ts[k];
        let (start, end) = (data.len(), data.len() + bytes.len());
        data.extend_from_slice(bytes);
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        entries.push(format!(
            "\"{name}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{start},{end}]}}",
            ty.safetensors_name(),
            dims.join(",")
        ));
        made_of.push(Expected::new(name, *ty, shape, bytes));
    }
    shuffle(&mut entries, rng);
    made_of.sort_by(|a, b| a.name.cmp(&b.name));
    if rng.chance(0.3) {
        entries.insert(0, "\"__metadata__\":{\"format\":\"pt\"}".into());
    }
    let mut header = format!("{{{}}}", entries.join(","));
    if rng.chance(0.7) {
        header.push_str(&" ".repeat(header.len().next_multiple_of(8) - header.len()));
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.into_bytes());
    bytes.extend(data);
    File {
        kind: Kind::Safetensors,
        bytes,
        made_of: Some(made_of),
    }
}

/// The parts of a `.npy` file, assembled by [`NpyParts::bytes`].
struct NpyParts {
    version: [u8; 2],
    /// The header-length field, when a mutation sets it (else the header's length).
    length: Option<u64>,
    entries: Vec<(String, String)>,
    tail: String,
    data: Vec<u8>,
}

impl NpyParts {
    fn bytes(&self) -> Vec<u8> {
        let items: Vec<String> = self
            .entries
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let mut header = format!("{{{}, }}", items.join(", "));
        let wide = self.version[0] >= 2;
        let fixed = if wide { 12 } else { 10 };
        header.push_str(
            &self
                .tail
                .replace('P', &" ".repeat(pad(fixed + header.len()))),
        );
        let len = self.length.unwrap_or(header.len() as u64);
        let mut out = b"\x93NUMPY".to_vec();
        out.extend(self.version);
        if wide {
            out.extend((len as u32).to_le_bytes());
        } else {
            out.extend((len as u16).to_le_bytes());
        }
        out.extend(header.into_bytes());
        out.extend(&self.data);
        out
    }
}

/// Spaces that bring a header of `len` bytes (and its newline) to a multiple of 64.
fn pad(len: usize) -> usize {
    (len + 1).next_multiple_of(64) - (len + 1)
}

/// A valid `.npy` file of version 1.0, 2.0 or 3.0, its parts (to mutate) and what it holds.
fn npy(rng: &mut Rng) -> (NpyParts, Expected) {
    let (name, ty, shape, data) = tensors(Kind::Npy, 1, rng).remove(0);
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let parts = NpyParts {
        version: *rng.pick(&[[1, 0], [2, 0], [3, 0]]),
        length: None,
        entries: vec![
            ("'descr'".into(), format!("'{}'", ty.npy_descr())),
            ("'fortran_order'".into(), "False".into()),
            ("'shape'".into(), shape_text),
        ],
        tail: "P\n".into(),
        data: data.clone(),
    };
    // A `.npy` file's tensor is named by the file's stem.
    let _ = name;
    let expected = Expected::new("x", ty, &shape, &data);
    (parts, expected)
}

fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// One edit of a `.npy` file's parts.
fn mutate_npy(p: &mut NpyParts, rng: &mut Rng) {
    let shapes = [
        "()",
        "(0,)",
        "(-1,)",
        "(2)",
        "[2, 3]",
        "(2, (3,))",
        "(2.0,)",
        "(True,)",
        "(4294967296, 4294967296)",
        "(18446744073709551616,)",
        "(1, 1, 1, 1, 1, 1, 1, 1, 1)",
        "(3, 0x2)",
        "(1_0,)",
    ];
    match rng.below(9) {
        0 => p.version = *rng.pick(&[[0, 0], [1, 0], [2, 0], [3, 0], [4, 0], [1, 1], [2, 1]]),
        1 => {
            let now = p.bytes().len() as u64;
            p.length = Some(match rng.below(3) {
                0 => now.saturating_sub(rng.below(80)),
                1 => now + rng.below(80),
                _ => vary(now, rng).parse().unwrap_or(u64::MAX),
            });
        }
        2 => {
            let descrs = [
                "'<f4'", "'>f4'", "'|f4'", "'=f4'", "'<i4'", "'<f16'", "'f4'", "'<c8'", "'<u2'",
                "'<f2 '", "\"<f8\"", "'<f2'", "'<f8'", "b'<f4'", "4",
            ];
            if let Some(e) = p.entries.get_mut(0) {
                e.1 = rng.pick(&descrs).to_string();
            }
        }
        3 => {
            let orders = ["True", "False", "0", "1", "None", "'False'", "false"];
            if let Some(e) = p.entries.get_mut(1) {
                e.1 = rng.pick(&orders).to_string();
            }
        }
        4 => {
            // A dimension varied, or a shape of another form.
            let Some((_, text)) = p.entries.get_mut(2) else {
                return;
            };
            let digits: Vec<usize> = text
                .char_indices()
                .filter(|c| c.1.is_ascii_digit())
                .map(|c| c.0)
                .collect();
            if rng.chance(0.5) && !digits.is_empty() {
                let at = *rng.pick(&digits);
                let end = text[at..]
                    .find(|c: char| !c.is_ascii_digit())
                    .map_or(text.len(), |e| at + e);
                let n = text[at..end].parse().unwrap_or(0);
                text.replace_range(at..end, &vary(n, rng));
            } else {
                *text = rng.pick(&shapes).to_string();
            }
        }
        5 => {
            // A key repeated, dropped, misspelt or added, or the keys reordered.
            let n = p.entries.len() as u64;
            if n == 0 {
                return;
            }
            let i = rng.below(n) as usize;
            match rng.below(4) {
                0 => {
                    let e = p.entries[i].clone();
                    let at = rng.below(4) as usize;
                    p.entries.insert(at.min(p.entries.len()), e);
                }
                1 => {
                    p.entries.remove(i);
                }
                2 => p.entries[i].0.insert(1, 'x'),
                _ => p.entries.swap(i, rng.below(n) as usize),
            }
        }
        6 => {
            p.tail = rng
                .pick(&["P", "P\n\n", "\0P\n", "Px\n", "P#\n", "P\t\n", "P\r\n"])
                .to_string()
        }
        7 => {
            // Data cut short or lengthened.
            let k = rng.range(1, 9) as usize;
            if rng.chance(0.5) {
                p.data.truncate(p.data.len().saturating_sub(k));
            } else {
                p.data.extend(std::iter::repeat_n(0x3c, k));
            }
        }
        _ => p
            .entries
            .push(("'extra'".into(), rng.pick(EDGES).to_string())),
    }
}

/// One edit of a safetensors file: its JSON header (a tensor's dtype, shape or offsets; a key
/// dropped, added or repeated), its length field, or its data.
fn mutate_safetensors(bytes: &mut Vec<u8>, rng: &mut Rng) {
    let n = bytes
        .get(..8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let header_end = (8 + n as usize).min(bytes.len());
    match rng.below(6) {
        0 | 1 => {
            let Ok(text) = std::str::from_utf8(&bytes[8.min(header_end)..header_end]) else {
                return;
            };
            let mut edited = text.trim_end().to_string();
            edit_json_header(&mut edited, rng);
            let mut out = (edited.len() as u64).to_le_bytes().to_vec();
            out.extend(edited.into_bytes());
            out.extend(&bytes[header_end..]);
            *bytes = out;
        }
        2 => {
            let new = match rng.below(3) {
                0 => n.wrapping_add(rng.below(17)).wrapping_sub(8),
                1 => bytes.len() as u64 - 8,
                _ => vary(n, rng).parse().unwrap_or(u64::MAX),
            };
            if bytes.len() >= 8 {
                bytes[..8].copy_from_slice(&new.to_le_bytes());
            }
        }
        3 => flip_bit(bytes, 8.min(header_end)..header_end, rng),
        4 => {
            let k = rng.range(1, 9) as usize;
            if rng.chance(0.5) {
                bytes.truncate(bytes.len().saturating_sub(k));
            } else {
                bytes.extend(std::iter::repeat_n(0x3c, k));
            }
        }
        _ => {
            let field = 0..8.min(bytes.len());
            flip_bit(bytes, field, rng)
        }
    }
}

/// One edit of a safetensors JSON header's text.
fn edit_json_header(text: &mut String, rng: &mut Rng) {
    let Ok(serde_json::Value::Object(mut map)) = serde_json::from_str(text) else {
        return;
    };
    let names: Vec<String> = map.keys().cloned().collect();
    let Some(name) = names
        .get(rng.below(names.len().max(1) as u64) as usize)
        .cloned()
    else {
        return;
    };
    if rng.chance(0.2) {
        // An entry repeated in the text (the JSON value map keeps one of a repeated key).
        let entry = format!("\"{name}\":{},", map[&name]);
        text.insert_str(if rng.chance(0.5) { 1 } else { text.len() - 1 }, &entry);
        if text.ends_with(",}") {
            text.replace_range(text.len() - 2..text.len() - 1, "");
        }
        return;
    }
    let Some(serde_json::Value::Object(entry)) = map.get_mut(&name) else {
        map.insert(name, serde_json::json!({"format": 7}));
        *text = serde_json::Value::Object(map).to_string();
        return;
    };
    let num = |s: String| serde_json::from_str(&s).unwrap_or(serde_json::Value::Null);
    match rng.below(6) {
        0 => {
            let dtypes = [
                "F16", "BF16", "F32", "F64", "I8", "U8", "I64", "BOOL", "F8_E4M3", "F4", "f32", "",
                "C64",
            ];
            entry.insert("dtype".into(), rng.pick(&dtypes).to_string().into());
        }
        1 | 2 => {
            let key = if rng.chance(0.5) {
                "shape"
            } else {
                "data_offsets"
            };
            if let Some(serde_json::Value::Array(a)) = entry.get_mut(key) {
                match rng.below(4) {
                    0 => a.push(num(vary(1, rng))),
                    1 => {
                        a.pop();
                    }
                    _ if !a.is_empty() => {
                        let i = rng.below(a.len() as u64) as usize;
                        let old = a[i].as_u64().unwrap_or(0);
                        a[i] = num(if rng.chance(0.2) {
                            "-1".into()
                        } else {
                            vary(old, rng)
                        });
                    }
                    _ => a.push(num("2".into())),
                }
            }
        }
        3 => {
            let keys: Vec<String> = entry.keys().cloned().collect();
            if !keys.is_empty() {
                entry.remove(rng.pick(&keys));
            }
        }
        4 => {
            entry.insert("extra".into(), num("1".into()));
        }
        _ => {
            map.remove(&name);
        }
    }
    *text = serde_json::Value::Object(map).to_string();
}

#[test]
fn tensor_file_mutants_are_refused_or_read_exactly() {
    let dir = scratch("fuzz-tensors");
    let seeds: Vec<(String, File)> = corpus("tensors", "npy")
        .into_iter()
        .map(|(name, bytes)| {
            (
                name,
                File {
                    kind: Kind::Npy,
                    bytes,
                    made_of: None,
                },
            )
        })
        .chain(
            corpus("tensors", "safetensors")
                .into_iter()
                .map(|(name, bytes)| {
                    (
                        name,
                        File {
                            kind: Kind::Safetensors,
                            bytes,
                            made_of: None,
                        },
                    )
                }),
        )
        .collect();
    let make = |_seed: u64, rng: &mut Rng| {
        let edits = rng.below(4);
        if rng.chance(0.5) {
            let (mut parts, expected) = npy(rng);
            for _ in 0..edits {
                mutate_npy(&mut parts, rng);
            }
            let mut bytes = parts.bytes();
            if edits > 0 && rng.chance(0.2) {
                let end = bytes.len() - parts.data.len();
                flip_bit(&mut bytes, 8..end, rng);
            }
            let made_of = (edits == 0).then(|| vec![expected]);
            File {
                kind: Kind::Npy,
                bytes,
                made_of,
            }
        } else {
            let mut file = safetensors(rng);
            for _ in 0..edits {
                mutate_safetensors(&mut file.bytes, rng);
            }
            if edits > 0 {
                file.made_of = None;
            }
            file
        }
    };
    let check = |file: &File, seed: u64| exercise(file, seed, &dir);
    fuzz("tensors", &Budget::from_env(5000), &seeds, make, check);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The property on one file, written to `dir`.
fn exercise(file: &File, seed: u64, dir: &Path) -> Result<Verdict, String> {
    let path = dir.join(format!("x.{}", file.ext()));
    std::fs::write(&path, &file.bytes).map_err(|e| e.to_string())?;
    let shown = path.display().to_string();
    let independent = read_independently(file.kind, &file.bytes, "x");
    if let (Some(made), Ok(found)) = (&file.made_of, &independent)
        && made != found
    {
        return Err(format!(
            "the independent reading is not what was made: {found:?}"
        ));
    }
    let read = index_tensors(&path).and_then(|index| {
        index
            .into_iter()
            .map(|(name, t)| {
                let whole = t.read()?;
                // A range of items too, as a run in chunks reads it.
                let items = t.shape.first().copied().unwrap_or(1);
                let a = (seed as usize) % (items + 1);
                let part = t.read_items(a..items)?;
                Ok((name, t.shape.clone(), whole.data, (a, part.data)))
            })
            .collect::<Result<Vec<_>, _>>()
    });
    let read = match read {
        Err(e) if e.to_string().contains(&shown) => return Ok("refused, naming the file"),
        Err(e) => return Err(format!("the error does not name `{shown}`: {e}")),
        Ok(read) => read,
    };
    let want = independent.map_err(|why| format!("read a file that is not valid ({why})"))?;
    if read.len() != want.len() {
        return Err(format!(
            "read {} tensors, the header says {}",
            read.len(),
            want.len()
        ));
    }
    for ((name, shape, whole, (first, part)), e) in read.iter().zip(&want) {
        if *name != e.name || *shape != e.shape {
            return Err(format!(
                "read `{name}` {shape:?}, the header says `{}` {:?}",
                e.name, e.shape
            ));
        }
        let count = shape.first().copied().unwrap_or(1);
        let skip = first * e.values.len().checked_div(count).unwrap_or(0);
        oracle::same(name, whole, &e.values)?;
        oracle::same(name, part, &e.values[skip.min(e.values.len())..])?;
    }
    Ok(if file.made_of.is_some() {
        "read as made"
    } else {
        "read exactly"
    })
}
