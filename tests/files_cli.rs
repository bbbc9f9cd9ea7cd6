//! The files a run writes (`-o`, `--trace`): never one it reads, never the same file twice,
//! and written through a symbolic link (the link stays a link) instead of replacing it.

mod common;

use common::{arg, message, nnpc, scratch};

const SAMPLE: &str = "samples/dense_300x200.nnp";

/// `-o` naming the inputs' or weights' file (by its own name or through a link), or `--trace`
/// naming `-o`'s file, is refused before the run, and the file read is left as it was.
#[test]
fn outputs_never_replace_a_file_the_run_reads() {
    let dir = scratch("inputs");
    let (x, w) = (dir.join("x.safetensors"), dir.join("w.safetensors"));
    let o = nnpc(&["emulate", SAMPLE, "--batch", "2", "-o", arg(&x)]);
    assert_eq!(o.status.code(), Some(0), "{}", message(&o));
    let o = nnpc(&["emulate", SAMPLE, "--batch", "2", "-o", arg(&w)]);
    assert_eq!(o.status.code(), Some(0), "{}", message(&o));
    let link = dir.join("link.safetensors");
    std::os::unix::fs::symlink("x.safetensors", &link).expect("symlink");
    let before = std::fs::read(&x).expect("inputs");
    for (command, extra, out, flag) in [
        ("run", "--inputs", &x, "--inputs"),
        ("run", "--inputs", &link, "--inputs"),
        ("emulate", "--inputs", &x, "--inputs"),
        ("run", "--weights", &w, "--weights"),
    ] {
        let read = if extra == "--inputs" { &x } else { &w };
        let args = [
            command,
            SAMPLE,
            extra,
            arg(read),
            "--random-missing",
            "-o",
            arg(out),
        ];
        let o = nnpc(&args);
        let err = message(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("-o {} names the file {flag} gives", arg(out))),
            "{err}"
        );
        assert!(err.contains("help: write to another path"), "{err}");
    }
    assert_eq!(std::fs::read(&x).expect("inputs"), before);
    let y = dir.join("y.safetensors");
    let o = nnpc(&["run", SAMPLE, "-o", arg(&y), "--trace", arg(&y)]);
    let err = message(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("which -o writes too"), "{err}");
    assert!(!y.exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// Outputs and a trace written to symbolic links go to the links' targets, and the links stay
/// links: the same bytes as written to plain paths.
#[test]
fn outputs_go_through_symbolic_links() {
    let dir = scratch("links");
    let run = |out: &std::path::Path, trace: &std::path::Path| {
        let o = nnpc(&[
            "run",
            SAMPLE,
            "--batch",
            "3",
            "-o",
            arg(out),
            "--trace",
            arg(trace),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", message(&o));
    };
    let (plain, plain_trace) = (dir.join("plain.safetensors"), dir.join("plain.jsonl"));
    run(&plain, &plain_trace);
    let (link, link_trace) = (dir.join("link.safetensors"), dir.join("link.jsonl"));
    std::fs::write(dir.join("target.safetensors"), b"old").expect("write");
    std::os::unix::fs::symlink("target.safetensors", &link).expect("symlink");
    std::os::unix::fs::symlink("target.jsonl", &link_trace).expect("symlink");
    run(&link, &link_trace);
    for (link, target, plain) in [
        (&link, "target.safetensors", &plain),
        (&link_trace, "target.jsonl", &plain_trace),
    ] {
        let kind = std::fs::symlink_metadata(link).expect("link").file_type();
        assert!(kind.is_symlink(), "{}", link.display());
        let got = std::fs::read(dir.join(target)).expect("target");
        assert_eq!(got, std::fs::read(plain).expect("plain"), "{target}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Tensors a run does not use are named on stderr: one no declaration names (a misspelling
/// that `--random-missing` would fill silently), and a name in both files (the weights
/// file's is used).
#[test]
fn unused_tensors_are_named() {
    let dir = scratch("unused");
    let (weights, inputs) = (dir.join("weights"), dir.join("inputs"));
    std::fs::create_dir_all(&weights).expect("dir");
    std::fs::create_dir_all(&inputs).expect("dir");
    common::npy(&weights.join("weight.npy"), &[2], 1.0);
    common::npy(&weights.join("x.npy"), &[4, 300], 1.0);
    common::npy(&inputs.join("x.npy"), &[4, 300], 0.0);
    let args = [
        "run",
        SAMPLE,
        "--weights",
        arg(&weights),
        "--inputs",
        arg(&inputs),
    ];
    let o = nnpc(&[&args[..], &["--random-missing"]].concat());
    let err = message(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let unused = format!(
        "warning: {}: `weight` is not a declaration of the program",
        arg(&weights)
    );
    assert!(err.contains(&unused), "{err}");
    assert!(
        err.contains("warning: `x` is in both files; the one in the weights file is used"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A single `.npy` file holds the program's one input whatever the file is called (its stem
/// names the tensor): the same bytes out as from a file named after the input. With two
/// inputs the stem must name one, and the error says which tensors the file holds.
#[test]
fn a_single_npy_file_is_the_programs_one_input() {
    let dir = scratch("one-npy");
    let (data, named) = (dir.join("data.npy"), dir.join("x.npy"));
    common::npy(&data, &[4, 300], 0.5);
    common::npy(&named, &[4, 300], 0.5);
    let out = |inputs: &std::path::Path, o: &std::path::Path| {
        let args = [
            "run",
            SAMPLE,
            "--inputs",
            arg(inputs),
            "--random-missing",
            "-o",
            arg(o),
        ];
        let o = nnpc(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", message(&o));
        assert!(!message(&o).contains("warning"), "{}", message(&o));
    };
    let (a, b) = (dir.join("a.safetensors"), dir.join("b.safetensors"));
    out(&data, &a);
    out(&named, &b);
    assert_eq!(std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
    let two = [
        "run",
        "samples/gru.nnp",
        "--inputs",
        arg(&data),
        "--random-missing",
    ];
    let o = nnpc(&two);
    assert_eq!(o.status.code(), Some(0), "{}", message(&o));
    assert!(
        message(&o).contains("`data` is not a declaration of the program"),
        "{}",
        message(&o)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A scratch copy of `sample` with a `target` line naming `target.toml` beside it (fp32
/// storage), and that target file: the firmware, its target file and where they are.
fn firmware_with_target(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let text = std::fs::read_to_string(common::root().join(SAMPLE)).expect("sample");
    let fw = dir.join("prog.nnp");
    std::fs::write(&fw, format!("target \"target.toml\"\n{text}")).expect("write");
    let target = dir.join("target.toml");
    std::fs::write(&target, "name = \"mine\"\n[numerics]\nstorage = \"fp32\"\n").expect("write");
    (fw, target)
}

/// Every output of every command is refused where it names a file the command reads, by
/// its own name, through a symbolic link or a hard link: the firmware, the target file
/// (`--target`'s or the `target` line's), a compiled graph, `quantize`'s input. Exit 2, a
/// message naming what the path is, and the file read left as it was.
#[test]
fn no_output_lands_on_a_file_the_command_reads() {
    let dir = scratch("own-inputs");
    let (fw, target) = firmware_with_target(&dir);
    let graph = dir.join("prog.swg.json");
    let o = nnpc(&["compile", arg(&fw), "-o", arg(&graph)]);
    assert_eq!(o.status.code(), Some(0), "{}", message(&o));
    let x = dir.join("x.npy");
    common::npy(&x, &[4, 300], 0.5);
    let (link, hard) = (dir.join("link.npy"), dir.join("hard.npy"));
    std::os::unix::fs::symlink("x.npy", &link).expect("symlink");
    std::fs::hard_link(&x, &hard).expect("hard link");
    let fw_link = dir.join("fw-link.nnp");
    std::os::unix::fs::symlink("prog.nnp", &fw_link).expect("symlink");
    let plain = dir.join("plain.nnp");
    std::fs::copy(common::root().join(SAMPLE), &plain).expect("copy");
    let (f, t, g) = (arg(&fw), arg(&target), arg(&graph));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["compile", f, "-o", f], "the firmware file"),
        (vec!["compile", f, "-o", arg(&fw_link)], "the firmware file"),
        (
            vec!["compile", f, "-o", t],
            "the target file of the firmware's `target` line",
        ),
        (
            vec!["compile", arg(&plain), "--target", t, "-o", t],
            "the target file --target gives",
        ),
        (vec!["graph", f, "-o", f], "the firmware file"),
        (vec!["graph", f, "-o", t], "the target file"),
        (vec!["run", f, "--trace", f], "the firmware file"),
        (vec!["run", f, "--trace", t], "the target file"),
        (vec!["emulate", f, "--trace", t], "the target file"),
        (vec!["emulate", f, "--trace", f], "the firmware file"),
        (vec!["run", g, "--trace", g], "the compiled graph"),
        (vec!["run", g, "-o", g], "the compiled graph"),
        (
            vec!["quantize", "-f", "bfp(mant = 4)", arg(&x), "-o", arg(&x)],
            "the input file",
        ),
        (
            vec!["quantize", "-f", "bfp(mant = 4)", arg(&x), "-o", arg(&link)],
            "the input file",
        ),
        (
            vec![
                "quantize",
                "-f",
                "bfp(mant = 4)",
                arg(&link),
                "-o",
                arg(&hard),
            ],
            "the input file",
        ),
    ];
    let before: Vec<Vec<u8>> = [&fw, &target, &graph, &x]
        .iter()
        .map(|p| std::fs::read(p).expect("read"))
        .collect();
    for (args, what) in &cases {
        let o = nnpc(args);
        let err = message(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("names {what}")), "{args:?}: {err}");
        assert!(err.contains("which this command reads"), "{args:?}: {err}");
        assert!(
            err.contains("help: write to another path"),
            "{args:?}: {err}"
        );
    }
    let after: Vec<Vec<u8>> = [&fw, &target, &graph, &x]
        .iter()
        .map(|p| std::fs::read(p).expect("read"))
        .collect();
    assert!(before == after, "a file read was changed");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `compile -o` and `graph -o` put a new file in the output's place by a rename: a hard link
/// to the old file keeps the old bytes (a write in place would change them), and no
/// temporary file is left beside it. Through a symbolic link, the link's target gets them.
#[test]
fn compile_and_graph_write_their_output_whole() {
    let dir = scratch("whole");
    for command in ["compile", "graph"] {
        let out = dir.join(format!("{command}.out"));
        std::fs::write(&out, b"old").expect("write");
        let kept = dir.join(format!("{command}.kept"));
        std::fs::hard_link(&out, &kept).expect("hard link");
        let o = nnpc(&[command, SAMPLE, "-o", arg(&out)]);
        assert_eq!(o.status.code(), Some(0), "{}", message(&o));
        assert_eq!(std::fs::read(&kept).expect("kept"), b"old");
        let new = std::fs::read_to_string(&out).expect("out");
        assert!(new.len() > 100 && new != "old", "{command}");
        let link = dir.join(format!("{command}.link"));
        std::os::unix::fs::symlink(format!("{command}.target"), &link).expect("symlink");
        let o = nnpc(&[command, SAMPLE, "-o", arg(&link)]);
        assert_eq!(o.status.code(), Some(0), "{}", message(&o));
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("link")
                .file_type()
                .is_symlink()
        );
        let target = std::fs::read_to_string(dir.join(format!("{command}.target")));
        assert_eq!(target.expect("target"), new, "{command}");
    }
    let names: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `-o` with an extension that names no tensor file (`out.txt`) is an error listing the
/// accepted ones, for every command that writes tensors, and makes nothing.
#[test]
fn an_unknown_output_extension_is_an_error() {
    let dir = scratch("extension");
    let x = dir.join("x.npy");
    common::npy(&x, &[4, 300], 0.5);
    let out = dir.join("out.txt");
    for args in [
        vec!["run", SAMPLE, "-o", arg(&out)],
        vec!["emulate", SAMPLE, "-o", arg(&out)],
        vec!["quantize", "-f", "bfp(mant = 4)", arg(&x), "-o", arg(&out)],
    ] {
        let o = nnpc(&args);
        let err = message(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("has the extension `.txt`"), "{err}");
        assert!(
            err.contains("`.safetensors` file") && err.contains("`.npy` file"),
            "{err}"
        );
        assert!(err.contains("a path with no extension"), "{err}");
        assert!(!out.exists(), "{args:?} made {}", out.display());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `nnpc check`'s success line is its result: on stdout (errors stay on stderr).
#[test]
fn check_says_ok_on_stdout() {
    let o = nnpc(&["check", SAMPLE]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(common::stdout(&o), format!("{SAMPLE}: ok (0 warnings)\n"));
    assert!(!common::stderr(&o).contains("ok"), "{}", common::stderr(&o));
}

/// `nnpc ARGS`, killed (and the test failed) if it has not ended within a minute: a read
/// that waits for a FIFO's writer, or reads `/dev/zero` without end, fails instead of hanging.
fn nnpc_within_a_minute(args: &[&str]) -> std::process::Output {
    use std::time::{Duration, Instant};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nnpc"))
        .args(args)
        .current_dir(common::root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nnpc runs");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("nnpc {args:?} did not end within a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// A compiled graph is untrusted input: each field is checked before anything acts on it,
/// and every file it names is read bounded. Declaration shapes beyond the checker's limits
/// (a dimension over 2^32, a product over 2^36 or past 2^64) are errors naming the size and
/// the limit; an activation table path naming `/dev/zero` or a FIFO is an error, never a
/// read without end or a wait; exit 2, never a panic or an abort.
#[test]
fn hostile_compiled_graphs_are_clear_errors() {
    let dir = scratch("hostile-graphs");
    let graph = dir.join("g.swg.json");
    let o = nnpc(&["compile", "samples/lstm.nnp", "-o", arg(&graph)]);
    assert_eq!(o.status.code(), Some(0), "{}", message(&o));
    let text = std::fs::read_to_string(&graph).expect("graph");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let set_input_shape = |shape: serde_json::Value| -> Edit {
        Box::new(move |g: &mut serde_json::Value| {
            for d in g["decls"].as_array_mut().expect("decls") {
                if d["kind"] == "Input" {
                    d["shape"] = shape.clone();
                }
            }
            // A node is `[kind, fields...]`: an input's shape is its third item.
            for n in g["nodes"].as_array_mut().expect("nodes") {
                if n[0] == "input" {
                    n[2] = shape.clone();
                }
            }
        })
    };
    let set_tables = |path: String| -> Edit {
        Box::new(move |g: &mut serde_json::Value| {
            // A unary node `["unary", op, src, format]` names a table by its number in
            // `tables` as a fifth item.
            g["tables"] = serde_json::json!([path.clone()]);
            for n in g["nodes"].as_array_mut().expect("nodes") {
                if n[0] == "unary" && n[1] != "relu" && n[1] != "pass" {
                    n.as_array_mut().expect("row").push(0.into());
                }
            }
        })
    };
    let big = 1u64 << 32;
    let cases: Vec<(Edit, String)> = vec![
        (
            Box::new(|g| g["decls"][0]["shape"] = serde_json::json!([1u64 << 40, 1u64 << 20])),
            "dimension 1099511627776 of shape [1099511627776, 1048576] is out of range 1..=2^32"
                .into(),
        ),
        (
            set_input_shape(serde_json::json!([big, big])),
            "has 2^64 or more elements, more than the limit of 68719476736 (2^36)".into(),
        ),
        (
            set_input_shape(serde_json::json!([1u64 << 20, 1u64 << 20])),
            "has 1099511627776 elements, more than the limit of 68719476736 (2^36)".into(),
        ),
        (
            Box::new(|g| g["decls"][0]["shape"] = serde_json::json!([])),
            "a declaration has 1 to 8".into(),
        ),
        (
            set_tables("/dev/zero".into()),
            "activation table `/dev/zero` cannot be read: it is not a regular file but a device"
                .into(),
        ),
        (
            set_tables(arg(&fifo).to_string()),
            "it is not a regular file but a FIFO".into(),
        ),
    ];
    for (k, (edit, says)) in cases.iter().enumerate() {
        let mut g: serde_json::Value = serde_json::from_str(&text).expect("json");
        edit(&mut g);
        let path = dir.join(format!("bad{k}.swg.json"));
        std::fs::write(&path, g.to_string()).expect("write");
        let o = nnpc_within_a_minute(&["run", arg(&path)]);
        let err = message(&o);
        assert_eq!(o.status.code(), Some(2), "{says}: {err}");
        assert!(err.contains(says.as_str()), "{says}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // The graph file itself, and firmware, named by a FIFO or a device: refused unread.
    for (args, says) in [
        (vec!["run", arg(&fifo)], "not a regular file but a FIFO"),
        (
            vec!["check", "/dev/zero"],
            "not a regular file but a device",
        ),
    ] {
        let o = nnpc_within_a_minute(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", message(&o));
        assert!(message(&o).contains(says), "{}", message(&o));
    }
    std::fs::remove_dir_all(&dir).ok();
}
