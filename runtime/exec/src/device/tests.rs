//! Every GPU kernel against the CPU kernel of the same op, bit for bit, on adversarial data
//! (ties, one ulp either side of them, subnormals, overflow, zeros, NaN and infinities, blocks
//! whose exponents differ widely) and on every fp16 and bf16 value. The CPU kernels are
//! tested against the reference of `nnp_numerics` elsewhere; here the question is only
//! whether the CUDA C says the same as the Rust. A NaN matches any NaN (the contract says a
//! NaN propagates, not its sign or payload: docs/semantics.md; the CPU's fp16 kernels widen
//! f32 NaNs, the GPU's give f64 ones); every other element matches bit for bit. These need a
//! CUDA device.

use crate::fused::{MfuOp, Src, Step};
use crate::gpu::Gpu;
use crate::mfu::ActTable;
use crate::quant::tests::adversarial;
use crate::quant::{QuantizeOp, RoundOp};
use candle_core::{CustomOp1, CustomOp2, Device, Tensor};
use nnp_lowering::swgraph::BinOp;
use nnp_numerics::{Activation, FloatFormat, Format, Overflow, Rounding};

fn gpu() -> Device {
    Gpu::open().expect("a CUDA device").device().clone()
}

/// The first element where two results differ (a NaN matches any NaN).
fn first_difference(a: &[u64], b: &[u64]) -> Option<usize> {
    let nan = |x: u64| f64::from_bits(x).is_nan();
    (0..a.len().max(b.len())).find(|&k| match (a.get(k), b.get(k)) {
        (Some(&x), Some(&y)) => x != y && !(nan(x) && nan(y)),
        _ => true,
    })
}

fn bits(t: &Tensor) -> Vec<u64> {
    let v: Vec<f64> = t
        .flatten_all()
        .and_then(|t| t.to_device(&Device::Cpu))
        .and_then(|t| t.to_vec1())
        .expect("values");
    v.iter().map(|x| x.to_bits()).collect()
}

fn tensor(v: &[f64], rows: usize, dev: &Device) -> Tensor {
    Tensor::from_vec(v.to_vec(), (rows, v.len() / rows), dev).expect("tensor")
}

/// `v` cut to whole rows of `len`.
fn rows_of(mut v: Vec<f64>, len: usize) -> (Vec<f64>, usize) {
    v.truncate(v.len() / len * len);
    let rows = v.len() / len;
    (v, rows)
}

/// Both devices' results of a one-operand op, compared bit for bit.
fn same1(op: &impl CustomOp1, v: &[f64], rows: usize, what: &str) {
    let dev = gpu();
    let cpu = tensor(v, rows, &Device::Cpu)
        .apply_op1_no_bwd(op)
        .expect("cpu");
    let cuda = tensor(v, rows, &dev).apply_op1_no_bwd(op).expect("cuda");
    let (a, b) = (bits(&cpu), bits(&cuda));
    if let Some(k) = first_difference(&a, &b) {
        panic!(
            "{what}: element {k} of {}: input {:e} ({:#x}), cpu {:#x}, gpu {:#x}",
            a.len(),
            v[k],
            v[k].to_bits(),
            a[k],
            b[k]
        );
    }
}

fn same2(op: &impl CustomOp2, a: (&[f64], usize), b: (&[f64], usize), what: &str) {
    let dev = gpu();
    let run = |d: &Device| {
        tensor(a.0, a.1, d)
            .apply_op2_no_bwd(&tensor(b.0, b.1, d), op)
            .expect("op")
    };
    let (x, y) = (bits(&run(&Device::Cpu)), bits(&run(&dev)));
    if let Some(k) = first_difference(&x, &y) {
        panic!("{what}: element {k}: cpu {:#x}, gpu {:#x}", x[k], y[k]);
    }
}

/// Formats with the GPU's rounder (nearest-even, subnormals) and one without (it takes the
/// host copy): the results must agree either way.
fn formats() -> Vec<FloatFormat> {
    let fp8 = FloatFormat {
        exp_bits: 4,
        mant_bits: 3,
        subnormals: true,
        overflow: Overflow::Saturate,
        rounding: Rounding::NearestEven,
    };
    let away = FloatFormat {
        rounding: Rounding::NearestAway,
        ..FloatFormat::FP16
    };
    vec![
        FloatFormat::FP16,
        FloatFormat::BF16,
        FloatFormat::FP32,
        fp8,
        away,
    ]
}

#[test]
fn round_on_the_gpu_is_the_cpu_rounding() {
    let v = adversarial();
    for f in formats() {
        same1(&RoundOp(f), &v, 1, &format!("round {f:?}"));
    }
}

#[test]
fn quantize_on_the_gpu_is_the_cpu_quantizer() {
    // Blocks whose exponents differ widely: the adversarial values in runs of 128 and 96
    // lanes (96: a block of 128 cut short), and runs holding a NaN or an infinity.
    let mut v = adversarial();
    v.truncate(v.len() / 384 * 384);
    for lit in [
        "bfp(mant = 8, block = native, exp_bits = 5, round = even)",
        "bfp(mant = 8, exp_bits = 5, round = away)",
        "bfp(mant = 5, exp_bits = 5, round = zero)",
        "bfp(mant = 4, block = 4, exp_bits = 8)",
        "bfp(mant = 12, block = 3, exp_bits = 5)",
        "msfp(8)",
        "fp16",
        "mx(elem = fp8e4m3, block = 32)",
        "mx9",
    ] {
        let format: Format = lit.parse().expect("a format");
        for len in [128, 96] {
            let op = QuantizeOp {
                format,
                len,
                native: 128,
            };
            same1(&op, &v, v.len() / 384, &format!("{lit}, runs of {len}"));
        }
    }
}

/// Pairs of adversarial values for the binary ops: each value with its neighbour, with
/// itself negated, and with values of distant binades.
fn pairs() -> (Vec<f64>, Vec<f64>) {
    let v = adversarial();
    let mut a = Vec::new();
    let mut b = Vec::new();
    for (k, &x) in v.iter().enumerate() {
        for y in [v[(k + 1) % v.len()], -x, v[(k * 7919) % v.len()], x] {
            a.push(x);
            b.push(y);
        }
    }
    (a, b)
}

#[test]
fn mfu_binary_ops_on_the_gpu_are_the_cpu_ops() {
    let (a, b) = pairs();
    let len = 128;
    let (a, rows) = rows_of(a, len);
    let (b, _) = rows_of(b, len);
    for format in formats() {
        for op in [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Max] {
            for rounded in [[false, false], [true, false], [false, true]] {
                let step = Step::Binary {
                    op,
                    format,
                    a: Src::Outer(0),
                    b: Src::Outer(1),
                    rounded,
                };
                let op1 = MfuOp { step, len };
                // `rounded` promises rounded operands: give them rounded ones.
                let round = |v: &[f64], r: bool| -> Vec<f64> {
                    if !r {
                        return v.to_vec();
                    }
                    let t = tensor(v, 1, &Device::Cpu).apply_op1_no_bwd(&RoundOp(format));
                    t.and_then(|t| t.flatten_all()?.to_vec1()).expect("rounded")
                };
                let (x, y) = (round(&a, rounded[0]), round(&b, rounded[1]));
                let what = format!("{op:?} {format:?} rounded {rounded:?}");
                same2(&op1, (&x, rows), (&y, rows), &what);
                // A batch-1 operand, broadcast over the batch.
                same2(
                    &op1,
                    (&x, rows),
                    (&y[..len], 1),
                    &format!("{what}, broadcast"),
                );
            }
        }
        // A value with itself (one operand).
        let step = Step::Binary {
            op: BinOp::Mul,
            format,
            a: Src::Outer(0),
            b: Src::Outer(0),
            rounded: [false, false],
        };
        same1(&MfuOp { step, len }, &a, rows, &format!("x * x {format:?}"));
    }
}

#[test]
fn relu_pass_and_tables_on_the_gpu_are_the_cpu_ops() {
    let (v, rows) = rows_of(adversarial(), 128);
    for format in formats() {
        for step in [
            Step::Relu(format, Src::Outer(0)),
            Step::Pass(format, Src::Outer(0)),
        ] {
            let what = format!("{format:?}");
            same1(&MfuOp { step, len: 128 }, &v, rows, &what);
        }
    }
    // Every fp16 and bf16 value (NaNs of every payload and sign included), and the
    // adversarial values unrounded, through each activation's table.
    for format in [FloatFormat::FP16, FloatFormat::BF16] {
        let every: Vec<f64> = (0..1u64 << 16).map(|b| format.decode(b)).collect();
        for kind in Activation::ALL {
            let table = ActTable::load(kind, &format, None).expect("table");
            for (data, rounded) in [(&every, true), (&v, false)] {
                let (data, rows) = rows_of(data.clone(), 128);
                let step = Step::Activation {
                    table: table.clone(),
                    x: Src::Outer(0),
                    rounded,
                };
                let what = format!("{kind:?} {format:?} rounded {rounded}");
                same1(&MfuOp { step, len: 128 }, &data, rows, &what);
            }
        }
    }
}
