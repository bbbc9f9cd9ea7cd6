//! The error-free splitting of data into slices whose pairwise dot products are exact in f64
//! ([`slices`], in the manner of Ozaki's scheme).

/// Bits per slice for dot products of `n` terms: `2 beta + ceil(log2 n) <= 53`.
pub fn slice_bits(n: usize) -> u32 {
    let log = usize::BITS - (n.max(1) - 1).leading_zeros();
    (53 - log.min(51)) / 2
}

/// Most slices [`slices`] makes before giving up (then the element-wise path runs).
const MAX_SLICES: usize = 16;

/// Split every run of `len` values into slices (an error-free splitting in the manner of
/// Ozaki's scheme): with `E` the run's top exponent, slice `s` holds integer multiples of
/// `2^(E + 1 - (s+1) beta)` of magnitude below `2^beta` such units, and the slices of a value
/// add up to it exactly. A dot product of one x slice with one w slice over `len` lanes then
/// stays within `2 beta + log2 len <= 53` bits: exact in f64 in any order. `None` when a value
/// is not finite, or the data needs more than `MAX_SLICES` slices or units near f64
/// underflow.
pub fn slices(v: &[f64], len: usize, beta: u32) -> Option<Vec<Vec<f64>>> {
    if v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let len = len.max(1);
    // Top exponent + 1 of every run (None: an all-zero run).
    let tops: Vec<Option<i32>> = v
        .chunks(len)
        .map(|run| {
            let m = run.iter().fold(0.0f64, |a, x| a.max(x.abs()));
            (m != 0.0).then(|| nnp_numerics::floor_log2(m) + 1)
        })
        .collect();
    let mut rem = v.to_vec();
    let mut out = Vec::new();
    while rem.iter().any(|x| *x != 0.0) {
        let s = out.len() as i32 + 1;
        if out.len() == MAX_SLICES {
            return None;
        }
        let mut slice = vec![0.0; v.len()];
        for ((run, sl), top) in rem.chunks_mut(len).zip(slice.chunks_mut(len)).zip(&tops) {
            let Some(top) = top else { continue };
            let unit = top - s * beta as i32;
            if unit < -900 {
                return None;
            }
            let (down, up) = (2f64.powi(-unit), 2f64.powi(unit));
            for (r, o) in run.iter_mut().zip(sl.iter_mut()) {
                // Scaling by powers of two and truncating are exact; so is the remainder.
                // `|r * down| < 2^beta`, so the i64 conversion truncates it (one instruction;
                // `trunc` is a libm call here). A zero comes out `+0.0`: a product with it is
                // an exact zero, whose sum is `+0` whatever the zeros' signs.
                *o = ((*r * down) as i64 as f64) * up;
                *r -= *o;
            }
        }
        out.push(slice);
    }
    if out.is_empty() {
        out.push(vec![0.0; v.len()]);
    }
    Some(out)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_exact_and_bounded() {
        // beta = 23 at N = 128 (46 + 7 = 53); 2 at N = 2^47.
        assert_eq!(slice_bits(128), 23);
        assert_eq!(slice_bits(4), 25);
        // Run [1 + 2^-23 + 2^-40, 3, 0, -2^-30] with beta = 4: top = 2 (3 < 2^2), units
        // 2^-2, 2^-6, ...: every slice value is a multiple of its unit below 16 units, and the
        // slices add up to the values exactly.
        let v = [
            1.0 + 2f64.powi(-23) + 2f64.powi(-40),
            3.0,
            0.0,
            -(2f64.powi(-30)),
        ];
        let sl = slices(&v, 4, 4).expect("finite");
        for (i, x) in v.iter().enumerate() {
            let sum: f64 = sl.iter().rev().map(|s| s[i]).sum();
            assert_eq!(sum, *x, "lane {i}");
        }
        for (s, slice) in sl.iter().enumerate() {
            let unit = 2f64.powi(2 - 4 * (s as i32 + 1));
            for x in slice {
                assert_eq!((x / unit).fract(), 0.0);
                assert!((x / unit).abs() < 16.0);
            }
        }
        // 2^-40 needs slice 11 (unit 2^-42); 2^-30 lies in slice 8 (unit 2^-30).
        assert_eq!(sl.len(), 11);
        assert!(slices(&[f64::NAN, 1.0], 2, 4).is_none());
        assert_eq!(slices(&[0.0, 0.0], 2, 4).expect("zeros").len(), 1);
    }
}
