//! `nnpc compile` (not implemented yet).

use std::process::ExitCode;

/// Not implemented yet.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> miette::Result<ExitCode> {
    Err(miette::miette!("`nnpc compile` is not implemented yet"))
}
