//! Weight stacks prepared in one pass: from the host's f32 weights straight to the integers of
//! the kernel ([`intdot::IntWeights`]), tile by tile.
//!
//! The lowering builds every weight stack as a chain of whole-stack ops: `weight` (the host's
//! values) → `pad_to_tiles` (matrix layout) → `round` (to the storage format) → `quantize`
//! (BFP per tile row). Evaluated node by node, each link allocates a whole f64 stack, 4x the
//! integers the session finally keeps, and two are alive at a time. Where the integer kernel
//! runs, the session instead evaluates such a chain here: each tile is gathered from the f32
//! weights, rounded and quantized by the same kernels the nodes run ([`quant::round_seq`],
//! [`quant::quantize_seq`]) and converted to integers while it is in cache. Same bits; the
//! whole f64 stack never exists.

use super::intdot::{IntWeights, TileSource};
use super::quant;
use nnp_lowering::swgraph::{BlockAxis, Op, SwGraph, TileLayout};
use nnp_numerics::{FloatFormat, Format};

/// A weight stack's chain, by node: `weight -> pad_to_tiles -> [round] -> quantize`, where
/// every link is read by the next alone, with the formats it applies.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WeightChain {
    pub weight: usize,
    pub pad: usize,
    pub round: Option<(usize, FloatFormat)>,
    /// The `quantize` node's format.
    pub format: Format,
}

impl WeightChain {
    /// The nodes before the stack, in evaluation order.
    pub fn links(&self) -> impl Iterator<Item = usize> + '_ {
        [self.weight, self.pad]
            .into_iter()
            .chain(self.round.map(|(r, _)| r))
    }
}

/// The chain of every weight stack in `stacks` (`(rows, cols)` of the products that read it,
/// [`super::weight_stacks`]) that the lowering built as [`WeightChain`] says, with a tile
/// grid equal to the products' and no link read by anything else (a trace included, when
/// `traced`); `None` for every other node.
pub(crate) fn weight_chains(
    graph: &SwGraph,
    stacks: &[Option<(usize, usize)>],
    traced: bool,
) -> Vec<Option<WeightChain>> {
    let n = graph.native;
    let mut readers = vec![0usize; graph.nodes.len()];
    for node in &graph.nodes {
        node.op
            .inputs()
            .iter()
            .for_each(|v| readers[v.index()] += 1);
    }
    if traced {
        graph
            .writes
            .iter()
            .for_each(|w| readers[w.value.index()] += 1);
    }
    let only_reader = |v: usize| readers[v] == 1;
    let op = |v: usize| &graph.nodes[v].op;
    let chain = |q: usize, (rows, cols): (usize, usize)| {
        let Op::Quantize {
            src,
            format,
            axis: BlockAxis::TileRow,
        } = op(q)
        else {
            return None;
        };
        let (round, pad) = match op(src.index()) {
            Op::Round { src: inner, format } if only_reader(src.index()) => {
                (Some((src.index(), *format)), inner.index())
            }
            Op::Round { .. } => return None,
            _ => (None, src.index()),
        };
        let Op::PadToTiles {
            src,
            layout: TileLayout::Matrix,
            ..
        } = op(pad)
        else {
            return None;
        };
        let weight = src.index();
        let grid = match op(weight) {
            Op::Weight { shape, .. } if shape.len() == 2 => {
                (shape[0].div_ceil(n), shape[1].div_ceil(n))
            }
            _ => return None,
        };
        (grid == (rows, cols) && only_reader(pad) && only_reader(weight)).then_some(WeightChain {
            weight,
            pad,
            round,
            format: *format,
        })
    };
    stacks
        .iter()
        .enumerate()
        .map(|(q, dims)| dims.and_then(|d| chain(q, d)))
        .collect()
}

/// The stack of the matrix `w` (`shape` `[r, c]`, row-major, the host's f32 values) padded to
/// `rows x cols` tiles of `n x n`, rounded to `round` (when given), quantized to `quantize`
/// per tile row, as integers: the value its chain computes, or `None` where that value has no
/// integer form (then the session evaluates the chain node by node).
pub(crate) fn int_stack(
    w: &[f32],
    shape: &[usize],
    (rows, cols, n): (usize, usize, usize),
    round: Option<&FloatFormat>,
    quantize: &Format,
) -> Option<IntWeights> {
    let &[r, c] = shape else { return None };
    if w.len() != r * c || (r.div_ceil(n), c.div_ceil(n)) != (rows, cols) {
        return None;
    }
    let make = |t: usize, tile: &mut [f64], scratch: &mut [f64]| {
        let (i, j) = (t / cols, t % cols);
        // `pad_to_tiles`: row `i n + k`, lanes `j n ..`, zeros past the matrix.
        for (k, run) in tile.chunks_mut(n).enumerate() {
            let row = i * n + k;
            let lanes = if row < r {
                c.saturating_sub(j * n).min(n)
            } else {
                0
            };
            let src = &w[(row * c + j * n).min(w.len())..][..lanes];
            for (o, &x) in run.iter_mut().zip(src) {
                *o = f64::from(x);
            }
            run[lanes..].fill(0.0);
        }
        match round {
            Some(f) => quant::round_seq(f, tile, scratch),
            None => scratch.copy_from_slice(tile),
        }
        quant::quantize_seq(quantize, scratch, n, n, tile);
    };
    IntWeights::from_tiles(rows, cols, n, TileSource::Made(make))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::intdot::tests::xorshift;
    use crate::exec::quant::{quantize_runs, round_slice};

    /// An `[r, c]` f32 matrix whose rows mix, run by run: zeros with a `-0.0`, fp16 ties
    /// (halfway between neighbours), values in fp16's subnormal range and f32 subnormals,
    /// magnitudes 2^-30 to 2^15 side by side (a BFP row keeps the top ones), values at fp16's
    /// largest finite value and just below where it rounds to infinity, and plain noise.
    fn adversarial(s: &mut u64, r: usize, c: usize, run: usize) -> Vec<f32> {
        let mut w = vec![0.0f32; r * c];
        for seg in w.chunks_mut(run) {
            let kind = xorshift(s) % 6;
            for x in seg.iter_mut() {
                let k = (xorshift(s) % 1024) as f32;
                let sign = if xorshift(s).is_multiple_of(2) {
                    1.0
                } else {
                    -1.0
                };
                let e = (xorshift(s) % 46) as i32 - 30;
                *x = sign
                    * match kind {
                        0 => [0.0, -0.0][(xorshift(s) % 2) as usize],
                        1 => (1.0 + (2.0 * k + 1.0) / 2048.0) * 2f32.powi(e.clamp(-14, 15)),
                        2 => {
                            [k * 2f32.powi(-26), 1e-40, 2f32.powi(-25)][(xorshift(s) % 3) as usize]
                        }
                        3 => (1.0 + k / 1024.0) * 2f32.powi(e),
                        4 => [65504.0, 65519.0, 65503.0][(xorshift(s) % 3) as usize],
                        _ => (k - 512.0) / 37.0,
                    };
            }
        }
        w
    }

    /// The chain node by node, as the executor evaluates it: the padded stack built from its
    /// definition (tile `(i, j)`, row `k`, lane `l` is `w[i n + k][j n + l]`, zero outside),
    /// rounded, quantized per tile row, then converted.
    fn by_nodes(
        w: &[f32],
        (r, c): (usize, usize),
        n: usize,
        round: Option<&FloatFormat>,
        quantize: &Format,
    ) -> (Vec<f64>, Option<IntWeights>) {
        let (rows, cols) = (r.div_ceil(n), c.div_ceil(n));
        let mut stack = vec![0.0; rows * cols * n * n];
        for (e, v) in stack.iter_mut().enumerate() {
            let (t, k, l) = (e / (n * n), e / n % n, e % n);
            let (row, col) = ((t / cols) * n + k, (t % cols) * n + l);
            if row < r && col < c {
                *v = f64::from(w[row * c + col]);
            }
        }
        let mut rounded = stack.clone();
        if let Some(f) = round {
            round_slice(f, &stack, &mut rounded);
        }
        let mut q = vec![0.0; stack.len()];
        quantize_runs(quantize, &rounded, n, n, &mut q);
        let wi = IntWeights::new(&q, rows, cols, n);
        (q, wi)
    }

    /// [`int_stack`] gives the integers of the chain evaluated node by node: the same
    /// integers, row scales and restored values, bit for bit, on adversarial matrices whose
    /// sizes are not multiples of the tile (padding), with and without a rounding link, for
    /// BFP and for a fixed-point format with stochastic rounding (the generic path); and no
    /// integers where the chain's value has none (a weight that rounds to infinity).
    #[test]
    fn one_pass_stacks_equal_the_chain_node_by_node() {
        let f = |lit: &str| -> Format { lit.parse().expect("valid format") };
        let bfp8 = f("bfp(mant = 8, exp_bits = 5)");
        let fixed = f("fixed(int = 2, frac = 3, round = stochastic(seed = 764))");
        let fp16 = FloatFormat::FP16;
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut checked = 0;
        for (n, r, c) in [(16, 40, 21), (32, 64, 64), (128, 200, 300), (16, 1, 1)] {
            for (round, quantize) in [(Some(&fp16), &bfp8), (None, &bfp8), (Some(&fp16), &fixed)] {
                let w = adversarial(&mut s, r, c, 7);
                let grid = (r.div_ceil(n), c.div_ceil(n), n);
                let (q, expected) = by_nodes(&w, (r, c), n, round, quantize);
                let got = int_stack(&w, &[r, c], grid, round, quantize);
                let (Some(expected), Some(got)) = (expected, got) else {
                    panic!("n {n}, {r} x {c}: both should fit");
                };
                assert_eq!(got.tiles_row_major(), expected.tiles_row_major());
                let scale_bits = |wi: &IntWeights| -> Vec<u64> {
                    wi.row_scales().iter().map(|x| x.to_bits()).collect()
                };
                assert_eq!(scale_bits(&got), scale_bits(&expected));
                assert_eq!(got.restorable(), expected.restorable());
                if let Some(v) = got.restore() {
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&v), bits(&q), "n {n}, {r} x {c}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 0, "no restorable stack was compared");
        // 65520 rounds to fp16 infinity: its BFP block is NaN, which has no integers.
        let mut w = adversarial(&mut s, 40, 21, 7);
        w[3 * 21 + 5] = 65520.0;
        let (_, expected) = by_nodes(&w, (40, 21), 16, Some(&fp16), &bfp8);
        assert!(expected.is_none());
        assert!(int_stack(&w, &[40, 21], (3, 2, 16), Some(&fp16), &bfp8).is_none());
        // A shape or grid that does not match is refused, not misread.
        assert!(int_stack(&w, &[40, 20], (3, 2, 16), Some(&fp16), &bfp8).is_none());
        assert!(int_stack(&w, &[40, 21], (3, 3, 16), Some(&fp16), &bfp8).is_none());
        assert!(int_stack(&w, &[840], (3, 2, 16), Some(&fp16), &bfp8).is_none());
    }
}
