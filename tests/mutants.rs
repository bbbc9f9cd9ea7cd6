//! Mutated samples: the shipped samples edited the way firmware engineers edit them (a count,
//! an address or a size changed; a line deleted, duplicated or moved; an instruction inserted
//! or swapped for another; a memory or a `quant` format swapped for another), each on a target
//! its header names. Every mutant that checks runs on both engines (`progen::run_differential`:
//! the emulator's trace and outputs against the software graph's, bit for bit, first and warm
//! runs, one mutant in four through the graph's JSON form) and must be concordant, stop at the
//! same forbidden NaN, or be refused at run time by both engines alike; nothing may panic. The
//! generator's programs (`tests/differential.rs`) are built from the grammar up; these start
//! from real firmware and change one thing.
//!
//! CI runs `NNPC_MUTANTS` (default 1,500) mutants from seed `NNPC_MUTANTS_SEED` (default 0); a
//! long run: `NNPC_MUTANTS=20000 cargo test --release -p nnpc --test mutants -- --nocapture`.

mod common;

use common::env_u64;
use common::samples::{Firmware, samples};
use common::text::digit_runs;
use nnp_progen::{
    DataConfig, Outcome, Rng, first_address, minimize_failure, refused_alike, run_differential,
};
use nnpc::grammar::OpKind;

/// Input sets per mutant.
const BATCH: usize = 3;

/// Instructions an edit may insert: each valid somewhere in a chain. The MFU ops without an
/// operand (softmax aside) come from [`OpKind::ALL`] ([`inserts`]), the rest are here.
const INSERTS: &[&str] = &[
    "vv_add asvrf0[0]",
    "vv_mul mulvrf0[0]",
    "vv_max asvrf0[0]",
    "vv_a_sub_b asvrf0[0]",
    "v_rd ivrf[0]",
    "v_rd dram[0]",
    "v_rd netq",
    "v_wr ivrf[0]",
    "v_wr dram[0]",
    "v_wr netq",
    "mv_mul mrf[0]",
    "end_chain",
    "s_wr iterations, 2",
    "s_wr rows, 2",
    "s_wr cols, 2",
    "s_wr rows, 1",
    "quant mvm.vector = bfp(mant = 5)",
    "quant mvm.matrix = msfp(mant = 4)",
    "quant mvm.vector = mx(elem = fp8e4m3, block = 32)",
    "quant mvm.matrix = fp(5, 2)",
    "quant mvm.output = bf16",
    "quant mvm.output = fp32",
    "quant mfu.input = fp32",
    "quant mfu.input = fp(5, 10, round = zero)",
    "quant storage = bf16",
    "quant storage = fp(5, 10, round = away)",
];

/// Formats an edit may put in place of a `quant` line's or declaration's format.
const FORMATS: &[&str] = &[
    "bfp(mant = 4)",
    "bfp(mant = 12, block = 16)",
    "bfp(mant = 8, round = zero)",
    "msfp(mant = 5)",
    "mx(elem = int8, block = 32)",
    "mx(elem = fp6e2m3, block = 32)",
    "fp(4, 3)",
    "bf16",
    "fp32",
    "int(8)",
];

/// Memories an edit may swap for one another in an operand or a declaration.
const MEMORIES: &[&str] = &[
    "ivrf", "dram", "asvrf0", "asvrf1", "mulvrf0", "mulvrf1", "netq", "mrf",
];

/// Every instruction an edit may insert.
fn inserts() -> Vec<&'static str> {
    let ops = OpKind::ALL
        .into_iter()
        .filter(|&k| !k.has_operand() && k != OpKind::Softmax);
    ops.map(OpKind::mnemonic)
        .chain(INSERTS.iter().copied())
        .collect()
}

/// Element-wise instructions an edit may swap for one another (same operand shape): the MFU
/// ops without an operand (softmax last), and those with one (`BINARY`).
fn swaps() -> [Vec<&'static str>; 2] {
    let unary = OpKind::ALL
        .into_iter()
        .filter(|&k| !k.has_operand() && k != OpKind::Softmax)
        .chain([OpKind::Softmax]);
    [unary.map(OpKind::mnemonic).collect(), BINARY.to_vec()]
}

/// The MFU ops with an operand, in the order the mutants draw from (a fixed order keeps the
/// seeds' mutants; `binary_swaps_are_every_op_with_an_operand` holds it to `OpKind::ALL`).
const BINARY: &[&str] = &["vv_add", "vv_mul", "vv_max", "vv_a_sub_b", "vv_b_sub_a"];

#[test]
fn binary_swaps_are_every_op_with_an_operand() {
    let mut want: Vec<&str> = OpKind::ALL
        .into_iter()
        .filter(|k| k.has_operand())
        .map(OpKind::mnemonic)
        .collect();
    let mut have = BINARY.to_vec();
    want.sort_unstable();
    have.sort_unstable();
    assert_eq!(have, want);
}

/// One to three edits of `text`.
fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for _ in 0..rng.range(1, 3) {
        if lines.is_empty() {
            break;
        }
        let i = rng.below(lines.len() as u64) as usize;
        match rng.below(8) {
            0 => {
                // A number in the line: 0, 1, 2, 3, 7, 16, 128, one more or less, double or half.
                let line = &lines[i];
                let spans = digit_runs(line);
                if spans.is_empty() {
                    continue;
                }
                let (a, b) = *rng.pick(&spans);
                let v: u64 = line[a..b].parse().unwrap_or(0);
                let new = *rng.pick(&[
                    0,
                    1,
                    2,
                    3,
                    7,
                    16,
                    128,
                    v.saturating_add(1),
                    v.saturating_sub(1),
                    v.saturating_mul(2),
                    v / 2,
                ]);
                lines[i] = format!("{}{new}{}", &line[..a], &line[b..]);
            }
            1 => {
                lines.remove(i);
            }
            2 => {
                let j = rng.below(lines.len() as u64) as usize;
                lines.insert(i, lines[j].clone());
            }
            3 => {
                let j = rng.below(lines.len() as u64) as usize;
                lines.swap(i, j);
            }
            4 => lines.insert(i, rng.pick(&inserts()).to_string()),
            5 => {
                let to = rng.pick::<&str>(MEMORIES);
                if let Some(from) = MEMORIES
                    .iter()
                    .find(|m| lines[i].contains(&format!("{m}[")))
                {
                    lines[i] = lines[i].replacen(&format!("{from}["), &format!("{to}["), 1);
                }
            }
            6 => {
                // The format after one `quant` of the text (a directive's `= FORMAT` or a
                // declaration's), if it has any.
                let quants: Vec<usize> = (0..lines.len())
                    .filter(|&k| lines[k].contains("quant ") && !lines[k].trim().starts_with("//"))
                    .collect();
                let Some(&i) = quants.get(rng.below(quants.len().max(1) as u64) as usize) else {
                    continue;
                };
                let line = &lines[i];
                if let Some(q) = line.find("quant ") {
                    // `quant POINT = FORMAT`, or a declaration's `quant FORMAT` at its end.
                    let directive = line.trim_start().starts_with("quant ");
                    let from = match line[q..].find('=') {
                        Some(e) if directive => q + e + 1,
                        _ => q + "quant ".len(),
                    };
                    let to = rng.pick::<&str>(FORMATS);
                    lines[i] = format!("{} {to}", line[..from].trim_end());
                }
            }
            _ => {
                let words = lines[i].split_whitespace().next().unwrap_or("").to_string();
                if let Some(group) = swaps().iter().find(|g| g.contains(&words.as_str())) {
                    let op = rng.pick::<&str>(group);
                    lines[i] = lines[i].replacen(&words, op, 1);
                }
            }
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn mutated_samples_are_concordant_or_refused_by_both_engines() {
    let count = env_u64("NNPC_MUTANTS", 1500);
    let base = env_u64("NNPC_MUTANTS_SEED", 0);
    let samples = samples();
    let data = DataConfig::default();
    let (mut concordant, mut elements, mut invalid, mut refused, mut stopped) = (0, 0, 0, 0, 0);
    let mut failures = Vec::new();
    for seed in base..base + count {
        let mut rng = Rng::keyed(seed, "mutant");
        let Firmware {
            name,
            text,
            targets,
        } = &samples[seed as usize % samples.len()];
        let toml = rng.pick(targets).clone();
        let source = mutate(text, &mut rng);
        let json = seed.is_multiple_of(4);
        match run_differential(&source, &toml, seed, BATCH, &data, json) {
            Outcome::Concordant { elements: e, .. } => {
                concordant += 1;
                elements += e;
            }
            Outcome::SameError(_) => stopped += 1,
            Outcome::Invalid(_) => invalid += 1,
            Outcome::EmulatorError(e) if !e.starts_with("panicked") => {
                match refused_alike(&e, &source, &toml, seed, BATCH) {
                    Ok(()) => {
                        if refused == 0 {
                            eprintln!("first refused by both (seed {seed}, {name}): {e}");
                        }
                        refused += 1;
                    }
                    Err(what) => failures.push((
                        seed,
                        name,
                        source,
                        toml,
                        format!("the emulator refused ({e}); {what}"),
                    )),
                }
            }
            other => failures.push((seed, name, source, toml, other.to_string())),
        }
    }
    eprintln!(
        "mutants (seeds {base}..{}): {concordant} concordant ({elements} output elements \
         bit-exact), {stopped} stopped by the same forbidden NaN/Inf, {refused} refused at run \
         time by both engines, {invalid} rejected by the checker, {} failing",
        base + count,
        failures.len()
    );
    // The edits keep enough mutants valid that the comparison means something.
    assert!(
        concordant * 5 >= count,
        "only {concordant} of {count} mutants checked and ran"
    );
    if let Some((seed, name, source, toml, what)) = failures.first() {
        let (min_src, min_toml, min_out) =
            minimize_failure(source, toml, *seed, BATCH, &data, seed.is_multiple_of(4));
        panic!(
            "{} of {count} mutants failed (reproduce one with NNPC_MUTANTS_SEED=S \
             NNPC_MUTANTS=1); first, seed {seed} from {name}: {what}\n---- minimized \
             ({}): {min_out}\n---- program\n{min_src}---- target\n{min_toml}",
            failures.len(),
            min_out.kind()
        );
    }
}

/// The edits by hand (digit runs, most mutants differ from their sample), and the addresses
/// that refusals are matched by.
#[test]
fn edits_by_hand() {
    assert_eq!(digit_runs("s_wr rows, 12"), vec![(11, 13)]);
    assert_eq!(digit_runs("v_wr_inc ivrf[0], 3"), vec![(14, 15), (18, 19)]);
    assert_eq!(digit_runs("v_relu"), vec![]);
    let emu = "read of dram[16], which nothing wrote (line 18, chain 2, iteration 0)";
    assert_eq!(first_address(emu), Some("dram[16]"));
    assert_eq!(first_address("asvrf0[b] and mrf[3]"), Some("mrf[3]"));
    assert_eq!(first_address("no address [here]"), None);
    assert_eq!(first_address("×dram[2] is read"), Some("dram[2]"));
    let text = "v_rd netq\nvv_add asvrf0[b]\nv_relu\nv_wr netq\nend_chain\n";
    let mut changed = 0;
    for seed in 0..200 {
        let m = mutate(text, &mut Rng::keyed(seed, "mutant"));
        assert!(m.ends_with('\n'));
        changed += usize::from(m != text);
    }
    // Almost every mutant differs (a swap of a line with itself, or of an op for itself, does
    // not).
    assert!(changed >= 150, "{changed} of 200 mutants differ");
}
