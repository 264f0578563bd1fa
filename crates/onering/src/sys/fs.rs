//! Host file calls the standard library does not offer on a directory descriptor:
//! `openat2` confined beneath a directory, the `*at` calls that change a directory,
//! and OFD record locks. Each takes borrowed or owned descriptors and a name that
//! the caller checked is one path component (`onering_abi::hostfs::valid_name`).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

fn cname(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Opens `name` in directory `dir` with `flags` (`O_NOFOLLOW | O_CLOEXEC` added),
/// resolved beneath `dir`, following no link at all (a link itself is opened with
/// `O_PATH`, else it is ELOOP) and no magic link.
pub fn open_beneath(dir: BorrowedFd<'_>, name: &[u8], flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cname(name)?;
    // SAFETY: `open_how` is three integers: all-zero bytes are a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 { u64::from(mode & 0o7777) } else { 0 };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 reads the NUL-terminated name `c` and the `open_how` `how`
    // (its size passed with it), both alive across the call; `dir` is a descriptor
    // borrowed for the call. It returns a new descriptor this process owns, or -1.
    let fd = unsafe {
        libc::syscall(libc::SYS_openat2, dir.as_raw_fd(), c.as_ptr(), &how as *const libc::open_how, size_of_val(&how))
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat2: an open descriptor nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    Ok(owned)
}

/// `fstatat(dir, name)` of the entry itself (no link followed, no automount): one
/// host call. `name` is one component (the caller checked it), so the entry lies
/// in `dir`, as `open_beneath` would find it.
pub fn stat_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<libc::stat> {
    let c = cname(name)?;
    // SAFETY: `stat` is plain integers: all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT;
    // fstatat reads the NUL-terminated name `c` and writes one `stat` into `st`.
    // SAFETY: `c` and `st` are alive across the call; `dir` is borrowed.
    let r = unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, flags) };
    check(r).map(|()| st)
}

/// `fstat(fd)` (an `O_PATH` descriptor too).
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: `stat` is plain integers: all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `stat` into `st`, alive across the call; `fd` is borrowed.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    check(r).map(|()| st)
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdir_at(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> io::Result<()> {
    let c = cname(name)?;
    // SAFETY: mkdirat reads the NUL-terminated name `c`, alive across the call; `dir` is borrowed.
    let r = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) };
    check(r)
}

/// `symlinkat(target, dir, name)`.
pub fn symlink_at(target: &[u8], dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let (t, c) = (cname(target)?, cname(name)?);
    // SAFETY: symlinkat reads the two NUL-terminated strings, alive across the call; `dir` is borrowed.
    let r = unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), c.as_ptr()) };
    check(r)
}

/// `unlinkat(dir, name, rmdir ? AT_REMOVEDIR : 0)`.
pub fn unlink_at(dir: BorrowedFd<'_>, name: &[u8], rmdir: bool) -> io::Result<()> {
    let c = cname(name)?;
    let flags = if rmdir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: unlinkat reads the NUL-terminated name `c`, alive across the call; `dir` is borrowed.
    let r = unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) };
    check(r)
}

/// `renameat(dir, name, dir2, name2)`.
pub fn rename_at(dir: BorrowedFd<'_>, name: &[u8], dir2: BorrowedFd<'_>, name2: &[u8]) -> io::Result<()> {
    let (a, b) = (cname(name)?, cname(name2)?);
    // SAFETY: renameat reads two NUL-terminated names, alive across the call; both dirs are borrowed.
    let r = unsafe { libc::renameat(dir.as_raw_fd(), a.as_ptr(), dir2.as_raw_fd(), b.as_ptr()) };
    check(r)
}

/// `linkat(dir, name, dir2, name2, 0)`: never follows a link.
pub fn link_at(dir: BorrowedFd<'_>, name: &[u8], dir2: BorrowedFd<'_>, name2: &[u8]) -> io::Result<()> {
    let (a, b) = (cname(name)?, cname(name2)?);
    // SAFETY: linkat reads two NUL-terminated names, alive across the call; both dirs are borrowed.
    let r = unsafe { libc::linkat(dir.as_raw_fd(), a.as_ptr(), dir2.as_raw_fd(), b.as_ptr(), 0) };
    check(r)
}

/// The target of the symbolic link `link` (an `O_PATH | O_NOFOLLOW` descriptor).
pub fn read_link(link: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: readlinkat with an empty path reads the link `link` refers to and
    // writes at most `buf.len()` bytes into `buf`, which lives across the call.
    let n = unsafe { libc::readlinkat(link.as_raw_fd(), c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH)`: the inode `fd` refers to (an
/// `O_PATH` descriptor works), no path walked. `u32::MAX` leaves one as it is.
pub fn chown_fd(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // (AT_EMPTY_PATH: `fd` itself names the inode.)
    // SAFETY: fchownat reads only the empty NUL-terminated path; `fd` is borrowed for the call.
    let r = unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH) };
    check(r)
}

/// `utimensat(fd, "", times, AT_EMPTY_PATH)`: access and modification times (ns
/// since the epoch, None: left as they are) of the inode `fd` refers to.
pub fn utimes_fd(fd: BorrowedFd<'_>, atime: Option<u64>, mtime: Option<u64>) -> io::Result<()> {
    let ts = |t: Option<u64>| match t {
        Some(ns) => libc::timespec { tv_sec: (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as i64 },
        None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
    };
    let times = [ts(atime), ts(mtime)];
    // (AT_EMPTY_PATH: `fd` itself names the inode.)
    // SAFETY: utimensat reads the empty path and the two timespecs of `times`, alive across the call.
    let r = unsafe { libc::utimensat(fd.as_raw_fd(), c"".as_ptr(), times.as_ptr(), libc::AT_EMPTY_PATH) };
    check(r)
}

/// An open file description lock (`F_OFD_SETLK`, never waiting) on `fd`: `kind`
/// `F_RDLCK`, `F_WRLCK` or `F_UNLCK` over `len` bytes from `start` (0: to the end).
pub fn ofd_lock(fd: BorrowedFd<'_>, kind: i16, start: i64, len: i64) -> io::Result<()> {
    // SAFETY: `struct flock` is plain integers: all-zero bytes are a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: F_OFD_SETLK reads one `struct flock`, `fl`, alive across the call; `fd` is borrowed.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl as *const libc::flock) };
    check(r)
}

/// `fstatfs(fd)` as the nine numbers the protocol passes (type, bsize, blocks,
/// bfree, bavail, files, ffree, namelen, frsize).
pub fn statfs_fd(fd: BorrowedFd<'_>) -> io::Result<[u64; 9]> {
    // SAFETY: `struct statfs` is plain integers: all-zero bytes are a valid value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one `struct statfs` into `s`, alive across the call; `fd` is borrowed.
    let r = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut s) };
    check(r)?;
    Ok([
        s.f_type as u64,
        s.f_bsize as u64,
        s.f_blocks,
        s.f_bfree,
        s.f_bavail,
        s.f_files,
        s.f_ffree,
        s.f_namelen as u64,
        s.f_frsize as u64,
    ])
}

/// Raises this process's soft limit on open descriptors to its hard limit (the
/// host-file table keeps one per directory the guest walked and file it has open).
/// A failure leaves the limit as it was: the table then meets it sooner (ENFILE).
pub fn raise_nofile() {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one `struct rlimit` into `l`, alive across the call.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    if got != 0 {
        return;
    }
    l.rlim_cur = l.rlim_max;
    // SAFETY: setrlimit reads one `struct rlimit`, `l`, alive across the call.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) };
}

/// A whole file mapped read-only and private: the program file at start-up, read
/// through the host's page cache without a copy (reading 2.4 MB into fresh memory
/// costs ~1.3 ms here, mapping it ~0.15 ms). Empty files are not mapped.
pub struct MappedFile {
    ptr: *mut libc::c_void,
    len: usize,
}

// The mapping is read-only and owned by this value: sending it between threads
// only moves the right to read immutable bytes and to unmap them once.
// SAFETY: nothing ever writes through the mapping, and only its owner unmaps it.
unsafe impl Send for MappedFile {}
// SAFETY: as for Send: nothing ever writes through the mapping.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps all of `file` (its length now).
    pub fn new(file: &std::fs::File) -> io::Result<MappedFile> {
        let len = usize::try_from(file.metadata()?.len()).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        if len == 0 {
            return Ok(MappedFile { ptr: std::ptr::null_mut(), len: 0 });
        }
        let (fd, prot, flags) = (file.as_raw_fd(), libc::PROT_READ, libc::MAP_PRIVATE);
        // The descriptor may be closed once the mapping exists.
        // SAFETY: a new private read-only mapping the kernel places; it aliases no Rust object.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(MappedFile { ptr, len })
    }
}

impl std::ops::Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // (A host process that truncates the file meanwhile makes a read past the
        // new end raise SIGBUS, as with any mapped file; docs/design.md, "Threat
        // model".)
        // SAFETY: `ptr` maps `len` readable bytes for this value's life, written by nothing here.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if self.len != 0 {
            // (No slice of it outlives `self`: Deref borrows it.)
            // SAFETY: unmaps exactly the mapping `new` made, once, when its owner goes.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}
