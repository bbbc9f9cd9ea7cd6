//! The embedding API: a [`FirmwareModule`] called as a candle `Module` on CPU candle tensors gives
//! the emulator's bits (the independent oracle), on every sample and every target it names,
//! with adversarial inputs; and bad calls are errors that say what to pass, never panics.

use candle_core::{DType, Device, Module, Tensor};
use nnp_emulator::{EmuOptions, emulate};
use nnp_exec::ExecOptions;
use nnp_exec::module::{FirmwareModule, ModuleError, Weights};
use nnp_grammar::Target;
use nnp_host::canonical_nan;
use std::collections::BTreeMap;
use std::sync::Arc;

mod sample_cases;
use sample_cases::{cases, samples_dir as samples, target_arg};

/// Inputs that stress the quantizers: zeros, exact ties of small formats, values far apart in
/// one tile (block exponents differ widely), tiny and subnormal-range values, large ones that
/// saturate narrow formats, and plain values.
fn adversarial(shape: &[usize], salt: usize) -> Vec<f32> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|i| {
            let k = i.wrapping_mul(2_654_435_761).wrapping_add(salt) % 11;
            let plain = ((i * 37 + salt) % 201) as f32 / 100.0 - 1.0;
            match k {
                0 => 0.0,
                1 => 1.5,            // a tie at one mantissa bit
                2 => -0.3125,        // a tie at three
                3 => 6.0e4 * plain,  // saturates fp16/fp8
                4 => 1.0e-6 * plain, // far below its tile's largest
                5 => f32::from_bits(0x0000_0400) * (1.0 + plain), // f32 subnormal
                6 => 2.0f32.powi(-14) * 0.75, // fp16 subnormal
                7 => -448.0,
                _ => plain,
            }
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| canonical_nan(*x).to_bits()).collect()
}

#[test]
fn module_outputs_are_the_emulators_bits_on_every_sample_and_target() {
    let batch = 5;
    for (i, (path, target)) in cases().into_iter().enumerate() {
        let what = format!("{} on {target}", path.display());
        let layer = FirmwareModule::from_path(
            &path,
            Some(&target_arg(&target)),
            Weights::Random { seed: 3 },
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let inputs: BTreeMap<String, Tensor> = layer
            .program()
            .inputs()
            .map(|d| {
                let shape: Vec<usize> = std::iter::once(batch).chain(d.shape.clone()).collect();
                let t = Tensor::from_vec(adversarial(&shape, i), shape, &Device::Cpu)
                    .expect("a tensor");
                (d.name.clone(), t)
            })
            .collect();
        // Twice: the second call is warm (prepared weights reused) and must not change a bit.
        let first = layer
            .forward_named(&inputs)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let warm = layer
            .forward_named(&inputs)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let data = layer.host_data(&inputs).expect("host data");
        let hw = emulate(layer.program(), &data, &EmuOptions::default())
            .unwrap_or_else(|e| panic!("{what}: emulator: {e}"));
        assert_eq!(first.len(), hw.outputs.len(), "{what}");
        for (name, expected) in &hw.outputs {
            for (run, out) in [("first", &first), ("warm", &warm)] {
                let t = &out[name];
                assert_eq!(t.dims(), &expected.shape[..], "{what}: `{name}` shape");
                assert_eq!(t.dtype(), DType::F32);
                let got = t
                    .flatten_all()
                    .and_then(|t| t.to_vec1::<f32>())
                    .expect("values");
                assert!(
                    bits(&got) == bits(&expected.data),
                    "{what}: `{name}` ({run} call) differs from the emulator"
                );
            }
        }
    }
}

#[test]
fn forward_takes_any_float_dtype_and_matches_the_f32_call() {
    let layer = FirmwareModule::from_path(
        samples().join("lstm.nnp"),
        None,
        Weights::Random { seed: 0 },
    )
    .expect("lstm");
    let shape = layer.batched_input_shape(3).expect("one input");
    let values = adversarial(&shape, 1);
    let x = Tensor::from_vec(values, shape, &Device::Cpu).expect("x");
    let y = layer.forward(&x).expect("f32 call");
    // f16 values are exact in f32, so an f16 tensor of the same (f16-exact) values gives the
    // same outputs; f64 of f32 values too.
    let x16 = x.to_dtype(DType::F16).expect("f16");
    let x16_as_32 = x16.to_dtype(DType::F32).expect("back");
    let y16 = layer.forward(&x16).expect("f16 call");
    let y16_ref = layer.forward(&x16_as_32).expect("f32 of the f16 values");
    let y64 = layer
        .forward(&x.to_dtype(DType::F64).expect("f64"))
        .expect("f64 call");
    let v = |t: &Tensor| bits(&t.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("v"));
    assert_eq!(v(&y16), v(&y16_ref));
    assert_eq!(v(&y64), v(&y));
}

#[test]
fn weights_from_tensors_are_the_weights_the_emulator_gets() {
    let path = samples().join("dense_300x200.nnp");
    let random = FirmwareModule::from_path(&path, None, Weights::Random { seed: 9 }).expect("m");
    // The same values handed over as candle tensors make the same module.
    let tensors: BTreeMap<String, Tensor> = random
        .weights()
        .into_iter()
        .map(|(n, t)| {
            let t = Tensor::from_vec(t.data, t.shape, &Device::Cpu).expect("t");
            (n, t)
        })
        .collect();
    let given = FirmwareModule::from_path(&path, None, Weights::Tensors(tensors)).expect("m");
    let x = Tensor::from_vec(
        adversarial(&random.batched_input_shape(4).expect("s"), 7),
        random.batched_input_shape(4).expect("s"),
        &Device::Cpu,
    )
    .expect("x");
    let a = random
        .forward(&x)
        .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
        .expect("a");
    let b = given
        .forward(&x)
        .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
        .expect("b");
    assert_eq!(bits(&a), bits(&b));
}

fn message(r: Result<impl std::fmt::Debug, ModuleError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_calls_are_errors_that_say_what_to_pass() {
    let lstm = samples().join("lstm.nnp");
    let layer = FirmwareModule::from_path(&lstm, None, Weights::Random { seed: 0 }).expect("m");
    let shape = layer.batched_input_shape(2).expect("s");
    let input = layer.input_names()[0].to_string();
    let cpu = Device::Cpu;

    // Wrong shape: no batch dimension.
    let unbatched = Tensor::zeros(&shape[1..], DType::F32, &cpu).expect("t");
    let e = layer
        .forward(&unbatched)
        .expect_err("unbatched")
        .to_string();
    assert!(e.contains("batch first"), "{e}");
    // An integer dtype.
    let ints = Tensor::zeros(&shape[..], DType::U32, &cpu).expect("t");
    let e = layer.forward(&ints).expect_err("u32").to_string();
    assert!(e.contains("f16, bf16, f32 or f64"), "{e}");
    // A NaN input names the tensor and the element.
    let mut v = vec![0f32; shape.iter().product()];
    v[5] = f32::NAN;
    let nan = Tensor::from_vec(v, &shape[..], &cpu).expect("t");
    let e = layer.forward(&nan).expect_err("NaN").to_string();
    assert!(e.contains(&input) && e.contains('5'), "{e}");
    // An input the program does not have.
    let x = Tensor::zeros(&shape[..], DType::F32, &cpu).expect("t");
    let e = message(layer.forward_named(&BTreeMap::from([
        (input.clone(), x.clone()),
        ("not_an_input".to_string(), x.clone()),
    ])));
    assert!(e.contains("not_an_input") && e.contains(&input), "{e}");
    // A program with two inputs through `forward`.
    let gru =
        FirmwareModule::from_path(samples().join("gru.nnp"), None, Weights::Random { seed: 0 })
            .expect("gru");
    let e = gru.forward(&x).expect_err("two inputs").to_string();
    assert!(e.contains("forward_named") && e.contains("h_prev"), "{e}");
    // A missing weight tensor, and a weight of the wrong shape.
    let mut ws: BTreeMap<String, Tensor> = layer
        .weights()
        .into_iter()
        .map(|(n, t)| (n, Tensor::from_vec(t.data, t.shape, &cpu).expect("t")))
        .collect();
    let (first, _) = ws.pop_first().expect("the lstm loads weights");
    let e = message(FirmwareModule::from_path(
        &lstm,
        None,
        Weights::Tensors(ws.clone()),
    ));
    assert!(e.contains(&first), "{e}");
    ws.insert(
        first.clone(),
        Tensor::zeros((3, 3), DType::F32, &cpu).expect("t"),
    );
    let e = message(FirmwareModule::from_path(&lstm, None, Weights::Tensors(ws)));
    assert!(e.contains(&first) && e.contains("[3, 3]"), "{e}");
    // Firmware errors carry the diagnostics; an unreadable file names it.
    let e = message(FirmwareModule::from_source(
        "bad.nnp",
        "v_rd nowhere\n",
        None,
        Weights::Random { seed: 0 },
    ));
    assert!(e.contains("error"), "{e}");
    let e = message(FirmwareModule::from_path(
        "no/such/file.nnp",
        None,
        Weights::Random { seed: 0 },
    ));
    assert!(e.contains("no/such/file.nnp"), "{e}");
}

#[test]
fn a_module_from_a_checked_program_takes_a_target_and_options() {
    let text = std::fs::read_to_string(samples().join("mlp2_relu.nnp")).expect("sample");
    let src = Arc::new(nnp_grammar::SourceFile::new("mlp2_relu.nnp", text));
    let target = Target::load(&target_arg("fp32")).expect("fp32 target");
    let program = nnp_grammar::check(src, Some(target))
        .expect("checks")
        .program;
    let layer = FirmwareModule::from_program(
        program,
        Weights::Random { seed: 1 },
        &ExecOptions::default(),
    )
    .expect("module");
    assert_eq!(layer.program().target.name, "fp32");
    let shape = layer.batched_input_shape(2).expect("s");
    let x = Tensor::from_vec(adversarial(&shape, 3), shape, &Device::Cpu).expect("x");
    let y = layer.forward(&x).expect("runs");
    let data = layer
        .host_data(&BTreeMap::from([("x".to_string(), x)]))
        .expect("data");
    let hw = emulate(layer.program(), &data, &EmuOptions::default()).expect("emulates");
    let got = y.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("v");
    assert_eq!(bits(&got), bits(&hw.outputs["y"].data));
}
