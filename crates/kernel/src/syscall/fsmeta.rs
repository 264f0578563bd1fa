//! File attributes and the rarer file operations: permissions, owners, times,
//! truncate by path, hard links, mknod, fsync, copy_file_range, getgroups. The
//! everyday file calls are in `fs.rs`; the tree is `crate::vfs`.
//!
//! There is one user (the host user who ran onering) and the whole tree starts as
//! theirs. As on Linux, only a node's owner (or root) changes its mode and times,
//! and only root gives a node away; nodes of the read-only rootfs are EROFS.
//!
//! A path is looked up and the node changed under one hold of the tree's lock; the
//! starting directory (working directory or a descriptor's node) is found before,
//! and stays valid because it is held open.

use super::fs::{
    cwd, dir, is_cwd, new_file_name, path_arg, start_dir, Keep, AT_EMPTY_PATH, AT_FDCWD, AT_SYMLINK_NOFOLLOW,
};
use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::file::{mode, oflag};
use crate::mm::user::{UserMem, UserMemExt};
use crate::task::Ctx;
use crate::time::real_now;
use crate::vfs::{Ino, Vfs};
use alloc::vec;
use alloc::vec::Vec;

const AT_SYMLINK_FOLLOW: u64 = 0x400;
const UTIME_NOW: i64 = 0x3fff_ffff;
const UTIME_OMIT: i64 = 0x3fff_fffe;

/// The node a `*at` call names, found in two steps: what can be read before the
/// tree is locked, then the lookup under its lock.
enum Target {
    /// A descriptor's (or the working directory's) node itself (AT_EMPTY_PATH).
    Node(Ino, #[allow(dead_code)] Keep),
    Path {
        start: Ino,
        path: Vec<u8>,
        follow: bool,
        _keep: Keep,
    },
}

impl Target {
    /// `path` under `dirfd`, or with AT_EMPTY_PATH and an empty path the descriptor
    /// itself (a null path is EFAULT).
    fn new(ctx: &Ctx, dirfd: u64, path_addr: u64, flags: u64, follow_default: bool) -> Result<Target, Errno> {
        let follow = if follow_default { flags & AT_SYMLINK_NOFOLLOW == 0 } else { flags & AT_SYMLINK_FOLLOW != 0 };
        if flags & AT_EMPTY_PATH != 0 && ctx.user.read_array::<1>(path_addr)?[0] == 0 {
            let (ino, keep) = fd_node(ctx, dirfd)?;
            return Ok(Target::Node(ino, keep));
        }
        let path = path_arg(ctx, path_addr)?;
        let (start, _keep) = start_dir(ctx, dirfd, &path)?;
        Ok(Target::Path { start, path, follow, _keep })
    }

    fn resolve(&self, v: &mut Vfs) -> Result<Ino, Errno> {
        match self {
            Target::Node(ino, _) => Ok(*ino),
            Target::Path { start, path, follow, .. } => {
                let d = dir(v, *start)?;
                v.lookup(d, path, *follow)
            }
        }
    }
}

/// The node of descriptor `fd` (or the working directory), kept alive.
fn fd_node(ctx: &Ctx, fd: u64) -> Result<(Ino, Keep), Errno> {
    if is_cwd(fd) {
        return Ok(cwd(ctx));
    }
    super::fs::fd_node(ctx, fd, Errno::EINVAL)
}

/// Only the owner (or root) changes a node's mode or sets its times explicitly.
fn owner_or_root(ctx: &Ctx, v: &Vfs, ino: Ino) -> Result<(), Errno> {
    if ctx.k.cfg.uid == 0 || u64::from(v.node(ino).uid) == ctx.k.cfg.uid {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

fn chmod_node(ctx: &Ctx, t: &Target, m: u64, refuse_links: bool) -> SysResult {
    let mut v = ctx.k.vfs.lock();
    let ino = t.resolve(&mut v)?;
    if refuse_links && v.node(ino).st_mode() & mode::S_IFMT == mode::S_IFLNK {
        return Err(Errno::ENOTSUP); // links have no mode of their own (as Linux)
    }
    owner_or_root(ctx, &v, ino)?;
    v.set_mode(ino, m as u32).map(|_| 0)
}

pub fn chmod(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let t = Target::new(ctx, AT_FDCWD, f.rdi, 0, true)?;
    chmod_node(ctx, &t, f.rsi, false)
}

pub fn fchmod(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let of = ctx.file(f.rdi)?;
    match of.node() {
        Some(ino) => chmod_node(ctx, &Target::Node(ino, Keep::File(of.clone())), f.rsi, false),
        None => Ok(0), // pipes and friends: nothing to record
    }
}

pub fn fchmodat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, m, ..] = f.args();
    let t = Target::new(ctx, dirfd, path, 0, true)?;
    chmod_node(ctx, &t, m, false)
}

pub fn fchmodat2(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, m, flags, ..] = f.args();
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let t = Target::new(ctx, dirfd, path, flags, true)?;
    chmod_node(ctx, &t, m, true)
}

fn chown_node(ctx: &Ctx, t: &Target, uid: u64, gid: u64) -> SysResult {
    let uid = (uid as u32 != u32::MAX).then_some(uid as u32);
    let gid = (gid as u32 != u32::MAX).then_some(gid as u32);
    let mut v = ctx.k.vfs.lock();
    let ino = t.resolve(&mut v)?;
    let cfg = &ctx.k.cfg;
    if cfg.uid != 0 {
        // Anyone else may only "change" to themselves and their own group.
        owner_or_root(ctx, &v, ino)?;
        if uid.is_some_and(|u| u64::from(u) != cfg.uid) || gid.is_some_and(|g| u64::from(g) != cfg.gid) {
            return Err(Errno::EPERM);
        }
    }
    v.set_owner_of(ino, uid, gid).map(|_| 0)
}

pub fn chown(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [path, uid, gid, ..] = f.args();
    let t = Target::new(ctx, AT_FDCWD, path, 0, true)?;
    chown_node(ctx, &t, uid, gid)
}

pub fn lchown(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [path, uid, gid, ..] = f.args();
    let t = Target::new(ctx, AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, true)?;
    chown_node(ctx, &t, uid, gid)
}

pub fn fchown(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, uid, gid, ..] = f.args();
    let of = ctx.file(fd)?;
    match of.node() {
        Some(ino) => chown_node(ctx, &Target::Node(ino, Keep::File(of.clone())), uid, gid),
        None => Ok(0),
    }
}

pub fn fchownat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, uid, gid, flags, ..] = f.args();
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let t = Target::new(ctx, dirfd, path, flags, true)?;
    chown_node(ctx, &t, uid, gid)
}

/// Sets times: None is "both now", Some with None inside is "leave that one".
/// Setting both to now is allowed to anyone who may write the node; explicit times
/// only to its owner.
fn set_times(ctx: &Ctx, t: &Target, times: Option<[Option<u64>; 2]>) -> SysResult {
    let now = real_now();
    let mut v = ctx.k.vfs.lock();
    let ino = t.resolve(&mut v)?;
    let [a, m] = match times {
        None => [Some(now), Some(now)],
        Some(t) => {
            owner_or_root(ctx, &v, ino)?;
            t
        }
    };
    v.set_times(ino, a, m).map(|_| 0)
}

/// Two `struct timespec` with UTIME_NOW / UTIME_OMIT.
fn read_timespecs(user: &dyn UserMem, addr: u64) -> Result<Option<[Option<u64>; 2]>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    let b = user.read_array::<32>(addr)?;
    let now = real_now();
    let mut out = [None; 2];
    let mut all_now = true;
    for (i, o) in out.iter_mut().enumerate() {
        let sec = i64::from_le_bytes(b[i * 16..i * 16 + 8].try_into().unwrap_or_default());
        let nsec = i64::from_le_bytes(b[i * 16 + 8..i * 16 + 16].try_into().unwrap_or_default());
        *o = match nsec {
            UTIME_NOW => Some(now),
            UTIME_OMIT => {
                all_now = false;
                None
            }
            0..=999_999_999 => {
                all_now = false;
                // Before 1970 clamps to the epoch (the tree stores unsigned times).
                Some((sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(nsec as u64))
            }
            _ => return Err(Errno::EINVAL),
        };
    }
    Ok(if all_now { None } else { Some(out) })
}

pub fn utimensat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, times, flags, ..] = f.args();
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let t = read_timespecs(ctx.user, times)?;
    // A null path means the descriptor itself (not the working directory).
    let target = if path == 0 {
        if is_cwd(dirfd) {
            return Err(Errno::EFAULT);
        }
        let (ino, keep) = fd_node(ctx, dirfd)?;
        Target::Node(ino, keep)
    } else {
        Target::new(ctx, dirfd, path, flags, true)?
    };
    set_times(ctx, &target, t)
}

/// Two `struct timeval` (utimes, futimesat).
fn read_timevals(user: &dyn UserMem, addr: u64) -> Result<Option<[Option<u64>; 2]>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    let b = user.read_array::<32>(addr)?;
    let mut out = [None; 2];
    for (i, o) in out.iter_mut().enumerate() {
        let sec = i64::from_le_bytes(b[i * 16..i * 16 + 8].try_into().unwrap_or_default());
        let usec = i64::from_le_bytes(b[i * 16 + 8..i * 16 + 16].try_into().unwrap_or_default());
        if !(0..1_000_000).contains(&usec) {
            return Err(Errno::EINVAL);
        }
        *o = Some((sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(usec as u64 * 1000));
    }
    Ok(Some(out))
}

pub fn utimes(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let t = read_timevals(ctx.user, f.rsi)?;
    let target = Target::new(ctx, AT_FDCWD, f.rdi, 0, true)?;
    set_times(ctx, &target, t)
}

pub fn futimesat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, times, ..] = f.args();
    let t = read_timevals(ctx.user, times)?;
    let target = Target::new(ctx, dirfd, path, 0, true)?;
    set_times(ctx, &target, t)
}

pub fn utime(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let t = if f.rsi == 0 {
        None
    } else {
        let b = ctx.user.read_array::<16>(f.rsi)?;
        let s = |i: usize| {
            (i64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default()).max(0) as u64).saturating_mul(1_000_000_000)
        };
        Some([Some(s(0)), Some(s(8))])
    };
    let target = Target::new(ctx, AT_FDCWD, f.rdi, 0, true)?;
    set_times(ctx, &target, t)
}

pub fn truncate(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [path, len, ..] = f.args();
    if (len as i64) < 0 {
        return Err(Errno::EINVAL);
    }
    let t = Target::new(ctx, AT_FDCWD, path, 0, true)?;
    let mut v = ctx.k.vfs.lock();
    let ino = t.resolve(&mut v)?;
    v.truncate(ino, len, real_now()).map(|_| 0)
}

/// fsync, fdatasync: the file object's `sync` (a volume's file: the host's fsync;
/// in-memory files have nothing to flush); pipes and the like are EINVAL, as on
/// Linux.
pub fn fsync(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let file = ctx.file(f.rdi)?;
    file.node().ok_or(Errno::EINVAL)?;
    file.obj().sync().map(|_| 0)
}

pub fn sync(_: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Ok(0)
}

pub fn syncfs(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    ctx.file(f.rdi).map(|_| 0)
}

fn make_link(ctx: &Ctx, olddir: u64, old: u64, newdir: u64, new: u64, flags: u64) -> SysResult {
    if flags & !(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let from = Target::new(ctx, olddir, old, flags, false)?;
    let path = path_arg(ctx, new)?;
    let (start, _keep) = start_dir(ctx, newdir, &path)?;
    let mut v = ctx.k.vfs.lock();
    let ino = from.resolve(&mut v)?;
    let base = dir(&v, start)?;
    new_file_name(&mut v, base, &path)?;
    let (parent, name) = v.parent_of(base, &path)?;
    let name = name.to_vec();
    v.link(ino, parent, &name).map(|_| 0)
}

pub fn link(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_link(ctx, AT_FDCWD, f.rdi, AT_FDCWD, f.rsi, 0)
}

pub fn linkat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [olddir, old, newdir, new, flags, ..] = f.args();
    make_link(ctx, olddir, old, newdir, new, flags)
}

fn make_node(ctx: &Ctx, dirfd: u64, path_addr: u64, m: u64) -> SysResult {
    let path = path_arg(ctx, path_addr)?;
    let (start, _keep) = start_dir(ctx, dirfd, &path)?;
    let umask = ctx.proc().fs.lock().umask;
    let now = real_now();
    let mut v = ctx.k.vfs.lock();
    let base = dir(&v, start)?;
    new_file_name(&mut v, base, &path)?;
    let (parent, name) = v.parent_of(base, &path)?;
    let name = name.to_vec();
    let perm = m as u32 & 0o7777 & !umask;
    match m as u32 & mode::S_IFMT {
        0 | mode::S_IFREG => v.create(parent, &name, perm, false, now).map(|_| 0),
        mode::S_IFIFO => v.mkfifo(parent, &name, perm, now).map(|_| 0),
        mode::S_IFDIR => Err(Errno::EINVAL),
        // Devices and sockets need privileges or a socket layer.
        _ => Err(Errno::EPERM),
    }
}

pub fn mknod(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_node(ctx, AT_FDCWD, f.rdi, f.rsi)
}

pub fn mknodat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    make_node(ctx, f.rdi, f.rsi, f.rdx)
}

pub fn getgroups(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [size, list, ..] = f.args();
    let size = size as i32;
    if size < 0 {
        return Err(Errno::EINVAL);
    }
    if size == 0 {
        return Ok(1);
    }
    ctx.user.write_u32(list, ctx.k.cfg.gid as u32)?;
    Ok(1)
}

/// copy_file_range between files of the tree (at most 64 KiB per call, through a
/// kernel-heap buffer: a short copy, which callers continue).
pub fn copy_file_range(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd_in, off_in, fd_out, off_out, len, flags] = f.args();
    if flags != 0 {
        return Err(Errno::EINVAL);
    }
    let (fin, fout) = (ctx.file(fd_in)?, ctx.file(fd_out)?);
    if !fin.readable() || !fout.writable() || fout.flags() & oflag::O_APPEND != 0 {
        return Err(Errno::EBADF);
    }
    let (Some(src), Some(dst)) = (fin.node(), fout.node()) else {
        return Err(Errno::EINVAL);
    };
    let read_off = |p: u64, cur: u64| -> Result<u64, Errno> {
        if p == 0 {
            return Ok(cur);
        }
        let v = ctx.user.read_u64(p)?;
        if (v as i64) < 0 {
            Err(Errno::EINVAL)
        } else {
            Ok(v)
        }
    };
    let at_in = read_off(off_in, fin.offset())?;
    let at_out = read_off(off_out, fout.offset())?;
    let len = len.min(64 << 10);
    if src == dst && at_in < at_out.saturating_add(len) && at_out < at_in.saturating_add(len) {
        return Err(Errno::EINVAL); // overlapping ranges of one file, as Linux
    }
    let n = {
        let mut v = ctx.k.vfs.lock();
        if v.device(src).is_some() || v.device(dst).is_some() {
            return Err(Errno::EINVAL);
        }
        let mut buf = vec![0u8; len as usize];
        let n = v.read(src, at_in, &mut buf)?;
        if n == 0 {
            0
        } else {
            v.write(dst, at_out, &buf[..n], real_now())?
        }
    };
    for (p, of, at) in [(off_in, &fin, at_in), (off_out, &fout, at_out)] {
        if p == 0 {
            of.set_offset(at + n as u64);
        } else {
            ctx.user.write_u64(p, at + n as u64)?;
        }
    }
    Ok(n as u64)
}

/// What `statfs` says of node `ino`'s file system: a volume's is the host's
/// (`fstatfs` of its directory); the rest is onering's tree, a tmpfs as Linux
/// names it, its size the tree's budget.
fn statfs_of(v: &mut crate::vfs::Vfs, ino: crate::vfs::Ino) -> Result<[u64; 9], Errno> {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    if let Some(crate::vfs::host::Layer::Volume { .. }) = v.layer(ino) {
        let dir = if v.node(ino).is_dir() { ino } else { v.node(ino).parent };
        let h = v.handle_of(dir)?;
        return onering_arch::hostcall::fs::statfs(h).map_err(Errno::from_host);
    }
    let (used, limit) = v.usage();
    let blocks = (limit / 4096) as u64;
    let free = (limit.saturating_sub(used) / 4096) as u64;
    Ok([
        TMPFS_MAGIC,
        4096,
        blocks,
        free,
        free,
        blocks / 2,
        (blocks / 2).saturating_sub((used / 4096) as u64 / 2),
        255,
        4096,
    ])
}

/// Writes `struct statfs` (x86-64: 120 bytes) from the nine numbers.
fn put_statfs(ctx: &Ctx, buf: u64, n: [u64; 9]) -> SysResult {
    let [ftype, bsize, blocks, bfree, bavail, files, ffree, namelen, frsize] = n;
    let mut out = [0u8; 120];
    for (i, w) in [ftype, bsize, blocks, bfree, bavail, files, ffree, 0, namelen, frsize].iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    ctx.user.write(buf, &out)?;
    Ok(0)
}

pub fn statfs(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [path, buf, ..] = f.args();
    let t = Target::new(ctx, AT_FDCWD, path, 0, true)?;
    let n = {
        let mut v = ctx.k.vfs.lock();
        let ino = t.resolve(&mut v)?;
        statfs_of(&mut v, ino)?
    };
    put_statfs(ctx, buf, n)
}

pub fn fstatfs(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, ..] = f.args();
    let of = ctx.file(fd)?;
    // (Pipes, sockets and the like: Linux reports their pseudo file systems; a
    // tmpfs-like answer serves the callers that only look at sizes.)
    let n = match of.node() {
        Some(ino) => statfs_of(&mut ctx.k.vfs.lock(), ino)?,
        None => statfs_of(&mut ctx.k.vfs.lock(), crate::vfs::ROOT)?,
    };
    put_statfs(ctx, buf, n)
}

/// `posix_fadvise`: advice only (files are read through the page cache as they
/// are); the descriptor is checked, a pipe or socket is ESPIPE, as on Linux.
pub fn fadvise64(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, _, _, advice, ..] = f.args();
    let of = ctx.file(fd)?;
    if of.node().is_none() {
        return Err(Errno::ESPIPE);
    }
    if advice > 5 {
        return Err(Errno::EINVAL);
    }
    Ok(0)
}

/// Extended attributes: no file here has any (the tree keeps none; a host file's
/// are not passed through). Getting or removing one is ENODATA once the file is
/// found, listing gives an empty list, setting one EOPNOTSUPP, as on a file
/// system without xattr support (`ls -l`, `cp -a` and `tar` carry on quietly).
fn xattr_path(ctx: &Ctx, f: &SyscallFrame, follow: bool, found: Errno) -> SysResult {
    let t = Target::new(ctx, AT_FDCWD, f.rdi, 0, follow)?;
    t.resolve(&mut ctx.k.vfs.lock())?;
    Err(found)
}

fn xattr_fd(ctx: &Ctx, f: &SyscallFrame, found: Errno) -> SysResult {
    ctx.file(f.rdi)?;
    Err(found)
}

pub fn getxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_path(ctx, f, true, Errno::ENODATA)
}

pub fn lgetxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_path(ctx, f, false, Errno::ENODATA)
}

pub fn fgetxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_fd(ctx, f, Errno::ENODATA)
}

/// Listing finds the file and no attribute: an empty list.
fn none_listed(r: SysResult) -> SysResult {
    match r {
        Err(Errno::ENODATA) => Ok(0),
        r => r,
    }
}

pub fn listxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    none_listed(xattr_path(ctx, f, true, Errno::ENODATA))
}

pub fn llistxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    none_listed(xattr_path(ctx, f, false, Errno::ENODATA))
}

pub fn flistxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    none_listed(xattr_fd(ctx, f, Errno::ENODATA))
}

pub fn setxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_path(ctx, f, true, Errno::ENOTSUP)
}

pub fn lsetxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_path(ctx, f, false, Errno::ENOTSUP)
}

pub fn fsetxattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_fd(ctx, f, Errno::ENOTSUP)
}

pub fn removexattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_path(ctx, f, true, Errno::ENODATA)
}

pub fn lremovexattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_path(ctx, f, false, Errno::ENODATA)
}

pub fn fremovexattr(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    xattr_fd(ctx, f, Errno::ENODATA)
}

/// fallocate: mode 0 makes the file at least `offset + len` long (the bytes a
/// hole until written: onering's files take memory as they are written);
/// FALLOC_FL_KEEP_SIZE alone changes nothing; other modes are EOPNOTSUPP.
pub fn fallocate(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    const FALLOC_FL_KEEP_SIZE: u64 = 1;
    let [fd, mode, offset, len, ..] = f.args();
    let of = ctx.file(fd)?;
    if (offset as i64) < 0 || (len as i64) <= 0 {
        return Err(Errno::EINVAL);
    }
    if !of.writable() {
        return Err(Errno::EBADF);
    }
    let ino = of.node().ok_or(Errno::ESPIPE)?;
    let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
    let mut v = ctx.k.vfs.lock();
    if v.node(ino).is_dir() {
        return Err(Errno::EISDIR);
    }
    match mode {
        0 if end > v.node(ino).size() => v.truncate(ino, end, real_now()).map(|_| 0),
        0 | FALLOC_FL_KEEP_SIZE => Ok(0),
        _ => Err(Errno::EOPNOTSUPP),
    }
}
