//! The ISA table: every mnemonic of docs/language.md and what it means.

use crate::ops::OpKind;
use serde::{Deserialize, Serialize};

/// Memories of docs/language.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mem {
    Netq,
    Dram,
    Ivrf,
    Mrf,
    /// Add/sub operand VRF of MFU k.
    AsVrf(u8),
    /// Multiply operand VRF of MFU k.
    MulVrf(u8),
}

impl std::fmt::Display for Mem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mem::Netq => f.write_str("netq"),
            Mem::Dram => f.write_str("dram"),
            Mem::Ivrf => f.write_str("ivrf"),
            Mem::Mrf => f.write_str("mrf"),
            Mem::AsVrf(k) => write!(f, "asvrf{k}"),
            Mem::MulVrf(k) => write!(f, "mulvrf{k}"),
        }
    }
}

/// What an instruction does (independent of its `_inc` spelling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// `v_rd SRC`
    VRd,
    /// `v_rd_2d ivrf[a]`: a `win_h x win_w` window of tiles.
    VRd2d,
    /// `mv_mul mrf[a]`
    MvMul,
    /// An MFU op (`vv_*` with an operand, or an activation).
    Mfu(OpKind),
    /// `v_wr DST`
    VWr,
    /// `m_rd dram[a]`
    MRd,
    /// `m_wr mrf[a]`
    MWr,
    /// `s_wr REG, VALUE`
    SWr,
    /// `end_chain`
    EndChain,
}

impl Op {
    /// True when the instruction's first operand is a memory address (and so has an `_inc`
    /// spelling). `v_rd`/`v_wr` take one too (they may name `netq`, which has none).
    pub fn takes_address(self) -> bool {
        match self {
            Op::VRd | Op::VRd2d | Op::MvMul | Op::VWr | Op::MRd | Op::MWr => true,
            Op::Mfu(k) => k.has_operand(),
            Op::SWr | Op::EndChain => false,
        }
    }
}

/// A classified mnemonic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mnemonic {
    pub op: Op,
    /// The `_inc` spelling: the increment is the instruction's last operand.
    pub inc: bool,
}

/// Base mnemonics (without `_inc`) of the instructions before the MFU ops, and after them.
const READS: &[(&str, Op)] = &[
    ("v_rd", Op::VRd),
    ("v_rd_2d", Op::VRd2d),
    ("mv_mul", Op::MvMul),
];
const WRITES: &[(&str, Op)] = &[
    ("v_wr", Op::VWr),
    ("m_rd", Op::MRd),
    ("m_wr", Op::MWr),
    ("s_wr", Op::SWr),
    ("end_chain", Op::EndChain),
];

/// Every base mnemonic (without `_inc`) with its op, in the order of docs/language.md: the
/// reads and the multiply, the MFU ops ([`OpKind::ALL`]), then the rest.
pub fn base_mnemonics() -> impl Iterator<Item = (&'static str, Op)> {
    let mfu = OpKind::ALL.into_iter().map(|k| (k.mnemonic(), Op::Mfu(k)));
    READS
        .iter()
        .copied()
        .chain(mfu)
        .chain(WRITES.iter().copied())
}

/// The op of a base mnemonic.
fn base(name: &str) -> Option<Op> {
    match OpKind::from_mnemonic(name) {
        Some(k) => Some(Op::Mfu(k)),
        None => (READS.iter().chain(WRITES))
            .find(|(n, _)| *n == name)
            .map(|&(_, op)| op),
    }
}

/// Classify an identifier at the start of an instruction.
pub fn lookup(name: &str) -> Option<Mnemonic> {
    if let Some(op) = base(name) {
        return Some(Mnemonic { op, inc: false });
    }
    let op = base(name.strip_suffix("_inc")?)?;
    op.takes_address().then_some(Mnemonic { op, inc: true })
}

/// Every mnemonic spelling, `_inc` forms included.
pub fn all_mnemonics() -> impl Iterator<Item = String> {
    base_mnemonics().flat_map(|(n, op)| {
        let inc = op.takes_address().then(|| format!("{n}_inc"));
        std::iter::once(n.to_string()).chain(inc)
    })
}

/// Levenshtein distance (small strings only).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate nearest to `name` by edit distance, if it is close enough to be a likely typo.
pub fn nearest<I, S>(name: &str, candidates: I) -> Option<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let limit = (name.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c.as_ref()), c.as_ref().to_string()))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        assert_eq!(
            lookup("v_rd_inc"),
            Some(Mnemonic {
                op: Op::VRd,
                inc: true
            })
        );
        assert_eq!(lookup("v_relu_inc"), None);
        assert_eq!(lookup("end_chain_inc"), None);
        assert_eq!(all_mnemonics().count(), 19 + 11);
        assert_eq!(base_mnemonics().count(), 19);
        assert_eq!(
            nearest("v_sigmoid", all_mnemonics()).as_deref(),
            Some("v_sigm")
        );
        assert_eq!(
            nearest("mv_mull", all_mnemonics()).as_deref(),
            Some("mv_mul")
        );
        assert_eq!(nearest("zzzzzz", all_mnemonics()), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
