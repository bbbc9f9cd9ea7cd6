//! `nnpc graph` (not implemented yet).

use std::process::ExitCode;

/// Not implemented yet.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> miette::Result<ExitCode> {
    Err(miette::miette!("`nnpc graph` is not implemented yet"))
}
