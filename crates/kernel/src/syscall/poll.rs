//! Waiting on many files: eventfd, epoll, poll/ppoll, select/pselect6 (the same
//! readiness, as bitmaps). Readiness comes from the
//! file objects (`File::poll`), the epoll interest list is `crate::fs::epoll`;
//! here arguments are unpacked and the calling thread sleeps until something
//! changes.
//!
//! Sleeping on several files: the thread scans, registers on the wait key of every
//! file it watches (and of the epoll itself, which `epoll_ctl` wakes), scans once
//! more, then blocks. A change after the second scan finds the thread registered,
//! so no wake-up is lost.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::file::{oflag, poll_events, FileRef, OpenFile};
use crate::fs::epoll::{self, EpollFile};
use crate::fs::eventfd::EventFdFile;
use crate::mm::user::{UserMem, UserMemExt};
use crate::task::sched::{self, Wake};
use crate::task::Ctx;
use crate::time::mono_now;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;

const EFD_SEMAPHORE: u64 = 1;
/// The flags of the `*_create1`/`eventfd2` calls are O_CLOEXEC and O_NONBLOCK.
const CLOEXEC: u64 = oflag::O_CLOEXEC as u64;
const NONBLOCK: u64 = oflag::O_NONBLOCK as u64;
/// Linux's bound on epoll_wait's maxevents (INT_MAX / sizeof(struct epoll_event)).
const EP_MAX_EVENTS: u64 = 0x7fff_ffff / 12;

fn install(ctx: &Ctx, f: FileRef, flags: u64) -> SysResult {
    ctx.proc().fds.lock().insert(f, flags & CLOEXEC != 0)
}

fn make_eventfd(ctx: &Ctx, init: u64, flags: u64) -> SysResult {
    if flags & !(CLOEXEC | NONBLOCK | EFD_SEMAPHORE) != 0 {
        return Err(Errno::EINVAL);
    }
    let e = EventFdFile::new(init as u32 as u64, flags & EFD_SEMAPHORE != 0);
    install(ctx, OpenFile::new(e, oflag::O_RDWR | (flags & NONBLOCK) as u32), flags)
}

pub fn eventfd(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_eventfd(ctx, f.rdi, 0)
}

pub fn eventfd2(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_eventfd(ctx, f.rdi, f.rsi)
}

fn make_epoll(ctx: &Ctx, flags: u64) -> SysResult {
    if flags & !CLOEXEC != 0 {
        return Err(Errno::EINVAL);
    }
    install(ctx, OpenFile::new(EpollFile::new(), oflag::O_RDWR), flags & CLOEXEC)
}

pub fn epoll_create(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    if f.rdi as i32 <= 0 {
        return Err(Errno::EINVAL);
    }
    make_epoll(ctx, 0)
}

pub fn epoll_create1(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_epoll(ctx, f.rdi)
}

pub fn epoll_ctl(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [epfd, op, fd, event, ..] = f.args();
    let ep_file = ctx.file(epfd)?;
    let target = ctx.file(fd)?;
    let ep = ep_file.downcast::<EpollFile>().ok_or(Errno::EINVAL)?;
    if alloc::sync::Arc::ptr_eq(&ep_file, &target) || target.downcast::<EpollFile>().is_some() {
        // Watching itself is EINVAL; nested epolls are not offered.
        return Err(Errno::EINVAL);
    }
    let (events, data) = if op == epoll::EPOLL_CTL_DEL {
        (0, 0)
    } else {
        let b = ctx.user.read_array::<12>(event)?;
        (u32::from_le_bytes([b[0], b[1], b[2], b[3]]), u64::from_le_bytes(b[4..].try_into().unwrap_or_default()))
    };
    ep.ep.lock().ctl(op, fd, &target, events, data)?;
    // A thread waiting on this epoll may now have something to report.
    sched::wake_all(ep.key());
    Ok(0)
}

/// Runs `scan` until it reports something or `deadline` (None: forever) passes;
/// `scan` returns what it found and the keys to sleep on. With `mask`, the
/// thread's signal mask is replaced while it waits.
fn wait_for<T>(
    ctx: &Ctx,
    deadline: Option<u64>,
    mask: Option<u64>,
    mut scan: impl FnMut() -> Result<(Option<T>, Vec<u64>), Errno>,
) -> Result<Option<T>, Errno> {
    let me = ctx.thread;
    let old = mask.map(|m| me.sigmask.swap(m & !crate::sigframe::UNBLOCKABLE, Relaxed));
    let restore = || {
        if let Some(o) = old {
            me.sigmask.store(o, Relaxed);
        }
    };
    let mut last = false;
    loop {
        let (found, keys) = scan().inspect_err(|_| restore())?;
        // A wait that may not wait (a zero timeout, Go's netpoll(0) between
        // goroutines) is one look; with a mask it goes on, for a signal that
        // the mask lets in is EINTR even then, as Linux.
        let expired = mask.is_none() && deadline.is_some_and(|d| d <= mono_now());
        if found.is_some() || last || expired {
            restore();
            return Ok(found);
        }
        for key in &keys {
            sched::prepare_wait(*key);
        }
        let unwait = || {
            for key in &keys {
                sched::finish_wait(*key);
            }
        };
        // Again, now that a change wakes this thread.
        match scan() {
            Ok((Some(found), _)) => {
                unwait();
                restore();
                return Ok(Some(found));
            }
            Err(e) => {
                unwait();
                restore();
                return Err(e);
            }
            Ok((None, _)) => {}
        }
        // Wake for the TCP/IP stack's next timer too (a retransmission, a
        // keep-alive, a closing connection's), and run it: a program that only
        // ever waits here (Go's network poller) has no other thread to do it.
        let timer = crate::net::inet::next_deadline();
        let until = match (deadline, timer) {
            (Some(d), Some(t)) => Some(d.min(t)),
            (d, t) => d.or(t),
        };
        let w = sched::block(until);
        unwait();
        if w == Wake::TimedOut && deadline.is_none_or(|d| mono_now() < d) {
            crate::net::inet::tick();
            continue;
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

fn read_mask(user: &dyn UserMem, addr: u64, size: u64) -> Result<Option<u64>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    Ok(Some(user.read_u64(addr)?))
}

fn epoll_wait_until(
    ctx: &Ctx,
    epfd: u64,
    events: u64,
    max: u64,
    deadline: Option<u64>,
    mask: Option<u64>,
) -> SysResult {
    if max as i32 <= 0 || max > EP_MAX_EVENTS {
        return Err(Errno::EINVAL);
    }
    let file = ctx.file(epfd)?;
    let ep = file.downcast::<EpollFile>().ok_or(Errno::EINVAL)?;
    let max = max as usize;
    let found = wait_for(ctx, deadline, mask, || {
        ctx.user.check(events, max as u64 * 12, true)?;
        let mut s = ep.ep.lock().scan(max);
        if s.ready.is_empty() && deadline != Some(0) {
            s.keys.push(ep.key());
            return Ok((None, s.keys));
        }
        let ready = s.ready;
        let mut out = Vec::with_capacity(ready.len() * 12);
        for (e, data) in &ready {
            out.extend_from_slice(&e.to_le_bytes());
            out.extend_from_slice(&data.to_le_bytes());
        }
        ctx.user.write(events, &out)?;
        Ok((Some(ready.len() as u64), Vec::new()))
    })?;
    Ok(found.unwrap_or(0))
}

pub fn epoll_wait(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [epfd, events, max, timeout, ..] = f.args();
    let d = ms_deadline(timeout);
    epoll_wait_until(ctx, epfd, events, max, d, None)
}

pub fn epoll_pwait(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [epfd, events, max, timeout, mask, size] = f.args();
    let mask = read_mask(ctx.user, mask, size)?;
    let d = ms_deadline(timeout);
    epoll_wait_until(ctx, epfd, events, max, d, mask)
}

/// A `struct timespec` timeout (0: none) as a deadline; Some(0) for a zero timeout.
pub(super) fn ts_deadline(user: &dyn UserMem, addr: u64) -> Result<Option<u64>, Errno> {
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
    Ok(Some(if t == 0 { 0 } else { mono_now().saturating_add(t) }))
}

pub fn epoll_pwait2(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [epfd, events, max, timeout, mask, size] = f.args();
    let (d, mask) = (ts_deadline(ctx.user, timeout)?, read_mask(ctx.user, mask, size)?);
    epoll_wait_until(ctx, epfd, events, max, d, mask)
}

/// poll/ppoll on `n` `struct pollfd` at `fds`.
fn poll_until(ctx: &Ctx, fds: u64, n: u64, deadline: Option<u64>, mask: Option<u64>) -> SysResult {
    // As Linux: more entries than RLIMIT_NOFILE allows descriptors is EINVAL.
    let limit = ctx.proc().fds.lock().limit();
    if n > limit {
        return Err(Errno::EINVAL);
    }
    let found = wait_for(ctx, deadline, mask, || {
        let mut b = ctx.user.read_vec(fds, n as usize * 8)?;
        let mut keys = Vec::new();
        let mut ready = 0u64;
        for p in b.chunks_exact_mut(8) {
            let fd = i32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            let asked = u32::from(u16::from_le_bytes([p[4], p[5]]));
            let got = if fd < 0 {
                0
            } else {
                match ctx.file(fd as u64) {
                    Ok(of) => {
                        let (e, key) = poll_events(&of, asked);
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
        ctx.user.write(fds, &b)?;
        Ok((Some(ready), Vec::new()))
    })?;
    if found.is_none() {
        // Timed out: every revents is 0.
        let mut b = ctx.user.read_vec(fds, n as usize * 8)?;
        for p in b.chunks_exact_mut(8) {
            p[6..8].fill(0);
        }
        ctx.user.write(fds, &b)?;
    }
    Ok(found.unwrap_or(0))
}

pub fn poll(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fds, n, timeout, ..] = f.args();
    let d = ms_deadline(timeout);
    poll_until(ctx, fds, n, d, None)
}

pub fn ppoll(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fds, n, timeout, mask, size, ..] = f.args();
    let (d, mask) = (ts_deadline(ctx.user, timeout)?, read_mask(ctx.user, mask, size)?);
    poll_until(ctx, fds, n, d, mask)
}

/// select/pselect6 on descriptors below `nfds` (at most RLIMIT_NOFILE's): the three
/// `fd_set` bitmaps (0: none) are rewritten with the ready descriptors, EBADF for
/// a set bit of a closed one. Readable is POLLIN, POLLHUP or POLLERR; writable
/// POLLOUT or POLLERR; exceptional POLLPRI, as Linux.
fn select_until(ctx: &Ctx, nfds: u64, sets: [u64; 3], deadline: Option<u64>, mask: Option<u64>) -> SysResult {
    use crate::file::ev;
    if (nfds as i32) < 0 {
        return Err(Errno::EINVAL);
    }
    let n = (nfds as u32 as u64).min(ctx.proc().fds.lock().limit());
    let bytes = n.div_ceil(64) as usize * 8;
    let mut asked = [Vec::new(), Vec::new(), Vec::new()];
    for (a, &at) in asked.iter_mut().zip(&sets) {
        *a = if at != 0 { ctx.user.read_vec(at, bytes)? } else { alloc::vec![0; bytes] };
    }
    let bit = |set: &[u8], fd: usize| set[fd / 8] & (1 << (fd % 8)) != 0;
    let wanted = [ev::IN | ev::RDNORM | ev::HUP | ev::ERR, ev::OUT | ev::WRNORM | ev::ERR, ev::PRI];
    let found = wait_for(ctx, deadline, mask, || {
        let mut got = [alloc::vec![0u8; bytes], alloc::vec![0u8; bytes], alloc::vec![0u8; bytes]];
        let mut keys = Vec::new();
        let mut ready = 0u64;
        for fd in 0..n as usize {
            let which: Vec<usize> = (0..3).filter(|&i| bit(&asked[i], fd)).collect();
            if which.is_empty() {
                continue;
            }
            let of = ctx.file(fd as u64)?;
            let (e, key) = poll_events(&of, wanted[0] | wanted[1] | wanted[2]);
            keys.extend(key);
            for i in which {
                if e & wanted[i] != 0 {
                    got[i][fd / 8] |= 1 << (fd % 8);
                    ready += 1;
                }
            }
        }
        if ready == 0 && deadline != Some(0) {
            return Ok((None, keys));
        }
        Ok((Some((ready, got)), Vec::new()))
    })?;
    let (ready, got) = found.unwrap_or((0, [alloc::vec![0; bytes], alloc::vec![0; bytes], alloc::vec![0; bytes]]));
    for (set, &at) in got.iter().zip(&sets) {
        if at != 0 {
            ctx.user.write(at, set)?;
        }
    }
    Ok(ready)
}

/// What is left of a select timeout, written back as Linux does (errors ignored,
/// as Linux ignores them); `usec`: a `struct timeval` rather than a timespec.
fn write_remaining(ctx: &Ctx, at: u64, deadline: Option<u64>, usec: bool) {
    if at == 0 {
        return;
    }
    let Some(d) = deadline else { return };
    let left = d.saturating_sub(mono_now());
    let frac = if usec { left % 1_000_000_000 / 1000 } else { left % 1_000_000_000 };
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(left / 1_000_000_000).to_le_bytes());
    b[8..].copy_from_slice(&frac.to_le_bytes());
    let _ = ctx.user.write(at, &b);
}

pub fn select(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [nfds, r, w, e, timeout, ..] = f.args();
    let deadline = if timeout == 0 {
        None
    } else {
        let b = ctx.user.read_array::<16>(timeout)?;
        let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let usec = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        if sec < 0 || usec < 0 {
            return Err(Errno::EINVAL);
        }
        // (Linux carries microseconds past a second over.)
        let t = (sec as u64).saturating_mul(1_000_000_000).saturating_add((usec as u64).saturating_mul(1000));
        Some(if t == 0 { 0 } else { mono_now().saturating_add(t) })
    };
    let r = select_until(ctx, nfds, [r, w, e], deadline, None);
    write_remaining(ctx, timeout, deadline, true);
    r
}

/// pselect6: the sixth argument points at `{ const sigset_t *mask; size_t size }`.
pub fn pselect6(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [nfds, r, w, e, timeout, sig] = f.args();
    let deadline = ts_deadline(ctx.user, timeout)?;
    let mask = if sig == 0 {
        None
    } else {
        let b = ctx.user.read_array::<16>(sig)?;
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        read_mask(ctx.user, word(0), word(8))?
    };
    let r = select_until(ctx, nfds, [r, w, e], deadline, mask);
    write_remaining(ctx, timeout, deadline, false);
    r
}
