//! Training through the concordant graph (`nnp_exec::train`, docs/training.md): the forward
//! values are the graph's bits, the gradients match finite differences of the float model, the
//! straight-through estimators stop at saturation, schedules and `dynfixed` do what the docs
//! say, and the digits sample meets its accuracy targets with weights the emulator runs
//! concordantly.

mod sample_cases;

use candle_core::{DType, Device, Tensor};
use nnp_emulator::{EmuOptions, emulate};
use nnp_exec::train::{self, Dataset, Precision, Schedule, TrainOptions};
use nnp_exec::{ExecOptions, Session};
use nnp_grammar::{Program, SourceFile, Target};
use nnp_host::{HostData, Tensor as HostTensor};
use sample_cases::{samples_dir, target_arg};
use std::collections::BTreeMap;
use std::sync::Arc;

fn check(name: &str, text: &str, target: Option<&str>) -> Program {
    let target = target.map(|t| Target::load(&target_arg(t)).expect("target"));
    let src = Arc::new(SourceFile::new(name, text));
    match nnp_grammar::check(src, target) {
        Ok(out) => out.program,
        Err(d) => panic!("{name}: {d:?}"),
    }
}

/// A sample, or `PASS_PROGRAM` for the name `pass`.
fn sample(name: &str, target: &str) -> Program {
    if name == "pass" {
        return check("pass.nnp", PASS_PROGRAM, Some(target));
    }
    let path = samples_dir().join(name);
    let text = std::fs::read_to_string(&path).expect("sample");
    check(&path.display().to_string(), &text, Some(target))
}

/// `v_pass` between two products (no sample uses it).
const PASS_PROGRAM: &str = "matrix A : [16, 16] at mrf[0]\nmatrix B : [16, 16] at mrf[1]\n\
    input x : [16]\noutput y : [16]\n\
    v_rd netq\nv_wr ivrf[0]\nend_chain\n\
    v_rd ivrf[0]\nmv_mul mrf[A]\nv_pass\nv_wr ivrf[1]\nend_chain\n\
    v_rd ivrf[1]\nmv_mul mrf[B]\nv_wr netq\nend_chain\n";

fn f64_tensors(ts: &BTreeMap<String, HostTensor>) -> BTreeMap<String, Tensor> {
    ts.iter()
        .map(|(n, t)| {
            let v: Vec<f64> = t.data.iter().map(|&x| f64::from(x)).collect();
            (
                n.clone(),
                Tensor::from_vec(v, t.shape.clone(), &Device::Cpu).expect("tensor"),
            )
        })
        .collect()
}

/// `sum(c * y)` over every output with fixed pseudo-random coefficients `c`: a loss whose
/// gradient reaches every output lane.
fn weighted_sum(outputs: &BTreeMap<String, Tensor>) -> candle_core::Result<Tensor> {
    let mut total = Tensor::zeros((), DType::F64, &Device::Cpu)?;
    for y in outputs.values() {
        let n = y.elem_count();
        let c: Vec<f64> = (0..n)
            .map(|i| ((i * 7919 % 23) as f64 - 11.0) / 11.0)
            .collect();
        let c = Tensor::from_vec(c, y.shape(), &Device::Cpu)?;
        total = (total + y.mul(&c)?.sum_all()?)?;
    }
    Ok(total)
}

/// The programs the gradient checks cover, with every op kind between them: products,
/// add/sub/mul/max, relu, sigmoid, tanh, exp, softmax, pass, padding, concatenation.
const GRADIENT_CASES: &[(&str, &str)] = &[
    ("mlp2_relu.nnp", "fp32"),
    ("mixed_precision.nnp", "fp32"),
    ("lstm.nnp", "fp32"),
    ("gru.nnp", "fp32"),
    ("softmax_classifier.nnp", "fp32"),
    ("conv3x3.nnp", "fp32"),
    ("bn_clip_n16.nnp", "n16"),
    ("pass", "n16"),
];

#[test]
fn twin_forward_is_the_graph_bit_for_bit() {
    for &(name, target) in GRADIENT_CASES {
        let program = sample(name, target);
        let graph = train::compile(&program).expect("compiles");
        let data = HostData::random(&program, 3, 7);
        let opts = ExecOptions {
            keep_values: true,
            ..ExecOptions::default()
        };
        let run = Session::new(&graph, &opts)
            .expect("session")
            .run(&data)
            .expect("runs");
        let g = train::gradients(
            &graph,
            &f64_tensors(&data.weights),
            &f64_tensors(&data.inputs),
            Some(&run.written),
            weighted_sum,
        )
        .expect("gradients");
        for (out, expected) in &run.outputs {
            let got: Vec<f32> = g.outputs[out]
                .flatten_all()
                .and_then(|t| t.to_dtype(DType::F32))
                .and_then(|t| t.to_vec1())
                .expect("values");
            let same = got
                .iter()
                .zip(&expected.data)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{name} on {target}: output `{out}` differs from the run"
            );
        }
    }
}

/// The float model follows the graph's structure: on the fp32 target, for the programs
/// without `quant` directives (fp32 products, exact
/// accumulation) its outputs are the run's within the MFU's roundings and tables, far below
/// what a misplaced tile or lane would change.
#[test]
fn float_model_follows_the_graph_on_the_fp32_target() {
    for &(name, target) in GRADIENT_CASES.iter().filter(|(_, t)| *t == "fp32") {
        let program = sample(name, target);
        if program.source.text.contains("\nquant ") {
            continue; // its own low-precision `quant` directives hold on every target
        }
        let graph = train::compile(&program).expect("compiles");
        let data = HostData::random(&program, 3, 5);
        let run = Session::new(&graph, &ExecOptions::default())
            .expect("session")
            .run(&data)
            .expect("runs");
        let float = train::float_outputs(
            &graph,
            &f64_tensors(&data.weights),
            &f64_tensors(&data.inputs),
        )
        .expect("float model");
        for (out, expected) in &run.outputs {
            let got: Vec<f64> = float[out]
                .flatten_all()
                .and_then(|t| t.to_vec1())
                .expect("values");
            let scale = expected
                .data
                .iter()
                .fold(1e-6f64, |m, v| m.max(f64::from(v.abs())));
            let worst = got
                .iter()
                .zip(&expected.data)
                .map(|(a, b)| (a - f64::from(*b)).abs())
                .fold(0.0, f64::max);
            assert!(
                worst <= 1e-2 * scale,
                "{name}: `{out}` off by {worst} (scale {scale})"
            );
        }
    }
}

/// The float model's gradient against central finite differences, a few elements of every
/// weight (f64 twin: differences of 1e-6 relative agree to about 1e-7).
#[test]
fn gradients_match_finite_differences_of_the_float_model() {
    for &(name, target) in GRADIENT_CASES {
        let program = sample(name, target);
        let graph = train::compile(&program).expect("compiles");
        let data = HostData::random(&program, 2, 11);
        let weights = f64_tensors(&data.weights);
        let inputs = f64_tensors(&data.inputs);
        let g = train::gradients(&graph, &weights, &inputs, None, weighted_sum).expect("grads");
        let loss_at = |ws: &BTreeMap<String, Tensor>| -> f64 {
            let out = train::float_outputs(&graph, ws, &inputs).expect("outputs");
            weighted_sum(&out)
                .and_then(|t| t.to_scalar::<f64>())
                .expect("loss")
        };
        let mut checked = 0;
        for (w, t) in &weights {
            let base: Vec<f64> = t.flatten_all().and_then(|t| t.to_vec1()).expect("w");
            let grad: Vec<f64> = g.weights[w]
                .flatten_all()
                .and_then(|t| t.to_vec1())
                .expect("g");
            let scale = grad.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
            for k in (0..base.len()).step_by((base.len() / 5).max(1)) {
                let h = 1e-6 * base[k].abs().max(1.0);
                let at = |d: f64| {
                    let mut v = base.clone();
                    v[k] += d;
                    let mut ws = weights.clone();
                    ws.insert(
                        w.clone(),
                        Tensor::from_vec(v, t.shape(), &Device::Cpu).expect("t"),
                    );
                    loss_at(&ws)
                };
                let numeric = (at(h) - at(-h)) / (2.0 * h);
                assert!(
                    (numeric - grad[k]).abs() <= 1e-5 * scale,
                    "{name}: d loss / d {w}[{k}]: autograd {} vs finite differences {numeric}",
                    grad[k]
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "{name}: no weight element checked");
    }
}

/// `fixed(int = 2, frac = 4)` weights saturate outside [-2, 2 - 1/16]: there the gradient is
/// zero, elsewhere it is the product's `d(sum y) / d W[i][j] = x[j]`.
#[test]
fn straight_through_gradient_stops_where_the_format_saturates() {
    let program = check(
        "sat.nnp",
        "matrix W : [2, 4] at mrf[0] quant fixed(int = 2, frac = 4)\n\
         input x : [4]\noutput y : [2]\n\
         v_rd netq\nv_wr ivrf[0]\nend_chain\n\
         v_rd ivrf[0]\nmv_mul mrf[W]\nv_wr netq\nend_chain\n",
        Some("fp32"),
    );
    let graph = train::compile(&program).expect("compiles");
    let w = [3.0f32, 0.5, -2.5, 1.0, -2.0, 1.9375, 0.25, 2.25];
    let x = [1.0f32, 2.0, 0.5, -1.0];
    let data = HostData {
        batch: 1,
        weights: BTreeMap::from([(
            "W".into(),
            HostTensor::new(vec![2, 4], w.to_vec()).expect("W"),
        )]),
        inputs: BTreeMap::from([(
            "x".into(),
            HostTensor::new(vec![1, 4], x.to_vec()).expect("x"),
        )]),
    };
    let opts = ExecOptions {
        keep_values: true,
        ..ExecOptions::default()
    };
    let run = Session::new(&graph, &opts)
        .expect("session")
        .run(&data)
        .expect("runs");
    let sum = |o: &BTreeMap<String, Tensor>| o["y"].sum_all();
    let g = train::gradients(
        &graph,
        &f64_tensors(&data.weights),
        &f64_tensors(&data.inputs),
        Some(&run.written),
        sum,
    )
    .expect("gradients");
    let grad: Vec<f64> = g.weights["W"]
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .expect("g");
    // Saturated: 3.0, -2.5, 2.25 (above 1.9375 or below -2); -2.0 and 1.9375 are in range.
    let expected = [0.0, 2.0, 0.0, -1.0, 1.0, 2.0, 0.5, 0.0];
    assert_eq!(grad, expected);
    // The forward value is the saturated one: y[0] = 1.9375 * 1 + 0.5 * 2 - 2 * 0.5 - 1 * 1.
    let y: Vec<f64> = g.outputs["y"]
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .expect("y");
    assert_eq!(y[0], 1.9375 + 1.0 - 1.0 - 1.0);
}

/// `y = max(relu(W x), b)` with `W = I`, `x = [1, 0, -1, 2]`, `b = [1, 0, 5, -3]` and the loss
/// `sum(y)`, by hand: `relu(W x) = [1, 0, 0, 2]`; `max` ties at lanes 0 and 1 (half to each
/// side), `b` is larger at lane 2 and `relu` at lane 3, so `d/d relu = [0.5, 0.5, 0, 1]` and
/// `d/db = [0.5, 0.5, 1, 0]`; `relu` passes where its input is positive (`[1, 0, 0, 1]`),
/// so `d/d(W x) = [0.5, 0, 0, 1] = dx` and `dW = d(W x) x^T`.
#[test]
fn relu_and_max_route_the_gradient_as_the_docs_say() {
    let program = check(
        "relu_max.nnp",
        "matrix W : [4, 4] at mrf[0]\nvector b : [4] at asvrf0[0]\n\
         input x : [4]\noutput y : [4]\n\
         v_rd netq\nv_wr ivrf[0]\nend_chain\n\
         v_rd ivrf[0]\nmv_mul mrf[W]\nv_relu\nvv_max asvrf0[b]\nv_wr netq\nend_chain\n",
        Some("fp32"),
    );
    let graph = train::compile(&program).expect("compiles");
    let identity: Vec<f32> = (0..16).map(|i| f32::from(u8::from(i % 5 == 0))).collect();
    let data = HostData {
        batch: 1,
        weights: BTreeMap::from([
            (
                "W".into(),
                HostTensor::new(vec![4, 4], identity).expect("W"),
            ),
            (
                "b".into(),
                HostTensor::new(vec![4], vec![1.0, 0.0, 5.0, -3.0]).expect("b"),
            ),
        ]),
        inputs: BTreeMap::from([(
            "x".into(),
            HostTensor::new(vec![1, 4], vec![1.0, 0.0, -1.0, 2.0]).expect("x"),
        )]),
    };
    let (outputs, recorded) = train::record(&graph, data).expect("records");
    assert_eq!(outputs["y"].data, [1.0, 0.0, 5.0, 2.0]);
    let ones = Tensor::ones((1, 4), DType::F64, &Device::Cpu).expect("ones");
    let g = train::backward(
        &graph,
        &recorded,
        &BTreeMap::from([("y".to_string(), ones)]),
    )
    .expect("backward");
    let values = |t: &Tensor| -> Vec<f64> { t.flatten_all().and_then(|t| t.to_vec1()).expect("v") };
    assert_eq!(values(&g.inputs["x"]), [0.5, 0.0, 0.0, 1.0]);
    assert_eq!(values(&g.weights["b"]), [0.5, 0.5, 1.0, 0.0]);
    let mut dw = vec![0.0; 16];
    dw[..4].copy_from_slice(&[0.5, 0.0, -0.5, 1.0]);
    dw[12..].copy_from_slice(&[1.0, 0.0, -1.0, 2.0]);
    assert_eq!(values(&g.weights["W"]), dw);
    assert_eq!(g.loss, 8.0);
}

/// `dynfixed(bits = 8)`'s point position under the `max` policy, by hand: the tile
/// [3.25, -0.5, 0.125, 0, ...] has its largest MSB at 2^1 (3.25) and its smallest non-zero
/// LSB at 2^-3 (0.125), so f = min(8 - 2 - 1, 3) = 3 fraction bits; the tile [40, 1, 0, ...]
/// has MSB 5 and LSB 0: f = min(8 - 2 - 5, 0) = 0.
#[test]
fn dynfixed_point_positions_follow_the_current_values() {
    let program = check(
        "dyn.nnp",
        "matrix W : [16, 16] at mrf[0]\ninput x : [16]\noutput y : [16]\n\
         quant mvm.vector = dynfixed(bits = 8)\n\
         v_rd netq\nv_wr ivrf[0]\nend_chain\n\
         v_rd ivrf[0]\nmv_mul mrf[W]\nv_wr netq\nend_chain\n",
        Some("n16"),
    );
    let mut x = vec![0f32; 32];
    x[..3].copy_from_slice(&[3.25, -0.5, 0.125]);
    x[16..18].copy_from_slice(&[40.0, 1.0]);
    let split = |x: Vec<f32>| train::Split {
        inputs: BTreeMap::from([("x".into(), HostTensor::new(vec![2, 16], x).expect("x"))]),
        targets: BTreeMap::from([("y".into(), HostTensor::zeros(vec![2, 16]))]),
    };
    let data = Dataset {
        train: split(x),
        test: None,
    };
    let weights = BTreeMap::from([(
        "W".to_string(),
        HostTensor::new(
            vec![16, 16],
            (0..256).map(|i| (i % 5) as f32 * 0.25).collect(),
        )
        .expect("W"),
    )]);
    let opts = TrainOptions {
        epochs: 1,
        batch: 2,
        ..TrainOptions::default()
    };
    let report = train::train(&program, &weights, &data, &opts, &mut |_| {}).expect("trains");
    let points = &report.epochs[0].points.by_node;
    assert_eq!(points.len(), 1, "one dynfixed quantizer: {points:?}");
    let hist = points.values().next().expect("one node");
    assert_eq!(hist, &BTreeMap::from([(0, 1), (3, 1)]));
}

#[test]
fn schedules_parse_and_set_the_layer_formats() {
    let s = Schedule::parse_spec("a4w4:2, a6w6:1,firmware:1").expect("parses");
    assert_eq!(s.epochs(), 4);
    let labels: Vec<String> = s.phases.iter().map(|p| p.label()).collect();
    assert_eq!(labels, ["a4w4", "a6w6", "firmware"]);
    let toml = "[[phase]]\nepochs = 1\nprecision = \"a4w4\"\nlayers = [\"a8w8\"]\n\
                [[phase]]\nepochs = 1\nvector = \"bfp(mant = 5)\"\n";
    let t = Schedule::parse_toml(toml).expect("parses");
    assert_eq!(
        t.phases[0].layers,
        [Some(Precision::parse("a8w8").expect("p"))]
    );
    for bad in ["a4w4", "q4:1", "a1w4:1", "a4w4:0", "a4a4:1"] {
        assert!(Schedule::parse_spec(bad).is_err(), "`{bad}` accepted");
    }
    // Layer 0 takes its own precision, layer 1 the phase's: the products' formats say so.
    let program = sample("train/digits_mlp.nnp", "bw-default");
    let phased = train::schedule::apply(&program, &t.phases[0]).expect("applies");
    let graph = train::compile(&phased).expect("compiles");
    let mants: Vec<(String, String)> = graph
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            nnp_lowering::swgraph::Op::TiledMatVec {
                vector_format,
                matrix_format,
                ..
            } => Some((vector_format.to_string(), matrix_format.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(mants.len(), 2);
    assert!(
        mants[0].0.contains("mant = 8") && mants[0].1.contains("mant = 8"),
        "{mants:?}"
    );
    assert!(
        mants[1].0.contains("mant = 4") && mants[1].1.contains("mant = 4"),
        "{mants:?}"
    );
}

fn digits() -> (Program, BTreeMap<String, HostTensor>, Dataset) {
    let dir = samples_dir().join("train");
    let program = sample("train/digits_mlp.nnp", "bw-default");
    let weights =
        nnp_host::io::read_tensors(&dir.join("digits_mlp.weights.safetensors")).expect("weights");
    let tensors =
        nnp_host::io::read_tensors(&dir.join("digits_mlp.data.safetensors")).expect("data");
    let data = Dataset::from_tensors(&program, tensors).expect("dataset");
    (program, weights, data)
}

#[test]
fn a_schedule_run_trains_each_phase_at_its_precision() {
    let (program, weights, data) = digits();
    let opts = TrainOptions {
        schedule: Some(Schedule::parse_spec("a4w4:1,a6w6:1,firmware:1").expect("spec")),
        ..TrainOptions::default()
    };
    let report = train::train(&program, &weights, &data, &opts, &mut |_| {}).expect("trains");
    let labels: Vec<&str> = report.epochs.iter().map(|m| m.precision.as_str()).collect();
    assert_eq!(labels, ["a4w4", "a6w6", "firmware"]);
    // Each epoch's test score is under its phase's numerics; the final one at the firmware's.
    let last = report.epochs.last().expect("epochs").test;
    assert_eq!(last, report.after);
}

#[test]
fn the_digits_sample_recovers_its_accuracy_and_runs_concordantly() {
    let (program, weights, data) = digits();
    let report = train::train(
        &program,
        &weights,
        &data,
        &TrainOptions::default(),
        &mut |_| {},
    )
    .expect("trains");
    let acc = |s: train::Score| s.accuracy.expect("classification");
    let (float, before, after) = (acc(report.float), acc(report.before), acc(report.after));
    assert!(after >= before + 0.03, "after {after} vs before {before}");
    assert!(after >= float - 0.02, "after {after} vs float {float}");
    // The tuned weights on the test inputs: the emulator and the graph agree bit for bit.
    let test = data.test.as_ref().expect("test split");
    let host = HostData {
        batch: test.items(),
        weights: report.weights.clone(),
        inputs: test.inputs.clone(),
    };
    let hw = emulate(&program, &host, &EmuOptions::default()).expect("emulates");
    let graph = train::compile(&program).expect("compiles");
    let sw = Session::new(&graph, &ExecOptions::default())
        .expect("session")
        .run(&host)
        .expect("runs");
    let (a, b) = (&hw.outputs["y"].data, &sw.outputs["y"].data);
    assert_eq!(a.len(), b.len());
    assert!(
        a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()),
        "discordant"
    );
}

#[test]
fn bad_training_data_is_refused_with_the_fix() {
    let (program, _, _) = digits();
    let e = Dataset::from_tensors(&program, BTreeMap::new()).expect_err("no tensors");
    assert!(e.to_string().contains("no tensor `x_train`"), "{e}");
    let mut ts = BTreeMap::new();
    ts.insert("x_train".to_string(), HostTensor::zeros(vec![4, 63]));
    ts.insert("y_train".to_string(), HostTensor::zeros(vec![4]));
    let e = Dataset::from_tensors(&program, ts).expect_err("bad shape");
    assert!(e.to_string().contains("[4, 64]"), "{e}");
    let mut ts = BTreeMap::new();
    ts.insert("x".to_string(), HostTensor::zeros(vec![2, 64]));
    ts.insert(
        "y".to_string(),
        HostTensor::new(vec![2], vec![3.0, 12.0]).expect("y"),
    );
    let data = Dataset::from_tensors(&program, ts).expect("shapes fit");
    let w = nnp_host::HostData::random(&program, 1, 0).weights;
    let e = train::train(&program, &w, &data, &TrainOptions::default(), &mut |_| {})
        .expect_err("class 12");
    assert!(e.to_string().contains("not a class index in 0..10"), "{e}");
}

/// A recorded pass keeps only the values the reverse pass reads, and runs the rest as a plain
/// run does (fused regions, vectors straight to integers, weight stacks in one pass): its
/// outputs are the run's bits, and its gradients by weight and by input are those of a run that
/// kept every value, bit for bit, on every op kind, on the digits sample's BFP numerics, on a
/// saturating `fixed` matrix and on a `dynfixed` vector.
#[test]
fn a_recorded_pass_keeps_what_the_reverse_pass_reads() {
    let mut programs: Vec<(String, Program)> = GRADIENT_CASES
        .iter()
        .map(|&(name, target)| (format!("{name} on {target}"), sample(name, target)))
        .collect();
    programs.push(("digits".into(), digits().0));
    programs.push((
        "fixed".into(),
        check(
            "sat.nnp",
            "matrix W : [2, 4] at mrf[0] quant fixed(int = 2, frac = 4)\n\
             input x : [4]\noutput y : [2]\n\
             v_rd netq\nv_wr ivrf[0]\nend_chain\n\
             v_rd ivrf[0]\nmv_mul mrf[W]\nv_sigm\nv_wr netq\nend_chain\n",
            Some("fp32"),
        ),
    ));
    programs.push((
        "dynfixed".into(),
        check(
            "dyn.nnp",
            "matrix W : [16, 16] at mrf[0]\ninput x : [16]\noutput y : [16]\n\
             quant mvm.vector = dynfixed(bits = 8)\n\
             v_rd netq\nv_wr ivrf[0]\nend_chain\n\
             v_rd ivrf[0]\nmv_mul mrf[W]\nv_relu\nv_wr netq\nend_chain\n",
            Some("n16"),
        ),
    ));
    let bits = |t: &Tensor| -> Vec<u64> {
        let v: Vec<f64> = t
            .flatten_all()
            .and_then(|t| t.to_dtype(DType::F64))
            .and_then(|t| t.to_vec1())
            .expect("values");
        v.iter().map(|x| x.to_bits()).collect()
    };
    for (name, program) in &programs {
        let graph = train::compile(program).expect("compiles");
        let data = HostData::random(program, 5, 11);
        let all = Session::new(
            &graph,
            &ExecOptions {
                keep_values: true,
                ..ExecOptions::default()
            },
        )
        .expect("session")
        .run(&data)
        .expect("runs");
        let (weights, inputs) = (f64_tensors(&data.weights), f64_tensors(&data.inputs));
        let (outputs, recorded) = train::record(&graph, data).expect("records");
        assert!(
            recorded.written().len() < all.written.len(),
            "{name}: the record kept {} of {} values",
            recorded.written().len(),
            all.written.len()
        );
        for (out, y) in &all.outputs {
            let got = &outputs[out].data;
            let same = got.len() == y.data.len()
                && got
                    .iter()
                    .zip(&y.data)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{name}: output `{out}` differs from the run");
        }
        let want = train::gradients(&graph, &weights, &inputs, Some(&all.written), weighted_sum)
            .expect("gradients");
        let output_grads: BTreeMap<String, Tensor> = want
            .outputs
            .iter()
            .map(|(n, y)| {
                let c: Vec<f64> = (0..y.elem_count())
                    .map(|i| ((i * 7919 % 23) as f64 - 11.0) / 11.0)
                    .collect();
                (
                    n.clone(),
                    Tensor::from_vec(c, y.shape(), &Device::Cpu).expect("c"),
                )
            })
            .collect();
        let got = train::backward(&graph, &recorded, &output_grads).expect("backward");
        for (n, g) in &want.weights {
            assert_eq!(bits(&got.weights[n]), bits(g), "{name}: d/d{n}");
        }
        for (n, g) in &want.inputs {
            assert_eq!(bits(&got.inputs[n]), bits(g), "{name}: d/d{n}");
        }
        assert_eq!(got.points, want.points, "{name}: dynfixed points");
    }
}
