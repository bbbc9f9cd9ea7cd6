//! The pool's other threads kept awake through a run: each takes the run's parallel work as
//! it comes instead of parking between ops and being woken for each (a wake-up is tens of
//! microseconds on a virtual machine, about what an op of a small pass takes).

use rayon::Yield;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

thread_local! {
    /// The runs this thread is the home of (their passes are on its stack, under whatever it
    /// runs while it waits for a parallel loop).
    static HOSTING: Cell<usize> = const { Cell::new(0) };
}

/// A helper that finds no work for this long goes back to the pool: a run's serial stretches
/// (an LSTM step's MFU work at batch 1) are shorter, and a helper that runs on a thread that
/// some other caller's wait lent it holds that thread no longer than this.
const IDLE: Duration = Duration::from_micros(200);

/// Until dropped, helpers spawned on `scope` (one per other thread of the pool) run the
/// pool's pending work ([`rayon::yield_now`]).
pub(super) struct Awake<'a> {
    done: &'a AtomicBool,
}

impl<'a> Awake<'a> {
    /// Helpers for the run on this thread, on `scope`, that stop when the result is dropped
    /// (and `done` is set).
    pub fn start<'s>(scope: &rayon::Scope<'s>, done: &'s AtomicBool) -> Awake<'s> {
        HOSTING.set(HOSTING.get() + 1);
        for _ in 1..rayon::current_num_threads() {
            scope.spawn(move |_| help(done));
        }
        Awake { done }
    }
}

impl Drop for Awake<'_> {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        HOSTING.set(HOSTING.get().saturating_sub(1));
    }
}

/// Run pending work until `done`, or until none comes for [`IDLE`]. Not on a thread that is
/// some run's home (this one's, or another's waiting in a parallel loop): there it would hold
/// that run's stack under it.
fn help(done: &AtomicBool) {
    if HOSTING.get() > 0 {
        return;
    }
    // The clock is read once every 64 idle rounds (a round is well under a microsecond).
    let (mut idle_since, mut rounds) = (Instant::now(), 0u32);
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(Yield::Executed) => rounds = 0,
            Some(Yield::Idle) => {
                if rounds == 0 {
                    idle_since = Instant::now();
                } else if rounds % 64 == 0 && idle_since.elapsed() > IDLE {
                    return;
                }
                rounds = rounds.wrapping_add(1);
                std::hint::spin_loop();
            }
            None => return,
        }
    }
}
