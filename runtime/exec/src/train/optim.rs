//! The optimizers: SGD with momentum and Adam, over candle `Var`s.

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

/// Which optimizer updates the weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    /// `v = momentum * v + g; w -= lr * v`.
    Sgd { momentum: f64 },
    /// Kingma and Ba's Adam with bias correction (`beta1 = 0.9`, `beta2 = 0.999`,
    /// `eps = 1e-8`).
    Adam,
}

/// An optimizer's state over a fixed list of variables.
pub(crate) struct Optimizer {
    kind: OptimizerKind,
    lr: f64,
    /// Per variable: the first moment (momentum) and, for Adam, the second.
    moments: Vec<(Tensor, Tensor)>,
    steps: i32,
}

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

impl Optimizer {
    pub(crate) fn new(kind: OptimizerKind, lr: f64, vars: &[Var]) -> candle_core::Result<Self> {
        let moments = vars
            .iter()
            .map(|v| Ok((v.zeros_like()?, v.zeros_like()?)))
            .collect::<candle_core::Result<_>>()?;
        Ok(Optimizer {
            kind,
            lr,
            moments,
            steps: 0,
        })
    }

    /// Set the learning rate of the next steps.
    pub(crate) fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// One update of `vars` from their gradients in `grads` (a variable without one keeps its
    /// value).
    pub(crate) fn step(&mut self, vars: &[Var], grads: &GradStore) -> candle_core::Result<()> {
        self.steps += 1;
        for (var, (m, v)) in vars.iter().zip(&mut self.moments) {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            let update = match self.kind {
                OptimizerKind::Sgd { momentum } => {
                    *m = ((&*m * momentum)? + g)?;
                    (&*m * self.lr)?
                }
                OptimizerKind::Adam => {
                    *m = ((&*m * BETA1)? + (g * (1.0 - BETA1))?)?;
                    *v = ((&*v * BETA2)? + (g.sqr()? * (1.0 - BETA2))?)?;
                    let m_hat = (&*m / (1.0 - BETA1.powi(self.steps)))?;
                    let v_hat = (&*v / (1.0 - BETA2.powi(self.steps)))?;
                    ((m_hat / (v_hat.sqrt()? + EPS)?)? * self.lr)?
                }
            };
            var.set(&var.as_tensor().sub(&update)?)?;
        }
        Ok(())
    }
}
