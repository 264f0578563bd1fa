//! The host calls behind the network back ends (`devices::netback`): attaching to a
//! TAP device (`TUNSETIFF` on an open `/dev/net/tun`) and starting the user-mode
//! back end's process (`passt`) so that it cannot outlive onering (the parent-death
//! signal) and inherits exactly one socket. Each takes plain values and owned
//! descriptors; nothing here keeps state.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `TUNSETIFF`: `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `TUNSETOFFLOAD`: `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `TUNSETVNETHDRSZ`: `_IOW('T', 216, int)`.
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
/// `TUN_F_CSUM`: the reader takes frames whose checksum is left to complete.
pub const TUN_F_CSUM: u32 = 1;

/// Attaches the open `/dev/net/tun` descriptor `tun` to the TAP device `name` with
/// `flags` (`IFF_TAP | IFF_NO_PI`, ...). The name must be shorter than `IFNAMSIZ`.
pub fn tun_set_iff(tun: &OwnedFd, name: &str, flags: i16) -> std::io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.bytes().any(|b| b == 0 || b == b'/') {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: `ifreq` is plain data (a name and a union of integers and plain
    // structs): all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = flags;
    // SAFETY: TUNSETIFF reads (and may update) one `struct ifreq`, which `req` is
    // and which lives across the call; `tun` is an open descriptor we own. The name
    // is NUL-terminated: it is shorter than IFNAMSIZ and the rest is zero.
    let r = unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF, &mut req as *mut libc::ifreq) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the virtio header length of the TAP descriptor `tun` (attached with
/// IFF_VNET_HDR) to `len`, and the offloads its reader takes (`TUN_F_*`).
pub fn tun_set_vnet(tun: &OwnedFd, len: i32, offloads: u32) -> std::io::Result<()> {
    // (`tun` is an open descriptor we own.)
    // SAFETY: TUNSETVNETHDRSZ reads one `int` through the pointer: `len`, alive across the call.
    let r = unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETVNETHDRSZ, &len as *const i32) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: TUNSETOFFLOAD takes its flags as the argument (no pointer); `tun` is ours, open.
    let r = unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETOFFLOAD, libc::c_ulong::from(offloads)) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Has `cmd`'s child receive SIGKILL when the calling thread ends (the parent-death
/// signal; the caller must be a thread that lives as long as the process, the main
/// thread) and keep descriptor `keep` open across `exec` (it is close-on-exec in
/// the parent, like every descriptor Rust opens).
pub fn die_with_parent_keeping(cmd: &mut Command, keep: RawFd) {
    let parent = std::process::id() as libc::pid_t;
    let hook = move || {
        // SAFETY: this runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed: prctl, getppid, getpid, kill and fcntl
        // are such system calls, with integer arguments only; nothing is allocated.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the prctl: then nobody would kill us.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            if libc::fcntl(keep, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: `pre_exec` is unsafe because the closure runs in the forked child,
    // where only async-signal-safe calls are sound: `hook` makes only prctl,
    // getppid, getpid, kill and fcntl with integer arguments, and allocates nothing.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Sets `O_NONBLOCK` on `fd` (a pipe std opened for us, which it has no setter for).
pub fn set_nonblocking(fd: &impl AsFd) -> std::io::Result<()> {
    let fd = fd.as_fd().as_raw_fd();
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor the caller borrows (so it is
    // open) takes and returns integers only, and touches no memory of ours.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
