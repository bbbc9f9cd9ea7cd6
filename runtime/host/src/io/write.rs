//! Writing in pieces: files written under temporary names and put in their places at the end.

use super::npy::npy_header;
use super::safetensors_file::safetensors_header;
use super::stored::*;
use crate::tensor::{ShapeDisplay, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Tensor files written in pieces of consecutive items (the first dimension) as a run
/// produces them, so a large batch's outputs never sit whole in memory. The files go by the
/// path as in [`write_tensors`](super::write_tensors) (which writes each tensor as one piece). Each file is written
/// under a temporary name next to its place (`.NAME.nnpc-PID.tmp`) and renamed there by
/// [`ItemWriter::finish`]: a run that fails or is dropped leaves no file half-written and an
/// existing one untouched.
pub struct ItemWriter {
    dtype: Dtype,
    files: Vec<TempFile>,
    /// Each tensor's file (an index into `files`), where its values start there, and its
    /// shape.
    slots: BTreeMap<String, (usize, u64, Vec<usize>)>,
    /// The directories made for the files; after `files`, so dropped once they are removed.
    made: MadeDirs,
}

/// Directories made for a writer's files, deepest first: removed when it is dropped before
/// [`ItemWriter::finish`] (each only while empty, so nothing else is ever removed), so a
/// failed run leaves no empty directory behind.
#[derive(Default)]
struct MadeDirs(Vec<PathBuf>);

impl MadeDirs {
    /// Make `path` and the directories above it that do not exist, keeping which were made.
    fn create(&mut self, path: &Path) -> Result<(), std::io::Error> {
        let missing = path
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err());
        let missing: Vec<PathBuf> = missing.map(Path::to_path_buf).collect();
        let made = std::fs::create_dir_all(path);
        self.0.extend(missing);
        made
    }
}

impl Drop for MadeDirs {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A file written under a temporary name next to its place (`.NAME.nnpc-PID.tmp`) and
/// renamed there by [`TempFile::finish`]; dropped before that, it is removed, so a failed or
/// interrupted run leaves no file half-written and an existing one untouched. A symbolic
/// link, a FIFO or a device in the file's place (`/dev/stdout`, a pipe to another program) is
/// written through, never replaced: the file is then written under a temporary name in the
/// system's temporary directory and its bytes copied there by `finish`.
pub struct TempFile {
    pub file: std::fs::File,
    temp: PathBuf,
    path: PathBuf,
    /// Whether `finish` copies the bytes into `path` instead of renaming the file there.
    through: bool,
}

impl TempFile {
    /// Create the temporary file of `path`. A directory in `path`'s place is refused now,
    /// since the rename at the end would fail.
    pub fn create(path: &Path) -> Result<TempFile, std::io::Error> {
        // `metadata` follows links: what a write would reach.
        let target = std::fs::metadata(path).ok();
        if target.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(std::io::ErrorKind::IsADirectory.into());
        }
        let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        let through = link || target.is_some_and(|m| !m.is_file());
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = format!(
            ".{}.nnpc-{}.tmp",
            name.unwrap_or_default(),
            std::process::id()
        );
        let temp = if through {
            // One process may write several files through (outputs and a trace).
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::env::temp_dir().join(format!("{name}.{k}"))
        } else {
            path.with_file_name(name)
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        Ok(TempFile {
            file,
            temp,
            path: path.to_path_buf(),
            through,
        })
    }

    /// The place the file goes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Put the file in its place: rename it there, or copy its bytes through the link, FIFO
    /// or device there.
    pub fn finish(mut self) -> Result<(), std::io::Error> {
        use std::io::{Seek, Write};
        if !self.through {
            return std::fs::rename(&self.temp, &self.path);
            // `Drop` then finds no temporary file to remove (or removes it if the rename
            // failed).
        }
        self.file.rewind()?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.path)?;
        std::io::copy(&mut self.file, &mut out)?;
        out.flush()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.temp);
    }
}

impl ItemWriter {
    /// Create the files for tensors of `shapes`, holding their headers (the values read as
    /// zeros until written).
    pub fn create(
        path: &Path,
        shapes: &BTreeMap<String, Vec<usize>>,
        dtype: Dtype,
    ) -> Result<ItemWriter, IoError> {
        ItemWriter::create_with(path, shapes, dtype, &Metadata::new())
    }

    /// [`create`](Self::create), recording `metadata` with the tensors: in a safetensors
    /// file's header (`__metadata__`), else in a sidecar JSON file ([`sidecar_path`]). None
    /// is written for empty `metadata`.
    pub fn create_with(
        path: &Path,
        shapes: &BTreeMap<String, Vec<usize>>,
        dtype: Dtype,
        metadata: &Metadata,
    ) -> Result<ItemWriter, IoError> {
        let kind = output_kind(path)?;
        let mut writer = ItemWriter {
            dtype,
            files: Vec::new(),
            slots: BTreeMap::new(),
            made: MadeDirs::default(),
        };
        // Every byte count below fits (with room for the headers), or none is made.
        let total = shapes.values().try_fold(0usize, |sum, shape| {
            let one = shape
                .iter()
                .try_fold(dtype.size(), |a, &d| a.checked_mul(d))?;
            sum.checked_add(one)?.checked_add(1 << 20)
        });
        if total.is_none() {
            return Err(IoError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let bytes = |shape: &[usize]| shape.iter().product::<usize>() * dtype.size();
        if kind == OutputKind::Safetensors {
            // Each tensor's values after the previous one's, in name order.
            let mut end = 0;
            let spans: Vec<(usize, usize)> = shapes
                .values()
                .map(|shape| {
                    let start = end;
                    end += bytes(shape);
                    (start, end)
                })
                .collect();
            let header = safetensors_header(shapes, &spans, dtype, metadata, path)?;
            writer.open(path, &header, end as u64)?;
            for ((name, shape), (start, _)) in shapes.iter().zip(spans) {
                let start = (header.len() + start) as u64;
                writer.slots.insert(name.clone(), (0, start, shape.clone()));
            }
            return Ok(writer);
        }
        let one = kind == OutputKind::Npy;
        if one && shapes.len() != 1 {
            return Err(IoError::NotOne {
                path: path.to_path_buf(),
                count: shapes.len(),
            });
        }
        if !one {
            writer.made.create(path).map_err(|source| IoError::Write {
                path: path.to_path_buf(),
                source,
            })?;
        }
        for (name, shape) in shapes {
            let file = if one {
                path.to_path_buf()
            } else {
                path.join(format!("{name}.npy"))
            };
            let header = npy_header(shape, dtype);
            let index = writer.open(&file, &header, bytes(shape) as u64)?;
            let start = header.len() as u64;
            writer
                .slots
                .insert(name.clone(), (index, start, shape.clone()));
        }
        if let Some(sidecar) = sidecar_path(path).filter(|_| !metadata.is_empty()) {
            // Where the tensors go through a FIFO or a device, there is no place beside them.
            let through = std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir());
            if !through {
                let json = serde_json::to_string_pretty(metadata).unwrap_or_default() + "\n";
                writer.open(&sidecar, json.as_bytes(), 0)?;
            }
        }
        Ok(writer)
    }

    /// Open a temporary file for `path` holding `header` and room for `values` bytes after
    /// it; its index in `files`.
    fn open(&mut self, path: &Path, header: &[u8], values: u64) -> Result<usize, IoError> {
        use std::io::Write;
        let err = |source| IoError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut file = TempFile::create(path).map_err(err)?;
        let ready = file
            .file
            .write_all(header)
            .and_then(|()| file.file.set_len(header.len() as u64 + values));
        // Kept even when that failed, so that it is removed with the writer.
        self.files.push(file);
        ready.map_err(err)?;
        Ok(self.files.len() - 1)
    }

    /// Write the values of `tensors`, each holding consecutive items from item `first` of its
    /// tensor (all of a tensor's dimensions but the first are whole).
    pub fn write_items(
        &mut self,
        first: usize,
        tensors: &BTreeMap<String, Tensor>,
    ) -> Result<(), IoError> {
        use std::io::{Seek, SeekFrom, Write};
        for (name, t) in tensors {
            let piece_err = |message: String| layout_err(name, &t.shape, &message);
            let Some((index, start, shape)) = self.slots.get(name) else {
                return Err(piece_err("the file was created without it".into()));
            };
            let per_item = shape.iter().skip(1).product::<usize>();
            let at = first * per_item;
            if at + t.len() > shape.iter().product::<usize>() {
                return Err(piece_err(format!(
                    "items from {first} do not fit its file's shape {}",
                    ShapeDisplay(shape)
                )));
            }
            let pending = &mut self.files[*index];
            let offset = start + (at * self.dtype.size()) as u64;
            let bytes = encode_values(&t.data, self.dtype).map_err(|e| IoError::NotF16 {
                name: name.clone(),
                shape: ShapeDisplay(&t.shape).to_string(),
                value: e.value,
                index: e.index,
            })?;
            let written = (pending.file.seek(SeekFrom::Start(offset)))
                .and_then(|_| pending.file.write_all(&bytes));
            written.map_err(|source| IoError::Write {
                path: pending.path().to_path_buf(),
                source,
            })?;
        }
        Ok(())
    }

    /// Put every file in its place.
    pub fn finish(self) -> Result<(), IoError> {
        let ItemWriter {
            files, mut made, ..
        } = self;
        for file in files {
            let path = file.path().to_path_buf();
            file.finish()
                .map_err(|source| IoError::Write { path, source })?;
        }
        // In their places: the directories stay.
        made.0.clear();
        Ok(())
    }
}

/// What [`ItemWriter`] writes to a path: one safetensors file, one `.npy` file, or a
/// directory of `NAME.npy` files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    Safetensors,
    Npy,
    Dir,
}

/// What `path` names as an output ([`OutputKind`]): by its extension, `.safetensors` or
/// `.npy` (any case); else a directory: one that exists, or a path with no extension. Any
/// other path (`out.txt`, an existing file without an extension) is an error that lists
/// what is accepted, never a directory made by surprise.
pub fn output_kind(path: &Path) -> Result<OutputKind, IoError> {
    if has_ext(path, "safetensors") {
        return Ok(OutputKind::Safetensors);
    }
    if has_ext(path, "npy") {
        return Ok(OutputKind::Npy);
    }
    let meta = std::fs::metadata(path).ok();
    if meta.as_ref().is_some_and(std::fs::Metadata::is_dir) {
        return Ok(OutputKind::Dir);
    }
    let ext = path.extension().map(|e| e.to_string_lossy().into_owned());
    if ext.is_none() && meta.is_none() {
        return Ok(OutputKind::Dir);
    }
    Err(IoError::OutputKind {
        path: path.to_path_buf(),
        what: match ext {
            Some(ext) => format!("has the extension `.{ext}`"),
            None => "is a file that is not a directory".to_string(),
        },
    })
}

/// The sidecar JSON file that holds the metadata of tensors written to `path` where the
/// format has no place for it: `X.npy.nnpc.json` beside a `.npy` file, `nnpc.json` in a
/// directory of them; `None` for a safetensors file (its header holds it).
pub fn sidecar_path(path: &Path) -> Option<PathBuf> {
    match output_kind(path).ok()? {
        OutputKind::Safetensors => None,
        OutputKind::Npy => {
            let mut name = path.file_name()?.to_os_string();
            name.push(".nnpc.json");
            Some(path.with_file_name(name))
        }
        OutputKind::Dir => Some(path.join("nnpc.json")),
    }
}

/// Write `bytes` to `path` through a temporary file beside it and an atomic rename
/// ([`TempFile`]): a full disk or a crash leaves the old file whole, and two writers never
/// interleave (the last rename wins).
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<(), std::io::Error> {
    use std::io::Write;
    let mut file = TempFile::create(path)?;
    file.file.write_all(bytes)?;
    file.file.sync_all()?;
    file.finish()
}
