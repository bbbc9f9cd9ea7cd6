//! The nodes of a software graph: handles ([`ValueId`]), value types ([`Ty`]), the ops
//! ([`Op`], with the MFU ops [`BinOp`] and [`UnOp`] and the layouts and runs they name) and a
//! node ([`Node`]: an op and its type).

use nnp_grammar::{Accumulation, OpKind};
use nnp_numerics::{Activation, FloatFormat, Format};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Handle of a node (its index in [`SwGraph::nodes`](super::SwGraph::nodes)).
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

    /// Elements per batch item of a value of this type at native dimension `n` (a validated
    /// graph's values hold at most `MAX_VALUE_ELEMENTS`, so this does not overflow).
    pub fn elements(&self, n: usize) -> usize {
        match self {
            Ty::Logical { shape } => shape.iter().product(),
            Ty::Vector { tiles } => *tiles as usize * n,
            Ty::TileStack { tiles } => *tiles as usize * n * n,
            Ty::None => 0,
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
