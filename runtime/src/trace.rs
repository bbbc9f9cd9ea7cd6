//! The write trace: one record per destination of every `v_wr`, as JSON lines (format
//! documented in `docs/emulator.md`). Shared by the emulator and the software graph, so a
//! hardware debug dump in this format can be compared with either.

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

/// Write records as JSON lines: one piece of a [`TraceWriter`].
pub fn write_trace(path: &Path, records: &[TraceRecord]) -> Result<(), TraceError> {
    let mut w = TraceWriter::create(path)?;
    w.write(records)?;
    w.finish()
}

/// A trace file written in pieces of records as a run produces them, so a large batch's trace
/// never sits whole in memory. Written under a temporary name and put in its place by
/// [`TraceWriter::finish`] ([`crate::io::TempFile`]): a run that fails leaves none behind.
pub struct TraceWriter {
    out: BufWriter<std::fs::File>,
    file: crate::io::TempFile,
}

impl TraceWriter {
    /// Create the file (under its temporary name).
    pub fn create(path: &Path) -> Result<TraceWriter, TraceError> {
        let err = |source| TraceError::Write {
            path: path.to_path_buf(),
            source,
        };
        let file = crate::io::TempFile::create(path).map_err(err)?;
        let out = BufWriter::new(file.file.try_clone().map_err(err)?);
        Ok(TraceWriter { out, file })
    }

    /// Append `records`, one JSON line each.
    pub fn write(&mut self, records: &[TraceRecord]) -> Result<(), TraceError> {
        let err = |source| TraceError::Write {
            path: self.file.path().to_path_buf(),
            source,
        };
        for r in records {
            serde_json::to_writer(&mut self.out, r).map_err(|e| err(e.into()))?;
            self.out.write_all(b"\n").map_err(err)?;
        }
        Ok(())
    }

    /// Put the file in its place.
    pub fn finish(mut self) -> Result<(), TraceError> {
        let path = self.file.path().to_path_buf();
        let err = |source| TraceError::Write {
            path: path.clone(),
            source,
        };
        self.out.flush().map_err(&err)?;
        self.file.finish().map_err(err)
    }
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

/// Where two traces of the same program first part ways.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceDivergence {
    /// Batch item, and the record's position within that item's trace (execution order).
    pub item: usize,
    pub position: usize,
    pub chain: usize,
    pub iteration: u32,
    pub dst: String,
    pub addr: u32,
    /// 1-based source line of the `v_wr`.
    pub line: usize,
    /// Lanes of the record whose bits differ, and the first of them (tile-major index).
    pub lanes_differing: usize,
    pub first_lane: usize,
    pub hardware_bits: u32,
    pub software_bits: u32,
}

/// Record-by-record comparison of a hardware (or emulator) trace with a software trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceComparison {
    pub records: usize,
    pub identical: usize,
    /// The earliest divergent record in execution order (lowest position, then lowest item).
    pub first: Option<TraceDivergence>,
}

/// Two traces that do not describe the same execution.
#[derive(Debug, thiserror::Error)]
pub enum TraceMismatch {
    #[error(
        "the hardware trace has {hardware} records for batch item {item} but the software \
         graph wrote {software}; help: trace the same firmware with the same batch, and keep \
         every `v_wr` record"
    )]
    Count {
        item: usize,
        hardware: usize,
        software: usize,
    },
    #[error(
        "record {position} of batch item {item} is out of step: hardware has {hardware}, the \
         software graph has {software}; help: the trace must come from the same firmware, in \
         execution order"
    )]
    OutOfStep {
        item: usize,
        position: usize,
        hardware: String,
        software: String,
    },
}

impl TraceRecord {
    /// `chain C iter I v_wr DST[ADDR] (line L), K lanes`: which write this is.
    fn describe(&self) -> String {
        format!(
            "chain {} iteration {} v_wr {}[{}] (line {}), {} lanes",
            self.chain,
            self.iteration,
            self.dst,
            self.addr,
            self.line,
            self.bits.len()
        )
    }

    fn same_write(&self, other: &TraceRecord) -> bool {
        (
            self.chain,
            self.iteration,
            &self.dst,
            self.addr,
            self.line,
            self.bits.len(),
        ) == (
            other.chain,
            other.iteration,
            &other.dst,
            other.addr,
            other.line,
            other.bits.len(),
        )
    }
}

/// Records grouped by batch item, each group in file (execution) order.
fn by_item(records: &[TraceRecord]) -> std::collections::BTreeMap<usize, Vec<&TraceRecord>> {
    let mut items = std::collections::BTreeMap::<usize, Vec<&TraceRecord>>::new();
    for r in records {
        items.entry(r.item).or_default().push(r);
    }
    items
}

/// Compare two traces record by record. Bits are compared as patterns (NaN canonical on both
/// sides); the records themselves (chain, iteration, destination, address, line, width) must
/// match one for one, or the traces are not of the same execution.
pub fn compare_traces(
    hardware: &[TraceRecord],
    software: &[TraceRecord],
) -> Result<TraceComparison, TraceMismatch> {
    let (hw, sw) = (by_item(hardware), by_item(software));
    let mut cmp = TraceComparison {
        records: 0,
        identical: 0,
        first: None,
    };
    let empty = Vec::new();
    for item in hw
        .keys()
        .chain(sw.keys())
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (h, s) = (
            hw.get(&item).unwrap_or(&empty),
            sw.get(&item).unwrap_or(&empty),
        );
        if h.len() != s.len() {
            return Err(TraceMismatch::Count {
                item,
                hardware: h.len(),
                software: s.len(),
            });
        }
        for (position, (h, s)) in h.iter().zip(s).enumerate() {
            if !h.same_write(s) {
                return Err(TraceMismatch::OutOfStep {
                    item,
                    position,
                    hardware: h.describe(),
                    software: s.describe(),
                });
            }
            cmp.records += 1;
            let differing: Vec<usize> = (0..h.bits.len())
                .filter(|&i| h.bits[i] != s.bits[i])
                .collect();
            let Some(&lane) = differing.first() else {
                cmp.identical += 1;
                continue;
            };
            let earlier = cmp
                .first
                .as_ref()
                .is_none_or(|f| (position, item) < (f.position, f.item));
            if earlier {
                cmp.first = Some(TraceDivergence {
                    item,
                    position,
                    chain: h.chain,
                    iteration: h.iteration,
                    dst: h.dst.clone(),
                    addr: h.addr,
                    line: h.line,
                    lanes_differing: differing.len(),
                    first_lane: lane,
                    hardware_bits: h.bits[lane],
                    software_bits: s.bits[lane],
                });
            }
        }
    }
    Ok(cmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(item: usize, chain: usize, bits: Vec<u32>) -> TraceRecord {
        TraceRecord {
            item,
            chain,
            iteration: 0,
            dst: "ivrf".into(),
            addr: 3,
            line: 10 + chain,
            bits,
        }
    }

    #[test]
    fn identical_traces_have_no_divergence() {
        let t = vec![rec(0, 0, vec![1, 2]), rec(0, 1, vec![3, 4])];
        let c = compare_traces(&t, &t).expect("same execution");
        assert_eq!((c.records, c.identical, c.first), (2, 2, None));
    }

    #[test]
    fn earliest_position_wins_across_items() {
        // Item 0 diverges at its second write, item 1 at its first: item 1's is earlier in
        // execution order.
        let hw = vec![
            rec(0, 0, vec![1, 2]),
            rec(0, 1, vec![3, 4]),
            rec(1, 0, vec![5, 6]),
            rec(1, 1, vec![7, 8]),
        ];
        let mut sw = hw.clone();
        sw[1].bits[1] = 0x44;
        sw[2].bits[0] = 0x55;
        let c = compare_traces(&hw, &sw).expect("same execution");
        assert_eq!((c.records, c.identical), (4, 2));
        let f = c.first.expect("diverges");
        assert_eq!((f.item, f.position, f.chain, f.line), (1, 0, 0, 10));
        assert_eq!(
            (f.first_lane, f.hardware_bits, f.software_bits),
            (0, 5, 0x55)
        );
    }

    #[test]
    fn traces_of_different_executions_are_rejected() {
        let hw = vec![rec(0, 0, vec![1]), rec(0, 1, vec![2])];
        let short = vec![rec(0, 0, vec![1])];
        assert!(matches!(
            compare_traces(&hw, &short),
            Err(TraceMismatch::Count {
                item: 0,
                hardware: 2,
                software: 1
            })
        ));
        let mut other = hw.clone();
        other[1].addr = 9;
        assert!(matches!(
            compare_traces(&hw, &other),
            Err(TraceMismatch::OutOfStep {
                item: 0,
                position: 1,
                ..
            })
        ));
    }
}
