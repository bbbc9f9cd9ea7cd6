//! A dump against the software graph: the graph run on the hardware's data in chunks
//! ([`crate::stream`]), each chunk's outputs (and trace records) compared with the dump's as
//! the chunk is done, and the `--explain` search, the reruns under changes of the target's
//! numerics ([`crate::explain`]).

use super::{DiffBuilder, DiffError, DiffReport, Dump};
use crate::exec::trace::kept_records;
use crate::exec::{ExecError, ExecOptions, Execution};
use crate::explain::{
    ExplainRow, NumericsChange, SCREEN_ITEMS, closest, cmp_share, default_target, on_top_of,
    one_knob_changes,
};
use crate::host::{HostError, InputFeed, Progress, Tensor};
use crate::io::IoError;
use crate::stream::{self, Stream, StreamError};
use crate::trace::{TraceComparer, TraceError, TraceFile, TraceMismatch, TraceRecord};
use nnp_grammar::{Program, Target};
use nnp_lowering::swgraph::{self, Roots, SwGraph};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Why a comparison stopped: a chunk's inputs could not be made or read, the run failed, the
/// dump's items or the hardware trace could not be read, or they could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    Input(#[from] HostError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("`{path}`: {source}")]
    Diff { path: PathBuf, source: DiffError },
    #[error("`{path}`: {source}")]
    TraceMismatch {
        path: PathBuf,
        source: TraceMismatch,
    },
    #[error(transparent)]
    Stream(#[from] StreamError),
}

/// Each error's help is its cause's.
impl miette::Diagnostic for CompareError {
    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        match self {
            CompareError::Exec(e) => e.help(),
            CompareError::Input(e) => e.help(),
            CompareError::Io(e) => e.help(),
            CompareError::Trace(e) => e.help(),
            CompareError::Diff { source, .. } => source.help(),
            CompareError::TraceMismatch { source, .. } => source.help(),
            CompareError::Stream(e) => e.help(),
        }
    }
}

impl From<stream::GraphError> for CompareError {
    fn from(e: stream::GraphError) -> CompareError {
        match e {
            stream::GraphError::Exec(e) => e.into(),
            stream::GraphError::Stream(e) => e.into(),
        }
    }
}

/// Which changes of two knobs the explain search tries when no one-knob change is concordant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExplainPairs {
    /// Each change of a second knob on top of the closest one-knob change, when that is
    /// closer than the target itself.
    Closest,
    /// Every pair: each change of a second knob on top of every one-knob change.
    AllPairs,
}

/// What a comparison counts as it goes, for a progress callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// A run of the software graph over `batch` input sets.
    Run { batch: usize },
    /// The explain search's reruns under `changes` changes of the numerics.
    Explain { changes: usize },
}

/// Makes the progress callback of each [`Measure`] (`None`: none), which is dropped when the
/// measure is done.
pub type Meter<'a> = &'a (dyn Fn(Measure) -> Option<Progress> + Sync);

/// A dump against the software graph: what every run against it shares.
pub struct Comparison<'a> {
    pub program: &'a Program,
    /// The dump, checked ([`Dump::check`]) for the feed's batch.
    pub dump: &'a Dump,
    /// The hardware's inputs, a chunk of items at a time.
    pub feed: &'a InputFeed,
    /// How the software graph runs (its device and chunks; the comparison sets
    /// `keep_writes`).
    pub exec: ExecOptions,
    pub meter: Meter<'a>,
    /// Whether the report keeps where the mismatches are (`DiffReport::maps`, the heatmaps of
    /// `nnpc diff --report`).
    pub maps: bool,
}

/// One run of a comparison: over the first `items` of the batch, listing the first `first`
/// mismatches, keeping the maps of the mismatches or not.
#[derive(Clone, Copy)]
struct Pass {
    items: usize,
    first: usize,
    maps: bool,
}

impl Comparison<'_> {
    /// The report of the whole comparison: `graph` (lowered from the program for its outputs,
    /// and every `v_wr` with `trace`) run on the batch with `weights`, its outputs compared
    /// with the dump's, listing the first `first` mismatches; with `trace`, the hardware
    /// trace compared record by record (its records past the batch too, a trace of another
    /// run); with `explain`, where the outputs are not bit-exact, the explain search's rows
    /// ([`Comparison::explain`]).
    pub fn report(
        &self,
        graph: &SwGraph,
        weights: BTreeMap<String, Tensor>,
        first: usize,
        trace: Option<&Path>,
        explain: Option<ExplainPairs>,
    ) -> Result<DiffReport, CompareError> {
        // The hardware trace's lines are indexed by item before the run (a malformed line
        // stops it there); its records are read a chunk of items at a time.
        let hw_trace = match trace {
            Some(path) => Some((path, TraceFile::open(path)?)),
            None => None,
        };
        // The records' lanes are compared as storage values: any NaN equals any NaN, as in the
        // outputs (docs/diff.md, "What equal means").
        let mut traces = match self.program.target.numerics.storage.as_float() {
            Some(storage) => TraceComparer::for_storage(*storage),
            None => TraceComparer::default(),
        };
        let with_trace = hw_trace
            .as_ref()
            .map(|(path, file)| (*path, file, &mut traces));
        // The weights go to the run; the explain search keeps a copy for its own runs.
        let kept = explain.map(|pairs| (pairs, weights.clone()));
        let batch = self.feed.batch;
        let pass = Pass {
            items: batch,
            first,
            maps: self.maps,
        };
        let mut report = self.compare(self.program, graph, weights, pass, with_trace)?;
        if let Some((path, file)) = &hw_trace {
            // Records of items past the batch: a trace of another execution.
            let extra = file.read_items(batch..usize::MAX)?;
            compare_trace_piece(&mut traces, path, &extra, &[])?;
            // A divergent record makes the report not concordant.
            report.set_trace(traces.finish());
        }
        // The changes of the numerics explain outputs: with bit-exact outputs there is nothing
        // for them to explain (a divergent trace alone is named by its first record).
        if let Some((pairs, weights)) = kept.filter(|_| !report.outputs_bit_exact()) {
            let share = (report.bit_exact, report.elements);
            report.explain = Some(self.explain(&weights, share, pairs));
        }
        Ok(report)
    }

    /// Run `graph` (of `program`) over the first `pass.items` of the batch: each chunk's outputs
    /// are compared with the dump's items as the chunk is done, and with `trace` its records
    /// with the same items' records of the hardware trace. The run holds one chunk's inputs,
    /// outputs, dump items and trace records at a time. The report lists the first
    /// `pass.first` mismatches.
    fn compare(
        &self,
        program: &Program,
        graph: &SwGraph,
        weights: BTreeMap<String, Tensor>,
        Pass { items, first, maps }: Pass,
        mut trace: Option<(&Path, &TraceFile, &mut TraceComparer)>,
    ) -> Result<DiffReport, CompareError> {
        let opts = ExecOptions {
            keep_writes: trace.is_some(),
            ..self.exec
        };
        let path = self.dump.path();
        let diff_error = |source| CompareError::Diff {
            path: path.to_path_buf(),
            source,
        };
        let mut diff = DiffBuilder::new(program, first).map_err(diff_error)?;
        if maps {
            diff = diff.with_maps(items);
        }
        let mut engine = stream::Graph::new(graph, &opts, items)?;
        let inputs = |items| self.feed.items(items).map_err(CompareError::Input);
        let sink = |items: Range<usize>, run: Execution| {
            let (hardware, inexact) = self.dump.items(program, items.clone())?;
            diff.add_read(items.start, &hardware, &inexact, &run.outputs)
                .map_err(diff_error)?;
            if let Some((trace_path, file, traces)) = &mut trace {
                let software = kept_records(graph, &run, items.clone())?;
                let hardware = file.read_items(items)?;
                compare_trace_piece(traces, trace_path, &hardware, &software)?;
            }
            Ok(())
        };
        let stream = Stream {
            weights,
            batch: items,
            progress: (self.meter)(Measure::Run { batch: items }),
            stop: None,
        };
        stream.run(&mut engine, inputs, sink)?;
        Ok(diff.finish())
    }

    /// The software graph under each one-knob change of the program's target numerics,
    /// against the dump: on its first [`SCREEN_ITEMS`] items, then, where those are all
    /// bit-exact, on the whole batch. When none is concordant, under changes of two
    /// knobs ([`on_top_of`]): on top of the closest one where it is closer than the target
    /// itself (`share`: the first comparison's bit-exact elements and elements), or on top of
    /// every one.
    pub fn explain(
        &self,
        weights: &BTreeMap<String, Tensor>,
        share: (usize, usize),
        pairs: ExplainPairs,
    ) -> Vec<ExplainRow> {
        let target = &self.program.target;
        // The default target whole first: a board that ran it while `--target` named another.
        let singles: Vec<NumericsChange> = (default_target(target).into_iter())
            .chain(one_knob_changes(target))
            .collect();
        let mut rows = self.rows(&singles, 1, weights);
        if rows.iter().any(|r| r.concordant) {
            return rows;
        }
        let firsts = match pairs {
            ExplainPairs::AllPairs => &singles[..],
            ExplainPairs::Closest => match closest(&rows) {
                Some(i) if cmp_share(rows[i].share(), share).is_gt() => &singles[i..=i],
                _ => &[],
            },
        };
        let pairs = on_top_of(target, firsts);
        if !pairs.is_empty() {
            rows.extend(self.rows(&pairs, 2, weights));
        }
        rows
    }

    /// The rows of `changes`, each of `knobs` knobs; a change under which the firmware does
    /// not check, lower or run is a row with its error.
    fn rows(
        &self,
        changes: &[NumericsChange],
        knobs: usize,
        weights: &BTreeMap<String, Tensor>,
    ) -> Vec<ExplainRow> {
        let progress = (self.meter)(Measure::Explain {
            changes: changes.len(),
        });
        changes
            .iter()
            .map(|change| {
                let under = self.under(change.target.clone(), weights);
                if let Some(Progress(tick)) = &progress {
                    tick(1);
                }
                let ((items, elements, bit_exact), error) = match under {
                    Ok((items, r)) => ((items, r.elements, r.bit_exact), None),
                    Err(e) => ((0, 0, 0), Some(e)),
                };
                ExplainRow {
                    concordant: error.is_none()
                        && items == self.feed.batch
                        && bit_exact == elements,
                    change: change.lines(),
                    knobs,
                    items,
                    elements,
                    bit_exact,
                    error,
                }
            })
            .collect()
    }

    /// The dump against the program checked, lowered and run on `target`: on its first
    /// [`SCREEN_ITEMS`] items, then, where those are all bit-exact, on the whole batch. The
    /// items compared and the report, or why the firmware could not check, lower or run.
    fn under(
        &self,
        target: Target,
        weights: &BTreeMap<String, Tensor>,
    ) -> Result<(usize, DiffReport), String> {
        let checked =
            nnp_grammar::check(self.program.source.clone(), Some(target)).map_err(|diags| {
                diags
                    .first()
                    .map_or("the firmware does not check".into(), |d| d.message.clone())
            })?;
        let graph = swgraph::compile(&checked.program, Roots::Outputs)
            .map_err(|e| format!("cannot lower: {e}"))?;
        let compare = |items| {
            let pass = Pass {
                items,
                first: 0,
                maps: false,
            };
            self.compare(&checked.program, &graph, weights.clone(), pass, None)
                .map(|report| (items, report))
                .map_err(|e| e.to_string())
        };
        let (batch, screen) = (self.feed.batch, self.feed.batch.min(SCREEN_ITEMS));
        let (items, report) = compare(screen)?;
        if items < batch && report.bit_exact == report.elements {
            compare(batch)
        } else {
            Ok((items, report))
        }
    }
}

/// Compare a piece of the traces, an error naming the hardware trace.
fn compare_trace_piece(
    traces: &mut TraceComparer,
    path: &Path,
    hardware: &[TraceRecord],
    software: &[TraceRecord],
) -> Result<(), CompareError> {
    traces
        .add(hardware, software)
        .map_err(|source| CompareError::TraceMismatch {
            path: path.to_path_buf(),
            source,
        })
}
