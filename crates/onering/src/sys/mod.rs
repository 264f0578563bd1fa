//! The VMM's only unsafe code: the few host calls that Rust's standard library and
//! the rust-vmm crates do not wrap safely. Each says why it is sound. (The process
//! entry, `entry.rs`, is the binary's: see main.rs.)
#![allow(unsafe_code)]

pub mod fs;
pub mod net;
pub mod oci;
pub mod perf;
pub mod signals;
pub mod stdio;

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;

/// Asks the host to back `len` bytes at `host` (inside guest memory this process
/// mapped) with transparent huge pages.
/// Merges the small host pages of `[host, host + len)` (a 2 MiB aligned range
/// inside guest RAM) into huge pages now (`MADV_COLLAPSE`, after `MADV_HUGEPAGE`).
pub fn collapse_hugepages(host: *mut u8, len: usize) -> std::io::Result<()> {
    const MADV_COLLAPSE: libc::c_int = 25;
    advise_hugepages(host, len);
    // SAFETY: madvise on guest RAM this process mapped (the caller checked the range); MADV_COLLAPSE never changes what the pages hold.
    let r = unsafe { libc::madvise(host as *mut libc::c_void, len, MADV_COLLAPSE) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub fn advise_hugepages(host: *mut u8, len: usize) {
    let page = 4096;
    let start = (host as usize).next_multiple_of(page);
    let end = (host as usize + len) & !(page - 1);
    if end <= start {
        return;
    }
    // SAFETY: madvise on page-aligned bounds inside a mapping this process owns;
    // MADV_HUGEPAGE changes only how the host backs it, never its contents.
    // Failure is harmless.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

/// Whether the host gives transparent huge pages to memory that asks for them
/// (`always` or `madvise` in /sys/kernel/mm/transparent_hugepage/enabled).
pub fn huge_pages_offered() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"))
}

/// Maps `len` bytes of `file` from `offset` at `host` (both page-aligned; `host`
/// inside guest memory this process mapped) in place of the anonymous memory there,
/// private and copy-on-write: pages the guest only reads stay the host's page
/// cache, shared by every VM that maps them; a page written becomes the VM's own.
/// False if the host refused; the range is then anonymous memory again (zeroes).
pub fn map_file_private(host: *mut u8, len: usize, file: &std::fs::File, offset: u64) -> bool {
    use std::os::fd::AsRawFd;
    let fixed = libc::MAP_PRIVATE | libc::MAP_FIXED;
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    // MAP_FIXED replaces only pages of guest memory, which this process mapped and
    // which no Rust reference points into (vm-memory reaches it through raw, volatile
    // accesses; the guest sees the new pages through KVM's notifiers); the range
    // stays mapped, by the file or, if that failed, by fresh anonymous memory, so no
    // later access finds a hole.
    // SAFETY: see above: guest-memory pages only, and the range stays mapped.
    unsafe {
        let p = libc::mmap(host.cast(), len, rw, fixed, file.as_raw_fd(), offset as libc::off_t);
        if p == host.cast() {
            return true;
        }
        libc::mmap(host.cast(), len, rw, fixed | libc::MAP_ANONYMOUS, -1, 0);
    }
    false
}

/// The u64 at guest-physical `addr` as an atomic, for a word the guest and a VMM
/// thread hand back and forth while the guest runs (`vstate::poller`); None if it
/// is not guest memory or not 8-byte aligned (in the guest or in the VMM).
pub fn guest_atomic(mem: &vm_memory::GuestMemoryMmap, addr: u64) -> Option<&std::sync::atomic::AtomicU64> {
    use vm_memory::{GuestAddress, GuestMemoryBackend};
    // (8-byte aligned in the guest, the word lies within one page, and regions
    // are whole pages: its 8 bytes are contiguous in the VMM's mapping.)
    if !addr.is_multiple_of(8) {
        return None;
    }
    let ptr = mem.get_host_address(GuestAddress(addr)).ok()?;
    if !(ptr as usize).is_multiple_of(8) {
        return None;
    }
    // The word lies in a mapping of `mem` (which owns it, and which the borrow
    // keeps alive), is aligned, and is only ever accessed atomically by the VMM;
    // the guest's concurrent stores are what atomics are for.
    // SAFETY: aligned, mapped for the borrow's life, accessed atomically.
    Some(unsafe { std::sync::atomic::AtomicU64::from_ptr(ptr.cast()) })
}

/// Registers guest memory with KVM.
pub fn register_memory(vm: &VmFd, r: kvm_userspace_memory_region) -> Result<(), kvm_ioctls::Error> {
    // SAFETY: `r` describes a region of a GuestMemoryMmap that the caller keeps
    // alive (and mapped) for as long as the VM exists: main holds both until the
    // process exits. Slots come from distinct, non-overlapping regions.
    unsafe { vm.set_user_memory_region(r) }
}

/// Asks the host to wake the calling thread's timed sleeps on time: the default
/// 50 µs timer slack would make every halt of a vCPU that long late.
pub fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only this thread's
    // timer slack; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// Whether this process runs under a real-time policy (SCHED_FIFO or SCHED_RR,
/// as `chrt -f`/`-r` starts it); its threads inherit it.
pub fn realtime_policy() -> bool {
    // SAFETY: sched_getscheduler(0) reads the calling thread's policy; no memory.
    let p = unsafe { libc::sched_getscheduler(0) };
    p == libc::SCHED_FIFO || p == libc::SCHED_RR
}

/// The host user and group ids.
pub fn ids() -> (u64, u64) {
    // SAFETY: getuid and getgid cannot fail and touch no memory.
    unsafe { (u64::from(libc::getuid()), u64::from(libc::getgid())) }
}

/// Ends the process with `code` at once, leaving the VM's teardown behind.
///
/// Destroying a KVM VM and unmapping its memory costs ~0.6 ms here, and a process's
/// exit waits for it when the process holds the last reference. So a helper task is
/// cloned that shares the file table and address space: the process exits (its
/// parent sees the status immediately) and the helper, killed by the parent-death
/// signal, releases the VM afterwards. The helper closes stdin/stdout/stderr first,
/// so a reader waiting for end-of-file is not kept waiting. All output must have been
/// flushed before this is called.
pub fn exit_leaving_teardown(code: u8) -> ! {
    extern "C" fn helper(parent: *mut libc::c_void) -> libc::c_int {
        // The helper makes raw system calls only, on its own stack, and touches nothing
        // of the exiting process's Rust runtime.
        // SAFETY: system calls with plain integer arguments.
        unsafe {
            libc::syscall(libc::SYS_prctl, libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            for fd in 0..3 {
                libc::syscall(libc::SYS_close, fd);
            }
            // If the parent is already gone, exit now; otherwise wait for SIGKILL.
            while libc::syscall(libc::SYS_getppid) == parent as libc::c_long {
                libc::syscall(libc::SYS_pause);
            }
            libc::syscall(libc::SYS_exit, 0);
        }
        0
    }
    const STACK: usize = 16 * 1024;
    // The stack is a fresh private mapping used only by the helper; clone with
    // CLONE_VM|CLONE_FILES runs `helper` on it, which makes raw system calls only;
    // `_exit` ends the process without running destructors (output was flushed).
    // SAFETY: see the three lines above.
    unsafe {
        let stack = libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if stack != libc::MAP_FAILED {
            let parent = libc::getpid() as usize as *mut libc::c_void;
            libc::clone(helper, stack.cast::<u8>().add(STACK).cast(), libc::CLONE_VM | libc::CLONE_FILES, parent);
        }
        libc::_exit(i32::from(code))
    }
}

/// Whether the host CPU has hardware virtualization (VMX or SVM), so that KVM runs the
/// guest's ring 0 in hardware and privileged instructions work there. Without it KVM
/// here is PVM, where they raise #GP (see docs/design.md).
pub fn hardware_virtualization() -> bool {
    let vmx = std::arch::x86_64::__cpuid(1).ecx & (1 << 5) != 0;
    let svm = std::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 2) != 0;
    vmx || svm
}
