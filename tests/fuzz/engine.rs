//! The loop every target shares: the corpus replayed, then seeded mutants for a number of cases
//! or seconds, each case's panics caught, failing inputs written out, a summary printed.

use super::common::{env_u64, root};
use nnp_progen::Rng;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `tests/fuzz/corpus/KIND`: inputs that once found a bug, and seeds of the mutations.
pub fn corpus_dir(kind: &str) -> PathBuf {
    root().join("tests/fuzz/corpus").join(kind)
}

/// Every file of `corpus_dir(kind)` ending in `.ext`, in name order: (name, bytes).
pub fn corpus(kind: &str, ext: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(kind);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(&format!(".{ext}")))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let name = p
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into());
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, bytes)
        })
        .collect()
}

/// How long a target runs: `NNPC_FUZZ_SECONDS` (each target for that long) or
/// `NNPC_FUZZ_CASES` (cases per target), else the target's default count; from case
/// `NNPC_FUZZ_SEED` (default 0) on.
pub struct Budget {
    cases: u64,
    seconds: Option<Duration>,
    pub seed: u64,
}

impl Budget {
    pub fn from_env(default_cases: u64) -> Budget {
        let seconds = std::env::var("NNPC_FUZZ_SECONDS").ok();
        Budget {
            cases: env_u64("NNPC_FUZZ_CASES", default_cases),
            seconds: seconds
                .and_then(|s| s.trim().parse().ok())
                .map(Duration::from_secs_f64),
            seed: env_u64("NNPC_FUZZ_SEED", 0),
        }
    }

    fn more(&self, done: u64, start: Instant) -> bool {
        match self.seconds {
            Some(limit) => start.elapsed() < limit,
            None => done < self.cases,
        }
    }
}

/// One input a target checks: its bytes (what a failure writes out) and a file extension.
pub trait Input {
    fn bytes(&self) -> Vec<u8>;
    fn ext(&self) -> &'static str;
}

/// What a case that held its property did (counted in the summary).
pub type Verdict = &'static str;

/// Check every corpus input, then mutants `make(seed, rng)` from `budget.seed` on, with
/// `check`; fail with the first failures (their seeds and inputs written to
/// `target/fuzz-failures/`). A panic in `check` is a failure.
pub fn fuzz<I: Input>(
    target: &str,
    budget: &Budget,
    corpus: &[(String, I)],
    make: impl Fn(u64, &mut Rng) -> I,
    check: impl Fn(&I, u64) -> Result<Verdict, String>,
) {
    let start = Instant::now();
    let mut verdicts: BTreeMap<Verdict, u64> = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    let mut slowest = (Duration::ZERO, String::new());
    let mut run = |label: String, input: &I, seed: u64| {
        let t0 = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| check(input, seed)));
        let took = t0.elapsed();
        if took > slowest.0 {
            slowest = (took, label.clone());
        }
        let what = match outcome {
            Ok(Ok(v)) => {
                *verdicts.entry(v).or_default() += 1;
                return;
            }
            Ok(Err(e)) => e,
            Err(p) => format!("panicked: {}", panic_text(&p)),
        };
        let file = save(target, &label, input);
        failures.push(format!("{label} (input in {}): {what}", file.display()));
    };
    for (name, input) in corpus {
        run(format!("corpus {name}"), input, 0);
    }
    let mut done = 0;
    while budget.more(done, start) {
        let seed = budget.seed + done;
        let mut rng = Rng::keyed(seed, target);
        let input = make(seed, &mut rng);
        run(format!("seed {seed}"), &input, seed);
        done += 1;
    }
    let counts: Vec<String> = verdicts.iter().map(|(v, n)| format!("{n} {v}")).collect();
    eprintln!(
        "fuzz {target}: {} corpus inputs and {done} mutants (seeds {}..{}) in {:.1} s: {}; \
         slowest {:.2} s ({}); {} failing",
        corpus.len(),
        budget.seed,
        budget.seed + done,
        start.elapsed().as_secs_f64(),
        counts.join(", "),
        slowest.0.as_secs_f64(),
        slowest.1,
        failures.len()
    );
    if !failures.is_empty() {
        let shown: Vec<&str> = failures.iter().take(5).map(String::as_str).collect();
        panic!(
            "fuzz {target}: {} failing (reproduce one with NNPC_FUZZ_SEED=S NNPC_FUZZ_CASES=1):\n{}",
            failures.len(),
            shown.join("\n")
        );
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Write a failing input to `target/fuzz-failures/TARGET-LABEL.EXT`.
fn save<I: Input>(target: &str, label: &str, input: &I) -> PathBuf {
    let dir = root().join("target/fuzz-failures");
    let name: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let path = dir.join(format!("{target}-{name}.{}", input.ext()));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(&path, input.bytes());
    path
}

/// Numbers a mutation puts in place of another: the edges of every integer width a reader
/// might hold them in, and small ones.
pub const EDGES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "255",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "100000000000000000000000000000",
];

/// `n` with one of its small variations (one more or less, double, half) or an edge.
pub fn vary(n: u64, rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => n.saturating_add(1).to_string(),
        1 => n.saturating_sub(1).to_string(),
        2 => n.saturating_mul(2).to_string(),
        3 => (n / 2).to_string(),
        _ => rng.pick(EDGES).to_string(),
    }
}

/// Flip one random bit of one random byte in `bytes[range]` (nothing if it is empty).
pub fn flip_bit(bytes: &mut [u8], range: std::ops::Range<usize>, rng: &mut Rng) {
    if range.start < range.end && range.end <= bytes.len() {
        let i = range.start + rng.below((range.end - range.start) as u64) as usize;
        bytes[i] ^= 1 << rng.below(8);
    }
}
