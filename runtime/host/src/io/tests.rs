use super::npy::NPY_MAGIC;
use super::stored::encode_values;
use super::*;
use std::ops::Range;

#[test]
fn table_files_are_little_endian_and_sized() {
    let dir = std::env::temp_dir().join(format!("nnpc-io-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Entry i = i + 1 (wrapping): bytes [1, 0] then [2, 0], ...
    let good: Vec<u8> = (0..=u16::MAX)
        .flat_map(|i| i.wrapping_add(1).to_le_bytes())
        .collect();
    std::fs::write(dir.join("good.bin"), &good).unwrap();
    let t = read_table(&dir.join("good.bin")).unwrap();
    assert_eq!((t.len(), t[0], t[0x3C00], t[0xFFFF]), (65536, 1, 0x3C01, 0));
    std::fs::write(dir.join("short.bin"), [0u8; 10]).unwrap();
    assert_eq!(
        read_table(&dir.join("short.bin")).unwrap_err(),
        "has 10 bytes; a table is 65,536 little-endian u16 (131,072 bytes)"
    );
    assert!(
        read_table(&dir.join("none.bin"))
            .unwrap_err()
            .starts_with("cannot be read")
    );
}

/// A file goes to its place by a rename, or through a symbolic link, a FIFO or a device
/// that stands there: the link stays a link (its target gets the bytes, a dangling one's
/// target is made), the FIFO's reader gets the bytes and the FIFO stays a FIFO. A file
/// dropped unfinished leaves nothing behind, in either place.
#[test]
fn temp_files_go_through_links_fifos_and_devices() {
    use std::io::{Read, Write};
    use std::os::unix::fs::FileTypeExt;
    let dir = scratch("through");
    let write = |path: &Path, bytes: &[u8]| {
        let mut f = TempFile::create(path).unwrap();
        f.file.write_all(bytes).unwrap();
        f.finish().unwrap();
    };
    let kind = |p: &Path| std::fs::symlink_metadata(p).unwrap().file_type();
    // A plain path: renamed there, over an older file.
    let plain = dir.join("plain.bin");
    std::fs::write(&plain, b"old and longer").unwrap();
    write(&plain, b"new");
    assert_eq!(std::fs::read(&plain).unwrap(), b"new");
    // A link to a file, and a dangling link.
    let (real, link) = (dir.join("real.bin"), dir.join("link.bin"));
    std::fs::write(&real, b"old and longer").unwrap();
    std::os::unix::fs::symlink("real.bin", &link).unwrap();
    write(&link, b"through");
    assert!(kind(&link).is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), b"through");
    let dangling = dir.join("dangling.bin");
    std::os::unix::fs::symlink("made.bin", &dangling).unwrap();
    write(&dangling, b"made");
    assert!(kind(&dangling).is_symlink());
    assert_eq!(std::fs::read(dir.join("made.bin")).unwrap(), b"made");
    // A FIFO, read by another thread (a device goes the same way; none is written here,
    // since a regression would replace it for the whole machine).
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            std::fs::File::open(fifo)
                .unwrap()
                .read_to_end(&mut got)
                .unwrap();
            got
        })
    };
    write(&fifo, b"piped");
    assert_eq!(reader.join().unwrap(), b"piped");
    assert!(kind(&fifo).is_fifo());
    // Unfinished: no file, and no temporary file, in either place.
    drop(TempFile::create(&dir.join("never.bin")).unwrap());
    drop(TempFile::create(&link).unwrap());
    assert!(!dir.join("never.bin").exists());
    assert_eq!(std::fs::read(&real).unwrap(), b"through");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")),
        "{names:?}"
    );
    let ours = format!(".link.bin.nnpc-{}.tmp", std::process::id());
    let left = std::fs::read_dir(std::env::temp_dir()).unwrap();
    assert!(
        left.flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with(&ours))
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A scratch directory of its own for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nnpc-io-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Tensors of several shapes (a scalar, a vector, batches of rows) with values an f16
/// holds exactly, so both dtypes round-trip.
fn sample_tensors() -> BTreeMap<String, Tensor> {
    let values = |n: usize| (0..n).map(|i| i as f32 * 0.25 - 3.0).collect::<Vec<_>>();
    [
        ("a_scalar", vec![]),
        ("b_vec", vec![5]),
        ("c_rows", vec![7, 2, 3]),
        ("d_empty", vec![0, 4]),
    ]
    .into_iter()
    .map(|(name, shape): (&str, Vec<usize>)| {
        let n = shape.iter().product();
        (name.to_string(), Tensor::new(shape, values(n)).unwrap())
    })
    .collect()
}

/// The safetensors file we write is byte for byte what the crate's own `serialize` makes
/// of the same tensors (the reference implementation of the format), for both dtypes.
#[test]
fn safetensors_files_are_the_crates_bytes() {
    let dir = scratch("st-bytes");
    let tensors = sample_tensors();
    for (dtype, st) in [
        (Dtype::F16, safetensors::Dtype::F16),
        (Dtype::F32, safetensors::Dtype::F32),
    ] {
        let path = dir.join("t.safetensors");
        write_tensors(&path, &tensors, dtype).unwrap();
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .iter()
            .map(|(n, t)| {
                (
                    n.clone(),
                    t.shape.clone(),
                    encode_values(&t.data, dtype).expect("f16 values"),
                )
            })
            .collect();
        let views = bytes.iter().map(|(n, shape, b)| {
            let view = safetensors::tensor::TensorView::new(st, shape.clone(), b).unwrap();
            (n.as_str(), view)
        });
        let want = safetensors::serialize(views, None).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want, "{dtype:?}");
        assert_eq!(read_tensors(&path).unwrap(), tensors);
    }
}

/// Tensors indexed by their headers read, whole and by ranges of items, the values the
/// files hold: safetensors files made by the crate's own `serialize` in every dtype we
/// read, a `.npy` file of format version 2.0 made by hand, and a directory. A file that
/// is short is refused when it is indexed, and one cut short after that fails to read.
#[test]
fn stored_tensors_read_the_files_values_by_items() {
    use safetensors::Dtype as St;
    let dir = scratch("stored");
    // Every value is a multiple of 0.25 below 8 in magnitude: exact in f16 and bf16.
    let tensors = sample_tensors();
    let le = |dtype: St, v: &[f32]| -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match dtype {
                St::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
                St::BF16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
                St::F32 => x.to_le_bytes().to_vec(),
                _ => f64::from(x).to_le_bytes().to_vec(),
            })
            .collect()
    };
    let items = |t: &Tensor, r: Range<usize>| {
        let per: usize = t.shape[1..].iter().product();
        t.data[r.start * per..r.end * per].to_vec()
    };
    for dtype in [St::F16, St::BF16, St::F32, St::F64] {
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .iter()
            .map(|(n, t)| (n.clone(), t.shape.clone(), le(dtype, &t.data)))
            .collect();
        let views = bytes.iter().map(|(n, shape, b)| {
            let view = safetensors::tensor::TensorView::new(dtype, shape.clone(), b).unwrap();
            (n.as_str(), view)
        });
        let file = safetensors::serialize(views, None).unwrap();
        let path = dir.join("t.safetensors");
        std::fs::write(&path, &file).unwrap();
        let stored = index_tensors(&path).unwrap();
        assert_eq!(stored.len(), tensors.len());
        for (name, t) in &tensors {
            let s = &stored[name];
            assert_eq!(s.shape, t.shape, "{dtype:?} {name}");
            assert_eq!(&s.read().unwrap(), t, "{dtype:?} {name}");
        }
        let rows = &stored["c_rows"];
        for r in [0..7, 0..1, 3..5, 6..7, 4..4] {
            let got = rows.read_items(r.clone()).unwrap();
            assert_eq!(got.shape, vec![r.len(), 2, 3], "{dtype:?} {r:?}");
            assert_eq!(
                got.data,
                items(&tensors["c_rows"], r.clone()),
                "{dtype:?} {r:?}"
            );
        }
        assert!(rows.read_items(5..8).is_err(), "past the end");
        // One byte short: refused at the index, before any value is read.
        std::fs::write(&path, &file[..file.len() - 1]).unwrap();
        let e = index_tensors(&path).unwrap_err().to_string();
        assert!(e.contains("incomplete metadata"), "{e}");
    }
    // A `.npy` of format version 2.0 (a 4-byte header length), f8 values.
    let t = &tensors["c_rows"];
    let mut header = "{'descr': '<f8', 'fortran_order': False, 'shape': (7, 2, 3), }".to_string();
    while !(12 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut file = b"\x93NUMPY\x02\x00".to_vec();
    file.extend((header.len() as u32).to_le_bytes());
    file.extend(header.as_bytes());
    file.extend(le(St::F64, &t.data));
    let npy = dir.join("rows.npy");
    std::fs::write(&npy, &file).unwrap();
    let stored = index_tensors(&npy).unwrap();
    let rows = &stored["rows"];
    assert_eq!(&rows.read().unwrap(), t);
    assert_eq!(rows.read_items(2..5).unwrap().data, items(t, 2..5));
    // The same file in a directory, named by its stem.
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("x.npy"), &file).unwrap();
    assert_eq!(
        index_tensors(&sub).unwrap()["x"]
            .read_items(6..7)
            .unwrap()
            .data,
        items(t, 6..7)
    );
    // Cut short after it was indexed: reading fails, naming the file.
    std::fs::write(&npy, &file[..file.len() - 8]).unwrap();
    let e = rows.read_items(6..7).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("cannot read `{}`", npy.display())),
        "{e}"
    );
    assert_eq!(rows.read_items(0..6).unwrap().data, items(t, 0..6));
    // Short when indexed: refused with the sizes.
    let e = index_tensors(&npy).unwrap_err().to_string();
    assert!(
        e.contains("truncated data: shape [7, 2, 3] needs 336 bytes"),
        "{e}"
    );
}

/// Pieces of items written in any order give the bytes of one whole write, in every kind
/// of file; until `finish` only the temporary files exist, and a writer dropped before it
/// leaves neither them nor a changed file behind.
#[test]
fn pieces_give_the_bytes_of_one_write() {
    let dir = scratch("pieces");
    let whole = sample_tensors();
    // c_rows in pieces of items 4..7, 0..1, 1..4, the other tensors whole.
    let piece = |items: Range<usize>| {
        let t = &whole["c_rows"];
        let data = t.data[items.start * 6..items.end * 6].to_vec();
        let t = Tensor::new(vec![items.len(), 2, 3], data).unwrap();
        BTreeMap::from([("c_rows".to_string(), t)])
    };
    let rest: BTreeMap<String, Tensor> = whole
        .iter()
        .filter(|(n, _)| *n != "c_rows")
        .map(|(n, t)| (n.clone(), t.clone()))
        .collect();
    let shapes = whole
        .iter()
        .map(|(n, t)| (n.clone(), t.shape.clone()))
        .collect();
    let one = BTreeMap::from([("c_rows".to_string(), whole["c_rows"].clone())]);
    let one_shape = BTreeMap::from([("c_rows".to_string(), vec![7, 2, 3])]);
    let listing = |d: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    for dtype in [Dtype::F16, Dtype::F32] {
        for (name, tensors, shapes) in [
            ("t.safetensors", &whole, &shapes),
            ("dir", &whole, &shapes),
            ("one.npy", &one, &one_shape),
        ] {
            let (a, b) = (
                dir.join(format!("whole-{dtype:?}")).join(name),
                dir.join(format!("pieces-{dtype:?}")).join(name),
            );
            std::fs::create_dir_all(a.parent().unwrap()).unwrap();
            std::fs::create_dir_all(b.parent().unwrap()).unwrap();
            write_tensors(&a, tensors, dtype).unwrap();
            let mut w = ItemWriter::create(&b, shapes, dtype).unwrap();
            for items in [4..7, 0..1, 1..4] {
                w.write_items(items.start, &piece(items)).unwrap();
            }
            if tensors.len() > 1 {
                w.write_items(0, &rest).unwrap();
            }
            assert!(!b.exists() || b.is_dir(), "{name} before finish");
            if b.is_dir() {
                assert!(listing(&b).iter().all(|n| n.ends_with(".tmp")), "{name}");
            }
            w.finish().unwrap();
            let files = |p: &Path| -> Vec<Vec<u8>> {
                if p.is_dir() {
                    let names = listing(p);
                    names
                        .iter()
                        .map(|n| std::fs::read(p.join(n)).unwrap())
                        .collect()
                } else {
                    vec![std::fs::read(p).unwrap()]
                }
            };
            assert_eq!(files(&a), files(&b), "{name} {dtype:?}");
            // (A `.npy` file's tensor is named by its stem.)
            let back: Vec<Tensor> = read_tensors(&b).unwrap().into_values().collect();
            let want: Vec<Tensor> = tensors.values().cloned().collect();
            assert_eq!(back, want, "{name} {dtype:?}");
        }
    }
    let pieces = dir.join("pieces-F32");
    assert_eq!(
        listing(&pieces.join("dir")),
        ["a_scalar.npy", "b_vec.npy", "c_rows.npy", "d_empty.npy"]
    );
    // Dropped before finish: the existing file keeps its bytes, no temporary file stays.
    let kept = pieces.join("t.safetensors");
    let before = std::fs::read(&kept).unwrap();
    let mut w = ItemWriter::create(&kept, &shapes, Dtype::F32).unwrap();
    w.write_items(0, &piece(0..2)).unwrap();
    assert_eq!(listing(&pieces).len(), 4, "the temporary file is there");
    drop(w);
    assert_eq!(std::fs::read(&kept).unwrap(), before);
    assert_eq!(listing(&pieces), ["dir", "one.npy", "t.safetensors"]);
}

/// A piece that does not fit its tensor, a tensor the file was not made for and a place
/// that cannot be written are errors naming the tensor or the file.
#[test]
fn pieces_that_do_not_fit_are_errors() {
    let dir = scratch("misfit");
    let shapes = BTreeMap::from([("x".to_string(), vec![3, 2])]);
    let path = dir.join("x.safetensors");
    let mut w = ItemWriter::create(&path, &shapes, Dtype::F16).unwrap();
    let two = |name: &str| {
        let t = Tensor::new(vec![2, 2], vec![1.0; 4]).unwrap();
        BTreeMap::from([(name.to_string(), t)])
    };
    let e = w.write_items(2, &two("x")).unwrap_err().to_string();
    assert!(
        e.contains("items from 2 do not fit its file's shape [3, 2]"),
        "{e}"
    );
    let e = w.write_items(0, &two("y")).unwrap_err().to_string();
    assert!(e.contains("`y`") && e.contains("created without it"), "{e}");
    w.write_items(1, &two("x")).unwrap();
    drop(w);
    assert!(!path.exists());
    let nowhere = dir.join("no").join("such").join("x.safetensors");
    let e = ItemWriter::create(&nowhere, &shapes, Dtype::F16)
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .starts_with(&format!("cannot write `{}`", nowhere.display())),
        "{e}"
    );
    let e = ItemWriter::create(&dir.join("two.npy"), &BTreeMap::new(), Dtype::F16);
    assert!(matches!(e, Err(IoError::NotOne { count: 0, .. })));
    // A file's place taken by a directory: refused when the writer is made.
    let taken = dir.join("taken.safetensors");
    std::fs::create_dir_all(&taken).unwrap();
    let e = ItemWriter::create(&taken, &shapes, Dtype::F16)
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        format!("cannot write `{}`: is a directory", taken.display())
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "no temporary file"
    );
}

#[test]
fn npy_round_trip_and_header_alignment() {
    let dir = scratch("npy");
    let path = dir.join("x.npy");
    let t = Tensor::new(vec![2, 3], vec![1.0, -2.0, 0.5, 3.0, 4.0, -0.25]).unwrap();
    let one = BTreeMap::from([("x".to_string(), t.clone())]);
    for dtype in [Dtype::F16, Dtype::F32] {
        write_tensors(&path, &one, dtype).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        assert_eq!(read_tensors(&path).unwrap(), one);
    }
}

/// An f64 file's values that f32 does not hold are named by the checked reads, with
/// their values (by hand): 1 + 2^-30 (31 significant bits), 0.1 and 1e300 (past f32's
/// range) are; 1, -0, f32's smallest subnormal 2^-149, infinity and NaN are not. Indices
/// are within the items read; an f32 file has none.
#[test]
fn checked_reads_name_the_values_f32_does_not_hold() {
    let dir = scratch("inexact");
    let path = dir.join("x.npy");
    let values = [
        1.0,
        1.0 + 2f64.powi(-30),
        f64::NAN,
        1e300,
        0.1,
        2f64.powi(-149),
        -0.0,
        f64::INFINITY,
    ];
    let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 4), }";
    let mut bytes = NPY_MAGIC.to_vec();
    bytes.extend_from_slice(&[1, 0]);
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    values
        .iter()
        .for_each(|v: &f64| bytes.extend_from_slice(&v.to_le_bytes()));
    std::fs::write(&path, &bytes).unwrap();
    let stored = &index_tensors(&path).unwrap()["x"];
    let (whole, inexact) = stored.read_checked().unwrap();
    let bits = |t: &Tensor| t.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&whole), bits(&stored.read().unwrap()));
    assert_eq!(
        inexact,
        vec![(1, 1.0 + 2f64.powi(-30)), (3, 1e300), (4, 0.1)]
    );
    let (item, inexact) = stored.read_items_checked(1..2).unwrap();
    assert_eq!(item.data[..2], [0.1f32, 2f32.powi(-149)]);
    assert_eq!(inexact, vec![(0, 0.1)]);
    assert!(stored.read_items_checked(2..3).is_err(), "past the end");
    let t = Tensor::new(vec![2], vec![0.1, 1.5]).unwrap();
    write_tensors(&path, &BTreeMap::from([("x".into(), t)]), Dtype::F32).unwrap();
    let stored = &index_tensors(&path).unwrap()["x"];
    assert!(stored.read_checked().unwrap().1.is_empty());
}

#[test]
fn npy_errors_are_clear() {
    let dir = scratch("npy-errors");
    let path = dir.join("x.npy");
    let t = Tensor::new(vec![4], vec![1.0; 4]).unwrap();
    write_tensors(&path, &BTreeMap::from([("x".to_string(), t)]), Dtype::F32).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let decode = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        read_tensors(&path).unwrap_err()
    };
    let e = decode(&bytes[..bytes.len() - 3]);
    assert!(e.to_string().contains("truncated data"), "{e}");
    let mut fortran = bytes.clone();
    let pos = fortran.windows(5).position(|w| w == b"False").unwrap();
    fortran[pos..pos + 5].copy_from_slice(b"True ");
    let e = decode(&fortran);
    assert!(e.to_string().contains("Fortran"), "{e}");
    let mut be = bytes.clone();
    let pos = be.windows(3).position(|w| w == b"<f4").unwrap();
    be[pos] = b'>';
    let e = decode(&be);
    assert!(e.to_string().contains(">f4"), "{e}");
}

/// Damaged files are errors, never panics: every cut of a safetensors file and of `.npy`
/// files of format versions 1 and 2, and seeded random damage (bytes overwritten, a byte
/// inserted or removed, a number in the header made huge, zero or negative), each indexed
/// and then read whole and by items. The undamaged files read back their tensors.
#[test]
fn damaged_files_are_errors_never_panics() {
    let dir = scratch("damaged");
    let tensors = sample_tensors();
    let rows = BTreeMap::from([("rows".to_string(), tensors["c_rows"].clone())]);
    let mut files = Vec::new();
    for (name, set, dtype) in [
        ("t.safetensors", &tensors, Dtype::F16),
        ("rows.npy", &rows, Dtype::F32),
    ] {
        let path = dir.join(name);
        write_tensors(&path, set, dtype).unwrap();
        assert_eq!(&read_tensors(&path).unwrap(), set, "{name}");
        files.push((path.clone(), std::fs::read(&path).unwrap()));
    }
    // Version 2.0 of the same `.npy`: a 4-byte header length.
    let v1 = &files[1].1;
    let header_len = usize::from(u16::from_le_bytes([v1[8], v1[9]]));
    let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
    v2.extend(u32::try_from(header_len + 2).unwrap().to_le_bytes());
    v2.extend(&v1[10..10 + header_len - 1]);
    v2.extend(b"  \n");
    v2.extend(&v1[10 + header_len..]);
    let path = dir.join("rows2.npy");
    std::fs::write(&path, &v2).unwrap();
    assert_eq!(read_tensors(&path).unwrap()["rows2"], rows["rows"]);
    files.push((path, v2));

    let exercise = |path: &Path, what: &str| {
        let run = std::panic::catch_unwind(|| {
            if let Ok(index) = index_tensors(path) {
                for t in index.values() {
                    let _ = t.read();
                    if let Some(&n) = t.shape.first() {
                        let _ = t.read_items(0..n.min(1));
                        let _ = t.read_items(n.saturating_sub(2)..n);
                    }
                }
            }
            let _ = read_tensors(path);
        });
        assert!(run.is_ok(), "{}: {what} panicked", path.display());
    };
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n as u64) as usize
    };
    for (path, bytes) in &files {
        for cut in 0..bytes.len() {
            std::fs::write(path, &bytes[..cut]).unwrap();
            exercise(path, &format!("cut at {cut}"));
        }
        // Half the damage lands in the first 160 bytes, where the headers are.
        let head = bytes.len().min(160);
        for case in 0..1500 {
            let mut b = bytes.clone();
            let at = |r: usize, next: &mut dyn FnMut(usize) -> usize| {
                if next(2) == 0 { next(head) } else { next(r) }
            };
            match case % 4 {
                0 => {
                    for _ in 0..=next(3) {
                        let i = at(b.len(), &mut next);
                        b[i] = next(256) as u8;
                    }
                }
                1 => {
                    let i = at(b.len(), &mut next);
                    b.insert(i, next(256) as u8);
                }
                2 => {
                    let i = at(b.len(), &mut next);
                    b.remove(i);
                }
                _ => {
                    // A run of digits in the header replaced by another number.
                    let digits: Vec<usize> = (0..head).filter(|&i| b[i].is_ascii_digit()).collect();
                    if let Some(&i) = digits.get(next(digits.len().max(1))) {
                        let end = (i..head).find(|&j| !b[j].is_ascii_digit()).unwrap_or(head);
                        let with: &[u8] = [
                            &b"0"[..],
                            b"-1",
                            b"4294967296",
                            b"18446744073709551615",
                            b"99999999999999999999999",
                        ][next(5)];
                        b.splice(i..end, with.iter().copied());
                    }
                }
            }
            std::fs::write(path, &b).unwrap();
            exercise(path, &format!("damage case {case}"));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tile_layouts() {
    // Vector [2, 3] with N = 2: rows padded to 4 lanes -> [2, 2, 2].
    let v = Tensor::new(vec![2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap();
    let t = to_tiles("v", &v, 2, false).unwrap();
    assert_eq!(t.shape, vec![2, 2, 2]);
    assert_eq!(t.data, vec![1., 2., 3., 0., 4., 5., 6., 0.]);
    assert_eq!(from_tiles("v", &t, &[2, 3], 2, false).unwrap(), v);
    // Matrix [3, 3] with N = 2: tiles (0,0) = [[1,2],[4,5]], (0,1) = [[3,0],[6,0]],
    // (1,0) = [[7,8],[0,0]], (1,1) = [[9,0],[0,0]].
    let m = Tensor::new(vec![3, 3], (1..=9).map(|v| v as f32).collect()).unwrap();
    let t = to_tiles("m", &m, 2, true).unwrap();
    assert_eq!(t.shape, vec![2, 2, 2, 2]);
    assert_eq!(
        t.data,
        vec![
            1., 2., 4., 5., 3., 0., 6., 0., 7., 8., 0., 0., 9., 0., 0., 0.
        ]
    );
    assert_eq!(from_tiles("m", &t, &[3, 3], 2, true).unwrap(), m);
}

mod files;

/// f32 to f16 by hand, at the start of the data and again across the edge of the converter's
/// 64 Ki pieces: ties go to even (1 + 2^-11 to 1.0, 1 + 3 * 2^-11 up; 2^-25 to zero, 3 *
/// 2^-25 to the second subnormal; 65520 to infinity), the largest finite and smallest
/// subnormal are kept, -0.0 keeps its sign and a NaN is the quiet NaN.
#[test]
fn f16_conversion_by_hand_across_pieces() {
    let cases: [(f32, u16); 11] = [
        (1.0, 0x3c00),
        (1.0 + 2f32.powi(-11), 0x3c00),
        (1.0 + 3.0 * 2f32.powi(-11), 0x3c02),
        (65504.0, 0x7bff),
        (65520.0, 0x7c00),
        (2f32.powi(-24), 0x0001),
        (2f32.powi(-25), 0x0000),
        (3.0 * 2f32.powi(-25), 0x0002),
        (-0.0, 0x8000),
        (-2.5, 0xc100),
        (f32::NAN, 0x7e00),
    ];
    let mut data = vec![0.5f32; (1 << 16) + 100];
    let edge = (1 << 16) - 5;
    for (k, &(v, _)) in cases.iter().enumerate() {
        data[k] = v;
        data[edge + k] = v;
    }
    let halves = crate::tensor::to_f16(&data);
    assert_eq!(halves.len(), data.len());
    for (k, &(v, bits)) in cases.iter().enumerate() {
        assert_eq!(halves[k].to_bits(), bits, "{v}");
        assert_eq!(
            halves[edge + k].to_bits(),
            bits,
            "{v} across the pieces' edge"
        );
    }
    assert!(halves.iter().enumerate().all(|(i, h)| {
        let case = i < cases.len() || (edge..edge + cases.len()).contains(&i);
        case || h.to_bits() == 0x3800
    }));
}

/// A float16 file refuses the first value an f16 does not hold, by its flat index (past the
/// check's first piece of 1,024 values too); a NaN is written as the quiet NaN.
#[test]
fn f16_encoding_names_the_first_value_it_cannot_hold() {
    let mut data = vec![0.25f32; 3000];
    data[7] = f32::NAN;
    data[1500] = 0.1;
    data[2500] = 1.0 / 3.0;
    let err = encode_values(&data, Dtype::F16).expect_err("0.1 is no f16 value");
    assert_eq!((err.index, err.value), (1500, 0.1));
    data[1500] = 0.25;
    let err = encode_values(&data, Dtype::F16).expect_err("1/3 is no f16 value");
    assert_eq!(err.index, 2500);
    data[2500] = 0.25;
    let bytes = encode_values(&data, Dtype::F16).expect("f16 values and a NaN");
    assert_eq!(&bytes[14..16], &0x7e00u16.to_le_bytes());
    assert_eq!(&bytes[..2], &0x3400u16.to_le_bytes());
}
