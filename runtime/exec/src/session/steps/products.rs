//! A run of products together ([`super::Work::Products`]): on the integer kernel in one
//! parallel pass, each group of one weight stack as one product over its vectors' items
//! stacked (`Executor::products_together`); a group that cannot be is computed one product at
//! a time.

use super::pass_state::Pass;
use super::value::{self, Keep};
use crate::state::Failure;
use nnp_lowering::swgraph::ValueId;

/// Compute the products of `groups` and store their values.
pub(super) fn run(
    groups: &[Vec<(ValueId, Keep)>],
    pass: &mut Pass,
) -> Result<(&'static str, usize), Failure> {
    let nodes: Vec<Vec<usize>> = groups
        .iter()
        .map(|g| g.iter().map(|(id, _)| id.index()).collect())
        .collect();
    let values = pass.ex.products_together(&nodes)?;
    for (group, values) in groups.iter().zip(values) {
        match values {
            Some(values) => {
                for ((id, keep), t) in group.iter().zip(values) {
                    pass.store(*id, t, keep)?;
                }
            }
            None => {
                for (id, keep) in group {
                    value::eval(*id, keep, pass)?;
                }
            }
        }
    }
    let line = match groups.iter().any(|g| g.len() > 1) {
        true => "stacked products",
        false => "products together",
    };
    Ok((line, groups.iter().map(Vec::len).sum()))
}
