//! epoll: an interest list of (descriptor, open file) pairs, a ready list, and
//! its file.
//!
//! Every pollable object (pipe, eventfd, socket) reports its readiness through
//! `File::poll`: the ready events, a wait key (threads blocked on it sleep on
//! that key, and whoever changes the object wakes the key) and a generation, a
//! counter bumped on every change. Each registration watches its file's key
//! (`sched::watch_key`): a wake-up puts the registration on the epoll's ready
//! list and wakes the epoll's own key, as Linux's `ep_poll_callback` does. So
//! `epoll_wait` looks only at registrations whose files changed (and
//! level-triggered ones that were ready last time), however many files are
//! watched: ten thousand idle connections cost a wait nothing. A registration
//! is also put on the list when it is added or modified (its file may be ready
//! already).
//!
//! What is reported is still computed by polling the file: edge-triggered
//! registrations remember the generation they last reported and report again
//! only after a change (a new arrival is a new edge, as on Linux; a spurious
//! extra event is harmless, the reader gets EAGAIN); level-triggered ones go back
//! on the list after each report, as on Linux. Events come out in the order their
//! files changed. An epoll holds its files weakly: a registration disappears
//! when its file is closed everywhere, as on Linux, and never keeps a pipe end
//! open. `epoll_wait` itself is in `syscall::poll`.

use crate::errno::Errno;
use crate::file::{ev, File, FileRef, Meta, OpenFile};
use crate::task::sched::{self, Watcher};
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::any::Any;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use spin::Mutex;

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
    /// Its name on the ready list, and the wait key it watches (its file's).
    tag: u64,
    key: u64,
}

/// The registrations (by tag) that may have something to report, oldest change
/// first. The scheduler fills it (`fired`, under its lock: this lock is a leaf).
#[derive(Debug, Default)]
struct Ready {
    order: VecDeque<u64>,
    queued: BTreeSet<u64>,
}

#[derive(Debug, Default)]
pub struct ReadyList {
    list: Mutex<Ready>,
}

impl ReadyList {
    fn push(&self, tag: u64) {
        let mut r = self.list.lock();
        if r.queued.insert(tag) {
            r.order.push_back(tag);
        }
    }

    fn take(&self) -> VecDeque<u64> {
        let mut r = self.list.lock();
        r.queued.clear();
        core::mem::take(&mut r.order)
    }

    /// The epoll's wait key: its waiters sleep on it, and a fired registration
    /// wakes it.
    fn key(&self) -> u64 {
        self as *const ReadyList as u64
    }
}

impl Watcher for ReadyList {
    fn fired(&self, tag: u64) -> Option<u64> {
        self.push(tag);
        Some(self.key())
    }
}

/// An epoll instance: its interest list, keyed like Linux's by (descriptor, file),
/// and its ready list.
#[derive(Debug)]
pub struct Epoll {
    regs: BTreeMap<(u64, usize), Reg>,
    /// Tag to interest-list key.
    tags: BTreeMap<u64, (u64, usize)>,
    ready: Arc<ReadyList>,
    next_tag: u64,
    /// The interest list is swept of closed files when it reaches this length.
    sweep_at: usize,
}

/// Most registrations all epolls together hold (Linux's max_user_watches: 4% of
/// memory at ~160 bytes each, as ours live in the kernel heap): past it,
/// EPOLL_CTL_ADD is ENOSPC. Set at boot from guest memory ([`set_max_watches`]).
static MAX_REGS: AtomicUsize = AtomicUsize::new(16384);

/// Sets the limit on registrations for `ram` bytes of guest memory, as Linux
/// computes max_user_watches.
pub fn set_max_watches(ram: u64) {
    let n = (ram / 25 / 160) as usize;
    MAX_REGS.store(n.max(1024), Relaxed);
}

/// Registrations alive in all epolls.
static REGS: AtomicUsize = AtomicUsize::new(0);

impl Drop for Epoll {
    fn drop(&mut self) {
        REGS.fetch_sub(self.regs.len(), Relaxed);
        let w = self.watcher();
        for r in self.regs.values() {
            sched::unwatch_key(r.key, &w, r.tag);
        }
    }
}

impl Default for Epoll {
    fn default() -> Self {
        Self::new()
    }
}

impl Epoll {
    pub fn new() -> Self {
        Epoll {
            regs: BTreeMap::new(),
            tags: BTreeMap::new(),
            ready: Arc::new(ReadyList::default()),
            next_tag: 1,
            sweep_at: 64,
        }
    }

    pub fn len(&self) -> usize {
        self.regs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regs.is_empty()
    }

    /// The epoll's wait key (what `epoll_wait` sleeps on).
    pub fn key(&self) -> u64 {
        self.ready.key()
    }

    fn watcher(&self) -> Weak<dyn Watcher> {
        let w: Weak<ReadyList> = Arc::downgrade(&self.ready);
        w
    }

    fn remove(&mut self, k: (u64, usize)) -> Option<Reg> {
        let r = self.regs.remove(&k)?;
        self.tags.remove(&r.tag);
        sched::unwatch_key(r.key, &self.watcher(), r.tag);
        REGS.fetch_sub(1, Relaxed);
        Some(r)
    }

    /// Drops the registrations of files closed everywhere.
    fn sweep(&mut self) {
        let dead: Vec<(u64, usize)> =
            self.regs.iter().filter(|(_, r)| r.file.strong_count() == 0).map(|(k, _)| *k).collect();
        for k in dead {
            self.remove(k);
        }
        self.sweep_at = (self.regs.len() * 2).max(64);
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
                let Some(now) = file.poll() else { return Err(Errno::EPERM) };
                if self.regs.contains_key(&key) {
                    return Err(Errno::EEXIST);
                }
                if self.regs.len() >= self.sweep_at {
                    self.sweep();
                }
                if REGS.fetch_add(1, Relaxed) >= MAX_REGS.load(Relaxed) {
                    REGS.fetch_sub(1, Relaxed);
                    return Err(Errno::ENOSPC);
                }
                let tag = self.next_tag;
                self.next_tag += 1;
                let reg =
                    Reg { file: Arc::downgrade(file), events, data, seen: None, disarmed: false, tag, key: now.key };
                self.regs.insert(key, reg);
                self.tags.insert(tag, key);
                sched::watch_key(now.key, self.watcher(), tag);
                self.ready.push(tag);
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
                let tag = r.tag;
                self.ready.push(tag);
                Ok(())
            }
            EPOLL_CTL_DEL => {
                self.remove(key).ok_or(Errno::ENOENT)?;
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    /// Reports up to `max` ready registrations (edge-triggered ones only after a
    /// change, one-shot ones once) from the ready list, as (events, data).
    /// Registrations whose file is gone are dropped.
    pub fn scan(&mut self, max: usize) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        let mut again = Vec::new();
        let mut left = self.ready.take();
        while let Some(tag) = left.pop_front() {
            if out.len() >= max {
                again.push(tag);
                again.extend(left.drain(..));
                break;
            }
            let Some(&k) = self.tags.get(&tag) else { continue };
            let Some(r) = self.regs.get_mut(&k) else { continue };
            let Some(file) = r.file.upgrade() else {
                self.remove(k);
                continue;
            };
            if r.disarmed {
                continue;
            }
            let Some(now) = file.poll() else { continue };
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
            } else if r.events & ev::ET == 0 {
                // Level-triggered: looked at again next time, as long as it is ready.
                again.push(tag);
            }
            out.push((ready, r.data));
        }
        for tag in again {
            self.ready.push(tag);
        }
        out
    }
}

/// An epoll instance as an open file.
pub struct EpollFile {
    pub ep: Mutex<Epoll>,
    key: u64,
}

impl EpollFile {
    pub fn new() -> Self {
        let ep = Epoll::new();
        let key = ep.key();
        EpollFile { ep: Mutex::new(ep), key }
    }

    /// What a thread in `epoll_wait` sleeps on: `epoll_ctl` and its files'
    /// wake-ups wake it.
    pub fn key(&self) -> u64 {
        self.key
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
    use alloc::vec::Vec;

    fn eventfd(n: u64) -> FileRef {
        OpenFile::new(EventFdFile::new(n, false), oflag::O_RDWR)
    }

    fn bump(f: &FileRef, v: u64) {
        f.downcast::<EventFdFile>().unwrap().counter.lock().write(v).unwrap();
        changed(f);
    }

    /// What the file's own code does after a change: wakes its key.
    fn changed(f: &FileRef) {
        sched::wake_all(f.poll().unwrap().key);
    }

    #[test]
    fn level_and_edge_triggered() {
        let (r, w) = pipe(0);
        let mut ep = Epoll::new();
        ep.ctl(EPOLL_CTL_ADD, 3, &r, ev::IN, 30).unwrap();
        ep.ctl(EPOLL_CTL_ADD, 4, &w, ev::OUT | ev::ET, 40).unwrap();
        assert_eq!(ep.ctl(EPOLL_CTL_ADD, 3, &r, ev::IN, 0), Err(Errno::EEXIST));
        // The write end is writable: reported once (edge), the read end not yet.
        assert_eq!(ep.scan(16), [(ev::OUT, 40)]);
        assert!(ep.scan(16).is_empty(), "no new edge");
        // Data arrives: level reports every time; the write end gets a new edge too.
        w.downcast::<PipeEnd>().unwrap().pipe().lock().write(b"hi").unwrap();
        changed(&w);
        assert_eq!(ep.scan(16), [(ev::IN, 30), (ev::OUT, 40)]);
        assert_eq!(ep.scan(16), [(ev::IN, 30)]);
        assert_eq!(ep.scan(1).len(), 1, "at most max");
        // The writer goes: HUP for the reader; the registration of w disappears.
        drop(w);
        changed(&r);
        assert_eq!(ep.scan(16), [(ev::IN | ev::HUP, 30)], "data left, and hung up");
        ep.sweep();
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
        assert!(ep.scan(8).is_empty());
        bump(&e, 1);
        assert_eq!(ep.scan(8), [(ev::IN, 7)]);
        bump(&e, 1);
        assert!(ep.scan(8).is_empty(), "disarmed");
        ep.ctl(EPOLL_CTL_MOD, 5, &e, ev::IN, 8).unwrap();
        assert_eq!(ep.scan(8), [(ev::IN, 8)]);
        assert_eq!(ep.ctl(EPOLL_CTL_MOD, 6, &e, ev::IN, 8), Err(Errno::ENOENT));
        assert_eq!(ep.ctl(9, 5, &e, ev::IN, 8), Err(Errno::EINVAL));
    }

    #[test]
    fn only_changed_files_are_looked_at_in_the_order_they_changed() {
        let files: Vec<FileRef> = (0..1000).map(|_| eventfd(0)).collect();
        let mut ep = Epoll::new();
        for (i, f) in files.iter().enumerate() {
            ep.ctl(EPOLL_CTL_ADD, i as u64, f, ev::IN | ev::ET, i as u64).unwrap();
        }
        assert!(ep.scan(64).is_empty());
        assert!(ep.ready.take().is_empty(), "nothing left on the ready list");
        bump(&files[700], 1);
        bump(&files[3], 1);
        bump(&files[700], 1);
        assert_eq!(ep.scan(64), [(ev::IN, 700), (ev::IN, 3)]);
        assert!(ep.scan(64).is_empty(), "edge-triggered: reported once");
        // A file closed everywhere leaves the list; a deleted one stops firing.
        ep.ctl(EPOLL_CTL_DEL, 3, &files[3], 0, 0).unwrap();
        bump(&files[3], 1);
        assert!(ep.scan(64).is_empty());
        let n = ep.len();
        drop(files);
        ep.sweep();
        assert_eq!((n, ep.len()), (999, 0));
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
