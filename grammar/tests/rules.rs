//! One violating program per rule of docs/language.md (and the project's decisions in
//! docs/semantics.md). Each test asserts the diagnostic's code, its message, and the exact span
//! it points at, computed from the test source by locating a substring.

use nnp_grammar::{Diagnostic, Severity, SourceFile, Span, Target, check, codes};
use std::sync::Arc;

/// Check `src` on `bw-default` (N = 128, 2 MFUs, ivrf = 2048 registers); all diagnostics.
fn diags(src: &str) -> Vec<Diagnostic> {
    diags_on(src, None)
}

fn diags_on(src: &str, target: Option<Target>) -> Vec<Diagnostic> {
    match check(Arc::new(SourceFile::new("t.nnp", src)), target) {
        Ok(out) => out.warnings,
        Err(d) => d,
    }
}

/// Span of the `n`-th (0-based) occurrence of `needle` in `src`.
fn nth(src: &str, needle: &str, n: usize) -> Span {
    let start = src
        .match_indices(needle)
        .nth(n)
        .unwrap_or_else(|| panic!("`{needle}` #{n} not in test source"))
        .0;
    Span::new(start, start + needle.len())
}

fn at(src: &str, needle: &str) -> Span {
    nth(src, needle, 0)
}

/// Exactly one diagnostic with `code`; it has `message` in its message and points at `span`.
#[track_caller]
fn expect(src: &str, code: &str, message: &str, span: Span) -> Diagnostic {
    expect_in(diags(src), code, message, span)
}

#[track_caller]
fn expect_in(all: Vec<Diagnostic>, code: &str, message: &str, span: Span) -> Diagnostic {
    let found: Vec<&Diagnostic> = all.iter().filter(|d| d.code == code).collect();
    assert_eq!(found.len(), 1, "want one {code}, got: {all:#?}");
    let d = found[0];
    assert!(
        d.message.contains(message),
        "message `{}` lacks `{message}`",
        d.message
    );
    assert_eq!(d.span(), span, "span of {d:#?}");
    d.clone()
}

const IO: &str = "input x : [128]\noutput y : [128]\n";

// ---- section 2: chain structure ----

#[test]
fn unknown_mnemonic_suggests_nearest() {
    let src = format!("{IO}v_rd netq\nv_sigmoid\nv_wr netq\nend_chain\n");
    let d = expect(
        &src,
        codes::UNKNOWN_MNEMONIC,
        "unknown mnemonic `v_sigmoid`",
        at(&src, "v_sigmoid"),
    );
    assert_eq!(d.help.as_deref(), Some("did you mean `v_sigm`?"));
}

#[test]
fn unknown_mnemonic_inc_spelling() {
    // `v_relu` takes no address, so it has no `_inc` spelling.
    let src = format!("{IO}v_rd netq\nv_relu_inc\nv_wr netq\nend_chain\n");
    let d = expect(
        &src,
        codes::UNKNOWN_MNEMONIC,
        "`v_relu_inc`",
        at(&src, "v_relu_inc"),
    );
    assert_eq!(
        d.help.as_deref(),
        Some("`v_relu` takes no address, so it has no `_inc` spelling")
    );
}

#[test]
fn chain_must_start_with_v_rd() {
    let src = format!("{IO}v_relu\nv_wr netq\nend_chain\nv_rd netq\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::CHAIN_START,
        "`v_relu` outside a chain",
        at(&src, "v_relu"),
    );
}

#[test]
fn missing_end_chain_at_end_of_file() {
    let src = format!("{IO}v_rd netq\nv_relu\nv_wr netq\n");
    // The primary label is the chain's last instruction.
    expect(
        &src,
        codes::MISSING_END_CHAIN,
        "chain without `end_chain`",
        at(&src, "v_wr netq"),
    );
}

#[test]
fn missing_end_chain_before_next_chain() {
    let src = "input x : [2, 128]\noutput y : [2, 128]\n\
               v_rd netq\nv_wr netq\nv_rd netq\nv_wr netq\nend_chain\n";
    let d = expect(
        src,
        codes::MISSING_END_CHAIN,
        "without `end_chain`",
        nth(src, "v_wr netq", 0),
    );
    // Second label: where the next chain starts.
    assert_eq!(d.labels[1].span, nth(src, "v_rd", 1));
}

#[test]
fn chain_without_write() {
    let src = format!("{IO}v_rd netq\nv_relu\nend_chain\nv_rd netq\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::MISSING_WRITE,
        "chain without `v_wr`",
        nth(&src, "end_chain", 0),
    );
}

#[test]
fn end_chain_without_chain() {
    let src = format!("{IO}v_rd netq\nv_wr netq\nend_chain\nend_chain\n");
    expect(
        &src,
        codes::END_CHAIN,
        "without a chain",
        nth(&src, "end_chain", 1),
    );
}

#[test]
fn second_read_in_a_chain() {
    let src =
        format!("{IO}vector v : [128] at ivrf[0]\nv_rd netq\nv_rd ivrf[0]\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::CHAIN_READ,
        "exactly one read",
        at(&src, "v_rd ivrf[0]"),
    );
}

#[test]
fn mv_mul_only_right_after_read() {
    let src = format!(
        "{IO}matrix W : [128, 128] at mrf[0]\nvector v : [128] at ivrf[0]\n\
         v_rd ivrf[0]\nv_relu\nmv_mul mrf[W]\nv_wr netq\nend_chain\n"
    );
    expect(
        &src,
        codes::CHAIN_ORDER,
        "right after `v_rd`",
        at(&src, "mv_mul mrf[W]"),
    );
}

#[test]
fn mv_mul_needs_ivrf_source() {
    let src = format!(
        "{IO}matrix W : [128, 128] at mrf[0]\nv_rd netq\nmv_mul mrf[W]\nv_wr netq\nend_chain\n"
    );
    let d = expect(&src, codes::MV_MUL_SOURCE, "reads netq", at(&src, "mv_mul"));
    assert_eq!(d.labels[1].span, nth(&src, "netq", 0));
}

#[test]
fn mv_mul_reads_mrf_only() {
    let src = format!(
        "{IO}vector v : [128] at ivrf[0]\nv_rd ivrf[0]\nmv_mul ivrf[0]\nv_wr netq\nend_chain\n"
    );
    let src = src.replace("input x : [128]\n", "");
    expect(
        &src,
        codes::WRONG_MEMORY,
        "`mv_mul` cannot read ivrf",
        nth(&src, "ivrf", 2),
    );
}

#[test]
fn mfu_op_after_write() {
    let src = format!("{IO}v_rd netq\nv_wr netq\nv_relu\nend_chain\n");
    expect(
        &src,
        codes::CHAIN_ORDER,
        "`v_relu` after `v_wr`",
        at(&src, "v_relu"),
    );
}

#[test]
fn matrix_chain_reads_dram_only() {
    let src = "vector v : [128] at ivrf[0]\nm_rd ivrf[0]\nm_wr mrf[0]\nend_chain\n";
    expect(
        src,
        codes::WRONG_MEMORY,
        "`m_rd` cannot read ivrf",
        nth(src, "ivrf", 1),
    );
}

#[test]
fn matrix_chain_needs_m_wr() {
    let src = "matrix W : [128, 128] at dram[0]\nm_rd dram[0]\nend_chain\n";
    expect(
        src,
        codes::MATRIX_CHAIN,
        "without `m_wr`",
        at(src, "end_chain"),
    );
}

#[test]
fn matrix_chain_has_no_v_wr() {
    let src = "matrix W : [128, 128] at dram[0]\nm_rd dram[0]\nv_wr ivrf[0]\nend_chain\n";
    expect(
        src,
        codes::MATRIX_CHAIN,
        "`v_wr` does not fit",
        at(src, "v_wr"),
    );
}

// ---- section 2: MFU placement ----

#[test]
fn operand_vrf_must_match_mfu_position() {
    // The second add-class op would reuse MFU0's add/sub unit, so it lands on MFU1 and must
    // read asvrf1.
    let src = format!(
        "{IO}vector b : [128] at asvrf0[0]\nvector c : [128] at asvrf0[1]\n\
         v_rd netq\nvv_add asvrf0[b]\nvv_add asvrf0[c]\nv_wr netq\nend_chain\n"
    );
    let d = expect(
        &src,
        codes::MFU_OPERAND,
        "`vv_add` runs on MFU1 but reads asvrf0",
        nth(&src, "asvrf0", 3),
    );
    // The second label shows the op that already uses MFU0's add/sub unit.
    assert_eq!(d.labels[1].span, at(&src, "vv_add asvrf0[b]"));
    assert!(d.labels[1].text.contains("MFU0's add/sub unit"));
}

#[test]
fn operand_on_mfu0_cannot_use_mfu1_vrf() {
    let src = format!(
        "{IO}vector b : [128] at mulvrf1[0]\nv_rd netq\nvv_mul mulvrf1[b]\nv_wr netq\nend_chain\n"
    );
    expect(
        &src,
        codes::MFU_OPERAND,
        "`vv_mul` runs on MFU0 but reads mulvrf1",
        nth(&src, "mulvrf1", 1),
    );
}

#[test]
fn operand_class_must_match_unit() {
    let src = format!(
        "{IO}vector b : [128] at asvrf0[0]\nv_rd netq\nvv_mul asvrf0[b]\nv_wr netq\nend_chain\n"
    );
    expect(
        &src,
        codes::WRONG_MEMORY,
        "`vv_mul` cannot read its operand from asvrf0",
        nth(&src, "asvrf0", 1),
    );
}

#[test]
fn chain_needs_more_mfus_than_target_has() {
    // Three activations: MFU0, MFU1, then MFU2 on a 2-MFU target.
    let src = format!("{IO}v_rd netq\nv_relu\nv_sigm\nv_tanh\nv_wr netq\nend_chain\n");
    let d = expect(
        &src,
        codes::TOO_MANY_MFUS,
        "needs MFU2 but target `bw-default` has 2 MFUs",
        at(&src, "v_tanh"),
    );
    assert_eq!(d.labels[1].span, at(&src, "v_sigm"));
    let help = d.help.as_deref().unwrap_or_default();
    assert!(
        help.contains("at least 3 MFUs") && help.contains("`mfus = 3`"),
        "{help}"
    );
}

#[test]
fn asvrf_beyond_target_mfus() {
    let src = format!("{IO}vector b : [128] at asvrf2[0]\nv_rd netq\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::UNKNOWN_MEMORY,
        "`asvrf2` does not exist",
        at(&src, "asvrf2"),
    );
}

#[test]
fn read_modify_write_of_operand_vrf() {
    let src = format!(
        "{IO}vector b : [128] at asvrf0[0]\nv_rd netq\nvv_add asvrf0[0]\nv_wr asvrf0[0]\nv_wr netq\nend_chain\n"
    );
    let d = expect(
        &src,
        codes::READ_MODIFY_WRITE,
        "writes asvrf0[0]",
        nth(&src, "asvrf0[0]", 2),
    );
    assert_eq!(d.labels[1].span, nth(&src, "asvrf0[0]", 1));
}

#[test]
fn read_modify_write_across_iterations() {
    // Iteration 0 writes asvrf0[1], iteration 1 reads it as an operand.
    let src = "input x : [2, 128]\noutput y : [2, 128]\nvector b : [3, 128] at asvrf0[0]\n\
               s_wr iterations, 2\nv_rd netq\nvv_add asvrf0[0] + 1\nv_wr asvrf0[1] + 1\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::READ_MODIFY_WRITE,
        "asvrf0[",
        at(src, "asvrf0[1] + 1"),
    );
}

// ---- section 1-2: widths, addresses, iterations ----

#[test]
fn address_out_of_range() {
    let src = format!("{IO}v_rd netq\nv_wr ivrf[2048]\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::ADDRESS_RANGE,
        "ivrf[2048..2049] is out of range: ivrf has 2048 registers",
        at(&src, "ivrf[2048]"),
    );
}

#[test]
fn address_out_of_range_at_last_iteration() {
    // Iteration t writes ivrf[2045 + t]; t = 3 writes ivrf[2048], one past the end.
    let src = "input x : [4, 128]\noutput y : [4, 128]\ns_wr iterations, 4\n\
               v_rd netq\nv_wr_inc ivrf[2045], 1\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::ADDRESS_RANGE,
        "ivrf[2048..2049] is out of range at iteration 3",
        at(src, "ivrf[2045]"),
    );
}

#[test]
fn address_negative_through_increment() {
    let src = "vector v : [2, 128] at ivrf[0]\noutput y : [3, 128]\ns_wr iterations, 3\n\
               v_rd ivrf[1] + -1\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::ADDRESS_RANGE,
        "address -1 at iteration 2 is negative",
        at(src, "ivrf[1] + -1"),
    );
}

#[test]
fn mv_mul_width_must_match_matrix() {
    // W is [256, 384]: 2 x 3 tiles. cols = 2 would read it with the wrong layout.
    let src = "matrix W : [256, 384] at mrf[0]\nvector v : [256] at ivrf[0]\noutput y : [256]\n\
               s_wr rows, 2\ns_wr cols, 2\nv_rd ivrf[0]\nmv_mul mrf[W]\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::WIDTH,
        "rows x cols = 2 x 2 tiles but matrix `W` [256, 384] is 2 x 3 tiles",
        at(src, "mrf[W]"),
    );
}

#[test]
fn window_width_must_match_cols() {
    let src = "matrix W : [128, 512] at mrf[0]\nvector f : [36, 128] at ivrf[0]\noutput y : [128]\n\
               s_wr win_w, 3\ns_wr win_h, 3\ns_wr pitch, 6\ns_wr cols, 4\n\
               v_rd_2d ivrf[0]\nmv_mul mrf[W]\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::WIDTH,
        "the window is 3 x 3 = 9 tiles but the chain reads cols = 4",
        at(src, "v_rd_2d ivrf[0]"),
    );
}

#[test]
fn netq_pops_must_match_input_rows() {
    // x has 3 rows; the program pops one.
    let src = "input x : [3, 128]\noutput y : [128]\nv_rd netq\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::NETQ_COUNT,
        "input `x` has 3 rows but only 1 is popped",
        at(src, "x"),
    );
}

#[test]
fn netq_pop_width_must_match_input_row() {
    // A row of x is 256 lanes = 2 tiles; rows = 1 pops 1 tile.
    let src = "input x : [256]\noutput y : [128]\nv_rd netq\nv_wr netq\nend_chain\n";
    let d = expect(
        src,
        codes::NETQ_WIDTH,
        "pops 1 tile but row 0 of input `x` is 2 tiles",
        at(src, "netq"),
    );
    assert_eq!(d.labels[0].text, "pops 1 tile");
    assert_eq!(
        d.help.as_deref(),
        Some("a pop reads `rows` tiles: set `s_wr rows, 2` before the chain")
    );
}

#[test]
fn netq_pops_more_than_declared() {
    let src = "input x : [128]\noutput y : [2, 128]\ns_wr iterations, 2\nv_rd netq\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::NETQ_COUNT,
        "pops more rows than the inputs declare (1)",
        at(src, "netq"),
    );
}

#[test]
fn netq_pushes_must_match_output_rows() {
    let src = "input x : [128]\noutput y : [2, 128]\nv_rd netq\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::NETQ_COUNT,
        "output `y` has 2 rows but only 1 is pushed",
        at(src, "y"),
    );
}

#[test]
fn netq_has_no_address() {
    let src = format!("{IO}v_rd netq[0]\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::NETQ_ADDRESS,
        "netq has no address",
        at(&src, "netq[0]"),
    );
}

#[test]
fn increment_given_twice() {
    let src = "vector v : [4, 128] at ivrf[0]\noutput y : [128]\nv_rd_inc ivrf[0] + 1, 2\nv_wr netq\nend_chain\n";
    // Primary span: the `+ INC` expression (`1`).
    let plus = at(src, "+ 1");
    expect(
        src,
        codes::INCREMENT,
        "increment given twice",
        Span::new(plus.start as usize + 2, plus.end as usize),
    );
}

#[test]
fn uninitialised_read() {
    let src = "output y : [128]\nv_rd ivrf[4]\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::UNINIT_READ,
        "ivrf[4] is read before anything writes it",
        at(src, "ivrf[4]"),
    );
}

#[test]
fn uninitialised_read_in_later_iteration() {
    // v covers ivrf[0..2]; iteration 2 reads ivrf[2].
    let src = "vector v : [2, 128] at ivrf[0]\noutput y : [3, 128]\ns_wr iterations, 3\n\
               v_rd ivrf[0] + 1\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::UNINIT_READ,
        "ivrf[2] is read before anything writes it (iteration 2)",
        at(src, "ivrf[0] + 1"),
    );
}

#[test]
fn uninitialised_operand_register() {
    // b covers asvrf0[0] only; rows = 2 reads asvrf0[0..2].
    let src = "input x : [256]\noutput y : [256]\nvector b : [128] at asvrf0[0]\n\
               s_wr rows, 2\nv_rd netq\nvv_add asvrf0[b]\nv_wr netq\nend_chain\n";
    expect(src, codes::UNINIT_READ, "asvrf0[1]", at(src, "asvrf0[b]"));
}

/// An output placed in memory is read back after the run: registers of it that no chain
/// writes are an error at the declaration (the emulator and the graph refuse to read them).
#[test]
fn output_in_memory_partly_written() {
    // y covers dram[0..4] (2 rows of 2 tiles); the chain writes 1 tile per row, dram[0] and
    // dram[2]: dram[1] and dram[3] are never written.
    let src = "input x : [2, 128]\noutput y : [2, 256] at dram[0]\ns_wr iterations, 2\n\
               v_rd netq\nv_wr dram[0] + 2\nend_chain\n";
    let d = expect(
        src,
        codes::UNINIT_READ,
        "output `y` is read back from dram[1] after the run, but nothing writes it",
        at(src, "y"),
    );
    let label = d.labels.first().map(|l| l.text.as_str());
    assert_eq!(
        label,
        Some("2 of its 4 registers are never written, dram[1] to dram[3]")
    );
    assert!(d.help.as_deref().is_some_and(|h| h.contains("dram[0..4]")));
    // One register short: named alone.
    let src = "input x : [3, 128]\noutput y : [4, 128] at dram[0]\ns_wr iterations, 3\n\
               v_rd netq\nv_wr dram[0] + 1\nend_chain\n";
    let d = expect(src, codes::UNINIT_READ, "from dram[3]", at(src, "y"));
    let label = d.labels.first().map(|l| l.text.as_str());
    assert_eq!(label, Some("dram[3] is never written"));
    // Written in full, or declared `= 0` (the host zeroes it): clean.
    for src in [
        "input x : [2, 128]\noutput y : [2, 128] at dram[0]\ns_wr iterations, 2\n\
         v_rd netq\nv_wr dram[0] + 1\nend_chain\n",
        "input x : [2, 128]\noutput y : [2, 256] at dram[0] = 0\ns_wr iterations, 2\n\
         v_rd netq\nv_wr dram[0] + 2\nend_chain\n",
    ] {
        let all = diags(src);
        assert!(all.iter().all(|d| !d.is_error()), "{all:#?}");
    }
}

// ---- section 3: declarations, names, expressions ----

#[test]
fn overlapping_declarations() {
    let src = "vector a : [256] at ivrf[0]\nvector b : [128] at ivrf[1]\noutput y : [256]\n\
               s_wr rows, 2\nv_rd ivrf[a]\nv_wr netq\nend_chain\n";
    let d = expect(
        src,
        codes::DECL_OVERLAP,
        "`b` overlaps `a` in ivrf: registers 1..2 are in both",
        at(src, "b"),
    );
    assert_eq!(d.labels[1].span, at(src, "a"));
}

#[test]
fn declaration_must_fit_memory() {
    // 2048 registers; [3, 256] needs 6 registers from 2044.
    let src =
        "vector v : [3, 256] at ivrf[2044]\noutput y : [128]\nv_rd ivrf[v]\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::ADDRESS_RANGE,
        "`v` does not fit in ivrf: it needs registers 2044..2050",
        at(src, "at ivrf[2044]"),
    );
}

#[test]
fn duplicate_names() {
    let src = "let H = 2\nlet H = 3\n";
    let d = expect(
        src,
        codes::DUPLICATE_NAME,
        "`H` is defined twice",
        nth(src, "H", 1),
    );
    assert_eq!(d.labels[1].span, nth(src, "H", 0));
}

#[test]
fn unknown_name_suggests() {
    let src = "let rows_of_w = 2\nvector v : [128] at ivrf[0]\noutput y : [128]\nv_rd ivrf[rows_of_x]\nv_wr netq\nend_chain\n";
    let d = expect(
        src,
        codes::UNKNOWN_NAME,
        "unknown name `rows_of_x`",
        at(src, "rows_of_x"),
    );
    assert_eq!(d.help.as_deref(), Some("did you mean `rows_of_w`?"));
}

#[test]
fn reserved_names() {
    let src = "let ivrf = 2\n";
    expect(
        src,
        codes::DUPLICATE_NAME,
        "`ivrf` is a reserved name",
        at(src, "ivrf"),
    );
}

#[test]
fn division_by_zero() {
    let src = "let A = 4\nlet B = A / (A - 4)\n";
    expect(src, codes::EXPR, "division by zero", at(src, "(A - 4)"));
}

#[test]
fn matrix_needs_a_place() {
    let src = "matrix W : [128, 128]\n";
    expect(src, codes::DECL, "matrix `W` has no place", at(src, "W"));
}

#[test]
fn matrix_has_two_dimensions() {
    let src = "matrix W : [128, 128, 2] at mrf[0]\n";
    expect(
        src,
        codes::DECL,
        "a matrix has 2 dimensions",
        at(src, "[128, 128, 2]"),
    );
}

#[test]
fn input_has_no_place() {
    let src = "input x : [128] at ivrf[0]\n";
    expect(
        src,
        codes::DECL,
        "input `x` cannot have `at`",
        at(src, "ivrf[0]"),
    );
}

#[test]
fn pad_not_on_matrix() {
    let src = "matrix W : [128, 128] at mrf[0] pad -65504\n";
    expect(src, codes::DECL, "`pad` on matrix `W`", at(src, "-65504"));
}

#[test]
fn declaration_inside_repeat() {
    let src = "repeat t in 0..2 {\n  vector v : [128] at ivrf[0]\n}\n";
    expect(
        src,
        codes::DECL,
        "declaration inside a `repeat` block",
        at(src, "vector v : [128] at ivrf[0]"),
    );
}

#[test]
fn empty_repeat_range() {
    let src = "repeat t in 3..1 {\n}\n";
    expect(src, codes::REPEAT, "empty range 3..1", at(src, "3..1"));
}

#[test]
fn unknown_scalar_register_suggests() {
    let src = "s_wr row, 2\n";
    let d = expect(
        src,
        codes::UNKNOWN_REGISTER,
        "`row` is not a scalar register",
        at(src, "row"),
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean `rows`?"))
    );
}

#[test]
fn scalar_register_value_range() {
    let src = "s_wr rows, 0\n";
    expect(
        src,
        codes::SCALAR_VALUE,
        "`rows` = 0 is out of range",
        at(src, "0"),
    );
}

#[test]
fn s_wr_inside_chain() {
    let src = format!("{IO}v_rd netq\ns_wr rows, 1\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::INSIDE_CHAIN,
        "`s_wr` inside a chain",
        at(&src, "s_wr rows, 1"),
    );
}

#[test]
fn iterations_without_chain() {
    let src = "s_wr iterations, 3\n";
    expect(
        src,
        codes::SCALAR_VALUE,
        "no chain after it",
        at(src, "s_wr iterations, 3"),
    );
}

#[test]
fn unknown_quant_point() {
    let src = "quant mvm.vectr = fp16\n";
    let d = expect(
        src,
        codes::QUANT_POINT,
        "unknown quantization point `mvm.vectr`",
        at(src, "mvm.vectr"),
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean `mvm.vector`?"))
    );
}

#[test]
fn quant_point_needs_float_format() {
    let src = "quant mfu.input = bfp(mant = 5)\n";
    expect(
        src,
        codes::FORMAT,
        "`mfu.input` needs a float format",
        at(src, "bfp(mant = 5)"),
    );
}

#[test]
fn bad_format_literal_points_inside_it() {
    // The numerics parser reports where in the literal the problem is; the diagnostic's span is
    // inside the literal (never outside it).
    let src = "quant mvm.vector = bfp(mantissa = 5)\n";
    let lit = at(src, "bfp(mantissa = 5)");
    let all = diags(src);
    let d = all
        .iter()
        .find(|d| d.code == codes::FORMAT)
        .expect("a format error");
    let s = d.span();
    assert!(
        s.start >= lit.start && s.end <= lit.end && s.end > s.start,
        "{d:#?}"
    );
}

#[test]
fn target_must_exist() {
    let src = "target \"bw-nonexistent\"\n";
    expect(
        src,
        codes::TARGET,
        "cannot use target `bw-nonexistent`",
        at(src, "\"bw-nonexistent\""),
    );
}

#[test]
fn target_override_changes_sizes() {
    // With N = 16 a [128] input row is 8 tiles, so rows = 1 pops the wrong width.
    let mut t = Target::bw_default();
    t.native = 16;
    let src = "input x : [128]\noutput y : [16]\nv_rd netq\nv_wr netq\nend_chain\n";
    let all = diags_on(src, Some(t));
    expect_in(
        all,
        codes::NETQ_WIDTH,
        "row 0 of input `x` is 8 tiles",
        at(src, "netq"),
    );
}

// ---- section 4: syntax, several errors per run, warnings ----

#[test]
fn syntax_error() {
    let src = "let = 3\n";
    expect(src, codes::SYNTAX, "unexpected `=`", at(src, "="));
}

#[test]
fn invalid_character() {
    let src = "let A = 3 $\n";
    expect(
        src,
        codes::INVALID_CHARACTER,
        "unexpected character `$`",
        at(src, "$"),
    );
}

#[test]
fn several_syntax_errors_in_one_run() {
    let src = "let = 3\nlet B = (\nv_rd netq\nv_frob\n";
    let all = diags(src);
    let syntax = all.iter().filter(|d| d.code == codes::SYNTAX).count();
    assert_eq!(syntax, 2, "{all:#?}");
    assert!(
        all.iter()
            .any(|d| d.code == codes::UNKNOWN_MNEMONIC && d.span() == at(src, "v_frob"))
    );
}

#[test]
fn several_check_errors_in_one_run() {
    let src = "output y : [128]\nlet A = 1\nlet A = 2\nv_rd ivrf[4]\nv_wr ivrf[9999]\nv_wr netq\nend_chain\nend_chain\n";
    let all = diags(src);
    for code in [
        codes::DUPLICATE_NAME,
        codes::ADDRESS_RANGE,
        codes::END_CHAIN,
    ] {
        assert!(all.iter().any(|d| d.code == code), "no {code} in {all:#?}");
    }
    assert!(all.iter().filter(|d| d.severity == Severity::Error).count() >= 3);
}

#[test]
fn warns_on_dead_write() {
    // The first chain's write to ivrf[0] is overwritten by the second before anything reads it.
    let src = "input x : [2, 128]\noutput y : [128]\n\
               v_rd netq\nv_wr ivrf[0]\nend_chain\n\
               v_rd netq\nv_wr ivrf[0]\nend_chain\n\
               v_rd ivrf[0]\nv_wr netq\nend_chain\n";
    let out = check(Arc::new(SourceFile::new("t.nnp", src)), None).expect("valid");
    let w: Vec<_> = out
        .warnings
        .iter()
        .filter(|d| d.code == codes::DEAD_WRITE)
        .collect();
    assert_eq!(w.len(), 1, "{:#?}", out.warnings);
    assert_eq!(w[0].severity, Severity::Warning);
    assert_eq!(w[0].span(), nth(src, "v_wr ivrf[0]", 0));
    assert_eq!(w[0].labels[1].span, nth(src, "v_wr ivrf[0]", 1));
}

#[test]
fn warns_on_write_never_read() {
    let src = "input x : [128]\nv_rd netq\nv_wr dram[5]\nend_chain\n";
    let out = check(Arc::new(SourceFile::new("t.nnp", src)), None).expect("valid");
    assert_eq!(out.warnings.len(), 1, "{:#?}", out.warnings);
    assert_eq!(out.warnings[0].code, codes::DEAD_WRITE);
    assert_eq!(out.warnings[0].span(), at(src, "v_wr dram[5]"));
}

#[test]
fn output_in_memory_is_not_dead() {
    let src = "input x : [128]\noutput z : [128] at dram[5]\nv_rd netq\nv_wr dram[5]\nend_chain\n";
    let out = check(Arc::new(SourceFile::new("t.nnp", src)), None).expect("valid");
    assert!(out.warnings.is_empty(), "{:#?}", out.warnings);
}

#[test]
fn warns_on_declaration_never_read() {
    let src = format!("{IO}vector unused : [128] at ivrf[0]\nv_rd netq\nv_wr netq\nend_chain\n");
    let out = check(Arc::new(SourceFile::new("t.nnp", src.as_str())), None).expect("valid");
    assert_eq!(out.warnings.len(), 1, "{:#?}", out.warnings);
    assert_eq!(out.warnings[0].code, codes::UNREAD_DECL);
    assert_eq!(out.warnings[0].message, "`unused` is never read");
    assert_eq!(out.warnings[0].span(), at(&src, "unused"));
}

#[test]
fn error_inside_repeat_reported_once() {
    let src =
        "output y : [3, 128]\nrepeat t in 0..3 {\n  v_rd ivrf[t]\n  v_wr netq\n  end_chain\n}\n";
    // Each unrolled copy reads an uninitialised register; one diagnostic for the line.
    expect(
        src,
        codes::UNINIT_READ,
        "ivrf[0] is read before",
        at(src, "ivrf[t]"),
    );
}

// ---- more rules: operands, memories, declarations ----

#[test]
fn unknown_memory_suggests() {
    let src = "output y : [128]\nv_rd ivfr[0]\nv_wr netq\nend_chain\n";
    let d = expect(
        src,
        codes::UNKNOWN_MEMORY,
        "unknown memory `ivfr`",
        at(src, "ivfr"),
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean `ivrf`?"))
    );
}

/// A declaration's or constant's name where a memory belongs: the help says what the name
/// is and how to write the operand.
#[test]
fn unknown_memory_names_what_a_declared_name_is() {
    let cases = [
        (
            "matrix W : [128, 128] at mrf[3]\ninput x : [128]\noutput y : [128]\n\
             v_rd netq\nv_wr ivrf[0]\nend_chain\nv_rd ivrf[0]\nmv_mul W\nv_wr netq\nend_chain\n",
            "W",
            "`W` is the matrix declared at `mrf[3]`; a declared name stands for its base \
             address inside the brackets: write `mrf[W]`",
        ),
        (
            "input x : [128]\noutput y : [128]\nv_rd x\nv_wr netq\nend_chain\n",
            "x",
            "`x` is an input, which the host pushes on netq: read it with `v_rd netq`",
        ),
        (
            "input x : [128]\noutput y : [128]\nv_rd netq\nv_wr y\nend_chain\n",
            "y",
            "`y` is an output that the host collects from netq: write it with `v_wr netq`",
        ),
        (
            "let K = 7\ninput x : [128]\noutput y : [128]\nv_rd netq\nv_wr K\nend_chain\n",
            "K",
            "`K` is the constant 7, not a memory; an operand is a memory and an address, as in \
             `ivrf[K]`",
        ),
    ];
    for (src, name, help) in cases {
        // The operand: the name's last occurrence, at the end of its line.
        let operand = format!(" {name}\n");
        let nth_use = src.matches(&operand).count() - 1;
        let start = nth(src, &operand, nth_use).start as usize + 1;
        let d = expect(
            src,
            codes::UNKNOWN_MEMORY,
            &format!("unknown memory `{name}`"),
            Span::new(start, start + name.len()),
        );
        assert_eq!(d.help.as_deref(), Some(help), "{src}");
    }
}

#[test]
fn v_wr_cannot_write_mrf() {
    let src = format!("{IO}v_rd netq\nv_wr mrf[0]\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::WRONG_MEMORY,
        "`v_wr` cannot write mrf",
        at(&src, "mrf"),
    );
}

#[test]
fn two_mv_muls() {
    let src = "matrix W : [128, 128] at mrf[0]\nvector v : [128] at ivrf[0]\noutput y : [128]\n\
               v_rd ivrf[0]\nmv_mul mrf[W]\nmv_mul mrf[W]\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::CHAIN_ORDER,
        "at most one `mv_mul`",
        nth(src, "mv_mul mrf[W]", 1),
    );
}

#[test]
fn quant_inside_chain() {
    let src = format!("{IO}v_rd netq\nquant mfu.input = fp16\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::INSIDE_CHAIN,
        "`quant` inside a chain",
        at(&src, "quant mfu.input = fp16"),
    );
}

#[test]
fn only_zero_initialisation() {
    let src = "vector v : [128] at ivrf[0] = 5\n";
    expect(src, codes::DECL, "only `= 0` is supported", at(src, "5"));
}

#[test]
fn one_target_statement() {
    let src = "target \"bw-default\"\ntarget \"bw-default\"\n";
    expect(
        src,
        codes::TARGET,
        "more than one `target`",
        nth(src, "target \"bw-default\"", 1),
    );
}

#[test]
fn window_pitch_must_cover_width() {
    let src = "vector f : [16, 128] at ivrf[0]\noutput y : [9, 128]\n\
               s_wr win_w, 3\ns_wr win_h, 3\ns_wr pitch, 2\ns_wr rows, 9\nv_rd_2d ivrf[0]\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::SCALAR_VALUE,
        "pitch = 2 is smaller than win_w = 3",
        at(src, "v_rd_2d ivrf[0]"),
    );
}

#[test]
fn mv_mul_past_end_of_matrix() {
    // W is 2 x 1 tiles; starting at its second tile row, rows = 2 runs past its end.
    let src = "matrix W : [256, 128] at mrf[0]\nmatrix U : [128, 128] at mrf[2]\nvector v : [128] at ivrf[0]\n\
               output y : [256]\ns_wr rows, 2\nv_rd ivrf[v]\nmv_mul mrf[W + 1]\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::WIDTH,
        "reads past the end of `W`",
        at(src, "mrf[W + 1]"),
    );
}

#[test]
fn operand_count() {
    let src = format!("{IO}v_rd\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::OPERANDS,
        "`v_rd` takes 1 operand, found 0",
        at(&src, "v_rd"),
    );
}

#[test]
fn inc_spelling_needs_increment() {
    let src =
        "vector v : [128] at ivrf[0]\noutput y : [128]\nv_rd_inc ivrf[0]\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::OPERANDS,
        "`v_rd_inc` takes 2 operands, found 1",
        at(src, "v_rd_inc ivrf[0]"),
    );
}

#[test]
fn netq_push_width_must_match_output_row() {
    let src = "input x : [128]\noutput y : [256]\nv_rd netq\nv_wr netq\nend_chain\n";
    expect(
        src,
        codes::NETQ_WIDTH,
        "pushes 1 tile but row 0 of output `y` is 2 tiles",
        nth(src, "netq", 1),
    );
}

#[test]
fn activation_takes_no_operand() {
    let src = format!("{IO}v_rd netq\nv_relu ivrf[0]\nv_wr netq\nend_chain\n");
    expect(
        &src,
        codes::OPERANDS,
        "`v_relu` takes no operand",
        at(&src, "v_relu ivrf[0]"),
    );
}

/// The layout rule follows the tiles' data: a matrix declared at mrf and then overwritten by
/// a copy is no longer held to its layout; copied tiles may be multiplied a block at a time,
/// side by side with other copies, as long as one format quantizes them all.
#[test]
fn mv_mul_layout_follows_the_tiles_data() {
    // W [256, 256] (2 x 2 tiles) copied into mrf[0..4]: its second tile column alone.
    let block = "matrix W : [256, 256] at dram[0]\nvector v : [128] at ivrf[0]\noutput y : [2, 128]\n\
                 s_wr rows, 2\ns_wr cols, 2\nm_rd dram[W]\nm_wr mrf[0]\nend_chain\n\
                 s_wr rows, 1\ns_wr cols, 1\ns_wr iterations, 2\nv_rd ivrf[v]\nmv_mul mrf[1] + 2\n\
                 v_wr netq\nend_chain\n";
    let errors: Vec<_> = diags(block).into_iter().filter(|d| d.is_error()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // Two matrices copied side by side, multiplied as one: fine with one format, refused
    // when their own `quant`s differ.
    let stacked = |quant: &str| {
        format!(
            "matrix A : [128, 128] at dram[0]{quant}\nmatrix B : [128, 128] at dram[1]\n\
             vector v : [128] at ivrf[0]\noutput y : [256]\n\
             s_wr rows, 2\nm_rd dram[A]\nm_wr mrf[0]\nend_chain\n\
             v_rd ivrf[v]\nmv_mul mrf[0]\nv_wr netq\nend_chain\n"
        )
    };
    let same = stacked("");
    let errors: Vec<_> = diags(&same).into_iter().filter(|d| d.is_error()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let mixed = stacked(" quant bfp(mant = 4)");
    let d = expect(
        &mixed,
        codes::WIDTH,
        "`mv_mul`'s tiles hold matrices of different formats: tile 0 (`A`, bfp(mant = 4",
        nth(&mixed, "mrf[0]", 1),
    );
    assert!(
        d.message.contains("tile 1 (`B`, bfp(mant = 8"),
        "{}",
        d.message
    );
    // A [128, 256] (1 x 2 tiles) at mrf[0], then B [256, 128] (2 x 1) copied over it: the
    // tiles are B's, and B's layout (cols = 1) is the right one.
    let overwritten = "matrix A : [128, 256] at mrf[0]\nmatrix B : [256, 128] at dram[0]\n\
                       vector v : [256] at ivrf[0]\noutput y : [128]\noutput z : [256]\n\
                       s_wr cols, 2\nv_rd ivrf[v]\nmv_mul mrf[A]\nv_wr netq\nend_chain\n\
                       s_wr rows, 2\ns_wr cols, 1\nm_rd dram[B]\nm_wr mrf[0]\nend_chain\n\
                       v_rd ivrf[v]\nmv_mul mrf[0]\nv_wr netq\nend_chain\n";
    let errors: Vec<_> = diags(overwritten)
        .into_iter()
        .filter(|d| d.is_error())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // An iterated mv_mul is held to the layout in every iteration: the second starts in the
    // middle of W's tile row.
    let iterated = "matrix W : [128, 256] at mrf[0]\nvector v : [256] at ivrf[0]\noutput y : [2, 128]\n\
                    s_wr cols, 2\ns_wr iterations, 2\nv_rd ivrf[v]\nmv_mul mrf[W] + 1\nv_wr netq\nend_chain\n";
    let d = expect(
        iterated,
        codes::WIDTH,
        "`mv_mul` starts in the middle of a tile row of `W` (iteration 1)",
        at(iterated, "mrf[W] + 1"),
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("a multiple of 2")),
        "{d:?}"
    );
}

/// Expressions of any length parse without overflowing the stack: past 256 nested operators
/// the parser reports one `too-large` error per expression (a test thread's stack is 2 MiB).
#[test]
fn deeply_nested_expressions_are_refused_not_crashed() {
    let sum = format!("let A = {}\n", vec!["1"; 20_000].join(" + "));
    let negs = format!("let B = {}1\n", "-".repeat(100_000));
    let nested = format!("let C = {}1{}\n", "(1 + ".repeat(5_000), ")".repeat(5_000));
    // Parentheses stop earlier: past 64 open on a line (nnp_grammar::lexer::MAX_PAREN_DEPTH).
    for (src, message) in [
        (&sum, "expression nested too deeply"),
        (&negs, "expression nested too deeply"),
        (&nested, "parentheses nested too deeply"),
    ] {
        let all = diags(src);
        let deep: Vec<_> = all.iter().filter(|d| d.code == codes::TOO_LARGE).collect();
        assert_eq!(deep.len(), 1, "{:?}", &all[..all.len().min(3)]);
        assert_eq!(deep[0].message, message);
        // Inside the expression: after `let X = `, before the newline.
        let span = deep[0].span();
        assert!(
            span.start >= 8 && (span.end as usize) < src.len(),
            "{span:?}"
        );
    }
    // 256 operators deep is fine: A = 257.
    let ok = format!("let A = {}\nlet B = -A\n", vec!["1"; 257].join(" + "));
    assert!(diags(&ok).iter().all(|d| !d.is_error()), "{:?}", diags(&ok));
}

/// A `repeat` too long to unroll (10^8 iterations x (1 + 4 instructions) steps) is the only
/// diagnostic: the program after it is not walked, so nothing is said about what it reads or
/// writes.
#[test]
fn a_repeat_too_long_to_unroll_says_nothing_more() {
    let src = "vector v : [128] at ivrf[0]\noutput y : [128] at ivrf[1]\n\
               repeat t in 0..100000000 {\nv_rd ivrf[0]\nv_relu\nv_wr ivrf[1]\nend_chain\n}\n";
    let all = diags(src);
    assert_eq!(all.len(), 1, "{all:#?}");
    expect(
        src,
        codes::TOO_LARGE,
        "this `repeat` unrolls to 500000000 steps",
        at(src, "0..100000000"),
    );
}

// ---- pad lanes (docs/numerics.md: pad lanes must not change any result) ----

/// The `nnp::pad-lanes` warnings of a valid program.
#[track_caller]
fn pad_warnings(src: &str) -> Vec<Diagnostic> {
    let out = check(Arc::new(SourceFile::new("t.nnp", src)), None).expect("valid");
    out.warnings
        .into_iter()
        .filter(|d| d.code == codes::PAD_LANES)
        .collect()
}

/// x : [100] at N = 128 has pad lanes 100..128; `act` maps their 0 to sigm(0) = 0.5 or tanh(0) = 0,
/// then a product by W : [100, 100] (zero columns 100..128) quantizes them in one
/// `block = native` BFP block with the real lanes 0..100.
fn act_then_product(x_decl: &str, act: &str, prelude: &str) -> String {
    format!(
        "{x_decl}\nmatrix W : [100, 100] at mrf[0]\noutput y : [100]\n{prelude}\
         v_rd netq\n{act}\nv_wr ivrf[0]\nend_chain\n\
         v_rd ivrf[0]\nmv_mul mrf[W]\nv_wr netq\nend_chain\n"
    )
}

#[test]
fn pad_lanes_made_nonzero_before_a_product_are_a_warning() {
    let src = act_then_product("input x : [100]", "v_sigm", "");
    let w = pad_warnings(&src);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].severity, Severity::Warning);
    assert!(
        w[0].message.contains("pad lanes holding 0.5"),
        "{}",
        w[0].message
    );
    assert_eq!(w[0].span(), at(&src, "mv_mul mrf[W]"));
    assert!(
        w[0].labels[0]
            .text
            .contains("input tile 0: lanes 100..128 hold 0.5"),
        "{w:#?}"
    );
    assert_eq!(w[0].labels[1].span, at(&src, "v_sigm"));

    // Pad lanes that stay 0 move no exponent: tanh(0) = 0, and sigm(-65504) is 0 in fp16.
    assert!(pad_warnings(&act_then_product("input x : [100]", "v_tanh", "")).is_empty());
    assert!(
        pad_warnings(&act_then_product(
            "input x : [100] pad -65504",
            "v_sigm",
            ""
        ))
        .is_empty()
    );
    // No pad lanes at all.
    let full =
        act_then_product("input x : [128]", "v_sigm", "").replace("[100, 100]", "[100, 128]");
    assert!(pad_warnings(&full).is_empty());
    // The mask the help suggests: vv_mul by m (ones, pad lanes 0) after v_sigm makes them 0.
    let masked = act_then_product(
        "input x : [100]\nvector m : [100] at mulvrf0[0]",
        "v_sigm\nvv_mul mulvrf0[m]",
        "",
    );
    assert!(
        pad_warnings(&masked).is_empty(),
        "{:#?}",
        pad_warnings(&masked)
    );
}

#[test]
fn pad_lanes_matter_only_in_blocks_shared_with_real_lanes() {
    // MX blocks of 32 lanes: pad lanes 100..128 share the block 96..128 with real lanes 96..100;
    // with 96 real lanes the pad lanes fill blocks 96..128 of their own. Elementwise fp8 (no
    // shared scale) never mixes them. Under the default `block = native`, 96 real lanes share.
    let mx = "quant mvm.vector = mx(elem = fp8e4m3, block = 32)\n";
    let fp8 = "quant mvm.vector = fp(5, 2)\n";
    let w96 = |src: String| src.replace("100", "96");
    assert_eq!(
        pad_warnings(&act_then_product("input x : [100]", "v_sigm", mx)).len(),
        1
    );
    assert!(pad_warnings(&w96(act_then_product("input x : [100]", "v_sigm", mx))).is_empty());
    assert!(pad_warnings(&act_then_product("input x : [100]", "v_sigm", fp8)).is_empty());
    let w = pad_warnings(&w96(act_then_product("input x : [100]", "v_sigm", "")));
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].labels[0].text.contains("lanes 96..128 hold 0.5"),
        "{w:#?}"
    );
}

#[test]
fn a_products_pad_rows_are_followed_into_the_next_product() {
    // W : [100, 128] leaves output lanes 100..128 at 0; b's pad lanes add 0; v_exp makes them
    // exp(0) = 1, and the next product by U : [100, 100] blocks them with real lanes.
    let src = "input x : [128]\nmatrix W : [100, 128] at mrf[0]\nmatrix U : [100, 100] at mrf[1]\n\
               vector b : [100] at asvrf0[0]\noutput y : [100]\n\
               v_rd netq\nv_wr ivrf[0]\nend_chain\n\
               v_rd ivrf[0]\nmv_mul mrf[W]\nvv_add asvrf0[b]\nv_exp\nv_wr ivrf[1]\nend_chain\n\
               v_rd ivrf[1]\nmv_mul mrf[U]\nv_wr netq\nend_chain\n";
    let w = pad_warnings(src);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].span(), at(src, "mv_mul mrf[U]"));
    assert!(w[0].message.contains("holding 1 "), "{}", w[0].message);
    assert_eq!(w[0].labels[1].span, at(src, "v_exp"));
    // b's pad lanes at -65504 make them exp(-65504) = 0.
    assert!(pad_warnings(&src.replace("asvrf0[0]\n", "asvrf0[0] pad -65504\n")).is_empty());
}

#[test]
fn softmax_over_pad_lanes_that_do_not_vanish_is_a_warning() {
    let src = "input x : [10]\noutput p : [10]\nv_rd netq\nv_softmax\nv_wr netq\nend_chain\n";
    let w = pad_warnings(src);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].message.contains("pad lanes holding 0"),
        "{}",
        w[0].message
    );
    assert_eq!(w[0].span(), at(src, "v_softmax"));
    assert!(
        w[0].labels[0].text.contains("lanes 10..128 hold 0"),
        "{w:#?}"
    );
    assert_eq!(w[0].labels[1].span, at(src, "x"));
    // The idiom: pad lanes at the most negative fp16, directly or through a bias's pad.
    assert!(pad_warnings(&src.replace("[10]\noutput", "[10] pad -65504\noutput")).is_empty());
    let biased = |pad: &str| {
        format!(
            "input x : [10]\nvector b : [10] at asvrf0[0] pad {pad}\noutput p : [10]\n\
             v_rd netq\nvv_add asvrf0[b]\nv_softmax\nv_wr netq\nend_chain\n"
        )
    };
    assert!(pad_warnings(&biased("-65504")).is_empty());
    let src = biased("-1");
    let w = pad_warnings(&src);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(w[0].message.contains("holding -1"), "{}", w[0].message);
    assert_eq!(w[0].labels[1].span, at(&src, "vv_add asvrf0[b]"));
}

// ---- one rule for every command ----

/// docs/language.md: an empty range is an error, `A..A` as much as `3..1`.
#[test]
fn a_range_whose_end_equals_its_start_is_empty() {
    let src = "repeat t in 5..5 {\n}\n";
    let d = expect(src, codes::REPEAT, "empty range 5..5", at(src, "5..5"));
    assert!(
        d.help.as_deref().is_some_and(|h| h.contains("B > A")),
        "{d:#?}"
    );
}

/// An empty inner range is the same error, once for its span, whatever the outer range.
#[test]
fn an_empty_inner_range_is_an_error_once() {
    let src = format!("{IO}repeat a in 0..3 {{\nrepeat b in 0..0 {{\n}}\n}}\n");
    expect(&src, codes::REPEAT, "empty range 0..0", at(&src, "0..0"));
    // Ranges named by the outer variable: empty for a = 0 only.
    let src = format!("{IO}repeat a in 0..3 {{\nrepeat b in 0..a {{\n}}\n}}\n");
    expect(&src, codes::REPEAT, "empty range 0..0", at(&src, "0..a"));
}

/// docs/language.md: a pad is a finite number an f32 holds; inf, nan and numbers past f32 are
/// refused at the number, by the checker (so by every command).
#[test]
fn a_pad_that_is_not_a_finite_f32_is_refused() {
    for (pad, shown) in [
        ("inf", "inf"),
        ("-inf", "-inf"),
        ("nan", "nan"),
        ("1e999", "1e999"),
        ("-1e39", "-1e39"),
    ] {
        let src = format!("input x : [100] pad {pad}\noutput y : [100]\n");
        let d = expect(
            &src,
            codes::BAD_NUMBER,
            &format!("pad `{shown}` is not a finite f32 value"),
            at(&src, pad),
        );
        assert!(
            d.help.as_deref().is_some_and(|h| h.contains("-65504")),
            "{d:#?}"
        );
        // The input stays declared: its pops report nothing more.
        let src = format!("{src}v_rd netq\nv_wr netq\nend_chain\n");
        assert_eq!(diags(&src).len(), 1, "{:#?}", diags(&src));
    }
    // The largest f32 is a pad.
    let src = "vector v : [100] at ivrf[0] pad -3.4028234663852886e38\n";
    assert!(
        diags(src).iter().all(|d| d.code != codes::BAD_NUMBER),
        "{:#?}",
        diags(src)
    );
}

/// Storage wider than fp32 is refused by the checker at the format literal (values, traces and
/// output files are f32), in a `quant` line and in a target file.
#[test]
fn storage_wider_than_fp32_is_refused() {
    for lit in ["fp(11, 52)", "fp(9, 23)", "fp(8, 24)"] {
        let src = format!("quant storage = {lit}\n");
        expect(
            &src,
            codes::FORMAT,
            &format!("storage format `{lit}` is wider than fp32"),
            at(&src, lit),
        );
    }
    for lit in ["fp32", "fp(8, 23)", "bf16"] {
        let src = format!("quant storage = {lit}\n");
        assert!(diags(&src).is_empty(), "{lit}: {:#?}", diags(&src));
    }
    let e = Target::from_toml("[numerics]\nstorage = \"fp(11, 52)\"\n", "t.toml")
        .expect_err("storage wider than fp32");
    assert!(e.to_string().contains("wider than fp32"), "{e}");
}

/// Each instruction outside a chain is reported: an orphan (a chain body without `v_rd`) takes
/// its writes, and whatever follows them is outside a chain again.
#[test]
fn every_instruction_outside_a_chain_is_reported() {
    let src = format!("{IO}v_relu\nv_wr ivrf[1]\nv_tanh\nv_wr ivrf[2]\nend_chain\n");
    let found: Vec<Span> = diags(&src)
        .iter()
        .filter(|d| d.code == codes::CHAIN_START)
        .map(Diagnostic::span)
        .collect();
    assert_eq!(found, vec![at(&src, "v_relu"), at(&src, "v_tanh")]);
}
