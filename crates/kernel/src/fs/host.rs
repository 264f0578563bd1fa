//! The tree's way to host files (`vfs::host::HostOps`) through the `Fs` hostcall
//! (`onering_abi::hostfs`): each operation one exit, but closes and unlocks,
//! which wait to ride on the next one (`onering_arch::hostcall::fs`); a
//! directory's listing comes in buffers of 64 KiB, a readahead in one READV.

use crate::errno::Errno;
use crate::vfs::host::HostOps;
use alloc::vec;
use alloc::vec::Vec;
use onering_abi::hostfs::{self as proto, DirRecord};
use onering_abi::HostStat;
use onering_arch::hostcall::fs;

/// The hostcall `HostOps`.
pub struct Hostcalls;

/// The one the kernel's tree uses.
pub static HOSTCALLS: Hostcalls = Hostcalls;

impl HostOps for Hostcalls {
    fn lookup(&self, dir: u64, name: &[u8]) -> Result<(u64, HostStat), Errno> {
        fs::lookup(dir, name).map_err(Errno::from_host)
    }

    fn open(&self, dir: u64, name: &[u8], flags: u64, mode: u32) -> Result<(u64, HostStat), Errno> {
        fs::open(dir, name, flags, mode).map_err(Errno::from_host)
    }

    fn open_create(&self, dir: u64, name: &[u8], flags: u64, mode: u32) -> Result<(u64, HostStat, bool), Errno> {
        let flags = flags & (proto::O_EXCL | proto::O_TRUNC) | proto::O_CREAT | proto::O_RDWR;
        let (h, st) = fs::open(dir, name, flags, mode).map_err(Errno::from_host)?;
        // (With O_EXCL a success made the file; without, the VMM says.)
        let made = flags & proto::O_EXCL != 0 || h & proto::CREATED as u64 != 0;
        Ok((h & !(proto::CREATED as u64), st, made))
    }

    fn readdir(&self, dir: u64, out: &mut dyn FnMut(&[u8], &HostStat)) -> Result<(), Errno> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(64 * 1024).map_err(|_| Errno::ENOMEM)?;
        buf.resize(64 * 1024, 0);
        let mut index = 0u64;
        loop {
            let n = fs::readdir(dir, index, &mut buf).map_err(Errno::from_host)?;
            if n == 0 {
                return Ok(());
            }
            let mut at = 0;
            while at < n {
                let Some(r) = DirRecord::from_bytes(&buf[at..n]) else { return Err(Errno::EIO) };
                let name =
                    buf.get(at + DirRecord::SIZE..at + DirRecord::SIZE + r.name_len as usize).ok_or(Errno::EIO)?;
                out(name, &r.stat);
                at += r.record_len();
                index += 1;
            }
        }
    }

    fn readlink(&self, h: u64) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; proto::TARGET_MAX + 1];
        let n = fs::readlink(h, &mut buf).map_err(Errno::from_host)?;
        buf.truncate(n);
        Ok(buf)
    }

    fn stat(&self, h: u64) -> Result<HostStat, Errno> {
        fs::stat(h).map_err(Errno::from_host)
    }

    fn stat_at(&self, dir: u64, name: &[u8]) -> Result<HostStat, Errno> {
        fs::stat_at(dir, name).map_err(Errno::from_host)
    }

    fn mkdir(&self, dir: u64, name: &[u8], mode: u32) -> Result<(u64, HostStat), Errno> {
        fs::mkdir(dir, name, mode).map_err(Errno::from_host)
    }

    fn symlink(&self, dir: u64, name: &[u8], target: &[u8]) -> Result<(u64, HostStat), Errno> {
        fs::symlink(dir, name, target).map_err(Errno::from_host)
    }

    fn unlink(&self, dir: u64, name: &[u8], rmdir: bool) -> Result<(), Errno> {
        fs::unlink(dir, name, rmdir).map_err(Errno::from_host)
    }

    fn rename(&self, link: bool, dir: u64, name: &[u8], dir2: u64, name2: &[u8]) -> Result<(), Errno> {
        fs::rename(link, dir, name, dir2, name2).map_err(Errno::from_host)
    }

    fn truncate(&self, h: u64, len: u64) -> Result<(), Errno> {
        fs::simple(proto::TRUNCATE, &[h, len]).map(|_| ()).map_err(Errno::from_host)
    }

    fn chmod(&self, h: u64, mode: u32) -> Result<(), Errno> {
        fs::simple(proto::CHMOD, &[h, u64::from(mode)]).map(|_| ()).map_err(Errno::from_host)
    }

    fn utimes(&self, h: u64, atime: Option<u64>, mtime: Option<u64>) -> Result<(), Errno> {
        let t = |v: Option<u64>| v.unwrap_or(proto::UTIME_OMIT);
        fs::simple(proto::UTIMES, &[h, t(atime), t(mtime)]).map(|_| ()).map_err(Errno::from_host)
    }

    fn chown(&self, h: u64, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
        let id = |v: Option<u32>| u64::from(v.unwrap_or(u32::MAX));
        fs::simple(proto::CHOWN, &[h, id(uid), id(gid)]).map(|_| ()).map_err(Errno::from_host)
    }

    fn make_room(&self, bytes: usize, block: bool) -> bool {
        if block {
            onering_arch::heap::ensure_block(bytes)
        } else {
            onering_arch::heap::ensure(bytes)
        }
    }

    fn read(&self, h: u64, offset: u64, bufs: &mut [&mut [u8]]) -> Result<usize, Errno> {
        fs::readv(h, bufs, offset).map_err(Errno::from_host)
    }

    fn read_chunks(&self, h: u64, offset: u64, count: usize) -> Result<Vec<alloc::boxed::Box<[u8]>>, Errno> {
        fs::read_chunks(h, offset, count, crate::vfs::pages::CHUNK).map_err(Errno::from_host)
    }

    fn close(&self, h: u64) {
        fs::close(h)
    }
}

/// Sends the host writes still waiting for a hostcall (a volume file closed, a
/// shared mapping written back).
pub fn flush_writes() {
    fs::flush_writes();
}

/// The rewrite plan the VMM makes of the whole file of I/O handle `h`, reading it
/// itself (`onering_abi::hostfs::PLAN`): its length in `out`, or -errno
/// (-ENOSPC: `out` is too small).
pub fn plan(h: u64, base: u64, bias: u64, out: &mut [u8]) -> i64 {
    let (o, n) = (out.as_mut_ptr() as u64, out.len() as u64);
    fs::simple(proto::PLAN, &[h, base, o, n, bias]).map_or_else(|e| e, |n| n as i64)
}

/// `fsync` of host handle `h` (the writes waiting go first, with it).
pub fn sync(h: u64) -> Result<(), Errno> {
    fs::simple(proto::FSYNC, &[h]).map(|_| ()).map_err(Errno::from_host)
}

/// The mounts the VMM serves: (flags, guest path) each, handle = position.
pub fn mounts() -> Vec<(u32, Vec<u8>)> {
    let mut buf = vec![0u8; 16 * 1024];
    let Ok(n) = fs::mounts(&mut buf) else { return Vec::new() };
    let mut out = Vec::new();
    let mut at = 0;
    while at < n {
        let Some(r) = proto::MountRecord::from_bytes(&buf[at..n]) else { break };
        let start = at + proto::MountRecord::SIZE;
        let Some(path) = buf.get(start..start + r.path_len as usize) else { break };
        out.push((r.flags, path.to_vec()));
        at = (start + r.path_len as usize).next_multiple_of(8);
    }
    out
}
