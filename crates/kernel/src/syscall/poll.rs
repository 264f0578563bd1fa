//! Waiting on many files: eventfd, epoll, poll/ppoll. Readiness and the epoll
//! interest list are `crate::fs::poll` (pure); here arguments are unpacked and the
//! calling thread sleeps until something changes.
//!
//! Sleeping on several files: the thread registers on the wait key of every file it
//! watches (and of the epoll itself, which `epoll_ctl` wakes), under the kernel lock
//! that also orders every change, then blocks. A change that happens after the scan
//! finds the thread registered, so no wake-up is lost.

use super::SyscallFrame;
use crate::arch::{self, UserSpace};
use crate::errno::{Errno, SysResult};
use crate::fs::file::{oflag, FileRef, Kind, OpenFile};
use crate::fs::poll::{self, Epoll, EventFd};
use crate::kernel::{kernel, mono_now, Kernel};
use crate::sched::{self, Wake};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;
use spin::Mutex;

const EFD_SEMAPHORE: u64 = 1;
/// The flags of the `*_create1`/`eventfd2` calls are O_CLOEXEC and O_NONBLOCK.
const CLOEXEC: u64 = oflag::O_CLOEXEC as u64;
const NONBLOCK: u64 = oflag::O_NONBLOCK as u64;
/// Linux's bound on epoll_wait's maxevents (INT_MAX / sizeof(struct epoll_event)).
const EP_MAX_EVENTS: u64 = 0x7fff_ffff / 12;

fn install(k: &mut Kernel, kind: Kind, flags: u64) -> SysResult {
    let status = (flags & NONBLOCK) as u32;
    let f = Arc::new(OpenFile::new(kind, oflag::O_RDWR | status));
    k.cur().fds.insert(f, flags & CLOEXEC != 0)
}

fn make_eventfd(init: u64, flags: u64) -> SysResult {
    if flags & !(CLOEXEC | NONBLOCK | EFD_SEMAPHORE) != 0 {
        return Err(Errno::EINVAL);
    }
    let e = EventFd::new(init as u32 as u64, flags & EFD_SEMAPHORE != 0);
    install(&mut kernel(), Kind::EventFd(Arc::new(Mutex::new(e))), flags)
}

pub fn eventfd(f: &mut SyscallFrame) -> SysResult {
    make_eventfd(f.rdi, 0)
}

pub fn eventfd2(f: &mut SyscallFrame) -> SysResult {
    make_eventfd(f.rdi, f.rsi)
}

/// read(2) on an eventfd (called by `fs::read_file` with the kernel locked).
pub fn eventfd_read(space: &UserSpace, e: &Mutex<EventFd>, key: u64, addr: u64, len: u64) -> SysResult {
    if len < 8 {
        return Err(Errno::EINVAL);
    }
    space.check(addr, 8, true)?;
    let v = e.lock().read()?;
    arch::copy_to_user(space, addr, &v.to_le_bytes())?;
    sched::wake_all(key); // writers waiting for room, pollers
    Ok(8)
}

/// write(2) on an eventfd: exactly 8 bytes (EINVAL otherwise, as this host's Linux).
pub fn eventfd_write(space: &UserSpace, e: &Mutex<EventFd>, key: u64, addr: u64, len: u64) -> SysResult {
    if len != 8 {
        return Err(Errno::EINVAL);
    }
    let v = arch::read_user_u64(space, addr)?;
    e.lock().write(v)?;
    sched::wake_all(key); // readers, pollers
    Ok(8)
}

fn make_epoll(flags: u64) -> SysResult {
    if flags & !CLOEXEC != 0 {
        return Err(Errno::EINVAL);
    }
    install(&mut kernel(), Kind::Epoll(Arc::new(Mutex::new(Epoll::new()))), flags & CLOEXEC)
}

pub fn epoll_create(f: &mut SyscallFrame) -> SysResult {
    if f.rdi as i32 <= 0 {
        return Err(Errno::EINVAL);
    }
    make_epoll(0)
}

pub fn epoll_create1(f: &mut SyscallFrame) -> SysResult {
    make_epoll(f.rdi)
}

fn epoll_of(file: &FileRef) -> Result<&Arc<Mutex<Epoll>>, Errno> {
    match &file.kind {
        Kind::Epoll(e) => Ok(e),
        _ => Err(Errno::EINVAL),
    }
}

pub fn epoll_ctl(f: &mut SyscallFrame) -> SysResult {
    let [epfd, op, fd, event, ..] = f.args();
    let k = &mut *kernel();
    let ep_file = k.proc().fds.get(epfd)?.clone();
    let target = k.proc().fds.get(fd)?.clone();
    let ep = epoll_of(&ep_file)?;
    if Arc::ptr_eq(&ep_file, &target) || matches!(target.kind, Kind::Epoll(_)) {
        // Watching itself is EINVAL; nested epolls are not offered.
        return Err(Errno::EINVAL);
    }
    let (events, data) = if op == poll::EPOLL_CTL_DEL {
        (0, 0)
    } else {
        let mut b = [0u8; 12];
        arch::copy_from_user(&k.space, event, &mut b)?;
        (u32::from_le_bytes([b[0], b[1], b[2], b[3]]), u64::from_le_bytes(b[4..].try_into().unwrap_or_default()))
    };
    ep.lock().ctl(op, fd, &target, events, data)?;
    // A thread waiting on this epoll may now have something to report.
    if let Some(key) = ep_file.wait_key() {
        sched::wake_all(key);
    }
    Ok(0)
}

/// Runs `scan` (with the kernel locked) until it reports something or `deadline`
/// (None: forever) passes; `scan` returns what it found and the keys to sleep on.
/// With `mask`, the thread's signal mask is replaced while it waits.
fn wait_for<T>(
    deadline: Option<u64>,
    mask: Option<u64>,
    mut scan: impl FnMut(&mut Kernel) -> Result<(Option<T>, Vec<u64>), Errno>,
) -> Result<Option<T>, Errno> {
    let me = sched::current();
    let old = mask.map(|m| me.sigmask.swap(m & !crate::signal::UNBLOCKABLE, Relaxed));
    let restore = || {
        if let Some(o) = old {
            me.sigmask.store(o, Relaxed);
        }
    };
    let mut last = false;
    loop {
        let keys = {
            let k = &mut *kernel();
            let (found, keys) = match scan(k) {
                Ok(r) => r,
                Err(e) => {
                    restore();
                    return Err(e);
                }
            };
            if found.is_some() || last {
                restore();
                return Ok(found);
            }
            for key in &keys {
                sched::prepare_wait(*key);
            }
            keys
        };
        let w = sched::block(deadline);
        for key in &keys {
            sched::finish_wait(*key);
        }
        match w {
            Wake::Interrupted => {
                // The temporary mask stays until the signal that it let in has
                // been delivered; the handler's frame then restores the old one.
                if let Some(o) = old {
                    if me.pending.load(Relaxed) == 0 {
                        restore(); // (nothing to deliver after all)
                    } else {
                        me.saved_mask.store(o, Relaxed);
                        me.mask_saved.store(true, Relaxed);
                    }
                }
                return Err(Errno::EINTR);
            }
            // One last look: something may have come with the deadline.
            Wake::TimedOut => last = true,
            Wake::Woken => {}
        }
    }
}

/// A timeout in milliseconds as a deadline: None (negative: forever), Some(0) (0: do
/// not wait), or a monotonic time.
fn ms_deadline(ms: u64) -> Option<u64> {
    match ms as i32 {
        ..0 => None,
        0 => Some(0),
        ms => Some(mono_now().saturating_add(ms as u64 * 1_000_000)),
    }
}

fn read_mask(k: &Kernel, addr: u64, size: u64) -> Result<Option<u64>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    Ok(Some(arch::read_user_u64(&k.space, addr)?))
}

fn epoll_wait_until(epfd: u64, events: u64, max: u64, deadline: Option<u64>, mask: Option<u64>) -> SysResult {
    if max as i32 <= 0 || max > EP_MAX_EVENTS {
        return Err(Errno::EINVAL);
    }
    let ep = {
        let k = kernel();
        let file = k.proc().fds.get(epfd)?.clone();
        epoll_of(&file)?.clone()
    };
    let key = Arc::as_ptr(&ep) as *const u8 as u64;
    let max = max as usize;
    let found = wait_for(deadline, mask, |k| {
        k.space.check(events, max as u64 * 12, true)?;
        let mut s = ep.lock().scan(max);
        if s.ready.is_empty() && deadline != Some(0) {
            s.keys.push(key);
            return Ok((None, s.keys));
        }
        let mut out = Vec::with_capacity(s.ready.len() * 12);
        for (e, data) in &s.ready {
            out.extend_from_slice(&e.to_le_bytes());
            out.extend_from_slice(&data.to_le_bytes());
        }
        arch::copy_to_user(&k.space, events, &out)?;
        Ok((Some(s.ready.len() as u64), Vec::new()))
    })?;
    Ok(found.unwrap_or(0))
}

pub fn epoll_wait(f: &mut SyscallFrame) -> SysResult {
    let [epfd, events, max, timeout, ..] = f.args();
    let d = ms_deadline(timeout);
    epoll_wait_until(epfd, events, max, d, None)
}

pub fn epoll_pwait(f: &mut SyscallFrame) -> SysResult {
    let [epfd, events, max, timeout, mask, size] = f.args();
    let mask = read_mask(&kernel(), mask, size)?;
    let d = ms_deadline(timeout);
    epoll_wait_until(epfd, events, max, d, mask)
}

/// A `struct timespec` timeout (0: none) as a deadline; Some(0) for a zero timeout.
fn ts_deadline(k: &Kernel, addr: u64) -> Result<Option<u64>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    let mut b = [0u8; 16];
    arch::copy_from_user(&k.space, addr, &mut b)?;
    let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    let nsec = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
        return Err(Errno::EINVAL);
    }
    let t = (sec as u64).saturating_mul(1_000_000_000).saturating_add(nsec as u64);
    Ok(Some(if t == 0 { 0 } else { mono_now().saturating_add(t) }))
}

pub fn epoll_pwait2(f: &mut SyscallFrame) -> SysResult {
    let [epfd, events, max, timeout, mask, size] = f.args();
    let (d, mask) = {
        let k = kernel();
        (ts_deadline(&k, timeout)?, read_mask(&k, mask, size)?)
    };
    epoll_wait_until(epfd, events, max, d, mask)
}

/// poll/ppoll on `n` `struct pollfd` at `fds`.
fn poll_until(fds: u64, n: u64, deadline: Option<u64>, mask: Option<u64>) -> SysResult {
    let limit = crate::fs::file::MAX_FDS as u64;
    if n > limit {
        return Err(Errno::EINVAL);
    }
    let found = wait_for(deadline, mask, |k| {
        let mut b = alloc::vec![0u8; n as usize * 8];
        arch::copy_from_user(&k.space, fds, &mut b)?;
        let mut keys = Vec::new();
        let mut ready = 0u64;
        for p in b.chunks_exact_mut(8) {
            let fd = i32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            let asked = u32::from(u16::from_le_bytes([p[4], p[5]]));
            let got = if fd < 0 {
                0
            } else {
                match k.proc().fds.get(fd as u64) {
                    Ok(of) => {
                        let (e, key) = poll::poll_events(of, asked);
                        keys.extend(key);
                        e
                    }
                    Err(_) => 0x20, // POLLNVAL
                }
            };
            p[6..8].copy_from_slice(&(got as u16).to_le_bytes());
            ready += u64::from(got != 0);
        }
        if ready == 0 && deadline != Some(0) {
            return Ok((None, keys));
        }
        arch::copy_to_user(&k.space, fds, &b)?;
        Ok((Some(ready), Vec::new()))
    })?;
    if found.is_none() {
        // Timed out: every revents is 0.
        let k = kernel();
        let mut b = alloc::vec![0u8; n as usize * 8];
        arch::copy_from_user(&k.space, fds, &mut b)?;
        for p in b.chunks_exact_mut(8) {
            p[6..8].fill(0);
        }
        arch::copy_to_user(&k.space, fds, &b)?;
    }
    Ok(found.unwrap_or(0))
}

pub fn poll(f: &mut SyscallFrame) -> SysResult {
    let [fds, n, timeout, ..] = f.args();
    let d = ms_deadline(timeout);
    poll_until(fds, n, d, None)
}

pub fn ppoll(f: &mut SyscallFrame) -> SysResult {
    let [fds, n, timeout, mask, size, ..] = f.args();
    let (d, mask) = {
        let k = kernel();
        (ts_deadline(&k, timeout)?, read_mask(&k, mask, size)?)
    };
    poll_until(fds, n, d, mask)
}
