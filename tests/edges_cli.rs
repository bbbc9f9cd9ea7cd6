//! Every boundary of a run's inputs and sizes is exact: no path makes a read wait or run
//! without end (a FIFO, `/dev/zero`), no batch aborts or overflows, Ctrl-C stops a long
//! emulation within moments and leaves no file behind, and a failed run leaves no directory
//! it made.

mod common;

use common::{arg, message, scratch};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SAMPLE: &str = "samples/dense_300x200.nnp";

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_nnpc"))
        .args(args)
        .current_dir(common::root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nnpc runs")
}

/// The child's output once it ends, or `None` (it killed) if it has not within `limit`.
fn within(mut child: Child, limit: Duration) -> Option<Output> {
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().expect("output"))
}

/// `nnpc ARGS`, failing the test if it has not ended within a minute.
fn nnpc_within_a_minute(args: &[&str]) -> Output {
    within(spawn(args), Duration::from_secs(60))
        .unwrap_or_else(|| panic!("nnpc {args:?} did not end within a minute"))
}

/// `nnpc args` ends within a minute with exit status 2 and an error saying each of `says`.
fn refused(args: &[&str], says: &[&str]) {
    let o = nnpc_within_a_minute(args);
    let err = message(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for s in says {
        assert!(err.contains(s), "{args:?}: {err}");
    }
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
}

/// A FIFO or a device in the place of any file a command reads (tensor files and a file in
/// a weights directory, a hardware dump, `quantize`'s input, a target file by `--target` or
/// by the firmware's `target` statement, a trace) is refused before it is opened, naming the
/// file: never a wait for a writer or a read without end.
#[test]
fn fifos_and_devices_are_refused_unread() {
    let dir = scratch("edges-fifo");
    let fifo = dir.join("x.npy");
    mkfifo(&fifo);
    let wdir = dir.join("weights");
    std::fs::create_dir_all(&wdir).expect("dir");
    mkfifo(&wdir.join("W.npy"));
    let tfifo = dir.join("t.toml");
    mkfifo(&tfifo);
    let fw = dir.join("with_target.nnp");
    let text = std::fs::read_to_string(common::root().join(SAMPLE)).expect("sample");
    std::fs::write(&fw, format!("target \"t.toml\"\n{text}")).expect("firmware");
    let hw = dir.join("hw.safetensors");
    let o = nnpc_within_a_minute(&["emulate", SAMPLE, "-o", arg(&hw)]);
    assert_eq!(o.status.code(), Some(0), "{}", message(&o));
    let f = arg(&fifo);
    let fifo_cases: Vec<Vec<&str>> = vec![
        vec!["run", SAMPLE, "--inputs", f, "--random-missing"],
        vec!["emulate", SAMPLE, "--weights", f, "--random-missing"],
        vec!["run", SAMPLE, "--weights", arg(&wdir), "--random-missing"],
        vec!["diff", SAMPLE, "--hardware", f],
        vec!["diff", SAMPLE, "--hardware", arg(&hw), "--trace", f],
        vec!["quantize", "--format", "fp16", f],
        vec!["run", SAMPLE, "--target", arg(&tfifo)],
        vec!["check", arg(&fw)],
    ];
    for args in &fifo_cases {
        let o = nnpc_within_a_minute(args);
        let err = message(&o);
        assert_ne!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            o.status.code().is_some(),
            "{args:?} ended by a signal: {err}"
        );
        assert!(
            err.contains("not a regular file but a FIFO"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    for args in [
        vec!["run", SAMPLE, "--target", "/dev/zero"],
        vec![
            "diff",
            SAMPLE,
            "--hardware",
            arg(&hw),
            "--trace",
            "/dev/zero",
        ],
        vec!["run", SAMPLE, "--inputs", "/dev/zero", "--random-missing"],
    ] {
        refused(&args, &["/dev/zero", "not a regular file but a device"]);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A target file past the cap (1 MiB; a sparse file of 3 GiB here) is refused by its size
/// without reading it, naming the file, its size and the limit.
#[test]
fn a_huge_target_file_is_refused_by_its_size() {
    let dir = scratch("edges-target");
    let target = dir.join("huge.toml");
    let file = std::fs::File::create(&target).expect("target");
    file.set_len(3 << 30).expect("sparse file");
    refused(
        &["run", SAMPLE, "--target", arg(&target)],
        &[
            arg(&target),
            "it has 3221225472 bytes, more than the 1048576 bytes",
        ],
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A batch whose inputs and outputs pass 2^62 bytes is an error naming `--batch` and the
/// limit, exit 2, on either engine: never an abort or an overflow. dense_300x200 holds 4 x 300
/// f32 inputs and 4 x 200 f64 outputs per item: 11,200 bytes, so the limit is
/// floor(2^62 / 11,200) = 411,757,680,216,731 input sets.
#[test]
fn a_batch_past_the_limit_is_an_error_naming_it() {
    for command in ["run", "emulate"] {
        for batch in ["9223372036854775807", "411757680216732"] {
            refused(
                &[command, SAMPLE, "--batch", batch],
                &[
                    &format!("--batch {batch}: "),
                    "the limit is 411757680216731 input sets of 11200 bytes each",
                ],
            );
        }
    }
}

/// A batch of 2^40 without `-o` is a bounded run, in chunks made as they are taken: still
/// running after two seconds (not aborted by an allocation the size of the batch).
#[test]
fn a_huge_streamed_batch_runs_bounded() {
    for command in ["run", "emulate"] {
        let child = spawn(&[command, SAMPLE, "--batch", "1099511627776"]);
        let ended = within(child, Duration::from_secs(2));
        assert!(
            ended.is_none(),
            "{command} ended: {:?}",
            ended.map(|o| message(&o))
        );
    }
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Ctrl-C (or SIGTERM) during a long emulation written to a file stops it within moments,
/// inside its piece: exit status 130, the interrupted message, and no temporary file left.
#[test]
fn a_signal_stops_a_long_emulation_promptly() {
    for signal in ["-INT", "-TERM"] {
        let dir = scratch(&format!("edges-signal{signal}"));
        let out = dir.join("x.safetensors");
        let args = [
            "emulate",
            "samples/bench/lstm_1024.nnp",
            "--batch",
            "20000",
            "-o",
            arg(&out),
        ];
        let child = spawn(&args);
        // Until the temporary output file is there, the handler is set and the run is on.
        let start = Instant::now();
        while names(&dir).is_empty() && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(500));
        let sent = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status();
        assert!(sent.is_ok_and(|s| s.success()), "kill {signal}");
        let o = within(child, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{signal}: still running 10 s after the signal"));
        let err = message(&o);
        assert_eq!(o.status.code(), Some(130), "{signal}: {err}");
        assert!(err.contains("interrupted after"), "{err}");
        assert_eq!(names(&dir), Vec::<String>::new(), "{signal}: left behind");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A run into a directory output (`-o out_dir`) that fails after the directory was made (a
/// NaN in the inputs, found as they are read) leaves neither its files nor the directory.
#[test]
fn a_failed_run_leaves_no_directory() {
    let dir = scratch("edges-dir");
    let x = dir.join("x.npy");
    common::npy(&x, &[2, 4, 300], f32::NAN);
    for command in ["run", "emulate"] {
        let out = dir.join("out").join("deeper");
        let args = [command, SAMPLE, "--inputs", arg(&x), "--random-missing"];
        refused(
            &[&args[..], &["-o", arg(&out)]].concat(),
            &["host data must be finite"],
        );
        assert_eq!(names(&dir), ["x.npy"], "{command}: left behind");
    }
    std::fs::remove_dir_all(&dir).ok();
}
