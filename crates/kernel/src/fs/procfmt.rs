//! The text of /proc and /sys, in Linux's formats (programs parse them: glibc,
//! Go, Java, ps, top), and the shape of both trees. Pure functions of snapshot
//! structs, unit-tested on the host; `fs::proc` takes the snapshots from the
//! kernel's state and serves the results.

use crate::vfs::synth::{Entries, Spec};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// What `uname` says (and /proc/version, /proc/sys/kernel).
pub const OSTYPE: &str = "Linux";
pub const RELEASE: &str = "6.1.0-onering";
pub const VERSION: &str = "#1 SMP onering";
/// Clock ticks per second of /proc's times (USER_HZ).
pub const HZ: u64 = 100;
const PAGE: u64 = 4096;

/// One process (or one thread of it, for task/<tid>/) as /proc shows it.
#[derive(Clone, Debug, Default)]
pub struct ProcInfo {
    pub pid: u64,
    /// The thread shown (the pid for the process itself).
    pub tid: u64,
    pub ppid: u64,
    pub comm: Vec<u8>,
    /// 'R' (running), 'S' (sleeping) or 'T' (stopped).
    pub state: u8,
    pub threads: u64,
    pub uid: u64,
    pub gid: u64,
    pub umask: u32,
    /// Capability sets (`onering_abi::caps`), the no_new_privs flag.
    pub caps: [u64; onering_abi::caps::SETS],
    pub no_new_privs: bool,
    /// Bytes mapped, and resident; of which the stack, data (writable private),
    /// text.
    pub vsize: u64,
    pub rss: u64,
    pub stack: u64,
    pub data: u64,
    pub text: u64,
    /// Start time, in ticks since boot.
    pub start: u64,
    pub fds: u64,
    /// Signal masks: blocked, ignored, caught, pending.
    pub sig: [u64; 4],
    pub cpus: usize,
    pub start_stack: u64,
}

fn state_name(s: u8) -> &'static str {
    match s {
        b'R' => "R (running)",
        b'Z' => "Z (zombie)",
        b'T' => "T (stopped)",
        _ => "S (sleeping)",
    }
}

/// `/proc/<pid>/stat`: Linux's 52 fields.
pub fn stat(p: &ProcInfo) -> String {
    let comm = String::from_utf8_lossy(&p.comm);
    // pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
    // cmajflt utime stime cutime cstime priority nice num_threads itrealvalue
    // starttime vsize rss
    let (pid, st) = (p.pid, p.state as char);
    let mut s = format!(
        "{} ({comm}) {st} {} {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 {} 0 {} {} {} ",
        p.tid,
        p.ppid,
        p.threads,
        p.start,
        p.vsize,
        p.rss / PAGE
    );
    // rsslim startcode endcode startstack kstkesp kstkeip signal blocked sigignore
    // sigcatch wchan nswap cnswap exit_signal processor rt_priority policy
    // delayacct_blkio_ticks guest_time cguest_time start_data end_data start_brk
    // arg_start arg_end env_start env_end exit_code
    let _ = writeln!(
        s,
        "18446744073709551615 1 1 {} 0 0 {} {} {} {} 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
        p.start_stack, p.sig[3], p.sig[0], p.sig[1], p.sig[2]
    );
    s
}

/// `/proc/<pid>/statm`: sizes in pages.
pub fn statm(p: &ProcInfo) -> String {
    format!("{} {} 0 {} 0 {} 0\n", p.vsize / PAGE, p.rss / PAGE, p.text / PAGE, (p.data + p.stack) / PAGE)
}

/// A CPU list as Linux writes it: "0", "0-3".
pub fn cpu_list(n: usize) -> String {
    match n {
        0 | 1 => String::from("0"),
        n => format!("0-{}", n - 1),
    }
}

/// `/proc/<pid>/status`.
pub fn status(p: &ProcInfo) -> String {
    let kb = |b: u64| format!("{:>8} kB", b / 1024);
    let mask = |m: u64| format!("{m:016x}");
    let mut s = String::new();
    let name = String::from_utf8_lossy(&p.comm);
    let _ = write!(s, "Name:\t{name}\nUmask:\t{:04o}\nState:\t{}\n", p.umask, state_name(p.state));
    let _ = write!(s, "Tgid:\t{}\nNgid:\t0\nPid:\t{}\nPPid:\t{}\nTracerPid:\t0\n", p.pid, p.tid, p.ppid);
    let (u, g) = (p.uid, p.gid);
    let _ = write!(s, "Uid:\t{u}\t{u}\t{u}\t{u}\nGid:\t{g}\t{g}\t{g}\t{g}\n");
    let fdsize = p.fds.max(1).next_power_of_two().max(64);
    let _ = write!(
        s,
        "FDSize:\t{fdsize}\nGroups:\t\nNStgid:\t{}\nNSpid:\t{}\nNSpgid:\t{}\nNSsid:\t{}\n",
        p.pid, p.tid, p.pid, p.pid
    );
    for (k, v) in [
        ("VmPeak", p.vsize),
        ("VmSize", p.vsize),
        ("VmLck", 0),
        ("VmPin", 0),
        ("VmHWM", p.rss),
        ("VmRSS", p.rss),
        ("RssAnon", p.rss),
        ("RssFile", 0),
        ("RssShmem", 0),
        ("VmData", p.data),
        ("VmStk", p.stack),
        ("VmExe", p.text),
        ("VmLib", 0),
        ("VmPTE", 0),
        ("VmSwap", 0),
    ] {
        let _ = writeln!(s, "{k}:\t{}", kb(v));
    }
    let _ = write!(
        s,
        "HugetlbPages:\t{}\nCoreDumping:\t0\nTHP_enabled:\t1\nThreads:\t{}\nSigQ:\t0/63432\n",
        kb(0),
        p.threads
    );
    let _ = write!(s, "SigPnd:\t{}\nShdPnd:\t{}\n", mask(0), mask(p.sig[3]));
    let _ = write!(s, "SigBlk:\t{}\nSigIgn:\t{}\nSigCgt:\t{}\n", mask(p.sig[0]), mask(p.sig[1]), mask(p.sig[2]));
    use onering_abi::caps::{AMBIENT, BOUNDING, EFFECTIVE, INHERITABLE, PERMITTED};
    let c = |set: usize| mask(p.caps[set]);
    let _ = write!(
        s,
        "CapInh:\t{}\nCapPrm:\t{}\nCapEff:\t{}\nCapBnd:\t{}\nCapAmb:\t{}\n",
        c(INHERITABLE),
        c(PERMITTED),
        c(EFFECTIVE),
        c(BOUNDING),
        c(AMBIENT)
    );
    let _ = write!(s, "NoNewPrivs:\t{}\nSeccomp:\t0\nSeccomp_filters:\t0\n", u8::from(p.no_new_privs));
    s.push_str("Speculation_Store_Bypass:\tthread vulnerable\nSpeculationIndirectBranch:\tconditional enabled\n");
    let cpus = if p.cpus >= 64 { u64::MAX } else { (1u64 << p.cpus) - 1 };
    let _ = write!(s, "Cpus_allowed:\t{cpus:x}\nCpus_allowed_list:\t{}\n", cpu_list(p.cpus));
    s.push_str(
        "Mems_allowed:\t1\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t0\nnonvoluntary_ctxt_switches:\t0\n",
    );
    s
}

/// One line of `/proc/<pid>/maps`.
#[derive(Clone, Debug, Default)]
pub struct MapLine {
    pub start: u64,
    pub end: u64,
    /// PROT_* bits.
    pub prot: u32,
    pub shared: bool,
    pub offset: u64,
    pub ino: u64,
    pub name: Vec<u8>,
}

/// `/proc/<pid>/maps`.
pub fn maps(lines: &[MapLine]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        let bit = |b: u32, c: char| if l.prot & b != 0 { c } else { '-' };
        let dev = if l.ino != 0 { "00:1f" } else { "00:00" };
        let head = format!(
            "{:08x}-{:08x} {}{}{}{} {:08x} {dev} {}",
            l.start,
            l.end,
            bit(1, 'r'),
            bit(2, 'w'),
            bit(4, 'x'),
            if l.shared { 's' } else { 'p' },
            l.offset,
            l.ino
        );
        out.extend_from_slice(head.as_bytes());
        if !l.name.is_empty() {
            // (Linux pads the name to column 74.)
            out.resize(out.len() + 73usize.saturating_sub(head.len()).max(1), b' ');
            out.extend_from_slice(&l.name);
        }
        out.push(b'\n');
    }
    out
}

/// `/proc/meminfo`, from the VM's memory and what is free of it (bytes).
pub fn meminfo(total: u64, free: u64) -> String {
    let mut s = String::new();
    for (k, v) in [
        ("MemTotal", total),
        ("MemFree", free),
        ("MemAvailable", free),
        ("Buffers", 0),
        ("Cached", 0),
        ("SwapCached", 0),
        ("Active", total - free.min(total)),
        ("Inactive", 0),
        ("SwapTotal", 0),
        ("SwapFree", 0),
        ("Dirty", 0),
        ("Writeback", 0),
        ("AnonPages", total - free.min(total)),
        ("Mapped", 0),
        ("Shmem", 0),
        ("Slab", 0),
        ("CommitLimit", total),
        ("Committed_AS", total - free.min(total)),
        ("VmallocTotal", 34359738367 * 1024),
        ("HugePages_Total", u64::MAX),
        ("HugePages_Free", u64::MAX),
        ("Hugepagesize", 2048 * 1024),
    ] {
        let label = format!("{k}:");
        if v == u64::MAX {
            let _ = writeln!(s, "{label:<16}{:>8}", 0);
        } else {
            let _ = writeln!(s, "{label:<16}{:>8} kB", v / 1024);
        }
    }
    s
}

/// The CPU as CPUID names it.
#[derive(Clone, Debug, Default)]
pub struct CpuId {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    pub stepping: u32,
    pub name: String,
    pub mhz: u64,
    pub flags: String,
}

/// `/proc/cpuinfo`: one entry per vCPU.
pub fn cpuinfo(n: usize, c: &CpuId) -> String {
    let mut s = String::new();
    for i in 0..n {
        let _ = write!(
            s,
            "processor\t: {i}\nvendor_id\t: {}\ncpu family\t: {}\nmodel\t\t: {}\nmodel name\t: {}\nstepping\t: {}\n\
             cpu MHz\t\t: {}.000\ncache size\t: 16384 KB\nphysical id\t: 0\nsiblings\t: {n}\ncore id\t\t: {i}\n\
             cpu cores\t: {n}\napicid\t\t: {i}\ninitial apicid\t: {i}\nfpu\t\t: yes\nfpu_exception\t: yes\n\
             cpuid level\t: 13\nwp\t\t: yes\nflags\t\t: {}\nbogomips\t: {}.00\nclflush size\t: 64\n\
             cache_alignment\t: 64\naddress sizes\t: 46 bits physical, 48 bits virtual\npower management:\n\n",
            c.vendor,
            c.family,
            c.model,
            c.name,
            c.stepping,
            c.mhz,
            c.flags,
            c.mhz * 2
        );
    }
    s
}

/// The CPUID leaves' bits behind the best-known flags of /proc/cpuinfo: (leaf 1
/// edx, leaf 1 ecx, leaf 7 ebx) bit, name.
const FLAGS: &[(u8, u32, &str)] = &[
    (0, 0, "fpu"),
    (0, 4, "tsc"),
    (0, 5, "msr"),
    (0, 6, "pae"),
    (0, 8, "cx8"),
    (0, 9, "apic"),
    (0, 11, "sep"),
    (0, 15, "cmov"),
    (0, 19, "clflush"),
    (0, 23, "mmx"),
    (0, 24, "fxsr"),
    (0, 25, "sse"),
    (0, 26, "sse2"),
    (0, 28, "ht"),
    (1, 0, "pni"),
    (1, 1, "pclmulqdq"),
    (1, 9, "ssse3"),
    (1, 12, "fma"),
    (1, 13, "cx16"),
    (1, 19, "sse4_1"),
    (1, 20, "sse4_2"),
    (1, 22, "movbe"),
    (1, 23, "popcnt"),
    (1, 25, "aes"),
    (1, 26, "xsave"),
    (1, 28, "avx"),
    (1, 29, "f16c"),
    (1, 30, "rdrand"),
    (2, 3, "bmi1"),
    (2, 5, "avx2"),
    (2, 8, "bmi2"),
    (2, 16, "avx512f"),
    (2, 18, "rdseed"),
    (2, 19, "adx"),
    (2, 29, "sha_ni"),
];

/// The flags line from CPUID registers: leaf 1 edx and ecx, leaf 7 ebx.
pub fn cpu_flags(regs: [u32; 3]) -> String {
    let names: Vec<&str> = FLAGS.iter().filter(|(r, b, _)| regs[*r as usize] & (1 << b) != 0).map(|f| f.2).collect();
    names.join(" ")
}

/// `/proc/stat`: times in ticks (`up`: since boot, per CPU all idle but `busy`).
pub fn kstat(ncpus: usize, up: u64, busy: u64, btime: u64, processes: u64, running: u64) -> String {
    let line = |name: &str, user: u64, idle: u64| format!("{name} {user} 0 0 {idle} 0 0 0 0 0 0\n");
    let n = ncpus as u64;
    let mut s = line("cpu ", busy, (up * n).saturating_sub(busy));
    for i in 0..n {
        s += &line(&format!("cpu{i}"), busy / n, up.saturating_sub(busy / n));
    }
    let _ = write!(
        s,
        "intr 0\nctxt 0\nbtime {btime}\nprocesses {processes}\nprocs_running {running}\nprocs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n"
    );
    s
}

/// `/proc/uptime`: seconds up, and idle (summed over the CPUs), from ns.
pub fn uptime(up_ns: u64, idle_ns: u64) -> String {
    let cs = |ns: u64| format!("{}.{:02}", ns / 1_000_000_000, ns / 10_000_000 % 100);
    format!("{} {}\n", cs(up_ns), cs(idle_ns))
}

/// `/proc/loadavg`.
pub fn loadavg(running: u64, threads: u64, last_pid: u64) -> String {
    format!("0.00 0.00 0.00 {running}/{threads} {last_pid}\n")
}

/// A mount as /proc shows it.
pub struct Mount<'a> {
    pub source: &'a str,
    pub at: &'a [u8],
    pub fstype: &'a str,
    pub ro: bool,
}

/// The VM's mounts: its root, /dev, /dev/shm, /tmp, /proc, /sys and its cgroup2,
/// each volume (`volumes`: path, read-only), then each `--tmpfs` (`tmpfs`), in
/// the order they were made.
pub fn mount_list<'a>(root_ro: bool, volumes: &'a [(Vec<u8>, bool)], tmpfs: &'a [(Vec<u8>, bool)]) -> Vec<Mount<'a>> {
    let mut m = alloc::vec![
        Mount { source: "onering", at: b"/", fstype: "onering", ro: root_ro },
        Mount { source: "devtmpfs", at: b"/dev", fstype: "devtmpfs", ro: false },
        Mount { source: "shm", at: b"/dev/shm", fstype: "tmpfs", ro: false },
        Mount { source: "tmpfs", at: b"/tmp", fstype: "tmpfs", ro: false },
        Mount { source: "proc", at: b"/proc", fstype: "proc", ro: false },
        Mount { source: "sysfs", at: b"/sys", fstype: "sysfs", ro: true },
        Mount { source: "cgroup2", at: b"/sys/fs/cgroup", fstype: "cgroup2", ro: true },
    ];
    m.extend(volumes.iter().map(|(at, ro)| Mount { source: "onering", at, fstype: "onering", ro: *ro }));
    m.extend(tmpfs.iter().map(|(at, ro)| Mount { source: "tmpfs", at, fstype: "tmpfs", ro: *ro }));
    m
}

fn opts(m: &Mount) -> &'static str {
    match (m.ro, m.fstype) {
        (ro, "proc" | "sysfs" | "cgroup2") => {
            if ro {
                "ro,nosuid,nodev,noexec,relatime"
            } else {
                "rw,nosuid,nodev,noexec,relatime"
            }
        }
        (true, _) => "ro,relatime",
        (false, _) => "rw,relatime",
    }
}

/// `/proc/<pid>/mounts` (and /proc/mounts).
pub fn mounts(list: &[Mount]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in list {
        out.extend_from_slice(m.source.as_bytes());
        out.push(b' ');
        out.extend_from_slice(m.at);
        out.extend_from_slice(format!(" {} {} 0 0\n", m.fstype, opts(m)).as_bytes());
    }
    out
}

/// `/proc/<pid>/mountinfo`.
pub fn mountinfo(list: &[Mount]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let id = 20 + i;
        let parent = if i == 0 { 1 } else { 20 };
        let parent = if m.at == b"/sys/fs/cgroup" { 24 } else { parent };
        out.extend_from_slice(format!("{id} {parent} 0:{} / ", id).as_bytes());
        out.extend_from_slice(m.at);
        let super_opts = if m.ro { "ro" } else { "rw" };
        out.extend_from_slice(
            format!(" {} shared:{} - {} {} {super_opts}\n", opts(m), i + 1, m.fstype, m.source).as_bytes(),
        );
    }
    out
}

/// `/proc/<pid>/limits`, from (soft, hard) per resource 0..16 (u64::MAX: unlimited).
pub fn limits(l: &[(u64, u64)]) -> String {
    const NAMES: [(&str, &str); 16] = [
        ("Max cpu time", "seconds"),
        ("Max file size", "bytes"),
        ("Max data size", "bytes"),
        ("Max stack size", "bytes"),
        ("Max core file size", "bytes"),
        ("Max resident set", "bytes"),
        ("Max processes", "processes"),
        ("Max open files", "files"),
        ("Max locked memory", "bytes"),
        ("Max address space", "bytes"),
        ("Max file locks", "locks"),
        ("Max pending signals", "signals"),
        ("Max msgqueue size", "bytes"),
        ("Max nice priority", ""),
        ("Max realtime priority", ""),
        ("Max realtime timeout", "us"),
    ];
    let v = |x: u64| if x == u64::MAX { String::from("unlimited") } else { format!("{x}") };
    let mut s = format!("{:<25} {:<20} {:<20} {:<10}\n", "Limit", "Soft Limit", "Hard Limit", "Units");
    for (i, (name, unit)) in NAMES.iter().enumerate() {
        let (soft, hard) = l.get(i).copied().unwrap_or((u64::MAX, u64::MAX));
        let _ = write!(s, "{name:<25} {:<20} {:<20} ", v(soft), v(hard));
        if unit.is_empty() {
            s.push('\n');
        } else {
            let _ = writeln!(s, "{unit:<10}");
        }
    }
    s
}

/// `/proc/<pid>/fdinfo/<fd>`.
pub fn fdinfo(pos: u64, flags: u32, ino: u64) -> String {
    format!("pos:\t{pos}\nflags:\t0{flags:o}\nmnt_id:\t20\nino:\t{ino}\n")
}

/// A boot id or uuid from 16 random bytes (version 4).
pub fn uuid(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}\n",
        h[..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..].concat()
    )
}

/// A process as the tree of /proc has it.
#[derive(Clone, Debug, Default)]
pub struct TreeProc {
    pub pid: u64,
    pub tids: Vec<u64>,
    /// Each descriptor and what its link says.
    pub fds: Vec<(u64, Vec<u8>)>,
    pub cwd: Vec<u8>,
    pub exe: Vec<u8>,
}

const PID_FILES: &[&str] = &[
    "cgroup",
    "cmdline",
    "comm",
    "environ",
    "limits",
    "maps",
    "mountinfo",
    "mounts",
    "oom_score_adj",
    "stat",
    "statm",
    "status",
];
const TASK_FILES: &[&str] = &["comm", "stat", "statm", "status"];
const TOP_FILES: &[&str] = &["cpuinfo", "filesystems", "loadavg", "meminfo", "mounts", "stat", "uptime", "version"];

fn files(names: &[&str], mode: u32) -> Entries {
    names.iter().map(|n| (n.as_bytes().to_vec(), Spec::File(mode))).collect()
}

fn name(n: impl core::fmt::Display) -> Vec<u8> {
    format!("{n}").into_bytes()
}

fn dir(entries: &[(&str, Spec)]) -> Spec {
    Spec::Dir(entries.iter().map(|(n, s)| (n.as_bytes().to_vec(), s.clone())).collect())
}

/// The tree of /proc: a directory per process (and `self`, `thread-self` for the
/// caller `me` = (pid, tid)), the system-wide files and /proc/sys.
pub fn proc_tree(procs: &[TreeProc], me: (u64, u64)) -> Entries {
    let mut e = files(TOP_FILES, 0o444);
    e.insert(b"self".to_vec(), Spec::Link(name(me.0)));
    e.insert(b"thread-self".to_vec(), Spec::Link(name(format!("{}/task/{}", me.0, me.1))));
    let sys = |names: &[&str]| Spec::Dir(files(names, 0o644));
    let mut random = files(&["boot_id", "uuid"], 0o444);
    random.insert(b"entropy_avail".to_vec(), Spec::File(0o444));
    let mut kernel = files(
        &["ostype", "osrelease", "version", "hostname", "domainname", "pid_max", "threads-max", "ngroups_max"],
        0o644,
    );
    kernel.insert(b"random".to_vec(), Spec::Dir(random));
    let net = dir(&[("core", sys(&["somaxconn"]))]);
    let vm = sys(&["overcommit_memory", "max_map_count"]);
    let fs = sys(&["file-max", "nr_open"]);
    e.insert(b"sys".to_vec(), dir(&[("kernel", Spec::Dir(kernel)), ("vm", vm), ("net", net), ("fs", fs)]));
    for p in procs {
        let mut d = files(PID_FILES, 0o444);
        let fd: Entries = p.fds.iter().map(|(n, t)| (name(n), Spec::Link(t.clone()))).collect();
        let fdinfo: Entries = p.fds.iter().map(|(n, _)| (name(n), Spec::File(0o444))).collect();
        let task: Entries = p.tids.iter().map(|t| (name(t), Spec::Dir(files(TASK_FILES, 0o444)))).collect();
        d.insert(b"fd".to_vec(), Spec::Dir(fd));
        d.insert(b"fdinfo".to_vec(), Spec::Dir(fdinfo));
        d.insert(b"task".to_vec(), Spec::Dir(task));
        d.insert(b"cwd".to_vec(), Spec::Link(p.cwd.clone()));
        d.insert(b"exe".to_vec(), Spec::Link(p.exe.clone()));
        d.insert(b"root".to_vec(), Spec::Link(b"/".to_vec()));
        e.insert(name(p.pid), Spec::Dir(d));
    }
    e
}

/// Files of the cgroup (v2) the program is in: its root, /sys/fs/cgroup.
const CGROUP_FILES: &[&str] = &[
    "cgroup.controllers",
    "cgroup.procs",
    "cgroup.subtree_control",
    "cgroup.type",
    "cpu.max",
    "cpu.weight",
    "cpuset.cpus",
    "cpuset.cpus.effective",
    "cpuset.mems",
    "cpuset.mems.effective",
    "memory.current",
    "memory.high",
    "memory.max",
    "memory.swap.max",
    "pids.current",
    "pids.max",
];

/// The tree of /sys for `ncpus` CPUs.
pub fn sys_tree(ncpus: usize) -> Entries {
    let mut cpu = files(&["online", "possible", "present"], 0o444);
    for i in 0..ncpus {
        cpu.insert(name(format!("cpu{i}")), Spec::Dir(Entries::new()));
    }
    let system = dir(&[("cpu", Spec::Dir(cpu))]);
    let thp = Spec::Dir(files(&["enabled", "hpage_pmd_size"], 0o444));
    let mm = dir(&[("transparent_hugepage", thp)]);
    let mut e = Entries::new();
    e.insert(b"devices".to_vec(), dir(&[("system", system)]));
    e.insert(b"fs".to_vec(), dir(&[("cgroup", Spec::Dir(files(CGROUP_FILES, 0o444)))]));
    e.insert(b"kernel".to_vec(), dir(&[("mm", mm)]));
    e
}

/// What a file of /sys holds (`path` from /sys on), for `ncpus` CPUs and `mem`
/// bytes of memory of which `used` are in use, and the live `pids`.
pub fn sys_file(path: &[u8], ncpus: usize, mem: u64, used: u64, pids: &[u64]) -> Option<String> {
    let path = core::str::from_utf8(path).ok()?;
    let cgroup = path.strip_prefix("fs/cgroup/");
    Some(match (path, cgroup) {
        ("devices/system/cpu/online" | "devices/system/cpu/possible" | "devices/system/cpu/present", _) => {
            format!("{}\n", cpu_list(ncpus))
        }
        ("kernel/mm/transparent_hugepage/enabled", _) => String::from("always [madvise] never\n"),
        ("kernel/mm/transparent_hugepage/hpage_pmd_size", _) => String::from("2097152\n"),
        (_, Some("cgroup.controllers" | "cgroup.subtree_control")) => String::from("cpuset cpu io memory pids\n"),
        (_, Some("cgroup.procs")) => pids.iter().map(|p| format!("{p}\n")).collect(),
        (_, Some("cgroup.type")) => String::from("domain\n"),
        (_, Some("cpu.max")) => format!("{} 100000\n", ncpus as u64 * 100_000),
        (_, Some("cpu.weight")) => String::from("100\n"),
        (_, Some("cpuset.cpus" | "cpuset.cpus.effective")) => format!("{}\n", cpu_list(ncpus)),
        (_, Some("cpuset.mems" | "cpuset.mems.effective")) => String::from("0\n"),
        (_, Some("memory.current")) => format!("{used}\n"),
        (_, Some("memory.max")) => format!("{mem}\n"),
        (_, Some("memory.high" | "pids.max")) => String::from("max\n"),
        (_, Some("memory.swap.max")) => String::from("0\n"),
        (_, Some("pids.current")) => format!("{}\n", pids.len()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ProcInfo {
        ProcInfo {
            pid: 7,
            tid: 7,
            ppid: 1,
            comm: b"my prog)".to_vec(),
            state: b'R',
            threads: 3,
            uid: 1000,
            gid: 100,
            umask: 0o22,
            caps: onering_abi::caps::default_for(1000),
            no_new_privs: false,
            vsize: 10 << 20,
            rss: 4 << 20,
            cpus: 2,
            start: 42,
            ..ProcInfo::default()
        }
    }

    #[test]
    fn stat_has_52_fields_that_parse() {
        let s = stat(&info());
        assert!(s.ends_with('\n'));
        // As ps does: the comm is what is between the first '(' and the last ')'.
        let close = s.rfind(')').unwrap();
        assert_eq!(&s[..3], "7 (");
        assert_eq!(&s[3..close], "my prog)");
        let rest: Vec<&str> = s[close + 2..].split_whitespace().collect();
        assert_eq!(rest.len() + 2, 52);
        assert_eq!(rest[0], "R");
        assert_eq!(rest[1], "1", "ppid");
        assert_eq!(rest[17], "3", "num_threads (field 20)");
        assert_eq!(rest[19], "42", "starttime (field 22)");
        assert_eq!(rest[20], format!("{}", 10 << 20), "vsize");
        assert_eq!(rest[21], "1024", "rss in pages");
        for f in rest[1..].iter() {
            assert!(f.parse::<i64>().is_ok() || f.parse::<u64>().is_ok(), "{f}");
        }
    }

    #[test]
    fn status_has_the_lines_programs_read() {
        let s = status(&info());
        for want in [
            "Name:\tmy prog)\n",
            "State:\tR (running)\n",
            "Tgid:\t7\n",
            "Pid:\t7\n",
            "PPid:\t1\n",
            "Uid:\t1000\t1000\t1000\t1000\n",
            "Gid:\t100\t100\t100\t100\n",
            "Threads:\t3\n",
            "VmRSS:\t    4096 kB\n",
            "VmSize:\t   10240 kB\n",
            "Cpus_allowed:\t3\n",
            "Cpus_allowed_list:\t0-1\n",
        ] {
            assert!(s.contains(want), "{want:?} in {s}");
        }
    }

    #[test]
    fn maps_lines_are_linux_s() {
        let l = [
            MapLine {
                start: 0x400000,
                end: 0x401000,
                prot: 5,
                offset: 0,
                ino: 12,
                name: b"/bin/prog".to_vec(),
                shared: false,
            },
            MapLine { start: 0x7ffd0000, end: 0x7fff0000, prot: 3, name: b"[stack]".to_vec(), ..MapLine::default() },
            MapLine { start: 0x10000, end: 0x20000, prot: 0, ..MapLine::default() },
        ];
        let m = String::from_utf8(maps(&l)).unwrap();
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(lines[0], format!("00400000-00401000 r-xp 00000000 00:1f 12{}/bin/prog", " ".repeat(33)));
        assert_eq!(lines[0].find('/'), Some(73));
        assert!(lines[1].starts_with("7ffd0000-7fff0000 rw-p 00000000 00:00 0 ") && lines[1].ends_with(" [stack]"));
        assert_eq!(lines[2], "00010000-00020000 ---p 00000000 00:00 0");
    }

    #[test]
    fn meminfo_cpuinfo_and_stat() {
        let m = meminfo(512 << 20, 500 << 20);
        assert!(
            m.starts_with("MemTotal:         524288 kB\nMemFree:          512000 kB\nMemAvailable:     512000 kB\n")
        );
        assert!(m.contains("HugePages_Total:       0\n"));
        let c = cpuinfo(2, &CpuId { name: String::from("Test CPU"), ..CpuId::default() });
        assert_eq!(c.matches("processor\t: ").count(), 2);
        assert!(c.contains("processor\t: 1\n") && c.contains("model name\t: Test CPU\n") && c.ends_with("\n\n"));
        assert_eq!(cpu_flags([1 | 1 << 26, 1 << 20, 1 << 5]), "fpu sse2 sse4_2 avx2");
        let s = kstat(2, 1000, 10, 1_700_000_000, 3, 1);
        assert!(s.starts_with("cpu  10 0 0 1990 0 0 0 0 0 0\ncpu0 5 0 0 995 0 0 0 0 0 0\ncpu1 5 "));
        assert!(s.contains("\nbtime 1700000000\nprocesses 3\nprocs_running 1\n"));
        assert_eq!(uptime(12_345_000_000, 20_000_000_000), "12.34 20.00\n");
        assert_eq!(loadavg(1, 2, 9), "0.00 0.00 0.00 1/2 9\n");
        assert_eq!(cpu_list(1), "0");
        assert_eq!(cpu_list(4), "0-3");
    }

    #[test]
    fn mounts_limits_and_ids() {
        let vols = [(b"/data".to_vec(), false)];
        let tmpfs = [(b"/run".to_vec(), true)];
        let list = mount_list(true, &vols, &tmpfs);
        let m = String::from_utf8(mounts(&list)).unwrap();
        assert!(m.starts_with("onering / onering ro,relatime 0 0\n"));
        assert!(m.contains("shm /dev/shm tmpfs rw,relatime 0 0\n"));
        assert!(m.contains("cgroup2 /sys/fs/cgroup cgroup2 ro,nosuid,nodev,noexec,relatime 0 0\n"));
        assert!(m.ends_with("onering /data onering rw,relatime 0 0\ntmpfs /run tmpfs ro,relatime 0 0\n"));
        let mi = String::from_utf8(mountinfo(&list)).unwrap();
        let cg = mi.lines().find(|l| l.contains(" - cgroup2 ")).unwrap();
        // What Go's and Java's parsers look at: the root, the mount point, the type.
        let f: Vec<&str> = cg.split(' ').collect();
        assert_eq!((f[3], f[4]), ("/", "/sys/fs/cgroup"));
        assert_eq!(f[f.iter().position(|x| *x == "-").unwrap() + 1], "cgroup2");
        let l = limits(&[(1, 2), (u64::MAX, u64::MAX)]);
        let lines: Vec<&str> = l.lines().collect();
        assert_eq!(lines.len(), 17);
        assert_eq!(lines[0], "Limit                     Soft Limit           Hard Limit           Units     ");
        assert_eq!(lines[1], "Max cpu time              1                    2                    seconds   ");
        assert_eq!(lines[2], "Max file size             unlimited            unlimited            bytes     ");
        assert_eq!(lines[14], "Max nice priority         unlimited            unlimited            ");
        assert_eq!(fdinfo(5, 0o2, 9), "pos:\t5\nflags:\t02\nmnt_id:\t20\nino:\t9\n");
        let u = uuid([0xff; 16]);
        assert_eq!(u, "ffffffff-ffff-4fff-bfff-ffffffffffff\n");
    }

    #[test]
    fn trees_and_sys_files() {
        let p = TreeProc {
            pid: 3,
            tids: alloc::vec![3, 4],
            fds: alloc::vec![(0, b"/dev/null".to_vec()), (5, b"pipe:[9]".to_vec())],
            cwd: b"/tmp".to_vec(),
            exe: b"/bin/x".to_vec(),
        };
        let t = proc_tree(&[p], (3, 4));
        assert_eq!(t.get(&b"self"[..]), Some(&Spec::Link(b"3".to_vec())));
        assert_eq!(t.get(&b"thread-self"[..]), Some(&Spec::Link(b"3/task/4".to_vec())));
        let Some(Spec::Dir(d)) = t.get(&b"3"[..]) else { panic!() };
        let Some(Spec::Dir(fd)) = d.get(&b"fd"[..]) else { panic!() };
        assert_eq!(fd.get(&b"5"[..]), Some(&Spec::Link(b"pipe:[9]".to_vec())));
        let Some(Spec::Dir(task)) = d.get(&b"task"[..]) else { panic!() };
        assert_eq!(task.len(), 2);
        let s = sys_tree(2);
        assert!(matches!(s.get(&b"fs"[..]), Some(Spec::Dir(_))));
        let f = |p: &str| sys_file(p.as_bytes(), 2, 512 << 20, 1 << 20, &[1]);
        assert_eq!(f("fs/cgroup/cpu.max").as_deref(), Some("200000 100000\n"));
        assert_eq!(f("fs/cgroup/memory.max").as_deref(), Some("536870912\n"));
        assert_eq!(f("fs/cgroup/cpuset.cpus.effective").as_deref(), Some("0-1\n"));
        assert_eq!(f("devices/system/cpu/online").as_deref(), Some("0-1\n"));
        assert_eq!(f("fs/cgroup/nothing"), None);
    }
}
