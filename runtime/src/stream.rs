//! A batch run in chunks of items on either engine, the software graph ([`Graph`]) or the
//! emulator ([`Emulator`]): each chunk's inputs are made or read just before it runs and its
//! result handed on as soon as it is done, so that a run of any batch holds one chunk's
//! inputs and outputs at a time ([`Stream::run`]).

use crate::emulator::{self, EmuError, EmuOptions, Emulation, PROGRESS_CHUNK};
use crate::exec::{ExecError, ExecOptions, Execution, Session, max_chunk_items};
use crate::host::{HostData, Progress, Tensor, mem_available_bytes};
use nnp_grammar::Program;
use nnp_lowering::swgraph::SwGraph;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

/// An engine that runs a batch a chunk of items at a time.
pub trait Engine {
    /// What a chunk's run gives: its outputs, and what else the engine hands back.
    type Run;
    type Error;
    /// The chunks of a batch of `batch` items: consecutive ranges, in order, covering it,
    /// made as they are taken (a batch of 2^40 items has 2^28 chunks or more).
    fn chunks(&self, batch: usize) -> Chunks;
    /// Whether a run of `batch` items in `chunks` chunks reports its progress.
    fn shows_progress(&self, batch: usize, chunks: usize) -> bool;
    /// Run the items `items` of the batch, their inputs (and the weights) in `data`, telling
    /// `progress` how many items are done as they finish.
    fn run(
        &mut self,
        data: &HostData,
        items: Range<usize>,
        progress: Option<&Progress>,
    ) -> Result<Self::Run, Self::Error>;
}

/// The chunks of a batch ([`Engine::chunks`]), made one at a time.
pub type Chunks = Box<dyn ExactSizeIterator<Item = Range<usize>>>;

/// Why a run in chunks stopped, besides its engine, its inputs and its sink: the stop flag
/// was set, or a chunk would not fit in memory.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum StreamError {
    #[error("stopped after {done} of {batch} input sets")]
    Stopped { done: usize, batch: usize },
    #[error(
        "{items} input sets at once hold about {need:.1} GiB ({per_item} bytes each), more than \
         the {available:.1} GiB of memory available"
    )]
    #[diagnostic(help("{fix}"))]
    TooLarge {
        items: usize,
        per_item: usize,
        need: f64,
        available: f64,
        fix: String,
    },
    #[error("{flag} {batch}: {why}; the limit is {limit} input sets{of}")]
    #[diagnostic(help("a smaller batch, or several runs"))]
    Batch {
        flag: String,
        batch: usize,
        limit: usize,
        /// ` of N bytes each`, where the limit is of bytes.
        of: String,
        why: &'static str,
    },
}

/// A batch to run in chunks: its weights and size, the progress callback (told how many items
/// are done) and the stop flag (checked before each chunk).
pub struct Stream<'a> {
    pub weights: BTreeMap<String, Tensor>,
    pub batch: usize,
    pub progress: Option<Progress>,
    pub stop: Option<&'a AtomicBool>,
}

impl Stream<'_> {
    /// Run the batch on `engine` in its chunks: `inputs` makes or reads each chunk's inputs
    /// just before the chunk runs, and `sink` takes the chunk's run, with its items, as soon as
    /// it is done. The run never holds more than one chunk's inputs and outputs, whatever the
    /// batch. An error of either, or of the engine, stops it; so does the stop flag, between
    /// chunks or within one where the engine looks at it too ([`StreamError::Stopped`], with
    /// the items of the chunks done).
    pub fn run<G: Engine, E: From<G::Error> + From<StreamError>>(
        self,
        engine: &mut G,
        mut inputs: impl FnMut(Range<usize>) -> Result<BTreeMap<String, Tensor>, E>,
        mut sink: impl FnMut(Range<usize>, G::Run) -> Result<(), E>,
    ) -> Result<(), E> {
        let batch = self.batch;
        let chunks = engine.chunks(batch);
        let progress = (self.progress).filter(|_| engine.shows_progress(batch, chunks.len()));
        let mut data = HostData {
            batch: 0,
            weights: self.weights,
            inputs: BTreeMap::new(),
        };
        for items in chunks {
            if self.stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                let done = items.start;
                return Err(StreamError::Stopped { done, batch }.into());
            }
            data.inputs = inputs(items.clone())?;
            data.batch = items.len();
            let run = match engine.run(&data, items.clone(), progress.as_ref()) {
                // An engine that sees the flag within a chunk stops with an error of its own.
                Err(_) if self.stop.is_some_and(|s| s.load(Ordering::SeqCst)) => {
                    let done = items.start;
                    return Err(StreamError::Stopped { done, batch }.into());
                }
                run => run?,
            };
            sink(items, run)?;
        }
        Ok(())
    }
}

/// The software graph as an [`Engine`]: one session, each chunk one of its own chunks.
pub struct Graph<'g> {
    pub session: Session<'g>,
}

impl<'g> Graph<'g> {
    /// A fresh session of `graph` for a batch of `batch` items, its largest chunk checked to
    /// fit in the memory available (by the values a run holds per item,
    /// [`Session::item_bytes`]) before any is allocated.
    pub fn new(graph: &'g SwGraph, opts: &ExecOptions, batch: usize) -> Result<Self, GraphError> {
        let session = Session::new(graph, opts)?;
        let items = batch.div_ceil(session.chunks(batch).len());
        let fix = match opts.chunk_items {
            Some(_) => "a smaller `--chunk-items`, or none (chunks of bounded memory)",
            None => "the graph's values per input set are too large for this machine",
        };
        fits_in_memory(items, session.item_bytes(), fix.into())?;
        Ok(Graph { session })
    }
}

/// Why a [`Graph`] could not be made.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum GraphError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Stream(#[from] StreamError),
}

impl Engine for Graph<'_> {
    type Run = Execution;
    type Error = ExecError;

    fn chunks(&self, batch: usize) -> Chunks {
        Box::new(self.session.chunks(batch))
    }

    /// A batch that takes more than one chunk.
    fn shows_progress(&self, _: usize, chunks: usize) -> bool {
        chunks > 1
    }

    fn run(
        &mut self,
        data: &HostData,
        items: Range<usize>,
        progress: Option<&Progress>,
    ) -> Result<Execution, ExecError> {
        // One of the session's own chunks, so it runs as one.
        let run = self
            .session
            .run(data)
            .map_err(|e| e.in_batch(items.start))?;
        if let Some(Progress(tick)) = progress {
            tick(items.len());
        }
        Ok(run)
    }
}

/// Batch items emulated at a time by default: the emulator splits a piece over its threads,
/// so a piece should keep them all busy.
pub const PIECE_ITEMS: usize = 4096;

/// [`PIECE_ITEMS`] of a traced emulation: a piece holds its trace records until it is handed
/// on, and the README LSTM's are 45 KB per item (275 MB at 4096 items, 84 to 87 MB at 1024,
/// in the same time).
pub const TRACED_PIECE_ITEMS: usize = 1024;

/// The emulator as an [`Engine`]: pieces of a fixed number of items.
pub struct Emulator<'p> {
    program: &'p Program,
    opts: EmuOptions,
    piece: usize,
}

impl<'p> Emulator<'p> {
    /// The emulator of `program` with `opts` for a batch of `batch` items, in pieces of
    /// `piece` items or by default [`Emulator::default_piece`]'s, checked to fit in the memory
    /// available: what the emulator holds for the program's data ([`emulator_data_bytes`])
    /// and a piece's inputs and outputs ([`io_bytes_per_item`]).
    pub fn new(
        program: &'p Program,
        opts: EmuOptions,
        piece: Option<usize>,
        batch: usize,
    ) -> Result<Self, StreamError> {
        let per_item = io_bytes_per_item(program);
        let fix = match piece {
            Some(_) => "a smaller `--chunk-items`, or none (pieces of bounded memory)",
            None => "the program's inputs and outputs per input set are too large for this machine",
        };
        let piece = piece
            .unwrap_or_else(|| Emulator::default_piece(opts.trace, per_item))
            .max(1);
        let held = emulator_data_bytes(program);
        let fix = format!(
            "{fix} (the count includes about {:.1} GiB the emulator holds for the program's \
             data, {EMULATOR_DATA_FACTOR} times its declared bytes)",
            held as f64 / f64::from(1u32 << 30)
        );
        fits(held, piece.min(batch), per_item, fix)?;
        Ok(Emulator {
            program,
            opts,
            piece,
        })
    }

    /// Items per piece by default for inputs and outputs of `per_item` bytes per item:
    /// [`PIECE_ITEMS`] or, `traced`, [`TRACED_PIECE_ITEMS`], fewer where those would pass the
    /// software graph's cap on a chunk ([`max_chunk_items`]).
    pub fn default_piece(traced: bool, per_item: usize) -> usize {
        let most = if traced {
            TRACED_PIECE_ITEMS
        } else {
            PIECE_ITEMS
        };
        most.min(max_chunk_items(per_item))
    }
}

/// `0..batch` in consecutive ranges of `piece` items (the last one shorter), made as they
/// are taken.
fn pieces(batch: usize, piece: usize) -> Chunks {
    let piece = piece.max(1);
    Box::new(
        (0..batch)
            .step_by(piece)
            .map(move |first| first..first.saturating_add(piece).min(batch)),
    )
}

impl Engine for Emulator<'_> {
    type Run = Emulation;
    type Error = EmuError;

    fn chunks(&self, batch: usize) -> Chunks {
        pieces(batch, self.piece)
    }

    /// A batch of at least two of the emulator's progress chunks ([`PROGRESS_CHUNK`]): the
    /// emulator reports within a piece.
    fn shows_progress(&self, batch: usize, _: usize) -> bool {
        batch >= 2 * PROGRESS_CHUNK
    }

    fn run(
        &mut self,
        data: &HostData,
        items: Range<usize>,
        progress: Option<&Progress>,
    ) -> Result<Emulation, EmuError> {
        self.opts.first_item = items.start;
        self.opts.progress = progress.cloned();
        emulator::emulate(self.program, data, &self.opts)
    }
}

/// Bytes per input set of `program`'s inputs (f32) and outputs (f64): what any run of it
/// holds per item, at least.
pub fn io_bytes_per_item(program: &dyn nnp_grammar::Interface) -> usize {
    let elements = |decls: &mut dyn Iterator<Item = &nnp_grammar::Decl>| -> usize {
        decls.fold(0, |sum, d| sum.saturating_add(d.elements()))
    };
    let inputs = elements(&mut program.inputs()).saturating_mul(4);
    inputs.saturating_add(elements(&mut program.outputs()).saturating_mul(8))
}

/// Bytes the emulator holds per byte of a program's declared data (padded to native tiles,
/// `Footprint::data_bytes`), at most: the weights as host data, the machine's tiles and
/// registers, the quantized tiles of its products, the thread pool. Measured:
/// `/usr/bin/time -v nnpc emulate samples/bench/lstm_1024.nnp --batch 1` peaks at 177 MB
/// resident (`nnpc check` of it: 5 MB), 5.1 times its 33.6 MB of data; one 8192 x 8192 matrix
/// product (268 MB of data) peaks at 1,365 MB, 5.1 times too; rounded up.
pub const EMULATOR_DATA_FACTOR: u64 = 6;

/// The bytes the emulator holds for `program`'s data, whatever its batch, at most
/// ([`EMULATOR_DATA_FACTOR`]).
pub fn emulator_data_bytes(program: &Program) -> u64 {
    (program.footprint().data_bytes).saturating_mul(EMULATOR_DATA_FACTOR)
}

/// `items` input sets of `per_item` bytes each fit the memory available (`MemAvailable`;
/// no check where the system does not say), or the error, with `fix`, before any is
/// allocated.
pub fn fits_in_memory(items: usize, per_item: usize, fix: String) -> Result<(), StreamError> {
    fits(0, items, per_item, fix)
}

/// [`fits_in_memory`], with `held` bytes besides the items'.
fn fits(held: u64, items: usize, per_item: usize, fix: String) -> Result<(), StreamError> {
    let gib = |bytes: u128| bytes as f64 / f64::from(1u32 << 30);
    let need = u128::from(held) + items as u128 * per_item as u128;
    match mem_available_bytes() {
        Some(have) if need > u128::from(have) => Err(StreamError::TooLarge {
            items,
            per_item,
            need: gib(need),
            available: gib(u128::from(have)),
            fix,
        }),
        _ => Ok(()),
    }
}

/// The most bytes a batch's inputs and outputs may take in all ([`io_bytes_per_item`] times
/// the batch): 2^62, so that every item offset, value index and file position a run computes
/// stays inside 64-bit arithmetic, whatever the run does with its results.
pub const MAX_BATCH_BYTES: u64 = 1 << 62;

/// What a run does with its results, for [`check_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Held in memory whole, `per_item` bytes of them per input set (Python's `Graph.run`,
    /// `random_inputs`): the batch must fit the memory available.
    Memory { per_item: usize },
    /// Handed on a chunk at a time, to a file or dropped (`nnpc run`, `nnpc emulate`): the
    /// memory a run holds is bounded whatever the batch; a file must hold the outputs
    /// ([`crate::io::ItemWriter::create_with`] checks that).
    Streamed,
}

/// The largest batch of input sets of `io_per_item` bytes of inputs and outputs each
/// ([`io_bytes_per_item`]) that a run may take, its results `kept` so: the one limit of
/// `nnpc run`, `nnpc emulate` and the Python package. `flag` names the batch as the caller
/// spells it (`--batch`, `batch=`) for the error.
pub fn check_batch(
    flag: &str,
    batch: usize,
    io_per_item: usize,
    kept: Kept,
) -> Result<(), StreamError> {
    let too_large = |limit: u64, per_item: usize, why| {
        let of = match per_item {
            0 | 1 => String::new(),
            n => format!(" of {n} bytes each"),
        };
        StreamError::Batch {
            flag: flag.to_string(),
            batch,
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            of,
            why,
        }
    };
    let per_item = io_per_item.max(1);
    let most = MAX_BATCH_BYTES / per_item as u64;
    if batch as u64 > most {
        return Err(too_large(
            most,
            per_item,
            "its inputs and outputs would take more than 2^62 bytes, past what a run's 64-bit \
             offsets count",
        ));
    }
    if let Kept::Memory { per_item } = kept {
        let per_item = per_item.max(1);
        if let Some(have) = mem_available_bytes()
            && batch as u128 * per_item as u128 > u128::from(have)
        {
            return Err(too_large(
                have / per_item as u64,
                per_item,
                "its results are held in memory whole, more than the memory available holds",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// An engine that hands back each chunk's items and its inputs' item count, in pieces of
    /// `piece` items.
    struct Echo {
        piece: usize,
    }

    impl Engine for Echo {
        type Run = (Range<usize>, usize);
        type Error = StreamError;
        fn chunks(&self, batch: usize) -> Chunks {
            pieces(batch, self.piece)
        }
        fn shows_progress(&self, _: usize, chunks: usize) -> bool {
            chunks > 1
        }
        fn run(
            &mut self,
            data: &HostData,
            items: Range<usize>,
            progress: Option<&Progress>,
        ) -> Result<Self::Run, StreamError> {
            if let Some(Progress(tick)) = progress {
                tick(items.len());
            }
            Ok((items, data.inputs["x"].shape[0]))
        }
    }

    fn stream(batch: usize, stop: Option<&AtomicBool>, done: Arc<Mutex<usize>>) -> Stream<'_> {
        let tick = move |n| *done.lock().unwrap() += n;
        Stream {
            weights: BTreeMap::new(),
            batch,
            progress: Some(Progress(Arc::new(tick))),
            stop,
        }
    }

    /// Each chunk's inputs are made for its items just before it runs, and the sink takes the
    /// chunks in order; progress counts every item.
    #[test]
    fn chunks_go_in_order_with_their_inputs() {
        let done = Arc::new(Mutex::new(0));
        let mut asked = Vec::new();
        let mut got = Vec::new();
        let inputs = |items: Range<usize>| {
            asked.push(items.clone());
            let x = Tensor::zeros(vec![items.len(), 2]);
            Ok::<_, StreamError>(BTreeMap::from([("x".to_string(), x)]))
        };
        let sink = |items, run| {
            got.push((items, run));
            Ok(())
        };
        let run = stream(10, None, done.clone()).run(&mut Echo { piece: 4 }, inputs, sink);
        assert!(run.is_ok());
        assert_eq!(asked, [0..4, 4..8, 8..10]);
        let want = [(0..4, (0..4, 4)), (4..8, (4..8, 4)), (8..10, (8..10, 2))];
        assert_eq!(got, want);
        assert_eq!(*done.lock().unwrap(), 10);
    }

    /// The stop flag, set during a chunk, stops the run before the next one, with the items
    /// done.
    #[test]
    fn the_stop_flag_stops_between_chunks() {
        let stop = AtomicBool::new(false);
        let inputs = |items: Range<usize>| {
            let x = Tensor::zeros(vec![items.len()]);
            Ok::<_, StreamError>(BTreeMap::from([("x".to_string(), x)]))
        };
        let sink = |_, _| {
            stop.store(true, Ordering::SeqCst);
            Ok(())
        };
        let done = Arc::new(Mutex::new(0));
        let run = stream(10, Some(&stop), done).run(&mut Echo { piece: 4 }, inputs, sink);
        assert!(matches!(
            run,
            Err(StreamError::Stopped { done: 4, batch: 10 })
        ));
    }

    /// The absolute cap by hand: 2^62 bytes of 8-byte items make 2^59 items; one more is
    /// refused, naming the flag and the limit; a batch held in memory past `MemAvailable`
    /// is refused too, a streamed one of the same size is not.
    #[test]
    fn batch_limits_by_hand() {
        assert!(check_batch("--batch", 1 << 59, 8, Kept::Streamed).is_ok());
        let e = check_batch("--batch", (1 << 59) + 1, 8, Kept::Streamed).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("--batch 576460752303423489: "), "{text}");
        assert!(text.contains("the limit is 576460752303423488 input sets of 8 bytes each"));
        assert!(check_batch("batch=", usize::MAX, 0, Kept::Streamed).is_err());
        if let Some(have) = mem_available_bytes() {
            let batch = (have / 1024 + 1) as usize;
            assert!(check_batch("--batch", batch, 1024, Kept::Streamed).is_ok());
            let held = Kept::Memory { per_item: 1024 };
            let e = check_batch("batch=", batch, 1024, held).unwrap_err();
            let limit = format!("the limit is {} input sets of 1024 bytes", have / 1024);
            assert!(e.to_string().contains(&limit), "{e}");
        }
    }

    /// A batch of 2^63 items is cut in pieces as they are taken: nothing of the size of the
    /// batch is made up front.
    #[test]
    fn pieces_of_a_huge_batch_are_made_as_taken() {
        let batch = 1usize << 63;
        let mut p = pieces(batch, 4096);
        assert_eq!(p.len(), 1 << 51);
        assert_eq!(p.next(), Some(0..4096));
        let mut whole = pieces(batch, usize::MAX);
        assert_eq!((whole.next(), whole.next()), (Some(0..batch), None));
    }

    /// Pieces of 1 GiB of inputs and outputs at most, by hand: 4096 items of 256 KiB make
    /// 1 GiB exactly; 4096 of 256 KiB + 1 byte pass it, so 4095; items of 100 MB, 10 (1.0 GB);
    /// one item of more than 1 GiB still goes alone.
    #[test]
    fn default_pieces_by_hand() {
        assert_eq!(Emulator::default_piece(false, 0), 4096);
        assert_eq!(Emulator::default_piece(false, 256 << 10), 4096);
        assert_eq!(Emulator::default_piece(false, (256 << 10) + 1), 4095);
        assert_eq!(Emulator::default_piece(true, 256 << 10), 1024);
        assert_eq!(Emulator::default_piece(true, 100_000_000), 10);
        assert_eq!(Emulator::default_piece(false, 100_000_000), 10);
        assert_eq!(Emulator::default_piece(false, 3 << 30), 1);
    }
}
