//! A firmware layer inside a candle model.
//!
//! The model is a float projection (candle's f32 matmul and tanh), then the firmware of
//! `samples/mlp2_relu.nnp` as a [`FirmwareModule`] (the NNP's exact numerics), then a float
//! softmax. The firmware layer's output is checked bit for bit against the emulator, the
//! independent instruction-level model of the hardware.
//!
//! ```sh
//! cargo run --release --example candle_module
//! ```

use candle_core::{D, DType, Device, Module, Tensor};
use nnp_runtime::emulator::{EmuOptions, emulate};
use nnp_runtime::host::canonical_nan;
use nnp_runtime::module::{FirmwareModule, Weights};
use std::collections::BTreeMap;
use std::error::Error;

/// Items in the batch, and the features each time step starts from.
const BATCH: usize = 32;
const FEATURES: usize = 64;
const SAMPLE: &str = "samples/mlp2_relu.nnp";

fn main() -> Result<(), Box<dyn Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let firmware = root.join(SAMPLE);
    let dev = Device::Cpu;

    // The firmware layer: checked, lowered and planned once; weights seeded (as `nnpc run`
    // without --weights), or `Weights::Tensors` / `Weights::File` for trained ones.
    let layer = FirmwareModule::from_path(&firmware, None, Weights::Random { seed: 0 })?;
    let x_shape = layer.batched_input_shape(BATCH)?; // [batch, T, 200]
    let (steps, width) = (x_shape[1], x_shape[2]);

    // Before it: a float projection of each time step, tanh.
    // Deterministic data: sines of a ramp (a candle model would take its own).
    let ramp = |n: usize, step: f64| -> candle_core::Result<Tensor> {
        (Tensor::arange(0u32, n as u32, &dev)?.to_dtype(DType::F32)? * step)?.sin()
    };
    let features = ramp(BATCH * steps * FEATURES, 0.37)?.reshape((BATCH, steps, FEATURES))?;
    let projection = (ramp(FEATURES * width, 1.13)?.reshape((FEATURES, width))? / 4.0)?;
    let x = features
        .reshape((BATCH * steps, FEATURES))?
        .matmul(&projection)?
        .tanh()?
        .reshape((BATCH, steps, width))?;

    // The firmware layer, then a float softmax over its outputs.
    let y = layer.forward(&x)?;
    let exp = y.exp()?;
    let probabilities = exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)?;
    let classes = probabilities.argmax(D::Minus1)?.to_dtype(DType::F32)?;
    println!(
        "model: [{BATCH}, {steps}, {FEATURES}] -> projection, tanh -> {SAMPLE} -> softmax: mean \
         class {:.2}",
        classes.mean_all()?.to_scalar::<f32>()?
    );

    // The firmware layer's output against the emulator on the same weights and inputs.
    let input = layer.input_names()[0].to_string();
    let output = layer.output_names()[0].to_string();
    let data = layer.host_data(&BTreeMap::from([(input, x)]))?;
    let hardware = emulate(layer.program(), &data, &EmuOptions::default())?;
    let expected = &hardware.outputs[&output].data;
    let got = y.flatten_all()?.to_vec1::<f32>()?;
    let same = got
        .iter()
        .zip(expected)
        .filter(|(a, b)| canonical_nan(**a).to_bits() == canonical_nan(**b).to_bits())
        .count();
    if got.len() != expected.len() || same != got.len() {
        return Err(format!(
            "firmware layer `{output}`: {same} of {} values bit-identical to the emulator \
             (NOT concordant)",
            expected.len()
        )
        .into());
    }
    println!(
        "firmware layer `{output}`: {same} of {} values bit-identical to the emulator (concordant)",
        expected.len()
    );
    Ok(())
}
