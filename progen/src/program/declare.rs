//! Declarations and addresses: vectors, matrices (and their copies from dram), netq row
//! groups and `output ... at` regions, placed in free registers; the read and write
//! addresses of a chain.

use super::formats::mvm_format;
use super::{AddrM, DKind, DeclM, Gen, Item, MatRegion, SpaceId};
use nnp_grammar::Mem;
use std::collections::BTreeSet;

impl Gen<'_> {
    /// Declare a vector of `rows` rows of `w` tiles in `mem` (allocated in untouched registers).
    /// Returns the base register.
    pub(super) fn declare_vector(&mut self, mem: Mem, w: u32, rows: u32) -> Option<u32> {
        let total = w * rows;
        let base = self.alloc(SpaceId::Vec(mem), total)?;
        let len = self.row_len(w);
        let shape = self.shape(rows, len);
        let zero = self.r.chance(0.15);
        let pad = if zero { None } else { self.pad_literal() };
        let quant = if !zero && self.r.chance(0.2) {
            Some(mvm_format(&mut self.r, self.n, self.cfg.all_formats))
        } else {
            None
        };
        let idx = self.decls.len();
        let name = self.fresh("v");
        self.decls.push(DeclM {
            name,
            kind: DKind::Vector,
            shape,
            at: Some((mem, base)),
            zero,
            pad,
            quant,
            tiles: (0, 0),
        });
        let regs: Vec<u32> = (base..base + total).collect();
        self.space(SpaceId::Vec(mem)).mark(&regs, Some(idx));
        Some(base)
    }

    /// Declare a matrix of `rt x ct` tiles at mrf (usable now) or at dram (copied later).
    pub(super) fn declare_matrix(&mut self, rt: u32, ct: u32) -> bool {
        let at_dram = self.r.chance(0.3);
        let id = if at_dram {
            SpaceId::DramTiles
        } else {
            SpaceId::MrfTiles
        };
        let Some(base) = self.alloc(id, rt * ct) else {
            return false;
        };
        let n = self.n;
        let rows = if self.r.chance(0.5) {
            rt as usize * n
        } else {
            self.r
                .range(((rt as usize - 1) * n + 1) as i64, (rt as usize * n) as i64)
                as usize
        };
        let cols = self.row_len(ct);
        // Per-matrix precision only where it is unambiguous (declared at mrf, never copied).
        let quant = if !at_dram && self.r.chance(0.25) {
            Some(mvm_format(&mut self.r, n, self.cfg.all_formats))
        } else {
            None
        };
        let idx = self.decls.len();
        let name = self.fresh("W");
        self.decls.push(DeclM {
            name,
            kind: DKind::Matrix,
            shape: vec![rows, cols],
            at: Some((if at_dram { Mem::Dram } else { Mem::Mrf }, base)),
            zero: false,
            pad: None,
            quant,
            tiles: (rt, ct),
        });
        let regs: Vec<u32> = (base..base + rt * ct).collect();
        self.space(id).mark(&regs, Some(idx));
        if at_dram {
            self.dram_mats.push(idx);
        } else {
            self.mats.push(MatRegion {
                base,
                rt,
                ct,
                declared: true,
            });
        }
        true
    }

    pub(super) fn set_scalar(&mut self, reg: &'static str, v: u32) {
        let cur = match reg {
            "rows" => &mut self.rows,
            _ => &mut self.cols,
        };
        if *cur != v || self.r.chance(0.1) {
            *cur = v;
            self.items.push(Item::Swr(reg, v));
        }
    }

    /// Copy a matrix declared at dram into free mrf tiles (a matrix chain, maybe iterated).
    pub(super) fn copy_matrix(&mut self, decl: usize) -> bool {
        let (rt, ct) = self.decls[decl].tiles;
        let Some((_, src)) = self.decls[decl].at else {
            return false;
        };
        let total = rt * ct;
        let Some(dst) = self.alloc(SpaceId::MrfTiles, total) else {
            return false;
        };
        // Whole matrix at once, or one tile row per iteration.
        let (iterations, piece_rows) = if rt > 1 && self.r.chance(0.5) {
            (rt, 1)
        } else {
            (1, rt)
        };
        self.set_scalar("rows", piece_rows);
        self.set_scalar("cols", ct);
        if iterations > 1 {
            self.items.push(Item::Swr("iterations", iterations));
        }
        let inc = if iterations > 1 { ct as i32 } else { 0 };
        self.items.push(Item::Matrix {
            src: AddrM { base: src, inc },
            dst: AddrM { base: dst, inc },
        });
        let regs: Vec<u32> = (dst..dst + total).collect();
        self.space(SpaceId::MrfTiles).mark(&regs, None);
        self.mats.push(MatRegion {
            base: dst,
            rt,
            ct,
            declared: false,
        });
        true
    }

    /// An address of `width` initialised registers in `mem` for every iteration, maybe iterated.
    /// Declares a fresh vector there when nothing fits (or by chance).
    pub(super) fn source_addr(&mut self, mem: Mem, width: u32, iterations: u32) -> Option<AddrM> {
        let id = SpaceId::Vec(mem);
        let mut incs = vec![0i32];
        if iterations > 1 {
            incs.extend([width as i32, 1, -(width as i32)]);
        }
        let inc = *self.r.pick(&incs);
        if !self.r.chance(0.4) {
            let sp = self.space_ref(id);
            let cands: Vec<u32> = (0..sp.size())
                .filter(|&a| {
                    let addr = AddrM { base: a, inc };
                    if inc < 0 && (a as i64) + (inc as i64) * (iterations as i64 - 1) < 0 {
                        return false;
                    }
                    let regs = Self::read_regs(addr, width, iterations);
                    sp.in_range(&regs) && sp.all_init(&regs)
                })
                .collect();
            // Prefer what earlier chains wrote: chains then feed each other.
            let fresh: Vec<u32> = cands
                .iter()
                .copied()
                .filter(|&a| {
                    Self::read_regs(AddrM { base: a, inc }, width, iterations)
                        .iter()
                        .all(|&i| sp.fresh[i as usize])
                })
                .collect();
            if !fresh.is_empty() && self.r.chance(0.7) {
                let base = *self.r.pick(&fresh);
                return Some(AddrM { base, inc });
            }
            if !cands.is_empty() {
                let base = *self.r.pick(&cands);
                return Some(AddrM { base, inc });
            }
        }
        // Fresh declaration: one row per iteration (inc = width), or a single row (inc = 0).
        if iterations > 1 && self.r.chance(0.6) {
            let base = self.declare_vector(mem, width, iterations)?;
            Some(AddrM {
                base,
                inc: width as i32,
            })
        } else {
            let base = self.declare_vector(mem, width, 1)?;
            Some(AddrM { base, inc: 0 })
        }
    }

    /// Free destination registers for a write of `width` over the iterations, avoiding `avoid`
    /// (the chain's operand registers).
    pub(super) fn dest_addr(
        &mut self,
        mem: Mem,
        width: u32,
        iterations: u32,
        avoid: &BTreeSet<(Mem, u32)>,
        taken: &BTreeSet<(Mem, u32)>,
    ) -> Option<AddrM> {
        let mut incs = vec![0i32];
        if iterations > 1 {
            incs.extend([width as i32, width as i32, 1]);
        }
        let inc = *self.r.pick(&incs);
        let sp = self.space_ref(SpaceId::Vec(mem));
        let cands: Vec<u32> = (0..sp.size())
            .filter(|&a| {
                let regs = Self::read_regs(AddrM { base: a, inc }, width, iterations);
                sp.in_range(&regs)
                    && regs
                        .iter()
                        .all(|r| !avoid.contains(&(mem, *r)) && !taken.contains(&(mem, *r)))
            })
            .collect();
        if cands.is_empty() {
            return None;
        }
        // Prefer registers already holding data now and then (state updates), else any.
        let base = *self.r.pick(&cands);
        Some(AddrM { base, inc })
    }

    /// A fresh netq row group: `input` when `out` is false, `output` otherwise.
    pub(super) fn netq_decl(&mut self, out: bool, width: u32, iterations: u32) {
        let kind = if out { DKind::Output } else { DKind::Input };
        // Now and then continue the previous row group of the same width: one declaration then
        // feeds (or collects) several chains.
        let n = self.n;
        if let Some(last) = self
            .decls
            .iter_mut()
            .rev()
            .find(|d| d.kind == kind && d.at.is_none())
            && last.shape.last().map_or(0, |c| c.div_ceil(n)) == width as usize
            && self.r.chance(0.3)
        {
            let len = last.shape.last().copied().unwrap_or(1);
            let rows: usize = last.shape[..last.shape.len() - 1].iter().product();
            last.shape = vec![rows + iterations as usize, len];
            return;
        }
        let len = self.row_len(width);
        let shape = self.shape(iterations, len);
        let pad = if out { None } else { self.pad_literal() };
        let quant = if !out && self.r.chance(0.15) {
            Some(mvm_format(&mut self.r, self.n, self.cfg.all_formats))
        } else {
            None
        };
        let name = self.fresh(if out { "y" } else { "x" });
        self.decls.push(DeclM {
            name,
            kind,
            shape,
            at: None,
            zero: false,
            pad,
            quant,
            tiles: (0, 0),
        });
    }

    /// `output ... at mem[a]` declarations over written, undeclared registers.
    pub(super) fn mem_outputs(&mut self) {
        let want = self.r.range(2, 5);
        let mut got = 0;
        let mut cands = self.written.clone();
        // Later writes first: a region written last is the interesting one.
        cands.reverse();
        let mut claimed: BTreeSet<(Mem, u32)> = BTreeSet::new();
        for wr in cands {
            if got >= want {
                break;
            }
            // Contiguous rows only: one row, or rows laid end to end.
            let (rows, base) = if wr.iterations == 1 || wr.inc == 0 {
                (1, wr.base)
            } else if wr.inc == wr.width as i32 {
                (wr.iterations, wr.base)
            } else {
                continue;
            };
            let regs: Vec<u32> = (base..base + rows * wr.width).collect();
            let sp = self.space_ref(SpaceId::Vec(wr.mem));
            if regs
                .iter()
                .any(|&r| sp.decl[r as usize].is_some() || claimed.contains(&(wr.mem, r)))
            {
                continue;
            }
            for &r in &regs {
                claimed.insert((wr.mem, r));
            }
            let len = self.row_len(wr.width);
            let shape = self.shape(rows, len);
            let idx = self.decls.len();
            let name = self.fresh("z");
            self.decls.push(DeclM {
                name,
                kind: DKind::Output,
                shape,
                at: Some((wr.mem, base)),
                zero: false,
                pad: None,
                quant: None,
                tiles: (0, 0),
            });
            self.space(SpaceId::Vec(wr.mem)).mark(&regs, Some(idx));
            got += 1;
        }
    }
}
