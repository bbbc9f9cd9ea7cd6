//! The bounded matmul's weights: a weight stack as the matrix [`FloatPath::Bounded`]
//! multiplies, with its rows' norm bounds.
//!
//! [`FloatPath::Bounded`]: super::float::FloatPath::Bounded

use crate::matmul;
use crate::tensors::with_host;
use candle_core::{Device, Tensor};

/// A weight stack for [`FloatPath::Bounded`] on the host, and [`matmul::norm_bound`] of each
/// of its rows: under `exact` accumulation one `[rows * n, cols * n]` matrix, under the `-seq`
/// modes one `[rows * n, n]` matrix per tile column (`[cols, rows * n, n]`).
pub(crate) struct BoundedWeights {
    pub(super) w: Tensor,
    pub(super) norms: Vec<f64>,
    /// `(rows, cols, n, per_tile)`: the stack's grid and which layout `w` has.
    grid: (usize, usize, usize, bool),
}

impl BoundedWeights {
    /// From the stack `[1, rows * cols, n, n]`, `[rows, cols, n, n]` permuted to `[rows, n, cols,
    /// n]`, or to `[cols, rows, n, n]` with `per_tile`.
    pub(super) fn new(
        t: &Tensor,
        rows: usize,
        cols: usize,
        n: usize,
        per_tile: bool,
    ) -> candle_core::Result<BoundedWeights> {
        let t = t.to_device(&Device::Cpu)?.reshape((rows, cols, n, n))?;
        let w = match per_tile {
            false => t.permute((0, 2, 1, 3))?.reshape((rows * n, cols * n))?,
            true => t.permute((1, 0, 2, 3))?.reshape((cols, rows * n, n))?,
        };
        Self::of_matrix(w.contiguous()?, (rows, cols, n, per_tile))
    }

    /// From its matrix, laid out as [`new`](Self::new) lays it out: the row norms added.
    pub(super) fn of_matrix(
        w: Tensor,
        grid: (usize, usize, usize, bool),
    ) -> candle_core::Result<BoundedWeights> {
        let (_, cols, n, per_tile) = grid;
        let row_len = if per_tile { n } else { cols * n };
        let norms = with_host(&w, |v| {
            v.chunks(row_len.max(1)).map(matmul::norm_bound).collect()
        })?;
        Ok(BoundedWeights { w, norms, grid })
    }

    /// The stack it was made from, `[1, rows * cols, n, n]`, the same bits (the permutation
    /// undone).
    pub(super) fn stack(&self) -> candle_core::Result<Tensor> {
        let (rows, cols, n, per_tile) = self.grid;
        let t = match per_tile {
            false => self.w.reshape((rows, n, cols, n))?.permute((0, 2, 1, 3))?,
            true => self.w.reshape((cols, rows, n, n))?.permute((1, 0, 2, 3))?,
        };
        t.contiguous()?.reshape((1, rows * cols, n, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3 x 2 stack of 4 x 4 tiles (value `1000 i + 100 j + 10 r + c` at row r, lane c of
    /// tile (i, j), a `-0` in tile (2, 1)) as the bounded matmul's matrices, by hand, and
    /// given back bit for bit.
    #[test]
    fn bounded_weights_give_back_their_stack() {
        let (rows, cols, n) = (3, 2, 4);
        let value = |i: usize, j: usize, r: usize, c: usize| {
            let v = (1000 * i + 100 * j + 10 * r + c) as f64;
            if (i, j, r, c) == (2, 1, 0, 0) {
                -0.0
            } else {
                v
            }
        };
        let mut stack = Vec::new();
        for i in 0..rows {
            for j in 0..cols {
                for r in 0..n {
                    (0..n).for_each(|c| stack.push(value(i, j, r, c)));
                }
            }
        }
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let t = Tensor::from_vec(stack.clone(), (1, rows * cols, n, n), &Device::Cpu).unwrap();
        for per_tile in [false, true] {
            let bw = BoundedWeights::new(&t, rows, cols, n, per_tile).unwrap();
            let m = bw.w.flatten_all().unwrap().to_vec1::<f64>().unwrap();
            // Whole rows: element (i n + r, j n + c). Per tile column: (j, i n + r, c).
            let want = |e: usize| match per_tile {
                false => {
                    let (row, lane) = (e / (cols * n), e % (cols * n));
                    value(row / n, lane / n, row % n, lane % n)
                }
                true => {
                    let (j, row, c) = (e / (rows * n * n), e / n % (rows * n), e % n);
                    value(row / n, j, row % n, c)
                }
            };
            let want: Vec<f64> = (0..m.len()).map(want).collect();
            assert_eq!(bits(&m), bits(&want), "per tile: {per_tile}");
            let back = bw
                .stack()
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f64>()
                .unwrap();
            assert_eq!(bits(&back), bits(&stack), "per tile: {per_tile}");
            // One norm bound per matrix row, each of its own row.
            let row_len = if per_tile { n } else { cols * n };
            let want: Vec<u64> = m
                .chunks(row_len)
                .map(|r| matmul::norm_bound(r).to_bits())
                .collect();
            assert_eq!(
                bw.norms.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want
            );
        }
    }
}
