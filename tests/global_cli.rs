//! The global flags of every command: `--color auto|always|never` (errors, diagnostics and
//! help) and `--quiet` (no confirmations of files written, no progress; the results, warnings
//! and errors unchanged).

mod common;

use common::{arg, scratch, stderr, stdout};
use std::process::{Command, Output};

/// Environment variables that make colour libraries colour a pipe as a terminal (`--color
/// auto` colours under them), and hyperlinks too.
const FAKE_TERMINAL: [(&str, &str); 5] = [
    ("FORCE_COLOR", "3"),
    ("CLICOLOR_FORCE", "1"),
    ("TERM", "xterm-256color"),
    ("COLORTERM", "truecolor"),
    ("FORCE_HYPERLINK", "1"),
];

/// Every variable of [`FAKE_TERMINAL`] and `NO_COLOR`, so a test sets what it means to.
const COLOR_VARS: [&str; 6] = [
    "FORCE_COLOR",
    "CLICOLOR_FORCE",
    "TERM",
    "COLORTERM",
    "FORCE_HYPERLINK",
    "NO_COLOR",
];

/// `nnpc ARGS` in the repository root with the colour variables `env` (and no others).
fn nnpc_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nnpc"));
    c.args(args).current_dir(common::root());
    for v in COLOR_VARS {
        c.env_remove(v);
    }
    c.envs(env.iter().copied()).output().expect("nnpc runs")
}

/// Whether `bytes` hold an escape character (every ANSI colour, style and hyperlink has one).
fn has_escape(bytes: &[u8]) -> bool {
    bytes.contains(&0x1b)
}

/// A firmware file with a mistyped mnemonic (a diagnostic with a source snippet).
fn typo_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("typo.nnp");
    let text = "input x : [128]\noutput y : [128]\nv_rd netq\nv_sigmm\nv_wr netq\nend_chain\n";
    std::fs::write(&p, text).expect("write");
    p
}

/// `--color never` writes no escape even where the environment says the pipe is a colour
/// terminal (under which `auto` does colour): in an error, a firmware diagnostic, a usage
/// error and the help.
#[test]
fn color_never_writes_no_escapes_under_a_fake_terminal() {
    let dir = scratch("color_never");
    let typo = typo_file(&dir);
    let cases: [(Vec<&str>, i32); 4] = [
        (vec!["check", "samples/no_such_file.nnp"], 2),
        (vec!["check", arg(&typo)], 1),
        (vec!["check", "samples/lstm.nnp", "--no-such-flag"], 2),
        (vec!["check", "--help"], 0),
    ];
    for (args, code) in cases {
        let auto = nnpc_env(&args, &FAKE_TERMINAL);
        assert_eq!(
            auto.status.code(),
            Some(code),
            "{args:?}: {}",
            stderr(&auto)
        );
        assert!(
            has_escape(&auto.stderr) || has_escape(&auto.stdout),
            "{args:?}: --color auto colours nothing under the fake terminal"
        );
        for never in [["--color", "never"], ["--color=never", ""]] {
            let flags = never.iter().filter(|w| !w.is_empty()).copied();
            let args: Vec<&str> = flags.chain(args.iter().copied()).collect();
            let o = nnpc_env(&args, &FAKE_TERMINAL);
            assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
            assert!(!has_escape(&o.stderr), "{args:?}: {:?}", stderr(&o));
            assert!(!has_escape(&o.stdout), "{args:?}: {:?}", stdout(&o));
        }
    }
    // After the subcommand too (the flag is global).
    let o = nnpc_env(
        &["check", "samples/no_such_file.nnp", "--color", "never"],
        &FAKE_TERMINAL,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!has_escape(&o.stderr), "{:?}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--color always` colours an error written to a pipe, even under `NO_COLOR`; `auto` does
/// not colour a pipe, and `NO_COLOR` turns even a fake terminal's colour off.
#[test]
fn color_always_colours_a_pipe_and_auto_does_not() {
    let args = ["check", "samples/no_such_file.nnp"];
    for env in [&[][..], &[("NO_COLOR", "1")][..]] {
        let o = nnpc_env(&[&["--color", "always"][..], &args[..]].concat(), env);
        assert_eq!(o.status.code(), Some(2));
        let err = stderr(&o);
        assert!(err.contains("\u{1b}["), "{env:?}: {err:?}");
        assert!(err.contains("no_such_file.nnp"), "{err}");
    }
    let o = nnpc_env(&args, &[]);
    assert!(!has_escape(&o.stderr), "{:?}", stderr(&o));
    let mut no_color = FAKE_TERMINAL.to_vec();
    no_color.retain(|(k, _)| *k == "TERM");
    no_color.push(("NO_COLOR", "1"));
    let o = nnpc_env(&args, &no_color);
    assert!(!has_escape(&o.stderr), "{:?}", stderr(&o));
    let o = nnpc_env(&["--color", "sometimes", "check", "samples/lstm.nnp"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("never"), "{}", stderr(&o));
}

/// Run `nnpc ARGS` in `dir` (no colour variables).
fn nnpc_in(dir: &std::path::Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nnpc"));
    for v in COLOR_VARS {
        c.env_remove(v);
    }
    c.args(args).current_dir(dir).output().expect("nnpc runs")
}

/// `--quiet` (`-q`, before or after the subcommand) drops the lines that confirm files written
/// (stderr) and nothing else: the same stdout, byte for byte, and the same files; errors and
/// firmware diagnostics still on stderr with their exit status.
#[test]
fn quiet_drops_the_confirmations_only() {
    let dir = scratch("quiet");
    let root = common::root();
    let sample = |s: &str| {
        root.join("samples")
            .join(s)
            .to_str()
            .expect("utf-8")
            .to_string()
    };
    let mlp = sample("mlp2_relu.nnp");
    // (command, what its confirmation says)
    let runs: [(Vec<String>, &str); 4] = [
        (
            [
                "data",
                &mlp,
                "--weights-out",
                "w.safetensors",
                "--inputs-out",
                "x.npy",
            ]
            .map(String::from)
            .to_vec(),
            "written to w.safetensors",
        ),
        (
            [
                "quantize",
                "--format",
                "mx6",
                "w.safetensors",
                "-o",
                "q.safetensors",
            ]
            .map(String::from)
            .to_vec(),
            "written to q.safetensors",
        ),
        (
            ["graph", &mlp, "--format", "json", "-o", "g.json"]
                .map(String::from)
                .to_vec(),
            "written to g.json",
        ),
        (
            ["compile", &mlp, "-o", "m.swg.json"]
                .map(String::from)
                .to_vec(),
            // compile's summary is its result (stdout), which --quiet keeps.
            "",
        ),
    ];
    for (args, said) in &runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let loud = nnpc_in(&dir, &args);
        assert_eq!(loud.status.code(), Some(0), "{args:?}: {}", stderr(&loud));
        match said.is_empty() {
            true => assert!(
                loud.stderr.is_empty() && stdout(&loud).contains("to m.swg.json"),
                "{args:?}: {}",
                stderr(&loud)
            ),
            false => assert!(stderr(&loud).contains(said), "{args:?}: {}", stderr(&loud)),
        }
        let files: Vec<_> = ["w.safetensors", "x.npy", "q.safetensors", "g.json"]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).ok())
            .collect();
        for quiet in [&["-q"][..], &["--quiet"][..]] {
            for at in [0, 1] {
                let mut a = args.clone();
                a.splice(at..at, quiet.iter().copied());
                let o = nnpc_in(&dir, &a);
                assert_eq!(o.status.code(), Some(0), "{a:?}: {}", stderr(&o));
                assert!(o.stderr.is_empty(), "{a:?}: {}", stderr(&o));
                assert_eq!(stdout(&o), stdout(&loud), "{a:?}");
                let again: Vec<_> = ["w.safetensors", "x.npy", "q.safetensors", "g.json"]
                    .iter()
                    .map(|f| std::fs::read(dir.join(f)).ok())
                    .collect();
                assert!(again == files, "{a:?}: the files differ");
            }
        }
    }
    // The emulator's summary (but its time) is the same; the outputs' and the trace's
    // confirmation, with the trace's sidecar, goes.
    let emulate = [
        "emulate",
        &mlp,
        "-o",
        "hw.safetensors",
        "--trace",
        "t.jsonl",
    ];
    let loud = nnpc_in(&dir, &emulate);
    assert_eq!(loud.status.code(), Some(0), "{}", stderr(&loud));
    let said = stderr(&loud);
    assert!(
        said.contains("outputs written to hw.safetensors")
            && said.contains("trace written to t.jsonl, its provenance to t.jsonl.nnpc.json"),
        "{said}"
    );
    let o = nnpc_in(&dir, &[&["-q"][..], &emulate[..]].concat());
    assert!(o.status.success() && o.stderr.is_empty(), "{}", stderr(&o));
    let untimed = |o: &Output| -> Vec<String> {
        let text = stdout(o);
        text.lines()
            .filter(|l| !l.contains(" ms, "))
            .map(String::from)
            .collect()
    };
    assert_eq!(untimed(&o), untimed(&loud));
    assert_eq!(untimed(&o).len() + 1, stdout(&o).lines().count());
    // `diff --report`'s page, confirmed; the report on stdout the same.
    let diff = [
        "diff",
        &mlp,
        "--hardware",
        "hw.safetensors",
        "--report",
        "r.html",
    ];
    let loud = nnpc_in(&dir, &diff);
    assert_eq!(loud.status.code(), Some(0), "{}", stderr(&loud));
    assert_eq!(stderr(&loud), "report written to r.html\n");
    let o = nnpc_in(&dir, &[&diff[..], &["--quiet"][..]].concat());
    assert!(o.status.success() && o.stderr.is_empty(), "{}", stderr(&o));
    assert_eq!(stdout(&o), stdout(&loud));

    // Errors and diagnostics stay.
    let o = nnpc_in(&dir, &["-q", "check", "no_such_file.nnp"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no_such_file.nnp"), "{}", stderr(&o));
    let typo = typo_file(&dir);
    let o = nnpc_in(&dir, &["check", "-q", arg(&typo)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("v_sigmm"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
