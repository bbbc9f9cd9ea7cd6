//! Side tables of a graph: one entry per node, indexed by its [`ValueId`] (as naga's
//! `HandleVec`), so a table of one graph is never read with a bare `usize`.

use super::ValueId;
use std::ops::{Index, IndexMut};

/// One `T` per node of a graph, by [`ValueId`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeMap<T>(Vec<T>);

impl<T> NodeMap<T> {
    /// The entry of `id`; `None` past the last node.
    pub fn get(&self, id: ValueId) -> Option<&T> {
        self.0.get(id.index())
    }

    /// The entry of `id` to change; `None` past the last node.
    pub fn get_mut(&mut self, id: ValueId) -> Option<&mut T> {
        self.0.get_mut(id.index())
    }

    /// The entries in node order.
    pub fn values(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }
}

impl<T: Clone> NodeMap<T> {
    /// `value` for each of `len` nodes.
    pub fn filled(len: usize, value: T) -> NodeMap<T> {
        NodeMap(vec![value; len])
    }
}

impl<T> From<Vec<T>> for NodeMap<T> {
    /// The entries of a table in node order.
    fn from(v: Vec<T>) -> NodeMap<T> {
        NodeMap(v)
    }
}

impl<T> FromIterator<T> for NodeMap<T> {
    /// The entries of a table in node order.
    fn from_iter<I: IntoIterator<Item = T>>(entries: I) -> NodeMap<T> {
        NodeMap(entries.into_iter().collect())
    }
}

impl<T> Index<ValueId> for NodeMap<T> {
    type Output = T;

    fn index(&self, id: ValueId) -> &T {
        &self.0[id.index()]
    }
}

impl<T> IndexMut<ValueId> for NodeMap<T> {
    fn index_mut(&mut self, id: ValueId) -> &mut T {
        &mut self.0[id.index()]
    }
}
