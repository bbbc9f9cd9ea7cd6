//! The programs, inputs and dumps that the dump and diff tests share.

use super::{arg as s, nnpc, stderr};
use nnp_runtime::host::Tensor;
use nnp_runtime::io::{Dtype, write_tensors};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

/// `nnpc diff samples/mlp2_relu.nnp --hardware HW --seed SEED EXTRA...`
pub fn diff_mlp(hw: &Path, seed: u64, extra: &[&str]) -> Output {
    let seed = seed.to_string();
    let mut args = vec![
        "diff",
        "samples/mlp2_relu.nnp",
        "--hardware",
        s(hw),
        "--seed",
        &seed,
    ];
    args.extend(extra);
    nnpc(&args)
}

/// `nnpc emulate samples/mlp2_relu.nnp --batch 16 --seed 5 EXTRA... -o HW`: `hw`.
pub fn emulate_mlp16(hw: &Path, extra: &[&str]) -> PathBuf {
    let mut args = vec![
        "emulate",
        "samples/mlp2_relu.nnp",
        "--batch",
        "16",
        "--seed",
        "5",
    ];
    args.extend(extra);
    args.extend(["-o", s(hw)]);
    let o = nnpc(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    hw.to_path_buf()
}

/// `y = x`: one input and one output of 4 lanes (`pass.nnp` in `dir`).
pub fn pass_through(dir: &Path) -> PathBuf {
    let prog = dir.join("pass.nnp");
    let text = "input x : [1, 4]\noutput y : [1, 4]\n\nv_rd netq\nv_wr netq\nend_chain\n";
    std::fs::write(&prog, text).expect("write");
    prog
}

/// `x.npy` in `dir`: one input set of `x : [1, 4]`.
pub fn pass_inputs(dir: &Path, x: [f32; 4]) -> PathBuf {
    let path = dir.join("x.npy");
    let t = Tensor::new(vec![1, 4], x.to_vec()).expect("shape");
    write_tensors(&path, &BTreeMap::from([("x".into(), t)]), Dtype::F32).expect("write");
    path
}
