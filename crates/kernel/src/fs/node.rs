//! Regular files, directories and symbolic links (opened with O_PATH) of the tree.
//! Reads copy straight from the file's bytes to user memory under the tree's lock;
//! writes copy from user memory into the file. A host file (`vfs::host`) is read
//! through the page cache a chunk at a time: a chunk not cached is fetched with
//! its readahead in one hostcall without the tree's lock, then copied under it
//! (with no memory for the cache, read straight into the program's buffer);
//! a volume's file is written through to the host (one hostcall straight from the
//! program's buffer, without the tree's lock; a small write is copied and waits
//! for the next host-file call, at the latest the file's close). Opens, reads,
//! writes and closes are reported to inotify (`vfs::notify`) only while something
//! is watched.

use super::NodeRef;
use crate::errno::{Errno, SysResult};
use crate::file::{oflag, File, Meta, OpenFile};
use crate::mm::user::UserMem;
use crate::vfs::host::HostOps;
use crate::vfs::Ino;
use alloc::vec::Vec;
use core::any::Any;

/// Linux caps one read or write at this many bytes.
const MAX_RW_COUNT: u64 = 0x7fff_f000;
const FIONREAD: u64 = 0x541b;
/// A write goes into the tree this much at a time (the heap is made room for
/// each slice: it grows by at most a chunk's half per `ensure`).
const WRITE_SLICE: u64 = 512 * 1024;

pub struct NodeFile {
    pub node: NodeRef,
    /// The inotify event its close is (IN_CLOSE_WRITE, IN_CLOSE_NOWRITE; 0 for
    /// an O_PATH open, which is none).
    pub close: u32,
}

impl File for NodeFile {
    fn read(&self, of: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        let len = len.min(MAX_RW_COUNT);
        let at = off.unwrap_or(of.offset());
        // What the read fills of the buffer is checked first, without the tree's
        // lock: a block of a file mapping there is filled now, which reads a file
        // (the copies under the lock do not fill: `UserMem::no_fill`). Only what
        // the file holds is touched (a large untouched buffer is not backed for
        // nothing); a bad buffer fails below, as it would.
        let size = self.node.vfs.lock().node(self.node.ino).size();
        let _ = user.check(buf, size.saturating_sub(at).min(len), true);
        let n = {
            let v = self.node.vfs.lock();
            if on_host(&v, self.node.ino) {
                drop(v);
                self.read_host(user, buf, len, at)?
            } else {
                copy_out(&v, self.node.ino, at, len as usize, user, buf)? as u64
            }
        };
        if off.is_none() {
            of.set_offset(at + n);
        }
        if n > 0 {
            self.notify(crate::vfs::notify::IN_ACCESS);
        }
        Ok(n)
    }

    fn write(&self, of: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        let len = len.min(MAX_RW_COUNT);
        let now = crate::time::real_now();
        // Where the write goes: the offset given, the end of the file (O_APPEND) or
        // the file's position.
        let position = |v: &crate::vfs::tree::Vfs| match off {
            Some(o) => o,
            None if of.flags() & oflag::O_APPEND != 0 => v.node(self.node.ino).size(),
            None => of.offset(),
        };
        // Checked first: a bad buffer must not grow the file.
        user.check(buf, len, false)?;
        // In slices, each with room in the heap for the chunks it may add made
        // first, outside the tree's lock (the heap grows a chunk at a time; the
        // write stays fallible: ENOSPC, or a short count once some went in).
        let mut done = 0u64;
        let mut at = 0;
        while done < len || len == 0 {
            let n = (len - done).min(WRITE_SLICE);
            let _ = onering_arch::heap::ensure(n as usize + crate::vfs::pages::CHUNK);
            let r = {
                let mut v = self.node.vfs.lock();
                if done == 0 {
                    if on_host(&v, self.node.ino) {
                        let append = off.is_none() && of.flags() & oflag::O_APPEND != 0;
                        let target = v.write_target(self.node.ino, off.unwrap_or(of.offset()), append)?;
                        drop(v);
                        return self.write_host(of, user, (buf, len), off, target, now);
                    }
                    at = position(&v);
                }
                let from = buf + done;
                let mut r = Ok(0);
                user.no_fill(&mut |u| {
                    r = v.write_with(self.node.ino, at + done, n as usize, now, |o, dst| u.read(from + o as u64, dst))
                });
                r
            };
            match r {
                Ok(_) => done += n,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
            if len == 0 {
                break;
            }
        }
        if off.is_none() {
            of.set_offset(at + done);
        }
        if done > 0 {
            self.notify(crate::vfs::notify::IN_MODIFY);
        }
        Ok(done)
    }

    fn ioctl(&self, of: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        match request {
            FIONREAD => {
                let n = {
                    let v = self.node.vfs.lock();
                    let node = v.node(self.node.ino);
                    if node.is_dir() {
                        0
                    } else {
                        node.size().saturating_sub(of.offset())
                    }
                };
                // (Not under the tree's lock: the copy may fill a file mapping.)
                user.write(arg, &(n as u32).to_le_bytes())?;
                Ok(0)
            }
            _ => Err(Errno::ENOTTY),
        }
    }

    fn stat(&self) -> Meta {
        self.node.meta()
    }

    fn seek(&self, of: &OpenFile, off: i64, whence: u64) -> SysResult {
        let base = match whence {
            0 => 0,
            1 => of.offset() as i64,
            2 => self.node.vfs.lock().node(self.node.ino).size() as i64,
            _ => return Err(Errno::EINVAL),
        };
        let new = base.checked_add(off).filter(|n| *n >= 0).ok_or(Errno::EINVAL)?;
        of.set_offset(new as u64);
        Ok(new as u64)
    }

    fn node(&self) -> Option<Ino> {
        Some(self.node.ino)
    }

    fn host_lock(&self, _: &OpenFile, lock: &crate::filelock::HostLock) -> Result<(), Errno> {
        use crate::filelock::{HostLock, Kind, OFFSET_MAX};
        use onering_abi::hostfs as proto;
        let mut v = self.node.vfs.lock();
        // Only a volume's files: the rootfs' are the VM's own.
        if !matches!(v.layer(self.node.ino), Some(crate::vfs::host::Layer::Volume { .. }))
            || !matches!(v.node(self.node.ino).data, crate::vfs::Data::HostFile(_))
        {
            return Ok(());
        }
        let (kind, start, len) = match *lock {
            HostLock::Record { kind, start, end, .. } => {
                (kind, start, if end == OFFSET_MAX { 0 } else { end - start + 1 })
            }
            HostLock::Flock { kind } => (kind, 0, 0),
        };
        let k = match kind {
            Some(Kind::Read) => proto::LOCK_READ,
            Some(Kind::Write) => proto::LOCK_WRITE,
            None => proto::LOCK_UNLOCK,
        };
        let writable = !v.node(self.node.ino).readonly;
        let h = v.io_handle(self.node.ino, writable)?;
        drop(v);
        if k == proto::LOCK_UNLOCK {
            // (No exit of its own: it rides on the next host-file call, which
            // comes after it; an unlock has nothing to report.)
            onering_arch::hostcall::fs::unlock(h, start as u64, len as u64);
            return Ok(());
        }
        match onering_arch::hostcall::fs::lock(h, k, start as u64, len as u64).map_err(Errno::from_host)? {
            Some(st) => self.node.vfs.lock().relock(self.node.ino, &st),
            // (A read lock made of the queued unlock of the range this handle
            // held: no stat, the cached chunks go all the same.)
            None => self.node.vfs.lock().uncache(self.node.ino),
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), Errno> {
        let io = self.node.vfs.lock().node(self.node.ino).host.as_ref().and_then(|h| h.io);
        match io {
            Some((h, true)) => super::host::sync(h),
            _ => Ok(()),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Whether node `ino`'s bytes are on the host (read through the page cache,
/// written through to the host).
fn on_host(v: &crate::vfs::tree::Vfs, ino: Ino) -> bool {
    matches!(v.node(ino).data, crate::vfs::Data::HostFile(_))
}

impl NodeFile {
    /// Reports inotify event `mask` on its node (nothing to do, and no lock
    /// taken, while nothing is watched).
    fn notify(&self, mask: u32) {
        if crate::vfs::notify::active() {
            self.node.vfs.lock().notify_node(self.node.ino, mask);
        }
    }

    /// A write of a volume's file: straight from the program's buffer to the host
    /// file through `target` (its handle, and the position), without the tree's
    /// lock.
    fn write_host(
        &self,
        of: &OpenFile,
        user: &dyn UserMem,
        (buf, len): (u64, u64),
        off: Option<u64>,
        target: (u64, u64),
        now: u64,
    ) -> SysResult {
        let (h, at) = target;
        let mut done = 0;
        if len <= onering_abi::hostfs::MAX_DEFERRED_WRITE {
            // A small write waits for the next host-file call (the WAL frames of
            // a SQLite commit ride on its fsync): its bytes copied now.
            let mut data = Vec::new();
            if data.try_reserve_exact(len as usize).is_ok() {
                data.extend(core::iter::repeat_n(0u8, len as usize));
                user.read(buf, &mut data)?;
                done = onering_arch::hostcall::fs::write_later(h, data, at).map_err(Errno::from_host)?;
            }
        }
        while done < len {
            match onering_arch::hostcall::fs::write_user(h, buf + done, len - done, at + done) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if done == 0 => return Err(Errno::from_host(e)),
                Err(_) => break,
            }
        }
        self.node.vfs.lock().wrote(self.node.ino, at, done, now);
        if off.is_none() {
            of.set_offset(at + done);
        }
        if done > 0 {
            self.notify(crate::vfs::notify::IN_MODIFY);
        }
        Ok(done)
    }

    /// A read of a host file: chunk by chunk, each fetched first if not cached.
    fn read_host(&self, user: &dyn UserMem, buf: u64, len: u64, at: u64) -> Result<u64, Errno> {
        use crate::vfs::pages::CHUNK;
        let ino = self.node.ino;
        let mut done = 0u64;
        while done < len {
            let pos = at + done;
            let piece = (len - done).min(CHUNK as u64 - pos % CHUNK as u64) as usize;
            let plan = self.node.vfs.lock().read_plan(ino, pos, piece)?;
            if let Some(p) = plan {
                // (Room in the heap first, outside the tree's lock.)
                // With no memory for the readahead (the program's memory took it:
                // what the cache had went first), one chunk, or none: the cache
                // does not eat the heap's reserve, and the read below then goes
                // straight to the program's buffer.
                let count = if onering_arch::heap::ensure(p.count * CHUNK) {
                    p.count
                } else {
                    usize::from(onering_arch::heap::ensure(CHUNK))
                };
                let chunks = super::host::HOSTCALLS.read_chunks(p.handle, (p.first * CHUNK) as u64, count)?;
                if !chunks.is_empty() {
                    self.node.vfs.lock().cache_fill(ino, p.first, p.gen, chunks);
                }
            }
            let v = self.node.vfs.lock();
            let r = copy_out(&v, ino, pos, piece, user, buf + done);
            drop(v);
            match r {
                Ok(0) => break,
                Ok(n) => done += n as u64,
                // (Its chunk went from a cache too small for the readahead, or
                // was never cached for want of memory: read straight into the
                // program's buffer.)
                Err(Errno::EIO) => {
                    let h = self.node.vfs.lock().io_handle(ino, false)?;
                    let to = match user.host_addr(buf + done, piece as u64) {
                        Ok(to) => to,
                        Err(_) if done > 0 => break,
                        Err(e) => return Err(e),
                    };
                    match onering_arch::hostcall::fs::read_user(h, to, piece as u64, pos) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(_) if done > 0 => break,
                        Err(e) => return Err(Errno::from_host(e)),
                    }
                }
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }
}

/// Copies up to `len` bytes of file `ino` at `at` to user memory at `buf`, under
/// the tree's lock (so never filling a file mapping: `UserMem::no_fill`): the
/// count copied.
fn copy_out(
    v: &crate::vfs::tree::Vfs,
    ino: Ino,
    at: u64,
    len: usize,
    user: &dyn UserMem,
    buf: u64,
) -> Result<usize, Errno> {
    let mut r = Ok(0);
    user.no_fill(&mut |u| {
        let mut done = 0u64;
        r = v.read_with(ino, at, len, |piece| {
            u.write(buf + done, piece)?;
            done += piece.len() as u64;
            Ok(())
        });
    });
    r
}

impl Drop for NodeFile {
    fn drop(&mut self) {
        // The last open file of a host file lets its I/O handle go.
        let mut v = self.node.vfs.lock();
        if self.close != 0 && crate::vfs::notify::active() {
            v.notify_node(self.node.ino, self.close);
        }
        if v.node(self.node.ino).host.is_some() && v.open_count(self.node.ino) <= 1 {
            v.release_io(self.node.ino);
        }
        let volume = matches!(v.layer(self.node.ino), Some(crate::vfs::host::Layer::Volume { .. }));
        drop(v);
        if volume {
            // What was written through it is on the host once it is closed.
            super::host::flush_writes();
        }
    }
}
