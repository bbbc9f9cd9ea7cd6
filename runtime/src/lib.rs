//! Execution: the software graph on candle-core, the emulator, tensor I/O and diff.
pub mod emulator;
pub mod exec;
pub mod host;
pub mod io;
