//! After the last item: an unfinished chain, pending iterations, netq leftovers, unwritten
//! outputs and the unused-data warnings.

use super::records::Body;
use crate::check::checker::Checker;
use crate::diagnostics::{Diagnostic, codes};
use crate::program::DeclKind;
use std::collections::HashMap;

impl Checker {
    /// After the last item: an open chain, pending iterations, netq leftovers, warnings.
    pub(in crate::check) fn finish(&mut self) {
        if self.stopped {
            return;
        }
        if let Some(open) = &self.open {
            let (first, last) = (open.first, open.last);
            let broken = matches!(open.body, Body::Broken);
            self.incomplete |= broken;
            if !broken {
                self.emit(
                    Diagnostic::error(codes::MISSING_END_CHAIN, "chain without `end_chain`")
                        .label(last, "the file ends after this instruction")
                        .label(first, "chain starts here")
                        .help("add `end_chain` after the chain's last `v_wr`"),
                );
                self.close_chain(last);
            }
            self.open = None;
        }
        if let Some((_, span)) = self.scalars.iterations {
            self.emit(
                Diagnostic::error(
                    codes::SCALAR_VALUE,
                    "`s_wr iterations` with no chain after it",
                )
                .label(span, "applies to the next chain, but none follows")
                .help("remove it, or add the chain it should repeat"),
            );
        }
        // After a chain was dropped or not simulated (it had errors), or a size limit stopped
        // the walk, netq counts and unused data are unknown: saying more would only echo
        // those errors.
        if !self.incomplete && !self.stopped {
            self.netq_leftovers();
            self.unwritten_outputs();
            self.unused_warnings();
        }
    }

    fn netq_leftovers(&mut self) {
        let mut out = Vec::new();
        for (input, q) in [(true, &self.inputs), (false, &self.outputs)] {
            let mut done: HashMap<usize, usize> = HashMap::new();
            for &(d, _, _) in &q.rows[..q.next] {
                *done.entry(d).or_default() += 1;
            }
            let mut missing = Vec::new();
            for &(d, _, _) in &q.rows[q.next..] {
                if missing.last() != Some(&d) {
                    missing.push(d);
                }
            }
            for d in missing {
                let decl = &self.decls[d];
                let n = done.get(&d).copied().unwrap_or(0);
                let (what, verb, help) = if input {
                    (
                        "input",
                        "popped by `v_rd netq`",
                        "each `v_rd netq` (per iteration) pops one row: add the missing reads or fix the shape",
                    )
                } else {
                    (
                        "output",
                        "pushed by `v_wr netq`",
                        "each `v_wr netq` (per iteration) pushes one row: add the missing writes or fix the shape",
                    )
                };
                out.push(
                    Diagnostic::error(
                        codes::NETQ_COUNT,
                        format!(
                            "{what} `{}` has {} row{} but only {n} {} {verb}",
                            decl.name,
                            decl.rows(),
                            if decl.rows() == 1 { "" } else { "s" },
                            if n == 1 { "is" } else { "are" }
                        ),
                    )
                    .label(
                        self.decl_names[d],
                        format!(
                            "{} row{}",
                            decl.rows(),
                            if decl.rows() == 1 { "" } else { "s" }
                        ),
                    )
                    .help(help),
                );
            }
        }
        for d in out {
            self.emit(d);
        }
    }

    /// Outputs placed in memory are read back by the host after the run: every register of
    /// one must hold a value by then (the emulator and the software graph refuse to read one
    /// that nothing wrote).
    fn unwritten_outputs(&mut self) {
        let mut out = Vec::new();
        for &(space, start, end, i) in &self.decl_index {
            let d = &self.decls[i];
            let Some(place) = d.place.filter(|_| d.kind == DeclKind::Output) else {
                continue;
            };
            let unwritten: Vec<u32> = (start..end)
                .filter(|&r| self.regs.writer_at(space, r) == 0)
                .collect();
            let (Some(&first), Some(&last)) = (unwritten.first(), unwritten.last()) else {
                continue;
            };
            let mem = place.mem;
            let which = if unwritten.len() == 1 {
                format!("{mem}[{first}] is never written")
            } else {
                format!(
                    "{} of its {} registers are never written, {mem}[{first}] to {mem}[{last}]",
                    unwritten.len(),
                    end - start
                )
            };
            out.push(
                Diagnostic::error(
                    codes::UNINIT_READ,
                    format!(
                        "output `{}` is read back from {mem}[{first}] after the run, but nothing \
                         writes it",
                        d.name
                    ),
                )
                .label(self.decl_names[i], which)
                .help(format!(
                    "write all of {mem}[{start}..{end}] before the program ends (check the \
                     `rows` and `iterations` of the chains that write `{}`), or shrink its \
                     shape",
                    d.name
                )),
            );
        }
        for d in out {
            self.emit(d);
        }
    }

    fn unused_warnings(&mut self) {
        // Outputs placed in memory are read back by the host after the run.
        for &(space, start, end, i) in &self.decl_index.clone() {
            if self.decls[i].kind == DeclKind::Output {
                for r in start..end {
                    self.regs.keep(space, r);
                }
            }
        }
        let mut out = Vec::new();
        for w in self.regs.writers.iter().skip(1).filter(|w| !w.used) {
            if w.is_decl {
                let Some(d) = w.decl.and_then(|d| self.decls.get(d)) else {
                    continue;
                };
                if d.kind == DeclKind::Output {
                    continue; // written by the program, collected by the host
                }
                out.push(
                    Diagnostic::warning(codes::UNREAD_DECL, format!("`{}` is never read", d.name))
                        .label(w.span, "declared here")
                        .help("remove the declaration, or use it"),
                );
            } else {
                let mut d = Diagnostic::warning(codes::DEAD_WRITE, "this write is never read")
                    .label(w.span, "written here");
                d = match w.overwritten_by {
                    Some(s) => d
                        .label(s, "overwritten here before any read")
                        .help("remove the first write, or read its value before overwriting it"),
                    None => d.help(
                        "nothing reads it afterwards and it is not an output: remove it, or \
                         declare `output NAME : [...] at MEM[ADDR]` to read it back",
                    ),
                };
                out.push(d);
            }
        }
        for d in out {
            self.emit(d);
        }
    }
}
