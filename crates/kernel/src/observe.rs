//! `--trace` and `--stats` in the kernel: what the observed system-call hook
//! (`boot::syscall_hook_observed`) does around each call. The VMM chooses that
//! hook's entry only when one of the two is on, so the plain path pays nothing
//! (design.md, "Tracing and stats").
//!
//! Stats: per system call, calls, errors and TSC ticks, in atomics shared by every
//! CPU (contended only while `--stats` is on), sent to the VMM once at the end.
//! Trace: each call of the set becomes a line (`strace` decodes it) appended to one
//! buffer; the buffer goes to the VMM in one `Trace` hostcall when it would
//! overflow, when a CPU goes idle, and at the end: not an exit per line.

use crate::strace;
use crate::sysnames::{self, COUNT};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use onering_abi::trace as wire;
use onering_arch::sync::Mutex;
use spin::Once;

pub struct Observer {
    trace: bool,
    stats: bool,
    set: [u64; sysnames::SET_WORDS],
    /// Per call: calls, errors, ticks.
    table: [[AtomicU64; 3]; COUNT],
    lines: Mutex<String>,
    /// Observed `execve`s in flight: (thread, call number, start, the call as a
    /// successful one prints). A successful one never comes back to the hook (the
    /// new image starts with a full return) and its arguments are gone with the
    /// old image, so its line is decoded before it runs and sent by [`exec_done`].
    execs: Mutex<Vec<(u64, u64, u64, String)>>,
}

static OBSERVER: Once<Observer> = Once::new();

/// Called once at boot with the boot info's flags and trace set.
pub fn install(flags: u64, set: [u64; sysnames::SET_WORDS]) {
    let trace = flags & onering_abi::flags::TRACE != 0;
    let stats = flags & onering_abi::flags::STATS != 0;
    if trace || stats {
        OBSERVER.call_once(|| Observer {
            trace,
            stats,
            set,
            table: [const { [const { AtomicU64::new(0) }; 3] }; COUNT],
            lines: Mutex::new(String::new()),
            execs: Mutex::new(Vec::new()),
        });
    }
}

/// The observer (None: neither `--trace` nor `--stats`).
pub fn get() -> Option<&'static Observer> {
    OBSERVER.get()
}

/// Calls that do not come back to the hook (the thread or the VM ends, or the
/// return is a full one): traced and counted before they run.
pub fn never_returns(nr: u64) -> bool {
    matches!(nr, 15 | 60 | 231)
}

/// `execve` and `execveat`: they come back to the hook only when they fail.
pub fn is_exec(nr: u64) -> bool {
    matches!(nr, 59 | 322)
}

/// The new image of thread `tid` starts (its exec succeeded): the exec's line
/// and count, if it was observed.
pub fn exec_done(tid: u64) {
    let Some(o) = get() else { return };
    let Some((nr, start, text)) = o.take_exec(tid) else { return };
    let ticks = onering_arch::cpu::rdtsc().wrapping_sub(start);
    o.count(nr, 0, ticks);
    if o.traces(nr) {
        let line = line(tid, crate::time::real_at(start), &text, Some(ticks), crate::time::tsc_hz());
        o.append(&line);
    }
}

/// What the hook knows of a call.
pub struct Call<'a> {
    pub nr: u64,
    pub args: [u64; 6],
    /// The result (None: it does not return).
    pub ret: Option<u64>,
    pub start: u64,
    pub ticks: u64,
    pub tid: u64,
    pub peek: strace::Peek<'a>,
}

impl Observer {
    /// Whether `nr` is traced.
    pub fn traces(&self, nr: u64) -> bool {
        self.trace && sysnames::in_set(&self.set, nr)
    }

    /// Whether call `nr` is counted or traced (else it runs untimed).
    pub fn observes(&self, nr: u64) -> bool {
        self.stats || self.traces(nr)
    }

    /// Counts and traces a call.
    pub fn record(&self, c: &Call) {
        self.count(c.nr, c.ret.unwrap_or(0), c.ticks);
        if self.traces(c.nr) {
            let line = format_line(c, crate::time::real_at(c.start), crate::time::tsc_hz());
            self.append(&line);
        }
    }

    fn count(&self, nr: u64, ret: u64, ticks: u64) {
        if let Some(row) = self.table.get(nr as usize).filter(|_| self.stats) {
            row[0].fetch_add(1, Relaxed);
            if (ret as i64) < 0 && (ret as i64) >= -4095 {
                row[1].fetch_add(1, Relaxed);
            }
            row[2].fetch_add(ticks, Relaxed);
        }
    }

    /// An exec `c` is about to run: its line as a success, kept for [`exec_done`].
    pub fn before_exec(&self, c: &Call) {
        let mut text = String::new();
        if self.traces(c.nr) {
            strace::format_call(&mut text, c.nr, &c.args, Some(0), c.peek);
        }
        let mut execs = self.execs.lock();
        execs.retain(|e| e.0 != c.tid);
        execs.push((c.tid, c.nr, c.start, text));
    }

    /// Thread `tid`'s exec in flight, if any: (call number, start, line text).
    pub fn take_exec(&self, tid: u64) -> Option<(u64, u64, String)> {
        let mut execs = self.execs.lock();
        let i = execs.iter().position(|e| e.0 == tid)?;
        let (_, nr, start, text) = execs.swap_remove(i);
        Some((nr, start, text))
    }

    fn append(&self, line: &str) {
        let mut buf = self.lines.lock();
        if buf.len() + line.len() > wire::MAX_LINES as usize {
            let full = core::mem::take(&mut *buf);
            drop(buf);
            send(wire::LINES, full.as_bytes());
            buf = self.lines.lock();
        }
        buf.push_str(line);
    }

    /// Sends the buffered lines (a CPU went idle, or the end).
    pub fn flush(&self) {
        let lines = core::mem::take(&mut *self.lines.lock());
        if !lines.is_empty() {
            send(wire::LINES, lines.as_bytes());
        }
    }

    /// The end: the lines, then the per-call table.
    pub fn finish(&self) {
        self.flush();
        if self.stats {
            let mut words = Vec::new();
            for (nr, row) in self.table.iter().enumerate() {
                let calls = row[0].load(Relaxed);
                if calls != 0 {
                    words.extend([nr as u64, calls, row[1].load(Relaxed), row[2].load(Relaxed)]);
                }
            }
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            send(wire::STATS, &bytes);
        }
    }
}

/// The end of the VM (exit or a fatal signal): what is buffered and the table.
pub fn finish() {
    if let Some(o) = get() {
        o.finish();
    }
}

fn send(kind: u64, data: &[u8]) {
    onering_arch::hostcall::trace(kind, data);
}

/// `[pid TID] HH:MM:SS.uuuuuu name(args) = result <s.uuuuuu>\n` (strace -f -tt -T;
/// the time of day in UTC: the guest knows no time zone).
pub fn format_line(c: &Call, real_ns: u64, tsc_hz: u64) -> String {
    let mut text = String::new();
    strace::format_call(&mut text, c.nr, &c.args, c.ret, c.peek);
    line(c.tid, real_ns, &text, c.ret.map(|_| c.ticks), tsc_hz)
}

/// A trace line of thread `tid` whose call `text` (`name(args) = result`) began
/// at `real_ns` and, if it returned, took `ticks`.
fn line(tid: u64, real_ns: u64, text: &str, ticks: Option<u64>, tsc_hz: u64) -> String {
    let mut s = String::new();
    let day_us = (real_ns / 1000) % 86_400_000_000;
    let secs = day_us / 1_000_000;
    let _ = write!(
        s,
        "[pid {:>5}] {:02}:{:02}:{:02}.{:06} {text}",
        tid,
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        day_us % 1_000_000
    );
    if let Some(ticks) = ticks {
        let us = u128::from(ticks) * 1_000_000 / u128::from(tsc_hz.max(1));
        let _ = write!(s, " <{}.{:06}>", us / 1_000_000, us % 1_000_000);
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_thread_time_call_and_duration() {
        let peek = |_: u64, _: &mut [u8]| false;
        let c = Call { nr: 110, args: [0; 6], ret: Some(1), start: 0, ticks: 3_000, tid: 7, peek: &peek };
        // 01:02:03.000004 on some day; 3,000 ticks at 1 GHz: 3 µs.
        let ns = 19_000 * 86_400 * 1_000_000_000 + (3723 * 1_000_000 + 4) * 1000;
        assert_eq!(format_line(&c, ns, 1_000_000_000), "[pid     7] 01:02:03.000004 getppid() = 1 <0.000003>\n");
        let e = Call { nr: 231, ret: None, ..c };
        assert_eq!(format_line(&e, ns, 1_000_000_000), "[pid     7] 01:02:03.000004 exit_group(0) = ?\n");
    }

    #[test]
    fn stats_count_calls_errors_and_time() {
        install(onering_abi::flags::STATS, [0; sysnames::SET_WORDS]);
        let o = get().unwrap();
        let peek = |_: u64, _: &mut [u8]| false;
        let c = Call { nr: 2, args: [0; 6], ret: Some(u64::MAX - 1), start: 0, ticks: 10, tid: 1, peek: &peek };
        o.record(&c);
        o.record(&Call { ret: Some(3), ..c });
        assert_eq!(o.table[2][0].load(Relaxed), 2);
        assert_eq!(o.table[2][1].load(Relaxed), 1);
        assert_eq!(o.table[2][2].load(Relaxed), 20);
        assert!(!o.traces(2));
    }
}
