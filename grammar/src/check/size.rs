//! Size limits: the unrolled size of `repeat` nests (steps: instructions plus iterations,
//! nested ranges multiplied, checked before unrolling), and the program's footprint once run
//! ([`crate::limits`]: operations and declared bytes).

use super::checker::Checker;
use super::eval::{Eval, Value};
use crate::ast::{self, Item};
use crate::diagnostics::{Diagnostic, codes};
use crate::limits::{self, MAX_DATA_BYTES, MAX_OPERATIONS};
use crate::program::Span;
use std::collections::HashSet;

/// Most steps a program may unroll to: instructions plus `repeat` iterations.
pub const MAX_INSTRUCTIONS: usize = 5_000_000;
/// Most register accesses (over all iterations) the checker simulates.
pub(super) const MAX_WORK: u64 = 200_000_000;

/// What walking a `repeat` nest for its size found.
#[derive(Default)]
struct Walk {
    /// The inner `repeat`s whose ranges it knew and counted.
    counted: HashSet<usize>,
    /// Some inner range it knew is empty.
    empty: bool,
}

impl Checker {
    pub(super) fn repeat(&mut self, r: &ast::Repeat) {
        let (Some(a), Some(b)) = (self.eval(&r.start), self.eval(&r.end)) else {
            return;
        };
        let range_span = r.start.span.join(r.end.span);
        if b <= a {
            // Checked before formatting: an empty range inside a long `repeat` is met once per
            // outer iteration.
            if !self.reported(codes::REPEAT, range_span) {
                let why = if b == a {
                    "the end equals the start: no iterations"
                } else {
                    "the end is below the start"
                };
                self.emit(
                    Diagnostic::error(codes::REPEAT, format!("empty range {a}..{b}"))
                        .label(range_span, why)
                        .help(
                            "`repeat t in A..B` runs t = A, A+1, ..., B-1 and needs B > A:                              remove the block, or fix its bounds",
                        ),
                );
            }
            return;
        }
        // The unrolled size of this repeat, unless an enclosing one already counted it (its
        // range was known there, and the names it reads cannot change since: names never
        // shadow). The walk stops at inner ranges it cannot evaluate here; those count
        // themselves when they run, so each part of the body is walked once per run of the
        // nearest repeat that counts it, never once per iteration of every level above it.
        let key = std::ptr::from_ref(r) as usize;
        let counted = self.counted.contains(&key);
        let mut walk = Walk::default();
        if !counted {
            let len = (i128::from(b) - i128::from(a)) as u128;
            let size = self.unrolled_size(r, len, &mut walk);
            if size <= MAX_INSTRUCTIONS as u128
                && self.steps as u128 + size > MAX_INSTRUCTIONS as u128
            {
                // Under the limit alone, over it with what came before.
                self.steps = MAX_INSTRUCTIONS as u64;
                self.step(range_span);
                return;
            }
            if size > MAX_INSTRUCTIONS as u128 {
                self.too_large(r, size, a, b);
                return;
            }
        }
        // A body with an empty range known here fails the same way in every iteration: one
        // iteration reports it (and the body's other errors).
        let end = if walk.empty {
            self.incomplete = true;
            a + 1
        } else {
            b
        };
        let outer = if counted {
            None
        } else {
            Some(std::mem::replace(&mut self.counted, walk.counted))
        };
        for v in a..end {
            if self.stopped || !self.step(r.var.span) {
                break;
            }
            self.env.push_scope();
            match self.env.define(&r.var.name, r.var.span, Value::Int(v)) {
                Ok(()) => self.items(&r.body, false),
                Err(d) => {
                    self.emit(d);
                    self.env.pop_scope();
                    break;
                }
            }
            self.env.pop_scope();
        }
        if let Some(outer) = outer {
            self.counted = outer;
        }
    }

    fn too_large(&mut self, r: &ast::Repeat, size: u128, a: i64, b: i64) {
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
    }

    /// Steps (instructions and `repeat` iterations) `r` unrolls to with `len` iterations,
    /// saturating: `len` times one more than its body's size. Inner ranges known here are
    /// multiplied in and added to `walk.counted`; an empty one counts 0 and sets `walk.empty`
    /// (it is an error in every iteration); an inner range that names something defined
    /// inside `r` counts as one step and is not walked (it counts itself when it runs).
    fn unrolled_size(&self, r: &ast::Repeat, len: u128, walk: &mut Walk) -> u128 {
        let range = |r: &ast::Repeat| -> Option<i128> {
            if !(self.env.defines_all(&r.start) && self.env.defines_all(&r.end)) {
                return None;
            }
            let no_base =
                |_: usize, span: Span| Err(Diagnostic::error(codes::EXPR, "").label(span, ""));
            let ev = Eval {
                env: &self.env,
                base_of: &no_base,
            };
            let (a, b) = (ev.eval(&r.start).ok()?, ev.eval(&r.end).ok()?);
            Some(i128::from(b) - i128::from(a))
        };
        fn steps(
            len: u128,
            r: &ast::Repeat,
            range: &dyn Fn(&ast::Repeat) -> Option<i128>,
            walk: &mut Walk,
        ) -> u128 {
            let body = r.body.iter().fold(0u128, |n, item| {
                let more = match item {
                    Item::Instr(_) => 1,
                    Item::Repeat(r) => match range(r) {
                        None => 1,
                        Some(len) if len <= 0 => {
                            walk.empty = true;
                            0
                        }
                        Some(len) => {
                            walk.counted.insert(std::ptr::from_ref(r) as usize);
                            steps(len as u128, r, range, walk)
                        }
                    },
                    _ => 0,
                };
                n.saturating_add(more)
            });
            len.saturating_mul(body.saturating_add(1))
        }
        steps(len, r, &range, walk)
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
