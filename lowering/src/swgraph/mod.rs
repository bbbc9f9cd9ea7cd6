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
//! work and drops dead values; [`compile`] does both and plans the result ([`Plan`]: order,
//! constants, fused regions, last uses, product candidates). The JSON form is versioned ([`SWGRAPH_VERSION`]); see
//! `docs/swgraph.md`.

mod lower;
mod node_map;
mod passes;
mod plan;
mod validate;

pub use lower::{LowerError, compile, lower};
pub use node_map::NodeMap;
pub use passes::{Roots, optimize};
pub use plan::{Plan, PlanCell, Schedule, fusable};
pub use validate::MAX_VALUE_ELEMENTS;
pub(crate) use validate::infer_ty;

use nnp_grammar::{Accumulation, Decl, Interface, Mem, OpKind, Provenance, Span};
use nnp_numerics::{Activation, FloatFormat, Format};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// Version of the JSON schema written by [`SwGraph::to_json`].
pub const SWGRAPH_VERSION: u32 = 2;

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

/// Declares [`BinOp`] and [`BinOp::ALL`] from one list, so that `ALL` holds every op: the
/// kernels' op codes ([`BinOp::code`]) and the GPU's kernel source are made from it.
macro_rules! binary_ops {
    ($($(#[doc = $doc:literal])* $op:ident = $code:literal,)*) => {
        /// Element-wise MFU ops with an operand. Each rounds both inputs to the MFU format,
        /// computes the exact result and rounds it once.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[repr(u32)]
        pub enum BinOp {
            $($(#[doc = $doc])* $op = $code,)*
        }

        impl BinOp {
            /// Every binary op, in declaration order.
            pub const ALL: [BinOp; [$($code),*].len()] = [$(BinOp::$op),*];
        }
    };
}

// Each op's code is written here and nowhere else.
binary_ops! {
    Add = 0,
    /// `a - b`.
    Sub = 1,
    /// NaN-propagating maximum, `max(-0, +0) = +0`.
    Max = 3,
    Mul = 2,
}

impl BinOp {
    /// The op's code in the kernels that take an op as a number (the fused regions' fp16
    /// kernels, the GPU's `mfu_binary`): distinct per op.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The op of code `code` ([`BinOp::code`]), `None` for a number that is no op's.
    pub const fn from_code(code: u32) -> Option<BinOp> {
        let mut i = 0;
        while i < BinOp::ALL.len() {
            if BinOp::ALL[i].code() == code {
                return Some(BinOp::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// The op's name in the JSON form (`add`, `sub`, `max`, `mul`), upper-cased in the GPU
    /// source's `OP_ADD` and so on.
    pub const fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Max => "max",
            BinOp::Mul => "mul",
        }
    }
}

/// MFU ops on the carried vector alone. In the JSON form each is its name: `relu`, `pass`,
/// `softmax`, or a table activation's [`Activation::name`] (`sigm`, `tanh`, `exp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// `x > 0 ? x : +0`, NaN stays NaN.
    Relu,
    /// Rounds to the MFU format only.
    Pass,
    /// A function read from its 65,536-entry table (16-bit MFU formats) or evaluated in f64
    /// and rounded once.
    Table(Activation),
    /// Over all lanes of the value (pad lanes included), docs/numerics.md.
    Softmax,
}

impl UnOp {
    /// The MFU op this is.
    pub fn kind(self) -> OpKind {
        match self {
            UnOp::Relu => OpKind::Relu,
            UnOp::Pass => OpKind::Pass,
            UnOp::Table(a) => OpKind::Table(a),
            UnOp::Softmax => OpKind::Softmax,
        }
    }

    /// The activation table the op reads ([`OpKind::table`]: softmax reads the exp table).
    pub fn table(self) -> Option<Activation> {
        self.kind().table()
    }

    /// The op's code in the GPU's `mfu_unary` kernel, distinct per op but one for every table
    /// activation (the kernel reads the op's table).
    pub const fn code(self) -> u32 {
        match self {
            UnOp::Relu => 0,
            UnOp::Pass => 1,
            UnOp::Table(_) => 2,
            UnOp::Softmax => 3,
        }
    }

    /// The name of the JSON form.
    pub fn name(self) -> &'static str {
        match self {
            UnOp::Relu => "relu",
            UnOp::Pass => "pass",
            UnOp::Table(a) => a.name(),
            UnOp::Softmax => "softmax",
        }
    }
}

impl Serialize for UnOp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for UnOp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        let fixed = [UnOp::Relu, UnOp::Pass, UnOp::Softmax];
        let table = Activation::ALL.map(UnOp::Table);
        fixed
            .into_iter()
            .chain(table)
            .find(|op| op.name() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown unary op `{name}`")))
    }
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
    /// FNV-1a of the firmware's text ([`nnp_grammar::fnv1a64`]).
    pub program_hash: String,
    pub target: String,
    /// FNV-1a of the target's settings ([`nnp_grammar::target_hash`]).
    pub target_hash: String,
    /// Native dimension N.
    pub native: usize,
    /// The storage format the host rounds loaded values to (the first vector chain's).
    pub storage: FloatFormat,
    /// A float format holding every value the outputs can hold
    /// ([`nnp_grammar::output_storage`]: the target's and every chain's storage).
    pub output_storage: FloatFormat,
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
    /// The plan, once computed ([`SwGraph::plan`]); a graph built by hand starts with
    /// `PlanCell::default()`. Edit a graph's other fields before its plan is first asked
    /// for (or edit a clone, which plans anew).
    #[serde(skip)]
    pub planned: PlanCell,
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
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum GraphError {
    #[error("not a software graph: {0}")]
    Json(String),
    #[error(
        "software graph schema version {found} is not supported (this nnpc reads version \
         {expected})"
    )]
    #[diagnostic(help("recompile the firmware with `nnpc compile`"))]
    Version { found: u32, expected: u32 },
    #[error("output storage {output} does not hold the storage format {storage}")]
    #[diagnostic(help("recompile the firmware with `nnpc compile`"))]
    OutputStorage { output: String, storage: String },
    #[error("node {node} ({op}): {message}")]
    Node {
        node: usize,
        op: &'static str,
        message: String,
    },
    #[error("{0}")]
    Other(String),
}

/// A compiled graph's host side is its firmware's, recorded when it was lowered.
impl Interface for SwGraph {
    fn decls(&self) -> &[Decl] {
        &self.decls
    }
    fn native(&self) -> usize {
        self.native
    }
    fn output_storage(&self) -> Option<FloatFormat> {
        Some(self.output_storage)
    }
    fn provenance(&self) -> Provenance {
        Provenance {
            program: self.source.clone(),
            program_hash: self.program_hash.clone(),
            target: self.target.clone(),
            target_hash: self.target_hash.clone(),
        }
    }
}

impl SwGraph {
    /// Each node with its id, in arena order.
    pub fn nodes_by_id(&self) -> impl Iterator<Item = (ValueId, &Node)> {
        let id = |i: usize| ValueId(i as u32);
        self.nodes.iter().enumerate().map(move |(i, n)| (id(i), n))
    }

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
        validate::declared(&g)?;
        g.plan();
        Ok(g)
    }

    /// What a run of the graph can know before data arrives ([`Plan`]): computed by
    /// [`compile`] and [`SwGraph::from_json`], else on first use. Meaningful for a valid graph
    /// ([`SwGraph::validate`]) only.
    pub fn plan(&self) -> &Arc<Plan> {
        self.planned.get(self)
    }

    /// Check every field before anything acts on it ([`validate`](validate.rs)): every
    /// reference points to an earlier node of the right type, every type follows from its op,
    /// every declaration, value and format is one a run can hold.
    pub fn validate(&self) -> Result<(), GraphError> {
        validate::graph(self)
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
