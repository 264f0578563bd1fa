//! The host calls of the OCI runtime (`oci/`) that the standard library does not
//! wrap: a FIFO for the start gate, a new session with a controlling terminal, a
//! pseudo-terminal pair, signals to a container's VMM and a wait on a descriptor;
//! for `exec`, descriptors received over a socket, a fork and a dup.
//! All take and return plain integers or descriptors this process owns.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Makes the FIFO `path` (mode 0600).
pub fn mkfifo(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `c` is a NUL-terminated string that lives across the call.
    check(unsafe { libc::mkfifo(c.as_ptr(), 0o600) })
}

/// Makes the calling process the leader of a new session; with `tty`, its stdin
/// (a terminal) becomes the session's controlling terminal.
pub fn new_session(tty: bool) -> io::Result<()> {
    // SAFETY: setsid takes no arguments and changes only this process's session.
    check(unsafe { libc::setsid() })?;
    if tty {
        // TIOCSCTTY on descriptor 0 takes an integer argument.
        // SAFETY: the ioctl reads no memory of ours.
        check(unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) })?;
    }
    Ok(())
}

/// A new pseudo-terminal: (master, slave).
pub fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (-1, -1);
    // openpty writes the two descriptors into the integers we pass; the name,
    // termios and window size are null.
    // SAFETY: it writes only our two integers and reads nothing else.
    check(unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) })?;
    // SAFETY: openpty succeeded: both are new descriptors that only we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) })
}

/// Sends `sig` to process `pid` (0 only checks that it exists).
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes integers only.
    check(unsafe { libc::kill(pid, sig) })
}

/// Waits at most `ms` milliseconds for `fd` to be readable; true if it is.
pub fn readable(fd: BorrowedFd<'_>, ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: poll reads and writes the one pollfd we pass, which lives across it.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n > 0 && p.revents & libc::POLLIN != 0)
}

/// Receives at most `buf.len()` bytes from `sock` and the descriptors that came
/// with them (at most `max`), each now owned by the caller.
pub fn recv_fds(
    sock: &std::os::unix::net::UnixStream,
    buf: &mut [u8],
    max: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    use vmm_sys_util::sock_ctrl_msg::ScmSocket;
    let mut iov = [libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }];
    let mut raw = vec![-1; max];
    // The descriptors written into `raw` are new ones; only the first `n` count.
    // SAFETY: the one iovec points at `buf`, which lives across the call and takes any bytes.
    let got = unsafe { sock.recv_with_fds(&mut iov, &mut raw) };
    let (len, n) = got.map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    let own = |fd: &i32| {
        // SAFETY: recvmsg installed these `n` descriptors for this process; nothing else owns them.
        unsafe { OwnedFd::from_raw_fd(*fd) }
    };
    let fds = raw[..n.min(max)].iter().map(own).collect();
    Ok((len, fds))
}

/// Forks the calling process, which must have one thread (`onering exec` before
/// it started any): `Some(child's pid)` in the parent, None in the child.
pub fn fork_single_threaded() -> io::Result<Option<i32>> {
    // (With one thread, no lock can be held by a thread the child lacks.)
    // SAFETY: the caller has one thread, so the child is a complete copy of this process.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        pid => Ok(Some(pid)),
    }
}

/// Makes descriptor `to` a copy of `from` (closing what `to` was).
pub fn dup_onto(from: BorrowedFd<'_>, to: i32) -> io::Result<()> {
    // SAFETY: dup2 takes integers; `from` is open (borrowed); replacing `to` is the caller's intent.
    check(unsafe { libc::dup2(from.as_raw_fd(), to) })
}
