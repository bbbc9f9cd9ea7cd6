//! The chains of a program: `quant` directives, vector chains (read, `mv_mul`, MFU ops and
//! their operands, writes, iterations, windows) and the whole program's order of them.

use super::formats::{mfu_format, mvm_format, output_format};
use super::{AddrM, DKind, Gen, Item, SpaceId, VChainM, Written};
use nnp_grammar::{Mem, OpKind, Unit};
use std::collections::BTreeSet;

/// A chain's MFU ops and their operands (memory, address).
type ChainOps = Vec<(OpKind, Option<(Mem, AddrM)>)>;

impl Gen<'_> {
    fn quant_directives(&mut self) {
        if !self.r.chance(self.cfg.quant_prob) {
            return;
        }
        let count = self.r.range(1, 2);
        for _ in 0..count {
            let (point, fmt) = match self.r.below(4) {
                0 => (
                    "mvm.vector",
                    mvm_format(&mut self.r, self.n, self.cfg.all_formats),
                ),
                1 => (
                    "mvm.matrix",
                    mvm_format(&mut self.r, self.n, self.cfg.all_formats),
                ),
                2 => ("mvm.output", output_format(&mut self.r, &mut self.rr)),
                _ => (
                    "mfu.input",
                    mfu_format(&mut self.r, &mut self.rr, self.cfg.wide_mfu_formats),
                ),
            };
            self.items.push(Item::Quant(point, fmt));
        }
    }

    /// A random MFU op sequence.
    fn op_kinds(&mut self) -> Vec<OpKind> {
        const ALL: &[OpKind] = &OpKind::ALL;
        let count = self.r.range(0, self.cfg.max_ops as i64) as usize;
        (0..count).map(|_| *self.r.pick(ALL)).collect()
    }

    /// Generate one vector chain (and whatever declarations and copies it needs).
    fn vector_chain(&mut self, force_netq_out: bool) {
        let max_t = self.cfg.max_tiles.max(1) as i64;
        let iterations = if self.r.chance(0.6) {
            1
        } else {
            self.r.range(2, self.cfg.max_iterations.max(2) as i64) as u32
        };
        let use_mvm = self.r.chance(0.45);
        let (mv_mul, width, read_tiles, fed) = if use_mvm {
            let Some((mut mv_mul, rows, cols)) = self.chain_mv_mul(iterations, max_t) else {
                return;
            };
            let fed = if self.cfg.feed_prob > 0.0 && self.r.chance(self.cfg.feed_prob) {
                self.feed_chain(cols, iterations)
            } else {
                None
            };
            if fed.is_some() {
                mv_mul.inc = 0;
            }
            self.set_scalar("rows", rows);
            self.set_scalar("cols", cols);
            (Some(mv_mul), rows, cols, fed)
        } else {
            let width = self.r.range(1, max_t) as u32;
            self.set_scalar("rows", width);
            (None, width, width, None)
        };
        let read = match fed {
            Some(a) => Some((Mem::Ivrf, a, false)),
            None => self.chain_read(use_mvm, read_tiles, iterations),
        };
        let Some((src, src_addr, windowed)) = read else {
            return;
        };
        let (ops, operand_regs) = self.chain_ops(width, iterations);
        let read = (src, src_addr, windowed);
        let writes = self.chain_writes(force_netq_out, read, (width, iterations), &operand_regs);
        if iterations > 1 || self.r.chance(0.05) {
            self.items.push(Item::Swr("iterations", iterations));
        }
        self.items.push(Item::Vector(VChainM {
            src,
            src_addr,
            windowed,
            mv_mul,
            ops,
            writes,
        }));
    }

    /// A chain that moves `iterations` input rows of `width` tiles from netq to fresh ivrf
    /// registers, one row per iteration (`inc = width`), for the next chain's products to
    /// read ([`GenConfig::feed_prob`](crate::GenConfig::feed_prob)); `None` where ivrf has no
    /// room.
    fn feed_chain(&mut self, width: u32, iterations: u32) -> Option<AddrM> {
        let base = self.alloc(SpaceId::Vec(Mem::Ivrf), width * iterations)?;
        let a = AddrM {
            base,
            inc: width as i32,
        };
        self.netq_decl(false, width, iterations);
        self.set_scalar("rows", width);
        if iterations > 1 {
            self.items.push(Item::Swr("iterations", iterations));
        }
        let regs = Self::read_regs(a, width, iterations);
        self.space(SpaceId::Vec(Mem::Ivrf)).mark(&regs, None);
        self.written.push(Written {
            mem: Mem::Ivrf,
            width,
            iterations,
            inc: a.inc,
            base,
        });
        self.items.push(Item::Vector(VChainM {
            src: Mem::Netq,
            src_addr: AddrM { base: 0, inc: 0 },
            windowed: false,
            mv_mul: None,
            ops: Vec::new(),
            writes: vec![(Mem::Ivrf, a)],
        }));
        Some(a)
    }

    /// The `mv_mul` of a chain of `iterations` (a matrix picked or made in mrf, a matrix of
    /// dram copied there) and its rows and cols: `None` where there is no matrix.
    fn chain_mv_mul(&mut self, iterations: u32, max_t: i64) -> Option<(AddrM, u32, u32)> {
        // Pick or make a matrix in mrf.
        if self.mats.is_empty() || self.r.chance(0.3) {
            let rt = self.r.range(1, max_t) as u32;
            let ct = self.r.range(1, max_t) as u32;
            self.declare_matrix(rt, ct);
        }
        if !self.dram_mats.is_empty() && self.r.chance(0.7) {
            let i = self.r.below(self.dram_mats.len() as u64) as usize;
            let d = self.dram_mats.remove(i);
            self.copy_matrix(d);
        }
        if self.mats.is_empty() {
            return None;
        }
        let m = self.r.pick(&self.mats).clone();
        // Whole tile rows (cols = ct), or a run inside one tile row (rows = 1).
        let (rows, cols, base, inc) = if m.declared || self.r.chance(0.7) {
            let rows = self.r.range(1, m.rt as i64) as u32;
            let start = self.r.range(0, (m.rt - rows) as i64) as u32;
            let blocks_left = (m.rt - start) / rows;
            let inc = if iterations > 1 && blocks_left >= iterations && self.r.chance(0.5) {
                (rows * m.ct) as i32
            } else {
                0
            };
            (rows, m.ct, m.base + start * m.ct, inc)
        } else {
            let cols = self.r.range(1, m.ct as i64) as u32;
            let i = self.r.range(0, m.rt as i64 - 1) as u32;
            let j = self.r.range(0, (m.ct - cols) as i64) as u32;
            (1, cols, m.base + i * m.ct + j, 0)
        };
        Some((AddrM { base, inc }, rows, cols))
    }

    /// What a chain reads, `read_tiles` wide: its memory, address and whether through a
    /// window; `None` where there is no room.
    fn chain_read(
        &mut self,
        use_mvm: bool,
        read_tiles: u32,
        iterations: u32,
    ) -> Option<(Mem, AddrM, bool)> {
        let try_window = read_tiles > 1 && self.r.chance(0.3);
        if try_window {
            // win_w * win_h == read_tiles; an image of one-tile pixels with `pitch` per row.
            let divs: Vec<u32> = (1..=read_tiles)
                .filter(|d| read_tiles.is_multiple_of(*d))
                .collect();
            let w = *self.r.pick(&divs);
            let h = read_tiles / w;
            let pitch = w + self.r.range(0, 2) as u32;
            let mem = if use_mvm {
                Mem::Ivrf
            } else {
                *self.r.pick(&[Mem::Ivrf, Mem::Ivrf, Mem::Dram])
            };
            // Image rows: enough for the window plus the iterations (inc 1 along a row).
            let img_rows = h + self.r.range(0, 1) as u32;
            let inc = if iterations > 1 { 1 } else { 0 };
            let need_w = w + (iterations - 1) * inc as u32;
            let pitch = pitch.max(need_w);
            let base = self.declare_vector(mem, 1, img_rows * pitch)?;
            self.win_regs(w, h, pitch);
            Some((mem, AddrM { base, inc }, true))
        } else {
            let mems = if use_mvm {
                vec![Mem::Ivrf]
            } else {
                let mut v = self.vector_mems();
                v.push(Mem::Netq);
                v.push(Mem::Netq);
                v
            };
            let src = *self.r.pick(&mems);
            if src == Mem::Netq {
                self.netq_decl(false, read_tiles, iterations);
                Some((src, AddrM { base: 0, inc: 0 }, false))
            } else {
                let a = self.source_addr(src, read_tiles, iterations)?;
                Some((src, a, false))
            }
        }
    }

    /// A chain's MFU ops, placed, with their operands (`width` wide), and the registers the
    /// operands read.
    fn chain_ops(&mut self, width: u32, iterations: u32) -> (ChainOps, BTreeSet<(Mem, u32)>) {
        let kinds = self.op_kinds();
        let placed = self.place(&kinds);
        let mut ops = Vec::new();
        let mut operand_regs: BTreeSet<(Mem, u32)> = BTreeSet::new();
        for (k, mfu) in placed {
            let operand = if k.has_operand() {
                let mem = if k.unit() == Unit::Mul {
                    Mem::MulVrf(mfu)
                } else {
                    Mem::AsVrf(mfu)
                };
                match self.source_addr(mem, width, iterations) {
                    Some(a) => {
                        for r in Self::read_regs(a, width, iterations) {
                            operand_regs.insert((mem, r));
                        }
                        Some((mem, a))
                    }
                    // No room: stop here (later ops would shift MFU placement).
                    None => break,
                }
            } else {
                None
            };
            ops.push((k, operand));
        }
        (ops, operand_regs)
    }

    /// A chain's writes, `width` wide: one to four destinations, at most one netq push, none
    /// on the registers its operands read (`operand_regs`); each marked written.
    fn chain_writes(
        &mut self,
        force_netq_out: bool,
        (src, src_addr, windowed): (Mem, AddrM, bool),
        (width, iterations): (u32, u32),
        operand_regs: &BTreeSet<(Mem, u32)>,
    ) -> Vec<(Mem, AddrM)> {
        // Writes: one to four destinations, at most one netq push.
        let mut writes = Vec::new();
        let mut taken: BTreeSet<(Mem, u32)> = BTreeSet::new();
        let count = self.r.range(1, 3);
        let mut netq_out = force_netq_out;
        if !netq_out && self.r.chance(0.35) {
            netq_out = true;
        }
        if netq_out {
            self.netq_decl(true, width, iterations);
            writes.push((Mem::Netq, AddrM { base: 0, inc: 0 }));
        }
        // A recurrence: an iterated chain writing where its next iteration reads (inc != 0), or
        // where every iteration reads (inc = 0): iteration t + 1 sees what t wrote.
        if iterations > 1 && src != Mem::Netq && !windowed && self.r.chance(0.3) {
            let base = src_addr.base as i64 + src_addr.inc as i64;
            if base >= 0 {
                let a = AddrM {
                    base: base as u32,
                    inc: src_addr.inc,
                };
                let regs = Self::read_regs(a, width, iterations);
                let fits = regs.iter().all(|&r| !operand_regs.contains(&(src, r)))
                    && self.space_ref(SpaceId::Vec(src)).in_range(&regs);
                if fits {
                    for &r in &regs {
                        taken.insert((src, r));
                    }
                    writes.push((src, a));
                }
            }
        }
        for _ in 0..count {
            if !writes.is_empty() && self.r.chance(0.3) {
                break;
            }
            let mems = self.vector_mems();
            let mem = *self.r.pick(&mems);
            if let Some(a) = self.dest_addr(mem, width, iterations, operand_regs, &taken) {
                let regs = Self::read_regs(a, width, iterations);
                for &r in &regs {
                    taken.insert((mem, r));
                }
                writes.push((mem, a));
            }
        }
        if writes.is_empty() {
            self.netq_decl(true, width, iterations);
            writes.push((Mem::Netq, AddrM { base: 0, inc: 0 }));
        }
        if self.r.chance(0.5) {
            writes.reverse();
        }
        for (mem, a) in &writes {
            if *mem == Mem::Netq {
                continue;
            }
            let regs = Self::read_regs(*a, width, iterations);
            self.space(SpaceId::Vec(*mem)).mark(&regs, None);
            self.written.push(Written {
                mem: *mem,
                width,
                iterations,
                inc: a.inc,
                base: a.base,
            });
        }
        writes
    }

    fn win_regs(&mut self, w: u32, h: u32, pitch: u32) {
        if self.win != Some((w, h, pitch)) || self.r.chance(0.1) {
            let old = self.win;
            for (reg, v, o) in [
                ("win_w", w, old.map(|o| o.0)),
                ("win_h", h, old.map(|o| o.1)),
                ("pitch", pitch, old.map(|o| o.2)),
            ] {
                if o != Some(v) || self.r.chance(0.2) {
                    self.items.push(Item::Swr(reg, v));
                }
            }
            self.win = Some((w, h, pitch));
        }
    }

    pub(crate) fn build(&mut self) {
        let chains = self.r.range(1, self.cfg.max_chains.max(1) as i64) as usize;
        for i in 0..chains {
            self.quant_directives();
            // The last chain pushes on netq unless an output already exists.
            let last = i + 1 == chains;
            let has_out = self.decls.iter().any(|d| d.kind == DKind::Output);
            self.vector_chain(last && !has_out);
        }
        // A copy chain for a dram matrix nobody used yet (m_rd/m_wr coverage).
        while let Some(d) = self.dram_mats.pop() {
            self.copy_matrix(d);
        }
        self.mem_outputs();
        if !self.decls.iter().any(|d| d.kind == DKind::Output) {
            self.vector_chain(true);
        }
    }
}
