//! The products: their operands (weight stacks prepared, vectors quantized to integers) and
//! the path each takes (integer kernel, GPU, float matmul, slices, element by element). The
//! one product (`matvec`), the float path each takes and its layouts (`float`), the operands
//! on the integer kernel and the GPU (`operands`), the vectors (`vectors`) and the weight
//! stacks (`stacks`); here, what they share.

pub(crate) mod bounded;
mod float;
mod matvec;
mod operands;
mod stacks;
mod vectors;

use super::matmul::MatVec;
#[cfg(test)]
pub(super) use float::arrange_w;
pub(super) use float::{bounded_stacks, chunked_stacks, float_path};
use nnp_lowering::swgraph::{Op, ValueId};

/// The product of a `TiledMatVec` node at native dimension `n`: its spec, vector and weights.
pub(super) fn product_spec(op: &Op, n: usize) -> Option<(MatVec, ValueId, ValueId)> {
    match op {
        Op::TiledMatVec {
            x,
            w,
            rows,
            cols,
            accumulation,
            output,
            ..
        } => Some((
            MatVec {
                rows: *rows as usize,
                cols: *cols as usize,
                n,
                accumulation: *accumulation,
                output: *output,
            },
            *x,
            *w,
        )),
        _ => None,
    }
}

/// The operands of one product: vector `x` at batch `b`, weight stack `w`, and whether work on
/// the weights is kept for the session (a constant stack).
#[derive(Clone, Copy)]
struct Operands {
    x: ValueId,
    w: ValueId,
    b: usize,
    cacheable: bool,
}
