//! Float matrix products on strided views of f64 slices, accumulated into their destination:
//! the reverse pass's products read the gradients, the vectors and the tiles where they lie
//! (a block of a batch of registers, one tile of a stack), with `gemm`, candle's own CPU
//! product, called directly.

/// A `rows x cols` matrix inside `data`: element `(i, j)` at `offset + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub data: &'a [f64],
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

/// A `rows x cols` matrix inside `data`, written ([`View`]'s layout).
pub(crate) struct ViewMut<'a> {
    pub data: &'a mut [f64],
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

/// Whether the last element of a `rows x cols` view at `offset` lies inside `len` elements.
fn inside(len: usize, offset: usize, rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    rows == 0 || cols == 0 || offset + (rows - 1) * rs + (cols - 1) * cs < len
}

/// Products of at least this many multiply-adds go to rayon's threads; smaller ones run on
/// the calling thread (waking a thread costs more than they do).
const PARALLEL_MACS: usize = 1 << 22;

/// `dst += lhs * rhs`; an error (and nothing written) where the shapes disagree or a view
/// passes its slice's end (the callers make the views from the values' own shapes).
pub(crate) fn add_product(dst: ViewMut, lhs: View, rhs: View) -> Result<(), String> {
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    if lhs.rows != m || rhs.rows != k || rhs.cols != n {
        return Err(format!(
            "a product of {}x{} by {}x{} into {m}x{n}",
            lhs.rows, lhs.cols, rhs.rows, rhs.cols
        ));
    }
    let fits = inside(dst.data.len(), dst.offset, m, n, dst.rs, dst.cs)
        && inside(lhs.data.len(), lhs.offset, m, k, lhs.rs, lhs.cs)
        && inside(rhs.data.len(), rhs.offset, k, n, rhs.rs, rhs.cs);
    if !fits {
        return Err(format!(
            "a {m}x{k} by {k}x{n} product passes its values' end"
        ));
    }
    if m == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    let parallelism = match m * n * k >= PARALLEL_MACS {
        true => gemm::Parallelism::Rayon(rayon::current_num_threads()),
        false => gemm::Parallelism::None,
    };
    let stride = |s: usize| s as isize;
    // SAFETY: every element gemm touches, `offset + i * rs + j * cs` for `i < rows` and
    // `j < cols`, lies inside its slice (checked above); `dst` is borrowed mutably, so it
    // aliases neither operand.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr().add(dst.offset),
            stride(dst.cs),
            stride(dst.rs),
            true,
            lhs.data.as_ptr().add(lhs.offset),
            stride(lhs.cs),
            stride(lhs.rs),
            rhs.data.as_ptr().add(rhs.offset),
            stride(rhs.cs),
            stride(rhs.rs),
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[[1, 2], [3, 4]] * [[5, 6], [7, 8]] = [[19, 22], [43, 50]]`, added to what the
    /// destination holds, through a transposed view of the left operand's slice and a
    /// destination inside a wider row.
    #[test]
    fn products_accumulate_through_strided_views() {
        let lhs_t = [1.0, 3.0, 2.0, 4.0]; // [[1, 2], [3, 4]] stored by column
        let rhs = [5.0, 6.0, 7.0, 8.0];
        let mut dst = [1.0, 1.0, -9.0, 1.0, 1.0, -9.0];
        let view = |data, rs, cs| View {
            data,
            offset: 0,
            rows: 2,
            cols: 2,
            rs,
            cs,
        };
        let out = ViewMut {
            data: &mut dst,
            offset: 0,
            rows: 2,
            cols: 2,
            rs: 3,
            cs: 1,
        };
        add_product(out, view(&lhs_t, 1, 2), view(&rhs, 2, 1)).expect("fits");
        assert_eq!(dst, [20.0, 23.0, -9.0, 44.0, 51.0, -9.0]);
    }

    /// A view one element past its slice is refused, and nothing is written.
    #[test]
    fn a_view_past_its_slice_is_an_error() {
        let (a, mut d) = ([1.0; 4], [0.0; 4]);
        let lhs = View {
            data: &a,
            offset: 1,
            rows: 2,
            cols: 2,
            rs: 2,
            cs: 1,
        };
        let rhs = View { offset: 0, ..lhs };
        let dst = ViewMut {
            data: &mut d,
            offset: 0,
            rows: 2,
            cols: 2,
            rs: 2,
            cs: 1,
        };
        assert!(add_product(dst, lhs, rhs).is_err());
        assert_eq!(d, [0.0; 4]);
    }
}
