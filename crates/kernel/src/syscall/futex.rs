//! futex: the user word is read and compared under the futex-table lock, so a wake
//! between the check and the sleep is never lost (the scheduler's `block` also
//! remembers a wake that arrives before it). The PI operations are not offered.

use super::SyscallFrame;
use crate::arch::thread::{user_load_u32, user_update_u32};
use crate::errno::{Errno, SysResult};
use crate::futex::{wake_op_cmp, wake_op_new, FutexTable};
use crate::kernel::{kernel, mono_now, real_now};
use crate::sched::{self, Wake};
use spin::Mutex;

static TABLE: Mutex<FutexTable> = Mutex::new(FutexTable::new());

const FUTEX_WAIT: u64 = 0;
const FUTEX_WAKE: u64 = 1;
const FUTEX_REQUEUE: u64 = 3;
const FUTEX_CMP_REQUEUE: u64 = 4;
const FUTEX_WAKE_OP: u64 = 5;
const FUTEX_LOCK_PI: u64 = 6;
const FUTEX_UNLOCK_PI: u64 = 7;
const FUTEX_TRYLOCK_PI: u64 = 8;
const FUTEX_WAIT_BITSET: u64 = 9;
const FUTEX_WAKE_BITSET: u64 = 10;
const FUTEX_WAIT_REQUEUE_PI: u64 = 11;
const FUTEX_CMP_REQUEUE_PI: u64 = 12;
const FUTEX_LOCK_PI2: u64 = 13;
const FUTEX_PRIVATE: u64 = 128;
const FUTEX_CLOCK_REALTIME: u64 = 256;

/// Wakes the threads the table dequeued (after its lock is released); returns how many.
fn wake_threads(tids: &[u64]) -> usize {
    for tid in tids {
        if let Some(t) = sched::thread(*tid) {
            sched::wake(t);
        }
    }
    tids.len()
}

/// Wakes up to `n` waiters of `addr` whose bitset meets `bitset`; returns how many.
pub fn wake(addr: u64, n: usize, bitset: u32) -> usize {
    let woken = TABLE.lock().wake(addr, n, bitset);
    wake_threads(&woken)
}

/// A timeout argument: relative (FUTEX_WAIT) or absolute on the chosen clock
/// (FUTEX_WAIT_BITSET), as a monotonic deadline.
fn deadline(addr: u64, absolute: bool, realtime: bool) -> Result<Option<u64>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    let mut b = [0u8; 16];
    crate::arch::copy_from_user(&kernel().space, addr, &mut b)?;
    let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    let nsec = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
        return Err(Errno::EINVAL);
    }
    let t = (sec as u64).saturating_mul(1_000_000_000).saturating_add(nsec as u64);
    let now = mono_now();
    Ok(Some(if !absolute {
        now.saturating_add(t)
    } else if realtime {
        // Absolute real time: as far from now as it is from the real clock.
        now.saturating_add(t.saturating_sub(real_now()))
    } else {
        t
    }))
}

fn wait(addr: u64, val: u32, bitset: u32, until: Option<u64>) -> SysResult {
    if bitset == 0 {
        return Err(Errno::EINVAL);
    }
    let me = sched::current();
    {
        let mut table = TABLE.lock();
        let cur =
            user_load_u32(&kernel().space, addr).map_err(|e| if e == Errno::EINVAL { e } else { Errno::EFAULT })?;
        if cur != val {
            return Err(Errno::EAGAIN);
        }
        table.enqueue(addr, me.tid(), bitset);
    }
    let w = sched::block(until);
    // Still queued means nobody woke us: a timeout or a signal.
    let queued = TABLE.lock().remove(me.tid());
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

fn requeue(addr: u64, nwake: u64, nmove: u64, addr2: u64, cmp: Option<u32>) -> SysResult {
    let (nwake, nmove) = (nwake as u32 as i32, nmove as u32 as i32);
    if nwake < 0 || nmove < 0 {
        return Err(Errno::EINVAL);
    }
    let (woken, moved) = {
        let mut table = TABLE.lock();
        if let Some(v) = cmp {
            if user_load_u32(&kernel().space, addr)? != v {
                return Err(Errno::EAGAIN);
            }
        }
        table.requeue(addr, addr2, nwake as usize, nmove as usize)
    };
    let n = wake_threads(&woken);
    // CMP_REQUEUE counts woken and requeued threads.
    Ok((n + if cmp.is_some() { moved } else { 0 }) as u64)
}

fn wake_op(addr: u64, n: u64, n2: u64, addr2: u64, op: u32) -> SysResult {
    // Unknown operations or comparisons: ENOSYS, as Linux.
    wake_op_new(op, 0).ok_or(Errno::ENOSYS)?;
    wake_op_cmp(op, 0).ok_or(Errno::ENOSYS)?;
    let woken =
        {
            let mut table = TABLE.lock();
            let old = user_update_u32(&kernel().space, addr2, |old| wake_op_new(op, old).unwrap_or(old))
                .map_err(|e| if e == Errno::EINVAL { e } else { Errno::EFAULT })?;
            let mut w = table.wake(addr, n as u32 as usize, u32::MAX);
            if wake_op_cmp(op, old) == Some(true) {
                w.extend(table.wake(addr2, n2 as u32 as usize, u32::MAX));
            }
            w
        };
    for tid in &woken {
        if let Some(t) = sched::thread(*tid) {
            sched::wake(t);
        }
    }
    Ok(woken.len() as u64)
}

pub fn futex(f: &mut SyscallFrame) -> SysResult {
    let [addr, op, val, timeout, addr2, val3] = f.args();
    let cmd = op & !(FUTEX_PRIVATE | FUTEX_CLOCK_REALTIME);
    let realtime = op & FUTEX_CLOCK_REALTIME != 0;
    if addr % 4 != 0 {
        return Err(Errno::EINVAL);
    }
    match cmd {
        FUTEX_WAIT => {
            if realtime {
                return Err(Errno::ENOSYS);
            }
            wait(addr, val as u32, u32::MAX, deadline(timeout, false, false)?)
        }
        FUTEX_WAIT_BITSET => wait(addr, val as u32, val3 as u32, deadline(timeout, true, realtime)?),
        FUTEX_WAKE => Ok(wake(addr, val as u32 as usize, u32::MAX) as u64),
        FUTEX_WAKE_BITSET => {
            if val3 as u32 == 0 {
                return Err(Errno::EINVAL);
            }
            Ok(wake(addr, val as u32 as usize, val3 as u32) as u64)
        }
        // For the requeues, the timeout argument carries the number to move.
        FUTEX_REQUEUE => requeue(addr, val, timeout, addr2, None),
        FUTEX_CMP_REQUEUE => requeue(addr, val, timeout, addr2, Some(val3 as u32)),
        FUTEX_WAKE_OP => wake_op(addr, val, timeout, addr2, val3 as u32),
        FUTEX_LOCK_PI
        | FUTEX_UNLOCK_PI
        | FUTEX_TRYLOCK_PI
        | FUTEX_WAIT_REQUEUE_PI
        | FUTEX_CMP_REQUEUE_PI
        | FUTEX_LOCK_PI2 => {
            crate::kernel::report_message_once(
                "onering: priority-inheritance futexes (PTHREAD_PRIO_INHERIT mutexes) are not supported\n",
            );
            Err(Errno::ENOSYS)
        }
        _ => Err(Errno::ENOSYS),
    }
}
