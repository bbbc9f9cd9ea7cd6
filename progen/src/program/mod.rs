//! The generator's model of the machine state (address spaces, declarations, chains, the
//! scalar registers) and the generator itself: [`Gen::new`] draws the target, `declare.rs`
//! places declarations and addresses, `chain.rs` builds the chains (`Gen::build`), `render.rs`
//! writes the firmware and the target TOML, `formats.rs` holds the format literals drawn.

mod chain;
mod declare;
mod formats;
mod render;

use crate::{GenConfig, Rng};
use formats::{
    WIDE_MVM, float_round, float_rounded, mfu_format, mvm_format, output_format, storage_format,
};
use nnp_grammar::{Accumulation, Mem, OpKind, Unit};

/// One address space: per register, whether it holds data and which declaration owns it.
#[derive(Clone, Debug)]
struct Space {
    init: Vec<bool>,
    /// Declared or written at some point: new declarations only go where nothing was.
    touched: Vec<bool>,
    decl: Vec<Option<usize>>,
    /// Written by a chain (reading it makes chains depend on each other).
    fresh: Vec<bool>,
}

impl Space {
    fn new(size: u32) -> Self {
        Space {
            init: vec![false; size as usize],
            touched: vec![false; size as usize],
            decl: vec![None; size as usize],
            fresh: vec![false; size as usize],
        }
    }
    fn size(&self) -> u32 {
        self.init.len() as u32
    }
    /// A random base of `len` untouched registers.
    fn alloc(&self, r: &mut Rng, len: u32) -> Option<u32> {
        let free: Vec<u32> = (0..=self.size().saturating_sub(len))
            .filter(|&a| {
                (a..a + len).all(|i| !self.touched.get(i as usize).copied().unwrap_or(true))
            })
            .collect();
        if free.is_empty() || len == 0 || len > self.size() {
            None
        } else {
            Some(*r.pick(&free))
        }
    }
    fn all_init(&self, regs: &[u32]) -> bool {
        regs.iter()
            .all(|&i| self.init.get(i as usize).copied().unwrap_or(false))
    }
    fn in_range(&self, regs: &[u32]) -> bool {
        regs.iter().all(|&i| i < self.size())
    }
    fn mark(&mut self, regs: &[u32], decl: Option<usize>) {
        for &i in regs {
            self.init[i as usize] = true;
            self.touched[i as usize] = true;
            if decl.is_some() {
                self.decl[i as usize] = decl;
            } else {
                self.fresh[i as usize] = true;
            }
        }
    }
}

/// Which space a vector memory lives in (matrix tile spaces are separate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SpaceId {
    Vec(Mem),
    MrfTiles,
    DramTiles,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum DKind {
    Matrix,
    Vector,
    Input,
    Output,
}

#[derive(Clone, Debug)]
struct DeclM {
    name: String,
    kind: DKind,
    shape: Vec<usize>,
    /// Memory and base (matrices at dram use the tile space).
    at: Option<(Mem, u32)>,
    zero: bool,
    pad: Option<String>,
    quant: Option<String>,
    /// For matrices: tile rows and tile columns.
    tiles: (u32, u32),
}

#[derive(Clone, Copy, Debug)]
struct AddrM {
    base: u32,
    inc: i32,
}

#[derive(Clone, Debug)]
struct VChainM {
    src: Mem,
    src_addr: AddrM,
    /// Read through a `v_rd_2d` window (its registers are set by a preceding `s_wr`).
    windowed: bool,
    mv_mul: Option<AddrM>,
    ops: Vec<(OpKind, Option<(Mem, AddrM)>)>,
    writes: Vec<(Mem, AddrM)>,
}

#[derive(Clone, Debug)]
enum Item {
    Quant(&'static str, String),
    Swr(&'static str, u32),
    Vector(VChainM),
    Matrix { src: AddrM, dst: AddrM },
}

/// A region of mrf tiles that holds a matrix usable by `mv_mul`.
#[derive(Clone, Debug)]
struct MatRegion {
    base: u32,
    rt: u32,
    ct: u32,
    /// A declared matrix must be multiplied in its own layout (`cols` = its tile columns);
    /// copied tiles may be cut anywhere.
    declared: bool,
}

/// A written region an `output ... at` may read back.
#[derive(Clone, Debug)]
struct Written {
    mem: Mem,
    width: u32,
    iterations: u32,
    inc: i32,
    base: u32,
}

pub(super) struct Gen<'c> {
    cfg: &'c GenConfig,
    r: Rng,
    seed: u64,
    n: usize,
    mfus: usize,
    sizes: [u32; 6],
    accumulation: &'static str,
    /// A quarter of the targets forbid NaN/Inf (`nonfinite = "error"`): both engines must then
    /// stop at the same value (drawn from its own stream, so the rest of a seed's program is
    /// what it was before the knob).
    nonfinite_error: bool,
    /// The stream of the float formats' rounding modes ([`float_round`]).
    rr: Rng,
    /// The target's storage format ([`storage_format`]).
    storage: String,
    defaults: [String; 4],
    spaces: Vec<(SpaceId, Space)>,
    decls: Vec<DeclM>,
    items: Vec<Item>,
    mats: Vec<MatRegion>,
    /// Matrices declared at dram and not yet copied: (decl index).
    dram_mats: Vec<usize>,
    written: Vec<Written>,
    rows: u32,
    cols: u32,
    win: Option<(u32, u32, u32)>,
    counter: usize,
}

impl<'c> Gen<'c> {
    pub(super) fn new(seed: u64, cfg: &'c GenConfig) -> Self {
        let mut r = Rng::new(seed);
        let natives = if cfg.natives.is_empty() {
            vec![8]
        } else {
            cfg.natives.clone()
        };
        let n = *r.pick(&natives);
        let mfus = r.range(1, cfg.max_mfus.max(1) as i64) as usize;
        let mut sz = |lo: i64, hi: i64| (r.range(lo, hi) * 8) as u32;
        // ivrf, asvrf, mulvrf, mrf, dram, dram_tiles
        let sizes = [sz(4, 8), sz(3, 6), sz(3, 6), sz(4, 8), sz(6, 12), sz(3, 6)];
        let accumulation = r.pick(&Accumulation::ALL).name();
        let mut rr = Rng::keyed(seed, "roundings");
        let mut defaults = [
            mvm_format(&mut r, n, cfg.all_formats),
            mvm_format(&mut r, n, cfg.all_formats),
            output_format(&mut r, &mut rr),
            mfu_format(&mut r, &mut rr, cfg.wide_mfu_formats),
        ];
        // Now and then (from a stream of its own, so the program stays the same) float MVM
        // inputs too wide for exact tile sums in f64: the float path's bounded and sliced
        // products.
        let mut wide = Rng::keyed(seed, "wide-mvm");
        if cfg.all_formats && wide.chance(0.12) {
            let (v, m) = *wide.pick(&WIDE_MVM);
            defaults[0] = float_rounded(v, &float_round(&mut wide));
            defaults[1] = float_rounded(m, &float_round(&mut wide));
        }
        let mut spaces = vec![
            (SpaceId::Vec(Mem::Ivrf), Space::new(sizes[0])),
            (SpaceId::Vec(Mem::Dram), Space::new(sizes[4])),
            (SpaceId::MrfTiles, Space::new(sizes[3])),
            (SpaceId::DramTiles, Space::new(sizes[5])),
        ];
        for k in 0..mfus as u8 {
            spaces.push((SpaceId::Vec(Mem::AsVrf(k)), Space::new(sizes[1])));
            spaces.push((SpaceId::Vec(Mem::MulVrf(k)), Space::new(sizes[2])));
        }
        Gen {
            cfg,
            r,
            seed,
            n,
            mfus,
            sizes,
            accumulation,
            nonfinite_error: Rng::keyed(seed, "nonfinite").chance(0.25),
            storage: storage_format(&mut Rng::keyed(seed, "storage")),
            rr,
            defaults,
            spaces,
            decls: Vec::new(),
            items: Vec::new(),
            mats: Vec::new(),
            dram_mats: Vec::new(),
            written: Vec::new(),
            rows: 1,
            cols: 1,
            win: None,
            counter: 0,
        }
    }

    /// Index of a space (every space the target has exists; placement never asks for others).
    fn space_index(&self, id: SpaceId) -> usize {
        self.spaces.iter().position(|(s, _)| *s == id).unwrap_or(0)
    }

    fn space(&mut self, id: SpaceId) -> &mut Space {
        let i = self.space_index(id);
        &mut self.spaces[i].1
    }

    fn space_ref(&self, id: SpaceId) -> &Space {
        &self.spaces[self.space_index(id)].1
    }

    /// A random base of `len` untouched registers of a space.
    fn alloc(&mut self, id: SpaceId, len: u32) -> Option<u32> {
        let i = self.space_index(id);
        self.spaces[i].1.alloc(&mut self.r, len)
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    /// A logical row length needing exactly `w` native tiles.
    fn row_len(&mut self, w: u32) -> usize {
        let n = self.n;
        let w = w as usize;
        if self.r.chance(0.5) {
            w * n
        } else {
            self.r.range(((w - 1) * n + 1) as i64, (w * n) as i64) as usize
        }
    }

    /// A shape of `rows` rows (1-D when `rows == 1` most of the time) of length `len`.
    fn shape(&mut self, rows: u32, len: usize) -> Vec<usize> {
        let rows = rows as usize;
        if rows == 1 && self.r.chance(0.7) {
            vec![len]
        } else if rows.is_multiple_of(2) && rows > 2 && self.r.chance(0.3) {
            vec![2, rows / 2, len]
        } else {
            vec![rows, len]
        }
    }

    fn pad_literal(&mut self) -> Option<String> {
        if !self.r.chance(0.3) {
            return None;
        }
        Some(
            self.r
                .pick(&["0", "1", "-1", "0.5", "-65504", "65504", "-3.25", "1024"])
                .to_string(),
        )
    }

    /// Registers `width` consecutive registers from `addr` cover over all iterations. An
    /// address below 0 or beyond u32 shows as `u32::MAX`, which no memory holds.
    fn read_regs(addr: AddrM, width: u32, iterations: u32) -> Vec<u32> {
        let mut v = Vec::new();
        for t in 0..iterations {
            let a = addr.base as i64 + addr.inc as i64 * t as i64;
            v.extend((a..a + width as i64).map(|r| u32::try_from(r).unwrap_or(u32::MAX)));
        }
        v
    }

    fn vector_mems(&self) -> Vec<Mem> {
        let mut v = vec![Mem::Ivrf, Mem::Dram];
        for k in 0..self.mfus as u8 {
            v.push(Mem::AsVrf(k));
            v.push(Mem::MulVrf(k));
        }
        v
    }

    /// Place ops with the MFU rule, dropping those that would need a missing MFU.
    fn place(&self, kinds: &[OpKind]) -> Vec<(OpKind, u8)> {
        let mut out = Vec::new();
        let mut mfu = 0u8;
        let mut used: Vec<Unit> = Vec::new();
        for &k in kinds {
            let u = k.unit();
            if used.contains(&u) {
                mfu += 1;
                used.clear();
            }
            if mfu as usize >= self.mfus {
                break;
            }
            used.push(u);
            out.push((k, mfu));
        }
        out
    }
}
