//! The graph's exact sums are `nnp_numerics::sums::Expansion`s (Shewchuk expansions of
//! two-sums); this is their one rounding by a session's `Rounder`, the same bits as the
//! format's reference rounding, faster where the sum is one f64.

use super::quant::Rounder;
use nnp_numerics::FloatFormat;
use nnp_numerics::sums::Expansion;

/// `sum` rounded once to `fmt` by `rounder` (one of `fmt`'s); an exact zero is `+0` (the
/// hardware's integer accumulator has no signed zero).
#[inline]
pub(crate) fn round_with(sum: &Expansion, rounder: &Rounder, fmt: &FloatFormat) -> f64 {
    sum.round_by(fmt, |v| rounder.round(v))
}
