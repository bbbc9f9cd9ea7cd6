//! Register and queue accesses of a chain: address ranges, the work limit, uninitialised reads,
//! netq slots.

use super::records::MemOp;
use crate::check::checker::Checker;
use crate::check::size::MAX_WORK;
use crate::check::state::Space;
use crate::diagnostics::{Diagnostic, codes};
use crate::program::{Mem, NetqSlot, Span};

impl Checker {
    /// Check that `extent` registers from `addr` stay inside the memory for every iteration.
    pub(super) fn in_range(
        &mut self,
        op: &MemOp,
        tile_space: bool,
        extent: u32,
        iterations: u32,
        what: &str,
    ) -> bool {
        if op.mem == Mem::Netq {
            return true;
        }
        let size = if tile_space {
            i64::from(self.target.memory.dram_tiles)
        } else {
            i64::from(self.target.mem_size(op.mem))
        };
        let last = i64::from(iterations.max(1) - 1);
        let at = |t: i64| i64::from(op.addr.base) + t * i64::from(op.addr.inc);
        let (unit, mem) = if tile_space || op.mem == Mem::Mrf {
            (
                "tiles",
                if tile_space {
                    "dram (matrix tiles)".to_string()
                } else {
                    "mrf".to_string()
                },
            )
        } else {
            ("registers", op.mem.to_string())
        };
        let iter_note = |t: i64| {
            if iterations > 1 {
                format!(" at iteration {t}")
            } else {
                String::new()
            }
        };
        // Affine in t: the extremes are at the first or the last iteration.
        if at(last) < 0 {
            let t = (0..=last).find(|&t| at(t) < 0).unwrap_or(last);
            self.emit(
                Diagnostic::error(
                    codes::ADDRESS_RANGE,
                    format!("address {}{} is negative", at(t), iter_note(t)),
                )
                .label(
                    op.span,
                    format!("{what} {}[{} + t * {}]", op.mem, op.addr.base, op.addr.inc),
                )
                .help("the increment walks below address 0: check its sign or the iteration count"),
            );
            return false;
        }
        for t in [0, last] {
            let end = at(t) + i64::from(extent);
            if end > size {
                let first = at(t);
                self.emit(
                    Diagnostic::error(
                        codes::ADDRESS_RANGE,
                        format!(
                            "{}[{first}..{end}] is out of range{}: {mem} has {size} {unit}",
                            op.mem,
                            iter_note(t)
                        ),
                    )
                    .label(
                        op.span,
                        format!("{what} {extent} {unit} from {}[{first}]", op.mem),
                    )
                    .help(format!(
                        "the last valid {} is {}",
                        if unit == "tiles" { "tile" } else { "register" },
                        size - 1
                    )),
                );
                return false;
            }
        }
        true
    }

    pub(super) fn count_work(&mut self, amount: u64, span: Span) -> bool {
        self.work = self.work.saturating_add(amount);
        if self.work > MAX_WORK {
            self.emit(
                Diagnostic::error(codes::TOO_LARGE, "program too large to check")
                    .label(
                        span,
                        format!("more than {MAX_WORK} register accesses by here"),
                    )
                    .help("reduce iteration counts or widths"),
            );
            self.stopped = true;
            return false;
        }
        true
    }

    pub(super) fn read_reg(
        &mut self,
        space: Space,
        reg: u32,
        mem: Mem,
        t: u32,
        iterations: u32,
        span: Span,
    ) -> Option<u32> {
        let w = self.regs.read(space, reg);
        // After a dropped chain its writes are missing: an uninitialised read may be an echo.
        if w.is_none() && !self.incomplete && !self.reported(codes::UNINIT_READ, span) {
            let when = if iterations > 1 {
                format!(" (iteration {t})")
            } else {
                String::new()
            };
            self.emit(
                Diagnostic::error(
                    codes::UNINIT_READ,
                    format!("{mem}[{reg}] is read before anything writes it{when}"),
                )
                .label(span, format!("{mem}[{reg}] holds no value yet"))
                .help(format!(
                    "declare the data the host loads there (e.g. `vector NAME : [LEN] at \
                     {mem}[{reg}]`, or `= 0` for zeros) or write it in an earlier chain"
                )),
            );
        }
        w
    }

    /// Take the next input row (pop) or output row (push) for a chain's iteration:
    /// record it, or report a width or count that does not match the declarations.
    pub(super) fn netq_slot(
        &mut self,
        dir: Netq,
        tiles: u32,
        chain: usize,
        iteration: u32,
        span: Span,
    ) {
        let pop = dir == Netq::Pop;
        let queue = if pop {
            &mut self.inputs
        } else {
            &mut self.outputs
        };
        match queue.take() {
            Some((decl, row, row_tiles)) => {
                if row_tiles != tiles && !self.incomplete && !self.reported(codes::NETQ_WIDTH, span)
                {
                    let d = &self.decls[decl];
                    let shape = format!("{:?}", d.shape);
                    let (what, verb, kind) = if pop {
                        ("v_rd", "pops", "input")
                    } else {
                        ("v_wr", "pushes", "output")
                    };
                    // A chain that pops netq has no mv_mul (only ivrf feeds the MVM), so
                    // both widths are `rows`.
                    let help = if pop {
                        format!(
                            "a pop reads `rows` tiles: set `s_wr rows, {row_tiles}` before the chain"
                        )
                    } else {
                        format!("the carried vector is `rows` tiles: set `s_wr rows, {row_tiles}`")
                    };
                    let count = |k: u32| format!("{k} tile{}", if k == 1 { "" } else { "s" });
                    self.emit(
                        Diagnostic::error(
                            codes::NETQ_WIDTH,
                            format!(
                                "`{what} netq` {verb} {} but row {row} of {kind} `{}` is {}",
                                count(tiles),
                                d.name,
                                count(row_tiles)
                            ),
                        )
                        .label(span, format!("{verb} {}", count(tiles)))
                        .label(
                            self.decl_names[decl],
                            format!("{shape}: {row_tiles} tiles per row (N = {})", self.n),
                        )
                        .help(help),
                    );
                }
                let slot = NetqSlot {
                    chain,
                    iteration,
                    decl,
                    row,
                };
                if pop {
                    self.pops.push(slot);
                } else {
                    self.pushes.push(slot);
                }
            }
            None if self.incomplete => {}
            None => {
                let total = queue.rows.len();
                let diag = if pop {
                    Diagnostic::error(
                        codes::NETQ_COUNT,
                        format!("`v_rd netq` pops more rows than the inputs declare ({total})"),
                    )
                    .label(span, "nothing left on netq here")
                    .help("declare every vector the host pushes with `input NAME : [ROWS, LEN]`")
                } else {
                    Diagnostic::error(
                        codes::NETQ_COUNT,
                        format!("`v_wr netq` pushes more rows than the outputs declare ({total})"),
                    )
                    .label(span, "no output row left to fill")
                    .help("declare what the host collects with `output NAME : [ROWS, LEN]` (without `at`)")
                };
                self.emit(diag);
            }
        }
    }
}

/// Direction of a netq access.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Netq {
    Pop,
    Push,
}
