//! How one diagnostic renders (plain text, no colours): file:line:col, code, message, the
//! labelled span under the right columns, and the help line.

use miette::{GraphicalReportHandler, GraphicalTheme};
use nnp_grammar::{Diagnostics, SourceFile, check};
use std::sync::Arc;

#[test]
fn unknown_mnemonic_renders() {
    let text = "input x : [128]\noutput y : [128]\nv_rd netq\nv_sigmoid\nv_wr netq\nend_chain\n";
    let src = Arc::new(SourceFile::new("t.nnp", text));
    let Err(diags) = check(src.clone(), None) else {
        panic!("must fail")
    };
    let all = Diagnostics::new(&src, diags);
    assert_eq!(all.items.len(), 1);
    let mut out = String::new();
    GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
        .with_width(80)
        .render_report(&mut out, &all.items[0])
        .expect("render");
    // `v_sigmoid` is line 4, column 1, 9 characters wide; one line of context either side.
    let expected = "\
nnp::unknown-mnemonic

  × unknown mnemonic `v_sigmoid`
   ╭─[t.nnp:4:1]
 3 │ v_rd netq
 4 │ v_sigmoid
   · ────┬────
   ·     ╰── not an instruction of the NNP ISA
 5 │ v_wr netq
   ╰────
  help: did you mean `v_sigm`?
";
    assert_eq!(out, expected, "rendered:\n{out}");
}
