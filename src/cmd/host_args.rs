//! Flags shared by the commands that execute firmware (`run`, `emulate`, `diff`, `bench`): the
//! chunks of a software-graph run and how outputs are written, and how a run in chunks
//! ([`nnp_runtime::stream`]) ends on the command line: its progress bar, Ctrl-C, its errors.

use super::data::DataArgs;
use super::files::{Reads, refuse_shared, written_files};
use super::output::count;
use nnp_grammar::{Interface, SourceFile};
use nnp_lowering::swgraph::SwGraph;
use nnp_numerics::Format;
use nnp_runtime::emulator::EmuError;
use nnp_runtime::exec::{ExecError, ExecOptions, Execution};
use nnp_runtime::host::{HostError, Outputs, ShapeDisplay, Tensor, fits_f16};
use nnp_runtime::io::{self, Dtype, IoError, Layout};
use nnp_runtime::stream::{self, Stream, StreamError};
use nnp_runtime::trace::{TraceError, TraceRecord, TraceWriter};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a run in chunks stopped: a chunk's inputs could not be read, the run failed, its
/// outputs or trace could not be written, a chunk would not fit in memory, or the user
/// interrupted the run.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ChunkError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Emu(#[from] EmuError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Input(#[from] HostError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Io(IoError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Trace(TraceError),
    #[error(
        "interrupted after {done} of {batch} input sets; no output was written (a file already \
         there is left as it was)"
    )]
    Interrupted { done: usize, batch: usize },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Stream(StreamError),
}

impl From<ChunkError> for super::Failure {
    fn from(e: ChunkError) -> super::Failure {
        super::Failure::of(&e)
    }
}

impl From<StreamError> for ChunkError {
    fn from(e: StreamError) -> ChunkError {
        match e {
            // The stop flag is Ctrl-C's (`INTERRUPTED`).
            StreamError::Stopped { done, batch } => ChunkError::Interrupted { done, batch },
            e => ChunkError::Stream(e),
        }
    }
}

impl From<stream::GraphError> for ChunkError {
    fn from(e: stream::GraphError) -> ChunkError {
        match e {
            stream::GraphError::Exec(e) => e.into(),
            stream::GraphError::Stream(e) => e.into(),
        }
    }
}

/// Set by Ctrl-C or SIGTERM once [`stop_on_interrupt`] is called: the stop flag of the runs
/// in chunks.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// From here on, Ctrl-C (or SIGTERM) stops a run before its next chunk ([`INTERRUPTED`]), so
/// the output and trace files' temporary copies are removed on the way out instead of
/// staying behind; a second one exits at once.
pub fn stop_on_interrupt() {
    // Where no handler can be set, a signal ends the process as before.
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
    });
}

/// Whether Ctrl-C or SIGTERM came since [`stop_on_interrupt`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// `--batch` within the library's limit for a run on the command line, whose results stream
/// to `-o` or are dropped ([`stream::check_batch`]).
pub fn check_batch(program: &dyn Interface, batch: usize) -> miette::Result<()> {
    let per_item = stream::io_bytes_per_item(program);
    stream::check_batch("--batch", batch, per_item, stream::Kept::Streamed).map_err(super::fail)
}

/// What a run in chunks goes through: the weights, loaded once, and the number of input sets
/// (each chunk's inputs are read or made just before it runs).
pub struct Workload {
    pub weights: BTreeMap<String, Tensor>,
    pub batch: usize,
}

/// How a software graph goes through a large batch.
#[derive(clap::Args, Clone, Debug)]
pub struct ChunkArgs {
    /// Items per chunk: the batch runs in consecutive chunks of at most this many input sets,
    /// so memory stays bounded whatever the batch (default: as many as 8 MiB of the graph's
    /// values allow, or 256 where that is fewer, but never more than 1 GiB of them). The same
    /// bits for any value.
    #[arg(long, value_name = "N", value_parser = super::at_least_one)]
    pub chunk_items: Option<usize>,
}

impl ChunkArgs {
    /// Run `graph` on the workload's input sets with its weights in a fresh session with these
    /// chunks ([`Stream::run`]), with a progress bar on a terminal and Ctrl-C as the stop flag.
    /// `inputs` makes or reads each chunk's inputs just before the chunk runs, and `sink`
    /// takes the chunk's execution as soon as it is done. An error of either stops the run
    /// ([`run_failed`] says how it ends).
    pub fn execute_fed(
        &self,
        graph: &SwGraph,
        work: Workload,
        opts: ExecOptions,
        inputs: impl FnMut(Range<usize>) -> Result<BTreeMap<String, Tensor>, ChunkError>,
        sink: impl FnMut(Range<usize>, Execution) -> Result<(), ChunkError>,
    ) -> Result<(), ChunkError> {
        let opts = ExecOptions {
            chunk_items: self.chunk_items,
            ..opts
        };
        let mut engine = stream::Graph::new(graph, &opts, work.batch)?;
        stream_with_bar("running", &mut engine, work, inputs, sink)
    }
}

/// Run the workload's input sets on `engine` through the library's stream ([`Stream::run`]), with a
/// progress bar saying `verb` on a terminal and Ctrl-C as the stop flag ([`INTERRUPTED`]).
pub fn stream_with_bar<G: stream::Engine, E: From<G::Error> + From<StreamError>>(
    verb: &str,
    engine: &mut G,
    Workload { weights, batch }: Workload,
    inputs: impl FnMut(Range<usize>) -> Result<BTreeMap<String, Tensor>, E>,
    sink: impl FnMut(Range<usize>, G::Run) -> Result<(), E>,
) -> Result<(), E> {
    let (bar, tick) = super::input_sets_bar(verb, batch);
    let stream = Stream {
        weights,
        batch,
        progress: Some(tick),
        stop: Some(&INTERRUPTED),
    };
    let run = stream.run(engine, inputs, sink);
    bar.finish_and_clear();
    run
}

/// How a run that failed with `e` ends: a runtime error of the firmware (a NaN or infinity
/// that the target forbids, or any of the emulator's but unusable data or tables) is shown at
/// its instruction with exit status 1; any other error is reported as one (exit status 2).
pub fn run_failed(source: &SourceFile, e: ChunkError) -> miette::Result<ExitCode> {
    let report = match e {
        ChunkError::Exec(e @ ExecError::NonFinite { .. }) => {
            super::runtime_error(source, &e, e.span())
        }
        ChunkError::Emu(e) if !matches!(e, EmuError::Data { .. } | EmuError::Table { .. }) => {
            super::runtime_error(source, &e, e.span())
        }
        e => return Err(super::fail(e)),
    };
    Ok(super::output::report(&report, ExitCode::from(1)))
}

/// Where and how to write outputs.
#[derive(clap::Args, Clone, Debug)]
pub struct OutputArgs {
    /// Write the outputs: `*.safetensors`, `*.npy` (one output), or a directory of .npy files.
    #[arg(short = 'o', long = "output", value_name = "FILE|DIR")]
    pub output: Option<PathBuf>,
    /// Layout of the written outputs.
    #[arg(long, value_enum, default_value_t = LayoutArg::Logical)]
    pub layout: LayoutArg,
    /// Element type of the written outputs (default: f16 when every storage format of the
    /// program, the target's and each chain's `quant storage`, fits, else f32; exact either
    /// way).
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutArg {
    /// The declarations' logical shapes.
    Logical,
    /// Native tiles: rows padded to whole N-lane tiles, shape [..., tiles, N].
    Tiles,
}

impl From<LayoutArg> for Layout {
    fn from(l: LayoutArg) -> Layout {
        match l {
            LayoutArg::Logical => Layout::Logical,
            LayoutArg::Tiles => Layout::Tiles,
        }
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum DtypeArg {
    F16,
    F32,
}

impl OutputArgs {
    /// The output files ([`OutputArgs::writer`]) and the trace file `trace` of a run, made
    /// before it so that a path that cannot be written fails at once; once either exists,
    /// Ctrl-C stops the run after its chunk ([`stop_on_interrupt`]) to remove them. The
    /// outputs record `metadata` ([`super::files::provenance`]).
    ///
    /// A path that names a file the run reads (`reads`: the firmware or graph, the target and
    /// its tables, `data`'s weights or inputs), or the other file, is refused: putting the
    /// new file in its place would lose that one.
    pub fn files(
        &self,
        program: &dyn Interface,
        shapes: &BTreeMap<String, Vec<usize>>,
        trace: Option<&Path>,
        (data, mut reads): (&DataArgs, Reads),
        metadata: &io::Metadata,
    ) -> miette::Result<RunFiles> {
        reads.data(data);
        if let Some(out) = &self.output {
            reads.check_tensors("-o", out, shapes.keys())?;
        }
        if let Some(trace) = trace {
            reads.check("--trace", trace)?;
            reads.check("--trace", &trace_sidecar(trace))?;
            if let Some(out) = &self.output {
                let outputs = written_files(out, shapes.keys());
                let traces = [trace.to_path_buf(), trace_sidecar(trace)];
                refuse_shared(("--trace", &traces), ("-o", &outputs))?;
            }
        }
        // Before the files exist, so that Ctrl-C never leaves one behind.
        if self.output.is_some() || trace.is_some() {
            stop_on_interrupt();
        }
        let writer = self.writer(program, shapes, metadata)?;
        let tracer = match trace {
            Some(path) => Some((
                TraceWriter::create(path).map_err(super::fail)?,
                path.to_path_buf(),
                metadata.clone(),
            )),
            None => None,
        };
        Ok(RunFiles { writer, tracer })
    }

    /// The files for outputs of the logical shapes `shapes`, written in pieces of items as a
    /// run produces them ([`OutputWriter::write`]), if `-o` was given, recording `metadata`.
    /// Created before the run, so a path that cannot be written fails at once.
    pub fn writer(
        &self,
        program: &dyn Interface,
        shapes: &BTreeMap<String, Vec<usize>>,
        metadata: &io::Metadata,
    ) -> miette::Result<Option<OutputWriter>> {
        let Some(path) = &self.output else {
            return Ok(None);
        };
        let (layout, native) = (self.layout.into(), program.native());
        let laid_out = shapes
            .iter()
            .map(|(name, shape)| {
                let shape = match layout {
                    Layout::Logical => shape.clone(),
                    Layout::Tiles => io::tiles_shape(shape, native, false),
                };
                (name.clone(), shape)
            })
            .collect();
        let dtype = self.dtype(program).map_err(super::fail)?;
        let files =
            io::ItemWriter::create_with(path, &laid_out, dtype, metadata).map_err(super::fail)?;
        Ok(Some(OutputWriter {
            files,
            layout,
            native,
        }))
    }

    /// The dtype of the written outputs: f16 where every value the outputs can hold is an
    /// f16 (every storage format of the program fits, [`Interface::output_storage`]), else f32 (exact
    /// either way). `--dtype f16` where a storage format does not fit is an error: the file
    /// would not hold the values the run made.
    pub fn dtype(&self, program: &dyn Interface) -> Result<Dtype, super::Failure> {
        let storage = program.output_storage();
        let f16 = storage.as_ref().is_some_and(fits_f16);
        match self.dtype {
            Some(DtypeArg::F16) if !f16 => Err(super::Failure::new(format!(
                "--dtype f16 cannot hold every value of the program's storage format{}: an \
                 f16 file would change them",
                storage.map_or(String::new(), |s| format!(" {}", Format::Float(s)))
            ))
            .help("--dtype f32, or no --dtype (f32 then)")),
            Some(DtypeArg::F16) => Ok(Dtype::F16),
            Some(DtypeArg::F32) => Ok(Dtype::F32),
            None if f16 => Ok(Dtype::F16),
            None => Ok(Dtype::F32),
        }
    }
}

/// The output and trace files of a run ([`OutputArgs::files`]), written a chunk at a time
/// under temporary names and put in their places by [`RunFiles::finish`]; dropped before
/// that, they leave nothing behind.
pub struct RunFiles {
    writer: Option<OutputWriter>,
    /// The trace file, and the metadata its sidecar records (JSON lines have no place for
    /// it).
    tracer: Option<(TraceWriter, PathBuf, io::Metadata)>,
}

impl RunFiles {
    /// Write the outputs of the items from `first` on and, with a trace file, their trace
    /// records (`records` makes them, only then).
    pub fn write(
        &mut self,
        first: usize,
        outputs: &Outputs,
        records: impl FnOnce() -> Result<Vec<TraceRecord>, ChunkError>,
    ) -> Result<(), ChunkError> {
        if let Some(w) = &mut self.writer {
            w.write(first, outputs).map_err(ChunkError::Io)?;
        }
        if let Some((t, ..)) = &mut self.tracer {
            t.write(&records()?).map_err(ChunkError::Trace)?;
        }
        Ok(())
    }

    /// Put every file in its place; beside a trace file, its sidecar
    /// (`TRACE.nnpc.json`, where the trace is a regular file).
    pub fn finish(self) -> miette::Result<()> {
        if let Some((t, path, metadata)) = self.tracer {
            t.finish().map_err(super::fail)?;
            if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                let sidecar = trace_sidecar(&path);
                let json = serde_json::to_string_pretty(&metadata).unwrap_or_default() + "\n";
                io::write_file_atomic(&sidecar, json.as_bytes()).map_err(|e| {
                    super::fail(format!("cannot write `{}`: {e}", sidecar.display()))
                })?;
            }
        }
        if let Some(w) = self.writer {
            w.finish().map_err(super::fail)?;
        }
        Ok(())
    }
}

/// The sidecar file of the trace file `path`: `path` with `.nnpc.json` added.
pub fn trace_sidecar(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".nnpc.json");
    PathBuf::from(name)
}

/// Outputs written in pieces of items, in `-o`'s layout ([`OutputArgs::writer`]).
pub struct OutputWriter {
    files: io::ItemWriter,
    layout: Layout,
    native: usize,
}

impl OutputWriter {
    /// Write the outputs of the items from `first` on.
    pub fn write(&mut self, first: usize, outputs: &Outputs) -> Result<(), IoError> {
        let tensors = io::to_layout(outputs, self.layout, self.native, |_| false)?;
        self.files.write_items(first, &tensors)
    }

    /// Put the files in their places.
    pub fn finish(self) -> Result<(), IoError> {
        self.files.finish()
    }
}

/// Input vectors of one batch item: the rows the host pushes on netq (at least one).
pub fn input_rows(program: &dyn Interface) -> usize {
    program
        .inputs()
        .filter(|d| d.place.is_none())
        .map(|d| d.rows())
        .sum::<usize>()
        .max(1)
}

/// What `nnpc run` and `nnpc emulate` report about one execution.
pub struct RunSummary<'a> {
    /// How it ran, e.g. "software graph on" or "emulated on".
    pub engine: &'a str,
    /// The file the user ran (firmware or compiled graph).
    pub file: &'a Path,
    pub program: &'a dyn Interface,
    /// Graph nodes, for the software graph.
    pub nodes: Option<usize>,
    /// The logical shape of every output, batch first.
    pub outputs: &'a BTreeMap<String, Vec<usize>>,
    pub batch: usize,
    pub secs: f64,
    pub output_file: Option<&'a Path>,
    pub trace_file: Option<&'a Path>,
}

impl RunSummary<'_> {
    /// Print the summary as text, or as one JSON object, on stdout, and confirm the files
    /// written on stderr (a [`note`](super::output::note)). Rates count input vectors: batch
    /// items times the rows each pushes on netq.
    pub fn print(&self, json: bool) -> miette::Result<()> {
        super::output::stdout(self.text(json))?;
        super::output::note(self.written())
    }

    /// The lines that confirm the outputs and the trace written (and the trace's sidecar).
    fn written(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        if let Some(f) = self.output_file {
            let _ = writeln!(s, "outputs written to {}", f.display());
        }
        if let Some(f) = self.trace_file {
            let _ = write!(s, "trace written to {}", f.display());
            // RunFiles::finish writes the sidecar beside a regular file only.
            if std::fs::metadata(f).is_ok_and(|m| m.is_file()) {
                let _ = write!(s, ", its provenance to {}", trace_sidecar(f).display());
            }
            s.push('\n');
        }
        s
    }

    /// The summary as text, or as one JSON object ([`RunSummary::print`]).
    fn text(&self, json: bool) -> String {
        use std::fmt::Write as _;
        let p = self.program;
        let vectors = self.batch * input_rows(p);
        let per_s = vectors as f64 / self.secs.max(1e-9);
        if json {
            let outs: Vec<serde_json::Value> = self
                .outputs
                .iter()
                .map(|(n, shape)| serde_json::json!({ "name": n, "shape": shape }))
                .collect();
            let mut v = serde_json::json!({
                "file": self.file,
                "target": p.provenance().target,
                "batch": self.batch,
                "outputs": outs,
                "seconds": self.secs,
                "vectors": vectors,
                "vectors_per_second": per_s,
                "output_file": self.output_file,
                "trace_file": self.trace_file,
            });
            if let Some(n) = self.nodes {
                v["nodes"] = n.into();
            }
            return format!("{v}\n");
        }
        let nodes = self
            .nodes
            .map_or(String::new(), |n| format!(", {}", count(n, "node")));
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: {} `{}` (N = {}){nodes}, batch {}",
            self.file.display(),
            self.engine,
            p.provenance().target,
            p.native(),
            self.batch
        );
        for (name, shape) in self.outputs {
            let _ = writeln!(s, "  output {name}: {}", ShapeDisplay(shape));
        }
        let _ = writeln!(
            s,
            "  {:.3} ms, {}, {per_s:.0} vectors/s",
            self.secs * 1e3,
            count(vectors, "input vector")
        );
        s
    }
}

/// The one-line help of argument `id` of the clap arguments `A`, as clap prints it unwrapped.
#[cfg(test)]
pub(crate) fn arg_help<A: clap::Args>(id: &str) -> String {
    let cmd = A::augment_args(clap::Command::new("nnpc"));
    let arg = cmd.get_arguments().find(|a| a.get_id() == id);
    arg.and_then(|a| a.get_long_help().or(a.get_help()))
        .map(ToString::to_string)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnp_runtime::exec::{CHUNK_BYTES, MAX_CHUNK_BYTES, MIN_CHUNK_ITEMS};

    /// `--chunk-items`' help states the defaults the runtime's constants set.
    #[test]
    fn chunk_items_help_states_the_runtime_defaults() {
        let help = arg_help::<ChunkArgs>("chunk_items");
        let stated = format!(
            "as many as {} MiB of the graph's values allow, or {} where that is fewer, but \
             never more than {} GiB of them",
            CHUNK_BYTES >> 20,
            MIN_CHUNK_ITEMS,
            MAX_CHUNK_BYTES >> 30
        );
        assert!(help.contains(&stated), "{help:?} should say {stated:?}");
    }
}
