//! `round` and `quantize` as candle custom ops: this module's kernels in `cpu_fwd`, the GPU's
//! (`crate::device`) in `cuda_fwd` where the format has one, else the CPU kernel on a host copy.

use super::{quantize_runs, round_slice};
use crate::tensors::map_cpu;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape};
use nnp_numerics::{FloatFormat, Format};

/// Every element rounded to a float format.
pub(crate) struct RoundOp(pub FloatFormat);

/// Runs of `len` lanes quantized in `format` at native dimension `native`.
pub(crate) struct QuantizeOp {
    pub format: Format,
    pub len: usize,
    pub native: usize,
}

impl CustomOp1 for RoundOp {
    fn name(&self) -> &'static str {
        "round"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        map_cpu("round", s, l, |x, o| round_slice(&self.0, x, o))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        match super::FastRound::new(&self.0) {
            Some(f) => crate::device::round(&f, s, l, false),
            None => crate::device::via_host(s, l, |s, l| self.cpu_fwd(s, l)),
        }
    }
}

impl CustomOp1 for QuantizeOp {
    fn name(&self) -> &'static str {
        "quantize"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        map_cpu("quantize", s, l, |x, o| {
            quantize_runs(&self.format, x, self.len, self.native, o)
        })
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let len = self.len.max(1);
        let whole_runs = l.shape().elem_count().is_multiple_of(len);
        match &self.format {
            Format::Bfp(b) if whole_runs => {
                if let Some(f) = super::bfp::FastBfp::new(b, self.native) {
                    return crate::device::bfp_quantize(&f.params(), s, l, len);
                }
            }
            Format::Float(f) => {
                if let Some(f) = super::FastRound::new(f) {
                    return crate::device::round(&f, s, l, false);
                }
            }
            _ => {}
        }
        crate::device::via_host(s, l, |s, l| self.cpu_fwd(s, l))
    }
}
