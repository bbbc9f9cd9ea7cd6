//! `--weights`/`--inputs FILE:NAME=STORED,...` pick tensors out of a file under the names the
//! program declares, the same way for `run`, `emulate` and `diff` (and `--weights` of `score`
//! and `train`): the bits are those of a file holding just those tensors under those names; a
//! name the file does not hold, a name the program does not declare and a selection that does
//! not parse are clear errors.

mod common;

use common::tensors::{self, Raw};
use common::{arg, message, nnpc, scratch, stderr};
use std::collections::BTreeMap;
use std::path::Path;

const DIGITS: &str = "samples/train/digits_mlp.nnp";
const DATA: &str = "samples/train/digits_mlp.data.safetensors";
const WEIGHTS: &str = "samples/train/digits_mlp.weights.safetensors";

/// The tensors of `from` stored as `stored`, copied byte for byte under `name` into `to`.
fn extract(from: &str, pairs: &[(&str, &str)], to: &Path) {
    let all = tensors::read(&common::root().join(from));
    let picked: BTreeMap<String, Raw> = pairs
        .iter()
        .map(|(name, stored)| (name.to_string(), all[*stored].clone()))
        .collect();
    tensors::write(to, &picked);
}

/// The outputs `cmd` (`run` or `emulate`) writes for the digits program with `data` flags.
fn outputs(cmd: &str, data: &[&str], out: &Path) -> BTreeMap<String, Raw> {
    let mut args = vec![cmd, DIGITS, "-o", arg(out)];
    args.extend(data);
    let o = nnpc(&args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    tensors::read(out)
}

#[test]
fn a_selection_gives_the_bits_of_a_file_holding_just_that_tensor() {
    let dir = scratch("select_bits");
    let x = dir.join("x.safetensors");
    extract(DATA, &[("x", "x_test")], &x);
    // The weights under PyTorch-style names, selected back under the declared ones.
    let renamed = dir.join("renamed.safetensors");
    let pairs = [
        ("fc1.weight", "W1"),
        ("fc1.bias", "b1"),
        ("fc2.weight", "W2"),
        ("fc2.bias", "b2"),
    ];
    extract(WEIGHTS, &pairs, &renamed);
    let select_w = format!(
        "{}:W1=fc1.weight,b1=fc1.bias,W2=fc2.weight,b2=fc2.bias",
        arg(&renamed)
    );
    let select_x = format!("{DATA}:x=x_test");
    for cmd in ["run", "emulate"] {
        let by_file = outputs(
            cmd,
            &["--weights", WEIGHTS, "--inputs", arg(&x)],
            &dir.join(format!("{cmd}-file.safetensors")),
        );
        assert_eq!(by_file["y"].shape, vec![360, 10], "{cmd}");
        let selected = outputs(
            cmd,
            &["--weights", &select_w, "--inputs", &select_x],
            &dir.join(format!("{cmd}-select.safetensors")),
        );
        assert_eq!(selected, by_file, "{cmd}: the selection's bits");
    }
    // `diff` reads the same selection: the emulator's dump is concordant with it.
    let hw = dir.join("emulate-select.safetensors");
    let o = nnpc(&[
        "diff",
        DIGITS,
        "--hardware",
        arg(&hw),
        "--weights",
        &select_w,
        "--inputs",
        &select_x,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_name_the_file_does_not_hold_is_refused_with_the_names_it_holds() {
    for cmd in ["run", "emulate"] {
        let o = nnpc(&[cmd, DIGITS, "--inputs", &format!("{DATA}:x=x_tset")]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let m = message(&o);
        for part in [
            "`samples/train/digits_mlp.data.safetensors` holds no tensor named `x_tset`",
            "(selected for `x`)",
            "`x_test`, `x_train`, `y_test`, `y_train`",
            "help: select one of the tensors it holds",
        ] {
            assert!(m.contains(part), "{cmd}: {part:?} in {m}");
        }
    }
    let o = nnpc(&[
        "diff",
        DIGITS,
        "--hardware",
        DATA,
        "--weights",
        &format!("{WEIGHTS}:W1=w1"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        message(&o).contains("holds no tensor named `w1`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_name_the_program_does_not_declare_is_refused() {
    let o = nnpc(&[
        "emulate",
        DIGITS,
        "--inputs",
        &format!("{DATA}:input=x_test"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let m = message(&o);
    for part in [
        "selects `x_test` for `input`, which the program does not declare",
        "the input `x` and the weights `W1`, `W2`, `b1`, `b2`",
        &format!("`{DATA}:x=x_test`"),
    ] {
        assert!(m.contains(part), "{part:?} in {m}");
    }
    // An output is no input or weight either.
    let o = nnpc(&["run", DIGITS, "--inputs", &format!("{DATA}:y=y_test")]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(message(&o).contains("for `y`, which the program does not declare"));
}

#[test]
fn a_selection_that_does_not_parse_is_a_usage_error() {
    for (spec, piece) in [
        (format!("{DATA}:x"), "`x` is not a selection NAME=STORED"),
        (
            format!("{DATA}:x=x_test,"),
            "`` is not a selection NAME=STORED",
        ),
        (format!("{DATA}:=x_test"), "`=x_test` is not a selection"),
    ] {
        let o = nnpc(&["run", DIGITS, "--inputs", &spec]);
        assert_eq!(o.status.code(), Some(2), "{spec}: {}", stderr(&o));
        assert!(message(&o).contains(piece), "{spec}: {}", stderr(&o));
        assert!(message(&o).contains("FILE:NAME=STORED"), "{}", stderr(&o));
    }
    let o = nnpc(&[
        "run",
        DIGITS,
        "--inputs",
        &format!("{DATA}:x=x_test,x=x_train"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(message(&o).contains("selects `x` twice"), "{}", stderr(&o));
}

/// A file whose name holds `:` is that file, whole; a selection after it still works.
#[test]
fn a_path_with_a_colon_is_the_file_it_names() {
    let dir = scratch("select_colon");
    let odd = dir.join("x:test.safetensors");
    extract(DATA, &[("x", "x_test")], &odd);
    let whole = outputs(
        "run",
        &["--weights", WEIGHTS, "--inputs", arg(&odd)],
        &dir.join("a.safetensors"),
    );
    let spec = format!("{}:x=x", arg(&odd));
    let picked = outputs(
        "run",
        &["--weights", WEIGHTS, "--inputs", &spec],
        &dir.join("b.safetensors"),
    );
    assert_eq!(whole, picked);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `score` and `train` take the same selection of their weights: the renamed weights score as
/// the bundled ones do.
#[test]
fn score_and_train_select_their_weights() {
    let dir = scratch("select_score");
    let renamed = dir.join("renamed.safetensors");
    let pairs = [("a", "W1"), ("b", "b1"), ("c", "W2"), ("d", "b2")];
    extract(WEIGHTS, &pairs, &renamed);
    let select = format!("{}:W1=a,b1=b,W2=c,b2=d", arg(&renamed));
    let json = |args: &[&str]| {
        let o = nnpc(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let out = common::stdout(&o);
        let last = out.lines().last().expect("a line").to_string();
        serde_json::from_str::<serde_json::Value>(&last).expect("JSON")
    };
    let bundled = json(&["score", DIGITS, "--json"]);
    let picked = json(&["score", DIGITS, "--json", "--weights", &select]);
    assert_eq!(picked["loss"], bundled["loss"]);
    assert_eq!(picked["accuracy"], bundled["accuracy"]);
    let trained = json(&[
        "train",
        DIGITS,
        "--epochs",
        "0",
        "--json",
        "--weights",
        &select,
    ]);
    assert_eq!(trained["accuracy_before"], bundled["accuracy"]);
    for cmd in ["score", "train"] {
        let o = nnpc(&[cmd, DIGITS, "--weights", &format!("{}:W1=e", arg(&renamed))]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert!(
            message(&o).contains("holds no tensor named `e`"),
            "{cmd}: {}",
            stderr(&o)
        );
        // The inputs come with the data: a selection for one is refused, not dropped.
        let spec = format!("{}:W1=a,b1=b,W2=c,b2=d,x=a", arg(&renamed));
        let o = nnpc(&[cmd, DIGITS, "--weights", &spec]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        let m = message(&o);
        assert!(
            m.contains("selects a tensor for the input `x`")
                && m.contains("`W1`, `W2`, `b1`, `b2`"),
            "{cmd}: {m}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
