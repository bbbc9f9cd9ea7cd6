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

mod data;
mod differential;
mod minimize;
mod program;

pub use data::{DataConfig, host_data};
pub use differential::{
    Outcome, compare_outputs, compare_traces, first_address, minimize_failure, refused_alike,
    run_differential,
};
pub use minimize::minimize;
use program::Gen;

/// Knobs of the generator. `Default` gives the small programs of the CI run.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Native dimensions to draw the target's N from.
    pub natives: Vec<usize>,
    /// Targets have 1..=max_mfus MFUs.
    pub max_mfus: usize,
    /// Vector chains per program (matrix copy chains come on top).
    pub max_chains: usize,
    /// Largest `rows` / `cols` (vector width in native tiles).
    pub max_tiles: u32,
    /// Largest `s_wr iterations` value.
    pub max_iterations: u32,
    /// Most MFU ops in one chain.
    pub max_ops: usize,
    /// Probability of `quant` directives before a chain.
    pub quant_prob: f64,
    /// Allow `mfu.input` formats other than fp16/bf16 (activations computed in f64 and rounded).
    pub wide_mfu_formats: bool,
    /// Draw MVM formats from the whole catalogue (HBFP, int, fixed, dynamic fixed, power-of-two,
    /// two-hot too), not only BFP/MSFP/MX/floats.
    pub all_formats: bool,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            natives: vec![4, 8, 16],
            max_mfus: 3,
            max_chains: 6,
            max_tiles: 3,
            max_iterations: 3,
            max_ops: 4,
            quant_prob: 0.3,
            wide_mfu_formats: true,
            all_formats: true,
        }
    }
}

impl GenConfig {
    /// Bigger programs: more and wider chains, more iterations and MFU ops.
    pub fn large() -> Self {
        GenConfig {
            max_chains: 14,
            max_tiles: 4,
            max_iterations: 5,
            max_ops: 6,
            ..GenConfig::default()
        }
    }

    /// Programs whose products mostly fit the software graph's integer kernel
    /// (`exec::intdot`): N a multiple of 16, MVM formats from BFP/MSFP/MX/floats.
    pub fn integer_kernel() -> Self {
        GenConfig {
            natives: vec![16, 32],
            all_formats: false,
            ..GenConfig::default()
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// Random numbers: SplitMix64 (tiny, good enough, and stable across crate versions).

/// A small deterministic random stream.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// A stream derived from a seed and a name (stable when other names come and go).
    pub fn keyed(seed: u64, key: &str) -> Self {
        // FNV-1a over the key, mixed with the seed.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut r = Rng::new(seed ^ h.rotate_left(17));
        r.next_u64();
        r
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}
