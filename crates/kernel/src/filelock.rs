//! File locks, with Linux's rules: record locks (`fcntl`) over byte ranges, owned by
//! a process (POSIX locks) or by an open file description (OFD locks), and whole-file
//! `flock` locks, owned by an open file description. Record locks of different
//! owners conflict whatever their kinds (a POSIX and an OFD lock of the same process
//! do too); `flock` locks conflict only with each other.
//!
//! Pure bookkeeping, tested on the host, as `futex` is for futex waits: the system
//! calls (`syscall::fs`) turn a `struct flock` into an inclusive byte range, and the
//! task layer (`task::filelock`) holds the one table, sleeps while a lock is taken by
//! someone else and wakes the waiters of a file when its locks change. A file's
//! record locks are kept grouped by owner, each owner's in order of their start, the
//! owners in the order they first locked: the order of Linux's list, so `F_GETLK`
//! reports the lock Linux would. An owner's locks of one kind never overlap or touch
//! (they are merged), so a change is a split of its neighbours and one merge.
//!
//! Deadlock detection is Linux's: a process about to wait for a lock looks at what
//! that lock's owner is itself waiting for, and so on, up to ten steps; finding
//! itself is EDEADLK. As on Linux only waits for POSIX locks take part (an OFD owner
//! is no process), and a waiting OFD request is never refused.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// The largest offset: a lock "to the end of the file" (`l_len` 0) ends here.
pub const OFFSET_MAX: i64 = i64::MAX;

/// Linux's `MAX_DEADLK_ITERATIONS`: a longer chain of waits is not looked at.
const MAX_DEADLK_ITERATIONS: usize = 10;

/// A locked file: its tree node, or (files without one: pipes, sockets) an object's
/// stable identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileId {
    Node(u64),
    Object(u64),
}

/// Who owns a record lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// A process (pid): POSIX locks.
    Process(u64),
    /// An open file description (an identity unique while it lives): OFD locks.
    Ofd(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// A record lock over the bytes `start..=end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub owner: Owner,
    pub kind: Kind,
    pub start: i64,
    pub end: i64,
}

impl Record {
    fn overlaps(&self, start: i64, end: i64) -> bool {
        self.start <= end && start <= self.end
    }

    /// Overlaps `start..=end` or is right next to it.
    fn touches(&self, start: i64, end: i64) -> bool {
        self.start <= end.saturating_add(1) && start.saturating_sub(1) <= self.end
    }
}

/// Whether a lock of kind `a` and one of kind `b` (of different owners) conflict.
fn conflicting(a: Kind, b: Kind) -> bool {
    a == Kind::Write || b == Kind::Write
}

#[derive(Debug, Default)]
struct FileLocks {
    records: Vec<Record>,
    /// `flock` locks: (open file description, kind).
    flocks: Vec<(u64, Kind)>,
}

impl FileLocks {
    fn is_empty(&self) -> bool {
        self.records.is_empty() && self.flocks.is_empty()
    }
}

/// A lock request as a file backed by a host file sees it (`File::host_lock`), after
/// onering's table found no conflict in the guest; `kind` None releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostLock {
    /// A record lock over `start..=end` (`end` [`OFFSET_MAX`]: to the end).
    Record { owner: Owner, kind: Option<Kind>, start: i64, end: i64 },
    /// A `flock` lock of the open file description.
    Flock { kind: Option<Kind> },
}

/// A thread waiting for a record lock: its owner, and the owner of the lock it
/// waits for.
#[derive(Clone, Copy, Debug)]
struct Waiter {
    tid: u64,
    owner: Owner,
    blocker: Owner,
}

/// Every file's locks, and who waits for a POSIX lock.
#[derive(Debug, Default)]
pub struct LockTable {
    files: BTreeMap<FileId, FileLocks>,
    waiters: Vec<Waiter>,
    /// Record locks owned by processes (a close looks at the table only if some are).
    process_records: usize,
}

impl LockTable {
    pub const fn new() -> Self {
        LockTable { files: BTreeMap::new(), waiters: Vec::new(), process_records: 0 }
    }

    /// How many record locks processes own, in all files.
    pub fn process_records(&self) -> usize {
        self.process_records
    }

    /// The first lock that keeps `owner` from taking a `kind` lock over
    /// `start..=end`.
    pub fn conflict(&self, id: FileId, owner: Owner, kind: Kind, start: i64, end: i64) -> Option<Record> {
        let f = self.files.get(&id)?;
        f.records.iter().find(|r| r.owner != owner && r.overlaps(start, end) && conflicting(r.kind, kind)).copied()
    }

    /// `F_GETLK`: the lock that would keep `owner` from taking a `kind` lock over
    /// `start..=end`; for `kind` None (`F_OFD_GETLK` with `F_UNLCK`, Linux 6.6) the
    /// first lock of `owner` itself over the range.
    pub fn test(&self, id: FileId, owner: Owner, kind: Option<Kind>, start: i64, end: i64) -> Option<Record> {
        match kind {
            Some(k) => self.conflict(id, owner, k, start, end),
            None => self.files.get(&id)?.records.iter().find(|r| r.owner == owner && r.overlaps(start, end)).copied(),
        }
    }

    /// Sets `owner`'s lock over `start..=end` to `kind` (None: unlocks it), without
    /// looking for conflicts (see [`Self::conflict`]): its locks there are replaced,
    /// cut where they reach past the range, and merged with neighbours of the same
    /// kind.
    pub fn apply(&mut self, id: FileId, owner: Owner, kind: Option<Kind>, start: i64, end: i64) {
        let f = self.files.entry(id).or_default();
        // The owner's locks are together; they go back where they were.
        let at = f.records.iter().position(|r| r.owner == owner).unwrap_or(f.records.len());
        let mut mine = Vec::new();
        f.records.retain(|r| {
            if r.owner == owner {
                mine.push(*r);
            }
            r.owner != owner
        });
        let (mut s, mut e) = (start, end);
        let mut out = Vec::with_capacity(mine.len() + 2);
        for r in &mine {
            if kind == Some(r.kind) && r.touches(start, end) {
                s = s.min(r.start);
                e = e.max(r.end);
            } else if !r.overlaps(start, end) {
                out.push(*r);
            } else {
                if r.start < start {
                    out.push(Record { end: start - 1, ..*r });
                }
                if r.end > end {
                    out.push(Record { start: end + 1, ..*r });
                }
            }
        }
        if let Some(kind) = kind {
            out.push(Record { owner, kind, start: s, end: e });
        }
        out.sort_by_key(|r| r.start);
        if let Owner::Process(_) = owner {
            self.process_records = self.process_records + out.len() - mine.len();
        }
        f.records.splice(at..at, out);
        self.forget_if_empty(id);
    }

    fn forget_if_empty(&mut self, id: FileId) {
        if self.files.get(&id).is_some_and(FileLocks::is_empty) {
            self.files.remove(&id);
        }
    }

    /// Drops the record locks of `owner` on `id`; whether any went.
    fn drop_records(&mut self, id: FileId, owner: Owner) -> bool {
        let Some(f) = self.files.get_mut(&id) else {
            return false;
        };
        let before = f.records.len();
        f.records.retain(|r| r.owner != owner);
        let gone = before - f.records.len();
        if let Owner::Process(_) = owner {
            self.process_records -= gone;
        }
        self.forget_if_empty(id);
        gone > 0
    }

    /// A process closed a descriptor of `id`: its POSIX locks on the file go (all of
    /// them, whichever descriptor took them, as on Linux). Whether any went.
    pub fn release_process_file(&mut self, id: FileId, pid: u64) -> bool {
        self.drop_records(id, Owner::Process(pid))
    }

    /// A process ended: its POSIX locks go. The files that had some.
    pub fn release_process(&mut self, pid: u64) -> Vec<FileId> {
        let ids: Vec<FileId> = self
            .files
            .iter()
            .filter(|(_, f)| f.records.iter().any(|r| r.owner == Owner::Process(pid)))
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            self.drop_records(*id, Owner::Process(pid));
        }
        ids
    }

    /// Open file description `ofd` of file `id` went: its OFD and `flock` locks go.
    /// Whether any went.
    pub fn release_ofd(&mut self, id: FileId, ofd: u64) -> bool {
        let flock = self.flock_remove(id, ofd);
        self.drop_records(id, Owner::Ofd(ofd)) || flock
    }

    /// The `flock` lock `ofd` holds on `id`.
    pub fn flock_held(&self, id: FileId, ofd: u64) -> Option<Kind> {
        self.files.get(&id)?.flocks.iter().find(|(o, _)| *o == ofd).map(|(_, k)| *k)
    }

    /// Releases `ofd`'s `flock` lock on `id`; whether it had one.
    pub fn flock_remove(&mut self, id: FileId, ofd: u64) -> bool {
        let Some(f) = self.files.get_mut(&id) else {
            return false;
        };
        let before = f.flocks.len();
        f.flocks.retain(|(o, _)| *o != ofd);
        let gone = f.flocks.len() != before;
        self.forget_if_empty(id);
        gone
    }

    /// Whether another open file description's `flock` lock keeps `ofd` from a
    /// `kind` lock.
    pub fn flock_conflict(&self, id: FileId, ofd: u64, kind: Kind) -> bool {
        self.files.get(&id).is_some_and(|f| f.flocks.iter().any(|(o, k)| *o != ofd && conflicting(*k, kind)))
    }

    /// Gives `ofd` a `kind` `flock` lock on `id` (in place of the one it had).
    pub fn flock_add(&mut self, id: FileId, ofd: u64, kind: Kind) {
        let f = self.files.entry(id).or_default();
        f.flocks.retain(|(o, _)| *o != ofd);
        f.flocks.push((ofd, kind));
    }

    /// Thread `tid`, for `owner`, waits for a lock of `blocker`. Only waits for a
    /// POSIX lock are seen by the deadlock check (as Linux's `blocked_hash`).
    pub fn wait(&mut self, tid: u64, owner: Owner, blocker: Owner) {
        self.unwait(tid);
        if let Owner::Process(_) = blocker {
            self.waiters.push(Waiter { tid, owner, blocker });
        }
    }

    /// Thread `tid` waits no more.
    pub fn unwait(&mut self, tid: u64) {
        self.waiters.retain(|w| w.tid != tid);
    }

    /// Whether `owner` waiting for a lock of `blocker` closes a cycle of waits:
    /// `blocker` waits (through at most ten owners) for `owner`. Never for an OFD
    /// owner, as on Linux.
    pub fn would_deadlock(&self, owner: Owner, blocker: Owner) -> bool {
        if let Owner::Ofd(_) = owner {
            return false;
        }
        let mut b = blocker;
        for _ in 0..=MAX_DEADLK_ITERATIONS {
            match self.waiters.iter().find(|w| w.owner == b) {
                Some(w) if w.blocker == owner => return true,
                Some(w) => b = w.blocker,
                None => return false,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::{Read, Write};

    const F: FileId = FileId::Node(7);
    const P: Owner = Owner::Process(1);
    const Q: Owner = Owner::Process(2);
    const A: Owner = Owner::Ofd(0x1000);

    /// The owner's locks on F, as (kind, start, end).
    fn of(t: &LockTable, o: Owner) -> Vec<(Kind, i64, i64)> {
        t.files.get(&F).map_or(Vec::new(), |f| {
            f.records.iter().filter(|r| r.owner == o).map(|r| (r.kind, r.start, r.end)).collect()
        })
    }

    #[test]
    fn a_lock_inside_another_splits_it_and_the_same_kind_merges_back() {
        let mut t = LockTable::new();
        t.apply(F, P, Some(Read), 0, 99);
        t.apply(F, P, Some(Write), 10, 19);
        assert_eq!(of(&t, P), [(Read, 0, 9), (Write, 10, 19), (Read, 20, 99)]);
        t.apply(F, P, Some(Read), 10, 19);
        assert_eq!(of(&t, P), [(Read, 0, 99)], "merged with both neighbours");
        t.apply(F, P, None, 50, 59);
        assert_eq!(of(&t, P), [(Read, 0, 49), (Read, 60, 99)]);
        t.apply(F, P, Some(Read), 100, 109);
        assert_eq!(of(&t, P), [(Read, 0, 49), (Read, 60, 109)], "adjacent: merged");
        t.apply(F, P, Some(Write), 45, 65);
        assert_eq!(of(&t, P), [(Read, 0, 44), (Write, 45, 65), (Read, 66, 109)]);
        t.apply(F, P, None, 0, OFFSET_MAX);
        assert!(of(&t, P).is_empty());
        assert!(t.files.is_empty(), "an empty file is forgotten");
        assert_eq!(t.process_records(), 0);
    }

    #[test]
    fn to_the_end_of_the_file() {
        let mut t = LockTable::new();
        t.apply(F, P, Some(Write), 10, OFFSET_MAX);
        t.apply(F, P, None, 20, 29);
        assert_eq!(of(&t, P), [(Write, 10, 19), (Write, 30, OFFSET_MAX)]);
        t.apply(F, P, Some(Write), 0, 9);
        assert_eq!(of(&t, P), [(Write, 0, 19), (Write, 30, OFFSET_MAX)]);
        assert_eq!(t.process_records(), 2);
    }

    #[test]
    fn owners_conflict_unless_both_read() {
        let mut t = LockTable::new();
        t.apply(F, P, Some(Read), 0, 9);
        assert_eq!(t.conflict(F, A, Read, 0, 9), None);
        assert_eq!(t.conflict(F, A, Write, 9, 20), Some(Record { owner: P, kind: Read, start: 0, end: 9 }));
        assert_eq!(t.conflict(F, A, Write, 10, 20), None);
        assert_eq!(t.conflict(F, P, Write, 0, 9), None, "its own lock never conflicts");
        assert_eq!(t.conflict(FileId::Node(8), A, Write, 0, 9), None, "another file");
        t.apply(F, A, Some(Write), 20, 29);
        assert_eq!(t.conflict(F, Q, Write, 0, 100).map(|r| r.owner), Some(P), "the first in the list");
        assert_eq!(t.conflict(F, Q, Read, 0, 100).map(|r| r.owner), Some(A));
        // F_OFD_GETLK with F_UNLCK: the owner's own lock.
        assert_eq!(t.test(F, A, None, 0, 100).map(|r| r.start), Some(20));
        assert_eq!(t.test(F, Q, None, 0, 100), None);
    }

    #[test]
    fn releases() {
        let mut t = LockTable::new();
        let g = FileId::Object(0x5000);
        t.apply(F, P, Some(Read), 0, 9);
        t.apply(g, P, Some(Read), 0, 9);
        t.apply(F, A, Some(Read), 0, 9);
        t.flock_add(F, 0x1000, Write);
        assert!(t.release_process_file(F, 1));
        assert!(!t.release_process_file(F, 1));
        assert_eq!(t.process_records(), 1);
        assert_eq!(t.release_process(1), [g]);
        assert_eq!(t.process_records(), 0);
        assert!(t.release_ofd(F, 0x1000));
        assert!(!t.release_ofd(F, 0x1000));
        assert!(t.files.is_empty());
    }

    #[test]
    fn flock_locks() {
        let mut t = LockTable::new();
        t.flock_add(F, 1, Read);
        assert!(!t.flock_conflict(F, 2, Read));
        assert!(t.flock_conflict(F, 2, Write));
        assert!(!t.flock_conflict(F, 1, Write), "its own lock is converted");
        t.flock_add(F, 1, Write);
        assert_eq!(t.flock_held(F, 1), Some(Write));
        assert!(t.flock_conflict(F, 2, Read));
        // Record locks do not see them.
        assert_eq!(t.conflict(F, P, Write, 0, OFFSET_MAX), None);
        assert!(t.flock_remove(F, 1));
        assert_eq!(t.flock_held(F, 1), None);
        assert!(!t.flock_conflict(F, 2, Write));
    }

    #[test]
    fn a_cycle_of_waits_is_a_deadlock() {
        let mut t = LockTable::new();
        // Q waits for a lock of P: P waiting for Q's lock would close the cycle.
        t.wait(20, Q, P);
        assert!(t.would_deadlock(P, Q));
        assert!(!t.would_deadlock(Owner::Process(3), Q));
        // Through a third: R waits for Q, Q for P; P must not wait for R.
        let r = Owner::Process(3);
        t.wait(30, r, Q);
        assert!(t.would_deadlock(P, r));
        t.unwait(20);
        assert!(!t.would_deadlock(P, r));
        // An OFD owner waiting for a POSIX lock counts (as on Linux, in one process):
        // A waits for P; P waiting for a lock of A is a deadlock.
        t.wait(40, A, P);
        assert!(t.would_deadlock(P, A));
        // ...but an OFD request is never refused, and a wait for an OFD lock is not seen.
        assert!(!t.would_deadlock(A, P));
        t.wait(50, P, A);
        assert!(!t.would_deadlock(A, P));
    }

    #[test]
    fn long_chains_are_not_followed() {
        let mut t = LockTable::new();
        // Process i+1 waits for process i, for i in 1..=20: process 1 waiting for
        // 21 closes a cycle of 21, past Linux's limit.
        for i in 1..=20u64 {
            t.wait(i, Owner::Process(i + 1), Owner::Process(i));
        }
        assert!(!t.would_deadlock(Owner::Process(1), Owner::Process(21)));
        assert!(t.would_deadlock(Owner::Process(1), Owner::Process(5)));
    }
}
