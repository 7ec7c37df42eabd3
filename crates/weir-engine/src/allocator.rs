//! The allocator of weir's binaries and benchmarks: mimalloc rather than glibc's malloc (keyed
//! state allocates per key from two threads, and glibc's free lists were a third of a dedup
//! query's profile), told to hand the memory it frees back to the OS lazily.
//!
//! mimalloc returns freed memory to the OS a second later (a *purge*), by default with
//! `MADV_DONTNEED`: the next allocation there faults and the kernel zeroes the page again. A
//! streaming pipeline frees and allocates batches all the time, so page zeroing was a third of
//! a restore's profile. Purged with `MADV_FREE` instead, a page goes back only if the kernel
//! needs it, and reusing it before then costs nothing. Measured with `checkpoint_bench 60
//! 40000000 incremental` (bench-fast, 2 cores): 60 s of updates against a large state took
//! 22.1 cpu-s instead of 31.2, and a restart 4.1 s instead of 6.6. Never purging did about as
//! well (19.7 cpu-s, 4.5 s) but kept every freed page: the same benchmark at 125 M events went
//! over the machine's 24 GiB and was killed. The price of `MADV_FREE`: `top` shows memory the
//! kernel may take back as resident until it does. `MIMALLOC_PURGE_DECOMMITS` set in the
//! environment takes precedence.

use libmimalloc_sys::{mi_option_set, mi_option_t};

/// Install in a binary with `#[global_allocator] static ALLOCATOR: Allocator = Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// `mi_option_purge_decommits` in mimalloc v3's `mi_option_e` (libmimalloc-sys declares no
/// constant for it); `the_option_set_is_mimallocs_purge_decommits` checks the numbering.
const PURGE_DECOMMITS: mi_option_t = 5;

/// Purges freed memory with `MADV_FREE` (see the module's doc), unless the environment says
/// otherwise. Call it first thing in `main`.
pub fn return_freed_memory_lazily() {
    if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_none() {
        // SAFETY: sets one of mimalloc's options; safe at any time, from any thread.
        unsafe { mi_option_set(PURGE_DECOMMITS, 0) };
    }
}

#[cfg(test)]
mod tests {
    use libmimalloc_sys::mi_option_get;

    use super::*;

    /// The options around it hold mimalloc v3's defaults: `reserve_huge_os_pages_at` (-1)
    /// three after it and `purge_delay` (1000 ms) ten after it.
    #[test]
    fn the_option_set_is_mimallocs_purge_decommits() {
        if std::env::vars_os().any(|(name, _)| name.to_string_lossy().starts_with("MIMALLOC_")) {
            return;
        }
        // SAFETY: reads mimalloc's options.
        let option = |option: mi_option_t| unsafe { mi_option_get(option) };
        assert_eq!(
            (option(PURGE_DECOMMITS), option(PURGE_DECOMMITS + 3), option(PURGE_DECOMMITS + 10)),
            (1, -1, 1000),
            "mimalloc v3's defaults"
        );
        return_freed_memory_lazily();
        assert_eq!(option(PURGE_DECOMMITS), 0);
    }
}
