//! Seed 002's logarithmic formats and its shift-and-add multiply unit.
//!
//! `pot(bits)`: sign bit + an `n = bits - 1` bit code `c`; `c = 0` is zero, otherwise the
//! magnitude is `2^(base + c - 1)`. `twohot(bits, r)`: two pot codes of `bits / 2` bits each,
//! value `t1 * 2^r + t2`. `base` is shared by a block: the smallest exponent such that the
//! block's largest magnitude does not exceed the largest representable one (nothing
//! saturates). Elements round to the nearest representable magnitude (linear domain); ties by
//! the rounding mode, "even" meaning the candidate of even index in the sorted magnitude list.

use crate::float::{exceeds, rand_for};
use crate::format::{PotFormat, TwoHotFormat};
use crate::rounding::{Rounding, floor_log2, make_f64, pow2_mul};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// One pot code: sign and shift code (0 = zero, else magnitude `2^(base + code - 1)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PotCode {
    pub neg: bool,
    pub code: u32,
}

impl PotCode {
    /// Value in units of `2^base` (an integer).
    pub fn units(self) -> i64 {
        if self.code == 0 {
            0
        } else {
            let m = 1i64 << (self.code - 1);
            if self.neg { -m } else { m }
        }
    }
}

/// The sorted non-negative magnitudes (in units of `2^base`) of a log format with `n`-bit
/// codes and first-term offset `r` (`twohot: Some(r)`, pot: `None`), each with one code
/// producing it.
struct Grid {
    mags: Vec<u64>,
    codes: Vec<(PotCode, PotCode)>,
    /// Exponent (in units) of the largest magnitude's leading bit, to place `base`.
    max: u64,
}

fn build_grid(n: u32, twohot: Option<u32>) -> Grid {
    let top = (1u32 << n) - 1;
    let mut all: Vec<(u64, (PotCode, PotCode))> = Vec::new();
    let terms: Vec<PotCode> = (0..=top)
        .flat_map(|code| [PotCode { neg: false, code }, PotCode { neg: true, code }])
        .filter(|c| !(c.code == 0 && c.neg))
        .collect();
    match twohot {
        None => {
            for t in &terms {
                if !t.neg {
                    all.push((t.units() as u64, (*t, PotCode::default())));
                }
            }
        }
        Some(r) => {
            for t1 in &terms {
                for t2 in &terms {
                    let v = (t1.units() << r) + t2.units();
                    if v >= 0 {
                        all.push((v as u64, (*t1, *t2)));
                    }
                }
            }
        }
    }
    // Keep, per magnitude, the first code in (t1, t2) order: deterministic encoding.
    all.sort_by_key(|(v, (a, b))| (*v, a.neg, a.code, b.neg, b.code));
    all.dedup_by_key(|(v, _)| *v);
    let max = all.last().map_or(0, |(v, _)| *v);
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

/// The smallest `base` with `amax <= max_units * 2^base`, clamped to `[-128 - 64, 127]`.
fn block_base(amax: f64, max_units: u64) -> i32 {
    let (_, mant, exp) = crate::rounding::decompose(amax);
    let lead = 63 - max_units.leading_zeros() as i32;
    // max_units * 2^b0 < 2^(floor_log2(amax) + 1) ... so b0 or b0 + 1.
    let b0 = floor_log2(amax) - lead;
    let b = if exceeds(u128::from(mant), exp, u128::from(max_units), b0) {
        b0 + 1
    } else {
        b0
    };
    b.clamp(-1074, 1023)
}

/// Round `|v| / 2^base` onto the grid; returns the index into `grid.mags`.
fn round_on_grid(g: &Grid, v: f64, base: i32, rounding: Rounding, key: u64) -> usize {
    let u = pow2_mul(v.abs(), -base);
    let hi = g.mags.partition_point(|m| (*m as f64) < u);
    if hi >= g.mags.len() {
        return g.mags.len() - 1; // saturate
    }
    if g.mags[hi] as f64 == u || hi == 0 {
        return hi;
    }
    let lo = hi - 1;
    let (a, b) = (g.mags[lo] as f64, g.mags[hi] as f64);
    // Midpoint of two integers below 2^53: exact.
    let mid = (a + b) / 2.0;
    let up = match rounding {
        Rounding::NearestEven => u > mid || (u == mid && hi % 2 == 0),
        Rounding::NearestAway => u >= mid,
        Rounding::TowardZero => false,
        Rounding::Stochastic { .. } => {
            let frac = ((u - a) / (b - a) * 18446744073709551616.0) as u64;
            rand_for(rounding, v, key) < frac
        }
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

fn code_value(t: (PotCode, PotCode), r: u32, base: i32) -> f64 {
    let v = (i128::from(t.0.units()) << r) + i128::from(t.1.units());
    if v == 0 {
        0.0
    } else {
        make_f64(v < 0, v.unsigned_abs(), base)
    }
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
