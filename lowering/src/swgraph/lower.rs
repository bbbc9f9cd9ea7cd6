//! Lowering by symbolic execution: chain by chain, iteration by iteration, track which SSA value
//! (and which tile of it) each register holds, and emit nodes only for real data flow.

use super::passes::optimized;
use super::{
    BinOp, BlockAxis, FiniteCheck, Node, Op, OutputInfo, Roots, SWGRAPH_VERSION, SwGraph,
    TileLayout, TileSlice, UnOp, ValueId, WriteRecord, infer_ty,
};
use nnp_grammar::{
    ChainBody, DeclKind, Init, Interface, Mem, NonFinite, OpKind, Program, QuantConfig, Span,
    VectorChain,
};
use nnp_numerics::{FloatFormat, Format};
use std::collections::HashMap;

/// A program the lowering cannot turn into a graph. The checker rejects all of these first;
/// they surface only for programs built by hand.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum LowerError {
    #[error(
        "line {line}: chain {chain} (iteration {iteration}) reads {mem}[{addr}], which nothing has written"
    )]
    Uninitialized {
        line: usize,
        chain: usize,
        iteration: u32,
        mem: Mem,
        addr: u32,
    },
    #[error("line {line}: chain {chain} (iteration {iteration}): {message}")]
    Netq {
        line: usize,
        chain: usize,
        iteration: u32,
        message: String,
    },
    #[error(
        "line {line}: {point} format `{format}` must be a float format (fp16, bf16, fp32 or fp(e, m))"
    )]
    NotFloat {
        line: usize,
        point: &'static str,
        format: String,
    },
    #[error("line {line}: chain {chain}: {message}")]
    Shape {
        line: usize,
        chain: usize,
        message: String,
    },
    /// A broken invariant of the lowering: a bug in nnpc, not in the program.
    #[error("internal error of the lowering (a bug in nnpc; please report it): {0}")]
    Internal(String),
    /// Past a size limit of [`nnp_grammar::limits`] (checked before anything is allocated).
    #[error(transparent)]
    #[diagnostic(transparent)]
    TooLarge(#[from] nnp_grammar::SizeError),
}

/// The one entry point from a checked program to the graph a run executes: [`lower`], then
/// [`optimize`](super::optimize) for `roots` (`Roots::OutputsAndWrites` keeps every `v_wr`'s
/// value, which `run --trace` and `diff --trace` report; `Roots::Outputs` only what the outputs
/// need), then [`SwGraph::plan`] (what every session of the graph shares).
pub fn compile(program: &Program, roots: Roots) -> Result<SwGraph, LowerError> {
    let graph = optimized(lower(program)?, roots);
    graph.plan();
    Ok(graph)
}

/// Lower a checked program by symbolic execution, without merging or pruning (every register
/// move is visible): what [`compile`] optimizes, and what the tests of the passes read.
pub fn lower(program: &Program) -> Result<SwGraph, LowerError> {
    program.check_size()?;
    // The host rounds what it loads to the storage format in force at the first vector chain.
    let load = program
        .chains
        .iter()
        .find_map(|c| match &c.body {
            ChainBody::Vector(v) => Some(&v.quant.storage),
            ChainBody::Matrix(_) => None,
        })
        .unwrap_or(&program.target.numerics.storage);
    let storage = float(load, "storage", 0)?;
    let mut lw = Lowering {
        p: program,
        n: program.native(),
        nodes: Vec::new(),
        vregs: HashMap::new(),
        mtiles: HashMap::new(),
        inputs: HashMap::new(),
        writes: Vec::new(),
        checks: Vec::new(),
        pops: 0,
        pushes: 0,
        storage,
    };
    lw.load_decls()?;
    for chain in &program.chains {
        for t in 0..chain.iterations {
            match &chain.body {
                ChainBody::Matrix(m) => {
                    for k in 0..m.tiles {
                        let src = m.src_addr.at(t) + k;
                        let tile =
                            *lw.mtiles
                                .get(&(m.src, src))
                                .ok_or(LowerError::Uninitialized {
                                    line: program.line(m.src_span),
                                    chain: chain.index,
                                    iteration: t,
                                    mem: m.src,
                                    addr: src,
                                })?;
                        lw.mtiles.insert((m.dst, m.dst_addr.at(t) + k), tile);
                    }
                }
                ChainBody::Vector(v) => {
                    lw.vector_chain(chain.index, chain.rows, chain.cols, t, v)?
                }
            }
        }
    }
    lw.collect_outputs_at()?;
    let outputs = program
        .outputs()
        .map(|d| OutputInfo {
            name: d.name.clone(),
            shape: d.shape.clone(),
            rows: d.rows(),
            row_len: d.row_len(),
        })
        .collect();
    // Every storage format is a float format here (each chain's was checked as it lowered).
    let output_storage = program
        .output_storage()
        .ok_or_else(|| LowerError::NotFloat {
            line: 0,
            point: "storage",
            format: program.target.numerics.storage.to_string(),
        })?;
    let provenance = program.provenance();
    Ok(SwGraph {
        version: SWGRAPH_VERSION,
        source: provenance.program,
        program_hash: provenance.program_hash,
        target: provenance.target,
        target_hash: provenance.target_hash,
        native: lw.n,
        storage,
        output_storage,
        nodes: lw.nodes,
        outputs,
        decls: program.decls.clone(),
        writes: lw.writes,
        checks: lw.checks,
        planned: Default::default(),
    })
}

fn float(f: &Format, point: &'static str, line: usize) -> Result<FloatFormat, LowerError> {
    f.as_float().copied().ok_or_else(|| LowerError::NotFloat {
        line,
        point,
        format: f.to_string(),
    })
}

struct Lowering<'p> {
    p: &'p Program,
    n: usize,
    nodes: Vec<Node>,
    /// Vector register -> (vector value, tile).
    vregs: HashMap<(Mem, u32), (ValueId, u32)>,
    /// Matrix tile (mrf, or dram's tile space) -> (tile stack, tile).
    mtiles: HashMap<(Mem, u32), (ValueId, u32)>,
    /// Input declaration index -> its register image (all rows).
    inputs: HashMap<usize, ValueId>,
    writes: Vec<WriteRecord>,
    /// Under `nonfinite = "error"`, the values checked, in execution order.
    checks: Vec<FiniteCheck>,
    /// Cursors into `Program::pops` / `Program::pushes`.
    pops: usize,
    pushes: usize,
    storage: FloatFormat,
}

/// What a [`FiniteCheck`] looks at, and where it is in the program.
struct Checked {
    value: ValueId,
    /// `(first tile, tiles)` of each item's value, or `None` for all.
    tiles: Option<(u32, u32)>,
    weight: bool,
    op: &'static str,
    chain: usize,
    iteration: u32,
    span: Span,
}

impl Checked {
    /// An instruction's result, every lane of every item.
    fn op(value: ValueId, op: &'static str, chain: usize, iteration: u32, span: Span) -> Self {
        Checked {
            value,
            tiles: None,
            weight: false,
            op,
            chain,
            iteration,
            span,
        }
    }

    /// A declaration's value as loaded (the emulator names its declaration, chain 0).
    fn load(value: ValueId, span: Span, weight: bool) -> Self {
        Checked {
            value,
            tiles: None,
            weight,
            op: NonFinite::HOST_LOAD,
            chain: 0,
            iteration: 0,
            span,
        }
    }
}

impl Lowering<'_> {
    /// Check `c.value` for NaN/Inf when the target says `nonfinite = "error"` (the next check
    /// in execution order).
    fn check(&mut self, c: Checked) {
        if self.p.target.numerics.nonfinite != NonFinite::Error {
            return;
        }
        let (first_tile, tiles) = c.tiles.unwrap_or((0, self.tiles_of(c.value)));
        self.checks.push(FiniteCheck {
            value: c.value,
            first_tile,
            tiles,
            weight: c.weight,
            op: c.op.to_string(),
            chain: c.chain,
            iteration: c.iteration,
            line: self.p.line(c.span),
            span: c.span,
        });
    }

    fn push(&mut self, op: Op) -> Result<ValueId, LowerError> {
        let ty = infer_ty(&op, &self.nodes, self.n).map_err(LowerError::Internal)?;
        self.nodes.push(Node { op, ty });
        Ok(ValueId((self.nodes.len() - 1) as u32))
    }

    fn tiles_of(&self, v: ValueId) -> u32 {
        self.nodes[v.index()].ty.tiles().unwrap_or(0)
    }

    /// The value made of these tiles, in order (the source itself when it is all of one value).
    fn gather(&mut self, refs: &[(ValueId, u32)]) -> Result<ValueId, LowerError> {
        let mut parts: Vec<TileSlice> = Vec::new();
        for &(value, tile) in refs {
            match parts.last_mut() {
                Some(p) if p.value == value && p.start + p.count == tile => p.count += 1,
                _ => parts.push(TileSlice {
                    value,
                    start: tile,
                    count: 1,
                }),
            }
        }
        if let [p] = parts.as_slice()
            && p.start == 0
            && p.count == self.tiles_of(p.value)
        {
            return Ok(p.value);
        }
        self.push(Op::Concat { parts })
    }

    /// Host loading of every declaration (docs/numerics.md, semantics.md "Memories"):
    /// pad, round to storage, then the declaration's own format per padded row.
    fn load_decls(&mut self) -> Result<(), LowerError> {
        // The emulator loads every weight, then each item's placed inputs: checks in that order.
        let mut placed_inputs = Vec::new();
        for (i, d) in self.p.decls.iter().enumerate() {
            let line = self.p.line(d.span);
            let logical = |lw: &mut Self| -> Result<ValueId, LowerError> {
                match (d.kind, d.init) {
                    (DeclKind::Input, _) => lw.push(Op::Input {
                        name: d.name.clone(),
                        shape: d.shape.clone(),
                    }),
                    (_, Init::Load) => lw.push(Op::Weight {
                        name: d.name.clone(),
                        shape: d.shape.clone(),
                    }),
                    _ => lw.push(Op::Zero {
                        shape: d.shape.clone(),
                    }),
                }
            };
            match d.kind {
                DeclKind::Matrix => {
                    let Some(place) = d.place else { continue };
                    if d.shape.len() != 2 {
                        return Err(LowerError::Shape {
                            line,
                            chain: 0,
                            message: format!("matrix `{}` must be 2-D", d.name),
                        });
                    }
                    let v = logical(self)?;
                    let v = self.push(Op::PadToTiles {
                        src: v,
                        layout: TileLayout::Matrix,
                        pad: 0.0,
                    })?;
                    let v = self.push(Op::Round {
                        src: v,
                        format: self.storage,
                    })?;
                    self.check(Checked::load(v, d.span, true));
                    for k in 0..self.tiles_of(v) {
                        self.mtiles.insert((place.mem, place.addr + k), (v, k));
                    }
                }
                // Outputs start as nothing: reading one before a write is an error.
                DeclKind::Output => continue,
                DeclKind::Vector | DeclKind::Input => {
                    if d.kind == DeclKind::Vector && d.place.is_none() {
                        continue;
                    }
                    let v = logical(self)?;
                    let v = self.push(Op::PadToTiles {
                        src: v,
                        layout: TileLayout::Vector,
                        pad: d.pad,
                    })?;
                    let mut v = self.push(Op::Round {
                        src: v,
                        format: self.storage,
                    })?;
                    if let Some(format) = &d.format {
                        v = self.push(Op::Quantize {
                            src: v,
                            format: *format,
                            axis: BlockAxis::PaddedRow {
                                tiles: d.row_tiles(self.n) as u32,
                            },
                        })?;
                        // Memory holds storage values: a quantized value that is not one (an
                        // int with an f32 scale has up to 24 + bits significant bits) is
                        // rounded again when stored.
                        v = self.push(Op::Round {
                            src: v,
                            format: self.storage,
                        })?;
                    }
                    match d.place {
                        Some(place) => {
                            if d.kind == DeclKind::Input {
                                placed_inputs.push(Checked::load(v, d.span, false));
                            } else {
                                self.check(Checked::load(v, d.span, true));
                            }
                            for k in 0..self.tiles_of(v) {
                                self.vregs.insert((place.mem, place.addr + k), (v, k));
                            }
                        }
                        None => {
                            self.inputs.insert(i, v);
                        }
                    }
                }
            }
        }
        for c in placed_inputs {
            self.check(c);
        }
        Ok(())
    }

    fn vector_chain(
        &mut self,
        chain: usize,
        rows: u32,
        cols: u32,
        t: u32,
        v: &VectorChain,
    ) -> Result<(), LowerError> {
        let q: &QuantConfig = &v.quant;
        let line_of = |s: Span| self.p.line(s);
        let mfu = float(&q.mfu_input, "mfu.input", line_of(v.read.span))?;
        let storage = float(&q.storage, "storage", line_of(v.read.span))?;
        let width = v.width;

        let read = self.vector_read(chain, t, v)?;
        let mut carried = self.vector_mv_mul((chain, t), (rows, cols), v, read)?;
        if self.tiles_of(carried) != width {
            return Err(LowerError::Shape {
                line: line_of(v.read.span),
                chain,
                message: format!(
                    "the carried vector has {} tiles but the chain is {width} wide",
                    self.tiles_of(carried)
                ),
            });
        }

        // MFU ops
        for op in &v.ops {
            let operand = match op.operand {
                Some((mem, addr)) => {
                    let a = addr.at(t);
                    let refs = (a..a + width)
                        .map(|r| self.vreg(mem, r, chain, t, op.span))
                        .collect::<Result<Vec<_>, _>>()?;
                    Some(self.gather(&refs)?)
                }
                None => None,
            };
            let binary = |op: BinOp, a, b| Op::Binary {
                op,
                a,
                b,
                format: mfu,
            };
            let unary = |lw: &Self, op: UnOp| Op::Unary {
                op,
                src: carried,
                format: mfu,
                table: lw.table(op, &mfu),
            };
            let node = match (op.kind, operand) {
                (OpKind::Add, Some(b)) => binary(BinOp::Add, carried, b),
                (OpKind::ASubB, Some(b)) => binary(BinOp::Sub, carried, b),
                (OpKind::BSubA, Some(b)) => binary(BinOp::Sub, b, carried),
                (OpKind::Max, Some(b)) => binary(BinOp::Max, carried, b),
                (OpKind::Mul, Some(b)) => binary(BinOp::Mul, carried, b),
                (OpKind::Relu, _) => unary(self, UnOp::Relu),
                (OpKind::Table(a), _) => unary(self, UnOp::Table(a)),
                (OpKind::Softmax, _) => unary(self, UnOp::Softmax),
                (OpKind::Pass, _) => unary(self, UnOp::Pass),
                (kind, None) => {
                    return Err(LowerError::Shape {
                        line: line_of(op.span),
                        chain,
                        message: format!("{} needs an operand", kind.mnemonic()),
                    });
                }
            };
            carried = self.push(node)?;
            self.check(Checked::op(carried, op.kind.mnemonic(), chain, t, op.span));
        }

        // v_wr: one storage rounding, every destination gets the same value.
        let value = self.push(Op::Round {
            src: carried,
            format: storage,
        })?;
        self.vector_writes(chain, t, v, value, storage)
    }

    /// The vector a chain's `v_rd` reads in iteration `t`: its input row popped from netq, or
    /// its registers.
    fn vector_read(
        &mut self,
        chain: usize,
        t: u32,
        v: &VectorChain,
    ) -> Result<ValueId, LowerError> {
        let line_of = |s: Span| self.p.line(s);
        if v.read.src == Mem::Netq {
            let slot = self.p.pops.get(self.pops).copied();
            self.pops += 1;
            let netq_err = |message: String| LowerError::Netq {
                line: line_of(v.read.span),
                chain,
                iteration: t,
                message,
            };
            let slot = slot
                .filter(|s| s.chain == chain && s.iteration == t)
                .ok_or_else(|| netq_err("this pop has no input row (Program::pops)".into()))?;
            let d = &self.p.decls[slot.decl];
            let image = *self
                .inputs
                .get(&slot.decl)
                .ok_or_else(|| netq_err(format!("`{}` is not an input", d.name)))?;
            let rt = d.row_tiles(self.n) as u32;
            if rt != v.read.tiles {
                return Err(netq_err(format!(
                    "pops {} tiles but a row of `{}` has {rt}",
                    v.read.tiles, d.name
                )));
            }
            self.check(Checked {
                tiles: Some((slot.row as u32 * rt, rt)),
                ..Checked::load(image, d.span, false)
            });
            let refs: Vec<_> = (0..rt).map(|k| (image, slot.row as u32 * rt + k)).collect();
            self.gather(&refs)
        } else {
            let refs = v
                .read
                .registers(t)
                .into_iter()
                .map(|a| self.vreg(v.read.src, a, chain, t, v.read.span))
                .collect::<Result<Vec<_>, _>>()?;
            self.gather(&refs)
        }
    }

    /// The vector a chain carries into its MFU ops in iteration `t`: `read` through the
    /// chain's `mv_mul` (`rows` x `cols` tiles of mrf), if it has one.
    fn vector_mv_mul(
        &mut self,
        (chain, t): (usize, u32),
        (rows, cols): (u32, u32),
        v: &VectorChain,
        read: ValueId,
    ) -> Result<ValueId, LowerError> {
        let q: &QuantConfig = &v.quant;
        let line_of = |s: Span| self.p.line(s);
        match &v.mv_mul {
            None => Ok(read),
            Some(mv) => {
                let line = line_of(mv.span);
                let output = float(&q.mvm_output, "mvm.output", line)?;
                if self.tiles_of(read) != cols {
                    return Err(LowerError::Shape {
                        line,
                        chain,
                        message: format!(
                            "mv_mul reads {} tiles but cols = {cols}",
                            self.tiles_of(read)
                        ),
                    });
                }
                let x = self.push(Op::Quantize {
                    src: read,
                    format: q.mvm_vector,
                    axis: BlockAxis::VectorTile,
                })?;
                let (a, matrix_format) = (mv.addr.at(t), *mv.format(t));
                let mut quantized: HashMap<ValueId, ValueId> = HashMap::new();
                let mut refs = Vec::with_capacity((rows * cols) as usize);
                for k in 0..rows * cols {
                    let (stack, tile) =
                        *self
                            .mtiles
                            .get(&(Mem::Mrf, a + k))
                            .ok_or(LowerError::Uninitialized {
                                line,
                                chain,
                                iteration: t,
                                mem: Mem::Mrf,
                                addr: a + k,
                            })?;
                    // Quantize whole source stacks once; the merge pass shares them across chains.
                    let qs = match quantized.get(&stack) {
                        Some(&qs) => qs,
                        None => {
                            let qs = self.push(Op::Quantize {
                                src: stack,
                                format: matrix_format,
                                axis: BlockAxis::TileRow,
                            })?;
                            quantized.insert(stack, qs);
                            qs
                        }
                    };
                    refs.push((qs, tile));
                }
                let w = self.gather(&refs)?;
                let y = self.push(Op::TiledMatVec {
                    x,
                    w,
                    rows,
                    cols,
                    accumulation: self.p.target.numerics.accumulation,
                    vector_format: q.mvm_vector,
                    matrix_format,
                    output,
                })?;
                self.check(Checked::op(y, "mv_mul", chain, t, mv.span));
                Ok(y)
            }
        }
    }

    /// The chain's `v_wr`s in iteration `t`: each destination gets `value` (rounded to
    /// `storage`): netq rows become outputs, registers are recorded.
    fn vector_writes(
        &mut self,
        chain: usize,
        t: u32,
        v: &VectorChain,
        value: ValueId,
        storage: FloatFormat,
    ) -> Result<(), LowerError> {
        let width = v.width;
        let line_of = |s: Span| self.p.line(s);
        for w in &v.writes {
            let line = line_of(w.span);
            let addr = if w.dst == Mem::Netq {
                let index = self.pushes;
                let slot = self.p.pushes.get(index).copied();
                self.pushes += 1;
                let netq_err = |message: String| LowerError::Netq {
                    line,
                    chain,
                    iteration: t,
                    message,
                };
                let slot = slot
                    .filter(|s| s.chain == chain && s.iteration == t)
                    .ok_or_else(|| {
                        netq_err("this push has no output row (Program::pushes)".into())
                    })?;
                let d = &self.p.decls[slot.decl];
                if d.row_tiles(self.n) as u32 != width {
                    return Err(netq_err(format!(
                        "pushes {width} tiles but a row of `{}` has {}",
                        d.name,
                        d.row_tiles(self.n)
                    )));
                }
                let row = self.push(Op::Unpad {
                    src: value,
                    len: d.row_len(),
                })?;
                self.push(Op::Output {
                    name: d.name.clone(),
                    row: slot.row,
                    src: row,
                })?;
                index as u32
            } else {
                let a = w.addr.at(t);
                for k in 0..width {
                    self.vregs.insert((w.dst, a + k), (value, k));
                }
                a
            };
            self.writes.push(WriteRecord {
                chain,
                iteration: t,
                dst: w.dst,
                addr,
                tiles: width,
                value,
                storage,
                line,
                span: w.span,
            });
        }
        Ok(())
    }

    fn vreg(
        &self,
        mem: Mem,
        addr: u32,
        chain: usize,
        iteration: u32,
        span: Span,
    ) -> Result<(ValueId, u32), LowerError> {
        self.vregs
            .get(&(mem, addr))
            .copied()
            .ok_or(LowerError::Uninitialized {
                line: self.p.line(span),
                chain,
                iteration,
                mem,
                addr,
            })
    }

    /// The target's table file for an op's function, if it loads one (tables are indexed by
    /// 16-bit patterns: other MFU formats compute the function).
    fn table(&self, op: UnOp, mfu: &FloatFormat) -> Option<String> {
        if mfu.bits() != 16 {
            return None;
        }
        let path = self.p.target.numerics.tables.get(op.table()?)?;
        Some(self.p.target.table_path(path).display().to_string())
    }

    /// `output NAME at mem[a]`: read back from memory after the run, row by row.
    fn collect_outputs_at(&mut self) -> Result<(), LowerError> {
        for d in self.p.decls.iter().filter(|d| d.kind == DeclKind::Output) {
            let Some(place) = d.place else { continue };
            let rt = d.row_tiles(self.n) as u32;
            for r in 0..d.rows() {
                let a = place.addr + r as u32 * rt;
                let refs = (a..a + rt)
                    .map(|reg| {
                        self.vregs.get(&(place.mem, reg)).copied().ok_or(
                            LowerError::Uninitialized {
                                line: self.p.line(d.span),
                                chain: self.p.chains.len(),
                                iteration: 0,
                                mem: place.mem,
                                addr: reg,
                            },
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let row = self.gather(&refs)?;
                let row = self.push(Op::Unpad {
                    src: row,
                    len: d.row_len(),
                })?;
                self.push(Op::Output {
                    name: d.name.clone(),
                    row: r,
                    src: row,
                })?;
            }
        }
        Ok(())
    }
}
