//! Weight stacks prepared in one pass: from the host's f32 weights straight to the integers of
//! the kernel ([`IntWeights`]), or on the float path to the layout of its chunked matmul (in
//! f32 where that matmul runs in f32) or to the quantized f64 stack, tile by tile.
//!
//! The lowering builds every weight stack as a chain of whole-stack ops: `weight` (the host's
//! values) → `pad_to_tiles` (matrix layout) → `round` (to the storage format) → `quantize`
//! (BFP per tile row). Evaluated node by node, each link allocates a whole f64 stack, 4x the
//! integers the session finally keeps, and two are alive at a time. The session instead
//! computes such a stack here (or a `concat` of slices of such stacks): each tile is gathered
//! from the f32 weights, rounded and quantized by the same kernels the nodes run
//! ([`quant::round_seq`], [`quant::quantize_seq`]), and converted to integers while it is in
//! cache. Same bits, and no intermediate stack.

use super::intdot::{IntWeights, TileSource};
use super::quant;
use nnp_lowering::swgraph::{BlockAxis, NodeMap, Op, SwGraph, TileLayout, ValueId};
use nnp_numerics::{FloatFormat, Format};
use rayon::prelude::*;
use std::collections::HashSet;

/// A chain of the lowering, by node: `weight -> pad_to_tiles -> [round] -> quantize`, where
/// every link is read by the next alone, with the formats it applies.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WeightChain {
    pub weight: usize,
    pub pad: usize,
    pub round: Option<(usize, FloatFormat)>,
    /// The `quantize` node: the chain's value, a stack of `tiles` tiles.
    pub quantize: usize,
    pub format: Format,
    pub tiles: usize,
}

impl WeightChain {
    /// The nodes before the chain's value, in evaluation order.
    pub fn links(&self) -> impl Iterator<Item = usize> + '_ {
        [self.weight, self.pad]
            .into_iter()
            .chain(self.round.map(|(r, _)| r))
    }
}

/// Tiles `start .. start + count` of a chain's value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Part {
    pub chain: WeightChain,
    pub start: usize,
    pub count: usize,
}

/// A weight stack to prepare in one pass: the `(rows, cols)` of the products that read it,
/// and its tiles part by part (one part for a chain's own value, one per slice for a `concat`
/// of chains' values).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Stack {
    pub dims: (usize, usize),
    pub parts: Vec<Part>,
}

/// The lowering's chain of an input: `input -> pad_to_tiles (vector) -> round`, each link
/// read by the next alone. Its value, the `round`, is computed in one pass from the host's
/// f32 values ([`rounded_input`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct InputChain {
    pub input: usize,
    pub pad: usize,
    /// The padding lanes' value.
    pub pad_value: f64,
    pub format: FloatFormat,
}

/// Which weight stacks and inputs a session prepares in one pass, and which nodes it then
/// never evaluates on their own.
pub(crate) struct Plan {
    /// The stacks, by node.
    pub stacks: NodeMap<Option<Stack>>,
    /// The input chains, by their `round` node.
    pub inputs: NodeMap<Option<InputChain>>,
    /// The links of those chains, and the stacks' values where only such stacks read them.
    pub skipped: NodeMap<bool>,
}

/// The plan for the weight stacks in `stacks` (`(rows, cols)` of the products that read them,
/// the graph plan's `stacks`): every such stack that is a chain's value, or a `concat` of
/// slices of chains' values, with `rows * cols` tiles in all. A value a run hands back
/// (`handed`: traces, non-finite checks) is not skipped.
pub(crate) fn plan(
    graph: &SwGraph,
    stacks: &NodeMap<Option<(usize, usize)>>,
    handed: &HashSet<ValueId>,
) -> Plan {
    let (n, len) = (graph.native, graph.nodes.len());
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); len];
    for (i, node) in graph.nodes.iter().enumerate() {
        for v in node.op.inputs() {
            if readers[v.index()].last() != Some(&i) {
                readers[v.index()].push(i);
            }
        }
    }
    let mut handed_value = vec![false; len];
    handed.iter().for_each(|v| handed_value[v.index()] = true);
    let only_reader = |v: usize, r: usize| readers[v] == [r] && !handed_value[v];
    let op = |v: usize| &graph.nodes[v].op;
    let chain = |q: usize| {
        let Op::Quantize {
            src,
            format,
            axis: BlockAxis::TileRow,
        } = op(q)
        else {
            return None;
        };
        let (round, pad) = match op(src.index()) {
            Op::Round { src: inner, format } if only_reader(src.index(), q) => {
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
        let tiles = match op(weight) {
            Op::Weight { shape, .. } if shape.len() == 2 => {
                shape[0].div_ceil(n) * shape[1].div_ceil(n)
            }
            _ => return None,
        };
        let pad_reader = round.map_or(q, |(r, _)| r);
        (only_reader(pad, pad_reader) && only_reader(weight, pad)).then_some(WeightChain {
            weight,
            pad,
            round,
            quantize: q,
            format: *format,
            tiles,
        })
    };
    let parts_of = |s: usize, (rows, cols): (usize, usize)| {
        let parts = match op(s) {
            Op::Concat { parts } => parts
                .iter()
                .map(|p| {
                    let (start, count) = (p.start as usize, p.count as usize);
                    chain(p.value.index())
                        .filter(|c| start + count <= c.tiles)
                        .map(|chain| Part {
                            chain,
                            start,
                            count,
                        })
                })
                .collect::<Option<Vec<_>>>()?,
            _ => {
                let chain = chain(s)?;
                let count = chain.tiles;
                vec![Part {
                    chain,
                    start: 0,
                    count,
                }]
            }
        };
        (parts.iter().map(|p| p.count).sum::<usize>() == rows * cols).then_some(parts)
    };
    let stacks: Vec<Option<Stack>> = stacks
        .values()
        .enumerate()
        .map(|(s, dims)| {
            dims.and_then(|dims| {
                let parts = parts_of(s, dims)?;
                Some(Stack { dims, parts })
            })
        })
        .collect();
    // A chain's links are skipped where its value is such a stack or only such stacks read
    // it; that value too, in the second case.
    let mut skipped = vec![false; len];
    for part in stacks.iter().flatten().flat_map(|s| &s.parts) {
        let q = part.chain.quantize;
        let own = stacks[q].is_some();
        if own || (!handed_value[q] && readers[q].iter().all(|&r| stacks[r].is_some())) {
            part.chain.links().for_each(|l| skipped[l] = true);
            skipped[q] |= !own;
        }
    }
    let inputs: Vec<Option<InputChain>> = (0..len)
        .map(|r| {
            let Op::Round { src, format } = op(r) else {
                return None;
            };
            let pad = src.index();
            let Op::PadToTiles {
                src,
                layout: TileLayout::Vector,
                pad: pad_value,
            } = op(pad)
            else {
                return None;
            };
            let input = src.index();
            let logical = matches!(op(input), Op::Input { shape, .. } if shape.last() > Some(&0));
            (logical && only_reader(pad, r) && only_reader(input, pad)).then_some(InputChain {
                input,
                pad,
                pad_value: *pad_value,
                format: *format,
            })
        })
        .collect();
    for chain in inputs.iter().flatten() {
        skipped[chain.input] = true;
        skipped[chain.pad] = true;
    }
    Plan {
        stacks: stacks.into(),
        inputs: inputs.into(),
        skipped: skipped.into(),
    }
}

/// The value of an [`InputChain`] from the host's values `x`, `[items, c]` row-major (every
/// leading dimension of the input folded into `items`): each row padded with `pad` to `width`
/// lanes (`pad_to_tiles`), then rounded to `format` by the kernel the `round` node runs
/// ([`quant::round_seq`]). `[items * width]`, written once: no buffer for the input's f64
/// values, none zeroed. `None` unless `x` is whole rows of `c >= 1` values and `width >= c`.
pub(crate) fn rounded_input(
    x: &[f32],
    c: usize,
    width: usize,
    pad: f64,
    format: &FloatFormat,
) -> Option<Vec<f64>> {
    if c == 0 || width < c || !x.len().is_multiple_of(c) {
        return None;
    }
    let items = x.len() / c;
    // Rows per task: a few thousand values, converted and rounded in L1.
    let per = (4096 / width).max(1);
    let mut out: Vec<f64> = Vec::with_capacity(items * width);
    out.spare_capacity_mut()[..items * width]
        .par_chunks_mut(per * width)
        .zip(x.par_chunks(per * c))
        .for_each_init(
            || (Vec::new(), Vec::new()),
            |(padded, rounded): &mut (Vec<f64>, Vec<f64>), (dst, src)| {
                padded.clear();
                for row in src.chunks(c) {
                    padded.extend(row.iter().map(|&v| f64::from(v)));
                    padded.resize(padded.len() + width - row.len(), pad);
                }
                rounded.resize(padded.len(), 0.0);
                quant::round_seq(format, padded, rounded);
                dst.write_copy_of_slice(rounded);
            },
        );
    // SAFETY: the chunks of `dst` partition the first `items * width` values, and each was
    // written in full: its `src` has the same rows (`per` of them, or the rest, `c` values
    // each), each padded to `width` values (`write_copy_of_slice` checks the length).
    unsafe { out.set_len(items * width) };
    Some(out)
}

/// One part of a stack for [`int_stack`] and [`f64_stack`]: tiles `start .. start + count` of
/// the chain on the matrix `w` (`shape` `[r, c]`, row-major, the host's f32 values).
pub(crate) struct Source<'a> {
    pub w: &'a [f32],
    pub shape: &'a [usize],
    pub round: Option<&'a FloatFormat>,
    pub format: &'a Format,
    pub start: usize,
    pub count: usize,
}

/// The stack of `rows x cols` tiles of `n x n` that `parts` give in order, each tile as its
/// chain computes it (the matrix padded to whole tiles, rounded when the chain rounds,
/// quantized per tile row), as integers; `None` where that stack has no integer form (then
/// the session evaluates the nodes) or the parts do not make the stack.
pub(crate) fn int_stack(parts: &[Source], grid: (usize, usize, usize)) -> Option<IntWeights> {
    let (rows, cols, n) = grid;
    IntWeights::from_tiles(rows, cols, n, TileSource::Made(tile_maker(parts, grid)?))
}

/// The stack of [`int_stack`] as f64 values, `[rows * cols, n, n]` row-major (for the float
/// path); `None` where the parts do not make the stack.
pub(crate) fn f64_stack(parts: &[Source], grid: (usize, usize, usize)) -> Option<Vec<f64>> {
    let (rows, cols, n) = grid;
    let make = tile_maker(parts, grid)?;
    let mut stack = vec![0.0; rows * cols * n * n];
    stack.par_chunks_mut(n * n).enumerate().for_each_init(
        || vec![0.0; n * n],
        |scratch, (t, tile)| make(t, tile, scratch),
    );
    Some(stack)
}

/// The stack of [`f64_stack`] as the float path's chunked matmul reads it, never whole as
/// f64: `[cols * n / k, rows * n, k]` (chunk `(j, d)` of tile column `j` first, then row `i n
/// + r` of the matrix, then the `k` lanes `d k ..` of that chunk, as `super::products::arrange_w` lays
/// it out), each value converted by `to`. `None` where the parts do not make the stack or `k`
/// does not divide `n`.
pub(crate) fn arranged_stack<T: Copy + Default + Send>(
    parts: &[Source],
    grid: (usize, usize, usize),
    k: usize,
    to: impl Fn(f64) -> T + Sync,
) -> Option<Vec<T>> {
    let (rows, cols, n) = grid;
    if k == 0 || !n.is_multiple_of(k) {
        return None;
    }
    let make = tile_maker(parts, grid)?;
    let mut out = vec![T::default(); rows * cols * n * n];
    // One task per tile column j: its chunks are `rows * n * n` values in a row.
    out.par_chunks_mut(rows * n * n).enumerate().for_each_init(
        || (vec![0.0; n * n], vec![0.0; n * n]),
        |(tile, scratch), (j, dst)| {
            for i in 0..rows {
                make(i * cols + j, tile, scratch);
                for (r, row) in tile.chunks(n).enumerate() {
                    for (d, lanes) in row.chunks(k).enumerate() {
                        let at = (d * rows * n + i * n + r) * k;
                        for (o, &v) in dst[at..at + k].iter_mut().zip(lanes) {
                            *o = to(v);
                        }
                    }
                }
            }
        },
    );
    Some(out)
}

/// The stack of [`f64_stack`] as the bounded matmul reads it, never whole as a stack: one
/// `[rows * n, cols * n]` matrix (row `i n + r`, lanes `j n ..` from row `r` of tile `(i, j)`),
/// or with `per_tile` one `[rows * n, n]` matrix per tile column (the [`arranged_stack`] of
/// chunk `n`). `None` where the parts do not make the stack.
pub(crate) fn bounded_stack(
    parts: &[Source],
    grid: (usize, usize, usize),
    per_tile: bool,
) -> Option<Vec<f64>> {
    let (rows, cols, n) = grid;
    if per_tile {
        return arranged_stack(parts, grid, n, |v| v);
    }
    let make = tile_maker(parts, grid)?;
    let mut out = vec![0.0; rows * cols * n * n];
    // One task per tile row i: matrix rows `i n ..`, `n * cols * n` values in a row.
    out.par_chunks_mut((n * cols * n).max(1))
        .enumerate()
        .for_each_init(
            || (vec![0.0; n * n], vec![0.0; n * n]),
            |(tile, scratch), (i, dst)| {
                for j in 0..cols {
                    make(i * cols + j, tile, scratch);
                    for (r, row) in tile.chunks(n).enumerate() {
                        dst[(r * cols + j) * n..][..n].copy_from_slice(row);
                    }
                }
            },
        );
    Some(out)
}

/// Whether `parts` make a `rows x cols` stack of `n x n` tiles.
pub(crate) fn makes_stack(parts: &[Source], grid: (usize, usize, usize)) -> bool {
    tile_maker(parts, grid).is_some()
}

/// The function that writes tile `t` of the stack that `parts` make (with a scratch buffer
/// of one tile), or `None` where they do not make a `rows x cols` stack.
fn tile_maker<'a>(
    parts: &'a [Source],
    (rows, cols, n): (usize, usize, usize),
) -> Option<impl Fn(usize, &mut [f64], &mut [f64]) + Sync + 'a> {
    // Per part: its first tile in the stack, `[r, c]`, and its tile columns.
    let mut first = 0;
    let mut layout = Vec::with_capacity(parts.len());
    for p in parts {
        let &[r, c] = p.shape else { return None };
        let ct = c.div_ceil(n);
        if p.w.len() != r * c || p.start + p.count > r.div_ceil(n) * ct {
            return None;
        }
        layout.push((first, (r, c), ct));
        first += p.count;
    }
    if first != rows * cols {
        return None;
    }
    Some(move |t: usize, tile: &mut [f64], scratch: &mut [f64]| {
        let pi = layout.partition_point(|l| l.0 <= t) - 1;
        let (p, (at, (r, c), ct)) = (&parts[pi], layout[pi]);
        let s = p.start + t - at;
        let (i, j) = (s / ct, s % ct);
        // `pad_to_tiles`: row `i n + k`, lanes `j n ..`, zeros past the matrix.
        for (k, run) in tile.chunks_mut(n).enumerate() {
            let row = i * n + k;
            let lanes = if row < r {
                c.saturating_sub(j * n).min(n)
            } else {
                0
            };
            let src = &p.w[(row * c + j * n).min(p.w.len())..][..lanes];
            for (o, &x) in run.iter_mut().zip(src) {
                *o = f64::from(x);
            }
            run[lanes..].fill(0.0);
        }
        match p.round {
            Some(f) => quant::round_seq(f, tile, scratch),
            None => scratch.copy_from_slice(tile),
        }
        quant::quantize_seq(p.format, scratch, n, n, tile);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intdot::tests::xorshift;
    use crate::products::arrange_w;
    use crate::quant::{quantize_runs, round_slice};
    use candle_core::{DType, Device, Tensor};

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
    /// rounded, quantized per tile row.
    fn by_nodes(
        w: &[f32],
        (r, c): (usize, usize),
        n: usize,
        round: Option<&FloatFormat>,
        quantize: &Format,
    ) -> Vec<f64> {
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
        q
    }

    /// [`rounded_input`] gives the input chain's nodes' value, bit for bit: the rows padded by
    /// `pad_to_tiles`' definition (lane `l` of row `i` is `x[i][l]`, `pad` past `c`), then
    /// rounded whole by `round_slice`. Adversarial rows (fp16 ties, subnormals, `-0.0`, 65519
    /// and 65520, NaN and infinities), widths of one lane to several tiles with and without
    /// padding, a padding value that the rounding changes, and more rows than one task takes.
    #[test]
    fn rounded_inputs_equal_the_chain_node_by_node() {
        let fp16 = FloatFormat::FP16;
        let bf16 = FloatFormat::BF16;
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for (items, c, width, pad) in [
            (3, 21, 32, 0.0),
            (5, 16, 16, 0.0),
            (1, 1, 16, 65519.0),
            (700, 300, 384, -0.0),
            (2, 5, 8, f64::NAN),
        ] {
            let mut x = adversarial(&mut s, items, c, 5);
            for (k, v) in x.iter_mut().enumerate().filter(|(k, _)| k % 97 == 3) {
                *v = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 65520.0][k % 4];
            }
            for format in [&fp16, &bf16] {
                let mut padded = vec![pad; items * width];
                for (i, row) in x.chunks(c).enumerate() {
                    for (l, &v) in row.iter().enumerate() {
                        padded[i * width + l] = f64::from(v);
                    }
                }
                let mut want = vec![0.0; padded.len()];
                round_slice(format, &padded, &mut want);
                let got = rounded_input(&x, c, width, pad, format).expect("whole rows");
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{items} x {c} in {width}");
            }
        }
        // Not whole rows, or rows wider than the padded width: refused.
        let x = [1.0f32; 12];
        assert!(rounded_input(&x, 5, 8, 0.0, &fp16).is_none());
        assert!(rounded_input(&x, 4, 3, 0.0, &fp16).is_none());
        assert!(rounded_input(&x, 0, 8, 0.0, &fp16).is_none());
        assert_eq!(rounded_input(&[], 4, 8, 0.0, &fp16), Some(vec![]));
    }

    /// `(w, [r, c], round, format, start, count)` of one part.
    type Spec<'a> = (
        Vec<f32>,
        [usize; 2],
        Option<&'a FloatFormat>,
        &'a Format,
        usize,
        usize,
    );

    /// [`int_stack`] and [`f64_stack`] of `specs` against the nodes' stacks concatenated (and
    /// converted): the same values, integers, row scales and restored values, bit for bit
    /// (no integers on either side where the values have no integer form). Whether a
    /// restored stack was compared.
    fn check(specs: &[Spec], rows: usize, cols: usize, n: usize) -> bool {
        let mut q = Vec::new();
        for (w, [r, c], round, format, start, count) in specs {
            let nodes = by_nodes(w, (*r, *c), n, *round, format);
            q.extend_from_slice(&nodes[start * n * n..][..count * n * n]);
        }
        let expected = IntWeights::new(&q, rows, cols, n);
        let sources: Vec<Source> = specs
            .iter()
            .map(|(w, shape, round, format, start, count)| Source {
                w,
                shape,
                round: *round,
                format,
                start: *start,
                count: *count,
            })
            .collect();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let floats = f64_stack(&sources, (rows, cols, n)).expect("the parts make the stack");
        assert_eq!(bits(&floats), bits(&q), "the float path's stack");
        // The bounded matmul's matrices, by hand: row `i n + r`, lanes `j n + c` from tile
        // (i, j); per tile column, tile column j's `[rows * n, n]` matrix.
        let at = |i: usize, j: usize, r: usize| &q[((i * cols + j) * n + r) * n..][..n];
        let (mut dense, mut per_tile) = (Vec::new(), Vec::new());
        for i in 0..rows {
            for r in 0..n {
                (0..cols).for_each(|j| dense.extend_from_slice(at(i, j, r)));
            }
        }
        for j in 0..cols {
            for i in 0..rows {
                (0..n).for_each(|r| per_tile.extend_from_slice(at(i, j, r)));
            }
        }
        for (tiles, want) in [(false, &dense), (true, &per_tile)] {
            let got = bounded_stack(&sources, (rows, cols, n), tiles).expect("made");
            assert_eq!(bits(&got), bits(want), "bounded, per tile: {tiles}");
        }
        // The float path's arranged stacks: the stack of the nodes rearranged and converted as
        // the session did before (`arrange_w` with candle, then `to_dtype`).
        let t = Tensor::from_vec(q.clone(), (1, rows * cols, n, n), &Device::Cpu).unwrap();
        for k in [n, n / 2, 4] {
            let arranged = arrange_w(&t, rows, cols, n, k).unwrap();
            let want = arranged.flatten_all().unwrap().to_vec1::<f64>().unwrap();
            let got = arranged_stack(&sources, (rows, cols, n), k, |v| v).unwrap();
            assert_eq!(bits(&got), bits(&want), "arranged f64, k = {k}");
            let want = arranged
                .to_dtype(DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap();
            let want: Vec<u32> = want
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            let got = arranged_stack(&sources, (rows, cols, n), k, |v| v as f32).unwrap();
            let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "arranged f32, k = {k}");
        }
        let got = int_stack(&sources, (rows, cols, n));
        assert_eq!(
            got.is_some(),
            expected.is_some(),
            "integers on one side only"
        );
        let (Some(expected), Some(got)) = (expected, got) else {
            return false;
        };
        assert_eq!(got.tiles_row_major(), expected.tiles_row_major());
        let scale_bits =
            |wi: &IntWeights| -> Vec<u64> { wi.row_scales().iter().map(|x| x.to_bits()).collect() };
        assert_eq!(scale_bits(&got), scale_bits(&expected));
        assert_eq!(got.restorable(), expected.restorable());
        let Some(v) = got.restore() else { return false };
        assert_eq!(bits(&v), bits(&q));
        true
    }

    /// [`int_stack`] gives the integers of the chains evaluated node by node, and [`f64_stack`]
    /// their values, on adversarial matrices whose sizes are not multiples of the tile
    /// (padding), with and without a rounding link, for BFP and for a fixed-point format with
    /// stochastic rounding (the generic path), for a chain's whole value and for slices of two
    /// chains with different formats side by side (a `concat`); and no integers where the
    /// chain's value has none (a weight that rounds to infinity), nothing where the parts do
    /// not make the stack.
    #[test]
    fn one_pass_stacks_equal_the_chains_node_by_node() {
        let f = |lit: &str| -> Format { lit.parse().expect("valid format") };
        let bfp8 = f("bfp(mant = 8, exp_bits = 5)");
        let bfp5 = f("bfp(mant = 5, exp_bits = 5)");
        let fixed = f("fixed(int = 2, frac = 3, round = stochastic(seed = 764))");
        let fp16 = FloatFormat::FP16;
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut compared = 0;
        for (n, r, c) in [(16, 40, 21), (32, 64, 64), (128, 200, 300), (16, 1, 1)] {
            for (round, format) in [(Some(&fp16), &bfp8), (None, &bfp8), (Some(&fp16), &fixed)] {
                let w = adversarial(&mut s, r, c, 7);
                let (rows, cols) = (r.div_ceil(n), c.div_ceil(n));
                let spec = (w, [r, c], round, format, 0, rows * cols);
                compared += usize::from(check(&[spec], rows, cols, n));
            }
        }
        // Tiles 1..4 of a 3 x 2 grid, then tiles 0..2 of a 2 x 1 one: a 3 x 2 stack.
        let a = adversarial(&mut s, 40, 21, 7);
        let b = adversarial(&mut s, 17, 16, 5);
        let specs = [
            (a.clone(), [40, 21], Some(&fp16), &bfp8, 1, 4),
            (b.clone(), [17, 16], None, &bfp5, 0, 2),
        ];
        compared += usize::from(check(&specs, 3, 2, 16));
        assert!(compared >= 10, "{compared} restorable stacks compared");
        // 65520 rounds to fp16 infinity: its BFP block is NaN, which has no integers.
        let mut w = a.clone();
        w[3 * 21 + 5] = 65520.0;
        assert!(!check(&[(w, [40, 21], Some(&fp16), &bfp8, 0, 6)], 3, 2, 16));
        // Parts that do not make the stack are refused, not misread.
        let part = |shape: &'static [usize], start, count| Source {
            w: &a,
            shape,
            round: Some(&fp16),
            format: &bfp8,
            start,
            count,
        };
        for (p, grid) in [
            (part(&[40, 20], 0, 6), (3, 2)),
            (part(&[40, 21], 0, 6), (3, 3)),
            (part(&[40, 21], 1, 6), (3, 2)),
            (part(&[840], 0, 6), (3, 2)),
        ] {
            assert!(!makes_stack(std::slice::from_ref(&p), (grid.0, grid.1, 16)));
            assert!(int_stack(&[p], (grid.0, grid.1, 16)).is_none());
            let p = [part(&[40, 21], 0, 6)];
            assert!(f64_stack(&p, (grid.0, grid.1 + 1, 16)).is_none());
            assert!(bounded_stack(&p, (grid.0, grid.1 + 1, 16), false).is_none());
            assert!(makes_stack(&p, (3, 2, 16)));
        }
        // So are chunks that do not divide the tile.
        let p = [part(&[40, 21], 0, 6)];
        assert!(arranged_stack(&p, (3, 2, 16), 16, |v| v).is_some());
        assert!(arranged_stack(&p, (3, 2, 16), 3, |v| v).is_none());
        assert!(arranged_stack(&p, (3, 3, 16), 16, |v| v).is_none());
    }
}
