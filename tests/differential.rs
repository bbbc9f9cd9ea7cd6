//! Differential test: random valid programs (`nnp_progen`), software graph vs emulator, bit
//! for bit, on several adversarial input sets each.
//!
//! CI runs 200 programs. The long run (docs/testing.md):
//! `NNPC_DIFF_PROGRAMS=10000 cargo test --release --test differential -- --nocapture`.
//! `NNPC_DIFF_SEED=S` starts at seed S (to reproduce one program: `NNPC_DIFF_SEED=S
//! NNPC_DIFF_PROGRAMS=1`). A failure prints the minimized program, its target and the first
//! differing element.

mod common;

use common::env_u64;
use nnp_grammar::{ChainBody, DeclKind, Init, Mem, OpKind, SourceFile, Target, check};
use nnp_progen::{
    DataConfig, GenConfig, Outcome, compare_outputs, generate, minimize, minimize_failure,
    run_differential,
};
use nnp_runtime::exec::PathCounts;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Input sets per program (the software graph runs them as one batch).
const BATCH: usize = 3;
/// Failures minimized and printed in full (the rest are listed by seed).
const MINIMIZE: usize = 3;

/// The value of fp16 bits (IEEE binary16: 1 sign, 5 exponent bits with bias 15, 10 fraction
/// bits; exponent 0 is subnormal, 31 is Inf/NaN).
fn fp16_value(bits: u32) -> f32 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let (e, m) = ((bits >> 10) & 0x1f, (bits & 0x3ff) as f32);
    sign * match e {
        0 => m * 2f32.powi(-24),
        31 if m == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        _ => (1.0 + m / 1024.0) * 2f32.powi(e as i32 - 15),
    }
}

fn checked(source: &str, toml: &str) -> nnp_grammar::Program {
    let target = Target::from_toml(toml, "gen.toml").expect("generated target parses");
    match check(Arc::new(SourceFile::new("gen.nnp", source)), Some(target)) {
        Ok(out) => out.program,
        Err(diags) => {
            let msgs: Vec<String> = diags.iter().map(|d| d.message.clone()).collect();
            panic!("generated program rejected: {msgs:?}\n{source}\n{toml}")
        }
    }
}

/// Run `count` programs from seed `base` on every core; minimize and print failures. Returns
/// the paths the outputs' runs took, counted over all of them.
/// `count` programs of `cfg` from seed `base` (`count_var` is the variable that sets the
/// count, named in a failure's hint).
fn differential(
    (label, count_var): (&str, &str),
    cfg: &GenConfig,
    base: u64,
    count: u64,
) -> PathCounts {
    let data = DataConfig::default();
    let start = Instant::now();
    let next = AtomicU64::new(base);
    // Each failure with the target it ran on.
    let failures: Mutex<Vec<(u64, String, Outcome)>> = Mutex::new(Vec::new());
    let elements = AtomicU64::new(0);
    let lanes = AtomicU64::new(0);
    let stopped = AtomicU64::new(0);
    let paths = Mutex::new(PathCounts::default());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= base + count {
                        break;
                    }
                    let g = generate(seed, cfg);
                    // Every fourth program goes through the graph's JSON form.
                    let json = seed.is_multiple_of(4);
                    let mut toml = g.target_toml.clone();
                    let mut outcome = run_differential(&g.source, &toml, seed, BATCH, &data, json);
                    if let Outcome::SameError(_) = outcome {
                        // Both stopped alike; where NaN/Inf are allowed, every value is
                        // compared too.
                        stopped.fetch_add(1, Ordering::Relaxed);
                        toml = toml.replace("nonfinite = \"error\"\n", "");
                        outcome = run_differential(&g.source, &toml, seed, BATCH, &data, json);
                    }
                    match outcome {
                        Outcome::Concordant {
                            elements: e,
                            written: w,
                            paths: p,
                        } => {
                            let mut total = paths.lock().unwrap_or_else(|e| e.into_inner());
                            *total = *total + p;
                            elements.fetch_add(e as u64, Ordering::Relaxed);
                            lanes.fetch_add(w as u64, Ordering::Relaxed);
                        }
                        other => failures
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((seed, toml, other)),
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    failures.sort_by_key(|f| f.0);
    let secs = start.elapsed().as_secs_f64();
    let paths = paths.into_inner().unwrap_or_else(|e| e.into_inner());
    let stopped = stopped.load(Ordering::Relaxed);
    eprintln!(
        "differential ({label}): {count} programs (seeds {base}..{}), {} output elements and {} \
         written lanes bit-exact ({paths}), {stopped} runs stopped by the same forbidden NaN/Inf \
         in both engines, {} failing, {secs:.1} s",
        base + count,
        elements.load(Ordering::Relaxed),
        lanes.load(Ordering::Relaxed),
        failures.len()
    );
    if failures.is_empty() {
        return paths;
    }
    let mut report = String::new();
    for (i, (seed, toml, out)) in failures.iter().enumerate() {
        if i >= MINIMIZE {
            report.push_str(&format!("seed {seed}: {out}\n"));
            continue;
        }
        let g = generate(*seed, cfg);
        let (src, toml, min_out) =
            minimize_failure(&g.source, toml, *seed, BATCH, &data, seed.is_multiple_of(4));
        report.push_str(&format!(
            "==== seed {seed}: {out}\n---- minimized ({}): {min_out}\n---- program\n{src}---- \
             target (gen.toml)\n{toml}\n",
            min_out.kind()
        ));
    }
    panic!(
        "{label}: {} of {count} programs failed (reproduce one with NNPC_DIFF_SEED=S \
         {count_var}=1):\n{report}",
        failures.len()
    );
}

#[test]
fn software_graph_matches_emulator() {
    let count = env_u64("NNPC_DIFF_PROGRAMS", 200);
    let base = env_u64("NNPC_DIFF_SEED", 0);
    differential(
        ("small", "NNPC_DIFF_PROGRAMS"),
        &GenConfig::default(),
        base,
        count,
    );
}

/// Fewer, bigger programs (`GenConfig::large`): longer dataflow, wider vectors.
#[test]
fn software_graph_matches_emulator_on_large_programs() {
    let count = env_u64("NNPC_DIFF_LARGE", 50);
    let base = env_u64("NNPC_DIFF_SEED", 0);
    differential(
        ("large", "NNPC_DIFF_LARGE"),
        &GenConfig::large(),
        base,
        count,
    );
}

/// Programs made for the integer kernel (`GenConfig::integer_kernel`): their outputs' runs take
/// it for most products where the CPU has AVX2 (on bytes where it has AVX-512 VNNI and the
/// integers fit), their traced runs the float path.
#[test]
fn software_graph_matches_emulator_on_integer_kernel_programs() {
    let count = env_u64("NNPC_DIFF_INT", 100);
    let base = env_u64("NNPC_DIFF_SEED", 0);
    let paths = differential(
        ("integer kernel", "NNPC_DIFF_INT"),
        &GenConfig::integer_kernel(),
        base,
        count,
    );
    if count >= 20 {
        let simd = nnp_runtime::exec::intdot::simd();
        // With the graph on a GPU its vectors stay values there (their integers are made on
        // the GPU), and products take the GPU.
        let gpu = std::env::var("NNPC_DIFF_DEVICE").is_ok_and(|d| d == "cuda");
        assert_eq!(paths.int_products > 0, simd || gpu, "{paths}");
        assert_eq!(paths.gpu_products > 0, gpu, "{paths}");
        assert_eq!(paths.one_pass_stacks > 0, simd, "{paths}");
        assert_eq!(paths.quantized_to_ints > 0, simd && !gpu, "{paths}");
        // BFP 8 products on bytes where the CPU has AVX-512 VNNI.
        let vnni = nnp_runtime::exec::intdot::Kernel::best().is_vnni();
        assert_eq!(paths.byte_products > 0, vnni, "{paths}");
    }
}

/// Programs whose products read input rows (`GenConfig::stacked_products`): input-dependent
/// products over one weight stack, which the warm runs' passes (2 shards of at most 2 items)
/// stack where the CPU has AVX2 (docs/swgraph.md, "Stacked steps"); on a GPU they are not
/// stacked.
#[test]
fn software_graph_matches_emulator_on_stacked_products() {
    let count = env_u64("NNPC_DIFF_STACKED", 100);
    let base = env_u64("NNPC_DIFF_SEED", 0);
    let paths = differential(
        ("stacked products", "NNPC_DIFF_STACKED"),
        &GenConfig::stacked_products(),
        base,
        count,
    );
    if count >= 20 {
        let simd = nnp_runtime::exec::intdot::simd();
        let gpu = std::env::var("NNPC_DIFF_DEVICE").is_ok_and(|d| d == "cuda");
        assert_eq!(paths.stacked_products > 0, simd && !gpu, "{paths}");
    }
}

/// The comparison itself: one flipped bit is found at exactly its element; NaNs with different
/// payloads or signs are the same storage value (`storage_bits` canonicalises NaN).
#[test]
fn comparison_finds_one_flipped_bit() {
    let cfg = GenConfig::default();
    let (seed, g, p) = (0..100)
        .map(|s| {
            let g = generate(s, &cfg);
            let p = checked(&g.source, &g.target_toml);
            (s, g, p)
        })
        .find(|(_, _, p)| p.outputs().any(|d| d.shape.len() == 2 && d.shape[0] > 1))
        .expect("a program with a two-row output");
    let data = nnp_progen::host_data(&p, BATCH, seed, &DataConfig::default());
    let emu = nnp_runtime::emulator::emulate(&p, &data, &Default::default())
        .expect("emulator runs")
        .outputs;
    assert!(matches!(
        compare_outputs(&p, &emu, &emu),
        Outcome::Concordant { .. }
    ));
    let d = p
        .outputs()
        .find(|d| d.shape.len() == 2 && d.shape[0] > 1)
        .expect("found above");
    let (rows, cols) = (d.shape[0], d.shape[1]);
    // Batch item 1, row 1, last column; fp16 storage: flip the lowest mantissa bit.
    let flat = rows * cols + cols + (cols - 1);
    let mut bad = emu.clone();
    let t = bad.get_mut(&d.name).expect("output present");
    let bits = nnp_runtime::host::storage_bits(&nnp_numerics::FloatFormat::FP16, t.data[flat]);
    t.data[flat] = if t.data[flat].is_nan() {
        1.0
    } else {
        fp16_value(bits ^ 1)
    };
    match compare_outputs(&p, &emu, &bad) {
        Outcome::Mismatch(r) => {
            let m = &r.mismatches[0];
            assert_eq!(
                (m.output.as_str(), m.index.clone()),
                (d.name.as_str(), vec![1, 1, cols - 1])
            );
            assert_eq!(r.elements - r.bit_exact, 1);
        }
        other => panic!(
            "seed {seed}: expected a mismatch, got {other}\n{}",
            g.source
        ),
    }
    // A NaN of another sign and payload is the same storage value.
    let mut nan = emu.clone();
    let t = nan.get_mut(&d.name).expect("output present");
    t.data[flat] = f32::NAN;
    let mut nan2 = nan.clone();
    nan2.get_mut(&d.name).expect("output present").data[flat] = f32::from_bits(0xFFC0_1234);
    assert!(matches!(
        compare_outputs(&p, &nan, &nan2),
        Outcome::Concordant { .. }
    ));
}

/// The test can fail: the emulator of one machine against the software graph of a machine that
/// differs only in its accumulation mode must disagree on many programs (the data's exponent
/// spreads make `fp16-seq` round differently from `exact`).
#[test]
fn a_different_machine_is_caught() {
    use nnp_runtime::exec::{ExecOptions, run_program};
    let cfg = GenConfig::default();
    let (mut tried, mut caught) = (0, 0);
    for seed in 0..150 {
        let g = generate(seed, &cfg);
        // (A target that forbids NaN/Inf may stop both engines before any output.)
        if !g.target_toml.contains("accumulation = \"exact\"")
            || !g.source.contains("mv_mul")
            || g.target_toml.contains("nonfinite = \"error\"")
        {
            continue;
        }
        let other = g
            .target_toml
            .replace("accumulation = \"exact\"", "accumulation = \"fp16-seq\"");
        let (a, b) = (
            checked(&g.source, &g.target_toml),
            checked(&g.source, &other),
        );
        let data = nnp_progen::host_data(&a, BATCH, seed, &DataConfig::default());
        let emu = nnp_runtime::emulator::emulate(&a, &data, &Default::default())
            .expect("emulator runs")
            .outputs;
        let sw = run_program(&b, &data, &ExecOptions::default())
            .expect("graph runs")
            .outputs;
        tried += 1;
        if matches!(compare_outputs(&a, &emu, &sw), Outcome::Mismatch(_)) {
            caught += 1;
        }
    }
    // Programs whose multiplies span one tile or do not reach an output cannot tell the modes
    // apart; the others must.
    eprintln!("different accumulation: caught {caught} of {tried}");
    assert!(caught >= 3, "caught {caught} of {tried}");
}

#[test]
fn generation_is_deterministic() {
    let cfg = GenConfig::default();
    for seed in [0, 1, 77, u64::MAX] {
        assert_eq!(generate(seed, &cfg), generate(seed, &cfg));
    }
    assert_ne!(generate(1, &cfg), generate(2, &cfg));
}

/// The generator is only useful if it reaches every corner of the language: check that the CI
/// seeds, all of them valid, cover every instruction kind and feature the brief lists.
#[test]
fn generated_programs_are_valid_and_cover_the_language() {
    let cfg = GenConfig::default();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for seed in 0..200 {
        let g = generate(seed, &cfg);
        let p = checked(&g.source, &g.target_toml);
        let mut f = |s: String| {
            seen.insert(s);
        };
        f(format!("native {}", p.target.native));
        f(format!("mfus {}", p.target.mfus));
        f(format!("accumulation {:?}", p.target.numerics.accumulation));
        // Storage formats and the roundings of the float points (`float_round`).
        let num = &p.target.numerics;
        let mode = |f: &nnp_numerics::Format| match f.as_float().map(|x| x.rounding) {
            Some(nnp_numerics::Rounding::Stochastic { .. }) => "Stochastic".to_string(),
            Some(r) => format!("{r:?}"),
            None => "not a float".into(),
        };
        let mant = num.storage.as_float().map(|x| x.mant_bits);
        f(format!("storage mant {mant:?}"));
        f(format!("storage {}", mode(&num.storage)));
        f(format!("mvm_output {}", mode(&num.mvm_output)));
        f(format!("mfu_input {}", mode(&num.mfu_input)));
        // The float path's products (`exec::products::FloatPath`) of the target's MVM inputs.
        let n = p.native();
        match nnp_runtime::exec::matmul::exact_chunk(&num.mvm_vector, &num.mvm_matrix, n) {
            Some(k) if k < n => f("mvm products exact, tile sums not".into()),
            None => f("mvm products not exact".into()),
            Some(_) => {}
        }
        for d in &p.decls {
            let at_mem = d.place.is_some();
            f(format!("decl {:?} at {}", d.kind, at_mem));
            if d.pad != 0.0 {
                f(format!("pad {:?}", d.kind));
            }
            if d.init == Init::Zero {
                f("= 0".into());
            }
            if d.format.is_some() {
                f(format!("decl quant {:?}", d.kind));
            }
            if d.kind != DeclKind::Matrix && d.shape.len() > 1 {
                f("multi-row decl".into());
            }
            if d.row_len() % p.native() != 0 {
                f("partial tile".into());
            }
        }
        for c in &p.chains {
            if c.iterations > 1 {
                f("iterations".into());
            }
            match &c.body {
                ChainBody::Matrix(m) => {
                    f("matrix chain".into());
                    if c.iterations > 1 && m.src_addr.inc != 0 {
                        f("matrix chain inc".into());
                    }
                }
                ChainBody::Vector(v) => {
                    let src = match v.read.src {
                        Mem::AsVrf(_) => "asvrf".to_string(),
                        Mem::MulVrf(_) => "mulvrf".to_string(),
                        m => m.to_string(),
                    };
                    f(format!("read {src}"));
                    if v.read.window.is_some() {
                        f(format!("window mv_mul={}", v.mv_mul.is_some()));
                    }
                    if v.read.addr.inc != 0 {
                        f("read inc".into());
                    }
                    if let Some(m) = &v.mv_mul {
                        f("mv_mul".into());
                        if c.rows > 1 {
                            f("mv_mul rows>1".into());
                        }
                        if c.cols > 1 {
                            f("mv_mul cols>1".into());
                        }
                        if m.addr.inc != 0 {
                            f("mv_mul inc".into());
                        }
                    }
                    for op in &v.ops {
                        f(format!("op {:?}", op.kind));
                        f(format!("mfu {}", op.mfu));
                    }
                    for w in &v.writes {
                        let dst = match w.dst {
                            Mem::AsVrf(_) => "asvrf".to_string(),
                            Mem::MulVrf(_) => "mulvrf".to_string(),
                            m => m.to_string(),
                        };
                        f(format!("write {dst}"));
                        if w.addr.inc != 0 {
                            f("write inc".into());
                        }
                    }
                    if v.writes.len() > 1 {
                        f("several writes".into());
                    }
                    if v.quant.mvm_vector != p.target.numerics.mvm_vector
                        || v.quant.mfu_input != p.target.numerics.mfu_input
                    {
                        f("quant directive".into());
                    }
                }
            }
        }
        for lit in [
            "bfp(", "msfp(", "mx(", "fp(", "round = ", "_inc ", "] + ", "fp(8, 28", "fp(8, 30",
        ] {
            if g.source.contains(lit) || g.target_toml.contains(lit) {
                f(format!("text {lit}"));
            }
        }
    }
    let mut want: Vec<String> = vec![
        "native 4",
        "native 8",
        "native 16",
        "mfus 1",
        "mfus 2",
        "mfus 3",
        "accumulation Exact",
        "accumulation Fp32Seq",
        "accumulation Fp16Seq",
        "storage mant Some(10)",
        "storage mant Some(7)",
        "storage mant Some(23)",
        "storage NearestEven",
        "storage NearestAway",
        "storage TowardZero",
        "storage Stochastic",
        "mvm_output NearestAway",
        "mvm_output TowardZero",
        "mvm_output Stochastic",
        "mfu_input NearestAway",
        "mfu_input TowardZero",
        "mfu_input Stochastic",
        "mvm products exact, tile sums not",
        "mvm products not exact",
        "decl Matrix at true",
        "decl Vector at true",
        "decl Input at false",
        "decl Output at false",
        "decl Output at true",
        "pad Vector",
        "pad Input",
        "= 0",
        "decl quant Matrix",
        "decl quant Vector",
        "decl quant Input",
        "multi-row decl",
        "partial tile",
        "iterations",
        "matrix chain",
        "matrix chain inc",
        "read netq",
        "read dram",
        "read ivrf",
        "read asvrf",
        "read mulvrf",
        "window mv_mul=true",
        "window mv_mul=false",
        "read inc",
        "mv_mul",
        "mv_mul rows>1",
        "mv_mul cols>1",
        "mv_mul inc",
        "mfu 0",
        "mfu 1",
        "mfu 2",
        "write netq",
        "write dram",
        "write ivrf",
        "write asvrf",
        "write mulvrf",
        "write inc",
        "several writes",
        "quant directive",
        "text bfp(",
        "text msfp(",
        "text mx(",
        "text fp(",
        "text round = ",
        "text _inc ",
        "text ] + ",
        "text fp(8, 28",
        "text fp(8, 30",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for k in OpKind::ALL {
        want.push(format!("op {k:?}"));
    }
    let missing: Vec<&String> = want.iter().filter(|w| !seen.contains(*w)).collect();
    assert!(
        missing.is_empty(),
        "not covered by seeds 0..200: {missing:?}"
    );
}

/// The minimizer keeps what the predicate needs and drops the rest, and every step it keeps is
/// a valid program: the predicate "valid and has a `v_tanh`" must end at one small chain.
#[test]
fn minimizer_shrinks_to_the_cause() {
    let cfg = GenConfig::default();
    let valid_with_tanh = |s: &str, t: &str| {
        let Ok(target) = Target::from_toml(t, "gen.toml") else {
            return false;
        };
        match check(Arc::new(SourceFile::new("m.nnp", s)), Some(target)) {
            Ok(out) => out.program.chains.iter().any(|c| match &c.body {
                ChainBody::Vector(v) => v
                    .ops
                    .iter()
                    .any(|o| o.kind == OpKind::Table(nnp_numerics::Activation::Tanh)),
                ChainBody::Matrix(_) => false,
            }),
            Err(_) => false,
        }
    };
    let (seed, g) = (0..500)
        .map(|s| (s, generate(s, &cfg)))
        .find(|(_, g)| g.source.lines().count() > 25 && valid_with_tanh(&g.source, &g.target_toml))
        .expect("some seed has a v_tanh in a long program");
    let (src, toml) = minimize(&g.source, &g.target_toml, valid_with_tanh);
    assert!(
        valid_with_tanh(&src, &toml),
        "seed {seed}: minimized program lost the property"
    );
    let p = checked(&src, &toml);
    // One chain with the tanh (plus whatever feeds it cannot be removed: at most a few).
    assert!(
        p.chains.len() <= 2,
        "seed {seed}: still {} chains:\n{src}",
        p.chains.len()
    );
    assert!(
        src.lines().count() < g.source.lines().count() / 2,
        "seed {seed}: {} of {} lines left:\n{src}",
        src.lines().count(),
        g.source.lines().count()
    );
    assert!(src.contains("v_tanh"));
}

/// Minimized failures of the 10,000-program long run, kept as regressions (program, target,
/// data seed). Each failed before its fix:
/// - a vector declared `quant int(..., scale = f32)`: `k * s` is not an fp16 value, and the
///   graph fed it unrounded to the MVM while the machine stores (rounds) it first;
/// - one weight stack multiplied in an f32 matmul by one chain and in an f64 one by the next
///   (the rearranged-weight cache was keyed without the dtype);
/// - a declaration quantized to values beyond fp16 (the emulator kept them as f32);
/// - from the generator's storage formats and float roundings (2026-11-24): a bf16 sum
///   rounded toward zero (`sigm` then `vv_add`: the f64 sum of values far apart rounded first),
///   a softmax's `x_i - m` rounded toward zero with fp32 storage (the f64 difference), and
///   an MVM output rounded stochastically (the draw hashed how each engine wrote the sum).
#[test]
fn long_run_regressions() {
    let cases = [
        (
            "output y3 : [2, 4]\n\
             vector v6 : [16] at ivrf[35] quant int(bits = 5, scale = f32, per = row, round = zero)\n\
             matrix W4 : [16, 16] at mrf[26]\n\
             vector v2 : [48] at ivrf[24]\n\
             v_rd ivrf[24]\nv_wr netq\nend_chain\n\
             v_rd ivrf[v6]\nmv_mul mrf[W4]\nv_wr netq\nend_chain\n",
            "name = \"gen-8598\"\nnative = 16\nmfus = 1\n\n[memory]\nivrf = 48\nasvrf = 48\n\
             mulvrf = 40\nmrf = 40\ndram = 88\ndram_tiles = 24\n\n[numerics]\nstorage = \"fp16\"\n\
             mvm_vector = \"bf16\"\naccumulation = \"fp32-seq\"\n",
            8598,
        ),
        (
            "matrix W1 : [1, 3] at mrf[34]\n\
             vector v6 : [3, 8] at ivrf[10]\n\
             v_rd_inc ivrf[v6], 1\nmv_mul mrf[W1]\nv_wr_inc dram[20 + 5], 1\nend_chain\n\
             quant mvm.vector = fixed(int = 2, frac = 3, round = stochastic(seed = 764))\n\
             v_rd ivrf[v6 + 1] + -1\nmv_mul mrf[W1]\nv_wr ivrf[10] + -1\nend_chain\n",
            "name = \"gen-1052\"\nnative = 8\nmfus = 3\n\n[memory]\nivrf = 40\nasvrf = 32\n\
             mulvrf = 40\nmrf = 48\ndram = 88\ndram_tiles = 40\n\n[numerics]\nstorage = \"fp16\"\n\
             mvm_vector = \"msfp(mant = 5)\"\naccumulation = \"fp32-seq\"\n",
            1052,
        ),
        (
            // dynfixed picks a point position that rounds 65519 up to 65536: stored as fp16 it
            // is infinity on both engines (the emulator used to keep it as an f32).
            "vector v7 : [48] at ivrf[23] quant dynfixed(bits = 7, policy = overflow(ppm = 10000))\n\
             matrix W1 : [64, 44] at mrf[3]\n\
             s_wr cols, 3\nv_rd ivrf[23]\nmv_mul mrf[W1 + 3]\nv_wr ivrf[23]\nend_chain\n",
            "name = \"gen-188\"\nnative = 16\nmfus = 1\n\n[memory]\nivrf = 56\nasvrf = 24\n\
             mulvrf = 24\nmrf = 56\ndram = 88\ndram_tiles = 32\n\n[numerics]\nstorage = \"fp16\"\n\
             accumulation = \"exact\"\n",
            188,
        ),
        (
            "output y8 : [2, 10]\n\
             vector v6 : [9, 1] at dram[39]\n\
             vector v7 : [2, 12] at asvrf0[6]\n\
             quant mfu.input = fp(8, 7, round = zero)\n\
             s_wr rows, 3\ns_wr win_h, 3\ns_wr iterations, 2\n\
             v_rd_2d_inc dram[v6], 1\nv_sigm\nvv_add asvrf0[6] + 3\nv_wr dram[39] + 3\n\
             v_wr netq\nend_chain\n",
            "name = \"gen-1589\"\nnative = 4\nmfus = 3\n\n[memory]\nivrf = 56\nasvrf = 40\n\
             mulvrf = 48\nmrf = 40\ndram = 56\ndram_tiles = 40\n\n[numerics]\nstorage = \"fp16\"\n\
             accumulation = \"fp16-seq\"\n",
            1589,
        ),
        (
            "vector v4 : [9, 8] at dram[49]\n\
             s_wr rows, 3\ns_wr win_h, 3\n\
             v_rd_2d_inc dram[v4], 1\nv_softmax\nv_softmax\nv_wr asvrf2[29 + 7]\nend_chain\n",
            "name = \"gen-2624\"\nnative = 8\nmfus = 3\n\n[memory]\nivrf = 64\nasvrf = 40\n\
             mulvrf = 48\nmrf = 64\ndram = 80\ndram_tiles = 32\n\n[numerics]\nstorage = \"fp32\"\n\
             mfu_input = \"fp(8, 10, round = zero)\"\naccumulation = \"fp16-seq\"\n",
            2624,
        ),
        (
            "matrix W4 : [17, 32] at mrf[25]\n\
             output y5 : [1, 3]\n\
             vector v1 : [9, 22] at ivrf[3]\n\
             v_rd ivrf[8] + 1\nmv_mul mrf[W4]\nv_wr netq\nend_chain\n",
            "name = \"gen-769\"\nnative = 32\nmfus = 3\n\n[memory]\nivrf = 40\nasvrf = 24\n\
             mulvrf = 32\nmrf = 48\ndram = 56\ndram_tiles = 40\n\n[numerics]\n\
             storage = \"fp(8, 23, round = zero)\"\n\
             mvm_output = \"fp(5, 10, round = stochastic(seed = 494))\"\naccumulation = \"exact\"\n",
            769,
        ),
    ];
    for (source, toml, seed) in cases {
        let out = run_differential(source, toml, seed, BATCH, &DataConfig::default(), false);
        assert!(
            matches!(out, Outcome::Concordant { .. }),
            "seed {seed}: {out}\n{source}"
        );
    }
}
