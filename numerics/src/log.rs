//! Seed 002's logarithmic formats and its shift-and-add multiply unit.
//!
//! `pot(bits)`: sign bit + an `n = bits - 1` bit code `c`; `c = 0` is zero, otherwise the
//! magnitude is `2^(base + c - 1)`. `twohot(bits, r)`: two pot codes of `bits / 2` bits each,
//! value `t1 * 2^r + t2`. `base` is shared by a block: the smallest exponent such that the
//! block's largest magnitude does not exceed the largest representable one (nothing
//! saturates). Elements round to the nearest representable magnitude (linear domain); ties by
//! the rounding mode, "even" meaning the candidate of even index in the sorted magnitude list.

use crate::float::rand_for;
use crate::format::{PotFormat, TwoHotFormat};
use crate::rounding::{Rounding, decompose, floor_log2};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// One pot code: sign and shift code (0 = zero, else magnitude `2^(base + code - 1)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PotCode {
    pub neg: bool,
    pub code: u32,
}

impl PotCode {
    /// The power of two of the term in units of `2^base` (`code - 1`), `None` for zero.
    pub fn exponent(self) -> Option<u32> {
        self.code.checked_sub(1)
    }

    /// Value in units of `2^base` (an integer): `±2^(code - 1)`, exact for every code the
    /// formats produce (`code <= 127`: `pot(bits = 8)` reaches `2^126`). A code beyond that
    /// (never produced; `i128` holds up to `2^126`) saturates at `±i128::MAX`.
    pub fn units(self) -> i128 {
        let Some(e) = self.exponent() else {
            return 0;
        };
        let m = if e < 127 { 1i128 << e } else { i128::MAX };
        if self.neg { -m } else { m }
    }
}

/// An unsigned 256-bit integer (two `u128` halves; the derived order compares `hi` first):
/// the magnitudes of the widest grids, `twohot(bits = 16, r = 16)`'s `2^142 + 2^126` units,
/// and their sums, exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
struct U256 {
    hi: u128,
    lo: u128,
}

impl U256 {
    const ZERO: U256 = U256 { hi: 0, lo: 0 };

    fn from_u128(v: u128) -> U256 {
        U256 { hi: 0, lo: v }
    }

    /// `2^k`, saturating at `2^255` (the formats' terms stay below `2^143`; a hand-made
    /// code beyond them gets a meaningless value, never a panic).
    fn pow2(k: u32) -> U256 {
        match k {
            0..128 => U256 { hi: 0, lo: 1 << k },
            _ => U256 {
                hi: 1 << (k.min(255) - 128),
                lo: 0,
            },
        }
    }

    fn bitlen(self) -> u32 {
        if self.hi != 0 {
            256 - self.hi.leading_zeros()
        } else {
            128 - self.lo.leading_zeros()
        }
    }

    /// `self + o` (the callers' values stay far below `2^255`).
    fn add(self, o: U256) -> U256 {
        let (lo, carry) = self.lo.overflowing_add(o.lo);
        U256 {
            hi: self.hi.wrapping_add(o.hi).wrapping_add(u128::from(carry)),
            lo,
        }
    }

    /// `self - o` for `self >= o`.
    fn sub(self, o: U256) -> U256 {
        let (lo, borrow) = self.lo.overflowing_sub(o.lo);
        U256 {
            hi: self.hi.wrapping_sub(o.hi).wrapping_sub(u128::from(borrow)),
            lo,
        }
    }

    /// `floor(self / 2^k)`.
    fn shr(self, k: u32) -> U256 {
        match k {
            0 => self,
            1..128 => U256 {
                hi: self.hi >> k,
                lo: (self.lo >> k) | (self.hi << (128 - k)),
            },
            128..256 => U256 {
                hi: 0,
                lo: self.hi >> (k - 128),
            },
            _ => U256::ZERO,
        }
    }

    /// `self * 2^k` for a result below `2^256` (the callers check the bit length).
    fn shl(self, k: u32) -> U256 {
        match k {
            0 => self,
            1..128 => U256 {
                hi: (self.hi << k) | (self.lo >> (128 - k)),
                lo: self.lo << k,
            },
            128..256 => U256 {
                hi: self.lo << (k - 128),
                lo: 0,
            },
            _ => U256::ZERO,
        }
    }
}

/// `mant * 2^d` (`mant < 2^64`) compared with the integer `g`, exactly.
fn cmp_scaled(mant: u64, d: i32, g: U256) -> Ordering {
    if mant == 0 {
        return U256::ZERO.cmp(&g);
    }
    let m = U256::from_u128(u128::from(mant));
    if d >= 0 {
        if m.bitlen() as i64 + i64::from(d) > 255 {
            return Ordering::Greater;
        }
        return m.shl(d as u32).cmp(&g);
    }
    let s = d.unsigned_abs();
    if s >= 64 {
        // `0 < mant * 2^d < 1`.
        return if g == U256::ZERO {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    let int = U256::from_u128(u128::from(mant >> s));
    let frac = mant & ((1u64 << s) - 1) != 0;
    int.cmp(&g).then(if frac {
        Ordering::Greater
    } else {
        Ordering::Equal
    })
}

/// `floor(2^64 * (u - a) / (b - a))` for `u = mant * 2^d` with `a < u < b`: the 64-bit
/// fraction of the way from `a` to `b`, exactly.
fn fraction64(mant: u64, d: i32, a: U256, b: U256) -> u64 {
    // Scale by 2^s so that u is an integer (u < b < 2^144, so s <= 64 keeps every value
    // below 2^209); below 2^-64 of a unit the interval is [0, 1] and u itself is the fraction.
    let s = (-d).max(0);
    if s > 64 {
        // a = 0, b = 1 (every grid holds 0 and 1), fraction = mant * 2^d.
        let sh = (-d - 64) as u32;
        return if sh >= 64 { 0 } else { mant >> sh };
    }
    let s = s as u32;
    let u = U256::from_u128(u128::from(mant)).shl((d + s as i32) as u32);
    let mut rem = u.sub(a.shl(s));
    let den = b.sub(a).shl(s);
    let mut q = 0u64;
    for _ in 0..64 {
        rem = rem.shl(1);
        q <<= 1;
        if rem >= den {
            rem = rem.sub(den);
            q |= 1;
        }
    }
    q
}

/// The sorted non-negative magnitudes (in units of `2^base`) of a log format with `n`-bit
/// codes and first-term offset `r` (`twohot: Some(r)`, pot: `None`), each with one code
/// producing it. Exact for every accepted width: magnitudes reach `2^(2^n - 2 + r + 1)`.
struct Grid {
    mags: Vec<U256>,
    codes: Vec<(PotCode, PotCode)>,
    /// The largest magnitude, to place `base`.
    max: U256,
}

/// `t1 * 2^r + t2` in units, as a sign and a magnitude.
fn term_sum(t1: PotCode, t2: PotCode, r: u32) -> (bool, U256) {
    let term = |t: PotCode, shift: u32| {
        t.exponent()
            .map(|e| (t.neg, U256::pow2(e.saturating_add(shift))))
    };
    let (mut pos, mut neg) = (U256::ZERO, U256::ZERO);
    for (is_neg, m) in [term(t1, r), term(t2, 0)].into_iter().flatten() {
        if is_neg {
            neg = neg.add(m);
        } else {
            pos = pos.add(m);
        }
    }
    if pos >= neg {
        (false, pos.sub(neg))
    } else {
        (true, neg.sub(pos))
    }
}

fn build_grid(n: u32, twohot: Option<u32>) -> Grid {
    let top = (1u32 << n) - 1;
    let mut all: Vec<(U256, (PotCode, PotCode))> = Vec::new();
    let terms: Vec<PotCode> = (0..=top)
        .flat_map(|code| [PotCode { neg: false, code }, PotCode { neg: true, code }])
        .filter(|c| !(c.code == 0 && c.neg))
        .collect();
    match twohot {
        None => {
            for t in terms.iter().filter(|t| !t.neg) {
                let (_, v) = term_sum(*t, PotCode::default(), 0);
                all.push((v, (*t, PotCode::default())));
            }
        }
        Some(r) => {
            for t1 in &terms {
                for t2 in &terms {
                    let (neg, v) = term_sum(*t1, *t2, r);
                    if !neg {
                        all.push((v, (*t1, *t2)));
                    }
                }
            }
        }
    }
    // Keep, per magnitude, the first code in (t1, t2) order: deterministic encoding.
    all.sort_by_key(|(v, (a, b))| (*v, a.neg, a.code, b.neg, b.code));
    all.dedup_by_key(|(v, _)| *v);
    let max = all.last().map_or(U256::ZERO, |(v, _)| *v);
    Grid {
        mags: all.iter().map(|(v, _)| *v).collect(),
        codes: all.iter().map(|(_, c)| *c).collect(),
        max,
    }
}

/// Grids are built once per (code width, r) and shared.
fn grid(n: u32, twohot: Option<u32>) -> &'static Grid {
    type Grids = Mutex<HashMap<(u32, Option<u32>), &'static Grid>>;
    static GRIDS: OnceLock<Grids> = OnceLock::new();
    let map = GRIDS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut guard = match map.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    guard
        .entry((n, twohot))
        .or_insert_with(|| Box::leak(Box::new(build_grid(n, twohot))))
}

/// The smallest `base` with `amax <= max_units * 2^base`, clamped to `[-1074, 1023]`.
fn block_base(amax: f64, max_units: U256) -> i32 {
    let (_, mant, exp) = decompose(amax);
    let lead = max_units.bitlen() as i32 - 1;
    // max_units * 2^b0 < 2^(floor_log2(amax) + 1) ... so b0 or b0 + 1.
    let b0 = floor_log2(amax) - lead;
    let b = if cmp_scaled(mant, exp - b0, max_units) == Ordering::Greater {
        b0 + 1
    } else {
        b0
    };
    b.clamp(-1074, 1023)
}

/// Round `|v| / 2^base` onto the grid; returns the index into `grid.mags`. Every comparison
/// is exact (`|v| = mant * 2^exp` against the integer magnitudes and their midpoints).
fn round_on_grid(g: &Grid, v: f64, base: i32, rounding: Rounding, key: u64) -> usize {
    let (_, mant, exp) = decompose(v);
    let d = exp - base;
    let hi = g
        .mags
        .partition_point(|m| cmp_scaled(mant, d, *m) == Ordering::Greater);
    if hi >= g.mags.len() {
        return g.mags.len() - 1; // saturate
    }
    if hi == 0 || cmp_scaled(mant, d, g.mags[hi]) == Ordering::Equal {
        return hi;
    }
    let lo = hi - 1;
    let (a, b) = (g.mags[lo], g.mags[hi]);
    // u against the midpoint (a + b) / 2: 2u against a + b.
    let mid = cmp_scaled(mant, d + 1, a.add(b));
    let up = match rounding {
        Rounding::NearestEven => {
            mid == Ordering::Greater || (mid == Ordering::Equal && hi % 2 == 0)
        }
        Rounding::NearestAway => mid != Ordering::Less,
        Rounding::TowardZero => false,
        Rounding::Stochastic { .. } => rand_for(rounding, v, key) < fraction64(mant, d, a, b),
    };
    if up { hi } else { lo }
}

/// Codes of one block of finite values: `(base, codes)`; value of code `(t1, t2)` is
/// `(t1 * 2^r + t2) * 2^base` (pot: `t2` unused).
fn encode_block(
    n: u32,
    twohot: Option<u32>,
    x: &[f64],
    rounding: Rounding,
    key: u64,
) -> (i32, Vec<(PotCode, PotCode)>) {
    let g = grid(n, twohot);
    let amax = x.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    if amax == 0.0 {
        return (0, vec![(PotCode::default(), PotCode::default()); x.len()]);
    }
    let base = block_base(amax, g.max);
    let codes = x
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (mut t1, mut t2) = g.codes[round_on_grid(g, *v, base, rounding, key + i as u64)];
            if *v < 0.0 {
                t1.neg = t1.code != 0 && !t1.neg;
                t2.neg = t2.code != 0 && !t2.neg;
            }
            (t1, t2)
        })
        .collect();
    (base, codes)
}

/// `(t1 * 2^r + t2) * 2^base` as an f64: exact whenever f64 holds it (every value the formats
/// quantize to), otherwise correctly rounded (nearest-even; a decoded code can name any
/// pair of powers of two).
fn code_value(t: (PotCode, PotCode), r: u32, base: i32) -> f64 {
    let (neg, v) = term_sum(t.0, t.1, r);
    if v == U256::ZERO {
        return 0.0;
    }
    // Keep the top 127 bits, the rest as a sticky bit (the magnitude spans up to 144 bits).
    let excess = v.bitlen().saturating_sub(127);
    let kept = v.shr(excess);
    let sticky = kept.shl(excess) != v;
    crate::float::FloatFormat::FP64.round_exact(neg, kept.lo, base + excess as i32, sticky)
}

impl PotFormat {
    /// Encode one block: the shared base exponent and one code per element.
    pub fn encode_block(&self, x: &[f64], key: u64) -> (i32, Vec<PotCode>) {
        let (base, codes) = encode_block(self.bits - 1, None, x, self.rounding, key);
        (base, codes.into_iter().map(|c| c.0).collect())
    }

    /// Value of a code with block exponent `base`.
    pub fn value(&self, c: PotCode, base: i32) -> f64 {
        code_value((c, PotCode::default()), 0, base)
    }
}

impl TwoHotFormat {
    /// Code width of each term.
    pub fn term_bits(&self) -> u32 {
        self.bits / 2 - 1
    }

    /// Encode one block: the shared base exponent and the two terms of each element.
    pub fn encode_block(&self, x: &[f64], key: u64) -> (i32, Vec<(PotCode, PotCode)>) {
        encode_block(self.term_bits(), Some(self.r), x, self.rounding, key)
    }

    /// Value of a two-term code with block exponent `base`.
    pub fn value(&self, c: (PotCode, PotCode), base: i32) -> f64 {
        code_value(c, self.r, base)
    }
}

impl PotFormat {
    /// The unit's register for two pot weights multiplied in parallel (power-of-two mode):
    /// `first` drives shifter 1 (output C, accumulator 35b), `second` shifter 2 (output A,
    /// accumulator 35a); shift counts are in units of `2^base`. `None` if a weight is zero.
    pub fn unit_register(&self, first: PotCode, second: PotCode) -> Option<UnitRegister> {
        (first.code != 0 && second.code != 0).then(|| UnitRegister {
            e1: first.code - 1,
            s1: first.neg,
            e2: second.code - 1,
            s2: second.neg,
        })
    }
}

impl TwoHotFormat {
    /// The unit's register for one two-hot weight (two-hot mode, R = `self.r`): `s2` is the
    /// overall sign (the first term's), `s1` subtracts the second term. `None` if a term is 0.
    pub fn unit_register(&self, c: (PotCode, PotCode)) -> Option<UnitRegister> {
        let (t1, t2) = c;
        (t1.code != 0 && t2.code != 0).then(|| UnitRegister {
            e1: t1.code - 1,
            s1: t1.neg != t2.neg,
            e2: t2.code - 1,
            s2: t1.neg,
        })
    }
}

pub(crate) fn pot_block(p: &PotFormat, x: &[f64], out: &mut [f64], key: u64) {
    let (base, codes) = p.encode_block(x, key);
    for (o, c) in out.iter_mut().zip(codes) {
        *o = p.value(c, base);
    }
}

pub(crate) fn twohot_block(t: &TwoHotFormat, x: &[f64], out: &mut [f64], key: u64) {
    let (base, codes) = t.encode_block(x, key);
    for (o, c) in out.iter_mut().zip(codes) {
        *o = t.value(c, base);
    }
}

// ---------------------------------------------------------------------------------------------
// Seed 002's computing unit.

/// The configuration bit of the unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitMode {
    /// One multiplicand with two exponents: `B = (x << e1 << R) ± (x << e2)` into accumulator
    /// 35a.
    TwoHot,
    /// Two multiplicands with one exponent each, in parallel: `C = x << e1` into accumulator
    /// 35b, `A = x << e2` into accumulator 35a (the claims' mapping).
    PowerOfTwo,
}

/// The first register: two exponents with their sign bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitRegister {
    pub e1: u32,
    /// Two-hot: subtract the second shift result instead of adding it. Pot: the first
    /// weight is negative.
    pub s1: bool,
    pub e2: u32,
    /// Two-hot: subtract the product from the accumulator. Pot: the second weight is negative.
    pub s2: bool,
}

/// The three outputs of the multiplier for one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitOutputs {
    /// Second shifter: `x << e2`.
    pub a: i64,
    /// Adder: `(x << e1 << R) ± (x << e2)`.
    pub b: i64,
    /// First shifter: `x << e1` (before the R shifter).
    pub c: i64,
}

/// A bit-accurate model of seed 002's dual-mode shift-and-add unit (Fig. 4): two shifters, an
/// optional R shifter, an adder/subtractor and two sign-controlled accumulators that reset to 0
/// whenever the configuration bit changes. Arithmetic is on i64 with wrapping (the seed gives no
/// widths; callers keep shifts small).
#[derive(Clone, Debug)]
pub struct ShiftUnit {
    pub r: u32,
    mode: UnitMode,
    acc_a: i64,
    acc_b: i64,
}

impl ShiftUnit {
    pub fn new(mode: UnitMode, r: u32) -> Self {
        ShiftUnit {
            r,
            mode,
            acc_a: 0,
            acc_b: 0,
        }
    }

    pub fn mode(&self) -> UnitMode {
        self.mode
    }

    /// Set the configuration bit; a change resets both accumulators to 0.
    pub fn set_mode(&mut self, mode: UnitMode) {
        if mode != self.mode {
            self.mode = mode;
            self.acc_a = 0;
            self.acc_b = 0;
        }
    }

    /// One multiply(-accumulate) step with activation `x` in the current mode.
    pub fn step(&mut self, x: i64, reg: UnitRegister) -> UnitOutputs {
        let c = x.wrapping_shl(reg.e1);
        let a = x.wrapping_shl(reg.e2);
        let first = c.wrapping_shl(self.r);
        let b = if reg.s1 {
            first.wrapping_sub(a)
        } else {
            first.wrapping_add(a)
        };
        match self.mode {
            UnitMode::TwoHot => {
                self.acc_a = if reg.s2 {
                    self.acc_a.wrapping_sub(b)
                } else {
                    self.acc_a.wrapping_add(b)
                };
            }
            UnitMode::PowerOfTwo => {
                // 35a takes A with the sign of the exponent feeding shifter 2, 35b takes C.
                self.acc_a = if reg.s2 {
                    self.acc_a.wrapping_sub(a)
                } else {
                    self.acc_a.wrapping_add(a)
                };
                self.acc_b = if reg.s1 {
                    self.acc_b.wrapping_sub(c)
                } else {
                    self.acc_b.wrapping_add(c)
                };
            }
        }
        UnitOutputs { a, b, c }
    }

    /// The two accumulators (35a, 35b).
    pub fn accumulators(&self) -> (i64, i64) {
        (self.acc_a, self.acc_b)
    }

    /// The further adder: the sum of both accumulators.
    pub fn total(&self) -> i64 {
        self.acc_a.wrapping_add(self.acc_b)
    }
}
