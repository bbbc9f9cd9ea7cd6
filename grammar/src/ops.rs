//! The MFU ops, each described once: mnemonic, unit class, operand rule, the table it reads and
//! its per-element reference semantics. The ISA table (`isa.rs`), the parser's help, the
//! checker's pad-lane analysis and every later stage derive from [`OpKind`].
//!
//! A table activation is [`OpKind::Table`] of an [`Activation`]: its mnemonic is
//! `v_<name>` and its semantics [`Activation::eval`], so a new one is described in
//! `nnp_numerics::activation` alone.

use nnp_numerics::{Activation, elementwise};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// Operations of the multi-function units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpKind {
    Add,
    /// `v - m[a]`
    ASubB,
    /// `m[a] - v`
    BSubA,
    Max,
    Mul,
    Relu,
    /// `v_<name>`: a function read from its 65,536-entry table.
    Table(Activation),
    Softmax,
    Pass,
}

/// The unit class an op occupies inside one MFU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Unit {
    AddSub,
    Mul,
    Activation,
}

/// The ops before the table activations in [`OpKind::ALL`], and after them.
const HEAD: [OpKind; 6] = [
    OpKind::Add,
    OpKind::ASubB,
    OpKind::BSubA,
    OpKind::Max,
    OpKind::Mul,
    OpKind::Relu,
];
const TAIL: [OpKind; 2] = [OpKind::Softmax, OpKind::Pass];

impl OpKind {
    /// Every MFU operation, in mnemonic order (the table activations in [`Activation::ALL`]'s).
    pub const ALL: [OpKind; HEAD.len() + Activation::ALL.len() + TAIL.len()] = {
        let mut all = [OpKind::Pass; HEAD.len() + Activation::ALL.len() + TAIL.len()];
        let mut i = 0;
        while i < all.len() {
            let t = Activation::ALL.len();
            all[i] = if i < HEAD.len() {
                HEAD[i]
            } else if i < HEAD.len() + t {
                OpKind::Table(Activation::ALL[i - HEAD.len()])
            } else {
                TAIL[i - HEAD.len() - t]
            };
            i += 1;
        }
        all
    };

    pub fn unit(self) -> Unit {
        match self {
            OpKind::Add | OpKind::ASubB | OpKind::BSubA | OpKind::Max => Unit::AddSub,
            OpKind::Mul => Unit::Mul,
            OpKind::Relu | OpKind::Table(_) | OpKind::Softmax | OpKind::Pass => Unit::Activation,
        }
    }

    /// True for the ops that read an operand VRF.
    pub fn has_operand(self) -> bool {
        self.unit() != Unit::Activation
    }

    /// The table the op reads (softmax reads the exp table).
    pub fn table(self) -> Option<Activation> {
        match self {
            OpKind::Table(a) => Some(a),
            OpKind::Softmax => Some(Activation::Exp),
            OpKind::Add
            | OpKind::ASubB
            | OpKind::BSubA
            | OpKind::Max
            | OpKind::Mul
            | OpKind::Relu
            | OpKind::Pass => None,
        }
    }

    pub fn mnemonic(self) -> &'static str {
        match self {
            OpKind::Add => "vv_add",
            OpKind::ASubB => "vv_a_sub_b",
            OpKind::BSubA => "vv_b_sub_a",
            OpKind::Max => "vv_max",
            OpKind::Mul => "vv_mul",
            OpKind::Relu => "v_relu",
            OpKind::Table(a) => table_mnemonic(a),
            OpKind::Softmax => "v_softmax",
            OpKind::Pass => "v_pass",
        }
    }

    /// The op spelled `mnemonic` (without `_inc`).
    pub fn from_mnemonic(mnemonic: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.mnemonic() == mnemonic)
    }

    /// The op on one lane in exact (f64) arithmetic, before the MFU's rounding: `v` the carried
    /// value, `operand` the operand's (`None` without one). `None` where the value is not a
    /// function of the lane alone (softmax) or an operand is missing.
    pub fn reference(self, v: f64, operand: Option<f64>) -> Option<f64> {
        Some(match (self, operand) {
            (OpKind::Add, Some(b)) => v + b,
            (OpKind::ASubB, Some(b)) => v - b,
            (OpKind::BSubA, Some(b)) => b - v,
            (OpKind::Max, Some(b)) => elementwise::max(v, b),
            (OpKind::Mul, Some(b)) => v * b,
            (OpKind::Relu, _) => elementwise::relu(v),
            (OpKind::Table(a), _) => a.eval(v),
            (OpKind::Pass, _) => v,
            (OpKind::Softmax, _) => return None,
            (OpKind::Add | OpKind::ASubB | OpKind::BSubA | OpKind::Max | OpKind::Mul, None) => {
                return None;
            }
        })
    }
}

/// `v_<name>`, made once per process (mnemonics are `&'static str` everywhere).
fn table_mnemonic(a: Activation) -> &'static str {
    static NAMES: OnceLock<Vec<(Activation, String)>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            Activation::ALL
                .iter()
                .map(|&a| (a, format!("v_{}", a.name())))
                .collect()
        })
        .iter()
        .find(|(b, _)| *b == a)
        .map_or("v_table", |(_, m)| m.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_listed_once_and_spelled_back() {
        for (i, k) in OpKind::ALL.iter().enumerate() {
            assert!(!OpKind::ALL[..i].contains(k), "{k:?} twice");
            assert_eq!(OpKind::from_mnemonic(k.mnemonic()), Some(*k));
        }
        assert_eq!(
            OpKind::from_mnemonic("v_sigm"),
            Some(OpKind::Table(Activation::Sigmoid))
        );
        assert_eq!(OpKind::ALL.len(), 8 + Activation::ALL.len());
    }
}
