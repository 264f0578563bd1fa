//! File system calls: descriptors, reading and writing, paths, metadata,
//! directories, pipes. The tree is `crate::vfs`, the open files `crate::fs`
//! behind `crate::file`; these handlers unpack arguments, apply Linux's rules, and
//! do the waiting that file objects never do.
//!
//! Locks: a process's descriptor table and working directory are read first, then
//! the tree is locked; a descriptor is installed after the tree's lock is dropped
//! (see the lock order in `task::kernel`). A file's operation runs with no lock of
//! the handler's held: a blocked read of stdin or a full pipe holds up nobody else.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::file::{mode, oflag, FileRef, Meta, OpenFile};
use crate::filelock::{Kind, Owner, OFFSET_MAX};
use crate::fs::pipe::{fifo_end, pipe as make_pipe_ends};
use crate::mm::user::{UserMem, UserMemExt};
use crate::task::{filelock, sched, signal, Ctx};
use crate::time::real_now;
use crate::vfs::{Data, Ino, Vfs, PATH_MAX};
use alloc::vec::Vec;

/// Linux caps one read or write at this many bytes.
const MAX_RW_COUNT: u64 = 0x7fff_f000;
const IOV_MAX: u64 = 1024;
pub(super) const AT_FDCWD: u64 = -100i64 as u64;
pub(super) const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
const AT_REMOVEDIR: u64 = 0x200;
pub(super) const AT_EMPTY_PATH: u64 = 0x1000;
const AT_EACCESS: u64 = 0x200;
const FIONBIO: u64 = 0x5421;
const FIONCLEX: u64 = 0x5450;
const FIOCLEX: u64 = 0x5451;
const F_DUPFD: u64 = 0;
const F_GETFD: u64 = 1;
const F_SETFD: u64 = 2;
const F_GETFL: u64 = 3;
const F_SETFL: u64 = 4;
const F_GETLK: u64 = 5;
const F_SETLK: u64 = 6;
const F_SETLKW: u64 = 7;
const F_OFD_GETLK: u64 = 36;
const F_OFD_SETLK: u64 = 37;
const F_OFD_SETLKW: u64 = 38;
const F_DUPFD_CLOEXEC: u64 = 1030;
const FD_CLOEXEC: u64 = 1;
const F_RDLCK: i16 = 0;
const F_WRLCK: i16 = 1;
const F_UNLCK: i16 = 2;
const SEEK_SET: i16 = 0;
const SEEK_CUR: i16 = 1;
const SEEK_END: i16 = 2;
const LOCK_SH: u32 = 1;
const LOCK_EX: u32 = 2;
const LOCK_NB: u32 = 4;
const LOCK_UN: u32 = 8;
/// Linux ignores these (they never worked) and says 0.
const LOCK_MAND: u32 = 32;

// ---- helpers ----------------------------------------------------------------------

/// The path argument at `addr`.
pub(super) fn path_arg(ctx: &Ctx, addr: u64) -> Result<Vec<u8>, Errno> {
    let p = ctx.user.read_cstr(addr, PATH_MAX - 1)?;
    if p.is_empty() {
        return Err(Errno::ENOENT);
    }
    Ok(p)
}

/// Whether `dirfd` is AT_FDCWD (an int: the upper half of the register does not count).
pub(super) fn is_cwd(dirfd: u64) -> bool {
    dirfd as i32 == AT_FDCWD as i32
}

/// What keeps a node found before the tree is locked alive until the caller has
/// locked the tree and is done with it (another thread may close the descriptor or
/// change directory meanwhile, and an unlink would then free the node).
#[allow(dead_code)] // (held for what their drop does)
pub(super) enum Keep {
    Hold(Option<crate::vfs::Hold>),
    File(crate::file::FileRef),
}

/// The working directory, and what keeps it alive.
pub(super) fn cwd(ctx: &Ctx) -> (Ino, Keep) {
    let fs = ctx.proc().fs.lock();
    (fs.cwd, Keep::Hold(fs.cwd_hold.clone()))
}

/// The node of descriptor `fd`, and what keeps it alive; `not_node` if it has none.
pub(super) fn fd_node(ctx: &Ctx, fd: u64, not_node: Errno) -> Result<(Ino, Keep), Errno> {
    let of = ctx.file(fd)?;
    let ino = of.node().ok_or(not_node)?;
    Ok((ino, Keep::File(of)))
}

/// Where a relative path starts for `*at` calls: the working directory, or the
/// node of descriptor `dirfd` (checked to be a directory under the tree's lock by
/// [`dir`]). Read before the tree is locked; kept alive by the `Keep`.
/// A path into /proc brings it up to date first (`fs::proc::refresh`).
pub(super) fn start_dir(ctx: &Ctx, dirfd: u64, path: &[u8]) -> Result<(Ino, Keep), Errno> {
    let start =
        if path.first() == Some(&b'/') || is_cwd(dirfd) { cwd(ctx) } else { fd_node(ctx, dirfd, Errno::ENOTDIR)? };
    let dir = match &start.1 {
        Keep::File(f) => Some(f),
        Keep::Hold(_) => None,
    };
    if crate::fs::proc::reaches_proc(path, dir) {
        crate::fs::proc::refresh(ctx);
    }
    Ok(start)
}

/// `ino` if it is a directory.
pub(super) fn dir(v: &Vfs, ino: Ino) -> Result<Ino, Errno> {
    if v.node(ino).is_dir() {
        Ok(ino)
    } else {
        Err(Errno::ENOTDIR)
    }
}

/// A new non-directory cannot be called "name/": ENOENT (EEXIST if the name is
/// taken), as Linux says for link, symlink and mknod.
pub(super) fn new_file_name(v: &mut Vfs, base: Ino, path: &[u8]) -> Result<(), Errno> {
    if path.len() > 1 && path.ends_with(b"/") {
        return Err(if v.lookup(base, path, false).is_ok() { Errno::EEXIST } else { Errno::ENOENT });
    }
    Ok(())
}

/// Runs `op`, an attempt on `of`, until it does not say EAGAIN or the file does not
/// block (O_NONBLOCK, or nothing to wait on): sleeps on the file's wait key in
/// between, ERESTARTSYS if a signal comes. The attempt is repeated after the
/// thread is on the wait queue, so a change between the two is not missed.
pub(super) fn blocking(of: &OpenFile, mut op: impl FnMut() -> SysResult) -> SysResult {
    loop {
        let r = op();
        if r != Err(Errno::EAGAIN) {
            return r;
        }
        let Some(key) = of.wait_key().filter(|_| !of.nonblocking()) else {
            return r;
        };
        sched::prepare_wait(key);
        let r = op();
        if r != Err(Errno::EAGAIN) {
            sched::finish_wait(key);
            return r;
        }
        let w = sched::block(None);
        sched::finish_wait(key);
        if w == sched::Wake::Interrupted {
            return Err(Errno::ERESTARTSYS);
        }
    }
}

/// A write's error: EPIPE raises SIGPIPE where the file says so.
fn write_error(of: &OpenFile, e: Errno) -> Errno {
    if e == Errno::EPIPE && of.obj().sigpipe() {
        signal::sigpipe();
    }
    e
}

// ---- reading and writing ----------------------------------------------------------

/// Transfers up to this long are first tried under the descriptor table's lock
/// (`Ctx::with_file`), on files that never wait for the host: the common short
/// read or write then costs no reference counting. Anything else, and a try that
/// would block, goes the slow way, with its own reference to the file.
const QUICK_MAX: u64 = 64 * 1024;

pub fn read(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, len, ..] = f.args();
    if len <= QUICK_MAX {
        let quick = ctx.with_file(fd, |of| (!of.long_io()).then(|| of.read(ctx.user, buf, len, None)))?;
        match quick {
            Some(Err(Errno::EAGAIN)) | None => {}
            Some(r) => return r,
        }
    }
    let of = ctx.file(fd)?;
    blocking(&of, || of.read(ctx.user, buf, len, None))
}

pub fn write(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, len, ..] = f.args();
    let len = len.min(MAX_RW_COUNT);
    let mut done = 0;
    if len <= QUICK_MAX {
        let quick = ctx.with_file(fd, |of| {
            if of.long_io() {
                return None;
            }
            let r = of.write(ctx.user, buf, len, None);
            Some((r, of.nonblocking() || of.wait_key().is_none()))
        })?;
        match quick {
            None | Some((Err(Errno::EAGAIN), false)) => {}
            Some((Ok(n), finished)) if n < len && n > 0 && !finished => done = n,
            Some((Ok(n), _)) => return Ok(n),
            Some((Err(e), _)) => {
                if e == Errno::EPIPE {
                    // (SIGPIPE if the file says so, outside the table's lock.)
                    let of = ctx.file(fd)?;
                    return Err(write_error(&of, e));
                }
                return Err(e);
            }
        }
    }
    let of = ctx.file(fd)?;
    write_waiting(&of, ctx.user, buf, len, done)
}

/// Writes `[buf + done, buf + len)` of `mem` to `of`: a blocking pipe takes
/// everything, waiting for room as needed; the count written (`done` included),
/// or the error (SIGPIPE raised for EPIPE) if nothing was.
fn write_waiting(of: &OpenFile, mem: &dyn UserMem, buf: u64, len: u64, mut done: u64) -> SysResult {
    loop {
        match blocking(of, || of.write(mem, buf + done, len - done, None)) {
            Ok(n) => {
                done += n;
                if n == 0 || done >= len || of.nonblocking() || of.wait_key().is_none() {
                    return Ok(done);
                }
            }
            Err(e) => {
                let e = write_error(of, e);
                return if done > 0 { Ok(done) } else { Err(e) };
            }
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

pub fn pread64(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, len, off, ..] = f.args();
    let of = ctx.file(fd)?;
    of.read(ctx.user, buf, len, Some(check_offset(off, len)?))
}

pub fn pwrite64(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, len, off, ..] = f.args();
    let of = ctx.file(fd)?;
    of.write(ctx.user, buf, len, Some(check_offset(off, len)?)).map_err(|e| write_error(&of, e))
}

/// The iovec array at `iov`: read and checked as a whole first, as Linux does (a bad
/// array is EFAULT; lengths adding up past isize::MAX are EINVAL).
pub(super) fn iovecs(user: &dyn UserMem, iov: u64, count: u64) -> Result<Vec<(u64, u64)>, Errno> {
    if count > IOV_MAX {
        return Err(Errno::EINVAL);
    }
    let raw = user.read_vec(iov, count as usize * 16)?;
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    let v: Vec<(u64, u64)> = raw.chunks_exact(16).map(|c| (word(&c[..8]), word(&c[8..]))).collect();
    v.iter()
        .try_fold(0u64, |sum, (_, len)| sum.checked_add(*len).filter(|s| *s <= isize::MAX as u64))
        .ok_or(Errno::EINVAL)?;
    Ok(v)
}

/// Runs `op` over each iovec; stops at the first short transfer or error, reporting
/// what was transferred before an error, as Linux does.
fn vectored(iov: &[(u64, u64)], mut op: impl FnMut(u64, u64) -> SysResult) -> SysResult {
    let mut total: u64 = 0;
    for &(base, len) in iov {
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

pub fn readv(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, iov, count, ..] = f.args();
    let of = ctx.file(fd)?;
    let v = iovecs(ctx.user, iov, count)?;
    blocking(&of, || vectored(&v, |b, l| of.read(ctx.user, b, l, None)))
}

/// A `writev` of at most this many bytes in all is gathered and written as one
/// write: a pipe's writes of up to PIPE_BUF bytes are atomic, and a reader or
/// another writer must never see half of one (musl's stdio writes each line as
/// two iovecs: what it buffered, then the rest).
const GATHER_MAX: u64 = 64 << 10;

pub fn writev(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, iov, count, ..] = f.args();
    let of = ctx.file(fd)?;
    let v = iovecs(ctx.user, iov, count)?;
    let total = v.iter().fold(0u64, |t, (_, l)| t.saturating_add(*l));
    let iov = crate::file::socket::Iov { parts: v };
    if iov.parts.len() > 1 && total <= GATHER_MAX {
        const BASE: u64 = 0x1000;
        let mut data = Vec::new();
        data.try_reserve_exact(total as usize).map_err(|_| Errno::ENOMEM)?;
        data.resize(total as usize, 0);
        // (An unreadable buffer: written one iovec at a time below, up to it, as
        // Linux copies them as it goes.)
        if iov.read_at(ctx.user, 0, &mut data).is_ok() {
            let buf = crate::mm::user::BufferMem { base: BASE, mem: onering_arch::sync::Mutex::new(data) };
            return write_waiting(&of, &buf, BASE, total, 0);
        }
    }
    blocking(&of, || vectored(&iov.parts, |b, l| of.write(ctx.user, b, l, None))).map_err(|e| write_error(&of, e))
}

// ---- opening and closing ----------------------------------------------------------

/// What opening found: an open file, or an end of a named pipe that (blocking) must
/// wait for the other end.
enum Opened {
    File(FileRef),
    /// `seen`: how many times the other end had been opened (see `pipe::fifo_end`).
    Fifo {
        end: FileRef,
        write: bool,
        seen: u64,
    },
}

fn open_at(ctx: &Ctx, dirfd: u64, path_addr: u64, flags: u32, mode_arg: u64) -> Result<Opened, Errno> {
    let path = path_arg(ctx, path_addr)?;
    open_path(ctx, dirfd, &path, flags, mode_arg, true)
}

/// [`open_at`] of `path`; `std`: /dev/stdin, /dev/stdout and /dev/stderr lead to
/// the caller's descriptors ([`open_std`]).
fn open_path(ctx: &Ctx, dirfd: u64, path: &[u8], flags: u32, mode_arg: u64, std: bool) -> Result<Opened, Errno> {
    let (start, _keep) = start_dir(ctx, dirfd, path)?;
    let acc = flags & oflag::O_ACCMODE;
    if acc == 3 {
        return Err(Errno::EINVAL);
    }
    if let Some(f) = crate::fs::proc::reopen(path, flags, ctx.thread.pid()) {
        return f.map(Opened::File);
    }
    let umask = ctx.proc().fs.lock().umask;
    let now = real_now();
    let mut v = ctx.k.vfs.lock();
    let base = dir(&v, start)?;
    let writes = acc != oflag::O_RDONLY;
    // (A volume's file opened with O_CREAT in one hostcall is truncated by it.)
    let mut truncated = false;
    let ino = if flags & oflag::O_CREAT != 0 {
        // "name/" with O_CREAT names a directory, which open cannot create or open.
        if path.ends_with(b"/") {
            return Err(Errno::EISDIR);
        }
        let (parent, name) = v.parent_of(base, path)?;
        let m = (mode_arg as u32) & !umask;
        let creatable = !name.is_empty() && name != b"." && name != b"..";
        let trunc = flags & oflag::O_TRUNC != 0 && writes;
        let fast = if flags & (oflag::O_PATH | oflag::O_DIRECTORY) == 0 {
            v.open_volume_file(parent, name, m, flags & oflag::O_EXCL != 0, trunc, now)?
        } else {
            None
        };
        truncated = fast.is_some() && trunc;
        // The name itself first (one lookup: on a volume each is a hostcall), then
        // what a symbolic link there leads to.
        match fast.map_or_else(|| v.lookup(parent, name, false), Ok) {
            Ok(ino) if fast.is_some() => ino,
            Ok(_) if flags & oflag::O_EXCL != 0 => return Err(Errno::EEXIST),
            Ok(link) if flags & oflag::O_NOFOLLOW == 0 && matches!(v.node(link).data, Data::Symlink(_)) => {
                match v.lookup(parent, name, true) {
                    Ok(ino) => ino,
                    // A dangling symbolic link: create what it points at, as Linux does.
                    Err(Errno::ENOENT) => {
                        v.load(link)?;
                        let target = v.link_target(link)?.to_vec();
                        if target.ends_with(b"/") {
                            return Err(Errno::EISDIR); // it names a directory
                        }
                        let (d, n) = v.parent_of(parent, &target)?;
                        let n = n.to_vec();
                        v.create(d, &n, m, false, now)?
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(ino) => ino,
            Err(Errno::ENOENT) if creatable => v.create(parent, name, m, false, now)?,
            Err(e) => return Err(e),
        }
    } else {
        v.lookup(base, path, flags & oflag::O_NOFOLLOW == 0)?
    };
    let node = v.node(ino);
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
        if matches!(node.data, Data::Socket(_)) {
            return Err(Errno::ENXIO); // as Linux: a socket is reached by connect
        }
        if crate::fs::proc::write_refused(&v, ino, flags) {
            return Err(Errno::EACCES);
        }
        let regular = matches!(node.data, Data::File(_) | Data::Static(_) | Data::HostFile(_));
        if acc != oflag::O_RDONLY && regular && node.readonly {
            return Err(Errno::EROFS);
        }
        if acc != oflag::O_RDONLY && regular {
            // A rootfs file changes in the VM: copied up first.
            v.copy_up(ino)?;
        }
        if flags & oflag::O_TRUNC != 0 && writes && regular && !truncated {
            v.truncate(ino, 0, now)?;
        }
    }
    if let Some(p) = v.fifo(ino).filter(|_| flags & oflag::O_PATH == 0) {
        let write = match acc {
            oflag::O_RDONLY => false,
            oflag::O_WRONLY => true,
            _ => return Err(Errno::EINVAL), // read-write named pipes are not offered
        };
        if write && flags & oflag::O_NONBLOCK != 0 && p.lock().readers == 0 {
            return Err(Errno::ENXIO); // as Linux: nobody to read
        }
        let (end, seen) = fifo_end(&p, write, flags, v.hold(ino));
        return Ok(Opened::Fifo { end, write, seen });
    }
    // /dev/tty is the caller's controlling terminal: ENXIO without one, as Linux.
    if flags & oflag::O_PATH == 0
        && v.device(ino) == Some(crate::vfs::Device::Tty)
        && !crate::task::tty::controls(ctx.proc())
    {
        return Err(Errno::ENXIO);
    }
    if let Some(fd) = v.device(ino).and_then(|d| d.std_fd()).filter(|_| std && flags & oflag::O_PATH == 0) {
        drop(v);
        if let Some(f) = open_std(ctx, fd, flags, mode_arg) {
            return f;
        }
        v = ctx.k.vfs.lock();
    }
    let keep = oflag::O_ACCMODE | oflag::O_APPEND | oflag::O_NONBLOCK | oflag::O_PATH | oflag::O_DIRECTORY;
    Ok(Opened::File(crate::fs::open_node(ctx.k, &mut v, ino, flags & keep)))
}

/// Opening /dev/stdin, /dev/stdout or /dev/stderr, which on Linux are links to
/// /proc/self/fd/0, 1 and 2: what the caller has at descriptor `fd` opened
/// again. ENOENT when that descriptor is closed. A standard stream of the VM
/// (the program's, or those of a process `onering exec` started) is that same
/// open file (a stream has no offset to keep apart); any other file goes through
/// /proc/self/fd/N (a pipe is reopened, a tree file opened anew). None when the
/// stream is asked for an access it was not opened with: the device opens the
/// VM's own stream, as before.
fn open_std(ctx: &Ctx, fd: u64, flags: u32, mode_arg: u64) -> Option<Result<Opened, Errno>> {
    let Ok(f) = ctx.proc().fds.lock().get(fd).cloned() else { return Some(Err(Errno::ENOENT)) };
    let stream = f.node().is_some_and(|i| ctx.k.vfs.lock().device(i).and_then(|d| d.std_fd()).is_some());
    if !stream {
        let path = alloc::format!("/proc/self/fd/{fd}");
        return Some(open_path(ctx, AT_FDCWD, path.as_bytes(), flags, mode_arg, false));
    }
    let fits = match flags & oflag::O_ACCMODE {
        oflag::O_RDONLY => f.readable(),
        oflag::O_WRONLY => f.writable(),
        _ => f.readable() && f.writable(),
    };
    fits.then_some(Ok(Opened::File(f)))
}

/// open/openat: a named pipe opened without O_NONBLOCK waits for its other end, as
/// on Linux (a reader for a writer, a writer for a reader).
fn open_file(ctx: &Ctx, dirfd: u64, path: u64, flags: u64, mode: u64) -> SysResult {
    let flags = flags as u32;
    let cloexec = flags & oflag::O_CLOEXEC != 0;
    let (end, write, seen) = match open_at(ctx, dirfd, path, flags, mode)? {
        Opened::File(f) => return ctx.proc().fds.lock().insert(f, cloexec),
        Opened::Fifo { end, write, seen } => (end, write, seen),
    };
    let Some(pipe) = end.downcast::<crate::fs::pipe::PipeEnd>().map(|p| p.pipe().clone()) else {
        return Err(Errno::EINVAL);
    };
    let key = crate::fs::pipe::key(&pipe);
    loop {
        sched::prepare_wait(key);
        // The other end is open, or was opened (and maybe closed) meanwhile.
        let ready = {
            let p = pipe.lock();
            flags & oflag::O_NONBLOCK != 0
                || if write { p.readers > 0 || p.r_opens != seen } else { p.writers > 0 || p.w_opens != seen }
        };
        if ready {
            sched::finish_wait(key);
            return ctx.proc().fds.lock().insert(end, cloexec);
        }
        let w = sched::block(None);
        sched::finish_wait(key);
        if w == sched::Wake::Interrupted {
            return Err(Errno::ERESTARTSYS); // dropping `end` closes it again
        }
    }
}

pub fn open(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [path, flags, mode, ..] = f.args();
    open_file(ctx, AT_FDCWD, path, flags, mode)
}

/// `creat(path, mode)`: `open(path, O_CREAT | O_WRONLY | O_TRUNC, mode)`.
pub fn creat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [path, mode, ..] = f.args();
    let flags = oflag::O_CREAT | oflag::O_WRONLY | oflag::O_TRUNC;
    open_file(ctx, AT_FDCWD, path, u64::from(flags), mode)
}

pub fn openat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, flags, mode, ..] = f.args();
    open_file(ctx, dirfd, path, flags, mode)
}

/// A descriptor of the calling process was closed (or replaced by dup2): as on
/// Linux, the process's POSIX locks on that file go, whichever descriptor took them.
/// The file is dropped after the table's lock (the caller released it): a pipe
/// end's last close wakes the other end's threads, an open file description's last
/// close releases its OFD and flock locks.
fn closed(ctx: &Ctx, file: Option<FileRef>) {
    if let Some(file) = file {
        filelock::closed(ctx.proc().pid(), &file);
    }
}

pub fn close(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let file = ctx.proc().fds.lock().take(f.rdi)?;
    closed(ctx, Some(file));
    Ok(0)
}

const CLOSE_RANGE_UNSHARE: u64 = 2;
const CLOSE_RANGE_CLOEXEC: u64 = 4;

/// `close_range(first, last, flags)`: closes (or, with CLOSE_RANGE_CLOEXEC, marks
/// close-on-exec) the open descriptors in `[first, last]`. CLOSE_RANGE_UNSHARE
/// changes nothing here: a process's table is its own already.
pub fn close_range(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [first, last, flags, ..] = f.args();
    let (first, last) = (first as u32 as u64, last as u32 as u64);
    if flags & !(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC) != 0 || first > last {
        return Err(Errno::EINVAL);
    }
    let files = {
        let mut t = ctx.proc().fds.lock();
        let open: Vec<u64> = t.iter().map(|(n, _)| n).filter(|n| (first..=last).contains(n)).collect();
        let mut files = Vec::new();
        for n in open {
            if flags & CLOSE_RANGE_CLOEXEC != 0 {
                let _ = t.set_cloexec(n, true);
            } else if let Ok(file) = t.take(n) {
                files.push(file);
            }
        }
        files
    };
    for file in files {
        closed(ctx, Some(file));
    }
    Ok(0)
}

pub fn lseek(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, off, whence, ..] = f.args();
    let of = ctx.file(fd)?;
    of.obj().seek(&of, off as i64, whence)
}

pub fn dup(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let file = ctx.file(f.rdi)?;
    ctx.proc().fds.lock().insert(file, false)
}

pub fn dup2(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [old, new, ..] = f.args();
    let file = ctx.file(old)?;
    if old as u32 == new as u32 {
        return Ok(new as u32 as u64);
    }
    let replaced = ctx.proc().fds.lock().install(new, file, false)?;
    closed(ctx, replaced);
    Ok(new as u32 as u64)
}

pub fn dup3(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [old, new, flags, ..] = f.args();
    if old as u32 == new as u32 || flags & !(oflag::O_CLOEXEC as u64) != 0 {
        return Err(Errno::EINVAL);
    }
    let file = ctx.file(old)?;
    let replaced = ctx.proc().fds.lock().install(new, file, flags != 0)?;
    closed(ctx, replaced);
    Ok(new as u32 as u64)
}

pub fn fcntl(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, cmd, arg, ..] = f.args();
    let file = ctx.file(fd)?;
    match cmd {
        F_DUPFD | F_DUPFD_CLOEXEC => {
            ctx.proc().fds.lock().insert_from(arg as u32 as usize, file, cmd == F_DUPFD_CLOEXEC)
        }
        F_GETFD => Ok(u64::from(ctx.proc().fds.lock().cloexec(fd)?)),
        F_SETFD => ctx.proc().fds.lock().set_cloexec(fd, arg & FD_CLOEXEC != 0).map(|_| 0),
        F_GETFL => Ok(u64::from(file.flags())),
        F_SETFL => {
            file.set_flags((file.flags() & !oflag::SETTABLE) | (arg as u32 & oflag::SETTABLE));
            Ok(0)
        }
        F_GETLK | F_OFD_GETLK => get_lock(ctx, &file, cmd, arg),
        F_SETLK | F_SETLKW | F_OFD_SETLK | F_OFD_SETLKW => set_lock(ctx, &file, cmd, arg),
        _ => Err(Errno::EINVAL),
    }
}

// ---- file locks (the rules are crate::filelock's, the waiting task::filelock's) ----

/// A `struct flock` (x86-64: `l_type` and `l_whence` at 0 and 2, `l_start` and
/// `l_len` at 8 and 16, `l_pid` at 24; 32 bytes), kept whole: `F_GETLK` writes back
/// all of it, as Linux.
struct FlockArg([u8; 32]);

impl FlockArg {
    fn i16_at(&self, at: usize) -> i16 {
        i16::from_ne_bytes([self.0[at], self.0[at + 1]])
    }
    fn i64_at(&self, at: usize) -> i64 {
        let mut b = [0; 8];
        b.copy_from_slice(&self.0[at..at + 8]);
        i64::from_ne_bytes(b)
    }
    fn l_type(&self) -> i16 {
        self.i16_at(0)
    }
    fn l_pid(&self) -> i32 {
        i32::from_ne_bytes([self.0[24], self.0[25], self.0[26], self.0[27]])
    }
}

/// The `struct flock` at `addr` for a lock on `of` (not an O_PATH descriptor).
fn flock_arg(ctx: &Ctx, of: &OpenFile, addr: u64) -> Result<FlockArg, Errno> {
    if of.flags() & oflag::O_PATH != 0 {
        return Err(Errno::EBADF);
    }
    Ok(FlockArg(ctx.user.read_array::<32>(addr).map_err(|_| Errno::EFAULT)?))
}

/// What a `struct flock` asks for on `of`, in Linux's order of checks
/// (`flock_to_posix_lock`): the inclusive byte range, from the start, the offset
/// or the end of the file (`l_len` 0: to the end, whatever it becomes; negative:
/// the bytes before `l_start`), and the kind (None: unlock).
fn lock_request(of: &OpenFile, fl: &FlockArg) -> Result<(Option<Kind>, i64, i64), Errno> {
    let base = match fl.i16_at(2) {
        SEEK_SET => 0,
        SEEK_CUR => of.offset() as i64,
        SEEK_END => of.obj().stat().size as i64,
        _ => return Err(Errno::EINVAL),
    };
    let (l_start, l_len) = (fl.i64_at(8), fl.i64_at(16));
    if l_start > OFFSET_MAX - base {
        return Err(Errno::EOVERFLOW);
    }
    let start = base + l_start;
    if start < 0 {
        return Err(Errno::EINVAL);
    }
    let (start, end) = match l_len {
        0 => (start, OFFSET_MAX),
        n if n > 0 && n - 1 > OFFSET_MAX - start => return Err(Errno::EOVERFLOW),
        n if n > 0 => (start, start + n - 1),
        n if start + n < 0 => return Err(Errno::EINVAL),
        n => (start + n, start - 1),
    };
    let kind = match fl.l_type() {
        F_RDLCK => Some(Kind::Read),
        F_WRLCK => Some(Kind::Write),
        F_UNLCK => None,
        _ => return Err(Errno::EINVAL),
    };
    Ok((kind, start, end))
}

/// Who owns a lock `cmd` takes through `of`: the open file description (the OFD
/// commands, whose `l_pid` must be 0) or the calling process.
fn lock_owner(ctx: &Ctx, of: &OpenFile, cmd: u64, fl: &FlockArg) -> Result<Owner, Errno> {
    if matches!(cmd, F_OFD_GETLK | F_OFD_SETLK | F_OFD_SETLKW) {
        if fl.l_pid() != 0 {
            return Err(Errno::EINVAL);
        }
        return Ok(Owner::Ofd(of.lock_id()));
    }
    Ok(Owner::Process(ctx.proc().pid()))
}

/// F_GETLK, F_OFD_GETLK: the first lock in the way, written over the `struct flock`
/// (its `l_pid` -1 for an OFD lock), or just `l_type` F_UNLCK if there is none.
fn get_lock(ctx: &Ctx, of: &OpenFile, cmd: u64, addr: u64) -> SysResult {
    let mut fl = flock_arg(ctx, of, addr)?;
    if cmd == F_GETLK && !matches!(fl.l_type(), F_RDLCK | F_WRLCK) {
        return Err(Errno::EINVAL);
    }
    let (kind, start, end) = lock_request(of, &fl)?;
    let owner = lock_owner(ctx, of, cmd, &fl)?;
    match filelock::test_record(of, owner, kind, start, end) {
        None => fl.0[0..2].copy_from_slice(&F_UNLCK.to_ne_bytes()),
        Some(r) => {
            let t = if r.kind == Kind::Read { F_RDLCK } else { F_WRLCK };
            let len = if r.end == OFFSET_MAX { 0 } else { r.end - r.start + 1 };
            let pid = match r.owner {
                Owner::Process(p) => p as i32,
                Owner::Ofd(_) => -1,
            };
            fl.0[0..2].copy_from_slice(&t.to_ne_bytes());
            fl.0[2..4].copy_from_slice(&SEEK_SET.to_ne_bytes());
            fl.0[8..16].copy_from_slice(&r.start.to_ne_bytes());
            fl.0[16..24].copy_from_slice(&len.to_ne_bytes());
            fl.0[24..28].copy_from_slice(&pid.to_ne_bytes());
        }
    }
    ctx.user.write(addr, &fl.0).map_err(|_| Errno::EFAULT)?;
    Ok(0)
}

/// F_SETLK, F_SETLKW and their OFD forms. A read lock needs a descriptor open for
/// reading, a write lock one open for writing (EBADF); a conflict is EAGAIN, or
/// waited for (EDEADLK for a cycle of POSIX waits).
fn set_lock(ctx: &Ctx, of: &OpenFile, cmd: u64, addr: u64) -> SysResult {
    let fl = flock_arg(ctx, of, addr)?;
    let (kind, start, end) = lock_request(of, &fl)?;
    match kind {
        Some(Kind::Read) if !of.readable() => return Err(Errno::EBADF),
        Some(Kind::Write) if !of.writable() => return Err(Errno::EBADF),
        _ => {}
    }
    let owner = lock_owner(ctx, of, cmd, &fl)?;
    filelock::set_record(of, owner, kind, start, end, matches!(cmd, F_SETLKW | F_OFD_SETLKW))?;
    Ok(0)
}

/// flock: a whole-file lock owned by the open file description, apart from the
/// record locks. The command is checked before the descriptor, as on Linux.
pub fn flock(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, cmd, ..] = f.args();
    let cmd = cmd as u32;
    if cmd & LOCK_MAND != 0 {
        return Ok(0);
    }
    let kind = match cmd & !LOCK_NB {
        LOCK_SH => Some(Kind::Read),
        LOCK_EX => Some(Kind::Write),
        LOCK_UN => None,
        _ => return Err(Errno::EINVAL),
    };
    let of = ctx.file(fd)?;
    if of.flags() & oflag::O_PATH != 0 {
        return Err(Errno::EBADF);
    }
    filelock::flock(&of, kind, cmd & LOCK_NB == 0)?;
    Ok(0)
}

pub fn ioctl(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, request, arg, ..] = f.args();
    let of = ctx.file(fd)?;
    match request {
        FIONBIO => {
            if ctx.user.read_u32(arg)? != 0 {
                of.set_flags(of.flags() | oflag::O_NONBLOCK);
            } else {
                of.set_flags(of.flags() & !oflag::O_NONBLOCK);
            }
            Ok(0)
        }
        FIOCLEX | FIONCLEX => ctx.proc().fds.lock().set_cloexec(fd, request == FIOCLEX).map(|_| 0),
        _ => of.obj().ioctl(&of, ctx.user, request, arg),
    }
}

fn pipe_call(ctx: &Ctx, fds_addr: u64, flags: u64) -> SysResult {
    let allowed = (oflag::O_CLOEXEC | oflag::O_NONBLOCK) as u64;
    if flags & !allowed != 0 {
        return Err(Errno::EINVAL);
    }
    ctx.user.check(fds_addr, 8, true)?;
    let (r, w) = make_pipe_ends(flags as u32);
    let cloexec = flags & oflag::O_CLOEXEC as u64 != 0;
    let (rfd, wfd) = {
        let mut fds = ctx.proc().fds.lock();
        let rfd = fds.insert(r, cloexec)?;
        match fds.insert(w, cloexec) {
            Ok(wfd) => (rfd, wfd),
            Err(e) => {
                let r = fds.take(rfd);
                drop(fds);
                drop(r);
                return Err(e);
            }
        }
    };
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&(rfd as u32).to_le_bytes());
    out[4..].copy_from_slice(&(wfd as u32).to_le_bytes());
    ctx.user.write(fds_addr, &out)?;
    Ok(0)
}

pub fn pipe(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    pipe_call(ctx, f.rdi, 0)
}

pub fn pipe2(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    pipe_call(ctx, f.rdi, f.rsi)
}

// ---- metadata ---------------------------------------------------------------------

/// `st_dev` of onering's own files (the host's streams keep the host's).
const OUR_DEV: u64 = 0x2a;

/// A device number as glibc's `makedev` encodes it.
fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (u64::from(major), u64::from(minor));
    ((ma & 0xffff_f000) << 32) | ((ma & 0xfff) << 8) | ((mi & 0xffff_ff00) << 12) | (mi & 0xff)
}

fn blksize(m: &Meta) -> u64 {
    if m.blksize == 0 {
        4096
    } else {
        m.blksize
    }
}

fn ctime(m: &Meta) -> u64 {
    if m.ctime == 0 {
        m.mtime
    } else {
        m.ctime
    }
}

fn write_stat(ctx: &Ctx, addr: u64, m: &Meta) -> SysResult {
    let (uid, gid) = m.owner.unwrap_or((ctx.k.cfg.uid as u32, ctx.k.cfg.gid as u32));
    let mut b = [0u8; 144];
    let put = |b: &mut [u8], at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut b, 0, m.dev.unwrap_or(OUR_DEV));
    put(&mut b, 8, m.ino);
    put(&mut b, 16, m.nlink);
    b[24..28].copy_from_slice(&m.mode.to_le_bytes());
    b[28..32].copy_from_slice(&uid.to_le_bytes());
    b[32..36].copy_from_slice(&gid.to_le_bytes());
    put(&mut b, 40, makedev(m.rdev.0, m.rdev.1));
    put(&mut b, 48, m.size);
    put(&mut b, 56, blksize(m));
    put(&mut b, 64, m.blocks.unwrap_or(m.size.div_ceil(512)));
    for (t, v) in [(72, m.atime), (88, m.mtime), (104, ctime(m))] {
        put(&mut b, t, v / 1_000_000_000);
        put(&mut b, t + 8, v % 1_000_000_000);
    }
    ctx.user.write(addr, &b)?;
    Ok(0)
}

/// Resolves a path argument for the stat family (with AT_EMPTY_PATH: `dirfd` itself).
fn stat_target(ctx: &Ctx, dirfd: u64, path_addr: u64, flags: u64) -> Result<Meta, Errno> {
    if flags & AT_EMPTY_PATH != 0 && ctx.user.read_cstr(path_addr, PATH_MAX - 1)?.is_empty() {
        if is_cwd(dirfd) {
            let cwd = ctx.proc().fs.lock().cwd;
            return Ok(crate::fs::meta_of(&ctx.k.vfs.lock(), cwd));
        }
        return Ok(ctx.file(dirfd)?.obj().stat());
    }
    let path = path_arg(ctx, path_addr)?;
    let (start, _keep) = start_dir(ctx, dirfd, &path)?;
    let mut v = ctx.k.vfs.lock();
    let d = dir(&v, start)?;
    let ino = v.lookup(d, &path, flags & AT_SYMLINK_NOFOLLOW == 0)?;
    Ok(crate::fs::meta_of(&v, ino))
}

pub fn fstat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let m = ctx.file(f.rdi)?.obj().stat();
    write_stat(ctx, f.rsi, &m)
}

pub fn stat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let m = stat_target(ctx, AT_FDCWD, f.rdi, 0)?;
    write_stat(ctx, f.rsi, &m)
}

pub fn lstat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let m = stat_target(ctx, AT_FDCWD, f.rdi, AT_SYMLINK_NOFOLLOW)?;
    write_stat(ctx, f.rsi, &m)
}

pub fn newfstatat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, buf, flags, ..] = f.args();
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let m = stat_target(ctx, dirfd, path, flags)?;
    write_stat(ctx, buf, &m)
}

pub fn statx(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, flags, _mask, buf, ..] = f.args();
    let m = stat_target(ctx, dirfd, path, flags)?;
    let (uid, gid) = m.owner.unwrap_or((ctx.k.cfg.uid as u32, ctx.k.cfg.gid as u32));
    let mut b = [0u8; 256];
    let put32 = |b: &mut [u8], at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let put64 = |b: &mut [u8], at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put32(&mut b, 0, 0x7ff); // STATX_BASIC_STATS
    put32(&mut b, 4, blksize(&m) as u32);
    put32(&mut b, 16, m.nlink as u32);
    put32(&mut b, 20, uid);
    put32(&mut b, 24, gid);
    b[28..30].copy_from_slice(&(m.mode as u16).to_le_bytes());
    put64(&mut b, 32, m.ino);
    put64(&mut b, 40, m.size);
    put64(&mut b, 48, m.blocks.unwrap_or(m.size.div_ceil(512)));
    for (t, v) in [(64, m.atime), (96, m.mtime), (112, ctime(&m))] {
        put64(&mut b, t, v / 1_000_000_000);
        put32(&mut b, t + 8, (v % 1_000_000_000) as u32);
    }
    put32(&mut b, 128, m.rdev.0);
    put32(&mut b, 132, m.rdev.1);
    let dev = m.dev.unwrap_or(OUR_DEV);
    put32(&mut b, 136, (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)) as u32);
    put32(&mut b, 140, (((dev >> 12) & 0xffff_ff00) | (dev & 0xff)) as u32);
    ctx.user.write(buf, &b)?;
    Ok(0)
}

fn check_access(ctx: &Ctx, dirfd: u64, path_addr: u64, how: u64, flags: u64) -> SysResult {
    if how & !7 != 0 || flags & !(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let path = path_arg(ctx, path_addr)?;
    let (start, _keep) = start_dir(ctx, dirfd, &path)?;
    let mut v = ctx.k.vfs.lock();
    let d = dir(&v, start)?;
    let ino = v.lookup(d, &path, flags & AT_SYMLINK_NOFOLLOW == 0)?;
    let node = v.node(ino);
    if how & 2 != 0 && node.readonly && !node.is_dir() && v.device(ino).is_none() {
        return Err(Errno::EROFS);
    }
    if how & 1 != 0 && node.mode & 0o111 == 0 {
        return Err(Errno::EACCES);
    }
    Ok(0)
}

pub fn access(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    check_access(ctx, AT_FDCWD, f.rdi, f.rsi, 0)
}

pub fn faccessat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    // The original faccessat has no flags argument (faccessat2 does).
    let [dirfd, path, how, ..] = f.args();
    check_access(ctx, dirfd, path, how, 0)
}

pub fn faccessat2(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, how, flags, ..] = f.args();
    check_access(ctx, dirfd, path, how, flags)
}

// ---- directories and names --------------------------------------------------------

pub fn getcwd(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [buf, size, ..] = f.args();
    let cwd = ctx.proc().fs.lock().cwd;
    let mut path = ctx.k.vfs.lock().path_of(cwd)?;
    path.push(0);
    if (path.len() as u64) > size {
        return Err(Errno::ERANGE);
    }
    ctx.user.write(buf, &path)?;
    Ok(path.len() as u64)
}

pub fn chdir(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let path = path_arg(ctx, f.rdi)?;
    if crate::fs::proc::reaches_proc(&path, None) {
        crate::fs::proc::refresh(ctx);
    }
    let cwd = ctx.proc().fs.lock().cwd;
    let (ino, hold) = {
        let mut v = ctx.k.vfs.lock();
        let found = v.lookup(cwd, &path, true)?;
        let ino = dir(&v, found)?;
        (ino, v.hold(ino))
    };
    set_cwd(ctx, ino, hold)
}

pub fn fchdir(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let (ino, _keep) = fd_node(ctx, f.rdi, Errno::ENOTDIR)?;
    let hold = {
        let v = ctx.k.vfs.lock();
        dir(&v, ino)?;
        v.hold(ino)
    };
    set_cwd(ctx, ino, hold)
}

fn set_cwd(ctx: &Ctx, ino: Ino, hold: crate::vfs::Hold) -> SysResult {
    let old = {
        let mut fs = ctx.proc().fs.lock();
        fs.cwd = ino;
        fs.cwd_hold.replace(hold)
    };
    drop(old);
    Ok(0)
}

pub fn getdents64(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, count, ..] = f.args();
    let of = ctx.file(fd)?;
    let dir_ino = of.node().ok_or(Errno::ENOTDIR)?;
    if !of.readable() {
        return Err(Errno::EBADF);
    }
    if of.downcast::<crate::fs::proc::ProcFile>().is_some() {
        crate::fs::proc::refresh(ctx);
    }
    let count = count.min(u64::from(u32::MAX));
    let mut out: Vec<u8> = Vec::new();
    let mut pos = of.offset() as usize;
    {
        let mut v = ctx.k.vfs.lock();
        v.load(dir_ino)?;
        // (One walk to `pos` per call, then in order: a large directory is not
        // walked from its start for every entry.)
        for (name, ino) in v.entries_from(dir_ino, pos)? {
            let reclen = (19 + name.len() + 1).next_multiple_of(8);
            if (out.len() + reclen) as u64 > count {
                if out.is_empty() {
                    return Err(Errno::EINVAL);
                }
                break;
            }
            let d_type: u8 = match v.node(ino).st_mode() & mode::S_IFMT {
                mode::S_IFDIR => 4,
                mode::S_IFREG => 8,
                mode::S_IFLNK => 10,
                mode::S_IFCHR => 2,
                mode::S_IFIFO => 1,
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
        v.notify_node(dir_ino, crate::vfs::notify::IN_ACCESS);
    }
    ctx.user.write(buf, &out)?;
    of.set_offset(pos as u64);
    Ok(out.len() as u64)
}

fn read_link(ctx: &Ctx, dirfd: u64, path_addr: u64, buf: u64, size: u64) -> SysResult {
    if (size as i64) <= 0 {
        return Err(Errno::EINVAL);
    }
    let path = path_arg(ctx, path_addr)?;
    let target: Vec<u8> = {
        let (start, _keep) = start_dir(ctx, dirfd, &path)?;
        let mut v = ctx.k.vfs.lock();
        let d = dir(&v, start)?;
        let ino = v.lookup(d, &path, false)?;
        v.load(ino)?;
        v.link_target(ino)?.to_vec()
    };
    let n = target.len().min(size as usize);
    ctx.user.write(buf, &target[..n])?;
    Ok(n as u64)
}

pub fn readlink(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [path, buf, size, ..] = f.args();
    read_link(ctx, AT_FDCWD, path, buf, size)
}

pub fn readlinkat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, buf, size, ..] = f.args();
    read_link(ctx, dirfd, path, buf, size)
}

fn remove_at(ctx: &Ctx, dirfd: u64, path_addr: u64, flags: u64) -> SysResult {
    if flags & !AT_REMOVEDIR != 0 {
        return Err(Errno::EINVAL);
    }
    let path = path_arg(ctx, path_addr)?;
    let (start, _keep) = start_dir(ctx, dirfd, &path)?;
    let mut v = ctx.k.vfs.lock();
    let base = dir(&v, start)?;
    let (parent, name) = v.parent_of(base, &path)?;
    if path.ends_with(b"/") && flags & AT_REMOVEDIR == 0 {
        // "name/" must be a directory (through a link, too), which unlink refuses.
        let ino = v.lookup(base, &path, true)?;
        return Err(if v.node(ino).is_dir() { Errno::EISDIR } else { Errno::ENOTDIR });
    }
    let name = name.to_vec();
    v.remove(parent, &name, flags & AT_REMOVEDIR != 0).map(|_| 0)
}

fn make_symlink(ctx: &Ctx, target_addr: u64, dirfd: u64, path_addr: u64) -> SysResult {
    let target = path_arg(ctx, target_addr)?;
    let path = path_arg(ctx, path_addr)?;
    let (start, _keep) = start_dir(ctx, dirfd, &path)?;
    let now = real_now();
    let mut v = ctx.k.vfs.lock();
    let base = dir(&v, start)?;
    new_file_name(&mut v, base, &path)?;
    let (parent, name) = v.parent_of(base, &path)?;
    let name = name.to_vec();
    v.symlink(parent, &name, &target, now).map(|_| 0)
}

pub fn symlink(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_symlink(ctx, f.rdi, AT_FDCWD, f.rsi)
}

pub fn symlinkat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_symlink(ctx, f.rdi, f.rsi, f.rdx)
}

pub fn unlink(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    remove_at(ctx, AT_FDCWD, f.rdi, 0)
}

pub fn unlinkat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    remove_at(ctx, f.rdi, f.rsi, f.rdx)
}

pub fn rmdir(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    remove_at(ctx, AT_FDCWD, f.rdi, AT_REMOVEDIR)
}

fn make_dir(ctx: &Ctx, dirfd: u64, path_addr: u64, mode_arg: u64) -> SysResult {
    let path = path_arg(ctx, path_addr)?;
    let (start, _keep) = start_dir(ctx, dirfd, &path)?;
    let umask = ctx.proc().fs.lock().umask;
    let now = real_now();
    let mut v = ctx.k.vfs.lock();
    let base = dir(&v, start)?;
    let (parent, name) = v.parent_of(base, &path)?;
    let name = name.to_vec();
    v.create(parent, &name, mode_arg as u32 & !umask, true, now).map(|_| 0)
}

pub fn mkdir(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_dir(ctx, AT_FDCWD, f.rdi, f.rsi)
}

pub fn mkdirat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_dir(ctx, f.rdi, f.rsi, f.rdx)
}

fn rename_at(ctx: &Ctx, olddir: u64, old: u64, newdir: u64, new: u64, flags: u64) -> SysResult {
    if flags != 0 {
        return Err(Errno::EINVAL);
    }
    let (from, to) = (path_arg(ctx, old)?, path_arg(ctx, new)?);
    let ((fstart, _kf), (tstart, _kt)) = (start_dir(ctx, olddir, &from)?, start_dir(ctx, newdir, &to)?);
    let mut v = ctx.k.vfs.lock();
    let (fbase, tbase) = (dir(&v, fstart)?, dir(&v, tstart)?);
    let (fdir, fname) = v.parent_of(fbase, &from)?;
    let (tdir, tname) = v.parent_of(tbase, &to)?;
    // A trailing slash on either side requires a directory.
    if (from.ends_with(b"/") || to.ends_with(b"/")) && !v.lookup(fdir, fname, false).is_ok_and(|i| v.node(i).is_dir()) {
        return Err(Errno::ENOTDIR);
    }
    let (fname, tname) = (fname.to_vec(), tname.to_vec());
    v.rename(fdir, &fname, tdir, &tname).map(|_| 0)
}

pub fn rename(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    rename_at(ctx, AT_FDCWD, f.rdi, AT_FDCWD, f.rsi, 0)
}

pub fn renameat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    rename_at(ctx, f.rdi, f.rsi, f.rdx, f.r10, 0)
}

pub fn renameat2(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    rename_at(ctx, f.rdi, f.rsi, f.rdx, f.r10, f.r8)
}

pub fn ftruncate(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, len, ..] = f.args();
    if (len as i64) < 0 {
        return Err(Errno::EINVAL);
    }
    let of = ctx.file(fd)?;
    let ino = of.node().ok_or(Errno::EINVAL)?;
    if !of.writable() {
        return Err(Errno::EINVAL);
    }
    ctx.k.vfs.lock().truncate(ino, len, real_now()).map(|_| 0)
}

pub fn umask(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let mut fs = ctx.proc().fs.lock();
    let old = fs.umask;
    fs.umask = f.rdi as u32 & 0o777;
    Ok(u64::from(old))
}

/// `sendfile(out_fd, in_fd, offset, count)`: copies through a kernel bounce buffer
/// (`BufferMem`) in 64 KiB pieces, from `*offset` (updated; the file's own offset
/// untouched) or from the file's offset (advanced by what was written). Any
/// readable file to any writable one, sockets and pipes included; the first piece
/// may block, later ones stop the copy short instead (as a partial write).
pub fn sendfile(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    const PIECE: u64 = 64 << 10;
    const BASE: u64 = 0x1000;
    let [out_fd, in_fd, off_ptr, count, ..] = f.args();
    let (fin, fout) = (ctx.file(in_fd)?, ctx.file(out_fd)?);
    if !fin.readable() || !fout.writable() {
        return Err(Errno::EBADF);
    }
    if fout.flags() & oflag::O_APPEND != 0 {
        return Err(Errno::EINVAL);
    }
    // What Linux reads this way: never a pipe; a socket only into a pipe (its
    // other outputs need a seekable input). Otherwise EINVAL, which tells the
    // caller (Go's io.Copy, cat) to fall back to read and write. (Reading a pipe
    // here gave an EAGAIN that Go took for a full socket: it waited for room
    // forever.)
    let kind = |of: &OpenFile| of.obj().stat().mode & mode::S_IFMT;
    let in_kind = kind(&fin);
    if in_kind == mode::S_IFIFO || (in_kind == mode::S_IFSOCK && kind(&fout) != mode::S_IFIFO) {
        return Err(Errno::EINVAL);
    }
    let mut at = if off_ptr == 0 {
        None
    } else {
        let v = ctx.user.read_u64(off_ptr)?;
        if (v as i64) < 0 {
            return Err(Errno::EINVAL);
        }
        Some(v)
    };
    let count = count.min(MAX_RW_COUNT);
    let bounce = crate::mm::user::BufferMem::new(BASE, count.min(PIECE) as usize);
    let mut total = 0u64;
    while total < count {
        let want = (count - total).min(PIECE);
        let got = match fin.read(&bounce, BASE, want, at) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if total == 0 => return Err(e),
            Err(_) => break,
        };
        let put = if total == 0 {
            blocking(&fout, || fout.write(&bounce, BASE, got, None)).map_err(|e| write_error(&fout, e))
        } else {
            fout.write(&bounce, BASE, got, None)
        };
        let put = match put {
            Ok(n) => n,
            Err(e) if total == 0 => {
                undo_read(&fin, at, got);
                return Err(e);
            }
            Err(_) => 0,
        };
        // Bytes read but not written go back: the input's position is what was sent.
        undo_read(&fin, at, got - put);
        total += put;
        at = at.map(|a| a + put);
        if put < got {
            break;
        }
    }
    if let Some(a) = at {
        ctx.user.write_u64(off_ptr, a)?;
    }
    Ok(total)
}

/// Puts back `n` bytes read from `of` at its own offset (`at` is None) by moving
/// the offset back; nothing for reads at an explicit offset or from files without
/// one (a pipe's bytes are gone, as Linux's splice consumes them too).
fn undo_read(of: &OpenFile, at: Option<u64>, n: u64) {
    if at.is_none() && n > 0 {
        let _ = of.obj().seek(of, -(n as i64), 1); // (ESPIPE: nothing to put back)
    }
}

const SPLICE_F_NONBLOCK: u64 = 2;
/// SPLICE_F_MOVE, _NONBLOCK, _MORE, _GIFT.
const SPLICE_FLAGS: u64 = 0xf;

/// An optional `loff_t *` of splice: None for NULL; EINVAL if negative.
fn splice_offset(ctx: &Ctx, p: u64) -> Result<Option<u64>, Errno> {
    if p == 0 {
        return Ok(None);
    }
    let v = ctx.user.read_u64(p)?;
    if (v as i64) < 0 {
        return Err(Errno::EINVAL);
    }
    Ok(Some(v))
}

/// Waits (unless `nonblock`) until pipe end `of` has room: how much; EPIPE (and
/// SIGPIPE) without readers.
fn pipe_room(of: &OpenFile, pipe: &crate::fs::pipe::PipeEnd, nonblock: bool) -> SysResult {
    let room = || {
        let p = pipe.pipe().lock();
        match (p.readers, p.room()) {
            (0, _) => Err(Errno::EPIPE),
            (_, 0) => Err(Errno::EAGAIN),
            (_, n) => Ok(n as u64),
        }
    };
    let r = if nonblock { room() } else { blocking(of, room) };
    r.map_err(|e| write_error(of, e))
}

/// Waits (unless `nonblock`) until pipe end `of` has data, and copies up to
/// `buf.len()` of it without taking it; 0 at end of file.
fn pipe_peek(of: &OpenFile, pipe: &crate::fs::pipe::PipeEnd, buf: &mut [u8], nonblock: bool) -> SysResult {
    let mut peek = || {
        let p = pipe.pipe().lock();
        match (p.available(), p.writers) {
            (0, 0) => Ok(0),
            (0, _) => Err(Errno::EAGAIN),
            _ => Ok(p.peek(buf) as u64),
        }
    };
    if nonblock {
        peek()
    } else {
        blocking(of, peek)
    }
}

/// Takes `n` bytes that were passed on out of pipe end `pipe`, waking its writers.
fn pipe_consume(pipe: &crate::fs::pipe::PipeEnd, n: u64) {
    pipe.pipe().lock().consume(n as usize);
    sched::wake_all(pipe.key());
}

/// `splice(fd_in, off_in, fd_out, off_out, len, flags)`: moves up to 64 KiB per
/// call between a pipe and any file (or two pipes) through a kernel buffer. Only
/// what the output took leaves the input: a pipe is read without taking and then
/// consumed by that much, and the output pipe's room bounds what is read from a
/// file or socket. `SPLICE_F_NONBLOCK` makes the pipe sides (and, as Linux, a
/// socket read) non-blocking.
pub fn splice(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    use crate::fs::pipe::PipeEnd;
    const BASE: u64 = 0x1000;
    let [fd_in, off_in, fd_out, off_out, len, flags] = f.args();
    if flags & !SPLICE_FLAGS != 0 {
        return Err(Errno::EINVAL);
    }
    let (fin, fout) = (ctx.file(fd_in)?, ctx.file(fd_out)?);
    if !fin.readable() || !fout.writable() {
        return Err(Errno::EBADF);
    }
    let (pin, pout) = (fin.downcast::<PipeEnd>(), fout.downcast::<PipeEnd>());
    if pin.is_none() && pout.is_none() {
        return Err(Errno::EINVAL);
    }
    if (pin.is_some() && off_in != 0) || (pout.is_some() && off_out != 0) {
        return Err(Errno::ESPIPE);
    }
    if let (Some(a), Some(b)) = (pin, pout) {
        if alloc::sync::Arc::ptr_eq(a.pipe(), b.pipe()) {
            return Err(Errno::EINVAL);
        }
    }
    if fout.flags() & oflag::O_APPEND != 0 {
        return Err(Errno::EINVAL);
    }
    let (at_in, at_out) = (splice_offset(ctx, off_in)?, splice_offset(ctx, off_out)?);
    let len = len.min(MAX_RW_COUNT).min(64 << 10);
    if len == 0 {
        return Ok(0);
    }
    let nb = flags & SPLICE_F_NONBLOCK != 0;
    // How much the output can take now.
    let want = match pout {
        Some(p) => len.min(pipe_room(&fout, p, nb || fout.nonblocking())?),
        None => len,
    };
    // The input, not yet taken from a pipe.
    let bounce = crate::mm::user::BufferMem::new(BASE, want as usize);
    let got = match pin {
        Some(p) => {
            let mut buf = alloc::vec![0u8; want as usize];
            let n = pipe_peek(&fin, p, &mut buf, nb || fin.nonblocking())?;
            bounce.write(BASE, &buf[..n as usize])?;
            n
        }
        None if nb => fin.read(&bounce, BASE, want, at_in)?,
        None => blocking(&fin, || fin.read(&bounce, BASE, want, at_in))?,
    };
    if got == 0 {
        return Ok(0);
    }
    let put = match pout {
        Some(_) => fout.write(&bounce, BASE, got, at_out),
        None => blocking(&fout, || fout.write(&bounce, BASE, got, at_out)),
    }
    .map_err(|e| write_error(&fout, e))?;
    match pin {
        Some(p) => pipe_consume(p, put),
        None if at_in.is_none() => undo_read(&fin, None, got - put),
        None => {}
    }
    for (p, at) in [(off_in, at_in), (off_out, at_out)] {
        if let Some(a) = at {
            ctx.user.write_u64(p, a + put)?;
        }
    }
    Ok(put)
}

/// `tee(fd_in, fd_out, len, flags)`: copies up to `len` bytes from one pipe to
/// another without taking them from the first.
pub fn tee(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    use crate::fs::pipe::PipeEnd;
    let [fd_in, fd_out, len, flags, ..] = f.args();
    if flags & !SPLICE_FLAGS != 0 {
        return Err(Errno::EINVAL);
    }
    let (fin, fout) = (ctx.file(fd_in)?, ctx.file(fd_out)?);
    if !fin.readable() || !fout.writable() {
        return Err(Errno::EBADF);
    }
    let (Some(pin), Some(pout)) = (fin.downcast::<PipeEnd>(), fout.downcast::<PipeEnd>()) else {
        return Err(Errno::EINVAL);
    };
    if alloc::sync::Arc::ptr_eq(pin.pipe(), pout.pipe()) {
        return Err(Errno::EINVAL);
    }
    let len = len.min(64 << 10);
    if len == 0 {
        return Ok(0);
    }
    let nb = flags & SPLICE_F_NONBLOCK != 0;
    let want = len.min(pipe_room(&fout, pout, nb || fout.nonblocking())?);
    let mut buf = alloc::vec![0u8; want as usize];
    let n = pipe_peek(&fin, pin, &mut buf, nb || fin.nonblocking())?;
    if n == 0 {
        return Ok(0);
    }
    let put = pout.pipe().lock().write(&buf[..n as usize]).map_err(|e| write_error(&fout, e))?;
    sched::wake_all(pout.key());
    Ok(put as u64)
}

// ---- inotify ----------------------------------------------------------------------

/// inotify_init/inotify_init1: a new instance (`fs::inotify`); the flags are
/// IN_CLOEXEC and IN_NONBLOCK (O_CLOEXEC, O_NONBLOCK).
fn make_inotify(ctx: &Ctx, flags: u64) -> SysResult {
    let known = u64::from(oflag::O_CLOEXEC | oflag::O_NONBLOCK);
    if flags & !known != 0 {
        return Err(Errno::EINVAL);
    }
    let status = oflag::O_RDONLY | (flags as u32 & oflag::O_NONBLOCK);
    let file = OpenFile::new(crate::fs::inotify::InotifyFile::new(&ctx.k.vfs), status);
    ctx.proc().fds.lock().insert(file, flags & u64::from(oflag::O_CLOEXEC) != 0)
}

pub fn inotify_init(ctx: &Ctx, _: &mut SyscallFrame) -> SysResult {
    make_inotify(ctx, 0)
}

pub fn inotify_init1(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_inotify(ctx, f.rdi)
}

/// The instance of open file `of`: EINVAL if it is no inotify instance. (The
/// caller keeps the file while it uses the group: were the file dropped first,
/// with its descriptor closed meanwhile, a watch added after its close would
/// outlive it.)
fn group_of(of: &OpenFile) -> Result<&alloc::sync::Arc<crate::vfs::notify::Group>, Errno> {
    Ok(&of.downcast::<crate::fs::inotify::InotifyFile>().ok_or(Errno::EINVAL)?.group)
}

/// inotify_add_watch: the path looked up as `open` would (not following a last
/// symbolic link with IN_DONT_FOLLOW; ENOTDIR for a non-directory with
/// IN_ONLYDIR); the same descriptor again for a node the instance watches.
pub fn inotify_add_watch(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    use crate::vfs::notify::{ALL_BITS, IN_DONT_FOLLOW, IN_MASK_ADD, IN_MASK_CREATE, IN_ONLYDIR};
    let [fd, path_addr, mask, ..] = f.args();
    let mask = mask as u32;
    if mask & ALL_BITS == 0 || (mask & IN_MASK_ADD != 0 && mask & IN_MASK_CREATE != 0) {
        return Err(Errno::EINVAL);
    }
    let of = ctx.file(fd)?;
    group_of(&of)?;
    let path = path_arg(ctx, path_addr)?;
    let (start, _keep) = start_dir(ctx, AT_FDCWD, &path)?;
    let mut v = ctx.k.vfs.lock();
    let ino = v.lookup(start, &path, mask & IN_DONT_FOLLOW == 0)?;
    if mask & IN_ONLYDIR != 0 && !v.node(ino).is_dir() {
        return Err(Errno::ENOTDIR);
    }
    v.watches().add(group_of(&of)?, ino, mask).map(|wd| wd as u64)
}

/// inotify_rm_watch: EINVAL for a descriptor the instance does not have; queues
/// IN_IGNORED.
pub fn inotify_rm_watch(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, wd, ..] = f.args();
    let of = ctx.file(fd)?;
    let r = ctx.k.vfs.lock().watches().remove(group_of(&of)?, wd as i32);
    r.map(|_| 0)
}
