//! Losses and metrics over a program's outputs and their targets.
//!
//! A target either has the output's shape (values: mean squared error, or soft labels for
//! cross-entropy) or the output's shape without its last axis (class indices along the last
//! axis: cross-entropy, and accuracy). Cross-entropy reads the output as logits, or as
//! probabilities where the program computes them itself (`v_softmax`).

use super::TrainError;
use candle_core::{D, Device, Tensor};
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

    /// The targets of `items` as the tensor the loss takes: class indices one-hot over the
    /// last axis, or the values, `[items, ...output shape]` f64.
    pub fn targets(&self, t: &HostTensor, classes_of: usize) -> Result<Tensor, TrainError> {
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
        let mut shape = t.shape.clone();
        if self.classes {
            shape.push(classes_of);
        }
        Tensor::from_vec(data, shape, &Device::Cpu).map_err(|e| TrainError::tensor(&e))
    }

    /// The mean loss of `y` (`[items, ...]`, f64) against `target` ([`Scoring::targets`]).
    pub fn loss(&self, y: &Tensor, target: &Tensor) -> candle_core::Result<Tensor> {
        match self.loss {
            LossKind::Mse => y.sub(target)?.sqr()?.mean_all(),
            LossKind::CrossEntropy => {
                let logp = if self.probabilities {
                    y.clamp(1e-30, f64::INFINITY)?.log()?
                } else {
                    let top = y.max_keepdim(D::Minus1)?.detach();
                    let shifted = y.broadcast_sub(&top)?;
                    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
                    shifted.broadcast_sub(&lse)?
                };
                // Mean over the positions that take a class (every item, every row).
                let positions = (target.elem_count() / target.dim(D::Minus1)?.max(1)) as f64;
                target.mul(&logp)?.sum_all()? / -positions
            }
        }
    }

    /// Correct positions and positions of `y` against `target`: the class with the largest
    /// output against the target's (class targets or soft labels), `None` for values.
    pub fn correct(&self, y: &Tensor, target: &Tensor) -> candle_core::Result<Option<(u64, u64)>> {
        if self.loss != LossKind::CrossEntropy {
            return Ok(None);
        }
        let predicted = y.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?;
        let expected = target.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?;
        let hits = predicted
            .iter()
            .zip(&expected)
            .filter(|(a, b)| a == b)
            .count();
        Ok(Some((hits as u64, expected.len() as u64)))
    }
}
