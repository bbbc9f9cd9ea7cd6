//! One module per subcommand. Each exposes `Args` (clap) and `run(Args) -> miette::Result<ExitCode>`.
//! Exit codes: 0 success/concordant, 1 errors in the firmware or discordance, 2 bad input.

pub mod bench;
pub mod check;
pub mod compile;
pub mod diff;
pub mod emulate;
pub mod graph;
pub mod host_args;
pub mod quantize;
pub mod run;
