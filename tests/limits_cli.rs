//! The front end's limits through the CLI: an error at any column renders (firmware and target
//! file), programs too large to run are refused by `check`, `run`, `compile` and `emulate`
//! with their size and the limit (exit 1, never an abort), a mistyped built-in target gets a
//! suggestion, and every sample checks with no flags.

mod common;

use common::{message, nnpc, root, scratch, stderr};
use std::fs;

/// No panic, no abort: a clean exit with `code`.
#[track_caller]
fn exits(o: &std::process::Output, code: i32) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(code), "{err}");
}

#[test]
fn an_error_past_column_65535_renders_in_firmware_and_target_files() {
    let dir = scratch("limits_long_line");
    let fw = dir.join("long.nnp");
    let text = format!(
        "input x : [128]\noutput y : [128]\nlet A = 1{}$\nv_rd netq\nv_wr netq\nend_chain\n",
        " ".repeat(100_000)
    );
    fs::write(&fw, text).expect("write");
    let o = nnpc(&["check", fw.to_str().expect("utf-8")]);
    exits(&o, 1);
    let err = stderr(&o);
    // Line 3, after `let A = 1` (9 characters) and 100,000 spaces.
    assert!(err.contains("long.nnp:3:100010]"), "{err}");
    assert!(err.lines().all(|l| l.chars().count() < 400), "{err}");

    let toml = dir.join("long.toml");
    fs::write(&toml, format!("native ={}5000\n", " ".repeat(100_001))).expect("write");
    let ok = root().join("samples/mlp2_relu.nnp");
    let o = nnpc(&[
        "check",
        ok.to_str().expect("utf-8"),
        "--target",
        toml.to_str().expect("utf-8"),
    ]);
    exits(&o, 2);
    assert!(
        message(&o).contains("native = 5000 must be between 1 and 4096"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("long.toml:1:100010]"), "{}", stderr(&o));
}

/// A 20,000-character token (a name, a number) renders with its location and a shortened
/// quote: the renderer gets a span it can show, the message not the whole token.
#[test]
fn a_token_of_20000_characters_renders_with_its_location_and_a_short_quote() {
    let dir = scratch("limits_long_token");
    for (name, text, at) in [
        (
            "name.nnp",
            format!("v_rd {}\n", "a".repeat(20_000)),
            "name.nnp:1:6]",
        ),
        (
            "number.nnp",
            format!("let A = {}\n", "9".repeat(20_000)),
            "number.nnp:1:9]",
        ),
    ] {
        let fw = dir.join(name);
        fs::write(&fw, text).expect("write");
        let o = nnpc(&["check", fw.to_str().expect("utf-8")]);
        exits(&o, 1);
        let err = stderr(&o);
        assert!(err.contains(at), "{err}");
        assert!(!err.contains("OutOfBounds"), "{err}");
        assert!(err.contains("...(20000"), "{err}");
        assert!(err.len() < 4000, "{} bytes of stderr", err.len());
    }
}

/// A file with CR-only line endings (old Mac) is refused at its first lone `\r`, with how to
/// convert it: read as one line it would be one comment, checked clean and run with no outputs.
#[test]
fn a_file_with_cr_only_line_endings_is_refused_at_its_first_cr() {
    let dir = scratch("limits_cr");
    let fw = dir.join("mac.nnp");
    fs::write(&fw, "// old file\rinput x : [128]\routput y : [128]\r").expect("write");
    let o = nnpc(&["check", fw.to_str().expect("utf-8")]);
    exits(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("carriage return without a line feed"), "{err}");
    assert!(err.contains("mac.nnp:1:12]"), "{err}");
    assert!(err.contains("convert the file's line endings"), "{err}");
    // `\r\n` line endings are lines.
    fs::write(
        &fw,
        "input x : [128]\r\noutput y : [128]\r\nv_rd netq\r\nv_wr netq\r\nend_chain\r\n",
    )
    .expect("write");
    exits(&nnpc(&["check", fw.to_str().expect("utf-8")]), 0);
}

/// 60 chains of 2^20 iterations x 4 instructions: 251,658,240 operations.
#[test]
fn a_program_too_large_to_run_is_refused_by_every_command() {
    let dir = scratch("limits_ops");
    let fw = dir.join("iter.nnp");
    fs::write(
        &fw,
        "vector v : [128] at ivrf[0]\noutput y : [128] at ivrf[1]\nrepeat k in 0..60 {\n\
         s_wr iterations, 1048576\nv_rd ivrf[0]\nv_relu\nv_wr ivrf[1]\nend_chain\n}\n",
    )
    .expect("write");
    let fw = fw.to_str().expect("utf-8");
    let out = dir.join("out.safetensors");
    let graph = dir.join("g.swg.json");
    for args in [
        vec!["check", fw],
        vec!["run", fw, "-o", out.to_str().expect("utf-8")],
        vec!["emulate", fw, "-o", out.to_str().expect("utf-8")],
        vec!["compile", fw, "-o", graph.to_str().expect("utf-8")],
    ] {
        let o = nnpc(&args);
        exits(&o, 1);
        let m = message(&o);
        assert!(
            m.contains("the program unrolls to 251658240 operations")
                && m.contains("over the limit of 4000000"),
            "{args:?}: {m}"
        );
    }
    assert!(!out.exists() && !graph.exists());
}

/// An unused matrix of 65,536 x 65,536 at N = 4096: 16 x 16 tiles of 4096^2 f32 = 16 GiB.
#[test]
fn declarations_too_large_to_hold_are_refused() {
    let dir = scratch("limits_data");
    fs::write(dir.join("big.toml"), "native = 4096\n").expect("write");
    let fw = dir.join("dram.nnp");
    fs::write(
        &fw,
        "target \"big.toml\"\nmatrix M : [65536, 65536] at dram[0]\ninput x : [4096]\n\
         output y : [4096]\nv_rd netq\nv_wr netq\nend_chain\n",
    )
    .expect("write");
    let fw = fw.to_str().expect("utf-8");
    let out = dir.join("out.safetensors");
    for cmd in ["check", "emulate", "run"] {
        let mut args = vec![cmd, fw];
        if cmd != "check" {
            args.extend(["-o", out.to_str().expect("utf-8")]);
        }
        let o = nnpc(&args);
        exits(&o, 1);
        let m = message(&o);
        assert!(
            m.contains("the declarations hold 17179901952 bytes")
                && m.contains("over the limit of 2147483648"),
            "{cmd}: {m}"
        );
    }
}

#[test]
fn a_mistyped_builtin_target_is_suggested() {
    let fw = root().join("samples/mlp2_relu.nnp");
    let o = nnpc(&[
        "check",
        fw.to_str().expect("utf-8"),
        "--target",
        "bw-defualt",
    ]);
    exits(&o, 2);
    // miette may wrap inside the name (`bw-` / `default`): compare without white space.
    let m: String = message(&o).split_whitespace().collect();
    assert!(
        m.contains("didyoumeanthebuilt-intarget`bw-default`?"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn every_sample_checks_with_no_flags() {
    let mut checked = 0;
    for dir in ["samples", "samples/bench"] {
        let Ok(entries) = fs::read_dir(root().join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "nnp") {
                continue;
            }
            let o = nnpc(&["check", path.to_str().expect("utf-8")]);
            exits(&o, 0);
            checked += 1;
        }
    }
    assert!(checked >= 12, "{checked} samples");
}
