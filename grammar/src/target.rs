//! Target descriptions: the machine a program is checked and executed for.
//!
//! `bw-default` is built in; other targets are TOML files (schema in `docs/targets.md`).

use crate::source_text::SourceText;
use miette::SourceSpan;
use nnp_numerics::{Activation, Format};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// How the MVM sums the products of one output row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Accumulation {
    /// Integer-exact products and sums across all tiles, one rounding to `mvm.output`.
    #[default]
    #[serde(rename = "exact")]
    Exact,
    /// Each tile partial (exact) rounded to f32, partials added in tile order in f32.
    #[serde(rename = "fp32-seq")]
    Fp32Seq,
    /// Each tile partial (exact) rounded to fp16, partials added in tile order in fp16.
    #[serde(rename = "fp16-seq")]
    Fp16Seq,
}

impl Accumulation {
    pub const ALL: [Accumulation; 3] = [
        Accumulation::Exact,
        Accumulation::Fp32Seq,
        Accumulation::Fp16Seq,
    ];

    /// The value a target file writes (`accumulation = "fp32-seq"`).
    pub fn name(self) -> &'static str {
        match self {
            Accumulation::Exact => "exact",
            Accumulation::Fp32Seq => "fp32-seq",
            Accumulation::Fp16Seq => "fp16-seq",
        }
    }
}

/// What the machine does when an op produces NaN or infinity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum NonFinite {
    /// IEEE behaviour: NaN and infinities flow on.
    #[default]
    #[serde(rename = "allow")]
    Allow,
    /// A runtime error naming the instruction.
    #[serde(rename = "error")]
    Error,
}

impl NonFinite {
    /// What an error of a value that became infinite on load names as its op (the emulator's
    /// and the software graph's errors say it alike).
    pub const HOST_LOAD: &'static str = "host load (rounding to the storage format)";
}

/// Memory sizes, in registers (vector memories) or N x N tiles (`mrf`, `dram_tiles`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySizes {
    pub ivrf: u32,
    /// Per MFU.
    pub asvrf: u32,
    /// Per MFU.
    pub mulvrf: u32,
    pub mrf: u32,
    /// Vector DRAM, in vector registers.
    pub dram: u32,
    /// Matrix DRAM, in N x N tiles (a separate address space from vector DRAM).
    pub dram_tiles: u32,
}

impl Default for MemorySizes {
    fn default() -> Self {
        MemorySizes {
            ivrf: 2048,
            asvrf: 2048,
            mulvrf: 2048,
            mrf: 4096,
            dram: 1 << 20,
            dram_tiles: 1 << 16,
        }
    }
}

/// Activation table files (65,536 little-endian u16: fp16 input bits -> fp16 output bits), by
/// activation; a target file names each under its activation's name (`numerics.tables.sigm`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Tables(BTreeMap<Activation, PathBuf>);

impl Tables {
    /// The table file of `a`, if the target gives one.
    pub fn get(&self, a: Activation) -> Option<&PathBuf> {
        self.0.get(&a)
    }
    pub fn set(&mut self, a: Activation, path: PathBuf) {
        self.0.insert(a, path);
    }
    /// The files given, in [`Activation::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Activation, &PathBuf)> {
        self.0.iter().map(|(&a, p)| (a, p))
    }
}

/// Every activation's name with its file or null.
impl Serialize for Tables {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(Activation::ALL.len()))?;
        for a in Activation::ALL {
            m.serialize_entry(a.name(), &self.get(a))?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Tables {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let given = BTreeMap::<Activation, Option<PathBuf>>::deserialize(d)?;
        let files = given.into_iter().filter_map(|(a, p)| Some((a, p?)));
        Ok(Tables(files.collect()))
    }
}

/// The numeric knobs of docs/numerics.md: default formats per quantization point and more.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetNumerics {
    pub storage: Format,
    pub mvm_vector: Format,
    pub mvm_matrix: Format,
    pub mvm_output: Format,
    pub mfu_input: Format,
    pub accumulation: Accumulation,
    pub nonfinite: NonFinite,
    pub tables: Tables,
}

/// A machine description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    /// Native dimension N.
    pub native: usize,
    /// Number of MFUs in the pipeline.
    pub mfus: usize,
    pub memory: MemorySizes,
    pub numerics: TargetNumerics,
    /// Directory of the target file (relative table paths resolve against it).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

/// The most bytes a target file may have (the built-in targets take about 2 KB).
pub const MAX_TARGET_BYTES: u64 = 1 << 20;

/// A target file that cannot be used. An invalid file's error points at the key or value in
/// the file's text (rendered by miette like a firmware diagnostic) where it has one; when the
/// file has several problems, the first is the error and the rest are `more`.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum TargetError {
    // The cause is in the message (not a `source`, which miette would print again).
    #[error("cannot read target file `{path}`: {cause}")]
    #[diagnostic(code(nnp::target))]
    Read {
        path: String,
        cause: std::io::Error,
        /// The built-in target the name is close to, when there is no such file.
        #[help]
        help: Option<String>,
    },
    #[error("target file `{path}` is not a valid target description: {message}")]
    #[diagnostic(code(nnp::target))]
    Invalid {
        path: String,
        message: String,
        /// The file's text, where the error has a place in it.
        #[source_code]
        src: Option<Arc<SourceText>>,
        #[label("here")]
        span: Option<SourceSpan>,
        /// The file's other problems, in file order.
        #[related]
        more: Vec<TargetProblem>,
    },
    #[error("unknown built-in target `{0}` (built-in targets: bw-default)")]
    #[diagnostic(code(nnp::target))]
    UnknownBuiltin(String),
}

/// One more problem of an invalid target file (see [`TargetError::Invalid`]).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{message}")]
#[diagnostic(code(nnp::target))]
pub struct TargetProblem {
    pub message: String,
    #[source_code]
    src: Option<Arc<SourceText>>,
    #[label("here")]
    span: Option<SourceSpan>,
}

impl TargetProblem {
    /// Where it points: a byte range of the file's text.
    pub fn span(&self) -> Option<Range<usize>> {
        self.span.map(|s| s.offset()..s.offset() + s.len())
    }
}

/// The built-in target `name` is likely a misspelling of (edit distance), if any.
pub fn nearest_builtin(name: &str) -> Option<&'static str> {
    let near = crate::isa::nearest(name, BUILTIN_TARGETS)?;
    BUILTIN_TARGETS.iter().copied().find(|b| *b == near)
}

/// Keys a target file may have, per table (`""` is the top level).
const KEYS: &[(&str, &[&str])] = &[
    ("", &["name", "native", "mfus", "memory", "numerics"]),
    (
        "memory",
        &["ivrf", "asvrf", "mulvrf", "mrf", "dram", "dram_tiles"],
    ),
    (
        "numerics",
        &[
            "storage",
            "mvm_vector",
            "mvm_matrix",
            "mvm_output",
            "mfu_input",
            "accumulation",
            "nonfinite",
            "tables",
        ],
    ),
    ("numerics.tables", &TABLE_KEYS),
];

/// The keys of `numerics.tables`: the activations' names.
const TABLE_KEYS: [&str; Activation::ALL.len()] = {
    let mut keys = [""; Activation::ALL.len()];
    let mut i = 0;
    while i < keys.len() {
        keys[i] = Activation::ALL[i].name();
        i += 1;
    }
    keys
};

/// Every unknown key of `table` (the table at `path`) and of the known tables in it, as
/// (message, span).
fn unknown_keys(
    table: &toml::de::DeTable<'_>,
    path: &str,
    out: &mut Vec<(String, Option<Range<usize>>)>,
) {
    let known = KEYS
        .iter()
        .find(|(p, _)| *p == path)
        .map_or(&[][..], |(_, k)| *k);
    for (key, value) in table {
        let name = key.get_ref().as_ref();
        let full = if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        };
        if known.contains(&name) {
            if let toml::de::DeValue::Table(t) = value.get_ref() {
                unknown_keys(t, &full, out);
            }
            continue;
        }
        let list: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
        let mut message = format!(
            "unknown field `{name}`, expected one of {}",
            list.join(", ")
        );
        if let Some(near) = crate::isa::nearest(name, known.iter()) {
            message.push_str(&format!(" (did you mean `{near}`?)"));
        }
        if !path.is_empty() {
            message.push_str(&format!(" in `[{path}]`"));
        }
        out.push((message, Some(key.span())));
    }
}

impl TargetError {
    /// Where an invalid file's error points: a byte range of the file's text.
    pub fn span(&self) -> Option<Range<usize>> {
        match self {
            TargetError::Invalid { span: Some(s), .. } => Some(s.offset()..s.offset() + s.len()),
            _ => None,
        }
    }
}

/// The on-disk TOML shape; every field optional, defaults from `bw-default`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    name: Option<String>,
    native: Option<Spanned<usize>>,
    mfus: Option<Spanned<usize>>,
    memory: Option<MemorySizes>,
    numerics: Option<NumericsFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NumericsFile {
    storage: Option<Spanned<String>>,
    mvm_vector: Option<Spanned<String>>,
    mvm_matrix: Option<Spanned<String>>,
    mvm_output: Option<Spanned<String>>,
    mfu_input: Option<Spanned<String>>,
    accumulation: Option<Accumulation>,
    nonfinite: Option<NonFinite>,
    tables: Option<TablesFile>,
}

/// `[numerics] tables = { ... }`: each a path, relative to the target file's directory, under
/// an activation's name (other keys are reported by [`unknown_keys`]).
type TablesFile = BTreeMap<String, Spanned<PathBuf>>;

/// Largest native dimension N a target may have.
pub const MAX_NATIVE: usize = 4096;

/// Bytes of an activation table file: 65,536 little-endian u16.
pub const TABLE_BYTES: u64 = 2 << 16;

pub const BUILTIN_TARGETS: &[&str] = &["bw-default"];

impl Target {
    /// `bw-default`: N = 128, 2 MFUs, fp16 storage, BFP 8-bit mantissa / 5-bit exponent for the
    /// MVM inputs, exact accumulation, fp16 output (docs/numerics.md).
    pub fn bw_default() -> Target {
        let bfp: Format = "bfp(mant = 8, exp_bits = 5, round = even)"
            .parse()
            .unwrap_or(Format::FP16);
        Target {
            name: "bw-default".into(),
            native: 128,
            mfus: 2,
            memory: MemorySizes::default(),
            numerics: TargetNumerics {
                storage: Format::FP16,
                mvm_vector: bfp,
                mvm_matrix: bfp,
                mvm_output: Format::FP16,
                mfu_input: Format::FP16,
                accumulation: Accumulation::Exact,
                nonfinite: NonFinite::Allow,
                tables: Tables::default(),
            },
            base_dir: None,
        }
    }

    pub fn builtin(name: &str) -> Result<Target, TargetError> {
        match name {
            "bw-default" => Ok(Target::bw_default()),
            other => Err(TargetError::UnknownBuiltin(other.to_string())),
        }
    }

    /// Parse a target description from TOML text; `path` names it in errors. Every unknown
    /// key is reported (else the first value of a wrong type, else every value out of range).
    pub fn from_toml(text: &str, path: &str) -> Result<Target, TargetError> {
        let source = std::cell::OnceCell::new();
        let invalid = |mut problems: Vec<(String, Option<Range<usize>>)>| {
            problems.sort_by_key(|(_, span)| span.as_ref().map_or(0, |r| r.start));
            let mut problems = problems.into_iter().map(|(message, span)| {
                let src = span.as_ref().map(|_| {
                    source
                        .get_or_init(|| Arc::new(SourceText::new(path, text.to_string())))
                        .clone()
                });
                let span = span.map(|r| SourceSpan::from(r.start..r.end.max(r.start)));
                (message, src, span)
            });
            let (message, src, span) = problems.next().unwrap_or_default();
            TargetError::Invalid {
                path: path.to_string(),
                message,
                src,
                span,
                more: problems
                    .map(|(message, src, span)| TargetProblem { message, src, span })
                    .collect(),
            }
        };
        let one = |message: String, span: Option<Range<usize>>| invalid(vec![(message, span)]);
        let table =
            toml::de::DeTable::parse(text).map_err(|e| one(e.message().into(), e.span()))?;
        let mut problems = Vec::new();
        unknown_keys(table.get_ref(), "", &mut problems);
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        let file: TargetFile =
            toml::from_str(text).map_err(|e| one(e.message().to_string(), e.span()))?;
        let mut t = Target::bw_default();
        t.name = file.name.unwrap_or_else(|| {
            Path::new(path)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "target".into())
        });
        t.base_dir = Path::new(path).parent().map(Path::to_path_buf);
        // Each value the file gives is checked where its span is at hand (bw-default's own
        // values are valid); every problem is collected.
        let mut count = |key: &str, v: Option<Spanned<usize>>, max: usize, slot: &mut usize| {
            if let Some(v) = v {
                if !(1..=max).contains(v.get_ref()) {
                    let message = format!("{key} = {} must be between 1 and {max}", v.get_ref());
                    problems.push((message, Some(v.span())));
                } else {
                    *slot = v.into_inner();
                }
            }
        };
        count("native", file.native, MAX_NATIVE, &mut t.native);
        count("mfus", file.mfus, 8, &mut t.mfus);
        if let Some(mem) = file.memory {
            t.memory = mem;
        }
        if let Some(n) = file.numerics {
            // MFU and storage values are floats (`float`).
            let mut parse =
                |key: &str, v: Option<Spanned<String>>, float: bool, slot: &mut Format| {
                    let Some(lit) = v else { return };
                    let at = Some(lit.span());
                    match lit.get_ref().parse::<Format>() {
                        Err(e) => problems
                            .push((format!("numerics.{key} = \"{}\": {e}", lit.get_ref()), at)),
                        Ok(f) if float && f.as_float().is_none() => problems.push((
                            format!(
                                "numerics.{key} = \"{f}\" must be a float format (fp16, bf16, \
                                 fp32 or fp(e, m))"
                            ),
                            at,
                        )),
                        Ok(f)
                            if key == "storage"
                                && f.as_float().is_some_and(|f| !storage_fits_f32(f)) =>
                        {
                            problems.push((
                                format!(
                                    "numerics.storage = \"{f}\" is wider than fp32 (registers, \
                                     traces and output files hold f32 values): at most fp(8, 23)"
                                ),
                                at,
                            ))
                        }
                        Ok(f) => *slot = f,
                    }
                };
            let num = &mut t.numerics;
            parse("storage", n.storage, true, &mut num.storage);
            parse("mvm_vector", n.mvm_vector, false, &mut num.mvm_vector);
            parse("mvm_matrix", n.mvm_matrix, false, &mut num.mvm_matrix);
            parse("mvm_output", n.mvm_output, true, &mut num.mvm_output);
            parse("mfu_input", n.mfu_input, true, &mut num.mfu_input);
            if let Some(a) = n.accumulation {
                num.accumulation = a;
            }
            if let Some(nf) = n.nonfinite {
                num.nonfinite = nf;
            }
            // A table file is checked now (it exists and has a table's size), so that `check`
            // and `compile` point at the key, and every command agrees.
            if let Some(tables) = n.tables {
                let mut tables = tables;
                let mut table = |key: &str| {
                    let v = tables.remove(key)?;
                    let span = Some(v.span());
                    let given = v.into_inner();
                    let problem = match std::fs::metadata(t.table_path(&given)) {
                        Err(e) => format!("cannot be read ({e})"),
                        Ok(m) if m.is_file() && m.len() == TABLE_BYTES => return Some(given),
                        Ok(m) if m.is_file() => format!(
                            "has {} bytes; a table is 65,536 little-endian u16 (131,072 bytes)",
                            m.len()
                        ),
                        Ok(_) => "is not a file".to_string(),
                    };
                    let shown = given.display();
                    problems.push((
                        format!("numerics.tables.{key} = \"{shown}\" {problem}"),
                        span,
                    ));
                    None
                };
                let mut checked = Tables::default();
                for a in Activation::ALL {
                    if let Some(path) = table(a.name()) {
                        checked.set(a, path);
                    }
                }
                t.numerics.tables = checked;
            }
        }
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        Ok(t)
    }

    /// Load a target: a built-in name, or a path to a TOML file. A name that is no file but
    /// is close to a built-in name gets that name as its help.
    pub fn load(name_or_path: &str) -> Result<Target, TargetError> {
        Target::load_as(name_or_path, name_or_path)
    }

    /// Load a target named `given` (as the user wrote it) from `path` (`given` resolved, for
    /// a `target` statement, against the firmware file's directory).
    pub fn load_as(given: &str, path: &str) -> Result<Target, TargetError> {
        if BUILTIN_TARGETS.contains(&given) {
            return Target::builtin(given);
        }
        // A regular file of at most MAX_TARGET_BYTES (a FIFO or `/dev/zero` is refused unread).
        let bytes = crate::read::read_limited(Path::new(path), MAX_TARGET_BYTES);
        let text = bytes
            .map_err(|e| match e {
                crate::read::LimitedReadError::Io(e) => e,
                e => std::io::Error::other(e.to_string()),
            })
            .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other));
        let text = text.map_err(|cause| {
            let help = (cause.kind() == std::io::ErrorKind::NotFound)
                .then(|| nearest_builtin(given))
                .flatten()
                .map(|b| {
                    format!(
                        "`{given}` is no file; did you mean the built-in target `{b}`? (built-in \
                         targets: {})",
                        BUILTIN_TARGETS.join(", ")
                    )
                });
            TargetError::Read {
                path: path.to_string(),
                cause,
                help,
            }
        })?;
        Target::from_toml(&text, path)
    }

    /// Size of a memory in registers (tiles for `mrf`; vector registers for `dram`).
    pub fn mem_size(&self, mem: crate::isa::Mem) -> u32 {
        use crate::isa::Mem;
        match mem {
            Mem::Netq => u32::MAX,
            Mem::Dram => self.memory.dram,
            Mem::Ivrf => self.memory.ivrf,
            Mem::Mrf => self.memory.mrf,
            Mem::AsVrf(_) => self.memory.asvrf,
            Mem::MulVrf(_) => self.memory.mulvrf,
        }
    }

    /// The absolute path of a table file (a relative one is relative to the target file's
    /// directory), so that a compiled graph that names it runs from any directory.
    pub fn table_path(&self, p: &Path) -> PathBuf {
        let p = match &self.base_dir {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        };
        match std::path::absolute(&p) {
            Ok(abs) => abs,
            Err(_) => p,
        }
    }
}

/// Whether values in this storage format fit the f32 registers, traces and output files of
/// every command (docs/files.md): at most fp32's 8 exponent and 23 mantissa bits. The checker
/// refuses a wider `quant storage` or target `storage`; the emulator asks again for a
/// [`crate::Program`] built by hand.
pub fn storage_fits_f32(f: &nnp_numerics::FloatFormat) -> bool {
    f.exp_bits <= 8 && f.mant_bits <= 23
}
