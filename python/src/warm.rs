//! Which weights a graph's warm session prepared, and whether a call's are the same: seeded
//! ones by seed, `nnpc.Weights` by identity, arrays bit for bit, compared in place.

use nnp_grammar::Program;
use nnp_runtime::host::{HostData, Tensor};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The weights a warm session prepared.
pub enum Prepared {
    /// These, bit for bit (shared with the `nnpc.Weights` they came from, if any).
    Given(Arc<BTreeMap<String, Tensor>>),
    /// The seeded random weights of this seed.
    Seeded(u64),
}

/// The weights of a run, as a warm session is matched with them (`Graph::run_warm`).
pub enum RunWeights<'a> {
    /// Every weight, as the caller's float32 arrays of the declared shapes, read in place.
    Views(BTreeMap<String, (&'a [f32], &'a [usize])>),
    /// Weights the extension holds, frozen: known by identity.
    Held(&'a Arc<BTreeMap<String, Tensor>>),
    /// The seeded random weights of this seed.
    Seeded(u64),
}

impl RunWeights<'_> {
    /// Whether a session prepared with `prepared` holds these weights.
    pub fn prepared_by(&self, prepared: &Prepared) -> bool {
        use rayon::prelude::*;
        match (self, prepared) {
            (RunWeights::Seeded(a), Prepared::Seeded(b)) => a == b,
            // The prepared session holds this `Arc`, so no other set has its address.
            (RunWeights::Held(a), Prepared::Given(b)) => Arc::ptr_eq(a, b),
            (RunWeights::Views(views), Prepared::Given(given)) => {
                views.len() == given.len()
                    && views.iter().zip(given.iter()).all(|((a, (x, _)), (b, t))| {
                        const PIECE: usize = 1 << 16;
                        a == b
                            && x.len() == t.data.len()
                            && x.par_chunks(PIECE)
                                .zip(t.data.par_chunks(PIECE))
                                .all(|(x, y)| {
                                    // Every bit difference or'd together, with no early exit
                                    // inside a piece, so that the loop vectorises.
                                    let diff = x
                                        .iter()
                                        .zip(y)
                                        .fold(0u32, |d, (p, q)| d | (p.to_bits() ^ q.to_bits()));
                                    diff == 0
                                })
                    })
            }
            _ => false,
        }
    }

    /// The weights themselves, and what a session prepared with them is matched by.
    pub fn owned(&self, program: &Program) -> (BTreeMap<String, Tensor>, Prepared) {
        match self {
            RunWeights::Seeded(seed) => (
                HostData::random_weights(program, *seed),
                Prepared::Seeded(*seed),
            ),
            RunWeights::Views(views) => {
                let tensors: BTreeMap<String, Tensor> = views
                    .iter()
                    .map(|(name, (x, shape))| {
                        let data = x.to_vec();
                        let shape = shape.to_vec();
                        (name.clone(), Tensor { shape, data })
                    })
                    .collect();
                (tensors.clone(), Prepared::Given(Arc::new(tensors)))
            }
            RunWeights::Held(held) => ((***held).clone(), Prepared::Given(Arc::clone(held))),
        }
    }
}

/// Whether two sets of weights are the same tensors, bit for bit (`-0` is not `+0`).
pub fn same_bits(a: &BTreeMap<String, Tensor>, b: &BTreeMap<String, Tensor>) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((na, ta), (nb, tb))| {
            na == nb
                && ta.shape == tb.shape
                && ta.data.len() == tb.data.len()
                && ta
                    .data
                    .iter()
                    .zip(&tb.data)
                    .all(|(x, y)| x.to_bits() == y.to_bits())
        })
}
