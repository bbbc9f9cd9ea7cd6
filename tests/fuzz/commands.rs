//! A few whole commands on damaged inputs (the rest of the harness runs in process): `nnpc
//! check` on firmware with a bit flipped (invalid UTF-8 too), `nnpc run` on a compiled graph and
//! on `--inputs` files with a header bit flipped. Each exits 0, 1 (firmware errors) or 2
//! (unusable input), never by a panic, and an error about a file names it.

use super::common::{arg, dumps::pass_through, nnpc, root, scratch, stderr};
use super::engine::{corpus, flip_bit};
use nnp_progen::Rng;
use std::path::Path;

/// Cases per kind of input.
const CASES: u64 = 6;

/// `nnpc ARGS` exited 0, 1 or 2 without a panic; an error naming `file` when it refused it.
fn clean_exit(args: &[&str], file: &Path) {
    let o = nnpc(args);
    let err = stderr(&o);
    let code = o.status.code();
    assert!(
        matches!(code, Some(0..=2)),
        "{args:?}: exit {code:?}\n{err}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    assert!(
        code == Some(0) || err.contains(&name),
        "{args:?}: the error does not name {name}\n{err}"
    );
}

#[test]
fn damaged_inputs_through_the_binary() {
    let dir = scratch("fuzz-commands");
    let mlp = std::fs::read(root().join("samples/mlp2_relu.nnp")).expect("sample");
    let (_, graph) = corpus("graphs", "json").remove(0);
    let npys = corpus("tensors", "npy");
    let prog = pass_through(&dir);
    for seed in 0..CASES {
        let mut rng = Rng::keyed(seed, "commands");
        let mut bytes = mlp.clone();
        let all = 0..bytes.len();
        flip_bit(&mut bytes, all, &mut rng);
        let fw = dir.join(format!("fw{seed}.nnp"));
        std::fs::write(&fw, &bytes).expect("write");
        clean_exit(&["check", arg(&fw)], &fw);

        let mut bytes = graph.clone();
        let all = 0..bytes.len();
        flip_bit(&mut bytes, all, &mut rng);
        let g = dir.join(format!("g{seed}.swg.json"));
        std::fs::write(&g, &bytes).expect("write");
        clean_exit(&["run", arg(&g), "--batch", "2"], &g);

        let (_, npy) = rng.pick(&npys);
        let mut bytes = npy.clone();
        let header = 0..bytes.len().min(128);
        flip_bit(&mut bytes, header, &mut rng);
        let x = dir.join("x.npy");
        std::fs::write(&x, &bytes).expect("write");
        clean_exit(&["run", arg(&prog), "--inputs", arg(&x)], &x);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
