//! `perf_event_open` for `--perf`: a hardware counter of the calling thread that
//! counts only while it runs a guest (`exclude_host`), i.e. inside KVM_RUN. The
//! raw system call through `libc` (no crate here wraps it); the attribute is the
//! first 64 bytes of `struct perf_event_attr` (PERF_ATTR_SIZE_VER0), which every
//! kernel accepts.

use std::os::fd::{FromRawFd, OwnedFd};

/// PERF_COUNT_HW_CPU_CYCLES and PERF_COUNT_HW_INSTRUCTIONS (type PERF_TYPE_HARDWARE).
pub const CYCLES: u64 = 0;
pub const INSTRUCTIONS: u64 = 1;

#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}
const _: () = assert!(std::mem::size_of::<Attr>() == 64);

/// exclude_hv (bit 6) and exclude_host (bit 19): guest mode only.
const EXCLUDE_HV: u64 = 1 << 6;
const EXCLUDE_HOST: u64 = 1 << 19;

/// Opens hardware counter `config` for the calling thread, counting guest mode only.
pub fn guest_counter(config: u64) -> std::io::Result<OwnedFd> {
    let attr = Attr { kind: 0, size: 64, config, flags: EXCLUDE_HV | EXCLUDE_HOST, ..Attr::default() };
    // pid 0 / cpu -1: this thread on any CPU; no group, no flags.
    // SAFETY: perf_event_open reads `size` (64) bytes of `attr`, which lives across the call.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const Attr, 0, -1, -1, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the call returned a new descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    Ok(owned)
}
