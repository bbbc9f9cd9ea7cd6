//! The generator's knobs ([`GenConfig`]): the sizes and formats a program is drawn from.

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
    /// Probability that a product chain reads input rows that the chain drawn just before it
    /// moved from netq to fresh ivrf registers, one row per iteration, with its matrix the
    /// same in every iteration: input-dependent products over one weight stack (what a warm
    /// pass of few items stacks). At 0 no draw is made, so the other configurations' programs
    /// stay as they are.
    pub feed_prob: f64,
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
            feed_prob: 0.0,
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

    /// Integer-kernel programs whose product chains mostly read input rows (`feed_prob`),
    /// iterated up to 4 times: the stacked steps' products, on random data and formats.
    pub fn stacked_products() -> Self {
        GenConfig {
            max_iterations: 4,
            feed_prob: 0.7,
            ..GenConfig::integer_kernel()
        }
    }
}
