//! Execution: the software graph on candle-core, the emulator, tensor I/O, traces and diff.
//!
//! `emulator` and `exec` are independent models of the same hardware; they share only the
//! host data, the tensor I/O and the trace format, never kernels.
pub mod campaign;
pub mod diff;
pub mod emulator;
pub mod exec;
pub mod explain;
pub mod host;
pub mod io;
pub mod module;
pub mod stream;
pub mod tensor;
pub mod trace;
pub mod train;
