//! File attributes and the rarer file operations: permissions, owners, times,
//! truncate by path, hard links, mknod, fsync, copy_file_range, getgroups. The
//! everyday file calls are in `fs.rs`; the tree is `crate::fs::vfs`.
//!
//! There is one user (the host user who ran onering) and the whole tree starts as
//! theirs. As on Linux, only a node's owner (or root) changes its mode and times,
//! and only root gives a node away; nodes of the read-only rootfs are EROFS.

use super::fs::{base_dir, file, new_file_name, path_arg, AT_EMPTY_PATH, AT_FDCWD, AT_SYMLINK_NOFOLLOW};
use super::SyscallFrame;
use crate::arch::{self, copy_to_user};
use crate::errno::{Errno, SysResult};
use crate::fs::file::Kind;
use crate::fs::vfs::{mode, Ino};
use crate::kernel::{kernel, Kernel};
use alloc::vec;

const AT_SYMLINK_FOLLOW: u64 = 0x400;
const UTIME_NOW: i64 = 0x3fff_ffff;
const UTIME_OMIT: i64 = 0x3fff_fffe;

/// The node a `*at` call names: `path` under `dirfd`, or with AT_EMPTY_PATH the
/// descriptor itself (a null path is EFAULT; utimensat's null path is handled by it).
fn target(k: &Kernel, dirfd: u64, path_addr: u64, flags: u64, follow_default: bool) -> Result<Ino, Errno> {
    let follow = if follow_default { flags & AT_SYMLINK_NOFOLLOW == 0 } else { flags & AT_SYMLINK_FOLLOW != 0 };
    let empty = || -> Result<bool, Errno> {
        let mut b = [0u8; 1];
        arch::copy_from_user(&k.space, path_addr, &mut b)?;
        Ok(b[0] == 0)
    };
    if flags & AT_EMPTY_PATH != 0 && empty()? {
        return fd_node(k, dirfd);
    }
    let path = path_arg(k, path_addr)?;
    let base = base_dir(k, dirfd, &path)?;
    k.vfs.lookup(base, &path, follow)
}

fn fd_node(k: &Kernel, fd: u64) -> Result<Ino, Errno> {
    if fd as i32 == AT_FDCWD as i32 {
        return Ok(k.proc().cwd);
    }
    match file(k, fd)?.kind {
        Kind::Node(ino) => Ok(ino),
        _ => Err(Errno::EINVAL),
    }
}

/// Only the owner (or root) changes a node's mode or sets its times explicitly.
fn owner_or_root(k: &Kernel, ino: Ino) -> Result<(), Errno> {
    if k.uid == 0 || u64::from(k.vfs.node(ino).uid) == k.uid {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

fn chmod_node(k: &mut Kernel, ino: Ino, m: u64) -> SysResult {
    owner_or_root(k, ino)?;
    k.vfs.set_mode(ino, m as u32).map(|_| 0)
}

pub fn chmod(f: &mut SyscallFrame) -> SysResult {
    let k = &mut *kernel();
    let ino = target(k, AT_FDCWD, f.rdi, 0, true)?;
    chmod_node(k, ino, f.rsi)
}

pub fn fchmod(f: &mut SyscallFrame) -> SysResult {
    let k = &mut *kernel();
    match file(k, f.rdi)?.kind {
        Kind::Node(ino) => chmod_node(k, ino, f.rsi),
        _ => Ok(0), // pipes and friends: nothing to record
    }
}

pub fn fchmodat(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, m, ..] = f.args();
    let k = &mut *kernel();
    let ino = target(k, dirfd, path, 0, true)?;
    chmod_node(k, ino, m)
}

pub fn fchmodat2(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, m, flags, ..] = f.args();
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let ino = target(k, dirfd, path, flags, true)?;
    if k.vfs.node(ino).st_mode() & 0o170000 == mode::S_IFLNK {
        return Err(Errno::ENOTSUP); // links have no mode of their own (as Linux)
    }
    chmod_node(k, ino, m)
}

fn chown_node(k: &mut Kernel, ino: Ino, uid: u64, gid: u64) -> SysResult {
    let uid = (uid as u32 != u32::MAX).then_some(uid as u32);
    let gid = (gid as u32 != u32::MAX).then_some(gid as u32);
    if k.uid != 0 {
        // Anyone else may only "change" to themselves and their own group.
        owner_or_root(k, ino)?;
        if uid.is_some_and(|u| u64::from(u) != k.uid) || gid.is_some_and(|g| u64::from(g) != k.gid) {
            return Err(Errno::EPERM);
        }
    }
    k.vfs.set_owner_of(ino, uid, gid).map(|_| 0)
}

pub fn chown(f: &mut SyscallFrame) -> SysResult {
    let [path, uid, gid, ..] = f.args();
    let k = &mut *kernel();
    let ino = target(k, AT_FDCWD, path, 0, true)?;
    chown_node(k, ino, uid, gid)
}

pub fn lchown(f: &mut SyscallFrame) -> SysResult {
    let [path, uid, gid, ..] = f.args();
    let k = &mut *kernel();
    let ino = target(k, AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, true)?;
    chown_node(k, ino, uid, gid)
}

pub fn fchown(f: &mut SyscallFrame) -> SysResult {
    let [fd, uid, gid, ..] = f.args();
    let k = &mut *kernel();
    match file(k, fd)?.kind {
        Kind::Node(ino) => chown_node(k, ino, uid, gid),
        _ => Ok(0),
    }
}

pub fn fchownat(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, uid, gid, flags, ..] = f.args();
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let ino = target(k, dirfd, path, flags, true)?;
    chown_node(k, ino, uid, gid)
}

/// Sets times: each None is "now", Some(None) is "leave it". Setting both to now is
/// allowed to anyone who may write the node; explicit times only to its owner.
fn set_times(k: &mut Kernel, ino: Ino, times: Option<[Option<u64>; 2]>) -> SysResult {
    let now = k.now_real();
    let [a, m] = match times {
        None => [Some(now), Some(now)],
        Some(t) => {
            owner_or_root(k, ino)?;
            t
        }
    };
    k.vfs.set_times(ino, a, m).map(|_| 0)
}

/// Two `struct timespec` with UTIME_NOW / UTIME_OMIT.
fn read_timespecs(k: &Kernel, addr: u64) -> Result<Option<[Option<u64>; 2]>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    let mut b = [0u8; 32];
    arch::copy_from_user(&k.space, addr, &mut b)?;
    let now = k.now_real();
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

pub fn utimensat(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, times, flags, ..] = f.args();
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let t = read_timespecs(k, times)?;
    // A null path means the descriptor itself (not the working directory).
    let ino = if path == 0 {
        if dirfd as i32 == AT_FDCWD as i32 {
            return Err(Errno::EFAULT);
        }
        fd_node(k, dirfd)?
    } else {
        target(k, dirfd, path, flags, true)?
    };
    set_times(k, ino, t)
}

/// Two `struct timeval` (utimes, futimesat).
fn read_timevals(k: &Kernel, addr: u64) -> Result<Option<[Option<u64>; 2]>, Errno> {
    if addr == 0 {
        return Ok(None);
    }
    let mut b = [0u8; 32];
    arch::copy_from_user(&k.space, addr, &mut b)?;
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

pub fn utimes(f: &mut SyscallFrame) -> SysResult {
    let k = &mut *kernel();
    let t = read_timevals(k, f.rsi)?;
    let ino = target(k, AT_FDCWD, f.rdi, 0, true)?;
    set_times(k, ino, t)
}

pub fn futimesat(f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, times, ..] = f.args();
    let k = &mut *kernel();
    let t = read_timevals(k, times)?;
    let ino = target(k, dirfd, path, 0, true)?;
    set_times(k, ino, t)
}

pub fn utime(f: &mut SyscallFrame) -> SysResult {
    let k = &mut *kernel();
    let t = if f.rsi == 0 {
        None
    } else {
        let mut b = [0u8; 16];
        arch::copy_from_user(&k.space, f.rsi, &mut b)?;
        let s = |i: usize| {
            (i64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default()).max(0) as u64).saturating_mul(1_000_000_000)
        };
        Some([Some(s(0)), Some(s(8))])
    };
    let ino = target(k, AT_FDCWD, f.rdi, 0, true)?;
    set_times(k, ino, t)
}

pub fn truncate(f: &mut SyscallFrame) -> SysResult {
    let [path, len, ..] = f.args();
    if (len as i64) < 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let ino = target(k, AT_FDCWD, path, 0, true)?;
    let now = k.now_real();
    k.vfs.truncate(ino, len, now).map(|_| 0)
}

/// fsync, fdatasync: the tree lives in memory, so there is nothing to flush; pipes
/// and the like are EINVAL, as on Linux.
pub fn fsync(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    match file(&k, f.rdi)?.kind {
        Kind::Node(_) => Ok(0),
        _ => Err(Errno::EINVAL),
    }
}

pub fn sync(_: &mut SyscallFrame) -> SysResult {
    Ok(0)
}

pub fn syncfs(f: &mut SyscallFrame) -> SysResult {
    file(&kernel(), f.rdi).map(|_| 0)
}

fn make_link(k: &mut Kernel, olddir: u64, old: u64, newdir: u64, new: u64, flags: u64) -> SysResult {
    if flags & !(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let ino = target(k, olddir, old, flags, false)?;
    let path = path_arg(k, new)?;
    let base = base_dir(k, newdir, &path)?;
    new_file_name(k, base, &path)?;
    let (dir, name) = k.vfs.parent_of(base, &path)?;
    k.vfs.link(ino, dir, name).map(|_| 0)
}

pub fn link(f: &mut SyscallFrame) -> SysResult {
    make_link(&mut kernel(), AT_FDCWD, f.rdi, AT_FDCWD, f.rsi, 0)
}

pub fn linkat(f: &mut SyscallFrame) -> SysResult {
    let [olddir, old, newdir, new, flags, ..] = f.args();
    make_link(&mut kernel(), olddir, old, newdir, new, flags)
}

fn make_node(dirfd: u64, path_addr: u64, m: u64) -> SysResult {
    let k = &mut *kernel();
    let path = path_arg(k, path_addr)?;
    let base = base_dir(k, dirfd, &path)?;
    new_file_name(k, base, &path)?;
    let (dir, name) = k.vfs.parent_of(base, &path)?;
    let perm = m as u32 & 0o7777 & !k.proc().umask;
    match m as u32 & 0o170000 {
        0 | mode::S_IFREG => {
            let now = k.now_real();
            k.vfs.create(dir, name, perm, false, now).map(|_| 0)
        }
        mode::S_IFIFO => {
            let now = k.now_real();
            k.vfs.mkfifo(dir, name, perm, now).map(|_| 0)
        }
        mode::S_IFDIR => Err(Errno::EINVAL),
        // Devices and sockets need privileges or a socket layer.
        _ => Err(Errno::EPERM),
    }
}

pub fn mknod(f: &mut SyscallFrame) -> SysResult {
    make_node(AT_FDCWD, f.rdi, f.rsi)
}

pub fn mknodat(f: &mut SyscallFrame) -> SysResult {
    make_node(f.rdi, f.rsi, f.rdx)
}

pub fn getgroups(f: &mut SyscallFrame) -> SysResult {
    let [size, list, ..] = f.args();
    let size = size as i32;
    if size < 0 {
        return Err(Errno::EINVAL);
    }
    if size == 0 {
        return Ok(1);
    }
    let k = kernel();
    copy_to_user(&k.space, list, &(k.gid as u32).to_le_bytes())?;
    Ok(1)
}

/// copy_file_range between files of the tree (at most 64 KiB per call, through a
/// kernel-heap buffer: a short copy, which callers continue).
pub fn copy_file_range(f: &mut SyscallFrame) -> SysResult {
    let [fd_in, off_in, fd_out, off_out, len, flags] = f.args();
    if flags != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let (fin, fout) = (file(k, fd_in)?, file(k, fd_out)?);
    if !fin.readable() || !fout.writable() || fout.flags() & crate::fs::file::oflag::O_APPEND != 0 {
        return Err(Errno::EBADF);
    }
    let (Kind::Node(src), Kind::Node(dst)) = (&fin.kind, &fout.kind) else {
        return Err(Errno::EINVAL);
    };
    if k.vfs.device(*src).is_some() || k.vfs.device(*dst).is_some() {
        return Err(Errno::EINVAL);
    }
    let read_off = |k: &Kernel, p: u64, cur: u64| -> Result<u64, Errno> {
        if p == 0 {
            Ok(cur)
        } else {
            let v = arch::read_user_u64(&k.space, p)?;
            if (v as i64) < 0 {
                Err(Errno::EINVAL)
            } else {
                Ok(v)
            }
        }
    };
    let at_in = read_off(k, off_in, fin.offset())?;
    let at_out = read_off(k, off_out, fout.offset())?;
    let len = len.min(64 << 10);
    if src == dst && at_in < at_out.saturating_add(len) && at_out < at_in.saturating_add(len) {
        return Err(Errno::EINVAL); // overlapping ranges of one file, as Linux
    }
    let mut buf = vec![0u8; len as usize];
    let n = k.vfs.read(*src, at_in, &mut buf)?;
    let now = k.now_real();
    let n = if n == 0 { 0 } else { k.vfs.write(*dst, at_out, &buf[..n], now)? };
    for (p, of, at) in [(off_in, &fin, at_in), (off_out, &fout, at_out)] {
        if p == 0 {
            of.set_offset(at + n as u64);
        } else {
            copy_to_user(&k.space, p, &(at + n as u64).to_le_bytes())?;
        }
    }
    Ok(n as u64)
}
