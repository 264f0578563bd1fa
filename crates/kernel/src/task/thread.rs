//! Threads: what the kernel knows of each thread besides its machine state (an
//! `onering_arch::task::Task`: kernel stack, saved context, FP state): ids, its
//! process, scheduling state, and its signal state (mask, pending set and what each
//! pending signal carries, alternate stack, restart bookkeeping).
//!
//! Thread structures are allocated once and recycled, never freed, so a thread is
//! a `&'static Thread`; the running one is in a per-CPU slot (`current`). Fields
//! are atomics or small locks: other threads read them (a signal's sender, the
//! scheduler on another CPU).

use super::process::Process;
use crate::sigframe::{self, Info};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use onering_arch::cpu::CurrentSlot;
use onering_arch::sref::StaticRef;
use onering_arch::sync::Mutex;
use onering_arch::task::Task;
use spin::Once;

/// Scheduling states.
pub const RUNNING: u8 = 0;
pub const RUNNABLE: u8 = 1;
pub const SLEEPING: u8 = 2;
pub const DEAD: u8 = 3;

pub struct Thread {
    /// The machine side: kernel stack, context, FS base, FP state.
    pub task: &'static Task,
    pub tid: AtomicU64,
    /// Process id (thread-group id), the parent's, and the process's arena slot.
    pub pid: AtomicU64,
    pub ppid: AtomicU64,
    /// Its process (one load on the system-call path).
    proc: StaticRef<Process>,
    /// CPUs it may run on (`sched_setaffinity`), bit n for CPU n.
    pub(super) affinity: AtomicU64,
    pub(super) state: AtomicU8,
    pub(super) wakeup: AtomicBool,
    pub(super) timed_out: AtomicBool,
    pub(super) deadline: AtomicU64,
    /// When it last joined a run queue (monotonic ns): how long it waited there.
    pub(super) queued_at: AtomicU64,
    /// Blocked and pending signals (bit n-1 for signal n), and what each pending
    /// signal carries.
    pub sigmask: AtomicU64,
    pub pending: AtomicU64,
    pub siginfo: Mutex<[Info; 64]>,
    /// `sigaltstack`: sp, flags, size.
    pub altstack: Mutex<(u64, u32, u64)>,
    pub clear_child_tid: AtomicU64,
    /// `set_robust_list`: the head of its list of held robust mutexes (0: none).
    pub robust_list: AtomicU64,
    /// SA_RESTART: the number (+1; 0: none) of a call a signal interrupted, which
    /// runs again if the handler delivered next has SA_RESTART; `restarts` lists the
    /// frames of such handlers (their ucontext addresses), newest last.
    pub restart_nr: AtomicU64,
    pub restarts: Mutex<Vec<u64>>,
    /// The signal mask to go back to after the handler, when a call with a
    /// temporary mask (ppoll, epoll_pwait) was interrupted.
    pub saved_mask: AtomicU64,
    pub mask_saved: AtomicBool,
    /// The signals `rt_sigtimedwait` waits for (blocked ones too wake it).
    pub sigwait: AtomicU64,
    /// Which of the pending signals were sent to the process as a whole (another
    /// thread's `rt_sigtimedwait` may take those).
    pub shared: AtomicU64,
    /// Set by a vfork child's exit for its parent thread.
    pub vfork_done: AtomicBool,
    /// For a vfork child: the parent thread (and its tid, in case it ended and its
    /// slot became another thread) that resumes when this thread ends.
    pub vfork_parent: Mutex<Option<(&'static Thread, u64)>>,
    /// Its process ended: the thread ends at its next chance.
    pub doomed: AtomicBool,
    /// Its last page faults that found the block already backed: the page and how
    /// many in a row (`fault::retry_spurious`: past `SPURIOUS_RETRIES` it is
    /// SIGSEGV, not another retry).
    pub last_fault: AtomicU64,
    /// `prctl(PR_SET_PDEATHSIG)`: the signal its process gets when the thread
    /// that created the process ends (0: none). Cleared for every new thread.
    pub pdeathsig: AtomicU64,
    /// It created a child process (whose parent-death signal its end may send).
    pub made_children: AtomicBool,
    /// It has taken part in its process's stop (`task::job`): parked, or
    /// blocked in the kernel since the stop began; cleared by SIGCONT.
    pub stop_ack: AtomicBool,
}

/// In `pending`: its process is stopping or stopped, so the thread parks before
/// it goes back to the program (`task::job`). SIGSTOP's bit, as SIGSTOP itself is
/// never queued (its stop begins when it is sent); it interrupts no blocking call.
pub const STOP_MARK: u64 = sigframe::bit(sigframe::sig::SIGSTOP);

impl core::fmt::Debug for Thread {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Thread").field("tid", &self.tid()).field("pid", &self.pid()).finish()
    }
}

/// The thread each CPU runs (None: its idle loop), in arch's one-load per-CPU slot.
static CURRENT: Once<CurrentSlot<Thread>> = Once::new();

fn slot() -> &'static CurrentSlot<Thread> {
    CURRENT.call_once(|| match CurrentSlot::claim() {
        Some(s) => s,
        None => panic!("the per-CPU current slot is taken"),
    })
}

/// The thread running on this CPU.
#[inline]
pub fn current() -> &'static Thread {
    match try_current() {
        Some(t) => t,
        None => panic!("no current thread on cpu {}", onering_arch::cpu::cpu_id()),
    }
}

/// The thread running on this CPU, if any (not the idle loop).
#[inline]
pub fn try_current() -> Option<&'static Thread> {
    CURRENT.get()?.get()
}

pub(super) fn set_current(t: Option<&'static Thread>) {
    slot().set(t)
}

impl Thread {
    /// A new thread structure around `task` (not yet running anything).
    pub fn new(task: &'static Task) -> &'static Thread {
        alloc::boxed::Box::leak(alloc::boxed::Box::new(Thread {
            task,
            tid: AtomicU64::new(0),
            pid: AtomicU64::new(0),
            ppid: AtomicU64::new(0),
            proc: StaticRef::empty(),
            affinity: AtomicU64::new(u64::MAX),
            state: AtomicU8::new(DEAD),
            wakeup: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            deadline: AtomicU64::new(0),
            queued_at: AtomicU64::new(0),
            sigmask: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            siginfo: Mutex::new([Info::default(); 64]),
            altstack: Mutex::new((0, sigframe::SS_DISABLE, 0)),
            clear_child_tid: AtomicU64::new(0),
            robust_list: AtomicU64::new(0),
            restart_nr: AtomicU64::new(0),
            restarts: Mutex::new(Vec::new()),
            saved_mask: AtomicU64::new(0),
            mask_saved: AtomicBool::new(false),
            sigwait: AtomicU64::new(0),
            shared: AtomicU64::new(0),
            vfork_done: AtomicBool::new(false),
            vfork_parent: Mutex::new(None),
            doomed: AtomicBool::new(false),
            last_fault: AtomicU64::new(u64::MAX),
            pdeathsig: AtomicU64::new(0),
            made_children: AtomicBool::new(false),
            stop_ack: AtomicBool::new(false),
        }))
    }

    /// Resets the per-incarnation state for a new thread `tid` of `proc` (by
    /// `sched::spawn`, and by host tests that make a thread of their own).
    pub(crate) fn reset(&self, tid: u64, proc: &'static Process, ppid: u64, sigmask: u64, affinity: u64) {
        // Under the signal lock: a sender that looked the old thread up and checks
        // its tid under that lock (`signal::send`) sees either the old thread or
        // the new one, never the old tid with the new pending set.
        let si = self.siginfo.lock();
        self.tid.store(tid, Relaxed);
        self.pending.store(0, Relaxed);
        drop(si);
        self.pid.store(proc.pid(), Relaxed);
        self.ppid.store(ppid, Relaxed);
        self.proc.set(Some(proc));
        self.sigmask.store(sigmask, Relaxed);
        self.affinity.store(affinity, Relaxed);
        *self.altstack.lock() = (0, sigframe::SS_DISABLE, 0);
        self.clear_child_tid.store(0, Relaxed);
        self.robust_list.store(0, Relaxed);
        self.restart_nr.store(0, Relaxed);
        self.mask_saved.store(false, Relaxed);
        self.sigwait.store(0, Relaxed);
        self.shared.store(0, Relaxed);
        self.restarts.lock().clear();
        self.vfork_done.store(false, Relaxed);
        *self.vfork_parent.lock() = None;
        self.doomed.store(false, Relaxed);
        self.last_fault.store(u64::MAX, Relaxed);
        self.pdeathsig.store(0, Relaxed);
        self.made_children.store(false, Relaxed);
        self.stop_ack.store(false, Relaxed);
        self.wakeup.store(false, Relaxed);
        self.timed_out.store(false, Relaxed);
    }

    pub fn tid(&self) -> u64 {
        self.tid.load(Relaxed)
    }

    pub fn pid(&self) -> u64 {
        self.pid.load(Relaxed)
    }

    /// Whether it waits (blocked, not running or runnable): /proc's `S`.
    pub fn sleeping(&self) -> bool {
        self.state.load(Relaxed) == SLEEPING
    }

    /// The id of its process's address space (0 once the process let it go).
    pub fn space_id(&self) -> u64 {
        self.process().try_space().map_or(0, |s| s.id())
    }

    /// Its process. A process is not reused while a thread structure refers to it
    /// (see `process`), so this never names another process.
    #[inline]
    pub fn process(&self) -> &'static Process {
        match self.proc.get() {
            Some(p) => p,
            None => panic!("thread {} has no process", self.tid()),
        }
    }

    /// Signals pending and not blocked (not the stop mark).
    pub fn deliverable(&self) -> u64 {
        self.pending.load(Relaxed) & !self.sigmask.load(Relaxed) & !STOP_MARK
    }

    /// Pending signals that end a wait: deliverable ones, and those
    /// `rt_sigtimedwait` waits for (a stop does not: the call goes on, and the
    /// thread parks when it is done).
    pub fn wakes_for(&self) -> u64 {
        self.pending.load(Relaxed) & (!self.sigmask.load(Relaxed) | self.sigwait.load(Relaxed)) & !STOP_MARK
    }

    /// Its process is stopping or stopped (it parks before going back to the program).
    pub fn stop_marked(&self) -> bool {
        self.pending.load(Relaxed) & STOP_MARK != 0
    }

    /// CPUs it may run on.
    pub fn affinity(&self) -> u64 {
        self.affinity.load(Relaxed) & super::sched::online()
    }
}
