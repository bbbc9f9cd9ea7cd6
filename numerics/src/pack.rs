//! Packed bit encodings of every format, and their storage cost.

use crate::format::{Block, Format, IntScale};

impl Format {
    /// Storage cost in bits per element for runs of `run_len` elements (shared scales
    /// amortised over their block; per-tensor scales counted once per run).
    pub fn bits_per_element(&self, native: usize, run_len: usize) -> f64 {
        bits_per_element(self, native, run_len)
    }
}

/// Bits per element for runs of `run_len` elements (block headers amortised over their block,
/// per-run headers over the run).
pub fn bits_per_element(f: &Format, native: usize, run_len: usize) -> f64 {
    let run = run_len.max(1) as f64;
    let per_block = |block: &Block, elem_bits: f64, header: f64| {
        let len = block.len(native) as f64;
        elem_bits + header / len
    };
    match f {
        Format::Float(ff) => f64::from(ff.bits()),
        Format::Bfp(b) => per_block(&b.block, f64::from(b.mant), f64::from(b.exp_bits)),
        Format::Mx(m) => per_block(&m.block, f64::from(m.elem.bits()), 8.0),
        Format::Hbfp(h) => {
            let len = h.block.len(native);
            h.block_bits(len) as f64 / len as f64
        }
        Format::Int(i) => {
            let header = match i.scale {
                IntScale::Pow2 => 8.0,
                IntScale::F32 => 32.0,
            };
            f64::from(i.bits) + header / run
        }
        Format::Fixed(x) => f64::from(x.int + x.frac),
        Format::DynFixed(d) => f64::from(d.bits) + 8.0 / run,
        Format::Pot(p) => per_block(&p.block, f64::from(p.bits), 8.0),
        Format::TwoHot(t) => per_block(&t.block, f64::from(t.bits), 8.0),
    }
}

// ---------------------------------------------------------------------------------------------
// Packed encodings.
//
// A run is encoded block after block (scale groups for `int` / `dynfixed`: the whole run);
// each block is its header followed by its elements, every field little-endian bit order
// (LSB first) in a continuous bit stream:
//
// | format   | block header                                   | element                        |
// | -------- | ---------------------------------------------- | ------------------------------ |
// | fp       | -                                              | sign, exponent, mantissa       |
// | bfp      | `exp_bits` biased exponent `E + 2^(w-1) - 1`   | `mant`-bit two's complement    |
// | mx       | E8M0 scale `s + 127` (255: NaN block)          | element code (int8: two's c.)  |
// | hbfp     | `exp_bits` top exponent (biased), then scale fields level 0 first | sign + magnitude |
// | int      | pow2: 8-bit two's complement exponent (-128: NaN); f32: the scale's bits | `bits` two's c. |
// | fixed    | -                                              | `int + frac` two's complement  |
// | dynfixed | 8-bit two's complement fraction bits (-128: NaN) | `bits` two's complement      |
// | pot      | 8-bit two's complement top exponent (-128: NaN) | sign + code                   |
// | twohot   | same                                           | two pot codes                  |
//
// BFP marks a NaN block with every mantissa `-2^(mant-1)` (never produced with symmetric
// saturation); hierarchical BFP with every mantissa "-0" (sign set, magnitude 0).

use crate::float::MiniFloat;
use crate::format::{BfpFormat, HbfpFormat, MxElem};
use crate::log::PotCode;
use crate::rounding::make_f64;

/// A packed bit stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packed {
    pub bytes: Vec<u8>,
    /// Number of meaningful bits.
    pub bits: usize,
}

/// A value or a packed stream that cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("element {index}: {message}")]
    NotRepresentable { index: usize, message: String },
    #[error("the packed data ends after {bits} bits, {needed} needed")]
    Truncated { bits: usize, needed: usize },
    #[error(
        "`{format}` has no element codes and shared scales to give: {why}; codes are given \
         for fp, bfp/msfp, mx, int, fixed, dynfixed and pot formats"
    )]
    NoCodes { format: String, why: &'static str },
    #[error("{what} {index} is {value}, which a {bits}-bit field does not hold ({range})")]
    CodeRange {
        what: &'static str,
        index: usize,
        value: i64,
        bits: u32,
        /// The field's values, `0 to 255` or `-128 to 127`.
        range: String,
    },
    #[error("{scales} scales given for {elems} element codes; the format's groups need {needed}")]
    CodeCount {
        scales: usize,
        elems: usize,
        needed: usize,
    },
}

pub(crate) struct Writer {
    pub(crate) p: Packed,
}

impl Writer {
    pub(crate) fn put(&mut self, v: u64, n: u32) {
        for i in 0..n {
            if self.p.bits.is_multiple_of(8) {
                self.p.bytes.push(0);
            }
            if i < 64
                && (v >> i) & 1 == 1
                && let Some(b) = self.p.bytes.last_mut()
            {
                *b |= 1 << (self.p.bits % 8);
            }
            self.p.bits += 1;
        }
    }

    pub(crate) fn put_signed(&mut self, v: i64, n: u32) {
        self.put(v as u64 & mask(n), n);
    }
}

pub(crate) struct Reader<'a> {
    pub(crate) p: &'a Packed,
    pub(crate) pos: usize,
}

impl Reader<'_> {
    pub(crate) fn get(&mut self, n: u32) -> Result<u64, PackError> {
        let needed = self.pos + n as usize;
        if needed > self.p.bits {
            return Err(PackError::Truncated {
                bits: self.p.bits,
                needed,
            });
        }
        let mut v = 0u64;
        for i in 0..n as usize {
            let bit = self
                .p
                .bytes
                .get((self.pos + i) / 8)
                .map_or(0, |b| (b >> ((self.pos + i) % 8)) & 1);
            v |= u64::from(bit) << i;
        }
        self.pos = needed;
        Ok(v)
    }

    pub(crate) fn get_signed(&mut self, n: u32) -> Result<i64, PackError> {
        let v = self.get(n)?;
        let sign = 1u64 << (n - 1);
        Ok(((v ^ sign).wrapping_sub(sign)) as i64)
    }
}

fn mask(n: u32) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

fn not_rep(index: usize, message: impl Into<String>) -> PackError {
    PackError::NotRepresentable {
        index,
        message: message.into(),
    }
}

/// The header byte of the 8-bit-exponent formats, or an error when it does not fit.
fn exp8(e: i32, index: usize) -> Result<i64, PackError> {
    if (-127..=127).contains(&e) {
        Ok(i64::from(e))
    } else {
        Err(not_rep(
            index,
            format!("shared exponent {e} does not fit the 8-bit header"),
        ))
    }
}

/// The groups a run is cut into: blocks of block formats, the whole run otherwise.
pub(crate) fn group_len(f: &Format, native: usize, n: usize) -> usize {
    match f {
        Format::Bfp(b) => b.block.len(native),
        Format::Mx(m) => m.block.len(native),
        Format::Hbfp(h) => h.block.len(native),
        Format::Pot(p) => p.block.len(native),
        Format::TwoHot(t) => t.block.len(native),
        _ => n.max(1),
    }
}

impl Format {
    /// Encode one run (as [`Format::quantize`] cuts it) to packed bits. Decoding gives the
    /// quantized values back.
    pub fn encode(&self, x: &[f64], native: usize) -> Result<Packed, PackError> {
        let mut w = Writer {
            p: Packed::default(),
        };
        if let Format::Float(ff) = self {
            for (i, v) in x.iter().enumerate() {
                // Round with the element's position (stochastic draws), then take its bits.
                w.put(ff.encode(ff.round_at(*v, i as u64)), ff.bits());
            }
            return Ok(w.p);
        }
        if let Format::Fixed(fx) = self {
            for (i, v) in x.iter().enumerate() {
                let q = fx
                    .encode_value(*v, i as u64)
                    .ok_or_else(|| not_rep(i, "NaN has no fixed-point code"))?;
                w.put_signed(q, fx.int + fx.frac);
            }
            return Ok(w.p);
        }
        let len = group_len(self, native, x.len());
        for (g, xb) in x.chunks(len).enumerate() {
            let base = g * len;
            let finite = xb.iter().all(|v| v.is_finite());
            encode_group(self, xb, base, finite, &mut w)?;
        }
        Ok(w.p)
    }

    /// Decode `n` values of one run encoded by [`encode`](Self::encode).
    pub fn decode(&self, p: &Packed, n: usize, native: usize) -> Result<Vec<f64>, PackError> {
        let mut r = Reader { p, pos: 0 };
        let mut out = Vec::with_capacity(n);
        match self {
            Format::Float(ff) => {
                for _ in 0..n {
                    out.push(ff.decode(r.get(ff.bits())?));
                }
            }
            Format::Fixed(fx) => {
                for _ in 0..n {
                    out.push(fx.value(r.get_signed(fx.int + fx.frac)?));
                }
            }
            _ => {
                let len = group_len(self, native, n);
                let mut left = n;
                while left > 0 {
                    let k = left.min(len);
                    decode_group(self, k, &mut r, &mut out)?;
                    left -= k;
                }
            }
        }
        Ok(out)
    }
}

fn encode_group(
    f: &Format,
    xb: &[f64],
    base: usize,
    finite: bool,
    w: &mut Writer,
) -> Result<(), PackError> {
    match f {
        Format::Bfp(b) => encode_bfp(b, xb, base, finite, w),
        Format::Mx(m) => {
            let scale = if finite { m.shared_exponent(xb) } else { None };
            let Some(s) = scale else {
                w.put(255, 8);
                for _ in xb {
                    w.put(0, m.elem.bits());
                }
                return Ok(());
            };
            w.put((s + 127) as u64, 8);
            let (_, elems) = m
                .encode_block(xb, base as u64)
                .unwrap_or((s, vec![0.0; xb.len()]));
            for e in elems {
                w.put(mx_elem_code(m.elem, e), m.elem.bits());
            }
            Ok(())
        }
        Format::Hbfp(h) => {
            let k = h.mag_bits();
            if !finite {
                w.put(0, h.exp_bits);
                w.put(0, h.scale_fields(xb.len()) as u32 * h.scale_bits);
                for _ in xb {
                    w.put(1 << k, h.mant);
                }
                return Ok(());
            }
            let enc = h.encode_block(xb, xb.len(), base as u64);
            let bias = (1i32 << (h.exp_bits - 1)) - 1;
            w.put((enc.top + bias) as u64, h.exp_bits);
            for level in &enc.scales {
                for s in level {
                    w.put(u64::from(*s), h.scale_bits);
                }
            }
            for m in enc.mants {
                w.put(m.unsigned_abs() | (u64::from(m < 0) << k), h.mant);
            }
            Ok(())
        }
        Format::Int(i) => {
            if !finite {
                match i.scale {
                    IntScale::Pow2 => w.put_signed(-128, 8),
                    IntScale::F32 => w.put(u64::from(f32::NAN.to_bits()), 32),
                }
                w.put(0, i.bits * xb.len() as u32);
                return Ok(());
            }
            let (s, q) = i.encode_run(xb);
            match s {
                crate::fixed::ScaleValue::Pow2(e) => w.put_signed(exp8(e, base)?, 8),
                crate::fixed::ScaleValue::F32(s) => w.put(u64::from(s.to_bits()), 32),
            }
            for v in q {
                w.put_signed(v, i.bits);
            }
            Ok(())
        }
        Format::DynFixed(d) => {
            if !finite {
                w.put_signed(-128, 8);
                w.put(0, d.bits * xb.len() as u32);
                return Ok(());
            }
            let policy = d.policy.policy();
            let (fb, q) = d.encode_with(policy.as_ref(), xb);
            w.put_signed(exp8(fb.unwrap_or(0), base)?, 8);
            for v in q {
                w.put_signed(v, d.bits);
            }
            Ok(())
        }
        Format::Pot(p) => {
            let n = p.bits - 1;
            if !finite {
                w.put_signed(-128, 8);
                w.put(0, p.bits * xb.len() as u32);
                return Ok(());
            }
            let (b, codes) = p.encode_block(xb, base as u64);
            w.put_signed(exp8(b + (1 << n) - 2, base)?, 8);
            for c in codes {
                put_pot(w, c, n);
            }
            Ok(())
        }
        Format::TwoHot(t) => {
            let n = t.term_bits();
            if !finite {
                w.put_signed(-128, 8);
                w.put(0, t.bits * xb.len() as u32);
                return Ok(());
            }
            let (b, codes) = t.encode_block(xb, base as u64);
            w.put_signed(exp8(b + (1 << n) - 2, base)?, 8);
            for (c1, c2) in codes {
                put_pot(w, c1, n);
                put_pot(w, c2, n);
            }
            Ok(())
        }
        Format::Float(_) | Format::Fixed(_) => Ok(()),
    }
}

fn put_pot(w: &mut Writer, c: PotCode, n: u32) {
    w.put(u64::from(c.code), n);
    w.put(u64::from(c.neg), 1);
}

fn get_pot(r: &mut Reader, n: u32) -> Result<PotCode, PackError> {
    let code = r.get(n)? as u32;
    let neg = r.get(1)? == 1;
    Ok(PotCode { neg, code })
}

fn encode_bfp(
    b: &BfpFormat,
    xb: &[f64],
    base: usize,
    finite: bool,
    w: &mut Writer,
) -> Result<(), PackError> {
    let min_code = -(1i64 << (b.mant - 1));
    if !finite {
        if b.full_range {
            return Err(not_rep(
                base,
                "a NaN/Inf block has no code with `range = full`",
            ));
        }
        w.put(mask(b.exp_bits), b.exp_bits);
        for _ in xb {
            w.put_signed(min_code, b.mant);
        }
        return Ok(());
    }
    let mut q = vec![0i64; xb.len()];
    let (e, _) = b.block_mantissas(xb, &mut q, base as u64);
    let (lo, _) = b.exp_range();
    w.put((e - lo) as u64, b.exp_bits);
    for v in q {
        w.put_signed(v, b.mant);
    }
    Ok(())
}

fn mx_elem_code(elem: MxElem, v: f64) -> u64 {
    match elem {
        MxElem::Int8 => (((v * 64.0) as i64) as u64) & 0xFF,
        _ => elem.mini().encode(v),
    }
}

fn mx_elem_value(elem: MxElem, mini: &MiniFloat, code: u64) -> f64 {
    match elem {
        MxElem::Int8 => {
            let q = ((code as u8) as i8) as i64;
            if q == 0 {
                0.0
            } else {
                make_f64(q < 0, u128::from(q.unsigned_abs()), -6)
            }
        }
        _ => mini.decode(code),
    }
}

fn decode_group(f: &Format, k: usize, r: &mut Reader, out: &mut Vec<f64>) -> Result<(), PackError> {
    match f {
        Format::Bfp(b) => {
            let field = r.get(b.exp_bits)? as i32;
            let (lo, _) = b.exp_range();
            let lsb = field + lo - (b.mant as i32 - 2);
            let q: Vec<i64> = (0..k)
                .map(|_| r.get_signed(b.mant))
                .collect::<Result<_, _>>()?;
            let nan = !b.full_range && q.iter().any(|v| *v == -(1i64 << (b.mant - 1)));
            out.extend(q.iter().map(|v| {
                if nan {
                    f64::NAN
                } else {
                    crate::fixed::ScaleValue::Pow2(lsb).apply(*v)
                }
            }));
        }
        Format::Mx(m) => {
            let s = r.get(8)? as i32;
            let mini = m.elem.mini();
            for _ in 0..k {
                let code = r.get(m.elem.bits())?;
                out.push(if s == 255 {
                    f64::NAN
                } else {
                    crate::rounding::pow2_mul(mx_elem_value(m.elem, &mini, code), s - 127)
                });
            }
        }
        Format::Hbfp(h) => decode_hbfp(h, k, r, out)?,
        Format::Int(i) => {
            let scale = match i.scale {
                IntScale::Pow2 => {
                    let e = r.get_signed(8)?;
                    (e != -128).then_some(crate::fixed::ScaleValue::Pow2(e as i32))
                }
                IntScale::F32 => {
                    let s = f32::from_bits(r.get(32)? as u32);
                    (!s.is_nan()).then_some(crate::fixed::ScaleValue::F32(s))
                }
            };
            for _ in 0..k {
                let q = r.get_signed(i.bits)?;
                out.push(scale.map_or(f64::NAN, |s| s.apply(q)));
            }
        }
        Format::DynFixed(d) => {
            let fb = r.get_signed(8)?;
            for _ in 0..k {
                let q = r.get_signed(d.bits)?;
                out.push(if fb == -128 {
                    f64::NAN
                } else {
                    d.value(q, fb as i32)
                });
            }
        }
        Format::Pot(p) => {
            let n = p.bits - 1;
            let top = r.get_signed(8)?;
            for _ in 0..k {
                let c = get_pot(r, n)?;
                out.push(if top == -128 {
                    f64::NAN
                } else {
                    p.value(c, top as i32 - (1 << n) + 2)
                });
            }
        }
        Format::TwoHot(t) => {
            let n = t.term_bits();
            let top = r.get_signed(8)?;
            for _ in 0..k {
                let c1 = get_pot(r, n)?;
                let c2 = get_pot(r, n)?;
                out.push(if top == -128 {
                    f64::NAN
                } else {
                    t.value((c1, c2), top as i32 - (1 << n) + 2)
                });
            }
        }
        Format::Float(_) | Format::Fixed(_) => {}
    }
    Ok(())
}

fn decode_hbfp(
    h: &HbfpFormat,
    k: usize,
    r: &mut Reader,
    out: &mut Vec<f64>,
) -> Result<(), PackError> {
    let bias = (1i32 << (h.exp_bits - 1)) - 1;
    let top = r.get(h.exp_bits)? as i32 - bias;
    let mut scales = Vec::with_capacity(h.levels as usize);
    for level in 0..h.levels as usize {
        let count = k.div_ceil(h.sub << level);
        let s: Vec<i32> = (0..count)
            .map(|_| r.get(h.scale_bits).map(|v| v as i32))
            .collect::<Result<_, _>>()?;
        scales.push(s);
    }
    let kb = h.mag_bits();
    let mants: Vec<(bool, u64)> = (0..k)
        .map(|_| r.get(h.mant).map(|v| (v >> kb & 1 == 1, v & mask(kb))))
        .collect::<Result<_, _>>()?;
    let nan = mants.iter().any(|(neg, m)| *neg && *m == 0);
    for (i, (neg, m)) in mants.into_iter().enumerate() {
        if nan {
            out.push(f64::NAN);
            continue;
        }
        // Element exponent: top minus the scales on its path (Fig. 2 row 240).
        let e = top
            - scales
                .iter()
                .enumerate()
                .map(|(level, s)| s.get(i / (h.sub << level)).copied().unwrap_or(0))
                .sum::<i32>();
        out.push(if m == 0 {
            0.0
        } else {
            make_f64(neg, u128::from(m), e - kb as i32 + 1)
        });
    }
    Ok(())
}
