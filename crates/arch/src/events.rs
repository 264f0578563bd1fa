//! The events page: device completions the VMM posts for the guest (see
//! `onering_abi::events`). The page is in the boot area, reached through the direct
//! map; the VMM writes it from its own threads, so it is read with atomics.

use core::sync::atomic::{AtomicU64, Ordering};
use onering_abi::events::done_bit;
use onering_abi::exec::INPUTS;

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
    static PAGE: [AtomicU64; 512] = [const { AtomicU64::new(0) }; 512];
    &PAGE[(offset / 8) as usize % 512]
}

/// Bit n: input n's stdin request result was posted (its bit taken) and not yet
/// collected by `hostcall::stdin_done`.
static STDIN_POSTED: AtomicU64 = AtomicU64::new(0);

/// The pending bits of every input's request result.
const DONE_BITS: u64 = onering_abi::events::STDIN | onering_abi::events::EXEC_STDIN;

/// Takes the devices' pending bits (0: nothing new). A cheap load first: the page
/// is read on every scheduling decision.
#[inline]
pub fn take_pending() -> u64 {
    let w = word(onering_abi::events::PENDING);
    if w.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let bits = w.swap(0, Ordering::Acquire);
    if bits & DONE_BITS != 0 {
        let posted = (0..INPUTS).filter(|i| bits & done_bit(*i) != 0).fold(0, |m, i| m | 1 << i);
        STDIN_POSTED.fetch_or(posted, Ordering::Release);
    }
    bits
}

/// Whether input `input`'s stdin result was posted; clears the mark.
pub(crate) fn stdin_posted(input: usize) -> bool {
    let bit = 1u64 << (input % INPUTS);
    STDIN_POSTED.fetch_and(!bit, Ordering::AcqRel) & bit != 0
}

/// Input `input`'s last stdin request result (valid once its bit was taken).
pub(crate) fn stdin_result(input: usize) -> i64 {
    word(onering_abi::events::result_word(input % INPUTS)).load(Ordering::Acquire) as i64
}

/// Takes the signals the host sent for the program (bit n-1 for signal n).
pub fn take_signals() -> u64 {
    word(onering_abi::events::SIGNALS).swap(0, Ordering::Acquire)
}

/// Takes the signals the host's terminal made (bit n-1 for signal n), for the
/// terminal's foreground group.
pub fn take_tty_signals() -> u64 {
    word(onering_abi::events::TTY_SIGNALS).swap(0, Ordering::Acquire)
}

/// Gives back signals taken too early (no program to send them to yet).
pub fn put_back_signals(bits: u64, tty: u64) {
    word(onering_abi::events::SIGNALS).fetch_or(bits, Ordering::Release);
    word(onering_abi::events::TTY_SIGNALS).fetch_or(tty, Ordering::Release);
    word(onering_abi::events::PENDING).fetch_or(onering_abi::events::SIGNAL, Ordering::Release);
}

/// Host tests: posts input `input`'s stdin result `result`, as the VMM would.
#[cfg(not(target_os = "none"))]
pub(crate) fn host_post(input: usize, result: i64) {
    word(onering_abi::events::result_word(input)).store(result as u64, Ordering::Release);
    word(onering_abi::events::PENDING).fetch_or(done_bit(input), Ordering::Release);
}
