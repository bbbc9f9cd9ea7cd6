//! Random firmware programs for differential testing (software graph vs emulator): a
//! dev-dependency of `nnpc`'s tests (`tests/differential.rs`, `tests/mutants.rs`), never part
//! of the shipped library or binary.
//!
//! [`generate`] builds a program that is valid *by construction*: it models the machine state
//! (which registers hold data, which are declared, where the scalar registers stand, the MFU
//! placement rule, netq pops and pushes) and only emits instructions the checker accepts. It
//! never generates and rejects. [`host_data`] fills the program's declarations with adversarial
//! data (exponent spreads across tiles, ties at BFP rounding points, saturation, zeros,
//! subnormals, NaN/Inf), and [`minimize`] shrinks a failing program.
//!
//! Everything is a pure function of the seed (a private SplitMix64 stream), so a failure is
//! reproduced from its seed alone.

mod config;
mod data;
mod differential;
mod minimize;
mod program;
mod rng;

pub use config::GenConfig;
pub use data::{DataConfig, host_data};
pub use differential::{
    Outcome, compare_outputs, compare_traces, first_address, minimize_failure, refused_alike,
    run_differential,
};
pub use minimize::minimize;
use program::Gen;
pub use rng::Rng;

/// A generated program: firmware text and its target description (TOML).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    pub source: String,
    pub target_toml: String,
}

/// Generate one valid program from a seed.
pub fn generate(seed: u64, cfg: &GenConfig) -> Generated {
    let mut g = Gen::new(seed, cfg);
    g.build();
    Generated {
        source: g.render(),
        target_toml: g.target_toml(),
    }
}
