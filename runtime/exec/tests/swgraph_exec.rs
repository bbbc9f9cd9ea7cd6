//! Software graph: lowering of hand-built programs (N = 4) and execution, with expected values
//! derived by hand in the comments; the JSON round trip; the candle fast path of the tiled
//! matmul against the element-wise exact path on data with wide exponent spreads.

use nnp_exec::{ExecOptions, matmul};
use nnp_grammar::{
    Accumulation, Addr, Chain, ChainBody, Decl, DeclKind, Init, Mem, MfuOp, MvMul, NetqSlot,
    OpKind, Place, Program, QuantConfig, Read, SourceFile, Span, Target, VectorChain, Write,
};
use nnp_host::{HostData, Tensor};
use nnp_lowering::swgraph::{
    self, BlockAxis, FiniteCheck, GraphError, Node, Op, OutputInfo, Roots, SWGRAPH_VERSION,
    SwGraph, TileLayout, Ty, ValueId,
};
use nnp_numerics::{FloatFormat, Format};
use std::collections::BTreeMap;
use std::sync::Arc;

const N: usize = 4;

fn target(acc: Accumulation) -> Target {
    let mut t = Target::bw_default();
    t.native = N;
    t.numerics.accumulation = acc;
    t
}

fn quant(t: &Target) -> QuantConfig {
    let n = &t.numerics;
    QuantConfig {
        storage: n.storage,
        mvm_vector: n.mvm_vector,
        mvm_matrix: n.mvm_matrix,
        mvm_output: n.mvm_output,
        mfu_input: n.mfu_input,
    }
}

fn decl(name: &str, kind: DeclKind, shape: &[usize], place: Option<(Mem, u32)>) -> Decl {
    Decl {
        name: name.into(),
        kind,
        shape: shape.to_vec(),
        place: place.map(|(mem, addr)| Place { mem, addr }),
        init: Init::Load,
        pad: 0.0,
        format: None,
        span: Span::default(),
    }
}

fn read(src: Mem, base: u32, tiles: u32) -> Read {
    Read {
        src,
        addr: Addr { base, inc: 0 },
        window: None,
        tiles,
        span: Span::default(),
    }
}

fn write(dst: Mem, base: u32) -> Write {
    Write {
        dst,
        addr: Addr { base, inc: 0 },
        span: Span::default(),
    }
}

fn chain(index: usize, rows: u32, cols: u32, body: VectorChain) -> Chain {
    Chain {
        index,
        iterations: 1,
        rows,
        cols,
        body: ChainBody::Vector(body),
        span: Span::default(),
    }
}

fn program(
    t: Target,
    decls: Vec<Decl>,
    chains: Vec<Chain>,
    pops: Vec<NetqSlot>,
    pushes: Vec<NetqSlot>,
) -> Program {
    Program {
        source: Arc::new(SourceFile::new("hand.nnp", "")),
        target: t,
        decls,
        chains,
        pops,
        pushes,
    }
}

fn slot(chain: usize, decl: usize) -> NetqSlot {
    NetqSlot {
        chain,
        iteration: 0,
        decl,
        row: 0,
    }
}

/// `y = W x` with W [4, 8] at mrf[0], x [1, 8] from netq, y [1, 4] to netq:
/// chain 0 `v_rd netq; v_wr ivrf[0]` (2 tiles), chain 1 `v_rd ivrf[0]; mv_mul mrf[0]; v_wr netq`.
fn matvec_program(acc: Accumulation) -> Program {
    let t = target(acc);
    let q = quant(&t);
    let c0 = VectorChain {
        read: read(Mem::Netq, 0, 2),
        mv_mul: None,
        ops: vec![],
        writes: vec![write(Mem::Ivrf, 0)],
        width: 2,
        quant: q.clone(),
    };
    let c1 = VectorChain {
        read: read(Mem::Ivrf, 0, 2),
        mv_mul: Some(MvMul {
            addr: Addr { base: 0, inc: 0 },
            matrix_format: q.mvm_matrix,
            iteration_formats: Vec::new(),
            span: Span::default(),
        }),
        ops: vec![],
        writes: vec![write(Mem::Netq, 0)],
        width: 1,
        quant: q,
    };
    program(
        t,
        vec![
            decl("W", DeclKind::Matrix, &[4, 8], Some((Mem::Mrf, 0))),
            decl("x", DeclKind::Input, &[1, 8], None),
            decl("y", DeclKind::Output, &[1, 4], None),
        ],
        vec![chain(0, 2, 1, c0), chain(1, 1, 2, c1)],
        vec![slot(0, 1)],
        vec![slot(1, 2)],
    )
}

fn data(
    weights: &[(&str, Vec<usize>, Vec<f32>)],
    inputs: &[(&str, Vec<usize>, Vec<f32>)],
    batch: usize,
) -> HostData {
    let map = |v: &[(&str, Vec<usize>, Vec<f32>)]| -> BTreeMap<String, Tensor> {
        v.iter()
            .map(|(n, s, d)| {
                (
                    n.to_string(),
                    Tensor::new(s.clone(), d.clone()).expect("shape"),
                )
            })
            .collect()
    };
    HostData {
        batch,
        weights: map(weights),
        inputs: map(inputs),
    }
}

fn run(p: &Program, d: &HostData) -> Vec<f32> {
    let out = nnp_exec::run_program(p, d, &ExecOptions::default()).expect("runs");
    out.outputs["y"].data.clone()
}

#[test]
fn cross_tile_sum_is_exact_then_rounded_once() {
    // x = [2^15, 2^9, 0, 0 | 2^-21, 0, 0, 0] (fp16 values; BFP(8, 5) fixed points: tile 0 has
    // E = 15, q = [64, 1]; tile 1 has E = -21 clamped to -15, lsb 2^-21, q = 1).
    // W row 0 = [1, 2^-5, 0, 0 | 2^-21, 0, 0, 0]: tile partials 2^15 + 2^4 = 32784 (the fp16
    // tie between 32768 and 32800) and 2^-42. Exact sum above the tie: 32800.
    // Row 1 = [1, 0, 0, 0 | 0...]: 32768. Row 2 = [0... | -1, 0, 0, 0]: -2^-21 (an fp16
    // subnormal, 8 * 2^-24). Row 3 = 0: +0.
    let t = 2f32.powi(-21);
    let x = vec![2f32.powi(15), 2f32.powi(9), 0.0, 0.0, t, 0.0, 0.0, 0.0];
    let mut w = vec![0f32; 32];
    w[0] = 1.0;
    w[1] = 2f32.powi(-5);
    w[4] = t;
    w[8] = 1.0;
    w[2 * 8 + 4] = -1.0;
    let d = data(&[("W", vec![4, 8], w)], &[("x", vec![1, 1, 8], x)], 1);
    let y = run(&matvec_program(Accumulation::Exact), &d);
    assert_eq!(y[..3], [32800.0, 32768.0, -t]);
    assert_eq!(y[3].to_bits(), 0, "an exact zero is +0");
    // fp16-seq: tile 0 partial 32784 rounds to 32768 first; + fp16(2^-42) = +0 -> 32768.
    let y = run(&matvec_program(Accumulation::Fp16Seq), &d);
    assert_eq!(y[0], 32768.0);
    // fp32-seq: 32784 and 2^-42 are f32 values; their f32 sum is 32784 (spacing 2^-8 at 2^15),
    // then fp16: the tie -> 32768.
    let y = run(&matvec_program(Accumulation::Fp32Seq), &d);
    assert_eq!(y[0], 32768.0);
}

#[test]
fn saturation_ties_overflow_and_batch() {
    // Batch item 0: x = [1, 1, 1, 1 | 0...]; W row 0 = [100, 100, 100, 100 | 0...]: BFP(8, 5)
    // of the W row: E = 6, lsb 2^0, q = 100 each; partial 400 exactly: y0 = 400.
    // W row 1 = [1, 0.00390625 (2^-8), 0, 0 | ...]: E = 0, lsb 2^-6: 2^-8 -> q = 0.25 -> 0;
    // y1 = 1. W row 2 = [127.5, 0, 0, 0]: E = 6, lsb 1: q = 127.5 -> tie -> 128 -> saturates to
    // 127: y2 = 127. Row 3: [-0.0, 0, 0, 0]: +0.
    // Batch item 1: x = [NaN... ] is not allowed as host data; use x = [65504, 65504, 65504,
    // 65504]: BFP E = 15, q = 65504 / 2^9 = 127.94 -> 128 -> 127: x = 127 * 512 = 65024.
    // y0 = 4 * 100 * 65024 = 26009600 -> inf in fp16. y1 = 65024 (+ 0) = 65024 (an fp16 value).
    // y2 = 127 * 65024 = 8258048 -> inf.
    let mut w = vec![0f32; 32];
    w[..4].copy_from_slice(&[100.0; 4]);
    w[8] = 1.0;
    w[9] = 2f32.powi(-8);
    w[16] = 127.5;
    w[24] = -0.0;
    let mut x = vec![0f32; 16];
    x[..4].copy_from_slice(&[1.0; 4]);
    x[8..12].copy_from_slice(&[65504.0; 4]);
    let d = data(&[("W", vec![4, 8], w)], &[("x", vec![2, 1, 8], x)], 2);
    let y = run(&matvec_program(Accumulation::Exact), &d);
    assert_eq!(y[..3], [400.0, 1.0, 127.0]);
    assert_eq!(y[3].to_bits(), 0);
    assert_eq!(y[4..7], [f32::INFINITY, 65024.0, f32::INFINITY]);
}

#[test]
fn mfu_chain_by_hand() {
    // x [1, 4] = [-1.5, 0.25, 2049, -0] -> fp16 on load: 2049 is a tie -> 2048.
    // b at asvrf0[0] = [1, 1, 1, 1]. Chain: v_rd netq; vv_add asvrf0[0]; v_relu; v_wr netq.
    // x + b = [-0.5, 1.25, 2049 -> tie -> 2048, 1]; relu = [+0, 1.25, 2048, 1].
    let t = target(Accumulation::Exact);
    let q = quant(&t);
    let c = VectorChain {
        read: read(Mem::Netq, 0, 1),
        mv_mul: None,
        ops: vec![
            MfuOp {
                kind: OpKind::Add,
                operand: Some((Mem::AsVrf(0), Addr { base: 0, inc: 0 })),
                mfu: 0,
                span: Span::default(),
            },
            MfuOp {
                kind: OpKind::Relu,
                operand: None,
                mfu: 0,
                span: Span::default(),
            },
        ],
        writes: vec![write(Mem::Netq, 0)],
        width: 1,
        quant: q,
    };
    let p = program(
        t,
        vec![
            decl("b", DeclKind::Vector, &[4], Some((Mem::AsVrf(0), 0))),
            decl("x", DeclKind::Input, &[1, 4], None),
            decl("y", DeclKind::Output, &[1, 4], None),
        ],
        vec![chain(0, 1, 1, c)],
        vec![slot(0, 1)],
        vec![slot(0, 2)],
    );
    let d = data(
        &[("b", vec![4], vec![1.0; 4])],
        &[("x", vec![1, 1, 4], vec![-1.5, 0.25, 2049.0, -0.0])],
        1,
    );
    let y = run(&p, &d);
    assert_eq!(y, [0.0, 1.25, 2048.0, 1.0]);
    assert_eq!(y[0].to_bits(), 0);
}

#[test]
fn json_round_trip_and_validation() {
    let g = swgraph::compile(
        &matvec_program(Accumulation::Fp32Seq),
        Roots::OutputsAndWrites,
    )
    .expect("lowers");
    let text = g.to_json();
    let back = SwGraph::from_json(&text).expect("parses");
    assert_eq!(g, back);
    assert_eq!(back.version, SWGRAPH_VERSION);
    // A future version is refused with a clear error.
    let v2 = text.replacen(
        &format!("\"version\": {SWGRAPH_VERSION}"),
        "\"version\": 99",
        1,
    );
    assert!(matches!(
        SwGraph::from_json(&v2),
        Err(GraphError::Version { found: 99, .. })
    ));
    // A node reading a later node is refused.
    let mut bad = g.clone();
    let last = ValueId(bad.nodes.len() as u32 - 1);
    if let Some(Node {
        op: Op::Round { src, .. },
        ..
    }) = bad
        .nodes
        .iter_mut()
        .find(|n| matches!(n.op, Op::Round { .. }))
    {
        *src = last;
    }
    assert!(SwGraph::from_json(&bad.to_json()).is_err());
    assert!(SwGraph::from_json("{\"version\": 1}").is_err());
    // Outputs the graph's list cannot hold are refused, not dropped or truncated.
    let mut few_rows = g.clone();
    few_rows.outputs[0].rows = 0;
    few_rows.outputs[0].shape = vec![0, few_rows.outputs[0].row_len];
    assert!(SwGraph::from_json(&few_rows.to_json()).is_err());
    let mut bad_shape = g.clone();
    bad_shape.outputs[0].shape.push(3);
    assert!(SwGraph::from_json(&bad_shape.to_json()).is_err());
    let mut renamed = g.clone();
    renamed.outputs[0].name = "other".into();
    assert!(SwGraph::from_json(&renamed.to_json()).is_err());
    // A non-finite check of tiles its value lacks, or of no value, is refused (tile numbers
    // near u32::MAX included: no overflow).
    let product = g
        .nodes
        .iter()
        .position(|n| matches!(n.op, Op::TiledMatVec { .. }))
        .expect("a product");
    let check = |value: u32, first_tile: u32, tiles: u32| {
        let mut checked = g.clone();
        checked.checks.push(FiniteCheck {
            value: ValueId(value),
            first_tile,
            tiles,
            weight: false,
            op: "mv_mul".into(),
            chain: 1,
            iteration: 0,
            line: 9,
            span: Span::new(0, 0),
        });
        SwGraph::from_json(&checked.to_json()).map(|_| ())
    };
    let tiles = g.nodes[product].ty.tiles().expect("a vector");
    assert!(check(product as u32, 0, tiles).is_ok());
    assert!(check(product as u32, 1, tiles).is_err());
    let far = check(product as u32, u32::MAX, u32::MAX).expect_err("past the value");
    assert!(far.to_string().contains("which it lacks"), "{far}");
    assert!(check(g.nodes.len() as u32, 0, 1).is_err());
}

#[test]
fn lowering_keeps_only_real_data_flow() {
    let g = swgraph::compile(
        &matvec_program(Accumulation::Exact),
        Roots::OutputsAndWrites,
    )
    .expect("lowers");
    let count = |name: &str| g.nodes.iter().filter(|n| n.op.name() == name).count();
    // The ivrf round trip is register movement: no node. One storage rounding per loaded
    // tensor (x, W); the chain-0 write rounds an fp16 value to fp16 and is elided; the matvec
    // output is already fp16.
    assert_eq!(count("tiled_mat_vec"), 1);
    assert_eq!(count("quantize"), 2);
    assert_eq!(count("round"), 2);
    assert_eq!(count("concat"), 0);
    assert_eq!(g.writes.len(), 2);
    assert_eq!(g.writes[1].dst, Mem::Netq);
}

/// A graph computing `y = W x` for random data, built by hand: input x [B, cols*N] and weights
/// W [rows*N, cols*N], both quantized with `fmt`.
fn matvec_graph(rows: usize, cols: usize, fmt: Format, acc: Accumulation) -> SwGraph {
    let mut nodes = Vec::new();
    let mut push = |op: Op, ty: Ty| {
        nodes.push(Node { op, ty });
        ValueId(nodes.len() as u32 - 1)
    };
    let x = push(
        Op::Input {
            name: "x".into(),
            shape: vec![cols * N],
        },
        Ty::Logical {
            shape: vec![cols * N],
        },
    );
    let x = push(
        Op::PadToTiles {
            src: x,
            layout: TileLayout::Vector,
            pad: 0.0,
        },
        Ty::Vector { tiles: cols as u32 },
    );
    let x = push(
        Op::Quantize {
            src: x,
            format: fmt,
            axis: BlockAxis::VectorTile,
        },
        Ty::Vector { tiles: cols as u32 },
    );
    let w = push(
        Op::Weight {
            name: "W".into(),
            shape: vec![rows * N, cols * N],
        },
        Ty::Logical {
            shape: vec![rows * N, cols * N],
        },
    );
    let w = push(
        Op::PadToTiles {
            src: w,
            layout: TileLayout::Matrix,
            pad: 0.0,
        },
        Ty::TileStack {
            tiles: (rows * cols) as u32,
        },
    );
    let w = push(
        Op::Quantize {
            src: w,
            format: fmt,
            axis: BlockAxis::TileRow,
        },
        Ty::TileStack {
            tiles: (rows * cols) as u32,
        },
    );
    let y = push(
        Op::TiledMatVec {
            x,
            w,
            rows: rows as u32,
            cols: cols as u32,
            accumulation: acc,
            vector_format: fmt,
            matrix_format: fmt,
            output: FloatFormat::FP16,
        },
        Ty::Vector { tiles: rows as u32 },
    );
    let y = push(
        Op::Unpad {
            src: y,
            len: rows * N,
        },
        Ty::Logical {
            shape: vec![rows * N],
        },
    );
    push(
        Op::Output {
            name: "y".into(),
            row: 0,
            src: y,
        },
        Ty::None,
    );
    SwGraph {
        version: SWGRAPH_VERSION,
        source: "hand".into(),
        program_hash: String::new(),
        target: "hand".into(),
        target_hash: String::new(),
        native: N,
        storage: FloatFormat::FP16,
        output_storage: FloatFormat::FP16,
        nodes,
        outputs: vec![OutputInfo {
            name: "y".into(),
            shape: vec![1, rows * N],
            rows: 1,
            row_len: rows * N,
        }],
        decls: vec![],
        writes: vec![],
        checks: vec![],
        planned: Default::default(),
    }
}

/// Deterministic values with per-tile scales 2^k, k in [-20, 14], ties and zeros.
fn spread(seed: u64, len: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut out = Vec::with_capacity(len);
    for _ in 0..len.div_ceil(N) {
        let k = (next() % 35) as i32 - 20;
        for _ in 0..N {
            let r = next();
            let v = match r % 8 {
                0 => 0.0,
                1 => 1.5, // ties on coarse grids
                _ => ((r >> 8) % 2001) as f64 / 1000.0 - 1.0,
            };
            out.push((v * 2f64.powi(k)) as f32);
        }
    }
    out.truncate(len);
    out
}

#[test]
fn fast_path_equals_element_wise_exact_path() {
    let (rows, cols, b) = (3, 5, 7);
    for (lit, fast) in [
        ("bfp(mant = 8, exp_bits = 5, round = even)", true),
        ("bfp(mant = 4, exp_bits = 8, round = away)", true),
        ("bfp(mant = 6, block = 2, exp_bits = 5)", true),
        ("fp16", false),
    ] {
        let fmt: Format = lit.parse().expect("format");
        assert_eq!(
            matmul::exact_chunk(&fmt, &fmt, N).is_some_and(|k| k >= 2),
            fast,
            "{lit}"
        );
        for acc in [
            Accumulation::Exact,
            Accumulation::Fp32Seq,
            Accumulation::Fp16Seq,
        ] {
            let g = matvec_graph(rows, cols, fmt, acc);
            let x = spread(1, b * cols * N);
            let w = spread(2, rows * N * cols * N);
            let d = data(
                &[("W", vec![rows * N, cols * N], w.clone())],
                &[("x", vec![b, cols * N], x.clone())],
                b,
            );
            let got = nnp_exec::execute(&g, &d, &ExecOptions::default())
                .expect("runs")
                .outputs["y"]
                .data
                .clone();
            // Reference: the numerics quantizer on the host values (no fp16 load rounding in
            // this graph), then every product exact and the accumulation mode by definition.
            let q = |v: &[f32]| -> Vec<f64> {
                let v: Vec<f64> = v.iter().map(|x| f64::from(*x)).collect();
                let mut o = vec![0.0; v.len()];
                for (a, b) in v.chunks(N).zip(o.chunks_mut(N)) {
                    fmt.quantize(a, N, b);
                }
                o
            };
            let (xq, wq) = (q(&x), q(&w));
            let mut tiles = vec![0.0; wq.len()];
            for i in 0..rows {
                for j in 0..cols {
                    for r in 0..N {
                        for c in 0..N {
                            tiles[((i * cols + j) * N + r) * N + c] =
                                wq[(i * N + r) * cols * N + j * N + c];
                        }
                    }
                }
            }
            let spec = matmul::MatVec {
                rows,
                cols,
                n: N,
                accumulation: acc,
                output: FloatFormat::FP16,
            };
            let want = matmul::matvec_exact(&spec, &xq, b, &tiles);
            assert_eq!(got.len(), want.len(), "{lit} {acc:?}: output length");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    (*w as f32).to_bits(),
                    "{lit} {acc:?}: element {i}: graph {g} exact path {w}"
                );
            }
        }
    }
}
