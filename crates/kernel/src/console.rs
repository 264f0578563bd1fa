//! The console buffer: the program's stdout and stderr on their way to the host,
//! and the policy of when to send them. Pure logic, tested on the host; the
//! device (`fs::stdio`) holds it under a lock and sends flushed bytes to the VMM
//! outside that lock.
//!
//! Each flush is one exit to the VMM (~18 µs here), so small writes are gathered in
//! one buffer and flushed when the buffer would overflow, before the output switches
//! to the other stream (which keeps stdout and stderr in order), and at exit; for a
//! stream that is a terminal also at each newline (someone is watching), while a
//! pipe or a file gets whole buffers (no exit per line). A write larger than half
//! the buffer skips it: the VMM reads it straight from the program's memory, one
//! exit for the lot, after what was buffered before. The device adds the flushes
//! that depend on time: when the program goes idle, and `DELAY` after the oldest
//! buffered byte (`since`), so nothing written waits long for the host.

use crate::errno::Errno;
use alloc::vec::Vec;

pub const CAPACITY: usize = 64 * 1024;

/// Longest a buffered byte waits while the program keeps running (ns).
pub const DELAY: u64 = 5_000_000;

/// What a write needs before its bytes can go in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Append to the buffer.
    Append,
    /// Send what is buffered first (the other stream's bytes, or no room).
    FlushFirst,
    /// Too large to buffer: send it directly (the buffer is empty).
    Direct,
}

#[derive(Debug)]
pub struct ConsoleBuf {
    /// Grows on demand up to CAPACITY: every page the guest touches first costs
    /// microseconds here, so a program that prints little touches little.
    buf: Vec<u8>,
    /// The stream the buffered bytes belong to (1 or 2).
    fd: u32,
    /// Streams (bit n: fd n) that flush at a newline: terminals.
    lines: u32,
    /// When the oldest buffered byte came (monotonic ns; meaningless when empty).
    since: u64,
}

impl Default for ConsoleBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl ConsoleBuf {
    /// A buffer that flushes at newlines on every stream.
    pub const fn new() -> Self {
        Self::with_line_streams(0b110)
    }

    /// A buffer that flushes at newlines on the streams of `lines` (bit n: fd n).
    pub const fn with_line_streams(lines: u32) -> Self {
        Self { buf: Vec::new(), fd: 1, lines, since: 0 }
    }

    /// When the oldest buffered byte came (None: nothing buffered).
    pub fn since(&self) -> Option<u64> {
        (!self.buf.is_empty()).then_some(self.since)
    }

    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// What a write of `len` bytes to `fd` needs first.
    pub fn plan(&self, fd: u32, len: usize) -> Step {
        // A write that will not be appended (another stream, no room, or large
        // enough to go direct) waits for what is buffered to go first: nothing may
        // overtake bytes written before it.
        if !self.buf.is_empty() && (fd != self.fd || len > CAPACITY - self.buf.len() || len > CAPACITY / 2) {
            Step::FlushFirst
        } else if len > CAPACITY / 2 {
            Step::Direct
        } else {
            Step::Append
        }
    }

    /// Appends `len` bytes for `fd` (after `plan` said Append) at time `now`, written
    /// by `fill`; returns whether the buffer should be sent now (a newline on a
    /// terminal). A failing `fill` leaves the buffer as it was.
    pub fn append(
        &mut self,
        fd: u32,
        len: usize,
        now: u64,
        fill: impl FnOnce(&mut [u8]) -> Result<(), Errno>,
    ) -> Result<bool, Errno> {
        let start = self.buf.len();
        if self.buf.try_reserve(len).is_err() {
            return Err(Errno::ENOMEM);
        }
        self.buf.resize(start + len, 0);
        if let Err(e) = fill(&mut self.buf[start..]) {
            self.buf.truncate(start);
            return Err(e);
        }
        if start == 0 {
            self.since = now;
        }
        self.fd = fd;
        Ok(self.lines & (1 << fd) != 0 && self.buf[start..].contains(&b'\n'))
    }

    /// Takes the buffered bytes (and their stream) to send them.
    pub fn take(&mut self) -> Option<(u32, Vec<u8>)> {
        if self.buf.is_empty() {
            return None;
        }
        Some((self.fd, core::mem::take(&mut self.buf)))
    }

    /// Gives a sent buffer's memory back, for reuse, if nothing new came meanwhile.
    pub fn recycle(&mut self, mut v: Vec<u8>) {
        if self.buf.is_empty() && self.buf.capacity() < v.capacity() {
            v.clear();
            self.buf = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn put(c: &mut ConsoleBuf, fd: u32, s: &[u8]) -> bool {
        assert_eq!(c.plan(fd, s.len()), Step::Append);
        c.append(fd, s.len(), 7, |d| {
            d.copy_from_slice(s);
            Ok(())
        })
        .unwrap()
    }

    #[test]
    fn gathers_until_newline() {
        let mut c = ConsoleBuf::new();
        assert!(!put(&mut c, 1, b"hello "));
        assert!(!put(&mut c, 1, b"world"));
        assert!(put(&mut c, 1, b"!\nmore"));
        assert_eq!(c.take(), Some((1, b"hello world!\nmore".to_vec())));
        assert_eq!(c.take(), None);
    }

    #[test]
    fn switching_streams_flushes_first() {
        let mut c = ConsoleBuf::new();
        put(&mut c, 1, b"out");
        assert_eq!(c.plan(2, 3), Step::FlushFirst);
        assert_eq!(c.take(), Some((1, b"out".to_vec())));
        put(&mut c, 2, b"err");
        assert_eq!(c.take(), Some((2, b"err".to_vec())));
    }

    #[test]
    fn large_writes_go_direct_and_a_full_buffer_flushes() {
        let mut c = ConsoleBuf::new();
        put(&mut c, 1, b"x");
        assert_eq!(c.plan(1, CAPACITY), Step::FlushFirst);
        c.take();
        assert_eq!(c.plan(1, CAPACITY / 2 + 1), Step::Direct);
        let half = vec![b'b'; CAPACITY / 2];
        put(&mut c, 1, &half);
        put(&mut c, 1, &half);
        assert_eq!(c.pending(), CAPACITY, "exactly fills the buffer");
        assert_eq!(c.plan(1, 1), Step::FlushFirst);
    }

    #[test]
    fn pipes_and_files_get_whole_buffers_not_lines() {
        let mut c = ConsoleBuf::with_line_streams(1 << 2); // stderr a terminal, stdout not
        assert_eq!(c.since(), None);
        assert!(!put(&mut c, 1, b"line\n"), "no flush at a newline to a pipe");
        assert_eq!(c.since(), Some(7));
        assert!(!put(&mut c, 1, b"more\n"));
        assert_eq!(c.take(), Some((1, b"line\nmore\n".to_vec())));
        assert!(put(&mut c, 2, b"err\n"), "a terminal flushes at a newline");
    }

    /// The bug that corrupted `tar | tar` and compressors' output: a large write
    /// went direct while smaller bytes written before it were still buffered.
    #[test]
    fn a_large_write_never_overtakes_buffered_bytes() {
        let mut c = ConsoleBuf::new();
        put(&mut c, 1, b"before");
        for len in [CAPACITY / 2 + 1, CAPACITY - 100, CAPACITY, 10 * CAPACITY] {
            assert_eq!(c.plan(1, len), Step::FlushFirst, "{len}");
        }
        c.take();
        assert_eq!(c.plan(1, CAPACITY / 2 + 1), Step::Direct);
    }

    #[test]
    fn a_failed_copy_leaves_the_buffer() {
        let mut c = ConsoleBuf::new();
        put(&mut c, 1, b"keep");
        assert_eq!(c.append(1, 10, 8, |_| Err(Errno::EFAULT)), Err(Errno::EFAULT));
        assert_eq!(c.take(), Some((1, b"keep".to_vec())));
        let v = vec![0u8; 0];
        c.recycle(v);
    }
}
