//! A run of a session: its batch in chunks of items one after the other, each chunk whole or
//! in shards side by side, and the parts merged into one execution.

use super::awake::Awake;
use super::{Part, Session};
use crate::state::counts;
use crate::{ExecError, Execution};
use nnp_host::{HostData, Outputs};
use rayon::prelude::*;
use std::ops::Range;

impl Session<'_> {
    /// Run the graph on `data` (`data.batch` input sets), in chunks of items one after the
    /// other ([`Session::chunks`]), with the outputs of the whole batch in the execution. A
    /// warm chunk of a graph with small weights goes in shards of items, one per thread
    /// (`Session::run_shards`).
    pub fn run(&mut self, data: &HostData) -> Result<Execution, ExecError> {
        let mut outputs = Outputs::new();
        let run = self.run_each(data, |_, part| {
            append_outputs(&mut outputs, part, data.batch);
            Ok::<_, ExecError>(())
        })?;
        Ok(Execution { outputs, ..run })
    }

    /// Run like [`Session::run`], but hand each chunk's outputs to `sink` with the chunk's
    /// items as soon as the chunk is done, in order, instead of holding the whole batch's: a
    /// run of any batch then holds one chunk's values at a time. The execution returned has
    /// no outputs (written values are merged as in `run`); an error of `sink` stops the run.
    pub fn run_each<E: From<ExecError> + Send>(
        &mut self,
        data: &HostData,
        mut sink: impl FnMut(Range<usize>, Outputs) -> Result<(), E> + Send,
    ) -> Result<Execution, E> {
        // On one of rayon's threads: every op's parallel loop then starts on this thread at
        // once, with idle threads joining as they wake, instead of the caller handing it to
        // the pool and sleeping until it is done (two wake-ups per op, each tens of
        // microseconds on a virtual machine). The GPU binds its context on whichever thread
        // calls it (`gpu`).
        let done = std::sync::atomic::AtomicBool::new(false);
        rayon::scope(|scope| {
            let _awake = (self.gpu.is_none()).then(|| Awake::start(scope, &done));
            let chunks = self.chunks(data.batch);
            if std::env::var_os("NNPC_EXEC_PROFILE").is_some() {
                eprintln!(
                    "profile: {} chunk(s) of at most {} items ({} bytes per item at most)",
                    chunks.len(),
                    data.batch.div_ceil(chunks.len()),
                    self.steps.item_bytes
                );
            }
            let (count, mut shards, mut all) = (chunks.len(), 1, None);
            for items in chunks {
                let mut chunk = None;
                match self.shards(items.clone()) {
                    Some(s) => {
                        shards = shards.max(s.len());
                        for part in self.run_shards(data, s)? {
                            self.merge(&mut chunk, part, items.len());
                        }
                    }
                    None => {
                        let part = self.run_whole(data, items.clone())?;
                        self.merge(&mut chunk, part, items.len());
                    }
                }
                let mut chunk = chunk.unwrap_or_default();
                chunk.found.merge(self.const_found.clone());
                if let Some(e) = chunk.found.error(&self.graph) {
                    return Err(e.into());
                }
                let outputs = std::mem::take(&mut chunk.outputs);
                self.merge(&mut all, chunk, data.batch);
                sink(items.clone(), outputs)?;
            }
            Ok(self.execution(all, shards, count))
        })
    }

    /// Bytes per batch item of the values a run holds at once, at most.
    pub fn item_bytes(&self) -> usize {
        self.steps.item_bytes
    }

    /// The chunks a run at batch `b` takes: consecutive ranges of nearly equal size, none
    /// over `chunk_items`, or by default over [`default_chunk_items`] of the values a run
    /// holds at once per item ([`Session::item_bytes`]). Every op computes each item alone, so
    /// the bits are those of one pass over the batch. At least one range, whatever `b`; made
    /// as they are taken, so any batch has them.
    pub fn chunks(
        &self,
        b: usize,
    ) -> impl ExactSizeIterator<Item = Range<usize>> + DoubleEndedIterator + Clone + use<> {
        let most = self
            .opts
            .chunk_items
            .unwrap_or_else(|| default_chunk_items(self.steps.item_bytes))
            .max(1);
        let count = b.div_ceil(most).max(1);
        // In u128: `k * b` passes usize where b does 2^32 items.
        let at = move |k: usize| (k as u128 * b as u128 / count as u128) as usize;
        (0..count).map(move |k| at(k)..at(k + 1))
    }

    /// The shards a run takes of the items `items` ([`Session::run_shards`]): a warm run on
    /// the CPU of a graph with [`Session::shard_warm_runs`] weights, one shard per thread of at least
    /// [`MIN_SHARD_ITEMS`] items (or `batch_shards`); `None` to run the items whole.
    pub(super) fn shards(&self, items: Range<usize>) -> Option<Vec<Range<usize>>> {
        let b = items.len();
        let count = match self.opts.batch_shards {
            Some(k) => k.min(b),
            None if self.shard_warm_runs => rayon::current_num_threads().min(b / MIN_SHARD_ITEMS),
            None => 1,
        };
        (self.warm && self.gpu.is_none() && count > 1).then(|| {
            (0..count)
                .map(|k| items.start + k * b / count..items.start + (k + 1) * b / count)
                .collect()
        })
    }

    /// The items `items` in one pass (a first run computes and keeps the constants).
    fn run_whole(&mut self, data: &HostData, items: Range<usize>) -> Result<Part, ExecError> {
        let mut caches = std::mem::take(&mut self.caches);
        let part = self.run_items(data, items, &mut caches);
        self.caches = caches;
        let mut part = part?;
        for (i, t) in part.consts.drain(..) {
            self.consts[i] = Some(t);
        }
        self.const_found
            .merge(std::mem::take(&mut part.const_found));
        self.warm = true;
        Ok(part)
    }

    /// A warm run in shards of consecutive items, side by side on rayon's threads: each shard
    /// runs the whole graph on its items with no wait between its ops (a small graph's ops
    /// are microseconds, about what waking a thread costs), on handles to the session's
    /// cached weights. Every op computes each item alone, so the bits are those of one pass
    /// over the batch.
    fn run_shards(
        &mut self,
        data: &HostData,
        shards: Vec<Range<usize>>,
    ) -> Result<Vec<Part>, ExecError> {
        let this = &*self;
        let mut parts = shards
            .into_par_iter()
            .map(|items| {
                let mut caches = this.caches.clone();
                this.run_items(data, items, &mut caches)
                    .map(|part| (part, caches))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // What the first shard added to the caches stays (a warm run rarely adds any).
        if let Some((_, caches)) = parts.first_mut() {
            self.caches = std::mem::take(caches);
        }
        Ok(parts.into_iter().map(|(part, _)| part).collect())
    }

    /// Append `part` (the next items in order) to `all`, the parts so far of `b` items:
    /// outputs ([`append_outputs`]) and written values concatenated (a constant's written
    /// value is one item in every part), and a node counted on a fast path where every part
    /// took it.
    fn merge(&self, all: &mut Option<Part>, part: Part, b: usize) {
        let Some(all) = all else {
            *all = Some(part);
            return;
        };
        append_outputs(&mut all.outputs, part.outputs, b);
        all.found.merge(part.found);
        for (id, w) in &mut all.written {
            if let (false, Some(more)) = (self.plan.constant[*id], part.written.get(id)) {
                w.data.extend_from_slice(&more.data);
                w.batch += more.batch;
            }
        }
        all.paths = all.paths.intersection(&part.paths).copied().collect();
    }

    /// The execution of a batch from its parts merged ([`Session::merge`]), in `chunks`
    /// chunks of at most `shards` shards each.
    fn execution(&self, all: Option<Part>, shards: usize, chunks: usize) -> Execution {
        let all = all.unwrap_or_default();
        Execution {
            paths: counts(&all.paths),
            shards,
            chunks,
            outputs: all.outputs,
            written: all.written,
        }
    }
}

/// Bytes per chunk of the values a run holds at once, at most, by default
/// ([`Session::chunks`]): a batch of any size runs in bounded memory, a chunk this size still
/// gives every op hundreds of items of a small graph, and its values stay in a server CPU's
/// last-level cache (the samples at large batches ran 1.1x to 1.25x faster than with 32 MiB).
pub const CHUNK_BYTES: usize = 8 << 20;

/// The default limit of items per chunk is at least this ([`Session::chunks`]): four of the
/// integer kernel's tasks of items, each reading its weight tiles once. Not where their values
/// pass [`MAX_CHUNK_BYTES`].
pub const MIN_CHUNK_ITEMS: usize = 256;

/// Bytes of the values a run holds at once that a default chunk never passes, unless a single
/// item does: programs whose items hold megabytes (an LSTM over thousands of steps keeps every
/// step's output) run in chunks of fewer than [`MIN_CHUNK_ITEMS`], where 256 items would hold
/// gigabytes at once.
pub const MAX_CHUNK_BYTES: usize = 1 << 30;

/// The most items of `item_bytes` each that [`MAX_CHUNK_BYTES`] allow, at least one: the cap
/// on a default chunk here and on a default piece of `nnpc emulate`.
pub fn max_chunk_items(item_bytes: usize) -> usize {
    (MAX_CHUNK_BYTES / item_bytes.max(1)).max(1)
}

/// The default limit of items per chunk ([`Session::chunks`]) for values of `item_bytes` per
/// item: as many as [`CHUNK_BYTES`] allow, or [`MIN_CHUNK_ITEMS`] where that is fewer, but no
/// more than [`max_chunk_items`]; at least one.
pub fn default_chunk_items(item_bytes: usize) -> usize {
    (CHUNK_BYTES / item_bytes.max(1)).max(MIN_CHUNK_ITEMS.min(max_chunk_items(item_bytes)))
}

/// Items per shard of a warm run, at least ([`Session::shards`]).
const MIN_SHARD_ITEMS: usize = 4;

/// Append `more` (the outputs of the next items in order) to `all`, the outputs so far of a
/// run of `b` items. The first append after the first part makes room for all `b` items at
/// that part's size per item, so a run of many parts holds each output once.
fn append_outputs(all: &mut Outputs, more: Outputs, b: usize) {
    if all.is_empty() {
        *all = more;
        return;
    }
    for (name, t) in all.iter_mut() {
        if let Some(more) = more.get(name) {
            // A no-op once the room is there.
            let per_item = t.data.len().checked_div(t.shape[0]).unwrap_or(0);
            t.data
                .reserve_exact(per_item * b.saturating_sub(t.shape[0]));
            t.data.extend_from_slice(&more.data);
            t.shape[0] += more.shape[0];
        }
    }
}
