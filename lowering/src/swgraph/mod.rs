//! The software graph: an SSA graph of tensor ops that computes, bit for bit, what the NNP
//! computes for a checked [`Program`](nnp_grammar::Program).
//!
//! Nodes live in an arena (`SwGraph::nodes`) and refer to earlier nodes by [`ValueId`] (their
//! index), so the arena order is a topological order. Every value carries a leading batch
//! dimension: host inputs have `B` items, weights and constants 1 (broadcast). Register images
//! are tile-shaped:
//!
//! - a *vector* value of `t` tiles is `[batch, t * N]` (native tile `k` = lanes `kN .. (k+1)N`);
//! - a *tile stack* of `t` matrix tiles is `[batch, t, N, N]` (row = output lane, column = input
//!   lane);
//! - *logical* values (`Input`, `Weight`, `Zero`, `Unpad`) have the declaration's shape.
//!
//! [`lower`] builds the graph by symbolic execution of the program; [`optimize`] merges identical
//! work and drops dead values. The JSON form is versioned ([`SWGRAPH_VERSION`]); see
//! `docs/swgraph.md`.

mod lower;
mod passes;

pub use lower::{LowerError, lower};
pub use passes::{Roots, optimize};

use nnp_grammar::{Accumulation, Decl, Mem, Span};
use nnp_numerics::{FloatFormat, Format};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Version of the JSON schema written by [`SwGraph::to_json`].
pub const SWGRAPH_VERSION: u32 = 1;

/// Handle of a node (its index in [`SwGraph::nodes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// The type of a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ty {
    /// `[batch, ...shape]` in the declaration's logical shape.
    Logical { shape: Vec<usize> },
    /// `[batch, tiles * N]`: native vector registers side by side.
    Vector { tiles: u32 },
    /// `[batch, tiles, N, N]`: matrix tiles.
    TileStack { tiles: u32 },
    /// Sinks (`Output`) produce nothing.
    None,
}

impl Ty {
    /// Tiles of a vector or tile-stack value.
    pub fn tiles(&self) -> Option<u32> {
        match self {
            Ty::Vector { tiles } | Ty::TileStack { tiles } => Some(*tiles),
            _ => None,
        }
    }
}

/// How a declaration's logical tensor maps onto registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TileLayout {
    /// `[rows..., C]`: each row padded to `ceil(C/N)` registers, rows one after another.
    Vector,
    /// `[R, C]`: `ceil(R/N) * ceil(C/N)` tiles, row-major tile order.
    Matrix,
}

/// The runs a quantizer sees (`Format::quantize` is called once per run, blocks laid along it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockAxis {
    /// Each native tile of a vector value (`mvm.vector`).
    VectorTile,
    /// Each row of each N x N tile of a tile stack (`mvm.matrix`).
    TileRow,
    /// Each padded row of `tiles` registers of a declaration (its own `quant` on host load).
    PaddedRow { tiles: u32 },
}

impl BlockAxis {
    /// Lanes per run at native dimension `n`.
    pub fn run(self, n: usize) -> usize {
        match self {
            BlockAxis::PaddedRow { tiles } => tiles as usize * n,
            _ => n,
        }
    }
}

/// `k` tiles of a value starting at tile `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileSlice {
    pub value: ValueId,
    pub start: u32,
    pub count: u32,
}

/// Element-wise MFU ops with an operand. Each rounds both inputs to the MFU format, computes the
/// exact result and rounds it once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinOp {
    Add,
    /// `a - b`.
    Sub,
    /// NaN-propagating maximum, `max(-0, +0) = +0`.
    Max,
    Mul,
}

/// MFU ops on the carried vector alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnOp {
    /// `x > 0 ? x : +0`, NaN stays NaN.
    Relu,
    /// Rounds to the MFU format only.
    Pass,
    Sigm,
    Tanh,
    Exp,
    /// Over all lanes of the value (pad lanes included), NUMERICS.md section 1.
    Softmax,
}

impl UnOp {
    /// The activation table the op reads (softmax reads the exp table).
    pub fn table(self) -> Option<TableFn> {
        match self {
            UnOp::Sigm => Some(TableFn::Sigm),
            UnOp::Tanh => Some(TableFn::Tanh),
            UnOp::Exp | UnOp::Softmax => Some(TableFn::Exp),
            UnOp::Relu | UnOp::Pass => None,
        }
    }
}

/// A function with a 65,536-entry table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableFn {
    Sigm,
    Tanh,
    Exp,
}

/// The operation of a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// A host input (`input` declaration), `[B, ...shape]`.
    Input { name: String, shape: Vec<usize> },
    /// Host weights (`matrix`/`vector` declaration loaded from a file), `[1, ...shape]`.
    Weight { name: String, shape: Vec<usize> },
    /// Zeros of a logical shape (`= 0` declarations), `[1, ...shape]`.
    Zero { shape: Vec<usize> },
    /// Logical tensor to register image; pad lanes take `pad` (matrices pad with 0).
    PadToTiles {
        src: ValueId,
        layout: TileLayout,
        pad: f64,
    },
    /// The first `len` lanes of a vector value, as `[batch, len]` (drops pad lanes).
    Unpad { src: ValueId, len: usize },
    /// Round every element to a float format (storage).
    Round { src: ValueId, format: FloatFormat },
    /// Fake-quantize runs of N along the last axis with `format` (`Format::quantize`).
    Quantize {
        src: ValueId,
        format: Format,
        axis: BlockAxis,
    },
    /// Tiles of vector values (or of tile stacks) side by side.
    Concat { parts: Vec<TileSlice> },
    /// `y = W x`: `x` a vector of `cols` quantized tiles, `w` a stack of `rows * cols` quantized
    /// tiles (row-major), products summed per `accumulation`, rounded to `output`. The formats
    /// `x` and `w` were quantized with are recorded so the executor can prove its fast path
    /// exact.
    TiledMatVec {
        x: ValueId,
        w: ValueId,
        rows: u32,
        cols: u32,
        accumulation: Accumulation,
        vector_format: Format,
        matrix_format: Format,
        output: FloatFormat,
    },
    /// An MFU op with an operand: `format(op(format(a), format(b)))`.
    Binary {
        op: BinOp,
        a: ValueId,
        b: ValueId,
        format: FloatFormat,
    },
    /// An MFU op on the carried vector. `table`: a target's table file for the op's function
    /// (absolute path), `None` for the built-in correctly rounded table.
    Unary {
        op: UnOp,
        src: ValueId,
        format: FloatFormat,
        table: Option<String>,
    },
    /// Row `row` of output `name` is the (unpadded) value `src`, `[batch, row_len]`.
    Output {
        name: String,
        row: usize,
        src: ValueId,
    },
}

impl Op {
    /// The values this op reads, in order.
    pub fn inputs(&self) -> Vec<ValueId> {
        match self {
            Op::Input { .. } | Op::Weight { .. } | Op::Zero { .. } => Vec::new(),
            Op::PadToTiles { src, .. }
            | Op::Unpad { src, .. }
            | Op::Round { src, .. }
            | Op::Quantize { src, .. }
            | Op::Unary { src, .. }
            | Op::Output { src, .. } => vec![*src],
            Op::Concat { parts } => parts.iter().map(|p| p.value).collect(),
            Op::TiledMatVec { x, w, .. } => vec![*x, *w],
            Op::Binary { a, b, .. } => vec![*a, *b],
        }
    }

    /// Rewrite every input through `f`.
    pub fn map_inputs(&mut self, mut f: impl FnMut(ValueId) -> ValueId) {
        match self {
            Op::Input { .. } | Op::Weight { .. } | Op::Zero { .. } => {}
            Op::PadToTiles { src, .. }
            | Op::Unpad { src, .. }
            | Op::Round { src, .. }
            | Op::Quantize { src, .. }
            | Op::Unary { src, .. }
            | Op::Output { src, .. } => *src = f(*src),
            Op::Concat { parts } => parts.iter_mut().for_each(|p| p.value = f(p.value)),
            Op::TiledMatVec { x, w, .. } => {
                *x = f(*x);
                *w = f(*w);
            }
            Op::Binary { a, b, .. } => {
                *a = f(*a);
                *b = f(*b);
            }
        }
    }

    /// A short name for listings.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Weight { .. } => "weight",
            Op::Zero { .. } => "zero",
            Op::PadToTiles { .. } => "pad_to_tiles",
            Op::Unpad { .. } => "unpad",
            Op::Round { .. } => "round",
            Op::Quantize { .. } => "quantize",
            Op::Concat { .. } => "concat",
            Op::TiledMatVec { .. } => "tiled_mat_vec",
            Op::Binary { .. } => "binary",
            Op::Unary { .. } => "unary",
            Op::Output { .. } => "output",
        }
    }
}

/// A node: an op and the type of the value it produces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    #[serde(flatten)]
    pub op: Op,
    pub ty: Ty,
}

/// A value written by a `v_wr`: what the emulator's trace reports for that instruction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WriteRecord {
    pub chain: usize,
    pub iteration: u32,
    pub dst: Mem,
    /// First register written; for `netq`, the 0-based index of the push in the run.
    pub addr: u32,
    /// Registers written (the chain's width).
    pub tiles: u32,
    /// The vector value written (`[batch, tiles * N]`, storage format).
    pub value: ValueId,
    /// The chain's storage format (what the trace's bit patterns encode).
    pub storage: FloatFormat,
    /// 1-based source line and span of the `v_wr`.
    pub line: usize,
    pub span: Span,
}

/// An output declaration: how the `Output` rows assemble into a tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputInfo {
    pub name: String,
    pub shape: Vec<usize>,
    /// Rows (product of the leading dims) of `row_len` values each.
    pub rows: usize,
    pub row_len: usize,
}

/// The software graph of one program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwGraph {
    /// Schema version ([`SWGRAPH_VERSION`]).
    pub version: u32,
    /// Source file the graph was compiled from.
    pub source: String,
    pub target: String,
    /// Native dimension N.
    pub native: usize,
    /// Storage format (what the outputs and traced writes hold).
    pub storage: FloatFormat,
    pub nodes: Vec<Node>,
    /// Every output declaration, in declaration order.
    pub outputs: Vec<OutputInfo>,
    /// The program's declarations (what host data a run of the graph needs, and how seeded
    /// random data is drawn for it).
    pub decls: Vec<Decl>,
    /// One record per executed `v_wr` (per iteration), in execution order.
    pub writes: Vec<WriteRecord>,
    /// Under the target's `nonfinite = "error"`: the values checked for NaN/Inf, in execution
    /// order (none otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<FiniteCheck>,
}

/// A value that must hold no NaN or infinity under `nonfinite = "error"` (docs/semantics.md,
/// "Emulator and host data"): a weight or input as loaded, a `mv_mul` result, an MFU op's
/// result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FiniteCheck {
    pub value: ValueId,
    /// The tiles of each item's value that are checked: `tiles` of them from `first_tile`
    /// (one input row as netq pops it; else the whole value).
    pub first_tile: u32,
    pub tiles: u32,
    /// A weight, which every batch item shares: its error is item 0's.
    pub weight: bool,
    /// What made the value: `mv_mul`, an MFU op's mnemonic, or the host load.
    pub op: String,
    pub chain: usize,
    pub iteration: u32,
    /// 1-based source line and span of the instruction (of the declaration for a load).
    pub line: usize,
    pub span: Span,
}

/// A graph that is not well formed (a hand-edited or foreign JSON file).
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("not a software graph: {0}")]
    Json(String),
    #[error(
        "software graph schema version {found} is not supported (this nnpc reads version \
         {expected}); help: recompile the firmware with `nnpc compile`"
    )]
    Version { found: u32, expected: u32 },
    #[error("node {node} ({op}): {message}")]
    Node {
        node: usize,
        op: &'static str,
        message: String,
    },
    #[error("{0}")]
    Other(String),
}

impl SwGraph {
    pub fn node(&self, id: ValueId) -> &Node {
        &self.nodes[id.index()]
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parse and validate a graph written by [`SwGraph::to_json`].
    pub fn from_json(text: &str) -> Result<SwGraph, GraphError> {
        #[derive(Deserialize)]
        struct Header {
            version: u32,
        }
        let header: Header =
            serde_json::from_str(text).map_err(|e| GraphError::Json(e.to_string()))?;
        if header.version != SWGRAPH_VERSION {
            return Err(GraphError::Version {
                found: header.version,
                expected: SWGRAPH_VERSION,
            });
        }
        let g: SwGraph = serde_json::from_str(text).map_err(|e| GraphError::Json(e.to_string()))?;
        g.validate()?;
        Ok(g)
    }

    /// Check that every reference points to an earlier node of the right type and that every
    /// type follows from its op.
    pub fn validate(&self) -> Result<(), GraphError> {
        if self.native == 0 || self.native > 4096 {
            return Err(GraphError::Other(format!(
                "native dimension {} is out of range 1..=4096",
                self.native
            )));
        }
        float_format(&self.storage).map_err(|e| GraphError::Other(format!("storage: {e}")))?;
        for (i, node) in self.nodes.iter().enumerate() {
            let bad = |message: String| GraphError::Node {
                node: i,
                op: node.op.name(),
                message,
            };
            for v in node.op.inputs() {
                if v.index() >= i {
                    return Err(bad(format!("reads {v}, which is not an earlier node")));
                }
            }
            let ty = infer_ty(&node.op, &self.nodes[..i], self.native).map_err(bad)?;
            if ty != node.ty {
                return Err(bad(format!(
                    "declared type {:?} but the op gives {:?}",
                    node.ty, ty
                )));
            }
        }
        for (i, o) in self.outputs.iter().enumerate() {
            if self.outputs[..i].iter().any(|p| p.name == o.name) {
                return Err(GraphError::Other(format!(
                    "output `{}` is listed twice in the graph's outputs",
                    o.name
                )));
            }
            let elements = o
                .shape
                .iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d));
            if elements.is_none() || elements != o.rows.checked_mul(o.row_len) {
                return Err(GraphError::Other(format!(
                    "output `{}` has shape {:?} but {} rows of {} values",
                    o.name, o.shape, o.rows, o.row_len
                )));
            }
        }
        let mut rows_made = std::collections::HashMap::new();
        for (id, name, row, src) in self.output_nodes() {
            if let Some(first) = rows_made.insert((name, row), id) {
                return Err(GraphError::Other(format!(
                    "{first} and {id} both write row {row} of output `{name}`: a row has one \
                     value"
                )));
            }
            let info = self.outputs.iter().find(|o| o.name == name);
            let fits = info.is_some_and(|o| {
                row < o.rows
                    && self.nodes[src.index()].ty
                        == (Ty::Logical {
                            shape: vec![o.row_len],
                        })
            });
            if !fits {
                return Err(GraphError::Other(format!(
                    "{id} writes row {row} of output `{name}`, which the graph's outputs list \
                     has no room for (or the row has the wrong length)"
                )));
            }
        }
        for c in &self.checks {
            let tiles = self.nodes.get(c.value.index()).and_then(|n| n.ty.tiles());
            let end = u64::from(c.first_tile) + u64::from(c.tiles);
            if tiles.is_none_or(|t| end > u64::from(t)) {
                return Err(GraphError::Other(format!(
                    "the non-finite check of line {} names tiles {}..{end} of {}, which it lacks",
                    c.line, c.first_tile, c.value
                )));
            }
        }
        for w in &self.writes {
            float_format(&w.storage).map_err(|e| {
                GraphError::Other(format!(
                    "write record of chain {} iteration {}: storage {e}",
                    w.chain, w.iteration
                ))
            })?;
            match self.nodes.get(w.value.index()) {
                Some(n) if n.ty == (Ty::Vector { tiles: w.tiles }) => {}
                _ => {
                    return Err(GraphError::Other(format!(
                        "write record of chain {} iteration {} names {} which is not a vector \
                         of {} tiles",
                        w.chain, w.iteration, w.value, w.tiles
                    )));
                }
            }
        }
        Ok(())
    }

    /// Values with no remaining readers are sinks; this lists the `Output` nodes.
    pub fn output_nodes(&self) -> impl Iterator<Item = (ValueId, &str, usize, ValueId)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.op {
                Op::Output { name, row, src } => {
                    Some((ValueId(i as u32), name.as_str(), *row, *src))
                }
                _ => None,
            })
    }

    /// Counts of nodes per op name, for summaries.
    pub fn op_counts(&self) -> Vec<(&'static str, usize)> {
        let mut counts: Vec<(&'static str, usize)> = Vec::new();
        for n in &self.nodes {
            match counts.iter_mut().find(|(k, _)| *k == n.op.name()) {
                Some((_, c)) => *c += 1,
                None => counts.push((n.op.name(), 1)),
            }
        }
        counts
    }
}

/// The type an op produces given the earlier nodes, or why it is ill-typed.
pub(crate) fn infer_ty(op: &Op, earlier: &[Node], n: usize) -> Result<Ty, String> {
    let ty = |v: ValueId| -> Result<&Ty, String> {
        earlier
            .get(v.index())
            .map(|node| &node.ty)
            .ok_or_else(|| format!("reads {v}, which is not an earlier node"))
    };
    let vector = |v: ValueId| -> Result<u32, String> {
        match ty(v)? {
            Ty::Vector { tiles } => Ok(*tiles),
            other => Err(format!("{v} must be a vector value, is {other:?}")),
        }
    };
    // A tile count that a value's type can hold (u32), computed without overflow.
    let tile_count = |tiles: Option<usize>, what: &dyn Fn() -> String| -> Result<u32, String> {
        tiles
            .and_then(|t| u32::try_from(t).ok())
            .ok_or_else(|| format!("{} is more tiles than a value holds ({})", what(), u32::MAX))
    };
    match op {
        Op::Input { shape, .. } | Op::Weight { shape, .. } | Op::Zero { shape } => {
            if shape.is_empty() || shape.contains(&0) {
                return Err(format!(
                    "shape {shape:?} must be non-empty with no zero extent"
                ));
            }
            if shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .is_none()
            {
                return Err(format!(
                    "shape {shape:?} has more elements than memory can hold"
                ));
            }
            Ok(Ty::Logical {
                shape: shape.clone(),
            })
        }
        Op::PadToTiles { src, layout, .. } => {
            let Ty::Logical { shape } = ty(*src)? else {
                return Err(format!("{src} must be a logical value"));
            };
            let c = shape.last().copied().unwrap_or(1);
            let what = || format!("shape {shape:?} at N = {n}");
            match layout {
                TileLayout::Vector => {
                    let rows = shape[..shape.len().saturating_sub(1)]
                        .iter()
                        .try_fold(1usize, |a, &d| a.checked_mul(d));
                    let tiles = rows.and_then(|r| r.checked_mul(c.div_ceil(n)));
                    Ok(Ty::Vector {
                        tiles: tile_count(tiles, &what)?,
                    })
                }
                TileLayout::Matrix => {
                    if shape.len() != 2 {
                        return Err(format!("a matrix must be 2-D, {src} has shape {shape:?}"));
                    }
                    let tiles = shape[0].div_ceil(n).checked_mul(c.div_ceil(n));
                    Ok(Ty::TileStack {
                        tiles: tile_count(tiles, &what)?,
                    })
                }
            }
        }
        Op::Unpad { src, len } => {
            let tiles = vector(*src)?;
            if *len == 0 || *len > tiles as usize * n {
                return Err(format!("cannot keep {len} lanes of a {tiles}-tile vector"));
            }
            Ok(Ty::Logical { shape: vec![*len] })
        }
        Op::Round { src, format } => {
            float_format(format)?;
            match ty(*src)? {
                t @ (Ty::Vector { .. } | Ty::TileStack { .. }) => Ok(t.clone()),
                other => Err(format!("cannot round a {other:?} value")),
            }
        }
        Op::Quantize { src, axis, .. } => match (ty(*src)?, axis) {
            (t @ Ty::Vector { .. }, BlockAxis::VectorTile)
            | (t @ Ty::TileStack { .. }, BlockAxis::TileRow) => Ok(t.clone()),
            (t @ Ty::Vector { tiles }, BlockAxis::PaddedRow { tiles: row })
                if *row > 0 && tiles % row == 0 =>
            {
                Ok(t.clone())
            }
            (other, _) => Err(format!("cannot quantize a {other:?} value along {axis:?}")),
        },
        Op::Concat { parts } => {
            let first = parts.first().ok_or("concat of nothing")?;
            let kind = ty(first.value)?.clone();
            let mut total = 0u32;
            for p in parts {
                let t = ty(p.value)?;
                let same_kind = matches!(
                    (t, &kind),
                    (Ty::Vector { .. }, Ty::Vector { .. })
                        | (Ty::TileStack { .. }, Ty::TileStack { .. })
                );
                let Some(tiles) = t.tiles().filter(|_| same_kind) else {
                    return Err(format!("{} is not a value of the same tile kind", p.value));
                };
                if p.count == 0 || p.start as u64 + p.count as u64 > tiles as u64 {
                    return Err(format!(
                        "tiles {}..{} of {} are out of its {tiles} tiles",
                        p.start,
                        p.start as u64 + p.count as u64,
                        p.value
                    ));
                }
                total = total.checked_add(p.count).ok_or_else(|| {
                    format!(
                        "the parts add up to more tiles than a value holds ({})",
                        u32::MAX
                    )
                })?;
            }
            Ok(match kind {
                Ty::TileStack { .. } => Ty::TileStack { tiles: total },
                _ => Ty::Vector { tiles: total },
            })
        }
        Op::TiledMatVec {
            x,
            w,
            rows,
            cols,
            output,
            ..
        } => {
            float_format(output).map_err(|e| format!("output {e}"))?;
            let xt = vector(*x)?;
            let Ty::TileStack { tiles: wt } = ty(*w)? else {
                return Err(format!("{w} must be a tile stack"));
            };
            let need = u64::from(*rows) * u64::from(*cols);
            if xt != *cols || u64::from(*wt) != need || *rows == 0 {
                return Err(format!(
                    "rows = {rows}, cols = {cols} need a {cols}-tile vector and {need} tiles, got \
                     {xt} and {wt}"
                ));
            }
            Ok(Ty::Vector { tiles: *rows })
        }
        Op::Binary { a, b, format, .. } => {
            float_format(format)?;
            let (ta, tb) = (vector(*a)?, vector(*b)?);
            if ta != tb {
                return Err(format!("operands of {ta} and {tb} tiles"));
            }
            Ok(Ty::Vector { tiles: ta })
        }
        Op::Unary { src, format, .. } => {
            float_format(format)?;
            Ok(Ty::Vector {
                tiles: vector(*src)?,
            })
        }
        Op::Output { src, .. } => match ty(*src)? {
            Ty::Logical { shape } if shape.len() == 1 => Ok(Ty::None),
            other => Err(format!(
                "an output row must be an unpadded row, is {other:?}"
            )),
        },
    }
}

/// A float format the numerics support (`FloatFormat`: `2 <= exp_bits <= 11`, `mant_bits <= 52`,
/// every such format embeds in f64), or why not.
fn float_format(f: &FloatFormat) -> Result<(), String> {
    if (2..=11).contains(&f.exp_bits) && f.mant_bits <= 52 {
        Ok(())
    } else {
        Err(format!(
            "format fp({}, {}) is not supported (exponent bits 2 to 11, mantissa bits 0 to 52)",
            f.exp_bits, f.mant_bits
        ))
    }
}
