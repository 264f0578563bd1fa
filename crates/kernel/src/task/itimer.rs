//! A process's interval timers (`setitimer`, `getitimer`, `alarm`): ITIMER_REAL
//! sends SIGALRM, ITIMER_VIRTUAL SIGVTALRM, ITIMER_PROF SIGPROF, when it expires,
//! then again every interval. The process holds each timer's deadline and interval;
//! the scheduler holds the pending deadlines as alarms (`sched::set_alarm`) and the
//! device poll, which every CPU runs when it looks for work or takes a timer
//! interrupt, fires the due ones (`fire_due`). The CPU-time timers count elapsed
//! time, as the CPU-time clocks do here (no per-thread CPU accounting yet).

use super::process::{self, Process};
use super::sched;
use super::signal;
use crate::sigframe::{sig, Info};

pub const ITIMER_REAL: usize = 0;
pub const ITIMER_VIRTUAL: usize = 1;
pub const ITIMER_PROF: usize = 2;

/// One timer: its next expiry (monotonic ns; 0: disarmed) and interval (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Itimer {
    pub deadline: u64,
    pub interval: u64,
}

/// The scheduler's key for process `pid`'s timer `which`.
fn key(pid: u64, which: usize) -> u64 {
    pid << 2 | which as u64
}

/// Time left on `t` at `now` (0: disarmed; at least 1 ns while armed, as Linux
/// never reports an armed timer as 0).
pub fn remaining(t: &Itimer, now: u64) -> u64 {
    if t.deadline == 0 {
        0
    } else {
        t.deadline.saturating_sub(now).max(1)
    }
}

/// Sets timer `which` of `p` to fire after `value` ns (0: disarm), then every
/// `interval` ns; returns the old timer as (remaining, interval).
pub fn set(p: &Process, which: usize, value: u64, interval: u64, now: u64) -> (u64, u64) {
    let mut timers = p.itimers.lock();
    let old = timers[which];
    let deadline = if value == 0 { 0 } else { now.saturating_add(value) };
    timers[which] = Itimer { deadline, interval: if value == 0 { 0 } else { interval } };
    sched::set_alarm(key(p.pid(), which), old.deadline, deadline);
    (remaining(&old, now), old.interval)
}

/// The next deadline of a periodic timer that expired at `deadline`, seen at `now`:
/// the first multiple of the interval after now (overruns are dropped, as Linux
/// counts them but sends one signal).
pub fn next_deadline(deadline: u64, interval: u64, now: u64) -> u64 {
    if interval == 0 {
        return 0;
    }
    let behind = now.saturating_sub(deadline) / interval + 1;
    deadline.saturating_add(behind.saturating_mul(interval))
}

/// Sends the signals of the timers due by `now` and re-arms the periodic ones.
pub fn fire_due(now: u64) {
    for (deadline, key) in sched::take_due_alarms(now) {
        let (pid, which) = (key >> 2, (key & 3) as usize);
        let Some(p) = process::find(pid) else { continue };
        {
            let mut timers = p.itimers.lock();
            let Some(t) = timers.get_mut(which) else { continue };
            if t.deadline != deadline {
                continue; // changed since: not this expiry's
            }
            t.deadline = next_deadline(deadline, t.interval, now);
            sched::set_alarm(key, 0, t.deadline);
        }
        let signo = match which {
            ITIMER_REAL => sig::SIGALRM,
            ITIMER_VIRTUAL => sig::SIGVTALRM,
            _ => sig::SIGPROF,
        };
        let info = Info { signo, code: crate::sigframe::code::SI_KERNEL, ..Default::default() };
        let _ = signal::send_to_process(pid, signo, info);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_timers_skip_overruns() {
        assert_eq!(next_deadline(100, 0, 150), 0, "one-shot");
        assert_eq!(next_deadline(100, 10, 100), 110);
        assert_eq!(next_deadline(100, 10, 105), 110);
        assert_eq!(next_deadline(100, 10, 135), 140, "three periods late: one signal, the next on the grid");
        assert_eq!(next_deadline(u64::MAX - 5, 10, u64::MAX), u64::MAX);
    }

    #[test]
    fn an_armed_timer_never_reports_zero() {
        assert_eq!(remaining(&Itimer::default(), 5), 0);
        assert_eq!(remaining(&Itimer { deadline: 10, interval: 0 }, 4), 6);
        assert_eq!(remaining(&Itimer { deadline: 10, interval: 0 }, 40), 1);
    }
}
