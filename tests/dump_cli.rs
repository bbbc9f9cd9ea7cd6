//! What a dump holds and says: every storage format's values, exactly (the round trip
//! `emulate -o` then `diff` is concordant for each); how it was made (`diff` warns where its
//! own flags differ); and `--explain` trying the default target.

use nnp_runtime::host::Tensor;
use nnp_runtime::io::{Dtype, read_metadata, read_tensors, write_tensors};
use std::collections::BTreeMap;

mod common;

use common::dumps::{diff_mlp, emulate_mlp16, pass_inputs, pass_through};
use common::{arg as s, message, nnpc, root, scratch, stderr, stdout};

/// A dump records how it was made (program, target, seed, batch: in a safetensors header,
/// or a sidecar beside a `.npy` file), and `diff` warns where its own flags differ, naming
/// the flag that makes them the same: a dump made with `--seed 7` diffed without it says
/// "pass --seed 7"; with it, no warning and concordant.
#[test]
fn a_dump_says_how_it_was_made() {
    let dir = scratch("provenance");
    for name in ["hw.safetensors", "hw.npy"] {
        let hw = dir.join(name);
        let o = nnpc(&[
            "emulate",
            "samples/mlp2_relu.nnp",
            "--batch",
            "4",
            "--seed",
            "7",
            "-o",
            s(&hw),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let o = diff_mlp(&hw, 0, &[]);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", stderr(&o));
        let err = message(&o);
        assert!(
            err.contains(&format!(
                "warning: the dump `{}` was made with --seed 7",
                s(&hw)
            )),
            "{err}"
        );
        assert!(
            err.contains("this diff uses --seed 0: pass --seed 7"),
            "{err}"
        );
        let o = diff_mlp(&hw, 7, &[]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    }
    assert!(dir.join("hw.npy.nnpc.json").is_file());
    // Made for another target: named, with the flag.
    let hw = dir.join("fp32.safetensors");
    let o = nnpc(&[
        "emulate",
        "samples/mlp2_relu.nnp",
        "--target",
        "samples/targets/fp32.toml",
        "-o",
        s(&hw),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = diff_mlp(&hw, 0, &[]);
    let err = message(&o);
    assert!(err.contains("was made for the target"), "{err}");
    assert!(err.contains("not `bw-default`: pass `--target`"), "{err}");
    // Made from files, diffed with random data.
    let x = dir.join("x.npy");
    let t = Tensor::new(vec![4, 200], vec![0.25; 4 * 200]).expect("shape");
    write_tensors(&x, &BTreeMap::from([("x".into(), t)]), Dtype::F32).expect("write");
    let o = nnpc(&[
        "emulate",
        "samples/mlp2_relu.nnp",
        "--inputs",
        s(&x),
        "--random-missing",
        "-o",
        s(&hw),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = diff_mlp(&hw, 0, &[]);
    assert!(
        message(&o).contains("made from --weights/--inputs files"),
        "{}",
        message(&o)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--explain` on a diff whose `--target` names another target than the one the board ran:
/// the default target `bw-default` is among the candidates, and the report says the board
/// ran it.
#[test]
fn explain_considers_the_default_target() {
    let dir = scratch("explain-default");
    let hw = emulate_mlp16(&dir.join("hw.safetensors"), &[]);
    let fp32 = ["--target", "samples/targets/fp32.toml"];
    let o = diff_mlp(&hw, 5, &[&fp32[..], &["--explain", "--json"]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = r["explain"].as_array().expect("rows");
    let concordant: Vec<&str> = rows
        .iter()
        .filter(|row| row["concordant"] == true)
        .filter_map(|row| row["change"].as_str())
        .collect();
    assert_eq!(concordant, ["target = \"bw-default\""]);
    let o = diff_mlp(&hw, 5, &[&fp32[..], &["--explain"]].concat());
    let out = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(out.contains("the board ran the default target"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The storage formats of the catalogue that outputs can be in.
const STORAGE_FORMATS: [&str; 6] = ["fp32", "fp16", "bf16", "fp(5, 2)", "fp(4, 3)", "fp(5, 3)"];

/// For every storage format, the target's or the program's own (`quant storage = ...` on
/// bw-default's fp16): `emulate -o hw.npy` with the default dtype then `diff --hardware
/// hw.npy` is concordant, every element bit-exact (the file holds every value the storage
/// does).
#[test]
fn every_storage_format_round_trips_through_a_dump() {
    let dir = scratch("storage-round-trip");
    let mlp = std::fs::read_to_string(root().join("samples/mlp2_relu.nnp")).expect("sample");
    for (k, fmt) in STORAGE_FORMATS.into_iter().enumerate() {
        let prog = dir.join(format!("quant{k}.nnp"));
        std::fs::write(&prog, format!("quant storage = {fmt}\n{mlp}")).expect("write");
        let target = dir.join(format!("target{k}.toml"));
        std::fs::write(&target, format!("[numerics]\nstorage = \"{fmt}\"\n")).expect("write");
        let by_target = ["samples/mlp2_relu.nnp", "--target", s(&target)];
        for (how, args) in [("quant", vec![s(&prog)]), ("target", by_target.to_vec())] {
            let hw = dir.join(format!("{how}{k}.npy"));
            let emulate = [&["emulate"][..], &args, &["--batch", "3", "-o", s(&hw)]].concat();
            let o = nnpc(&emulate);
            assert!(o.status.success(), "{fmt} by {how}: {}", stderr(&o));
            let diff = [&["diff"][..], &args, &["--hardware", s(&hw)]].concat();
            let o = nnpc(&diff);
            let out = stdout(&o);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{fmt} by {how}: {out}{}",
                stderr(&o)
            );
            assert!(
                out.contains("bit-exact: 1200 of 1200 (concordant)"),
                "{fmt} by {how}: {out}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A bf16 storage's values beyond f16's range stay themselves in the file: 999424 (a bf16
/// value, above f16's largest 65504) passes through `y = x` on a bf16-storage target and is
/// 999424 in `hw.npy`, not infinity; `--dtype f16` is refused for that storage.
#[test]
fn outputs_keep_the_values_of_the_storage() {
    let dir = scratch("bf16-values");
    let prog = pass_through(&dir);
    let x = pass_inputs(&dir, [999424.0, -3.0e38, 1.0, 0.5]);
    let target = dir.join("bf16.toml");
    std::fs::write(&target, "[numerics]\nstorage = \"bf16\"\n").expect("write");
    let hw = dir.join("hw.npy");
    let args = [
        "emulate",
        s(&prog),
        "--target",
        s(&target),
        "--inputs",
        s(&x),
    ];
    let o = nnpc(&[&args[..], &["-o", s(&hw)]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let y = &read_tensors(&hw).expect("dump")["hw"];
    // -3e38 is the bf16 value nearest it: 0xFF62 = -(1 + 98/128) * 2^127.
    let big = -(1.0 + 98.0 / 128.0) * 2f32.powi(127);
    assert_eq!(y.data, vec![999424.0, big, 1.0, 0.5]);
    let o = nnpc(&[&args[..], &["-o", s(&hw), "--dtype", "f16"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        message(&o)
            .contains("--dtype f16 cannot hold every value of the program's storage format bf16"),
        "{}",
        message(&o)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A compiled graph writes what its firmware writes: the outputs' file type comes from every
/// chain's storage, not only the first's. Here the first chain keeps the target's fp16 and the
/// second squares in fp32 and stores bf16: 7832 (an fp16 value) squared is 61,340,224, whose
/// nearest bf16 is 234 * 2^18 = 61,341,696 (8 significant bits; above f16's 65504, so an f16
/// file would hold infinity). `run` of the firmware and of its compiled graph write the same
/// f32 file, and the graph's provenance names the firmware and its hash.
#[test]
fn a_compiled_graph_writes_every_chains_storage() {
    let dir = scratch("graph-storage");
    let prog = dir.join("square.nnp");
    let text = "input x : [1, 4]\noutput y : [1, 4]\n\nv_rd netq\nv_wr mulvrf0[0]\nend_chain\n\n\
                quant storage = bf16\nquant mfu.input = fp32\nv_rd mulvrf0[0]\n\
                vv_mul mulvrf0[0]\nv_wr netq\nend_chain\n";
    std::fs::write(&prog, text).expect("write");
    let x = pass_inputs(&dir, [7832.0, -7832.0, 1.0, 0.5]);
    let graph = dir.join("square.swg.json");
    let o = nnpc(&["compile", s(&prog), "-o", s(&graph)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut made = Vec::new();
    for (file, out) in [(&prog, "fw.safetensors"), (&graph, "graph.safetensors")] {
        let out = dir.join(out);
        let o = nnpc(&["run", s(file), "--inputs", s(&x), "-o", s(&out)]);
        assert!(o.status.success(), "{}", stderr(&o));
        let y = read_tensors(&out).expect("outputs")["y"].clone();
        assert_eq!(
            y.data,
            vec![61341696.0, 61341696.0, 1.0, 0.25],
            "{}",
            s(file)
        );
        made.push(read_metadata(&out).expect("provenance"));
    }
    // The provenance of both names the same firmware text and target.
    for key in ["nnpc.program_fnv1a64", "nnpc.target", "nnpc.target_fnv1a64"] {
        assert!(made[0].contains_key(key), "{key}");
        assert_eq!(made[0].get(key), made[1].get(key), "{key}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
