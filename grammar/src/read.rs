//! Opening a file nnpc reads: only a regular file (a link to one is followed). A FIFO, a
//! device (`/dev/zero`), a socket or a directory is refused before anything is read, and a FIFO
//! is opened without waiting for a writer, so no path makes a read wait or run without end.
//! Every reader of a user's file opens it here: firmware, targets, tensor files, traces,
//! tables, compiled graphs.

use std::fs::File;
use std::path::Path;

/// Why [`open_regular`] or [`read_limited`] read nothing.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum LimitedReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("it is not a regular file but {kind}")]
    #[diagnostic(help("give the path of a file"))]
    NotAFile { kind: &'static str },
    #[error("it has {size} bytes, more than the {limit} bytes this file may have")]
    TooLarge { size: u64, limit: u64 },
}

/// What `m` is, where it is not a regular file.
fn not_a_file(m: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    match () {
        _ if t.is_file() => None,
        _ if t.is_dir() => Some("a directory"),
        _ if t.is_fifo() => Some("a FIFO"),
        _ if t.is_char_device() || t.is_block_device() => Some("a device"),
        _ if t.is_socket() => Some("a socket"),
        _ => Some("not a file"),
    }
}

/// The regular file `path` (a link to one is followed), open for reading, with its length.
/// Anything else is refused before it is opened, and again once open (a FIFO put in the
/// file's place since the check opens at once instead of waiting for a writer).
pub fn open_regular(path: &Path) -> Result<(File, u64), LimitedReadError> {
    if let Some(kind) = not_a_file(&std::fs::metadata(path)?) {
        return Err(LimitedReadError::NotAFile { kind });
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(all(
        target_os = "linux",
        any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "x86",
            target_arch = "arm",
            target_arch = "riscv64"
        )
    ))]
    {
        // O_NONBLOCK: harmless for a regular file, and a FIFO opens at once.
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(0o4000);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if let Some(kind) = not_a_file(&meta) {
        return Err(LimitedReadError::NotAFile { kind });
    }
    Ok((file, meta.len()))
}

/// The bytes of the regular file `path` ([`open_regular`]), at most `limit` of them: a file
/// of more than `limit` bytes is refused without reading it whole, so the bytes read are
/// bounded whatever the path names.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, LimitedReadError> {
    use std::io::Read;
    let (file, len) = open_regular(path)?;
    if len > limit {
        return Err(LimitedReadError::TooLarge { size: len, limit });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        // It grew while it was read.
        return Err(LimitedReadError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}
