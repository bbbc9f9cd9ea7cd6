//! Multi-function unit arithmetic (docs/semantics.md "Numerics in the pipeline", step 3):
//! inputs rounded to `mfu.input`, the exact result rounded once to `mfu.input`.

use super::exact;
use nnp_grammar::OpKind;
use nnp_numerics::FloatFormat;
use nnp_numerics::activation::{self, Activation};
use nnp_numerics::sums::IntegerSum;
use std::collections::HashMap;
use std::sync::Arc;

/// Activation tables loaded from a target's table files (16-bit input bits -> output bits), by
/// activation.
#[derive(Clone, Debug, Default)]
pub struct TableFiles(pub HashMap<Activation, Arc<[u16]>>);

impl TableFiles {
    fn get(&self, kind: Activation) -> Option<&[u16]> {
        self.0.get(&kind).map(|t| &t[..])
    }
}

/// An activation ready to apply to values of `fmt` (already rounded to it): a 65,536-entry table
/// for 16-bit formats (the target's file, else the correctly rounded built-in), else the f64
/// function rounded to `fmt`.
pub struct Act<'t> {
    kind: Activation,
    fmt: FloatFormat,
    table: Option<&'t [u16]>,
}

impl<'t> Act<'t> {
    pub fn new(kind: Activation, fmt: &FloatFormat, files: &'t TableFiles) -> Act<'t> {
        let table = if fmt.bits() == 16 {
            files.get(kind).or_else(|| activation::table_ref(kind, fmt))
        } else {
            None
        };
        Act {
            kind,
            fmt: *fmt,
            table,
        }
    }

    pub fn apply(&self, x: f64) -> f64 {
        if let Some(&out) = self.table.and_then(|t| t.get(self.fmt.encode(x) as usize)) {
            return self.fmt.decode(u64::from(out));
        }
        self.fmt.round(activation::eval(self.kind, x))
    }
}

// `v_relu` and `vv_max` select: their one definition is shared by every engine.
pub use nnp_numerics::elementwise::{max, relu};

/// One element of an op of the add-class or multiply unit: `v` is the carried value, `m` the
/// operand, both already rounded to `fmt`.
pub type Binary = fn(&FloatFormat, f64, f64) -> f64;

/// The element function of `kind` if it is an op of the add-class or multiply unit (`None`
/// for the ops without an operand).
pub fn binary(kind: OpKind) -> Option<Binary> {
    Some(match kind {
        OpKind::Add => |fmt, v, m| exact::add(fmt, v, m),
        OpKind::ASubB => |fmt, v, m| exact::add(fmt, v, -m),
        OpKind::BSubA => |fmt, v, m| exact::add(fmt, m, -v),
        OpKind::Max => |_, v, m| max(v, m),
        OpKind::Mul => |fmt, v, m| exact::mul(fmt, v, m),
        OpKind::Relu | OpKind::Table(_) | OpKind::Softmax | OpKind::Pass => return None,
    })
}

/// `v_softmax` over one item's carried lanes (values already rounded to `fmt`), docs/numerics.md
/// section 1: `m = max`; `e_i = exp(fmt(x_i - m))`; `s = f32(exact sum of e_i)`;
/// `y_i = fmt(f32(e_i) / s)` with the division in f32.
pub fn softmax(fmt: &FloatFormat, files: &TableFiles, x: &mut [f64]) {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, max);
    let exp = Act::new(Activation::Exp, fmt, files);
    let mut sum = IntegerSum::new();
    for v in x.iter_mut() {
        let d = exact::add(fmt, *v, -m);
        *v = exp.apply(d);
        sum.add_f64(*v);
    }
    let s = sum.round(&FloatFormat::FP32) as f32;
    for v in x.iter_mut() {
        *v = fmt.round(f64::from(*v as f32 / s));
    }
}
