//! The optimizers: SGD with momentum and Adam, over the weights' f32 values.

use nnp_host::Tensor as HostTensor;
use std::collections::BTreeMap;

/// Which optimizer updates the weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    /// `v = momentum * v + g; w -= lr * v`.
    Sgd { momentum: f64 },
    /// Kingma and Ba's Adam with bias correction (`beta1 = 0.9`, `beta2 = 0.999`,
    /// `eps = 1e-8`).
    Adam,
}

/// An optimizer's state over a fixed set of weights.
pub(crate) struct Optimizer {
    kind: OptimizerKind,
    lr: f64,
    /// Per weight, by name: the first moment (momentum) and, for Adam, the second.
    moments: BTreeMap<String, (Vec<f32>, Vec<f32>)>,
    steps: i32,
}

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

impl Optimizer {
    pub(crate) fn new(
        kind: OptimizerKind,
        lr: f64,
        weights: &BTreeMap<String, HostTensor>,
    ) -> Self {
        let moments = weights
            .iter()
            .map(|(n, w)| {
                (
                    n.clone(),
                    (vec![0.0; w.data.len()], vec![0.0; w.data.len()]),
                )
            })
            .collect();
        Optimizer {
            kind,
            lr,
            moments,
            steps: 0,
        }
    }

    /// Set the learning rate of the next steps.
    pub(crate) fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// One update of `weights` from their gradients in `grads` (by name, flattened; a weight
    /// without one keeps its value). Each element is updated in f64 from its f32 state and
    /// stored in f32.
    pub(crate) fn step(
        &mut self,
        weights: &mut BTreeMap<String, HostTensor>,
        grads: &BTreeMap<String, Vec<f64>>,
    ) {
        self.steps += 1;
        let (lr, kind) = (self.lr, self.kind);
        let (c1, c2) = (1.0 - BETA1.powi(self.steps), 1.0 - BETA2.powi(self.steps));
        for (name, w) in weights.iter_mut() {
            let (Some(g), Some((m, v))) = (grads.get(name), self.moments.get_mut(name)) else {
                continue;
            };
            let state = w.data.iter_mut().zip(g).zip(m.iter_mut().zip(v.iter_mut()));
            for ((w, &g), (m, v)) in state {
                let update = match kind {
                    OptimizerKind::Sgd { momentum } => {
                        *m = (momentum * f64::from(*m) + g) as f32;
                        lr * f64::from(*m)
                    }
                    OptimizerKind::Adam => {
                        *m = (BETA1 * f64::from(*m) + (1.0 - BETA1) * g) as f32;
                        *v = (BETA2 * f64::from(*v) + (1.0 - BETA2) * g * g) as f32;
                        let (m_hat, v_hat) = (f64::from(*m) / c1, f64::from(*v) / c2);
                        lr * m_hat / (v_hat.sqrt() + EPS)
                    }
                };
                *w = (f64::from(*w) - update) as f32;
            }
        }
    }
}
