//! The files' own rules: `.npy` headers as numpy reads them, output kinds by the path,
//! metadata, bounded reads, whole writes.

use super::*;

/// A `.npy` file whose header is `header` (padded as numpy pads it), holding `values` as f4.
fn npy_with_header(path: &Path, header: &str, values: &[f32]) {
    let mut header = header.to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, bytes).unwrap();
}

/// Headers read as numpy reads them (`ast.literal_eval` of a dict, then exactly the keys
/// 'descr', 'fortran_order' and 'shape'): a key given twice keeps its last value, as
/// `numpy.load` does (`{'shape': (2,), 'shape': (4,)}` loads 4 values); a header without
/// its closing brace is an error, as numpy's SyntaxError; another key is refused.
#[test]
fn npy_headers_are_read_as_numpy_reads_them() {
    let dir = scratch("npy-headers");
    let path = dir.join("x.npy");
    let values = [1.0f32, 2.0, 3.0, 4.0];
    npy_with_header(
        &path,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (4,), }",
        &values,
    );
    let t = &read_tensors(&path).unwrap()["x"];
    assert_eq!(
        (t.shape.clone(), t.data.clone()),
        (vec![4], values.to_vec())
    );
    // The first of two 'descr' would read these bytes as f2 values: the last, f4, is used.
    npy_with_header(
        &path,
        "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), 'descr': '<f4'}",
        &values,
    );
    assert_eq!(read_tensors(&path).unwrap()["x"].data, values.to_vec());
    for (header, says) in [
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), ",
            "cut short",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)",
            "cut short",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}",
            "needs exactly 'descr', 'fortran_order' and 'shape'",
        ),
        (
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (4,)}",
            "'fortran_order' is 0, not True or False",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': 4}",
            "malformed shape `4`: not a tuple",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}",
            "dimensions are integers from 0",
        ),
    ] {
        npy_with_header(&path, header, &values);
        let e = read_tensors(&path).unwrap_err().to_string();
        assert!(e.contains(says), "{header}: {e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Outputs go by the path: `.safetensors` and `.npy` files, directories (existing, or a path
/// without an extension); any other path is an error listing those, and makes nothing.
#[test]
fn unknown_output_extensions_are_errors() {
    let dir = scratch("kinds");
    assert_eq!(
        output_kind(&dir.join("a.safetensors")).unwrap(),
        OutputKind::Safetensors
    );
    assert_eq!(output_kind(&dir.join("a.NPY")).unwrap(), OutputKind::Npy);
    assert_eq!(output_kind(&dir.join("out")).unwrap(), OutputKind::Dir);
    std::fs::create_dir_all(dir.join("made.d")).unwrap();
    assert_eq!(output_kind(&dir.join("made.d")).unwrap(), OutputKind::Dir);
    let shapes = BTreeMap::from([("y".to_string(), vec![2])]);
    let txt = dir.join("out.txt");
    let e = ItemWriter::create(&txt, &shapes, Dtype::F32).err().unwrap();
    // The message says what is wrong; its help, which kinds a path may name.
    let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
    let (e, help) = (e.to_string(), help.unwrap_or_default());
    assert!(e.contains("has the extension `.txt`"), "{e}");
    assert!(help.contains("`.safetensors` file"), "{help}");
    assert!(help.contains("`.npy` file"), "{help}");
    assert!(help.contains("directory of `NAME.npy` files"), "{help}");
    assert!(!txt.exists());
    let plain = dir.join("plain");
    std::fs::write(&plain, b"x").unwrap();
    let e = output_kind(&plain).unwrap_err().to_string();
    assert!(e.contains("is a file that is not a directory"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Metadata goes in a safetensors header (the crate's bytes for the same metadata) and in a
/// sidecar beside a `.npy` file or in a directory, and reads back from each.
#[test]
fn metadata_is_recorded_with_the_tensors() {
    let dir = scratch("metadata");
    let tensors = BTreeMap::from([(
        "y".to_string(),
        Tensor::new(vec![2], vec![1.5, -2.0]).unwrap(),
    )]);
    let one = Metadata::from([("nnpc.seed".to_string(), "7".to_string())]);
    let st = dir.join("a.safetensors");
    write_tensors_with(&st, &tensors, Dtype::F32, &one).unwrap();
    let bytes: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let view =
        ::safetensors::tensor::TensorView::new(::safetensors::Dtype::F32, vec![2], &bytes).unwrap();
    let info = Some(std::collections::HashMap::from([(
        "nnpc.seed".to_string(),
        "7".to_string(),
    )]));
    let want = ::safetensors::serialize([("y", view)], info).unwrap();
    assert_eq!(std::fs::read(&st).unwrap(), want);
    assert_eq!(read_metadata(&st), Some(one.clone()));
    assert_eq!(read_tensors(&st).unwrap(), tensors);
    let two = Metadata::from([
        ("b".to_string(), "2".to_string()),
        ("a".to_string(), "1".to_string()),
    ]);
    for path in [dir.join("b.safetensors"), dir.join("c.npy"), dir.join("d")] {
        write_tensors_with(&path, &tensors, Dtype::F16, &two).unwrap();
        assert_eq!(
            read_metadata(&path),
            Some(two.clone()),
            "{}",
            path.display()
        );
        let back: Vec<Tensor> = read_tensors(&path).unwrap().into_values().collect();
        assert_eq!(back, vec![tensors["y"].clone()], "{}", path.display());
    }
    assert!(dir.join("c.npy.nnpc.json").is_file());
    assert!(dir.join("d").join("nnpc.json").is_file());
    // Without metadata, no sidecar.
    write_tensors(&dir.join("e.npy"), &tensors, Dtype::F16).unwrap();
    assert!(!dir.join("e.npy.nnpc.json").exists());
    assert_eq!(read_metadata(&dir.join("e.npy")), None);
    std::fs::remove_dir_all(&dir).ok();
}

/// A bounded read refuses a device, a FIFO and a directory before reading (no read without
/// end from `/dev/zero`, no wait for a FIFO's writer), and a file larger than its limit.
#[test]
fn bounded_reads_refuse_devices_fifos_and_large_files() {
    let dir = scratch("bounded");
    let e = read_limited(Path::new("/dev/zero"), 10)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file but a device"), "{e}");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let e = read_limited(&fifo, 10).unwrap_err().to_string();
    assert!(e.contains("not a regular file but a FIFO"), "{e}");
    let e = read_limited(&dir, 10).unwrap_err().to_string();
    assert!(e.contains("a directory"), "{e}");
    let big = dir.join("big");
    std::fs::write(&big, [0u8; 11]).unwrap();
    let e = read_limited(&big, 10).unwrap_err().to_string();
    assert!(e.contains("11 bytes, more than the 10 bytes"), "{e}");
    assert_eq!(read_limited(&big, 11).unwrap().len(), 11);
    // A link to `/dev/zero` is followed and refused; a table file there too.
    let link = dir.join("zero.bin");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let e = read_table(&link).unwrap_err();
    assert!(e.contains("not a regular file but a device"), "{e}");
    let e = read_table(&fifo).unwrap_err();
    assert!(e.contains("a FIFO"), "{e}");
    std::fs::write(&big, vec![0u8; 1 << 20]).unwrap();
    let e = read_table(&big).unwrap_err();
    assert!(e.contains("has 1048576 bytes"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A file written whole goes to its place by a rename: the old file stays whole until then,
/// and no temporary file is left.
#[test]
fn files_are_written_whole() {
    let dir = scratch("atomic");
    let path = dir.join("g.swg.json");
    std::fs::write(&path, b"old").unwrap();
    write_file_atomic(&path, b"new and longer").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new and longer");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // Into a directory that does not exist: an error, and the old file elsewhere untouched.
    assert!(write_file_atomic(&dir.join("none").join("x"), b"x").is_err());
    std::fs::remove_dir_all(&dir).ok();
}
