//! How nnpc's processes use memory: large buffers stay on the heap, and large blocks ask for
//! transparent huge pages. `nnpc`'s `main`, the criterion benchmarks and the Python extension
//! (at import) set both up the same way, so that their timings compare. `NNPC_MALLOC=system`
//! leaves glibc's own settings.

/// Every graph op allocates and frees its output tensor (512 KiB for the LSTM benchmark at
/// batch 64). glibc maps blocks above 128 KiB with `mmap` and unmaps them on free, so each op
/// page-faulted its output in again: a third of an MFU op's time. Serving blocks up to 32 MiB
/// (glibc's largest threshold) from the heap, and not trimming it, reuses the pages.
///
/// A run executes on one of rayon's threads, whose blocks come from its own arena, in heaps of
/// up to 64 MiB; glibc unmaps a heap that empties, whatever the trim threshold, unless the heap
/// before it lacks the top padding in free room. 64 MiB of padding keeps every heap (fourteen
/// 64 MiB unmaps in ten warm LSTM runs became one), so the next run's buffers reuse its pages.
///
/// The settings are the process's (glibc's), so the Python extension's import also keeps the
/// caller's large arrays on the heap: the memory a process frees stays in it for reuse (up
/// to the trim threshold, 512 MiB). With `NNPC_MALLOC=system` in the environment, nothing is
/// changed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn keep_large_buffers_on_the_heap() {
    if std::env::var_os("NNPC_MALLOC").is_some_and(|v| v == "system") {
        return;
    }
    // SAFETY: `mallopt` only sets allocator parameters, under the main arena's lock; another
    // thread allocating meanwhile reads each parameter (one word) as before or after. A
    // refused value (return 0) leaves glibc's default, which is only slower.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

/// Nothing to tune outside glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn keep_large_buffers_on_the_heap() {}

/// Hand the free memory that [`keep_large_buffers_on_the_heap`] keeps for reuse (every
/// arena's free blocks and top padding) back to the system, so that the resident set is the
/// memory in use (`nnpc bench`'s memory of a session alone). The next run faults its buffers
/// in again.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() {
    // SAFETY: malloc_trim only returns free memory of glibc's arenas to the system.
    unsafe { libc::malloc_trim(0) };
}

/// Nothing is kept for reuse outside glibc's tuning.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() {}

/// The system allocator, asking for transparent huge pages on large blocks: a weight stack
/// (hundreds of MiB, written once as it is prepared) then faults in 2 MiB at a time instead of
/// 4 KiB, where the kernel allows it (`transparent_hugepage` = `madvise` or `always`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub struct HugePages;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
impl HugePages {
    const MIN: usize = 8 << 20;

    /// Advise the whole 2 MiB pages inside `[p, p + len)` of a block of at least [`Self::MIN`]
    /// bytes just allocated (a null `p` is passed through); a refusal only costs speed.
    fn advise(p: *mut u8, len: usize) -> *mut u8 {
        if p.is_null() || len < Self::MIN {
            return p;
        }
        const HUGE: usize = 2 << 20;
        let start = (p as usize).next_multiple_of(HUGE);
        let end = (p as usize + len) / HUGE * HUGE;
        if end > start {
            // SAFETY: the range lies inside a block just allocated for the caller; madvise
            // with MADV_HUGEPAGE changes no contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
        p
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
// SAFETY: every call is forwarded to `System`; `advise` only adds advice.
unsafe impl std::alloc::GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        Self::advise(unsafe { std::alloc::System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        Self::advise(
            unsafe { std::alloc::System.alloc_zeroed(layout) },
            layout.size(),
        )
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: forwarded as the caller gave it.
        unsafe { std::alloc::System.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        // SAFETY: forwarded as the caller gave it.
        Self::advise(unsafe { std::alloc::System.realloc(p, layout, size) }, size)
    }
}
