//! An independent reading of tensor files, for the fuzz target's property: the safetensors
//! specification (8-byte length, JSON header, contiguous offsets, the file's length) and
//! numpy's `.npy` rules (magic, version 1.0/2.0/3.0, a Python dict literal of exactly `descr`,
//! `fortran_order` and `shape`, a repeated key's last value kept, trailing bytes ignored),
//! values decoded from their bits by hand. It shares no code with `nnp_runtime::io`.

/// Which format a file is in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Npy,
    Safetensors,
}

/// The element types the reader takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ty {
    F16,
    Bf16,
    F32,
    F64,
}

impl Ty {
    pub fn size(self) -> usize {
        match self {
            Ty::F16 | Ty::Bf16 => 2,
            Ty::F32 => 4,
            Ty::F64 => 8,
        }
    }
    pub fn safetensors_name(self) -> &'static str {
        match self {
            Ty::F16 => "F16",
            Ty::Bf16 => "BF16",
            Ty::F32 => "F32",
            Ty::F64 => "F64",
        }
    }
    pub fn npy_descr(self) -> &'static str {
        match self {
            Ty::F16 => "<f2",
            Ty::F32 => "<f4",
            Ty::F64 => "<f8",
            Ty::Bf16 => "bf16 has no .npy descr",
        }
    }

    /// The f32 value of one little-endian element: f16 from its fields (1 sign, 5 exponent bits
    /// of bias 15, 10 fraction bits; exponent 0 subnormal, 31 infinity or NaN), bf16 as the
    /// top half of an f32, f64 rounded to nearest even (Rust's `as`).
    fn decode(self, b: &[u8]) -> f32 {
        match self {
            Ty::F16 => {
                let bits = u16::from_le_bytes([b[0], b[1]]);
                let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
                let (e, m) = (i32::from((bits >> 10) & 0x1f), f64::from(bits & 0x3ff));
                let v = match e {
                    0 => m * 2f64.powi(-24),
                    31 if m == 0.0 => f64::INFINITY,
                    31 => f64::NAN,
                    _ => (1.0 + m / 1024.0) * 2f64.powi(e - 15),
                };
                (sign * v) as f32
            }
            Ty::Bf16 => f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16),
            Ty::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            Ty::F64 => f64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as f32,
        }
    }
}

/// A tensor as the independent reading finds it: its values' f32 bit patterns.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<u32>,
}

impl Expected {
    pub fn new(name: &str, ty: Ty, shape: &[usize], bytes: &[u8]) -> Expected {
        let values = bytes
            .chunks_exact(ty.size())
            .map(|c| ty.decode(c).to_bits())
            .collect();
        Expected {
            name: name.to_string(),
            shape: shape.to_vec(),
            values,
        }
    }
}

/// `got` is `want`, bit for bit (a NaN for a NaN: the reader may quiet a signalling one).
pub fn same(name: &str, got: &[f32], want: &[u32]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "`{name}`: {} values read, {} expected",
            got.len(),
            want.len()
        ));
    }
    for (i, (g, &w)) in got.iter().zip(want).enumerate() {
        let w = f32::from_bits(w);
        if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
            return Err(format!(
                "`{name}` value {i}: read {g:e} ({:#010x}), the file holds {w:e}",
                g.to_bits()
            ));
        }
    }
    Ok(())
}

/// The tensors of a file, in name order; or why a reader must refuse it. A `.npy` file's
/// tensor is named `stem`.
pub fn read_independently(kind: Kind, bytes: &[u8], stem: &str) -> Result<Vec<Expected>, String> {
    match kind {
        Kind::Safetensors => safetensors(bytes),
        Kind::Npy => npy(bytes, stem).map(|t| vec![t]),
    }
}

fn safetensors(bytes: &[u8]) -> Result<Vec<Expected>, String> {
    use serde_json::Value;
    let n = bytes.get(..8).ok_or("shorter than the length field")?;
    let n = u64::from_le_bytes(n.try_into().map_err(|_| "length")?);
    // The reference implementation's limit on headers.
    if n > 100_000_000 || 8 + n > bytes.len() as u64 {
        return Err(format!("header length {n}"));
    }
    let header = std::str::from_utf8(&bytes[8..8 + n as usize]).map_err(|e| e.to_string())?;
    let Value::Object(map) = serde_json::from_str::<Value>(header).map_err(|e| e.to_string())?
    else {
        return Err("the header is not an object".into());
    };
    let mut spans = Vec::new();
    for (name, entry) in &map {
        if name == "__metadata__" {
            let strings = entry
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string));
            if !strings && !entry.is_null() {
                return Err("__metadata__ is not a map of strings".into());
            }
            continue;
        }
        let uint = |v: &Value| v.as_u64().and_then(|n| usize::try_from(n).ok());
        let list = |key: &str| -> Result<Vec<usize>, String> {
            let items = entry
                .get(key)
                .and_then(Value::as_array)
                .ok_or(format!("`{name}`: no {key}"))?;
            items
                .iter()
                .map(uint)
                .collect::<Option<_>>()
                .ok_or(format!("`{name}`: {key}"))
        };
        let ty = match entry.get("dtype").and_then(Value::as_str) {
            Some("F16") => Ty::F16,
            Some("BF16") => Ty::Bf16,
            Some("F32") => Ty::F32,
            Some("F64") => Ty::F64,
            other => return Err(format!("`{name}`: dtype {other:?} is not read")),
        };
        let shape = list("shape")?;
        let offsets = list("data_offsets")?;
        let &[start, end] = offsets.as_slice() else {
            return Err(format!("`{name}`: offsets {offsets:?}"));
        };
        let count = shape.iter().try_fold(1usize, |p, &d| p.checked_mul(d));
        let size = count
            .and_then(|c| c.checked_mul(ty.size()))
            .ok_or("overflow")?;
        if end < start || end - start != size {
            return Err(format!("`{name}`: offsets {start}..{end} for {size} bytes"));
        }
        spans.push((start, end, name.clone(), ty, shape));
    }
    // Contiguous from 0 in offset order, up to the end of the file.
    spans.sort_by_key(|s| (s.0, s.1));
    let mut at = 0;
    for s in &spans {
        if s.0 != at {
            return Err(format!("`{}` starts at {}, not {at}", s.2, s.0));
        }
        at = s.1;
    }
    let data = &bytes[8 + n as usize..];
    if at != data.len() {
        return Err(format!(
            "the data is {} bytes, the header says {at}",
            data.len()
        ));
    }
    let mut out: Vec<Expected> = spans
        .iter()
        .map(|(s, e, name, ty, shape)| Expected::new(name, *ty, shape, &data[*s..*e]))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn npy(bytes: &[u8], stem: &str) -> Result<Expected, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("no magic".into());
    }
    let (start, header) = match (bytes[6], bytes[7]) {
        (1, 0) => (
            10 + usize::from(u16::from_le_bytes([bytes[8], bytes[9]])),
            10,
        ),
        (2 | 3, 0) if bytes.len() >= 12 => {
            let n = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (12 + n as usize, 12)
        }
        v => return Err(format!("version {v:?}")),
    };
    let text = bytes.get(header..start).ok_or("truncated header")?;
    if !text.is_ascii() {
        // Latin-1 (or UTF-8) outside a string is a syntax error, inside one a wrong key or descr.
        return Err("a header byte that is not ASCII".into());
    }
    let text = std::str::from_utf8(text).map_err(|e| e.to_string())?;
    let mut p = Lit {
        s: text.trim_start_matches([' ', '\t']).as_bytes(),
        at: 0,
    };
    let dict = p.value()?;
    p.space();
    if p.at != p.s.len() {
        return Err(format!("text after the dict: {:?}", &text[p.at..]));
    }
    let Py::Dict(entries) = dict else {
        return Err("not a dict".into());
    };
    // A repeated key keeps its last value, as in Python.
    let get = |k: &str| {
        entries
            .iter()
            .rev()
            .find(|(key, _)| *key == Py::Str(k.into()))
            .map(|e| &e.1)
    };
    let mut keys: Vec<&Py> = entries.iter().map(|e| &e.0).collect();
    keys.sort_by_key(|k| format!("{k:?}"));
    keys.dedup();
    if keys.len() != 3
        || ["descr", "fortran_order", "shape"]
            .iter()
            .any(|k| get(k).is_none())
    {
        return Err(format!("keys {keys:?}"));
    }
    let ty = match get("descr") {
        Some(Py::Str(s)) if s == "<f2" => Ty::F16,
        Some(Py::Str(s)) if s == "<f4" => Ty::F32,
        Some(Py::Str(s)) if s == "<f8" => Ty::F64,
        other => return Err(format!("descr {other:?} is not read")),
    };
    if get("fortran_order") != Some(&Py::Bool(false)) {
        return Err("not C order".into());
    }
    let Some(Py::Tuple(dims)) = get("shape") else {
        return Err("shape is not a tuple".into());
    };
    let shape = dims
        .iter()
        .map(|d| match d {
            Py::Int(n) => usize::try_from(*n).ok(),
            _ => None,
        })
        .collect::<Option<Vec<usize>>>()
        .ok_or("a dimension is not an integer from 0")?;
    let count = shape
        .iter()
        .try_fold(ty.size(), |p, &d| p.checked_mul(d))
        .ok_or("overflow")?;
    let data = bytes.get(start..).unwrap_or_default();
    let values = data.get(..count).ok_or("truncated data")?;
    Ok(Expected::new(stem, ty, &shape, values))
}

/// A Python integer literal's value: decimal (no leading zero but in 0 itself), `0x`, `0o` or
/// `0b`, a single `_` allowed between digits; `None` for anything else (a float, say).
fn python_int(word: &[u8]) -> Option<i128> {
    let text = std::str::from_utf8(word).ok()?.to_ascii_lowercase();
    let (radix, digits) = match text.get(..2) {
        Some("0x") => (16, &text[2..]),
        Some("0o") => (8, &text[2..]),
        Some("0b") => (2, &text[2..]),
        _ => (10, text.as_str()),
    };
    let digits = if radix == 10 {
        digits
    } else {
        digits.strip_prefix('_').unwrap_or(digits)
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let plain: String = digits.chars().filter(|&c| c != '_').collect();
    if radix == 10 && plain.starts_with('0') && plain.chars().any(|c| c != '0') {
        return None;
    }
    if !plain.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    // Too large for i128 is too large for any dimension.
    Some(i128::from_str_radix(&plain, radix).unwrap_or(i128::MAX))
}

/// A Python literal (the part of Python `ast.literal_eval` that a `.npy` header uses).
#[derive(Clone, Debug, PartialEq)]
enum Py {
    Str(String),
    Int(i128),
    Bool(bool),
    None,
    Tuple(Vec<Py>),
    List(Vec<Py>),
    Dict(Vec<(Py, Py)>),
}

/// A parser of [`Py`] literals: strings without escapes, decimal integers, `True`, `False`,
/// `None`, tuples, lists and dicts; whitespace (newlines too) between tokens.
struct Lit<'a> {
    s: &'a [u8],
    at: usize,
}

impl Lit<'_> {
    fn space(&mut self) {
        while self
            .s
            .get(self.at)
            .is_some_and(|c| b" \t\n\r\x0c".contains(c))
        {
            self.at += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.s.get(self.at).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        let yes = self.peek() == Some(c);
        self.at += usize::from(yes);
        yes
    }
    /// Items up to `close`, separated by commas (one after the last allowed), and whether a
    /// comma was seen (a tuple of one needs it).
    fn items<T>(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<(Vec<T>, bool), String> {
        let (mut out, mut comma) = (Vec::new(), false);
        loop {
            if self.eat(close) {
                return Ok((out, comma));
            }
            out.push(item(self)?);
            if self.eat(b',') {
                comma = true;
            } else if self.eat(close) {
                return Ok((out, comma));
            } else {
                return Err(format!(
                    "expected `,` or `{}` at {}",
                    close as char, self.at
                ));
            }
        }
    }
    fn value(&mut self) -> Result<Py, String> {
        match self.peek().ok_or("end of header")? {
            b'{' => {
                self.at += 1;
                let (entries, _) = self.items(b'}', |p| {
                    let k = p.value()?;
                    if !p.eat(b':') {
                        return Err("expected `:`".into());
                    }
                    Ok((k, p.value()?))
                })?;
                Ok(Py::Dict(entries))
            }
            b'(' => {
                self.at += 1;
                let (items, comma) = self.items(b')', Self::value)?;
                match items.len() {
                    // `(x)` is x itself.
                    1 if !comma => Ok(items.into_iter().next().unwrap_or(Py::None)),
                    _ => Ok(Py::Tuple(items)),
                }
            }
            b'[' => {
                self.at += 1;
                Ok(Py::List(self.items(b']', Self::value)?.0))
            }
            q @ (b'\'' | b'"') => {
                let rest = &self.s[self.at + 1..];
                let end = rest.iter().position(|&c| c == q).ok_or("unclosed string")?;
                let body = &rest[..end];
                if body.iter().any(|c| b"\\\n\r".contains(c)) {
                    return Err("a string with an escape or a newline".into());
                }
                self.at += end + 2;
                Ok(Py::Str(String::from_utf8_lossy(body).into_owned()))
            }
            c if c == b'-' || c == b'+' || c.is_ascii_digit() => {
                let negative = c == b'-';
                if !c.is_ascii_digit() {
                    self.at += 1;
                    self.space();
                }
                let word: Vec<u8> = self.s[self.at..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'.')
                    .copied()
                    .collect();
                self.at += word.len();
                let n = python_int(&word).ok_or(format!(
                    "a number this reading does not take at {}",
                    self.at
                ))?;
                Ok(Py::Int(if negative { -n } else { n }))
            }
            _ => {
                let word: Vec<u8> = self.s[self.at..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                    .copied()
                    .collect();
                self.at += word.len();
                match word.as_slice() {
                    b"True" => Ok(Py::Bool(true)),
                    b"False" => Ok(Py::Bool(false)),
                    b"None" => Ok(Py::None),
                    w => Err(format!("`{}` at {}", String::from_utf8_lossy(w), self.at)),
                }
            }
        }
    }
}
