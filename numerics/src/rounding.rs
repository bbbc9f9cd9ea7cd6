//! Rounding modes offered by every quantizer.

use serde::{Deserialize, Serialize};

/// How a value that falls between two representable values is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Rounding {
    /// Round to nearest, ties to even (IEEE default).
    #[default]
    NearestEven,
    /// Round to nearest, ties away from zero.
    NearestAway,
    /// Truncate toward zero.
    TowardZero,
    /// Stochastic rounding driven by an explicit seed (reproducible).
    Stochastic { seed: u64 },
}
