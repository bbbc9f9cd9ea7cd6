//! The write trace: one record per destination of every `v_wr`, as JSON lines (format
//! documented in `docs/emulator.md`). Shared by the emulator and the software graph, so a
//! hardware debug dump in this format can be compared with either.

use nnp_numerics::FloatFormat;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufWriter, Write};
use std::ops::Range;
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
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
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
    #[error(
        "trace `{path}` line {line} has more than {limit} bytes, the most a trace line may have"
    )]
    #[diagnostic(help("is it a trace file?"))]
    LineTooLong {
        path: PathBuf,
        line: usize,
        limit: u64,
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

/// The most bytes a line of a trace file read may have (a record of 2^26 lanes or more, at
/// up to 11 digits a lane): a file with a longer one, or none, is refused as it is read,
/// before it fills memory.
pub const MAX_TRACE_LINE_BYTES: u64 = 1 << 30;

/// Read a JSON-lines trace (blank lines are skipped).
pub fn read_trace(path: &Path) -> Result<Vec<TraceRecord>, TraceError> {
    let mut reader = std::io::BufReader::new(open_trace(path)?);
    let (mut out, mut buf, mut line) = (Vec::new(), Vec::new(), 0);
    while read_line(&mut reader, &mut buf, path, &mut line)? > 0 {
        out.extend(parse_line::<TraceRecord>(path, line, &buf)?);
    }
    Ok(out)
}

/// The trace file `path`, open: a regular file only ([`crate::io::open_regular`]).
fn open_trace(path: &Path) -> Result<std::fs::File, TraceError> {
    use crate::io::LimitedReadError;
    match crate::io::open_regular(path) {
        Ok((file, _)) => Ok(file),
        Err(LimitedReadError::Io(e)) => Err(read_err(path, e)),
        Err(e) => Err(read_err(path, std::io::Error::other(e.to_string()))),
    }
}

/// The next line of `reader` into `buf` (its newline kept), numbered `line` (counted up): its
/// length, 0 at the end; a line of more than [`MAX_TRACE_LINE_BYTES`] is an error.
fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    path: &Path,
    line: &mut usize,
) -> Result<usize, TraceError> {
    use std::io::Read;
    buf.clear();
    let len = reader
        .take(MAX_TRACE_LINE_BYTES + 1)
        .read_until(b'\n', buf)
        .map_err(|source| read_err(path, source))?;
    if len > 0 {
        *line += 1;
    }
    if len as u64 > MAX_TRACE_LINE_BYTES {
        return Err(TraceError::LineTooLong {
            path: path.to_path_buf(),
            line: *line,
            limit: MAX_TRACE_LINE_BYTES,
        });
    }
    Ok(len)
}

fn read_err(path: &Path, source: std::io::Error) -> TraceError {
    TraceError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// One line of a trace file as a `T` (a record, or only its item), or `None` for a blank line.
fn parse_line<T: serde::de::DeserializeOwned>(
    path: &Path,
    line: usize,
    bytes: &[u8],
) -> Result<Option<T>, TraceError> {
    if bytes.trim_ascii().is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| TraceError::Parse {
            path: path.to_path_buf(),
            line,
            message: e.to_string(),
        })
}

/// A record's item alone (its other fields are checked as JSON, not kept).
#[derive(Deserialize)]
struct ItemOf {
    item: usize,
}

/// A trace file indexed by batch item when it is opened (one pass over its lines, keeping
/// only where each item's records are), so the records of a range of items are read and
/// parsed on their own ([`TraceFile::read_items`]): a trace of any size is compared a chunk
/// of items at a time. The records may come in any order of items; those of one item keep
/// their order in the file (execution order).
pub struct TraceFile {
    path: PathBuf,
    /// Runs of consecutive lines of one item, by item, then by place in the file.
    runs: Vec<Run>,
}

/// Lines `line..` of a trace file, bytes `start..end`: records of one item.
struct Run {
    item: usize,
    start: u64,
    end: u64,
    /// 1-based number of the run's first line.
    line: usize,
}

impl TraceFile {
    /// Index the trace at `path`. A line that is not JSON, or has no `item`, is an error
    /// here; a record's other fields are checked when its items are read.
    pub fn open(path: &Path) -> Result<TraceFile, TraceError> {
        let mut reader = std::io::BufReader::new(open_trace(path)?);
        let (mut runs, mut buf, mut at, mut line) = (Vec::<Run>::new(), Vec::new(), 0u64, 0);
        loop {
            let len = read_line(&mut reader, &mut buf, path, &mut line)?;
            if len == 0 {
                break;
            }
            let (start, end) = (at, at + len as u64);
            at = end;
            let Some(ItemOf { item }) = parse_line(path, line, &buf)? else {
                continue;
            };
            match runs.last_mut() {
                Some(run) if run.item == item => run.end = end,
                _ => runs.push(Run {
                    item,
                    start,
                    end,
                    line,
                }),
            }
        }
        // Stable: an item's runs stay in file order.
        runs.sort_by_key(|r| r.item);
        Ok(TraceFile {
            path: path.to_path_buf(),
            runs,
        })
    }

    /// The records of items `items` (ranges past the trace's last item are fine), by item,
    /// each item's in file order.
    pub fn read_items(&self, items: Range<usize>) -> Result<Vec<TraceRecord>, TraceError> {
        use std::io::{Read, Seek, SeekFrom};
        let path = &self.path;
        let first = self.runs.partition_point(|r| r.item < items.start);
        let runs = self.runs[first..].iter().take_while(|r| r.item < items.end);
        let mut file = None;
        let (mut out, mut buf) = (Vec::new(), Vec::new());
        for run in runs {
            let file = match &mut file {
                Some(f) => f,
                None => file.insert(open_trace(path)?),
            };
            buf.resize((run.end - run.start) as usize, 0);
            file.seek(SeekFrom::Start(run.start))
                .and_then(|_| file.read_exact(&mut buf))
                .map_err(|e| read_err(path, e))?;
            for (k, bytes) in buf.split(|&b| b == b'\n').enumerate() {
                let line = run.line + k;
                let Some(record) = parse_line::<TraceRecord>(path, line, bytes)? else {
                    continue;
                };
                // Only a file changed since it was indexed gets here.
                if record.item != run.item {
                    return Err(TraceError::Parse {
                        path: path.clone(),
                        line,
                        message: format!(
                            "the record is of item {}, not {} as when the file was opened \
                             (was it changed?)",
                            record.item, run.item
                        ),
                    });
                }
                out.push(record);
            }
        }
        Ok(out)
    }
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceComparison {
    pub records: usize,
    pub identical: usize,
    /// The earliest divergent record in execution order (lowest position, then lowest item).
    pub first: Option<TraceDivergence>,
}

/// Two traces that do not describe the same execution.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum TraceMismatch {
    #[error(
        "the hardware trace has {hardware} records for batch item {item} but the software graph \
         wrote {software}"
    )]
    #[diagnostic(help(
        "trace the same firmware with the same batch, and keep every `v_wr` record"
    ))]
    Count {
        item: usize,
        hardware: usize,
        software: usize,
    },
    #[error(
        "record {position} of batch item {item} is out of step: hardware has {hardware}, the \
         software graph has {software}"
    )]
    #[diagnostic(help("the trace must come from the same firmware, in execution order"))]
    OutOfStep {
        item: usize,
        position: usize,
        hardware: String,
        software: String,
    },
    #[error(
        "record {position} of batch item {item} ({record}) holds {bits:#X} in lane {lane}, which \
         is not a bit pattern of the storage format `{format}` ({width} bits)"
    )]
    #[diagnostic(help(
        "write each lane as the storage format's bit pattern (fp16: the binary16 bits, 0 to \
         0xFFFF)"
    ))]
    NotAPattern {
        item: usize,
        position: usize,
        record: String,
        lane: usize,
        bits: u32,
        format: String,
        width: u32,
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

/// Compare two traces record by record: one piece of a [`TraceComparer`]. Bits are compared
/// as patterns (NaN canonical on both sides; [`TraceComparer::for_storage`] compares them as
/// values of the storage format, any NaN equal to any NaN); the records themselves (chain, iteration,
/// destination, address, line, width) must match one for one, or the traces are not of the
/// same execution.
pub fn compare_traces(
    hardware: &[TraceRecord],
    software: &[TraceRecord],
) -> Result<TraceComparison, TraceMismatch> {
    let mut cmp = TraceComparer::default();
    cmp.add(hardware, software)?;
    Ok(cmp.finish())
}

/// Whether two lanes hold the same value: the same pattern, or, where the storage format is
/// known, two of its NaN patterns.
fn same_lane(storage: Option<FloatFormat>, h: u32, s: u32) -> bool {
    h == s || storage.is_some_and(|f| is_nan(&f, h) && is_nan(&f, s))
}

/// Whether `bits` is a NaN pattern of `format` (all-ones exponent field, mantissa not zero).
fn is_nan(format: &FloatFormat, bits: u32) -> bool {
    format.decode(u64::from(bits)).is_nan()
}

/// A comparison of two traces built from pieces of items, each piece every record of its
/// items on both sides, the pieces in increasing order of items: the result (and the first
/// error) is the one of comparing the whole traces at once.
#[derive(Default)]
pub struct TraceComparer {
    cmp: TraceComparison,
    /// The storage format whose bit patterns the records hold, where known
    /// ([`TraceComparer::for_storage`]).
    storage: Option<FloatFormat>,
}

impl TraceComparer {
    /// A comparison of traces whose bits are patterns of `storage`, compared as its values
    /// are (docs/diff.md, "What equal means"): every NaN pattern equals every other, whatever
    /// its payload and sign (a board's NaN need not be the emulator's canonical one), and a
    /// hardware lane that is no pattern of the format (wider than it) is an error
    /// ([`TraceMismatch::NotAPattern`]), not a difference.
    pub fn for_storage(storage: FloatFormat) -> TraceComparer {
        TraceComparer {
            storage: Some(storage),
            ..TraceComparer::default()
        }
    }

    /// Compare the records of the next piece of items.
    pub fn add(
        &mut self,
        hardware: &[TraceRecord],
        software: &[TraceRecord],
    ) -> Result<(), TraceMismatch> {
        let (hw, sw) = (by_item(hardware), by_item(software));
        let storage = self.storage;
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
                if let Some(f) = self.storage {
                    let width = f.bits();
                    let wide = h.bits.iter().position(|&b| width < 32 && b >> width != 0);
                    if let Some(lane) = wide {
                        return Err(TraceMismatch::NotAPattern {
                            item,
                            position,
                            record: h.describe(),
                            lane,
                            bits: h.bits[lane],
                            format: crate::values_name(&f),
                            width,
                        });
                    }
                }
                let cmp = &mut self.cmp;
                cmp.records += 1;
                let differing: Vec<usize> = (0..h.bits.len())
                    .filter(|&i| !same_lane(storage, h.bits[i], s.bits[i]))
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
        Ok(())
    }

    /// The comparison of every piece.
    pub fn finish(self) -> TraceComparison {
        self.cmp
    }
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

    /// Under fp16 storage (by hand): 0x7E01 and 0xFE00 are NaNs (exponent field 0x1F,
    /// mantissa not zero), so they equal the canonical 0x7E00, as output values do; 0x7C00
    /// (+inf, mantissa zero) is no NaN and differs from it, as 0x3C00 (1.0) does. A lane of
    /// 0x10000 is no fp16 pattern: an error naming the record, the lane and the format. Without
    /// a storage format the patterns themselves are compared.
    #[test]
    fn nan_patterns_are_equal_under_a_storage_format() {
        let fp16 = FloatFormat::ieee(5, 10);
        let hw = vec![
            rec(0, 0, vec![0x7E01, 0xFE00]),
            rec(0, 1, vec![0x7C00, 0x3C00]),
        ];
        let sw = vec![
            rec(0, 0, vec![0x7E00, 0x7E00]),
            rec(0, 1, vec![0x7E00, 0x7E00]),
        ];
        let mut cmp = TraceComparer::for_storage(fp16);
        cmp.add(&hw, &sw).expect("same execution");
        let c = cmp.finish();
        assert_eq!((c.records, c.identical), (2, 1));
        let f = c.first.expect("diverges");
        assert_eq!((f.position, f.lanes_differing, f.first_lane), (1, 2, 0));
        assert_eq!((f.hardware_bits, f.software_bits), (0x7C00, 0x7E00));
        // Patterns alone: the NaNs differ too.
        let c = compare_traces(&hw, &sw).expect("same execution");
        assert_eq!((c.identical, c.first.expect("diverges").position), (0, 0));

        let wide = vec![
            rec(0, 0, vec![0x7E00, 0x1_0000]),
            rec(0, 1, vec![0x7E00, 0x7E00]),
        ];
        let err = TraceComparer::for_storage(fp16)
            .add(&wide, &sw)
            .expect_err("not a pattern");
        assert!(
            matches!(
                err,
                TraceMismatch::NotAPattern {
                    item: 0,
                    position: 0,
                    lane: 1,
                    bits: 0x1_0000,
                    width: 16,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("storage format `fp16`"), "{err}");
    }

    /// Records of items 0 to 2 interleaved in the file, with blank lines: each range of items
    /// reads its items' records, by item, each item's in file order; errors name the line of
    /// the file, counting the blank ones.
    #[test]
    fn a_trace_file_reads_ranges_of_items_in_any_order() {
        let dir = std::env::temp_dir().join(format!("nnpc-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("t.jsonl");
        let line = |r: &TraceRecord| serde_json::to_string(r).expect("json");
        let recs = [
            rec(1, 0, vec![10]),
            rec(0, 0, vec![20]),
            rec(0, 1, vec![21]),
            rec(2, 0, vec![30]),
            rec(1, 1, vec![11]),
            rec(0, 2, vec![22]),
        ];
        let mut text: Vec<String> = recs.iter().map(line).collect();
        text.insert(3, String::new()); // line 4 is blank
        std::fs::write(&path, text.join("\n")).expect("write");

        let file = TraceFile::open(&path).expect("index");
        let bits = |items| -> Vec<u32> {
            let got = file.read_items(items).expect("read");
            got.iter().map(|r| r.bits[0]).collect()
        };
        assert_eq!(bits(0..1), [20, 21, 22]);
        assert_eq!(bits(1..3), [10, 11, 30]);
        assert_eq!(bits(0..usize::MAX), [20, 21, 22, 10, 11, 30]);
        assert_eq!(bits(3..usize::MAX), [] as [u32; 0]);

        // Line 6 (item 1's second record) loses its bits: found when item 1 is read.
        text[5] = text[5].replace("\"bits\":[11]", "\"bits\":\"x\"");
        std::fs::write(&path, text.join("\n")).expect("write");
        let file = TraceFile::open(&path).expect("index");
        assert_eq!(file.read_items(0..1).expect("item 0").len(), 3);
        let err = file.read_items(1..2).expect_err("bad bits").to_string();
        assert!(err.contains("line 6 is not a trace record"), "{err}");

        // A line that is not JSON stops the opening, with its line.
        text[6] = "{\"item\": 0,".into();
        std::fs::write(&path, text.join("\n")).expect("write");
        let err = TraceFile::open(&path).err().expect("bad json").to_string();
        assert!(err.contains("line 7 is not a trace record"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Pieces of items give the whole comparison: the counts carry on, and a later piece's
    /// divergence at an earlier position replaces an earlier piece's.
    #[test]
    fn pieces_give_the_whole_comparison() {
        let hw: Vec<TraceRecord> = (0..4)
            .flat_map(|item| (0..3).map(move |chain| rec(item, chain, vec![1, 2, 3])))
            .collect();
        let mut sw = hw.clone();
        sw[3 + 2].bits[1] = 9; // item 1, position 2
        sw[3 * 3 + 1].bits[2] = 9; // item 3, position 1: the earliest
        sw[3 * 3 + 2].bits[0] = 9; // item 3, position 2
        let whole = compare_traces(&hw, &sw).expect("same execution");
        let mut pieces = TraceComparer::default();
        for items in [0..2, 2..3, 3..4] {
            let of = |t: &[TraceRecord]| -> Vec<TraceRecord> {
                t.iter()
                    .filter(|r| items.contains(&r.item))
                    .cloned()
                    .collect()
            };
            pieces.add(&of(&hw), &of(&sw)).expect("same execution");
        }
        let pieces = pieces.finish();
        assert_eq!(pieces, whole);
        assert_eq!((whole.records, whole.identical), (12, 9));
        let f = whole.first.expect("diverges");
        assert_eq!((f.item, f.position, f.first_lane), (3, 1, 2));
    }
}
