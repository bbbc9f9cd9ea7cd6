//! Machine state and chain execution.
//!
//! State is sparse: a register exists once something wrote it. Vector registers hold the lanes
//! of every batch item of the chunk (`[item][lane]`, storage-format values as f32); matrix tiles
//! (`mrf`, matrix `dram`) are the same for every item (only the host writes matrix DRAM), so
//! they are shared, with their `mvm.matrix` quantization cached per tile.

use super::error::{EmuError, Site};
use super::mfu;
use super::mvm::{self, QRun};
use nnp_grammar::{Addr, ChainBody, Decl, DeclKind, MatrixChain, Mem, OpKind, Span, VectorChain};
use nnp_host::trace::TraceRecord;
use nnp_host::{canonical_nan, storage_bits};
use nnp_numerics::sums::IntegerSum;
use nnp_numerics::{FloatFormat, Format};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

mod shared;

pub use shared::Shared;
use shared::lock;

/// What one chunk of batch items produced: outputs as `[item][elements]` per output name.
pub struct ChunkResult {
    pub outputs: Vec<(String, Vec<f32>)>,
    pub trace: Option<Vec<TraceRecord>>,
}

/// The per-chunk machine.
struct Machine<'s, 'a> {
    shared: &'s Shared<'a>,
    items: Range<usize>,
    /// The number of the data's item 0 in the batch it is a piece of (errors and records).
    first_item: usize,
    /// The number of items in the chunk (`items.len()`): each vector register holds this many
    /// items' lanes.
    item_count: usize,
    vregs: HashMap<(Mem, u32), Vec<f32>>,
    tiles: HashMap<(Mem, u32), Arc<[f32]>>,
    qcache: HashMap<u32, (Format, Arc<Vec<QRun>>)>,
    /// Input rows still on netq: (declaration index, row).
    netq_in: VecDeque<(usize, usize)>,
    /// Output rows still to be pushed: (declaration index, row).
    out_slots: VecDeque<(usize, usize)>,
    /// Collected outputs per declaration index, `[item][elements]`.
    outputs: HashMap<usize, Vec<f32>>,
    pushes: u32,
    trace: Option<Vec<Vec<TraceRecord>>>,
    /// Under `nonfinite = "error"`: each failed item's first non-finite value (by its number
    /// in the batch). Its run goes on with the others in lockstep; the chunk then fails with
    /// its lowest item's, so the error does not depend on how the batch is split.
    failed: BTreeMap<usize, EmuError>,
}

/// Where we are, for errors.
#[derive(Clone, Copy)]
struct At {
    chain: usize,
    iteration: u32,
}

/// Run the items `items` of the data; errors and trace records number them from
/// `first_item` (the data's item 0 in a larger batch).
pub fn run_chunk(
    shared: &Shared<'_>,
    items: Range<usize>,
    trace: bool,
    first_item: usize,
) -> Result<ChunkResult, EmuError> {
    let item_count = items.len();
    let mut m = Machine {
        shared,
        item_count,
        vregs: shared
            .vregs
            .iter()
            .map(|(k, v)| {
                (
                    *k,
                    v.iter()
                        .copied()
                        .cycle()
                        .take(v.len() * item_count)
                        .collect(),
                )
            })
            .collect(),
        tiles: shared.tiles.clone(),
        qcache: HashMap::new(),
        netq_in: VecDeque::new(),
        out_slots: VecDeque::new(),
        outputs: HashMap::new(),
        pushes: 0,
        trace: trace.then(|| vec![Vec::new(); item_count]),
        items,
        first_item,
        failed: BTreeMap::new(),
    };
    let run = m.run();
    let first = m.first_item + m.items.start;
    let failed = std::mem::take(&mut m.failed).pop_first();
    // An error that stops the run stops every item there, the chunk's first one too: it is
    // that item's error unless a non-finite value of its came before. Else the lowest item
    // with a non-finite value fails the chunk.
    match (failed, run.and_then(|()| m.finish())) {
        (Some((item, e)), Err(_)) if item == first => Err(e),
        (_, Err(stop)) => Err(stop),
        (Some((_, e)), Ok(_)) => Err(e),
        (None, done) => done,
    }
}

impl Machine<'_, '_> {
    /// Every item's program: placed inputs loaded, then the chains in order.
    fn run(&mut self) -> Result<(), EmuError> {
        let (program, item_count) = (self.shared.program, self.item_count);
        for (i, d) in program.decls.iter().enumerate() {
            match (d.kind, d.place) {
                (DeclKind::Input, None) => self.netq_in.extend((0..d.rows()).map(|r| (i, r))),
                (DeclKind::Input, Some(place)) => {
                    self.load_placed_input(d, place.mem, place.addr)?
                }
                (DeclKind::Output, None) => {
                    self.out_slots.extend((0..d.rows()).map(|r| (i, r)));
                    self.outputs.insert(i, vec![0.0; item_count * d.elements()]);
                }
                _ => {}
            }
        }
        for c in &program.chains {
            for t in 0..c.iterations {
                if self.shared.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                    return Err(EmuError::Stopped);
                }
                let at = At {
                    chain: c.index,
                    iteration: t,
                };
                match &c.body {
                    ChainBody::Vector(vc) => self.vector_chain(vc, at)?,
                    ChainBody::Matrix(mc) => self.matrix_chain(mc, at)?,
                }
            }
        }
        Ok(())
    }

    fn site(&self, at: At, span: Span) -> Site {
        Site {
            item: self.first_item + self.items.start,
            chain: at.chain,
            iteration: at.iteration,
            span,
            line: self.shared.program.line(span),
        }
    }

    /// Register `base + t*inc + offset`, range-checked against the memory's size.
    fn reg(&self, mem: Mem, addr: Addr, offset: u32, at: At, span: Span) -> Result<u32, EmuError> {
        let a = addr.base as i64 + addr.inc as i64 * at.iteration as i64 + offset as i64;
        let size = match mem {
            Mem::Mrf => self.shared.program.target.memory.mrf,
            _ => self.shared.program.target.mem_size(mem),
        };
        if a < 0 || a >= size as i64 {
            return Err(EmuError::OutOfRange {
                site: self.site(at, span),
                mem: mem.to_string(),
                addr: a.max(0) as u64,
                size,
            });
        }
        Ok(a as u32)
    }

    fn tile_reg(
        &self,
        mem: Mem,
        addr: Addr,
        offset: u32,
        at: At,
        span: Span,
    ) -> Result<u32, EmuError> {
        let a = addr.base as i64 + addr.inc as i64 * at.iteration as i64 + offset as i64;
        let size = match mem {
            Mem::Dram => self.shared.program.target.memory.dram_tiles,
            _ => self.shared.program.target.memory.mrf,
        };
        if a < 0 || a >= size as i64 {
            return Err(EmuError::OutOfRange {
                site: self.site(at, span),
                mem: format!("{mem} (matrix tiles)"),
                addr: a.max(0) as u64,
                size,
            });
        }
        Ok(a as u32)
    }

    fn uninit(&self, at: At, span: Span, mem: Mem, addr: u32) -> EmuError {
        EmuError::Uninitialized {
            site: self.site(at, span),
            mem: mem.to_string(),
            addr,
        }
    }

    fn load_placed_input(&mut self, d: &Decl, mem: Mem, base: u32) -> Result<(), EmuError> {
        let n = self.shared.native;
        let per_item = d.tiles(n) * n;
        let mut all = vec![0.0f32; self.item_count * per_item];
        for (k, item) in self.items.clone().enumerate() {
            let values = self.input_values(d, item)?;
            let rows = self.shared.host_rows(d, d.rows(), Some(values));
            self.loaded(d, &rows, item);
            all[k * per_item..(k + 1) * per_item].copy_from_slice(&rows);
        }
        for reg in 0..d.tiles(n) {
            let mut v = vec![0.0f32; self.item_count * n];
            for k in 0..self.item_count {
                v[k * n..(k + 1) * n]
                    .copy_from_slice(&all[k * per_item + reg * n..k * per_item + (reg + 1) * n]);
            }
            self.vregs.insert((mem, base + reg as u32), v);
        }
        Ok(())
    }

    fn input_values(&self, d: &Decl, item: usize) -> Result<&[f32], EmuError> {
        self.shared
            .data
            .input_item(&d.name, item)
            .filter(|v| v.len() == d.elements())
            .ok_or_else(|| EmuError::Data {
                name: d.name.clone(),
                message: format!(
                    "no input tensor of that name with {} values per batch item",
                    d.elements()
                ),
            })
    }

    /// `v_rd`: the carried vector `[item][tile][lane]`.
    fn read(&mut self, vc: &VectorChain, at: At) -> Result<Vec<f64>, EmuError> {
        let n = self.shared.native;
        let rd = &vc.read;
        let tiles = rd.tiles as usize;
        let mut x = vec![0.0f64; self.item_count * tiles * n];
        if rd.src == Mem::Netq {
            let Some((di, row)) = self.netq_in.pop_front() else {
                return Err(EmuError::NetqUnderflow {
                    site: self.site(at, rd.span),
                });
            };
            let d = &self.shared.program.decls[di];
            if d.row_tiles(n) != tiles {
                return Err(EmuError::NetqWidth {
                    site: self.site(at, rd.span),
                    input: d.name.clone(),
                    row,
                    expected: rd.tiles,
                    found: d.row_tiles(n),
                });
            }
            let c = d.row_len();
            for (k, item) in self.items.clone().enumerate() {
                let values = self.input_values(d, item)?;
                let lanes = self
                    .shared
                    .host_rows(d, 1, Some(&values[row * c..(row + 1) * c]));
                self.loaded(d, &lanes, item);
                for (o, v) in x[k * tiles * n..(k + 1) * tiles * n].iter_mut().zip(&lanes) {
                    *o = f64::from(*v);
                }
            }
            return Ok(x);
        }
        let offsets: Vec<u32> = match &rd.window {
            Some(w) => w.offsets().collect(),
            None => (0..rd.tiles).collect(),
        };
        for (j, off) in offsets.into_iter().enumerate() {
            let a = self.reg(rd.src, rd.addr, off, at, rd.span)?;
            let r = self
                .vregs
                .get(&(rd.src, a))
                .ok_or_else(|| self.uninit(at, rd.span, rd.src, a))?;
            for k in 0..self.item_count {
                for (o, v) in x[(k * tiles + j) * n..(k * tiles + j + 1) * n]
                    .iter_mut()
                    .zip(&r[k * n..(k + 1) * n])
                {
                    *o = f64::from(*v);
                }
            }
        }
        Ok(x)
    }

    /// The `mvm.matrix` quantization of one `mrf` tile, one [`QRun`] per row (cached).
    fn qtile(
        &mut self,
        a: u32,
        fmt: &Format,
        at: At,
        span: Span,
    ) -> Result<Arc<Vec<QRun>>, EmuError> {
        if let Some((f, q)) = self.qcache.get(&a)
            && f == fmt
        {
            return Ok(q.clone());
        }
        let n = self.shared.native;
        let tile = self
            .tiles
            .get(&(Mem::Mrf, a))
            .ok_or_else(|| self.uninit(at, span, Mem::Mrf, a))?;
        let key = (tile.as_ptr() as usize, *fmt);
        let cached = lock(&self.shared.qtiles).get(&key).cloned();
        let q = match cached {
            Some(q) => q,
            None => {
                let mut scratch = Vec::new();
                let rows: Vec<QRun> = tile
                    .chunks(n)
                    .map(|row| {
                        let r: Vec<f64> = row.iter().map(|v| f64::from(*v)).collect();
                        QRun::quantize(fmt, &r, n, &mut scratch)
                    })
                    .collect();
                let q = Arc::new(rows);
                lock(&self.shared.qtiles).insert(key, q.clone());
                q
            }
        };
        self.qcache.insert(a, (*fmt, q.clone()));
        Ok(q)
    }

    /// `mv_mul`: `y = W x` over `rows x cols` tiles; returns `[item][rows * n]`.
    fn mv_mul(&mut self, vc: &VectorChain, x: &[f64], at: At) -> Result<Vec<f64>, EmuError> {
        let Some(mm) = &vc.mv_mul else {
            return Ok(x.to_vec());
        };
        let n = self.shared.native;
        let (rows, cols) = (vc.width as usize, vc.read.tiles as usize);
        let q = &vc.quant;
        let out_fmt = q
            .mvm_output
            .as_float()
            .copied()
            .unwrap_or(FloatFormat::FP16);
        let mode = self.shared.program.target.numerics.accumulation;
        let mut scratch = Vec::new();
        // Input tiles quantized once: xq[item * cols + j].
        let xq: Vec<QRun> = x
            .chunks(n)
            .map(|t| QRun::quantize(&q.mvm_vector, t, n, &mut scratch))
            .collect();
        let mut y = vec![0.0f64; self.item_count * rows * n];
        let mut partials = vec![IntegerSum::new(); self.item_count * n * cols];
        for i in 0..rows {
            for partial in partials.iter_mut() {
                partial.clear();
            }
            for j in 0..cols {
                let a = self.tile_reg(Mem::Mrf, mm.addr, (i * cols + j) as u32, at, mm.span)?;
                let qt = self.qtile(a, mm.format(at.iteration), at, mm.span)?;
                for k in 0..self.item_count {
                    for (r, wrow) in qt.iter().enumerate() {
                        mvm::dot(
                            wrow,
                            &xq[k * cols + j],
                            &mut partials[(k * n + r) * cols + j],
                        );
                    }
                }
            }
            for k in 0..self.item_count {
                for r in 0..n {
                    let ps = &partials[(k * n + r) * cols..(k * n + r + 1) * cols];
                    y[(k * rows + i) * n + r] = mvm::accumulate(mode, ps, &out_fmt);
                }
            }
        }
        self.check_finite(&y, rows * n, "mv_mul", at, mm.span);
        Ok(y)
    }

    /// Under `nonfinite = "error"`, each item's first non-finite lane of `v` (`[item][lane]`,
    /// `per_item` lanes each) fails that item ([`Machine::failed`]).
    fn check_finite(&mut self, v: &[f64], per_item: usize, op: &'static str, at: At, span: Span) {
        if !self.shared.nonfinite_error {
            return;
        }
        for (k, lanes) in v.chunks(per_item.max(1)).enumerate() {
            if let Some(lane) = lanes.iter().position(|x| !x.is_finite()) {
                let mut site = self.site(at, span);
                site.item += k;
                let e = EmuError::NonFinite {
                    site,
                    op,
                    value: lanes[lane],
                    lane,
                };
                self.failed.entry(site.item).or_insert(e);
            }
        }
    }

    /// [`Shared::check_loaded`] for an input of the chunk's item `item` (data numbering).
    fn loaded(&mut self, d: &Decl, values: &[f32], item: usize) {
        let item = self.first_item + item;
        if let Err(e) = self.shared.check_loaded(d, values, item) {
            self.failed.entry(item).or_insert(e);
        }
    }

    fn vector_chain(&mut self, vc: &VectorChain, at: At) -> Result<(), EmuError> {
        let n = self.shared.native;
        let x = self.read(vc, at)?;
        let mut y = self.mv_mul(vc, &x, at)?;
        let width = vc.width as usize;
        let per_item = width * n;
        let fmt = vc
            .quant
            .mfu_input
            .as_float()
            .copied()
            .unwrap_or(FloatFormat::FP16);
        // The format the carried values are known to be in (rounding to it again is the
        // identity, so it is skipped): none after a read, `mvm.output` after the multiply.
        let mut carried = vc
            .mv_mul
            .as_ref()
            .and_then(|_| vc.quant.mvm_output.as_float().copied());
        for op in &vc.ops {
            if carried != Some(fmt) {
                for v in y.iter_mut() {
                    *v = fmt.round(*v);
                }
            }
            carried = Some(fmt);
            match op.kind {
                OpKind::Relu => y.iter_mut().for_each(|v| *v = mfu::relu(*v)),
                OpKind::Pass => {}
                OpKind::Table(kind) => {
                    let act = mfu::Act::new(kind, &fmt, &self.shared.files);
                    for v in y.iter_mut() {
                        *v = act.apply(*v);
                    }
                }
                OpKind::Softmax => {
                    for item in y.chunks_mut(per_item) {
                        mfu::softmax(&fmt, &self.shared.files, item);
                    }
                }
                kind
                @ (OpKind::Add | OpKind::ASubB | OpKind::BSubA | OpKind::Max | OpKind::Mul) => {
                    let (Some((mem, addr)), Some(f)) = (op.operand, mfu::binary(kind)) else {
                        return Err(EmuError::Unsupported {
                            message: format!("`{}` without an operand", kind.mnemonic()),
                            span: op.span,
                            line: self.shared.program.line(op.span),
                        });
                    };
                    for j in 0..width {
                        let a = self.reg(mem, addr, j as u32, at, op.span)?;
                        let r = self
                            .vregs
                            .get(&(mem, a))
                            .ok_or_else(|| self.uninit(at, op.span, mem, a))?;
                        for k in 0..self.item_count {
                            let ys = &mut y[(k * width + j) * n..(k * width + j + 1) * n];
                            for (v, m) in ys.iter_mut().zip(&r[k * n..(k + 1) * n]) {
                                *v = f(&fmt, *v, fmt.round(f64::from(*m)));
                            }
                        }
                    }
                }
            }
            self.check_finite(&y, per_item, op.kind.mnemonic(), at, op.span);
        }
        // v_wr: round to storage once, write every destination.
        let st = vc
            .quant
            .storage
            .as_float()
            .copied()
            .unwrap_or(FloatFormat::FP16);
        let out: Vec<f32> = if carried == Some(st) {
            y.iter().map(|v| *v as f32).collect()
        } else {
            y.iter().map(|v| st.round(*v) as f32).collect()
        };
        for w in &vc.writes {
            let first_addr = if w.dst == Mem::Netq {
                self.push(&out, width, at, w.span)?
            } else {
                let mut first = 0;
                for j in 0..width {
                    let a = self.reg(w.dst, w.addr, j as u32, at, w.span)?;
                    if j == 0 {
                        first = a;
                    }
                    let reg = self
                        .vregs
                        .entry((w.dst, a))
                        .or_insert_with(|| vec![0.0; self.item_count * n]);
                    for k in 0..self.item_count {
                        reg[k * n..(k + 1) * n]
                            .copy_from_slice(&out[(k * width + j) * n..(k * width + j + 1) * n]);
                    }
                }
                first
            };
            if let Some(trace) = self.trace.as_mut() {
                let line = self.shared.program.line(w.span);
                for (k, recs) in trace.iter_mut().enumerate() {
                    recs.push(TraceRecord {
                        item: self.first_item + self.items.start + k,
                        chain: at.chain,
                        iteration: at.iteration,
                        dst: w.dst.to_string(),
                        addr: first_addr,
                        line,
                        bits: out[k * per_item..(k + 1) * per_item]
                            .iter()
                            .map(|v| storage_bits(&st, *v))
                            .collect(),
                    });
                }
            }
        }
        Ok(())
    }

    /// `v_wr netq`: the next output row; returns the push's index.
    fn push(&mut self, out: &[f32], width: usize, at: At, span: Span) -> Result<u32, EmuError> {
        let n = self.shared.native;
        let Some((di, row)) = self.out_slots.pop_front() else {
            return Err(EmuError::NetqOverflow {
                site: self.site(at, span),
            });
        };
        let d = &self.shared.program.decls[di];
        if d.row_tiles(n) != width {
            return Err(EmuError::PushWidth {
                site: self.site(at, span),
                output: d.name.clone(),
                row,
                expected: d.row_tiles(n),
                found: width as u32,
            });
        }
        let (c, elements) = (d.row_len(), d.elements());
        if let Some(dst) = self.outputs.get_mut(&di) {
            for k in 0..self.item_count {
                let (d, s) = (k * elements + row * c, k * width * n);
                for (d, s) in dst[d..d + c].iter_mut().zip(&out[s..s + c]) {
                    *d = canonical_nan(*s);
                }
            }
        }
        self.pushes += 1;
        Ok(self.pushes - 1)
    }

    fn matrix_chain(&mut self, mc: &MatrixChain, at: At) -> Result<(), EmuError> {
        for k in 0..mc.tiles {
            let s = self.tile_reg(mc.src, mc.src_addr, k, at, mc.src_span)?;
            let d = self.tile_reg(mc.dst, mc.dst_addr, k, at, mc.dst_span)?;
            let tile = self
                .tiles
                .get(&(mc.src, s))
                .cloned()
                .ok_or_else(|| self.uninit(at, mc.src_span, mc.src, s))?;
            self.tiles.insert((mc.dst, d), tile);
            if mc.dst == Mem::Mrf {
                self.qcache.remove(&d);
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<ChunkResult, EmuError> {
        let program = self.shared.program;
        let n = self.shared.native;
        if let Some(&(di, row)) = self.netq_in.front() {
            let d = &program.decls[di];
            return Err(EmuError::NetqLeftover {
                left: self.netq_in.len(),
                input: d.name.clone(),
                row,
                span: d.span,
                line: program.line(d.span),
            });
        }
        if let Some(&(di, row)) = self.out_slots.front() {
            let d = &program.decls[di];
            return Err(EmuError::OutputMissing {
                output: d.name.clone(),
                got: row,
                expected: d.rows(),
                span: d.span,
                line: program.line(d.span),
            });
        }
        let mut outputs = Vec::new();
        for (i, d) in program.decls.iter().enumerate() {
            if d.kind != DeclKind::Output {
                continue;
            }
            let values = match d.place {
                None => self.outputs.remove(&i).unwrap_or_default(),
                Some(place) => {
                    let (c, rt, elements) = (d.row_len(), d.row_tiles(n), d.elements());
                    let mut v = vec![0.0f32; self.item_count * elements];
                    let at = At {
                        chain: program.chains.len(),
                        iteration: 0,
                    };
                    for r in 0..d.rows() {
                        for j in 0..rt {
                            let a = self.reg(
                                place.mem,
                                Addr {
                                    base: place.addr,
                                    inc: 0,
                                },
                                (r * rt + j) as u32,
                                at,
                                d.span,
                            )?;
                            let reg = self
                                .vregs
                                .get(&(place.mem, a))
                                .ok_or_else(|| self.uninit(at, d.span, place.mem, a))?;
                            let lanes = n.min(c - j * n);
                            for k in 0..self.item_count {
                                let o = k * elements + r * c + j * n;
                                for (d, s) in v[o..o + lanes].iter_mut().zip(&reg[k * n..]) {
                                    *d = canonical_nan(*s);
                                }
                            }
                        }
                    }
                    v
                }
            };
            outputs.push((d.name.clone(), values));
        }
        Ok(ChunkResult {
            outputs,
            trace: self.trace.map(|t| t.into_iter().flatten().collect()),
        })
    }
}
