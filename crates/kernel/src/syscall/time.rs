//! Clocks and sleeping. Time comes from the TSC (`crate::time`); a sleeping thread
//! blocks in the scheduler, whose idle loop polls the deadline and halts in the VMM
//! when it is far.

use super::SyscallFrame;
use crate::arch::{self, copy_to_user};
use crate::errno::{Errno, SysResult};
use crate::kernel::{kernel, Kernel};
use crate::sched::{self, Wake};
use crate::time::NS_PER_SEC;

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
fn now(k: &Kernel, clock: u64) -> Result<u64, Errno> {
    Ok(match clock {
        CLOCK_REALTIME | CLOCK_REALTIME_COARSE | CLOCK_REALTIME_ALARM | CLOCK_TAI => k.now_real(),
        // CPU-time clocks are approximated by time since boot (no per-thread
        // accounting yet).
        CLOCK_MONOTONIC
        | CLOCK_MONOTONIC_RAW
        | CLOCK_MONOTONIC_COARSE
        | CLOCK_BOOTTIME
        | CLOCK_BOOTTIME_ALARM
        | CLOCK_PROCESS_CPUTIME_ID
        | CLOCK_THREAD_CPUTIME_ID => k.now_mono(),
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
fn read_timespec(k: &Kernel, addr: u64) -> Result<u64, Errno> {
    let mut b = [0u8; 16];
    arch::copy_from_user(&k.space, addr, &mut b)?;
    let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    let nsec = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
    if sec < 0 || !(0..NS_PER_SEC as i64).contains(&nsec) {
        return Err(Errno::EINVAL);
    }
    Ok((sec as u64).saturating_mul(NS_PER_SEC).saturating_add(nsec as u64))
}

pub fn clock_gettime(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    let t = now(&k, f.rdi)?;
    copy_to_user(&k.space, f.rsi, &timespec(t))?;
    Ok(0)
}

pub fn clock_getres(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    now(&k, f.rdi)?;
    if f.rsi != 0 {
        copy_to_user(&k.space, f.rsi, &timespec(1))?;
    }
    Ok(0)
}

pub fn gettimeofday(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    if f.rdi != 0 {
        let t = k.now_real();
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&(t / NS_PER_SEC).to_le_bytes());
        b[8..].copy_from_slice(&(t % NS_PER_SEC / 1000).to_le_bytes());
        copy_to_user(&k.space, f.rdi, &b)?;
    }
    if f.rsi != 0 {
        copy_to_user(&k.space, f.rsi, &[0u8; 8])?; // struct timezone: UTC
    }
    Ok(0)
}

pub fn time(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    let secs = k.now_real() / NS_PER_SEC;
    if f.rdi != 0 {
        copy_to_user(&k.space, f.rdi, &secs.to_le_bytes())?;
    }
    Ok(secs)
}

/// Blocks until `clock` reaches `deadline` (ns); EINTR if a signal comes first.
fn sleep_until(clock: u64, deadline: u64) -> Result<(), Errno> {
    loop {
        // As a monotonic deadline (real time may be stepped by nobody here, but
        // absolute real-time sleeps still count from the real clock).
        let (now_c, now_m) = {
            let k = kernel();
            (now(&k, clock)?, k.now_mono())
        };
        if now_c >= deadline {
            return Ok(());
        }
        match sched::block(Some(now_m + (deadline - now_c))) {
            Wake::Interrupted => return Err(Errno::EINTR),
            Wake::TimedOut | Wake::Woken => {}
        }
    }
}

/// Writes the time left until `deadline` on `clock` to `rem` (after EINTR).
fn remaining(clock: u64, deadline: u64, rem: u64) -> Result<(), Errno> {
    if rem != 0 {
        let k = kernel();
        let left = deadline.saturating_sub(now(&k, clock)?);
        copy_to_user(&k.space, rem, &timespec(left))?;
    }
    Ok(())
}

pub fn nanosleep(f: &mut SyscallFrame) -> SysResult {
    let (req, start) = {
        let k = kernel();
        (read_timespec(&k, f.rdi)?, k.now_mono())
    };
    let deadline = start.saturating_add(req);
    if let Err(e) = sleep_until(CLOCK_MONOTONIC, deadline) {
        remaining(CLOCK_MONOTONIC, deadline, f.rsi)?;
        return Err(e);
    }
    Ok(0)
}

pub fn clock_nanosleep(f: &mut SyscallFrame) -> SysResult {
    let [clock, flags, req, rem, ..] = f.args();
    if flags & !TIMER_ABSTIME != 0 {
        return Err(Errno::EINVAL);
    }
    if matches!(clock, CLOCK_THREAD_CPUTIME_ID) {
        return Err(Errno::EINVAL);
    }
    let (t, base) = {
        let k = kernel();
        (read_timespec(&k, req)?, now(&k, clock)?)
    };
    let deadline = if flags & TIMER_ABSTIME != 0 { t } else { base.saturating_add(t) };
    if let Err(e) = sleep_until(clock, deadline) {
        if flags & TIMER_ABSTIME == 0 {
            remaining(clock, deadline, rem)?;
        }
        return Err(e);
    }
    Ok(0)
}
