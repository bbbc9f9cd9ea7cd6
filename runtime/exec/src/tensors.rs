//! Candle tensors to and from host slices, and small tensor helpers.

use candle_core::{CpuStorage, CustomOp1, Device, Layout, Shape, Tensor};

/// A tensor's values on the host, row-major.
pub(super) fn host_vec(t: &Tensor) -> candle_core::Result<Vec<f64>> {
    t.flatten_all()?.to_device(&Device::Cpu)?.to_vec1()
}

/// `f` of a tensor's values on the host, row-major: borrowed where the tensor is contiguous
/// f64 on the CPU (a weight stack is hundreds of MiB), else copied once ([`host_vec`]).
pub(super) fn with_host<R>(t: &Tensor, f: impl FnOnce(&[f64]) -> R) -> candle_core::Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let Some(v) = host_slice(&storage, layout) {
            return Ok(f(v));
        }
    }
    Ok(f(&host_vec(t)?))
}

/// `f(values, stride)` of a `[rows, len]` tensor whose row `r` is `values[r * stride..][..len]`:
/// its f64 storage on the CPU where each row is contiguous (an LSTM's `x_t` is a slice of the
/// whole input's rows), else a contiguous copy.
pub(super) fn with_host_rows<R>(
    t: &Tensor,
    f: impl FnOnce(&[f64], usize) -> R,
) -> candle_core::Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(CpuStorage::F64(v)), &[rows, len], &[stride, 1]) =
            (&*storage, layout.dims(), layout.stride())
            && rows > 0
            && let Some(v) =
                v.get(layout.start_offset()..layout.start_offset() + (rows - 1) * stride + len)
        {
            return Ok(f(v, stride));
        }
    }
    let len = t.dims().last().copied().unwrap_or(0);
    Ok(f(&host_vec(t)?, len))
}

/// The values of contiguous f64 storage on the CPU, row-major; `None` for anything else.
pub(super) fn host_slice<'a>(
    storage: &'a candle_core::Storage,
    layout: &Layout,
) -> Option<&'a [f64]> {
    match storage {
        candle_core::Storage::Cpu(s) => cpu_slice(s, layout),
        _ => None,
    }
}

/// A custom op's operand as a slice: contiguous f64 storage, else `None`.
pub(super) fn cpu_slice<'a>(storage: &'a CpuStorage, layout: &Layout) -> Option<&'a [f64]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F64(v), Some((a, e))) => v.get(a..e),
        _ => None,
    }
}

/// `f(x, out)` over a contiguous f64 operand on the CPU, keeping its shape: the `cpu_fwd` of
/// an element-wise custom op (`name` for its error).
pub(crate) fn map_cpu(
    name: &str,
    s: &CpuStorage,
    l: &Layout,
    f: impl FnOnce(&[f64], &mut [f64]),
) -> candle_core::Result<(CpuStorage, Shape)> {
    let Some(x) = cpu_slice(s, l) else {
        candle_core::bail!("{name}: expected contiguous f64 data")
    };
    let mut out = vec![0.0; x.len()];
    f(x, &mut out);
    Ok((CpuStorage::F64(out), l.shape().clone()))
}

/// Pad dimension `dim` of `t` to `len` with `value`.
pub(super) fn pad_dim(
    t: &Tensor,
    dim: usize,
    len: usize,
    value: f64,
) -> candle_core::Result<Tensor> {
    let have = t.dims()[dim];
    if have >= len {
        return Ok(t.clone());
    }
    let mut dims = t.dims().to_vec();
    dims[dim] = len - have;
    let pad = Tensor::full(value, dims, t.device())?;
    Tensor::cat(&[t, &pad], dim)
}

/// Broadcast the batch dimension of every tensor to the largest.
pub(super) fn broadcast_batch(ts: &[Tensor]) -> candle_core::Result<Vec<Tensor>> {
    let b = ts.iter().map(|t| t.dims()[0]).max().unwrap_or(1);
    ts.iter()
        .map(|t| {
            if t.dims()[0] == b {
                Ok(t.clone())
            } else {
                let mut dims = t.dims().to_vec();
                dims[0] = b;
                t.broadcast_as(dims)?.contiguous()
            }
        })
        .collect()
}

/// A CPU custom op from a closure: contiguous f64 in, (values, shape) out.
pub(super) struct Map1<F>(pub(super) &'static str, pub(super) F);

impl<F: Fn(&[f64]) -> (Vec<f64>, Shape) + Send + Sync> CustomOp1 for Map1<F> {
    fn name(&self) -> &'static str {
        self.0
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let Some(v) = cpu_slice(s, l) else {
            candle_core::bail!("{}: expected contiguous f64 data", self.0)
        };
        let (out, shape) = (self.1)(v);
        Ok((CpuStorage::F64(out), shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `with_host_rows` hands a slice of wider rows (an LSTM's `x_t`) over in place, with the
    /// wide rows' stride, and anything else as a contiguous copy.
    #[test]
    fn host_rows_in_place_or_copied() {
        let v: Vec<f64> = (0..24).map(f64::from).collect();
        let t = Tensor::from_vec(v, (3, 8), &Device::Cpu).expect("tensor");
        let rows = |t: &Tensor| {
            with_host_rows(t, |v, stride| {
                let len = t.dims()[1];
                let rows: Vec<Vec<f64>> = (0..t.dims()[0])
                    .map(|r| v[r * stride..][..len].to_vec())
                    .collect();
                (stride, rows)
            })
            .expect("rows")
        };
        let narrow = t.narrow(1, 2, 4).expect("narrow");
        let (stride, got) = rows(&narrow);
        assert_eq!(stride, 8, "in place");
        assert_eq!(got, narrow.to_vec2::<f64>().expect("values"));
        let transposed = narrow.t().expect("t");
        let (stride, got) = rows(&transposed);
        assert_eq!(stride, 3, "copied");
        assert_eq!(got, transposed.to_vec2::<f64>().expect("values"));
    }
}
