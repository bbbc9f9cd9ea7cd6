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
    assert!(err.contains("names the file -o gives"), "{err}");
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

/// A little-endian f32 `.npy` file of `shape`, every value `v`.
fn npy(path: &std::path::Path, shape: &[usize], v: f32) {
    let dims: Vec<String> = shape.iter().map(|d| format!("{d},")).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}",
        dims.join(" ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for _ in 0..shape.iter().product::<usize>() {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(path, bytes).expect("write npy");
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
    npy(&weights.join("weight.npy"), &[2], 1.0);
    npy(&weights.join("x.npy"), &[4, 300], 1.0);
    npy(&inputs.join("x.npy"), &[4, 300], 0.0);
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
    npy(&data, &[4, 300], 0.5);
    npy(&named, &[4, 300], 0.5);
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
