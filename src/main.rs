//! `nnpc`: the command line. Each subcommand lives in `src/cmd/`.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cmd;

// The facade's loader, as `crate::check_file` for `nnpc check`.
use nnpc::check_file;

/// Bit-exact software execution of NNP (Brainwave-style) firmware.
///
/// Write firmware, check it, inspect its dependency graph, run it as a software graph that is
/// bit-identical to the hardware, emulate the hardware, and diff the two.
#[derive(Parser)]
#[command(name = "nnpc", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Check(cmd::check::Args),
    Graph(cmd::graph::Args),
    Compile(cmd::compile::Args),
    Run(cmd::run::Args),
    Emulate(cmd::emulate::Args),
    Diff(cmd::diff::Args),
    Quantize(cmd::quantize::Args),
    Bench(cmd::bench::Args),
}

fn main() -> ExitCode {
    keep_large_buffers_on_the_heap();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => cmd::check::run(a),
        Command::Graph(a) => cmd::graph::run(a),
        Command::Compile(a) => cmd::compile::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Emulate(a) => cmd::emulate::run(a),
        Command::Diff(a) => cmd::diff::run(a),
        Command::Quantize(a) => cmd::quantize::run(a),
        Command::Bench(a) => cmd::bench::run(a),
    };
    match result {
        Ok(code) => code,
        Err(report) => {
            eprintln!("{report:?}");
            ExitCode::from(2)
        }
    }
}

/// Every graph op allocates and frees its output tensor (512 KiB for the LSTM benchmark at
/// batch 64). glibc maps blocks above 128 KiB with `mmap` and unmaps them on free, so each op
/// page-faulted its output in again: a third of an MFU op's time. Serving blocks up to 32 MiB
/// (glibc's largest threshold) from the heap, and not trimming it, reuses the pages.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_large_buffers_on_the_heap() {
    // SAFETY: `mallopt` only sets allocator parameters; it is called before any other thread
    // exists. A refused value (return 0) leaves glibc's default, which is only slower.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_large_buffers_on_the_heap() {}

/// The system allocator, asking for transparent huge pages on large blocks: a weight stack
/// (hundreds of MiB, written once as it is prepared) then faults in 2 MiB at a time instead of
/// 4 KiB, where the kernel allows it (`transparent_hugepage` = `madvise` or `always`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
struct HugePages;

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

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: HugePages = HugePages;
