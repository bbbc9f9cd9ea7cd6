//! `nnpc completions`: the shell completion script of the whole command line.

use clap_complete::Shell;
use std::process::ExitCode;

/// Print the completion script of `nnpc` for a shell on stdout.
///
/// The script completes subcommands, flags and their fixed values. Load it in the shell's own
/// way: bash `source <(nnpc completions bash)` (or save it under
/// `~/.local/share/bash-completion/completions/nnpc`), zsh a file `_nnpc` in a directory of
/// `$fpath`, fish `~/.config/fish/completions/nnpc.fish`, PowerShell `nnpc completions
/// powershell | Out-String | Invoke-Expression` in the profile, elvish `eval (nnpc completions
/// elvish | slurp)` in `rc.elv`.
///
/// Exit status: 0 on success, 2 for an unknown shell.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  nnpc completions bash
  nnpc completions zsh
  nnpc completions fish")]
pub struct Args {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Write the script of `cmd` (the whole command line's clap command) for `args.shell`.
pub fn run(args: Args, mut cmd: clap::Command) -> miette::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "nnpc", &mut script);
    super::output::stdout(script)?;
    Ok(ExitCode::SUCCESS)
}
