//! The checked program: what the checker produces and every later stage consumes.
//!
//! Everything here is resolved: names are addresses, `repeat` is unrolled, `let` constants are
//! folded, the scalar registers in force are attached to each chain, and each chain knows the
//! quantization formats in force for it. Source spans travel with every instruction so later
//! stages (emulator errors, diff reports) can name the firmware line.

pub use crate::isa::Mem;
pub use crate::ops::{OpKind, Unit};
pub use crate::source_text::LineIndex;
use crate::source_text::SourceText;
use crate::target::Target;
use nnp_numerics::{FloatFormat, Format};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A byte range in the source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
    /// The smallest span covering both.
    pub fn join(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

impl From<Span> for miette::SourceSpan {
    fn from(s: Span) -> Self {
        (s.start as usize, s.len()).into()
    }
}

/// A firmware source file: its name (as given on the command line) and text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
    lines: LineIndex,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        SourceFile {
            name: name.into(),
            lines: LineIndex::new(&text),
            text,
        }
    }
    /// The text's line starts.
    pub fn lines(&self) -> &LineIndex {
        &self.lines
    }
    /// 1-based line number of a byte offset.
    pub fn line_of(&self, offset: u32) -> usize {
        self.lines.line(offset)
    }
    /// The trimmed text of the line holding `offset`.
    pub fn line_text(&self, offset: u32) -> &str {
        let n = self.line_of(offset);
        let start = self.lines.start(n - 1).unwrap_or(self.text.len());
        let end = self.lines.start(n).unwrap_or(self.text.len());
        self.text.get(start..end).unwrap_or("").trim()
    }
    /// The named text for rendering diagnostics with `miette` (see [`SourceText`]).
    pub fn named(&self) -> SourceText {
        SourceText::with_index(self.name.clone(), self.text.clone(), self.lines.clone())
    }
    /// Line and column (both 1-based, column in characters) of a byte offset, in O(log lines
    /// + the line's length).
    pub fn line_col(&self, offset: u32) -> (usize, usize) {
        let mut end = (offset as usize).min(self.text.len());
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let line = self.lines.line(end as u32);
        let start = self.lines.start(line - 1).unwrap_or(0).min(end);
        (line, self.text[start..end].chars().count() + 1)
    }
}

/// A register address with its per-iteration increment: iteration `t` uses `base + t * inc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Addr {
    pub base: u32,
    pub inc: i32,
}

impl Addr {
    pub fn at(&self, iteration: u32) -> u32 {
        (self.base as i64 + self.inc as i64 * iteration as i64) as u32
    }
}

/// What a declaration is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeclKind {
    /// Loaded by the host into `mrf` or `dram` (matrix tiles).
    Matrix,
    /// Loaded by the host into a vector memory.
    Vector,
    /// Pushed on netq by the host, in declaration order, row by row.
    Input,
    /// Collected from netq (no `at`) or read back from memory after the run (`at`).
    Output,
}

/// How a declaration's registers start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Init {
    /// Loaded from the weights/inputs file under the declaration's name (or seeded random data).
    Load,
    /// `= 0`: zero, no file entry needed.
    Zero,
}

/// Where a declaration lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Place {
    pub mem: Mem,
    pub addr: u32,
}

/// A checked declaration.
///
/// Layout: a matrix `[R, C]` occupies `ceil(R/N) * ceil(C/N)` tiles in row-major tile order. A
/// vector-like declaration of shape `[..., C]` has `rows = product of the leading dims` rows of
/// `ceil(C/N)` registers each; row `r` starts at `addr + r * ceil(C/N)`. Pad lanes hold `pad`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decl {
    pub name: String,
    pub kind: DeclKind,
    pub shape: Vec<usize>,
    pub place: Option<Place>,
    pub init: Init,
    /// Value of the padding lanes (0.0 unless `pad V`).
    pub pad: f64,
    /// Per-declaration `quant FORMAT`: for a matrix, the `mvm.matrix` format used when its tiles
    /// are multiplied; for a vector or input, the host quantizes the values with it on load.
    pub format: Option<Format>,
    pub span: Span,
}

impl Decl {
    /// Length of one row (the last dimension).
    pub fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }
    /// Number of rows (product of all but the last dimension; 1 for a 1-D shape).
    pub fn rows(&self) -> usize {
        self.shape[..self.shape.len().saturating_sub(1)]
            .iter()
            .product()
    }
    /// Registers per row: `ceil(row_len / n)`.
    pub fn row_tiles(&self, n: usize) -> usize {
        self.row_len().div_ceil(n)
    }
    /// Registers (or matrix tiles) the declaration occupies.
    pub fn tiles(&self, n: usize) -> usize {
        match self.kind {
            DeclKind::Matrix => self.shape[0].div_ceil(n) * self.shape[1].div_ceil(n),
            _ => self.rows() * self.row_tiles(n),
        }
    }
    /// Values the declaration holds (saturating: a count past `usize` is at least as large as
    /// any memory check needs).
    pub fn elements(&self) -> usize {
        self.shape
            .iter()
            .fold(1, |p: usize, &d| p.saturating_mul(d))
    }
}

/// The quantization formats in force for a chain (`quant` directives, target defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantConfig {
    /// Format of every memory: values written by `v_wr` are rounded to it. A float format.
    pub storage: Format,
    /// Applied to each native tile of the MVM input vector.
    pub mvm_vector: Format,
    /// Applied to each row of each N x N matrix tile (unless the matrix declaration overrides).
    pub mvm_matrix: Format,
    /// The accumulated dot product is rounded once to this float format.
    pub mvm_output: Format,
    /// MFU arithmetic format: every MFU op rounds its inputs and its result to it. A float format.
    pub mfu_input: Format,
}

/// 2-D window registers in force for a `v_rd_2d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Window {
    pub w: u32,
    pub h: u32,
    pub pitch: u32,
}

impl Window {
    /// Register offsets of the window's tiles in read order (`dy` outer, `dx` inner).
    pub fn offsets(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.h).flat_map(move |dy| (0..self.w).map(move |dx| dy * self.pitch + dx))
    }
}

/// `v_rd`: the chain's read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Read {
    pub src: Mem,
    /// Unused (zero) for `netq`.
    pub addr: Addr,
    /// `Some` for `v_rd_2d`.
    pub window: Option<Window>,
    /// Native tiles read: `cols` with `mv_mul`, else `rows`; `win_h * win_w` for a window.
    pub tiles: u32,
    pub span: Span,
}

impl Read {
    /// Register addresses read at iteration `t` (empty for netq).
    pub fn registers(&self, t: u32) -> Vec<u32> {
        let a = self.addr.at(t);
        match (self.src, &self.window) {
            (Mem::Netq, _) => Vec::new(),
            (_, Some(w)) => w.offsets().map(|o| a + o).collect(),
            _ => (a..a + self.tiles).collect(),
        }
    }
}

/// `mv_mul mrf[a]`: `y = W x` with `rows x cols` tiles starting at `addr` (row-major).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MvMul {
    pub addr: Addr,
    /// The `mvm.matrix` format of the first iteration's tiles: the format of the matrix
    /// declaration whose data they hold (through `m_rd`/`m_wr` copies too), else the chain's.
    pub matrix_format: Format,
    /// Each iteration's format where iterations read matrices of different formats (empty
    /// when every iteration's is `matrix_format`); [`MvMul::format`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iteration_formats: Vec<Format>,
    pub span: Span,
}

impl MvMul {
    /// The `mvm.matrix` format of the tiles iteration `t` multiplies by.
    pub fn format(&self, t: u32) -> &Format {
        self.iteration_formats
            .get(t as usize)
            .unwrap_or(&self.matrix_format)
    }
}

/// An MFU op with its placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MfuOp {
    pub kind: OpKind,
    /// Operand VRF and address, for add-class and multiply ops.
    pub operand: Option<(Mem, Addr)>,
    /// MFU the op was placed on.
    pub mfu: u8,
    pub span: Span,
}

/// `v_wr`: one destination of the chain's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Write {
    pub dst: Mem,
    /// Unused (zero) for `netq`.
    pub addr: Addr,
    pub span: Span,
}

/// A vector chain: read, optional multiply, MFU ops, writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VectorChain {
    pub read: Read,
    pub mv_mul: Option<MvMul>,
    pub ops: Vec<MfuOp>,
    pub writes: Vec<Write>,
    /// Width of the carried vector in native tiles (`rows`).
    pub width: u32,
    pub quant: QuantConfig,
}

/// A matrix chain: `m_rd` then `m_wr`, copying `tiles` matrix tiles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixChain {
    pub src: Mem,
    pub src_addr: Addr,
    pub dst: Mem,
    pub dst_addr: Addr,
    pub tiles: u32,
    pub src_span: Span,
    pub dst_span: Span,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)] // chains are few; boxing would only add indirection
pub enum ChainBody {
    Vector(VectorChain),
    Matrix(MatrixChain),
}

/// One chain, executed `iterations` times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    /// Position in program order (0-based).
    pub index: usize,
    pub iterations: u32,
    /// `rows`/`cols` scalar registers in force.
    pub rows: u32,
    pub cols: u32,
    pub body: ChainBody,
    /// From the first instruction to `end_chain`.
    pub span: Span,
}

/// A netq transfer: which row of which input/output declaration a pop/push moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetqSlot {
    pub chain: usize,
    pub iteration: u32,
    /// Index into `Program::decls`.
    pub decl: usize,
    pub row: usize,
}

/// A checked, resolved program.
#[derive(Clone, Debug)]
pub struct Program {
    pub source: Arc<SourceFile>,
    pub target: Target,
    pub decls: Vec<Decl>,
    pub chains: Vec<Chain>,
    /// Every `v_rd netq` pop in execution order, mapped to its input row.
    pub pops: Vec<NetqSlot>,
    /// Every `v_wr netq` push in execution order, mapped to its output row.
    pub pushes: Vec<NetqSlot>,
}

impl Program {
    // The host side's queries, here too so that callers need not import the trait.
    pub fn native(&self) -> usize {
        Interface::native(self)
    }
    pub fn decl(&self, name: &str) -> Option<&Decl> {
        Interface::decl(self, name)
    }
    pub fn inputs(&self) -> Decls<'_> {
        Interface::inputs(self)
    }
    pub fn outputs(&self) -> Decls<'_> {
        Interface::outputs(self)
    }
    /// Declarations the host loads from files (matrices, vectors and inputs not `= 0`).
    pub fn loaded(&self) -> Decls<'_> {
        Interface::loaded(self)
    }
    /// 1-based source line of a span.
    pub fn line(&self, span: Span) -> usize {
        self.source.line_of(span.start)
    }
}

// ---------------------------------------------------------------------------------------------
// The host side of a program: what a run's host data, output files and `nnpc diff` need of it,
// and what both a checked `Program` and a compiled software graph provide (the declarations,
// the native dimension, the format every output value is one of, the provenance a written file
// records). They take an [`Interface`], never a program made up from a graph's fields, so a run
// of a compiled graph reads, writes and records what a run of its firmware does.

/// The declarations of one kind, or those the host loads.
pub type Decls<'a> = std::iter::Filter<std::slice::Iter<'a, Decl>, fn(&&Decl) -> bool>;

/// Where a program came from, as output files record it (docs/files.md, "Provenance").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The firmware file's name.
    pub program: String,
    /// [`fnv1a64`] of the firmware's text.
    pub program_hash: String,
    /// The target's name.
    pub target: String,
    /// [`target_hash`] of the target's settings.
    pub target_hash: String,
}

/// The host side of a program (module docs).
pub trait Interface {
    /// Every declaration, in declaration order.
    fn decls(&self) -> &[Decl];
    /// The native dimension N.
    fn native(&self) -> usize;
    /// A float format holding every value the outputs can hold ([`output_storage`]); `None`
    /// where a storage format is not a float format.
    fn output_storage(&self) -> Option<FloatFormat>;
    /// Where the program came from.
    fn provenance(&self) -> Provenance;

    /// The declaration named `name`.
    fn decl(&self, name: &str) -> Option<&Decl> {
        self.decls().iter().find(|d| d.name == name)
    }
    /// The input declarations.
    fn inputs(&self) -> Decls<'_> {
        self.decls().iter().filter(|d| d.kind == DeclKind::Input)
    }
    /// The output declarations.
    fn outputs(&self) -> Decls<'_> {
        self.decls().iter().filter(|d| d.kind == DeclKind::Output)
    }
    /// The declarations whose values come from the weights file.
    fn weights(&self) -> Decls<'_> {
        self.decls().iter().filter(|d| {
            d.init == Init::Load && matches!(d.kind, DeclKind::Matrix | DeclKind::Vector)
        })
    }
    /// The declarations the host loads from files (matrices, vectors and inputs not `= 0`).
    fn loaded(&self) -> Decls<'_> {
        self.decls().iter().filter(|d| {
            d.init == Init::Load
                && matches!(
                    d.kind,
                    DeclKind::Matrix | DeclKind::Vector | DeclKind::Input
                )
        })
    }
}

impl Interface for Program {
    fn decls(&self) -> &[Decl] {
        &self.decls
    }
    fn native(&self) -> usize {
        self.target.native
    }
    fn output_storage(&self) -> Option<FloatFormat> {
        output_storage(self)
    }
    fn provenance(&self) -> Provenance {
        Provenance {
            program: self.source.name.clone(),
            program_hash: fnv1a64(self.source.text.as_bytes()),
            target: self.target.name.clone(),
            target_hash: target_hash(&self.target),
        }
    }
}

/// A float format holding every value the outputs of `program` can hold: every value of its
/// storage formats, the target's and each chain's own (`quant storage = ...`). Where every
/// chain keeps the target's, that format; else `fp(E, M)` with the widest exponent and
/// mantissa among them (with subnormals where any has them), which holds each of them.
/// `None` where one is not a float format.
pub fn output_storage(program: &Program) -> Option<FloatFormat> {
    let target = *program.target.numerics.storage.as_float()?;
    let mut wide = target;
    for chain in &program.chains {
        let ChainBody::Vector(v) = &chain.body else {
            continue; // a matrix chain copies tiles, rounding nothing
        };
        let f = v.quant.storage.as_float()?;
        if *f != target {
            wide.exp_bits = wide.exp_bits.max(f.exp_bits);
            wide.mant_bits = wide.mant_bits.max(f.mant_bits);
            wide.subnormals |= f.subnormals;
        }
    }
    Some(wide)
}

/// The 64-bit FNV-1a hash of `bytes` as 16 hex digits (the hashes files record).
pub fn fnv1a64(bytes: &[u8]) -> String {
    format!("{:016x}", fnv1a64_u64(bytes))
}

/// The 64-bit FNV-1a hash of `bytes`.
pub fn fnv1a64_u64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// [`fnv1a64`] of a target's settings (not where its file is).
pub fn target_hash(t: &Target) -> String {
    fnv1a64(serde_json::to_string(t).unwrap_or_default().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The FNV-1a reference vectors (Fowler, Noll and Vo's test suite).
    #[test]
    fn fnv1a64_of_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), "cbf29ce484222325");
        assert_eq!(fnv1a64(b"a"), "af63dc4c8601ec8c");
        assert_eq!(fnv1a64(b"foobar"), "85944171f73967e8");
    }
}
