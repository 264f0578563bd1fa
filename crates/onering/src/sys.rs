//! The VMM's only unsafe code: the few host calls that Rust's standard library and
//! the rust-vmm crates do not wrap safely. Each says why it is sound.
#![allow(unsafe_code)]

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;
use vm_memory::{GuestMemoryRegion, GuestRegionMmap};

/// Asks the host to back `region` with transparent huge pages.
pub fn advise_hugepages(region: &GuestRegionMmap) {
    // SAFETY: madvise on a mapping this process owns, with its exact bounds;
    // MADV_HUGEPAGE changes only how the host backs it. Failure is harmless.
    unsafe {
        libc::madvise(
            region.as_ptr().cast(),
            region.len() as usize,
            libc::MADV_HUGEPAGE,
        );
    }
}

/// Registers guest memory with KVM.
pub fn register_memory(vm: &VmFd, r: kvm_userspace_memory_region) -> Result<(), kvm_ioctls::Error> {
    // SAFETY: `r` describes a region of a GuestMemoryMmap that the caller keeps alive
    // (and mapped) for as long as the VM exists: main holds both until the process
    // exits. Slots come from distinct, non-overlapping regions.
    unsafe { vm.set_user_memory_region(r) }
}

/// The terminal size of host fd `fd` as `rows << 16 | cols`, 0 if it is no terminal.
pub fn winsize(fd: i32) -> u64 {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we pass.
    let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    if r == 0 {
        (u64::from(ws.ws_row) << 16) | u64::from(ws.ws_col)
    } else {
        0
    }
}

/// The host user and group ids.
pub fn ids() -> (u64, u64) {
    // SAFETY: getuid and getgid cannot fail and touch no memory.
    unsafe { (u64::from(libc::getuid()), u64::from(libc::getgid())) }
}
