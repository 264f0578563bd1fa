//! The kernel's lock: `spin::Mutex` whose waiters give their host CPU away when a
//! wait runs long.
//!
//! A lock's holder is a vCPU, and a vCPU is a host thread the host may preempt at
//! any instruction (the lock-holder preemption problem, issue 20). Its waiters
//! would then spin for the rest of the host's time slice (milliseconds) while the
//! holder waits for a CPU, possibly the very one they spin on. The kernel's
//! critical sections take well under a microsecond, or a few exits (tens of
//! microseconds each here) for the few that call the VMM, so a wait that has
//! lasted `YIELD_AFTER_CYCLES` (~1 ms) is almost surely one on a preempted
//! holder: the waiter then asks the VMM to yield its host CPU once
//! (`Hostcall::Yield`, one exit) and spins on. A quiet host never gets that far,
//! so the common path is the plain spin with one `rdtsc` per failed look.
//!
//! KVM's own answer, the `KVM_HC_SCHED_YIELD` hypercall that yields to the
//! holder's vCPU, needs `vmcall` from ring 0; this kernel runs in ring 3 and Linux
//! offers no directed yield to user space, so the yield is undirected.
//!
//! Per CPU, the relax hook keeps when the current wait began and when it last
//! looked; a gap of more than `GAP_CYCLES` between two looks starts a new wait
//! (the hook cannot see the lock, only that it is called again).

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The kernel's mutual-exclusion lock (see the module's note).
pub type Mutex<T> = spin::mutex::Mutex<T, HostRelax>;
pub type MutexGuard<'a, T> = spin::mutex::MutexGuard<'a, T>;

/// Spinning this long on one wait (TSC cycles, ~1 ms at 2.5-2.8 GHz) yields. (40
/// µs was tried first: a holder that makes an exit or two inside its critical
/// section, as fork's copy does, is not preempted but holds the lock that long,
/// and the waiters' yields, an exit each, made fork+exit+wait slower.)
pub const YIELD_AFTER_CYCLES: u64 = 2_500_000;
/// Two looks further apart than this (~2 µs) belong to different waits.
pub const GAP_CYCLES: u64 = 5_000;

static WAIT_START: [AtomicU64; onering_abi::MAX_CPUS] = [const { AtomicU64::new(0) }; onering_abi::MAX_CPUS];
static LAST_LOOK: [AtomicU64; onering_abi::MAX_CPUS] = [const { AtomicU64::new(0) }; onering_abi::MAX_CPUS];

/// The relax strategy of [`Mutex`].
pub struct HostRelax;

impl spin::RelaxStrategy for HostRelax {
    #[inline(always)]
    fn relax() {
        relax();
    }
}

/// One look of a spin-wait on another vCPU's progress failed: pauses, and
/// yields the host CPU once the wait has gone on long (see the module's note).
/// For waits that are not on a [`Mutex`] too.
#[inline]
pub fn relax() {
    core::hint::spin_loop();
    let now = crate::cpu::rdtsc();
    let cpu = crate::cpu::cpu_id();
    if waited(&WAIT_START[cpu], &LAST_LOOK[cpu], now) {
        // (`--stats` counts them among the hostcalls by kind.)
        crate::supervisor::yield_host();
    }
}

/// Records a look at `now` of the wait that began at `start` and last looked at
/// `last`; whether it has lasted long enough to yield (then it starts anew).
pub fn waited(start: &AtomicU64, last: &AtomicU64, now: u64) -> bool {
    let before = last.swap(now, Relaxed);
    if now.wrapping_sub(before) > GAP_CYCLES {
        start.store(now, Relaxed);
        return false;
    }
    if now.wrapping_sub(start.load(Relaxed)) > YIELD_AFTER_CYCLES {
        start.store(now, Relaxed);
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_wait_yields_once_per_period_and_a_gap_starts_over() {
        let (s, l) = (AtomicU64::new(0), AtomicU64::new(0));
        let mut t = 1_000_000;
        assert!(!waited(&s, &l, t), "the first look starts a wait");
        let mut yields = 0;
        let step = 1_000;
        let periods = 5;
        for _ in 0..periods * (YIELD_AFTER_CYCLES / step + 1) {
            t += step;
            yields += usize::from(waited(&s, &l, t));
        }
        // Looks `step` apart: one yield per period of spinning.
        assert_eq!(yields as u64, periods);
        t += GAP_CYCLES + 1;
        assert!(!waited(&s, &l, t), "a gap: a new wait");
        t += YIELD_AFTER_CYCLES / 2;
        assert!(!waited(&s, &l, t), "looks too far apart never add up");
    }
}
