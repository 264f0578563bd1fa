//! The file interface: what every open file is to the system calls. Each kind of
//! file (pipe end, eventfd, epoll, device, tree node, the standard streams, later
//! sockets) is its own object behind the [`File`] trait (the objects are in
//! `crate::fs`); an open file description ([`OpenFile`]) adds what `dup` shares,
//! status flags and offset, and owns the OFD and `flock` locks taken through it
//! (released in its drop, see [`on_lock_owner_drop`]); the descriptor table is
//! [`fdtable`].
//!
//! Every operation here is an attempt that never blocks: where it would have to
//! wait it returns EAGAIN, and the caller (the system call, which knows whether the
//! file is in blocking mode and how to sleep) waits on the file's wait key and tries
//! again. So objects hold no thread state, and the interface depends only on pure
//! layers (user memory, errno): it is unit-tested on the host.

pub mod fdtable;
pub mod socket;

use crate::errno::{Errno, SysResult};
use crate::mm::user::UserMem;
use crate::vfs::Ino;
use alloc::boxed::Box;
use alloc::sync::Arc;
use core::any::Any;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

pub use fdtable::{FdTable, NOFILE_DEFAULT, NR_OPEN};

/// `open` flags.
pub mod oflag {
    pub const O_ACCMODE: u32 = 3;
    pub const O_RDONLY: u32 = 0;
    pub const O_WRONLY: u32 = 1;
    pub const O_RDWR: u32 = 2;
    pub const O_CREAT: u32 = 0o100;
    pub const O_EXCL: u32 = 0o200;
    pub const O_NOCTTY: u32 = 0o400;
    pub const O_TRUNC: u32 = 0o1000;
    pub const O_APPEND: u32 = 0o2000;
    pub const O_NONBLOCK: u32 = 0o4000;
    pub const O_DIRECTORY: u32 = 0o200000;
    pub const O_NOFOLLOW: u32 = 0o400000;
    pub const O_CLOEXEC: u32 = 0o2000000;
    pub const O_PATH: u32 = 0o10000000;
    /// Flags F_SETFL may change.
    pub const SETTABLE: u32 = O_APPEND | O_NONBLOCK;
}

/// Event bits (`poll` and `epoll`).
pub mod ev {
    pub const IN: u32 = 0x001;
    pub const PRI: u32 = 0x002;
    pub const OUT: u32 = 0x004;
    pub const ERR: u32 = 0x008;
    pub const HUP: u32 = 0x010;
    pub const RDNORM: u32 = 0x040;
    pub const WRNORM: u32 = 0x100;
    pub const RDHUP: u32 = 0x2000;
    pub const EXCLUSIVE: u32 = 1 << 28;
    pub const WAKEUP: u32 = 1 << 29;
    pub const ONESHOT: u32 = 1 << 30;
    pub const ET: u32 = 1 << 31;
    /// Always reported, asked for or not.
    pub const ALWAYS: u32 = ERR | HUP;
}

/// A pollable object's state: ready events, a generation bumped on every change
/// (edge-triggered epoll reports again only after a change), and the wait key
/// threads waiting for it sleep on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readiness {
    pub events: u32,
    pub gen: u64,
    pub key: u64,
}

/// File type bits of `st_mode`.
pub mod mode {
    pub const S_IFMT: u32 = 0o170000;
    pub const S_IFDIR: u32 = 0o040000;
    pub const S_IFREG: u32 = 0o100000;
    pub const S_IFLNK: u32 = 0o120000;
    pub const S_IFCHR: u32 = 0o020000;
    pub const S_IFIFO: u32 = 0o010000;
    pub const S_IFSOCK: u32 = 0o140000;
}

/// What `stat` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub ino: u64,
    pub mode: u32,
    pub size: u64,
    /// Device number (major, minor) of a device node.
    pub rdev: (u32, u32),
    pub mtime: u64,
    pub atime: u64,
    /// Status change time (0: the modification time).
    pub ctime: u64,
    pub nlink: u64,
    /// Owner; None: the program's user (anonymous objects).
    pub owner: Option<(u32, u32)>,
    /// The device it lives on (None: onering's own file system); the host's for a
    /// host stream.
    pub dev: Option<u64>,
    /// Preferred I/O size (0: 4096) and 512-byte blocks (None: from the size).
    pub blksize: u64,
    pub blocks: Option<u64>,
}

/// One kind of open file. Defaults are what Linux says for a file that does not
/// support the operation.
pub trait File: Send + Sync + 'static {
    /// Reads up to `len` bytes into user memory at `buf`, at `off` (pread) or the
    /// description's offset. EAGAIN where it would block.
    fn read(&self, of: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        let _ = (of, user, buf, len, off);
        Err(Errno::EINVAL)
    }

    /// Writes up to `len` bytes from user memory at `buf`. EAGAIN where it would
    /// block, EPIPE when nobody reads.
    fn write(&self, of: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        let _ = (of, user, buf, len, off);
        Err(Errno::EINVAL)
    }

    /// Readiness, or None if it cannot be polled (`poll` then says readable and
    /// writable; `epoll_ctl` says EPERM, as Linux does for regular files).
    fn poll(&self, of: &OpenFile) -> Option<Readiness> {
        let _ = of;
        None
    }

    /// What threads blocked on this file sleep on (None: it never blocks). Fixed
    /// for the object's life (the address of something it owns, typically).
    fn wait_key(&self) -> Option<u64> {
        None
    }

    fn ioctl(&self, of: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        let _ = (of, user, request, arg);
        Err(Errno::ENOTTY)
    }

    fn stat(&self) -> Meta;

    /// `lseek`: the new offset.
    fn seek(&self, of: &OpenFile, off: i64, whence: u64) -> SysResult {
        let _ = (of, off, whence);
        Err(Errno::ESPIPE)
    }

    /// The tree node it is (files, directories, devices): for `*at` calls, fchdir,
    /// getdents and the attribute calls.
    fn node(&self) -> Option<Ino> {
        None
    }

    /// `fsync`: what was written reaches stable storage (a host file's host).
    fn sync(&self) -> Result<(), Errno> {
        Ok(())
    }

    /// Whether its reads or writes may be long: wait for the host (the standard
    /// streams: a hostcall that returns when the host's stdin has data or its
    /// stdout has room) or run a protocol stack under a lock of their own (TCP and
    /// UDP sockets). Other files' operations are short and may run under the
    /// descriptor table's lock (see `syscall::fs::read`); long ones must not, or
    /// every thread's file calls wait for them. Fixed for the object's life.
    fn long_io(&self) -> bool {
        false
    }

    /// Whether a write that fails with EPIPE raises SIGPIPE (pipes and the standard
    /// streams do; a socket decides per call, MSG_NOSIGNAL).
    fn sigpipe(&self) -> bool {
        false
    }

    /// The socket it is, if it is one (the socket system calls; ENOTSOCK otherwise).
    fn socket(&self) -> Option<&dyn socket::Socket> {
        None
    }

    /// A file lock (`fcntl` or `flock`) onering's own table (`crate::filelock`) is
    /// about to grant or has released on this file: the hook for a file backed by a
    /// host file to take the same lock on the host file, so host processes see it.
    /// Called under the lock table's lock, after the guest's own conflicts were
    /// checked and before the lock is recorded; an error fails the call and the lock
    /// is not taken (a host conflict should say EAGAIN, and must not block). The
    /// default: the file exists only in the guest, nothing to do.
    fn host_lock(&self, of: &OpenFile, lock: &crate::filelock::HostLock) -> Result<(), Errno> {
        let _ = (of, lock);
        Ok(())
    }

    /// For objects that must find their own kind among open files (epoll).
    fn as_any(&self) -> &dyn Any;
}

/// An open file description: shared by every descriptor `dup`ed from it (offset
/// and status flags included), as on Linux; close-on-exec belongs to the
/// descriptor. Flags and offset are atomics, so descriptors share it without a lock.
pub struct OpenFile {
    obj: Box<dyn File>,
    /// Access mode and status flags (`O_APPEND`, `O_NONBLOCK`, ...).
    flags: AtomicU32,
    offset: AtomicU64,
    /// The object's `wait_key` and `long_io`, which never change: read on every
    /// read and write, so kept here rather than asked for each time.
    key: Option<u64>,
    long_io: bool,
    /// It took OFD or `flock` locks: they go when it does (see [`on_lock_owner_drop`]).
    lock_owner: AtomicBool,
}

/// What releases the OFD and `flock` locks of an open file description that goes
/// (the task layer's, registered when a first such lock is taken: this layer can
/// neither reach the lock table's waiters nor wake them).
static RELEASE_LOCKS: spin::Once<fn(&OpenFile)> = spin::Once::new();

/// Registers what releases the locks an open file description owns when it goes.
pub fn on_lock_owner_drop(release: fn(&OpenFile)) {
    RELEASE_LOCKS.call_once(|| release);
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        if self.lock_owner.load(Ordering::Relaxed) {
            if let Some(release) = RELEASE_LOCKS.get() {
                release(self);
            }
        }
    }
}

impl core::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OpenFile").field("flags", &self.flags()).field("offset", &self.offset()).finish()
    }
}

pub type FileRef = Arc<OpenFile>;

impl OpenFile {
    pub fn new(obj: impl File, flags: u32) -> FileRef {
        let (key, long_io) = (obj.wait_key(), obj.long_io());
        Arc::new(OpenFile {
            obj: Box::new(obj),
            flags: AtomicU32::new(flags),
            offset: AtomicU64::new(0),
            key,
            long_io,
            lock_owner: AtomicBool::new(false),
        })
    }

    /// The object.
    pub fn obj(&self) -> &dyn File {
        &*self.obj
    }

    /// The object as its concrete kind, if it is one.
    pub fn downcast<T: File>(&self) -> Option<&T> {
        self.obj.as_any().downcast_ref::<T>()
    }

    pub fn flags(&self) -> u32 {
        self.flags.load(Ordering::Relaxed)
    }

    pub fn set_flags(&self, f: u32) {
        self.flags.store(f, Ordering::Relaxed)
    }

    pub fn nonblocking(&self) -> bool {
        self.flags() & oflag::O_NONBLOCK != 0
    }

    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Relaxed)
    }

    pub fn set_offset(&self, o: u64) {
        self.offset.store(o, Ordering::Relaxed)
    }

    pub fn readable(&self) -> bool {
        let f = self.flags();
        f & oflag::O_PATH == 0 && f & oflag::O_ACCMODE != oflag::O_WRONLY
    }

    pub fn writable(&self) -> bool {
        let f = self.flags();
        f & oflag::O_PATH == 0 && f & oflag::O_ACCMODE != oflag::O_RDONLY
    }

    /// `read` after the access checks every file shares.
    pub fn read(&self, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if !self.readable() {
            return Err(Errno::EBADF);
        }
        self.obj.read(self, user, buf, len, off)
    }

    /// `write` after the access checks every file shares.
    pub fn write(&self, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if !self.writable() {
            return Err(Errno::EBADF);
        }
        self.obj.write(self, user, buf, len, off)
    }

    pub fn poll(&self) -> Option<Readiness> {
        self.obj.poll(self)
    }

    pub fn wait_key(&self) -> Option<u64> {
        self.key
    }

    /// Whether its reads or writes may be long (`File::long_io`).
    pub fn long_io(&self) -> bool {
        self.long_io
    }

    pub fn node(&self) -> Option<Ino> {
        self.obj.node()
    }

    /// Its identity as the owner of OFD and `flock` locks (unique while it lives).
    pub fn lock_id(&self) -> u64 {
        key_of(self)
    }

    /// It now owns OFD or `flock` locks, to be released when it goes.
    pub fn owns_locks(&self) {
        self.lock_owner.store(true, Ordering::Relaxed)
    }
}

/// What a file mapping reads and writes back (`mm::filemap`): positioned reads and
/// writes with the description's access checks (so a mapping made for reading cannot
/// write), and the size `stat` reports.
impl crate::mm::filemap::MappedFile for OpenFile {
    fn read_at(&self, user: &dyn UserMem, buf: u64, len: u64, off: u64) -> Result<u64, Errno> {
        self.read(user, buf, len, Some(off))
    }

    fn write_at(&self, user: &dyn UserMem, buf: u64, len: u64, off: u64) -> Result<u64, Errno> {
        self.write(user, buf, len, Some(off))
    }

    fn size(&self) -> u64 {
        self.obj.stat().size
    }

    fn node(&self) -> Option<usize> {
        self.obj.node()
    }
}

/// The `poll`/`ppoll` events of an open file for the `asked` events, and its wait
/// key: files that cannot be polled are always readable and writable, as on Linux.
pub fn poll_events(of: &OpenFile, asked: u32) -> (u32, Option<u64>) {
    match of.poll() {
        Some(r) => (r.events & (asked | ev::ALWAYS), Some(r.key)),
        None => ((ev::IN | ev::OUT | ev::RDNORM | ev::WRNORM) & asked, None),
    }
}

/// A wait key made from an object's address (unique while it lives).
pub fn key_of<T: ?Sized>(p: &T) -> u64 {
    p as *const T as *const u8 as u64
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A file that only has a node number.
    pub struct Plain(pub Ino);

    impl File for Plain {
        fn stat(&self) -> Meta {
            Meta { ino: self.0 as u64, ..Meta::default() }
        }
        fn node(&self) -> Option<Ino> {
            Some(self.0)
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn access_modes_are_checked_before_the_object() {
        let f = OpenFile::new(Plain(1), oflag::O_WRONLY);
        let u = crate::mm::user::BufferMem::new(0x1000, 16);
        assert_eq!(f.read(&u, 0x1000, 1, None), Err(Errno::EBADF));
        assert_eq!(f.write(&u, 0x1000, 1, None), Err(Errno::EINVAL), "the object's default");
        assert!(f.downcast::<Plain>().is_some());
        assert_eq!(poll_events(&f, ev::IN), (ev::IN, None));
        let p = OpenFile::new(Plain(2), oflag::O_PATH);
        assert!(!p.readable() && !p.writable());
    }
}
