//! Values as the storage formats hold them: their bit patterns, the format every output
//! value is one of, and what a file of f16 or f32 holds exactly.

use nnp_numerics::{FloatFormat, Format, Rounding};

/// `x` as an output holds it: every NaN the canonical quiet NaN (`0x7FC0_0000`; `0x7E00` as
/// fp16, `0x7FC0` as bf16), so that both engines write the same bytes whatever sign and payload
/// a NaN picked up on its way (docs/semantics.md).
pub fn canonical_nan(x: f32) -> f32 {
    if x.is_nan() { f32::NAN } else { x }
}

/// The bit pattern of `x` in float format `fmt` (sign, exponent field, mantissa field; width
/// `fmt.bits()`, right-aligned in the u32), as [`FloatFormat::encode`] gives it: `x` should be a
/// value of the format (a storage value; anything else is rounded first), and every NaN becomes
/// the canonical quiet NaN (sign 0, exponent all ones, top mantissa bit set). Formats wider than
/// 32 bits keep the low 32 bits of the pattern.
pub fn storage_bits(fmt: &FloatFormat, x: f32) -> u32 {
    // The common storage formats by `half`'s conversions and f32's own bits: the same single
    // nearest-even rounding from `x` as the general encoding, many times faster (a trace
    // encodes every written lane).
    // NaNs take the general encoding too: it makes them canonical.
    match *fmt {
        FloatFormat::FP16 if !x.is_nan() => u32::from(half::f16::from_f32(x).to_bits()),
        FloatFormat::BF16 if !x.is_nan() => u32::from(half::bf16::from_f32(x).to_bits()),
        FloatFormat::FP32 if !x.is_nan() => x.to_bits(),
        _ => fmt.encode(f64::from(x)) as u32,
    }
}

/// Whether every value of `f` is an f16 value (fp16 itself, or a narrower IEEE-style format:
/// fp8 e5m2, e4m3 with infinities, ...), so an f16 file holds them exactly.
pub fn fits_f16(f: &FloatFormat) -> bool {
    f.exp_bits <= 5 && f.mant_bits <= 10
}

/// Whether every value of `f` is an f32 value.
pub fn fits_f32(f: &FloatFormat) -> bool {
    f.exp_bits <= 8 && f.mant_bits <= 23
}

/// `MemAvailable` of `/proc/meminfo` in bytes: what the system can hand out without swapping
/// (Linux; `None` elsewhere).
pub fn mem_available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The name of a float format's set of values: its rounding left out (`fp16`, `bf16`,
/// `fp(5, 2)`).
pub fn values_name(format: &FloatFormat) -> String {
    let values = FloatFormat {
        rounding: Rounding::NearestEven,
        ..*format
    };
    Format::Float(values).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast paths of fp16, bf16 and fp32 against the general encoding, on f32 values
    /// whose dropped mantissa bits are 0, 1, just below a tie, a tie, just above it and all
    /// ones, with every sign, exponent and kept mantissa (subnormals, overflow to infinity,
    /// NaNs); fp32 drops nothing: a sample of its patterns.
    #[test]
    fn storage_bits_fast_paths_match_the_general_encoding() {
        for (fmt, kept, step) in [
            (FloatFormat::FP16, 10, 1),
            (FloatFormat::BF16, 7, 1),
            (FloatFormat::FP32, 23, 4099),
        ] {
            let dropped = 23 - kept;
            let tails = match dropped {
                0 => vec![0],
                d => {
                    let tie = 1u64 << (d - 1);
                    vec![0, 1, tie - 1, tie, tie + 1, (1 << d) - 1]
                }
            };
            for head in (0..1u64 << (9 + kept)).step_by(step) {
                for tail in &tails {
                    let x = f32::from_bits(((head << dropped) | tail) as u32);
                    let general = fmt.encode(f64::from(x)) as u32;
                    assert_eq!(
                        storage_bits(&fmt, x),
                        general,
                        "{fmt:?} {:#010x}",
                        x.to_bits()
                    );
                }
            }
        }
    }

    #[test]
    fn fp16_bits_match_ieee_binary16() {
        let f = FloatFormat::FP16;
        // 1.0 = 0x3C00, -2.0 = 0xC000, 65504 = 0x7BFF, smallest subnormal 2^-24 = 0x0001,
        // smallest normal 2^-14 = 0x0400, -0.0 = 0x8000.
        assert_eq!(storage_bits(&f, 1.0), 0x3C00);
        assert_eq!(storage_bits(&f, -2.0), 0xC000);
        assert_eq!(storage_bits(&f, 65504.0), 0x7BFF);
        assert_eq!(storage_bits(&f, 2f32.powi(-24)), 0x0001);
        assert_eq!(storage_bits(&f, 2f32.powi(-14)), 0x0400);
        assert_eq!(storage_bits(&f, -0.0), 0x8000);
        assert_eq!(storage_bits(&f, f32::INFINITY), 0x7C00);
        assert_eq!(storage_bits(&f, f32::NEG_INFINITY), 0xFC00);
        assert_eq!(storage_bits(&f, -f32::NAN), 0x7E00);
        // 1 + 2^-11 is a tie between 1.0 and 1 + 2^-10: nearest-even gives 1.0.
        assert_eq!(storage_bits(&f, 1.0 + 2f32.powi(-11)), 0x3C00);
        // 65520 rounds up past 65504 to infinity.
        assert_eq!(storage_bits(&f, 65520.0), 0x7C00);
    }

    #[test]
    fn fp32_and_small_formats() {
        let f = FloatFormat::FP32;
        assert_eq!(storage_bits(&f, 1.5), 0x3FC0_0000);
        assert_eq!(storage_bits(&f, f32::from_bits(1)), 1);
        assert_eq!(storage_bits(&f, f32::NAN), 0x7FC0_0000);
        // fp(5, 2): 1.75 = 0 01111 11 = 0x3F; bf16 1.0 = 0x3F80.
        assert_eq!(storage_bits(&FloatFormat::ieee(5, 2), 1.75), 0x3F);
        assert_eq!(storage_bits(&FloatFormat::BF16, 1.0), 0x3F80);
    }
}
