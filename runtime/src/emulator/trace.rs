//! The write trace: one record per destination of every `v_wr`, as JSON lines
//! (format documented in `docs/emulator.md`).

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

/// One destination of one `v_wr` at one iteration, for one batch item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Batch item (0-based).
    pub item: usize,
    /// Chain index in program order (0-based).
    pub chain: usize,
    /// Iteration of the chain (0-based).
    pub iteration: u32,
    /// Destination memory as written in source: `ivrf`, `asvrf0`, `mulvrf1`, `dram`, `netq`.
    pub dst: String,
    /// First register written; for `netq`, the 0-based index of the push in the run.
    pub addr: u32,
    /// 1-based source line of the `v_wr`.
    pub line: usize,
    /// Storage-format bit patterns of every lane of every tile written (tile-major), NaN
    /// canonical.
    pub bits: Vec<u32>,
}

/// A trace file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot write trace `{path}`: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read trace `{path}`: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("trace `{path}` line {line} is not a trace record: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// Write records as JSON lines.
pub fn write_trace(path: &Path, records: &[TraceRecord]) -> Result<(), TraceError> {
    let err = |source| TraceError::Write {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(path).map_err(err)?;
    let mut w = BufWriter::new(file);
    for r in records {
        serde_json::to_writer(&mut w, r).map_err(|e| err(e.into()))?;
        w.write_all(b"\n").map_err(err)?;
    }
    w.flush().map_err(err)
}

/// Read a JSON-lines trace (blank lines are skipped).
pub fn read_trace(path: &Path) -> Result<Vec<TraceRecord>, TraceError> {
    let file = std::fs::File::open(path).map_err(|source| TraceError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| TraceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let rec = serde_json::from_str(&line).map_err(|e| TraceError::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            message: e.to_string(),
        })?;
        out.push(rec);
    }
    Ok(out)
}
