//! `nnpc diff`: compare a hardware output dump (or trace) with the software graph, bit for bit.

use super::files::provenance_warnings;
use super::host_args::{ChunkArgs, ChunkError, DataArgs, LayoutArg, run_failed, trace_records};
use super::run::DeviceArg;
use nnp_grammar::{Program, Target};
use nnp_lowering::swgraph::{self, Roots, SwGraph};
use nnp_runtime::diff::{DiffBuilder, DiffError, DiffReport};
use nnp_runtime::exec::{ExecOptions, Execution};
use nnp_runtime::explain::{
    ExplainRow, NumericsChange, SCREEN_ITEMS, closest, cmp_share, default_target, on_top_of,
    one_knob_changes,
};
use nnp_runtime::host::{InputFeed, Outputs, ShapeDisplay, Tensor};
use nnp_runtime::io::{self, Inexact, IoError, StoredTensor};
use nnp_runtime::trace::{TraceComparer, TraceFile, TraceRecord};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Run the firmware's software graph on the data the hardware saw and compare every output
/// with the hardware's dump: bit-exact count, ULP histogram, error statistics and the first
/// mismatches, each with its tile, lane and the `v_wr` line that wrote it. With `--trace`,
/// compare the per-`v_wr` traces too and name the first divergent instruction.
///
/// The data must be the hardware's: the same `--weights`/`--inputs` files, or (for a dump made
/// by `nnpc emulate` with random data) the same `--seed`; the batch is read from the dump.
/// Exit status: 0 concordant (every element bit-exact, and every trace record identical), 1
/// not concordant (or firmware errors), 2 unreadable or unusable input.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc emulate samples/lstm.nnp --batch 64 -o hw.safetensors && nnpc diff samples/lstm.nnp --hardware hw.safetensors
  nnpc diff prog.nnp --hardware board_dump.safetensors --weights w.safetensors --inputs x.npy --json
  nnpc diff prog.nnp --hardware dump_tiles.safetensors --layout tiles --first 50
  nnpc diff prog.nnp --hardware board.safetensors --weights w.safetensors --inputs x.npy --explain
  nnpc emulate prog.nnp --trace hw.jsonl -o hw.safetensors && nnpc diff prog.nnp --hardware hw.safetensors --trace hw.jsonl")]
pub struct Args {
    /// The firmware file (.nnp).
    pub file: PathBuf,
    /// The hardware's outputs: `*.safetensors` or a directory of .npy files, one tensor per
    /// `output` declaration under its declared name; or `*.npy` (a program with one output:
    /// its one tensor, whatever the file's name). A value that is not exactly a value of the
    /// storage format is a mismatch.
    #[arg(long, value_name = "DUMP")]
    pub hardware: PathBuf,
    /// Layout of the dump: logical shapes, or native tiles ([..., tiles, N]).
    #[arg(long, value_enum, default_value_t = LayoutArg::Logical)]
    pub layout: LayoutArg,
    /// A per-`v_wr` trace of the hardware run (JSON lines, the format of `nnpc emulate
    /// --trace`): compare it record by record and name the first divergent `v_wr`.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Target: a built-in name (`bw-default`) or a TOML target file. Overrides the file's
    /// `target` statement.
    #[arg(long, value_name = "NAME|FILE")]
    pub target: Option<String>,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub chunks: ChunkArgs,
    /// Where the software graph's integer products run: `cuda` puts them on the first CUDA
    /// GPU, with the same bits (needs a build with `--features cuda`; docs/swgraph.md).
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// How many mismatching elements to list.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub first: usize,
    /// When the dump is not concordant, rerun the software graph under the default target
    /// `bw-default` (where the target is another: a board that ran the default) and each
    /// one-knob change of the target's numerics (accumulation; rounding of the MVM inputs, the MVM output, the
    /// MFU input and storage; the MVM inputs' mantissa width, or their format as another of
    /// the catalogue's MVM formats; the MVM output's and MFU input's float format) and say
    /// which change, if any, makes the dump concordant: a target file that misdescribes the
    /// board, told apart from a fault. When none does, changes of two knobs: each change of a
    /// second knob on top of the closest one (`--explain`, `--explain=closest`), or every pair
    /// of two changes (`--explain=all-pairs`: about 500 reruns on bw-default, for a board that
    /// the closest one does not lead to). Each change runs on the first 8 items, and on the
    /// whole batch where those are bit-exact.
    #[arg(
        long,
        value_enum,
        value_name = "PAIRS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "closest"
    )]
    pub explain: Option<ExplainPairs>,
    /// Print the report as JSON (schema `nnpc.diff/1`, docs/diff.md).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match super::load(&args.file, args.target.as_deref()) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let dump = Dump::open(&program, &args.hardware, args.layout)?;
    // A dump nnpc made says how; where that is not how this diff runs, say so first.
    if let Some(made) = io::read_metadata(&args.hardware) {
        for w in provenance_warnings(&args.hardware, &made, &args.file, &program, &args.data) {
            super::output::stderr(format!("warning: {w}\n"))?;
        }
    }
    let (weights, feed) = args
        .data
        .feed(&program, dump.batch(&program))
        .map_err(super::fail)?;
    let batch = feed.batch;
    dump.check(&program, batch)
        .map_err(|e| super::fail(format!("`{}`: {e}", args.hardware.display())))?;

    let roots = if args.trace.is_some() {
        Roots::OutputsAndWrites
    } else {
        Roots::Outputs
    };
    let graph = match super::compile(&program, roots) {
        Ok(g) => g,
        Err(code) => return Ok(code),
    };
    // The hardware trace's lines are indexed by item before the run (a malformed line stops
    // it there); its records are read a chunk of items at a time.
    let hw_trace = match args.trace.as_deref() {
        Some(path) => Some((path, TraceFile::open(path).map_err(super::fail)?)),
        None => None,
    };
    // The records' lanes are compared as storage values: any NaN equals any NaN, as in the
    // outputs (docs/diff.md, "What equal means").
    let mut traces = match program.target.numerics.storage.as_float() {
        Some(storage) => TraceComparer::for_storage(*storage),
        None => TraceComparer::default(),
    };
    let run = Comparison {
        args: &args,
        dump: &dump,
        feed: &feed,
    };
    let trace = hw_trace
        .as_ref()
        .map(|(path, file)| (*path, file, &mut traces));
    // The weights go to the run; --explain keeps a copy for its own runs.
    let kept = args.explain.map(|pairs| (pairs, weights.clone()));
    let mut report = match run.compare(&program, &graph, weights, batch, args.first, trace) {
        Ok(report) => report,
        Err(e) => return run_failed(&program, e),
    };
    if let Some((path, file)) = &hw_trace {
        // Records of items past the batch: a trace of another execution.
        let extra = file.read_items(batch..usize::MAX).map_err(super::fail)?;
        compare_trace_piece(&mut traces, path, &extra, &[]).map_err(super::fail)?;
        // A divergent record makes the report not concordant.
        report.set_trace(traces.finish());
    }
    // The changes of the numerics explain outputs: with bit-exact outputs there is nothing
    // for them to explain (a divergent trace alone is named by its first record).
    if let Some((pairs, weights)) = kept.filter(|_| !report.outputs_bit_exact()) {
        let share = (report.bit_exact, report.elements);
        report.explain = Some(run.explain(&program, &weights, share, pairs));
    }

    if args.json {
        let v = serde_json::to_string_pretty(&report).map_err(super::fail)?;
        super::output::stdout(format!("{v}\n"))?;
    } else {
        let mut text = String::new();
        print_report(&mut text, &args, &program, &report, batch);
        super::output::stdout(text)?;
    }
    Ok(if report.concordant {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Which changes of two knobs `--explain` tries when no one-knob change is concordant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainPairs {
    /// Each change of a second knob on top of the closest one-knob change, when that is
    /// closer than the target itself.
    Closest,
    /// Every pair: each change of a second knob on top of every one-knob change.
    AllPairs,
}

/// What every run of the software graph against the dump shares.
struct Comparison<'a> {
    args: &'a Args,
    dump: &'a Dump,
    feed: &'a InputFeed,
}

impl Comparison<'_> {
    /// Run `graph` over the first `items` of the batch: each chunk's outputs are compared with
    /// the dump's items as the chunk is done, and with `trace` its records with the same
    /// items' records of the hardware trace. The run holds one chunk's inputs, outputs, dump
    /// items and trace records at a time. The report lists the first `first` mismatches.
    fn compare(
        &self,
        program: &Program,
        graph: &SwGraph,
        weights: BTreeMap<String, Tensor>,
        items: usize,
        first: usize,
        mut trace: Option<(&Path, &TraceFile, &mut TraceComparer)>,
    ) -> Result<DiffReport, ChunkError> {
        let opts = ExecOptions {
            device: self.args.device.into(),
            keep_writes: trace.is_some(),
            ..ExecOptions::default()
        };
        let path = &self.args.hardware;
        let mut diff = DiffBuilder::new(program, first).map_err(|source| ChunkError::Diff {
            path: path.clone(),
            source,
        })?;
        let inputs = |items| self.feed.items(items).map_err(ChunkError::Input);
        let sink = |items: Range<usize>, run: Execution| {
            let (hardware, inexact) = self
                .dump
                .items(program, items.clone())
                .map_err(ChunkError::Io)?;
            diff.add_read(items.start, &hardware, &inexact, &run.outputs)
                .map_err(|source| ChunkError::Diff {
                    path: path.clone(),
                    source,
                })?;
            if let Some((trace_path, file, traces)) = &mut trace {
                let software = trace_records(graph, &run, items.clone())?;
                let hardware = file.read_items(items).map_err(ChunkError::Trace)?;
                compare_trace_piece(traces, trace_path, &hardware, &software)?;
            }
            Ok(())
        };
        self.args
            .chunks
            .execute_fed(graph, (weights, items), opts, inputs, sink)?;
        Ok(diff.finish())
    }

    /// The software graph under each one-knob change of `program`'s target numerics, against
    /// the dump ([`Comparison::under`]). When none is concordant, under changes of two knobs
    /// ([`on_top_of`]): on top of the closest one where it is closer than the target itself
    /// (`share`: the first comparison's bit-exact elements and elements), or on top of every
    /// one.
    fn explain(
        &self,
        program: &Program,
        weights: &BTreeMap<String, Tensor>,
        share: (usize, usize),
        pairs: ExplainPairs,
    ) -> Vec<ExplainRow> {
        // The default target whole first: a board that ran it while `--target` named another.
        let singles: Vec<NumericsChange> = (default_target(&program.target).into_iter())
            .chain(one_knob_changes(&program.target))
            .collect();
        let mut rows = self.rows(program, &singles, 1, weights);
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
        let pairs = on_top_of(&program.target, firsts);
        if !pairs.is_empty() {
            rows.extend(self.rows(program, &pairs, 2, weights));
        }
        rows
    }

    /// The rows of `changes`, each of `knobs` knobs; a change under which the firmware does
    /// not check, lower or run is a row with its error.
    fn rows(
        &self,
        program: &Program,
        changes: &[NumericsChange],
        knobs: usize,
        weights: &BTreeMap<String, Tensor>,
    ) -> Vec<ExplainRow> {
        let bar = super::bar("explaining", changes.len(), "changes of the numerics");
        let rows = changes
            .iter()
            .map(|change| {
                let under = self.under(program, change.target.clone(), weights);
                bar.inc(1);
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
            .collect();
        bar.finish_and_clear();
        rows
    }

    /// The dump against `program` checked, lowered and run on `target`: on its first
    /// [`SCREEN_ITEMS`] items, then, where those are all bit-exact, on the whole batch. The
    /// items compared and the report, or why the firmware could not check, lower or run.
    fn under(
        &self,
        program: &Program,
        target: Target,
        weights: &BTreeMap<String, Tensor>,
    ) -> Result<(usize, DiffReport), String> {
        let checked =
            nnp_grammar::check(program.source.clone(), Some(target)).map_err(|diags| {
                diags
                    .first()
                    .map_or("the firmware does not check".into(), |d| d.message.clone())
            })?;
        let graph = swgraph::compile(&checked.program, Roots::Outputs)
            .map_err(|e| format!("cannot lower: {e}"))?;
        let compare = |items| {
            self.compare(&checked.program, &graph, weights.clone(), items, 0, None)
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
) -> Result<(), ChunkError> {
    traces
        .add(hardware, software)
        .map_err(|source| ChunkError::TraceMismatch {
            path: path.to_path_buf(),
            source,
        })
}

/// The hardware's dump, its headers read: each output's values are read a range of items at
/// a time ([`Dump::items`]).
struct Dump {
    tensors: BTreeMap<String, StoredTensor>,
    layout: LayoutArg,
    /// Whether each output's tensor has the batch dimension (a dump of one input set may
    /// leave it out).
    batched: BTreeMap<String, bool>,
}

impl Dump {
    fn open(program: &Program, path: &Path, layout: LayoutArg) -> miette::Result<Dump> {
        let mut tensors = io::index_tensors(path).map_err(super::fail)?;
        // A single .npy file holds one tensor, whatever its name: the program's output, where
        // it has one (the file is named by the board, not after the output).
        let npy = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("npy"));
        if npy && !path.is_dir() {
            let outputs: Vec<&str> = program.outputs().map(|d| d.name.as_str()).collect();
            match outputs[..] {
                [] => {}
                [name] => {
                    tensors = tensors
                        .into_values()
                        .map(|t| (name.to_string(), t))
                        .collect();
                }
                _ => {
                    let outputs = outputs.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>();
                    return Err(super::fail(DiffError::OneNpyForOutputs {
                        path: path.to_path_buf(),
                        count: outputs.len(),
                        outputs: outputs.join(", "),
                    }));
                }
            }
        }
        let batched = program
            .outputs()
            .filter_map(|d| {
                let t = tensors.get(&d.name)?;
                let rank = match layout {
                    LayoutArg::Logical => d.shape.len(),
                    LayoutArg::Tiles => d.shape.len() + 1,
                };
                Some((d.name.clone(), t.shape.len() > rank))
            })
            .collect();
        Ok(Dump {
            tensors,
            layout,
            batched,
        })
    }

    /// The batch of the dump: the leading dimension of the first output (in declaration
    /// order) that has one.
    fn batch(&self, program: &Program) -> Option<usize> {
        program.outputs().find_map(|d| {
            let batched = self.batched.get(&d.name).copied().unwrap_or(false);
            batched.then(|| self.tensors.get(&d.name)?.shape.first().copied())?
        })
    }

    /// Every output is in the dump with the shape of `batch` items (in the dump's layout), so
    /// that every range of items can be read: checked before the run.
    fn check(&self, program: &Program, batch: usize) -> Result<(), DiffError> {
        for d in program.outputs() {
            let t = self
                .tensors
                .get(&d.name)
                .ok_or_else(|| DiffError::MissingOutput(d.name.clone()))?;
            let logical: Vec<usize> = std::iter::once(batch).chain(d.shape.clone()).collect();
            let (whole, one, layout) = match self.layout {
                LayoutArg::Logical => (logical, d.shape.clone(), ""),
                LayoutArg::Tiles => {
                    let tiles = |s: &[usize]| io::tiles_shape(s, program.native(), false);
                    (tiles(&logical), tiles(&d.shape), " in native tiles")
                }
            };
            if t.shape != whole && !(batch == 1 && t.shape == one) {
                return Err(DiffError::Shape {
                    name: d.name.clone(),
                    expected: format!("{}{layout}", ShapeDisplay(&whole)),
                    found: ShapeDisplay(&t.shape).to_string(),
                    batch,
                });
            }
        }
        Ok(())
    }

    /// Items `items` of every output, in logical layout (a tensor without the batch
    /// dimension whole, in its declared shape), and each output's values that the dump holds
    /// but f32 does not ([`Inexact`], indexed in that logical piece).
    fn items(
        &self,
        program: &Program,
        items: Range<usize>,
    ) -> Result<(Outputs, BTreeMap<String, Inexact>), IoError> {
        let mut out = Outputs::new();
        let mut inexact = BTreeMap::new();
        for d in program.outputs() {
            let Some(t) = self.tensors.get(&d.name) else {
                continue; // reported as missing by the comparison
            };
            let batched = self.batched.get(&d.name).copied().unwrap_or(false);
            let ((piece, wide), mut logical) = match batched {
                true => (t.read_items_checked(items.clone())?, vec![items.len()]),
                false => (t.read_checked()?, Vec::new()),
            };
            logical.extend(&d.shape);
            let (piece, wide) = match self.layout {
                LayoutArg::Logical => (piece, wide),
                LayoutArg::Tiles => {
                    let n = program.native();
                    let piece = io::from_tiles(&d.name, &piece, &logical, n, false)?;
                    (piece, logical_of_tiles(wide, &logical, n))
                }
            };
            if !wide.is_empty() {
                inexact.insert(d.name.clone(), wide);
            }
            out.insert(d.name.clone(), piece);
        }
        Ok((out, inexact))
    }
}

/// Values indexed in the native-tile layout of a vector-like tensor of shape `logical`
/// (`[..., C]` as `[..., ceil(C/N), N]`), indexed in the logical layout instead: those in pad
/// lanes left out, as [`io::from_tiles`] leaves them.
fn logical_of_tiles(values: Inexact, logical: &[usize], native: usize) -> Inexact {
    let c = logical.last().copied().unwrap_or(1);
    let padded = c.div_ceil(native.max(1)) * native.max(1);
    values
        .into_iter()
        .filter_map(|(i, v)| {
            let (row, lane) = (i.checked_div(padded)?, i.checked_rem(padded)?);
            (lane < c).then_some((row * c + lane, v))
        })
        .collect()
}

mod report;
use report::print_report;
