//! Reference activation functions and the 65,536-entry tables of 16-bit MFU formats
//! (NUMERICS.md section 1: the default table is the correctly rounded function).
//!
//! The functions are evaluated in f64 and rounded once to the format. A test checks, for every
//! fp16 and bf16 input, that the f64 value lies farther than 2^-40 (relative) from any rounding
//! midpoint of the output format; since libm's f64 `exp`/`tanh` err by far less than that,
//! the rounded f64 value is the correctly rounded true value.

use crate::FloatFormat;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// An MFU activation with a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Activation {
    Sigmoid,
    Tanh,
    Exp,
}

impl Activation {
    pub const ALL: [Activation; 3] = [Activation::Sigmoid, Activation::Tanh, Activation::Exp];
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
    let built: Vec<u16> = (0..=u16::MAX)
        .map(|i| fmt.encode(eval(kind, fmt.decode(u64::from(i)))) as u16)
        .collect();
    let mut guard = lock(cache);
    let entry = guard
        .entry((kind, *fmt))
        .or_insert_with(|| Box::leak(built.into_boxed_slice()));
    Some(entry)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
