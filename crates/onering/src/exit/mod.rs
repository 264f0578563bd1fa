//! What the VMM does when a vCPU exits: a plain function from an exit (our own
//! owned copy of KVM's) and an environment (guest memory, output, registers) to an
//! action. Hostcalls arrive here as MMIO writes to the doorbell and are served by
//! `hostcall`. Nothing the guest sends is trusted: every address and length is
//! checked against guest memory, and anything unexpected ends the VM with a message
//! instead of a VMM panic or a hang.

pub mod hostcall;

use onering_abi::layout;
use vm_memory::GuestMemoryMmap;

pub use hostcall::{HALTS, KICKS};

/// A vCPU exit, detached from KVM's borrowed run structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmExit {
    MmioWrite { addr: u64, data: u64 },
    MmioRead { addr: u64 },
    IoOut { port: u16 },
    IoIn { port: u16 },
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
                v[..n].copy_from_slice(&data[..n]);
                VmExit::MmioWrite { addr, data: u64::from_le_bytes(v) }
            }
            E::MmioRead(addr, data) => {
                data.fill(0);
                VmExit::MmioRead { addr }
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
}

#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Resume,
    Stop(Outcome),
}

/// What the exit handler may use.
pub trait Env {
    fn mem(&self) -> &GuestMemoryMmap;
    /// The exiting vCPU's number.
    fn cpu(&self) -> u64;
    /// The exiting vCPU's CR2.
    fn cr2(&mut self) -> u64;
    /// Writes all of `data` to the host's fd 1 or 2.
    fn output(&mut self, fd: u32, data: &[u8]) -> std::io::Result<()>;
    /// Reads the host's stdin into `buf` (`-i`).
    fn input(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
    /// Halts the exiting vCPU for at most `d`, or until it is kicked (at once if it
    /// was kicked since its last halt).
    fn halt(&mut self, d: std::time::Duration);
    /// The number of vCPUs.
    fn ncpus(&self) -> u64;
    /// Kicks vCPU `cpu` (< `ncpus`) out of its halt, starting it if it never ran.
    fn kick(&mut self, cpu: u64) -> Result<(), String>;
}

pub fn handle(exit: VmExit, env: &mut impl Env) -> Action {
    match exit {
        VmExit::MmioWrite { addr, data } if addr == layout::HOSTCALL_DOORBELL_PHYS => hostcall::serve(data, env),
        VmExit::MmioWrite { addr, .. } => {
            Action::Stop(Outcome::GuestError(format!("unexpected MMIO write at {addr:#x}")))
        }
        VmExit::MmioRead { addr } => Action::Stop(Outcome::GuestError(format!("unexpected MMIO read at {addr:#x}"))),
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
    use vm_memory::GuestAddress;

    struct TestEnv {
        mem: GuestMemoryMmap,
    }

    impl Env for TestEnv {
        fn mem(&self) -> &GuestMemoryMmap {
            &self.mem
        }
        fn cpu(&self) -> u64 {
            0
        }
        fn cr2(&mut self) -> u64 {
            0
        }
        fn output(&mut self, _: u32, _: &[u8]) -> std::io::Result<()> {
            Ok(())
        }
        fn input(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Ok(0)
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
        TestEnv { mem: GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap() }
    }

    #[test]
    fn unexpected_exits_stop_the_vm() {
        let mut e = env();
        let stops = [
            VmExit::MmioWrite { addr: 0x1234, data: 0 },
            VmExit::MmioWrite { addr: layout::HOSTCALL_DOORBELL_PHYS, data: 999 },
            VmExit::MmioRead { addr: layout::HOSTCALL_DOORBELL_PHYS },
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
}
