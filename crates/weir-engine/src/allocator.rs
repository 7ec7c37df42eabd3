//! The allocator of weir's binaries and benchmarks: mimalloc rather than glibc's malloc (keyed
//! state allocates per key from two threads, and glibc's free lists were a third of a dedup
//! query's profile), told to hand the memory it frees back to the OS lazily and not to ask for
//! transparent huge pages. [`set_up`] does both, first thing in `main`.
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
//!
//! mimalloc also asks for transparent huge pages (`MADV_HUGEPAGE`) where the system gives them
//! only on request (`madvise`, the usual setting). A state that grows then faults in 2 MiB at a
//! time, each zeroed whole by the kernel, and purged ranges are faulted and zeroed again: on the
//! 2-core machine the kernel's `clear_page_erms` was 35% of a growing join's samples, and its
//! system time 9-10 s of an 11 s run (Nexmark q7 over 9.2 M bids, checkpoints every second);
//! without huge pages the same run took 7.4-7.6 s with 2.2-2.4 s of system time, for about 7%
//! more user time. Databases say the same (Redis and MongoDB warn when huge pages are on). So
//! the process turns them off for itself (`PR_SET_THP_DISABLE`: mimalloc reserves its first
//! arena, huge-page advice included, before `main` runs, so its own option alone would come too
//! late); `MIMALLOC_ALLOW_THP` set in the environment takes precedence.

use libmimalloc_sys::{mi_option_set, mi_option_t};

/// Install in a binary with `#[global_allocator] static ALLOCATOR: Allocator = Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// `mi_option_purge_decommits` in mimalloc v3's `mi_option_e` (libmimalloc-sys declares no
/// constant for it); `the_option_set_is_mimallocs_purge_decommits` checks the numbering.
const PURGE_DECOMMITS: mi_option_t = 5;

/// `mi_option_allow_thp` in the same enum; checked by the same test.
const ALLOW_THP: mi_option_t = 43;

/// Sets the allocator up as the module's doc says, unless the environment says otherwise.
/// Call it first thing in `main`.
pub fn set_up() {
    if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_none() {
        // SAFETY: sets one of mimalloc's options; safe at any time, from any thread.
        unsafe { mi_option_set(PURGE_DECOMMITS, 0) };
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: as above.
        unsafe { mi_option_set(ALLOW_THP, 0) };
        // SAFETY: PR_SET_THP_DISABLE takes an integer flag and no pointers; it only sets a
        // flag of this process's memory map. Should it fail (an old kernel), huge pages stay.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0)
        };
    }
}

#[cfg(test)]
mod tests {
    use libmimalloc_sys::mi_option_get;

    use super::*;

    /// The options around them hold mimalloc v3's defaults: `reserve_huge_os_pages_at` (-1)
    /// three after `purge_decommits` and `purge_delay` (1000 ms) ten after it;
    /// `page_cross_thread_max_reclaim` (32) just before `allow_thp`.
    #[test]
    fn the_options_set_are_mimallocs_purge_decommits_and_allow_thp() {
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
        assert_eq!((option(ALLOW_THP - 1), option(ALLOW_THP)), (32, 1), "mimalloc v3's defaults");
        set_up();
        assert_eq!((option(PURGE_DECOMMITS), option(ALLOW_THP)), (0, 0));
        // SAFETY: PR_GET_THP_DISABLE takes no pointers and returns the flag.
        #[cfg(target_os = "linux")]
        assert_eq!(unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) }, 1, "huge pages off");
    }
}
