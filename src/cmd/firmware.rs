//! The firmware a command works on ([`Firmware`]): loading, checking and compiling it.

use super::failure::fail_in;
use super::files;
use super::output;
use nnp_grammar::Program;
use nnp_lowering::swgraph::{Roots, SwGraph};
use std::path::PathBuf;
use std::process::ExitCode;

/// The firmware a command works on: the firmware file and `--target`.
#[derive(clap::Args)]
pub struct Firmware {
    /// The firmware file (.nnp).
    pub file: PathBuf,
    /// Target: a built-in name (`bw-default`) or a TOML target file. Overrides the file's
    /// `target` statement.
    #[arg(long, value_name = "NAME|FILE")]
    pub target: Option<String>,
}

impl Firmware {
    /// Load and check the firmware; on failure print the diagnostics and return the exit
    /// status (1 for firmware errors, 2 for unreadable input).
    pub fn load(&self) -> Result<Program, ExitCode> {
        nnpc::load_program(&self.file, self.target()).map_err(|e| {
            let code = e.exit_code();
            output::report(&miette::Report::new(e), code)
        })
    }

    /// `--target`, if given.
    pub fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }

    /// The files a command on this firmware reads ([`files::Reads::firmware`]).
    pub fn reads(&self, program: &Program) -> files::Reads {
        files::Reads::firmware(&self.file, self.target(), program)
    }
}

/// Compile a checked program to the software graph that keeps `roots`
/// ([`nnp_lowering::swgraph::compile`]); on failure print why and return status 1.
pub fn compile(program: &Program, roots: Roots) -> Result<SwGraph, ExitCode> {
    nnp_lowering::swgraph::compile(program, roots).map_err(|e| {
        let report = fail_in(format!("{}: cannot lower", program.source.name), &e);
        output::report(&report, ExitCode::from(1))
    })
}
