//! Packed bit encodings of every format, and their storage cost.

use crate::format::{Block, Format, IntScale};

/// Bits per element for runs of `run_len` elements (block headers amortised over their block,
/// per-run headers over the run).
pub fn bits_per_element(f: &Format, native: usize, run_len: usize) -> f64 {
    let run = run_len.max(1) as f64;
    let per_block = |block: &Block, elem_bits: f64, header: f64| {
        let len = block.len(native) as f64;
        elem_bits + header / len
    };
    match f {
        Format::Float(ff) => f64::from(ff.bits()),
        Format::Bfp(b) => per_block(&b.block, f64::from(b.mant), f64::from(b.exp_bits)),
        Format::Mx(m) => per_block(&m.block, f64::from(m.elem.bits()), 8.0),
        Format::Hbfp(h) => {
            let len = h.block.len(native);
            h.block_bits(len) as f64 / len as f64
        }
        Format::Int(i) => {
            let header = match i.scale {
                IntScale::Pow2 => 8.0,
                IntScale::F32 => 32.0,
            };
            f64::from(i.bits) + header / run
        }
        Format::Fixed(x) => f64::from(x.int + x.frac),
        Format::DynFixed(d) => f64::from(d.bits) + 8.0 / run,
        Format::Pot(p) => per_block(&p.block, f64::from(p.bits), 8.0),
        Format::TwoHot(t) => per_block(&t.block, f64::from(t.bits), 8.0),
    }
}
