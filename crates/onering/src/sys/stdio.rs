//! The host calls behind the program's standard streams: what each of onering's
//! descriptors 0, 1, 2 is (`kind`), its `fstat`, `lseek`, and the terminal ioctls
//! the program may make on it, passed through with the kernel's own argument
//! layouts (a 36-byte `struct termios`, not the C library's), and whether a
//! stdin would answer a read now (`ready_now`). Each call takes a
//! descriptor number and buffers of fixed sizes; nothing else reaches the host.
#![allow(unsafe_code)]

use onering_abi::stdio as kind;

/// The errno of the last failed call.
fn errno() -> i64 {
    std::io::Error::last_os_error().raw_os_error().map_or(5, i64::from)
}

/// `fstat(fd)`, or -errno.
pub fn fstat(fd: i32) -> Result<libc::stat, i64> {
    // SAFETY: `stat` is plain data, for which all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes at most one `struct stat` into `st`, which we own.
    if unsafe { libc::fstat(fd, &mut st) } == 0 {
        Ok(st)
    } else {
        Err(-errno())
    }
}

/// Whether a read of `fd` returns at once (input, end of file, a hang-up or an
/// error): a zero-timeout `poll`. Epoll said so a moment ago, but another
/// reader of the same open file (the program's stdin and an exec'd process's
/// may be one terminal) may have taken the input since.
pub fn ready_now(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: poll reads and writes the one pollfd we pass, which lives across it.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n != 0 // (a failed poll: the read tells what is wrong)
}

/// What descriptor `fd` is (`onering_abi::stdio`).
pub fn kind(fd: i32) -> u64 {
    let Ok(st) = fstat(fd) else { return kind::CLOSED };
    match st.st_mode & libc::S_IFMT {
        libc::S_IFIFO => kind::PIPE,
        libc::S_IFREG => kind::FILE,
        libc::S_IFSOCK => kind::SOCKET,
        libc::S_IFCHR if is_tty(fd) => kind::TTY,
        libc::S_IFCHR if libc::major(st.st_rdev) == 1 && libc::minor(st.st_rdev) == 3 => kind::NULL,
        libc::S_IFCHR => kind::CHAR,
        _ => kind::OTHER,
    }
}

fn is_tty(fd: i32) -> bool {
    // SAFETY: isatty only looks at the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// `lseek(fd, offset, whence)`: the new offset or -errno.
pub fn lseek(fd: i32, offset: i64, whence: i32) -> i64 {
    // SAFETY: lseek takes integers and touches no memory of ours.
    let r = unsafe { libc::lseek(fd, offset, whence) };
    if r < 0 {
        -errno()
    } else {
        r
    }
}

/// One of the forwarded terminal ioctls (`onering_abi::stdio::IOCTLS`) on `fd`, its
/// argument in `arg` (exactly the request's size): the result or -errno.
pub fn ioctl(fd: i32, request: u64, arg: &mut [u8]) -> i64 {
    match kind::ioctl(request) {
        Some((size, _)) if size as usize == arg.len() => {}
        _ => return -(libc::EINVAL as i64),
    }
    // SAFETY: the request is one of six whose argument is a buffer of the size
    // checked above (TCGETS/TCSETS*: the kernel's 36-byte termios; TIOCGWINSZ: 8
    // bytes; FIONREAD: an int), which the host kernel reads or writes and nothing
    // beyond; `arg` is ours for the call.
    let r = unsafe { libc::ioctl(fd, request as _, arg.as_mut_ptr()) };
    if r < 0 {
        -errno()
    } else {
        i64::from(r)
    }
}
