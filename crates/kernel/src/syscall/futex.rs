//! futex: the operations and their arguments. Waiting and waking are
//! `task::futex` (the word is compared under the futex-table lock, so no wake-up
//! is lost); the queues are `crate::futex`. The PI operations are not offered.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::futex::{wake_op_cmp, wake_op_new};
use crate::mm::user::{UserMem, UserMemExt};
use crate::task::futex::{key, wait, wake, wake_threads};
use crate::task::Ctx;
use crate::time::{mono_now, real_now};

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

/// A timeout argument: relative (FUTEX_WAIT) or absolute on the chosen clock
/// (FUTEX_WAIT_BITSET), as a monotonic deadline.
fn deadline(user: &dyn UserMem, addr: u64, absolute: bool, realtime: bool) -> Result<Option<u64>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    let b = user.read_array::<16>(addr)?;
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

fn requeue(ctx: &Ctx, addr: u64, shared: bool, nwake: u64, nmove: u64, addr2: u64, cmp: Option<u32>) -> SysResult {
    let (nwake, nmove) = (nwake as u32 as i32, nmove as u32 as i32);
    if nwake < 0 || nmove < 0 {
        return Err(Errno::EINVAL);
    }
    let (from, to) = (key(addr, shared), key(addr2, shared));
    let (woken, moved) = {
        let mut table = ctx.k.futexes.lock();
        if let Some(v) = cmp {
            if ctx.user.load_u32(addr)? != v {
                return Err(Errno::EAGAIN);
            }
        }
        table.requeue(from, to, nwake as usize, nmove as usize)
    };
    let n = wake_threads(&woken);
    // CMP_REQUEUE counts woken and requeued threads.
    Ok((n + if cmp.is_some() { moved } else { 0 }) as u64)
}

fn wake_op(ctx: &Ctx, addr: u64, shared: bool, n: u64, n2: u64, addr2: u64, op: u32) -> SysResult {
    // Unknown operations or comparisons: ENOSYS, as Linux.
    wake_op_new(op, 0).ok_or(Errno::ENOSYS)?;
    wake_op_cmp(op, 0).ok_or(Errno::ENOSYS)?;
    let (k1, k2) = (key(addr, shared), key(addr2, shared));
    let woken = {
        let mut table = ctx.k.futexes.lock();
        let old = update_u32(ctx.user, addr2, |old| wake_op_new(op, old).unwrap_or(old)).map_err(|e| {
            if e == Errno::EINVAL {
                e
            } else {
                Errno::EFAULT
            }
        })?;
        let mut w = table.wake(k1, n as u32 as usize, u32::MAX);
        if wake_op_cmp(op, old) == Some(true) {
            w.extend(table.wake(k2, n2 as u32 as usize, u32::MAX));
        }
        w
    };
    wake_threads(&woken);
    Ok(woken.len() as u64)
}

/// Atomically replaces the user word at `addr` with `f(old)`; returns the old value.
fn update_u32(user: &dyn UserMem, addr: u64, f: impl Fn(u32) -> u32) -> Result<u32, Errno> {
    let mut old = user.load_u32(addr)?;
    loop {
        match user.cmpxchg_u32(addr, old, f(old))? {
            found if found == old => return Ok(old),
            found => old = found,
        }
    }
}

pub fn futex(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, op, val, timeout, addr2, val3] = f.args();
    let cmd = op & !(FUTEX_PRIVATE | FUTEX_CLOCK_REALTIME);
    let realtime = op & FUTEX_CLOCK_REALTIME != 0;
    let shared = op & FUTEX_PRIVATE == 0;
    if addr % 4 != 0 {
        return Err(Errno::EINVAL);
    }
    match cmd {
        FUTEX_WAIT | FUTEX_WAIT_BITSET => {
            // FUTEX_WAIT: a relative timeout on the monotonic clock, any waker.
            let bitset = cmd == FUTEX_WAIT_BITSET;
            if realtime && !bitset {
                return Err(Errno::ENOSYS);
            }
            let until = deadline(ctx.user, timeout, bitset, realtime)?;
            let mask = if bitset { val3 as u32 } else { u32::MAX };
            wait(ctx.k, ctx.user, ctx.thread, addr, shared, val as u32, mask, until)
        }
        FUTEX_WAKE => Ok(wake(ctx.k, addr, shared, val as u32 as usize, u32::MAX) as u64),
        FUTEX_WAKE_BITSET => {
            if val3 as u32 == 0 {
                return Err(Errno::EINVAL);
            }
            Ok(wake(ctx.k, addr, shared, val as u32 as usize, val3 as u32) as u64)
        }
        // For the requeues, the timeout argument carries the number to move.
        FUTEX_REQUEUE => requeue(ctx, addr, shared, val, timeout, addr2, None),
        FUTEX_CMP_REQUEUE => requeue(ctx, addr, shared, val, timeout, addr2, Some(val3 as u32)),
        FUTEX_WAKE_OP => wake_op(ctx, addr, shared, val, timeout, addr2, val3 as u32),
        FUTEX_LOCK_PI
        | FUTEX_UNLOCK_PI
        | FUTEX_TRYLOCK_PI
        | FUTEX_WAIT_REQUEUE_PI
        | FUTEX_CMP_REQUEUE_PI
        | FUTEX_LOCK_PI2 => {
            ctx.k.report_once(
                "onering: priority-inheritance futexes (PTHREAD_PRIO_INHERIT mutexes) are not supported\n",
            );
            Err(Errno::ENOSYS)
        }
        _ => Err(Errno::ENOSYS),
    }
}
