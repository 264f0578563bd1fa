//! The scheduler. Guest only in what it runs; its bookkeeping builds on the host.
//!
//! Threads never leave ring 3: blocking in the kernel (futex, sleep) switches, in
//! ring 3, to another thread or to the CPU's idle loop (`onering_arch::task`
//! performs the switch and keeps it sound; this module decides what runs where).
//!
//! One lock guards the run queues, the timers, the wait queues and every thread's
//! scheduling state; it is the last lock in the kernel's lock order (see
//! `task::kernel`). What each CPU does and how many threads wait for it is also
//! published in atomics, which wakers and idle CPUs read without the lock.
//!
//! The idle loop polls the run queue and the earliest timer, spinning before it asks
//! the VMM to halt the vCPU until the next deadline (docs/platform.md: the guest cannot
//! `hlt`); while the host keeps our vCPUs waiting (steal time, `placement::Contention`)
//! it halts at once, and until the deadline itself, so as not to take host CPU time
//! from the vCPU that makes the work.

use super::process::Process;
use super::thread::{current, set_current, Thread, DEAD, RUNNABLE, RUNNING, SLEEPING};
use crate::errno::Errno;
use crate::placement::{self, Contention, CpuState, CpuView, SiteBudgets, SpinBudget, WakeMargin};
use crate::sigframe;
use crate::time::mono_now;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use onering_abi::MAX_CPUS;
use onering_arch::frame::SyscallFrame;
use onering_arch::mm::Chunk;
use onering_arch::supervisor;
use onering_arch::sync::Mutex;
use onering_arch::task::{self as arch_task, Task};

/// What each CPU does (`placement::CpuState`) and how many threads wait in its run
/// queue: published for wakers and idle CPUs, which read them without the lock.
static CPU_STATE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(CpuState::Offline as u8) }; MAX_CPUS];
static QUEUED: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
/// The earliest timer deadline (monotonic ns; u64::MAX when there is none).
static NEXT_DEADLINE: AtomicU64 = AtomicU64::new(u64::MAX);

/// A preempting tick, when threads wait for a busy CPU.
const TICK_NS: u64 = 10_000_000;
/// A thread that got a CPU keeps it at least this long before a woken thread (a
/// sleeper whose timer expired, or one a reschedule IPI announced) takes it over,
/// as Linux's wake-up granularity. Here a preemption costs 60-150 us of exits
/// (interrupt, EOI, timer re-arming): without it a thread sleeping 20 us at a time
/// (Go's sysmon) would leave the one it shares a CPU with almost no time to run.
const MIN_RUN_NS: u64 = 1_000_000;
/// A timer this close to the end of `MIN_RUN_NS` counts as its end.
const KEEP_SLACK_NS: u64 = 50_000;
/// When the running thread got its CPU, per CPU (monotonic ns).
static RUN_SINCE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// An idle CPU halts only if its next deadline is further away than this, and
/// wakes this much before it to poll the rest of the way: it covers the host's
/// wake-up latency and the exit, so that timers fire on time.
const HALT_EARLY_NS: u64 = 80_000;
/// Contended (`placement::Contention`), an idle CPU halts unless its next deadline
/// is this close (less than an exit costs).
const CONTENDED_SPIN_NS: u64 = 20_000;

struct Sched {
    runq: [VecDeque<&'static Thread>; MAX_CPUS],
    /// Wait queues by key (pipes, wait4): threads to wake when the key changes.
    waitq: BTreeMap<u64, Vec<&'static Thread>>,
    /// Sleepers with a deadline, by (deadline, task id).
    timers: BTreeMap<(u64, usize), &'static Thread>,
    /// Process interval timers (`setitimer`, `alarm`) by (deadline, key): not
    /// threads to wake but signals to send (`take_due_alarms`).
    alarms: BTreeMap<(u64, u64), ()>,
    /// Live threads by tid.
    live: BTreeMap<u64, &'static Thread>,
    /// Finished threads whose structures (and stacks) can be reused once off-CPU.
    free: Vec<&'static Thread>,
}

static SCHED: Mutex<Sched> = Mutex::new(Sched {
    runq: [const { VecDeque::new() }; MAX_CPUS],
    waitq: BTreeMap::new(),
    timers: BTreeMap::new(),
    alarms: BTreeMap::new(),
    live: BTreeMap::new(),
    free: Vec::new(),
});

/// What the scheduler calls whenever it looks for work, to pick up what devices
/// posted (registered at boot: `task::kernel::service_events`).
/// Its argument: whether this CPU is idle (nothing to run); it returns when it
/// needs to run again at the latest (monotonic ns; u64::MAX: no need), which the
/// scheduler makes sure of with this CPU's timer. (So a deadline such as the
/// console's batch survives an interrupt that took the timer for something else.)
static POLL: spin::Once<fn(bool) -> u64> = spin::Once::new();

/// Registers the device poll (once).
pub fn set_poll(f: fn(bool) -> u64) {
    POLL.call_once(|| f);
}

/// Runs the device poll; when the CPU will run a thread after it, arms the timer
/// for the poll's next deadline (an idle CPU looks again anyway).
#[inline]
fn poll_devices(idle: bool) {
    if let Some(f) = POLL.get() {
        let again = f(idle);
        if again != u64::MAX && !idle {
            arm_timer(again);
        }
    }
}

/// Makes sure this CPU's timer fires by `at` (monotonic ns), so that its poll
/// runs then (the console's deadline for buffered output).
pub fn timer_by(at: u64) {
    arm_timer(at);
}

/// The earliest alarm (monotonic ns; u64::MAX when there is none).
static NEXT_ALARM: AtomicU64 = AtomicU64::new(u64::MAX);

/// Moves alarm `key` (a process's interval timer) from deadline `old` to `new`
/// (monotonic ns; 0: none), and makes sure this CPU looks at the new one in time.
pub fn set_alarm(key: u64, old: u64, new: u64) {
    {
        let mut s = SCHED.lock();
        if old != 0 {
            s.alarms.remove(&(old, key));
        }
        if new != 0 {
            s.alarms.insert((new, key), ());
        }
        s.publish_deadline();
    }
    if new != 0 {
        arm_timer(new);
    }
}

/// Takes the alarms due by `now`: (deadline, key) each. Cheap when none is due
/// (one atomic load): the device poll calls it all the time.
pub fn take_due_alarms(now: u64) -> Vec<(u64, u64)> {
    if NEXT_ALARM.load(Relaxed) > now {
        return Vec::new();
    }
    let mut s = SCHED.lock();
    let mut due = Vec::new();
    while let Some((&(d, key), _)) = s.alarms.first_key_value() {
        if d > now {
            break;
        }
        s.alarms.remove(&(d, key));
        due.push((d, key));
    }
    s.publish_deadline();
    due
}

/// The next thread id (the program's first thread is 1: it is pid 1).
static NEXT_TID: AtomicU64 = AtomicU64::new(1);

/// A new thread id (a new process's pid is its first thread's).
pub fn alloc_tid() -> u64 {
    NEXT_TID.fetch_add(1, Relaxed)
}

/// CPUs to notify once the lock is dropped (bit n for CPU n).
type CpuSet = u64;

/// This CPU's number.
fn this_cpu() -> usize {
    onering_arch::cpu::cpu_id()
}

/// The CPUs the VM has.
pub fn online() -> u64 {
    match ncpus() {
        MAX_CPUS => u64::MAX,
        n => (1 << n) - 1,
    }
}

fn state(cpu: usize) -> CpuState {
    CpuState::from_u8(CPU_STATE[cpu].load(SeqCst))
}

fn set_state(cpu: usize, st: CpuState) {
    CPU_STATE[cpu].store(st as u8, SeqCst);
}

impl Sched {
    fn push(&mut self, cpu: usize, t: &'static Thread) {
        t.state.store(RUNNABLE, Relaxed);
        t.queued_at.store(mono_now(), Relaxed);
        self.runq[cpu].push_back(t);
        QUEUED[cpu].store(self.runq[cpu].len(), SeqCst);
    }

    fn pop(&mut self, cpu: usize) -> Option<&'static Thread> {
        let t = self.runq[cpu].pop_front();
        QUEUED[cpu].store(self.runq[cpu].len(), SeqCst);
        t
    }

    /// A thread from a busy or halted CPU's queue that may run on `cpu`: one of
    /// the address space `cpu` has loaded at once; one of another space only once
    /// it has waited there `migrate_ns()` (running it here costs a switch of
    /// spaces, and likely one back; its own CPU may get to it first). Err: nothing
    /// to take now, and when a thread of another space would be (`u64::MAX`: none).
    fn steal(&mut self, cpu: usize, now: u64) -> Result<&'static Thread, u64> {
        let here = crate::mm::spaces::loaded(cpu);
        let mut later = u64::MAX;
        for c in (0..ncpus()).filter(|&c| c != cpu && state(c) != CpuState::Polling) {
            let mut take = None;
            for (i, t) in self.runq[c].iter().enumerate().filter(|(_, t)| t.affinity() & (1 << cpu) != 0) {
                let due = t.queued_at.load(Relaxed).saturating_add(migrate_ns());
                if t.space_id() == here || due <= now {
                    take = Some(i);
                    break;
                }
                later = later.min(due);
            }
            if let Some(t) = take.and_then(|i| self.runq[c].remove(i)) {
                QUEUED[c].store(self.runq[c].len(), SeqCst);
                return Ok(t);
            }
        }
        Err(later)
    }

    /// Queues runnable thread `t` on the CPU `placement::choose` picks; returns it.
    fn place(&mut self, t: &'static Thread) -> usize {
        let mut view = [CpuView { state: CpuState::Offline, queued: 0, space: 0 }; MAX_CPUS];
        let n = ncpus();
        for (c, v) in view.iter_mut().enumerate().take(n) {
            *v = CpuView { state: state(c), queued: self.runq[c].len(), space: crate::mm::spaces::loaded(c) };
        }
        let want = placement::Want { last: t.task.last_cpu(), allowed: t.affinity(), space: t.space_id() };
        let pack = n > 1 && contended(mono_now());
        let cpu = placement::choose(want, this_cpu(), &view[..n], pack);
        self.push(cpu, t);
        cpu
    }

    /// Makes sleeping thread `t` runnable; the CPU to notify, if any.
    /// Wakes the threads waiting on `key`; the CPUs to notify.
    fn wake_queue(&mut self, key: u64) -> CpuSet {
        let mut cpus = 0;
        if let Some(q) = self.waitq.remove(&key) {
            for t in q {
                t.wakeup.store(true, Relaxed);
                cpus |= self.make_runnable(t);
            }
        }
        cpus
    }

    fn make_runnable(&mut self, t: &'static Thread) -> CpuSet {
        if t.state.load(Relaxed) != SLEEPING {
            return 0;
        }
        let d = t.deadline.swap(0, Relaxed);
        if d != 0 {
            self.timers.remove(&(d, t.task.id()));
            self.publish_deadline();
        }
        1 << self.place(t)
    }

    fn publish_deadline(&self) {
        let alarm = self.alarms.first_key_value().map_or(u64::MAX, |(k, _)| k.0);
        NEXT_ALARM.store(alarm, SeqCst);
        NEXT_DEADLINE.store(self.timers.first_key_value().map_or(u64::MAX, |(k, _)| k.0).min(alarm), SeqCst);
    }

    /// Moves expired timers' threads to run queues; the CPUs to notify. (Due
    /// alarms stay for `take_due_alarms`, which the device poll calls.)
    fn expire(&mut self, now: u64) -> CpuSet {
        if NEXT_DEADLINE.load(Relaxed) > now || self.timers.first_key_value().is_none_or(|(k, _)| k.0 > now) {
            return 0;
        }
        let mut notify = 0;
        while let Some((&(d, slot), &t)) = self.timers.first_key_value() {
            if d > now {
                break;
            }
            self.timers.remove(&(d, slot));
            t.deadline.store(0, Relaxed);
            if t.state.load(Relaxed) == SLEEPING {
                t.timed_out.store(true, Relaxed);
                notify |= 1 << self.place(t);
            }
        }
        self.publish_deadline();
        notify
    }
}

/// Tells the CPUs in `cpus` that their run queues grew: a polling CPU sees it by
/// itself, a halted one is kicked, a busy one is interrupted (or, for this CPU,
/// gets a preemption tick).
fn notify(cpus: CpuSet) {
    if cpus == 0 {
        return;
    }
    let me = this_cpu();
    for c in (0..ncpus()).filter(|c| cpus & (1 << c) != 0) {
        match state(c) {
            CpuState::Polling => {}
            CpuState::Offline => {
                if CPU_STATE[c]
                    .compare_exchange(CpuState::Offline as u8, CpuState::Halted as u8, SeqCst, SeqCst)
                    .is_ok()
                {
                    supervisor::kick(c);
                }
            }
            CpuState::Halted => supervisor::kick(c),
            CpuState::Running if c == me => arm_timer(mono_now() + TICK_NS),
            CpuState::Running => supervisor::reschedule(c),
        }
    }
}

/// `notify` for the other CPUs only: this one is about to pick its queue up itself.
fn notify_others(cpus: CpuSet) {
    notify(cpus & !(1 << this_cpu()));
}

/// Makes sure this CPU's APIC timer fires by `at` (monotonic ns).
fn arm_timer(at: u64) {
    let armed = onering_arch::cpu::timer_armed();
    if armed != 0 && armed <= at {
        return;
    }
    onering_arch::cpu::set_timer_armed(at);
    supervisor::arm_timer(at.saturating_sub(mono_now()));
}

/// When a thread starts on this CPU: threads waiting here need a preemption tick,
/// and the earliest timer needs a watcher if no CPU polls.
fn watch(cpu: usize) {
    let queued = QUEUED[cpu].load(Relaxed) > 0;
    let deadline = NEXT_DEADLINE.load(Relaxed);
    if !queued && deadline == u64::MAX {
        return;
    }
    let mut at = if queued { mono_now() + TICK_NS } else { u64::MAX };
    if deadline != u64::MAX && !(0..ncpus()).any(|c| state(c) == CpuState::Polling) {
        // With every other CPU busy too, the sleeper would only wait here for the
        // running thread's `MIN_RUN_NS`: look then, not before.
        let all_busy = (0..ncpus()).all(|c| c == cpu || state(c) == CpuState::Running);
        let keep = RUN_SINCE[cpu].load(Relaxed).saturating_add(MIN_RUN_NS);
        at = at.min(if all_busy { deadline.max(keep) } else { deadline });
    }
    if at != u64::MAX {
        arm_timer(at);
    }
}

/// The live thread `tid`. A thread whose process ended stays in the table until
/// it switches away for the last time, which can come after its parent's wait
/// reaped the process: from then on its id names nothing (Linux frees the pid in
/// the wait), so such a thread is not found.
pub fn thread(tid: u64) -> Option<&'static Thread> {
    let t = SCHED.lock().live.get(&tid).copied()?;
    let reaped = t.process().ended() && super::process::life(t.pid()) == super::process::Life::Gone;
    (!reaped).then_some(t)
}

/// How many threads are live in the VM (every one is the same user's:
/// RLIMIT_NPROC counts them).
pub fn live_count() -> usize {
    SCHED.lock().live.len()
}

/// Live threads of process `pid`.
pub fn threads_of(pid: u64) -> Vec<&'static Thread> {
    SCHED.lock().live.values().filter(|t| t.pid() == pid).copied().collect()
}

/// Every live thread (at most `onering_abi::debug::MAX_THREADS`), for the gdb
/// stub (`--gdb`): ids, the CPU running it, the top of its kernel stack (where the
/// VMM finds its registers), its state.
pub fn debug_threads() -> Vec<onering_abi::debug::Thread> {
    use onering_abi::debug::{state, Thread as Entry, MAX_THREADS, NOT_RUNNING};
    let s = SCHED.lock();
    let entry = |t: &Thread| {
        let st = t.state.load(Relaxed);
        let cpu = if st == super::thread::RUNNING { t.task.last_cpu().map(|c| c as u64) } else { None };
        Entry {
            tid: t.tid(),
            pid: t.pid(),
            cpu: cpu.unwrap_or(NOT_RUNNING),
            kstack_top: t.task.stack_top(),
            state: match st {
                super::thread::RUNNING => state::RUNNING,
                super::thread::RUNNABLE => state::RUNNABLE,
                super::thread::SLEEPING => state::SLEEPING,
                _ => state::OTHER,
            },
        }
    };
    s.live.values().take(MAX_THREADS).map(|t| entry(t)).collect()
}

/// What the thread being created starts with.
pub struct Spawn {
    pub tid: u64,
    pub proc: &'static Process,
    pub ppid: u64,
    /// The system-call frame it returns to the program with.
    pub frame: SyscallFrame,
    pub fs_base: u64,
    pub sigmask: u64,
    /// CPUs it may run on (the creator's).
    pub affinity: u64,
}

/// Creates a thread (runnable at once unless `start` is false); returns it. Its
/// extended state is a copy of the caller's. `more` gives a chunk of memory when
/// new kernel stacks are needed.
pub fn spawn(sp: Spawn, start: bool, mut more: impl FnMut() -> Option<Chunk>) -> Result<&'static Thread, Errno> {
    let reuse = {
        let mut s = SCHED.lock();
        s.free.iter().position(|t| !t.task.running()).map(|i| s.free.swap_remove(i))
    };
    let t = match reuse {
        Some(t) => t,
        // A new thread lives on: not out of the heap's reserve.
        None if !onering_arch::heap::room(16 << 10, &mut more) => return Err(Errno::EAGAIN),
        None => Thread::new(Task::new(more).ok_or(Errno::EAGAIN)?),
    };
    if t.task.prepare(&sp.frame, sp.fs_base).is_err() {
        SCHED.lock().free.push(t);
        return Err(Errno::EAGAIN);
    }
    t.reset(sp.tid, sp.proc, sp.ppid, sp.sigmask, sp.affinity);
    sp.proc.join();
    let cpus = {
        let mut s = SCHED.lock();
        s.live.insert(sp.tid, t);
        t.state.store(SLEEPING, Relaxed);
        if start {
            s.make_runnable(t)
        } else {
            0
        }
    };
    notify(cpus);
    Ok(t)
}

/// Makes a thread created with `start == false` runnable.
pub fn start(t: &'static Thread) {
    let cpus = SCHED.lock().make_runnable(t);
    notify(cpus);
}

/// Switches from the running context (thread `me`, or the idle loop when None) to
/// `next`, which the caller took off a run queue. A `me` that is DEAD is never
/// resumed.
fn switch(me: Option<&'static Thread>, next: Option<&'static Thread>) {
    let cpu = this_cpu();
    match next {
        Some(n) => {
            n.state.store(RUNNING, Relaxed);
            set_state(cpu, CpuState::Running);
            set_current(Some(n));
            RUN_SINCE[cpu].store(mono_now(), Relaxed);
            watch(cpu);
        }
        None => {
            set_current(None);
            set_state(cpu, CpuState::Polling);
        }
    }
    if let Some(n) = next {
        // Its address space, if this vCPU runs another one (after fork).
        crate::mm::spaces::switch_to(n.process().space());
    }
    let task = next.map(|n| n.task);
    match me {
        Some(m) if m.state.load(Relaxed) == DEAD => arch_task::exit_to(task),
        _ => arch_task::switch(task),
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
#[track_caller]
pub fn block(deadline: Option<u64>) -> Wake {
    note_site(core::panic::Location::caller());
    sleep(deadline, true)
}

/// The wait site (`placement::SiteBudgets`) the running thread blocks on next
/// (per CPU: set by `wait_site` or `prepare_wait` just before `block` on the same
/// CPU), and the site of the thread that blocked last on each CPU, for its idle
/// loop.
static NEXT_SITE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static IDLE_SITE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Names what the running thread's next `block` waits for (a futex's key, a wait
/// queue's), so that the idle CPU spins as long as waits on it have recently paid.
pub fn wait_site(site: u64) {
    NEXT_SITE[this_cpu()].store(site, Relaxed);
}

/// The site of the `block` about to happen: the one named, else the kernel's call
/// site.
fn note_site(caller: &'static core::panic::Location<'static>) {
    let cpu = this_cpu();
    let named = NEXT_SITE[cpu].swap(0, Relaxed);
    let site = if named != 0 { named } else { caller as *const _ as u64 };
    IDLE_SITE[cpu].store(site, Relaxed);
}

/// Blocks the running thread of a stopped process (`task::job::park`) until
/// `wake` or its end: signals do not end this wait (they wait for SIGCONT).
#[track_caller]
pub fn block_stopped() -> Wake {
    note_site(core::panic::Location::caller());
    sleep(None, false)
}

fn sleep(deadline: Option<u64>, signals: bool) -> Wake {
    poll_devices(false);
    let me = current();
    let cpu = this_cpu();
    let (next, cpus) = {
        let mut s = SCHED.lock();
        // Its process is stopping: blocking takes part in the stop (looked at
        // under this lock, which `mark_stop` holds while it marks the threads).
        if me.stop_marked() && !me.stop_ack.load(SeqCst) {
            drop(s);
            super::job::acknowledge(me);
            s = SCHED.lock();
        }
        if me.wakeup.swap(false, Relaxed) {
            return Wake::Woken;
        }
        if signals && me.wakes_for() != 0 || me.doomed.load(Relaxed) {
            return Wake::Interrupted;
        }
        let now = mono_now();
        if let Some(d) = deadline {
            if d <= now {
                return Wake::TimedOut;
            }
            s.timers.insert((d, me.task.id()), me);
            me.deadline.store(d, Relaxed);
            s.publish_deadline();
        }
        me.timed_out.store(false, Relaxed);
        me.state.store(SLEEPING, Relaxed);
        let cpus = s.expire(now);
        (s.pop(cpu), cpus)
    };
    notify_others(cpus);
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

/// Wakes `t` from `block` (or makes its next `block` return at once).
pub fn wake(t: &'static Thread) {
    let cpus = {
        let mut s = SCHED.lock();
        t.wakeup.store(true, Relaxed);
        s.make_runnable(t)
    };
    notify(cpus);
}

/// Interrupts `t` because a signal is now pending for it: its `block` returns, or,
/// if it runs on another CPU, that CPU is interrupted so that it sees the signal.
pub fn interrupt(t: &'static Thread) {
    let (cpus, elsewhere) = {
        let mut s = SCHED.lock();
        match t.task.last_cpu() {
            Some(c) if t.state.load(Relaxed) == RUNNING && c != this_cpu() => (0, Some(c)),
            _ => (s.make_runnable(t), None),
        }
    };
    if let Some(c) = elsewhere {
        supervisor::reschedule(c);
    }
    notify(cpus);
}

/// Marks every thread of process `pid` for a stop (`thread::STOP_MARK`) and
/// interrupts those running on other CPUs, so that each parks before it goes
/// back to the program. Whether the stop is complete already: every thread is
/// blocked in the kernel or has taken part.
pub fn mark_stop(pid: u64) -> bool {
    let mut cpus = 0u64;
    let quiet = {
        let s = SCHED.lock();
        let mut quiet = true;
        for t in s.live.values().filter(|t| t.pid() == pid) {
            t.pending.fetch_or(super::thread::STOP_MARK, SeqCst);
            let st = t.state.load(Relaxed);
            quiet &= st == SLEEPING || t.stop_ack.load(SeqCst);
            match t.task.last_cpu() {
                Some(c) if st == RUNNING && c != this_cpu() => cpus |= 1 << c,
                _ => {}
            }
        }
        quiet
    };
    for c in (0..ncpus()).filter(|c| cpus & (1 << c) != 0) {
        supervisor::reschedule(c);
    }
    quiet
}

/// Whether every thread of process `pid` is blocked in the kernel or has taken
/// part in its stop (under the lock `block` looks at the stop under).
pub fn stop_quiet(pid: u64) -> bool {
    let s = SCHED.lock();
    s.live.values().filter(|t| t.pid() == pid).all(|t| t.state.load(Relaxed) == SLEEPING || t.stop_ack.load(SeqCst))
}

/// Registers the running thread on wait queue `key` (before checking, under the
/// lock that guards the condition, whether it must block).
pub fn prepare_wait(key: u64) {
    wait_site(key);
    let me = current();
    let mut s = SCHED.lock();
    let q = s.waitq.entry(key).or_default();
    if !q.iter().any(|t| core::ptr::eq(*t, me)) {
        q.push(me);
    }
}

/// Takes the running thread off wait queue `key` (after `block` returned).
pub fn finish_wait(key: u64) {
    NEXT_SITE[this_cpu()].store(0, Relaxed);
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
    let cpus = SCHED.lock().wake_queue(key);
    notify(cpus);
}

/// Ends thread `t` of a finished process at its next chance (it is blocked, runs
/// elsewhere, or is about to enter the kernel).
pub fn kill_thread(t: &'static Thread) {
    t.doomed.store(true, Relaxed);
    t.pending.fetch_or(sigframe::bit(sigframe::sig::SIGKILL), Relaxed);
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

/// The VMM runs under a real-time host policy (`onering_abi::flags::REALTIME`).
static REALTIME: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Tells the scheduler that the VMM runs under a real-time host policy: a halted
/// vCPU then wakes on time (but for its return into the guest), and spinning
/// would only spend the host's real-time budget (95% of a CPU; past it the host
/// stops real-time threads for the rest of its period, tens of milliseconds): an
/// idle CPU halts at once, until its deadline less the return's cost
/// (`placement::WakeMargin`), and spins only that margin.
pub fn set_realtime(on: bool) {
    REALTIME.store(on, Relaxed);
}

/// Restricts the running thread to the CPUs in `mask` (already checked to hold
/// one that exists); moves it if its CPU is not among them.
pub fn set_affinity(t: &'static Thread, mask: u64) {
    t.affinity.store(mask, Relaxed);
    let cpu = this_cpu();
    if core::ptr::eq(t, current()) && mask & (1 << cpu) == 0 {
        let (next, target) = {
            let mut s = SCHED.lock();
            let target = s.place(t);
            (s.pop(cpu), target)
        };
        notify(1 << target);
        switch(Some(t), next);
    }
}

/// A point where the running thread may give way: expired timers are handled, and
/// if threads wait for this CPU the running one goes to the back of the queue,
/// once it has had the CPU for `MIN_RUN_NS` (a timer then comes back for it).
/// Called on preemption interrupts and when the kernel finds a reschedule request
/// on its way back to the program.
pub fn preempt_point() {
    give_way(false);
}

/// `sched_yield`: the same, at once.
pub fn yield_now() {
    give_way(true);
}

fn give_way(now_anyway: bool) {
    poll_devices(false);
    let me = current();
    let cpu = this_cpu();
    let now = mono_now();
    let keep_until = RUN_SINCE[cpu].load(Relaxed).saturating_add(MIN_RUN_NS);
    let (next, cpus) = {
        let mut s = SCHED.lock();
        let cpus = s.expire(now);
        if s.runq[cpu].is_empty() {
            (None, cpus)
        } else if !now_anyway && now + KEEP_SLACK_NS < keep_until {
            drop(s);
            notify_others(cpus);
            arm_timer(keep_until);
            return;
        } else {
            let next = s.pop(cpu);
            s.push(cpu, me);
            (next, cpus)
        }
    };
    notify_others(cpus);
    match next {
        Some(n) => switch(Some(me), Some(n)),
        None => watch(cpu),
    }
}

/// Resumes the vfork parent of `me`, if it has one waiting (the child called
/// `execve`, or is ending).
pub fn release_vfork_parent(me: &Thread) {
    let parent = me.vfork_parent.lock().take();
    if let Some((p, tid)) = parent {
        if p.tid() == tid {
            p.vfork_done.store(true, Release);
            wake(p);
        }
    }
}

/// Ends the running thread (never returns). The caller handled the process side.
pub fn exit_current() -> ! {
    let me = current();
    // A vfork parent waits for this thread (Linux: until the child execs or ends).
    release_vfork_parent(me);
    super::exit::creator_ended(me);
    super::futex::forget(me.tid());
    let cpu = this_cpu();
    let next = {
        let mut s = SCHED.lock();
        let d = me.deadline.swap(0, Relaxed);
        if d != 0 {
            s.timers.remove(&(d, me.task.id()));
            s.publish_deadline();
        }
        for q in s.waitq.values_mut() {
            q.retain(|t| !core::ptr::eq(*t, me));
        }
        me.state.store(DEAD, Relaxed);
        s.live.remove(&me.tid());
        s.free.push(me);
        s.pop(cpu)
    };
    // From here on nothing of the process is touched: its slot may be reused.
    me.process().leave();
    switch(Some(me), next);
    panic!("a finished thread was resumed");
}

/// Whether this CPU has something to do now: its queue, or an expired timer.
fn has_work(cpu: usize, now: u64) -> bool {
    QUEUED[cpu].load(SeqCst) > 0 || NEXT_DEADLINE.load(SeqCst) <= now
}

/// How long a thread waits in a busy CPU's queue before an idle CPU that runs
/// another address space takes it: five switches' cost (the thread's CPU usually
/// gets to it first; twice the cost left 12,000-23,000 switches in Go's
/// `TestSplice` moving 1 GiB between two processes, five times 8,000-11,000).
fn migrate_ns() -> u64 {
    5 * supervisor::switch_cost_ns()
}

/// Whether a busy or halted CPU has threads waiting that this one could run.
fn stealable(cpu: usize) -> bool {
    (0..ncpus()).any(|c| c != cpu && QUEUED[c].load(Relaxed) > 0 && state(c) != CpuState::Polling)
}

/// The chunk an idle vCPU is warming (`onering_arch::mm`'s warm pool), and its
/// next page. One vCPU warms at a time.
static WARMING: Mutex<Option<(Chunk, u64)>> = Mutex::new(None);
/// Pages touched per slice (~0.3 ms at ~9 µs each here).
const WARM_SLICE: u64 = 32;
/// Set once no cold chunk is left (nothing to look at any more).
static ALL_WARM: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Touches one slice of a cold chunk for the warm pool; whether it did.
fn warm_step() -> bool {
    if ALL_WARM.load(Relaxed) {
        return false;
    }
    let Some(mut w) = WARMING.try_lock() else { return false };
    let k = super::kernel::kernel();
    if w.is_none() {
        let mut chunks = k.chunks.lock();
        if !chunks.wants_warming() {
            if !chunks.any_cold() {
                ALL_WARM.store(true, Relaxed);
            }
            return false;
        }
        *w = chunks.take_cold().map(|c| (c, 0));
    }
    let Some((c, next)) = w.as_mut() else { return false };
    c.touch(*next, WARM_SLICE);
    *next += WARM_SLICE;
    if *next >= onering_abi::layout::HUGE_PAGE_SIZE / 4096 {
        if let Some((c, _)) = w.take() {
            k.chunks.lock().free(c);
        }
    }
    true
}

/// The steal-time window being measured (its start, and all vCPUs' steal then),
/// and until when the host counts as contended (monotonic ns;
/// `placement::Contention`).
static WINDOW_AT: AtomicU64 = AtomicU64::new(0);
static WINDOW_STEAL: AtomicU64 = AtomicU64::new(0);
static CONTENDED_UNTIL: AtomicU64 = AtomicU64::new(0);

/// Looks at the vCPUs' steal time: whether the host keeps them waiting (a few
/// loads; once a window is long enough, the one looker that closes it decides).
fn contended(now: u64) -> bool {
    let at = WINDOW_AT.load(Relaxed);
    if now.saturating_sub(at) >= Contention::WINDOW_NS && WINDOW_AT.compare_exchange(at, now, Relaxed, Relaxed).is_ok()
    {
        let steal: u64 = (0..ncpus()).map(supervisor::steal_ns).sum();
        let w = placement::Window { at, steal: WINDOW_STEAL.swap(steal, Relaxed) };
        let until = CONTENDED_UNTIL.load(Relaxed);
        let (_, new) = Contention::look(w, steal, now, ncpus() as u64, until);
        if new != until {
            CONTENDED_UNTIL.store(new, Relaxed);
        }
    }
    now < CONTENDED_UNTIL.load(Relaxed)
}

/// CPU `cpu`'s scheduling: runs threads forever, idling in between. The idle CPU
/// polls its queue, the timers and other CPUs' queues for an adaptive while
/// (`placement::SpinBudget`, one per wait site: that of the thread that blocked
/// last on this CPU, `placement::SiteBudgets`), then halts in the VMM until
/// shortly before the next deadline or until kicked, and polls the rest of the way.
pub fn idle_loop() -> ! {
    let cpu = this_cpu();
    let mut budgets: SiteBudgets<8> = SiteBudgets::new();
    // The budget of the site where the thread that ran last here blocked
    // (looked up once per idle spell, not at every look of the spin).
    let mut slot = budgets.slot(0);
    let mut cbudget = SpinBudget::contended();
    let mut margin = WakeMargin::new();
    // The deadline a real-time halt last ran up to (its margin is spun, once).
    let mut halted_for = u64::MAX;
    let mut idle_since = mono_now();
    // How long the last halt lasted, and whether the host was contended then,
    // until the devices are looked at after it.
    let mut halted: Option<(u64, bool)> = None;
    // When a thread of another address space queued on a busy CPU may be taken
    // (`Sched::steal`); 0: at once.
    let mut steal_at = 0;
    set_state(cpu, CpuState::Polling);
    loop {
        poll_devices(true);
        // A halt that ended because work came (a kick for network frames makes
        // work only once the device poll above has looked) grows the spin budget.
        if let Some((ns, contended)) = halted.take() {
            if QUEUED[cpu].load(SeqCst) > 0 {
                if contended {
                    cbudget.woken_after(ns);
                } else {
                    budgets.at(slot).woken_after(ns);
                }
            }
        }
        let now = mono_now();
        let others = stealable(cpu);
        if has_work(cpu, now) || (others && now >= steal_at) {
            let (next, cpus) = {
                let mut s = SCHED.lock();
                let cpus = s.expire(now);
                let next = s.pop(cpu).map(Ok).unwrap_or_else(|| s.steal(cpu, now));
                (next, cpus)
            };
            let next = match next {
                Ok(t) => Some(t),
                Err(at) => {
                    steal_at = if at == u64::MAX { 0 } else { at };
                    None
                }
            };
            notify_others(cpus);
            if let Some(n) = next {
                switch(None, Some(n));
                // Idle again: the thread that ran last here blocked (or left).
                slot = budgets.slot(IDLE_SITE[cpu].load(Relaxed));
                idle_since = mono_now();
                continue;
            }
        }
        let deadline = NEXT_DEADLINE.load(Relaxed);
        let left = deadline.saturating_sub(now);
        let realtime = REALTIME.load(Relaxed);
        let contended = realtime || contended(now);
        let (spin, early) = if realtime {
            // (At most half the time to the deadline is spun: the real-time
            // budget holds for any period.)
            let rest = halted_for == deadline || left <= WakeMargin::MIN_NS;
            (now - idle_since < cbudget.ns || rest, margin.ns.min(left / 2))
        } else if contended {
            (now - idle_since < cbudget.ns || left <= CONTENDED_SPIN_NS, 0)
        } else {
            (now - idle_since < budgets.at(slot).ns || left <= 2 * HALT_EARLY_NS, HALT_EARLY_NS)
        };
        // A thread queued elsewhere becomes this CPU's to take soon: keep looking.
        let spin = spin || (others && steal_at > now);
        if spin {
            // A few pauses between looks: lighter on the core (and on the
            // run-queue counters other CPUs write) than looking all the time.
            for _ in 0..8 {
                core::hint::spin_loop();
            }
            continue;
        }
        // Nothing to run and the spin is over: warm a slice of cold memory for
        // the program (seed B-5) while the pool wants it, looking for work
        // between slices; then halt.
        if !contended && warm_step() {
            continue;
        }
        // Halting: publish it, then look once more (a waker that queued work
        // before seeing the state kicks; one that queued it before this look is
        // seen here), then halt until shortly before the deadline (contended: until
        // the deadline, as the host would wake us too late for a poll to help;
        // real-time: until the learnt margin before it).
        if contended {
            cbudget.spun_out();
        } else {
            budgets.at(slot).spun_out();
        }
        set_state(cpu, CpuState::Halted);
        if !has_work(cpu, now) {
            let start = mono_now();
            let asked = (left - early).min(onering_abi::hostcall::MAX_HALT_NS);
            supervisor::halt(asked);
            let took = mono_now() - start;
            halted = Some((took, contended));
            if realtime && took >= asked {
                margin.returned(asked, took);
                halted_for = deadline;
            }
        }
        set_state(cpu, CpuState::Polling);
        idle_since = mono_now();
    }
}
