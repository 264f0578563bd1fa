//! The kernel's state, one instance per VM, and the ways out of it (exit, kill,
//! panic). Guest only: it talks to the VMM through `arch::hostcall`.

use crate::arch::{self, GuestMmu};
use crate::console::{Console, Sink};
use crate::errno::Errno;
use crate::fs::file::{oflag, FdTable, Kind, OpenFile};
use crate::fs::vfs::{Hold, Ino, Vfs, ROOT};
use crate::mm::space::AddressSpace;
use crate::rng::Rng;
use crate::time::Clock;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;
use onering_abi::{flags, Hostcall};
use spin::{Mutex, MutexGuard, Once};

pub struct Kernel {
    pub space: AddressSpace,
    pub mmu: GuestMmu,
    pub console: Console,
    pub vfs: Vfs,
    pub fds: FdTable,
    pub cwd: Ino,
    /// Keeps the working directory's node alive even if it is removed.
    pub cwd_hold: Hold,
    pub umask: u32,
    pub rng: Rng,
    pub clock: Clock,
    pub flags: u64,
    /// Host terminal size (rows << 16 | cols), 0 when stdout is not a terminal.
    pub winsize: u64,
    pub uid: u64,
    pub gid: u64,
    /// The program's path as given (for /proc/self/exe).
    pub exe: Vec<u8>,
    pub clear_child_tid: u64,
    /// The thread name (`prctl(PR_SET_NAME)`), NUL padded.
    pub comm: [u8; 16],
    pub signals: Signals,
    /// Resource limits set by the program (`prlimit64`), by resource number.
    pub rlimits: BTreeMap<u32, (u64, u64)>,
    /// Unsupported system calls already reported.
    warned: BTreeSet<u64>,
}

static KERNEL: Once<Mutex<Kernel>> = Once::new();

/// Installs the kernel state (once, at boot).
pub fn init(k: Kernel) {
    KERNEL.call_once(|| Mutex::new(k));
}

impl Kernel {
    /// The state at boot: standard streams on descriptors 0, 1 and 2.
    pub fn new(space: AddressSpace, vfs: Vfs, cwd: Ino, bi: &onering_abi::BootInfo, exe: Vec<u8>) -> Kernel {
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
        Kernel {
            space,
            mmu: GuestMmu::default(),
            console: Console::new(),
            vfs,
            fds,
            cwd_hold,
            cwd,
            umask: 0o022,
            rng: Rng::new(bi.seed),
            clock: Clock { tsc_hz: bi.tsc_hz, boot_tsc: bi.boot_tsc, boot_realtime_ns: bi.boot_realtime_ns },
            flags: bi.flags,
            winsize: bi.winsize,
            uid: bi.uid,
            gid: bi.gid,
            exe,
            clear_child_tid: 0,
            comm,
            signals: Signals::default(),
            rlimits: BTreeMap::new(),
            warned: BTreeSet::new(),
        }
    }

    /// Monotonic nanoseconds since boot.
    pub fn now_mono(&self) -> u64 {
        self.clock.mono_ns(arch::rdtsc())
    }

    /// Nanoseconds since the epoch.
    pub fn now_real(&self) -> u64 {
        self.clock.realtime_ns(arch::rdtsc())
    }
}

/// Signal dispositions and mask, recorded for the program (delivery comes later).
#[derive(Debug, Clone)]
pub struct Signals {
    /// `struct k_sigaction` of each signal 1..=64: handler, flags, restorer, mask.
    pub actions: [[u64; 4]; 64],
    pub mask: u64,
    /// `stack_t`: sp, flags, size.
    pub altstack: (u64, u32, u64),
}

impl Default for Signals {
    fn default() -> Self {
        Signals { actions: [[0; 4]; 64], mask: 0, altstack: (0, 2, 0) }
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

/// SIGPIPE after a write got EPIPE: ends the program unless SIGPIPE is blocked or
/// has a disposition other than the default.
pub fn sigpipe(rip: u64) {
    const SIGPIPE: usize = 13;
    let mut k = kernel();
    let blocked = k.signals.mask & (1 << (SIGPIPE - 1)) != 0;
    if !blocked && k.signals.actions[SIGPIPE - 1][0] == 0 {
        k.killed(SIGPIPE as u64, rip, 0);
    }
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

/// The VMM never resumes a vCPU after Exit, Killed or Panic; if it somehow did,
/// spinning is the only safe thing left.
pub fn unreachable_after_hostcall() -> ! {
    loop {
        core::hint::spin_loop();
    }
}
