//! What the VMM does when a vCPU exits: a plain function from an exit (our own
//! owned copy of KVM's) and an environment (guest memory, the MMIO bus, output,
//! registers) to an action. MMIO exits go through the bus (`crate::devices`); the
//! doorbell device turns a write into a hostcall, served by `hostcall`. Nothing the
//! guest sends is trusted: every address and length is checked against guest memory,
//! and anything unexpected ends the VM with a message instead of a VMM panic or a
//! hang (the fuzz test `tests/fuzz_exit.rs` runs it on garbage).

pub mod hostcall;

use crate::devices::{MmioAction, MmioBus};
use vm_memory::GuestMemoryMmap;

pub use hostcall::{DEFERRED, HALTS, HOSTCALLS, KICKS, WRITES};

/// A vCPU exit, detached from KVM's borrowed run structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmExit {
    /// A write of the `len` low bytes of `data` (little-endian) at `addr`.
    MmioWrite {
        addr: u64,
        data: u64,
        len: usize,
    },
    /// A read of `len` bytes at `addr` (completed with 0 unless a device answers).
    MmioRead {
        addr: u64,
        len: usize,
    },
    IoOut {
        port: u16,
    },
    IoIn {
        port: u16,
    },
    Hlt,
    Shutdown,
    InternalError,
    FailEntry(u64),
    Other(String),
}

impl VmExit {
    pub fn from_kvm(exit: kvm_ioctls::VcpuExit) -> VmExit {
        use kvm_ioctls::VcpuExit as E;
        match exit {
            E::MmioWrite(addr, data) => {
                let mut v = [0u8; 8];
                let n = data.len().min(8);
                v[..n].copy_from_slice(data.get(..n).unwrap_or(&[]));
                VmExit::MmioWrite { addr, data: u64::from_le_bytes(v), len: n }
            }
            E::MmioRead(addr, data) => {
                data.fill(0);
                VmExit::MmioRead { addr, len: data.len().min(8) }
            }
            E::IoOut(port, _) => VmExit::IoOut { port },
            E::IoIn(port, data) => {
                data.fill(0xff);
                VmExit::IoIn { port }
            }
            E::Hlt => VmExit::Hlt,
            E::Shutdown => VmExit::Shutdown,
            E::InternalError => VmExit::InternalError,
            E::FailEntry(reason, _) => VmExit::FailEntry(reason),
            other => VmExit::Other(format!("{other:?}")),
        }
    }

    /// Why the vCPU left the guest, for `--stats`.
    pub fn reason(&self) -> crate::observe::ExitReason {
        use crate::observe::ExitReason as R;
        let doorbell = onering_abi::layout::HOSTCALL_DOORBELL_PHYS;
        match self {
            VmExit::MmioWrite { addr, .. } if (doorbell..doorbell + 4096).contains(addr) => R::Hostcall,
            VmExit::MmioWrite { .. } | VmExit::MmioRead { .. } => R::Mmio,
            VmExit::IoOut { .. } | VmExit::IoIn { .. } => R::Io,
            VmExit::Hlt => R::Hlt,
            VmExit::Shutdown => R::Shutdown,
            VmExit::InternalError | VmExit::FailEntry(_) | VmExit::Other(_) => R::Other,
        }
    }
}

/// How the VM ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The program exited with this status.
    Exited(u8),
    /// The program was killed by a signal.
    Killed { signal: u64, rip: u64, addr: u64 },
    /// The guest kernel panicked.
    KernelPanic(String),
    /// An exception the kernel could not handle.
    Fatal { vector: u64, rip: u64, error: u64 },
    /// The guest did something no correct guest does.
    GuestError(String),
    /// A host signal (its number) stopped the VM: the program had not ended
    /// `vstate::machine::GRACE` after the first one.
    Stopped(u64),
}

/// What the vCPU does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Resume,
    /// Complete the vCPU's MMIO read (of `len` bytes at `addr`) with `value`, then
    /// resume.
    CompleteRead {
        addr: u64,
        len: usize,
        value: u64,
    },
    Stop(Outcome),
}

/// What the exit handler may use.
pub trait Env {
    fn mem(&self) -> &GuestMemoryMmap;
    /// The devices on the MMIO bus.
    fn bus(&self) -> &MmioBus;
    /// The exiting vCPU's number.
    fn cpu(&self) -> u64;
    /// Writes all of `data` to the host's fd 1 or 2, or an exec'd process's stream.
    fn output(&mut self, fd: u32, data: &[u8]) -> std::io::Result<()>;
    /// The `StdinRequest` hostcall: host stream `stream`'s stdin (the program's
    /// or an exec'd process's) into `len` bytes at guest-virtual `virt`, later (0
    /// if taken, or -errno; see `vstate::stdin`).
    fn stdin_request(&mut self, virt: u64, len: u64, stream: u64) -> i64;
    /// Halts the exiting vCPU for at most `d`, or until it is kicked (at once if it
    /// was kicked since its last halt).
    fn halt(&mut self, d: std::time::Duration);
    /// The number of vCPUs.
    fn ncpus(&self) -> u64;
    /// Kicks vCPU `cpu` (< `ncpus`) out of its halt, starting it if it never ran.
    fn kick(&mut self, cpu: u64) -> Result<(), String>;
    /// The host's stat of standard stream `fd`, or -errno (-EBADF: not the
    /// program's to reach; see `vstate::stdio`).
    fn stdio_stat(&mut self, fd: u64) -> Result<onering_abi::HostStat, i64> {
        let _ = fd;
        Err(-9)
    }
    /// `lseek` on the host's standard stream `fd`.
    fn stdio_seek(&mut self, fd: u64, offset: u64, whence: u64) -> i64 {
        let _ = (fd, offset, whence);
        -9
    }
    /// Serves an `Fs` hostcall (`-v`, `--rootfs DIR`: the host file server) with
    /// the operations it carries (`hostcall::fs_call`); -ENOSYS for each when the
    /// VM has no mounts.
    fn host_file(&mut self, args: [u64; 6]) -> i64 {
        hostcall::fs_call(self.mem(), self.cpu(), args, &mut |_, _| -38)
    }
    /// `--gdb`: the program stopped on a breakpoint or a step (`Hostcall::Debug`'s
    /// arguments); returns once gdb resumed it: what the thread does next, or
    /// -errno (-ENODEV: no debugger).
    fn debug_stop(&mut self, args: [u64; 6]) -> i64 {
        let _ = args;
        -19
    }
    /// `ExecTake`: the next `onering exec` message into `len` bytes at `virt`
    /// (its length, 0: none, or -errno; see `vstate::exec`).
    fn exec_take(&mut self, virt: u64, len: u64) -> i64 {
        let _ = (virt, len);
        0
    }
    /// `ExecDone`: a process `onering exec` started ended or failed to start.
    fn exec_done(&mut self, slot: u64, how: u64, value: u64) -> i64 {
        let _ = (slot, how, value);
        -22
    }
    /// A forwarded terminal ioctl on the host's standard stream `fd`, its argument
    /// in `arg` (sized for the request).
    fn stdio_ioctl(&mut self, fd: u64, request: u64, arg: &mut [u8]) -> i64 {
        let _ = (fd, request, arg);
        -9
    }
}

/// Handles one exit of the vCPU `env` describes.
pub fn handle(exit: VmExit, env: &mut impl Env) -> Action {
    match exit {
        VmExit::MmioWrite { addr, data, len } => match env.bus().write(addr, data, len) {
            MmioAction::Hostcall(nr) => hostcall::serve(nr, env),
            // A write has nothing to complete.
            MmioAction::Done | MmioAction::Value(_) => Action::Resume,
            MmioAction::Unhandled => Action::Stop(Outcome::GuestError(format!("unexpected MMIO write at {addr:#x}"))),
            MmioAction::GuestError(m) => Action::Stop(Outcome::GuestError(m)),
        },
        VmExit::MmioRead { addr, len } => match env.bus().read(addr, len) {
            MmioAction::Value(value) => Action::CompleteRead { addr, len, value },
            MmioAction::Done => Action::CompleteRead { addr, len, value: 0 },
            // The doorbell is written, never read.
            MmioAction::Hostcall(_) | MmioAction::Unhandled => {
                Action::Stop(Outcome::GuestError(format!("unexpected MMIO read at {addr:#x}")))
            }
            MmioAction::GuestError(m) => Action::Stop(Outcome::GuestError(m)),
        },
        VmExit::IoOut { port } | VmExit::IoIn { port } => {
            Action::Stop(Outcome::GuestError(format!("unexpected port I/O on port {port:#x}")))
        }
        VmExit::Hlt => Action::Stop(Outcome::GuestError("unexpected halt".into())),
        VmExit::Shutdown => {
            Action::Stop(Outcome::GuestError("triple fault (the guest's exception handling broke down)".into()))
        }
        VmExit::InternalError => Action::Stop(Outcome::GuestError("KVM internal error (emulation failure)".into())),
        VmExit::FailEntry(r) => {
            Action::Stop(Outcome::GuestError(format!("KVM could not enter the guest (reason {r:#x})")))
        }
        VmExit::Other(what) => Action::Stop(Outcome::GuestError(format!("unexpected exit {what}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onering_abi::layout;
    use vm_memory::GuestAddress;

    struct TestEnv {
        mem: GuestMemoryMmap,
        bus: MmioBus,
    }

    impl Env for TestEnv {
        fn mem(&self) -> &GuestMemoryMmap {
            &self.mem
        }
        fn bus(&self) -> &MmioBus {
            &self.bus
        }
        fn cpu(&self) -> u64 {
            0
        }
        fn output(&mut self, _: u32, _: &[u8]) -> std::io::Result<()> {
            Ok(())
        }
        fn stdin_request(&mut self, _: u64, _: u64, _: u64) -> i64 {
            0
        }
        fn halt(&mut self, _: std::time::Duration) {}
        fn ncpus(&self) -> u64 {
            1
        }
        fn kick(&mut self, _: u64) -> Result<(), String> {
            Ok(())
        }
    }

    fn env() -> TestEnv {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
        TestEnv { mem, bus: crate::devices::standard_bus().unwrap() }
    }

    #[test]
    fn unexpected_exits_stop_the_vm() {
        let mut e = env();
        let stops = [
            VmExit::MmioWrite { addr: 0x1234, data: 0, len: 8 },
            VmExit::MmioWrite { addr: layout::HOSTCALL_DOORBELL_PHYS, data: 999, len: 8 },
            VmExit::MmioWrite { addr: layout::HOSTCALL_DOORBELL_PHYS + 4, data: 1, len: 4 },
            VmExit::MmioRead { addr: layout::HOSTCALL_DOORBELL_PHYS, len: 8 },
            VmExit::MmioWrite { addr: layout::LAPIC_PHYS + 0x380, data: 1, len: 4 },
            VmExit::MmioRead { addr: layout::LAPIC_PHYS + 0x390, len: 4 },
            VmExit::IoOut { port: 0x3f8 },
            VmExit::IoIn { port: 0x60 },
            VmExit::Hlt,
            VmExit::Shutdown,
            VmExit::InternalError,
            VmExit::FailEntry(7),
            VmExit::Other("Debug".into()),
        ];
        for x in stops {
            assert!(matches!(handle(x.clone(), &mut e), Action::Stop(Outcome::GuestError(_))), "{x:?}");
        }
    }

    /// The messages of a stopped VM are what they were before the bus.
    #[test]
    fn unclaimed_addresses_keep_their_message() {
        let mut e = env();
        let stop = |m: &str| Action::Stop(Outcome::GuestError(m.into()));
        assert_eq!(
            handle(VmExit::MmioWrite { addr: 0x1234, data: 0, len: 4 }, &mut e),
            stop("unexpected MMIO write at 0x1234")
        );
        assert_eq!(
            handle(VmExit::MmioRead { addr: layout::HOSTCALL_DOORBELL_PHYS, len: 8 }, &mut e),
            stop("unexpected MMIO read at 0xfef00000")
        );
        let Action::Stop(Outcome::GuestError(m)) =
            handle(VmExit::MmioWrite { addr: layout::LAPIC_PHYS + 0xb0, data: 0, len: 4 }, &mut e)
        else {
            panic!("the local APIC page stops the VM");
        };
        assert!(m.starts_with("unexpected MMIO write at 0xfee000b0 (the local APIC page"), "{m}");
    }

    /// A device that answers reads: the exit handler completes the read.
    #[test]
    fn device_reads_complete_the_vcpus_read() {
        struct Answer;
        impl crate::devices::MmioDevice for Answer {
            fn read(&self, offset: u64, _: usize) -> MmioAction {
                MmioAction::Value(0x1234 + offset)
            }
            fn write(&self, _: u64, _: u64, _: usize) -> MmioAction {
                MmioAction::Done
            }
        }
        let mut e = env();
        e.bus.insert(0xd000_0000, 0x1000, std::sync::Arc::new(Answer)).unwrap();
        assert_eq!(
            handle(VmExit::MmioRead { addr: 0xd000_0004, len: 4 }, &mut e),
            Action::CompleteRead { addr: 0xd000_0004, len: 4, value: 0x1238 }
        );
        assert_eq!(handle(VmExit::MmioWrite { addr: 0xd000_0004, data: 1, len: 4 }, &mut e), Action::Resume);
    }
}
