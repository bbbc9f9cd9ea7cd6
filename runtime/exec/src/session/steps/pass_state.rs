//! What a pass holds besides its executor ([`Pass`]): the state every kind of step reads and
//! writes.

use super::output::OutputRows;
use crate::state::Executor;
use crate::{WrittenValue, finite};
use candle_core::Tensor;
use nnp_lowering::swgraph::{NodeMap, Plan, ValueId};
use std::collections::HashMap;

/// What a pass holds besides its executor: the outputs as they fill, what it hands back, what
/// the checks found, the constants it computed for the session.
pub(in crate::session) struct Pass<'a> {
    pub ex: Executor<'a>,
    pub plan: &'a Plan,
    /// The constants an earlier run kept.
    pub kept: &'a NodeMap<Option<Tensor>>,
    pub outputs: OutputRows<'a>,
    pub written: HashMap<ValueId, WrittenValue>,
    /// What the checks found in values, constant ones, and fused regions' rows.
    pub found: finite::Found,
    pub const_found: finite::Found,
    pub fused_found: finite::Found,
    /// Constant values to keep for the session (a first run's).
    pub consts: Vec<(ValueId, Tensor)>,
}
