//! The generator: a model of the machine state that emits only instructions the checker
//! accepts, and the format literals it draws from.

use super::{GenConfig, Rng};
use nnp_grammar::{Accumulation, Mem, OpKind, Unit};
use std::collections::BTreeSet;
use std::fmt::Write as _;

// Format literals the generator draws from.

const MX_ELEMS: &[&str] = &[
    "fp8e4m3", "fp8e5m2", "fp6e3m2", "fp6e2m3", "fp4e2m1", "int8",
];

/// `, round = ...` (nearest-even by default, so often nothing).
fn round_arg(r: &mut Rng) -> String {
    match r.below(8) {
        0 => ", round = away".into(),
        1 => ", round = zero".into(),
        2 => ", round = even".into(),
        3 => format!(", round = stochastic(seed = {})", r.below(1000)),
        _ => String::new(),
    }
}

/// Block sizes: divisors of N, sometimes more than a tile.
fn block_size(r: &mut Rng, n: usize) -> usize {
    let mut blocks: Vec<usize> = (2..=n).filter(|&b| n.is_multiple_of(b)).collect();
    if blocks.is_empty() || r.chance(0.1) {
        blocks = vec![32];
    }
    *r.pick(&blocks)
}

/// A random MVM-input format. With `all`, the whole catalogue of docs/numerics.md;
/// otherwise BFP, MSFP, MX, reduced floats, bf16 and fp16.
fn mvm_format(r: &mut Rng, n: usize, all: bool) -> String {
    let pick = r.below(if all { 22 } else { 16 });
    match pick {
        0..=6 => {
            let mut s = format!("bfp(mant = {}", r.range(2, 8));
            if r.chance(0.3) {
                let _ = write!(s, ", exp_bits = {}", r.pick(&[3, 4, 5, 6, 8]));
            }
            s.push_str(&round_arg(r));
            if r.chance(0.2) {
                let _ = write!(s, ", block = {}", block_size(r, n));
            }
            if r.chance(0.1) {
                s.push_str(", range = full");
            }
            s.push(')');
            s
        }
        7 => format!("msfp(mant = {}{})", r.pick(&[4, 5, 8]), round_arg(r)),
        8..=10 => format!(
            "mx(elem = {}, block = {}{})",
            r.pick(MX_ELEMS),
            block_size(r, n),
            round_arg(r)
        ),
        11 | 12 => {
            let (e, m) = *r.pick(&[(5, 2), (4, 3), (5, 3), (3, 2), (6, 5)]);
            let mut s = format!("fp({e}, {m}");
            if r.chance(0.2) {
                s.push_str(", overflow = sat");
            }
            if r.chance(0.2) {
                s.push_str(", subnormals = false");
            }
            s.push_str(&round_arg(r));
            s.push(')');
            s
        }
        13 => "bf16".into(),
        14 | 15 => "fp16".into(),
        16 => r
            .pick(&[
                "mx9",
                "mx6",
                "mx4",
                "hbfp(mant = 4, levels = 1, scale_cap = 1, block = 16)",
            ])
            .to_string(),
        17 => format!(
            "int(bits = {}, scale = {}, per = {}{})",
            r.range(3, 8),
            r.pick(&["f32", "pow2"]),
            r.pick(&["tensor", "row"]),
            round_arg(r)
        ),
        18 => format!(
            "fixed(int = {}, frac = {}{})",
            r.range(2, 6),
            r.range(2, 10),
            round_arg(r)
        ),
        19 => format!(
            "dynfixed(bits = {}, policy = {})",
            r.range(4, 8),
            r.pick(&["max", "overflow(ppm = 10000)"])
        ),
        20 => format!("pot(bits = {})", r.range(3, 6)),
        _ => format!("twohot(bits = {})", r.pick(&[4, 6, 8])),
    }
}

/// Float MVM input pairs (vector, matrix) whose products are exact in f64 with no bit to
/// spare (52 or 53 significand bits between them), or are not (wider, or exponents too wide):
/// the float path's bounded and sliced products at their edges.
const WIDE_MVM: [(&str, &str); 5] = [
    ("fp(8, 25)", "fp(8, 25)"),
    ("fp32", "fp(8, 28)"),
    ("fp(6, 26)", "fp(6, 25)"),
    ("fp(11, 26)", "fp(11, 25)"),
    ("fp(8, 30)", "fp(8, 30)"),
];

/// `lit` (a float literal) with the rounding mode `round` (a [`round_arg`]), written as
/// `fp(e, m, ...)`.
fn float_rounded(lit: &str, round: &str) -> String {
    if round.is_empty() || lit.contains("round") {
        return lit.to_string();
    }
    let long = match lit {
        "fp16" => "fp(5, 10)",
        "bf16" => "fp(8, 7)",
        "fp32" => "fp(8, 23)",
        other => other,
    };
    match long.strip_suffix(')') {
        Some(head) => format!("{head}{round})"),
        None => long.to_string(),
    }
}

/// A float rounding mode for a float format now and then (nearest-even, the default, mostly),
/// from its own stream `rr`, so that the rest of a seed's program is what it was before the
/// knob: directed and stochastic roundings of MFU results, MVM outputs and storage.
fn float_round(rr: &mut Rng) -> String {
    if rr.chance(0.3) {
        round_arg(rr)
    } else {
        String::new()
    }
}

/// The storage format, from its own stream: fp16 mostly; bf16, fp32 (wide ranges reach the
/// MFUs) and fp16 rounded otherwise now and then.
fn storage_format(rr: &mut Rng) -> String {
    if rr.chance(0.7) {
        return "fp16".into();
    }
    let lit = *rr.pick(&["fp16", "bf16", "fp32", "fp32"]);
    let round = round_arg(rr);
    float_rounded(lit, &round)
}

/// A random float format for `mvm.output`.
fn output_format(r: &mut Rng, rr: &mut Rng) -> String {
    let lit = r.pick(&[
        "fp16",
        "fp16",
        "fp16",
        "bf16",
        "fp32",
        "fp(5, 3)",
        "fp(5, 10, overflow = sat)",
        "fp(5, 10, round = zero)",
        "fp(8, 10)",
    ]);
    float_rounded(lit, &float_round(rr))
}

/// A random float format for `mfu.input`.
fn mfu_format(r: &mut Rng, rr: &mut Rng, wide: bool) -> String {
    let lit = if wide && r.chance(0.25) {
        r.pick(&[
            "fp32",
            "fp(5, 3)",
            "fp(4, 3)",
            "fp(5, 10, overflow = sat)",
            "fp(8, 10)",
        ])
    } else {
        r.pick(&["fp16", "fp16", "fp16", "bf16"])
    };
    // Now and then (from `rr`, so the program stays the same) a format as wide as f64 or
    // nearly: MFU results that f64 arithmetic cannot round alone.
    let lit = match (wide, rr.below(20)) {
        (true, 0) => "fp(11, 52)",
        (true, 1) => "fp(10, 45)",
        _ => lit,
    };
    float_rounded(lit, &float_round(rr))
}

// The program model.

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

    /// Declare a vector of `rows` rows of `w` tiles in `mem` (allocated in untouched registers).
    /// Returns the base register.
    fn declare_vector(&mut self, mem: Mem, w: u32, rows: u32) -> Option<u32> {
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
    fn declare_matrix(&mut self, rt: u32, ct: u32) -> bool {
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

    fn set_scalar(&mut self, reg: &'static str, v: u32) {
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
    fn copy_matrix(&mut self, decl: usize) -> bool {
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

    /// An address of `width` initialised registers in `mem` for every iteration, maybe iterated.
    /// Declares a fresh vector there when nothing fits (or by chance).
    fn source_addr(&mut self, mem: Mem, width: u32, iterations: u32) -> Option<AddrM> {
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
    fn dest_addr(
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

    /// A fresh netq row group: `input` when `out` is false, `output` otherwise.
    fn netq_decl(&mut self, out: bool, width: u32, iterations: u32) {
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
        let mut mv_mul = None;
        let width;
        let read_tiles;
        if use_mvm {
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
                return;
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
            self.set_scalar("rows", rows);
            self.set_scalar("cols", cols);
            mv_mul = Some(AddrM { base, inc });
            width = rows;
            read_tiles = cols;
        } else {
            width = self.r.range(1, max_t) as u32;
            self.set_scalar("rows", width);
            read_tiles = width;
        }

        // The read.
        let mut windowed = false;
        let src;
        let src_addr;
        let try_window = read_tiles > 1 && self.r.chance(0.3);
        if try_window {
            // win_w * win_h == read_tiles; an image of one-tile pixels with `pitch` per row.
            let divs: Vec<u32> = (1..=read_tiles).filter(|d| read_tiles % d == 0).collect();
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
            match self.declare_vector(mem, 1, img_rows * pitch) {
                Some(base) => {
                    self.win_regs(w, h, pitch);
                    windowed = true;
                    src = mem;
                    src_addr = AddrM { base, inc };
                }
                None => return,
            }
        } else {
            let mems = if use_mvm {
                vec![Mem::Ivrf]
            } else {
                let mut v = self.vector_mems();
                v.push(Mem::Netq);
                v.push(Mem::Netq);
                v
            };
            src = *self.r.pick(&mems);
            if src == Mem::Netq {
                self.netq_decl(false, read_tiles, iterations);
                src_addr = AddrM { base: 0, inc: 0 };
            } else {
                match self.source_addr(src, read_tiles, iterations) {
                    Some(a) => src_addr = a,
                    None => return,
                }
            }
        }

        // MFU ops and their operands.
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
            if let Some(a) = self.dest_addr(mem, width, iterations, &operand_regs, &taken) {
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

    /// `output ... at mem[a]` declarations over written, undeclared registers.
    fn mem_outputs(&mut self) {
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

    pub(super) fn build(&mut self) {
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

    // -----------------------------------------------------------------------------------------
    // Rendering.

    /// `mem[expr]`, using a declaration's name for its base now and then.
    fn addr_text(&mut self, mem: Mem, base: u32, tile_space: bool) -> String {
        if mem == Mem::Netq {
            return "netq".into();
        }
        let owner = self.decls.iter().find(|d| match d.at {
            Some((m, b)) if d.kind != DKind::Output => {
                let len = if d.kind == DKind::Matrix {
                    d.tiles.0 * d.tiles.1
                } else {
                    let w = d.shape.last().copied().unwrap_or(1).div_ceil(self.n) as u32;
                    let rows: usize = d.shape[..d.shape.len() - 1].iter().product();
                    w * rows as u32
                };
                let same_space = if tile_space {
                    m == mem && d.kind == DKind::Matrix
                } else {
                    m == mem && d.kind != DKind::Matrix
                };
                same_space && base >= b && base < b + len
            }
            _ => false,
        });
        if let Some(d) = owner
            && self.r.chance(0.6)
        {
            let (_, b) = d.at.unwrap_or((mem, 0));
            let name = d.name.clone();
            return if base == b {
                format!("{mem}[{name}]")
            } else {
                format!("{mem}[{name} + {}]", base - b)
            };
        }
        if base > 2 && self.r.chance(0.1) {
            let a = self.r.range(1, base as i64 - 1);
            return format!("{mem}[{a} + {}]", base as i64 - a);
        }
        format!("{mem}[{base}]")
    }

    /// An instruction with an address, with an increment in one of its two spellings.
    fn instr(&mut self, mnemonic: &str, mem: Mem, a: AddrM) -> String {
        let tile_space = matches!(mnemonic, "m_rd" | "m_wr" | "mv_mul");
        let at = self.addr_text(mem, a.base, tile_space);
        if a.inc == 0 || mem == Mem::Netq {
            format!("{mnemonic} {at}")
        } else if self.r.chance(0.5) {
            format!("{mnemonic}_inc {at}, {}", a.inc)
        } else {
            format!("{mnemonic} {at} + {}", a.inc)
        }
    }

    fn decl_text(&self, d: &DeclM) -> String {
        let kw = match d.kind {
            DKind::Matrix => "matrix",
            DKind::Vector => "vector",
            DKind::Input => "input",
            DKind::Output => "output",
        };
        let dims: Vec<String> = d.shape.iter().map(|x| x.to_string()).collect();
        let mut s = format!("{kw} {} : [{}]", d.name, dims.join(", "));
        if let Some((m, b)) = d.at {
            let _ = write!(s, " at {m}[{b}]");
        }
        if let Some(p) = &d.pad {
            let _ = write!(s, " pad {p}");
        }
        if let Some(q) = &d.quant {
            let _ = write!(s, " quant {q}");
        }
        if d.zero {
            s.push_str(" = 0");
        }
        s
    }

    pub(super) fn render(&mut self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "// generated by nnpc::progen, seed {}", self.seed);
        // Declarations: inputs and netq outputs keep their order (it is the netq order); the
        // others are shuffled in between.
        let netq =
            |d: &DeclM| d.kind == DKind::Input || (d.kind == DKind::Output && d.at.is_none());
        let (mut rest, mut queue): (Vec<usize>, Vec<usize>) =
            (0..self.decls.len()).partition(|&i| !netq(&self.decls[i]));
        let mut order = Vec::new();
        queue.reverse();
        while !rest.is_empty() || !queue.is_empty() {
            if !rest.is_empty() && (queue.is_empty() || self.r.chance(0.5)) {
                let i = self.r.below(rest.len() as u64) as usize;
                order.push(rest.remove(i));
            } else if let Some(i) = queue.pop() {
                order.push(i);
            }
        }
        for i in order {
            let line = self.decl_text(&self.decls[i]);
            out.push_str(&line);
            out.push('\n');
        }
        let items = self.items.clone();
        for it in items {
            match it {
                Item::Quant(p, f) => {
                    let _ = writeln!(out, "quant {p} = {f}");
                }
                Item::Swr(reg, v) => {
                    let _ = writeln!(out, "s_wr {reg}, {v}");
                }
                Item::Matrix { src, dst, .. } => {
                    let a = self.instr("m_rd", Mem::Dram, src);
                    let b = self.instr("m_wr", Mem::Mrf, dst);
                    let _ = writeln!(out, "{a}\n{b}\nend_chain");
                }
                Item::Vector(chain) => {
                    let rd = if chain.windowed { "v_rd_2d" } else { "v_rd" };
                    let line = self.instr(rd, chain.src, chain.src_addr);
                    let _ = writeln!(out, "{line}");
                    if let Some(a) = chain.mv_mul {
                        let line = self.instr("mv_mul", Mem::Mrf, a);
                        let _ = writeln!(out, "{line}");
                    }
                    for (k, operand) in &chain.ops {
                        let line = match operand {
                            Some((m, a)) => self.instr(k.mnemonic(), *m, *a),
                            None => k.mnemonic().to_string(),
                        };
                        let _ = writeln!(out, "{line}");
                    }
                    for (m, a) in &chain.writes {
                        let line = self.instr("v_wr", *m, *a);
                        let _ = writeln!(out, "{line}");
                    }
                    out.push_str("end_chain\n");
                }
            }
        }
        out
    }

    pub(super) fn target_toml(&self) -> String {
        let [ivrf, asvrf, mulvrf, mrf, dram, dram_tiles] = self.sizes;
        let [mv, mm, mo, mf] = &self.defaults;
        format!(
            "name = \"gen-{seed}\"\nnative = {n}\nmfus = {mfus}\n\n[memory]\nivrf = {ivrf}\n\
             asvrf = {asvrf}\nmulvrf = {mulvrf}\nmrf = {mrf}\ndram = {dram}\n\
             dram_tiles = {dram_tiles}\n\n[numerics]\nstorage = \"{storage}\"\n\
             mvm_vector = \"{mv}\"\nmvm_matrix = \"{mm}\"\nmvm_output = \"{mo}\"\n\
             mfu_input = \"{mf}\"\naccumulation = \"{acc}\"\n{nf}",
            seed = self.seed,
            n = self.n,
            mfus = self.mfus,
            acc = self.accumulation,
            storage = self.storage,
            nf = if self.nonfinite_error {
                "nonfinite = \"error\"\n"
            } else {
                ""
            },
        )
    }
}
