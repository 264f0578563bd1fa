//! File system calls: descriptors, reading and writing, paths, metadata,
//! directories, pipes. The tree and the descriptor table are `crate::fs`; these
//! handlers unpack arguments, check user memory and apply Linux's rules.

use super::SyscallFrame;
use crate::arch::{self, copy_to_user, user_cstr, user_slice, user_slice_mut};
use crate::errno::{Errno, SysResult};
use crate::fs::file::{self, oflag, FileRef, Kind, OpenFile};
use crate::fs::vfs::{mode, Data, Device, Ino, PATH_MAX};
use crate::kernel::{kernel, HostSink, Kernel};
use alloc::sync::Arc;
use alloc::vec::Vec;
use onering_abi::{flags, Hostcall};

/// Linux caps one read or write at this many bytes.
const MAX_RW_COUNT: u64 = 0x7fff_f000;
const IOV_MAX: u64 = 1024;
pub(super) const AT_FDCWD: u64 = -100i64 as u64;
pub(super) const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
const AT_REMOVEDIR: u64 = 0x200;
pub(super) const AT_EMPTY_PATH: u64 = 0x1000;
const AT_EACCESS: u64 = 0x200;
const TIOCGWINSZ: u64 = 0x5413;
const FIONREAD: u64 = 0x541b;
const FIONBIO: u64 = 0x5421;
const F_DUPFD: u64 = 0;
const F_GETFD: u64 = 1;
const F_SETFD: u64 = 2;
const F_GETFL: u64 = 3;
const F_SETFL: u64 = 4;
const F_DUPFD_CLOEXEC: u64 = 1030;
const FD_CLOEXEC: u64 = 1;

// ---- helpers ----------------------------------------------------------------------

pub(super) fn file(k: &Kernel, fd: u64) -> Result<FileRef, Errno> {
    k.proc().fds.get(fd).cloned()
}

/// The path argument at `addr`.
pub(super) fn path_arg(k: &Kernel, addr: u64) -> Result<Vec<u8>, Errno> {
    let p = user_cstr(&k.space, addr, PATH_MAX - 1)?;
    if p.is_empty() {
        return Err(Errno::ENOENT);
    }
    Ok(p.to_vec())
}

/// Whether `dirfd` is AT_FDCWD (an int: the upper half of the register does not count).
fn is_cwd(dirfd: u64) -> bool {
    dirfd as i32 == AT_FDCWD as i32
}

/// Where a relative path starts for `*at` calls: the cwd, or the directory `dirfd`.
pub(super) fn base_dir(k: &Kernel, dirfd: u64, path: &[u8]) -> Result<Ino, Errno> {
    if path.first() == Some(&b'/') || is_cwd(dirfd) {
        return Ok(k.proc().cwd);
    }
    let f = file(k, dirfd)?;
    let ino = match f.kind {
        Kind::Node(ino) => ino,
        _ => return Err(Errno::ENOTDIR),
    };
    if !k.vfs.node(ino).is_dir() {
        return Err(Errno::ENOTDIR);
    }
    Ok(ino)
}

// ---- reading and writing ----------------------------------------------------------

/// Reads into user memory at `addr` from descriptor `fd` at `offset` (None: the
/// file's offset). The hot path: no allocation, no reference counting.
fn read_file(k: &mut Kernel, fd: u64, addr: u64, len: u64, offset: Option<u64>) -> SysResult {
    let len = len.min(MAX_RW_COUNT);
    let Kernel { procs, space, vfs, rng, flags, .. } = k;
    let fds = &crate::kernel::cur_ref(procs).fds;
    let of = fds.get(fd)?;
    if !of.readable() {
        return Err(Errno::EBADF);
    }
    let n = match &of.kind {
        Kind::PipeRead(p) => {
            if offset.is_some() {
                return Err(Errno::ESPIPE);
            }
            // Only what the pipe holds is touched (a large untouched buffer is not
            // backed for nothing).
            let buf = user_slice_mut(space, addr, len)?;
            let n = p.lock().read(buf)?;
            if n > 0 {
                crate::sched::wake_all(file::pipe_key(p)); // writers waiting for room
            }
            return Ok(n as u64);
        }
        Kind::PipeWrite(_) => return Err(Errno::EBADF),
        Kind::EventFd(e) => {
            if offset.is_some() {
                return Err(Errno::ESPIPE);
            }
            let key = of.wait_key().unwrap_or(0);
            return super::poll::eventfd_read(space, e, key, addr, len);
        }
        Kind::Epoll(_) => return Err(Errno::EINVAL),
        Kind::Node(ino) => match vfs.device(*ino) {
            Some(Device::Null) => 0,
            Some(Device::Zero) => {
                user_slice_mut(space, addr, len)?.fill(0);
                len as usize
            }
            Some(Device::Random) => {
                rng.fill(user_slice_mut(space, addr, len)?);
                len as usize
            }
            Some(Device::Stdin) => {
                let buf = user_slice_mut(space, addr, len)?;
                if *flags & flags::STDIN == 0 || buf.is_empty() {
                    0
                } else {
                    let r = arch::hostcall(Hostcall::Read, &[buf.as_ptr() as u64, buf.len() as u64]) as i64;
                    if r < 0 {
                        return Err(Errno::EIO);
                    }
                    (r as usize).min(buf.len())
                }
            }
            Some(Device::Stdout | Device::Stderr) => return Err(Errno::EBADF),
            None => {
                let at = offset.unwrap_or(of.offset());
                let want = len.min(vfs.node(*ino).size().saturating_sub(at));
                let buf = user_slice_mut(space, addr, want)?;
                let n = vfs.read(*ino, at, buf)?;
                if offset.is_none() {
                    of.set_offset(at + n as u64);
                }
                n
            }
        },
    };
    Ok(n as u64)
}

/// Writes user memory at `addr` to descriptor `fd` at `offset` (None: the file's
/// offset).
fn write_file(k: &mut Kernel, fd: u64, addr: u64, len: u64, offset: Option<u64>) -> SysResult {
    let len = len.min(MAX_RW_COUNT);
    let Kernel { procs, space, vfs, console, .. } = k;
    let fds = &crate::kernel::cur_ref(procs).fds;
    let of = fds.get(fd)?;
    if !of.writable() {
        return Err(Errno::EBADF);
    }
    match &of.kind {
        Kind::PipeWrite(p) => {
            if offset.is_some() {
                return Err(Errno::ESPIPE);
            }
            let data = user_slice(space, addr, len)?;
            let n = p.lock().write(data)?;
            if n > 0 {
                crate::sched::wake_all(file::pipe_key(p)); // readers waiting for data
            }
            Ok(n as u64)
        }
        Kind::PipeRead(_) => Err(Errno::EBADF),
        Kind::EventFd(e) => {
            if offset.is_some() {
                return Err(Errno::ESPIPE);
            }
            super::poll::eventfd_write(space, e, of.wait_key().unwrap_or(0), addr, len)
        }
        Kind::Epoll(_) => Err(Errno::EINVAL),
        Kind::Node(ino) => match vfs.device(*ino) {
            // Like Linux, /dev/null does not even look at the buffer.
            Some(Device::Null | Device::Zero | Device::Random) => Ok(len),
            Some(Device::Stdout) | Some(Device::Stderr) => {
                let fd = if vfs.device(*ino) == Some(Device::Stdout) { 1 } else { 2 };
                let data = user_slice(space, addr, len)?;
                if data.is_empty() {
                    return Ok(0);
                }
                console.write(fd, data, addr, &mut HostSink)
            }
            Some(Device::Stdin) => Err(Errno::EBADF),
            None => {
                let data = user_slice(space, addr, len)?;
                let at = match offset {
                    Some(o) => o,
                    None if of.flags() & oflag::O_APPEND != 0 => vfs.node(*ino).size(),
                    None => of.offset(),
                };
                let n = vfs.write(*ino, at, data, crate::kernel::real_now())?;
                if offset.is_none() {
                    of.set_offset(at + n as u64);
                }
                Ok(n as u64)
            }
        },
    }
}

/// Runs `op` on descriptor `fd`; where a pipe without O_NONBLOCK would return
/// EAGAIN, blocks until the pipe changes and tries again (EINTR if a signal comes).
fn blocking(fd: u64, mut op: impl FnMut(&mut Kernel) -> SysResult) -> SysResult {
    loop {
        let key = {
            let k = &mut *kernel();
            let r = op(k);
            if r != Err(Errno::EAGAIN) {
                return r;
            }
            // Only pipes and eventfds without O_NONBLOCK block.
            let key = match k.proc().fds.get(fd) {
                Ok(of) if of.flags() & oflag::O_NONBLOCK == 0 => of.wait_key(),
                _ => None,
            };
            let Some(key) = key else {
                return r;
            };
            crate::sched::prepare_wait(key);
            key
        };
        let w = crate::sched::block(None);
        crate::sched::finish_wait(key);
        if w == crate::sched::Wake::Interrupted {
            return Err(Errno::ERESTARTSYS);
        }
    }
}

pub fn read(f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, len, ..] = f.args();
    // (The lock is released before the slow path takes it again.)
    let r = read_file(&mut kernel(), fd, addr, len, None);
    match r {
        Err(Errno::EAGAIN) => blocking(fd, |k| read_file(k, fd, addr, len, None)),
        r => r,
    }
}

pub fn write(f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, len, ..] = f.args();
    let r = write_file(&mut kernel(), fd, addr, len, None);
    let mut done = match r {
        Err(Errno::EAGAIN) => 0,
        Ok(n) if n < len.min(MAX_RW_COUNT) && n > 0 => n,
        r => return r,
    };
    // A blocking pipe takes everything, waiting for room as needed.
    loop {
        let is_blocking_pipe = {
            let k = kernel();
            file(&k, fd).is_ok_and(|of| of.wait_key().is_some() && of.flags() & oflag::O_NONBLOCK == 0)
        };
        if !is_blocking_pipe {
            return if done > 0 { Ok(done) } else { Err(Errno::EAGAIN) };
        }
        match blocking(fd, |k| write_file(k, fd, addr + done, len - done, None)) {
            Ok(n) => {
                done += n;
                if n == 0 || done >= len.min(MAX_RW_COUNT) {
                    return Ok(done);
                }
            }
            Err(e) => return if done > 0 { Ok(done) } else { Err(e) },
        }
    }
}

/// A pread/pwrite offset: EINVAL if negative, or if offset + count overflows.
fn check_offset(off: u64, len: u64) -> Result<u64, Errno> {
    match (off as i64).checked_add(len.min(MAX_RW_COUNT) as i64) {
        Some(_) if (off as i64) >= 0 => Ok(off),
        _ => Err(Errno::EINVAL),
    }
}

pub fn pread64(f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, len, off, ..] = f.args();
    let k = &mut *kernel();
    read_file(k, fd, addr, len, Some(check_offset(off, len)?))
}

pub fn pwrite64(f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, len, off, ..] = f.args();
    let k = &mut *kernel();
    write_file(k, fd, addr, len, Some(check_offset(off, len)?))
}

/// The iovec array at `iov`: read and checked as a whole first, as Linux does (a bad
/// array is EFAULT; lengths adding up past isize::MAX are EINVAL).
fn iovecs(k: &Kernel, iov: u64, count: u64) -> Result<Vec<(u64, u64)>, Errno> {
    if count > IOV_MAX {
        return Err(Errno::EINVAL);
    }
    let raw = user_slice(&k.space, iov, count * 16)?;
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    let v: Vec<(u64, u64)> = raw.chunks_exact(16).map(|c| (word(&c[..8]), word(&c[8..]))).collect();
    v.iter()
        .try_fold(0u64, |sum, (_, len)| sum.checked_add(*len).filter(|s| *s <= isize::MAX as u64))
        .ok_or(Errno::EINVAL)?;
    Ok(v)
}

/// Runs `op` over each iovec; stops at the first short transfer or error, reporting
/// what was transferred before an error, as Linux does.
fn vectored(iov: Vec<(u64, u64)>, mut op: impl FnMut(u64, u64) -> SysResult) -> SysResult {
    let mut total: u64 = 0;
    for (base, len) in iov {
        let want = len.min(MAX_RW_COUNT - total);
        match op(base, want) {
            Ok(n) => {
                total += n;
                if n < want {
                    break;
                }
            }
            Err(e) if total == 0 => return Err(e),
            Err(_) => break,
        }
        if total >= MAX_RW_COUNT {
            break;
        }
    }
    Ok(total)
}

/// readv/writev: `op` is read_file or write_file.
fn vectored_io(
    k: &mut Kernel,
    f: &SyscallFrame,
    op: fn(&mut Kernel, u64, u64, u64, Option<u64>) -> SysResult,
) -> SysResult {
    let [fd, iov, count, ..] = f.args();
    k.proc().fds.get(fd)?;
    let v = iovecs(k, iov, count)?;
    vectored(v, |b, l| op(k, fd, b, l, None))
}

pub fn readv(f: &mut SyscallFrame) -> SysResult {
    let g = *f;
    blocking(f.rdi, |k| vectored_io(k, &g, read_file))
}

pub fn writev(f: &mut SyscallFrame) -> SysResult {
    let g = *f;
    blocking(f.rdi, |k| vectored_io(k, &g, write_file))
}

// ---- opening and closing ----------------------------------------------------------

/// What opening found: a descriptor, or an end of a named pipe that (blocking) must
/// wait for the other end.
enum Opened {
    Fd(u64),
    /// `seen`: how many times the other end had been opened (see `file::fifo_end`).
    Fifo {
        end: FileRef,
        write: bool,
        cloexec: bool,
        seen: u64,
    },
}

fn open_at(k: &mut Kernel, dirfd: u64, path_addr: u64, flags: u64, mode_arg: u64) -> Result<Opened, Errno> {
    let flags = flags as u32;
    let path = path_arg(k, path_addr)?;
    let base = base_dir(k, dirfd, &path)?;
    let acc = flags & oflag::O_ACCMODE;
    if acc == 3 {
        return Err(Errno::EINVAL);
    }
    let now = k.now_real();
    let ino = if flags & oflag::O_CREAT != 0 {
        // "name/" with O_CREAT names a directory, which open cannot create or open.
        if path.ends_with(b"/") {
            return Err(Errno::EISDIR);
        }
        let (dir, name) = k.vfs.parent_of(base, &path)?;
        match k.vfs.lookup(dir, name, flags & oflag::O_NOFOLLOW == 0) {
            Ok(_) if flags & oflag::O_EXCL != 0 => return Err(Errno::EEXIST),
            Ok(ino) => ino,
            Err(Errno::ENOENT) if !name.is_empty() && name != b"." && name != b".." => {
                let m = (mode_arg as u32) & !k.proc().umask;
                // A dangling symbolic link: create what it points at, as Linux does.
                let (dir, name) = match k.vfs.lookup(dir, name, false) {
                    Ok(link) if flags & oflag::O_EXCL == 0 => {
                        let target = k.vfs.link_target(link)?.to_vec();
                        if target.ends_with(b"/") {
                            return Err(Errno::EISDIR); // it names a directory
                        }
                        let (d, n) = k.vfs.parent_of(dir, &target)?;
                        (d, n.to_vec())
                    }
                    Ok(_) => return Err(Errno::EEXIST),
                    Err(_) => (dir, name.to_vec()),
                };
                k.vfs.create(dir, &name, m, false, now)?
            }
            Err(e) => return Err(e),
        }
    } else {
        k.vfs.lookup(base, &path, flags & oflag::O_NOFOLLOW == 0)?
    };
    let node = k.vfs.node(ino);
    if flags & oflag::O_PATH == 0 {
        if matches!(node.data, Data::Symlink(_)) {
            return Err(Errno::ELOOP);
        }
        if flags & oflag::O_DIRECTORY != 0 && !node.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if node.is_dir() && acc != oflag::O_RDONLY {
            return Err(Errno::EISDIR);
        }
        let regular = matches!(node.data, Data::File(_) | Data::Static(_));
        if acc != oflag::O_RDONLY && regular && node.readonly {
            return Err(Errno::EROFS);
        }
        if flags & oflag::O_TRUNC != 0 && acc != oflag::O_RDONLY && regular {
            k.vfs.truncate(ino, 0, now)?;
        }
    }
    let cloexec = flags & oflag::O_CLOEXEC != 0;
    if let Some(p) = k.vfs.fifo(ino).filter(|_| flags & oflag::O_PATH == 0) {
        let write = match acc {
            oflag::O_RDONLY => false,
            oflag::O_WRONLY => true,
            _ => return Err(Errno::EINVAL), // read-write named pipes are not offered
        };
        if write && flags & oflag::O_NONBLOCK != 0 && p.lock().readers == 0 {
            return Err(Errno::ENXIO); // as Linux: nobody to read
        }
        let (end, seen) = file::fifo_end(&p, write, flags, k.vfs.hold(ino));
        crate::sched::wake_all(file::pipe_key(&p)); // an opener waiting for this end
        return Ok(Opened::Fifo { end, write, cloexec, seen });
    }
    let keep = oflag::O_ACCMODE | oflag::O_APPEND | oflag::O_NONBLOCK | oflag::O_PATH | oflag::O_DIRECTORY;
    let file = Arc::new(OpenFile::new(Kind::Node(ino), flags & keep).holding(k.vfs.hold(ino)));
    k.cur().fds.insert(file, cloexec).map(Opened::Fd)
}

/// open/openat: a named pipe opened without O_NONBLOCK waits for its other end, as
/// on Linux (a reader for a writer, a writer for a reader).
fn open_file(dirfd: u64, path: u64, flags: u64, mode: u64) -> SysResult {
    let opened = open_at(&mut kernel(), dirfd, path, flags, mode)?;
    let (end, write, cloexec, seen) = match opened {
        Opened::Fd(fd) => return Ok(fd),
        Opened::Fifo { end, write, cloexec, seen } => (end, write, cloexec, seen),
    };
    let Some(key) = end.pipe_key() else { return Err(Errno::EINVAL) };
    loop {
        {
            let k = &mut *kernel();
            // The other end is open, or was opened (and maybe closed) meanwhile.
            let ready = match &end.kind {
                Kind::PipeRead(p) | Kind::PipeWrite(p) => {
                    let p = p.lock();
                    flags as u32 & oflag::O_NONBLOCK != 0
                        || if write { p.readers > 0 || p.r_opens != seen } else { p.writers > 0 || p.w_opens != seen }
                }
                _ => true,
            };
            if ready {
                return k.cur().fds.insert(end, cloexec);
            }
            crate::sched::prepare_wait(key);
        }
        let w = crate::sched::block(None);
        crate::sched::finish_wait(key);
        if w == crate::sched::Wake::Interrupted {
            return Err(Errno::ERESTARTSYS); // dropping `end` closes it again
        }
    }
}

pub fn open(f: &mut SyscallFrame) -> SysResult {
    let [path, flags, mode, ..] = f.args();
    open_file(AT_FDCWD, path, flags, mode)
}

pub fn openat(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, flags, mode, ..] = f.args();
    open_file(dirfd, path, flags, mode)
}

pub fn close(f: &mut SyscallFrame) -> SysResult {
    kernel().cur().fds.close(f.rdi).map(|_| 0)
}

pub fn lseek(f: &mut SyscallFrame) -> SysResult {
    let [fd, off, whence, ..] = f.args();
    let k = kernel();
    let file = file(&k, fd)?;
    let of = &*file;
    let ino = match of.kind {
        Kind::Node(ino) => ino,
        _ => return Err(Errno::ESPIPE),
    };
    if k.vfs.device(ino).is_some() {
        return Ok(0);
    }
    let base = match whence {
        0 => 0,
        1 => of.offset() as i64,
        2 => k.vfs.node(ino).size() as i64,
        _ => return Err(Errno::EINVAL),
    };
    let new = base.checked_add(off as i64).filter(|n| *n >= 0).ok_or(Errno::EINVAL)?;
    of.set_offset(new as u64);
    Ok(new as u64)
}

pub fn dup(f: &mut SyscallFrame) -> SysResult {
    let k = &mut *kernel();
    let file = file(k, f.rdi)?;
    k.cur().fds.insert(file, false)
}

pub fn dup2(f: &mut SyscallFrame) -> SysResult {
    let [old, new, ..] = f.args();
    let k = &mut *kernel();
    let file = file(k, old)?;
    if old == new {
        return Ok(new);
    }
    k.cur().fds.install(new, file, false)
}

pub fn dup3(f: &mut SyscallFrame) -> SysResult {
    let [old, new, flags, ..] = f.args();
    if old == new || flags & !(oflag::O_CLOEXEC as u64) != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let file = file(k, old)?;
    k.cur().fds.install(new, file, flags != 0)
}

pub fn fcntl(f: &mut SyscallFrame) -> SysResult {
    let [fd, cmd, arg, ..] = f.args();
    let k = &mut *kernel();
    let file = file(k, fd)?;
    match cmd {
        F_DUPFD | F_DUPFD_CLOEXEC => k.cur().fds.insert_from(arg as usize, file, cmd == F_DUPFD_CLOEXEC),
        F_GETFD => Ok(u64::from(k.proc().fds.cloexec(fd)?)),
        F_SETFD => k.cur().fds.set_cloexec(fd, arg & FD_CLOEXEC != 0).map(|_| 0),
        F_GETFL => Ok(u64::from(file.flags())),
        F_SETFL => {
            let of = &*file;
            of.set_flags((of.flags() & !oflag::SETTABLE) | (arg as u32 & oflag::SETTABLE));
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

pub fn ioctl(f: &mut SyscallFrame) -> SysResult {
    let [fd, request, arg, ..] = f.args();
    let k = &mut *kernel();
    let file = file(k, fd)?;
    let of = &*file;
    let device = match of.kind {
        Kind::Node(ino) => k.vfs.device(ino),
        _ => None,
    };
    let terminal = matches!(device, Some(Device::Stdin | Device::Stdout | Device::Stderr)) && k.winsize != 0;
    match request {
        TIOCGWINSZ if terminal => {
            let mut ws = [0u8; 8];
            ws[0..2].copy_from_slice(&((k.winsize >> 16) as u16).to_le_bytes());
            ws[2..4].copy_from_slice(&(k.winsize as u16).to_le_bytes());
            copy_to_user(&k.space, arg, &ws)?;
            Ok(0)
        }
        FIONBIO => {
            let mut b = [0u8; 4]; // an int
            arch::copy_from_user(&k.space, arg, &mut b)?;
            if u32::from_le_bytes(b) != 0 {
                of.set_flags(of.flags() | oflag::O_NONBLOCK);
            } else {
                of.set_flags(of.flags() & !oflag::O_NONBLOCK);
            }
            Ok(0)
        }
        FIONREAD => {
            let n = match &of.kind {
                Kind::PipeRead(p) => p.lock().available() as u64,
                Kind::Node(ino) if device.is_none() && !k.vfs.node(*ino).is_dir() => {
                    k.vfs.node(*ino).size().saturating_sub(of.offset())
                }
                _ => 0,
            };
            copy_to_user(&k.space, arg, &(n as u32).to_le_bytes())?;
            Ok(0)
        }
        _ => Err(Errno::ENOTTY),
    }
}

fn make_pipe(fds_addr: u64, flags: u64) -> SysResult {
    let allowed = (oflag::O_CLOEXEC | oflag::O_NONBLOCK) as u64;
    if flags & !allowed != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    k.space.check(fds_addr, 8, true)?;
    let (r, w) = file::pipe(flags as u32);
    let cloexec = flags & oflag::O_CLOEXEC as u64 != 0;
    let rfd = k.cur().fds.insert(r, cloexec)?;
    let wfd = match k.cur().fds.insert(w, cloexec) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = k.cur().fds.close(rfd);
            return Err(e);
        }
    };
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&(rfd as u32).to_le_bytes());
    out[4..].copy_from_slice(&(wfd as u32).to_le_bytes());
    copy_to_user(&k.space, fds_addr, &out)?;
    Ok(0)
}

pub fn pipe(f: &mut SyscallFrame) -> SysResult {
    make_pipe(f.rdi, 0)
}

pub fn pipe2(f: &mut SyscallFrame) -> SysResult {
    make_pipe(f.rdi, f.rsi)
}

// ---- metadata ---------------------------------------------------------------------

/// What `stat` reports about an open file or a node.
struct Meta {
    ino: u64,
    mode: u32,
    size: u64,
    rdev: (u32, u32),
    mtime: u64,
    atime: u64,
    nlink: u64,
    uid: u32,
    gid: u32,
}

fn meta_of_node(k: &Kernel, ino: Ino) -> Meta {
    let n = k.vfs.node(ino);
    let rdev = match k.vfs.device(ino) {
        Some(Device::Null) => (1, 3),
        Some(Device::Zero) => (1, 5),
        Some(Device::Random) => (1, 9),
        Some(_) => (136, 0),
        None => (0, 0),
    };
    Meta {
        ino: ino as u64 + 1,
        mode: n.st_mode(),
        size: n.size(),
        rdev,
        mtime: n.mtime,
        atime: n.atime,
        nlink: if n.is_dir() { 2 } else { u64::from(n.nlink) },
        uid: n.uid,
        gid: n.gid,
    }
}

fn meta_of_file(k: &Kernel, f: &FileRef) -> Meta {
    match &f.kind {
        Kind::Node(ino) => meta_of_node(k, *ino),
        Kind::PipeRead(p) | Kind::PipeWrite(p) => Meta {
            ino: Arc::as_ptr(p) as u64 & 0xffff_ffff,
            mode: mode::S_IFIFO | 0o600,
            size: 0,
            rdev: (0, 0),
            mtime: 0,
            atime: 0,
            nlink: 1,
            uid: k.uid as u32,
            gid: k.gid as u32,
        },
        // Anonymous inodes, as Linux shows them: no file type, mode 0600.
        Kind::EventFd(_) | Kind::Epoll(_) => Meta {
            ino: f.wait_key().unwrap_or(0) & 0xffff_ffff,
            mode: 0o600,
            size: 0,
            rdev: (0, 0),
            mtime: 0,
            atime: 0,
            nlink: 1,
            uid: k.uid as u32,
            gid: k.gid as u32,
        },
    }
}

fn write_stat(k: &Kernel, addr: u64, m: &Meta) -> SysResult {
    let mut b = [0u8; 144];
    let put = |b: &mut [u8], at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut b, 0, 0x2a); // st_dev
    put(&mut b, 8, m.ino);
    put(&mut b, 16, m.nlink);
    b[24..28].copy_from_slice(&m.mode.to_le_bytes());
    b[28..32].copy_from_slice(&m.uid.to_le_bytes());
    b[32..36].copy_from_slice(&m.gid.to_le_bytes());
    put(&mut b, 40, (u64::from(m.rdev.0) << 8) | u64::from(m.rdev.1));
    put(&mut b, 48, m.size);
    put(&mut b, 56, 4096);
    put(&mut b, 64, m.size.div_ceil(512));
    for (t, v) in [(72, m.atime), (88, m.mtime), (104, m.mtime)] {
        put(&mut b, t, v / 1_000_000_000);
        put(&mut b, t + 8, v % 1_000_000_000);
    }
    copy_to_user(&k.space, addr, &b)?;
    Ok(0)
}

/// Resolves a path argument for the stat family (with AT_EMPTY_PATH: `dirfd` itself).
fn stat_target(k: &Kernel, dirfd: u64, path_addr: u64, flags: u64) -> Result<Meta, Errno> {
    if flags & AT_EMPTY_PATH != 0 && user_cstr(&k.space, path_addr, PATH_MAX - 1)?.is_empty() {
        if is_cwd(dirfd) {
            return Ok(meta_of_node(k, k.proc().cwd));
        }
        return Ok(meta_of_file(k, &file(k, dirfd)?));
    }
    let path = path_arg(k, path_addr)?;
    let base = base_dir(k, dirfd, &path)?;
    let ino = k.vfs.lookup(base, &path, flags & AT_SYMLINK_NOFOLLOW == 0)?;
    Ok(meta_of_node(k, ino))
}

pub fn fstat(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    let m = meta_of_file(&k, &file(&k, f.rdi)?);
    write_stat(&k, f.rsi, &m)
}

pub fn stat(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    let m = stat_target(&k, AT_FDCWD, f.rdi, 0)?;
    write_stat(&k, f.rsi, &m)
}

pub fn lstat(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    let m = stat_target(&k, AT_FDCWD, f.rdi, AT_SYMLINK_NOFOLLOW)?;
    write_stat(&k, f.rsi, &m)
}

pub fn newfstatat(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, buf, flags, ..] = f.args();
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let k = kernel();
    let m = stat_target(&k, dirfd, path, flags)?;
    write_stat(&k, buf, &m)
}

pub fn statx(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, flags, _mask, buf, ..] = f.args();
    let k = kernel();
    let m = stat_target(&k, dirfd, path, flags)?;
    let mut b = [0u8; 256];
    let put32 = |b: &mut [u8], at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let put64 = |b: &mut [u8], at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put32(&mut b, 0, 0x7ff); // STATX_BASIC_STATS
    put32(&mut b, 4, 4096);
    put32(&mut b, 16, m.nlink as u32);
    put32(&mut b, 20, m.uid);
    put32(&mut b, 24, m.gid);
    b[28..30].copy_from_slice(&(m.mode as u16).to_le_bytes());
    put64(&mut b, 32, m.ino);
    put64(&mut b, 40, m.size);
    put64(&mut b, 48, m.size.div_ceil(512));
    for (t, v) in [(64, m.atime), (96, m.mtime), (112, m.mtime)] {
        put64(&mut b, t, v / 1_000_000_000);
        put32(&mut b, t + 8, (v % 1_000_000_000) as u32);
    }
    put32(&mut b, 128, m.rdev.0);
    put32(&mut b, 132, m.rdev.1);
    put32(&mut b, 136, 0);
    put32(&mut b, 140, 0x2a);
    copy_to_user(&k.space, buf, &b)?;
    Ok(0)
}

fn check_access(k: &Kernel, dirfd: u64, path_addr: u64, how: u64, flags: u64) -> SysResult {
    if how & !7 != 0 || flags & !(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let path = path_arg(k, path_addr)?;
    let base = base_dir(k, dirfd, &path)?;
    let ino = k.vfs.lookup(base, &path, flags & AT_SYMLINK_NOFOLLOW == 0)?;
    let node = k.vfs.node(ino);
    if how & 2 != 0 && node.readonly && !node.is_dir() && k.vfs.device(ino).is_none() {
        return Err(Errno::EROFS);
    }
    if how & 1 != 0 && node.mode & 0o111 == 0 {
        return Err(Errno::EACCES);
    }
    Ok(0)
}

pub fn access(f: &mut SyscallFrame) -> SysResult {
    check_access(&kernel(), AT_FDCWD, f.rdi, f.rsi, 0)
}

pub fn faccessat(f: &mut SyscallFrame) -> SysResult {
    // The original faccessat has no flags argument (faccessat2 does).
    let [dirfd, path, how, ..] = f.args();
    check_access(&kernel(), dirfd, path, how, 0)
}

pub fn faccessat2(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, how, flags, ..] = f.args();
    check_access(&kernel(), dirfd, path, how, flags)
}

// ---- directories and names --------------------------------------------------------

pub fn getcwd(f: &mut SyscallFrame) -> SysResult {
    let [buf, size, ..] = f.args();
    let k = kernel();
    let mut path = k.vfs.path_of(k.proc().cwd)?;
    path.push(0);
    if (path.len() as u64) > size {
        return Err(Errno::ERANGE);
    }
    copy_to_user(&k.space, buf, &path)?;
    Ok(path.len() as u64)
}

pub fn chdir(f: &mut SyscallFrame) -> SysResult {
    let k = &mut *kernel();
    let path = path_arg(k, f.rdi)?;
    let ino = k.vfs.lookup(k.proc().cwd, &path, true)?;
    set_cwd(k, ino)
}

pub fn fchdir(f: &mut SyscallFrame) -> SysResult {
    let k = &mut *kernel();
    let of = file(k, f.rdi)?;
    let Kind::Node(ino) = of.kind else {
        return Err(Errno::ENOTDIR);
    };
    set_cwd(k, ino)
}

fn set_cwd(k: &mut Kernel, ino: Ino) -> SysResult {
    if !k.vfs.node(ino).is_dir() {
        return Err(Errno::ENOTDIR);
    }
    let hold = k.vfs.hold(ino);
    let p = k.cur();
    p.cwd_hold = hold;
    p.cwd = ino;
    Ok(0)
}

pub fn getdents64(f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, count, ..] = f.args();
    let k = kernel();
    let file = file(&k, fd)?;
    let of = &*file;
    let Kind::Node(dir) = of.kind else {
        return Err(Errno::ENOTDIR);
    };
    if !of.readable() {
        return Err(Errno::EBADF);
    }
    let count = count.min(u64::from(u32::MAX));
    let mut out: Vec<u8> = Vec::new();
    let mut pos = of.offset() as usize;
    while let Some((name, ino)) = k.vfs.entry_at(dir, pos)? {
        let reclen = (19 + name.len() + 1).next_multiple_of(8);
        if (out.len() + reclen) as u64 > count {
            if out.is_empty() {
                return Err(Errno::EINVAL);
            }
            break;
        }
        let d_type: u8 = match k.vfs.node(ino).st_mode() & 0o170000 {
            mode::S_IFDIR => 4,
            mode::S_IFREG => 8,
            mode::S_IFLNK => 10,
            mode::S_IFCHR => 2,
            _ => 0,
        };
        let start = out.len();
        out.resize(start + reclen, 0);
        out[start..start + 8].copy_from_slice(&(ino as u64 + 1).to_le_bytes());
        out[start + 8..start + 16].copy_from_slice(&(pos as u64 + 1).to_le_bytes());
        out[start + 16..start + 18].copy_from_slice(&(reclen as u16).to_le_bytes());
        out[start + 18] = d_type;
        out[start + 19..start + 19 + name.len()].copy_from_slice(name);
        pos += 1;
    }
    copy_to_user(&k.space, buf, &out)?;
    of.set_offset(pos as u64);
    Ok(out.len() as u64)
}

fn read_link(k: &Kernel, dirfd: u64, path_addr: u64, buf: u64, size: u64) -> SysResult {
    if (size as i64) <= 0 {
        return Err(Errno::EINVAL);
    }
    let path = path_arg(k, path_addr)?;
    let target: Vec<u8> = if path == b"/proc/self/exe" {
        k.exe.clone()
    } else {
        let base = base_dir(k, dirfd, &path)?;
        let ino = k.vfs.lookup(base, &path, false)?;
        k.vfs.link_target(ino)?.to_vec()
    };
    let n = target.len().min(size as usize);
    copy_to_user(&k.space, buf, &target[..n])?;
    Ok(n as u64)
}

pub fn readlink(f: &mut SyscallFrame) -> SysResult {
    let [path, buf, size, ..] = f.args();
    read_link(&kernel(), AT_FDCWD, path, buf, size)
}

pub fn readlinkat(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, buf, size, ..] = f.args();
    read_link(&kernel(), dirfd, path, buf, size)
}

fn remove_at(dirfd: u64, path_addr: u64, flags: u64) -> SysResult {
    if flags & !AT_REMOVEDIR != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let path = path_arg(k, path_addr)?;
    let base = base_dir(k, dirfd, &path)?;
    let (dir, name) = k.vfs.parent_of(base, &path)?;
    if path.ends_with(b"/") && flags & AT_REMOVEDIR == 0 {
        // "name/" must be a directory (through a link, too), which unlink refuses.
        let ino = k.vfs.lookup(base, &path, true)?;
        return Err(if k.vfs.node(ino).is_dir() { Errno::EISDIR } else { Errno::ENOTDIR });
    }
    k.vfs.remove(dir, name, flags & AT_REMOVEDIR != 0).map(|_| 0)
}

/// A new non-directory cannot be called "name/": ENOENT (EEXIST if the name is
/// taken), as Linux says for link, symlink and mknod.
pub(super) fn new_file_name(k: &Kernel, base: Ino, path: &[u8]) -> Result<(), Errno> {
    if path.len() > 1 && path.ends_with(b"/") {
        return Err(if k.vfs.lookup(base, path, false).is_ok() { Errno::EEXIST } else { Errno::ENOENT });
    }
    Ok(())
}

fn make_link(target_addr: u64, dirfd: u64, path_addr: u64) -> SysResult {
    let k = &mut *kernel();
    let target = path_arg(k, target_addr)?;
    let path = path_arg(k, path_addr)?;
    let base = base_dir(k, dirfd, &path)?;
    new_file_name(k, base, &path)?;
    let (dir, name) = k.vfs.parent_of(base, &path)?;
    let now = k.now_real();
    k.vfs.symlink(dir, name, &target, now).map(|_| 0)
}

pub fn symlink(f: &mut SyscallFrame) -> SysResult {
    make_link(f.rdi, AT_FDCWD, f.rsi)
}

pub fn symlinkat(f: &mut SyscallFrame) -> SysResult {
    make_link(f.rdi, f.rsi, f.rdx)
}

pub fn unlink(f: &mut SyscallFrame) -> SysResult {
    remove_at(AT_FDCWD, f.rdi, 0)
}

pub fn unlinkat(f: &mut SyscallFrame) -> SysResult {
    remove_at(f.rdi, f.rsi, f.rdx)
}

pub fn rmdir(f: &mut SyscallFrame) -> SysResult {
    remove_at(AT_FDCWD, f.rdi, AT_REMOVEDIR)
}

fn make_dir(dirfd: u64, path_addr: u64, mode_arg: u64) -> SysResult {
    let k = &mut *kernel();
    let path = path_arg(k, path_addr)?;
    let base = base_dir(k, dirfd, &path)?;
    let (dir, name) = k.vfs.parent_of(base, &path)?;
    let now = k.now_real();
    let m = mode_arg as u32 & !k.proc().umask;
    k.vfs.create(dir, name, m, true, now).map(|_| 0)
}

pub fn mkdir(f: &mut SyscallFrame) -> SysResult {
    make_dir(AT_FDCWD, f.rdi, f.rsi)
}

pub fn mkdirat(f: &mut SyscallFrame) -> SysResult {
    make_dir(f.rdi, f.rsi, f.rdx)
}

fn rename_at(olddir: u64, old: u64, newdir: u64, new: u64, flags: u64) -> SysResult {
    if flags != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let (from, to) = (path_arg(k, old)?, path_arg(k, new)?);
    let (fbase, tbase) = (base_dir(k, olddir, &from)?, base_dir(k, newdir, &to)?);
    let (fdir, fname) = k.vfs.parent_of(fbase, &from)?;
    let (tdir, tname) = k.vfs.parent_of(tbase, &to)?;
    // A trailing slash on either side requires a directory.
    if (from.ends_with(b"/") || to.ends_with(b"/"))
        && !k.vfs.lookup(fdir, fname, false).is_ok_and(|i| k.vfs.node(i).is_dir())
    {
        return Err(Errno::ENOTDIR);
    }
    k.vfs.rename(fdir, fname, tdir, tname).map(|_| 0)
}

pub fn rename(f: &mut SyscallFrame) -> SysResult {
    rename_at(AT_FDCWD, f.rdi, AT_FDCWD, f.rsi, 0)
}

pub fn renameat(f: &mut SyscallFrame) -> SysResult {
    rename_at(f.rdi, f.rsi, f.rdx, f.r10, 0)
}

pub fn renameat2(f: &mut SyscallFrame) -> SysResult {
    rename_at(f.rdi, f.rsi, f.rdx, f.r10, f.r8)
}

pub fn ftruncate(f: &mut SyscallFrame) -> SysResult {
    let [fd, len, ..] = f.args();
    if (len as i64) < 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let file = file(k, fd)?;
    let of = &*file;
    let Kind::Node(ino) = of.kind else {
        return Err(Errno::EINVAL);
    };
    if !of.writable() {
        return Err(Errno::EINVAL);
    }
    let now = k.now_real();
    k.vfs.truncate(ino, len, now).map(|_| 0)
}

pub fn umask(f: &mut SyscallFrame) -> SysResult {
    let k = &mut *kernel();
    let old = k.proc().umask;
    k.cur().umask = f.rdi as u32 & 0o777;
    Ok(u64::from(old))
}
