//! The hostcall doorbell: how the guest asks the VMM for a service (see
//! `onering_abi::hostcall`). The arguments go to this vCPU's block in its per-CPU
//! header, the number to the doorbell page; that MMIO store exits to the VMM, which
//! leaves the result in the block before it resumes the vCPU.
//!
//! On the host (unit tests) a hostcall returns 0, or what a handler installed with
//! `set_host_handler` says.

use onering_abi::Hostcall;

#[cfg(target_os = "none")]
pub fn hostcall(nr: Hostcall, args: &[u64]) -> u64 {
    use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
    use onering_abi::layout::{self, direct};
    let pc = crate::cpu::page().cast::<onering_abi::PerCpuHeader>();
    // SAFETY: the block lies in this CPU's header (the GS base, mapped for the
    // kernel's life; only this vCPU uses its block, and never from an interrupt);
    // the doorbell is the MMIO page the VMM mapped uncached in the direct map and
    // nothing is behind it. Volatile accesses keep the order the VMM sees: the
    // arguments before the doorbell, the result after it.
    unsafe {
        let blk = addr_of_mut!((*pc).hostcall);
        for (i, a) in args.iter().take(6).enumerate() {
            write_volatile(addr_of_mut!((*blk).args[i]), *a);
        }
        write_volatile(direct(layout::HOSTCALL_DOORBELL_PHYS) as *mut u64, nr as u64);
        read_volatile(addr_of!((*blk).ret))
    }
}

/// A host test's answer to hostcalls.
#[cfg(not(target_os = "none"))]
pub type HostHandler = fn(Hostcall, &[u64]) -> u64;

#[cfg(not(target_os = "none"))]
static HOST_HANDLER: std::sync::Mutex<Option<HostHandler>> = std::sync::Mutex::new(None);

/// Host tests: what hostcalls do (None: return 0).
#[cfg(not(target_os = "none"))]
pub fn set_host_handler(h: Option<HostHandler>) {
    *HOST_HANDLER.lock().unwrap_or_else(|e| e.into_inner()) = h;
}

#[cfg(not(target_os = "none"))]
pub fn hostcall(nr: Hostcall, args: &[u64]) -> u64 {
    let h = *HOST_HANDLER.lock().unwrap_or_else(|e| e.into_inner());
    h.map_or(0, |h| h(nr, args))
}
