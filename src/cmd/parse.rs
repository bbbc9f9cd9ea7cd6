//! Value parsers of flags.

/// A count flag's value (`--batch`, `--reps`, `--native`, ...): a positive integer. 0 is a
/// usage error naming the flag (clap adds it), not a silent 1.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
