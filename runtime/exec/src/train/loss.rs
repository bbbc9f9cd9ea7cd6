//! Losses and metrics over a program's outputs and their targets.
//!
//! A target either has the output's shape (values: mean squared error, or soft labels for
//! cross-entropy) or the output's shape without its last axis (class indices along the last
//! axis: cross-entropy, and accuracy). Cross-entropy reads the output as logits, or as
//! probabilities where the program computes them itself (`v_softmax`).

use super::TrainError;
use nnp_host::Tensor as HostTensor;

/// The loss a run minimizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossKind {
    /// Mean squared error against targets of the output's shape.
    Mse,
    /// Softmax cross-entropy against class indices or soft labels.
    CrossEntropy,
}

impl LossKind {
    pub fn name(self) -> &'static str {
        match self {
            LossKind::Mse => "mse",
            LossKind::CrossEntropy => "cross_entropy",
        }
    }
}

/// How one output is scored.
#[derive(Clone, Debug)]
pub(crate) struct Scoring {
    pub output: String,
    pub loss: LossKind,
    /// The targets are class indices along the output's last axis.
    pub classes: bool,
    /// The output holds probabilities (a `v_softmax` result), not logits.
    pub probabilities: bool,
}

impl Scoring {
    /// How `output` (declared shape `shape`) is scored against targets of per-item shape
    /// `target` with `loss` (`None`: cross-entropy for class indices, else mean squared error).
    pub fn new(
        output: &str,
        shape: &[usize],
        target: &[usize],
        loss: Option<LossKind>,
        probabilities: bool,
    ) -> Result<Scoring, TrainError> {
        let classes = target.len() + 1 == shape.len() && target == &shape[..shape.len() - 1];
        if !classes && target != shape {
            return Err(TrainError::Data(format!(
                "the targets of output `{output}` have per-item shape {target:?}; the output is \
                 {shape:?}: give values of that shape, or class indices of shape {:?}",
                &shape[..shape.len().saturating_sub(1)]
            )));
        }
        let loss = loss.unwrap_or(if classes {
            LossKind::CrossEntropy
        } else {
            LossKind::Mse
        });
        if classes && loss == LossKind::Mse {
            return Err(TrainError::ClassesForMse {
                output: output.to_string(),
            });
        }
        Ok(Scoring {
            output: output.to_string(),
            loss,
            classes,
            probabilities,
        })
    }

    /// The targets of `items` as the loss reads them: class indices one-hot over the last
    /// axis, or the values, `[items, ...output shape]` flattened.
    pub fn targets(&self, t: &HostTensor, classes_of: usize) -> Result<Targets, TrainError> {
        let data: Vec<f64> = if self.classes {
            let mut onehot = vec![0f64; t.data.len() * classes_of];
            for (k, &c) in t.data.iter().enumerate() {
                if c.fract() != 0.0 || c < 0.0 || c as usize >= classes_of {
                    return Err(TrainError::Data(format!(
                        "target {k} of output `{}` is {c}, not a class index in 0..{classes_of}",
                        self.output
                    )));
                }
                onehot[k * classes_of + c as usize] = 1.0;
            }
            onehot
        } else {
            t.data.iter().map(|&v| f64::from(v)).collect()
        };
        let width = match self.classes {
            true => classes_of,
            false => t.shape[1..].last().copied().unwrap_or(1),
        };
        Ok(Targets {
            data,
            width: width.max(1),
        })
    }

    /// The mean loss of `y` (the output, `[items, ...]` flattened) against `target`, and its
    /// gradient by `y`.
    pub fn loss(&self, y: &[f64], target: &Targets) -> Result<(f64, Vec<f64>), TrainError> {
        if y.len() != target.data.len() {
            return Err(TrainError::Internal(format!(
                "an output of {} elements scored against {} targets",
                y.len(),
                target.data.len()
            )));
        }
        let t = &target.data;
        let mut grad = vec![0.0; y.len()];
        let loss = match self.loss {
            LossKind::Mse => {
                let count = y.len().max(1) as f64;
                let mut sum = 0.0;
                for ((g, y), t) in grad.iter_mut().zip(y).zip(t) {
                    sum += (y - t) * (y - t);
                    *g = 2.0 * (y - t) / count;
                }
                sum / count
            }
            LossKind::CrossEntropy => {
                // Mean over the positions that take a class (every item, every row).
                let w = target.width;
                let positions = (y.len() / w).max(1) as f64;
                let mut sum = 0.0;
                let rows = y.chunks_exact(w).zip(t.chunks_exact(w));
                for ((y, t), g) in rows.zip(grad.chunks_exact_mut(w)) {
                    sum += self.cross_entropy(y, t, g, positions);
                }
                -sum / positions
            }
        };
        Ok((loss, grad))
    }

    /// `sum(t * log p)` of one position (`p` the softmax of the logits `y`, or `y` itself when
    /// it holds probabilities, clamped to `1e-30`), with the gradient of `-sum / positions` by
    /// `y` in `g`.
    fn cross_entropy(&self, y: &[f64], t: &[f64], g: &mut [f64], positions: f64) -> f64 {
        const FLOOR: f64 = 1e-30;
        if self.probabilities {
            let mut sum = 0.0;
            for ((g, y), t) in g.iter_mut().zip(y).zip(t) {
                sum += t * y.max(FLOOR).ln();
                *g = if *y > FLOOR {
                    -t / (y * positions)
                } else {
                    0.0
                };
            }
            return sum;
        }
        let top = y.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // g holds exp(y - top) until the softmax is known.
        for (g, y) in g.iter_mut().zip(y) {
            *g = (y - top).exp();
        }
        let total: f64 = g.iter().sum();
        let lse = total.ln();
        let mass: f64 = t.iter().sum();
        let mut sum = 0.0;
        for ((g, y), t) in g.iter_mut().zip(y).zip(t) {
            sum += t * (y - top - lse);
            *g = (mass * (*g / total) - t) / positions;
        }
        sum
    }

    /// Correct positions and positions of `y` against `target`: the class with the largest
    /// output against the target's (class targets or soft labels), `None` for values.
    pub fn correct(&self, y: &[f64], target: &Targets) -> Option<(u64, u64)> {
        if self.loss != LossKind::CrossEntropy {
            return None;
        }
        let w = target.width;
        let argmax = |v: &[f64]| {
            v.iter()
                .enumerate()
                .fold((0, f64::NEG_INFINITY), |best, (i, &x)| {
                    if x > best.1 { (i, x) } else { best }
                })
                .0
        };
        let rows = y.chunks_exact(w).zip(target.data.chunks_exact(w));
        let (mut hits, mut positions) = (0, 0);
        for (y, t) in rows {
            hits += u64::from(argmax(y) == argmax(t));
            positions += 1;
        }
        Some((hits, positions))
    }
}

/// An output's targets as the loss reads them ([`Scoring::targets`]): `[items, ..., width]`
/// flattened, the last axis the classes of a cross-entropy.
#[derive(Clone, Debug)]
pub(crate) struct Targets {
    pub data: Vec<f64>,
    pub width: usize,
}
