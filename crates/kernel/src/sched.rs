//! Threads and the scheduler. Guest only.
//!
//! A thread is a kernel stack plus the program state that is not on it (FS base,
//! extended FP state, signal mask). Threads never leave ring 3: blocking in the
//! kernel (futex, sleep) saves the callee-saved registers on the thread's kernel
//! stack and continues another thread or the CPU's idle loop (`arch::thread`).
//!
//! Thread structures are allocated once and recycled, never freed, so the running
//! thread is a `&'static Thread` that the per-CPU slot names. One lock guards the run
//! queue, the timers and every thread's state; the lock order is
//! futex table -> kernel -> scheduler.
//!
//! The idle loop polls the run queue and the earliest timer, spinning before it asks
//! the VMM to halt the vCPU until the next deadline (PLATFORM.md: the guest cannot
//! `hlt`).

use crate::arch::{self, thread as mach};
use crate::errno::Errno;
use crate::signal;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use onering_abi::{Hostcall, MAX_CPUS};
use spin::{Mutex, Once};

/// Most threads alive at once.
pub const MAX_THREADS: usize = 4096;
/// Each thread's kernel stack.
const KSTACK_SIZE: u64 = 32 * 1024;

const RUNNING: u8 = 0;
const RUNNABLE: u8 = 1;
const SLEEPING: u8 = 2;
const DEAD: u8 = 3;

pub struct Thread {
    /// Allocation number (fixed for the structure's life): a small id for timers
    /// and per-CPU bookkeeping.
    slot: usize,
    pub tid: AtomicU64,
    /// Process id (thread-group id) and the process's slot in the kernel's table.
    pub pid: AtomicU64,
    /// The process's parent (0 for the program itself).
    pub ppid: AtomicU64,
    pub proc_slot: AtomicUsize,
    /// Saved kernel stack pointer while switched out.
    ctx: AtomicU64,
    on_cpu: AtomicBool,
    kstack_top: u64,
    state: AtomicU8,
    wakeup: AtomicBool,
    timed_out: AtomicBool,
    deadline: AtomicU64,
    pub fs_base: AtomicU64,
    xstate: Mutex<Vec<mach::Align64>>,
    /// Blocked and pending signals (bit n-1 for signal n), and what each pending
    /// signal carries.
    pub sigmask: AtomicU64,
    pub pending: AtomicU64,
    pub siginfo: Mutex<[signal::Info; 64]>,
    /// `sigaltstack`: sp, flags, size.
    pub altstack: Mutex<(u64, u32, u64)>,
    pub clear_child_tid: AtomicU64,
    /// Set by a vfork child's exit for its parent thread.
    pub vfork_done: AtomicBool,
    /// Its process ended: the thread ends at its next chance.
    pub doomed: AtomicBool,
}

impl Thread {
    pub fn tid(&self) -> u64 {
        self.tid.load(Relaxed)
    }
    pub fn pid(&self) -> u64 {
        self.pid.load(Relaxed)
    }
    /// Signals pending and not blocked.
    pub fn deliverable(&self) -> u64 {
        self.pending.load(Relaxed) & !self.sigmask.load(Relaxed)
    }
}

const NONE: usize = usize::MAX;
/// The idle loop's saved stack pointer, per CPU, and the flag `switch_context`
/// clears when it leaves (nobody waits on it: only this CPU resumes its idle loop).
static IDLE_CTX: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static IDLE_ON_CPU: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Whose extended state each CPU's registers hold (NONE: nobody's in particular).
static FPU_OWNER: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(NONE) }; MAX_CPUS];
/// XSAVE area size and features (from CPUID at boot).
static XSAVE: Once<(u32, u64)> = Once::new();

struct Sched {
    runq: VecDeque<&'static Thread>,
    /// Wait queues by key (pipes, wait4): threads to wake when the key changes.
    waitq: BTreeMap<u64, Vec<&'static Thread>>,
    timers: BTreeMap<(u64, usize), &'static Thread>,
    /// Live threads by tid.
    live: BTreeMap<u64, &'static Thread>,
    /// Finished threads whose structures (and stacks) can be reused once off-CPU.
    free: Vec<&'static Thread>,
    allocated: usize,
    next_tid: u64,
    /// Kernel stacks not yet handed out: the rest of the current 2 MiB chunk.
    stack_next: u64,
    stack_end: u64,
}

static SCHED: Mutex<Sched> = Mutex::new(Sched {
    runq: VecDeque::new(),
    waitq: BTreeMap::new(),
    timers: BTreeMap::new(),
    live: BTreeMap::new(),
    free: Vec::new(),
    allocated: 0,
    next_tid: 1,
    stack_next: 0,
    stack_end: 0,
});

/// The thread running on this CPU.
#[inline]
pub fn current() -> &'static Thread {
    match mach::current() {
        Some(t) => t,
        None => panic!("no current thread on cpu {}", arch::thread::cpu_id()),
    }
}

/// The live thread `tid`.
pub fn thread(tid: u64) -> Option<&'static Thread> {
    SCHED.lock().live.get(&tid).copied()
}

/// Live threads of process `pid`.
pub fn threads_of(pid: u64) -> Vec<&'static Thread> {
    SCHED.lock().live.values().filter(|t| t.pid() == pid).copied().collect()
}

pub fn xsave_size() -> u64 {
    u64::from(XSAVE.get().map_or(512, |x| x.0))
}

pub fn xfeatures() -> u64 {
    XSAVE.get().map_or(3, |x| x.1)
}

/// What the thread being created starts with.
pub struct Spawn {
    pub pid: u64,
    pub ppid: u64,
    pub proc_slot: usize,
    /// The system-call frame it returns to the program with.
    pub frame: crate::syscall::SyscallFrame,
    pub fs_base: u64,
    pub sigmask: u64,
    /// Take the tid as the pid (a new process's first thread).
    pub leader: bool,
}

/// Creates a thread (runnable at once unless `start` is false); returns it. Its
/// extended state is a copy of the caller's.
pub fn spawn(sp: Spawn, chunks: &mut crate::mm::chunks::ChunkAllocator, start: bool) -> Result<&'static Thread, Errno> {
    let mut s = SCHED.lock();
    let t = match s.free.iter().position(|t| !t.on_cpu.load(Acquire)) {
        Some(i) => s.free.swap_remove(i),
        None => {
            if s.allocated >= MAX_THREADS {
                return Err(Errno::EAGAIN);
            }
            if s.stack_next == s.stack_end {
                let c = chunks.alloc().ok_or(Errno::EAGAIN)?;
                s.stack_next = onering_abi::layout::direct(c);
                s.stack_end = s.stack_next + onering_abi::layout::HUGE_PAGE_SIZE;
            }
            let top = s.stack_next + KSTACK_SIZE;
            s.stack_next = top;
            let slot = s.allocated;
            let words = (xsave_size() as usize).div_ceil(64);
            let t: &'static Thread = alloc::boxed::Box::leak(alloc::boxed::Box::new(Thread {
                slot,
                tid: AtomicU64::new(0),
                pid: AtomicU64::new(0),
                ppid: AtomicU64::new(0),
                proc_slot: AtomicUsize::new(0),
                ctx: AtomicU64::new(0),
                on_cpu: AtomicBool::new(false),
                kstack_top: top,
                state: AtomicU8::new(DEAD),
                wakeup: AtomicBool::new(false),
                timed_out: AtomicBool::new(false),
                deadline: AtomicU64::new(0),
                fs_base: AtomicU64::new(0),
                xstate: Mutex::new(alloc::vec![mach::Align64([0; 64]); words]),
                sigmask: AtomicU64::new(0),
                pending: AtomicU64::new(0),
                siginfo: Mutex::new([signal::Info::default(); 64]),
                altstack: Mutex::new((0, signal::SS_DISABLE, 0)),
                clear_child_tid: AtomicU64::new(0),
                vfork_done: AtomicBool::new(false),
                doomed: AtomicBool::new(false),
            }));
            s.allocated += 1;
            t
        }
    };
    let tid = s.next_tid;
    s.next_tid += 1;
    t.tid.store(tid, Relaxed);
    t.pid.store(if sp.leader { tid } else { sp.pid }, Relaxed);
    t.proc_slot.store(sp.proc_slot, Relaxed);
    t.ppid.store(sp.ppid, Relaxed);
    t.fs_base.store(sp.fs_base, Relaxed);
    t.sigmask.store(sp.sigmask, Relaxed);
    t.pending.store(0, Relaxed);
    *t.altstack.lock() = (0, signal::SS_DISABLE, 0);
    t.clear_child_tid.store(0, Relaxed);
    t.vfork_done.store(false, Relaxed);
    t.doomed.store(false, Relaxed);
    t.wakeup.store(false, Relaxed);
    t.timed_out.store(false, Relaxed);
    mach::xsave(&mut t.xstate.lock());
    t.ctx.store(mach::init_stack(t.kstack_top, &sp.frame), Relaxed);
    s.live.insert(tid, t);
    if start {
        t.state.store(RUNNABLE, Relaxed);
        s.runq.push_back(t);
    } else {
        t.state.store(SLEEPING, Relaxed);
    }
    Ok(t)
}

/// Makes a thread created with `start == false` runnable.
pub fn start(t: &'static Thread) {
    let mut s = SCHED.lock();
    if t.state.load(Relaxed) == SLEEPING {
        t.state.store(RUNNABLE, Relaxed);
        s.runq.push_back(t);
    }
}

/// Boot: the XSAVE size, and the first thread (which `run` then enters).
pub fn init() {
    XSAVE.call_once(mach::xsave_size);
}

/// Switches from the running context (thread `me`, or the idle loop when None) to
/// `next`, which the caller took off the run queue.
fn switch(me: Option<&'static Thread>, next: Option<&'static Thread>) {
    let cpu = arch::thread::cpu_id() % MAX_CPUS;
    if let Some(m) = me {
        m.fs_base.store(arch::fs_base(), Relaxed);
        mach::xsave(&mut m.xstate.lock());
        FPU_OWNER[cpu].store(m.slot, Relaxed);
    }
    let (save, off) = match me {
        Some(m) => (&m.ctx, &m.on_cpu),
        None => (&IDLE_CTX[cpu], &IDLE_ON_CPU[cpu]),
    };
    match next {
        Some(n) => {
            // It may still be leaving another CPU: wait until its context is saved.
            while n.on_cpu.load(Acquire) {
                core::hint::spin_loop();
            }
            n.on_cpu.store(true, Relaxed);
            n.state.store(RUNNING, Relaxed);
            mach::set_current(Some(n));
            mach::set_kstack_top(n.kstack_top);
            arch::set_fs_base(n.fs_base.load(Relaxed));
            if FPU_OWNER[cpu].load(Relaxed) != n.slot {
                mach::xrstor(&n.xstate.lock());
                FPU_OWNER[cpu].store(n.slot, Relaxed);
            }
            mach::switch_context(save, n.ctx.load(Relaxed), off);
        }
        None => {
            mach::set_current(None);
            IDLE_ON_CPU[cpu].store(true, Relaxed);
            mach::switch_context(save, IDLE_CTX[cpu].load(Relaxed), off);
        }
    }
}

/// Moves expired timers' threads to the run queue.
fn expire(s: &mut Sched, now: u64) {
    while let Some((&(d, slot), &t)) = s.timers.first_key_value() {
        if d > now {
            break;
        }
        s.timers.remove(&(d, slot));
        if t.state.load(Relaxed) == SLEEPING {
            t.timed_out.store(true, Relaxed);
            t.state.store(RUNNABLE, Relaxed);
            s.runq.push_back(t);
        }
    }
}

/// Why `block` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    Woken,
    TimedOut,
    /// A signal arrived (or was already pending).
    Interrupted,
}

/// Blocks the running thread until `wake`, the deadline (monotonic ns), or a signal.
/// A `wake` that came after the caller registered itself (e.g. on a futex queue)
/// but before this call is not lost.
pub fn block(deadline: Option<u64>) -> Wake {
    let me = current();
    let next = {
        let mut s = SCHED.lock();
        if me.wakeup.swap(false, Relaxed) {
            return Wake::Woken;
        }
        if me.deliverable() != 0 || me.doomed.load(Relaxed) {
            return Wake::Interrupted;
        }
        let now = crate::kernel::mono_now();
        if let Some(d) = deadline {
            if d <= now {
                return Wake::TimedOut;
            }
            s.timers.insert((d, me.slot), me);
            me.deadline.store(d, Relaxed);
        }
        me.timed_out.store(false, Relaxed);
        me.state.store(SLEEPING, Relaxed);
        expire(&mut s, now);
        s.runq.pop_front()
    };
    switch(Some(me), next);
    if me.doomed.load(Relaxed) {
        exit_current();
    }
    if me.wakeup.swap(false, Relaxed) {
        Wake::Woken
    } else if me.timed_out.swap(false, Relaxed) {
        Wake::TimedOut
    } else {
        Wake::Interrupted
    }
}

fn make_runnable(s: &mut Sched, t: &'static Thread) {
    if t.state.load(Relaxed) == SLEEPING {
        let d = t.deadline.swap(0, Relaxed);
        if d != 0 {
            s.timers.remove(&(d, t.slot));
        }
        t.state.store(RUNNABLE, Relaxed);
        s.runq.push_back(t);
    }
}

/// Wakes `t` from `block` (or makes its next `block` return at once).
pub fn wake(t: &'static Thread) {
    let mut s = SCHED.lock();
    t.wakeup.store(true, Relaxed);
    make_runnable(&mut s, t);
}

/// Interrupts `t`'s `block` because a signal is now pending for it.
pub fn interrupt(t: &'static Thread) {
    let mut s = SCHED.lock();
    make_runnable(&mut s, t);
}

/// Registers the running thread on wait queue `key` (before checking, under the
/// lock that guards the condition, whether it must block).
pub fn prepare_wait(key: u64) {
    let me = current();
    let mut s = SCHED.lock();
    let q = s.waitq.entry(key).or_default();
    if !q.iter().any(|t| core::ptr::eq(*t, me)) {
        q.push(me);
    }
}

/// Takes the running thread off wait queue `key` (after `block` returned).
pub fn finish_wait(key: u64) {
    let me = current();
    let mut s = SCHED.lock();
    if let Some(q) = s.waitq.get_mut(&key) {
        q.retain(|t| !core::ptr::eq(*t, me));
        if q.is_empty() {
            s.waitq.remove(&key);
        }
    }
}

/// Wakes every thread on wait queue `key`.
pub fn wake_all(key: u64) {
    let mut s = SCHED.lock();
    if let Some(q) = s.waitq.remove(&key) {
        for t in q {
            t.wakeup.store(true, Relaxed);
            make_runnable(&mut s, t);
        }
    }
}

/// Ends thread `t` of a finished process at its next chance (it is blocked or
/// about to enter the kernel).
pub fn kill_thread(t: &'static Thread) {
    t.doomed.store(true, Relaxed);
    t.pending.fetch_or(signal::bit(signal::sig::SIGKILL), Relaxed);
    interrupt(t);
}

static NCPUS: AtomicUsize = AtomicUsize::new(1);

/// vCPUs the VM has.
pub fn ncpus() -> usize {
    NCPUS.load(Relaxed)
}

pub fn set_ncpus(n: usize) {
    NCPUS.store(n.clamp(1, MAX_CPUS), Relaxed);
}

/// Lets other runnable threads run first.
pub fn yield_now() {
    let me = current();
    let next = {
        let mut s = SCHED.lock();
        expire(&mut s, crate::kernel::mono_now());
        let Some(n) = s.runq.pop_front() else {
            return;
        };
        me.state.store(RUNNABLE, Relaxed);
        s.runq.push_back(me);
        n
    };
    switch(Some(me), Some(next));
}

/// Ends the running thread (never returns). The caller handled the process side.
pub fn exit_current() -> ! {
    let me = current();
    let next = {
        let mut s = SCHED.lock();
        let d = me.deadline.swap(0, Relaxed);
        if d != 0 {
            s.timers.remove(&(d, me.slot));
        }
        for q in s.waitq.values_mut() {
            q.retain(|t| !core::ptr::eq(*t, me));
        }
        me.state.store(DEAD, Relaxed);
        s.live.remove(&me.tid());
        s.free.push(me);
        s.runq.pop_front()
    };
    switch(Some(me), next);
    panic!("a finished thread was resumed");
}

/// Boots CPU `cpu`'s scheduling: runs threads forever, idling in between.
pub fn idle_loop() -> ! {
    let mut idle_since: Option<u64> = None;
    loop {
        let now = crate::kernel::mono_now();
        let (next, deadline) = {
            let mut s = SCHED.lock();
            expire(&mut s, now);
            (s.runq.pop_front(), s.timers.first_key_value().map(|(k, _)| k.0))
        };
        if let Some(n) = next {
            idle_since = None;
            switch(None, Some(n));
            continue;
        }
        // Nothing to run. Poll for a while (a wake-up from another CPU or a timer
        // about to expire then costs no exit), then halt in the VMM until shortly
        // before the next deadline, and poll the rest of the way.
        let since = *idle_since.get_or_insert(now);
        let left = deadline.map_or(u64::MAX, |d| d.saturating_sub(now));
        if now - since < SPIN_NS || left <= SPIN_NS {
            core::hint::spin_loop();
            continue;
        }
        arch::hostcall(Hostcall::Sleep, &[(left - SPIN_NS / 2).min(MAX_HALT_NS)]);
    }
}

/// How long an idle CPU polls before halting.
const SPIN_NS: u64 = 50_000;
/// Longest single halt (the loop re-checks after it).
const MAX_HALT_NS: u64 = 1_000_000_000;
