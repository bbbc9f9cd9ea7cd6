//! Block formats: BFP / MSFP (docs/numerics.md), OCP MX v1.0, and seed 000's hierarchical
//! BFP. Each `*_block` function quantizes one block of finite values; `Format::quantize` cuts
//! runs into blocks and handles non-finite blocks. Shared exponents come from the bits
//! ([`floor_log2`]), never from a float `log2`.

use crate::float::rand_for;
use crate::format::{BfpFormat, HbfpFormat, MxElem, MxFormat};
use crate::rounding::{decompose, floor_log2, make_f64, round_to_quantum};

/// `floor(log2 |x|)` of the largest non-zero magnitude of a block, or `None` if all are zero.
pub fn max_exponent(x: &[f64]) -> Option<i32> {
    x.iter()
        .filter(|v| **v != 0.0)
        .map(|v| floor_log2(*v))
        .max()
}

/// Round `|x| / 2^q` to an integer with `rounding` (exact); `key` is the element position.
pub(crate) fn round_mag(x: f64, q: i32, rounding: crate::Rounding, key: u64) -> u128 {
    let (_, mant, exp) = decompose(x);
    round_to_quantum(
        u128::from(mant),
        exp,
        false,
        q,
        rounding,
        rand_for(rounding, x, key),
    )
}

impl BfpFormat {
    /// Clamp range of the shared exponent: `[1 - 2^(w-1), 2^(w-1)]`.
    pub fn exp_range(&self) -> (i32, i32) {
        let h = 1i32 << (self.exp_bits - 1);
        (1 - h, h)
    }

    /// Largest mantissa magnitude `2^(mant-1) - 1`.
    pub fn max_mant(&self) -> i64 {
        (1i64 << (self.mant - 1)) - 1
    }

    /// Quantize one block of finite values to integer mantissas `q` (same length as `x`):
    /// the values are `q[i] * 2^lsb`. Returns `(E, lsb)`: the clamped shared exponent and the
    /// weight exponent of a mantissa LSB, `E - (mant - 2)`. `base` is the position of `x[0]` in
    /// its run (stochastic rounding draws). An all-zero block has `E` = the lowest exponent.
    pub fn block_mantissas(&self, x: &[f64], q: &mut [i64], base: u64) -> (i32, i32) {
        let (lo, hi) = self.exp_range();
        let e = max_exponent(x).map_or(lo, |e| e.clamp(lo, hi));
        let lsb = e - (self.mant as i32 - 2);
        let max = self.max_mant();
        for (i, (v, qi)) in x.iter().zip(q.iter_mut()).enumerate() {
            let limit = if *v < 0.0 && self.full_range {
                max + 1
            } else {
                max
            };
            let mag = round_mag(*v, lsb, self.rounding, base + i as u64).min(limit as u128) as i64;
            *qi = if *v < 0.0 { -mag } else { mag };
        }
        (e, lsb)
    }
}

/// BFP fake-quant of one block (docs/numerics.md).
pub(crate) fn bfp_block(b: &BfpFormat, x: &[f64], out: &mut [f64], base: u64) {
    let mut q = vec![0i64; x.len()];
    let (_, lsb) = b.block_mantissas(x, &mut q, base);
    for (o, qi) in out.iter_mut().zip(&q) {
        *o = make_f64(*qi < 0, u128::from(qi.unsigned_abs()), lsb);
    }
}

impl MxFormat {
    /// The shared exponent of a block of finite values per OCP MX v1.0 section 6.3:
    /// `floor(log2 amax) - emax_elem`, clamped below to the E8M0 minimum -127 (an all-zero
    /// block gets -127). `None` when it exceeds 127 (E8M0 NaN; only reachable from f64
    /// inputs beyond the f32 range).
    pub fn shared_exponent(&self, x: &[f64]) -> Option<i32> {
        let Some(e) = max_exponent(x) else {
            return Some(-127);
        };
        let s = (e - self.elem.emax()).max(-127);
        (s <= 127).then_some(s)
    }
}

impl MxFormat {
    /// Encode one block of finite values: the shared exponent and the element values (on the
    /// element grid, e.g. 448.0 for a saturated e4m3). `base` is the position of `x[0]` in
    /// its run (stochastic rounding draws, as [`Format::quantize`](crate::Format::quantize)
    /// makes them). `None`: the scale is E8M0 NaN.
    pub fn encode_block(&self, x: &[f64], base: u64) -> Option<(i32, Vec<f64>)> {
        let s = self.shared_exponent(x)?;
        let elems = x
            .iter()
            .enumerate()
            .map(|(i, v)| self.element(*v, s, base + i as u64) * crate::rounding::pow2(-s))
            .collect();
        Some((s, elems))
    }

    /// One element `x / 2^s` rounded to the element type, times `2^s`. An fp element keeps
    /// the sign of a zero; INT8 (two's complement, no -0) gives +0.
    fn element(&self, x: f64, s: i32, key: u64) -> f64 {
        let v = self.elem.mini().round_scaled(x, s, self.rounding, key);
        if self.elem == MxElem::Int8 && v == 0.0 {
            0.0
        } else {
            v
        }
    }
}

/// MX fake-quant of one block: elements `x / 2^s` rounded to the element type, saturating to
/// its largest normal, times `2^s`.
pub(crate) fn mx_block(m: &MxFormat, x: &[f64], out: &mut [f64], base: u64) {
    let Some(s) = m.shared_exponent(x) else {
        out.fill(f64::NAN);
        return;
    };
    for (i, (v, o)) in x.iter().zip(out.iter_mut()).enumerate() {
        *o = m.element(*v, s, base + i as u64);
    }
}

/// The exponent side of seed 000's hierarchical encoding of one block (the rows of Fig. 2 and
/// Fig. 4), plus the quantized mantissas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HbfpBlock {
    /// Top shared exponent (max element exponent, clamped like BFP to `[1-2^(w-1), 2^(w-1)]`).
    pub top: i32,
    /// `scales[k][j]`: scale of sub-tile `j` at level `k` (level 0 = sub-tiles of `sub`
    /// elements, level k of `sub * 2^k`): the difference between its parent's shared exponent
    /// and its own, clipped to `[0, scale_cap]`. Shared exponents are maxima of the elements'
    /// exponents (not the effective exponents above); the top level's parent is `top`.
    pub scales: Vec<Vec<u32>>,
    /// Effective (quantized) exponent of each element: top minus the scales on its path.
    pub exps: Vec<i32>,
    /// Sign-magnitude mantissas (value = `mant * 2^(exp - (m - 2))`, m incl. sign).
    pub mants: Vec<i64>,
}

impl HbfpFormat {
    /// Magnitude bits per element (`mant - 1`).
    pub fn mag_bits(&self) -> u32 {
        self.mant - 1
    }

    /// Encode one block of `len` elements (finite values; elements past `x.len()` are zeros).
    ///
    /// Seed 000 (Fig. 2 rows 215-245, ¶32-35; claims 1 and 8), bottom-up: each sub-tile's
    /// shared exponent is the max of its children's (= of its elements' exponents); its scale
    /// is `min(parent_shared - own_shared, scale_cap)`, where the parent's shared exponent is
    /// again a maximum, not the parent's effective exponent, and the top level's parent is
    /// the block's `top` (the max, clamped to the exponent field). An all-zero sub-tile gets
    /// `scale_cap`. An element's effective exponent is `top` minus the scales on its path:
    /// at least its own exponent unless `top` was clamped below the block's max.
    pub fn encode_block(&self, x: &[f64], len: usize, base: u64) -> HbfpBlock {
        let exps: Vec<Option<i32>> = (0..len)
            .map(|i| x.get(i).filter(|v| **v != 0.0).map(|v| floor_log2(*v)))
            .collect();
        let h = 1i32 << (self.exp_bits - 1);
        let top = exps
            .iter()
            .flatten()
            .max()
            .map_or(1 - h, |e| (*e).clamp(1 - h, h));
        let levels = self.levels as usize;
        let cap = self.scale_cap as i32;
        // Shared exponents of every level's sub-tiles (None: all zero), bottom-up maxima.
        let shared: Vec<Vec<Option<i32>>> = (0..levels)
            .map(|k| {
                let size = self.sub << k;
                (0..len.div_ceil(size))
                    .map(|j| {
                        exps[j * size..((j + 1) * size).min(len)]
                            .iter()
                            .flatten()
                            .max()
                            .copied()
                    })
                    .collect()
            })
            .collect();
        let scales: Vec<Vec<u32>> = (0..levels)
            .map(|k| {
                shared[k]
                    .iter()
                    .enumerate()
                    .map(|(j, own)| {
                        // Level k + 1's sub-tiles are twice as long: sub-tile j's parent is j / 2.
                        let parent = match shared.get(k + 1) {
                            Some(up) => up.get(j / 2).copied().flatten(),
                            None => Some(top),
                        };
                        match (own, parent) {
                            (Some(e), Some(p)) => (p - e).clamp(0, cap) as u32,
                            _ => cap as u32,
                        }
                    })
                    .collect()
            })
            .collect();
        let el_exps: Vec<i32> = (0..len)
            .map(|i| {
                top - scales
                    .iter()
                    .enumerate()
                    .map(|(k, s)| s[i / (self.sub << k)] as i32)
                    .sum::<i32>()
            })
            .collect();
        let k = self.mag_bits() as i32;
        let max = (1i64 << k) - 1;
        let mants = (0..len)
            .map(|i| {
                let (Some(v), Some(e)) = (x.get(i), exps[i]) else {
                    return 0;
                };
                let q = el_exps[i];
                if self.flush && q - e >= k {
                    return 0;
                }
                let mag = round_mag(*v, q - k + 1, self.rounding, base + i as u64).min(max as u128)
                    as i64;
                if *v < 0.0 { -mag } else { mag }
            })
            .collect();
        HbfpBlock {
            top,
            scales,
            exps: el_exps,
            mants,
        }
    }

    /// Number of scale fields in a block of `len` elements.
    pub fn scale_fields(&self, len: usize) -> usize {
        (0..self.levels as usize)
            .map(|k| len.div_ceil(self.sub << k))
            .sum()
    }

    /// Stored bits of one block of `len` elements: mantissas, scale fields, top exponent.
    pub fn block_bits(&self, len: usize) -> usize {
        len * self.mant as usize
            + self.scale_fields(len) * self.scale_bits as usize
            + self.exp_bits as usize
    }
}

/// Hierarchical BFP fake-quant of one block.
pub(crate) fn hbfp_block(h: &HbfpFormat, x: &[f64], out: &mut [f64], base: u64) {
    let enc = h.encode_block(x, x.len(), base);
    let k = h.mag_bits() as i32;
    for ((o, m), e) in out.iter_mut().zip(&enc.mants).zip(&enc.exps) {
        *o = if *m == 0 {
            0.0
        } else {
            make_f64(*m < 0, u128::from(m.unsigned_abs()), e - k + 1)
        };
    }
}
