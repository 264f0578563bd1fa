//! The kernel's state, one instance per VM, and the ways out of it (exit, kill,
//! panic). Guest only: it talks to the VMM through `arch::hostcall`.

use crate::arch::{self, UserSpace};
use crate::console::{Console, Sink};
use crate::errno::Errno;
use crate::fs::file::{oflag, FdTable, Kind, OpenFile};
use crate::fs::vfs::{Hold, Ino, Vfs, ROOT};
use crate::rng::Rng;
use crate::sched::Thread;
use crate::time::Clock;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;
use onering_abi::{flags, Hostcall};
use spin::{Mutex, MutexGuard, Once};

pub struct Kernel {
    pub space: UserSpace,
    pub console: Console,
    pub vfs: Vfs,
    /// Processes by slot (`Thread::proc_slot`): the program, and children it made
    /// with vfork (they share its memory).
    pub procs: Vec<Option<Process>>,
    pub rng: Rng,
    pub flags: u64,
    /// Host terminal size (rows << 16 | cols), 0 when stdout is not a terminal.
    pub winsize: u64,
    pub uid: u64,
    pub gid: u64,
    /// The program's path made absolute (for /proc/self/exe).
    pub exe: Vec<u8>,
    /// The thread name (`prctl(PR_SET_NAME)`), NUL padded.
    pub comm: [u8; 16],
    /// Unsupported system calls already reported.
    warned: BTreeSet<u64>,
}

/// What a process owns besides the (shared) memory: descriptors, working
/// directory, signal dispositions, children.
pub struct Process {
    pub pid: u64,
    /// Parent's pid (0 for the program itself, as for a container's pid 1).
    pub ppid: u64,
    pub fds: FdTable,
    pub cwd: Ino,
    /// Keeps the working directory's node alive even if it is removed.
    pub cwd_hold: Hold,
    pub umask: u32,
    /// `struct k_sigaction` of each signal 1..=64: handler, flags, restorer, mask.
    pub actions: [[u64; 4]; 64],
    /// Resource limits set by the program (`prlimit64`), by resource number.
    pub rlimits: BTreeMap<u32, (u64, u64)>,
    /// Live threads.
    pub threads: usize,
    /// Children that ended and were not waited for: (pid, wait status).
    pub zombies: Vec<(u64, u64)>,
    /// Children still running.
    pub children: usize,
    /// The parent thread suspended in vfork until this process exits.
    pub vfork_parent: Option<&'static Thread>,
}

impl Process {
    /// A child's copy of `self` (vfork: descriptors and dispositions copied).
    pub fn child(&self, pid: u64) -> Process {
        Process {
            pid,
            ppid: self.pid,
            fds: self.fds.clone(),
            cwd: self.cwd,
            cwd_hold: self.cwd_hold.clone(),
            umask: self.umask,
            actions: self.actions,
            rlimits: self.rlimits.clone(),
            threads: 1,
            zombies: Vec::new(),
            children: 0,
            vfork_parent: None,
        }
    }
}

/// The running thread's process in `procs`.
pub fn cur_of(procs: &mut [Option<Process>]) -> &mut Process {
    let slot = crate::sched::current().proc_slot.load(core::sync::atomic::Ordering::Relaxed);
    match procs.get_mut(slot).and_then(Option::as_mut) {
        Some(p) => p,
        None => panic!("thread of a finished process"),
    }
}

/// The running thread's process in `procs`, shared.
pub fn cur_ref(procs: &[Option<Process>]) -> &Process {
    let slot = crate::sched::current().proc_slot.load(core::sync::atomic::Ordering::Relaxed);
    match procs.get(slot).and_then(Option::as_ref) {
        Some(p) => p,
        None => panic!("thread of a finished process"),
    }
}

/// The clock, readable without the kernel lock.
static CLOCK: Once<Clock> = Once::new();

/// Monotonic nanoseconds since boot.
pub fn mono_now() -> u64 {
    CLOCK.get().map_or(0, |c| c.mono_ns(arch::rdtsc()))
}

/// Nanoseconds since the epoch.
pub fn real_now() -> u64 {
    CLOCK.get().map_or(0, |c| c.realtime_ns(arch::rdtsc()))
}

static KERNEL: Once<Mutex<Kernel>> = Once::new();

/// Installs the kernel state (once, at boot).
pub fn init(k: Kernel) {
    KERNEL.call_once(|| Mutex::new(k));
}

impl Kernel {
    /// The state at boot: standard streams on descriptors 0, 1 and 2.
    pub fn new(space: UserSpace, vfs: Vfs, cwd: Ino, bi: &onering_abi::BootInfo, exe: Vec<u8>) -> Kernel {
        let clock = Clock { tsc_hz: bi.tsc_hz, boot_tsc: bi.boot_tsc, boot_realtime_ns: bi.boot_realtime_ns };
        CLOCK.call_once(|| clock);
        let mut fds = FdTable::new();
        for (path, flags) in [
            (&b"/dev/stdin"[..], oflag::O_RDONLY),
            (b"/dev/stdout", oflag::O_WRONLY),
            (b"/dev/stderr", oflag::O_WRONLY),
        ] {
            if let Ok(ino) = vfs.lookup(ROOT, path, true) {
                let _ = fds.insert(Arc::new(OpenFile::new(Kind::Node(ino), flags)), false);
            }
        }
        let cwd_hold = vfs.hold(cwd);
        let mut comm = [0u8; 16];
        let name = exe.rsplit(|b| *b == b'/').next().unwrap_or(&[]);
        let n = name.len().min(15);
        comm[..n].copy_from_slice(&name[..n]);
        let init = Process {
            pid: 1,
            ppid: 0,
            fds,
            cwd,
            cwd_hold,
            umask: 0o022,
            actions: [[0; 4]; 64],
            rlimits: BTreeMap::new(),
            threads: 1,
            zombies: Vec::new(),
            children: 0,
            vfork_parent: None,
        };
        Kernel {
            space,
            console: Console::new(),
            vfs,
            procs: alloc::vec![Some(init)],
            rng: Rng::new(bi.seed),
            flags: bi.flags,
            winsize: bi.winsize,
            uid: bi.uid,
            gid: bi.gid,
            exe,
            comm,
            warned: BTreeSet::new(),
        }
    }

    /// The running thread's process.
    pub fn cur(&mut self) -> &mut Process {
        cur_of(&mut self.procs)
    }

    /// The running thread's process, shared.
    pub fn proc(&self) -> &Process {
        cur_ref(&self.procs)
    }

    /// Monotonic nanoseconds since boot.
    pub fn now_mono(&self) -> u64 {
        mono_now()
    }

    /// Nanoseconds since the epoch.
    pub fn now_real(&self) -> u64 {
        real_now()
    }
}

pub fn kernel() -> MutexGuard<'static, Kernel> {
    match KERNEL.get() {
        Some(k) => k.lock(),
        None => panic!("kernel state used before boot"),
    }
}

/// Sends console output to the host.
pub struct HostSink;

impl Sink for HostSink {
    fn write(&mut self, fd: u32, addr: u64, data: &[u8]) -> Result<u64, Errno> {
        let r = arch::hostcall(Hostcall::Write, &[fd as u64, addr, data.len() as u64]) as i64;
        if r < 0 {
            // The VMM returns -errno; anything it sends is a valid Linux errno, but
            // guard against nonsense rather than trust it.
            Err(if r == -(Errno::EPIPE as i64) { Errno::EPIPE } else { Errno::EIO })
        } else {
            Ok(r as u64)
        }
    }
}

impl Kernel {
    /// Writes a message of onering's own to stderr, in order with the program's output.
    pub fn message(&mut self, text: &str) {
        let _ = self.console.write(2, text.as_bytes(), text.as_ptr() as u64, &mut HostSink);
        let _ = self.console.flush(&mut HostSink);
    }

    /// Ends the VM with the program's exit status.
    pub fn exit(&mut self, status: u64) -> ! {
        let _ = self.console.flush(&mut HostSink);
        arch::hostcall(Hostcall::Exit, &[status & 0xff]);
        unreachable_after_hostcall()
    }

    /// Ends the VM as a fatal signal would.
    pub fn killed(&mut self, signal: u64, rip: u64, addr: u64) -> ! {
        let _ = self.console.flush(&mut HostSink);
        arch::hostcall(Hostcall::Killed, &[signal, rip, addr]);
        unreachable_after_hostcall()
    }
}

/// SIGPIPE after a write got EPIPE: raised for the writing thread (by default it
/// ends the program, silently: `prog | head -1`).
pub fn sigpipe() {
    let t = crate::sched::current();
    crate::syscall::signal::send(
        t,
        crate::signal::sig::SIGPIPE,
        crate::signal::Info { signo: 13, ..Default::default() },
    );
}

/// Most distinct unsupported system calls reported.
const MAX_WARNED: usize = 1024;

/// Reports an unsupported system call on stderr, once per number (unless `--quiet`).
pub fn report_unsupported(nr: u64) {
    let mut k = kernel();
    if k.flags & flags::QUIET != 0 {
        return;
    }
    // Numbers past the table are remembered too, up to a bound: a program calling
    // millions of distinct bogus numbers must not exhaust the kernel heap.
    if k.warned.contains(&nr) || k.warned.len() >= MAX_WARNED {
        return;
    }
    k.warned.insert(nr);
    let msg = match crate::syscall::names::name(nr) {
        Some(name) => format!("onering: unsupported syscall {name} ({nr})\n"),
        None => format!("onering: unsupported syscall {nr}\n"),
    };
    k.message(&msg);
}

/// Reports one of onering's own limitations on stderr, once (unless `--quiet`).
pub fn report_message_once(msg: &'static str) {
    let mut k = kernel();
    let key = (1 << 63) | msg.as_ptr() as u64;
    if k.flags & flags::QUIET != 0 || k.warned.contains(&key) {
        return;
    }
    k.warned.insert(key);
    k.message(msg);
}

/// The VMM never resumes a vCPU after Exit, Killed or Panic; if it somehow did,
/// spinning is the only safe thing left.
pub fn unreachable_after_hostcall() -> ! {
    loop {
        core::hint::spin_loop();
    }
}
