//! epoll: an interest list of (descriptor, open file) pairs, and its file.
//!
//! Every pollable object (pipe, eventfd, later sockets) reports its readiness
//! through `File::poll`: the ready events, a wait key (threads blocked on it sleep
//! on that key and are woken when it changes) and a generation, a counter bumped
//! on every change (data in, data out, an end closed). Readiness is computed on
//! demand, so level-triggered epoll is a scan. Edge-triggered registrations
//! remember the generation they last reported and report again only after a
//! change: a new arrival is a new edge, as on Linux, and a spurious extra event is
//! harmless (the reader gets EAGAIN). An epoll holds its files weakly: a
//! registration disappears when its file is closed everywhere, as on Linux, and
//! never keeps a pipe end open. `epoll_wait` itself is in `syscall::poll`.

use crate::errno::Errno;
use crate::file::{ev, key_of, File, FileRef, Meta, OpenFile};
use alloc::collections::BTreeMap;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::any::Any;
use onering_arch::sync::Mutex;

/// `epoll_ctl` operations.
pub const EPOLL_CTL_ADD: u64 = 1;
pub const EPOLL_CTL_DEL: u64 = 2;
pub const EPOLL_CTL_MOD: u64 = 3;

#[derive(Debug)]
struct Reg {
    file: Weak<OpenFile>,
    events: u32,
    data: u64,
    /// Generation last reported (edge-triggered), None before the first report.
    seen: Option<u64>,
    /// ONESHOT and reported: silent until the next MOD.
    disarmed: bool,
}

/// An epoll instance: its interest list, keyed like Linux's by (descriptor, file).
#[derive(Debug, Default)]
pub struct Epoll {
    regs: BTreeMap<(u64, usize), Reg>,
}

/// What one scan found: events to report (events, data) and the wait keys of every
/// watched file (to sleep on when nothing is ready).
#[derive(Debug, Default)]
pub struct Scan {
    pub ready: Vec<(u32, u64)>,
    pub keys: Vec<u64>,
}

/// Most registrations all epolls together hold (Linux's max_user_watches: 4% of
/// memory at ~160 bytes each, as ours live in the kernel heap): past it,
/// EPOLL_CTL_ADD is ENOSPC. Set at boot from guest memory ([`set_max_watches`]).
static MAX_REGS: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(16384);

/// Sets the limit on registrations for `ram` bytes of guest memory, as Linux
/// computes max_user_watches.
pub fn set_max_watches(ram: u64) {
    let n = (ram / 25 / 160) as usize;
    MAX_REGS.store(n.max(1024), core::sync::atomic::Ordering::Relaxed);
}

/// Registrations alive in all epolls.
static REGS: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

impl Drop for Epoll {
    fn drop(&mut self) {
        REGS.fetch_sub(self.regs.len(), core::sync::atomic::Ordering::Relaxed);
    }
}

impl Epoll {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.regs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regs.is_empty()
    }

    /// `epoll_ctl` on descriptor `fd`, open file `file`. `me` is this epoll's own
    /// file (watching itself is EINVAL).
    pub fn ctl(&mut self, op: u64, fd: u64, file: &FileRef, events: u32, data: u64) -> Result<(), Errno> {
        let key = (fd, Arc::as_ptr(file) as usize);
        let known = ev::IN
            | ev::PRI
            | ev::OUT
            | ev::ERR
            | ev::HUP
            | ev::RDNORM
            | 0x80
            | ev::WRNORM
            | 0x200
            | 0x400
            | ev::RDHUP
            | ev::EXCLUSIVE
            | ev::WAKEUP
            | ev::ONESHOT
            | ev::ET;
        let events = events & known;
        match op {
            EPOLL_CTL_ADD => {
                if file.poll().is_none() {
                    return Err(Errno::EPERM);
                }
                if self.regs.contains_key(&key) {
                    return Err(Errno::EEXIST);
                }
                if REGS.fetch_add(1, core::sync::atomic::Ordering::Relaxed)
                    >= MAX_REGS.load(core::sync::atomic::Ordering::Relaxed)
                {
                    REGS.fetch_sub(1, core::sync::atomic::Ordering::Relaxed);
                    return Err(Errno::ENOSPC);
                }
                self.regs.insert(key, Reg { file: Arc::downgrade(file), events, data, seen: None, disarmed: false });
                Ok(())
            }
            EPOLL_CTL_MOD => {
                let r = self.regs.get_mut(&key).ok_or(Errno::ENOENT)?;
                if events & ev::EXCLUSIVE != 0 || r.events & ev::EXCLUSIVE != 0 {
                    return Err(Errno::EINVAL);
                }
                r.events = events;
                r.data = data;
                r.seen = None;
                r.disarmed = false;
                Ok(())
            }
            EPOLL_CTL_DEL => {
                self.regs.remove(&key).ok_or(Errno::ENOENT)?;
                REGS.fetch_sub(1, core::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    /// Reports up to `max` ready registrations (edge-triggered ones only after a
    /// change, one-shot ones once) and gathers the wait keys. Registrations whose
    /// file is gone are dropped.
    pub fn scan(&mut self, max: usize) -> Scan {
        let mut out = Scan::default();
        let before = self.regs.len();
        self.regs.retain(|_, r| r.file.strong_count() > 0);
        REGS.fetch_sub(before - self.regs.len(), core::sync::atomic::Ordering::Relaxed);
        for r in self.regs.values_mut() {
            let Some(file) = r.file.upgrade() else { continue };
            let Some(now) = file.poll() else { continue };
            out.keys.push(now.key);
            if r.disarmed || out.ready.len() >= max {
                continue;
            }
            let ready = now.events & (r.events | ev::ALWAYS);
            if ready == 0 {
                continue;
            }
            if r.events & ev::ET != 0 && r.seen == Some(now.gen) {
                continue;
            }
            r.seen = Some(now.gen);
            if r.events & ev::ONESHOT != 0 {
                r.disarmed = true;
            }
            out.ready.push((ready, r.data));
        }
        out.keys.sort_unstable();
        out.keys.dedup();
        out
    }
}

/// An epoll instance as an open file.
pub struct EpollFile {
    pub ep: Mutex<Epoll>,
}

impl EpollFile {
    pub fn new() -> Self {
        EpollFile { ep: Mutex::new(Epoll::new()) }
    }

    /// What a thread in `epoll_wait` sleeps on (besides its files' keys):
    /// `epoll_ctl` wakes it.
    pub fn key(&self) -> u64 {
        key_of(self)
    }
}

impl Default for EpollFile {
    fn default() -> Self {
        Self::new()
    }
}

impl File for EpollFile {
    /// An anonymous inode, as Linux shows it: no file type, mode 0600.
    fn stat(&self) -> Meta {
        Meta { ino: self.key() & 0xffff_ffff, mode: 0o600, nlink: 1, ..Meta::default() }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::oflag;
    use crate::fs::eventfd::EventFdFile;
    use crate::fs::pipe::{pipe, PipeEnd};

    fn eventfd(n: u64) -> FileRef {
        OpenFile::new(EventFdFile::new(n, false), oflag::O_RDWR)
    }

    fn bump(f: &FileRef, v: u64) {
        f.downcast::<EventFdFile>().unwrap().counter.lock().write(v).unwrap();
    }

    #[test]
    fn level_and_edge_triggered() {
        let (r, w) = pipe(0);
        let mut ep = Epoll::new();
        ep.ctl(EPOLL_CTL_ADD, 3, &r, ev::IN, 30).unwrap();
        ep.ctl(EPOLL_CTL_ADD, 4, &w, ev::OUT | ev::ET, 40).unwrap();
        assert_eq!(ep.ctl(EPOLL_CTL_ADD, 3, &r, ev::IN, 0), Err(Errno::EEXIST));
        // The write end is writable: reported once (edge), the read end not yet.
        let s = ep.scan(16);
        assert_eq!(s.ready, [(ev::OUT, 40)]);
        assert_eq!(s.keys.len(), 1, "both ends wait on the pipe's key");
        assert!(ep.scan(16).ready.is_empty(), "no new edge");
        // Data arrives: level reports every time; the write end gets a new edge too.
        w.downcast::<PipeEnd>().unwrap().pipe().lock().write(b"hi").unwrap();
        assert_eq!(ep.scan(16).ready, [(ev::IN, 30), (ev::OUT, 40)]);
        assert_eq!(ep.scan(16).ready, [(ev::IN, 30)]);
        assert_eq!(ep.scan(1).ready.len(), 1, "at most max");
        // The writer goes: HUP for the reader; the registration of w disappears.
        drop(w);
        let s = ep.scan(16);
        assert_eq!(s.ready, [(ev::IN | ev::HUP, 30)], "data left, and hung up");
        assert_eq!(ep.len(), 1);
        assert_eq!(ep.ctl(EPOLL_CTL_DEL, 4, &r, 0, 0), Err(Errno::ENOENT));
        ep.ctl(EPOLL_CTL_DEL, 3, &r, 0, 0).unwrap();
        assert!(ep.is_empty());
    }

    #[test]
    fn oneshot_until_mod() {
        let e = eventfd(0);
        let mut ep = Epoll::new();
        ep.ctl(EPOLL_CTL_ADD, 5, &e, ev::IN | ev::ONESHOT, 7).unwrap();
        assert!(ep.scan(8).ready.is_empty());
        bump(&e, 1);
        assert_eq!(ep.scan(8).ready, [(ev::IN, 7)]);
        bump(&e, 1);
        assert!(ep.scan(8).ready.is_empty(), "disarmed");
        ep.ctl(EPOLL_CTL_MOD, 5, &e, ev::IN, 8).unwrap();
        assert_eq!(ep.scan(8).ready, [(ev::IN, 8)]);
        assert_eq!(ep.ctl(EPOLL_CTL_MOD, 6, &e, ev::IN, 8), Err(Errno::ENOENT));
        assert_eq!(ep.ctl(9, 5, &e, ev::IN, 8), Err(Errno::EINVAL));
    }

    #[test]
    fn unpollable_files() {
        let f = OpenFile::new(crate::file::tests::Plain(1), oflag::O_RDONLY);
        let mut ep = Epoll::new();
        assert_eq!(ep.ctl(EPOLL_CTL_ADD, 3, &f, ev::IN, 0), Err(Errno::EPERM));
        assert_eq!(crate::file::poll_events(&f, ev::IN | ev::OUT), (ev::IN | ev::OUT, None));
        let (r, _w) = pipe(0);
        assert_eq!(crate::file::poll_events(&r, ev::IN).0, 0);
    }
}
