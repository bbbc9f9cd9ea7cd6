//! `nnpc quantize`: fake-quantize tensors in `.npy` / safetensors files with any format literal
//! and report QSNR and bits per element (the equivalent of microxcaling's `quantize_mx_op`).

use super::files::{Reads, refuse_shared, written_files};
use miette::{Diagnostic, LabeledSpan, NamedSource};
use nnp_numerics::kernel::quantize_f32;
use nnp_numerics::{ErrorStats, FloatFormat, Format, FormatError, error_stats};
use nnp_runtime::host::Tensor;
use nnp_runtime::io::{Dtype, Metadata, read_tensors, write_tensors_with};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Fake-quantize tensors with a format literal; print QSNR and bits per element.
///
/// Blocks run along `--axis` (default: the last one): each line of the tensor along that axis
/// is one run, cut into blocks as the format says (`block = native` is `--native`). Formats with
/// `per = tensor` share one scale over the whole tensor. Reads `.npy` (f16/f32/f64), safetensors
/// (f16/bf16/f32/f64) or a directory of them; values are converted to f32 on reading (f64 is
/// rounded to nearest f32). Writes the quantized tensors to `-o` if given, and their element
/// codes and shared scales to `--codes` (`NAME.codes`, the shape of the tensor, and
/// `NAME.scales`, the shape with the blocking axis counting scale groups: the fields of the
/// format's packed layout, docs/numerics.md).
///
/// Exit status: 0 on success, 2 for a bad literal, unreadable input or unwritable output.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc data samples/mlp2_relu.nnp --weights-out model.safetensors && nnpc data samples/mlp2_relu.nnp --weights-out weights
  nnpc quantize --format 'bfp(mant = 8)' weights/W1.npy -o weights_q.npy
  nnpc quantize --format 'mx(elem = fp8e4m3, block = 32)' model.safetensors --tensor W2
  nnpc quantize --format mx6 --axis 0 weights/W2.npy --json
  nnpc quantize --format 'int(bits = 8, scale = f32, per = row)' model.safetensors -o q.safetensors
  nnpc quantize --format mxfp8_e4m3 model.safetensors --tensor W1 --codes w1_codes.safetensors

Format literals: fp16, bf16, fp32, fp(e, m), bfp(mant, block, exp_bits, round), msfp(mant),
mx(elem, block), mxfp8_e4m3, mxfp8_e5m2, mxfp6_e3m2, mxfp6_e2m3, mxfp4, mxint8 (OCP MX),
hbfp(mant, levels, scale_cap, block, sub), mx9, mx6, mx4 (shared microexponents),
int(bits, scale, per), fixed(int, frac), dynfixed(bits, policy, per), pot(bits), twohot(bits, r)
(see docs/numerics.md).")]
pub struct Args {
    /// Input: a `.npy` file, a safetensors file, or a directory of them.
    pub input: PathBuf,
    /// The format literal, e.g. `bfp(mant = 8)` or `mx(elem = fp8e4m3, block = 32)`.
    #[arg(long, short = 'f', value_name = "LITERAL")]
    pub format: String,
    /// Axis the blocks run along (negative counts from the end).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub axis: isize,
    /// Only this tensor (default: every tensor in the input).
    #[arg(long, value_name = "NAME")]
    pub tensor: Option<String>,
    /// Native dimension N: what `block = native` means.
    #[arg(long, default_value_t = 128, value_parser = super::at_least_one)]
    pub native: usize,
    /// Output file or directory (`.npy` for one tensor, `.safetensors`, or a directory).
    #[arg(short = 'o', long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Write each tensor's element codes (`NAME.codes`) and shared scales (`NAME.scales`):
    /// the fields of the format's packed layout as integers (f32 files, exact), as torchao's
    /// `to_mx` gives them (`.safetensors`, or a directory of `.npy`).
    #[arg(long, value_name = "OUT")]
    pub codes: Option<PathBuf>,
    /// Element type of the written values.
    #[arg(long, value_enum, default_value_t = OutDtype::F32)]
    pub dtype: OutDtype,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum OutDtype {
    F16,
    F32,
}

/// A bad format literal, rendered with a pointer into the literal.
#[derive(Debug, thiserror::Error)]
#[error("invalid format literal: {}", .error.message)]
struct LiteralError {
    src: NamedSource<String>,
    error: FormatError,
}

impl Diagnostic for LiteralError {
    fn code<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        Some(Box::new("nnp::format"))
    }
    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.error
            .help
            .as_ref()
            .map(|h| Box::new(h.clone()) as Box<dyn std::fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.src)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let len = self.error.len.max(1);
        Some(Box::new(std::iter::once(LabeledSpan::at(
            self.error.offset..self.error.offset + len,
            "here",
        ))))
    }
}

/// Parse a literal; the error points into it.
pub fn parse_literal(text: &str) -> miette::Result<Format> {
    text.parse::<Format>().map_err(|error| {
        miette::Report::new(LiteralError {
            src: NamedSource::new("--format", text.to_string()),
            error,
        })
    })
}

/// What `nnpc quantize` reports for one tensor.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub name: String,
    pub shape: Vec<usize>,
    pub axis: usize,
    /// Elements of the tensor (0 for an empty one, which quantizes to itself).
    pub elements: usize,
    pub format: String,
    pub bits_per_element: f64,
    #[serde(flatten)]
    pub stats: ErrorStats,
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let format = parse_literal(&args.format)?;
    for out in args.output.iter().chain(&args.codes) {
        // An output path that names no kind of tensor file fails before the work.
        nnp_runtime::io::output_kind(out).map_err(super::fail)?;
    }
    let mut tensors = read_tensors(&args.input).map_err(super::fail)?;
    if let Some(name) = &args.tensor {
        let Some(t) = tensors.remove(name) else {
            let names: Vec<&str> = tensors.keys().map(String::as_str).collect();
            return Err(miette::miette!(
                help = format!("tensors in the input: {}", names.join(", ")),
                "no tensor `{name}` in `{}`",
                args.input.display()
            ));
        };
        tensors = BTreeMap::from([(name.clone(), t)]);
    }
    if tensors.is_empty() {
        return Err(miette::miette!("no tensors in `{}`", args.input.display()));
    }
    let native = args.native;
    let mut reports = Vec::new();
    let mut out_tensors = BTreeMap::new();
    let mut code_tensors = BTreeMap::new();
    for (name, t) in &tensors {
        let axis = resolve_axis(args.axis, t.shape.len()).ok_or_else(|| {
            miette::miette!(
                "--axis {} is out of range for tensor `{name}` of rank {} (shape {:?})",
                args.axis,
                t.shape.len(),
                t.shape
            )
        })?;
        let q = quantize_along(&format, t, axis, native);
        // Report the error of what is written (rounded to the output dtype).
        let written: Vec<f32> = match args.dtype {
            OutDtype::F32 => q,
            OutDtype::F16 => q
                .iter()
                .map(|v| FloatFormat::FP16.round(f64::from(*v)) as f32)
                .collect(),
        };
        let x: Vec<f64> = t.data.iter().map(|v| f64::from(*v)).collect();
        let y: Vec<f64> = written.iter().map(|v| f64::from(*v)).collect();
        // Per-tensor scales are stored once per tensor, others once per run (or block).
        let run_len = if format.per_tensor() {
            t.data.len()
        } else {
            t.shape.get(axis).copied().unwrap_or(1)
        };
        reports.push(Report {
            name: name.clone(),
            shape: t.shape.clone(),
            axis,
            elements: t.data.len(),
            format: format.to_string(),
            bits_per_element: format.bits_per_element(native, run_len),
            stats: error_stats(&x, &y),
        });
        out_tensors.insert(
            name.clone(),
            Tensor {
                shape: t.shape.clone(),
                data: written,
            },
        );
        if args.codes.is_some() {
            let (codes, scales) =
                codes_along(&format, t, axis, native).map_err(|e| super::fail(e.named(name)))?;
            code_tensors.insert(format!("{name}.codes"), codes);
            code_tensors.insert(format!("{name}.scales"), scales);
        }
    }
    let mut reads = Reads::default();
    reads.add("the input file", &args.input);
    let metadata = Metadata::from([
        (
            "nnpc.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        (
            "nnpc.quantize.input".to_string(),
            args.input.display().to_string(),
        ),
        ("nnpc.quantize.format".to_string(), format.to_string()),
        ("nnpc.quantize.axis".to_string(), args.axis.to_string()),
        ("nnpc.quantize.native".to_string(), native.to_string()),
    ]);
    // Every file either flag writes is checked before the first is written.
    if let Some(out) = &args.output {
        reads.check_tensors("-o", out, out_tensors.keys())?;
    }
    if let Some(codes) = &args.codes {
        reads.check_tensors("--codes", codes, code_tensors.keys())?;
        if let Some(out) = &args.output {
            refuse_shared(
                ("--codes", &written_files(codes, code_tensors.keys())),
                ("-o", &written_files(out, out_tensors.keys())),
            )?;
        }
    }
    if let Some(out) = &args.output {
        let dtype = match args.dtype {
            OutDtype::F16 => Dtype::F16,
            OutDtype::F32 => Dtype::F32,
        };
        write_tensors_with(out, &out_tensors, dtype, &metadata).map_err(super::fail)?;
    }
    if let Some(out) = &args.codes {
        write_tensors_with(out, &code_tensors, Dtype::F32, &metadata).map_err(super::fail)?;
    }
    if args.json {
        let text = serde_json::to_string_pretty(&reports)
            .map_err(|e| super::fail(format!("cannot write JSON: {e}")))?;
        super::output::stdout(text + "\n")?;
    } else {
        print_table(&reports, &format)?;
    }
    if let Some(out) = &args.output {
        super::output::note(format!("written to {}\n", out.display()))?;
    }
    if let Some(out) = &args.codes {
        super::output::note(format!("codes and scales written to {}\n", out.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn resolve_axis(axis: isize, rank: usize) -> Option<usize> {
    let rank = rank.max(1) as isize;
    let a = if axis < 0 { axis + rank } else { axis };
    (0..rank).contains(&a).then_some(a as usize)
}

/// Quantize `t` with runs along `axis`: gather the runs contiguously, quantize them (the BFP
/// fast path or the reference), scatter back.
pub fn quantize_along(format: &Format, t: &Tensor, axis: usize, native: usize) -> Vec<f32> {
    // An empty tensor (a zero anywhere in its shape) has no runs: it quantizes to itself.
    if t.data.is_empty() {
        return Vec::new();
    }
    let len = t.shape.get(axis).copied().unwrap_or(1).max(1);
    let gathered = gather(&t.data, &t.shape, axis);
    let n = t.data.len();
    let mut q = vec![0.0f32; n];
    quantize_f32(format, &gathered, len, native, &mut q);
    scatter(&q, &t.shape, axis)
}

/// The element codes (the shape of `t`) and shared scales (the shape of `t` with `axis`
/// counting scale groups; `[1]` for a scale over the whole tensor) of `t` quantized with runs
/// along `axis` ([`Format::tensor_codes`]), as f32 values: an `int(scale = f32)` scale is the
/// f32 whose bits are its field; any other field is its integer, refused where an f32 does
/// not hold it exactly.
pub fn codes_along(
    format: &Format,
    t: &Tensor,
    axis: usize,
    native: usize,
) -> Result<(Tensor, Tensor), CodesError> {
    let len = t.shape.get(axis).copied().unwrap_or(1).max(1);
    let x: Vec<f64> = gather(&t.data, &t.shape, axis)
        .iter()
        .map(|v| f64::from(*v))
        .collect();
    let codes = format
        .tensor_codes(&x, len, native)
        .map_err(CodesError::Format)?;
    let exact = |v: i64| {
        let f = v as f32;
        match f as i64 == v {
            true => Ok(f),
            false => Err(CodesError::Wide(v)),
        }
    };
    let elems: Vec<f32> = codes
        .elems
        .iter()
        .map(|&v| exact(v))
        .collect::<Result<_, _>>()?;
    let scales: Vec<f32> = match format.f32_scales() {
        true => codes
            .scales
            .iter()
            .map(|&v| f32::from_bits(v as u32))
            .collect(),
        false => codes
            .scales
            .iter()
            .map(|&v| exact(v))
            .collect::<Result<_, _>>()?,
    };
    let scale_shape = format.scale_shape(&t.shape, axis, native, scales.len());
    // Scales along the axis go back in its place; one list of them stays as it is.
    let scales = match scale_shape.len() == t.shape.len() {
        true => scatter(&scales, &scale_shape, axis),
        false => scales,
    };
    let codes = Tensor {
        shape: t.shape.clone(),
        data: scatter(&elems, &t.shape, axis),
    };
    let scales = Tensor {
        shape: scale_shape,
        data: scales,
    };
    Ok((codes, scales))
}

/// Why a tensor's codes cannot be written ([`codes_along`]).
#[derive(Debug)]
pub enum CodesError {
    /// The format has no codes for these values.
    Format(nnp_numerics::pack::PackError),
    /// A code an f32 file cannot hold exactly.
    Wide(i64),
}

impl CodesError {
    /// The failure for the tensor `name`; the help names the way to every code where the
    /// format has them.
    fn named(self, name: &str) -> super::Failure {
        match self {
            CodesError::Format(e) => super::Failure::new(format!("tensor `{name}`: {e}")),
            CodesError::Wide(v) => super::Failure::new(format!(
                "tensor `{name}`: its code {v} has more than 24 significant bits: an f32 file \
                 cannot hold it exactly"
            ))
            .help("nnpc.quantize(..., codes=True) in Python gives every code as an integer"),
        }
    }
}

/// The runs of `data` (of shape `shape`) along `axis`, one after the other.
fn gather(data: &[f32], shape: &[usize], axis: usize) -> Vec<f32> {
    let (len, inner) = run_dims(shape, axis);
    if inner == 1 || data.is_empty() {
        return data.to_vec();
    }
    let runs = data.len() / len;
    let mut out = vec![0.0f32; data.len()];
    for r in 0..runs {
        for k in 0..len {
            out[r * len + k] = data[run_index(r, k, len, inner)];
        }
    }
    out
}

/// [`gather`]'s inverse: runs along `axis`, one after the other, as a tensor of `shape`.
fn scatter(runs: &[f32], shape: &[usize], axis: usize) -> Vec<f32> {
    let (len, inner) = run_dims(shape, axis);
    if inner == 1 || runs.is_empty() {
        return runs.to_vec();
    }
    let mut out = vec![0.0f32; runs.len()];
    for r in 0..runs.len() / len {
        for k in 0..len {
            out[run_index(r, k, len, inner)] = runs[r * len + k];
        }
    }
    out
}

/// The length of the runs along `axis` of a tensor of `shape`, and the elements between two
/// consecutive ones of a run.
fn run_dims(shape: &[usize], axis: usize) -> (usize, usize) {
    let len = shape.get(axis).copied().unwrap_or(1).max(1);
    (len, shape.iter().skip(axis + 1).product())
}

/// The row-major index of element `k` of run `r` (`r = outer * inner + i`).
fn run_index(r: usize, k: usize, len: usize, inner: usize) -> usize {
    (r / inner) * len * inner + k * inner + r % inner
}

fn print_table(reports: &[Report], format: &Format) -> miette::Result<()> {
    use std::fmt::Write;
    let mut text = format!("format: {format}\n");
    let _ = writeln!(
        text,
        "{:<32} {:>16} {:>5} {:>10} {:>10} {:>12} {:>9} {:>9}",
        "tensor", "shape", "axis", "bits/elem", "QSNR dB", "max |err|", "flushed", "nonfinite"
    );
    for r in reports {
        let shape = format!("{:?}", r.shape);
        let _ = writeln!(
            text,
            "{:<32} {:>16} {:>5} {:>10.3} {:>10.2} {:>12.4e} {:>9} {:>9}",
            r.name,
            shape,
            r.axis,
            r.bits_per_element,
            r.stats.qsnr_db,
            r.stats.max_abs_err,
            r.stats.flushed,
            r.stats.nonfinite
        );
    }
    for r in reports.iter().filter(|r| r.elements == 0) {
        let _ = writeln!(
            text,
            "{}: 0 elements (shape {:?}), nothing to quantize: it stays empty",
            r.name, r.shape
        );
    }
    super::output::stdout(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_along_any_axis() {
        // A [2, 3] tensor quantized along axis 0 with bfp(mant = 3, block = 2): runs are the
        // columns (1, 0.3), (2, 0.2), (4, 3). mant 3 -> LSB 2^(E - 1).
        // (1, 0.3): E = 0, LSB 0.5: 0.3 -> 0.5. (2, 0.2): E = 1, LSB 1: 0.2 -> 0.
        // (4, 3): E = 2, LSB 2: 3 -> 1.5 ties to even 2 -> 4.
        let f = parse_literal("bfp(mant = 3, block = 2)").unwrap();
        let t = Tensor {
            shape: vec![2, 3],
            data: vec![1.0, 2.0, 4.0, 0.3, 0.2, 3.0],
        };
        assert_eq!(
            quantize_along(&f, &t, 0, 128),
            vec![1.0, 2.0, 4.0, 0.5, 0.0, 4.0]
        );
        // Along axis 1 (rows (1, 2, 4) and (0.3, 0.2, 3)), blocks of 2 then 1:
        // (1, 2): E = 1, LSB 1 -> (1, 2); (4) -> 4; (0.3, 0.2): E = -2, LSB 2^-3: 0.3 -> 2.4
        // -> 2 -> 0.25, 0.2 -> 1.6 -> 2 -> 0.25; (3): E = 1, LSB 1 -> 3.
        assert_eq!(
            quantize_along(&f, &t, 1, 128),
            vec![1.0, 2.0, 4.0, 0.25, 0.25, 3.0]
        );
        assert_eq!(resolve_axis(-1, 2), Some(1));
        assert_eq!(resolve_axis(2, 2), None);
        assert_eq!(resolve_axis(-3, 2), None);
    }

    #[test]
    fn literal_errors_point_into_the_literal() {
        let e = parse_literal("mx(elem = fp8e4m4)").unwrap_err();
        let text = format!("{e:?}");
        assert!(text.contains("fp8e4m3"), "{text}");
    }
}
