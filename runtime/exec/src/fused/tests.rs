//! Tests of `exec::fused`.
use super::*;
use crate::mfu::nan_bits;
use nnp_lowering::swgraph::{Node, NodeMap, Op, SwGraph, Ty, UnOp};
use nnp_numerics::Activation;

fn hand_graph(nodes: Vec<Node>) -> SwGraph {
    SwGraph {
        version: nnp_lowering::swgraph::SWGRAPH_VERSION,
        source: "hand".into(),
        program_hash: String::new(),
        target: "hand".into(),
        target_hash: String::new(),
        native: 2,
        storage: FloatFormat::FP16,
        output_storage: FloatFormat::FP16,
        nodes,
        outputs: vec![],
        decls: vec![],
        writes: vec![],
        checks: vec![],
        planned: Default::default(),
    }
}

fn add(a: u32, b: u32) -> Op {
    Op::Binary {
        op: BinOp::Add,
        a: ValueId(a),
        b: ValueId(b),
        format: FloatFormat::FP16,
    }
}

fn quantize(src: u32) -> Op {
    Op::Quantize {
        src: ValueId(src),
        format: nnp_numerics::Format::FP16,
        axis: nnp_lowering::swgraph::BlockAxis::VectorTile,
    }
}

fn input() -> Op {
    Op::Input {
        name: "x".into(),
        shape: vec![4],
    }
}

/// Element-wise ops wait for the first node that is not one of them, then come together
/// after their operands: the pattern of an LSTM step (quantize stands for the products).
#[test]
fn schedule_gathers_element_wise_ops() {
    let v = Ty::Vector { tiles: 2 };
    let node = |op: Op| Node { op, ty: v.clone() };
    let sigm = Op::Unary {
        op: UnOp::Table(Activation::Sigmoid),
        src: ValueId(6),
        format: FloatFormat::FP16,
        table: None,
    };
    let graph = hand_graph(vec![
        node(input()),
        node(Op::Zero { shape: vec![4] }),
        node(add(0, 1)),
        node(quantize(2)),
        node(add(3, 1)),
        node(quantize(0)),
        node(add(5, 4)),
        node(sigm),
        node(quantize(7)),
    ]);
    let constant = NodeMap::from(vec![
        false, true, false, false, false, false, false, false, false,
    ]);
    let schedule = Schedule::new(&graph, &constant, false);
    let order: Vec<usize> = schedule.order.iter().map(|v| v.index()).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 5, 4, 6, 7, 8]);
    assert_eq!(
        regions(&schedule, &HashSet::new()),
        vec![Region {
            start: 5,
            end: 8,
            // Only the sigmoid is read after the region (by the last quantize).
            kept: vec![false, false, true],
        }]
    );
}

/// A region's pass hands the rows of every scanned step that hold a NaN or an infinity
/// to `scan`, kept or not, each task's rows numbered in the batch: rows of 1024 elements
/// are one row per task. On f64 lanes (a bf16 region) and f32 lanes (fp16) alike.
#[test]
fn run_scans_the_rows_with_nans_or_infinities() {
    let len = 1024;
    // Row r of the input is r - 1.5 everywhere, except row 1: +inf in lane 7. The bias is
    // one row of 0.25.
    let mut x: Vec<f64> = (0..3).flat_map(|r| vec![r as f64 - 1.5; len]).collect();
    x[len + 7] = f64::INFINITY;
    let bias = vec![0.25; len];
    for format in [FloatFormat::BF16, FloatFormat::FP16] {
        let steps = [
            Step::Binary {
                op: BinOp::Add,
                format,
                a: Src::Outer(0),
                b: Src::Outer(1),
                rounded: [false; 2],
            },
            Step::Relu(format, Src::Local(0)),
        ];
        let scan = |k: usize, r0: usize, rows: &[f64], seen: &mut Vec<(usize, usize, f64)>| {
            assert_eq!(rows.len(), len, "one whole row per task");
            seen.push((k, r0, rows[0]));
            seen.push((k, r0, rows[7]));
        };
        let pass = RegionPass {
            steps: &steps,
            kept: &[false, true],
            scanned: &[true; 2],
            outer: &[&x, &bias],
            batch: 3,
            len,
        };
        let (values, states) = pass.run(scan);
        let seen: Vec<_> = states.into_iter().flatten().collect();
        // Row 1: x + 0.25 = -0.25 and inf; relu: +0 and inf. Rows 0 and 2 are finite.
        let inf = f64::INFINITY;
        assert_eq!(
            seen,
            vec![(0, 1, -0.25), (0, 1, inf), (1, 1, 0.0), (1, 1, inf)],
            "{format:?}"
        );
        assert_eq!(values.len(), 1, "only the relu is kept");
        assert_eq!(values[0][..len], vec![0.0; len][..]);
        assert_eq!(values[0][2 * len..], vec![0.75; len][..]);
    }
}

/// A region of every kind of step, on f32 lanes ([`F16c`]) and on f64 lanes: the same
/// kept values bit for bit (NaN as NaN) and the same rows scanned, on fp16 values with
/// specials, an operand that is not rounded yet (f64 values between fp16 values, ties,
/// beyond the range), a one-row operand broadcast over the batch, rows of 21 lanes (a
/// partial group of lanes) and a last task of fewer rows. A region with a step in another
/// format does not take the f32 lanes.
#[test]
fn f32_lanes_give_the_f64_lanes_bits() {
    let (batch, len) = (301, 21);
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let specials = [
        0.0,
        -0.0,
        65504.0,
        -65504.0,
        2f64.powi(-24),
        f64::INFINITY,
        f64::NAN,
    ];
    let mut fp16 = |i: usize| match i % 23 {
        0..7 => specials[i % 23],
        _ => half::f16::from_bits(next() as u16).to_f64(),
    };
    let x: Vec<f64> = (0..batch * len).map(&mut fp16).collect();
    let h: Vec<f64> = (0..batch * len).map(|i| fp16(i + 5)).collect();
    // Not fp16 values: products of fp16 values (ties and in between), and overflows.
    let raw: Vec<f64> = x
        .iter()
        .zip(&h)
        .enumerate()
        .map(|(i, (a, b))| {
            if i % 29 == 0 {
                65520.0
            } else {
                a * b * 1.000_1
            }
        })
        .collect();
    let bias: Vec<f64> = (0..len).map(|i| fp16(i * 3)).collect();
    let tables: Vec<ActTable> = Activation::ALL
        .map(|f| ActTable::load(f, &FloatFormat::FP16, None).expect("built-in"))
        .into();
    let bin = |op, a, b, rounded| Step::Binary {
        op,
        format: FloatFormat::FP16,
        a,
        b,
        rounded,
    };
    let act = |t: usize, x| Step::Activation {
        table: tables[t].clone(),
        x,
        rounded: true,
    };
    use Src::{Local, Outer};
    let steps = vec![
        bin(BinOp::Add, Outer(0), Outer(3), [true, true]),
        bin(BinOp::Mul, Outer(2), Local(0), [false, true]),
        act(0, Local(1)),
        act(1, Outer(1)),
        bin(BinOp::Sub, Local(2), Local(3), [true; 2]),
        bin(BinOp::Max, Local(4), Outer(0), [true; 2]),
        Step::Relu(FloatFormat::FP16, Local(5)),
        Step::Pass(FloatFormat::FP16, Outer(2)),
        act(2, Local(6)),
        bin(BinOp::Mul, Local(8), Local(7), [true; 2]),
    ];
    let kept = [
        true, false, true, false, true, true, false, true, true, true,
    ];
    let scanned = [
        false, true, false, true, false, false, true, false, true, true,
    ];
    let outer: [&[f64]; 4] = [&x, &h, &raw, &bias];
    let scan = |k: usize, r0: usize, rows: &[f64], seen: &mut Vec<(usize, usize, u64)>| {
        let bits = rows
            .iter()
            .fold(0u64, |acc, v| acc.rotate_left(5) ^ nan_bits(*v));
        seen.push((k, r0, bits));
    };
    let f16c = F16c::for_steps(&steps).expect("fp16 steps on a CPU with F16C");
    let pass = RegionPass {
        steps: &steps,
        kept: &kept,
        scanned: &scanned,
        outer: &outer,
        batch,
        len,
    };
    let (v32, s32) = pass.run_on(&f16c, scan);
    let (v64, s64) = pass.run_on(&F64Lanes, scan);
    assert_eq!(v32.len(), 7);
    for (k, (a, b)) in v32.iter().zip(&v64).enumerate() {
        let (a, b): (Vec<u64>, Vec<u64>) = (
            a.iter().map(|v| nan_bits(*v)).collect(),
            b.iter().map(|v| nan_bits(*v)).collect(),
        );
        assert!(a == b, "kept value {k} differs");
    }
    // The data reach the specials: NaNs in the first add, 65520 rounded to infinity.
    assert!(v64[0].iter().any(|v| v.is_nan()) && v64[4].contains(&f64::INFINITY));
    assert_eq!(s32, s64);
    // 21-lane rows: 48 rows per task, 7 tasks; the rows of each of the 5 scanned steps
    // hold a NaN in every task (the data's NaNs reach them all).
    assert_eq!(s64.iter().map(Vec::len).sum::<usize>(), 7 * 5);
    let mut other = steps;
    other.push(Step::Relu(FloatFormat::BF16, Local(0)));
    assert!(F16c::for_steps(&other).is_none());
    // Nor one whose activation's table is bf16's.
    let bf16 = ActTable::load(Activation::Sigmoid, &FloatFormat::BF16, None).expect("built-in");
    assert!(F16c::for_steps(&[act(0, Outer(0))]).is_some());
    let sigm = Step::Activation {
        table: bf16,
        x: Outer(0),
        rounded: true,
    };
    assert!(F16c::for_steps(&[sigm]).is_none());
}

#[test]
fn regions_by_hand() {
    let node = |op: Op| Node {
        op,
        ty: Ty::Vector { tiles: 2 },
    };
    let unary = |op: UnOp, src: u32| Op::Unary {
        op,
        src: ValueId(src),
        format: FloatFormat::FP16,
        table: None,
    };
    let nodes = vec![
        // 0: input, 1: a constant (bias).
        node(input()),
        node(Op::Zero { shape: vec![4] }),
        // 2..5: add, sigm, add: one region; 3 is read only inside it.
        node(add(0, 1)),
        node(unary(UnOp::Table(Activation::Sigmoid), 2)),
        node(add(3, 2)),
        // 5: softmax ends it; 6: a lone add is no region; 7: not fusable.
        node(unary(UnOp::Softmax, 4)),
        node(add(5, 1)),
        node(quantize(6)),
    ];
    let graph = hand_graph(nodes);
    let constant = NodeMap::from(vec![false, true, false, false, false, false, false, false]);
    let schedule = Schedule::new(&graph, &constant, false);
    let order: Vec<usize> = schedule.order.iter().map(|v| v.index()).collect();
    assert_eq!(order, (0..graph.nodes.len()).collect::<Vec<_>>());
    let none = HashSet::new();
    assert_eq!(
        regions(&schedule, &none),
        vec![Region {
            start: 2,
            end: 5,
            // 2 is read inside only (by 3 and 4); 3 likewise; 4 by the softmax.
            kept: vec![false, false, true],
        }]
    );
    // A traced value is kept.
    let traced: HashSet<ValueId> = [ValueId(3)].into();
    assert_eq!(regions(&schedule, &traced)[0].kept, vec![false, true, true]);
}

/// The `mfu` candle op by hand: an fp16 add of a batch-2 and a broadcast batch-1 operand
/// (`fmt(fmt(a) + fmt(b))`: 2049 rounds to 2048 on entry, and 2048 + 1 ties back to 2048),
/// relu of one operand (NaN stays NaN, -1 becomes +0), and a product of a value with itself.
#[test]
fn the_mfu_candle_op_by_hand() {
    use candle_core::{Device, Tensor};
    let t = |v: Vec<f64>, b: usize| Tensor::from_vec(v, (b, 2), &Device::Cpu).expect("tensor");
    let bits = |t: Tensor| -> Vec<u64> {
        let v: Vec<f64> = t.flatten_all().and_then(|t| t.to_vec1()).expect("values");
        v.into_iter().map(f64::to_bits).collect()
    };
    let binary = |op, a, b| MfuOp {
        step: Step::Binary {
            op,
            format: FloatFormat::FP16,
            a,
            b,
            rounded: [false, false],
        },
        len: 2,
    };
    let a = t(vec![1.0, 2049.0, 0.5, -0.0], 2);
    let b = t(vec![2f64.powi(-10), 1.0], 1);
    let sum = a
        .apply_op2_no_bwd(&b, &binary(BinOp::Add, Src::Outer(0), Src::Outer(1)))
        .expect("add");
    assert_eq!(sum.dims(), [2, 2]);
    let want = [1.0 + 2f64.powi(-10), 2048.0, 0.5 + 2f64.powi(-10), 1.0];
    assert_eq!(bits(sum), want.map(f64::to_bits));

    let relu = MfuOp {
        step: Step::Relu(FloatFormat::FP16, Src::Outer(0)),
        len: 2,
    };
    let y = t(vec![f64::NAN, -1.0], 1)
        .apply_op1_no_bwd(&relu)
        .expect("relu");
    let y: Vec<f64> = y.flatten_all().and_then(|t| t.to_vec1()).expect("values");
    assert!(y[0].is_nan());
    assert_eq!(y[1].to_bits(), 0.0f64.to_bits());

    let square = binary(BinOp::Mul, Src::Outer(0), Src::Outer(0));
    let y = t(vec![3.0, -0.25], 1)
        .apply_op1_no_bwd(&square)
        .expect("mul");
    assert_eq!(bits(y), [9.0f64, 0.0625].map(f64::to_bits));

    // Operands of two different batches greater than one are an error, not a panic.
    let c = t(vec![1.0; 6], 3);
    assert!(
        a.apply_op2_no_bwd(&c, &binary(BinOp::Add, Src::Outer(0), Src::Outer(1)))
            .is_err()
    );
}

/// The GPU's kernel source has each op's code and case from the enums (`device::source`):
/// checked here on any machine, compiled by NVRTC only where a GPU runs it.
#[test]
fn the_gpu_source_has_every_op_from_its_enum() {
    let s = crate::device::source();
    for op in BinOp::ALL {
        let name = op.name().to_uppercase();
        assert!(
            s.contains(&format!("#define OP_{name} {}\n", op.code())),
            "{op:?}"
        );
        assert!(
            s.contains(&format!("    case OP_{name}: return ")),
            "{op:?}"
        );
        assert_eq!(BinOp::from_code(op.code()), Some(op));
    }
    for (name, op) in [("UN_RELU", UnOp::Relu), ("UN_PASS", UnOp::Pass)] {
        assert!(s.contains(&format!("#define {name} {}\n", op.code())));
    }
    let table = UnOp::Table(Activation::Sigmoid).code();
    assert!(s.contains(&format!("#define UN_TABLE {table}\n")));
    // The helpers come before the ops' cases, which come before the kernels that use them.
    let at = |x: &str| s.find(x).unwrap_or_else(|| panic!("no {x}"));
    assert!(at("double fr_round(") < at("double binary_op("));
    assert!(at("double operand(") < at("double binary_op("));
    assert!(at("double binary_op(") < at("void mfu_binary("));
    assert!(
        !s.contains("(op ==") && !s.contains(" op =="),
        "a hand-written op code"
    );
}
