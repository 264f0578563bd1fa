//! Buffered console: the program's stdout and stderr on their way to the host.
//!
//! Each flush is one exit to the VMM (~18 µs here), so small writes are gathered in one
//! buffer and flushed at a newline, when the buffer is full, before the output switches
//! to the other stream (which keeps stdout and stderr in order), and at exit. A write
//! larger than half the buffer skips it: the VMM reads it straight from the program's
//! memory, one exit for the lot.

use crate::errno::Errno;
use alloc::vec::Vec;

/// Where flushed output goes: the host's file descriptor `fd`. `data` is at
/// guest-virtual address `addr` (the VMM reads it from there).
pub trait Sink {
    fn write(&mut self, fd: u32, addr: u64, data: &[u8]) -> Result<u64, Errno>;
}

pub const CAPACITY: usize = 64 * 1024;

#[derive(Debug)]
pub struct Console {
    /// Grows on demand up to CAPACITY: every page the guest touches first costs
    /// microseconds here, so a program that prints little touches little.
    buf: Vec<u8>,
    fd: u32,
}

impl Default for Console {
    fn default() -> Self {
        Self::new()
    }
}

impl Console {
    pub fn new() -> Self {
        Self { buf: Vec::new(), fd: 1 }
    }

    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Sends the buffered bytes to the host.
    pub fn flush(&mut self, sink: &mut impl Sink) -> Result<(), Errno> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = sink.write(self.fd, self.buf.as_ptr() as u64, &self.buf).map(|_| ());
        self.buf.clear();
        r
    }

    /// Writes `data` (which is at guest-virtual `addr`) to `fd` (1 or 2).
    pub fn write(&mut self, fd: u32, data: &[u8], addr: u64, sink: &mut impl Sink) -> Result<u64, Errno> {
        if fd != self.fd {
            self.flush(sink)?;
            self.fd = fd;
        }
        if data.len() > CAPACITY - self.buf.len() {
            self.flush(sink)?;
        }
        if data.len() > CAPACITY / 2 {
            return sink.write(fd, addr, data);
        }
        self.buf.extend_from_slice(data);
        if data.contains(&b'\n') {
            self.flush(sink)?;
        }
        Ok(data.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// Records each flush.
    #[derive(Default)]
    struct Rec(Vec<(u32, Vec<u8>)>);
    impl Sink for Rec {
        fn write(&mut self, fd: u32, _addr: u64, data: &[u8]) -> Result<u64, Errno> {
            self.0.push((fd, data.to_vec()));
            Ok(data.len() as u64)
        }
    }

    fn w(c: &mut Console, fd: u32, s: &[u8], r: &mut Rec) {
        assert_eq!(c.write(fd, s, s.as_ptr() as u64, r), Ok(s.len() as u64));
    }

    #[test]
    fn gathers_until_newline() {
        let (mut c, mut r) = (Console::new(), Rec::default());
        w(&mut c, 1, b"hello ", &mut r);
        w(&mut c, 1, b"world", &mut r);
        assert!(r.0.is_empty());
        w(&mut c, 1, b"!\nmore", &mut r);
        assert_eq!(r.0, [(1, b"hello world!\nmore".to_vec())]);
    }

    #[test]
    fn switching_streams_keeps_order() {
        let (mut c, mut r) = (Console::new(), Rec::default());
        w(&mut c, 1, b"out", &mut r);
        w(&mut c, 2, b"err", &mut r);
        c.flush(&mut r).unwrap();
        assert_eq!(r.0, [(1, b"out".to_vec()), (2, b"err".to_vec())]);
    }

    #[test]
    fn large_writes_go_direct_and_full_buffer_flushes() {
        let (mut c, mut r) = (Console::new(), Rec::default());
        w(&mut c, 1, b"x", &mut r);
        let big = vec![b'a'; CAPACITY];
        w(&mut c, 1, &big, &mut r);
        assert_eq!(r.0.len(), 2);
        assert_eq!(r.0[0].1, b"x");
        assert_eq!(r.0[1].1.len(), CAPACITY);
        let half = vec![b'b'; CAPACITY / 2];
        w(&mut c, 1, &half, &mut r);
        w(&mut c, 1, &half, &mut r);
        assert_eq!(r.0.len(), 2, "exactly fills the buffer");
        w(&mut c, 1, b"c", &mut r);
        assert_eq!(r.0.len(), 3);
        assert_eq!(c.pending(), 1);
    }
}
