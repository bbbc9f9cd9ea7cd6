//! Helpers shared by the emulator tests: a small N = 4 target, checking firmware text, running
//! it on explicit tensors.
#![allow(dead_code)]

use nnp_emulator::{EmuError, EmuOptions, Emulation, emulate};
use nnp_grammar::{Program, SourceFile, Target};
use nnp_host::{HostData, LoadOptions, Tensor};
use std::collections::BTreeMap;
use std::sync::Arc;

/// N = 4, 2 MFUs, bw-default numerics (fp16 storage, BFP 8-bit mantissa / 5-bit exponent MVM
/// inputs, fp16 output and MFU), plus `numerics` lines.
pub fn target(numerics: &str) -> Target {
    let text = format!(
        "name = \"t4\"\nnative = 4\nmfus = 2\n\
         [memory]\nivrf = 64\nasvrf = 64\nmulvrf = 64\nmrf = 64\ndram = 64\ndram_tiles = 64\n\
         [numerics]\n{numerics}\n"
    );
    Target::from_toml(&text, "t4.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// Check firmware text for a target; panics with the rendered diagnostics.
pub fn program(src: &str, target: Target) -> Program {
    let file = Arc::new(SourceFile::new("test.nnp", src));
    match nnp_grammar::check(file.clone(), Some(target)) {
        Ok(out) => out.program,
        Err(diags) => {
            let lines: Vec<String> = diags
                .iter()
                .map(|d| {
                    format!(
                        "line {}: {} ({:?})",
                        file.line_of(d.span().start),
                        d.message,
                        d.help
                    )
                })
                .collect();
            panic!("firmware does not check:\n{}", lines.join("\n"))
        }
    }
}

pub fn t(shape: &[usize], data: &[f32]) -> Tensor {
    Tensor::new(shape.to_vec(), data.to_vec()).expect("shape matches data")
}

/// Host data from named tensors (weights and inputs alike), batch 1 unless batched inputs.
pub fn data(p: &Program, tensors: &[(&str, Tensor)]) -> HostData {
    let map: BTreeMap<String, Tensor> = tensors
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    HostData::from_tensors(p, map, &LoadOptions::default(), "the test")
        .unwrap_or_else(|e| panic!("{e}"))
}

pub fn try_run(p: &Program, tensors: &[(&str, Tensor)]) -> Result<Emulation, EmuError> {
    emulate(
        p,
        &data(p, tensors),
        &EmuOptions {
            trace: true,
            ..EmuOptions::default()
        },
    )
}

pub fn run(p: &Program, tensors: &[(&str, Tensor)]) -> Emulation {
    try_run(p, tensors).unwrap_or_else(|e| panic!("{e}"))
}

/// fp16 bit patterns of an output (first batch item's values and the rest).
pub fn bits(e: &Emulation, name: &str) -> Vec<u16> {
    e.outputs[name]
        .data
        .iter()
        .map(|v| half::f16::from_f32(*v).to_bits())
        .collect()
}

pub fn values(e: &Emulation, name: &str) -> Vec<f32> {
    e.outputs[name].data.clone()
}

pub fn p2(e: i32) -> f32 {
    2f32.powi(e)
}
