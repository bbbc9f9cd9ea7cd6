//! Fine-tuning firmware in a plain candle training loop.
//!
//! The digits sample (`samples/train/digits_mlp.nnp`, a 64-64-10 perceptron whose products run
//! in low-precision BFP) starts from its bundled float-trained weights; a
//! [`TrainableModule`] holds them as candle `Var`s, and `candle_nn`'s AdamW trains them
//! through the firmware's exact numerics (the forward pass is the concordant graph, the
//! backward pass its straight-through gradient). The tuned layer is then checked bit for bit
//! against the emulator, the independent model of the hardware.
//!
//! ```sh
//! cargo run --release --example candle_train
//! ```

use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, loss};
use nnp_runtime::emulator::{EmuOptions, emulate};
use nnp_runtime::host::{Tensor as HostTensor, canonical_nan};
use nnp_runtime::io::read_tensors;
use nnp_runtime::module::{FirmwareModule, TrainableModule, Weights};
use std::collections::BTreeMap;
use std::error::Error;
use std::path::Path;

const EPOCHS: usize = 10;
const BATCH: usize = 32;
const LR: f64 = 1e-3;

fn main() -> Result<(), Box<dyn Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/train");
    let weights = Weights::File(root.join("digits_mlp.weights.safetensors"));
    let layer = TrainableModule::from_path(root.join("digits_mlp.nnp"), None, weights)?;
    let data = read_tensors(&root.join("digits_mlp.data.safetensors"))?;
    let split = |name: &str| -> Result<Tensor, Box<dyn Error>> {
        let t = data
            .get(name)
            .ok_or(format!("no `{name}` in the data file"))?;
        Ok(Tensor::from_slice(
            &t.data,
            t.shape.as_slice(),
            &Device::Cpu,
        )?)
    };
    let (x_train, y_train) = (split("x_train")?, split("y_train")?.to_dtype(DType::U32)?);
    let (x_test, y_test) = (split("x_test")?, split("y_test")?.to_dtype(DType::U32)?);

    let before = accuracy(&layer.frozen()?, &x_test, &y_test)?;
    let params = ParamsAdamW {
        lr: LR,
        weight_decay: 0.0,
        ..ParamsAdamW::default()
    };
    let mut opt = AdamW::new(layer.vars(), params)?;
    let items = x_train.dim(0)?;
    for epoch in 0..EPOCHS {
        let order = Tensor::from_vec(shuffled(items, epoch as u64), items, &Device::Cpu)?;
        let (mut total, mut steps) = (0.0, 0);
        for start in (0..items).step_by(BATCH) {
            let ids = order.narrow(0, start, BATCH.min(items - start))?;
            let logits = layer.forward(&x_train.index_select(&ids, 0)?)?;
            let l = loss::cross_entropy(&logits, &y_train.index_select(&ids, 0)?)?;
            opt.backward_step(&l)?;
            total += l.to_scalar::<f32>()?;
            steps += 1;
        }
        println!("epoch {}: mean loss {:.4}", epoch + 1, total / steps as f32);
    }
    let tuned = layer.frozen()?;
    let after = accuracy(&tuned, &x_test, &y_test)?;
    println!(
        "test accuracy with the hardware's numerics: {:.2}% before, {:.2}% after",
        100.0 * before,
        100.0 * after
    );

    // The tuned layer against the emulator on the whole test split.
    let input = tuned.input_names()[0].to_string();
    let output = tuned.output_names()[0].to_string();
    let y = tuned.forward(&x_test)?;
    let hardware = emulate(
        tuned.program(),
        &tuned.host_data(&BTreeMap::from([(input, x_test)]))?,
        &EmuOptions::default(),
    )?;
    let same = same_bits(&y, &hardware.outputs[&output])?;
    let n = y.elem_count();
    if same != n {
        return Err(format!(
            "tuned layer `{output}`: {same} of {n} values bit-identical to the emulator (NOT \
             concordant)"
        )
        .into());
    }
    println!(
        "tuned layer `{output}`: {same} of {n} values bit-identical to the emulator (concordant)"
    );
    Ok(())
}

/// The fraction of items whose largest output is their label.
fn accuracy(layer: &FirmwareModule, x: &Tensor, labels: &Tensor) -> candle_core::Result<f64> {
    let classes = layer.forward(x)?.argmax(D::Minus1)?;
    let hits = classes.eq(labels)?.to_dtype(DType::F64)?.sum_all()?;
    Ok(hits.to_scalar::<f64>()? / labels.elem_count() as f64)
}

/// How many values of `y` have the emulator's bits (NaNs compared canonically).
fn same_bits(y: &Tensor, hardware: &HostTensor) -> candle_core::Result<usize> {
    let got = y.flatten_all()?.to_vec1::<f32>()?;
    let same = got.iter().zip(&hardware.data);
    let same = same.filter(|(a, b)| canonical_nan(**a).to_bits() == canonical_nan(**b).to_bits());
    Ok(if got.len() == hardware.data.len() {
        same.count()
    } else {
        0
    })
}

/// `0..n` in an order fixed by `seed` (a Fisher-Yates shuffle on a SplitMix64 stream).
fn shuffled(n: usize, seed: u64) -> Vec<u32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    order
}
