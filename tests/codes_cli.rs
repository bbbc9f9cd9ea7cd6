//! `nnpc quantize --codes`: each tensor's element codes and shared scales, the fields of the
//! format's packed layout (docs/numerics.md), computed by hand here; decoding them gives the
//! bits of the quantized values `-o` writes.

mod common;

use common::tensors::{self, f32_tensor};
use common::{arg, message, nnpc, scratch, stderr};
use std::collections::BTreeMap;
use std::path::Path;

/// Rows `[1, -0.5, 3, 448]` and `[0.25, 0.125, 0, -0.0625]`.
const ROWS: [f32; 8] = [1.0, -0.5, 3.0, 448.0, 0.25, 0.125, 0.0, -0.0625];

/// By hand (docs/numerics.md, MX; e4m3: bias 7, emax 8): row 0's amax 448 = 1.75 * 2^8 gives
/// `s = 8 - 8 = 0` (E8M0 field 127) and the codes of the values themselves: 1 = 0 0111 000,
/// -0.5 = 1 0110 000, 3 = 0 1000 100, 448 = 0 1111 110. Row 1's amax 2^-2 gives `s = -10`
/// (field 117): 2^8 = 0 1111 000, 2^7 = 0 1110 000, +0, -2^6 = 1 1101 000.
const CODES: [f32; 8] = [
    0x38 as f32,
    0xB0 as f32,
    0x44 as f32,
    0x7E as f32,
    0x78 as f32,
    0x70 as f32,
    0.0,
    0xE8 as f32,
];
const SCALES: [f32; 2] = [127.0, 117.0];

const MX: &str = "mx(elem = fp8e4m3, block = 4)";

/// An e4m3 code's value, decoded by hand: `(-1)^s 2^(e - 7) (1 + m/8)`, subnormal `m/8 2^-6`.
fn e4m3(code: u32) -> f64 {
    let (s, e, m) = (code >> 7, (code >> 3) & 15, code & 7);
    let mag = match e {
        0 => f64::from(m) / 8.0 * 2f64.powi(-6),
        _ => (1.0 + f64::from(m) / 8.0) * 2f64.powi(e as i32 - 7),
    };
    if s == 1 { -mag } else { mag }
}

/// `nnpc quantize` of the tensor `x` (`shape`, `values`) with `extra` flags, in `dir`.
fn quantize(dir: &Path, shape: &[usize], values: &[f32], extra: &[&str]) -> std::process::Output {
    let input = dir.join("in.safetensors");
    tensors::write(
        &input,
        &BTreeMap::from([("x".to_string(), f32_tensor(shape, values))]),
    );
    let mut args = vec!["quantize", "--format", MX, arg(&input)];
    args.extend(extra);
    nnpc(&args)
}

#[test]
fn codes_and_scales_by_hand_and_back_to_the_values() {
    let dir = scratch("codes_by_hand");
    let (codes, values) = (dir.join("codes.safetensors"), dir.join("q.safetensors"));
    let o = quantize(
        &dir,
        &[2, 4],
        &ROWS,
        &["--codes", arg(&codes), "-o", arg(&values)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("codes and scales written to"));
    let got = tensors::read(&codes);
    assert_eq!(got["x.codes"].shape, vec![2, 4]);
    assert_eq!(got["x.codes"].f32s(), CODES);
    assert_eq!(got["x.scales"].shape, vec![2, 1]);
    assert_eq!(got["x.scales"].f32s(), SCALES);
    // decode(code) * 2^(scale - 127) is the quantized value, bit for bit.
    let q = tensors::read(&values)["x"].f32s();
    for (i, (&c, &v)) in CODES.iter().zip(&q).enumerate() {
        let s = SCALES[i / 4] as i32 - 127;
        let back = (e4m3(c as u32) * 2f64.powi(s)) as f32;
        assert_eq!(back.to_bits(), v.to_bits(), "element {i}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Along axis 0 of the transposed tensor, the runs are its columns: the codes are the
/// transposed codes, the scales one row of two.
#[test]
fn codes_along_another_axis() {
    let dir = scratch("codes_axis");
    let t: Vec<f32> = (0..8).map(|i| ROWS[(i % 2) * 4 + i / 2]).collect();
    let codes = dir.join("codes.safetensors");
    let o = quantize(&dir, &[4, 2], &t, &["--axis", "0", "--codes", arg(&codes)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let got = tensors::read(&codes);
    let want: Vec<f32> = (0..8).map(|i| CODES[(i % 2) * 4 + i / 2]).collect();
    assert_eq!(got["x.codes"].f32s(), want);
    assert_eq!(got["x.scales"].shape, vec![1, 2]);
    assert_eq!(got["x.scales"].f32s(), SCALES);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn formats_without_codes_an_f32_file_holds_are_refused() {
    let dir = scratch("codes_refused");
    let input = dir.join("in.safetensors");
    let values = [1.1, -0.5, 3.0, 448.0];
    tensors::write(
        &input,
        &BTreeMap::from([("x".to_string(), f32_tensor(&[4], &values))]),
    );
    let codes = dir.join("codes.safetensors");
    for (format, says) in [
        // 1.1 in fp32 is the code 0x3F8CCCCD (1066192077), 30 significant bits.
        (
            "fp32",
            "its code 1066192077 has more than 24 significant bits",
        ),
        ("mx6", "its blocks hold several levels of scales"),
    ] {
        let o = nnpc(&[
            "quantize",
            "--format",
            format,
            arg(&input),
            "--codes",
            arg(&codes),
        ]);
        assert_eq!(o.status.code(), Some(2), "{format}: {}", stderr(&o));
        assert!(message(&o).contains(says), "{format}: {}", stderr(&o));
        // Python's integer codes help where the format has codes, not where it has none.
        assert_eq!(
            message(&o).contains("codes=True"),
            format == "fp32",
            "{format}: {}",
            stderr(&o)
        );
        assert!(!codes.exists(), "{format}: nothing written");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-o` and `--codes` naming one file by different names (`./`, a linked directory, a
/// directory not made yet) or one directory (whose `nnpc.json` both would write) are refused
/// before anything is written.
#[test]
fn codes_and_values_on_one_file_are_refused() {
    let dir = scratch("codes_shared");
    std::os::unix::fs::symlink(&dir, dir.join("link")).expect("link");
    let q = dir.join("q.safetensors");
    let cases = [
        (q.clone(), dir.join(".").join("q.safetensors")),
        (q.clone(), dir.join("link").join("q.safetensors")),
        (
            dir.join("new").join("q.safetensors"),
            dir.join("new").join(".").join("q.safetensors"),
        ),
        (dir.join("out"), dir.join("link").join("out")),
    ];
    for (values, codes) in &cases {
        let o = quantize(
            &dir,
            &[2, 4],
            &ROWS,
            &["-o", arg(values), "--codes", arg(codes)],
        );
        let err = message(&o);
        assert_eq!(o.status.code(), Some(2), "{values:?} {codes:?}: {err}");
        assert!(err.contains("which -o writes too"), "{err}");
        assert!(err.contains("give --codes another path"), "{err}");
        assert!(!values.exists() && !codes.exists(), "{values:?} written");
    }
    // Distinct files in one place are fine.
    let o = quantize(
        &dir,
        &[2, 4],
        &ROWS,
        &[
            "-o",
            arg(&q),
            "--codes",
            arg(&dir.join("link").join("c.safetensors")),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", message(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
