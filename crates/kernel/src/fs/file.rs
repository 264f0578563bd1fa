//! Open files, pipes and the file-descriptor table. Pure logic.
//!
//! An open file description (`OpenFile`) is shared by every descriptor `dup`ed from
//! it (offset and status flags included), as on Linux; close-on-exec belongs to the
//! descriptor.

use super::vfs::Ino;
use crate::errno::Errno;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use spin::Mutex;

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

/// Capacity of a pipe, as Linux's default.
pub const PIPE_CAPACITY: usize = 64 * 1024;

/// Heap bytes all pipe buffers together may use, and use now.
static PIPE_BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);
static PIPE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Caps the heap all pipe buffers may use (a full pipe's writer gets EAGAIN).
pub fn set_pipe_budget(bytes: usize) {
    PIPE_BUDGET.store(bytes, Ordering::Relaxed);
}

impl Drop for Pipe {
    fn drop(&mut self) {
        PIPE_BYTES.fetch_sub(self.buf.capacity(), Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
pub struct Pipe {
    buf: VecDeque<u8>,
    pub readers: usize,
    pub writers: usize,
    /// Bumped on every change (for edge-triggered epoll).
    pub gen: u64,
    /// Opens of each end so far (a named pipe's opener waits for the other count to
    /// move, so a partner that came and went is not missed).
    pub r_opens: u64,
    pub w_opens: u64,
}

impl Pipe {
    pub fn available(&self) -> usize {
        self.buf.len()
    }

    /// Bytes a write could add now.
    pub fn room(&self) -> usize {
        PIPE_CAPACITY - self.buf.len()
    }

    /// Takes up to `out.len()` bytes. `Ok(0)` is end of file (no writers left);
    /// `EAGAIN` means empty with writers still open.
    pub fn read(&mut self, out: &mut [u8]) -> Result<usize, Errno> {
        if self.buf.is_empty() {
            return if self.writers == 0 { Ok(0) } else { Err(Errno::EAGAIN) };
        }
        let n = out.len().min(self.buf.len());
        for (o, b) in out.iter_mut().zip(self.buf.drain(..n)) {
            *o = b;
        }
        self.gen += 1;
        Ok(n)
    }

    /// Appends what fits of `data`. `EPIPE` without readers, `EAGAIN` when full.
    pub fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        if self.readers == 0 {
            return Err(Errno::EPIPE);
        }
        let n = data.len().min(PIPE_CAPACITY - self.buf.len());
        if n == 0 && !data.is_empty() {
            return Err(Errno::EAGAIN);
        }
        // All pipes together may hold PIPE_BUDGET bytes of the kernel heap.
        let want = (self.buf.len() + n).saturating_sub(self.buf.capacity());
        if want > 0 {
            if PIPE_BYTES.fetch_add(want, Ordering::Relaxed) + want > PIPE_BUDGET.load(Ordering::Relaxed) {
                PIPE_BYTES.fetch_sub(want, Ordering::Relaxed);
                return Err(Errno::EAGAIN);
            }
            let before = self.buf.capacity();
            if self.buf.try_reserve_exact(n).is_err() {
                PIPE_BYTES.fetch_sub(want, Ordering::Relaxed);
                return Err(Errno::EAGAIN);
            }
            // Account for what the allocator really gave.
            let got = self.buf.capacity() - before;
            if got > want {
                PIPE_BYTES.fetch_add(got - want, Ordering::Relaxed);
            } else {
                PIPE_BYTES.fetch_sub(want - got, Ordering::Relaxed);
            }
        }
        self.buf.extend(&data[..n]);
        if n > 0 {
            self.gen += 1;
        }
        Ok(n)
    }
}

#[derive(Debug)]
pub enum Kind {
    /// A node of the tree (file, directory, device).
    Node(Ino),
    PipeRead(Arc<Mutex<Pipe>>),
    PipeWrite(Arc<Mutex<Pipe>>),
    EventFd(Arc<Mutex<super::poll::EventFd>>),
    Epoll(Arc<Mutex<super::poll::Epoll>>),
}

/// An open file description. What it refers to never changes; the status flags and
/// the offset are atomics, so descriptors share it without a lock (the kernel's own
/// lock orders the updates).
#[derive(Debug)]
pub struct OpenFile {
    pub kind: Kind,
    /// Keeps the node (if any) from being freed while open.
    _hold: Option<super::vfs::Hold>,
    /// Access mode and status flags (`O_APPEND`, `O_NONBLOCK`, ...).
    flags: AtomicU32,
    offset: AtomicU64,
    /// For a read end of a named pipe opened with O_NONBLOCK while no writer had it
    /// open: the writers' open count then. As Linux, such a reader reports hang-up
    /// only once a writer has come (and gone) since; every other end has 0 here,
    /// which no count equals once the other end has been opened.
    pub partner: AtomicU64,
}

impl OpenFile {
    pub fn new(kind: Kind, flags: u32) -> Self {
        OpenFile {
            kind,
            _hold: None,
            flags: AtomicU32::new(flags),
            offset: AtomicU64::new(0),
            partner: AtomicU64::new(0),
        }
    }

    /// The same, keeping its node alive.
    pub fn holding(mut self, hold: super::vfs::Hold) -> Self {
        self._hold = Some(hold);
        self
    }

    pub fn flags(&self) -> u32 {
        self.flags.load(Ordering::Relaxed)
    }

    pub fn set_flags(&self, f: u32) {
        self.flags.store(f, Ordering::Relaxed)
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
}

/// Called with a pipe's key when one of its ends closes (the kernel wakes threads
/// blocked on the pipe or polling it; unset in host tests).
pub static ON_PIPE_CLOSE: spin::Once<fn(u64)> = spin::Once::new();

/// The key threads blocked on pipe `p` wait on.
pub fn pipe_key(p: &Arc<Mutex<Pipe>>) -> u64 {
    Arc::as_ptr(p) as *const u8 as u64
}

impl OpenFile {
    /// The wait key of the pipe this end belongs to, if it is one.
    pub fn pipe_key(&self) -> Option<u64> {
        match &self.kind {
            Kind::PipeRead(p) | Kind::PipeWrite(p) => Some(pipe_key(p)),
            _ => None,
        }
    }

    /// The key threads blocked on this file (reading, writing, polling) wait on:
    /// pipes, eventfds and epolls have one.
    pub fn wait_key(&self) -> Option<u64> {
        match &self.kind {
            Kind::PipeRead(p) | Kind::PipeWrite(p) => Some(pipe_key(p)),
            Kind::EventFd(e) => Some(Arc::as_ptr(e) as *const u8 as u64),
            Kind::Epoll(e) => Some(Arc::as_ptr(e) as *const u8 as u64),
            Kind::Node(_) => None,
        }
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        match &self.kind {
            Kind::PipeRead(p) => {
                let mut p = p.lock();
                p.readers -= 1;
                p.gen += 1;
            }
            Kind::PipeWrite(p) => {
                let mut p = p.lock();
                p.writers -= 1;
                p.gen += 1;
            }
            _ => return,
        }
        if let (Some(f), Some(key)) = (ON_PIPE_CLOSE.get(), self.pipe_key()) {
            f(key);
        }
    }
}

pub type FileRef = Arc<OpenFile>;

/// A pipe's two ends.
pub fn pipe(flags: u32) -> (FileRef, FileRef) {
    let p = Arc::new(Mutex::new(Pipe { buf: VecDeque::new(), readers: 1, writers: 1, gen: 0, r_opens: 1, w_opens: 1 }));
    let status = flags & oflag::O_NONBLOCK;
    let r = OpenFile::new(Kind::PipeRead(p.clone()), oflag::O_RDONLY | status);
    let w = OpenFile::new(Kind::PipeWrite(p), oflag::O_WRONLY | status);
    (Arc::new(r), Arc::new(w))
}

/// The pipe of a new named pipe: no ends open yet.
pub fn fifo_pipe() -> Arc<Mutex<Pipe>> {
    Arc::new(Mutex::new(Pipe { buf: VecDeque::new(), readers: 0, writers: 0, gen: 0, r_opens: 0, w_opens: 0 }))
}

/// Opens an end of named pipe `p` (`write`: the write end). When nobody has it open
/// any more its leftover data is dropped, as on Linux. Also returns how many times
/// the other end had been opened (a blocking opener waits for that to change).
pub fn fifo_end(p: &Arc<Mutex<Pipe>>, write: bool, status: u32, hold: super::vfs::Hold) -> (FileRef, u64) {
    let (seen, partner) = {
        let mut g = p.lock();
        if g.readers == 0 && g.writers == 0 {
            g.buf.clear();
        }
        g.gen += 1;
        if write {
            g.writers += 1;
            g.w_opens += 1;
            (g.r_opens, 0)
        } else {
            let lone = status & oflag::O_NONBLOCK != 0 && g.writers == 0;
            g.readers += 1;
            g.r_opens += 1;
            (g.w_opens, if lone { g.w_opens } else { 0 })
        }
    };
    let (kind, acc) = if write {
        (Kind::PipeWrite(p.clone()), oflag::O_WRONLY)
    } else {
        (Kind::PipeRead(p.clone()), oflag::O_RDONLY)
    };
    let f = OpenFile::new(kind, acc | (status & oflag::O_NONBLOCK)).holding(hold);
    f.partner.store(partner, Ordering::Relaxed);
    (Arc::new(f), seen)
}

/// Most open descriptors (RLIMIT_NOFILE).
pub const MAX_FDS: usize = 1024;

#[derive(Debug, Clone)]
struct Slot {
    file: FileRef,
    cloexec: bool,
}

#[derive(Debug, Default, Clone)]
pub struct FdTable {
    slots: Vec<Option<Slot>>,
}

impl FdTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, fd: u64) -> Result<&FileRef, Errno> {
        // Descriptors are C ints: the upper 32 bits of the register do not count.
        let fd = fd as u32;
        self.slots.get(fd as usize).and_then(|s| s.as_ref()).map(|s| &s.file).ok_or(Errno::EBADF)
    }

    /// Installs `file` at the lowest free descriptor `>= min`.
    pub fn insert_from(&mut self, min: usize, file: FileRef, cloexec: bool) -> Result<u64, Errno> {
        if min >= MAX_FDS {
            return Err(Errno::EINVAL);
        }
        let fd = (min..MAX_FDS).find(|i| self.slots.get(*i).is_none_or(|s| s.is_none())).ok_or(Errno::EMFILE)?;
        if self.slots.len() <= fd {
            self.slots.resize(fd + 1, None);
        }
        self.slots[fd] = Some(Slot { file, cloexec });
        Ok(fd as u64)
    }

    pub fn insert(&mut self, file: FileRef, cloexec: bool) -> Result<u64, Errno> {
        self.insert_from(0, file, cloexec)
    }

    /// Puts `file` at exactly `fd`, closing what was there (`dup2`).
    pub fn install(&mut self, fd: u64, file: FileRef, cloexec: bool) -> Result<u64, Errno> {
        let i = fd as usize;
        if i >= MAX_FDS {
            return Err(Errno::EBADF);
        }
        if self.slots.len() <= i {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(Slot { file, cloexec });
        Ok(fd)
    }

    pub fn close(&mut self, fd: u64) -> Result<(), Errno> {
        let fd = fd as u32;
        let slot = self.slots.get_mut(fd as usize).ok_or(Errno::EBADF)?;
        slot.take().map(|_| ()).ok_or(Errno::EBADF)
    }

    pub fn cloexec(&self, fd: u64) -> Result<bool, Errno> {
        self.slots.get(fd as usize).and_then(|s| s.as_ref()).map(|s| s.cloexec).ok_or(Errno::EBADF)
    }

    pub fn set_cloexec(&mut self, fd: u64, on: bool) -> Result<(), Errno> {
        let s = self.slots.get_mut(fd as usize).and_then(|s| s.as_mut()).ok_or(Errno::EBADF)?;
        s.cloexec = on;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ino: Ino) -> FileRef {
        Arc::new(OpenFile::new(Kind::Node(ino), oflag::O_RDWR))
    }

    #[test]
    fn lowest_free_descriptor() {
        let mut t = FdTable::new();
        assert_eq!(t.insert(file(1), false), Ok(0));
        assert_eq!(t.insert(file(2), false), Ok(1));
        t.close(0).unwrap();
        assert_eq!(t.close(0), Err(Errno::EBADF));
        assert_eq!(t.insert(file(3), true), Ok(0));
        assert_eq!(t.insert_from(10, file(4), false), Ok(10));
        assert_eq!(t.cloexec(0), Ok(true));
        assert_eq!(t.get(5).map(|_| ()), Err(Errno::EBADF));
        assert_eq!(t.install(1, file(5), false), Ok(1));
        assert!(matches!(t.get(1).unwrap().kind, Kind::Node(5)));
        assert_eq!(t.install(MAX_FDS as u64, file(6), false), Err(Errno::EBADF));
    }

    #[test]
    fn table_fills_up() {
        let mut t = FdTable::new();
        for i in 0..MAX_FDS {
            assert_eq!(t.insert(file(i), false), Ok(i as u64));
        }
        assert_eq!(t.insert(file(0), false), Err(Errno::EMFILE));
    }

    #[test]
    fn dup_shares_the_offset() {
        let mut t = FdTable::new();
        let f = file(1);
        t.insert(f.clone(), false).unwrap();
        t.insert(f, false).unwrap();
        t.get(0).unwrap().set_offset(42);
        assert_eq!(t.get(1).unwrap().offset(), 42);
    }

    #[test]
    fn pipes_end_when_a_side_closes() {
        let (r, w) = pipe(0);
        let mut buf = [0u8; 8];
        let p = match &r.kind {
            Kind::PipeRead(p) => p.clone(),
            _ => unreachable!(),
        };
        assert_eq!(p.lock().read(&mut buf), Err(Errno::EAGAIN));
        assert_eq!(p.lock().write(b"hey"), Ok(3));
        assert_eq!(p.lock().read(&mut buf), Ok(3));
        drop(w);
        assert_eq!(p.lock().read(&mut buf), Ok(0), "no writers: end of file");
        drop(r);
        assert_eq!(p.lock().write(b"x"), Err(Errno::EPIPE));
        let (_r2, w2) = pipe(0);
        let big = alloc::vec![1u8; PIPE_CAPACITY + 10];
        let p2 = match &w2.kind {
            Kind::PipeWrite(p) => p.clone(),
            _ => unreachable!(),
        };
        assert_eq!(p2.lock().write(&big), Ok(PIPE_CAPACITY));
        assert_eq!(p2.lock().write(b"x"), Err(Errno::EAGAIN));
    }
}
