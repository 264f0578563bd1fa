//! The scheduler's pure decisions, tested on the host: which CPU a thread that
//! becomes runnable goes to, how long an idle CPU spins before it halts, and
//! whether the host is oversubscribed (`Contention`, from KVM's steal time).
//!
//! Costs behind the choices (docs/platform.md): a polling idle CPU picks a thread up in
//! well under a microsecond; waking a halted one is an exit on the waker (~18 µs)
//! plus the host waking the vCPU thread; interrupting a busy one is an APIC exit
//! plus an interrupt (~25-60 µs). So a thread goes where it is cheapest to start.

/// What a CPU is doing, as the scheduler publishes it for the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CpuState {
    /// Runs a thread.
    Running = 0,
    /// In its idle loop, polling its run queue and the timers.
    Polling = 1,
    /// Halted in the VMM (or about to): needs a kick.
    Halted = 2,
    /// Never started: a kick starts it.
    Offline = 3,
}

impl CpuState {
    pub fn from_u8(v: u8) -> CpuState {
        match v {
            0 => CpuState::Running,
            1 => CpuState::Polling,
            2 => CpuState::Halted,
            _ => CpuState::Offline,
        }
    }

    pub fn idle(self) -> bool {
        self != CpuState::Running
    }
}

/// One CPU as seen by a waker (read without locks, so possibly a moment old).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuView {
    pub state: CpuState,
    /// Threads waiting in its run queue.
    pub queued: usize,
    /// The address space it has loaded (an id, `mm::spaces`).
    pub space: u64,
}

/// The thread to place: the CPU it last ran on (None if it never ran), the CPUs it
/// may run on (bit n for CPU n; bits for CPUs that do not exist are ignored), and
/// its address space (an id; 0 when unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub last: Option<usize>,
    pub allowed: u64,
    pub space: u64,
}

/// The CPU for thread `t`, made runnable by CPU `me`:
/// 1. a free CPU (idle, nothing queued) that has the thread's address space
///    loaded: its last CPU, else a polling one, else a halted one;
/// 2. a busy CPU that has its space loaded and nothing queued, while a polling CPU
///    is there to take the thread if it waits too long (`sched`'s steal, after
///    twice a switch's cost);
/// 3. its last CPU, if free (warm caches, nothing to move);
/// 4. a polling CPU with nothing queued (it starts the thread at once, no exit);
/// 5. a halted or never started CPU with nothing queued (one kick);
/// 6. all busy: the least loaded, preferring one with the thread's space, then
///    `last`, then `me`.
///
/// A CPU of another space would switch spaces to run the thread (and likely back):
/// a supervisor call and PVM's shadow entries filled again, ~25 µs each here
/// (`bench/proc.sh`'s ping-pong), about what a kick costs; so processes that hand
/// work to each other (a pipeline, a client and its server) each keep a CPU rather
/// than take turns on both. A program that never
/// forks has one space everywhere, and the rules are the plain ones.
///
/// Candidates are tried from `me + 1` on, so wake-ups spread over the CPUs. With
/// `pack` (the host is contended, see [`Contention`]) the thread goes to `me`
/// whenever it may run there, unless `me` runs another space and a polling CPU
/// runs the thread's.
pub fn choose(t: Want, me: usize, cpus: &[CpuView], pack: bool) -> usize {
    let n = cpus.len().min(64);
    let ok = |c: usize| c < n && t.allowed & (1 << c) != 0;
    let home = |c: usize| t.space != 0 && cpus[c].space == t.space;
    let free = |c: usize| cpus[c].state.idle() && cpus[c].queued == 0;
    let polling = |c: usize| free(c) && cpus[c].state == CpuState::Polling;
    let order = (1..=n).map(|i| (me + i) % n.max(1)).filter(|&c| ok(c));
    if pack && ok(me) {
        if home(me) {
            return me;
        }
        return order.clone().find(|&c| polling(c) && home(c)).unwrap_or(me);
    }
    let last = t.last.filter(|&l| ok(l));
    let rules: [&dyn Fn(usize) -> bool; 7] = [
        &|c| free(c) && home(c) && last == Some(c),
        &|c| polling(c) && home(c),
        &|c| free(c) && home(c),
        &|c| home(c) && cpus[c].queued == 0 && order.clone().any(|o| o != c && polling(o)),
        &|c| free(c) && last == Some(c),
        &polling,
        &free,
    ];
    for rule in rules {
        if let Some(c) = order.clone().find(|&c| rule(c)) {
            return c;
        }
    }
    let load = |c: usize| (cpus[c].queued, !home(c), last != Some(c), c != me);
    order.min_by_key(|&c| load(c)).unwrap_or(if ok(me) { me } else { 0 })
}

/// How long an idle CPU polls before it halts: adapted to how soon work comes.
/// Work that arrives shortly after a halt means the halt cost an exit and a kick
/// for nothing, so the budget doubles; a spin that runs out with no work shrinks
/// it by an eighth. Bounded so that an idle program costs next to nothing.
///
/// Two kinds. [`SpinBudget::new`], for a quiet host: 20-500 µs, 50 at first.
/// [`SpinBudget::contended`], while the host is contended (`Contention`): nothing
/// at first, as a spinning vCPU takes the host CPU that the vCPU (or the device
/// thread, or the process) that is to make the work may need; but a CPU whose
/// halts keep ending with work within `SOON_NS` (a ping-pong with the network
/// device or a process on the host: each such halt cost an exit and a kick, tens of
/// microseconds here, and the host's work came anyway) learns to spin, 10-100 µs,
/// and falls back to nothing below a step. (Halving it on a spin that ran out was
/// tried: a halt that follows a spin too short for the work also ends with the
/// work, so halving and doubling took turns and the spin never grew: 8,745 halts
/// for 20,000 datagrams of a TAP echo.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinBudget {
    pub ns: u64,
    /// The smallest budget but nothing, and what one below it becomes.
    step: u64,
    floor: u64,
    max: u64,
    /// A halt this short that ended with work grows the budget whatever it is.
    soon: u64,
}

impl SpinBudget {
    pub const MIN_NS: u64 = 20_000;
    pub const START_NS: u64 = 50_000;
    pub const MAX_NS: u64 = 500_000;
    pub const CONTENDED_STEP_NS: u64 = 10_000;
    pub const CONTENDED_MAX_NS: u64 = 100_000;
    pub const SOON_NS: u64 = 100_000;

    pub const fn new() -> SpinBudget {
        SpinBudget { ns: Self::START_NS, step: Self::MIN_NS, floor: Self::MIN_NS, max: Self::MAX_NS, soon: 0 }
    }

    pub const fn contended() -> SpinBudget {
        SpinBudget { ns: 0, step: Self::CONTENDED_STEP_NS, floor: 0, max: Self::CONTENDED_MAX_NS, soon: Self::SOON_NS }
    }

    /// The CPU spun its whole budget without work (and halts now).
    pub fn spun_out(&mut self) {
        let ns = self.ns - self.ns / 8;
        self.ns = if ns < self.step { self.floor } else { ns };
    }

    /// A halt of `halted_ns` ended because work arrived (not at its deadline).
    pub fn woken_after(&mut self, halted_ns: u64) {
        if halted_ns < self.soon.max(4 * self.ns) {
            self.ns = (2 * self.ns).clamp(self.step, self.max);
        }
    }
}

impl Default for SpinBudget {
    fn default() -> Self {
        Self::new()
    }
}

/// How much before a timer's deadline an idle CPU ends its halt when the VMM
/// runs under a real-time host policy (issue 20): the host then wakes the vCPU
/// thread at once, but its return into the guest still takes an exit's worth
/// of host work (50-100 µs here), so a halt to the deadline fires the timer that
/// late. The margin follows how late halts came back: it jumps to a late return
/// (plus [`WakeMargin::SLACK_NS`] for the guest's own path) and decays by an
/// eighth per return that fit, within [`WakeMargin::MIN_NS`, `MAX_NS`]; the rest
/// of the way is spun, at most half the time to the deadline (the host's
/// real-time budget is 95% of a CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WakeMargin {
    pub ns: u64,
}

impl WakeMargin {
    pub const MIN_NS: u64 = 10_000;
    pub const START_NS: u64 = 60_000;
    pub const MAX_NS: u64 = 200_000;
    pub const SLACK_NS: u64 = 5_000;

    pub const fn new() -> WakeMargin {
        WakeMargin { ns: Self::START_NS }
    }

    /// A halt asked for `asked_ns` ran to its timeout and lasted `took_ns`.
    pub fn returned(&mut self, asked_ns: u64, took_ns: u64) {
        let late = took_ns.saturating_sub(asked_ns).saturating_add(Self::SLACK_NS);
        self.ns = late.max(self.ns - self.ns / 8).clamp(Self::MIN_NS, Self::MAX_NS);
    }
}

impl Default for WakeMargin {
    fn default() -> Self {
        Self::new()
    }
}

/// A CPU's spin budgets per wait site (issue 20: as an adaptive mutex keeps its
/// own spin count): the budget an idle CPU spins is the one of the site where
/// its last thread blocked, a futex word, a wait queue's key (a pipe, a socket) or
/// the kernel's call site, so a hand-off that comes back in microseconds and a
/// wait for a slow event on the same CPU each learn their own. `N` sites are kept,
/// the longest unused one making room for a new site (which starts at
/// [`SpinBudget::new`]).
#[derive(Clone, Debug)]
pub struct SiteBudgets<const N: usize> {
    sites: [(u64, SpinBudget, u64); N],
    clock: u64,
}

impl<const N: usize> SiteBudgets<N> {
    pub const fn new() -> Self {
        SiteBudgets { sites: [(0, SpinBudget::new(), 0); N], clock: 0 }
    }

    /// Site `site`'s slot (made if it has none, in place of the one used longest
    /// ago): valid for [`SiteBudgets::at`] until the next call.
    pub fn slot(&mut self, site: u64) -> usize {
        self.clock += 1;
        let i = match self.sites.iter().position(|e| e.0 == site) {
            Some(i) => i,
            None => {
                let i = (0..N).min_by_key(|&i| self.sites[i].2).unwrap_or(0);
                self.sites[i] = (site, SpinBudget::new(), 0);
                i
            }
        };
        self.sites[i].2 = self.clock;
        i
    }

    /// The budget in slot `i` (from [`SiteBudgets::slot`]).
    pub fn at(&mut self, i: usize) -> &mut SpinBudget {
        &mut self.sites[i % N].1
    }

    /// Site `site`'s budget (made if it has none).
    #[cfg(test)]
    pub fn get(&mut self, site: u64) -> &mut SpinBudget {
        let i = self.slot(site);
        self.at(i)
    }
}

impl<const N: usize> Default for SiteBudgets<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether the host keeps our vCPUs waiting for its CPUs (issue 20), judged from
/// the vCPUs' total steal time (`supervisor::steal_ns`) over windows of at least
/// `WINDOW_NS`: a window in which the vCPUs waited `SHARE_PERCENT` of their time
/// or more marks the host contended for the next `HOLD_NS`. (A rise of a fixed
/// amount between two looks was tried first: on a quiet but not idle host, a
/// hundred microseconds of steal accumulate between two looks far apart, and the
/// packing below then cost Go net/http a third of its speed.)
/// Contended, an idle CPU spinning for work would take the host CPU that the vCPU
/// that is to make the work needs, so it halts at once instead (a halted vCPU
/// thread is a sleeper, which the host scheduler runs promptly when it is kicked).
/// While contended, a woken thread goes to the waker's CPU (`choose`'s `pack`):
/// a hand-off between two threads then is a switch on one vCPU instead of a kick of
/// a vCPU thread that waits for the host scheduler (as `--smp 1` behaves); an idle
/// CPU still steals what waits in a busy CPU's queue.
pub struct Contention;

/// A steal-time window: when it began (monotonic ns) and the vCPUs' total steal
/// then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub at: u64,
    pub steal: u64,
}

impl Contention {
    pub const WINDOW_NS: u64 = 2_000_000;
    pub const SHARE_PERCENT: u64 = 20;
    pub const HOLD_NS: u64 = 50_000_000;

    /// A look at `now`, with the vCPUs' total steal `steal` over `ncpus` vCPUs,
    /// in window `w`, with contention ending at `until`: the window from now on
    /// (a new one once this one is long enough) and when contention ends.
    pub fn look(w: Window, steal: u64, now: u64, ncpus: u64, until: u64) -> (Window, u64) {
        let span = now.saturating_sub(w.at);
        if span < Self::WINDOW_NS {
            return (w, until);
        }
        let waited = steal.saturating_sub(w.steal);
        let busy = waited.saturating_mul(100) >= span.saturating_mul(ncpus.max(1)).saturating_mul(Self::SHARE_PERCENT);
        let until = if busy { until.max(now.saturating_add(Self::HOLD_NS)) } else { until };
        (Window { at: now, steal }, until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CpuState::*;

    #[test]
    fn the_wake_margin_follows_late_returns() {
        let mut m = WakeMargin::new();
        m.returned(100_000, 180_000);
        assert_eq!(m.ns, 85_000, "jumps to a late return");
        m.returned(100_000, 100_000);
        assert_eq!(m.ns, 85_000 - 85_000 / 8, "decays when on time");
        for _ in 0..100 {
            m.returned(100_000, 100_000);
        }
        assert_eq!(m.ns, WakeMargin::MIN_NS);
        m.returned(0, u64::MAX);
        assert_eq!(m.ns, WakeMargin::MAX_NS);
    }

    fn v(list: &[(CpuState, usize)]) -> Vec<CpuView> {
        list.iter().map(|&(state, queued)| CpuView { state, queued, space: 1 }).collect()
    }

    #[test]
    fn each_wait_site_learns_its_own_spin() {
        let mut b: SiteBudgets<2> = SiteBudgets::new();
        // Site 1's hand-offs come back soon after a halt: its budget grows.
        for _ in 0..3 {
            b.get(1).woken_after(10_000);
        }
        // Site 2's waits run out: its budget shrinks.
        for _ in 0..10 {
            b.get(2).spun_out();
        }
        assert_eq!(b.get(1).ns, 8 * SpinBudget::START_NS);
        assert!(b.get(2).ns < SpinBudget::START_NS);
        // A third site takes the place of the one used longest ago (site 1 was
        // just used after site 2: site 2 goes), starting afresh.
        b.get(1);
        assert_eq!(b.get(3).ns, SpinBudget::START_NS);
        assert_eq!(b.get(1).ns, 8 * SpinBudget::START_NS, "kept");
        assert_eq!(b.get(2).ns, SpinBudget::START_NS, "forgotten, made anew");
    }

    #[test]
    fn the_last_cpu_when_it_is_free() {
        let cpus = v(&[(Running, 0), (Halted, 0), (Polling, 0)]);
        assert_eq!(
            choose(Want { last: Some(1), allowed: !0, space: 1 }, 0, &cpus, false),
            1,
            "warm and free, even if halted"
        );
        assert_eq!(
            choose(Want { last: Some(0), allowed: !0, space: 1 }, 0, &cpus, false),
            2,
            "last is busy: a polling CPU"
        );
        assert_eq!(choose(Want { last: None, allowed: !0, space: 1 }, 0, &cpus, false), 2);
    }

    #[test]
    fn polling_before_halted_before_busy() {
        let cpus = v(&[(Running, 0), (Offline, 0), (Halted, 0), (Running, 0)]);
        assert_eq!(choose(Want { last: Some(3), allowed: !0, space: 1 }, 0, &cpus, false), 1, "first free from me + 1");
        assert_eq!(choose(Want { last: Some(3), allowed: !0, space: 1 }, 1, &cpus, false), 2);
        let cpus = v(&[(Polling, 1), (Halted, 0)]);
        assert_eq!(
            choose(Want { last: None, allowed: !0, space: 1 }, 0, &cpus, false),
            1,
            "a polling CPU with work queued is not free"
        );
    }

    #[test]
    fn all_busy_least_loaded() {
        let cpus = v(&[(Running, 2), (Running, 1), (Running, 1)]);
        assert_eq!(
            choose(Want { last: Some(2), allowed: !0, space: 1 }, 0, &cpus, false),
            2,
            "ties go to the last CPU"
        );
        assert_eq!(choose(Want { last: None, allowed: !0, space: 1 }, 1, &cpus, false), 1, "then to the waker's");
        assert_eq!(choose(Want { last: None, allowed: !0, space: 1 }, 0, &cpus, false), 1);
        let one = v(&[(Running, 0)]);
        assert_eq!(choose(Want { last: Some(0), allowed: !0, space: 1 }, 0, &one, false), 0);
    }

    #[test]
    fn affinity_is_obeyed() {
        let cpus = v(&[(Polling, 0), (Running, 3), (Running, 5)]);
        assert_eq!(choose(Want { last: Some(0), allowed: 0b110, space: 1 }, 0, &cpus, false), 1);
        assert_eq!(choose(Want { last: None, allowed: 0b100, space: 1 }, 0, &cpus, false), 2);
        // Bits beyond the CPUs that exist mean nothing; an empty set falls back.
        assert_eq!(choose(Want { last: None, allowed: 1 << 40, space: 1 }, 1, &cpus, false), 0);
    }

    #[test]
    fn a_cpu_that_runs_the_threads_space_first() {
        let sp = |list: &[(CpuState, usize, u64)]| -> Vec<CpuView> {
            list.iter().map(|&(state, queued, space)| CpuView { state, queued, space }).collect()
        };
        let want = |last, space| Want { last, allowed: !0, space };
        // Two processes (spaces 2 and 3) handing work to each other on two CPUs.
        let cpus = sp(&[(Running, 0, 2), (Polling, 0, 3)]);
        assert_eq!(choose(want(Some(0), 3), 0, &cpus, false), 1, "its space's CPU");
        let cpus = sp(&[(Polling, 0, 2), (Halted, 0, 3)]);
        assert_eq!(choose(want(Some(0), 3), 0, &cpus, false), 1, "a kick rather than a switch");
        assert_eq!(choose(want(Some(1), 2), 1, &cpus, false), 0);
        // Its space's CPU is busy: it waits there while a polling CPU could take
        // it later; with no polling CPU, a halted one is kicked.
        let cpus = sp(&[(Running, 0, 3), (Polling, 0, 2)]);
        assert_eq!(choose(want(Some(1), 3), 0, &cpus, false), 0);
        let cpus = sp(&[(Running, 0, 3), (Halted, 0, 2)]);
        assert_eq!(choose(want(Some(1), 3), 0, &cpus, false), 1);
        let cpus = sp(&[(Running, 1, 3), (Polling, 0, 2)]);
        assert_eq!(choose(want(Some(0), 3), 0, &cpus, false), 1, "not behind another thread");
        // No CPU runs its space: the plain rules (its last CPU when free).
        let cpus = sp(&[(Polling, 0, 2), (Halted, 0, 3)]);
        assert_eq!(choose(want(Some(1), 4), 0, &cpus, false), 1);
        assert_eq!(choose(want(None, 4), 1, &cpus, false), 0, "polling first");
        // All busy: equally loaded, the one with its space.
        let cpus = sp(&[(Running, 1, 2), (Running, 1, 3), (Running, 2, 3)]);
        assert_eq!(choose(want(Some(0), 3), 0, &cpus, false), 1);
        // Contended: the waker, unless the waker runs another space and a polling
        // CPU runs the thread's.
        let cpus = sp(&[(Running, 0, 2), (Polling, 0, 3)]);
        assert_eq!(choose(want(None, 2), 0, &cpus, true), 0);
        assert_eq!(choose(want(None, 3), 0, &cpus, true), 1);
        let cpus = sp(&[(Running, 0, 2), (Halted, 0, 3)]);
        assert_eq!(choose(want(None, 3), 0, &cpus, true), 0, "no kick while contended");
    }

    #[test]
    fn contention_is_a_share_of_a_window() {
        const MS: u64 = 1_000_000;
        let w = Window { at: 0, steal: 0 };
        // Too short a window: nothing decided, the window goes on.
        assert_eq!(Contention::look(w, 5 * MS, MS, 2, 0), (w, 0));
        // 10% of two vCPUs' 4 ms: not contended (a quiet host's wake-ups).
        let (w2, u) = Contention::look(w, 800_000, 4 * MS, 2, 0);
        assert_eq!((w2, u), (Window { at: 4 * MS, steal: 800_000 }, 0));
        // A hundred microseconds between two looks far apart is no contention.
        assert_eq!(Contention::look(w, 100_000, 50 * MS, 2, 0).1, 0);
        // 40% of the next 4 ms: contended for HOLD_NS from then.
        let (_, u) = Contention::look(w2, 800_000 + 3_200_000, 8 * MS, 2, 0);
        assert_eq!(u, 8 * MS + Contention::HOLD_NS);
        // Never shortened by a quiet window.
        assert_eq!(Contention::look(w2, 800_000, 8 * MS, 2, u).1, u);
    }

    #[test]
    fn contended_wakeups_pack_onto_the_waker() {
        let cpus = v(&[(Running, 0), (Halted, 0), (Polling, 0)]);
        assert_eq!(choose(Want { last: Some(1), allowed: !0, space: 1 }, 0, &cpus, true), 0);
        assert_eq!(choose(Want { last: Some(1), allowed: 0b110, space: 1 }, 0, &cpus, true), 1, "affinity first");
    }

    #[test]
    fn spin_budget_adapts_within_bounds() {
        let mut b = SpinBudget::new();
        b.woken_after(10_000);
        assert_eq!(b.ns, 2 * SpinBudget::START_NS);
        for _ in 0..20 {
            b.woken_after(0);
        }
        assert_eq!(b.ns, SpinBudget::MAX_NS);
        b.woken_after(SpinBudget::MAX_NS * 4);
        assert_eq!(b.ns, SpinBudget::MAX_NS, "a long halt says nothing");
        for _ in 0..100 {
            b.spun_out();
        }
        assert_eq!(b.ns, SpinBudget::MIN_NS);
    }

    #[test]
    fn contended_spin_grows_on_quick_wakes_and_falls_to_nothing() {
        let mut c = SpinBudget::contended();
        assert_eq!(c.ns, 0);
        c.woken_after(SpinBudget::SOON_NS * 2);
        assert_eq!(c.ns, 0, "a long halt says nothing");
        c.woken_after(30_000);
        assert_eq!(c.ns, SpinBudget::CONTENDED_STEP_NS);
        for _ in 0..10 {
            c.woken_after(30_000);
        }
        assert_eq!(c.ns, SpinBudget::CONTENDED_MAX_NS);
        c.spun_out();
        assert_eq!(c.ns, SpinBudget::CONTENDED_MAX_NS * 7 / 8, "an eighth less");
        // A spin too short, then a halt that ends with work: it still grows.
        let before = c.ns;
        c.spun_out();
        c.woken_after(30_000);
        assert!(c.ns > before);
        for _ in 0..40 {
            c.spun_out();
        }
        assert_eq!(c.ns, 0, "below a step: nothing");
    }
}
