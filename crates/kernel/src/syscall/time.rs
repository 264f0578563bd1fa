//! Clocks and sleeping. Time comes from the TSC (`crate::time`); a sleeping thread
//! blocks in the scheduler, whose idle loop polls the deadline and halts in the VMM
//! when it is far.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::mm::user::{UserMem, UserMemExt};
use crate::task::itimer;
use crate::task::sched::{self, Wake};
use crate::task::Ctx;
use crate::time::{mono_now, real_now, NS_PER_SEC};

const CLOCK_REALTIME: u64 = 0;
const CLOCK_MONOTONIC: u64 = 1;
const CLOCK_PROCESS_CPUTIME_ID: u64 = 2;
const CLOCK_THREAD_CPUTIME_ID: u64 = 3;
const CLOCK_MONOTONIC_RAW: u64 = 4;
const CLOCK_REALTIME_COARSE: u64 = 5;
const CLOCK_MONOTONIC_COARSE: u64 = 6;
const CLOCK_BOOTTIME: u64 = 7;
const CLOCK_REALTIME_ALARM: u64 = 8;
const CLOCK_BOOTTIME_ALARM: u64 = 9;
const CLOCK_TAI: u64 = 11;
const TIMER_ABSTIME: u64 = 1;

/// Nanoseconds on `clock` now.
fn now(clock: u64) -> Result<u64, Errno> {
    Ok(match clock {
        CLOCK_REALTIME | CLOCK_REALTIME_COARSE | CLOCK_REALTIME_ALARM | CLOCK_TAI => real_now(),
        // CPU-time clocks are approximated by time since boot (no per-thread
        // accounting yet).
        CLOCK_MONOTONIC
        | CLOCK_MONOTONIC_RAW
        | CLOCK_MONOTONIC_COARSE
        | CLOCK_BOOTTIME
        | CLOCK_BOOTTIME_ALARM
        | CLOCK_PROCESS_CPUTIME_ID
        | CLOCK_THREAD_CPUTIME_ID => mono_now(),
        _ => return Err(Errno::EINVAL),
    })
}

fn timespec(ns: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(ns / NS_PER_SEC).to_le_bytes());
    b[8..].copy_from_slice(&(ns % NS_PER_SEC).to_le_bytes());
    b
}

/// Reads a `struct timespec` argument: EINVAL unless 0 <= nsec < 1e9 and sec >= 0.
fn read_timespec(user: &dyn UserMem, addr: u64) -> Result<u64, Errno> {
    let b = user.read_array::<16>(addr)?;
    let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    let nsec = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
    if sec < 0 || !(0..NS_PER_SEC as i64).contains(&nsec) {
        return Err(Errno::EINVAL);
    }
    Ok((sec as u64).saturating_mul(NS_PER_SEC).saturating_add(nsec as u64))
}

pub fn clock_gettime(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let t = now(f.rdi)?;
    ctx.user.write(f.rsi, &timespec(t))?;
    Ok(0)
}

pub fn clock_getres(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    now(f.rdi)?;
    if f.rsi != 0 {
        ctx.user.write(f.rsi, &timespec(1))?;
    }
    Ok(0)
}

pub fn gettimeofday(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    if f.rdi != 0 {
        let t = real_now();
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&(t / NS_PER_SEC).to_le_bytes());
        b[8..].copy_from_slice(&(t % NS_PER_SEC / 1000).to_le_bytes());
        ctx.user.write(f.rdi, &b)?;
    }
    if f.rsi != 0 {
        ctx.user.write(f.rsi, &[0u8; 8])?; // struct timezone: UTC
    }
    Ok(0)
}

pub fn time(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let secs = real_now() / NS_PER_SEC;
    if f.rdi != 0 {
        ctx.user.write_u64(f.rdi, secs)?;
    }
    Ok(secs)
}

/// Blocks until `clock` reaches `deadline` (ns); EINTR if a signal comes first.
fn sleep_until(clock: u64, deadline: u64) -> Result<(), Errno> {
    loop {
        // As a monotonic deadline (real time may be stepped by nobody here, but
        // absolute real-time sleeps still count from the real clock).
        let (now_c, now_m) = (now(clock)?, mono_now());
        if now_c >= deadline {
            return Ok(());
        }
        // (Saturating: `sleep infinity` asks for the end of time.)
        match sched::block(Some(now_m.saturating_add(deadline - now_c))) {
            Wake::Interrupted => return Err(Errno::EINTR),
            Wake::TimedOut | Wake::Woken => {}
        }
    }
}

/// Writes the time left until `deadline` on `clock` to `rem` (after EINTR).
fn remaining(user: &dyn UserMem, clock: u64, deadline: u64, rem: u64) -> Result<(), Errno> {
    if rem != 0 {
        let left = deadline.saturating_sub(now(clock)?);
        user.write(rem, &timespec(left))?;
    }
    Ok(())
}

pub fn nanosleep(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let (req, start) = (read_timespec(ctx.user, f.rdi)?, mono_now());
    let deadline = start.saturating_add(req);
    if let Err(e) = sleep_until(CLOCK_MONOTONIC, deadline) {
        remaining(ctx.user, CLOCK_MONOTONIC, deadline, f.rsi)?;
        return Err(e);
    }
    Ok(0)
}

pub fn clock_nanosleep(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [clock, flags, req, rem, ..] = f.args();
    if flags & !TIMER_ABSTIME != 0 {
        return Err(Errno::EINVAL);
    }
    if matches!(clock, CLOCK_THREAD_CPUTIME_ID) {
        return Err(Errno::EINVAL);
    }
    let (t, base) = (read_timespec(ctx.user, req)?, now(clock)?);
    let deadline = if flags & TIMER_ABSTIME != 0 { t } else { base.saturating_add(t) };
    if let Err(e) = sleep_until(clock, deadline) {
        if flags & TIMER_ABSTIME == 0 {
            remaining(ctx.user, clock, deadline, rem)?;
        }
        return Err(e);
    }
    Ok(0)
}

/// Reads a `struct timeval` of an interval timer: ns, EINVAL unless 0 <= usec < 1e6
/// and sec >= 0.
fn read_timeval(user: &dyn UserMem, addr: u64) -> Result<u64, Errno> {
    let b = user.read_array::<16>(addr)?;
    let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    let usec = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
    if sec < 0 || !(0..1_000_000).contains(&usec) {
        return Err(Errno::EINVAL);
    }
    Ok((sec as u64).saturating_mul(NS_PER_SEC).saturating_add(usec as u64 * 1000))
}

/// A `struct itimerval` (interval, then value) of two durations in ns, rounded up
/// to microseconds as Linux reports them.
fn itimerval(interval: u64, value: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    for (i, ns) in [interval, value].into_iter().enumerate() {
        let us = ns.div_ceil(1000);
        b[16 * i..16 * i + 8].copy_from_slice(&(us / 1_000_000).to_le_bytes());
        b[16 * i + 8..16 * i + 16].copy_from_slice(&(us % 1_000_000).to_le_bytes());
    }
    b
}

fn which_timer(which: u64) -> Result<usize, Errno> {
    match which {
        0..=2 => Ok(which as usize),
        _ => Err(Errno::EINVAL),
    }
}

/// `getitimer(which, curr)`.
pub fn getitimer(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let which = which_timer(f.rdi)?;
    let t = ctx.thread.process().itimers.lock()[which];
    let now = mono_now();
    ctx.user.write(f.rsi, &itimerval(t.interval, itimer::remaining(&t, now)))?;
    Ok(0)
}

/// `setitimer(which, new, old)`: a NULL `new` disarms, as Linux allows.
pub fn setitimer(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let which = which_timer(f.rdi)?;
    let (interval, value) =
        if f.rsi == 0 { (0, 0) } else { (read_timeval(ctx.user, f.rsi)?, read_timeval(ctx.user, f.rsi + 16)?) };
    if f.rdx != 0 {
        // Checked before anything changes: a bad `old` leaves the timer as it was.
        ctx.user.write(f.rdx, &[0u8; 32])?;
    }
    let (left, old_interval) = itimer::set(ctx.thread.process(), which, value, interval, mono_now());
    if f.rdx != 0 {
        ctx.user.write(f.rdx, &itimerval(old_interval, left))?;
    }
    Ok(0)
}

/// `alarm(seconds)`: ITIMER_REAL once; the seconds that were left (rounded to the
/// nearest, and at least 1 while one was armed).
pub fn alarm(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let secs = f.rdi & 0xffff_ffff;
    let (left, _) = itimer::set(ctx.thread.process(), itimer::ITIMER_REAL, secs * NS_PER_SEC, 0, mono_now());
    Ok(if left == 0 { 0 } else { left.div_ceil(1000).saturating_add(500_000).div_euclid(1_000_000).max(1) })
}
