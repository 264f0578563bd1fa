//! The kernel's state, one instance per VM, and the ways out of it (exit, kill,
//! panic). Guest only: it talks to the VMM through `arch::hostcall`.

use crate::arch::{self, GuestMmu};
use crate::console::{Console, Sink};
use crate::errno::Errno;
use crate::mm::space::AddressSpace;
use alloc::collections::BTreeSet;
use alloc::format;
use onering_abi::{flags, Hostcall};
use spin::{Mutex, MutexGuard, Once};

pub struct Kernel {
    pub space: AddressSpace,
    pub mmu: GuestMmu,
    pub console: Console,
    pub flags: u64,
    /// Host terminal size (rows << 16 | cols), 0 when stdout is not a terminal.
    pub winsize: u64,
    pub clear_child_tid: u64,
    /// Unsupported system calls already reported.
    warned: BTreeSet<u64>,
}

static KERNEL: Once<Mutex<Kernel>> = Once::new();

/// Installs the kernel state (once, at boot).
pub fn init(space: AddressSpace, flags: u64, winsize: u64) {
    KERNEL.call_once(|| {
        Mutex::new(Kernel {
            space,
            mmu: GuestMmu::default(),
            console: Console::new(),
            flags,
            winsize,
            clear_child_tid: 0,
            warned: BTreeSet::new(),
        })
    });
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
            Err(if r == -(Errno::EPIPE as i64) {
                Errno::EPIPE
            } else {
                Errno::EIO
            })
        } else {
            Ok(r as u64)
        }
    }
}

impl Kernel {
    /// Writes a message of onering's own to stderr, in order with the program's output.
    pub fn message(&mut self, text: &str) {
        let _ = self
            .console
            .write(2, text.as_bytes(), text.as_ptr() as u64, &mut HostSink);
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
