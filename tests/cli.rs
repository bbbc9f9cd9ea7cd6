//! The command line as users meet it: exit codes of `nnpc check` (0 clean, 1 firmware errors,
//! 2 unreadable input), `--help` with an example on every command, and clear errors (never a
//! panic or a backtrace) for bad files.

mod common;

use common::{nnpc, stderr, stdout};
use std::path::PathBuf;

fn scratch_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nnpc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

#[test]
fn check_exit_codes() {
    // Every sample is clean.
    let o = nnpc(&["check", "samples/lstm.nnp"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // A typo in a mnemonic: a firmware error (1), with a suggestion and the line.
    let bad = scratch_file(
        "typo.nnp",
        "input x : [128]\noutput y : [128]\nv_rd netq\nv_sigmm\nv_wr netq\nend_chain\n",
    );
    let o = nnpc(&["check", bad.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("v_sigmm") && err.contains("v_sigm"), "{err}");
    assert!(err.contains("typo.nnp:4"), "{err}");

    // A file that does not exist, and a target that does not exist: unreadable input (2).
    let o = nnpc(&["check", "samples/no_such_file.nnp"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no_such_file.nnp"), "{}", stderr(&o));
    let o = nnpc(&[
        "check",
        "samples/lstm.nnp",
        "--target",
        "no_such_target.toml",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no_such_target"), "{}", stderr(&o));
}

/// `nnpc check --json` when the file or target cannot be used: exit 2, and the error as the
/// array's one object on stdout; an invalid target file's at its line and column there.
#[test]
fn check_json_reports_unusable_files_as_objects() {
    let target = scratch_file(
        "bad_target.toml",
        "native = 64\n[numerics]\naccumulation = \"fp33\"\n",
    );
    let json = |args: &[&str]| {
        let o = nnpc(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
        assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
        v[0].clone()
    };
    let t = target.to_str().expect("utf-8");
    let d = json(&["check", "samples/lstm.nnp", "--target", t, "--json"]);
    assert_eq!(
        (d["code"].clone(), d["file"].clone()),
        ("nnp::target".into(), t.into())
    );
    assert_eq!(
        (d["start"]["line"].clone(), d["start"]["column"].clone()),
        (3.into(), 16.into())
    );
    assert_eq!(d["end"]["column"], 22, "{d}");
    assert!(
        d["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown variant `fp33`")),
        "{d}"
    );
    let d = json(&["check", "samples/no_such_file.nnp", "--json"]);
    assert_eq!(d["code"], "nnp::io");
    assert!(d["start"].is_null());
    assert!(
        d["message"]
            .as_str()
            .is_some_and(|m| m.contains("no_such_file.nnp`: No such file")),
        "{d}"
    );
}

/// Every subcommand of `nnpc`.
const COMMANDS: [&str; 12] = [
    "check",
    "graph",
    "compile",
    "run",
    "emulate",
    "diff",
    "quantize",
    "bench",
    "train",
    "data",
    "score",
    "completions",
];

/// `nnpc CMD --help`.
fn help(cmd: &str) -> String {
    let o = nnpc(&[cmd, "--help"]);
    assert!(o.status.success(), "{cmd} --help");
    stdout(&o)
}

/// The example lines of a help text: those under `Examples:` up to the first blank line.
fn help_examples(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Examples:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .collect()
}

/// The options of a help text that take a value (`--target <NAME|FILE>`, `-o, --output
/// <FILE>`), by their long names.
fn options_with_values(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix('-')
                .filter(|_| l.len() > 4 && &l[2..4] == ", ")
                .map_or(l, |_| &l[4..]);
            let (flag, rest) = l.strip_prefix("--")?.split_once(' ')?;
            rest.starts_with('<').then(|| format!("--{flag}"))
        })
        .collect()
}

/// The commands of an example line as the shell would split them, for what the examples use:
/// quotes, `&&` between commands, `| ...` after one (dropped: the reader of its output), a
/// `# comment`, and a description after two spaces or more (dropped).
fn example_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut quote = None;
    let mut piped = false;
    let mut chars = line.chars().peekable();
    let end_word = |commands: &mut Vec<Vec<String>>, word: &mut Option<String>, piped: bool| {
        if let Some(w) = word.take().filter(|_| !piped) {
            commands.last_mut().expect("a command").push(w);
        }
    };
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, ' ') if chars.peek() == Some(&' ') => break,
            (None, ' ') => end_word(&mut commands, &mut word, piped),
            (None, '#') if word.is_none() => break,
            (None, '|') => {
                end_word(&mut commands, &mut word, piped);
                piped = true;
            }
            (None, '&') if chars.peek() == Some(&'&') => {
                chars.next();
                end_word(&mut commands, &mut word, piped);
                commands.push(Vec::new());
                piped = false;
            }
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    end_word(&mut commands, &mut word, piped);
    commands
}

#[test]
fn every_command_has_help_with_an_example() {
    for cmd in COMMANDS {
        let out = help(cmd);
        assert!(
            out.contains("Examples:") && out.contains(&format!("nnpc {cmd}")),
            "{cmd} --help has no example:\n{out}"
        );
    }
}

/// Every example of every `--help` runs and exits 0, so that the examples cannot rot: each
/// needs only files in samples/ or files an example of the same command writes before it
/// (`nnpc data` makes weights and inputs), and one that names any other file fails the test.
/// They run as written, in a scratch copy of samples/ (`/tmp/...` paths moved into it),
/// except for time: batches of at most 1,024, and `bench` with `--reps 1 --kernel-len 4096`.
/// Commands other than `nnpc` (`dot`, `jq`) are left out.
#[test]
fn every_help_example_runs() {
    let dir = common::scratch("help_examples");
    copy_dir(&common::root().join("samples"), &dir.join("samples"));
    std::fs::create_dir_all(dir.join("tmp")).expect("tmp dir");
    let mut ran = Vec::new();
    // The options that take a value, of each command.
    let valued_of: std::collections::BTreeMap<&str, Vec<String>> = COMMANDS
        .iter()
        .map(|cmd| (*cmd, options_with_values(&help(cmd))))
        .collect();
    for cmd in COMMANDS {
        let help = help(cmd);
        assert!(
            valued_of[cmd].contains(&"--target".to_string())
                || ["quantize", "completions"].contains(&cmd),
            "{cmd}: {:?}",
            valued_of[cmd]
        );
        // Files the examples so far have written.
        let mut made: Vec<String> = Vec::new();
        for line in help_examples(&help) {
            let mut runs = Vec::new();
            for words in example_commands(&line) {
                if words.first().map(String::as_str) != Some("nnpc") {
                    continue;
                }
                let sub = words.get(1).cloned().unwrap_or_default();
                let valued = &valued_of[sub.as_str()];
                let mut args = Vec::new();
                let mut outputs = Vec::new();
                let mut i = 2;
                while i < words.len() {
                    let w = &words[i];
                    let value = if (w.starts_with("--") && valued.contains(w)) || w == "-o" {
                        words.get(i + 1).cloned()
                    } else {
                        None
                    };
                    let file = match (w.as_str(), &value) {
                        // Written by the command (`diff --trace` reads).
                        ("-o" | "--output", Some(v)) => {
                            outputs.push(v.clone());
                            None
                        }
                        ("--weights-out" | "--inputs-out", Some(v)) => {
                            outputs.push(v.clone());
                            None
                        }
                        ("--trace", Some(v)) if sub != "diff" => {
                            outputs.push(v.clone());
                            None
                        }
                        (_, Some(v))
                            if [
                                "--target",
                                "--weights",
                                "--inputs",
                                "--hardware",
                                "--trace",
                                "--data",
                            ]
                            .contains(&w.as_str()) =>
                        {
                            // A built-in target is a name, not a file.
                            (v.contains('/') || v.contains('.')).then(|| v.clone())
                        }
                        (_, Some(_)) => None,
                        _ if w.starts_with('-') => None,
                        // `completions`' one positional is a shell's name.
                        _ if sub == "completions" => None,
                        _ => Some(w.clone()),
                    };
                    // A file an earlier example wrote, or one in a directory it wrote.
                    let written = |f: &String| {
                        made.iter()
                            .chain(&outputs)
                            .any(|m| f == m || f.starts_with(&format!("{m}/")))
                    };
                    if let Some(f) = file {
                        assert!(
                            f.starts_with("samples/") || written(&f),
                            "`{line}` (`{cmd} --help`) needs `{f}`, which no earlier example \
                             of `{cmd}` writes"
                        );
                    }
                    args.push(w.clone());
                    if let Some(v) = value {
                        let capped = match v.parse::<u64>() {
                            Ok(b) if w == "--batch" => b.min(1024).to_string(),
                            _ => v,
                        };
                        args.push(capped);
                        i += 1;
                    }
                    i += 1;
                }
                made.extend(outputs.iter().filter(|o| *o != "-").cloned());
                if sub == "bench" {
                    args.extend(["--reps", "1", "--kernel-len", "4096"].map(String::from));
                }
                let args: Vec<String> = std::iter::once(sub)
                    .chain(args)
                    .map(|a| match a.strip_prefix("/tmp/") {
                        Some(rest) => common::arg(&dir.join("tmp").join(rest)).to_string(),
                        None => a,
                    })
                    .collect();
                runs.push(args);
            }
            for args in runs {
                let o = std::process::Command::new(env!("CARGO_BIN_EXE_nnpc"))
                    .args(&args)
                    .current_dir(&dir)
                    .output()
                    .expect("nnpc runs");
                assert_eq!(
                    o.status.code(),
                    Some(0),
                    "`{line}` (`{cmd} --help`) failed: nnpc {}\n{}",
                    args.join(" "),
                    stderr(&o)
                );
                ran.push(args[0].clone());
            }
        }
    }
    for cmd in COMMANDS {
        assert!(
            ran.iter().any(|r| r == cmd),
            "no example of `{cmd}` ran: {ran:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Copy the directory `from` to `to`, recursively.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("dir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        let path = e.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(e.file_name()));
        } else {
            std::fs::copy(&path, to.join(e.file_name())).expect("copy");
        }
    }
}

#[test]
fn bad_files_are_clear_errors_not_panics() {
    let garbage = scratch_file("garbage.safetensors", "this is not a safetensors file");
    let g = garbage.to_str().expect("utf-8");
    for args in [
        vec!["run", "samples/mlp2_relu.nnp", "--weights", g],
        vec!["emulate", "samples/mlp2_relu.nnp", "--inputs", g],
        vec!["diff", "samples/mlp2_relu.nnp", "--hardware", g],
    ] {
        let o = nnpc(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("garbage.safetensors"), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("stack backtrace"),
            "{args:?}: {err}"
        );
    }
}

/// A library error's fix (its `miette::Diagnostic::help`) is miette's help line, under the
/// message; and a tensor missing from the files names what they do hold.
#[test]
fn an_errors_fix_is_its_help_line() {
    use nnp_runtime::io::{Dtype, write_tensors};
    use std::collections::BTreeMap;
    let dir = common::scratch("help_line");
    let misnamed = dir.join("weights.npy");
    let t = nnp_runtime::host::Tensor::zeros(vec![3]);
    write_tensors(
        &misnamed,
        &BTreeMap::from([("weights".to_string(), t)]),
        Dtype::F32,
    )
    .expect("npy");
    let o = nnpc(&[
        "run",
        "samples/mlp2_relu.nnp",
        "--weights",
        common::arg(&misnamed),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let message = common::message(&o);
    assert!(
        message.contains("tensors found: `weights` help: add it to the weights/inputs file"),
        "{}",
        stderr(&o)
    );
    assert!(!message.contains("; help:"), "{}", stderr(&o));
    let help_line = stderr(&o)
        .lines()
        .any(|l| l.trim_start().starts_with("help: add it"));
    assert!(help_line, "{}", stderr(&o));
}

/// `nnpc run samples/lstm.nnp --batch 3` with `extra` flags: the output file's bytes.
fn lstm_run_bytes(dir: &str, extra: &[&str]) -> Vec<u8> {
    let out = common::scratch(dir).join("out.safetensors");
    let mut args = vec!["run", "samples/lstm.nnp", "--batch", "3", "-o"];
    args.push(common::arg(&out));
    args.extend(extra);
    let o = nnpc(&args);
    assert_eq!(o.status.code(), Some(0), "{extra:?}: {}", stderr(&o));
    std::fs::read(&out).expect("output written")
}

/// A batch in chunks of items (`--chunk-items`, here 1 and 2 of 3) writes the same bytes as
/// in one pass, and `nnpc diff` in chunks finds the emulator's dump concordant.
#[test]
fn runs_in_chunks_give_the_same_bytes() {
    let whole = lstm_run_bytes("chunks_whole", &[]);
    assert!(!whole.is_empty());
    assert_eq!(whole, lstm_run_bytes("chunks_two", &["--chunk-items", "2"]));
    let hw = common::scratch("chunks_diff").join("hw.safetensors");
    let h = common::arg(&hw);
    let o = nnpc(&["emulate", "samples/lstm.nnp", "--batch", "3", "-o", h]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = nnpc(&[
        "diff",
        "samples/lstm.nnp",
        "--hardware",
        h,
        "--chunk-items",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("(concordant)"), "{}", stdout(&o));
}

/// `nnpc run` writes each chunk's outputs to the file as it is done; the files are the bytes
/// `nnpc emulate` writes for the same data in one piece (the emulator's own outputs), in the
/// safetensors, `.npy` and directory kinds, in tiles and as f32.
#[test]
fn streamed_outputs_are_the_emulators_bytes() {
    let dir = common::scratch("streamed");
    for (name, extra) in [
        ("out.safetensors", vec![]),
        ("out.npy", vec!["--layout", "tiles", "--dtype", "f32"]),
        ("out_dir", vec!["--layout", "tiles"]),
    ] {
        let run = dir.join("run").join(name);
        let emu = dir.join("emu").join(name);
        for (cmd, path) in [("run", &run), ("emulate", &emu)] {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            let mut args = vec![cmd, "samples/mlp2_relu.nnp", "--batch", "7"];
            args.extend(["--chunk-items", "3"].iter().filter(|_| cmd == "run"));
            args.extend(["-o", common::arg(path)]);
            args.extend(&extra);
            let o = nnpc(&args);
            assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        }
        let bytes = |p: &std::path::Path| -> Vec<(String, Vec<u8>)> {
            if !p.is_dir() {
                return vec![(String::new(), std::fs::read(p).expect("file"))];
            }
            let mut files: Vec<_> = std::fs::read_dir(p)
                .expect("dir")
                .map(|e| {
                    let e = e.expect("entry");
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name, std::fs::read(e.path()).expect("file"))
                })
                .collect();
            files.sort();
            files
        };
        let (r, e) = (bytes(&run), bytes(&emu));
        assert!(
            !r.is_empty() && r.iter().all(|(_, b)| b.len() > 128),
            "{name}"
        );
        assert!(r == e, "{name}: the run's files differ from the emulator's");
    }
}

/// `nnpc run` reads inputs from files and writes its outputs and trace a chunk at a time: with
/// chunks of 3 out of 7 items it writes the output and trace bytes the emulator writes from
/// the same files (f16 `.npy`, a directory of f32 `.npy`), and from f32 files holding the
/// seeded random data it writes the bytes of the run on that random data. The emulator in
/// pieces of 3 writes the bytes of the whole emulation. A NaN in item 5 fails the run (and the
/// emulator in pieces) in its chunk with the message the emulator gives for the whole batch,
/// and leaves no output or trace behind.
#[test]
fn inputs_from_files_are_read_chunk_by_chunk() {
    use nnp_runtime::host::HostData;
    use nnp_runtime::io::{Dtype, write_tensors};
    let dir = common::scratch("fed");
    let program = nnpc::load_program(common::root().join("samples/mlp2_relu.nnp"), None)
        .expect("sample loads");
    let data = HostData::random(&program, 7, 11);
    let w = dir.join("w.safetensors");
    write_tensors(&w, &data.weights, Dtype::F32).expect("weights");
    let x16 = dir.join("x16").join("x.npy");
    let x32 = dir.join("x32");
    std::fs::create_dir_all(x16.parent().expect("parent")).expect("dir");
    // An f16 file holds f16 values: the inputs' fp16 roundings.
    let inputs16 = data.inputs.iter().map(|(name, t)| {
        let mut t = t.clone();
        t.data
            .iter_mut()
            .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
        (name.clone(), t)
    });
    write_tensors(&x16, &inputs16.collect(), Dtype::F16).expect("inputs");
    write_tensors(&x32, &data.inputs, Dtype::F32).expect("inputs");
    // Every run writes its outputs to `out` and its trace to `out.jsonl`; `run` goes in chunks
    // of 3 items, `emulate` whole, `emulate-pieces` in pieces of 3.
    let run = |cmd: &str, inputs: Option<&std::path::Path>, out: &str| {
        let (cmd, chunked) = match cmd {
            "emulate-pieces" => ("emulate", true),
            cmd => (cmd, cmd == "run"),
        };
        let (out, trace) = (dir.join(out), dir.join(format!("{out}.jsonl")));
        let mut args = vec![cmd, "samples/mlp2_relu.nnp", "-o", common::arg(&out)];
        args.extend(["--trace", common::arg(&trace)]);
        match inputs {
            Some(x) => args.extend(["--weights", common::arg(&w), "--inputs", common::arg(x)]),
            None => args.extend(["--batch", "7", "--seed", "11"]),
        }
        args.extend(["--chunk-items", "3"].iter().filter(|_| chunked));
        let o = nnpc(&args);
        (o, out, trace)
    };
    let bytes = |(o, out, trace): (std::process::Output, PathBuf, PathBuf)| {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let read = |p| std::fs::read(p).expect("output");
        (read(out), read(trace))
    };
    for (x, name) in [(&x16, "f16.safetensors"), (&x32, "f32.safetensors")] {
        let fed = bytes(run("run", Some(x), &format!("run-{name}")));
        assert!(fed.0.len() > 1000 && fed.1.len() > 1000);
        let emulated = bytes(run("emulate", Some(x), &format!("emu-{name}")));
        assert!(
            fed.0 == emulated.0,
            "{name}: the run's file differs from the emulator's"
        );
        assert!(
            fed.1 == emulated.1,
            "{name}: the run's trace differs from the emulator's"
        );
        let pieces = bytes(run("emulate-pieces", Some(x), &format!("pieces-{name}")));
        assert!(pieces == emulated, "{name}: the emulator in pieces of 3");
    }
    // The same values and trace (the files' metadata says where the data came from).
    let values = |(o, out, trace): (std::process::Output, PathBuf, PathBuf)| {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let tensors = nnp_runtime::io::read_tensors(&out).expect("output");
        (tensors, std::fs::read(trace).expect("trace"))
    };
    let random = values(run("run", None, "random.safetensors"));
    assert!(random == values(run("run", Some(&x32), "again.safetensors")));
    // A NaN at value 7 of item 5: flat index 5 * T * 200 + 7.
    let mut bad = data.inputs.clone();
    let x = bad.get_mut("x").expect("x");
    let per_item = x.data.len() / 7;
    x.data[5 * per_item + 7] = f32::NAN;
    let xnan = dir.join("xnan");
    write_tensors(&xnan, &bad, Dtype::F32).expect("inputs");
    let (o, out, trace) = run("run", Some(&xnan), "nan.safetensors");
    assert_eq!(o.status.code(), Some(2));
    let want = format!("tensor `x` holds NaN at flat index {}", 5 * per_item + 7);
    assert!(common::message(&o).contains(&want), "{}", stderr(&o));
    let (emu, ..) = run("emulate", Some(&xnan), "nan-emu.safetensors");
    assert_eq!(common::message(&o), common::message(&emu));
    assert!(!out.exists() && !trace.exists());
    let (emu, out, trace) = run("emulate-pieces", Some(&xnan), "nan-pieces.safetensors");
    assert_eq!(common::message(&o), common::message(&emu));
    assert!(!out.exists() && !trace.exists());
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".nan"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// An output path that cannot be written is refused before the run, naming the path, and
/// leaves nothing behind.
#[test]
fn an_unwritable_output_fails_before_the_run() {
    let dir = common::scratch("unwritable");
    let bad = dir
        .join("no")
        .join("such")
        .join("dir")
        .join("out.safetensors");
    let o = nnpc(&[
        "run",
        "samples/lstm.nnp",
        "--batch",
        "3",
        "-o",
        common::arg(&bad),
    ]);
    let err = common::message(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // (miette may wrap the path after a slash: compared without spaces.)
    let want = format!("cannot write `{}`", bad.display()).replace(' ', "");
    assert!(err.replace(' ', "").contains(&want), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 0);
}

/// Ctrl-C (SIGINT) during `nnpc run -o` stops the run after its current chunk with exit
/// status 130 and a message, and removes the output file's temporary copy: nothing is left.
#[cfg(unix)]
#[test]
fn an_interrupted_run_leaves_nothing_behind() {
    let dir = common::scratch("interrupted");
    let out = dir.join("out.safetensors");
    // Chunks of one item: the run takes many seconds, and stops within one item.
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_nnpc"))
        .args(["run", "samples/mlp2_relu.nnp", "--batch", "200000"])
        .args(["--chunk-items", "1", "-o", common::arg(&out)])
        .current_dir(common::root())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("nnpc starts");
    // The temporary file appears once the run's handler is set, just before the first chunk.
    let started = std::time::Instant::now();
    while std::fs::read_dir(&dir).expect("dir").count() == 0 {
        assert!(started.elapsed().as_secs() < 120, "no temporary file");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let o = child.wait_with_output().expect("nnpc ends");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted after ") && err.contains(" of 200000 input sets"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 0, "{err}");
}

#[test]
fn run_gives_the_same_bytes_on_the_float_path() {
    // `--float-matmul` forces the float BLAS path where the integer kernel would run: the
    // output file must be byte-identical (the emulator comparison of both paths is in the
    // concordance suite).
    let a = lstm_run_bytes("float_matmul_int", &[]);
    assert!(!a.is_empty());
    assert_eq!(a, lstm_run_bytes("float_matmul_float", &["--float-matmul"]));
}

#[test]
fn run_on_cuda_gives_the_same_bytes_or_says_how_to_get_it() {
    if cfg!(feature = "cuda") {
        // A build with the feature (on a machine with a GPU): the graph on the GPU gives the
        // CPU's bytes.
        let a = lstm_run_bytes("cuda_cpu", &[]);
        assert_eq!(a, lstm_run_bytes("cuda_gpu", &["--device", "cuda"]));
        return;
    }
    let o = nnpc(&["run", "samples/lstm.nnp", "--device", "cuda"]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    // The message as words (miette wraps it in a box that depends on the terminal width).
    let words: Vec<&str> = err.split_whitespace().filter(|w| *w != "│").collect();
    assert!(
        words
            .join(" ")
            .contains("build it with `scripts/cuda-build.sh`"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// `nnpc bench --shards K` runs the warm runs in K shards and says so (`shards` in `--json`);
/// 0 shards is a usage error (2) naming the option, not a silent whole batch.
#[test]
fn bench_shards_are_reported_and_zero_is_refused() {
    let args = |k: &'static str| {
        let mut a = vec!["bench", "samples/mlp2_relu.nnp", "--batch", "6"];
        a.extend(["--reps", "1", "--skip-emulator", "--json", "--shards", k]);
        a
    };
    let o = nnpc(&args("3"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert_eq!(r["software_graph"]["shards"], 3);
    let o = nnpc(&args("0"));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--shards"), "{}", stderr(&o));
}

/// Input sets that cannot fit in memory at once are refused (2) before anything is
/// allocated, with the bytes and the fix: `nnpc bench`'s whole batch (`usize::MAX` items
/// overflow the byte count itself), and a `--chunk-items` of `nnpc run` or `nnpc emulate`
/// as large as its batch; output files of `usize::MAX` items. Before, the allocation aborted
/// the process, or a byte count overflowed.
#[test]
fn input_sets_larger_than_memory_are_refused() {
    // Exit status 2 and each of `says` in the report (its lines joined: miette wraps them and
    // draws a bar in front), no panic and no failed allocation.
    let refused = |args: &[&str], says: &[&str]| {
        let o = nnpc(args);
        let words = stderr(&o);
        let words: Vec<&str> = words.split_whitespace().filter(|w| *w != "│").collect();
        let err = words.join(" ");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        for s in says {
            assert!(err.contains(s), "{args:?}: {err}");
        }
        let crashed = err.contains("panicked") || err.contains("memory allocation");
        assert!(!crashed, "{args:?}: {err}");
    };
    let (huge, max) = ("100000000000000", "18446744073709551615");
    let memory = "GiB of memory available";
    for batch in [huge, max] {
        let args = ["bench", "samples/mlp2_relu.nnp", "--batch", batch];
        refused(&args, &[memory, "nnpc run --batch"]);
    }
    // Outputs of `usize::MAX` items: past the batch limit (2^62 bytes of inputs and outputs;
    // mlp2_relu's 6,400 bytes per item: 800 input and 400 output elements, as f32 and f64).
    let out = common::scratch("too_large").join("out.safetensors");
    let out = common::arg(&out);
    for command in ["run", "emulate"] {
        let mut args = vec![command, "samples/mlp2_relu.nnp", "--batch"];
        let chunks = [huge, "--chunk-items", huge];
        refused(
            &[&args[..], &chunks].concat(),
            &[memory, "a smaller `--chunk-items`"],
        );
        args.extend([max, "-o", out]);
        refused(
            &args,
            &[
                "--batch 18446744073709551615",
                "the limit is 720575940379279 input sets",
            ],
        );
    }
}

/// A count of 0 (`--batch`, `--reps`, `--emu-batch`, `--native`, `--chunk-items`) is a usage
/// error (2) naming the flag, before any work: before, `--batch 0` ran one item,
/// `--emu-batch 0` timed one emulated item against the whole batch (an inflated ratio) and
/// `--native 0` quantized in blocks of one element, all silently. A count of 1 is accepted by
/// the same flags.
#[test]
fn zero_counts_are_usage_errors_naming_the_flag() {
    let quantize_input = common::scratch("zero_counts").join("outputs.safetensors");
    let q = common::arg(&quantize_input);
    let o = nnpc(&["run", "samples/mlp2_relu.nnp", "--batch", "2", "-o", q]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let fast = ["--reps", "1", "--skip-emulator"];
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("--batch", vec!["run", "samples/mlp2_relu.nnp"]),
        ("--batch", vec!["emulate", "samples/mlp2_relu.nnp"]),
        (
            "--batch",
            [&["bench", "samples/mlp2_relu.nnp"][..], &fast].concat(),
        ),
        (
            "--reps",
            vec!["bench", "samples/mlp2_relu.nnp", "--skip-emulator"],
        ),
        (
            "--emu-batch",
            vec![
                "bench",
                "samples/mlp2_relu.nnp",
                "--batch",
                "2",
                "--reps",
                "1",
            ],
        ),
        ("--native", vec!["quantize", "--format", "bfp(mant = 5)", q]),
        ("--chunk-items", vec!["run", "samples/mlp2_relu.nnp"]),
        (
            "--chunk-items",
            vec!["diff", "samples/mlp2_relu.nnp", "--hardware", q],
        ),
    ];
    for (flag, base) in cases {
        for (value, code) in [("0", 2), ("1", 0)] {
            let mut a = base.clone();
            a.extend([flag, value]);
            let o = nnpc(&a);
            assert_eq!(o.status.code(), Some(code), "{a:?}: {}", stderr(&o));
            if code == 2 {
                let err = stderr(&o);
                assert!(
                    err.contains(flag) && err.contains("at least 1"),
                    "{a:?}: {err}"
                );
                assert!(!err.contains("panicked"), "{err}");
            }
        }
    }
}

/// Under a target with `nonfinite = "error"`, `nnpc run`, `nnpc diff` and `nnpc emulate` stop
/// at the same NaN/Inf with the same message and exit status 1, writing nothing: the lowest
/// item that has one, at its first in execution order. Item 1 overflows at `v_exp` (e^12),
/// item 2 at `mv_mul` (2 x 60000), item 3 on load (65520 rounds to inf): item 1's `v_exp`
/// (not the `v_relu` after it, with which the graph fuses it), however the batch is chunked. A
/// matrix that overflows on load stops every item first.
#[test]
fn forbidden_nonfinite_values_stop_every_engine_alike() {
    use nnp_runtime::host::Tensor;
    use nnp_runtime::io::{Dtype, write_tensors};
    use std::collections::BTreeMap;
    let dir = common::scratch("nonfinite");
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    };
    let prog = file(
        "p.nnp",
        "matrix W : [4, 4] at mrf[0]\ninput x : [1, 4]\noutput y : [1, 4]\n\
         s_wr rows, 1\nv_rd netq\nv_wr ivrf[0]\nend_chain\n\
         s_wr rows, 1\ns_wr cols, 1\nv_rd ivrf[0]\nmv_mul mrf[W]\nv_exp\nv_relu\nv_wr netq\nend_chain\n",
    );
    let target = file(
        "err.toml",
        "name = \"err\"\n[numerics]\nnonfinite = \"error\"\n",
    );
    let tensors = |file: &str, name: &str, shape: &[usize], data: Vec<f32>| {
        let t = Tensor::new(shape.to_vec(), data).expect("shape");
        let path = dir.join(file);
        write_tensors(&path, &BTreeMap::from([(name.to_string(), t)]), Dtype::F32).expect("write");
        path
    };
    let mut w = vec![0.0; 16];
    (0..4).for_each(|i| w[i * 5] = 2.0);
    let good_w = tensors("w.safetensors", "W", &[4, 4], w.clone());
    w[2 * 4 + 3] = 65520.0;
    let bad_w = tensors("bad_w.safetensors", "W", &[4, 4], w);
    let mut x = vec![1.0; 16];
    x[4] = 6.0;
    x[8] = 60000.0;
    x[12 + 1] = 65520.0;
    let x = tensors("x.safetensors", "x", &[4, 1, 4], x);
    let hw = tensors("hw.safetensors", "y", &[4, 1, 4], vec![0.0; 16]);
    let out = dir.join("out.safetensors");

    let stop = |cmd: &str, weights: &std::path::Path, extra: &[&str]| -> String {
        let mut args = vec![cmd, common::arg(&prog), "--target", common::arg(&target)];
        args.extend([
            "--weights",
            common::arg(weights),
            "--inputs",
            common::arg(&x),
        ]);
        if cmd == "diff" {
            args.extend(["--hardware", common::arg(&hw)]);
        } else {
            args.extend(["-o", common::arg(&out)]);
        }
        args.extend(extra);
        let o = nnpc(&args);
        // A runtime error of the firmware: 1, and for diff 2 (no comparison made).
        let want = if cmd == "diff" { 2 } else { 1 };
        assert_eq!(
            o.status.code(),
            Some(want),
            "{cmd} {extra:?}: {}",
            stderr(&o)
        );
        assert!(!out.exists(), "{cmd} {extra:?} wrote its output");
        let m = common::message(&o);
        assert!(!m.contains("stack backtrace"), "{m}");
        m
    };
    let emulated = stop("emulate", &good_w, &[]);
    assert!(
        emulated.contains(
            "`v_exp` produced inf in lane 0 and the target forbids NaN/Inf (line 12, chain 1, \
             iteration 0, batch item 1)"
        ),
        "{emulated}"
    );
    for (cmd, extra) in [
        ("run", &[][..]),
        ("run", &["--chunk-items", "1"][..]),
        ("run", &["--chunk-items", "3"][..]),
        ("emulate", &["--chunk-items", "1"][..]),
        ("diff", &["--chunk-items", "1"][..]),
    ] {
        assert_eq!(stop(cmd, &good_w, extra), emulated, "{cmd} {extra:?}");
    }
    // A compiled graph keeps the checks; run alone it has no source text to show.
    let graph = dir.join("p.swg.json");
    let args = [
        "compile",
        common::arg(&prog),
        "--target",
        common::arg(&target),
    ];
    let o = nnpc(&[&args[..], &["-o", common::arg(&graph)]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let o = nnpc(&[
        "run",
        common::arg(&graph),
        "--weights",
        common::arg(&good_w),
        "--inputs",
        common::arg(&x),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let m = common::message(&o);
    assert!(
        m.contains("(line 12, chain 1, iteration 0, batch item 1)"),
        "{m}"
    );
    assert!(!m.contains("Failed to read"), "{m}");
    // Lane 2 x 128 + 3 of the matrix's first tile (N = 128), item 0, at its declaration.
    let emulated = stop("emulate", &bad_w, &[]);
    assert!(
        emulated.contains(
            "`host load (rounding to the storage format)` produced inf in lane 259 and the \
             target forbids NaN/Inf (line 1, chain 0, iteration 0, batch item 0)"
        ),
        "{emulated}"
    );
    assert_eq!(stop("run", &bad_w, &["--chunk-items", "1"]), emulated);
}

/// Whether the message `m` holds `want`, spaces aside (miette may wrap a path after a slash).
fn has(m: &str, want: &str) -> bool {
    m.replace(' ', "").contains(&want.replace(' ', ""))
}

/// Run `nnpc ARGS` with stdout and stderr given (a closed pipe, `/dev/full`); the other stream
/// is captured.
fn nnpc_to(
    args: &[&str],
    out: std::process::Stdio,
    err: std::process::Stdio,
) -> (Option<i32>, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_nnpc"))
        .args(args)
        .current_dir(common::root())
        .stdout(out)
        .stderr(err)
        .output()
        .expect("nnpc runs");
    // (`output` captures only the stream left piped.)
    let text = [stdout(&o), stderr(&o)].concat();
    (o.status.code(), text)
}

/// A pipe whose reader is already closed (`nnpc ... | head -0`): every write gets EPIPE.
fn closed_pipe() -> std::process::Stdio {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    writer.into()
}

/// A reader that stops early (`| head`) ends the output quietly: no panic, nothing on stderr,
/// and the exit status of the work (0, or 1 for a firmware with errors, 2 for a file that is
/// not firmware), whichever stream it reads. Any other write error (`> /dev/full`) fails with
/// exit status 2, saying so where stderr can be written.
#[test]
fn closed_pipes_end_quietly_and_full_disks_are_errors() {
    use std::process::Stdio;
    let dir = common::scratch("closed_pipes");
    let graph = dir.join("lstm.swg.json");
    let o = nnpc(&["compile", "samples/lstm.nnp", "-o", common::arg(&graph)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bad = dir.join("bad.nnp");
    std::fs::write(&bad, "v_rd netq\nv_sigmm\nv_wr netq\nend_chain\n").expect("write");
    let (graph, bad) = (common::arg(&graph), common::arg(&bad));
    let writers: [&[&str]; 7] = [
        &["compile", "samples/lstm.nnp", "-o", "-"],
        &["check", "samples/lstm.nnp"],
        &["run", "samples/lstm.nnp", "--json"],
        &["run", "samples/mlp2_relu.nnp"],
        &["emulate", "samples/mlp2_relu.nnp", "--json"],
        &["check", "samples/lstm.nnp", "--json"],
        &["graph", "samples/lstm.nnp"],
    ];
    for args in writers {
        let (code, err) = nnpc_to(args, closed_pipe(), Stdio::piped());
        assert_eq!((code, err.as_str()), (Some(0), ""), "{args:?} | head -0");
    }
    // Diagnostics on stderr, into a closed pipe: the check's own status (its success line
    // is on stdout).
    for (args, want, said) in [
        (
            &["check", "samples/lstm.nnp"][..],
            0,
            "samples/lstm.nnp: ok (0 warnings)\n",
        ),
        (&["check", bad][..], 1, ""),
        (&["check", graph][..], 2, ""),
        (&["emulate", graph][..], 2, ""),
    ] {
        let (code, out) = nnpc_to(args, Stdio::piped(), closed_pipe());
        assert_eq!(
            (code, out.as_str()),
            (Some(want), said),
            "{args:?} 2>&1 | head -0"
        );
    }
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    let full = || {
        let f = std::fs::OpenOptions::new().write(true).open("/dev/full");
        Stdio::from(f.expect("/dev/full"))
    };
    for args in writers {
        let (code, err) = nnpc_to(args, full(), Stdio::piped());
        assert_eq!(code, Some(2), "{args:?} > /dev/full: {err}");
        let err = err.replace('\n', " ");
        assert!(
            err.contains("cannot write to stdout: No space left on device"),
            "{args:?} > /dev/full: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // Where stderr itself is full, the status alone says it.
    // (`check`'s success line goes to stdout: a writer above.)
    let (code, out) = nnpc_to(&["check", bad], Stdio::piped(), full());
    assert_eq!(code, Some(2), "check {bad} 2> /dev/full: {out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An empty tensor (a 0 in its shape, along the block axis or not) quantizes to an empty
/// tensor of the same shape, written and reported as 0 elements; never a panic.
#[test]
fn empty_tensors_quantize_to_empty_tensors() {
    use nnp_runtime::host::Tensor;
    use nnp_runtime::io::{Dtype, read_tensors, write_tensors};
    use std::collections::BTreeMap;
    let dir = common::scratch("empty_quantize");
    for (shape, axes) in [
        (vec![0, 5], &["0", "1", "-1"][..]),
        (vec![5, 0], &["0", "-1"][..]),
        (vec![2, 0, 3], &["0", "1", "2"][..]),
    ] {
        let input = dir.join("e.npy");
        let t = Tensor::new(shape.clone(), Vec::new()).expect("an empty tensor");
        write_tensors(&input, &BTreeMap::from([("e".to_string(), t)]), Dtype::F32).expect("npy");
        for format in [
            "bfp(mant = 8)",
            "mx6",
            "int(bits = 8, scale = f32, per = tensor)",
        ] {
            for axis in axes {
                let out = dir.join("q.npy");
                let _ = std::fs::remove_file(&out);
                let args = [
                    "quantize",
                    "-f",
                    format,
                    common::arg(&input),
                    "--axis",
                    axis,
                    "--json",
                    "-o",
                    common::arg(&out),
                ];
                let o = nnpc(&args);
                let what = format!("{shape:?} --axis {axis} {format}");
                assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
                assert_eq!(v[0]["elements"], 0, "{what}: {v}");
                assert_eq!(v[0]["count"], 0, "{what}: {v}");
                assert_eq!(v[0]["shape"], serde_json::json!(shape), "{what}: {v}");
                let q = read_tensors(&out).expect("written");
                let q = q.values().next().expect("one tensor");
                assert_eq!((&q.shape, q.data.len()), (&shape, 0), "{what}");
            }
        }
        // The table says so.
        let o = nnpc(&["quantize", "-f", "mx6", common::arg(&input), "--axis", "0"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains("e: 0 elements"), "{}", stdout(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A compiled graph (by its `.swg.json` name, or by its JSON content under another name) given
/// to a command that takes firmware: one short error that says what the file is, that only
/// `nnpc run` takes it, and which firmware to give instead; exit 2. `nnpc run` takes it under
/// either name.
#[test]
fn a_compiled_graph_where_firmware_goes_is_one_clear_error() {
    let dir = common::scratch("graph_as_firmware");
    let graph = dir.join("lstm.swg.json");
    let o = nnpc(&["compile", "samples/lstm.nnp", "-o", common::arg(&graph)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let renamed = dir.join("lstm.nnp");
    std::fs::copy(&graph, &renamed).expect("copy");
    for file in [&graph, &renamed] {
        let f = common::arg(file);
        for args in [
            vec!["check", f],
            vec!["graph", f],
            vec!["emulate", f],
            vec!["compile", f, "-o", "-"],
            vec!["diff", f, "--hardware", f],
            vec!["bench", f, "--batch", "1"],
        ] {
            let o = nnpc(&args);
            let m = common::message(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {m}");
            assert!(
                has(
                    &m,
                    &format!("`{f}` is not firmware but a compiled software graph")
                ) && has(&m, "which only `nnpc run` takes")
                    && has(&m, "give the firmware file instead: `samples/lstm.nnp`"),
                "{args:?}: {m}"
            );
            assert!(stderr(&o).lines().count() < 10, "{args:?}: {}", stderr(&o));
        }
        let o = nnpc(&["check", f, "--json"]);
        assert_eq!(o.status.code(), Some(2));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
        assert_eq!(v[0]["file"], f, "{v}");
        let o = nnpc(&["run", f]);
        assert_eq!(o.status.code(), Some(0), "run {f}: {}", stderr(&o));
        assert!(stdout(&o).contains("174 nodes"), "{}", stdout(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A firmware file that is not UTF-8: the error names the file, the line and column of the
/// first invalid byte, its offset and value, and the fix (exit 2); `--json` places it there.
#[test]
fn non_utf8_firmware_names_the_first_bad_byte() {
    let dir = common::scratch("not_utf8");
    let file = dir.join("n.nnp");
    // "v_rd netq\n" is bytes 0..10, "// caf" 10..16: the Latin-1 é is byte 16, line 2,
    // column 7.
    std::fs::write(&file, b"v_rd netq\n// caf\xe9\n").expect("write");
    let f = common::arg(&file);
    let o = nnpc(&["check", f]);
    let m = common::message(&o);
    assert_eq!(o.status.code(), Some(2), "{m}");
    assert!(
        has(
            &m,
            &format!(
                "`{f}` is not UTF-8 text: invalid byte 0xE9 at line 2, column 7 (byte offset 16)"
            )
        ),
        "{m}"
    );
    assert!(m.contains("help: save the file as UTF-8"), "{m}");
    assert!(stderr(&o).contains("n.nnp:2:7"), "{}", stderr(&o));
    let o = nnpc(&["check", f, "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let d = &v[0];
    assert_eq!(
        (
            &d["file"],
            &d["start"]["line"],
            &d["start"]["column"],
            &d["start"]["offset"]
        ),
        (&f.into(), &2.into(), &7.into(), &16.into()),
        "{d}"
    );
    assert!(
        d["help"].as_str().is_some_and(|h| h.contains("UTF-8")),
        "{d}"
    );
    let o = nnpc(&["run", f]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        common::message(&o).contains("line 2, column 7"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Counts of one take the singular: `1 output`, `1 traced write`, `1 input vector`.
#[test]
fn counts_of_one_are_singular() {
    let dir = common::scratch("singular");
    let file = dir.join("copy.nnp");
    // One chain: one input row pushed back as the one output row.
    std::fs::write(
        &file,
        "input x : [128]\noutput y : [128]\nv_rd netq\nv_wr netq\nend_chain\n",
    )
    .expect("write");
    let f = common::arg(&file);
    let graph = dir.join("copy.swg.json");
    let o = nnpc(&["compile", f, "-o", common::arg(&graph)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("  1 traced write, 1 output\n"),
        "{}",
        stdout(&o)
    );
    let o = nnpc(&["run", f]);
    assert!(
        stdout(&o).contains(" ms, 1 input vector, "),
        "{}",
        stdout(&o)
    );
    let o = nnpc(&["emulate", f, "--batch", "2"]);
    assert!(
        stdout(&o).contains(" ms, 2 input vectors, "),
        "{}",
        stdout(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `nnpc train` on the digits sample with its defaults: the last line of `--json` is the
/// summary with the three accuracies, the tuned weights keep the starting weights' names and
/// shapes, and a missing data file is an input error (2) that names the flag to pass.
#[test]
fn train_prints_its_summary_last_and_writes_the_tuned_weights() {
    let dir = common::scratch("train");
    let out = dir.join("tuned.safetensors");
    let o = nnpc(&[
        "train",
        "samples/train/digits_mlp.nnp",
        "--epochs",
        "2",
        "--json",
        "-o",
        common::arg(&out),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "two epoch lines and the summary: {text}");
    let last: serde_json::Value = serde_json::from_str(lines[2]).expect("JSON summary");
    for k in ["accuracy_float", "accuracy_before", "accuracy_after"] {
        let a = last[k].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&a), "{k}: {last}");
    }
    let epoch: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON epoch");
    assert_eq!(epoch["epoch"], 1);
    let tuned = nnp_runtime::io::read_tensors(&out).expect("tuned weights");
    let start = nnp_runtime::io::read_tensors(std::path::Path::new(
        "samples/train/digits_mlp.weights.safetensors",
    ))
    .expect("starting weights");
    let shapes = |m: &std::collections::BTreeMap<String, nnp_runtime::host::Tensor>| {
        m.iter()
            .map(|(k, t)| (k.clone(), t.shape.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(shapes(&tuned), shapes(&start));

    let o = nnpc(&["train", "samples/train/digits_mlp.nnp", "--lr", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("learning rate"), "{}", stderr(&o));

    let o = nnpc(&["train", "samples/mlp2_relu.nnp"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--data"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `nnpc train --bench N --json` times steps on the first `--batch` items: one JSON object
/// with the step, the two forward runs, their ratios and the step's four parts, each a
/// positive time, the parts together no longer than a few steps.
#[test]
fn train_bench_reports_a_steps_parts() {
    let args = [
        "train",
        "samples/train/digits_mlp.nnp",
        "--bench",
        "5",
        "--batch",
        "8",
        "--json",
    ];
    let o = nnpc(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(v["batch"], 8, "{v}");
    let secs = |x: &serde_json::Value| x.as_f64().filter(|s| s.is_finite() && *s > 0.0);
    let step = secs(&v["step_seconds"]).expect("a step time");
    for k in ["forward_seconds", "forward_warm_seconds"] {
        assert!(secs(&v[k]).is_some(), "{k}: {v}");
    }
    let ratio = secs(&v["step_over_forward_warm"]).expect("a ratio");
    let warm = secs(&v["forward_warm_seconds"]).expect("a warm run");
    assert!((ratio - step / warm).abs() <= 1e-9 * ratio, "{v}");
    let parts = ["record", "loss", "reverse", "update"]
        .map(|k| secs(&v["step_parts_seconds"][k]).unwrap_or_else(|| panic!("part {k}: {v}")));
    // Medians of each part: their sum is near the median step, never several steps.
    assert!(parts.iter().sum::<f64>() < 3.0 * step, "{v}");
}
