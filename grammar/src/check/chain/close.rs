//! Closing a chain: dispatch on its body, and the check and record of a matrix chain.

use super::records::{Body, MemOp, VecChain};
use crate::check::checker::Checker;
use crate::check::state::{Scalars, Space};
use crate::diagnostics::{Diagnostic, codes};
use crate::program::{Chain, ChainBody, MatrixChain, Mem, Span};

impl Checker {
    /// Finish the open chain: check it as a whole and add it to the program.
    pub(in crate::check) fn close_chain(&mut self, end: Span) {
        let Some(open) = self.open.take() else { return };
        let span = open.first.join(end);
        match open.body {
            Body::Broken => self.incomplete = true,
            Body::Matrix { src, dst } => {
                let Some(dst) = dst else {
                    self.emit(
                        Diagnostic::error(codes::MATRIX_CHAIN, "matrix chain without `m_wr`")
                            .label(end, "the chain ends here")
                            .label(open.first, "chain starts here")
                            .help("a matrix chain is `m_rd dram[A]`, `m_wr mrf[B]`, `end_chain`"),
                    );
                    self.incomplete = true;
                    return;
                };
                self.matrix_chain(&open.scalars, open.iterations, src, dst, span);
            }
            Body::Vector {
                read,
                mv_mul,
                ops,
                writes,
                ..
            } => {
                if writes.is_empty() {
                    self.emit(
                        Diagnostic::error(codes::MISSING_WRITE, "chain without `v_wr`")
                            .label(end, "the chain ends here without writing its result")
                            .label(open.first, "chain starts here")
                            .help("add `v_wr DST` (netq, ivrf, dram, asvrfK, mulvrfK) before `end_chain`"),
                    );
                    self.incomplete = true;
                    return;
                }
                let c = VecChain {
                    scalars: open.scalars,
                    iterations: open.iterations,
                    quant: open.quant,
                    read,
                    mv_mul,
                    ops,
                    writes,
                    span,
                };
                self.vector_chain(c);
            }
        }
    }

    fn matrix_chain(
        &mut self,
        s: &Scalars,
        iterations: u32,
        src: (MemOp, Span),
        dst: (MemOp, Span),
        span: Span,
    ) {
        let tiles = s.rows * s.cols;
        let ok = self.in_range(&src.0, true, tiles, iterations, "copies")
            & self.in_range(&dst.0, false, tiles, iterations, "writes");
        self.incomplete |= !ok;
        if ok && self.count_work(u64::from(iterations) * u64::from(tiles) * 2, span) {
            let src_space = Space::of(Mem::Dram, true);
            let dst_space = Space::of(Mem::Mrf, false);
            if let (Some(ss), Some(ds)) = (src_space, dst_space) {
                let w = self.regs.instr_writer(dst.1);
                for t in 0..iterations {
                    let (a, b) = (src.0.addr.at(t), dst.0.addr.at(t));
                    // Each tile's data: a tile of the matrix declared at dram there.
                    let held: Vec<Option<(usize, u32)>> = (0..tiles)
                        .map(|j| {
                            self.read_reg(ss, a + j, Mem::Dram, t, iterations, src.0.span)?;
                            let d = self.decl_at(ss, a + j)?;
                            let base = self.decls[d].place.map_or(0, |p| p.addr);
                            Some((d, a + j - base))
                        })
                        .collect();
                    for (j, held) in (0..tiles).zip(held) {
                        self.regs.write(ds, b + j, w);
                        match held {
                            Some(h) => self.mrf_tiles.insert(b + j, h),
                            None => self.mrf_tiles.remove(&(b + j)),
                        };
                    }
                }
            }
        }
        let index = self.chains.len();
        self.chains.push(Chain {
            index,
            iterations,
            rows: s.rows,
            cols: s.cols,
            body: ChainBody::Matrix(MatrixChain {
                src: Mem::Dram,
                src_addr: src.0.addr,
                dst: Mem::Mrf,
                dst_addr: dst.0.addr,
                tiles,
                src_span: src.1,
                dst_span: dst.1,
            }),
            span,
        });
    }
}
