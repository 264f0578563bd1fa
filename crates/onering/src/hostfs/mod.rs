//! The host file server: serves `Hostcall::Fs` (protocol in `onering_abi::hostfs`)
//! for `-v HOST:GUEST[:ro]` volumes and `--rootfs DIR`.
//!
//! A table of host descriptors, named by handle: handles `0..n` are the mounts'
//! root directories, opened when the VM is made; the guest makes more by looking
//! up one name at a time in a directory it holds. Confinement does not depend on
//! the guest: every name is checked to be one component (no `/`, `.`, `..`, NUL)
//! and opened with `openat2` beneath its directory, following no link (a link is
//! opened as itself, `O_PATH`), so a handle can only ever refer to something inside
//! its mount's directory, however the host tree changes meanwhile. Attribute calls
//! act on the descriptor itself (`AT_EMPTY_PATH`), never on a path; a read-only
//! mount (`:ro`, and the rootfs unless `--rootfs-rw`: its changes stay in the VM) refuses every change
//! with EROFS. Guest buffers are translated through the guest's page tables and
//! copied through a bounded buffer; a guest-chosen length never sizes an
//! allocation beyond `MAX_IO`'s pieces, and the table holds at most `MAX_HANDLES`.
//! (The closes and unlocks a call carries, deferred by the guest, are read and
//! checked by `exit::hostcall` and served here one by one before the call.)

pub mod tar;

use crate::arch::paging::{read_guest, read_guest_pairs, write_guest};
use crate::sys::fs as sysfs;
use onering_abi::hostfs::{self as proto, DirRecord, MountRecord};
use onering_abi::HostStat;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// Most handles at once (each a host descriptor).
const MAX_HANDLES: usize = 1 << 16;
/// Bytes moved through the bounce buffer at a time.
const PIECE: usize = 1 << 20;

const EBADF: i64 = 9;
const ENOENT: i64 = 2;
const EFAULT: i64 = 14;
const EINVAL: i64 = 22;
const ENFILE: i64 = 23;
const EROFS: i64 = 30;
const EXDEV: i64 = 18;
const ELOOP: i64 = 40;
const ERANGE: i64 = 34;
const ENOSPC: i64 = 28;

#[derive(Debug, Error)]
pub enum HostFsError {
    #[error("{0}: {1}")]
    Open(String, std::io::Error),
    #[error("{0}: not a directory")]
    NotADirectory(String),
}

/// One mount as the command line gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSpec {
    pub host: PathBuf,
    /// Absolute path in the VM.
    pub guest: Vec<u8>,
    pub ro: bool,
    /// The root (`--rootfs DIR`): the lower layer of a tree whose changes stay in
    /// the VM, or with `ro` false (`--rootfs-rw`) written through like a volume.
    pub rootfs: bool,
    /// `host` is a tar archive served in place (`--rootfs FILE.tar`).
    pub tar: bool,
}

/// An open handle's bytes: its host file, or for an archive's entry the entry
/// in the archive (its index and number).
struct Source<'a> {
    file: Arc<File>,
    tar: Option<(&'a tar::TarIndex, usize)>,
}

impl Source<'_> {
    fn read_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
        match self.tar {
            Some((t, x)) => t.read(x, at, buf),
            None => self.file.read_at(buf, at),
        }
    }
}

struct Entry {
    /// The host descriptor (for an archive's entry, the archive's), shared with
    /// the I/O in flight on it (which runs without the table's lock).
    file: Arc<File>,
    /// The entry's node in its mount's archive, if it is one.
    tar: Option<usize>,
    mount: usize,
    /// A directory's listing, read at READDIR index 0.
    listing: Option<Vec<(Vec<u8>, HostStat)>>,
    /// The error of a deferred write that failed, for the next FSYNC.
    write_error: Option<i64>,
}

#[derive(Default)]
struct Table {
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
    live: usize,
}

impl Table {
    /// A new handle on `entry` (the caller checked the table's limit).
    fn insert(&mut self, entry: Entry) -> i64 {
        let h = match self.free.pop() {
            Some(i) => {
                self.entries[i] = Some(entry);
                i
            }
            None => {
                self.entries.push(Some(entry));
                self.entries.len() - 1
            }
        };
        self.live += 1;
        h as i64
    }
}

/// The server: the mounts and the handle table (shared by all vCPU threads).
pub struct HostFs {
    mounts: Vec<MountSpec>,
    /// The archive of each tar mount.
    tars: Vec<Option<tar::TarIndex>>,
    table: Mutex<Table>,
}

fn err(e: std::io::Error) -> i64 {
    -i64::from(e.raw_os_error().unwrap_or(5))
}

/// A host `struct stat` as the protocol passes it.
pub fn host_stat(m: &libc::stat) -> HostStat {
    HostStat {
        dev: m.st_dev,
        ino: m.st_ino,
        mode: u64::from(m.st_mode),
        nlink: m.st_nlink,
        uid: u64::from(m.st_uid),
        gid: u64::from(m.st_gid),
        rdev: m.st_rdev,
        size: m.st_size as u64,
        blksize: m.st_blksize as u64,
        blocks: m.st_blocks as u64,
        atime_sec: m.st_atime as u64,
        atime_nsec: m.st_atime_nsec as u64,
        mtime_sec: m.st_mtime as u64,
        mtime_nsec: m.st_mtime_nsec as u64,
        ctime_sec: m.st_ctime as u64,
        ctime_nsec: m.st_ctime_nsec as u64,
    }
}

/// Reads the NUL-terminated name at guest-virtual `va` (at most `max` bytes before
/// the NUL), a byte run at a time so a name at the end of a mapping is readable.
fn read_cstr(mem: &vm_memory::GuestMemoryMmap, va: u64, max: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    while out.len() <= max {
        let at = va.checked_add(out.len() as u64)?;
        let n = (4096 - (at % 4096)).min(64) as usize;
        let piece = read_guest(mem, at, n as u64)?;
        if let Some(end) = piece.iter().position(|b| *b == 0) {
            out.extend_from_slice(&piece[..end]);
            return (out.len() <= max).then_some(out);
        }
        out.extend_from_slice(&piece);
    }
    None
}

impl HostFs {
    /// Opens each mount's host directory (`O_PATH | O_DIRECTORY`).
    pub fn new(mounts: Vec<MountSpec>) -> Result<HostFs, HostFsError> {
        let mut t = Table::default();
        let mut tars = Vec::new();
        for (i, m) in mounts.iter().enumerate() {
            let shown = m.host.display().to_string();
            if m.tar {
                let index = tar::TarIndex::open(&m.host).map_err(|e| HostFsError::Open(shown.clone(), e))?;
                t.entries.push(Some(Entry {
                    file: Arc::clone(&index.file),
                    tar: Some(0),
                    mount: i,
                    listing: None,
                    write_error: None,
                }));
                t.live += 1;
                tars.push(Some(index));
                continue;
            }
            tars.push(None);
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                .open(&m.host)
                .map_err(|e| {
                    if e.raw_os_error() == Some(libc::ENOTDIR) {
                        HostFsError::NotADirectory(shown.clone())
                    } else {
                        HostFsError::Open(shown.clone(), e)
                    }
                })?;
            t.entries.push(Some(Entry { file: Arc::new(f), tar: None, mount: i, listing: None, write_error: None }));
            t.live += 1;
        }
        if !mounts.is_empty() {
            sysfs::raise_nofile();
        }
        Ok(HostFs { mounts, tars, table: Mutex::new(t) })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves one `Fs` hostcall (`args[0]` the operation).
    pub fn serve(&self, args: [u64; 6], mem: &vm_memory::GuestMemoryMmap) -> i64 {
        let [op, a, b, c, d, e] = args;
        let name = |va: u64| read_cstr(mem, va, proto::NAME_MAX).filter(|n| proto::valid_name(n));
        match op {
            proto::MOUNTS => self.mounts_list(mem, a, b),
            proto::LOOKUP => {
                let Some(n) = name(b) else { return -EINVAL };
                if let Some(r) = self.tar_make(a, &n, mem, c) {
                    return r;
                }
                self.make(a, false, |dir| sysfs::open_beneath(dir, &n, libc::O_PATH, 0), mem, c)
            }
            proto::OPEN => {
                let Some(n) = name(b) else { return -EINVAL };
                let allowed = proto::O_RDWR | proto::O_WRONLY | proto::O_CREAT | proto::O_EXCL | proto::O_TRUNC;
                if c & !allowed != 0 || c & 3 == 3 {
                    return -EINVAL;
                }
                let changes = c & 3 != proto::O_RDONLY || c & (proto::O_CREAT | proto::O_TRUNC) != 0;
                if !changes {
                    if let Some(r) = self.tar_make(a, &n, mem, e) {
                        return r;
                    }
                }
                if c & (proto::O_CREAT | proto::O_EXCL) == proto::O_CREAT {
                    return self.open_or_create(a, &n, c, d as u32, mem, e);
                }
                self.make(a, changes, |dir| sysfs::open_beneath(dir, &n, c as i32, d as u32), mem, e)
            }
            proto::MKDIR => {
                let Some(n) = name(b) else { return -EINVAL };
                self.make(
                    a,
                    true,
                    |dir| {
                        sysfs::mkdir_at(dir, &n, c as u32 & 0o7777)?;
                        sysfs::open_beneath(dir, &n, libc::O_PATH, 0)
                    },
                    mem,
                    d,
                )
            }
            proto::SYMLINK => {
                let Some(n) = name(b) else { return -EINVAL };
                let Some(target) = read_cstr(mem, c, proto::TARGET_MAX).filter(|t| !t.is_empty()) else {
                    return -EINVAL;
                };
                self.make(
                    a,
                    true,
                    |dir| {
                        sysfs::symlink_at(&target, dir, &n)?;
                        sysfs::open_beneath(dir, &n, libc::O_PATH, 0)
                    },
                    mem,
                    d,
                )
            }
            proto::READ | proto::WRITE => self.io(op == proto::WRITE, a, &[(b, c)], d, mem),
            proto::PLAN => self.plan(a, b, c, d, e, mem),
            proto::READV => {
                if c > proto::MAX_IOV {
                    return -EINVAL;
                }
                let Some(segments) = read_guest_pairs(mem, b, c) else { return -EFAULT };
                self.io(false, a, &segments, d, mem)
            }
            proto::STATAT => {
                let Some(n) = name(b) else { return -EINVAL };
                if let Some(r) = self.tar_node(a, |t, d| {
                    let st = t.nodes[*t.nodes[d].children.get(&n).ok_or(-ENOENT)?].stat;
                    write_guest(mem, c, &st.to_bytes()).map(|_| 0).ok_or(-EFAULT)
                }) {
                    return r;
                }
                self.with(a, false, |en| {
                    // (One fstatat of the checked component in the directory, no
                    // link followed: one host call, where opening it beneath the
                    // directory and stat-ing that took three.)
                    let st = host_stat(&sysfs::stat_at(en.file.as_fd(), &n).map_err(err)?);
                    write_guest(mem, c, &st.to_bytes()).map(|_| 0).ok_or(-EFAULT)
                })
            }
            proto::STAT => {
                if let Some(r) =
                    self.tar_node(a, |t, x| write_guest(mem, b, &t.nodes[x].stat.to_bytes()).map(|_| 0).ok_or(-EFAULT))
                {
                    return r;
                }
                self.with(a, false, |en| {
                    let st = host_stat(&sysfs::stat_fd(en.file.as_fd()).map_err(err)?);
                    write_guest(mem, b, &st.to_bytes()).map(|_| 0).ok_or(-EFAULT)
                })
            }
            proto::STATFS => self.with(a, false, |en| {
                let v = sysfs::statfs_fd(en.file.as_fd()).map_err(err)?;
                let bytes: Vec<u8> = v.iter().flat_map(|w| w.to_le_bytes()).collect();
                write_guest(mem, b, &bytes).map(|_| 0).ok_or(-EFAULT)
            }),
            proto::READDIR => self.readdir(a, b, c, d, mem),
            proto::CLOSE => self.close(a),
            proto::UNLINK => {
                let Some(n) = name(b) else { return -EINVAL };
                self.with(a, true, |en| sysfs::unlink_at(en.file.as_fd(), &n, c != 0).map(|_| 0).map_err(err))
            }
            proto::RENAME | proto::LINK => {
                let (Some(n), Some(n2)) = (name(b), name(d)) else { return -EINVAL };
                self.pair(a, c, |x, y| {
                    if op == proto::RENAME {
                        sysfs::rename_at(x, &n, y, &n2)
                    } else {
                        sysfs::link_at(x, &n, y, &n2)
                    }
                })
            }
            proto::READLINK => self.with(a, false, |en| {
                let t = match en.tar {
                    Some(x) => self.tars[en.mount].as_ref().map(|t| t.nodes[x].target.clone()).unwrap_or_default(),
                    None => sysfs::read_link(en.file.as_fd()).map_err(err)?,
                };
                if t.len() as u64 > c {
                    return Err(-ERANGE);
                }
                write_guest(mem, b, &t).map(|_| t.len() as i64).ok_or(-EFAULT)
            }),
            proto::TRUNCATE => self.with(a, true, |en| en.file.set_len(b).map(|_| 0).map_err(err)),
            proto::FSYNC => self.with(a, false, |en| {
                en.file.sync_all().map_err(err)?;
                en.write_error.take().map_or(Ok(0), Err)
            }),
            proto::CHMOD => self.with(a, true, |en| {
                not_a_link(en)?;
                // Through the descriptor's /proc entry: the inode itself, no walk
                // of a path the guest could influence (not a link: checked).
                let p = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&en.file));
                std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(b as u32 & 0o7777))
                    .map(|_| 0)
                    .map_err(err)
            }),
            proto::UTIMES => self.with(a, true, |en| {
                not_a_link(en)?;
                let t = |v: u64| (v != proto::UTIME_OMIT).then_some(v);
                sysfs::utimes_fd(en.file.as_fd(), t(b), t(c)).map(|_| 0).map_err(err)
            }),
            proto::CHOWN => {
                self.with(a, true, |en| sysfs::chown_fd(en.file.as_fd(), b as u32, c as u32).map(|_| 0).map_err(err))
            }
            proto::LOCK => self.with(a, false, |en| {
                if en.tar.is_some() {
                    return Ok(0); // (an archive is the VM's alone: nothing to lock)
                }
                let kind = match b {
                    proto::LOCK_READ => libc::F_RDLCK,
                    proto::LOCK_WRITE => libc::F_WRLCK,
                    proto::LOCK_UNLOCK => libc::F_UNLCK,
                    _ => return Err(-EINVAL),
                };
                let (start, len) = (i64::try_from(c).map_err(|_| -EINVAL)?, i64::try_from(d).map_err(|_| -EINVAL)?);
                sysfs::ofd_lock(en.file.as_fd(), kind as i16, start, len).map_err(err)?;
                if e != 0 {
                    let st = host_stat(&sysfs::stat_fd(en.file.as_fd()).map_err(err)?);
                    write_guest(mem, e, &st.to_bytes()).ok_or(-EFAULT)?;
                }
                Ok(0)
            }),
            _ => -EINVAL,
        }
    }

    /// Serves an operation the guest deferred (its result dropped): a write that
    /// fails or comes short leaves its error (ENOSPC if short) on its handle for
    /// the next FSYNC.
    pub fn serve_later(&self, args: [u64; 6], mem: &vm_memory::GuestMemoryMmap) {
        let r = self.serve(args, mem);
        if args[0] == proto::WRITE && (r < 0 || (r as u64) < args[3]) {
            let e = if r < 0 { r } else { -ENOSPC };
            let mut t = self.table();
            if let Some(en) = t.entries.get_mut(args[1] as usize).and_then(|e| e.as_mut()) {
                en.write_error.get_or_insert(e);
            }
        }
    }

    fn mounts_list(&self, mem: &vm_memory::GuestMemoryMmap, buf: u64, len: u64) -> i64 {
        let mut out = Vec::new();
        for m in &self.mounts {
            let flags = if m.ro { proto::MOUNT_RO } else { 0 } | if m.rootfs { proto::MOUNT_ROOTFS } else { 0 };
            out.extend(MountRecord { flags, path_len: m.guest.len() as u32 }.to_bytes());
            out.extend(&m.guest);
            out.resize(out.len().next_multiple_of(8), 0);
        }
        if out.len() as u64 > len {
            return -ERANGE;
        }
        match write_guest(mem, buf, &out) {
            Some(()) => out.len() as i64,
            None => -EFAULT,
        }
    }

    /// Runs `f` on handle `h`'s entry; `changes`: refused (EROFS) on a read-only mount.
    fn with(&self, h: u64, changes: bool, f: impl FnOnce(&mut Entry) -> Result<i64, i64>) -> i64 {
        let mut t = self.table();
        let Some(en) = t.entries.get_mut(h as usize).and_then(|e| e.as_mut()) else { return -EBADF };
        if changes && self.read_only(en.mount) {
            return -EROFS;
        }
        f(en).unwrap_or_else(|e| e)
    }

    fn read_only(&self, mount: usize) -> bool {
        self.mounts.get(mount).is_none_or(|m| m.ro)
    }

    /// Makes a new handle with `open` (given directory `dir`'s descriptor), in
    /// `dir`'s mount, its stat written to `stat_va`.
    fn make(
        &self,
        dir: u64,
        changes: bool,
        open: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> std::io::Result<OwnedFd>,
        mem: &vm_memory::GuestMemoryMmap,
        stat_va: u64,
    ) -> i64 {
        let mut t = self.table();
        let Some(en) = t.entries.get(dir as usize).and_then(|e| e.as_ref()) else { return -EBADF };
        if changes && self.read_only(en.mount) {
            return -EROFS;
        }
        if t.live >= MAX_HANDLES {
            return -ENFILE;
        }
        let mount = en.mount;
        let file = match open(en.file.as_fd()) {
            Ok(fd) => File::from(fd),
            Err(e) => return err(e),
        };
        let st = match sysfs::stat_fd(file.as_fd()) {
            Ok(m) => host_stat(&m),
            Err(e) => return err(e),
        };
        if write_guest(mem, stat_va, &st.to_bytes()).is_none() {
            return -EFAULT;
        }
        t.insert(Entry { file: Arc::new(file), tar: None, mount, listing: None, write_error: None })
    }

    /// OPEN with `O_CREAT` but not `O_EXCL`: the file made if missing (tried first
    /// with `O_EXCL`, so the result can say [`proto::CREATED`]), else opened as it
    /// is (`O_TRUNC` as asked); a name removed or made between the two tries is
    /// tried again, a few times.
    fn open_or_create(
        &self,
        dir: u64,
        name: &[u8],
        flags: u64,
        mode: u32,
        mem: &vm_memory::GuestMemoryMmap,
        stat_va: u64,
    ) -> i64 {
        let mut r = -libc::EEXIST as i64;
        for _ in 0..4 {
            let excl = (flags | proto::O_EXCL) as i32;
            r = self.make(dir, true, |d| sysfs::open_beneath(d, name, excl, mode), mem, stat_va);
            if r >= 0 {
                return r | proto::CREATED;
            }
            if r != -libc::EEXIST as i64 {
                return r;
            }
            let plain = (flags & !proto::O_CREAT) as i32;
            r = self.make(dir, true, |d| sysfs::open_beneath(d, name, plain, 0), mem, stat_va);
            if r != -ENOENT {
                return r;
            }
        }
        r
    }

    /// Runs `f` on handle `h`'s archive and node, if `h` is an archive's entry.
    fn tar_node(&self, h: u64, f: impl FnOnce(&tar::TarIndex, usize) -> Result<i64, i64>) -> Option<i64> {
        let (mount, x) = {
            let t = self.table();
            let en = t.entries.get(h as usize).and_then(|e| e.as_ref())?;
            (en.mount, en.tar?)
        };
        let index = self.tars.get(mount)?.as_ref()?;
        Some(f(index, x).unwrap_or_else(|e| e))
    }

    /// LOOKUP or OPEN of `name` in archive directory `dir`: a new handle on its
    /// node; None if `dir` is no archive's.
    fn tar_make(&self, dir: u64, name: &[u8], mem: &vm_memory::GuestMemoryMmap, stat_va: u64) -> Option<i64> {
        let (mount, d) = {
            let t = self.table();
            let en = t.entries.get(dir as usize).and_then(|e| e.as_ref())?;
            (en.mount, en.tar?)
        };
        let index = self.tars.get(mount)?.as_ref()?;
        let Some(&x) = index.nodes[d].children.get(name) else { return Some(-ENOENT) };
        if write_guest(mem, stat_va, &index.nodes[x].stat.to_bytes()).is_none() {
            return Some(-EFAULT);
        }
        let mut t = self.table();
        if t.live >= MAX_HANDLES {
            return Some(-ENFILE);
        }
        Some(t.insert(Entry { file: Arc::clone(&index.file), tar: Some(x), mount, listing: None, write_error: None }))
    }

    fn close(&self, h: u64) -> i64 {
        let mut t = self.table();
        // A mount's root stays for the VM's life.
        if (h as usize) < self.mounts.len() {
            return 0;
        }
        match t.entries.get_mut(h as usize).and_then(|e| e.take()) {
            Some(_) => {
                t.free.push(h as usize);
                t.live -= 1;
                0
            }
            None => -EBADF,
        }
    }

    /// RENAME and LINK: two directories of the same mount (EXDEV otherwise).
    fn pair(
        &self,
        a: u64,
        b: u64,
        f: impl FnOnce(std::os::fd::BorrowedFd<'_>, std::os::fd::BorrowedFd<'_>) -> std::io::Result<()>,
    ) -> i64 {
        let t = self.table();
        let get = |h: u64| t.entries.get(h as usize).and_then(|e| e.as_ref());
        let (Some(x), Some(y)) = (get(a), get(b)) else { return -EBADF };
        if x.mount != y.mount {
            return -EXDEV;
        }
        if self.read_only(x.mount) {
            return -EROFS;
        }
        f(x.file.as_fd(), y.file.as_fd()).map(|_| 0).unwrap_or_else(err)
    }

    /// READ, WRITE and READV: `pread`/`pwrite` between the file from `off` and the
    /// guest-virtual `segments` (address, length) in order, through a bounded
    /// buffer, page run by page run; bytes moved (a short one ends it).
    /// What handle `h` reads and writes (-EBADF; -EROFS for a write in a
    /// read-only mount). The descriptor is shared, not the table's lock held,
    /// across the host's I/O.
    fn source(&self, h: u64, write: bool) -> Result<Source<'_>, i64> {
        let t = self.table();
        let en = t.entries.get(h as usize).and_then(|e| e.as_ref()).ok_or(-EBADF)?;
        if write && self.read_only(en.mount) {
            return Err(-EROFS);
        }
        let tar = en.tar.and_then(|x| Some((self.tars[en.mount].as_ref()?, x)));
        Ok(Source { file: Arc::clone(&en.file), tar })
    }

    /// PLAN: the rewrite plan of the whole file of handle `h` (read here, up to
    /// `MAX_REWRITE_FILE` bytes), trampolines at `base`, at `bias`, into guest
    /// `out` (`out_len` bytes at most).
    fn plan(&self, h: u64, base: u64, out: u64, out_len: u64, bias: u64, mem: &vm_memory::GuestMemoryMmap) -> i64 {
        const EFBIG: i64 = 27;
        let max = onering_abi::hostcall::MAX_REWRITE_FILE as usize;
        let src = match self.source(h, false) {
            Ok(s) => s,
            Err(e) => return e,
        };
        // (Read to its end, one byte past the bound at most: a file that grows
        // meanwhile is read as it is.)
        let mut bytes = Vec::new();
        loop {
            let at = bytes.len();
            if at > max {
                return -EFBIG;
            }
            bytes.resize(at + PIECE, 0);
            match src.read_at(&mut bytes[at..], at as u64) {
                Ok(0) => {
                    bytes.truncate(at);
                    break;
                }
                Ok(n) => bytes.truncate(at + n),
                Err(e) => return err(e),
            }
        }
        match crate::plancache::wire_plan(&bytes, bias, base, out_len) {
            Ok(w) => write_guest(mem, out, &w).map_or(-EFAULT, |()| w.len() as i64),
            Err(e) => e,
        }
    }

    fn io(&self, write: bool, h: u64, segments: &[(u64, u64)], off: u64, mem: &vm_memory::GuestMemoryMmap) -> i64 {
        let src = match self.source(h, write) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let mut total = 0u64;
        for &(va, len) in segments {
            let len = len.min(proto::MAX_IO.saturating_sub(total));
            let mut done = 0u64;
            while done < len {
                let n = (len - done).min(PIECE as u64);
                let Some(at) = off.checked_add(total + done) else { return -EINVAL };
                let moved = if write {
                    match read_guest(mem, va.wrapping_add(done), n) {
                        Some(data) => src.file.write_at(&data, at),
                        None => Err(std::io::Error::from_raw_os_error(EFAULT as i32)),
                    }
                } else {
                    let mut data = vec![0u8; n as usize];
                    src.read_at(&mut data, at).and_then(|got| {
                        match write_guest(mem, va.wrapping_add(done), &data[..got]) {
                            Some(()) => Ok(got),
                            None => Err(std::io::Error::from_raw_os_error(EFAULT as i32)),
                        }
                    })
                };
                let got = match moved {
                    Ok(got) => got as u64,
                    Err(e) if total + done == 0 => return err(e),
                    Err(_) => return (total + done) as i64,
                };
                done += got;
                if got < n {
                    return (total + done) as i64; // (the end of the file, or a short write)
                }
            }
            total += done;
        }
        total as i64
    }

    /// READDIR: the listing (read at index 0) from `index` on, as records.
    fn readdir(&self, h: u64, index: u64, va: u64, len: u64, mem: &vm_memory::GuestMemoryMmap) -> i64 {
        let mut t = self.table();
        let Some(en) = t.entries.get_mut(h as usize).and_then(|e| e.as_mut()) else { return -EBADF };
        if index == 0 || en.listing.is_none() {
            let listing = match (en.tar, self.tars[en.mount].as_ref()) {
                (Some(x), Some(t)) => {
                    Ok(t.nodes[x].children.iter().map(|(n, c)| (n.clone(), t.nodes[*c].stat)).collect())
                }
                _ => list(&en.file),
            };
            match listing {
                Ok(l) => en.listing = Some(l),
                Err(e) => return err(e),
            }
        }
        let listing = en.listing.as_deref().unwrap_or_default();
        let mut out = Vec::new();
        for (name, st) in listing.iter().skip(index.min(usize::MAX as u64) as usize) {
            let r = DirRecord { stat: *st, name_len: name.len() as u16 };
            if (out.len() + r.record_len()) as u64 > len.min(PIECE as u64) {
                break;
            }
            out.extend(r.to_bytes());
            out.extend(name);
            out.resize(out.len().next_multiple_of(8), 0);
        }
        if out.is_empty() && (index as usize) < listing.len() {
            return -EINVAL; // (the buffer holds not one record)
        }
        match write_guest(mem, va, &out) {
            Some(()) => out.len() as i64,
            None => -EFAULT,
        }
    }
}

fn not_a_link(en: &Entry) -> Result<(), i64> {
    match en.file.metadata() {
        Ok(m) if m.file_type().is_symlink() => Err(-ELOOP),
        Ok(_) => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// The entries of directory `dir` (an `O_PATH` descriptor), each with its stat
/// (not following links), sorted by name.
fn list(dir: &File) -> std::io::Result<Vec<(Vec<u8>, HostStat)>> {
    let d = sysfs::open_beneath(dir.as_fd(), b".", libc::O_RDONLY | libc::O_DIRECTORY, 0);
    // (`.` is not a name the protocol accepts from the guest; here it is ours.)
    let d = d?;
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&d));
    let mut out = Vec::new();
    for e in std::fs::read_dir(path)? {
        let e = e?;
        let name = e.file_name().as_bytes().to_vec();
        let Ok(m) = sysfs::stat_at(d.as_fd(), &name) else { continue };
        out.push((name, host_stat(&m)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_write_that_fails_is_reported_by_the_next_fsync() {
        use crate::arch::PageTables;
        use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
        let dir = std::env::temp_dir().join(format!("onering-hostfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), "x").unwrap();
        let fs = HostFs::new(vec![MountSpec {
            host: dir.clone(),
            guest: b"/v".to_vec(),
            ro: false,
            rootfs: false,
            tar: false,
        }])
        .unwrap();
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
        PageTables::new(&mem).map_2m(0x40_0000, 0x40_0000, 0).unwrap();
        mem.write_slice(b"f\0", GuestAddress(0x40_1000)).unwrap();
        mem.write_slice(b"data", GuestAddress(0x40_3000)).unwrap();
        // Opened for reading only: a write through it fails (EBADF).
        let h = fs.serve([proto::OPEN, 0, 0x40_1000, proto::O_RDONLY, 0, 0x40_2000], &mem);
        assert!(h > 0, "{h}");
        let h = h as u64;
        fs.serve_later([proto::WRITE, h, 0x40_3000, 4, 0, 0], &mem);
        assert_eq!(fs.serve([proto::FSYNC, h, 0, 0, 0, 0], &mem), -EBADF, "the write's error, at fsync");
        assert_eq!(fs.serve([proto::FSYNC, h, 0, 0, 0, 0], &mem), 0, "once");
        // One that works leaves nothing behind.
        let w = fs.serve([proto::OPEN, 0, 0x40_1000, proto::O_RDWR, 0, 0x40_2000], &mem) as u64;
        fs.serve_later([proto::WRITE, w, 0x40_3000, 4, 0, 0], &mem);
        assert_eq!(fs.serve([proto::FSYNC, w, 0, 0, 0, 0], &mem), 0);
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"data");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_from_the_guest_are_one_component() {
        for bad in [&b".."[..], b".", b"a/b", b"/etc", b""] {
            assert!(!proto::valid_name(bad));
        }
    }
}
