//! Linux error numbers. Handlers return `Result<_, Errno>`; the dispatcher turns an
//! `Err` into `-errno` in one place.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
#[allow(clippy::upper_case_acronyms, dead_code)]
pub enum Errno {
    EPERM = 1,
    ENOENT = 2,
    ESRCH = 3,
    EINTR = 4,
    EIO = 5,
    ENXIO = 6,
    E2BIG = 7,
    ENOEXEC = 8,
    EBADF = 9,
    ECHILD = 10,
    EAGAIN = 11,
    ENOMEM = 12,
    EACCES = 13,
    EFAULT = 14,
    EBUSY = 16,
    EEXIST = 17,
    EXDEV = 18,
    ENODEV = 19,
    ENOTDIR = 20,
    EISDIR = 21,
    EINVAL = 22,
    ENFILE = 23,
    EMFILE = 24,
    ENOTTY = 25,
    EFBIG = 27,
    ENOSPC = 28,
    ESPIPE = 29,
    EROFS = 30,
    EMLINK = 31,
    EPIPE = 32,
    EDOM = 33,
    ERANGE = 34,
    EDEADLK = 35,
    ENAMETOOLONG = 36,
    ENOSYS = 38,
    ENOTEMPTY = 39,
    ELOOP = 40,
    /// No such attribute (an extended attribute).
    ENODATA = 61,
    EOVERFLOW = 75,
    /// A shared library (an ELF interpreter) that cannot be used.
    ELIBBAD = 80,
    ENOTSOCK = 88,
    EDESTADDRREQ = 89,
    EMSGSIZE = 90,
    EPROTOTYPE = 91,
    ENOPROTOOPT = 92,
    EPROTONOSUPPORT = 93,
    ESOCKTNOSUPPORT = 94,
    /// Also EOPNOTSUPP (the same number on Linux).
    ENOTSUP = 95,
    EAFNOSUPPORT = 97,
    EADDRINUSE = 98,
    EADDRNOTAVAIL = 99,
    ENETUNREACH = 101,
    ECONNABORTED = 103,
    ECONNRESET = 104,
    ENOBUFS = 105,
    EISCONN = 106,
    ENOTCONN = 107,
    ETIMEDOUT = 110,
    ECONNREFUSED = 111,
    EALREADY = 114,
    EINPROGRESS = 115,
    /// Internal, never seen by the program: a blocking call was interrupted by a
    /// signal and restarts after the handler if the handler has SA_RESTART (else the
    /// program gets EINTR). Linux's ERESTARTSYS.
    ERESTARTSYS = 512,
}

/// The result type of every system-call handler.
pub type SysResult = Result<u64, Errno>;

/// Every error the program may see (for `from_raw`).
const ALL: &[Errno] = &[
    Errno::EPERM,
    Errno::ENOENT,
    Errno::ESRCH,
    Errno::EINTR,
    Errno::EIO,
    Errno::ENXIO,
    Errno::E2BIG,
    Errno::ENOEXEC,
    Errno::EBADF,
    Errno::ECHILD,
    Errno::EAGAIN,
    Errno::ENOMEM,
    Errno::EACCES,
    Errno::EFAULT,
    Errno::EBUSY,
    Errno::EEXIST,
    Errno::EXDEV,
    Errno::ENODEV,
    Errno::ENOTDIR,
    Errno::EISDIR,
    Errno::EINVAL,
    Errno::ENFILE,
    Errno::EMFILE,
    Errno::ENOTTY,
    Errno::EFBIG,
    Errno::ENOSPC,
    Errno::ESPIPE,
    Errno::EROFS,
    Errno::EMLINK,
    Errno::EPIPE,
    Errno::EDOM,
    Errno::ERANGE,
    Errno::EDEADLK,
    Errno::ENAMETOOLONG,
    Errno::ENOSYS,
    Errno::ENOTEMPTY,
    Errno::ELOOP,
    Errno::ENODATA,
    Errno::EOVERFLOW,
    Errno::ELIBBAD,
    Errno::ENOTSOCK,
    Errno::EDESTADDRREQ,
    Errno::EMSGSIZE,
    Errno::EPROTOTYPE,
    Errno::ENOPROTOOPT,
    Errno::EPROTONOSUPPORT,
    Errno::ESOCKTNOSUPPORT,
    Errno::ENOTSUP,
    Errno::EAFNOSUPPORT,
    Errno::EADDRINUSE,
    Errno::EADDRNOTAVAIL,
    Errno::ENETUNREACH,
    Errno::ECONNABORTED,
    Errno::ECONNRESET,
    Errno::ENOBUFS,
    Errno::EISCONN,
    Errno::ENOTCONN,
    Errno::ETIMEDOUT,
    Errno::ECONNREFUSED,
    Errno::EALREADY,
    Errno::EINPROGRESS,
];

impl Errno {
    /// "Operation not supported" on a socket: ENOTSUP's number.
    pub const EOPNOTSUPP: Errno = Errno::ENOTSUP;

    /// The error numbered `n` (an errno the VMM passed on), if the kernel knows it.
    pub fn from_raw(n: u32) -> Option<Errno> {
        ALL.iter().copied().find(|e| *e as u32 == n)
    }

    /// The error a hostcall returned (a negative errno from the VMM), EIO for one
    /// the kernel does not know.
    pub fn from_host(r: i64) -> Errno {
        Errno::from_raw(r.unsigned_abs().min(u64::from(u32::MAX)) as u32).unwrap_or(Errno::EIO)
    }

    /// The value a system call returns for this error: `-errno` as an unsigned word.
    pub const fn to_ret(self) -> u64 {
        (-(self as i64)) as u64
    }
}

/// Turns a handler's result into the value left in `rax`.
pub fn to_ret(r: SysResult) -> u64 {
    match r {
        Ok(v) => v,
        Err(e) => e.to_ret(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_become_negative() {
        assert_eq!(to_ret(Err(Errno::ENOSYS)) as i64, -38);
        assert_eq!(to_ret(Err(Errno::EFAULT)) as i64, -14);
        assert_eq!(to_ret(Ok(7)), 7);
    }

    #[test]
    fn known_numbers_come_back() {
        assert_eq!(Errno::from_raw(29), Some(Errno::ESPIPE));
        assert_eq!(Errno::from_raw(25), Some(Errno::ENOTTY));
        assert_eq!(Errno::from_raw(512), None);
        assert_eq!(Errno::from_raw(9999), None);
    }
}
