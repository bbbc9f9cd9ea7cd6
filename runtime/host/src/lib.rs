//! Host data: the weights and inputs a program is run with, and the outputs it produces.
//!
//! Both execution engines (the software graph and the emulator) take a [`HostData`] and return
//! [`Outputs`], so they always see the same numbers.
//!
//! - Weights: one [`Tensor`] per `matrix`/`vector` declaration loaded from files (`Init::Load`),
//!   in the declaration's logical shape.
//! - Inputs: one [`Tensor`] per `input` declaration, shape `[batch, ...decl.shape]`.
//! - Values are plain f32. The engines round them to the storage format on entry (docs/numerics.md
//!   section 1); a file holding f64 is rounded to f32 when read (the host's data type).
//! - A run through a large batch in chunks takes its inputs a range of items at a time from an
//!   [`InputFeed`] ([`HostData::open`] for files, [`InputFeed::random`]), so it never holds the
//!   whole batch's; [`HostData::whole`] makes the whole batch of a feed.
//!
//! Seeded random data ([`HostData::random`]) is deterministic: each tensor has its own ChaCha8
//! stream keyed by 32 bytes `seed (u64 LE) ++ fnv1a64(name) (u64 LE) ++ 16 zero bytes`. Each
//! value is `u = (next_u32() >> 8) * 2^-24` (uniform in [0, 1)), mapped to `a + (b - a) * u` in
//! f64, and stored as f32, in row-major order: matrices `U(-1, 1) / sqrt(cols)`, vectors
//! `U(-0.5, 0.5)`, inputs `U(-1, 1)` (batch item 0 first, so item 0 does not depend on the
//! batch size, and any items' values can be made alone: [`HostData::random_inputs`]).
//! Declarations `= 0` are zero.
//!
//! This crate is what both engines share and nothing else: host data (here), tensor files
//! ([`io`]), the tensor type ([`tensor`]) and the trace format ([`trace`]). It knows no
//! engine: neither the emulator nor the software graph's executor is a dependency.

pub mod io;
pub mod source;
pub mod tensor;
pub mod trace;

use crate::io::IoError;
pub use crate::source::{SourceError, TensorSource};
pub use crate::tensor::{ShapeDisplay, Tensor, Unfilled, to_f16};
use nnp_grammar::{Decl, DeclKind, Init, Interface};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

/// Outputs of a run: one tensor per `output` declaration, shape `[batch, ...decl.shape]`,
/// values in the storage format held as f32.
pub type Outputs = BTreeMap<String, Tensor>;

/// A progress callback of a run over a batch (the emulator's, a session's): called with the
/// number of batch items just finished.
#[derive(Clone)]
pub struct Progress(pub std::sync::Arc<dyn Fn(usize) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress(..)")
    }
}

/// Weights and inputs for one run of a program over `batch` input sets.
#[derive(Clone, Debug, PartialEq)]
pub struct HostData {
    pub batch: usize,
    /// Matrices and vectors with `Init::Load`, in the declaration's logical shape.
    pub weights: BTreeMap<String, Tensor>,
    /// Every input declaration, shape `[batch, ...decl.shape]`.
    pub inputs: BTreeMap<String, Tensor>,
}

/// Host data that cannot be used with a program.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum HostError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Source(#[from] SourceError),
    #[error(
        "no tensor named `{name}` for {kind} `{name}` (expected shape {expected}) in \
         {searched}{held}"
    )]
    #[diagnostic(help(
        "add it to the weights/inputs file (or select it from one: `FILE:NAME=STORED`), \
         declare it `= 0`, or pass the option that fills missing tensors with seeded random \
         data (`--random-missing`)"
    ))]
    Missing {
        name: String,
        kind: &'static str,
        expected: String,
        searched: String,
        /// `; tensors found: `a`, `b`` (the names the files do have), or empty.
        held: String,
    },
    #[error("tensor `{name}` has shape {found} but {kind} `{name}` expects {expected}")]
    #[diagnostic(help("{help}"))]
    Shape {
        name: String,
        kind: &'static str,
        expected: String,
        found: String,
        help: String,
    },
    #[error("tensor `{name}` holds {value} at flat index {index}; host data must be finite")]
    #[diagnostic(help("replace NaN/infinite entries before running"))]
    NonFinite {
        name: String,
        index: usize,
        value: f32,
    },
    #[error(
        "input tensors disagree on the batch size: `{first}` has {first_batch} items, `{name}` \
         has {batch}"
    )]
    #[diagnostic(help("give every batched input the same leading dimension"))]
    BatchMismatch {
        first: String,
        first_batch: usize,
        name: String,
        batch: usize,
    },
    #[error("batch size must be at least 1")]
    ZeroBatch,
    #[error(
        "the program's weights take {need} bytes as f32, more than the {available} bytes of \
         memory available"
    )]
    #[diagnostic(help("a smaller program, or a machine with more memory"))]
    WeightsTooLarge { need: u64, available: u64 },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Elements(#[from] Unfilled),
    /// A caller's broken invariant: a bug in nnpc (or in a program calling the library).
    #[error(
        "internal error (a bug in nnpc; please report it): inputs of items {}..{} asked of a \
         batch of {batch}",
        items.start,
        items.end
    )]
    NoItems { items: Range<usize>, batch: usize },
}

/// How [`HostData::load_with`] treats what the files lack. The default: batch inferred, no
/// random fallback, seed 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LoadOptions {
    /// Batch size; `None` infers it from batched inputs (`[B, ...shape]`), else 1.
    pub batch: Option<usize>,
    /// Fill tensors missing from the files with seeded random data instead of failing.
    pub random_missing: bool,
    /// Seed of that random data.
    pub seed: u64,
}

fn kind_name(d: &Decl) -> &'static str {
    match d.kind {
        DeclKind::Matrix => "matrix",
        DeclKind::Vector => "vector",
        DeclKind::Input => "input",
        DeclKind::Output => "output",
    }
}

/// The weights of `program` (as f32) fit the memory available (`MemAvailable`; no check
/// where the system does not say), or the error that says so before any is made.
pub fn weights_fit(program: &dyn Interface) -> Result<(), HostError> {
    let need = program.weights().fold(0u64, |sum, d| {
        let elements = d
            .shape
            .iter()
            .fold(1u64, |p, &n| p.saturating_mul(n as u64));
        sum.saturating_add(elements.saturating_mul(4))
    });
    match mem_available_bytes() {
        Some(available) if need > available => Err(HostError::WeightsTooLarge { need, available }),
        _ => Ok(()),
    }
}

/// Values `first..first + n` uniform in `[lo, hi)` of the stream of `name` (see the module
/// docs). Made in pieces of [`UNIFORM_PIECE`] values, each from its own place in the stream
/// (so on every thread of the pool at once): the same values as one pass.
fn uniform(name: &str, seed: u64, first: usize, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    use rayon::prelude::*;
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&nnp_grammar::fnv1a64_u64(name.as_bytes()).to_le_bytes());
    let mut out = vec![0f32; n];
    let piece = |(k, out): (usize, &mut [f32])| {
        let mut rng = ChaCha8Rng::from_seed(key);
        // One 32-bit word of the stream per value.
        rng.set_word_pos((first + k * UNIFORM_PIECE) as u128);
        let mut bytes = [0u8; 4096];
        for out in out.chunks_mut(bytes.len() / 4) {
            let bytes = &mut bytes[..4 * out.len()];
            // The stream's words in order, as `next_u32` reads them (little-endian bytes).
            rng.fill_bytes(bytes);
            for (o, w) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                let u = (w >> 8) as f64 * (1.0 / (1u64 << 24) as f64);
                *o = (lo + (hi - lo) * u) as f32;
            }
        }
    };
    if n > UNIFORM_PIECE {
        out.par_chunks_mut(UNIFORM_PIECE)
            .enumerate()
            .for_each(piece);
    } else {
        piece((0, &mut out));
    }
    out
}

/// The values [`uniform`] makes in one task.
const UNIFORM_PIECE: usize = 1 << 16;

/// Seeded random values for one declaration: for an input, those of the batch items `items`
/// (shape `[items, ...decl.shape]`).
fn random_tensor(d: &Decl, items: Range<usize>, seed: u64) -> Tensor {
    let mut shape = d.shape.clone();
    let mut first = 0;
    if d.kind == DeclKind::Input {
        first = items.start * shape.iter().product::<usize>();
        shape.insert(0, items.len());
    }
    let n: usize = shape.iter().product();
    if d.init == Init::Zero {
        return Tensor::zeros(shape);
    }
    let data = match d.kind {
        DeclKind::Matrix => {
            let s = (d.row_len().max(1) as f64).sqrt();
            uniform(&d.name, seed, first, n, -1.0 / s, 1.0 / s)
        }
        DeclKind::Vector => uniform(&d.name, seed, first, n, -0.5, 0.5),
        _ => uniform(&d.name, seed, first, n, -1.0, 1.0),
    };
    Tensor { shape, data }
}

/// `Err` naming the first value of `t` that is not finite; `offset` is the flat index of
/// `t`'s first value in the whole tensor it is a piece of.
fn check_finite(name: &str, t: &Tensor, offset: usize) -> Result<(), HostError> {
    match t.data.iter().position(|v| !v.is_finite()) {
        Some(at) => Err(HostError::NonFinite {
            name: name.to_string(),
            index: offset + at,
            value: t.data[at],
        }),
        None => Ok(()),
    }
}

/// A tensor found for a declaration: in memory, or in a file, read when it is needed.
#[derive(Clone, Debug)]
enum Found {
    Memory(Tensor),
    Stored(io::StoredTensor),
}

impl Found {
    fn shape(&self) -> &[usize] {
        match self {
            Found::Memory(t) => &t.shape,
            Found::Stored(t) => &t.shape,
        }
    }

    fn whole(self) -> Result<Tensor, IoError> {
        match self {
            Found::Memory(t) => Ok(t),
            Found::Stored(t) => t.read(),
        }
    }

    /// Items `items` of its first dimension.
    fn items(&self, items: Range<usize>) -> Result<Tensor, IoError> {
        match self {
            Found::Memory(t) => {
                let per_item: usize = t.shape.iter().skip(1).product();
                let mut shape = t.shape.clone();
                shape[0] = items.len();
                let data = t.data[items.start * per_item..items.end * per_item].to_vec();
                Ok(Tensor { shape, data })
            }
            Found::Stored(t) => t.read_items(items),
        }
    }
}

/// Where one input's values come from.
#[derive(Clone, Debug)]
enum Feed {
    /// `[batch, ...shape]` values.
    Batched(Found),
    /// One input set, the same for every item (checked finite once).
    Broadcast(Tensor),
    /// Seeded random values (zeros for an input declared `= 0`).
    Random(Decl, u64),
}

/// The inputs of a run over `batch` items, made or read a range of items at a time
/// ([`InputFeed::items`]): a run that goes through a large batch in chunks holds one chunk's
/// inputs, whether they come from files or are seeded random data. Every check that needs no
/// values (names, shapes, batch sizes) is done when the feed is made; values are checked
/// finite as they are read.
#[derive(Clone, Debug)]
pub struct InputFeed {
    pub batch: usize,
    /// Every input declaration's feed, in declaration order.
    feeds: Vec<(String, Feed)>,
}

impl InputFeed {
    /// Seeded random inputs ([`HostData::random_inputs`]) of `batch` items.
    pub fn random(program: &dyn Interface, batch: usize, seed: u64) -> InputFeed {
        let feeds = program
            .inputs()
            .map(|d| (d.name.clone(), Feed::Random(d.clone(), seed)))
            .collect();
        InputFeed { batch, feeds }
    }

    /// The inputs of items `items` (each of shape `[items.len(), ...decl.shape]`). A value
    /// that is not finite is an error naming its flat index in the whole batch's tensor.
    pub fn items(&self, items: Range<usize>) -> Result<BTreeMap<String, Tensor>, HostError> {
        if items.end > self.batch {
            return Err(HostError::NoItems {
                items,
                batch: self.batch,
            });
        }
        let mut out = BTreeMap::new();
        for (name, feed) in &self.feeds {
            out.insert(name.clone(), feed.items(name, items.clone())?);
        }
        Ok(out)
    }

    /// The inputs of every item ([`InputFeed::items`] of the whole batch), each tensor held
    /// in memory taken as it is rather than copied.
    pub fn into_whole(self) -> Result<BTreeMap<String, Tensor>, HostError> {
        let mut out = BTreeMap::new();
        for (name, feed) in self.feeds {
            let t = match feed {
                Feed::Batched(Found::Memory(t)) if t.shape.first() == Some(&self.batch) => {
                    check_finite(&name, &t, 0)?;
                    t
                }
                feed => feed.items(&name, 0..self.batch)?,
            };
            out.insert(name, t);
        }
        Ok(out)
    }
}

impl Feed {
    /// The values of items `items` of the input `name`, checked finite where they are read.
    fn items(&self, name: &str, items: Range<usize>) -> Result<Tensor, HostError> {
        Ok(match self {
            Feed::Batched(found) => {
                let t = found.items(items.clone())?;
                check_finite(name, &t, items.start * (t.len() / items.len().max(1)))?;
                t
            }
            Feed::Broadcast(one) => {
                let mut data = Vec::with_capacity(one.len() * items.len());
                for _ in items.clone() {
                    data.extend_from_slice(&one.data);
                }
                let shape = std::iter::once(items.len()).chain(one.shape.iter().copied());
                Tensor {
                    shape: shape.collect(),
                    data,
                }
            }
            Feed::Random(d, seed) => random_tensor(d, items, *seed),
        })
    }
}

impl HostData {
    /// Seeded random data of the declared shapes (see the module docs for the exact recipe).
    pub fn random(program: &dyn Interface, batch: usize, seed: u64) -> HostData {
        HostData {
            batch,
            weights: HostData::random_weights(program, seed),
            inputs: HostData::random_inputs(program, 0..batch, seed),
        }
    }

    /// The weights [`HostData::random`] makes with `seed`.
    pub fn random_weights(program: &dyn Interface, seed: u64) -> BTreeMap<String, Tensor> {
        program
            .weights()
            .map(|d| (d.name.clone(), random_tensor(d, 0..1, seed)))
            .collect()
    }

    /// The inputs of the batch items `items` of any batch [`HostData::random`] makes with
    /// `seed` (each input's stream read from those items' first value on): a large batch's
    /// inputs a piece at a time.
    pub fn random_inputs(
        program: &dyn Interface,
        items: Range<usize>,
        seed: u64,
    ) -> BTreeMap<String, Tensor> {
        program
            .inputs()
            .map(|d| (d.name.clone(), random_tensor(d, items.clone(), seed)))
            .collect()
    }

    /// Load weights and inputs from files (safetensors, `.npy`, or a directory of `.npy`; see
    /// [`io::read_tensors`]). Every name is looked up in both files. Strict: a missing tensor is
    /// an error. `batch = None` infers it from the inputs.
    pub fn load(
        program: &dyn Interface,
        weights: Option<&Path>,
        inputs: Option<&Path>,
        batch: Option<usize>,
    ) -> Result<HostData, HostError> {
        let opts = LoadOptions {
            batch,
            ..LoadOptions::default()
        };
        HostData::load_with(program, weights, inputs, &opts)
    }

    /// [`HostData::load`] with options (random fallback for missing tensors).
    pub fn load_with(
        program: &dyn Interface,
        weights: Option<&Path>,
        inputs: Option<&Path>,
        opts: &LoadOptions,
    ) -> Result<HostData, HostError> {
        let (weights, feed) = HostData::open(program, weights, inputs, opts)?;
        HostData::whole(weights, feed)
    }

    /// What [`HostData::load_with`] loads, with the inputs left in their files to be read a
    /// range of items at a time ([`InputFeed::items`]): the weights, and the feed of the
    /// inputs. Only the files' headers and the weights' values are read here.
    pub fn open(
        program: &dyn Interface,
        weights: Option<&Path>,
        inputs: Option<&Path>,
        opts: &LoadOptions,
    ) -> Result<(BTreeMap<String, Tensor>, InputFeed), HostError> {
        let weights = weights.map(TensorSource::from);
        let inputs = inputs.map(TensorSource::from);
        HostData::open_sources(program, weights.as_ref(), inputs.as_ref(), opts)
    }

    /// [`HostData::open`] from tensor sources: whole files, or the tensors selected from
    /// them under the names the program declares (`FILE:NAME=STORED,...`,
    /// [`TensorSource::parse`]).
    pub fn open_sources(
        program: &dyn Interface,
        weights: Option<&TensorSource>,
        inputs: Option<&TensorSource>,
        opts: &LoadOptions,
    ) -> Result<(BTreeMap<String, Tensor>, InputFeed), HostError> {
        let mut tensors = BTreeMap::new();
        let mut searched = Vec::new();
        // The inputs file first, so a name present in both files takes the weights file's entry.
        let files = [(inputs, true), (weights, false)];
        for (source, input) in files.into_iter().filter_map(|(s, i)| Some((s?, i))) {
            let stored = HostData::index_file(program, source, input)?;
            tensors.extend(stored.into_iter().map(|(n, t)| (n, Found::Stored(t))));
            searched.push(format!("`{source}`"));
        }
        let searched = match (searched.is_empty(), weights.is_none()) {
            (true, _) => "no file (none was given)".to_string(),
            (false, true) => format!("{} (no weights file was given)", searched.join(" and ")),
            (false, false) => searched.join(" and "),
        };
        // No inputs file: the inputs the weights file lacks are seeded, as with no file at
        // all (a weights-only file, such as `nnpc train -o`'s, runs like `--seed`).
        let weights = match inputs.is_none() {
            true => Weights::ReadSeedingInputs,
            false => Weights::Read,
        };
        HostData::feed(program, tensors, opts, &searched, weights)
    }

    /// The tensors of the inputs file (`input`) or the weights file `source`, by name, as
    /// [`HostData::open_sources`] looks them up. A selection ([`TensorSource::select`]) gives
    /// the selected tensors under the names it gives them, each of which must be one of the
    /// program's inputs or loaded weights. Without one, a single `.npy` file's tensor is named
    /// by the file's stem; where that names no declaration and the program has one
    /// declaration of the file's kind (its one input, or its one loaded matrix or vector),
    /// the tensor is that declaration's.
    pub fn index_file(
        program: &dyn Interface,
        source: &TensorSource,
        input: bool,
    ) -> Result<BTreeMap<String, io::StoredTensor>, HostError> {
        let mut stored = source.index()?;
        if !source.select.is_empty() {
            let takes = |name: &str| {
                program
                    .inputs()
                    .chain(program.weights())
                    .any(|d| d.name == name)
            };
            if let Some((name, from)) = source.select.iter().find(|(n, _)| !takes(n)) {
                let list = |decls: Vec<&Decl>, what: &str| {
                    let names: Vec<String> =
                        decls.iter().map(|d| format!("`{}`", d.name)).collect();
                    match names.len() {
                        0 => format!("no {what}s"),
                        1 => format!("the {what} {}", names[0]),
                        _ => format!("the {what}s {}", names.join(", ")),
                    }
                };
                let declared = format!(
                    "{} and {}",
                    list(program.inputs().collect(), "input"),
                    list(program.weights().collect(), "weight")
                );
                return Err(SourceError::Undeclared {
                    path: source.path.display().to_string(),
                    name: name.clone(),
                    stored: from.clone(),
                    declared,
                    // The help's example: a declaration of the file's kind.
                    first: match input {
                        true => program.inputs().next(),
                        false => program.weights().next(),
                    }
                    .map_or_else(|| "NAME".to_string(), |d| d.name.clone()),
                }
                .into());
            }
            return Ok(stored);
        }
        let path = &source.path;
        let of_kind: Vec<&Decl> = match input {
            true => program.inputs().collect(),
            false => program.weights().collect(),
        };
        let names: Vec<String> = stored.keys().cloned().collect();
        if let ([only], [stem]) = (&of_kind[..], &names[..])
            && io::is_npy_file(path)
            && program.decl(stem).is_none()
            && let Some(t) = stored.remove(stem)
        {
            stored.insert(only.name.clone(), t);
        }
        Ok(stored)
    }

    /// Host data from tensors already in memory, keyed by declaration name. `searched` names
    /// where they came from, for error messages.
    pub fn from_tensors(
        program: &dyn Interface,
        tensors: BTreeMap<String, Tensor>,
        opts: &LoadOptions,
        searched: &str,
    ) -> Result<HostData, HostError> {
        let found = in_memory(tensors, |_| true);
        let (weights, feed) = HostData::feed(program, found, opts, searched, Weights::Read)?;
        HostData::whole(weights, feed)
    }

    /// The inputs of `tensors`, checked and fed as [`HostData::from_tensors`] does, and no
    /// weights: the data of a warm run, whose session prepared its weights in its first run
    /// and reads none after it (a session that did read them fails with a missing weight).
    /// The program's weights among `tensors` are not read.
    pub fn inputs_only(
        program: &dyn Interface,
        tensors: BTreeMap<String, Tensor>,
        opts: &LoadOptions,
        searched: &str,
    ) -> Result<HostData, HostError> {
        let found = in_memory(tensors, |name| !program.weights().any(|d| d.name == name));
        let (_, feed) = HostData::feed(program, found, opts, searched, Weights::Skip)?;
        HostData::whole(BTreeMap::new(), feed)
    }

    /// The whole batch of `feed` with `weights`.
    pub fn whole(
        weights: BTreeMap<String, Tensor>,
        feed: InputFeed,
    ) -> Result<HostData, HostError> {
        Ok(HostData {
            batch: feed.batch,
            inputs: feed.into_whole()?,
            weights,
        })
    }

    /// The weights (read whole and checked) and the inputs' feed from the tensors found for
    /// the declarations: every check of names and shapes. [`Weights`] says whether the
    /// weights are read, and whether the inputs the tensors lack are seeded random data
    /// (weights must still be found).
    fn feed(
        program: &dyn Interface,
        mut tensors: BTreeMap<String, Found>,
        opts: &LoadOptions,
        searched: &str,
        weights: Weights,
    ) -> Result<(BTreeMap<String, Tensor>, InputFeed), HostError> {
        let seed_inputs = weights == Weights::ReadSeedingInputs;
        // The batch, and how an input's batched shape names it: `B` while nothing fixes it.
        let (batch, batch_dim) = match opts.batch {
            Some(0) => return Err(HostError::ZeroBatch),
            Some(b) => (b, b.to_string()),
            None => match infer_batch(program, &tensors)? {
                Some(b) => (b, b.to_string()),
                None => (1, "B".to_string()),
            },
        };
        let held = held_names(tensors.keys());
        let missing = |d: &Decl, expected: String| HostError::Missing {
            name: d.name.clone(),
            kind: kind_name(d),
            expected,
            searched: searched.to_string(),
            held: held.clone(),
        };
        // Tensors in memory may be built by hand (their fields are public): one whose values
        // do not fill its shape would be read out of bounds.
        for (name, found) in &tensors {
            if let Found::Memory(t) = found {
                t.check_filled(name)?;
            }
        }
        let read_weights = weights != Weights::Skip;
        let mut weights = BTreeMap::new();
        for d in program.weights().filter(|_| read_weights) {
            let t = match tensors.remove(&d.name) {
                Some(found) => found.whole()?,
                None if opts.random_missing => random_tensor(d, 0..1, opts.seed),
                None => return Err(missing(d, ShapeDisplay(&d.shape).to_string())),
            };
            if t.shape != d.shape {
                return Err(HostError::Shape {
                    name: d.name.clone(),
                    kind: kind_name(d),
                    expected: ShapeDisplay(&d.shape).to_string(),
                    found: ShapeDisplay(&t.shape).to_string(),
                    help: "weights use the declaration's logical shape; reshape the tensor or fix \
                           the declaration"
                        .into(),
                });
            }
            check_finite(&d.name, &t, 0)?;
            weights.insert(d.name.clone(), t);
        }
        let mut feeds = Vec::new();
        for d in program.inputs() {
            let batched: Vec<usize> = std::iter::once(batch)
                .chain(d.shape.iter().copied())
                .collect();
            let dims: Vec<String> = std::iter::once(batch_dim.clone())
                .chain(d.shape.iter().map(usize::to_string))
                .collect();
            let expected = format!("{} or [{}]", ShapeDisplay(&d.shape), dims.join(", "));
            let feed = match tensors.remove(&d.name) {
                Some(found) if found.shape() == batched => Feed::Batched(found),
                Some(found) if found.shape() == d.shape => {
                    let one = found.whole()?;
                    check_finite(&d.name, &one, 0)?;
                    Feed::Broadcast(one)
                }
                Some(found) => {
                    return Err(HostError::Shape {
                        name: d.name.clone(),
                        kind: "input",
                        expected,
                        found: ShapeDisplay(found.shape()).to_string(),
                        help: format!(
                            "an input is the declared shape (one set, used for every batch item) \
                             or the declared shape with a leading batch dimension ({batch_dim})"
                        ),
                    });
                }
                None if d.init == Init::Zero || opts.random_missing || seed_inputs => {
                    Feed::Random(d.clone(), opts.seed)
                }
                None => return Err(missing(d, expected)),
            };
            feeds.push((d.name.clone(), feed));
        }
        Ok((weights, InputFeed { batch, feeds }))
    }

    /// The input set of one batch item: `[...decl.shape]` values of `name`.
    pub fn input_item(&self, name: &str, item: usize) -> Option<&[f32]> {
        let t = self.inputs.get(name)?;
        let per = t.len().checked_div(self.batch)?;
        t.data.get(item * per..(item + 1) * per)
    }
}

/// `; tensors found: `a`, `b`` for the names of the tensors the files hold
/// ([`source::held`]), or empty where they hold none.
fn held_names<'a>(names: impl ExactSizeIterator<Item = &'a String>) -> String {
    match names.len() {
        0 => String::new(),
        _ => format!("; tensors found: {}", crate::source::held(names)),
    }
}

/// `tensors` that `keep` keeps, as found in memory.
fn in_memory(
    tensors: BTreeMap<String, Tensor>,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<String, Found> {
    tensors
        .into_iter()
        .filter(|(name, _)| keep(name))
        .map(|(name, t)| (name, Found::Memory(t)))
        .collect()
}

/// What [`HostData::feed`] does with the weights.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Weights {
    /// Read and check every one (the inputs the tensors lack are an error where not seeded).
    Read,
    /// Read them, and seed the inputs the tensors lack.
    ReadSeedingInputs,
    /// Read none (a warm session's run).
    Skip,
}

/// Batch size from inputs given as `[B, ...shape]`; `None` when none is batched.
fn infer_batch(
    program: &dyn Interface,
    tensors: &BTreeMap<String, Found>,
) -> Result<Option<usize>, HostError> {
    let mut found: Option<(String, usize)> = None;
    for d in program.inputs() {
        let Some(t) = tensors.get(&d.name) else {
            continue;
        };
        let shape = t.shape();
        if shape.len() == d.shape.len() + 1 && shape[1..] == d.shape[..] {
            let b = shape[0];
            match &found {
                Some((first, fb)) if *fb != b => {
                    return Err(HostError::BatchMismatch {
                        first: first.clone(),
                        first_batch: *fb,
                        name: d.name.clone(),
                        batch: b,
                    });
                }
                Some(_) => {}
                None => found = Some((d.name.clone(), b)),
            }
        }
    }
    match found {
        Some((_, 0)) => Err(HostError::ZeroBatch),
        found => Ok(found.map(|(_, b)| b)),
    }
}

/// The help of a NaN or infinity that the target forbids (emulator and software graph).
pub const NONFINITE_HELP: &str =
    "the target sets `nonfinite = \"error\"`; scale the data or use `allow`";

mod storage;
pub use storage::{
    canonical_nan, fits_f16, fits_f32, mem_available_bytes, storage_bits, values_name,
};
