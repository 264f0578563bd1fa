//! The VM and vCPU state KVM holds: the /dev/kvm, VM and vCPU file descriptors,
//! guest memory and its registration (`vm`), vCPU creation with its initial
//! registers (`vcpu`), and the running machine: one host thread per vCPU, halting and
//! kicking, and ending the process when the VM ends (`machine`), the host's
//! stdin as a device (`stdin`), the standard streams' host side (`stdio`), the
//! processes `onering exec` starts in the running VM (`exec`), the profiler's sampling of vCPU registers (`sampler`), the gdb stub (`gdb`), and the
//! thread that serves host-file calls without exits (`poller`). The only layer that
//! makes KVM ioctls; the register values come from `arch`, what to do on an exit
//! from `exit`.

pub mod exec;
pub mod gdb;
pub mod machine;
pub mod poller;
pub mod sampler;
pub mod stdin;
pub mod stdio;
pub mod vcpu;
pub mod vm;

use thiserror::Error;

pub use machine::{Finish, Machine};

/// Why creating or running the VM failed (exit status 125).
#[derive(Debug, Error)]
pub enum VmError {
    #[error("/dev/kvm does not exist: this machine does not offer KVM (load the kvm_intel or kvm_amd module, or enable nested virtualization)")]
    NoKvm,
    #[error("this host's KVM is too old or limited: {0} (onering needs Linux 5.4 or later)")]
    OldKvm(String),
    #[error("the KVM device does not answer as KVM (is ONERING_KVM_DEVICE or /dev/kvm something else?)")]
    NotKvm,
    #[error("permission denied opening /dev/kvm (run as root or join the kvm group)")]
    KvmPermission,
    #[error("cannot open /dev/kvm: {0}")]
    KvmOpen(std::io::Error),
    #[error("cannot allocate {0} MiB of guest memory: {1}")]
    Memory(u64, String),
    #[error("KVM {0} failed: {1}")]
    Ioctl(&'static str, kvm_ioctls::Error),
}

pub type Result<T> = std::result::Result<T, VmError>;

/// Names a failed ioctl.
pub(crate) fn ioctl<T>(what: &'static str, r: std::result::Result<T, kvm_ioctls::Error>) -> Result<T> {
    r.map_err(|e| VmError::Ioctl(what, e))
}
