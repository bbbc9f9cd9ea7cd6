//! The scalar reference quantizer [`Format::quantize`]: each format's run split into its
//! blocks (or scale groups) and handed to its kernel (`block`, `fixed`, `log`), non-finite
//! groups made NaN. It sits above the format descriptions and the kernels, which read those.

use crate::format::Format;
use crate::{block, fixed, log};

impl Format {
    /// Fake-quantize `x` into `out` (same length). `x` is one contiguous run along the blocking
    /// axis (for the MVM: one native tile of a vector, or one row of one N x N tile);
    /// blocks are laid consecutively along it, `native` is the native dimension N (what
    /// `block = native` means). A last partial block is quantized as a block of its own (the
    /// same as padding it with zeros). Block and scale groups holding a NaN or infinity become
    /// all NaN; float formats round elementwise.
    pub fn quantize(&self, x: &[f64], native: usize, out: &mut [f64]) {
        let n = x.len().min(out.len());
        let (x, out) = (&x[..n], &mut out[..n]);
        match self {
            Format::Float(f) => {
                for (i, (o, v)) in out.iter_mut().zip(x).enumerate() {
                    *o = f.round_at(*v, i as u64);
                }
            }
            Format::Bfp(b) => blocks(x, out, b.block.len(native), |x, o, base| {
                block::bfp_block(b, x, o, base)
            }),
            Format::Mx(m) => blocks(x, out, m.block.len(native), |x, o, base| {
                block::mx_block(m, x, o, base)
            }),
            Format::Hbfp(h) => blocks(x, out, h.block.len(native), |x, o, base| {
                block::hbfp_block(h, x, o, base)
            }),
            Format::Int(f) => guarded(x, out, |x, o| fixed::int_run(f, x, o)),
            Format::Fixed(f) => fixed::fixed_run(f, x, out),
            Format::DynFixed(f) => guarded(x, out, |x, o| fixed::dynfixed_run(f, x, o)),
            Format::Pot(p) => blocks(x, out, p.block.len(native), |x, o, base| {
                log::pot_block(p, x, o, base)
            }),
            Format::TwoHot(t) => blocks(x, out, t.block.len(native), |x, o, base| {
                log::twohot_block(t, x, o, base)
            }),
        }
    }

    /// Fake-quantize a whole tensor laid out as `data.len() / row_len` runs of `row_len`
    /// (the quantization axis innermost). Like [`quantize`](Self::quantize) on each run, except
    /// that `per = tensor` formats share one scale (point position) over the whole tensor.
    pub fn quantize_tensor(&self, data: &[f64], row_len: usize, native: usize, out: &mut [f64]) {
        let n = data.len().min(out.len());
        let (data, out) = (&data[..n], &mut out[..n]);
        if self.per_tensor() || row_len == 0 {
            self.quantize(data, native, out);
            return;
        }
        for (x, o) in data.chunks(row_len).zip(out.chunks_mut(row_len)) {
            self.quantize(x, native, o);
        }
    }
}

/// Apply `f` to consecutive blocks of `len`; a block holding a non-finite value becomes NaN.
fn blocks(x: &[f64], out: &mut [f64], len: usize, f: impl Fn(&[f64], &mut [f64], u64)) {
    for (i, (xb, ob)) in x.chunks(len).zip(out.chunks_mut(len)).enumerate() {
        if xb.iter().any(|v| !v.is_finite()) {
            ob.fill(f64::NAN);
        } else {
            f(xb, ob, (i * len) as u64);
        }
    }
}

/// Apply `f` to the whole run unless it holds a non-finite value (then all NaN).
fn guarded(x: &[f64], out: &mut [f64], f: impl Fn(&[f64], &mut [f64])) {
    if x.iter().any(|v| !v.is_finite()) {
        out.fill(f64::NAN);
    } else {
        f(x, out);
    }
}
