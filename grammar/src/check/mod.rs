//! The checker: AST -> [`Program`], enforcing the rules of docs/language.md against a
//! [`Target`].
//!
//! Two passes over the file. Pass 1 evaluates the top-level `let`s and declarations (so the
//! host's data is in place before the first instruction, wherever the declarations are written).
//! Pass 2 walks the code in order, unrolling `repeat`, assembling chains and simulating which
//! register holds what, per register and per iteration, to find uninitialised reads, dead writes
//! and netq mismatches. All errors are collected; a diagnostic is reported once per
//! (code, span), so an error inside a `repeat` body is not repeated for every unrolled copy.
//!
//! This file: the entry points (the target to check against, the result). The checker's state
//! is in `checker.rs`, the walk over items and the statements between chains in `stmt.rs`,
//! memory operands in `operand.rs`, chains in `chain/`, size limits in `size.rs`.

mod chain;
mod checker;
mod decls;
mod eval;
mod operand;
mod pads;
mod size;
mod state;
mod stmt;

use crate::ast::{self, File, Item};
use crate::diagnostics::{Diagnostic, codes};
use crate::parse::parse;
use crate::program::{Program, SourceFile};
use crate::target::{BUILTIN_TARGETS, Target};
use checker::Checker;
use std::path::Path;
use std::sync::Arc;

pub use eval::RESERVED;
pub use size::MAX_INSTRUCTIONS;

/// A program that passed the checker, with its warnings.
#[derive(Clone, Debug)]
pub struct CheckOutput {
    pub program: Program,
    pub warnings: Vec<Diagnostic>,
}

/// Parse and check a firmware file. `target_override` (the `--target` option) wins over the
/// file's `target` statement. On failure returns every error (and the warnings found so far).
pub fn check(
    src: Arc<SourceFile>,
    target_override: Option<Target>,
) -> Result<CheckOutput, Vec<Diagnostic>> {
    let file = parse(&src)?;
    check_file(src, &file, target_override)
}

/// Check an already parsed file.
pub fn check_file(
    src: Arc<SourceFile>,
    file: &File,
    target_override: Option<Target>,
) -> Result<CheckOutput, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let target = resolve_target(&src, file, target_override, &mut diags);
    let mut c = Checker::new(src, target);
    for d in diags {
        c.emit(d);
    }
    c.run(file);
    c.into_output()
}

/// The target: `--target`, else the file's `target` statement, else `bw-default`.
fn resolve_target(
    src: &SourceFile,
    file: &File,
    over: Option<Target>,
    diags: &mut Vec<Diagnostic>,
) -> Target {
    let stmts: Vec<&ast::TargetStmt> = file
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Target(t) => Some(t),
            _ => None,
        })
        .collect();
    if let [first, rest @ ..] = stmts.as_slice() {
        for t in rest {
            diags.push(
                Diagnostic::error(codes::TARGET, "more than one `target` statement")
                    .label(t.span, "second target")
                    .label(first.span, "first target")
                    .help("a file is checked for one target: keep one `target` line"),
            );
        }
    }
    if let Some(t) = over {
        return t;
    }
    let Some(stmt) = stmts.first() else {
        return Target::bw_default();
    };
    let value = stmt.value.as_str();
    let loaded = if BUILTIN_TARGETS.contains(&value) {
        Target::builtin(value)
    } else {
        let path = Path::new(value);
        let path = match Path::new(&src.name).parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_path_buf(),
        };
        Target::load_as(value, &path.to_string_lossy())
    };
    loaded.unwrap_or_else(|e| {
        let help = match crate::target::nearest_builtin(value) {
            Some(b) if matches!(e, crate::TargetError::Read { .. }) => {
                format!("did you mean the built-in target `{b}`?")
            }
            _ => format!(
                "built-in targets: {}; otherwise a path to a TOML target file, relative to \
                 this file",
                BUILTIN_TARGETS.join(", ")
            ),
        };
        diags.push(
            Diagnostic::error(codes::TARGET, format!("cannot use target `{value}`"))
                .label(stmt.value_span, e.to_string())
                .help(help),
        );
        Target::bw_default()
    })
}

impl Checker {
    fn into_output(mut self) -> Result<CheckOutput, Vec<Diagnostic>> {
        let mut errors = self.diags.iter().any(Diagnostic::is_error);
        if !errors && let Some(d) = self.size_error() {
            self.diags.push(d);
            errors = true;
        }
        self.diags.sort_by_key(|d| (d.span().start, d.severity));
        if errors {
            return Err(self.diags);
        }
        Ok(CheckOutput {
            program: Program {
                source: self.src,
                target: self.target,
                decls: self.decls,
                chains: self.chains,
                pops: self.pops,
                pushes: self.pushes,
            },
            warnings: self.diags,
        })
    }
}
