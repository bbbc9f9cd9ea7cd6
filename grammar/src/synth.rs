//! A synthetic valid program of a given size, for front-end benchmarks.

use std::fmt::Write as _;

/// A valid program of at least `instructions` instructions on `bw-default`, written out flat
/// (no `repeat`). Chains multiply 2 x 2 tiles, add a bias, apply a sigmoid and a scale, and
/// ping-pong between the two halves of ivrf, so every read is initialised; the last 512
/// chains' writes are never read (dead-write warnings).
pub fn synthetic_program(instructions: usize) -> String {
    const PER_CHAIN: usize = 7;
    let chains = instructions.saturating_sub(5).div_ceil(PER_CHAIN).max(1);
    let mut s = String::with_capacity(chains * 130 + 512);
    s.push_str(
        "// synthetic front-end benchmark program\n\
         matrix W : [256, 256] at mrf[0]\n\
         vector b : [256] at asvrf0[0]\n\
         vector g : [256] at mulvrf0[0]\n\
         vector v : [512, 256] at ivrf[0]\n\
         input  x : [256]\n\
         output y : [256]\n\
         s_wr rows, 2\n\
         s_wr cols, 2\n\
         v_rd netq\n\
         v_wr netq\n\
         end_chain\n",
    );
    for i in 0..chains {
        let slot = (i % 512) * 2;
        let half = (i / 512) % 2;
        let src = slot + half * 1024;
        let dst = slot + (1 - half) * 1024;
        let _ = write!(
            s,
            "v_rd ivrf[{src}]\nmv_mul mrf[W]\nvv_add asvrf0[b]\nv_sigm\nvv_mul mulvrf0[g]\n\
             v_wr ivrf[{dst}]\nend_chain\n"
        );
    }
    s
}
