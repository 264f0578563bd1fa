//! Job-control stops: a stop signal at its default action (SIGSTOP always;
//! SIGTSTP, SIGTTIN, SIGTTOU unless handled or ignored) stops the whole process
//! until SIGCONT, as on Linux; the parent learns of both through SIGCHLD
//! (`CLD_STOPPED`, `CLD_CONTINUED`, unless it set SA_NOCLDSTOP) and through
//! `wait4(WUNTRACED/WCONTINUED)` and `waitid(WSTOPPED/WCONTINUED)`, each once.
//!
//! How a stop works without spinning: the stop begins when the signal is sent (or,
//! for one that was blocked, when a thread takes it): every thread of the process
//! gets the stop mark (`thread::STOP_MARK`, a bit of its pending set that
//! interrupts no blocking call) and those running on other vCPUs are interrupted.
//! A thread parks (`park`: blocked in the scheduler, woken only by SIGCONT or its
//! end) before it goes back to the program; a thread blocked in a system call
//! stays blocked and parks when the call is done. The stop is complete, and
//! reported, once every thread is parked or blocked in the kernel: whoever makes
//! it so (the sender, a parking thread, a thread entering `sched::block` or
//! ending) sees
//! it, because all of them look under the scheduler's lock after marking
//! themselves (`Thread::stop_ack`). SIGCONT clears the marks and wakes the parked
//! threads; SIGKILL ends them as it ends blocked threads.
//!
//! Linux's other rules: SIGCONT discards pending stop signals and a stop signal
//! discards a pending SIGCONT; SIGTSTP, SIGTTIN and SIGTTOU do nothing to an
//! orphaned process group (`tty::orphaned`); the program (pid 1) ignores stop
//! signals at their default action, as Linux's init ignores signals it has no
//! handler for. `Job` is each process's state, pure (unit-tested).

use super::exit::{stopped, wait_key, CONTINUED};
use super::process::{self, Process};
use super::sched;
use super::thread::{Thread, STOP_MARK};
use crate::sigframe::{bit, code, sa, sig, Info, STOP_SIGNALS};
use core::sync::atomic::Ordering::{Relaxed, SeqCst};

/// A process's stop state and what its parent has not yet been told by a wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Job {
    /// The signal it is stopping or stopped by (0: it runs).
    pub stop: u64,
    /// Every thread has stopped.
    pub stopped: bool,
    /// A stop not yet reported by a WUNTRACED wait (its signal; 0: none).
    pub stop_report: u64,
    /// A continuation not yet reported by a WCONTINUED wait.
    pub cont_report: bool,
}

impl Job {
    /// A stop by `s` begins: false if one is under way already.
    pub fn begin(&mut self, s: u64) -> bool {
        if self.stop != 0 {
            return false;
        }
        self.stop = s;
        self.stopped = false;
        true
    }

    /// Every thread stopped: the signal to report, once.
    pub fn complete(&mut self) -> Option<u64> {
        if self.stop == 0 || self.stopped {
            return None;
        }
        self.stopped = true;
        self.stop_report = self.stop;
        self.cont_report = false;
        Some(self.stop)
    }

    /// SIGCONT: the SIGCHLD code for the parent if it stopped (CLD_CONTINUED) or
    /// was stopping (Linux says CLD_STOPPED then), None if it ran.
    pub fn cont(&mut self) -> Option<i32> {
        if self.stop == 0 {
            return None;
        }
        let why = if self.stopped { code::CLD_CONTINUED } else { code::CLD_STOPPED };
        *self = Job { cont_report: true, ..Job::default() };
        Some(why)
    }

    /// The wait status a wait for stops (`stops`) or continuations (`conts`)
    /// reports, taken unless `keep` (WNOWAIT).
    pub fn report(&mut self, stops: bool, conts: bool, keep: bool) -> Option<u64> {
        if stops && self.stopped && self.stop_report != 0 {
            let st = stopped(self.stop_report);
            if !keep {
                self.stop_report = 0;
            }
            return Some(st);
        }
        if conts && self.cont_report {
            self.cont_report = keep;
            return Some(CONTINUED);
        }
        None
    }
}

/// The wait-queue key of process `pid`'s parked threads.
fn stop_key(pid: u64) -> u64 {
    0x7374_6f70_0000_0000 | pid
}

/// Drops signals `mask` wherever they are pending in process `pid`.
fn discard(pid: u64, mask: u64) {
    for t in sched::threads_of(pid) {
        t.pending.fetch_and(!mask, Relaxed);
        t.shared.fetch_and(!mask, Relaxed);
    }
}

/// A stop signal was sent to `p`: a pending SIGCONT goes (whatever the stop
/// signal's disposition).
pub fn stop_sent(p: &Process) {
    discard(p.pid(), bit(sig::SIGCONT));
}

/// Stop signal `s` takes its default action in `p`: the process stops, unless it
/// is the program or (but for SIGSTOP) its group is orphaned.
pub fn stop(p: &Process, s: u64) {
    if p.pid() == 1 || s != sig::SIGSTOP && super::tty::orphaned(p.pgid.load(Relaxed), p.sid.load(Relaxed)) {
        return;
    }
    let reported = {
        let mut j = p.job.lock();
        if !j.begin(s) {
            return;
        }
        if sched::mark_stop(p.pid()) {
            j.complete()
        } else {
            None
        }
    };
    if let Some(s) = reported {
        tell_parent(p, code::CLD_STOPPED, s);
    }
}

/// SIGCONT was sent to `p` (whatever its disposition): pending stop signals go,
/// and a stopping or stopped process runs again.
pub fn cont(p: &Process) {
    let pid = p.pid();
    let why = {
        let mut j = p.job.lock();
        discard(pid, STOP_SIGNALS & !STOP_MARK);
        let why = j.cont();
        if why.is_some() {
            for t in sched::threads_of(pid) {
                t.pending.fetch_and(!STOP_MARK, SeqCst);
                t.stop_ack.store(false, SeqCst);
            }
        }
        why
    };
    if let Some(why) = why {
        sched::wake_all(stop_key(pid));
        tell_parent(p, why, if why == code::CLD_CONTINUED { sig::SIGCONT } else { 0 });
    }
}

/// Thread `t` takes part in its process's stop (it parks, or blocks in the
/// kernel); the stop is complete if no thread is left running.
pub fn acknowledge(t: &Thread) {
    let p = t.process();
    let reported = {
        let mut j = p.job.lock();
        if j.stop == 0 {
            return;
        }
        t.stop_ack.store(true, SeqCst);
        if j.stopped || !sched::stop_quiet(p.pid()) {
            return;
        }
        j.complete()
    };
    if let Some(s) = reported {
        tell_parent(p, code::CLD_STOPPED, s);
    }
}

/// The running thread `t` parks while its process is stopped (before it goes
/// back to the program): blocked until SIGCONT, or ended by SIGKILL.
pub fn park(t: &'static Thread) {
    let key = stop_key(t.pid());
    loop {
        sched::prepare_wait(key);
        if !t.stop_marked() {
            sched::finish_wait(key);
            return;
        }
        acknowledge(t);
        sched::block_stopped();
        sched::finish_wait(key);
        if t.doomed.load(Relaxed) {
            sched::exit_current();
        }
    }
}

/// A new thread `t` of `p`: it parks too if `p` is stopping.
pub fn joined(p: &Process, t: &Thread) {
    let j = p.job.lock();
    if j.stop != 0 {
        t.pending.fetch_or(STOP_MARK, SeqCst);
    }
}

/// Whether `p` is stopped (/proc's `T`).
pub fn is_stopped(p: &Process) -> bool {
    p.job.lock().stopped
}

/// `p` stopped or continued: SIGCHLD for its parent (`why`, `status`) unless the
/// parent asked for none (SA_NOCLDSTOP), and its waits look again.
fn tell_parent(p: &Process, why: i32, status: u64) {
    let ppid = p.ppid.load(Relaxed);
    if let Some(parent) = process::find(ppid) {
        let act = parent.actions.lock()[sig::SIGCHLD as usize - 1];
        if act[1] & sa::NOCLDSTOP == 0 {
            let uid = super::kernel::kernel().cfg.uid as u32;
            let info = Info {
                signo: sig::SIGCHLD,
                code: why,
                pid: p.pid() as u32,
                uid,
                status: status as i32,
                ..Info::default()
            };
            let _ = super::signal::send_to_process(ppid, sig::SIGCHLD, info);
        }
    }
    sched::wake_all(wait_key(ppid));
}

/// For a wait of process `parent`: a stop (`stops`) or continuation (`conts`) of
/// a live child that `wanted` accepts, as (pid, wait status); taken unless `keep`.
pub fn report(parent: u64, wanted: &dyn Fn(u64) -> bool, stops: bool, conts: bool, keep: bool) -> Option<(u64, u64)> {
    process::all()
        .into_iter()
        .filter(|c| c.ppid.load(Relaxed) == parent && wanted(c.pid()))
        .find_map(|c| Some((c.pid(), c.job.lock().report(stops, conts, keep)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_reported_once_and_a_continuation_once() {
        let mut j = Job::default();
        assert!(j.begin(sig::SIGTSTP));
        assert!(!j.begin(sig::SIGSTOP));
        assert_eq!(j.report(true, true, false), None); // not complete yet
        assert_eq!(j.complete(), Some(sig::SIGTSTP));
        assert_eq!(j.complete(), None);
        assert_eq!(j.report(true, false, true), Some(sig::SIGTSTP << 8 | 0x7f)); // WNOWAIT
        assert_eq!(j.report(true, false, false), Some(0x147f));
        assert_eq!(j.report(true, true, false), None);
        assert_eq!(j.cont(), Some(code::CLD_CONTINUED));
        assert_eq!(j.cont(), None);
        assert_eq!(j.report(true, false, false), None);
        assert_eq!(j.report(false, true, true), Some(0xffff));
        assert_eq!(j.report(false, true, false), Some(0xffff));
        assert_eq!(j.report(false, true, false), None);
    }

    #[test]
    fn a_new_stop_forgets_an_unreported_continuation() {
        let mut j = Job::default();
        j.begin(sig::SIGSTOP);
        assert_eq!(j.cont(), Some(code::CLD_STOPPED)); // continued before it completed
        assert!(j.cont_report);
        j.begin(sig::SIGSTOP);
        j.complete();
        assert_eq!(j.report(false, true, false), None);
        assert_eq!(j.report(true, true, false), Some(0x137f));
    }
}
