//! Waiting on and waking futex words: the user word is read and compared under the
//! futex-table lock, so a wake between the check and the sleep is never lost (the
//! scheduler's `block` also remembers a wake that arrives before it). The table
//! itself (who waits where) is `crate::futex`; the system call is `syscall::futex`.

use super::kernel::Kernel;
use super::sched::{self, Wake};
use super::thread::Thread;
use crate::errno::{Errno, SysResult};
use crate::mm::user::UserMem;

/// The futex-table key of user address `addr` for the running thread: the
/// address within its address space (so processes with separate memory never
/// share a key; see `mm::spaces::Space::futex_key`), or for a process-shared
/// futex (`shared`: no FUTEX_PRIVATE_FLAG) in memory shared with other
/// processes, its place in guest memory (`Space::shared_futex_key`). Computed
/// before the futex table is locked (it may take the memory lock).
pub fn key(addr: u64, shared: bool) -> u64 {
    super::thread::try_current().map_or(addr, |t| {
        let space = t.process().space();
        if shared {
            space.shared_futex_key(addr)
        } else {
            space.futex_key(addr)
        }
    })
}

/// Takes thread `tid`, which is ending, off the futex queue it waits on, if any. A
/// thread killed while it waits (its process exits or execs) ends in `block`
/// without coming back to [`wait`]; its entry would otherwise stay first in the
/// queue and take a later wake-up meant for a live waiter of the same key. (Seen:
/// a Go child's first thread slept for ever in `notesleep`, its wake-up taken by
/// the entry a dead thread of an earlier child, the same static binary in the
/// same address-space slot, had left at the same address.)
pub fn forget(tid: u64) {
    super::kernel::kernel().futexes.lock().remove(tid);
}

/// Wakes the threads the table dequeued (after its lock is released); returns how many.
pub fn wake_threads(tids: &[u64]) -> usize {
    for tid in tids {
        if let Some(t) = sched::thread(*tid) {
            sched::wake(t);
        }
    }
    tids.len()
}

/// Wakes up to `n` waiters of `addr` whose bitset meets `bitset`; returns how many.
pub fn wake(k: &Kernel, addr: u64, shared: bool, n: usize, bitset: u32) -> usize {
    let key = key(addr, shared);
    let woken = k.futexes.lock().wake(key, n, bitset);
    wake_threads(&woken)
}

/// Sleeps while the word at `addr` holds `val`, until woken (with a matching
/// bitset), `until` (monotonic ns) or a signal.
#[allow(clippy::too_many_arguments)]
pub fn wait(
    k: &Kernel,
    user: &dyn UserMem,
    me: &Thread,
    addr: u64,
    shared: bool,
    val: u32,
    bitset: u32,
    until: Option<u64>,
) -> SysResult {
    if bitset == 0 {
        return Err(Errno::EINVAL);
    }
    let key = key(addr, shared);
    {
        let mut table = k.futexes.lock();
        let cur = user.load_u32(addr).map_err(|e| if e == Errno::EINVAL { e } else { Errno::EFAULT })?;
        if cur != val {
            return Err(Errno::EAGAIN);
        }
        table.enqueue(key, me.tid(), bitset);
    }
    sched::wait_site(key);
    let w = sched::block(until);
    // Still queued means nobody woke us: a timeout or a signal.
    let queued = k.futexes.lock().remove(me.tid());
    match (w, queued) {
        (_, false) | (Wake::Woken, _) => Ok(0),
        (Wake::TimedOut, true) => Err(Errno::ETIMEDOUT),
        // Without a timeout the wait restarts after an SA_RESTART handler (with one,
        // it would have to count the time already waited: EINTR, which callers
        // of futex expect anyway).
        (Wake::Interrupted, true) if until.is_none() => Err(Errno::ERESTARTSYS),
        (Wake::Interrupted, true) => Err(Errno::EINTR),
    }
}
