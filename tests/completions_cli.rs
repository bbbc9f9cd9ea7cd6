//! `nnpc completions SHELL`: a completion script for every shell clap_complete knows, on
//! stdout, naming the subcommands and the global flags; an unknown shell is bad input (2).

mod common;

use common::{nnpc, stderr, stdout};

/// Every shell's script is written whole on stdout, nothing on stderr, and completes the
/// subcommands (`emulate`, `completions`) and the global `--color` (bash, zsh and fish its
/// values too).
#[test]
fn every_shell_gets_a_script_that_names_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let o = nnpc(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        assert!(o.stderr.is_empty(), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        for word in ["nnpc", "emulate", "completions", "color"] {
            assert!(script.contains(word), "{shell}: no `{word}` in\n{script}");
        }
        if ["bash", "zsh", "fish"].contains(&shell) {
            assert!(
                script.contains("always"),
                "{shell}: no `always` in\n{script}"
            );
        }
    }
    // bash's script defines its function and registers it for `nnpc`.
    let bash = stdout(&nnpc(&["completions", "bash"]));
    assert!(
        bash.contains("_nnpc()") && bash.contains("complete -F _nnpc"),
        "{bash}"
    );
}

/// A shell clap_complete does not know: exit 2, the shells it does know listed, no script.
#[test]
fn an_unknown_shell_is_bad_input() {
    let o = nnpc(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    let err = stderr(&o);
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        assert!(err.contains(shell), "{err}");
    }
    let o = nnpc(&["completions"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
