//! The events page: device completions the VMM posts for the guest (see
//! `onering_abi::events`). The page is in the boot area, reached through the direct
//! map; the VMM writes it from its own threads, so it is read with atomics.

use core::sync::atomic::{AtomicU64, Ordering};

#[cfg(target_os = "none")]
fn word(offset: u64) -> &'static AtomicU64 {
    let at = onering_abi::layout::direct(onering_abi::layout::EVENTS_PHYS + offset);
    // SAFETY: the events page is a page of guest RAM in the boot area that the VMM
    // reserved for it (zeroed at boot), mapped through the direct map for the
    // kernel's life; `offset` is an aligned u64 of it. The VMM writes it only with
    // atomic operations, and so does the guest.
    unsafe { &*(at as *const AtomicU64) }
}

#[cfg(not(target_os = "none"))]
fn word(offset: u64) -> &'static AtomicU64 {
    static PAGE: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
    &PAGE[(offset / 8) as usize % 2]
}

/// Takes the devices' pending bits (0: nothing new). A cheap load first: the page
/// is read on every scheduling decision.
#[inline]
pub fn take_pending() -> u64 {
    let w = word(onering_abi::events::PENDING);
    if w.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    w.swap(0, Ordering::Acquire)
}

/// The last stdin request's result (valid once its bit was taken).
pub fn stdin_result() -> i64 {
    word(onering_abi::events::STDIN_RESULT).load(Ordering::Acquire) as i64
}
