//! Reference activation functions and the 65,536-entry tables of 16-bit MFU formats
//! (docs/numerics.md: the default table is the correctly rounded function).
//!
//! The functions are evaluated in f64 and rounded once to the format. A test checks, for every
//! fp16 and bf16 input, that the f64 value lies farther than 2^-40 (relative) from any rounding
//! midpoint of the output format; since libm's f64 `exp`/`tanh` err by far less than that,
//! the rounded f64 value is the correctly rounded true value.

use crate::{FloatFormat, Rounding};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// An MFU activation with a table: the one description of a table op. Its name gives the
/// mnemonic (`v_<name>`), the target's table-file key (`numerics.tables.<name>`) and the
/// software graph's op name; [`eval`] is its reference semantics, [`Activation::derivative`]
/// its gradient and [`below`] the shape rule of [`rounded`]. Every engine handles any
/// activation through one arm, so a new one is a variant here and its arms below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Activation {
    Sigmoid,
    Tanh,
    Exp,
}

impl Activation {
    /// Every activation, in mnemonic order.
    pub const ALL: [Activation; 3] = [Activation::Sigmoid, Activation::Tanh, Activation::Exp];

    /// The short name: `v_<name>` is the mnemonic, `<name>` the table key and graph op name.
    pub const fn name(self) -> &'static str {
        match self {
            Activation::Sigmoid => "sigm",
            Activation::Tanh => "tanh",
            Activation::Exp => "exp",
        }
    }

    /// The activation of a [`name`](Activation::name).
    pub fn from_name(name: &str) -> Option<Activation> {
        Activation::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The function in f64 ([`eval`]).
    pub fn eval(self, x: f64) -> f64 {
        eval(self, x)
    }

    /// `f'(x)` in f64, given `y = f(x)` (training's gradient: docs/training.md).
    pub fn derivative(self, x: f64, y: f64) -> f64 {
        let _ = x; // for functions whose derivative needs it
        match self {
            Activation::Sigmoid => y * (1.0 - y),
            Activation::Tanh => 1.0 - y * y,
            Activation::Exp => y,
        }
    }
}

/// Serialized by [`Activation::name`].
impl Serialize for Activation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Activation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Activation::from_name(&name).ok_or_else(|| {
            let names: Vec<&str> = Activation::ALL.iter().map(|a| a.name()).collect();
            serde::de::Error::custom(format!(
                "unknown activation `{name}`, expected one of {}",
                names.join(", ")
            ))
        })
    }
}

/// The function in f64 (NaN in, NaN out).
pub fn eval(kind: Activation, x: f64) -> f64 {
    match kind {
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Activation::Tanh => x.tanh(),
        Activation::Exp => x.exp(),
    }
}

/// The table `input bits -> output bits` of a 16-bit float format (`fmt.bits() == 16`, e.g.
/// fp16 or bf16): entry `i` is the encoding of `fmt.round(eval(kind, fmt.decode(i)))`.
/// `None` for other widths.
pub fn table(kind: Activation, fmt: &FloatFormat) -> Option<Vec<u16>> {
    table_ref(kind, fmt).map(<[u16]>::to_vec)
}

/// [`table`], built once per (function, format) and cached for the process.
pub fn table_ref(kind: Activation, fmt: &FloatFormat) -> Option<&'static [u16]> {
    if fmt.bits() != 16 {
        return None;
    }
    type Cache = Mutex<HashMap<(Activation, FloatFormat), &'static [u16]>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(t) = lock(cache).get(&(kind, *fmt)) {
        return Some(t);
    }
    // Built outside the lock (a few ms); a concurrent duplicate build is harmless.
    let built = entries(|i| fmt.encode(rounded(kind, fmt, fmt.decode(u64::from(i)))) as u16);
    let mut guard = lock(cache);
    let entry = guard
        .entry((kind, *fmt))
        .or_insert_with(|| Box::leak(built.into_boxed_slice()));
    Some(entry)
}

/// `f(x)` correctly rounded to `fmt`, from its f64 value. To nearest, the f64 value decides
/// (it lies farther than 2^-40 from every midpoint of the 16-bit formats: `tests/activation.rs`).
/// Toward zero the decision points are the grid points themselves, and f(x) for x != 0 is
/// never one (e^x is transcendental for algebraic x != 0, and so are sigmoid and tanh); where
/// the f64 value is on or within 2^-40 of a grid point `g`, the side of `g` the true value is
/// on comes from the function's shape ([`below`]): sigmoid(x) < 1 and tanh |x| < 1 for x
/// large, which f64 rounds to 1; |tanh x| < |x| for x tiny, which f64 rounds to x; sigmoid and
/// e^x around 0.5 and 1 as x's sign says.
pub fn rounded(kind: Activation, fmt: &FloatFormat, x: f64) -> f64 {
    let v = eval(kind, x);
    if fmt.rounding != Rounding::TowardZero || !v.is_finite() || v == 0.0 || x == 0.0 {
        return fmt.round(v);
    }
    let nearest = FloatFormat {
        rounding: Rounding::NearestEven,
        ..*fmt
    };
    let g = nearest.round(v);
    if !g.is_finite() || (v - g).abs() > g.abs() * crate::pow2(-40) {
        return fmt.round(v);
    }
    match below(kind, x, g) {
        // The next grid point toward zero (neighbours are 2^-11 apart or more, relative).
        Some(true) => fmt.round(g * (1.0 - crate::pow2(-30))),
        Some(false) => g,
        None => fmt.round(v),
    }
}

/// Whether |f(x)| < |g| for a grid point `g` that f(x) is within 2^-40 of, where the
/// function's shape tells (`None` elsewhere: `tests/activation.rs` checks that no 16-bit
/// input reaches it).
pub fn below(kind: Activation, x: f64, g: f64) -> Option<bool> {
    match kind {
        Activation::Sigmoid if g == 1.0 => Some(true),
        Activation::Sigmoid if g == 0.5 => Some(x < 0.0),
        Activation::Tanh if g.abs() == 1.0 || g == x => Some(true),
        Activation::Exp if g == 1.0 => Some(x < 0.0),
        _ => None,
    }
}

/// `[entry(0), .., entry(65535)]`, in parts on the machine's threads: every entry is
/// independent, and a table is much of a small program's first run (about 5 ms of work each
/// here, once per process).
fn entries(entry: impl Fn(u16) -> u16 + Sync) -> Vec<u16> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(16));
    entries_in(threads, entry)
}

/// [`entries`] in `parts` parts (1 to 64): the first on this thread, each other one on a
/// thread of its own, or on this one where a thread cannot be started.
fn entries_in(parts: usize, entry: impl Fn(u16) -> u16 + Sync) -> Vec<u16> {
    const LEN: usize = 1 << 16;
    let len = LEN.div_ceil(parts.clamp(1, 64));
    // Every index below LEN is a u16.
    let part = |p: usize| -> Vec<u16> {
        (p * len..LEN.min(p * len + len))
            .map(|i| entry(i as u16))
            .collect()
    };
    std::thread::scope(|s| {
        let others: Vec<_> = (1..LEN.div_ceil(len))
            .map(|p| {
                (
                    p,
                    std::thread::Builder::new().spawn_scoped(s, move || part(p)),
                )
            })
            .collect();
        let mut table = part(0);
        for (p, spawned) in others {
            match spawned.map(|h| h.join()) {
                Ok(Ok(v)) => table.extend(v),
                // Not started (or failed): this thread builds the part.
                _ => table.extend(part(p)),
            }
        }
        table
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every entry once, in order, whatever the split: parts that divide 65,536, parts that do
    /// not (the last one shorter), one part, and counts outside 1 to 64 (clamped).
    #[test]
    fn entries_in_parts_are_every_entry_in_order() {
        // A bijection of u16 (odd multiplier), so a swapped or repeated part shows.
        let f = |i: u16| i.wrapping_mul(40_503) ^ 0x5a5a;
        let want: Vec<u16> = (0..=u16::MAX).map(f).collect();
        for parts in [0, 1, 2, 3, 7, 16, 64, 1000] {
            assert!(entries_in(parts, f) == want, "{parts} parts");
        }
    }
}
