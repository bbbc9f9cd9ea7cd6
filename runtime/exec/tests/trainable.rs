//! The trainable candle layer ([`TrainableModule`], docs/training.md "In other training
//! loops"): its forward values are the concordant graph's bits (the emulator's, the independent
//! oracle), and its backward op gives, bit for bit, the gradient `train::gradients` gives for
//! the same loss, by weight and by input; a candle optimizer changes the weights.

use candle_core::{DType, Device, Module, Tensor, Var};
use nnp_emulator::{EmuOptions, emulate};
use nnp_exec::module::{FirmwareModule, TrainableModule, Weights};
use nnp_exec::train;
use nnp_grammar::Target;
use nnp_host::{HostData, canonical_nan};
use std::collections::BTreeMap;

mod sample_cases;
use sample_cases::{cases, samples_dir, target_arg};

/// The samples with several op kinds between them (products, MFU ops, recurrences).
const SAMPLES: &[&str] = &[
    "mlp2_relu.nnp",
    "lstm.nnp",
    "gru.nnp",
    "softmax_classifier.nnp",
];

fn f32_bits(t: &Tensor) -> Vec<u32> {
    let v: Vec<f32> = t
        .flatten_all()
        .and_then(|t| t.to_dtype(DType::F32))
        .and_then(|t| t.to_vec1())
        .expect("values");
    v.iter().map(|x| canonical_nan(*x).to_bits()).collect()
}

/// Fixed pseudo-random coefficients of every element of a `shape` tensor, exact in f32.
fn coefficients(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let c: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % 23) as f32 - 11.0) / 8.0)
        .collect();
    Tensor::from_vec(c, shape, &Device::Cpu).expect("tensor")
}

#[test]
fn forward_is_the_emulators_bits_and_backward_is_train_gradients() {
    for (path, target) in cases() {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !SAMPLES.contains(&name) {
            continue;
        }
        let target = target_arg(&target);
        let layer = TrainableModule::from_path(&path, Some(&target), Weights::Random { seed: 3 })
            .expect("layer");
        let program = layer.module().program().clone();
        let data = HostData::random(&program, 3, 11);
        let inputs: BTreeMap<String, Var> = data
            .inputs
            .iter()
            .map(|(n, t)| {
                let v = Var::from_slice(&t.data, t.shape.as_slice(), &Device::Cpu).expect("var");
                (n.clone(), v)
            })
            .collect();
        let given = inputs
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        let outputs = layer.forward_named(&given).expect("forward");

        // Forward: the emulator's bits on the same weights and inputs.
        let hw = emulate(
            &program,
            &HostData {
                batch: 3,
                weights: layer.weights().expect("weights"),
                inputs: data.inputs.clone(),
            },
            &EmuOptions::default(),
        )
        .expect("emulates");
        for (out, y) in &outputs {
            let expected: Vec<u32> = hw.outputs[out]
                .data
                .iter()
                .map(|x| canonical_nan(*x).to_bits())
                .collect();
            assert_eq!(f32_bits(y), expected, "{name} on {target}: `{out}`");
        }

        // Backward: `train::gradients` of the same loss at the recorded values.
        let mut loss = Tensor::zeros((), DType::F32, &Device::Cpu).expect("zero");
        for y in outputs.values() {
            loss = (loss + y.mul(&coefficients(y.dims())).and_then(|p| p.sum_all())).expect("loss");
        }
        let grads = loss.backward().expect("backward");
        let graph = layer.module().graph();
        let exact = HostData {
            batch: 3,
            weights: layer.weights().expect("weights"),
            inputs: data.inputs.clone(),
        };
        let (_, recorded) = train::record(graph, exact).expect("records");
        let wide = |t: &Tensor| t.to_dtype(DType::F64).expect("f64");
        let expected = train::backward(
            graph,
            &recorded,
            &outputs
                .iter()
                .map(|(n, y)| (n.clone(), wide(&coefficients(y.dims()))))
                .collect(),
        )
        .expect("gradients");
        for (w, v) in layer.named_vars() {
            let got = grads.get(v.as_tensor()).expect("a weight's gradient");
            assert_eq!(
                f32_bits(got),
                f32_bits(&expected.weights[w]),
                "{name}: d/d{w}"
            );
        }
        for (x, v) in &inputs {
            let got = grads.get(v.as_tensor()).expect("an input's gradient");
            assert_eq!(
                f32_bits(got),
                f32_bits(&expected.inputs[x]),
                "{name}: d/d{x}"
            );
        }
        let nonzero = expected
            .weights
            .values()
            .any(|g| f32_bits(g).iter().any(|&b| b & 0x7fff_ffff != 0));
        assert!(nonzero, "{name} on {target}: every weight gradient is zero");
    }
}

/// `train::backward` is `train::gradients` with the loss `sum(g * y)`: the same bits.
#[test]
fn backward_is_gradients_of_the_dot_product_loss() {
    let path = samples_dir().join("lstm.nnp");
    let text = std::fs::read_to_string(&path).expect("sample");
    let src = std::sync::Arc::new(nnp_grammar::SourceFile::new("lstm.nnp", text));
    let target = Target::load(&target_arg("fp32")).expect("target");
    let program = nnp_grammar::check(src, Some(target))
        .expect("checks")
        .program;
    let graph = train::compile(&program).expect("compiles");
    let data = HostData::random(&program, 2, 5);
    let f64s = |ts: &BTreeMap<String, nnp_host::Tensor>| -> BTreeMap<String, Tensor> {
        ts.iter()
            .map(|(n, t)| {
                let v: Vec<f64> = t.data.iter().map(|&x| f64::from(x)).collect();
                let t = Tensor::from_vec(v, t.shape.as_slice(), &Device::Cpu).expect("tensor");
                (n.clone(), t)
            })
            .collect()
    };
    let (weights, inputs) = (f64s(&data.weights), f64s(&data.inputs));
    let (outputs, recorded) = train::record(&graph, data).expect("records");
    let gs: BTreeMap<String, Tensor> = outputs
        .iter()
        .map(|(n, y)| {
            (
                n.clone(),
                coefficients(&y.shape).to_dtype(DType::F64).expect("f64"),
            )
        })
        .collect();
    let got = train::backward(&graph, &recorded, &gs).expect("backward");
    let dot = |outs: &BTreeMap<String, Tensor>| {
        let mut total = Tensor::zeros((), DType::F64, &Device::Cpu)?;
        for (n, g) in &gs {
            total = (total + outs[n].mul(g)?.sum_all()?)?;
        }
        Ok(total)
    };
    // A fresh keep_values run of the same data, as `nnpc train`'s step makes.
    let again = HostData {
        batch: 2,
        weights: recorded.data().weights.clone(),
        inputs: recorded.data().inputs.clone(),
    };
    let (_, fresh) = train::record(&graph, again).expect("records");
    let want =
        train::gradients(&graph, &weights, &inputs, Some(fresh.written()), dot).expect("gradients");
    for (n, g) in &want.weights {
        assert_eq!(f32_bits(&got.weights[n]), f32_bits(g), "d/d{n}");
    }
    for (n, g) in &want.inputs {
        assert_eq!(f32_bits(&got.inputs[n]), f32_bits(g), "d/d{n}");
    }
}

/// A candle optimizer trains the layer: the loss falls, and the tuned weights run in a
/// forward-only module with the same bits as the trainable one.
#[test]
fn a_candle_optimizer_lowers_the_loss() {
    let path = samples_dir().join("mlp2_relu.nnp");
    let layer =
        TrainableModule::from_path(&path, None, Weights::Random { seed: 1 }).expect("layer");
    let program = layer.module().program().clone();
    let data = HostData::random(&program, 8, 2);
    let (name, x) = data.inputs.iter().next().expect("an input");
    let x = Tensor::from_slice(&x.data, x.shape.as_slice(), &Device::Cpu).expect("x");
    let loss = |layer: &TrainableModule| -> candle_core::Result<Tensor> {
        layer.forward(&x)?.sqr()?.mean_all()
    };
    let first = loss(&layer)
        .and_then(|l| l.to_scalar::<f32>())
        .expect("loss");
    let mut last = first;
    for _ in 0..20 {
        let l = loss(&layer).expect("loss");
        let grads = l.backward().expect("grads");
        for v in layer.vars() {
            let g = grads.get(v.as_tensor()).expect("grad");
            v.set(&(v.as_tensor() - (g * 0.05).expect("step")).expect("update"))
                .expect("set");
        }
        last = loss(&layer)
            .and_then(|l| l.to_scalar::<f32>())
            .expect("loss");
    }
    assert!(last < 0.5 * first, "the loss went from {first} to {last}");
    let frozen: FirmwareModule = layer.frozen().expect("frozen");
    let ys = layer
        .forward_named(&BTreeMap::from([(name.clone(), x.clone())]))
        .expect("forward");
    let zs = frozen
        .forward_named(&BTreeMap::from([(name.clone(), x)]))
        .expect("forward");
    for (out, y) in ys {
        assert_eq!(f32_bits(&y), f32_bits(&zs[&out]), "`{out}`");
    }
}
