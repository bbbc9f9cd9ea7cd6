//! The runtime: the two engines, and what runs and compares them.
//!
//! The engines are their own crates, so that neither can reach into the other:
//! `nnp-host` (host data, tensor files, traces: what both share), `nnp-emulator` (the
//! instruction-level model of the hardware) and `nnp-exec` (the software graph on candle-core,
//! with the embeddable `Module` and training). This crate runs either over a batch in chunks
//! ([`stream`]), compares them with a hardware dump ([`diff`], [`explain`]) and merges campaign
//! parts ([`campaign`]); it re-exports the three crates under the names the rest of nnpc uses.
pub mod campaign;
pub mod diff;
pub mod explain;
pub mod score;
pub mod stream;

pub use nnp_emulator as emulator;
pub use nnp_exec as exec;
pub use nnp_exec::{module, train};
pub use nnp_host as host;
pub use nnp_host::{io, tensor, trace};
