//! Socket objects, one kind per file: `unix` (AF_UNIX stream, datagram and
//! seqpacket, all in the kernel's memory), `inet` (AF_INET and AF_INET6, TCP and
//! UDP on smoltcp, over loopback and the network device) and `netlink`
//! (AF_NETLINK's NETLINK_ROUTE: the interfaces and addresses); `iface` is the
//! interfaces, and the interface ioctls every socket takes. They implement the
//! socket interface (`crate::file::socket`) that the socket system calls
//! (`syscall::net`) use. Below them: `slab` holds the stack's smoltcp sockets,
//! `fuse` carries the bytes of TCP connections between two of the VM's sockets,
//! `route` parses packets for routing, and `ether` and `frag` (the
//! `onering-ipfrag` crate, shared with the VMM) are the network device's link
//! layer (framing, ARP, IPv4 fragments).

pub mod ether;
pub use onering_ipfrag as frag;
mod fuse;
pub mod iface;
pub mod inet;
pub mod netlink;
pub mod route;
mod slab;
pub mod unix;

use crate::errno::{Errno, SysResult};
use crate::file::socket::{self as sock, Cred, Iov, NetEnv, SendExtra, Socket};
use crate::mm::user::UserMem;
use alloc::sync::Weak;
use core::any::Any;

/// What `fstat` says of a socket numbered `ino`: a socket file anyone may use.
pub fn socket_stat(ino: u64) -> crate::file::Meta {
    use crate::file::{mode, Meta};
    Meta { ino, mode: mode::S_IFSOCK | 0o777, nlink: 1, ..Meta::default() }
}

/// `read(2)` on socket `s`: `recv` with no flags (no offsets: ESPIPE). Whatever
/// came with the data (descriptors passed with it) is dropped, as on Linux.
pub(crate) fn read(s: &dyn Socket, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
    if off.is_some() {
        return Err(Errno::ESPIPE);
    }
    s.recv(user, &Iov::one(buf, len), 0).map(|r| r.0)
}

/// `write(2)` on socket `s`: `send` with no destination and no name lookups.
pub(crate) fn write(s: &dyn Socket, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
    if off.is_some() {
        return Err(Errno::ESPIPE);
    }
    s.send(&NoEnv, user, &Iov::one(buf, len), SendExtra::default())
}

/// The environment of `write(2)` on a socket: no names to look up.
struct NoEnv;

impl NetEnv for NoEnv {
    fn bind_path(&self, _: &[u8], _: Weak<dyn Any + Send + Sync>) -> SysResult {
        Err(Errno::EINVAL)
    }
    fn find_path(&self, _: &[u8]) -> Result<sock::Named, Errno> {
        Err(Errno::ENOTCONN)
    }
    fn bind_abstract(&self, _: &[u8], _: Weak<dyn Any + Send + Sync>) -> SysResult {
        Err(Errno::EINVAL)
    }
    fn find_abstract(&self, _: &[u8]) -> Result<sock::Named, Errno> {
        Err(Errno::ENOTCONN)
    }
    fn cred(&self) -> Cred {
        Cred::default()
    }
}
