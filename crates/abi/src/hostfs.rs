//! The host file protocol (`Hostcall::Fs`): how the guest reaches host directories
//! (`-v HOST:GUEST[:ro]` volumes, and `--rootfs DIR` as the lower layer of the root).
//!
//! The VMM holds host file descriptors in a table; the guest names them by
//! *handle* (an index). Handles `0..n` are the roots of the `n` mounts [`MOUNTS`]
//! lists; [`LOOKUP`], [`OPEN`], [`MKDIR`] and [`SYMLINK`] make new ones, [`CLOSE`]
//! drops one. The guest walks paths itself, one name at a time: a name is one path
//! component (no `/`, not `.` or `..`, 1..=255 bytes, NUL-terminated in guest
//! memory), looked up relative to a directory handle without following a symbolic
//! link (the guest reads links with [`READLINK`] and resolves them in its own
//! tree). So nothing outside a mount's host directory can be named, whatever the
//! host tree holds or how it changes (the VMM also opens each name with `openat2`
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`).
//!
//! Arguments after the operation (`args[1..]`), all guest-virtual addresses
//! translated through the guest's page tables; results are >= 0 or -errno:
//! - [`MOUNTS`] `(buf, len)`: the mount list into `buf` (records of
//!   [`MountRecord`] then the guest path, 8-byte aligned); its length.
//! - [`LOOKUP`] `(dir, name, stat)`: a handle on the entry (an `O_PATH` descriptor),
//!   its [`crate::HostStat`] into `stat`.
//! - [`OPEN`] `(dir, name, flags, mode, stat)`: a handle open for reading and/or
//!   writing (`flags`: [`O_RDONLY`]/[`O_WRONLY`]/[`O_RDWR`] with [`O_CREAT`],
//!   [`O_EXCL`], [`O_TRUNC`]); never follows a link. With [`O_CREAT`], the result
//!   has [`CREATED`] set when this call made the file (so `open(O_CREAT)` of a
//!   name the guest has not looked up is one exit, and the guest still knows
//!   whether the name was new).
//! - [`READ`] `(h, buf, len, offset)` / [`WRITE`] `(h, buf, len, offset)`: bytes
//!   moved (`pread`/`pwrite` of at most [`MAX_IO`]).
//! - [`READV`] `(h, iov, count, offset)`: `pread` into `count` (at most
//!   [`MAX_IOV`]) buffers, `iov` an array of (address, length) pairs of u64;
//!   bytes read (one exit for a readahead of many page-cache chunks).
//! - [`STATAT`] `(dir, name, stat)`: the entry's stat (not following a link),
//!   no handle made (a lookup that only checks, one exit).
//! - [`PLAN`] `(h, base, out, out_len, bias)`: a `Hostcall::Rewrite` plan for the
//!   whole file of I/O handle `h`, which the VMM reads itself (at most
//!   `hostcall::MAX_REWRITE_FILE` bytes, else -EFBIG): its length in `out`, or
//!   -ENOSPC, -ENOEXEC as that hostcall. For a file whose bytes the guest has not
//!   changed: the guest need not read a large program to hand it over.
//! - [`STAT`] `(h, stat)`; [`STATFS`] `(h, buf)`: [`FS_STATFS_SIZE`] bytes
//!   (type, bsize, blocks, bfree, bavail, files, ffree, namelen, frsize as u64).
//! - [`READDIR`] `(dir, index, buf, len)`: entries from number `index` on, as
//!   [`DirRecord`]s (each entry's stat) each followed by its name (8-byte
//!   aligned); bytes filled (0: no more). `.` and `..` are left out. The VMM reads
//!   the directory once, at index 0, and serves the rest from that listing.
//! - [`CLOSE`] `(h)`.
//! - [`MKDIR`] `(dir, name, mode, stat)`, [`SYMLINK`] `(dir, name, target, stat)`:
//!   a handle on the new entry.
//! - [`UNLINK`] `(dir, name, rmdir)`; [`RENAME`] `(dir, name, dir2, name2)`;
//!   [`LINK`] `(dir, name, dir2, name2)`: both directories in the same mount.
//! - [`READLINK`] `(h, buf, len)`: the target's length.
//! - [`TRUNCATE`] `(h, len)` (an [`OPEN`] handle for writing); [`FSYNC`] `(h)`.
//! - [`CHMOD`] `(h, mode)`; [`UTIMES`] `(h, atime, mtime)` (ns since the epoch,
//!   [`UTIME_OMIT`] to leave one); [`CHOWN`] `(h, uid, gid)` (`u32::MAX`: leave).
//! - [`LOCK`] `(h, kind, start, len, stat)`: an OFD lock on the host file (kind:
//!   [`LOCK_READ`], [`LOCK_WRITE`], [`LOCK_UNLOCK`]), never waiting: -EAGAIN
//!   if another holder has it; once granted, the file's stat into `stat` (if not
//!   0: what the guest revalidates its cache by, in the same exit).
//!
//! A read-only mount refuses every change with -EROFS.
//!
//! **Deferred operations.** The guest may let a [`CLOSE`], a [`LOCK`] that
//! unlocks or read-locks (its `stat` 0; the guest defers a read lock only on a
//! range its handle holds, which the host always grants), or a [`WRITE`] of at most [`MAX_DEFERRED_WRITE`] bytes
//! from its own memory (kept until the call returns) wait for its next `Fs`
//! hostcall instead of exiting for it: bits 32.. of `args[0]` then count the
//! operations (at most [`MAX_DEFERRED`]) it left in its vCPU's per-CPU page at
//! [`DEFERRED_OFFSET`], each [`DEFERRED_WORDS`] words (the operation and its four
//! first arguments). The VMM does them in order before the operation of the call
//! itself (so everything the guest asked for happens in the order it asked),
//! their results dropped, but for a write that failed or came short: its error
//! (ENOSPC for a short one) is what the next [`FSYNC`] of that handle returns, as
//! Linux reports a failed write-back at `fsync`. Any other operation there, a
//! longer write, or a count too large, makes the call -EINVAL with nothing done.
//! Bits 0..32 of `args[0]` are the operation.

pub const MOUNTS: u64 = 1;
pub const LOOKUP: u64 = 2;
pub const OPEN: u64 = 3;
pub const READ: u64 = 4;
pub const WRITE: u64 = 5;
pub const STAT: u64 = 6;
pub const READDIR: u64 = 7;
pub const CLOSE: u64 = 8;
pub const MKDIR: u64 = 9;
pub const SYMLINK: u64 = 10;
pub const UNLINK: u64 = 11;
pub const RENAME: u64 = 12;
pub const LINK: u64 = 13;
pub const READLINK: u64 = 14;
pub const TRUNCATE: u64 = 15;
pub const FSYNC: u64 = 16;
pub const CHMOD: u64 = 17;
pub const UTIMES: u64 = 18;
pub const CHOWN: u64 = 19;
pub const STATFS: u64 = 20;
pub const LOCK: u64 = 21;
pub const READV: u64 = 22;
pub const STATAT: u64 = 23;
pub const PLAN: u64 = 24;

/// In OPEN's result: the call made the file (bit 32; handles are below it).
pub const CREATED: i64 = 1 << 32;

/// Deferred operations (see the module's note): where they lie in the per-CPU
/// page, how many at most, and the words of each.
pub const DEFERRED_OFFSET: u64 = 0x940;
pub const MAX_DEFERRED: usize = 16;
pub const DEFERRED_WORDS: usize = 5;
pub const MAX_DEFERRED_WRITE: u64 = 64 << 10;
const _: () =
    assert!(DEFERRED_OFFSET as usize + MAX_DEFERRED * DEFERRED_WORDS * 8 <= crate::STEAL_TIME_OFFSET as usize);

/// The operation and the count of deferred operations of an `Fs` call's `args[0]`.
pub fn split_op(word: u64) -> (u64, usize) {
    (word & 0xffff_ffff, (word >> 32) as usize)
}

pub const O_RDONLY: u64 = 0;
pub const O_WRONLY: u64 = 1;
pub const O_RDWR: u64 = 2;
pub const O_CREAT: u64 = 0o100;
pub const O_EXCL: u64 = 0o200;
pub const O_TRUNC: u64 = 0o1000;

pub const LOCK_READ: u64 = 0;
pub const LOCK_WRITE: u64 = 1;
pub const LOCK_UNLOCK: u64 = 2;

pub const UTIME_OMIT: u64 = u64::MAX;

/// Most bytes one READ or WRITE moves.
pub const MAX_IO: u64 = 16 << 20;
/// Most buffers one READV fills.
pub const MAX_IOV: u64 = 64;
/// Longest name (one component), and longest symbolic link target.
pub const NAME_MAX: usize = 255;
pub const TARGET_MAX: usize = 4095;
/// Bytes STATFS writes.
pub const FS_STATFS_SIZE: usize = 9 * 8;

/// Mount flags.
pub const MOUNT_RO: u32 = 1;
/// The root (`--rootfs DIR`): with [`MOUNT_RO`], the lower layer of a tree whose
/// changes stay in the guest's memory; without it (`--rootfs-rw`), written
/// through to the host as a volume.
pub const MOUNT_ROOTFS: u32 = 2;

/// One mount of the list: its flags and the length of the guest path after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MountRecord {
    pub flags: u32,
    pub path_len: u32,
}

impl MountRecord {
    pub const SIZE: usize = 8;

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..].copy_from_slice(&self.path_len.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<MountRecord> {
        Some(MountRecord {
            flags: u32::from_le_bytes(b.get(..4)?.try_into().ok()?),
            path_len: u32::from_le_bytes(b.get(4..8)?.try_into().ok()?),
        })
    }
}

/// One directory entry: the entry's [`crate::HostStat`] (not following a link)
/// and its name's length (the name follows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirRecord {
    pub stat: crate::HostStat,
    pub name_len: u16,
}

impl DirRecord {
    pub const SIZE: usize = crate::HOST_STAT_SIZE + 8;

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..crate::HOST_STAT_SIZE].copy_from_slice(&self.stat.to_bytes());
        b[crate::HOST_STAT_SIZE..crate::HOST_STAT_SIZE + 2].copy_from_slice(&self.name_len.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<DirRecord> {
        let stat: &[u8; crate::HOST_STAT_SIZE] = b.get(..crate::HOST_STAT_SIZE)?.try_into().ok()?;
        let n = b.get(crate::HOST_STAT_SIZE..crate::HOST_STAT_SIZE + 2)?;
        Some(DirRecord { stat: crate::HostStat::from_bytes(stat), name_len: u16::from_le_bytes([n[0], n[1]]) })
    }

    /// Bytes the record and its name take (8-byte aligned).
    pub fn record_len(&self) -> usize {
        (Self::SIZE + self.name_len as usize).next_multiple_of(8)
    }
}

/// Whether `name` is one path component the protocol accepts.
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name != b"."
        && name != b".."
        && !name.contains(&b'/')
        && !name.contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_names_are_one_component() {
        let r = DirRecord { stat: crate::HostStat { ino: 7, mode: 0o100644, ..Default::default() }, name_len: 3 };
        assert_eq!(DirRecord::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(r.record_len(), 144);
        let m = MountRecord { flags: MOUNT_RO, path_len: 5 };
        assert_eq!(MountRecord::from_bytes(&m.to_bytes()), Some(m));
        assert!(valid_name(b"a.txt"));
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b", &[b'x'; 256]] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
