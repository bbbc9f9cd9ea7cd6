//! Adversarial host data.

use super::Rng;

/// Knobs of the data [`host_data`] builds.
#[derive(Clone, Debug)]
pub struct DataConfig {
    /// Each native tile is scaled by `2^k`, `k` uniform in `[-spread, spread]` (clipped at 14
    /// so the tile stays below fp16's largest finite value; overflow has its own pattern).
    pub spread: i32,
    /// Probability that a tile holds one NaN or infinity.
    pub nonfinite: f64,
    /// Probability that a declaration's tiles use a spread of only 3 (neighbouring magnitudes,
    /// where accumulation order and rounding show most, and activations do not saturate).
    pub mild: f64,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            spread: 20,
            nonfinite: 0.01,
            mild: 0.4,
        }
    }
}

/// Weights and `batch` input sets for a checked program, tile by tile adversarial: exponent
/// spreads across tiles, exact ties at BFP rounding points, values that saturate BFP mantissas
/// or overflow fp16 arithmetic, zeros (both signs), fp16 subnormals, small integers, and now and
/// then a NaN or an infinity. Each declaration draws from its own stream keyed by its name, so
/// deleting other declarations (minimizing) leaves its data unchanged.
pub fn host_data(
    program: &dyn nnp_grammar::Interface,
    batch: usize,
    seed: u64,
    cfg: &DataConfig,
) -> nnp_runtime::host::HostData {
    use nnp_grammar::{DeclKind, Init};
    use nnp_runtime::host::{HostData, Tensor};
    let n = program.native().max(1);
    let mut weights = std::collections::BTreeMap::new();
    let mut inputs = std::collections::BTreeMap::new();
    let mild = DataConfig {
        spread: cfg.spread.min(3),
        ..cfg.clone()
    };
    for d in program.decls() {
        let mut r = Rng::keyed(seed, &d.name);
        let cfg = if r.chance(cfg.mild) { &mild } else { cfg };
        match d.kind {
            DeclKind::Matrix | DeclKind::Vector if d.init == Init::Load => {
                let data = if d.kind == DeclKind::Matrix {
                    matrix_values(&mut r, d.shape[0], d.row_len(), n, cfg)
                } else {
                    rows_values(&mut r, d.rows(), d.row_len(), n, cfg)
                };
                weights.insert(
                    d.name.clone(),
                    Tensor {
                        shape: d.shape.clone(),
                        data,
                    },
                );
            }
            DeclKind::Input => {
                let mut shape = vec![batch];
                shape.extend(&d.shape);
                let data = rows_values(&mut r, batch * d.rows(), d.row_len(), n, cfg);
                inputs.insert(d.name.clone(), Tensor { shape, data });
            }
            _ => {}
        }
    }
    HostData {
        batch,
        weights,
        inputs,
    }
}

/// `rows` rows of `len` values, each row cut into native tiles with their own pattern.
fn rows_values(r: &mut Rng, rows: usize, len: usize, n: usize, cfg: &DataConfig) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * len);
    for _ in 0..rows {
        let mut c = 0;
        while c < len {
            let k = n.min(len - c);
            let p = Pattern::draw(r, cfg);
            out.extend(p.fill(r, k, cfg));
            c += k;
        }
    }
    out
}

/// A `rows x cols` matrix, each N x N tile with its own pattern and scale, filled row by row
/// (the MVM quantizes matrix tiles per row).
fn matrix_values(r: &mut Rng, rows: usize, cols: usize, n: usize, cfg: &DataConfig) -> Vec<f32> {
    let mut out = vec![0f32; rows * cols];
    for ti in 0..rows.div_ceil(n) {
        for tj in 0..cols.div_ceil(n) {
            let (h, w) = (n.min(rows - ti * n), n.min(cols - tj * n));
            let p = Pattern::draw(r, cfg);
            for i in 0..h {
                let v = p.fill(r, w, cfg);
                let at = (ti * n + i) * cols + tj * n;
                out[at..at + w].copy_from_slice(&v);
            }
        }
    }
    out
}

/// The pattern of one tile: its kind, scale exponent and (for ties) grid mantissa width.
struct Pattern {
    kind: u64,
    k: i32,
    m: i32,
}

impl Pattern {
    fn draw(r: &mut Rng, cfg: &DataConfig) -> Pattern {
        Pattern {
            kind: r.below(100),
            k: r.range(-cfg.spread as i64, cfg.spread as i64).min(14) as i32,
            m: r.range(3, 8) as i32,
        }
    }

    /// `len` values of this pattern.
    fn fill(&self, r: &mut Rng, len: usize, cfg: &DataConfig) -> Vec<f32> {
        let scale = 2f64.powi(self.k);
        let sign = |r: &mut Rng| if r.chance(0.5) { -1.0 } else { 1.0 };
        let mut v: Vec<f64> = match self.kind {
            // Uniform in (-2, 2) times the tile scale.
            0..=37 => (0..len).map(|_| (r.unit() * 4.0 - 2.0) * scale).collect(),
            // Exact ties of a BFP grid with an `m`-bit mantissa (incl. sign) and shared exponent
            // k: even lanes sit on the grid in [2^k, 2^(k+1)) and fix the exponent of every
            // block of two or more lanes, odd lanes sit halfway between two grid points.
            38..=54 => {
                let step = scale * 2f64.powi(-(self.m - 2));
                let top = 1i64 << (self.m - 2);
                (0..len)
                    .map(|i| {
                        if i % 2 == 0 {
                            sign(r) * (top + r.range(0, top - 1)) as f64 * step
                        } else {
                            sign(r) * (r.range(0, 2 * top - 2) as f64 + 0.5) * step
                        }
                    })
                    .collect()
            }
            // Saturation: BFP mantissas that round up past the largest code, and values near
            // fp16's largest finite value (products and sums overflow).
            55..=64 => {
                if self.m != 3 {
                    (0..len)
                        .map(|_| sign(r) * (2.0 - 2f64.powi(-(r.range(1, 11) as i32))) * scale)
                        .collect()
                } else {
                    let big = [65504.0, 65519.0, 61440.0, 32768.0, 49152.0, 40000.0];
                    (0..len).map(|_| sign(r) * *r.pick(&big)).collect()
                }
            }
            // Zeros of both signs, with a stray value now and then.
            65..=72 => (0..len)
                .map(|_| match r.below(5) {
                    0 => -0.0,
                    1 => (r.unit() * 4.0 - 2.0) * scale,
                    _ => 0.0,
                })
                .collect(),
            // fp16 subnormals (multiples of 2^-24 below 2^-14), some normals near the boundary.
            73..=82 => (0..len)
                .map(|_| {
                    if r.chance(0.2) {
                        sign(r) * 2f64.powi(-14) * (1.0 + r.unit())
                    } else {
                        sign(r) * r.range(1, 1023) as f64 * 2f64.powi(-24)
                    }
                })
                .collect(),
            // Small integers times the scale: exact sums, cancellation, ties in accumulation.
            _ => (0..len).map(|_| r.range(-8, 8) as f64 * scale).collect(),
        };
        if !v.is_empty() && r.chance(cfg.nonfinite) {
            let i = r.below(v.len() as u64) as usize;
            v[i] = *r.pick(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 65520.0, -1e6]);
        }
        v.into_iter().map(|x| x as f32).collect()
    }
}
