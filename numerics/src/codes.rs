//! Element codes and shared scales: the fields of a quantized run's packed layout
//! ([`Format::encode`], docs/numerics.md "Packed layouts") as integers, as torchao's `to_mx`
//! gives an MX tensor's E8M0 scales and element codes beside its values.
//!
//! A field stored in two's complement (bfp mantissas, int / fixed / dynfixed codes, mx int8
//! elements, the 8-bit exponents of int / dynfixed / pot) is given as its signed value; any
//! other field (float element codes, the E8M0 scale `s + 127`, bfp's biased exponent, pot's
//! code-then-sign, an `int(scale = f32)` scale's bit pattern) as its unsigned bits.
//! [`Format::from_codes`] packs them back and decodes them: the quantized values, bit for bit.

use crate::format::{Format, IntFormat, IntScale, MxElem};
use crate::pack::{PackError, Packed, Reader, Writer, group_len};

/// The codes of a run or tensor ([`Format::codes`], [`Format::tensor_codes`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Codes {
    /// Each scale group's header field, in order: one per block (block formats), one per run
    /// (`int`, `dynfixed`; one for the whole tensor with `per = tensor`), none (fp, fixed).
    pub scales: Vec<i64>,
    /// Each element's field, in the order of the values.
    pub elems: Vec<i64>,
}

/// The widths and signedness of a format's header and element fields.
struct Fields {
    header: u32,
    header_signed: bool,
    elem: u32,
    elem_signed: bool,
}

fn fields(f: &Format) -> Result<Fields, PackError> {
    let no = |why| PackError::NoCodes {
        format: f.to_string(),
        why,
    };
    let (header, header_signed, elem, elem_signed) = match f {
        Format::Float(ff) => (0, false, ff.bits(), false),
        Format::Fixed(x) => (0, false, x.int + x.frac, true),
        Format::Bfp(b) => (b.exp_bits, false, b.mant, true),
        Format::Mx(m) => (8, false, m.elem.bits(), m.elem == MxElem::Int8),
        Format::Int(i) => match i.scale {
            IntScale::Pow2 => (8, true, i.bits, true),
            IntScale::F32 => (32, false, i.bits, true),
        },
        Format::DynFixed(d) => (8, true, d.bits, true),
        Format::Pot(p) => (8, true, p.bits, false),
        Format::Hbfp(_) => return Err(no("its blocks hold several levels of scales")),
        Format::TwoHot(_) => return Err(no("each element holds two codes")),
    };
    Ok(Fields {
        header,
        header_signed,
        elem,
        elem_signed,
    })
}

impl Format {
    /// The codes of one run (as [`Format::quantize`] cuts it): the fields of
    /// [`Format::encode`]'s packed layout, read back as integers (see the module docs).
    pub fn codes(&self, x: &[f64], native: usize) -> Result<Codes, PackError> {
        let f = fields(self)?;
        let packed = self.encode(x, native)?;
        let mut r = Reader { p: &packed, pos: 0 };
        let get = |r: &mut Reader, n: u32, signed: bool| match signed {
            true => r.get_signed(n),
            false => r.get(n).map(|v| v as i64),
        };
        let mut codes = Codes::default();
        let len = group_len(self, native, x.len()).max(1);
        for group in x.chunks(len) {
            if f.header > 0 {
                codes.scales.push(get(&mut r, f.header, f.header_signed)?);
            }
            for _ in group {
                codes.elems.push(get(&mut r, f.elem, f.elem_signed)?);
            }
        }
        Ok(codes)
    }

    /// The codes of a tensor laid out as runs of `row_len` (the quantization axis innermost),
    /// as [`Format::quantize_tensor`] quantizes it: each run's codes one after the other, or,
    /// for `per = tensor` formats, one scale over the whole tensor.
    pub fn tensor_codes(
        &self,
        data: &[f64],
        row_len: usize,
        native: usize,
    ) -> Result<Codes, PackError> {
        if self.per_tensor() || row_len == 0 {
            return self.codes(data, native);
        }
        let mut codes = Codes::default();
        for run in data.chunks(row_len) {
            let c = self.codes(run, native)?;
            codes.scales.extend(c.scales);
            codes.elems.extend(c.elems);
        }
        Ok(codes)
    }

    /// Whether [`Format::codes`]' scales are the bit patterns of f32 scales
    /// (`int(scale = f32)`): each one is the f32 value with those bits.
    pub fn f32_scales(&self) -> bool {
        matches!(
            self,
            Format::Int(IntFormat {
                scale: IntScale::F32,
                ..
            })
        )
    }

    /// The number of scales [`Format::codes`] gives for a run of `n` values.
    pub fn scale_count(&self, n: usize, native: usize) -> usize {
        let header = fields(self).is_ok_and(|f| f.header > 0);
        match header && n > 0 {
            true => n.div_ceil(group_len(self, native, n).max(1)),
            false => 0,
        }
    }

    /// The shape of the scales [`Format::tensor_codes`] gives for a tensor of `shape` with
    /// runs along `axis`: `shape` with `axis` counting scale groups, or one dimension holding
    /// all `count` of them where one scale covers the tensor (`per = tensor`, rank 0).
    pub fn scale_shape(
        &self,
        shape: &[usize],
        axis: usize,
        native: usize,
        count: usize,
    ) -> Vec<usize> {
        if self.per_tensor() || axis >= shape.len() {
            return vec![count];
        }
        let mut scales = shape.to_vec();
        scales[axis] = self.scale_count(shape[axis], native);
        scales
    }

    /// The values of one run's codes ([`Format::codes`]): packed back into
    /// [`Format::encode`]'s layout and decoded, so the codes of a quantized run give its
    /// quantized values, bit for bit.
    pub fn from_codes(&self, codes: &Codes, native: usize) -> Result<Vec<f64>, PackError> {
        let f = fields(self)?;
        let n = codes.elems.len();
        let needed = self.scale_count(n, native);
        if codes.scales.len() != needed {
            return Err(PackError::CodeCount {
                scales: codes.scales.len(),
                elems: n,
                needed,
            });
        }
        // A code wider than its field would be cut to its low bits: another value.
        let fits = |what, codes: &[i64], bits: u32, signed: bool| {
            let (lo, hi) = match signed {
                true => {
                    let half = 1i128 << bits.saturating_sub(1);
                    (-half, half - 1)
                }
                false => (0, (1i128 << bits) - 1),
            };
            match codes
                .iter()
                .position(|&v| !(lo..=hi).contains(&i128::from(v)))
            {
                None => Ok(()),
                Some(index) => Err(PackError::CodeRange {
                    what,
                    index,
                    value: codes[index],
                    bits,
                    range: format!("{lo} to {hi}"),
                }),
            }
        };
        fits("element code", &codes.elems, f.elem, f.elem_signed)?;
        if f.header > 0 {
            fits("scale", &codes.scales, f.header, f.header_signed)?;
        }
        let mut w = Writer {
            p: Packed::default(),
        };
        let len = group_len(self, native, n).max(1);
        let mut scales = codes.scales.iter();
        for group in codes.elems.chunks(len) {
            if let Some(&s) = scales.next() {
                w.put_signed(s, f.header);
            }
            for &e in group {
                w.put_signed(e, f.elem);
            }
        }
        self.decode(&w.p, n, native)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(s: &str) -> Format {
        s.parse().unwrap()
    }

    /// A code or scale wider than its field is refused, not cut to its low bits.
    #[test]
    fn codes_outside_their_fields_are_refused() {
        let f = fmt("mx(elem = fp8e4m3, block = 4)");
        let good = Codes {
            scales: vec![127],
            elems: vec![0x38, 0xB0, 0x44, 0x7E],
        };
        assert_eq!(
            f.from_codes(&good, 128).unwrap(),
            vec![1.0, -0.5, 3.0, 448.0]
        );
        // 0x138 has e4m3 0x38 (1.0) in its low 8 bits.
        let wide = Codes {
            elems: vec![0x38, 0xB0, 0x138, 0x7E],
            ..good.clone()
        };
        let e = f.from_codes(&wide, 128).unwrap_err().to_string();
        assert_eq!(
            e,
            "element code 2 is 312, which a 8-bit field does not hold (0 to 255)"
        );
        let scale = Codes {
            scales: vec![-1],
            ..good
        };
        let e = f.from_codes(&scale, 128).unwrap_err().to_string();
        assert_eq!(
            e,
            "scale 0 is -1, which a 8-bit field does not hold (0 to 255)"
        );
    }

    /// `mx(elem = fp8e4m3, block = 4)` on `[1, -0.5, 3, 448]` by hand (docs/numerics.md, MX):
    /// amax 448 = 1.75 * 2^8, e4m3's emax is 8, so `s = 0` (E8M0 field 127) and the elements
    /// are the values themselves: 1.0 = 0 0111 000 (0x38), -0.5 = 1 0110 000 (0xB0),
    /// 3 = 1.5 * 2^1 = 0 1000 100 (0x44), 448 = 0 1111 110 (0x7E).
    #[test]
    fn mx_fp8_codes_by_hand() {
        let f = fmt("mx(elem = fp8e4m3, block = 4)");
        let c = f.codes(&[1.0, -0.5, 3.0, 448.0], 128).unwrap();
        assert_eq!(c.scales, vec![127]);
        assert_eq!(c.elems, vec![0x38, 0xB0, 0x44, 0x7E]);
        // Two blocks: [0.25, 0.125] has amax 2^-2, s = -2 - 8 = -10 (field 117): elements
        // 2^8 = 0 1111 000 (0x78) and 2^7 = 0 1110 000 (0x70).
        let c = f.codes(&[1.0, -0.5, 3.0, 448.0, 0.25, 0.125], 128).unwrap();
        assert_eq!(c.scales, vec![127, 117]);
        assert_eq!(c.elems[4..], [0x78, 0x70]);
    }

    /// `mxfp4` (e2m1, blocks of 32) on `[6, 1, -0.5, 0, ...]`: amax 6 = 1.5 * 2^2, emax 2, so
    /// `s = 0`; 6 = 0 11 1 (0x7), 1 = 0 01 0 (0x2), -0.5 = 1 00 1 (subnormal, 0x9), 0 = 0x0.
    /// `mxint8`: amax 6 = 1.5 * 2^2, emax 0, so `s = 2` (field 129): 6 / 4 = 1.5 = 96/64,
    /// 1 / 4 = 16/64, -0.5 / 4 = -8/64, as two's complement of `64 v`.
    #[test]
    fn mx_fp4_and_int8_codes_by_hand() {
        let mut x = vec![0.0; 32];
        x[..3].copy_from_slice(&[6.0, 1.0, -0.5]);
        let c = fmt("mxfp4").codes(&x, 128).unwrap();
        assert_eq!(c.scales, vec![127]);
        assert_eq!(c.elems[..4], [0x7, 0x2, 0x9, 0x0]);
        let c = fmt("mxint8").codes(&x, 128).unwrap();
        assert_eq!(c.scales, vec![129]);
        assert_eq!(c.elems[..4], [96, 16, -8, 0]);
    }

    /// `bfp(mant = 4, block = 2)` on `[1.5, -0.25]`: E = 0, LSB `2^(E - 2)` = 0.25: mantissas
    /// 6 and -1; the exponent field is `E - (1 - 2^4)` = 15 (the default 5-bit exponents).
    #[test]
    fn bfp_codes_by_hand() {
        let c = fmt("bfp(mant = 4, block = 2)")
            .codes(&[1.5, -0.25], 128)
            .unwrap();
        assert_eq!(c.scales, vec![15]);
        assert_eq!(c.elems, vec![6, -1]);
    }

    /// `fixed(int = 3, frac = 4)`: 7-bit two's complement of `x * 2^4`, no scale: 1.03125 is
    /// 16.5 LSBs (a tie, to even: 16), -4 is -64, 5 saturates to 63 (3.9375).
    /// `int(bits = 4, scale = pow2, per = row)` on rows `[4, 1]` and `[0.5, 0.25]`: the
    /// smallest `s` with `amax <= 7 * 2^s` is 0 and -3, the codes `x / 2^s`.
    #[test]
    fn fixed_and_int_codes_by_hand() {
        let c = fmt("fixed(int = 3, frac = 4)")
            .codes(&[1.03125, -4.0, 5.0], 128)
            .unwrap();
        assert!(c.scales.is_empty());
        assert_eq!(c.elems, vec![16, -64, 63]);
        let int = fmt("int(bits = 4, scale = pow2, per = row)");
        let c = int.tensor_codes(&[4.0, 1.0, 0.5, 0.25], 2, 128).unwrap();
        assert_eq!(c.scales, vec![0, -3]);
        assert_eq!(c.elems, vec![4, 1, 4, 2]);
        // Per tensor, one scale (s = 0): 0.5 is a tie (to even: 0), 0.25 rounds to 0.
        let per_tensor = fmt("int(bits = 4, scale = pow2, per = tensor)");
        let c = per_tensor
            .tensor_codes(&[4.0, 1.0, 0.5, 0.25], 2, 128)
            .unwrap();
        assert_eq!(c.scales, vec![0]);
        assert_eq!(c.elems, vec![4, 1, 0, 0]);
    }

    /// Decoding the codes gives the quantized values' bits, for every format with codes
    /// (NaN blocks included).
    #[test]
    fn codes_give_the_quantized_values_back() {
        let x: Vec<f64> = (0..70)
            .map(|i| ((i * 37 % 23) as f64 - 11.0) * 0.173)
            .collect();
        let mut with_nan = x.clone();
        with_nan[40] = f64::NAN;
        for lit in [
            "fp16",
            "bf16",
            "fp(4, 3)",
            "bfp(mant = 4, block = 16)",
            "msfp(mant = 8)",
            "mx(elem = fp8e5m2, block = 32)",
            "mxfp6_e3m2",
            "mxfp6_e2m3",
            "mxfp4",
            "mxint8",
            "int(bits = 8, scale = f32, per = row)",
            "int(bits = 4, scale = pow2, per = row)",
            "fixed(int = 4, frac = 4)",
            "dynfixed(bits = 8, policy = max, per = row)",
            "pot(bits = 4)",
        ] {
            let f = fmt(lit);
            for x in [&x, &with_nan] {
                if matches!(f, Format::Fixed(_)) && x.iter().any(|v| v.is_nan()) {
                    continue; // NaN has no fixed-point code.
                }
                let mut q = vec![0.0; x.len()];
                f.quantize(x, 8, &mut q);
                let c = f.codes(x, 8).unwrap();
                assert_eq!(c.scales.len(), f.scale_count(x.len(), 8), "{lit}");
                let back = f.from_codes(&c, 8).unwrap();
                let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let same_nan = |a: &[f64], b: &[f64]| {
                    a.iter()
                        .zip(b)
                        .all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan())
                };
                assert!(
                    same_nan(&back, &q),
                    "{lit}: {:?} vs {:?}",
                    bits(&back),
                    bits(&q)
                );
            }
        }
        assert!(fmt("mx6").codes(&x, 8).is_err());
        assert!(fmt("twohot(bits = 6, r = 1)").codes(&x, 8).is_err());
    }
}
