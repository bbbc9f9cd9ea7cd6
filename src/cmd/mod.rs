//! One module per subcommand. Each exposes `Args` (clap) and `run(Args) -> miette::Result<ExitCode>`.
//! Exit codes: 0 success/concordant, 1 errors in the firmware or discordance, 2 bad input.

pub mod bench;
pub mod check;
pub mod compile;
pub mod completions;
pub mod data;
pub mod diff;
pub mod emulate;
pub mod files;
pub mod graph;
pub mod host_args;
pub mod output;
pub mod quantize;
pub mod run;
pub mod score;
pub mod seeded;
pub mod train;

mod failure;
mod firmware;
mod parse;
mod progress;

pub use failure::{Failure, fail, fail_in, runtime_error};
pub use files::write_output;
pub use firmware::{Firmware, compile};
pub use parse::at_least_one;
pub use progress::{bar, input_sets_bar};
