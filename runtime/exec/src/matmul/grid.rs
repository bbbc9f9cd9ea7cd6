//! Which chunks of a dot product a pair of formats makes exact in f64 or f32 whatever the
//! data: each format's value [`Grid`], and the largest chunk ([`exact_chunk`]) whose partials
//! stay within the type's bits.

use nnp_numerics::{FloatFormat, Format, IntScale};

/// Proven chunks smaller than this are not worth a BLAS call of their own; the slices run instead.
pub const MIN_CHUNK: usize = 4;

/// What a format's quantized values look like inside one run of N: every aligned block of
/// `block` lanes holds integer multiples of one power of two `2^e` with magnitude below
/// `2^bits * 2^e`, where `min_exp <= e` and all magnitudes are below `2^max_exp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub block: usize,
    pub bits: u32,
    pub min_exp: i32,
    pub max_exp: i32,
}

/// Every [`Grid`] a format's values fit at native dimension `n` (a float format has two: each
/// value on its own, and the whole run on the grid of its smallest subnormal).
pub fn grids(fmt: &Format, n: usize) -> Vec<Grid> {
    match fmt {
        Format::Float(f) => {
            let one = float_grid(f);
            let mut run = one;
            run.block = n;
            run.bits = (one.max_exp - one.min_exp) as u32;
            vec![one, run]
        }
        _ => grid(fmt, n).into_iter().collect(),
    }
}

fn grid(fmt: &Format, n: usize) -> Option<Grid> {
    match fmt {
        Format::Bfp(b) => {
            let (lo, hi) = b.exp_range();
            let m = b.mant as i32;
            Some(Grid {
                block: b.block.len(n),
                // |q| <= 2^(m-1) - 1, or 2^(m-1) with the full two's complement range.
                bits: if b.full_range { b.mant } else { b.mant - 1 },
                min_exp: lo - (m - 2),
                max_exp: hi + 2,
            })
        }
        Format::Mx(mx) => {
            let e = mx.elem.mini();
            // Element grid: multiples of 2^(emin - mant_bits) up to max_sig * 2^(emax - mant_bits),
            // scaled by the E8M0 scale 2^s, s in [-127, 127].
            let sig_bits = 64 - e.max_sig.leading_zeros();
            Some(Grid {
                block: mx.block.len(n),
                bits: (e.emax - e.emin) as u32 + sig_bits,
                min_exp: -127 + e.emin - e.mant_bits as i32,
                max_exp: 127 + e.emax + 1,
            })
        }
        Format::Int(f) if f.scale == IntScale::Pow2 => Some(Grid {
            block: n,
            bits: f.bits - 1,
            min_exp: -200,
            max_exp: 200,
        }),
        Format::Fixed(f) => Some(Grid {
            block: n,
            bits: f.int + f.frac,
            min_exp: -(f.frac as i32),
            max_exp: f.int as i32,
        }),
        Format::Float(f) => Some(float_grid(f)),
        _ => None,
    }
}

/// A single float value: one integer significand times a power of two.
fn float_grid(f: &FloatFormat) -> Grid {
    let bias = f.bias();
    Grid {
        block: 1,
        bits: f.mant_bits + 1,
        min_exp: 1 - bias - f.mant_bits as i32,
        max_exp: bias + 1,
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The largest chunk `k` (dividing N, aligned with both formats' blocks) whose partial dot
/// products are exact in f64 whatever the data, or `None` when not even one product is.
pub fn exact_chunk(vec_fmt: &Format, mat_fmt: &Format, n: usize) -> Option<usize> {
    best_chunk(vec_fmt, mat_fmt, n, &F64_BOUNDS)
}

/// As [`exact_chunk`], for an f32 matmul: every value converts to f32 exactly and every
/// per-chunk partial (products and their sums, FMA or not, any order) is exact in f32. Twice
/// the BLAS throughput of f64 and half the memory traffic, for formats of up to ~8-bit
/// mantissas (BFP 8 at N = 128: 7 + 7 + 7 = 21 <= 24 bits).
pub fn exact_chunk_f32(vec_fmt: &Format, mat_fmt: &Format, n: usize) -> Option<usize> {
    best_chunk(vec_fmt, mat_fmt, n, &F32_BOUNDS)
}

/// What a floating-point type holds exactly: integers of `bits` bits times `2^e`, with the
/// unit `e >= min_unit` and magnitudes below `2^max_exp` (values and single products), sums
/// below `2^max_sum`.
struct Bounds {
    bits: u32,
    min_unit: i32,
    max_exp: i32,
    max_sum: i32,
}

const F64_BOUNDS: Bounds = Bounds {
    bits: 53,
    min_unit: -1074 + 2,
    max_exp: 1000,
    max_sum: 1023,
};

/// f32: 24-bit significands, subnormal quantum 2^-149, overflow at 2^128 (margins kept).
const F32_BOUNDS: Bounds = Bounds {
    bits: 24,
    min_unit: -149,
    max_exp: 120,
    max_sum: 127,
};

fn best_chunk(vec_fmt: &Format, mat_fmt: &Format, n: usize, t: &Bounds) -> Option<usize> {
    let mut best = None;
    for gx in grids(vec_fmt, n) {
        for gw in grids(mat_fmt, n) {
            best = best.max(chunk_of(&gx, &gw, n, t));
        }
    }
    best
}

fn chunk_of(gx: &Grid, gw: &Grid, n: usize, t: &Bounds) -> Option<usize> {
    // Every value must be exact in the type on its own (trivial for f64)...
    let fits = |g: &Grid| g.bits <= t.bits && g.min_exp >= t.min_unit && g.max_exp <= t.max_exp;
    if !fits(gx) || !fits(gw) {
        return None;
    }
    // ...and products (and their sums) must stay clear of underflow and overflow.
    if gx.min_exp + gw.min_exp < t.min_unit || gx.max_exp + gw.max_exp > t.max_exp {
        return None;
    }
    let mut k = gcd(gcd(gx.block, n), gcd(gw.block, n));
    // Largest power-of-two fraction of k whose sum bound fits: bits_x + bits_w + ceil(log2 k).
    loop {
        let log = usize::BITS - (k - 1).leading_zeros();
        if gx.bits + gw.bits + log <= t.bits && gx.max_exp + gw.max_exp + log as i32 <= t.max_sum {
            return Some(k);
        }
        if k == 1 || k % 2 == 1 {
            return None;
        }
        k /= 2;
    }
}

/// True when a plain f64 dot product of one N-lane tile of `vec_fmt` values with one tile row
/// of `mat_fmt` values is exact for every input (docs/numerics.md).
pub fn tile_partial_is_exact(vec_fmt: &Format, mat_fmt: &Format, n: usize) -> bool {
    exact_chunk(vec_fmt, mat_fmt, n) == Some(n)
}

#[cfg(test)]
mod tests {
    use super::super::tests::f;
    use super::*;

    #[test]
    fn exactness_from_format_parameters() {
        let bfp8 = f("bfp(mant = 8, exp_bits = 5)");
        // 7 + 7 bits of mantissa magnitude, + 7 bits of sum growth at N = 128: 21 <= 53.
        assert!(tile_partial_is_exact(&bfp8, &bfp8, 128));
        assert!(tile_partial_is_exact(&bfp8, &bfp8, 4096));
        // 24-bit mantissas: 23 + 23 + 7 = 53 fits at N = 128, not at 256.
        let bfp24 = f("bfp(mant = 24, exp_bits = 5)");
        assert!(tile_partial_is_exact(&bfp24, &bfp24, 128));
        assert!(!tile_partial_is_exact(&bfp24, &bfp24, 256));
        assert_eq!(exact_chunk(&bfp24, &bfp24, 256), Some(128));
        // Sub-tile blocks: exact only per block.
        let bfp_b16 = f("bfp(mant = 8, block = 16, exp_bits = 8)");
        assert!(!tile_partial_is_exact(&bfp_b16, &bfp8, 128));
        assert_eq!(exact_chunk(&bfp_b16, &bfp8, 128), Some(16));
        // fp16 values span 40 bits (2^-24 .. 2^16): no tile sum is exact, a single product is.
        assert!(!tile_partial_is_exact(&Format::FP16, &Format::FP16, 8));
        assert_eq!(exact_chunk(&Format::FP16, &Format::FP16, 8), Some(1));
        // fp(4, 3) spans 2^-9 .. 2^8 (17 bits): 17 + 17 + 7 = 41 bits, whole tiles at N = 128.
        let e4m3ish = f("fp(4, 3)");
        assert!(tile_partial_is_exact(&e4m3ish, &e4m3ish, 128));
        // fp(4, 3) vectors times BFP(8) matrices: 17 + 7 + 7 = 31 bits.
        assert!(tile_partial_is_exact(&e4m3ish, &bfp8, 128));
        // MX fp8 e4m3 (18-bit element grid) blocks of 32: 18 + 18 + 5 = 41 bits.
        let mx = f("mx(fp8e4m3, 32)");
        assert_eq!(exact_chunk(&mx, &mx, 128), Some(32));
    }
}
