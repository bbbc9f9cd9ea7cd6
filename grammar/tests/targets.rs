//! Target files users write: a valid one loads with its values, and every invalid one is an
//! error that says what is wrong and points at the key or value in the file.

use nnp_grammar::{Accumulation, Target, TargetError};

/// Each invalid file: its text, a part of the message, and the text the error points at.
#[test]
fn invalid_target_files_point_at_the_key_or_value() {
    let cases = [
        (
            "name = \"x\"\nnativ = 64\n",
            "unknown field `nativ`, expected one of `name`, `native`",
            "nativ",
        ),
        (
            "native = 5000\n",
            "native = 5000 must be between 1 and 4096",
            "5000",
        ),
        ("mfus = 0\n", "mfus = 0 must be between 1 and 8", "0"),
        (
            "[numerics]\naccumulation = \"fp33\"\n",
            "unknown variant `fp33`, expected one of `exact`, `fp32-seq`, `fp16-seq`",
            "\"fp33\"",
        ),
        (
            "[numerics]\nmvm_vector = \"bfp(mant = 99)\"\n",
            "numerics.mvm_vector = \"bfp(mant = 99)\": `mant` must be an integer in 2..=32",
            "\"bfp(mant = 99)\"",
        ),
        (
            "[numerics]\nmfu_input = \"bfp(mant = 4)\"\n",
            "must be a float format (fp16, bf16, fp32 or fp(e, m))",
            "\"bfp(mant = 4)\"",
        ),
        (
            "native = \"128\"\n",
            "invalid type: string \"128\"",
            "\"128\"",
        ),
    ];
    for (text, message, at) in cases {
        let e = Target::from_toml(text, "t.toml").expect_err(text);
        assert!(matches!(e, TargetError::Invalid { .. }), "{text}: {e}");
        let shown = e.to_string();
        assert!(
            shown.starts_with("target file `t.toml` is not a valid target description: ")
                && shown.contains(message),
            "{text}: {shown}"
        );
        let span = e
            .span()
            .unwrap_or_else(|| panic!("{text}: no span in {shown}"));
        assert_eq!(&text[span], at, "{text}");
    }
}

/// A valid file sets what it names and keeps bw-default's values for the rest; the name
/// defaults to the file's stem.
#[test]
fn a_valid_target_file_sets_what_it_names() {
    let t = Target::from_toml(
        "native = 16\nmfus = 3\n[numerics]\naccumulation = \"fp32-seq\"\n",
        "dir/small.toml",
    )
    .expect("valid");
    let d = Target::bw_default();
    assert_eq!((t.name.as_str(), t.native, t.mfus), ("small", 16, 3));
    assert_eq!(t.numerics.accumulation, Accumulation::Fp32Seq);
    assert_eq!(t.numerics.mvm_vector, d.numerics.mvm_vector);
    assert_eq!(t.memory.mrf, d.memory.mrf);
}

/// A file that cannot be read names the path and the cause once.
#[test]
fn an_unreadable_target_names_the_path() {
    let e = Target::load("no/such/target.toml").expect_err("missing file");
    assert!(matches!(e, TargetError::Read { .. }), "{e}");
    let shown = e.to_string();
    assert!(
        shown.starts_with("cannot read target file `no/such/target.toml`: "),
        "{shown}"
    );
    assert!(
        std::error::Error::source(&e).is_none(),
        "the cause is in the message"
    );
    assert!(e.span().is_none());
}

/// Activation tables are checked when the target loads, relative to the target file's
/// directory: a missing file, one of the wrong size, or a directory is an error at its key;
/// a good one is kept, resolved to an absolute path (a compiled graph runs from anywhere).
#[test]
fn table_files_are_checked_at_the_key() {
    let dir = std::env::temp_dir().join(format!("nnpc-target-tables-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).expect("temp dir");
    std::fs::write(dir.join("good.bin"), vec![0u8; 131_072]).expect("write");
    std::fs::write(dir.join("short.bin"), vec![0u8; 1000]).expect("write");
    let path = dir.join("t.toml");
    let path = path.to_str().expect("utf-8 path");
    for (key, file, message) in [
        ("tanh", "nosuch.bin", "cannot be read"),
        (
            "sigm",
            "short.bin",
            "has 1000 bytes; a table is 65,536 little-endian u16",
        ),
        ("exp", "sub", "is not a file"),
    ] {
        let text = format!("[numerics]\ntables = {{ {key} = \"{file}\" }}\n");
        let e = Target::from_toml(&text, path).expect_err(&text);
        let shown = e.to_string();
        let want = format!("numerics.tables.{key} = \"{file}\" {message}");
        assert!(shown.contains(&want), "{shown}");
        let span = e.span().unwrap_or_else(|| panic!("no span in {shown}"));
        assert_eq!(&text[span], format!("\"{file}\""));
    }
    let t = Target::from_toml("[numerics]\ntables = { tanh = \"good.bin\" }\n", path)
        .expect("a good table loads");
    let tanh = t
        .numerics
        .tables
        .get(nnp_numerics::Activation::Tanh)
        .expect("tanh table");
    let resolved = t.table_path(tanh);
    assert!(resolved.is_absolute(), "{}", resolved.display());
    assert_eq!(
        resolved,
        std::path::absolute(dir.join("good.bin")).expect("absolute")
    );
    // A target file named by a relative path (`--target tg/t.toml`): its tables still resolve
    // to absolute paths, under the working directory.
    let mut relative = t.clone();
    relative.base_dir = Some(std::path::PathBuf::from("tg"));
    let cwd = std::env::current_dir().expect("working directory");
    assert_eq!(relative.table_path(tanh), cwd.join("tg").join("good.bin"));
    std::fs::remove_dir_all(&dir).ok();
}
