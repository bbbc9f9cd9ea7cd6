//! What the kernels hand their partials to: the [`Sink`] trait, the running sums of a task
//! ([`Sums`], by [`Sum`] kind) and closures as sinks ([`Emit`], [`Adds`]).

use super::ROW_BLOCK;

/// What the kernel does with the partials of rows `r0..r0 + ROW_BLOCK` of one item, block by
/// block, while they are in registers or L1.
pub(super) trait Sink {
    fn take(&mut self, item: usize, r0: usize, p: &[i32; ROW_BLOCK]);

    /// The sums a [`Sums`] sink adds into, for the SIMD kernel's own vector epilogue; `None`
    /// for every other sink.
    fn sums(&mut self) -> Option<Epilogue<'_>> {
        None
    }

    /// Whether the sink only adds its partials to running sums, so that the kernel may skip
    /// row blocks without a nonzero weight: a zero added changes nothing (an `i32`, or an f64
    /// sum, which is never -0.0: it starts at +0.0, and x + y is -0.0 only when both are).
    fn adds(&self) -> bool {
        false
    }
}

/// Running sums of one task over the tile columns: `s[item * n + r] += term(P, w[r],
/// x[item])`, with the factors of the current tile column per row (`w`) and per item (`x`).
/// Plain f64 sums of the scaled partials (`w`, `x` the scales `2^u`; the common case of
/// `exact` accumulation), or integer sums on common units (`w`, `x` the shifts of
/// [`Aligned`](super::runs::Aligned)): `i32` where [`int_sums`](super::product::int_sums) bounds
/// them below `2^31`, `i64` below `2^63`. The SIMD kernel does the same in vector registers. `n` is
/// the sums per item: the tile's N, or fewer where the rows after them have no nonzero weight
/// (`live_rows` of [`IntWeights`](super::IntWeights); the kernel skips such row blocks for this
/// sink, whose partials would add zeros).
pub(super) struct Sums<'a, S: Sum> {
    pub(super) s: &'a mut [S],
    pub(super) w: &'a [S::Factor],
    pub(super) x: &'a [S::Factor],
    pub(super) n: usize,
}

/// A sum of [`Sums`]: what one partial adds, from its row's and its item's factors.
pub(super) trait Sum: Copy + std::ops::AddAssign + Sized {
    type Factor: Copy + 'static;
    fn term(p: i32, w: Self::Factor, x: Self::Factor) -> Self;
    fn epilogue<'a>(sums: Sums<'a, Self>) -> Epilogue<'a>;
}

impl Sum for f64 {
    type Factor = f64;
    #[inline(always)]
    fn term(p: i32, w: f64, x: f64) -> f64 {
        f64::from(p) * w * x
    }
    fn epilogue<'a>(sums: Sums<'a, f64>) -> Epilogue<'a> {
        Epilogue::Plain(sums)
    }
}

impl Sum for i32 {
    type Factor = i32;
    #[inline(always)]
    fn term(p: i32, w: i32, x: i32) -> i32 {
        p << (w + x)
    }
    fn epilogue<'a>(sums: Sums<'a, i32>) -> Epilogue<'a> {
        Epilogue::Int(sums)
    }
}

impl Sum for i64 {
    type Factor = i32;
    #[inline(always)]
    fn term(p: i32, w: i32, x: i32) -> i64 {
        i64::from(p) << (w + x)
    }
    fn epilogue<'a>(sums: Sums<'a, i64>) -> Epilogue<'a> {
        Epilogue::Wide(sums)
    }
}

/// The sums of a [`Sums`] sink, by kind.
pub(super) enum Epilogue<'a> {
    Plain(Sums<'a, f64>),
    Int(Sums<'a, i32>),
    Wide(Sums<'a, i64>),
}

impl<S: Sum> Sums<'_, S> {
    /// Whether rows `r0..r0 + ROW_BLOCK` of items `b0..b0 + items` lie inside every buffer.
    pub(super) fn covers(&self, r0: usize, b0: usize, items: usize) -> bool {
        self.w.len() >= r0 + ROW_BLOCK
            && r0 + ROW_BLOCK <= self.n
            && self.x.len() >= b0 + items
            && self.s.len() >= (b0 + items) * self.n
    }
}

impl<S: Sum> Sink for Sums<'_, S> {
    #[inline(always)]
    fn take(&mut self, item: usize, r0: usize, p: &[i32; ROW_BLOCK]) {
        let (w, x) = (&self.w[r0..][..ROW_BLOCK], self.x[item]);
        let s = &mut self.s[item * self.n + r0..][..ROW_BLOCK];
        for k in 0..ROW_BLOCK {
            s[k] += S::term(p[k], w[k], x);
        }
    }

    fn sums(&mut self) -> Option<Epilogue<'_>> {
        Some(S::epilogue(Sums {
            s: &mut *self.s,
            w: self.w,
            x: self.x,
            n: self.n,
        }))
    }

    fn adds(&self) -> bool {
        true
    }
}

/// A closure as a sink (the rarer accumulation paths, tests).
pub(super) struct Emit<F>(pub(super) F);

impl<F: FnMut(usize, usize, &[i32; ROW_BLOCK])> Sink for Emit<F> {
    #[inline]
    fn take(&mut self, item: usize, r0: usize, p: &[i32; ROW_BLOCK]) {
        (self.0)(item, r0, p)
    }
}

/// A closure that adds the partials to running sums, as a sink ([`Sink::adds`]).
pub(super) struct Adds<F>(pub(super) F);

impl<F: FnMut(usize, usize, &[i32; ROW_BLOCK])> Sink for Adds<F> {
    #[inline]
    fn take(&mut self, item: usize, r0: usize, p: &[i32; ROW_BLOCK]) {
        (self.0)(item, r0, p)
    }

    fn adds(&self) -> bool {
        true
    }
}
