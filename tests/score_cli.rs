//! `nnpc score`: a program's loss and accuracy on a dataset with the hardware's numerics match
//! what `nnpc train` reports for the same weights (its `before` and `after` test scores), and
//! the software graph and the emulator give the same score.

use serde_json::Value;
use std::process::Command;

const DIGITS: &str = "samples/train/digits_mlp.nnp";

fn nnpc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nnpc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn last_json(stdout: &str) -> Value {
    serde_json::from_str(stdout.lines().last().expect("a line")).expect("JSON")
}

#[test]
fn scores_are_nnpc_trains_before_and_after_on_both_engines() {
    let dir = std::env::temp_dir().join(format!("nnpc-score-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let tuned = dir.join("tuned.safetensors");
    let tuned = tuned.to_str().expect("utf-8 path");
    let (code, out, err) = nnpc(&["train", DIGITS, "--json", "-o", tuned]);
    assert_eq!(code, 0, "{err}");
    let report = last_json(&out);
    for (weights, when) in [(None, "before"), (Some(tuned), "after")] {
        for engine in ["graph", "emulator"] {
            let mut args = vec!["score", DIGITS, "--json", "--engine", engine];
            if let Some(w) = weights {
                args.extend(["--weights", w]);
            }
            let (code, out, err) = nnpc(&args);
            assert_eq!(code, 0, "{err}");
            let s = last_json(&out);
            assert_eq!(s["items"], 360);
            assert_eq!(
                s["accuracy"],
                report[format!("accuracy_{when}")],
                "{when} {engine}"
            );
            assert_eq!(s["loss"], report[format!("loss_{when}")], "{when} {engine}");
        }
    }
    // The bundled weights' accuracy, by the count docs/training.md gives: 320 of 360.
    let (_, out, _) = nnpc(&["score", DIGITS]);
    assert!(out.contains("accuracy 88.89%"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_split_or_file_is_a_clear_error() {
    let (code, _, err) = nnpc(&["score", DIGITS, "--data", "samples/no-such.safetensors"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no-such.safetensors"), "{err}");
}
