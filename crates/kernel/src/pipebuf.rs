//! A pipe's state: a ring buffer of at most [`CAPACITY`] bytes and the count of
//! open ends. Pure logic, tested on the host: the file objects (`fs::pipe`) wrap it
//! in a lock, copy user memory in and out through the closures given here, and
//! wake threads waiting on the pipe.
//!
//! The buffer grows on demand (every page the guest touches first costs
//! microseconds here, so a pipe that carries little touches little) and all pipe
//! buffers together stay within a budget of the kernel heap: a full budget is
//! EAGAIN for the writer, never a failed allocation.

use crate::errno::Errno;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Capacity of a pipe, as Linux's default.
pub const CAPACITY: usize = 64 * 1024;
/// Writes to a pipe of at most this many bytes are atomic: all of it goes in at
/// once, when there is room for all of it (POSIX, Linux: 4096).
pub const PIPE_BUF: usize = 4096;

/// Heap bytes all pipe buffers together may use, and use now.
static BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);
static USED: AtomicUsize = AtomicUsize::new(0);

/// Caps the heap all pipe buffers may use.
pub fn set_budget(bytes: usize) {
    BUDGET.store(bytes, Ordering::Relaxed);
}

#[derive(Debug, Default)]
pub struct PipeBuf {
    /// The ring: `len` bytes from `head`, wrapping at `data.len()`.
    data: Vec<u8>,
    head: usize,
    len: usize,
    pub readers: usize,
    pub writers: usize,
    /// Bumped on every change (for edge-triggered epoll).
    pub gen: u64,
    /// Opens of each end so far (a named pipe's opener waits for the other count to
    /// move, so a partner that came and went is not missed).
    pub r_opens: u64,
    pub w_opens: u64,
    /// Outside the pipes' budget (a fused TCP connection's ring, bounded by the
    /// heap as the stack's buffers are): memory running out is ENOBUFS.
    unbudgeted: bool,
}

impl Drop for PipeBuf {
    fn drop(&mut self) {
        if !self.unbudgeted {
            USED.fetch_sub(self.data.len(), Ordering::Relaxed);
        }
    }
}

impl PipeBuf {
    /// An anonymous pipe: one reader, one writer.
    pub fn new() -> Self {
        PipeBuf {
            data: Vec::new(),
            head: 0,
            len: 0,
            readers: 1,
            writers: 1,
            gen: 0,
            r_opens: 1,
            w_opens: 1,
            unbudgeted: false,
        }
    }

    /// A ring outside the pipes' budget, for one reader and one writer.
    pub fn unbudgeted() -> Self {
        let mut p = PipeBuf::new();
        p.unbudgeted = true;
        p
    }

    /// A named pipe's: no ends open yet.
    pub fn fifo() -> Self {
        PipeBuf::default()
    }

    pub fn available(&self) -> usize {
        self.len
    }

    /// Bytes a write could add now.
    pub fn room(&self) -> usize {
        CAPACITY - self.len
    }

    /// Drops what is buffered (a named pipe nobody has open any more).
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// The buffered bytes as (up to) two slices, oldest first.
    fn pieces(&self, n: usize) -> (&[u8], &[u8]) {
        let cap = self.data.len();
        let first = n.min(cap - self.head);
        (&self.data[self.head..self.head + first], &self.data[..n - first])
    }

    /// Takes up to `max` bytes, handing them to `out` (at most two calls, in
    /// order; a failing call stops the read, and only what was handed out before it
    /// is taken). `Ok(0)` is end of file (no writers left); `EAGAIN` means empty
    /// with writers still open.
    pub fn read_with(&mut self, max: usize, mut out: impl FnMut(&[u8]) -> Result<(), Errno>) -> Result<usize, Errno> {
        if self.len == 0 {
            return if self.writers == 0 { Ok(0) } else { Err(Errno::EAGAIN) };
        }
        let n = max.min(self.len);
        if n == 0 {
            return Ok(0);
        }
        let (a, b) = self.pieces(n);
        let (la, lb) = (a.len(), b.len());
        out(a)?;
        let done = if lb > 0 && out(b).is_err() { la } else { la + lb };
        self.head = (self.head + done) % self.data.len();
        self.len -= done;
        if self.len == 0 {
            self.head = 0;
        }
        self.gen += 1;
        Ok(done)
    }

    /// Makes room for `want` more bytes in the ring (grows it, within the budget).
    fn grow(&mut self, want: usize) -> Result<(), Errno> {
        let need = self.len + want;
        if need <= self.data.len() {
            return Ok(());
        }
        let new = need.max(self.data.len() * 2).clamp(4096, CAPACITY);
        let mut v = Vec::new();
        if self.unbudgeted {
            v.try_reserve_exact(new).map_err(|_| Errno::ENOBUFS)?;
        } else {
            let more = new - self.data.len();
            if USED.fetch_add(more, Ordering::Relaxed) + more > BUDGET.load(Ordering::Relaxed)
                || v.try_reserve_exact(new).is_err()
            {
                USED.fetch_sub(more, Ordering::Relaxed);
                return Err(Errno::EAGAIN);
            }
        }
        let (a, b) = self.pieces(self.len);
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        v.resize(new, 0);
        self.data = v;
        self.head = 0;
        Ok(())
    }

    /// Appends up to `len` bytes (what fits), filled by `input` (at most two calls,
    /// in order; a failing call stops the write, and only what was filled before it
    /// is kept). `EPIPE` without readers, `EAGAIN` when full, and for a pipe's
    /// write of at most [`PIPE_BUF`] bytes when not all of it fits (it is atomic:
    /// no other write lands inside it, no reader sees half of it).
    pub fn write_with(
        &mut self,
        len: usize,
        mut input: impl FnMut(&mut [u8]) -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        if self.readers == 0 {
            return Err(Errno::EPIPE);
        }
        let n = len.min(self.room());
        if n == 0 {
            return if len == 0 { Ok(0) } else { Err(Errno::EAGAIN) };
        }
        if n < len && len <= PIPE_BUF && !self.unbudgeted {
            return Err(Errno::EAGAIN);
        }
        self.grow(n)?;
        let cap = self.data.len();
        let tail = (self.head + self.len) % cap;
        let first = n.min(cap - tail);
        input(&mut self.data[tail..tail + first])?;
        let mut done = first;
        if n > first && input(&mut self.data[..n - first]).is_ok() {
            done = n;
        }
        self.len += done;
        self.gen += 1;
        Ok(done)
    }

    /// Copies up to `buf.len()` buffered bytes into `buf` without taking them
    /// (`splice` and `tee` take only what they passed on: `consume`).
    pub fn peek(&self, buf: &mut [u8]) -> usize {
        let mut at = 0;
        let _ = self.peek_with(buf.len(), |piece| {
            buf[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
            Ok(())
        });
        at
    }

    /// Hands up to `max` buffered bytes to `out` without taking them (at most two
    /// calls, in order; an error from the first is the result).
    pub fn peek_with(&self, max: usize, mut out: impl FnMut(&[u8]) -> Result<(), Errno>) -> Result<usize, Errno> {
        let (a, b) = self.pieces(max.min(self.len));
        out(a)?;
        if !b.is_empty() && out(b).is_err() {
            return Ok(a.len());
        }
        Ok(a.len() + b.len())
    }

    /// Drops the oldest `n` buffered bytes (at most what there is).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        if n == 0 {
            return;
        }
        self.head = (self.head + n) % self.data.len();
        self.len -= n;
        if self.len == 0 {
            self.head = 0;
        }
        self.gen += 1;
    }

    /// `read_with` into a slice (tests, and kernel-internal users).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut at = 0;
        self.read_with(buf.len(), |piece| {
            buf[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
            Ok(())
        })
    }

    /// `write_with` from a slice.
    pub fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        let mut at = 0;
        self.write_with(data.len(), |dst| {
            dst.copy_from_slice(&data[at..at + dst.len()]);
            at += dst.len();
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_and_capacity() {
        let mut p = PipeBuf::new();
        let mut buf = [0u8; 8];
        assert_eq!(p.read(&mut buf), Err(Errno::EAGAIN));
        assert_eq!(p.write(b"hey"), Ok(3));
        assert_eq!(p.read(&mut buf), Ok(3));
        assert_eq!(&buf[..3], b"hey");
        p.writers = 0;
        assert_eq!(p.read(&mut buf), Ok(0), "no writers: end of file");
        p.readers = 0;
        assert_eq!(p.write(b"x"), Err(Errno::EPIPE));
        let mut q = PipeBuf::new();
        let big = alloc::vec![1u8; CAPACITY + 10];
        assert_eq!(q.write(&big), Ok(CAPACITY));
        assert_eq!(q.write(b"x"), Err(Errno::EAGAIN));
    }

    #[test]
    fn small_writes_are_atomic() {
        let mut p = PipeBuf::new();
        let fill = alloc::vec![1u8; CAPACITY - 10];
        assert_eq!(p.write(&fill), Ok(CAPACITY - 10));
        assert_eq!(p.write(&[2u8; 11]), Err(Errno::EAGAIN), "all of it or nothing");
        assert_eq!(p.write(&[2u8; 10]), Ok(10));
        let mut buf = alloc::vec![0u8; PIPE_BUF];
        assert_eq!(p.read(&mut buf), Ok(PIPE_BUF));
        assert_eq!(p.write(&[3u8; PIPE_BUF + 1]), Ok(PIPE_BUF), "a longer write takes what fits");
    }

    #[test]
    fn peek_then_consume() {
        let mut p = PipeBuf::new();
        let mut buf = [0u8; 8];
        assert_eq!(p.peek(&mut buf), 0);
        p.write(b"abcdef").unwrap();
        p.consume(2);
        p.write(b"gh").unwrap();
        assert_eq!(p.peek(&mut buf[..3]), 3);
        assert_eq!(&buf[..3], b"cde");
        assert_eq!(p.available(), 6, "peeking takes nothing");
        p.consume(4);
        assert_eq!(p.read(&mut buf), Ok(2));
        assert_eq!(&buf[..2], b"gh");
        p.consume(10);
        assert_eq!(p.available(), 0);
    }

    #[test]
    fn the_ring_wraps_and_keeps_order() {
        let mut p = PipeBuf::new();
        let mut next = 0u8;
        let mut expect = 0u8;
        // Writes and reads of odd sizes move the head around the ring many times.
        for round in 0..2000 {
            let w = (round * 37) % 9000 + 1;
            let data: alloc::vec::Vec<u8> = (0..w)
                .map(|_| {
                    next = next.wrapping_add(1);
                    next
                })
                .collect();
            let n = p.write(&data).unwrap_or(0);
            next = next.wrapping_sub((w - n) as u8); // what did not fit is written again later
            let mut out = alloc::vec![0u8; (round * 53) % 7000 + 1];
            if let Ok(m) = p.read(&mut out) {
                for b in &out[..m] {
                    expect = expect.wrapping_add(1);
                    assert_eq!(*b, expect, "round {round}");
                }
            }
        }
    }

    #[test]
    fn a_failed_copy_takes_nothing() {
        let mut p = PipeBuf::new();
        p.write(b"abcdef").unwrap();
        assert_eq!(p.read_with(4, |_| Err(Errno::EFAULT)), Err(Errno::EFAULT));
        assert_eq!(p.available(), 6);
        assert_eq!(p.write_with(3, |_| Err(Errno::EFAULT)), Err(Errno::EFAULT));
        assert_eq!(p.available(), 6);
    }

    #[test]
    fn the_budget_holds() {
        // (Tests share the budget: use a pipe's own accounting only.)
        let mut p = PipeBuf::new();
        p.write(&[0u8; 100]).unwrap();
        assert!(p.data.len() >= 4096 && p.data.len() <= CAPACITY);
    }
}
