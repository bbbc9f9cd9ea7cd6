//! Valid programs produce the right `Program`: expected values derived by hand from the source
//! and the layout rules of docs/language.md and docs/semantics.md (N = 128 on bw-default).

use nnp_grammar::ast::{ExprKind, Item};
use nnp_grammar::{
    Addr, ChainBody, DeclKind, Init, Mem, MfuOp, NetqSlot, OpKind, Place, Program, SourceFile,
    Span, Target, Window, check, parse,
};
use nnp_numerics::Format;
use std::sync::Arc;

/// An MFU op as (kind, operand, MFU).
type OpRow = (OpKind, Option<(Mem, Addr)>, u8);

fn program(src: &str) -> Program {
    match check(Arc::new(SourceFile::new("t.nnp", src)), None) {
        Ok(out) => out.program,
        Err(d) => panic!("unexpected diagnostics: {d:#?}"),
    }
}

fn at(src: &str, needle: &str) -> Span {
    let s = src
        .find(needle)
        .unwrap_or_else(|| panic!("`{needle}` not in source"));
    Span::new(s, s + needle.len())
}

fn fmt(s: &str) -> Format {
    s.parse().unwrap_or_else(|e| panic!("format `{s}`: {e}"))
}

const DENSE: &str = "\
let H = 2
matrix W : [256, 300] at mrf[4] quant bfp(mant = 5)
vector b : [256] at asvrf0[10]
vector z : [256] at asvrf1[0] = 0
vector m : [256] at mulvrf1[0] pad -65504
input  x : [2, 300]
output y : [2, 256]

// x rows: netq -> ivrf[0..3] and ivrf[3..6]
s_wr rows, 3
s_wr iterations, 2
v_rd netq
v_wr ivrf[0] + 3
end_chain

s_wr rows, H
s_wr cols, 3
repeat t in 0..2 {
  v_rd ivrf[t * 3]
  mv_mul mrf[W]
  vv_add asvrf0[b]
  v_relu
  vv_max asvrf1[z]
  vv_mul mulvrf1[m]
  v_wr netq
  end_chain
}
";

#[test]
fn declarations_resolve() {
    let p = program(DENSE);
    let names: Vec<&str> = p.decls.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["W", "b", "z", "m", "x", "y"]);
    let w = &p.decls[0];
    assert_eq!(w.kind, DeclKind::Matrix);
    assert_eq!(w.shape, [256, 300]);
    assert_eq!(
        w.place,
        Some(Place {
            mem: Mem::Mrf,
            addr: 4
        })
    );
    // [256, 300] with N = 128: ceil(256/128) * ceil(300/128) = 2 * 3 tiles.
    assert_eq!(w.tiles(128), 6);
    assert_eq!(w.format, Some(fmt("bfp(mant = 5)")));
    assert_eq!(
        w.span,
        at(DENSE, "matrix W : [256, 300] at mrf[4] quant bfp(mant = 5)")
    );
    assert_eq!(p.decls[2].init, Init::Zero);
    assert_eq!(p.decls[3].pad, -65504.0);
    assert_eq!(
        p.decls[3].place,
        Some(Place {
            mem: Mem::MulVrf(1),
            addr: 0
        })
    );
    assert_eq!(p.decls[4].kind, DeclKind::Input);
    assert_eq!(p.decls[4].place, None);
    assert_eq!(p.decls[4].init, Init::Load);
}

#[test]
fn chains_unrolled_with_widths_and_placement() {
    let p = program(DENSE);
    assert_eq!(p.chains.len(), 3);

    // Chain 0: netq -> ivrf, 2 iterations of 3 tiles, increment 3.
    let c0 = &p.chains[0];
    assert_eq!((c0.index, c0.iterations, c0.rows, c0.cols), (0, 2, 3, 1));
    let ChainBody::Vector(v0) = &c0.body else {
        panic!("vector chain")
    };
    assert_eq!(v0.read.src, Mem::Netq);
    assert_eq!(v0.read.tiles, 3);
    assert_eq!(v0.width, 3);
    assert_eq!(v0.writes[0].dst, Mem::Ivrf);
    assert_eq!(v0.writes[0].addr, Addr { base: 0, inc: 3 });
    assert_eq!(v0.read.span, at(DENSE, "v_rd netq"));
    assert_eq!(c0.span, at(DENSE, "v_rd netq\nv_wr ivrf[0] + 3\nend_chain"));

    // Chains 1 and 2: the unrolled repeat, t = 0 and t = 1; iterations reset to 1.
    for (t, c) in p.chains[1..].iter().enumerate() {
        assert_eq!((c.index, c.iterations, c.rows, c.cols), (t + 1, 1, 2, 3));
        let ChainBody::Vector(v) = &c.body else {
            panic!("vector chain")
        };
        assert_eq!(v.read.src, Mem::Ivrf);
        assert_eq!(
            v.read.addr,
            Addr {
                base: 3 * t as u32,
                inc: 0
            }
        );
        // With mv_mul the read is `cols` tiles, the carried vector `rows` tiles.
        assert_eq!(v.read.tiles, 3);
        assert_eq!(v.width, 2);
        let mm = v.mv_mul.as_ref().expect("mv_mul");
        assert_eq!(mm.addr, Addr { base: 4, inc: 0 });
        // The matrix declaration's own quant wins over the chain's mvm.matrix.
        assert_eq!(mm.matrix_format, fmt("bfp(mant = 5)"));
        assert_eq!(v.quant.mvm_matrix, Target::bw_default().numerics.mvm_matrix);
        // add (MFU0 add/sub), relu (MFU0 activation), max (add/sub again: MFU1), mul (MFU1).
        let ops: Vec<OpRow> = v
            .ops
            .iter()
            .map(|o: &MfuOp| (o.kind, o.operand, o.mfu))
            .collect();
        assert_eq!(
            ops,
            [
                (
                    OpKind::Add,
                    Some((Mem::AsVrf(0), Addr { base: 10, inc: 0 })),
                    0
                ),
                (OpKind::Relu, None, 0),
                (
                    OpKind::Max,
                    Some((Mem::AsVrf(1), Addr { base: 0, inc: 0 })),
                    1
                ),
                (
                    OpKind::Mul,
                    Some((Mem::MulVrf(1), Addr { base: 0, inc: 0 })),
                    1
                ),
            ]
        );
        assert_eq!(v.writes[0].dst, Mem::Netq);
    }
}

#[test]
fn netq_slots() {
    let p = program(DENSE);
    let slot = |chain, iteration, decl, row| NetqSlot {
        chain,
        iteration,
        decl,
        row,
    };
    // Input x (decl 4): row 0 and 1 popped by the two iterations of chain 0.
    assert_eq!(p.pops, [slot(0, 0, 4, 0), slot(0, 1, 4, 1)]);
    // Output y (decl 5): one row per unrolled chain.
    assert_eq!(p.pushes, [slot(1, 0, 5, 0), slot(2, 0, 5, 1)]);
}

#[test]
fn inc_spellings_are_equivalent() {
    let a = "vector v : [8, 128] at ivrf[0]\noutput y : [4, 128]\n\
             s_wr iterations, 4\nv_rd_inc ivrf[1], 2\nv_wr netq\nend_chain\n";
    let b = a.replace("v_rd_inc ivrf[1], 2", "v_rd ivrf[1] + 2");
    for src in [a, b.as_str()] {
        let p = program(src);
        let ChainBody::Vector(v) = &p.chains[0].body else {
            panic!()
        };
        assert_eq!(v.read.addr, Addr { base: 1, inc: 2 });
        // Iteration 3 reads ivrf[1 + 3 * 2].
        assert_eq!(v.read.registers(3), [7]);
        assert_eq!(p.chains[0].iterations, 4);
    }
}

#[test]
fn window_read() {
    // The conv3x3 layout: a 6 x 6 frame, pitch 6, 3 x 3 window at ivrf[oy * 6] + 1.
    let src = "\
matrix W : [96, 1152] at mrf[0]
vector frame : [36, 128] at ivrf[0] = 0
output y : [4, 96]
s_wr win_w, 3
s_wr win_h, 3
s_wr pitch, 6
s_wr cols, 9
s_wr iterations, 4
v_rd_2d ivrf[6] + 1
mv_mul mrf[W]
v_wr netq
end_chain
";
    let p = program(src);
    let ChainBody::Vector(v) = &p.chains[0].body else {
        panic!()
    };
    assert_eq!(
        v.read.window,
        Some(Window {
            w: 3,
            h: 3,
            pitch: 6
        })
    );
    assert_eq!(v.read.tiles, 9);
    assert_eq!(v.read.addr, Addr { base: 6, inc: 1 });
    // Iteration 2 starts at 6 + 2 = 8: rows at 8, 14, 20, three tiles each.
    assert_eq!(v.read.registers(2), [8, 9, 10, 14, 15, 16, 20, 21, 22]);
    assert_eq!(p.pushes.len(), 4);
}

#[test]
fn matrix_chain_copies_with_format() {
    let src = "\
matrix D : [256, 256] at dram[0] quant bfp(mant = 4)
vector v : [256] at ivrf[0]
output y : [256]
s_wr rows, 2
s_wr cols, 2
m_rd dram[D]
m_wr mrf[8]
end_chain
v_rd ivrf[v]
mv_mul mrf[8]
v_wr netq
end_chain
";
    let p = program(src);
    let ChainBody::Matrix(m) = &p.chains[0].body else {
        panic!("matrix chain")
    };
    assert_eq!((m.src, m.dst, m.tiles), (Mem::Dram, Mem::Mrf, 4));
    assert_eq!(m.src_addr, Addr { base: 0, inc: 0 });
    assert_eq!(m.dst_addr, Addr { base: 8, inc: 0 });
    assert_eq!(m.src_span, at(src, "m_rd dram[D]"));
    let ChainBody::Vector(v) = &p.chains[1].body else {
        panic!()
    };
    // The tiles in mrf[8..12] hold D's data, so D's own format applies.
    assert_eq!(
        v.mv_mul.as_ref().map(|m| m.matrix_format),
        Some(fmt("bfp(mant = 4)"))
    );
}

#[test]
fn quant_applies_to_following_chains() {
    let src = "\
input x : [2, 128]
output y : [2, 128]
v_rd netq
v_relu
v_wr netq
end_chain
quant mfu.input = bf16
quant mvm.vector = bfp(mant = 5)
v_rd netq
v_relu
v_wr netq
end_chain
";
    let p = program(src);
    let q = |i: usize| match &p.chains[i].body {
        ChainBody::Vector(v) => v.quant.clone(),
        ChainBody::Matrix(_) => panic!(),
    };
    let default = Target::bw_default().numerics;
    assert_eq!(q(0).mfu_input, default.mfu_input);
    assert_eq!(q(0).mvm_vector, default.mvm_vector);
    assert_eq!(q(1).mfu_input, fmt("bf16"));
    assert_eq!(q(1).mvm_vector, fmt("bfp(mant = 5)"));
    assert_eq!(q(1).storage, default.storage);
}

#[test]
fn expressions_and_names() {
    // (7 * 3 + 1) % 5 = 22 % 5 = 2; -7 % 3 = 2 (Euclidean); -7 / 2 = -4 (floor); 0x10 = 16.
    let src = "\
let A = 7
let B = (A * 3 + 1) % 5
vector v : [32, 128] at ivrf[0]
output y : [4, 128]
v_rd ivrf[B]
v_wr netq
end_chain
v_rd ivrf[-7 % 3 + 0]
v_wr netq
end_chain
v_rd ivrf[-7 / 2 + 10]
v_wr netq
end_chain
v_rd ivrf[0x10 + v]
v_wr netq
end_chain
";
    let p = program(src);
    let bases: Vec<u32> = p
        .chains
        .iter()
        .map(|c| match &c.body {
            ChainBody::Vector(v) => v.read.addr.base,
            ChainBody::Matrix(_) => u32::MAX,
        })
        .collect();
    assert_eq!(bases, [2, 2, 6, 16]);
}

#[test]
fn scalar_registers_persist_and_iterations_reset() {
    let src = "\
input x : [3, 256]
output y : [3, 256]
s_wr rows, 2
s_wr iterations, 2
v_rd netq
v_wr netq
end_chain
v_rd netq
v_wr netq
end_chain
";
    let p = program(src);
    assert_eq!((p.chains[0].rows, p.chains[0].iterations), (2, 2));
    assert_eq!((p.chains[1].rows, p.chains[1].iterations), (2, 1));
}

#[test]
fn target_statement_and_override() {
    // A target file beside the firmware (relative path) with N = 16.
    let dir = std::env::temp_dir().join(format!("nnpc-grammar-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("n16.toml"),
        "name = \"n16\"\nnative = 16\nmfus = 3\n",
    )
    .expect("write");
    let fw = dir.join("prog.nnp");
    let text = "target \"n16.toml\"\ninput x : [32]\noutput y : [32]\ns_wr rows, 2\nv_rd netq\nv_wr netq\nend_chain\n";
    let src = Arc::new(SourceFile::new(fw.to_string_lossy(), text));
    let out = check(src.clone(), None).expect("valid on n16");
    assert_eq!(
        (out.program.target.name.as_str(), out.program.native()),
        ("n16", 16)
    );
    // --target bw-default overrides: [32] is then 1 tile, rows = 2 pops 2: error.
    assert!(check(src, Some(Target::bw_default())).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ast_spans() {
    let text = "let A = 1 + 2 * 3\nrepeat t in 0..A {\n  v_rd ivrf[t] + 1\n}\n";
    let file = parse(&SourceFile::new("t.nnp", text)).expect("parses");
    let Item::Let(l) = &file.items[0] else {
        panic!()
    };
    assert_eq!(l.span, at(text, "let A = 1 + 2 * 3"));
    assert_eq!(l.name.span, at(text, "A"));
    assert_eq!(l.value.span, at(text, "1 + 2 * 3"));
    let ExprKind::Bin(_, lhs, rhs) = &l.value.kind else {
        panic!()
    };
    assert_eq!((lhs.span, rhs.span), (at(text, "1"), at(text, "2 * 3")));
    let Item::Repeat(r) = &file.items[1] else {
        panic!()
    };
    assert_eq!(
        r.span,
        at(text, "repeat t in 0..A {\n  v_rd ivrf[t] + 1\n}")
    );
    let Item::Instr(i) = &r.body[0] else { panic!() };
    assert_eq!(i.span, at(text, "v_rd ivrf[t] + 1"));
    assert_eq!(i.operands[0].span(), at(text, "ivrf[t] + 1"));
}

/// A matrix's own `quant` follows its tiles: through one `m_wr` line that copies two
/// matrices (one per iteration), and per iteration of an `mv_mul` whose iterations read
/// different matrices (docs/language.md: per-matrix precision).
#[test]
fn matrix_formats_follow_their_tiles() {
    let p = program(include_str!("fixtures/matrix_formats.nnp"));
    let chain_default = Target::bw_default().numerics.mvm_matrix;
    let mv = |c: usize| {
        let ChainBody::Vector(v) = &p.chains[c].body else {
            panic!("chain {c} is a vector chain")
        };
        v.mv_mul.clone().expect("mv_mul")
    };
    // mrf[0] holds A's tile, mrf[1] B's: each its own format.
    assert_eq!(mv(2).matrix_format, fmt("bfp(mant = 3)"));
    assert_eq!(mv(3).matrix_format, fmt("bfp(mant = 6)"));
    assert!(mv(2).iteration_formats.is_empty() && mv(3).iteration_formats.is_empty());
    // Iteration 0 reads D (no quant), iteration 1 the tile before it, C's.
    let m4 = mv(4);
    assert_eq!(m4.matrix_format, chain_default);
    assert_eq!(
        m4.iteration_formats,
        vec![chain_default, fmt("bfp(mant = 3)")]
    );
    assert_eq!(
        (*m4.format(0), *m4.format(1)),
        (chain_default, fmt("bfp(mant = 3)"))
    );
}
