//! Asking the CPU for memory before it is read: lookups into tables far larger than the caches
//! (a restore's tens of millions of groups, a busy group's distinct values) miss at every step,
//! and a loop that knows its next addresses a few rows ahead can have those misses overlap.

/// Asks for the cache line at `address` ahead of its use (a hint: it reads nothing).
#[inline]
pub(crate) fn prefetch<T: ?Sized>(address: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint to the cache; it faults on no address and reads no data
        // into the program, and `address` is a live reference anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((address as *const T).cast()) }
    }
}
