//! The machine's int8 peak ([`int8_peak`]): a loop on the CPU's best integer multiply-add
//! instruction whose operands never leave registers, on every thread of rayon's global pool
//! (the pool the executor's products run on), with enough independent accumulators that it is
//! bound by the instruction's throughput, not by its latency. What the products could reach if
//! they did nothing but multiply-add: the graph's and the products' fractions of it say how
//! close they are (`nnpc bench`).

use std::hint::black_box;
use std::time::Instant;

/// The instruction a peak probe runs ([`PeakKernel::best`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeakKernel {
    /// AVX-512 VNNI `vpdpbusd`: 64 u8 x i8 multiply-adds an instruction, the accumulation
    /// fused (the instruction of the integer kernel's byte path, `intdot::Kernel::Vnni`).
    Vnni,
    /// AVX2 `vpmaddubsw` (32 u8 x i8 products, added in pairs to `i16`), `vpmaddwd` by ones
    /// (to `i32`) and `vpaddd`: 32 multiply-adds per three instructions, the best AVX2 has for
    /// bytes (the integer kernel's AVX2 path multiplies `i16`, 16 a `vpmaddwd`).
    Avx2,
    /// Scalar `i32` multiply-adds: an estimate only, on a CPU with neither (the compiler may
    /// vectorise the loop; no int8 instruction is measured).
    Scalar,
}

/// Independent accumulators of the VNNI loop: 16 of the 32 `zmm` registers, more than the
/// instruction's latency times its throughput on current cores (5 x 2).
const VNNI_ACC: usize = 16;
/// Independent accumulators of the AVX2 loop: 6 accumulators and their 6 inputs, with the
/// constants and one temporary, fill the 16 `ymm` registers.
const AVX2_ACC: usize = 6;
/// Independent accumulators of the scalar loop.
const SCALAR_ACC: usize = 8;

impl PeakKernel {
    /// The best instruction this CPU has.
    pub fn best() -> PeakKernel {
        #[cfg(target_arch = "x86_64")]
        {
            // The CPU's own features, not `Kernel::best` (which `NNPC_INT_KERNEL` may cap).
            if crate::intdot::vnni() {
                return PeakKernel::Vnni;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return PeakKernel::Avx2;
            }
        }
        PeakKernel::Scalar
    }

    /// What the probe ran, in words.
    pub fn name(self) -> &'static str {
        match self {
            PeakKernel::Vnni => "AVX-512 VNNI vpdpbusd",
            PeakKernel::Avx2 => "AVX2 vpmaddubsw + vpmaddwd",
            PeakKernel::Scalar => "scalar i32 multiply-add (an estimate, no int8 instruction)",
        }
    }

    /// Multiply-adds of one round of the probe's loop.
    fn macs_per_round(self) -> u64 {
        match self {
            PeakKernel::Vnni => 64 * VNNI_ACC as u64,
            PeakKernel::Avx2 => 32 * AVX2_ACC as u64,
            PeakKernel::Scalar => SCALAR_ACC as u64,
        }
    }

    /// `rounds` rounds of the probe on this thread; the accumulators' sum, which depends on
    /// every round (so that no round can be left out).
    fn rounds(self, rounds: u64) -> i64 {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `best` chose Vnni only where AVX-512F and AVX-512 VNNI are present.
            PeakKernel::Vnni => unsafe { x86::vnni(rounds) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `best` chose Avx2 only where AVX2 is present.
            PeakKernel::Avx2 => unsafe { x86::avx2(rounds) },
            _ => scalar(rounds),
        }
    }
}

/// The int8 peak a probe measured.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    pub kernel: PeakKernel,
    /// The threads that ran it at once (rayon's global pool).
    pub threads: usize,
    /// Multiply-adds per second, all threads together: the best of the timed probes.
    pub macs_per_second: f64,
}

/// Seconds one timed probe takes, about: long enough that starting the threads is noise.
const PROBE_S: f64 = 0.03;

/// The int8 peak of this machine: `reps` (at least 1) timed probes of the best instruction
/// ([`PeakKernel::best`]) on every thread of rayon's global pool at once, after one that sizes
/// them; the best rate (a peak is what the machine can do, not what it does on average).
pub fn int8_peak(reps: usize) -> Peak {
    let kernel = PeakKernel::best();
    Peak {
        kernel,
        threads: rayon::current_num_threads(),
        macs_per_second: best_rate(reps, kernel.macs_per_round(), |r| kernel.rounds(r) as f64),
    }
}

/// The f32 FMA peak a probe measured ([`f32_fma_peak`]).
#[derive(Clone, Copy, Debug)]
pub struct FmaPeak {
    /// What the probe ran, in words.
    pub instruction: &'static str,
    /// The threads that ran it at once (rayon's global pool).
    pub threads: usize,
    /// Floating-point operations per second (2 an FMA lane), all threads together.
    pub flops_per_second: f64,
}

/// The f32 FMA peak of this machine, as [`int8_peak`] measures the int8 one: `vfmadd` on 512
/// bits (AVX-512F) or 256 bits (AVX2 and FMA) with `FMA_ACC` independent accumulators in
/// registers; `None` on a CPU with neither (what the plain f32 floor, candle's matmul, reaches
/// is then not compared).
pub fn f32_fma_peak(reps: usize) -> Option<FmaPeak> {
    #[cfg(target_arch = "x86_64")]
    {
        let threads = rayon::current_num_threads();
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F is present (checked just above).
            let run = |r: u64| unsafe { x86::fma512(r) };
            return Some(FmaPeak {
                instruction: "AVX-512F vfmadd231ps",
                threads,
                flops_per_second: best_rate(reps, 2 * 16 * FMA_ACC as u64, run),
            });
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: AVX2 and FMA are present (checked just above).
            let run = |r: u64| unsafe { x86::fma256(r) };
            return Some(FmaPeak {
                instruction: "AVX2 vfmadd231ps",
                threads,
                flops_per_second: best_rate(reps, 2 * 8 * FMA_ACC as u64, run),
            });
        }
    }
    let _ = reps;
    None
}

/// Independent accumulators of the FMA loops: 12 of the 16 `ymm` registers, more than an FMA's
/// latency times its throughput on current cores (4 x 2).
const FMA_ACC: usize = 12;

/// The best rate of `reps` (at least 1) timed probes of `rounds` (which runs that many rounds
/// of `per_round` operations on its thread) on every thread of rayon's global pool at once,
/// after one that sizes them to about [`PROBE_S`].
fn best_rate(reps: usize, per_round: u64, rounds: impl Fn(u64) -> f64 + Sync) -> f64 {
    let threads = rayon::current_num_threads();
    let probe = |n: u64| {
        let t = Instant::now();
        let sums = rayon::broadcast(|_| rounds(black_box(n)));
        black_box(sums);
        t.elapsed().as_secs_f64()
    };
    let trial = 1 << 16;
    let secs = probe(trial).max(1e-9);
    let n = ((trial as f64 * PROBE_S / secs) as u64).max(trial);
    let ops = (n * per_round) as f64 * threads as f64;
    let best = (0..reps.max(1))
        .map(|_| probe(n))
        .fold(f64::INFINITY, f64::min);
    ops / best.max(1e-12)
}

/// [`PeakKernel::Scalar`]'s rounds.
fn scalar(rounds: u64) -> i64 {
    let (a, b) = (black_box(3i32), black_box(5i32));
    let mut acc = [0i32; SCALAR_ACC];
    let mut x: [i32; SCALAR_ACC] = std::array::from_fn(|k| k as i32);
    for _ in 0..rounds {
        for (s, v) in acc.iter_mut().zip(x.iter_mut()) {
            *s = s.wrapping_add(v.wrapping_mul(b));
            *v = v.wrapping_add(a);
        }
    }
    black_box(acc).iter().map(|&s| i64::from(s)).sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{AVX2_ACC, FMA_ACC, VNNI_ACC};
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// The sum of every lane of the accumulators `acc` (through black_box: they leave the
    /// registers once, at the end), each register's `K` lanes written out by `store`.
    fn lane_sum<V: Copy, L: Copy + Default, T: std::iter::Sum + From<L>, const K: usize>(
        acc: &[V],
        store: impl Fn(&mut [L; K], V),
    ) -> T {
        black_box(acc)
            .iter()
            .flat_map(|&v| {
                let mut lanes = [L::default(); K];
                store(&mut lanes, v);
                lanes
            })
            .map(T::from)
            .sum()
    }

    /// `rounds` rounds of `VNNI_ACC` independent `vpdpbusd`, each adding `4 * 2 * 3` to every
    /// lane: the accumulators are the only values that change, so no instruction can be
    /// hoisted out of the loop, and their sum is returned.
    ///
    /// # Safety
    /// AVX-512F and AVX-512 VNNI must be present.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn vnni(rounds: u64) -> i64 {
        // The operands through black_box: the compiler cannot know them, so it cannot fold
        // the multiply-adds into one multiplication by `rounds`.
        let a = _mm512_set1_epi8(black_box(2));
        let b = _mm512_set1_epi8(black_box(3));
        let mut acc = [_mm512_setzero_si512(); VNNI_ACC];
        for _ in 0..rounds {
            for s in acc.iter_mut() {
                *s = _mm512_dpbusd_epi32(*s, a, b);
            }
        }
        // SAFETY: `lanes` holds 16 i32, one 512-bit store; AVX-512F is present.
        lane_sum::<_, i32, i64, 16>(&acc, |lanes, s| unsafe {
            _mm512_storeu_si512(lanes.as_mut_ptr().cast(), s)
        })
    }

    /// `rounds` rounds of `AVX2_ACC` independent `vpmaddubsw` + `vpmaddwd` + `vpaddd`. The
    /// instructions have no accumulating form, so each reads an input that a `vpaddb` moves
    /// every round (on another port than the multiplies on current cores): else the products
    /// of the loop-invariant operands would be hoisted out of it.
    ///
    /// # Safety
    /// AVX2 must be present.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2(rounds: u64) -> i64 {
        let step = _mm256_set1_epi8(black_box(1));
        let b = _mm256_set1_epi8(black_box(3));
        let ones = _mm256_set1_epi16(1);
        let mut x: [__m256i; AVX2_ACC] =
            std::array::from_fn(|k| _mm256_set1_epi8(black_box(k as i8)));
        let mut acc = [_mm256_setzero_si256(); AVX2_ACC];
        for _ in 0..rounds {
            for (s, v) in acc.iter_mut().zip(x.iter_mut()) {
                let pairs = _mm256_maddubs_epi16(*v, b);
                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(pairs, ones));
                *v = _mm256_add_epi8(*v, step);
            }
        }
        // SAFETY: `lanes` holds 8 i32, one 256-bit store; AVX2 is present.
        lane_sum::<_, i32, i64, 8>(&acc, |lanes, s| unsafe {
            _mm256_storeu_si256(lanes.as_mut_ptr().cast(), s)
        })
    }

    /// `rounds` rounds of `FMA_ACC` independent `vfmadd231ps` on 16 lanes: `acc = acc * a + b`,
    /// `a = 1` and `b = 0.5` through black_box; the accumulators' sum (exact while `rounds`
    /// stays below 2^24).
    ///
    /// # Safety
    /// AVX-512F must be present.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fma512(rounds: u64) -> f64 {
        let a = _mm512_set1_ps(black_box(1.0));
        let b = _mm512_set1_ps(black_box(0.5));
        let mut acc = [_mm512_setzero_ps(); FMA_ACC];
        for _ in 0..rounds {
            for s in acc.iter_mut() {
                *s = _mm512_fmadd_ps(*s, a, b);
            }
        }
        // SAFETY: `lanes` holds 16 f32, one 512-bit store; AVX-512F is present.
        lane_sum::<_, f32, f64, 16>(&acc, |lanes, s| unsafe {
            _mm512_storeu_ps(lanes.as_mut_ptr(), s)
        })
    }

    /// [`fma512`] on 8 lanes (`ymm`).
    ///
    /// # Safety
    /// AVX2 and FMA must be present.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma256(rounds: u64) -> f64 {
        let a = _mm256_set1_ps(black_box(1.0));
        let b = _mm256_set1_ps(black_box(0.5));
        let mut acc = [_mm256_setzero_ps(); FMA_ACC];
        for _ in 0..rounds {
            for s in acc.iter_mut() {
                *s = _mm256_fmadd_ps(*s, a, b);
            }
        }
        // SAFETY: `lanes` holds 8 f32, one 256-bit store; AVX is present.
        lane_sum::<_, f32, f64, 8>(&acc, |lanes, s| unsafe {
            _mm256_storeu_ps(lanes.as_mut_ptr(), s)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probes compute what they claim: the accumulators' sums by hand, for each probe
    /// this CPU can run.
    #[test]
    fn the_probes_compute_their_multiply_adds() {
        let rounds = 1000u64;
        #[cfg(target_arch = "x86_64")]
        {
            // Every lane of every accumulator adds 4 products 2 * 3 a round.
            if PeakKernel::best() == PeakKernel::Vnni {
                let want = (VNNI_ACC * 16) as i64 * rounds as i64 * 24;
                assert_eq!(PeakKernel::Vnni.rounds(rounds), want);
            }
            // Each of the 8 i32 lanes of accumulator j adds 2 i16 lanes of 2 products
            // v * 3 at round t, v = j + t as a byte (far from i16's saturation).
            if std::arch::is_x86_feature_detected!("avx2") {
                let mut want = 0i64;
                for j in 0..AVX2_ACC as i64 {
                    for t in 0..rounds as i64 {
                        want += 8 * 2 * 2 * i64::from((j + t) as u8) * 3;
                    }
                }
                assert_eq!(PeakKernel::Avx2.rounds(rounds), want);
            }
        }
        // The scalar loop: accumulator k adds (k + 3 t) * 5 at round t (no wrap here).
        let want: i64 = (0..SCALAR_ACC as i64)
            .map(|k| (0..rounds as i64).map(|t| (k + 3 * t) * 5).sum::<i64>())
            .sum();
        assert_eq!(scalar(rounds), want);
    }

    /// The FMA probes add 0.5 to every lane of every accumulator a round.
    #[test]
    fn the_fma_probes_compute_their_multiply_adds() {
        let want = (FMA_ACC * 1000) as f64 * 0.5;
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: AVX-512F is present (checked just above).
                assert_eq!(unsafe { x86::fma512(1000) }, 16.0 * want);
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: AVX2 and FMA are present (checked just above).
                assert_eq!(unsafe { x86::fma256(1000) }, 8.0 * want);
            }
        }
        let p = f32_fma_peak(1);
        assert!(p.is_none_or(|p| p.flops_per_second > 0.0));
    }

    #[test]
    fn the_peak_is_a_positive_rate_on_every_thread() {
        let p = int8_peak(1);
        assert_eq!(p.kernel, PeakKernel::best());
        assert_eq!(p.threads, rayon::current_num_threads());
        assert!(p.macs_per_second.is_finite() && p.macs_per_second > 0.0);
    }
}
