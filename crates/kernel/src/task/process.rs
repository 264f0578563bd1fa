//! Processes: what a process owns besides its threads: its address space (shared
//! with CLONE_VM children, `mm::spaces`), descriptors, working directory and
//! umask, signal dispositions, resource limits, its children (zombies to
//! reap, a vfork parent to release) and its job-control stop (`task::job`).
//!
//! The program is pid 1, as in a container. Process structures live in an arena
//! of `&'static Process` slots that are reused, like threads: a thread reaches its
//! process through a `StaticRef` (one load) without a lock or a reference count on
//! the system-call path.
//! A slot is reused only once the process has ended and no thread structure refers
//! to it any more (`members`), so a thread's process is never another process,
//! even after that thread was killed with its process (it may still be on its way
//! out). Each part has its own lock; see `task::kernel` for the lock order.
//! Its address space is let go when the process has ended and its last thread
//! structure left (no thread can touch the memory any more), and the slot is
//! reusable only after that.

use super::kernel::Kernel;
use crate::errno::Errno;
use crate::file::FdTable;
use crate::mm::spaces::Space;
use crate::vfs::{Hold, Ino};
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use onering_arch::sref::StaticRef;
use onering_arch::sync::Mutex;
use spin::Once;

/// Most processes alive (or not yet reusable) at once.
pub const MAX_PROCS: usize = 4096;

/// Working directory and umask.
#[derive(Debug)]
pub struct FsCtx {
    pub cwd: Ino,
    /// Keeps the working directory's node alive even if it is removed.
    pub cwd_hold: Option<Hold>,
    pub umask: u32,
}

/// A process's children.
#[derive(Debug, Default)]
pub struct Family {
    /// Children that ended and were not waited for: (pid, wait status).
    pub zombies: Vec<(u64, u64)>,
    /// Children still running.
    pub children: usize,
}

pub struct Process {
    slot: usize,
    /// Its address space (None once let go).
    space: StaticRef<Space>,
    pid: AtomicU64,
    /// Parent's pid (0 for the program itself, as for a container's pid 1).
    pub ppid: AtomicU64,
    pub fds: Mutex<FdTable>,
    pub fs: Mutex<FsCtx>,
    /// `struct k_sigaction` of each signal 1..=64: handler, flags, restorer, mask.
    pub actions: Mutex<[[u64; 4]; 64]>,
    /// Resource limits set by the program (`prlimit64`), by resource number.
    pub rlimits: Mutex<BTreeMap<u32, (u64, u64)>>,
    /// Live threads.
    pub threads: AtomicUsize,
    /// When it was made, monotonic ns (/proc/PID/stat's start time).
    pub started: AtomicU64,
    pub family: Mutex<Family>,
    /// Interval timers (`setitimer`): ITIMER_REAL, _VIRTUAL, _PROF.
    pub itimers: Mutex<[super::itimer::Itimer; 3]>,
    /// Thread structures that name this process (live or on their way out).
    members: AtomicUsize,
    /// It ended (its slot is reusable once `members` is 0).
    ended: AtomicBool,
    /// The program `execve` loaded (None: the one the VMM started, `Config`'s).
    pub image: Mutex<Option<Arc<ExecImage>>>,
    /// Process group and session ids (`setpgid`, `setsid`; `kill` of a group).
    pub pgid: AtomicU64,
    pub sid: AtomicU64,
    /// The thread that created it (tid; Linux's `real_parent`, a thread): when
    /// that thread ends, the process's threads' parent-death signals are sent and
    /// another thread of the parent (or pid 1's) takes its place.
    pub creator: AtomicU64,
    /// The terminal is its controlling terminal (`task::tty`).
    pub ctty: AtomicBool,
    /// Whether it is stopped, and what its parent's waits have yet to report
    /// (`task::job`).
    pub job: Mutex<super::job::Job>,
}

/// What /proc shows of a program `execve` loaded.
#[derive(Debug, Default)]
pub struct ExecImage {
    /// Its path made absolute (/proc/PID/exe).
    pub exe: Vec<u8>,
    /// Arguments and environment, each string NUL-ended.
    pub cmdline: Vec<u8>,
    pub environ: Vec<u8>,
    /// Its segments' page-aligned span, and its vDSO (0: none).
    pub span: (u64, u64),
    pub vdso: u64,
}

impl core::fmt::Debug for Process {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Process").field("pid", &self.pid()).finish()
    }
}

/// What a new process starts with.
pub struct Start {
    /// Its address space (the caller's hold on it passes to the process).
    pub space: &'static Space,
    pub pid: u64,
    pub ppid: u64,
    pub fds: FdTable,
    pub fs: FsCtx,
    pub actions: [[u64; 4]; 64],
    pub rlimits: BTreeMap<u32, (u64, u64)>,
    pub image: Option<Arc<ExecImage>>,
    /// Its process group and session (a child inherits its parent's).
    pub pgid: u64,
    pub sid: u64,
    /// It has the terminal as its controlling terminal (a child inherits it).
    pub ctty: bool,
}

impl Start {
    /// A process without a parent in the VM (the program, pid 1, or one the
    /// host starts): its own session and group, no controlling terminal, default
    /// dispositions, the default limits but the VM's `--ulimit`s (the VMM
    /// checked SOFT <= HARD, and HARD <= NR_OPEN for RLIMIT_NOFILE).
    pub fn leader(k: &Kernel, space: &'static Space, pid: u64, mut fds: FdTable, fs: FsCtx) -> Start {
        let mut rlimits = BTreeMap::new();
        for (n, l) in k.cfg.rlimits.iter().enumerate() {
            if let Some((soft, hard)) = *l {
                if n as u32 == RLIMIT_NOFILE {
                    fds.set_limit(soft);
                }
                rlimits.insert(n as u32, (soft, hard));
            }
        }
        Start {
            space,
            pid,
            ppid: 0,
            fds,
            fs,
            actions: [[0; 4]; 64],
            rlimits,
            image: None,
            pgid: pid,
            sid: pid,
            ctty: false,
        }
    }
}

static ARENA: [Once<&'static Process>; MAX_PROCS] = [const { Once::new() }; MAX_PROCS];

struct Table {
    /// Live processes: pid -> slot.
    by_pid: BTreeMap<u64, usize>,
    /// Zombies (ended, not reaped): pid -> parent's pid. A process leaves
    /// `by_pid` for here in one step, so it is always one or the other (pidfds).
    zombies: BTreeMap<u64, u64>,
    /// Slots allocated so far.
    used: usize,
}

static TABLE: Mutex<Table> = Mutex::new(Table { by_pid: BTreeMap::new(), zombies: BTreeMap::new(), used: 0 });

/// The process in arena slot `slot` (a slot a thread was given: always filled).
pub(super) fn by_slot(slot: usize) -> &'static Process {
    match ARENA.get(slot).and_then(Once::get) {
        Some(p) => p,
        None => panic!("process slot {slot} is empty"),
    }
}

/// The resource number of RLIMIT_NOFILE.
pub const RLIMIT_NOFILE: u32 = onering_abi::rlimit::NOFILE as u32;

/// Resource limits: (soft, hard); RLIM_INFINITY is u64::MAX.
pub fn default_rlimit(resource: u32) -> Option<(u64, u64)> {
    const INF: u64 = u64::MAX;
    Some(match resource {
        3 => (onering_abi::layout::STACK_SIZE, INF), // STACK
        RLIMIT_NOFILE => crate::file::NOFILE_DEFAULT,
        0 | 1 | 2 | 4 | 5 | 6 | 8 | 9 | 10 | 11 | 12 | 13 | 14 | 15 => (INF, INF), // the rest
        _ => return None,
    })
}

/// The live process `pid`.
pub fn find(pid: u64) -> Option<&'static Process> {
    let t = TABLE.lock();
    t.by_pid.get(&pid).map(|s| by_slot(*s))
}

/// What became of process `pid` (pidfds, waits for one child).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Life {
    /// Running, child of this pid.
    Live { ppid: u64 },
    /// Ended, not yet reaped by this parent.
    Zombie { ppid: u64 },
    /// Reaped, or never was.
    Gone,
}

pub fn life(pid: u64) -> Life {
    let t = TABLE.lock();
    if let Some(s) = t.by_pid.get(&pid) {
        return Life::Live { ppid: by_slot(*s).ppid.load(Relaxed) };
    }
    t.zombies.get(&pid).map_or(Life::Gone, |&ppid| Life::Zombie { ppid })
}

/// Zombie `pid` was reaped (or will never be: nobody can wait for it).
pub fn reaped(pid: u64) {
    TABLE.lock().zombies.remove(&pid);
}

/// Zombies `pids` now belong to pid 1 (their parent ended).
pub fn zombies_adopted(pids: impl Iterator<Item = u64>) {
    let mut t = TABLE.lock();
    for pid in pids {
        if let Some(p) = t.zombies.get_mut(&pid) {
            *p = 1;
        }
    }
}

/// Every live process.
pub fn all() -> Vec<&'static Process> {
    let t = TABLE.lock();
    t.by_pid.values().map(|s| by_slot(*s)).collect()
}

impl Process {
    /// A new process (EAGAIN when the arena is full). It has no threads yet.
    pub fn create(start: Start) -> Result<&'static Process, Errno> {
        let mut t = TABLE.lock();
        if t.by_pid.contains_key(&start.pid) {
            return Err(Errno::EAGAIN);
        }
        // A slot whose process ended and which no thread names any more.
        let reusable = (0..t.used)
            .map(by_slot)
            .find(|p| p.ended.load(Acquire) && p.members.load(Acquire) == 0 && p.space.get().is_none());
        let p = match reusable {
            Some(p) => p,
            None => {
                if t.used >= MAX_PROCS {
                    return Err(Errno::EAGAIN);
                }
                let slot = t.used;
                let p: &'static Process = alloc::boxed::Box::leak(alloc::boxed::Box::new(Process {
                    slot,
                    space: StaticRef::empty(),
                    pid: AtomicU64::new(0),
                    ppid: AtomicU64::new(0),
                    fds: Mutex::new(FdTable::new()),
                    fs: Mutex::new(FsCtx { cwd: crate::vfs::ROOT, cwd_hold: None, umask: 0o022 }),
                    actions: Mutex::new([[0; 4]; 64]),
                    rlimits: Mutex::new(BTreeMap::new()),
                    threads: AtomicUsize::new(0),
                    started: AtomicU64::new(0),
                    family: Mutex::new(Family::default()),
                    itimers: Mutex::new(Default::default()),
                    members: AtomicUsize::new(0),
                    ended: AtomicBool::new(false),
                    image: Mutex::new(None),
                    pgid: AtomicU64::new(0),
                    sid: AtomicU64::new(0),
                    creator: AtomicU64::new(0),
                    ctty: AtomicBool::new(false),
                    job: Mutex::new(super::job::Job::default()),
                }));
                ARENA[slot].call_once(|| p);
                t.used += 1;
                p
            }
        };
        p.space.set(Some(start.space));
        p.pid.store(start.pid, Relaxed);
        p.ppid.store(start.ppid, Relaxed);
        *p.fds.lock() = start.fds;
        *p.fs.lock() = start.fs;
        *p.actions.lock() = start.actions;
        *p.rlimits.lock() = start.rlimits;
        *p.image.lock() = start.image;
        p.pgid.store(start.pgid, Relaxed);
        p.sid.store(start.sid, Relaxed);
        p.creator.store(0, Relaxed);
        p.ctty.store(start.ctty, Relaxed);
        p.threads.store(0, Relaxed);
        p.started.store(crate::time::mono_now(), Relaxed);
        *p.family.lock() = Family::default();
        *p.itimers.lock() = Default::default();
        *p.job.lock() = Default::default();
        p.ended.store(false, Release);
        t.by_pid.insert(start.pid, p.slot);
        Ok(p)
    }

    pub fn pid(&self) -> u64 {
        self.pid.load(Relaxed)
    }

    /// Its address space. Only for a process that has not let it go: one a
    /// thread of it asks about (its threads keep it), or `try_space`.
    pub fn space(&self) -> &'static Space {
        match self.space.get() {
            Some(s) => s,
            None => panic!("process {} has no address space", self.pid()),
        }
    }

    /// Its address space, unless it ended and let it go.
    pub fn try_space(&self) -> Option<&'static Space> {
        self.space.get()
    }

    /// Gives the process another address space (execve: a fresh one from
    /// `mm::spaces::install`, whose hold passes to the process) and makes this vCPU
    /// run it, not yet settled (`mm::spaces::switch_to_unsettled`: the caller
    /// maps the new image, then settles it); the old one is let go (torn down if
    /// no other process uses it). Only for a thread of this process, on its way
    /// back to the program with the new image (other threads of the process
    /// have ended).
    pub fn replace_space(&self, new: &'static Space) {
        let old = self.space.get();
        self.space.set(Some(new));
        crate::mm::spaces::switch_to_unsettled(new);
        if let Some(old) = old {
            old.release();
        }
    }

    /// What a child made by vfork or fork (`space`: the parent's, held once more,
    /// or a copy) starts with: copies of the descriptors, working directory,
    /// dispositions and limits.
    pub fn child_start(&self, pid: u64, space: &'static Space) -> Start {
        let fs = self.fs.lock();
        Start {
            space,
            pid,
            ppid: self.pid(),
            fds: self.fds.lock().clone(),
            fs: FsCtx { cwd: fs.cwd, cwd_hold: fs.cwd_hold.clone(), umask: fs.umask },
            actions: *self.actions.lock(),
            rlimits: self.rlimits.lock().clone(),
            image: self.image.lock().clone(),
            pgid: self.pgid.load(Relaxed),
            sid: self.sid.load(Relaxed),
            ctty: self.ctty.load(Relaxed),
        }
    }

    /// A thread structure now names this process.
    pub(super) fn join(&self) {
        self.members.fetch_add(1, AcqRel);
    }

    /// A thread structure no longer names it (the thread ended).
    pub(super) fn leave(&self) {
        self.members.fetch_sub(1, AcqRel);
        self.let_go_of_space();
    }

    /// Lets its address space go once it has ended and no thread names it.
    fn let_go_of_space(&self) {
        self.let_go_of_space_if(0);
    }

    /// Lets its address space go if it has ended and `members` threads name it.
    fn let_go_of_space_if(&self, members: usize) {
        let space = {
            // (Under the table's lock: `create` reuses the slot only once the
            // space is gone, and this takes it only once.)
            let _t = TABLE.lock();
            if !self.ended.load(Acquire) || self.members.load(Acquire) != members {
                return;
            }
            let s = self.space.get();
            self.space.set(None);
            s
        };
        if let Some(s) = space {
            s.release();
        }
    }

    /// The process ends: it leaves the table for the zombies (`reaped` takes it
    /// out of those); what it owns is released now (its
    /// files are returned, for the caller to drop outside its locks). The slot is
    /// reused once its last thread is gone. None if it had ended already.
    pub fn end(&self) -> Option<Vec<crate::file::FileRef>> {
        if self.ended.swap(true, AcqRel) {
            return None;
        }
        {
            let mut t = TABLE.lock();
            t.by_pid.remove(&self.pid());
            t.zombies.insert(self.pid(), self.ppid.load(Relaxed));
        }
        let files = self.fds.lock().clear();
        self.fs.lock().cwd_hold = None;
        // Its space goes now if no thread but the caller names it (a process
        // whose first thread never started, or the caller its last thread):
        // before the parent can see the end, as Linux frees a child's memory
        // before signalling its exit, so a parent whose wait returned finds that
        // memory free (forked children each touching most of the VM's memory
        // must not run out on two vCPUs). Else its last thread's leaving does.
        let caller = crate::task::thread::try_current().is_some_and(|me| core::ptr::eq(me.process(), self));
        self.let_go_of_space_if(usize::from(caller));
        Some(files)
    }

    pub fn ended(&self) -> bool {
        self.ended.load(Acquire)
    }
}
