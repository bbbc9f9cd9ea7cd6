//! A weight stack's step: the stack in one pass from the host's weights ([`crate::prepare`]),
//! in the form its products read, kept in it alone where only they read it.

use super::{pass_state::Pass, value};
use crate::prepare::Stack;
use crate::state::{Failure, Path};
use candle_core::DType;
use nnp_lowering::swgraph::ValueId;

/// The form a weight stack is prepared in ([`Work::Stack`](super::Work::Stack)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) enum StackForm {
    /// In the chunked matmul's layout, of `(chunk, dtype)`, kept in it alone (the float path,
    /// where every product of the stack takes that matmul).
    Arranged((usize, DType)),
    /// As the kernel's integers; where they do not fit, as the bounded matmul's matrix alone
    /// (`bounded`: per tile column or not, where only such products read it); else its chain
    /// node by node.
    Ints { bounded: Option<bool> },
    /// As the bounded matmul's matrix alone (`bounded`), else as the f64 stack.
    Float { bounded: Option<bool> },
}

/// Prepare stack `id` in `form`: its profile line and node count.
pub(super) fn stack(
    id: ValueId,
    stack: &Stack,
    form: StackForm,
    keep: &value::Keep,
    pass: &mut Pass,
) -> Result<(&'static str, usize), Failure> {
    const LINE: (&str, usize) = ("prepare weights", 1);
    let one_pass = |pass: &mut Pass| {
        pass.ex.paths.insert((Path::OnePass, id.index()));
    };
    let ex = &mut pass.ex;
    let bounded = |ex: &mut crate::state::Executor, bounded: Option<bool>| match bounded {
        Some(per_tile) => ex.prepare_bounded(id, stack, per_tile),
        None => Ok(false),
    };
    match form {
        StackForm::Arranged(key) => {
            ex.prepare_arranged(id, stack, key)?;
            one_pass(pass);
            Ok(LINE)
        }
        StackForm::Ints { bounded: b } => {
            if ex.prepare_ints(id, stack)? || bounded(ex, b)? {
                one_pass(pass);
                if keep.traced || keep.checked {
                    let t = pass.ex.weights(id)?;
                    pass.hand(id, &t, keep)?;
                }
                return Ok(LINE);
            }
            // No integer form: the chains node by node, then the stack as usual.
            ex.eval_chains(id.index(), &stack.parts)?;
            value::eval(id, keep, pass)?;
            Ok((pass.ex.graph.nodes[id.index()].op.name(), 1))
        }
        StackForm::Float { bounded: b } => {
            if bounded(ex, b)? {
                one_pass(pass);
                return Ok(LINE);
            }
            let t = ex.prepare_f64(stack)?;
            one_pass(pass);
            pass.store(id, t, keep)?;
            Ok(LINE)
        }
    }
}
