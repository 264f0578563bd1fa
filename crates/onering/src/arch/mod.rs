//! x86-64 machine state the VMM builds before the first instruction: page tables
//! (`paging`), GDT, IDT and TSSs (`tables`), each vCPU's registers, MSRs and local
//! APIC (`regs`) and CPUID (`cpuid`). docs/platform.md explains why the VMM does all of
//! it: the guest cannot write control registers or MSRs here, and ring-0 code before
//! the first ring-3 entry runs emulated, 1-2 µs per instruction.
//!
//! Pure functions over guest memory (vm-memory) and plain register structs, so they
//! are unit-tested without /dev/kvm. The layer below everything that runs a vCPU:
//! it knows x86, not KVM's file descriptors.

pub mod cpuid;
pub mod paging;
pub mod regs;
pub mod tables;

use thiserror::Error;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

pub use paging::{translate, PageTables};

/// Why building machine state in guest memory failed.
#[derive(Debug, Error)]
pub enum ArchError {
    #[error("boot page tables do not fit in the boot area")]
    PageTablesFull,
    #[error("guest memory access at {0:#x} failed")]
    Memory(u64),
}

type Result<T> = std::result::Result<T, ArchError>;

fn write_u64(mem: &GuestMemoryMmap, pa: u64, v: u64) -> Result<()> {
    mem.write_obj(v, GuestAddress(pa)).map_err(|_| ArchError::Memory(pa))
}

fn read_u64(mem: &GuestMemoryMmap, pa: u64) -> Result<u64> {
    mem.read_obj(GuestAddress(pa)).map_err(|_| ArchError::Memory(pa))
}
