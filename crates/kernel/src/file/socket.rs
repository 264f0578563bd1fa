//! The socket interface: what every socket is to the socket system calls. A
//! socket is a file object (`crate::file::File`) that also implements [`Socket`];
//! `File::socket` finds it, so the handlers (`syscall::net`) never match on
//! kinds. The kinds are in `crate::net`. Pure: unit-tested on the host.
//!
//! As every file operation, socket operations are attempts that never block:
//! where they would wait they return EAGAIN and the handler sleeps on the
//! socket's wait key (respecting O_NONBLOCK, MSG_DONTWAIT and SO_RCVTIMEO /
//! SO_SNDTIMEO) and tries again. The handler parses everything the program
//! passes (addresses, `msghdr`, control messages) into the plain types here, so
//! the objects see checked values and user memory only through [`Iov`].

use crate::errno::{Errno, SysResult};
use crate::file::FileRef;
use crate::mm::user::UserMem;
use alloc::vec::Vec;

pub const AF_UNIX: u16 = 1;
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;

pub const SOCK_STREAM: u32 = 1;
pub const SOCK_DGRAM: u32 = 2;
pub const SOCK_SEQPACKET: u32 = 5;
pub const SOCK_NONBLOCK: u32 = 0o4000;
pub const SOCK_CLOEXEC: u32 = 0o2000000;

/// `send`/`recv` flags.
pub mod msg {
    pub const OOB: u32 = 0x1;
    pub const PEEK: u32 = 0x2;
    pub const CTRUNC: u32 = 0x8;
    pub const TRUNC: u32 = 0x20;
    pub const DONTWAIT: u32 = 0x40;
    pub const EOR: u32 = 0x80;
    pub const WAITALL: u32 = 0x100;
    pub const NOSIGNAL: u32 = 0x4000;
    pub const CMSG_CLOEXEC: u32 = 0x4000_0000;
}

/// `shutdown` directions.
pub const SHUT_RD: u64 = 0;
pub const SHUT_WR: u64 = 1;
pub const SHUT_RDWR: u64 = 2;

/// Socket option levels and the options every socket shares.
pub mod opt {
    pub const SOL_SOCKET: u64 = 1;
    pub const SO_DEBUG: u64 = 1;
    pub const SO_REUSEADDR: u64 = 2;
    pub const SO_TYPE: u64 = 3;
    pub const SO_ERROR: u64 = 4;
    pub const SO_DONTROUTE: u64 = 5;
    pub const SO_BROADCAST: u64 = 6;
    pub const SO_SNDBUF: u64 = 7;
    pub const SO_RCVBUF: u64 = 8;
    pub const SO_KEEPALIVE: u64 = 9;
    pub const SO_OOBINLINE: u64 = 10;
    pub const SO_LINGER: u64 = 13;
    pub const SO_REUSEPORT: u64 = 15;
    pub const SO_PASSCRED: u64 = 16;
    pub const SO_PEERCRED: u64 = 17;
    pub const SO_RCVLOWAT: u64 = 18;
    pub const SO_SNDLOWAT: u64 = 19;
    pub const SO_RCVTIMEO: u64 = 20;
    pub const SO_SNDTIMEO: u64 = 21;
    pub const SO_ACCEPTCONN: u64 = 30;
    pub const SO_SNDBUFFORCE: u64 = 32;
    pub const SO_RCVBUFFORCE: u64 = 33;
    pub const SO_PROTOCOL: u64 = 38;
    pub const SO_DOMAIN: u64 = 39;
    pub const SCM_RIGHTS: u32 = 1;
    pub const SCM_CREDENTIALS: u32 = 2;
}

/// Credentials (SO_PEERCRED, SCM_CREDENTIALS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Cred {
    pub fn to_bytes(self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4..8].copy_from_slice(&self.uid.to_le_bytes());
        b[8..].copy_from_slice(&self.gid.to_le_bytes());
        b
    }
}

/// A list of user buffers (`iovec`s, already read and checked for overflow), and
/// copies through it.
#[derive(Clone, Debug, Default)]
pub struct Iov {
    pub parts: Vec<(u64, u64)>,
}

impl Iov {
    pub fn one(base: u64, len: u64) -> Self {
        Iov { parts: alloc::vec![(base, len)] }
    }

    pub fn len(&self) -> u64 {
        self.parts.iter().map(|p| p.1).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The list less its first `n` bytes.
    pub fn skip(&self, mut n: u64) -> Iov {
        let mut parts = Vec::new();
        for &(base, len) in &self.parts {
            if n >= len {
                n -= len;
            } else {
                parts.push((base + n, len - n));
                n = 0;
            }
        }
        Iov { parts }
    }

    /// Copies `data` into the buffers from byte `at` of the list on.
    pub fn write_at(&self, user: &dyn UserMem, mut at: u64, mut data: &[u8]) -> Result<(), Errno> {
        for &(base, len) in &self.parts {
            if data.is_empty() {
                break;
            }
            if at >= len {
                at -= len;
                continue;
            }
            let n = ((len - at) as usize).min(data.len());
            user.write(base + at, &data[..n])?;
            data = &data[n..];
            at = 0;
        }
        Ok(())
    }

    /// Reads the buffers' bytes `[at, at + out.len())` into `out`.
    pub fn read_at(&self, user: &dyn UserMem, mut at: u64, mut out: &mut [u8]) -> Result<(), Errno> {
        for &(base, len) in &self.parts {
            if out.is_empty() {
                break;
            }
            if at >= len {
                at -= len;
                continue;
            }
            let n = ((len - at) as usize).min(out.len());
            user.read(base + at, &mut out[..n])?;
            out = &mut out[n..];
            at = 0;
        }
        Ok(())
    }
}

/// What a send passes besides its bytes.
#[derive(Default)]
pub struct SendExtra {
    /// The destination (`sendto`/`sendmsg`), raw `sockaddr` bytes.
    pub addr: Option<Vec<u8>>,
    /// Descriptors passed with SCM_RIGHTS.
    pub rights: Vec<FileRef>,
    /// The sender's credentials (always known; sent as SCM_CREDENTIALS to a
    /// receiver with SO_PASSCRED).
    pub cred: Cred,
    pub flags: u32,
}

/// What a receive got besides its bytes.
#[derive(Default)]
pub struct RecvExtra {
    /// The sender's address, raw `sockaddr` bytes (datagrams).
    pub addr: Option<Vec<u8>>,
    pub rights: Vec<FileRef>,
    pub cred: Option<Cred>,
    /// MSG_TRUNC, MSG_EOR... for `msg_flags`.
    pub flags: u32,
}

/// A shared handle to something a name leads to (a socket's state, as `Any`).
pub type Named = alloc::sync::Arc<dyn core::any::Any + Send + Sync>;

/// What socket objects need from the system-call layer: the file tree for path
/// names (resolved from the caller's working directory) and the table of
/// abstract names, and who is calling. Host tests give a fake.
pub trait NetEnv {
    /// Creates socket file `path` leading to `target`: EADDRINUSE if the name
    /// exists, the tree's errors (ENOENT, ENOTDIR, EROFS...) otherwise.
    fn bind_path(&self, path: &[u8], target: alloc::sync::Weak<dyn core::any::Any + Send + Sync>) -> SysResult;
    /// What socket file `path` leads to: ENOENT if no such file, ECONNREFUSED
    /// if it is no socket or its socket is closed.
    fn find_path(&self, path: &[u8]) -> Result<Named, Errno>;
    /// Binds abstract name `name` to `target` (EADDRINUSE if taken by a live socket).
    fn bind_abstract(&self, name: &[u8], target: alloc::sync::Weak<dyn core::any::Any + Send + Sync>) -> SysResult;
    /// What abstract name `name` leads to (ECONNREFUSED if none).
    fn find_abstract(&self, name: &[u8]) -> Result<Named, Errno>;
    /// The caller's credentials.
    fn cred(&self) -> Cred;
}

/// The operations of a socket. Defaults are Linux's for a socket type that does
/// not support the operation.
pub trait Socket: Send + Sync {
    fn domain(&self) -> u16;
    /// SOCK_STREAM, SOCK_DGRAM or SOCK_SEQPACKET.
    fn kind(&self) -> u32;

    fn bind(&self, env: &dyn NetEnv, addr: &[u8]) -> SysResult;

    fn listen(&self, backlog: u32) -> SysResult {
        let _ = backlog;
        Err(Errno::EOPNOTSUPP)
    }

    /// A connection waiting to be accepted (EAGAIN if none), and its peer's
    /// address.
    fn accept(&self) -> Result<(FileRef, Vec<u8>), Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    /// Connects; EAGAIN while it must wait (a full backlog), EINPROGRESS where a
    /// non-blocking connect goes on in the background.
    fn connect(&self, env: &dyn NetEnv, addr: &[u8]) -> SysResult;

    /// Sends up to `iov.len()` bytes; the count sent.
    fn send(&self, env: &dyn NetEnv, user: &dyn UserMem, iov: &Iov, extra: SendExtra) -> SysResult;

    /// What a caller that got EAGAIN from `connect` or `send` waits on (None:
    /// the file's own wait key): a full listener's backlog, a datagram
    /// receiver's full queue.
    fn blocked_on(&self) -> Option<u64> {
        None
    }

    /// Receives into `iov`; the count received (the whole datagram's length with
    /// MSG_TRUNC), and what came with it.
    fn recv(&self, user: &dyn UserMem, iov: &Iov, flags: u32) -> Result<(u64, RecvExtra), Errno>;

    fn shutdown(&self, how: u64) -> SysResult;

    /// The socket's own address (raw `sockaddr` bytes).
    fn name(&self) -> Vec<u8>;

    /// The peer's address; ENOTCONN if none.
    fn peer(&self) -> Result<Vec<u8>, Errno>;

    /// A socket option's value as the bytes `getsockopt` returns.
    fn getopt(&self, level: u64, name: u64) -> Result<Vec<u8>, Errno>;

    fn setopt(&self, level: u64, name: u64, val: &[u8]) -> SysResult;

    /// Bytes waiting to be read (FIONREAD) and not yet taken by the peer (SIOCOUTQ).
    fn inq(&self) -> u64 {
        0
    }
    fn outq(&self) -> u64 {
        0
    }

    /// SO_RCVTIMEO / SO_SNDTIMEO in ns (0: none).
    fn timeouts(&self) -> (u64, u64) {
        (0, 0)
    }

    /// After `connect` said EINPROGRESS: EAGAIN while the connection is being
    /// made, then its result (a blocking connect waits on this).
    fn connect_wait(&self) -> SysResult {
        Ok(0)
    }

    /// When the socket's protocol next needs to run (monotonic ns), for a
    /// caller about to wait on it: it wakes then and calls [`Socket::tick`].
    fn next_timer(&self) -> Option<u64> {
        None
    }

    /// Runs the protocol's timers that are due.
    fn tick(&self) {}
}

/// An option value as an int (`setsockopt` takes at least 4 bytes for ints).
pub fn int_opt(val: &[u8]) -> Result<i32, Errno> {
    match val.get(..4) {
        Some(b) => Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(Errno::EINVAL),
    }
}

/// A `struct timeval` option (SO_RCVTIMEO) in ns; 0 is "no timeout".
pub fn timeval_opt(val: &[u8]) -> Result<u64, Errno> {
    if val.len() < 16 {
        return Err(Errno::EINVAL);
    }
    let sec = i64::from_le_bytes(val[..8].try_into().map_err(|_| Errno::EINVAL)?);
    let usec = i64::from_le_bytes(val[8..16].try_into().map_err(|_| Errno::EINVAL)?);
    if !(0..1_000_000).contains(&usec) {
        return Err(Errno::EDOM);
    }
    if sec < 0 {
        return Ok(0); // Linux: a negative time is no timeout
    }
    Ok((sec as u64).saturating_mul(1_000_000_000).saturating_add(usec as u64 * 1000))
}

/// Encodes ns as a `struct timeval`.
pub fn timeval_bytes(ns: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(16);
    b.extend_from_slice(&(ns / 1_000_000_000).to_le_bytes());
    b.extend_from_slice(&((ns % 1_000_000_000) / 1000).to_le_bytes());
    b
}
