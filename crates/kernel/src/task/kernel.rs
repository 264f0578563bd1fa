//! The kernel's state, one instance per VM, split by subsystem, each behind its own
//! lock: memory (`chunks`, the allocator all address spaces draw from; the spaces
//! themselves are the processes', `mm::spaces`), the file tree (`vfs`), the console, the random generator,
//! the futex table, and the settings fixed at boot (`cfg`). Processes and threads
//! have their own tables (`process`, `sched`). System calls reach it through their
//! context (`task::Ctx`), which host tests build around a kernel of their own;
//! code entered without one (exceptions, interrupts) uses [`kernel`].
//!
//! Lock order (a lock may be taken while holding the ones before it, never after):
//!
//! 1. the process table, then a process's own locks (fds, fs, actions, rlimits,
//!    family, job: its stop state, held while the scheduler's is taken);
//! 2. `vfs`;
//! 3. a file object's lock (a pipe, an eventfd, an epoll);
//! 4. the console;
//! 5. the futex table, or the file-lock table (`task::filelock`: an open file
//!    description that owned locks takes it in its drop);
//! 6. an address space's `mm` (taken to check a user range; released before the
//!    copy, since a copy that faults takes it again to back the page); fork holds
//!    the parent's while it builds the child's, which no one else can reach yet;
//! 7. `chunks` (the chunk allocator), then arch's table-page pool and mapping
//!    counts;
//! 8. the scheduler (wait queues, run queues, timers).
//!
//! No lock is held across a hostcall that can block: the console sends its bytes
//! after releasing its lock; stdin is read by the VMM's own thread (`task::stdin`).

use super::console::Console;
use super::stdin::Stdin;
use crate::futex::FutexTable;
use crate::mm::space::Chunks;
use crate::mm::user::GuestUser;
use crate::rng::Rng;
use crate::vfs::Vfs;
use alloc::collections::BTreeSet;
use alloc::format;
use alloc::vec::Vec;
use onering_abi::flags;
use onering_arch::sync::Mutex;
use spin::Once;

/// What boot fixed and nothing changes.
#[derive(Debug, Default)]
pub struct Config {
    /// `onering_abi::flags`.
    pub flags: u64,
    /// What the standard streams are on the host (`onering_abi::stdio`, a kind per
    /// descriptor).
    pub stdio: u64,
    pub uid: u64,
    pub gid: u64,
    /// The program's path made absolute (for /proc/self/exe).
    pub exe: Vec<u8>,
    /// Its arguments and environment as it started, each string NUL-ended (for
    /// /proc/PID/cmdline and environ).
    pub cmdline: Vec<u8>,
    pub environ: Vec<u8>,
    /// The VM's memory in bytes (`--mem`).
    pub mem: u64,
    /// Where the program's segments are (page-aligned, end exclusive), and its
    /// vDSO (0: none): /proc/PID/maps names them.
    pub image: (u64, u64),
    pub vdso: u64,
    /// The volumes (`-v`): where, and whether read-only (for /proc's mounts).
    pub volumes: Vec<(Vec<u8>, bool)>,
    /// The tmpfs mounts (`--tmpfs`): where, and whether read-only.
    pub tmpfs: Vec<(Vec<u8>, bool)>,
    /// The program's capability sets (`onering_abi::caps`; they never change).
    pub caps: [u64; onering_abi::caps::SETS],
    /// `--ulimit NAME=SOFT:HARD` per resource (None: the default), for every
    /// process without a parent in the VM (the program, and those `onering
    /// exec` starts).
    pub rlimits: [Option<(u64, u64)>; onering_abi::rlimit::COUNT],
}

pub struct Kernel {
    pub cfg: Config,
    /// Guest memory in 2 MiB chunks, for every address space, the heap and the
    /// kernel stacks.
    pub chunks: Chunks,
    pub vfs: Mutex<Vfs>,
    pub console: Console,
    pub stdin: Stdin,
    /// The stdins of the processes `onering exec` starts, one per slot.
    pub exec_stdin: [Stdin; onering_abi::exec::MAX_EXECS as usize],
    pub rng: Mutex<Rng>,
    pub futexes: Mutex<FutexTable>,
    /// The thread name (`prctl(PR_SET_NAME)`), NUL padded.
    pub comm: Mutex<[u8; 16]>,
    /// The host name (uname's nodename, /proc/sys/kernel/hostname; set at boot
    /// from `--hostname`, changed by `sethostname`).
    pub hostname: Mutex<Vec<u8>>,
    /// `prctl(PR_SET_KEEPCAPS)`'s flag (capabilities never change here).
    pub keepcaps: core::sync::atomic::AtomicBool,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`'s flag, set for good (`flags::NO_NEW_PRIVS`
    /// sets it at boot); the VM's, not a thread's (nothing here gains privileges
    /// at execve anyway).
    pub no_new_privs: core::sync::atomic::AtomicBool,
    /// Unsupported system calls and messages already reported.
    warned: Mutex<BTreeSet<u64>>,
    /// Memory ran out under a user copy: the SIGKILL that follows says so.
    pub oom: core::sync::atomic::AtomicBool,
    /// AF_UNIX abstract names and the sockets they lead to (`net::unix`).
    pub unix_names: Mutex<alloc::collections::BTreeMap<Vec<u8>, alloc::sync::Weak<dyn core::any::Any + Send + Sync>>>,
}

static KERNEL: Once<Kernel> = Once::new();

/// The kernel (installed at boot).
pub fn kernel() -> &'static Kernel {
    match KERNEL.get() {
        Some(k) => k,
        None => panic!("kernel state used before boot"),
    }
}

/// The kernel, if boot installed it (host tests have none).
pub fn try_kernel() -> Option<&'static Kernel> {
    KERNEL.get()
}

/// Installs the kernel state (once, at boot).
pub fn install(k: Kernel) -> &'static Kernel {
    super::sched::set_poll(service_events);
    KERNEL.call_once(|| k)
}

/// Looks at the devices' completions the VMM posted (the events page) and hands
/// them on, and sends console output that has waited long enough (or any, when
/// the CPU is `idle`: the program waits): the scheduler calls it whenever it looks
/// for work (registered with `sched::set_poll`). Returns when it must look again
/// at the latest: the console's batch deadline (u64::MAX: none).
pub fn service_events(idle: bool) -> u64 {
    let Some(k) = KERNEL.get() else { return u64::MAX };
    if idle {
        k.console.flush_pending();
        if let Some(o) = crate::observe::get() {
            o.flush();
        }
    } else {
        k.console.flush_due();
    }
    super::itimer::fire_due(crate::time::mono_now());
    crate::net::inet::poll_link();
    let pending = onering_arch::events::take_pending();
    use onering_abi::events::{done_bit, ready_bit, EXEC_STDIN, EXEC_STDIN_READY, STDIN, STDIN_READY};
    if pending & (STDIN | STDIN_READY | EXEC_STDIN | EXEC_STDIN_READY) != 0 {
        for (input, stdin) in core::iter::once(&k.stdin).chain(&k.exec_stdin).enumerate() {
            if pending & done_bit(input) != 0 {
                stdin.complete();
            }
            if pending & ready_bit(input) != 0 {
                stdin.host_ready();
            }
        }
    }
    if pending & onering_abi::events::SIGNAL != 0 {
        forward_host_signals();
    }
    if pending & onering_abi::events::EXEC != 0 {
        super::hostexec::service(k);
    }
    k.console.deadline()
}

/// Signals sent to onering on the host go to the program, as `docker run --init`
/// forwards them; those the host's terminal made (Ctrl-C, Ctrl-\, Ctrl-Z, a
/// window change) go to the VM terminal's foreground group, as a terminal sends
/// them, or to the program when no group holds the terminal. Kept until the
/// program exists.
fn forward_host_signals() {
    let bits = onering_arch::events::take_signals();
    let tty = onering_arch::events::take_tty_signals();
    if bits | tty == 0 {
        return;
    }
    if super::sched::threads_of(1).is_empty() {
        onering_arch::events::put_back_signals(bits, tty);
        return;
    }
    use crate::sigframe::{bit, code, Info};
    let each = |set: u64| (1..=64u64).filter(move |s| set & bit(*s) != 0);
    let to_program = |s: u64, code: i32| {
        let _ = super::signal::send_to_process(1, s, Info { signo: s, code, ..Default::default() });
    };
    for s in each(tty).filter(|s| !super::tty::signal_foreground(*s)) {
        to_program(s, code::SI_KERNEL);
    }
    for s in each(bits) {
        to_program(s, code::SI_USER);
    }
}

/// The streams (bit n: fd n) that are terminals on the host: their output flushes
/// at each newline.
fn line_streams(stdio: u64) -> u32 {
    (1..3).filter(|fd| onering_abi::stdio::kind(stdio, *fd) == onering_abi::stdio::TTY).fold(0, |m, fd| m | 1 << fd)
}

/// Most distinct unsupported system calls reported.
const MAX_WARNED: usize = 1024;

impl Kernel {
    pub fn new(cfg: Config, chunks: Chunks, vfs: Vfs, seed: [u64; 2]) -> Kernel {
        let no_new_privs = cfg.flags & onering_abi::flags::NO_NEW_PRIVS != 0;
        let mut comm = [0u8; 16];
        let name = cfg.exe.rsplit(|b| *b == b'/').next().unwrap_or(&[]);
        let n = name.len().min(15);
        comm[..n].copy_from_slice(&name[..n]);
        let stdin = Stdin::new(0, cfg.flags & flags::STDIN != 0);
        let lines = line_streams(cfg.stdio);
        Kernel {
            hostname: Mutex::new(Vec::new()),
            cfg,
            chunks,
            vfs: Mutex::new(vfs),
            stdin,
            exec_stdin: core::array::from_fn(|slot| Stdin::new(1 + slot, true)),
            console: Console::new(lines),
            rng: Mutex::new(Rng::new(seed)),
            futexes: Mutex::new(FutexTable::new()),
            comm: Mutex::new(comm),
            keepcaps: core::sync::atomic::AtomicBool::new(false),
            no_new_privs: core::sync::atomic::AtomicBool::new(no_new_privs),
            warned: Mutex::new(BTreeSet::new()),
            oom: core::sync::atomic::AtomicBool::new(false),
            unix_names: Mutex::new(alloc::collections::BTreeMap::new()),
        }
    }

    /// The memory of the running thread's process (the boot space before the
    /// first thread runs).
    pub fn user(&self) -> GuestUser<'static> {
        crate::mm::spaces::current().user()
    }

    /// A chunk (the page cache gives memory back if none is free): for kernel
    /// stacks.
    pub fn chunk(&self) -> Option<onering_arch::mm::Chunk> {
        let mut chunks = self.chunks.lock();
        chunks.alloc().or_else(|| if chunks.reclaim(1) { chunks.alloc() } else { None })
    }

    /// The program ends: what its shared file mappings hold goes to their files
    /// (Linux's page cache outlives the program, whatever ended it).
    fn write_back_mappings(&self) {
        let pieces = crate::mm::spaces::current().mm.lock().shared_in(0, onering_abi::layout::USER_END);
        let _ = crate::mm::filemap::each(&self.user(), &pieces, crate::mm::filemap::write_back);
    }

    /// Writes a message of onering's own to stderr, in order with the program's output.
    pub fn message(&self, text: &str) {
        self.console.write_kernel(2, text.as_bytes());
        self.console.flush();
    }

    /// Ends the VM with the program's exit status (after its output).
    pub fn exit(&self, status: u64) -> ! {
        self.write_back_mappings();
        self.console.flush();
        crate::observe::finish();
        onering_arch::hostcall::exit(status)
    }

    /// Ends the VM as a fatal signal would.
    pub fn killed(&self, signal: u64, rip: u64, addr: u64) -> ! {
        self.write_back_mappings();
        self.console.flush();
        crate::observe::finish();
        onering_arch::hostcall::killed(signal, rip, addr)
    }

    /// Whether `key` is reported now (not yet reported, not `--quiet` unless
    /// `always`, room left).
    fn first_report_of(&self, key: u64, always: bool) -> bool {
        if self.cfg.flags & flags::QUIET != 0 && !always {
            return false;
        }
        let mut w = self.warned.lock();
        // Numbers past the table are remembered too, up to a bound: a program calling
        // millions of distinct bogus numbers must not exhaust the kernel heap.
        if w.contains(&key) || w.len() >= MAX_WARNED {
            return false;
        }
        w.insert(key);
        true
    }

    fn first_report(&self, key: u64) -> bool {
        self.first_report_of(key, false)
    }

    /// Reports an unsupported system call on stderr, once per number.
    pub fn report_unsupported(&self, nr: u64) {
        if !self.first_report(nr) {
            return;
        }
        let msg = match crate::sysnames::name(nr) {
            Some(name) => format!("onering: unsupported syscall {name} ({nr})\n"),
            None => format!("onering: unsupported syscall {nr}\n"),
        };
        self.message(&msg);
    }

    /// The message for a program killed because memory ran out (once): why it
    /// died, so printed even with `--quiet`.
    pub fn report_oom(&self) {
        let msg = "onering: out of memory: the program touched more memory than the VM has (raise --mem); \
             killed, as Linux's OOM killer would\n";
        if self.first_report_of((1 << 63) | msg.as_ptr() as u64, true) {
            self.message(msg);
        }
    }

    /// Reports one of onering's own limitations on stderr, once.
    pub fn report_once(&self, msg: &'static str) {
        if self.first_report((1 << 63) | msg.as_ptr() as u64) {
            self.message(msg);
        }
    }
}
