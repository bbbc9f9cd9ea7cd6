//! A graph's file: the JSON form of docs/files.md ("Compiled graphs"). [`SwGraph::to_json`] writes
//! version [`SWGRAPH_VERSION`] (`encode.rs`: one array per node, formats and table files
//! numbered once, node types left out since they follow from the ops); [`SwGraph::from_json`]
//! reads it (`decode.rs`) and version 2 (one object per node with its type, read through the
//! types' serde derives), then validates the graph (`validate.rs`) and plans it.

mod decode;
mod encode;

use super::graph::{GraphError, SWGRAPH_VERSION, SwGraph};
use super::node::Op;
use super::validate::declared;
use serde::Deserialize;

/// The oldest schema version [`SwGraph::from_json`] reads: version 2, one object per node
/// (with its `ty`) and formats written out in each.
pub const SWGRAPH_OLDEST: u32 = 2;

impl SwGraph {
    /// The JSON form (version [`SWGRAPH_VERSION`]): a few lines of header, then one line per
    /// node, write record and check.
    pub fn to_json(&self) -> String {
        encode::graph(self)
    }

    /// Parse and validate a graph written by [`SwGraph::to_json`], of this version or of
    /// version [`SWGRAPH_OLDEST`]. A graph read back is equal to the one written (bit for
    /// bit: pads and formats included), so it runs as that one does.
    pub fn from_json(text: &str) -> Result<SwGraph, GraphError> {
        #[derive(Deserialize)]
        struct Header {
            version: u32,
        }
        let header: Header = serde_json::from_str(text).map_err(json)?;
        let mut g = match header.version {
            SWGRAPH_VERSION => decode::graph(text)?,
            SWGRAPH_OLDEST => serde_json::from_str::<SwGraph>(text).map_err(json)?,
            found => {
                return Err(GraphError::Version {
                    found,
                    expected: SWGRAPH_VERSION,
                });
            }
        };
        // In memory a graph is of the current version, whichever form it was read from.
        g.version = SWGRAPH_VERSION;
        g.validate()?;
        declared(&g)?;
        g.plan();
        Ok(g)
    }
}

/// Keys of ops, for merging identical ones: an op's row in the file, the formats and table
/// files it names numbered in order of first use (one numbering for every key of a set).
#[derive(Default)]
pub(super) struct OpKeys(encode::Numbers);

impl OpKeys {
    /// The key of `op`: equal for two ops exactly when they are the same op on the same
    /// inputs (pads compared by their bits).
    pub(super) fn key(&mut self, op: &Op) -> Vec<u8> {
        encode::row(op, &mut self.0)
    }
}

/// A JSON error as the graph's.
fn json(e: serde_json::Error) -> GraphError {
    GraphError::Json(e.to_string())
}
