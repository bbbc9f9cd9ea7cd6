//! Size limits: the unrolled size of `repeat` nests (steps: instructions plus iterations,
//! nested ranges multiplied, checked before unrolling), and the program's footprint once run
//! ([`crate::limits`]: operations and declared bytes).

use super::eval::{Eval, Value};
use super::{Checker, MAX_INSTRUCTIONS};
use crate::ast::{self, Item};
use crate::diagnostics::{Diagnostic, codes};
use crate::limits::{self, MAX_DATA_BYTES, MAX_OPERATIONS};
use crate::program::Span;

impl Checker {
    pub(super) fn repeat(&mut self, r: &ast::Repeat) {
        let (Some(a), Some(b)) = (self.eval(&r.start), self.eval(&r.end)) else {
            return;
        };
        if b < a {
            self.emit(
                Diagnostic::error(codes::REPEAT, format!("empty range {a}..{b}"))
                    .label(r.start.span.join(r.end.span), "the end is below the start")
                    .help("`repeat t in A..B` runs t = A, A+1, ..., B-1"),
            );
            return;
        }
        // The whole nest's unrolled size, where its ranges are known here (an inner range that
        // depends on an outer variable counts once; the running count below still bounds it).
        let size = self.unrolled_size(r);
        if size <= MAX_INSTRUCTIONS as u128 && self.steps as u128 + size > MAX_INSTRUCTIONS as u128
        {
            // Under the limit alone, over it with what came before.
            self.steps = MAX_INSTRUCTIONS as u64;
            self.step(r.start.span.join(r.end.span));
            return;
        }
        if size > MAX_INSTRUCTIONS as u128 {
            let shown = if size > u64::MAX as u128 {
                format!("more than {}", u64::MAX)
            } else {
                size.to_string()
            };
            self.emit(
                Diagnostic::error(
                    codes::TOO_LARGE,
                    format!("this `repeat` unrolls to {shown} steps"),
                )
                .label(
                    r.start.span.join(r.end.span),
                    format!(
                        "{} iterations; a step is an instruction or a `repeat` iteration",
                        i128::from(b) - i128::from(a)
                    ),
                )
                .help(format!(
                    "a program unrolls to at most {MAX_INSTRUCTIONS} steps (instructions plus \
                     `repeat` iterations, nested ranges multiplied); use `s_wr iterations, K` \
                     with `_inc` addresses for long loops"
                )),
            );
            // The rest of the program is not walked: what it reads and writes is unknown.
            self.stopped = true;
            return;
        }
        for v in a..b {
            if self.stopped || !self.step(r.var.span) {
                return;
            }
            self.env.push_scope();
            match self.env.define(&r.var.name, r.var.span, Value::Int(v)) {
                Ok(()) => self.items(&r.body, false),
                Err(d) => {
                    self.emit(d);
                    self.env.pop_scope();
                    return;
                }
            }
            self.env.pop_scope();
        }
    }

    /// Steps (instructions and `repeat` iterations) `r` unrolls to, saturating: its range
    /// times one more than its body's size, inner ranges evaluated where they are constant
    /// here (an inner range that names an outer variable counts as one iteration).
    fn unrolled_size(&self, r: &ast::Repeat) -> u128 {
        let range = |r: &ast::Repeat| -> Option<u128> {
            let no_base =
                |_: usize, span: Span| Err(Diagnostic::error(codes::EXPR, "").label(span, ""));
            let ev = Eval {
                env: &self.env,
                base_of: &no_base,
            };
            let (a, b) = (ev.eval(&r.start).ok()?, ev.eval(&r.end).ok()?);
            Some((i128::from(b) - i128::from(a)).max(0) as u128)
        };
        fn body(items: &[Item], range: &dyn Fn(&ast::Repeat) -> Option<u128>) -> u128 {
            items.iter().fold(0u128, |n, item| {
                let more = match item {
                    Item::Instr(_) => 1,
                    Item::Repeat(r) => range(r)
                        .unwrap_or(1)
                        .saturating_mul(body(&r.body, range).saturating_add(1)),
                    _ => 0,
                };
                n.saturating_add(more)
            })
        }
        range(r)
            .unwrap_or(0)
            .saturating_mul(body(&r.body, &range).saturating_add(1))
    }

    /// Count one unrolled step (an instruction or a `repeat` iteration); past the limit,
    /// report it at `span` and stop.
    pub(super) fn step(&mut self, span: Span) -> bool {
        self.steps += 1;
        if self.steps > MAX_INSTRUCTIONS as u64 {
            self.emit(
                Diagnostic::error(
                    codes::TOO_LARGE,
                    format!(
                        "the program unrolls to more than {MAX_INSTRUCTIONS} steps (instructions \
                         plus `repeat` iterations)"
                    ),
                )
                .label(span, "limit reached here")
                .help("use `s_wr iterations, K` with `_inc` addresses instead of long `repeat`s"),
            );
            self.stopped = true;
            return false;
        }
        true
    }

    /// The error of a program past a [`crate::limits`] limit, pointing at its largest chain
    /// or declaration.
    pub(super) fn size_error(&self) -> Option<Diagnostic> {
        let f = limits::footprint(&self.decls, &self.chains, self.n);
        if f.operations > MAX_OPERATIONS {
            let big = self
                .chains
                .iter()
                .max_by_key(|c| limits::chain_operations(c))?;
            return Some(
                Diagnostic::error(
                    codes::TOO_LARGE,
                    format!(
                        "the program unrolls to {} operations (chain iterations x instructions), \
                         over the limit of {MAX_OPERATIONS}",
                        f.operations
                    ),
                )
                .label(
                    big.span,
                    format!(
                        "the largest chain: {} iterations, {} operations",
                        big.iterations,
                        limits::chain_operations(big)
                    ),
                )
                .help(
                    "shorten the iteration counts (`s_wr iterations`) or the number of chains: \
                     `run`, `compile` and `emulate` hold every operation in memory",
                ),
            );
        }
        if f.data_bytes > MAX_DATA_BYTES {
            let (i, big) = self
                .decls
                .iter()
                .enumerate()
                .max_by_key(|(_, d)| limits::decl_bytes(d, self.n))?;
            let span = self.decl_names.get(i).copied().unwrap_or(big.span);
            return Some(
                Diagnostic::error(
                    codes::TOO_LARGE,
                    format!(
                        "the declarations hold {} bytes padded to N = {} tiles, over the limit \
                         of {MAX_DATA_BYTES}",
                        f.data_bytes, self.n
                    ),
                )
                .label(
                    span,
                    format!("the largest: {} bytes", limits::decl_bytes(big, self.n)),
                )
                .help("shrink the declarations, or use a target with a smaller native dimension"),
            );
        }
        None
    }
}
