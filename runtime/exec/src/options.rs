//! The options of a run ([`ExecOptions`], [`DeviceKind`]).

/// Where the graph runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceKind {
    #[default]
    Cpu,
    /// The graph on the first CUDA device (`device`, `gpu`; needs the `cuda` feature).
    Cuda,
}

/// Options of [`execute`](crate::execute).
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecOptions {
    pub device: DeviceKind,
    /// Keep the value of every `v_wr` (the graph's write records) for traces.
    pub keep_writes: bool,
    /// Hand back the value of every node but the outputs in `Execution::written` (every forward
    /// value; the training's record keeps only those its reverse pass reads,
    /// [`Session::recording`](crate::Session::recording)). Every value is then made whole: no
    /// fused region, prepared stack or skipped concat keeps one inside.
    pub keep_values: bool,
    /// Take the float BLAS path for every product even where the integer kernel
    /// ([`intdot`](crate::intdot)) applies (for comparisons and tests: the results are the same
    /// bits).
    pub float_matmul: bool,
    /// Evaluate every MFU op as a candle op of its own, whole tensors in and out, instead of in the
    /// plan's fused regions (for comparisons and tests: the results are the same bits).
    pub unfused: bool,
    /// Evaluate in the products-first order (`swgraph::Schedule::new`): another order of the same
    /// graph, for tests (the results are the same bits).
    pub products_first: bool,
    /// Never take the stacked steps in warm passes of few items (the products of one weight
    /// stack that read no other product as one product over their vectors stacked:
    /// docs/swgraph.md, "Stacked steps"); for comparisons and tests (the results are the same
    /// bits).
    pub unstacked: bool,
    /// Shards of a warm run on the CPU ([`Session::run`](crate::Session::run)): `None` chooses (one
    /// per thread for graphs of small weights, else the whole batch), `Some(1)` runs every batch
    /// whole; for comparisons and tests (the results are the same bits).
    pub batch_shards: Option<usize>,
    /// Items per chunk: a run goes through its batch in consecutive chunks of at most this many
    /// items, one after the other, so its intermediate values stay bounded whatever the batch
    /// ([`Session::chunks`](crate::Session::chunks)). `None` chooses from
    /// [`CHUNK_BYTES`](crate::CHUNK_BYTES); the results are the same bits.
    pub chunk_items: Option<usize>,
}
