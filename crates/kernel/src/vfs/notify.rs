//! inotify's logic: the watch table (which groups watch which node, under which
//! watch descriptor and mask) and each group's event queue (Linux's coalescing of
//! an identical consecutive event, IN_Q_OVERFLOW past 16384 events, reads of whole
//! `struct inotify_event`s). Pure: the tree owns the table (`Vfs::notify`) and its
//! operations report what they did through the `notify_*` methods below, under
//! the tree's lock; a group's queue is a leaf lock, and a group wakes its readers
//! through the function it was made with (the scheduler's, in the kernel). The
//! open file is `fs::inotify`.
//!
//! The cost when nothing is watched: the tree's methods look at the table's
//! emptiness (a field, under the lock they hold anyway), and files' reads, writes
//! and closes at [`active`] (one atomic load) before anything else.

use super::tree::{Data, Ino, Vfs, ROOT};
use crate::errno::Errno;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use onering_arch::sync::Mutex;

pub const IN_ACCESS: u32 = 0x1;
pub const IN_MODIFY: u32 = 0x2;
pub const IN_ATTRIB: u32 = 0x4;
pub const IN_CLOSE_WRITE: u32 = 0x8;
pub const IN_CLOSE_NOWRITE: u32 = 0x10;
pub const IN_OPEN: u32 = 0x20;
pub const IN_MOVED_FROM: u32 = 0x40;
pub const IN_MOVED_TO: u32 = 0x80;
pub const IN_CREATE: u32 = 0x100;
pub const IN_DELETE: u32 = 0x200;
pub const IN_DELETE_SELF: u32 = 0x400;
pub const IN_MOVE_SELF: u32 = 0x800;
pub const IN_ALL_EVENTS: u32 = 0xfff;
pub const IN_UNMOUNT: u32 = 0x2000;
pub const IN_Q_OVERFLOW: u32 = 0x4000;
pub const IN_IGNORED: u32 = 0x8000;
pub const IN_ONLYDIR: u32 = 0x0100_0000;
pub const IN_DONT_FOLLOW: u32 = 0x0200_0000;
pub const IN_EXCL_UNLINK: u32 = 0x0400_0000;
pub const IN_MASK_CREATE: u32 = 0x1000_0000;
pub const IN_MASK_ADD: u32 = 0x2000_0000;
pub const IN_ISDIR: u32 = 0x4000_0000;
pub const IN_ONESHOT: u32 = 0x8000_0000;
/// Every bit `inotify_add_watch` knows (a mask with none of them is EINVAL).
pub const ALL_BITS: u32 = IN_ALL_EVENTS
    | IN_UNMOUNT
    | IN_Q_OVERFLOW
    | IN_IGNORED
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
    | IN_MASK_ADD
    | IN_MASK_CREATE
    | IN_ISDIR
    | IN_ONESHOT;
/// What a watch keeps of the mask it was given.
const KEPT: u32 = IN_ALL_EVENTS | IN_ONESHOT | IN_EXCL_UNLINK;

/// Events queued per group before IN_Q_OVERFLOW (Linux's max_queued_events).
pub const MAX_QUEUED: usize = 16384;
/// `sizeof(struct inotify_event)` without the name.
pub const EVENT_SIZE: usize = 16;

/// Watches in all trees: files check it before taking the tree's lock.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether any watch exists (a hint read without a lock: the table decides).
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

/// One queued event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub wd: i32,
    pub mask: u32,
    pub cookie: u32,
    pub name: Vec<u8>,
}

impl Event {
    /// Bytes it takes in a read: the header, and the name with at least one NUL,
    /// padded to a multiple of the header's size (its `len` says all of that).
    pub fn size(&self) -> usize {
        EVENT_SIZE + self.name_len()
    }

    fn name_len(&self) -> usize {
        if self.name.is_empty() {
            0
        } else {
            (self.name.len() + 1).next_multiple_of(EVENT_SIZE)
        }
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.wd.to_le_bytes());
        out.extend_from_slice(&self.mask.to_le_bytes());
        out.extend_from_slice(&self.cookie.to_le_bytes());
        out.extend_from_slice(&(self.name_len() as u32).to_le_bytes());
        out.extend_from_slice(&self.name);
        out.resize(out.len() + self.name_len() - self.name.len(), 0);
    }
}

/// A group's queue and its watch descriptors.
#[derive(Debug)]
pub struct Queue {
    events: VecDeque<Event>,
    /// Bytes the queued events take in a read (FIONREAD).
    bytes: usize,
    limit: usize,
    /// Bumped on every change (edge-triggered epoll).
    gen: u64,
    /// Its watches: descriptor to node.
    wds: BTreeMap<i32, Ino>,
    next_wd: i32,
}

impl Queue {
    pub fn new(limit: usize) -> Queue {
        Queue { events: VecDeque::new(), bytes: 0, limit, gen: 0, wds: BTreeMap::new(), next_wd: 1 }
    }

    /// Queues `e` as Linux does: past the limit, one IN_Q_OVERFLOW (wd -1) and
    /// nothing more until reads make room; an event identical to the last one
    /// still queued (wd, mask, name: the cookie is not compared) is merged into
    /// it. Whether anything was queued.
    pub fn push(&mut self, e: Event) -> bool {
        let e = if self.events.len() >= self.limit {
            if self.events.back().is_some_and(|l| l.mask == IN_Q_OVERFLOW) {
                return false;
            }
            Event { wd: -1, mask: IN_Q_OVERFLOW, cookie: 0, name: Vec::new() }
        } else {
            if let Some(l) = self.events.back() {
                if l.mask & IN_IGNORED == 0 && l.mask == e.mask && l.wd == e.wd && l.name == e.name {
                    return false;
                }
            }
            e
        };
        self.bytes += e.size();
        self.events.push_back(e);
        self.gen += 1;
        true
    }

    /// Takes the events that fit whole in `max` bytes, as a read returns them:
    /// EAGAIN if there is none, EINVAL if the first does not fit.
    pub fn read(&mut self, max: usize) -> Result<Vec<u8>, Errno> {
        let first = self.events.front().ok_or(Errno::EAGAIN)?;
        if first.size() > max {
            return Err(Errno::EINVAL);
        }
        let mut out = Vec::new();
        while let Some(e) = self.events.front() {
            if out.len() + e.size() > max {
                break;
            }
            e.put(&mut out);
            self.bytes -= e.size();
            self.events.pop_front();
        }
        self.gen += 1;
        Ok(out)
    }

    /// Bytes a read would return with a buffer large enough (FIONREAD).
    pub fn pending(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn gen(&self) -> u64 {
        self.gen
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.events.len()
    }
}

/// An inotify instance: its queue, and how its readers are woken (with its key).
pub struct Group {
    pub queue: Mutex<Queue>,
    wake: fn(u64),
}

impl core::fmt::Debug for Group {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Group").field("key", &self.key()).finish()
    }
}

impl Group {
    pub fn new(wake: fn(u64)) -> Arc<Group> {
        Arc::new(Group { queue: Mutex::new(Queue::new(MAX_QUEUED)), wake })
    }

    /// What its readers wait on (its address: unique while it lives).
    pub fn key(&self) -> u64 {
        self as *const Group as u64
    }

    fn queue(&self, e: Event) {
        if self.queue.lock().push(e) {
            (self.wake)(self.key());
        }
    }
}

#[derive(Debug)]
struct Watch {
    group: Arc<Group>,
    wd: i32,
    mask: u32,
}

/// Which groups watch which node.
#[derive(Debug, Default)]
pub struct Watches {
    by_ino: BTreeMap<Ino, Vec<Watch>>,
    /// The last rename's cookie.
    cookie: u32,
}

impl Drop for Watches {
    fn drop(&mut self) {
        let n: usize = self.by_ino.values().map(Vec::len).sum();
        ACTIVE.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Watches {
    pub fn is_empty(&self) -> bool {
        self.by_ino.is_empty()
    }

    fn watched(&self, ino: Ino) -> bool {
        self.by_ino.contains_key(&ino)
    }

    /// `inotify_add_watch` of node `ino` for `group`: its watch descriptor, the
    /// same one again for a node it already watches (whose mask is then replaced,
    /// or added to with IN_MASK_ADD; EEXIST with IN_MASK_CREATE).
    pub fn add(&mut self, group: &Arc<Group>, ino: Ino, mask: u32) -> Result<i32, Errno> {
        let list = self.by_ino.entry(ino).or_default();
        if let Some(w) = list.iter_mut().find(|w| Arc::ptr_eq(&w.group, group)) {
            if mask & IN_MASK_CREATE != 0 {
                return Err(Errno::EEXIST);
            }
            w.mask = if mask & IN_MASK_ADD != 0 { w.mask | (mask & KEPT) } else { mask & KEPT };
            return Ok(w.wd);
        }
        let wd = {
            let mut q = group.queue.lock();
            let wd = q.next_wd;
            q.next_wd = if wd == i32::MAX { 1 } else { wd + 1 };
            q.wds.insert(wd, ino);
            wd
        };
        list.push(Watch { group: group.clone(), wd, mask: mask & KEPT });
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        Ok(wd)
    }

    /// `inotify_rm_watch`: EINVAL for a descriptor `group` does not have; queues
    /// IN_IGNORED.
    pub fn remove(&mut self, group: &Arc<Group>, wd: i32) -> Result<(), Errno> {
        let ino = group.queue.lock().wds.remove(&wd).ok_or(Errno::EINVAL)?;
        if let Some(list) = self.by_ino.get_mut(&ino) {
            let before = list.len();
            list.retain(|w| !(Arc::ptr_eq(&w.group, group) && w.wd == wd));
            ACTIVE.fetch_sub(before - list.len(), Ordering::Relaxed);
            if list.is_empty() {
                self.by_ino.remove(&ino);
            }
        }
        group.queue(Event { wd, mask: IN_IGNORED, cookie: 0, name: Vec::new() });
        Ok(())
    }

    /// The group's file closed: its watches go, without events.
    pub fn drop_group(&mut self, group: &Arc<Group>) {
        let wds = core::mem::take(&mut group.queue.lock().wds);
        for ino in wds.into_values() {
            if let Some(list) = self.by_ino.get_mut(&ino) {
                let before = list.len();
                list.retain(|w| !Arc::ptr_eq(&w.group, group));
                ACTIVE.fetch_sub(before - list.len(), Ordering::Relaxed);
                if list.is_empty() {
                    self.by_ino.remove(&ino);
                }
            }
        }
    }

    /// A fresh rename cookie (never 0).
    fn next_cookie(&mut self) -> u32 {
        self.cookie = self.cookie.wrapping_add(1).max(1);
        self.cookie
    }

    /// Event `mask` (one event bit, maybe with IN_ISDIR) to the watches of `ino`
    /// that ask for it, with `name` (empty: none); a one-shot watch then goes.
    pub fn deliver(&mut self, ino: Ino, mask: u32, cookie: u32, name: &[u8]) {
        let Some(list) = self.by_ino.get(&ino) else { return };
        let mut done = Vec::new();
        for w in list {
            if w.mask & mask & IN_ALL_EVENTS != 0 {
                w.group.queue(Event { wd: w.wd, mask, cookie, name: name.to_vec() });
                if w.mask & IN_ONESHOT != 0 {
                    done.push((w.group.clone(), w.wd));
                }
            }
        }
        for (g, wd) in done {
            let _ = self.remove(&g, wd);
        }
    }

    /// Node `ino` is gone: IN_DELETE_SELF, then IN_IGNORED for every watch on it.
    pub fn gone(&mut self, ino: Ino) {
        self.deliver(ino, IN_DELETE_SELF, 0, b"");
        let wds: Vec<_> =
            self.by_ino.get(&ino).map(|l| l.iter().map(|w| (w.group.clone(), w.wd)).collect()).unwrap_or_default();
        for (g, wd) in wds {
            let _ = self.remove(&g, wd);
        }
    }
}

/// The tree's side: each operation reports what it did here.
impl Vfs {
    /// An entry event (IN_CREATE, IN_DELETE, IN_MOVED_FROM, IN_MOVED_TO) about
    /// `name` in directory `dir`, whose node is a directory if `is_dir`.
    pub(super) fn notify_entry(&mut self, dir: Ino, mask: u32, cookie: u32, name: &[u8], is_dir: bool) {
        if self.notify.is_empty() {
            return;
        }
        self.notify.deliver(dir, mask | if is_dir { IN_ISDIR } else { 0 }, cookie, name);
    }

    /// An event on node `ino` (IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_OPEN,
    /// IN_CLOSE_*): its directory's watches see it with its name, its own
    /// watches without one. Nothing for a node no longer in the tree but for its
    /// own watches.
    pub fn notify_node(&mut self, ino: Ino, mask: u32) {
        if self.notify.is_empty() {
            return;
        }
        let n = self.node(ino);
        let mask = mask | if n.is_dir() { IN_ISDIR } else { 0 };
        let parent = n.parent;
        if ino != ROOT && !n.removed && self.notify.watched(parent) {
            let name = match &self.node(parent).data {
                Data::Dir(e) => e.iter().find(|(_, i)| **i == ino).map(|(k, _)| k.clone()),
                _ => None,
            };
            if let Some(name) = name {
                self.notify.deliver(parent, mask, 0, &name);
            }
        }
        self.notify.deliver(ino, mask, 0, b"");
    }

    /// An event only the node's own watches see (IN_MOVE_SELF; IN_ATTRIB for a
    /// changed link count).
    pub(super) fn notify_self(&mut self, ino: Ino, mask: u32) {
        if self.notify.is_empty() {
            return;
        }
        let isdir = if mask == IN_ATTRIB && self.node(ino).is_dir() { IN_ISDIR } else { 0 };
        self.notify.deliver(ino, mask | isdir, 0, b"");
    }

    /// Node `ino` left the tree for good (its last name went).
    pub(super) fn notify_gone(&mut self, ino: Ino) {
        if self.notify.is_empty() {
            return;
        }
        self.notify.gone(ino);
    }

    /// A rename's events: IN_MOVED_FROM and IN_MOVED_TO with one cookie, IN_ATTRIB
    /// for a replaced node, IN_MOVE_SELF.
    pub(super) fn notify_rename(&mut self, ino: Ino, from: (Ino, &[u8]), to: (Ino, &[u8]), replaced: Option<Ino>) {
        if self.notify.is_empty() {
            return;
        }
        let cookie = self.notify.next_cookie();
        let is_dir = self.node(ino).is_dir();
        self.notify_entry(from.0, IN_MOVED_FROM, cookie, from.1, is_dir);
        self.notify_entry(to.0, IN_MOVED_TO, cookie, to.1, is_dir);
        if let Some(old) = replaced {
            self.notify_self(old, IN_ATTRIB);
        }
        self.notify_self(ino, IN_MOVE_SELF);
    }

    /// The watch table (`inotify_add_watch`, `inotify_rm_watch`, a group's close).
    pub fn watches(&mut self) -> &mut Watches {
        &mut self.notify
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(wd: i32, mask: u32, name: &[u8]) -> Event {
        Event { wd, mask, cookie: 0, name: name.to_vec() }
    }

    #[test]
    fn events_are_laid_out_as_linux_does() {
        assert_eq!(ev(1, IN_OPEN, b"").size(), 16);
        assert_eq!(ev(1, IN_OPEN, b"abc").size(), 32);
        assert_eq!(ev(1, IN_OPEN, &[b'x'; 15]).size(), 32);
        assert_eq!(ev(1, IN_OPEN, &[b'x'; 16]).size(), 48);
        let mut q = Queue::new(10);
        q.push(Event { wd: 2, mask: IN_CREATE | IN_ISDIR, cookie: 7, name: b"d".to_vec() });
        assert_eq!(q.pending(), 32);
        let out = q.read(100).unwrap();
        assert_eq!(out.len(), 32);
        assert_eq!(&out[0..4], &2i32.to_le_bytes());
        assert_eq!(&out[4..8], &(IN_CREATE | IN_ISDIR).to_le_bytes());
        assert_eq!(&out[8..12], &7u32.to_le_bytes());
        assert_eq!(&out[12..16], &16u32.to_le_bytes());
        assert_eq!(&out[16..18], b"d\0");
        assert!(out[18..].iter().all(|b| *b == 0));
        assert_eq!(q.read(100), Err(Errno::EAGAIN));
    }

    #[test]
    fn reads_take_whole_events_and_small_buffers_are_einval() {
        let mut q = Queue::new(10);
        q.push(ev(1, IN_CREATE, b"a"));
        q.push(ev(1, IN_OPEN, b"a"));
        q.push(ev(1, IN_MODIFY, b""));
        assert_eq!(q.read(31), Err(Errno::EINVAL));
        assert_eq!(q.len(), 3, "nothing taken");
        assert_eq!(q.read(70).unwrap().len(), 64);
        assert_eq!(q.pending(), 16);
        assert_eq!(q.read(16).unwrap().len(), 16);
        assert!(q.is_empty());
    }

    #[test]
    fn identical_consecutive_events_merge() {
        let mut q = Queue::new(10);
        assert!(q.push(ev(1, IN_MODIFY, b"a")));
        assert!(!q.push(ev(1, IN_MODIFY, b"a")));
        assert!(q.push(ev(1, IN_MODIFY, b"b")));
        assert!(q.push(ev(1, IN_MODIFY, b"a")));
        assert!(q.push(ev(2, IN_MODIFY, b"a")));
        assert!(q.push(ev(2, IN_IGNORED, b"")));
        assert!(q.push(ev(2, IN_IGNORED, b"")), "never merged into an IN_IGNORED");
        q.read(1000).unwrap();
        assert!(q.push(ev(2, IN_IGNORED, b"")), "an empty queue merges nothing");
    }

    #[test]
    fn a_full_queue_overflows_once() {
        let mut q = Queue::new(3);
        for i in 0..3 {
            assert!(q.push(ev(i, IN_OPEN, b"")));
        }
        assert!(q.push(ev(9, IN_OPEN, b"")));
        assert!(!q.push(ev(10, IN_OPEN, b"")));
        assert_eq!(q.len(), 4);
        let out = q.read(1000).unwrap();
        assert_eq!(&out[48..52], &(-1i32).to_le_bytes());
        assert_eq!(&out[52..56], &IN_Q_OVERFLOW.to_le_bytes());
        assert!(q.push(ev(11, IN_OPEN, b"")));
    }

    fn no_wake(_: u64) {}

    fn drain(g: &Group) -> Vec<(i32, u32, u32, Vec<u8>)> {
        let bytes = g.queue.lock().read(1 << 20).unwrap_or_default();
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let f = |i: usize| u32::from_le_bytes(bytes[at + i..at + i + 4].try_into().unwrap());
            let len = f(12) as usize;
            let name: Vec<u8> = bytes[at + 16..at + 16 + len].iter().copied().take_while(|b| *b != 0).collect();
            out.push((f(0) as i32, f(4), f(8), name));
            at += 16 + len;
        }
        out
    }

    #[test]
    fn watches_share_descriptors_and_go_away() {
        let mut w = Watches::default();
        let g = Group::new(no_wake);
        assert_eq!(w.add(&g, 5, IN_MODIFY), Ok(1));
        assert_eq!(w.add(&g, 6, IN_ALL_EVENTS), Ok(2));
        assert_eq!(w.add(&g, 5, IN_ATTRIB | IN_MASK_ADD), Ok(1));
        assert_eq!(w.add(&g, 5, IN_ATTRIB | IN_MASK_CREATE), Err(Errno::EEXIST));
        w.deliver(5, IN_MODIFY, 0, b"");
        w.deliver(5, IN_ATTRIB, 0, b"");
        w.deliver(5, IN_OPEN, 0, b"");
        assert_eq!(drain(&g), [(1, IN_MODIFY, 0, Vec::new()), (1, IN_ATTRIB, 0, Vec::new())]);
        assert_eq!(w.add(&g, 5, IN_OPEN), Ok(1), "replaced");
        w.deliver(5, IN_MODIFY, 0, b"");
        assert!(drain(&g).is_empty());
        assert_eq!(w.remove(&g, 1), Ok(()));
        assert_eq!(w.remove(&g, 1), Err(Errno::EINVAL));
        assert_eq!(drain(&g), [(1, IN_IGNORED, 0, Vec::new())]);
        w.gone(6);
        assert_eq!(drain(&g), [(2, IN_DELETE_SELF, 0, Vec::new()), (2, IN_IGNORED, 0, Vec::new())]);
        assert!(w.is_empty());
        assert_eq!(w.add(&g, 7, IN_OPEN | IN_ONESHOT), Ok(3), "descriptors are not reused at once");
        w.deliver(7, IN_OPEN, 0, b"x");
        assert_eq!(drain(&g), [(3, IN_OPEN, 0, b"x".to_vec()), (3, IN_IGNORED, 0, Vec::new())]);
        w.add(&g, 8, IN_OPEN).unwrap();
        w.drop_group(&g);
        assert!(w.is_empty());
    }

    #[test]
    fn tree_operations_report_events() {
        let mut v = Vfs::new();
        let g = Group::new(no_wake);
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        let d = v.create(tmp, b"d", 0o755, true, 0).unwrap();
        assert_eq!(v.watches().add(&g, tmp, IN_ALL_EVENTS), Ok(1));
        assert_eq!(v.watches().add(&g, d, IN_ALL_EVENTS), Ok(2));
        let f = v.create(tmp, b"f", 0o644, false, 0).unwrap();
        assert_eq!(v.watches().add(&g, f, IN_ALL_EVENTS), Ok(3));
        v.notify_node(f, IN_MODIFY);
        v.set_mode(f, 0o600).unwrap();
        v.rename(tmp, b"f", d, b"g").unwrap();
        v.remove(d, b"g", false).unwrap();
        v.remove(tmp, b"d", true).unwrap();
        let s = |x: &[u8]| x.to_vec();
        let got = drain(&g);
        let cookie = got[5].2;
        assert!(cookie != 0 && got[6].2 == cookie);
        assert_eq!(
            got,
            [
                (1, IN_CREATE, 0, s(b"f")),
                (1, IN_MODIFY, 0, s(b"f")),
                (3, IN_MODIFY, 0, s(b"")),
                (1, IN_ATTRIB, 0, s(b"f")),
                (3, IN_ATTRIB, 0, s(b"")),
                (1, IN_MOVED_FROM, cookie, s(b"f")),
                (2, IN_MOVED_TO, cookie, s(b"g")),
                (3, IN_MOVE_SELF, 0, s(b"")),
                (3, IN_ATTRIB, 0, s(b"")),
                (3, IN_DELETE_SELF, 0, s(b"")),
                (3, IN_IGNORED, 0, s(b"")),
                (2, IN_DELETE, 0, s(b"g")),
                (2, IN_DELETE_SELF, 0, s(b"")),
                (2, IN_IGNORED, 0, s(b"")),
                (1, IN_DELETE | IN_ISDIR, 0, s(b"d")),
            ]
        );
        v.watches().drop_group(&g);
        assert!(v.watches().is_empty());
    }
}
