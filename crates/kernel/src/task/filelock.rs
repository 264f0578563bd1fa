//! Taking, waiting for and releasing file locks: the one lock table
//! (`crate::filelock`, which has the rules) behind a lock of its own, and the
//! waiting the table cannot do. As for futexes, the system calls (`syscall::fs`:
//! `fcntl`, `flock`) parse the arguments and call here.
//!
//! A thread that must wait registers on its file's wait key under the table's lock
//! and blocks with no lock held; whatever releases or downgrades a lock on that file
//! wakes every thread waiting on it after the table's lock is dropped, and each looks
//! again (a waiter registered before the change cannot miss it). So a waiting thread
//! uses no CPU, and a signal ends its wait (ERESTARTSYS: EINTR, or the call again
//! after an SA_RESTART handler, as on Linux).
//!
//! Releases: a process's POSIX locks on a file when it closes any descriptor of it
//! (`closed`, from close, dup2 and dup3) and all of them when it ends
//! (`process_ended`); an open file description's OFD and `flock` locks when it goes
//! (its `Drop` calls [`release_owned`], registered with the first such lock).

use super::sched::{self, Wake};
use super::thread::current;
use crate::errno::Errno;
use crate::file::{key_of, OpenFile};
use crate::filelock::{FileId, HostLock, Kind, LockTable, Owner};
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use onering_arch::sync::Mutex;

static LOCKS: Mutex<LockTable> = Mutex::new(LockTable::new());

/// The table's count of POSIX locks, read without its lock: a close looks at the
/// table only when some process holds one.
static PROCESS_RECORDS: AtomicUsize = AtomicUsize::new(0);

/// What a lock on `of` locks: its tree node; for files without one, the object's
/// wait key (the two ends of a pipe share theirs, and, as on Linux, the pipe's one
/// inode) or its address. Both are fixed and unique while the file is open.
pub fn file_id(of: &OpenFile) -> FileId {
    match of.node() {
        Some(ino) => FileId::Node(ino as u64),
        None => FileId::Object(of.wait_key().unwrap_or_else(|| key_of(of.obj()))),
    }
}

/// The wait key of the threads waiting for a lock on `id`. A tag no address or
/// other key has in its top bits; should two files still share a key, a wake-up
/// only makes a waiter look again.
fn key(id: FileId) -> u64 {
    const TAG: u64 = 0x6c6f_636b << 32; // "lock"
    match id {
        FileId::Node(n) => TAG | n,
        FileId::Object(a) => TAG ^ a,
    }
}

/// After a change of the table's POSIX locks.
fn count(t: &LockTable) {
    PROCESS_RECORDS.store(t.process_records(), Relaxed);
}

/// `of` now owns locks that go when it does.
fn owns_locks(of: &OpenFile) {
    crate::file::on_lock_owner_drop(release_owned);
    of.owns_locks();
}

/// Blocks the calling thread on `id`'s wait key, on which it registered under the
/// table's lock; ERESTARTSYS if a signal ends the wait.
fn block_on(id: FileId) -> Result<(), Errno> {
    let w = sched::block(None);
    sched::finish_wait(key(id));
    LOCKS.lock().unwait(current().tid());
    if w == Wake::Interrupted {
        return Err(Errno::ERESTARTSYS);
    }
    Ok(())
}

/// `F_SETLK` and the like: sets `owner`'s record lock over `start..=end` on `of`'s
/// file to `kind` (None: unlocks). A lock of another owner in the way is EAGAIN, or,
/// with `wait`, waited for (EDEADLK if that would close a cycle of waits).
pub fn set_record(
    of: &OpenFile,
    owner: Owner,
    kind: Option<Kind>,
    start: i64,
    end: i64,
    wait: bool,
) -> Result<(), Errno> {
    let id = file_id(of);
    loop {
        let mut t = LOCKS.lock();
        match kind.and_then(|k| t.conflict(id, owner, k, start, end)) {
            None => {
                of.obj().host_lock(of, &HostLock::Record { owner, kind, start, end })?;
                t.apply(id, owner, kind, start, end);
                count(&t);
                drop(t);
                if let Owner::Ofd(_) = owner {
                    owns_locks(of);
                }
                // Only a write lock never gives anything up.
                if kind != Some(Kind::Write) {
                    sched::wake_all(key(id));
                }
                return Ok(());
            }
            Some(_) if !wait => return Err(Errno::EAGAIN),
            Some(b) if t.would_deadlock(owner, b.owner) => return Err(Errno::EDEADLK),
            Some(b) => {
                t.wait(current().tid(), owner, b.owner);
                sched::prepare_wait(key(id));
                drop(t);
                block_on(id)?;
            }
        }
    }
}

/// `F_GETLK`: the lock that keeps `owner` from a `kind` lock over `start..=end` (see
/// `LockTable::test`).
pub fn test_record(
    of: &OpenFile,
    owner: Owner,
    kind: Option<Kind>,
    start: i64,
    end: i64,
) -> Option<crate::filelock::Record> {
    LOCKS.lock().test(file_id(of), owner, kind, start, end)
}

/// `flock`: gives `of` a `kind` lock on its file (None: releases it). A lock of
/// another open file description in the way is EAGAIN (EWOULDBLOCK), or, with
/// `wait`, waited for. As on Linux, a lock of the other kind that `of` holds goes
/// first, even if the new one must then wait or fails.
pub fn flock(of: &OpenFile, kind: Option<Kind>, wait: bool) -> Result<(), Errno> {
    let (id, me) = (file_id(of), of.lock_id());
    loop {
        let mut t = LOCKS.lock();
        let held = t.flock_held(id, me);
        if kind.is_some() && held == kind {
            return Ok(());
        }
        if held.is_some() {
            of.obj().host_lock(of, &HostLock::Flock { kind: None })?;
            t.flock_remove(id, me);
        }
        let blocked = kind.is_some_and(|k| t.flock_conflict(id, me, k));
        let r = match kind {
            Some(k) if !blocked => of.obj().host_lock(of, &HostLock::Flock { kind }).map(|_| t.flock_add(id, me, k)),
            _ => Ok(()),
        };
        if blocked && wait {
            sched::prepare_wait(key(id));
        }
        drop(t);
        if held.is_some() {
            sched::wake_all(key(id));
        }
        if !blocked {
            if kind.is_some() && r.is_ok() {
                owns_locks(of);
            }
            return r;
        }
        if !wait {
            return Err(Errno::EAGAIN);
        }
        block_on(id)?;
    }
}

/// Process `pid` closed a descriptor of `of`: its POSIX locks on the file go.
pub fn closed(pid: u64, of: &OpenFile) {
    if PROCESS_RECORDS.load(Relaxed) == 0 {
        return;
    }
    let id = file_id(of);
    let gone = {
        let mut t = LOCKS.lock();
        let gone = t.release_process_file(id, pid);
        count(&t);
        gone
    };
    if gone {
        sched::wake_all(key(id));
    }
}

/// Process `pid`, whose threads were `tids`, ended: its POSIX locks go, and its
/// threads wait for nothing any more (a killed thread leaves its wait unfinished).
pub fn process_ended(pid: u64, tids: &[u64]) {
    let ids = {
        let mut t = LOCKS.lock();
        for tid in tids {
            t.unwait(*tid);
        }
        let ids = t.release_process(pid);
        count(&t);
        ids
    };
    for id in ids {
        sched::wake_all(key(id));
    }
}

/// Open file description `of` goes: its OFD and `flock` locks go with it (the
/// host's, for a file backed by a host file, go with the host file's close).
pub fn release_owned(of: &OpenFile) {
    let id = file_id(of);
    if LOCKS.lock().release_ofd(id, of.lock_id()) {
        sched::wake_all(key(id));
    }
}
