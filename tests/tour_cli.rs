//! A newcomer's first hour: README's tour of the CLI runs as written in a fresh clone, and
//! `nnpc data` writes the seeded data that a run without files uses, bit for bit.

mod common;

use common::{arg, nnpc, scratch, stderr};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The lines of the ```sh block under the heading `heading` of README.md.
fn readme_block(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(common::root().join("README.md")).expect("README.md");
    let lines: Vec<&str> = readme
        .lines()
        .skip_while(|l| l.trim() != heading)
        .skip_while(|l| l.trim() != "```sh")
        .skip(1)
        .take_while(|l| l.trim() != "```")
        .collect();
    lines
        .iter()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The files of a fresh clone under `dir` (of the repository), copied into `to`: what git
/// tracks, so that a file an earlier run left in the work tree cannot stand in for one.
fn copy_tracked(dir: &str, to: &Path) {
    let root = common::root();
    let listed = Command::new("git")
        .args(["ls-files", "-z", dir])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success() && !o.stdout.is_empty());
    let files: Vec<PathBuf> = match listed {
        Some(o) => o
            .stdout
            .split(|b| *b == 0)
            .filter(|f| !f.is_empty())
            .map(|f| PathBuf::from(String::from_utf8_lossy(f).into_owned()))
            .collect(),
        // Not a git checkout (a source archive): its files are the clone's.
        None => walk(&root, Path::new(dir)),
    };
    assert!(!files.is_empty(), "no files under {dir}");
    for f in files {
        let dest = to.join(&f);
        std::fs::create_dir_all(dest.parent().expect("a parent")).expect("dir");
        std::fs::copy(root.join(&f), &dest).expect("copy");
    }
}

/// The files under `dir` (relative to `root`), recursively.
fn walk(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root.join(dir))
        .expect("read dir")
        .flatten()
    {
        let rel = dir.join(e.file_name());
        match e.path().is_dir() {
            true => out.extend(walk(root, &rel)),
            false => out.push(rel),
        }
    }
    out
}

/// Every line of README's tour runs as written (through `sh`, with the built `nnpc` first on
/// `PATH`) in an empty directory holding only the clone's `samples/`, in order, and exits 0:
/// every file a line reads is one the clone has or an earlier line wrote.
#[test]
fn readme_tour_runs_as_written() {
    let lines = readme_block("## A tour of the CLI");
    assert!(lines.len() >= 10, "the tour: {lines:?}");
    let dir = scratch("readme_tour");
    copy_tracked("samples", &dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nnpc"), bin.join("nnpc")).expect("link");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for line in &lines {
        assert!(
            line.starts_with("nnpc "),
            "a tour line is an nnpc command: {line}"
        );
        let o = Command::new("sh")
            .args(["-c", line])
            .current_dir(&dir)
            .env("PATH", &path)
            .output()
            .expect("sh runs");
        assert_eq!(
            o.status.code(),
            Some(0),
            "README tour line failed: {line}\n{}",
            stderr(&o)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bit patterns of every tensor in `path`.
fn bits(path: &Path) -> BTreeMap<String, (Vec<usize>, Vec<u32>)> {
    let tensors = nnp_runtime::io::read_tensors(path).expect("a tensor file");
    tensors
        .into_iter()
        .map(|(n, t)| (n, (t.shape, t.data.iter().map(|v| v.to_bits()).collect())))
        .collect()
}

fn ok(args: &[&str]) {
    let o = nnpc(args);
    assert_eq!(o.status.code(), Some(0), "nnpc {args:?}: {}", stderr(&o));
}

/// `nnpc run` and `nnpc emulate` on the files `nnpc data --seed S --batch B` writes give the
/// bits they give on `--seed S --batch B`: on one input (lstm), on two (gru), and on a batch
/// written in more than one piece (5,000 items of mlp2_relu; pieces of 4,096), each to
/// safetensors, `.npy` and a directory of `.npy` files.
#[test]
fn data_files_give_the_seeds_bits() {
    let dir = scratch("data_bits");
    let cases = [
        ("samples/lstm.nnp", "64", "7", "w.safetensors", "x.npy"),
        ("samples/gru.nnp", "16", "3", "gru_w", "gru_x.safetensors"),
        (
            "samples/mlp2_relu.nnp",
            "5000",
            "11",
            "m.safetensors",
            "m_x",
        ),
    ];
    for (prog, batch, seed, w, x) in cases {
        let (w, x) = (dir.join(w), dir.join(x));
        ok(&[
            "data",
            prog,
            "--batch",
            batch,
            "--seed",
            seed,
            "--weights-out",
            arg(&w),
            "--inputs-out",
            arg(&x),
        ]);
        for engine in ["run", "emulate"] {
            if engine == "emulate" && batch == "5000" {
                continue; // the emulator's pieces are tested by the lstm and gru cases
            }
            let (a, b) = (dir.join("files.safetensors"), dir.join("seed.safetensors"));
            let files = [engine, prog, "--weights", arg(&w), "--inputs", arg(&x)];
            ok(&[&files[..], &["-o", arg(&a)]].concat());
            ok(&[
                engine,
                prog,
                "--batch",
                batch,
                "--seed",
                seed,
                "-o",
                arg(&b),
            ]);
            let (from_files, from_seed) = (bits(&a), bits(&b));
            assert!(!from_seed.is_empty());
            assert_eq!(from_files, from_seed, "{engine} {prog}: files vs seed");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `nnpc data` refuses: no output flag (a usage error), both outputs on one file, an
/// output on the firmware it reads, an `.npy` file for several tensors; each exit 2, naming
/// the flag.
#[test]
fn data_refusals() {
    let dir = scratch("data_refusals");
    let fw = dir.join("mlp.nnp");
    std::fs::copy(common::root().join("samples/mlp2_relu.nnp"), &fw).expect("copy");
    let same = dir.join("d.safetensors");
    let several = dir.join("w.npy");
    for (args, says) in [
        (vec!["data", arg(&fw)], "--weights-out"),
        (
            vec![
                "data",
                arg(&fw),
                "--weights-out",
                arg(&same),
                "--inputs-out",
                arg(&same),
            ],
            "same file",
        ),
        (
            vec!["data", arg(&fw), "--inputs-out", arg(&fw)],
            "--inputs-out",
        ),
        (
            vec!["data", arg(&fw), "--weights-out", arg(&several)],
            "--weights-out",
        ),
    ] {
        let o = nnpc(&args);
        let err = common::message(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(std::fs::read_to_string(&fw).is_ok_and(|t| t.contains("matrix W1")));
    assert!(!same.exists() && !several.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `nnpc diff`'s exit status is a diff tool's: 0 concordant, 1 not concordant, 2 no
/// comparison made (firmware errors, an unreadable dump, a usage error), so that a script
/// can tell a board that differs from a comparison that never ran.
#[test]
fn diff_exit_codes() {
    let dir = scratch("diff_exit_codes");
    let hw = dir.join("hw.safetensors");
    let prog = "samples/mlp2_relu.nnp";
    ok(&[
        "emulate",
        prog,
        "--batch",
        "2",
        "--seed",
        "5",
        "-o",
        arg(&hw),
    ]);
    let code = |args: &[&str]| nnpc(args).status.code();
    assert_eq!(
        code(&["diff", prog, "--hardware", arg(&hw), "--seed", "5"]),
        Some(0)
    );
    // Other seeded data: the outputs differ.
    assert_eq!(
        code(&["diff", prog, "--hardware", arg(&hw), "--seed", "6"]),
        Some(1)
    );
    let bad = dir.join("typo.nnp");
    let text = "input x : [128]\noutput y : [128]\nv_rd netq\nv_sigmm\nv_wr netq\nend_chain\n";
    std::fs::write(&bad, text).expect("write");
    // `check` reports firmware errors with 1; `diff` could not compare: 2.
    assert_eq!(code(&["check", arg(&bad)]), Some(1));
    let o = nnpc(&["diff", arg(&bad), "--hardware", arg(&hw)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("v_sigmm"), "{}", stderr(&o));
    let missing = dir.join("no_dump.safetensors");
    assert_eq!(code(&["diff", prog, "--hardware", arg(&missing)]), Some(2));
    assert_eq!(code(&["diff", prog]), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--weights` with no `--inputs` runs the seeded inputs of `--seed` (docs/files.md): a
/// weights-only file (as `nnpc train -o` writes) gives the bits of `--seed` alone, for the
/// emulator and the software graph, and `diff` on them is concordant. With `--inputs` naming
/// a file that lacks an input, the input is still an error; a weight missing from the weights
/// file is an error either way.
#[test]
fn weights_only_seeds_the_inputs() {
    let dir = scratch("weights_only");
    let prog = "samples/lstm.nnp";
    let (w, x) = (dir.join("w.safetensors"), dir.join("x.safetensors"));
    let seeded = ["--batch", "4", "--seed", "9"];
    ok(&[&["data", prog, "--weights-out", arg(&w)], &seeded[..]].concat());
    let hw = dir.join("hw.safetensors");
    for engine in ["run", "emulate"] {
        let (a, b) = (dir.join("w_only.safetensors"), dir.join("seed.safetensors"));
        ok(&[
            &[engine, prog, "--weights", arg(&w), "-o", arg(&a)],
            &seeded[..],
        ]
        .concat());
        ok(&[&[engine, prog, "-o", arg(&b)], &seeded[..]].concat());
        let (from_file, from_seed) = (bits(&a), bits(&b));
        assert!(!from_seed.is_empty());
        assert_eq!(from_file, from_seed, "{engine}: weights-only vs seed");
        if engine == "emulate" {
            std::fs::rename(&a, &hw).expect("rename");
        }
    }
    let diff = ["diff", prog, "--weights", arg(&w), "--hardware", arg(&hw)];
    ok(&[&diff[..], &seeded[..]].concat());
    // An inputs file is given, and it holds the weights, not the inputs: the inputs are missing.
    let o = nnpc(&["emulate", prog, "--weights", arg(&w), "--inputs", arg(&w)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A weights file that lacks the weights (the inputs written as weights).
    ok(&[&["data", prog, "--inputs-out", arg(&x)], &seeded[..]].concat());
    let o = nnpc(&["emulate", prog, "--weights", arg(&x)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no tensor named"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
