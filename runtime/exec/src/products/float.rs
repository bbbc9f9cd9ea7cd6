//! The float path of the products the integer kernel does not take: which path each takes
//! from its formats, the weight stacks whose every product takes one layout, and the
//! chunked matmul's layout of a stack.

use super::product_spec;
use crate::matmul::{MIN_CHUNK, MatVec};
use crate::{matmul, prepare};
use candle_core::{DType, Tensor};
use nnp_lowering::swgraph::{NodeMap, Op, SwGraph};
use nnp_numerics::Format;

/// A weight stack `[1, rows*cols, n, n]` as `[chunks, rows*n, k]` for the chunked matmul:
/// `[rows, cols, n, n/k, k] -> [cols, n/k, rows, n, k]`.
pub(crate) fn arrange_w(
    t: &Tensor,
    rows: usize,
    cols: usize,
    n: usize,
    k: usize,
) -> candle_core::Result<Tensor> {
    t.reshape((rows, cols, n, n / k, k))?
        .permute((1, 3, 0, 2, 4))?
        .contiguous()?
        .reshape((cols * n / k, rows * n, k))
}

/// How the float path computes a product the integer kernel does not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatPath {
    /// One matmul whose partials over chunks of `k` lanes are proven exact from the formats:
    /// f32 where that proves the same chunk exact (twice the BLAS speed), else f64.
    Chunked(usize, DType),
    /// One f64 matmul over whole rows (per tile under the `-seq` modes), each sum's rounding
    /// proven from an error bound ([`matmul::round_bounded`], [`matmul::round_bounded_seq`]):
    /// every product is exact in f64, but not the sums of a whole tile, and the rounding is
    /// monotone.
    Bounded,
    /// Exact slices, or element by element.
    Sliced,
}

/// The float path of a product of these formats ([`FloatPath`]).
pub(crate) fn float_path(vector: &Format, matrix: &Format, spec: &MatVec) -> FloatPath {
    let n = spec.n;
    // The bound decides roundings to the output (`exact`), or of the tile partials (`-seq`).
    let bounded = matmul::monotone(&matmul::seq_format(spec.accumulation).unwrap_or(spec.output));
    let dtype = |k| match matmul::exact_chunk_f32(vector, matrix, n) == Some(k) {
        true => DType::F32,
        false => DType::F64,
    };
    match matmul::exact_chunk(vector, matrix, n) {
        Some(k) if k == n || (k >= MIN_CHUNK.min(n) && !bounded) => FloatPath::Chunked(k, dtype(k)),
        Some(_) if bounded => FloatPath::Bounded,
        _ => FloatPath::Sliced,
    }
}

/// For each weight stack, the `key` that every product reading it has (`None` where one has
/// none, or two differ), from the product's [`float_path`] and spec.
fn stack_keys<K: Copy + PartialEq>(
    graph: &SwGraph,
    key: impl Fn(FloatPath, &MatVec) -> Option<K>,
) -> Vec<Option<K>> {
    let mut keys: Vec<Option<Option<K>>> = vec![None; graph.nodes.len()];
    for node in &graph.nodes {
        let Op::TiledMatVec {
            w,
            vector_format,
            matrix_format,
            ..
        } = &node.op
        else {
            continue;
        };
        let Some((spec, _, _)) = product_spec(&node.op, graph.native) else {
            continue;
        };
        let this = key(float_path(vector_format, matrix_format, &spec), &spec);
        let seen = &mut keys[w.index()];
        *seen = Some(match *seen {
            Some(before) if before != this => None,
            _ => this,
        });
    }
    keys.into_iter().map(Option::flatten).collect()
}

/// The plan's stacks whose every product takes the chunked matmul with one chunk and dtype
/// ([`float_path`]): that `(chunk, dtype)` by node.
pub(crate) fn chunked_stacks(
    graph: &SwGraph,
    plan: &prepare::Plan,
) -> NodeMap<Option<(usize, DType)>> {
    let keys = stack_keys(graph, |path, _| match path {
        FloatPath::Chunked(k, dtype) => Some((k, dtype)),
        FloatPath::Bounded | FloatPath::Sliced => None,
    });
    keys.into_iter()
        .zip(plan.stacks.values())
        .map(|(k, s)| k.filter(|_| s.is_some()))
        .collect()
}

/// The stacks whose every product takes the bounded matmul in one layout: per tile column
/// (`true`, the `-seq` modes) or whole rows, by node.
pub(crate) fn bounded_stacks(graph: &SwGraph) -> NodeMap<Option<bool>> {
    stack_keys(graph, |path, spec| {
        (path == FloatPath::Bounded).then(|| matmul::seq_format(spec.accumulation).is_some())
    })
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnp_grammar::Accumulation;

    fn path(
        vector: &str,
        matrix: &str,
        n: usize,
        accumulation: Accumulation,
        out: &str,
    ) -> FloatPath {
        let f = |lit: &str| lit.parse::<Format>().expect("valid format");
        let output = *f(out).as_float().expect("a float format");
        let spec = MatVec {
            rows: 1,
            cols: 1,
            n,
            accumulation,
            output,
        };
        float_path(&f(vector), &f(matrix), &spec)
    }

    /// Bits by hand ([`matmul::grids`]): a float value alone is its significand (fp16 11,
    /// bf16 8, fp32 24 bits), a run of floats spans the format's whole range; a tile of N adds
    /// `log2 N` bits of carries.
    #[test]
    fn float_paths_by_hand() {
        use Accumulation::{Exact, Fp32Seq};
        use FloatPath::{Bounded, Chunked, Sliced};
        // BFP 8 at N = 128: 7 + 7 + 7 = 21 <= 24 bits: whole tiles in f32.
        let bfp8 = "bfp(mant = 8, exp_bits = 5)";
        assert_eq!(
            path(bfp8, bfp8, 128, Exact, "fp16"),
            Chunked(128, DType::F32)
        );
        // fp(4, 3) runs span 2^-9 .. 2^8: 17 + 17 + 7 = 41 <= 53: whole tiles in f64.
        assert_eq!(
            path("fp(4, 3)", "fp(4, 3)", 128, Exact, "fp16"),
            Chunked(128, DType::F64)
        );
        // fp16 runs span 40 bits (80 > 53 a tile), one product 11 + 11 = 22 bits; fp32 24 +
        // 24 = 48; bf16 8 + 8 = 16: each product exact, no sum of a tile.
        assert_eq!(path("fp16", "fp16", 128, Exact, "fp16"), Bounded);
        assert_eq!(path("fp32", "fp32", 128, Exact, "fp32"), Bounded);
        assert_eq!(path("bf16", "bf16", 8, Exact, "bf16"), Bounded);
        // The -seq modes: one matmul per tile column, whose partials the bound rounds to fp32.
        assert_eq!(path("fp32", "fp32", 128, Fp32Seq, "fp32"), Bounded);
        // Stochastic rounding is not monotone: where the bound would decide it (`exact`), the
        // slices; under -seq it only rounds the sum of the rounded partials.
        let stochastic = "fp(8, 23, round = stochastic(seed = 1))";
        assert_eq!(path("fp32", "fp32", 128, Exact, stochastic), Sliced);
        assert_eq!(path("fp32", "fp32", 128, Fp32Seq, stochastic), Bounded);
        // 31 + 31 = 62 > 53: not even one product is exact.
        assert_eq!(path("fp(8, 30)", "fp(8, 30)", 8, Exact, "fp32"), Sliced);
        // 27 + 26 = 53 bits, but products down to 2^-2095 underflow f64.
        assert_eq!(path("fp(11, 26)", "fp(11, 25)", 8, Exact, "fp32"), Sliced);
    }
}
