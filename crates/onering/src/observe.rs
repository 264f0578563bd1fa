//! `--trace`, `--stats` and `--perf` on the VMM's side: where the guest's trace
//! lines go, the counters only the VMM can keep (VM exits by reason, hostcalls by
//! kind, each vCPU's time in the guest and halted), the guest's per-system-call
//! table, and the summary printed (or written as JSON) at the end.
//!
//! Everything the guest sends is untrusted: lines are escaped before they reach a
//! terminal (`onering_rewrite::bytes::printable`), table records are bounded and
//! checked. The per-exit counting is one relaxed add; time is measured only when
//! `--stats` asked for it (`STATS_ON`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

/// Why a vCPU left KVM_RUN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitReason {
    /// An MMIO write to the hostcall doorbell.
    Hostcall,
    /// Any other MMIO access (devices, the local APIC).
    Mmio,
    Io,
    Hlt,
    Shutdown,
    /// KVM_RUN returned EINTR/EAGAIN: a signal (the profiler's sample, the end).
    Interrupted,
    Other,
}

const REASONS: [(ExitReason, &str); 7] = [
    (ExitReason::Hostcall, "hostcall (MMIO doorbell)"),
    (ExitReason::Mmio, "other MMIO"),
    (ExitReason::Io, "port I/O"),
    (ExitReason::Hlt, "hlt"),
    (ExitReason::Shutdown, "shutdown"),
    (ExitReason::Interrupted, "interrupted (signal)"),
    (ExitReason::Other, "other"),
];

static EXITS: [AtomicU64; REASONS.len()] = [const { AtomicU64::new(0) }; REASONS.len()];
/// Hostcalls by number (all the numbers are below 64).
static HOSTCALLS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

/// `--stats`: vCPU time is measured (two clock reads per exit, only then).
pub static STATS_ON: AtomicBool = AtomicBool::new(false);

/// Per vCPU: ns inside KVM_RUN, ns halted in the VMM.
static IN_GUEST_NS: [AtomicU64; onering_abi::MAX_CPUS] = [const { AtomicU64::new(0) }; onering_abi::MAX_CPUS];
static HALTED_NS: [AtomicU64; onering_abi::MAX_CPUS] = [const { AtomicU64::new(0) }; onering_abi::MAX_CPUS];

/// Counts one exit.
pub fn count_exit(r: ExitReason) {
    if let Some(i) = REASONS.iter().position(|(x, _)| *x == r) {
        EXITS[i].fetch_add(1, Relaxed);
    }
}

/// Counts one hostcall by number.
pub fn count_hostcall(nr: u64) {
    if let Some(c) = HOSTCALLS.get(nr as usize) {
        c.fetch_add(1, Relaxed);
    }
}

/// Adds time vCPU `cpu` spent in the guest (`halted`: halted in the VMM).
pub fn add_time(cpu: u64, ns: u64, halted: bool) {
    let table = if halted { &HALTED_NS } else { &IN_GUEST_NS };
    if let Some(c) = table.get(cpu as usize) {
        c.fetch_add(ns, Relaxed);
    }
}

/// When each vCPU's KVM_RUN (`[0]`) or halt (`[1]`) in progress began (ns since
/// [`epoch`] + 1; 0: none), so that one the end of the VM interrupts still counts.
static SINCE: [[AtomicU64; onering_abi::MAX_CPUS]; 2] =
    [const { [const { AtomicU64::new(0) }; onering_abi::MAX_CPUS] }; 2];

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Starts timing vCPU `cpu` when `--stats` is on (`halted`: a halt, else KVM_RUN):
/// pass the result to [`stop_timer`].
pub fn start_timer(cpu: u64, halted: bool) -> Option<Instant> {
    let now = STATS_ON.load(Relaxed).then(Instant::now)?;
    if let Some(s) = SINCE[usize::from(halted)].get(cpu as usize) {
        s.store(now.duration_since(epoch()).as_nanos() as u64 + 1, Relaxed);
    }
    Some(now)
}

pub fn stop_timer(started: Option<Instant>, cpu: u64, halted: bool) {
    if let Some(t) = started {
        if let Some(s) = SINCE[usize::from(halted)].get(cpu as usize) {
            s.store(0, Relaxed);
        }
        add_time(cpu, t.elapsed().as_nanos() as u64, halted);
    }
}

/// ns vCPU `cpu` has been in the guest (`halted`: halted): finished spans and the
/// one in progress.
fn time_ns(cpu: usize, halted: bool) -> u64 {
    let done = if halted { &HALTED_NS } else { &IN_GUEST_NS };
    let since = SINCE[usize::from(halted)][cpu].load(Relaxed);
    let now = epoch().elapsed().as_nanos() as u64 + 1;
    done[cpu].load(Relaxed) + if since == 0 { 0 } else { now.saturating_sub(since) }
}

fn in_guest_ns(cpu: usize) -> u64 {
    time_ns(cpu, false)
}

/// Where trace lines go: stderr, or the `--trace-out` file.
static SINK: Mutex<Option<Box<dyn Write + Send>>> = Mutex::new(None);

/// Sends trace lines to `path` (None: stderr).
pub fn trace_to(path: Option<&std::path::Path>) -> std::io::Result<()> {
    let sink: Box<dyn Write + Send> = match path {
        Some(p) => Box::new(std::io::BufWriter::new(std::fs::File::create(p)?)),
        None => Box::new(std::io::stderr()),
    };
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(sink);
    Ok(())
}

/// Trace lines from the guest: escaped (newlines kept) and written out.
pub fn trace_lines(bytes: &[u8]) {
    let text = onering_rewrite::bytes::printable(bytes, bytes.len());
    if let Some(sink) = SINK.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        let _ = sink.write_all(text.as_bytes());
    }
}

/// Flushes the trace file (at the end).
pub fn flush_trace() {
    if let Some(sink) = SINK.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        let _ = sink.flush();
    }
}

/// One row of the per-system-call table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallStats {
    pub nr: u64,
    pub calls: u64,
    pub errors: u64,
    pub ticks: u64,
}

static CALLS: Mutex<Vec<CallStats>> = Mutex::new(Vec::new());

/// The guest's table (`onering_abi::trace::STATS` records): rows with a number the
/// kernel could have, at most one per number; anything else is ignored.
pub fn syscall_table(bytes: &[u8]) {
    let words: Vec<u64> = bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
    let mut rows: Vec<CallStats> = words
        .chunks_exact(onering_abi::trace::STATS_WORDS)
        .take(onering_abi::sysnames::COUNT)
        .filter(|r| r[0] < onering_abi::sysnames::COUNT as u64)
        .map(|r| CallStats { nr: r[0], calls: r[1], errors: r[2], ticks: r[3] })
        .collect();
    rows.sort_by_key(|r| r.nr);
    rows.dedup_by_key(|r| r.nr);
    *CALLS.lock().unwrap_or_else(|e| e.into_inner()) = rows;
}

/// System calls in the guest's table, all together.
pub fn total_calls() -> u64 {
    CALLS.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|r| r.calls).sum()
}

/// Everything `--stats` reports besides the kernel's per-CPU counters.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub calls: Vec<CallStats>,
    pub tsc_hz: u64,
    pub exits: Vec<(&'static str, u64)>,
    pub hostcalls: Vec<(String, u64)>,
    /// Per vCPU: (ns in the guest, ns halted).
    pub vcpus: Vec<(u64, u64)>,
    /// Named counters: traps, rewritten calls, faults, interrupts, halts, kicks...
    pub counters: Vec<(&'static str, u64)>,
    pub wall_ns: u64,
}

impl Summary {
    /// Collects the VMM's counters for `ncpus` vCPUs (`counters` from the caller).
    pub fn collect(ncpus: u64, tsc_hz: u64, counters: Vec<(&'static str, u64)>, wall_ns: u64) -> Summary {
        let hostcalls = HOSTCALLS
            .iter()
            .enumerate()
            .filter(|(_, c)| c.load(Relaxed) != 0)
            .map(|(nr, c)| {
                let name =
                    onering_abi::Hostcall::from_u64(nr as u64).map_or_else(|| format!("#{nr}"), |h| format!("{h:?}"));
                (name, c.load(Relaxed))
            })
            .collect();
        Summary {
            calls: CALLS.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            tsc_hz,
            exits: REASONS.iter().zip(&EXITS).map(|((_, n), c)| (*n, c.load(Relaxed))).collect(),
            hostcalls,
            vcpus: (0..ncpus.min(onering_abi::MAX_CPUS as u64) as usize)
                .map(|i| (time_ns(i, false), time_ns(i, true)))
                .collect(),
            counters,
            wall_ns,
        }
    }

    fn seconds(&self, ticks: u64) -> f64 {
        ticks as f64 / self.tsc_hz.max(1) as f64
    }

    /// The calls, most time first (then most calls, then by name).
    fn sorted_calls(&self) -> Vec<CallStats> {
        let mut rows = self.calls.clone();
        rows.sort_by(|a, b| b.ticks.cmp(&a.ticks).then(b.calls.cmp(&a.calls)).then(a.nr.cmp(&b.nr)));
        rows
    }

    /// strace -c's table.
    pub fn call_table(&self) -> String {
        let mut s = String::new();
        let rule = "------ ----------- ----------- --------- --------- ----------------\n";
        s.push_str("% time     seconds  usecs/call     calls    errors syscall\n");
        s.push_str(rule);
        let total_ticks: u64 = self.calls.iter().map(|r| r.ticks).sum();
        let (calls, errors) = self.calls.iter().fold((0, 0), |(c, e), r| (c + r.calls, e + r.errors));
        for r in self.sorted_calls() {
            let name = onering_abi::sysnames::name(r.nr).unwrap_or("?");
            let pct = 100.0 * r.ticks as f64 / total_ticks.max(1) as f64;
            let usecs = self.seconds(r.ticks) * 1e6 / r.calls.max(1) as f64;
            let errs = if r.errors == 0 { String::new() } else { r.errors.to_string() };
            s.push_str(&format!(
                "{pct:6.2} {:11.6} {:11.0} {:9} {errs:>9} {name}\n",
                self.seconds(r.ticks),
                usecs,
                r.calls
            ));
        }
        s.push_str(rule);
        let errs = if errors == 0 { String::new() } else { errors.to_string() };
        s.push_str(&format!(
            "{:6.2} {:11.6} {:11.0} {calls:9} {errs:>9} total\n",
            100.0,
            self.seconds(total_ticks),
            self.seconds(total_ticks) * 1e6 / calls.max(1) as f64
        ));
        s
    }

    /// The rest, as `onering: stats:` lines.
    pub fn lines(&self) -> Vec<String> {
        let list = |v: &[(String, u64)]| v.iter().map(|(n, c)| format!("{c} {n}")).collect::<Vec<_>>().join(", ");
        let exits: Vec<(String, u64)> =
            self.exits.iter().filter(|(_, c)| *c != 0).map(|(n, c)| (n.to_string(), *c)).collect();
        let counters: Vec<(String, u64)> = self.counters.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        let mut out = vec![
            format!("onering: stats: {}", list(&counters)),
            format!("onering: stats: VM exits by reason: {}", list(&exits)),
            format!("onering: stats: hostcalls by kind: {}", list(&self.hostcalls)),
        ];
        for (cpu, (guest, halted)) in self.vcpus.iter().enumerate() {
            out.push(format!(
                "onering: stats: vCPU {cpu}: {:.3} s in the guest, {:.3} s halted (of {:.3} s)",
                *guest as f64 / 1e9,
                *halted as f64 / 1e9,
                self.wall_ns as f64 / 1e9
            ));
        }
        out
    }

    /// The same as JSON (a small writer: names are ASCII identifiers of ours).
    pub fn json(&self) -> String {
        let obj = |v: &[(String, u64)]| {
            v.iter().map(|(n, c)| format!("\"{}\": {c}", json_escape(n))).collect::<Vec<_>>().join(", ")
        };
        let calls = self
            .sorted_calls()
            .iter()
            .map(|r| {
                format!(
                    "{{\"syscall\": \"{}\", \"nr\": {}, \"calls\": {}, \"errors\": {}, \"seconds\": {:.9}}}",
                    onering_abi::sysnames::name(r.nr).unwrap_or("?"),
                    r.nr,
                    r.calls,
                    r.errors,
                    self.seconds(r.ticks)
                )
            })
            .collect::<Vec<_>>()
            .join(",\n    ");
        let exits: Vec<(String, u64)> = self.exits.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        let counters: Vec<(String, u64)> = self.counters.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        let vcpus = self
            .vcpus
            .iter()
            .map(|(g, h)| {
                format!("{{\"guest_seconds\": {:.9}, \"halted_seconds\": {:.9}}}", *g as f64 / 1e9, *h as f64 / 1e9)
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "{{\n  \"wall_seconds\": {:.9},\n  \"syscalls\": [\n    {calls}\n  ],\n  \"counters\": {{{}}},\n  \
             \"exits\": {{{}}},\n  \"hostcalls\": {{{}}},\n  \"vcpus\": [{vcpus}]\n}}\n",
            self.wall_ns as f64 / 1e9,
            obj(&counters),
            obj(&exits),
            obj(&self.hostcalls)
        )
    }
}

fn json_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c if c.is_control() => format!("\\u{:04x}", c as u32).chars().collect(),
            c => vec![c],
        })
        .collect()
}

/// `--perf`: a vCPU thread's guest-mode cycles and instructions counters.
pub struct PerfCounters {
    cycles: std::fs::File,
    instructions: std::fs::File,
}

static PERF: Mutex<Vec<(u64, PerfCounters)>> = Mutex::new(Vec::new());
pub static PERF_ON: AtomicBool = AtomicBool::new(false);
/// Why the counters could not be opened (the first failure).
static PERF_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Opens the calling vCPU thread's counters (with `--perf`; a failure is kept for
/// the report).
pub fn perf_open(cpu: u64) {
    if !PERF_ON.load(Relaxed) {
        return;
    }
    let open = crate::sys::perf::guest_counter;
    match open(crate::sys::perf::CYCLES).and_then(|c| Ok((c, open(crate::sys::perf::INSTRUCTIONS)?))) {
        Ok((cycles, instructions)) => PERF
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((cpu, PerfCounters { cycles: cycles.into(), instructions: instructions.into() })),
        Err(e) => {
            PERF_ERROR.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(format!("perf_event_open: {e}"));
        }
    }
}

/// The `--perf` report: per vCPU guest cycles, instructions and IPC, or the line
/// that says the host has no counters, with the TSC-based figures instead.
pub fn perf_report(wall_ns: u64) -> Vec<String> {
    use std::io::Read;
    let read = |f: &std::fs::File| -> Option<u64> {
        let mut b = [0u8; 8];
        (&*f).read_exact(&mut b).ok().map(|()| u64::from_le_bytes(b))
    };
    let counters = PERF.lock().unwrap_or_else(|e| e.into_inner());
    let error = PERF_ERROR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let times = |cpu: usize| (time_ns(cpu, false), time_ns(cpu, true));
    let wall = wall_ns as f64 / 1e9;
    if error.is_some() || counters.is_empty() {
        let per_cpu = (0..counters.len().max(1).max(active_cpus()))
            .map(|c| {
                let (g, h) = times(c);
                format!("vCPU {c} {:.3} s in the guest, {:.3} s halted", g as f64 / 1e9, h as f64 / 1e9)
            })
            .collect::<Vec<_>>()
            .join("; ");
        return vec![format!(
            "onering: --perf: this host exposes no hardware performance counters ({}); TSC-based figures instead: \
             wall {wall:.3} s; {per_cpu}",
            error.unwrap_or_else(|| "none opened".into())
        )];
    }
    counters
        .iter()
        .map(|(cpu, c)| {
            let (cycles, instr) = (read(&c.cycles).unwrap_or(0), read(&c.instructions).unwrap_or(0));
            let (g, _) = times(*cpu as usize);
            format!(
                "onering: --perf: vCPU {cpu}: {cycles} guest cycles, {instr} instructions, IPC {:.2}; {:.3} s in the \
                 guest of {wall:.3} s",
                instr as f64 / cycles.max(1) as f64,
                g as f64 / 1e9
            )
        })
        .collect()
}

/// vCPUs that ran (any time in the guest).
fn active_cpus() -> usize {
    (0..onering_abi::MAX_CPUS).take_while(|c| in_guest_ns(*c) != 0).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        Summary {
            calls: vec![
                CallStats { nr: 110, calls: 1000, errors: 0, ticks: 3_000_000 },
                CallStats { nr: 2, calls: 4, errors: 1, ticks: 1_000_000 },
            ],
            tsc_hz: 1_000_000_000,
            exits: vec![("hostcall (MMIO doorbell)", 5)],
            hostcalls: vec![("Write".into(), 3)],
            vcpus: vec![(1_000_000, 2_000_000)],
            counters: vec![("traps", 2)],
            wall_ns: 5_000_000,
        }
    }

    #[test]
    fn the_table_is_stracec_s_sorted_by_time() {
        let t = summary().call_table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "% time     seconds  usecs/call     calls    errors syscall");
        assert_eq!(lines[2], " 75.00    0.003000           3      1000           getppid");
        assert_eq!(lines[3], " 25.00    0.001000         250         4         1 open");
        assert_eq!(lines[5], "100.00    0.004000           4      1004         1 total");
    }

    #[test]
    fn json_has_every_part() {
        let j = summary().json();
        for part in
            ["\"syscall\": \"getppid\"", "\"calls\": 1000", "\"traps\": 2", "\"Write\": 3", "\"halted_seconds\""]
        {
            assert!(j.contains(part), "{part} in {j}");
        }
        assert_eq!(j.matches('{').count(), j.matches('}').count());
    }

    #[test]
    fn guest_tables_are_bounded() {
        let mut bytes = Vec::new();
        for r in [[110u64, 5, 0, 9], [99_999, 1, 1, 1], [110, 7, 0, 0]] {
            bytes.extend(r.iter().flat_map(|w| w.to_le_bytes()));
        }
        bytes.push(1); // a stray byte
        syscall_table(&bytes);
        let rows = CALLS.lock().unwrap().clone();
        assert_eq!(rows, vec![CallStats { nr: 110, calls: 5, errors: 0, ticks: 9 }]);
    }
}
