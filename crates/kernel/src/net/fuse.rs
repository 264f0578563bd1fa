//! Fused loopback TCP connections, as Solaris's "TCP fusion": when both ends of
//! a TCP connection are sockets of this VM (`inet` finds the pair at `accept`),
//! the bytes of each direction stop going through smoltcp as segments (copied
//! into the sender's buffer, segmented, checksummed, routed, acknowledged and
//! copied again, all under the stack's one lock) and go into a ring between the
//! two sockets instead, under that direction's own lock: a write and a read are
//! each one copy, and two connections never wait for each other.
//!
//! smoltcp still makes and ends the connection (handshake, FIN, reset, TIME-WAIT,
//! the states `getsockopt` and `poll` report); only the bytes move here. Order is
//! kept by switching each direction once, and only from a sender whose smoltcp
//! send queue is empty (every byte it sent before is then in the receiver's
//! smoltcp buffer, as loopback delivers within the sender's call): the receiver
//! reads its smoltcp buffer first, and once it found it empty after the switch
//! (`drained`) it reads the ring alone, without the stack's lock. The sender
//! shutting down or closing marks its direction `done` (end of file after the
//! ring's bytes, with smoltcp's FIN right behind); the receiver closing marks it
//! `gone`, and the sender goes back to smoltcp, whose reset from the closed
//! socket tells it, as on Linux, that nobody reads.
//!
//! Each direction publishes a word (its generation, bumped by every change of its
//! bytes or flags, and three flags) after every change, so `poll` and a read that finds nothing take no lock. Pure logic:
//! tested on the host; `inet` does the user copies (through the closures) and
//! the wake-ups the results ask for.

use crate::errno::Errno;
use crate::pipebuf::PipeBuf;
use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};
use onering_arch::sync::Mutex;

/// The published word's flags (below the generation, from bit 8).
/// The ring holds bytes.
const DATA: u64 = 1;
/// The sender writes here and the ring is full: not writable.
const FULL: u64 = 2;
/// Reads come from the ring alone and it can still get bytes: an empty ring is
/// EAGAIN with nothing else to look at.
const READ_HERE: u64 = 4;

/// One direction: what its sender wrote and its receiver has not read yet.
struct Dir {
    buf: PipeBuf,
    /// The sender writes here.
    active: bool,
    /// The receiver found its smoltcp buffer empty after the switch.
    drained: bool,
    /// The sender shut down writing or closed.
    done: bool,
    /// The receiver closed.
    gone: bool,
    /// The receiver shut down reading.
    rd_shut: bool,
    /// A write found no room: wake the sender when bytes are read.
    writer_waits: bool,
    /// Changes of the flags (the ring counts those of its bytes).
    gen: u64,
}

impl Dir {
    fn new() -> Mutex<Dir> {
        Mutex::new(Dir {
            buf: PipeBuf::unbudgeted(),
            active: false,
            drained: false,
            done: false,
            gone: false,
            rd_shut: false,
            writer_waits: false,
            gen: 0,
        })
    }
}

/// A fused connection: its two directions' published words (together, first:
/// `poll` reads them for every socket an epoll watches), then the directions.
#[repr(C)]
pub struct Fusion {
    words: [AtomicU64; 2],
    dirs: [Mutex<Dir>; 2],
}

/// One direction, as its end sees it.
struct Half<'a> {
    dir: &'a Mutex<Dir>,
    word: &'a AtomicU64,
}

impl Half<'_> {
    /// Runs `f` on the direction and publishes its word after.
    fn with<R>(&self, f: impl FnOnce(&mut Dir) -> R) -> R {
        let mut d = self.dir.lock();
        let flags = (d.active, d.drained, d.done, d.gone, d.rd_shut);
        let r = f(&mut d);
        if flags != (d.active, d.drained, d.done, d.gone, d.rd_shut) {
            d.gen = d.gen.wrapping_add(1);
        }
        let mut w = d.gen.wrapping_add(d.buf.gen) << 8;
        if d.buf.available() > 0 {
            w |= DATA;
        }
        if d.active && !d.gone && !d.done && d.buf.room() == 0 {
            w |= FULL;
        }
        if d.drained && !d.done && !d.rd_shut {
            w |= READ_HERE;
        }
        self.word.store(w, Ordering::Release);
        r
    }

    fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }
}

/// One socket's end of a fused connection.
pub struct End {
    fusion: Arc<Fusion>,
    /// Which direction this end sends on (it receives on the other).
    tx: usize,
    /// The peer socket's wait key (woken when this end writes, or reads room free).
    pub peer_key: u64,
}

/// What a read by the receiver did.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// This many bytes (wake the sender if `wake`).
    Got { n: usize, wake: bool },
    /// Nothing now, and nothing else to look at: EAGAIN.
    Empty,
    /// Not for the ring: the caller looks at smoltcp (before the switch, at the
    /// end, or after an error).
    Elsewhere,
}

/// What `poll` adds to a socket's readiness from its fused directions.
pub struct Polled {
    /// Bytes wait in the receiving direction.
    pub readable: bool,
    /// The sending direction is full.
    pub full: bool,
    /// Both directions' generations, summed (each only grows).
    pub gen: u64,
}

/// Makes a fused pair: the end for the socket that sends on direction 0 (woken
/// at `key1`) and the one for its peer (woken at `key0`).
pub fn pair(key0: u64, key1: u64) -> (End, End) {
    let f = Arc::new(Fusion { words: [AtomicU64::new(0), AtomicU64::new(0)], dirs: [Dir::new(), Dir::new()] });
    (End { fusion: f.clone(), tx: 0, peer_key: key1 }, End { fusion: f, tx: 1, peer_key: key0 })
}

impl End {
    fn half(&self, i: usize) -> Half<'_> {
        Half { dir: &self.fusion.dirs[i], word: &self.fusion.words[i] }
    }

    fn tx(&self) -> Half<'_> {
        self.half(self.tx)
    }

    fn rx(&self) -> Half<'_> {
        self.half(1 - self.tx)
    }

    /// A write of up to `len` bytes filled by `input` (at most two calls, in
    /// order, each told its offset into the write). None if this direction does
    /// not go through the ring (not switched yet, done, or its receiver gone).
    pub fn write(
        &self,
        len: usize,
        mut input: impl FnMut(usize, &mut [u8]) -> Result<(), Errno>,
    ) -> Option<Result<usize, Errno>> {
        self.tx().with(|d| {
            if !d.active || d.done || d.gone {
                return None;
            }
            let mut at = 0;
            let r = d.buf.write_with(len, |dst| {
                input(at, dst)?;
                at += dst.len();
                Ok(())
            });
            if r == Err(Errno::EAGAIN) {
                d.writer_waits = true;
            }
            Some(r)
        })
    }

    /// Switches this end's sending direction to the ring, if it can still get
    /// bytes. Only when smoltcp holds none of this end's bytes (the caller, under
    /// the stack's lock, saw its send queue empty).
    pub fn switch(&self) -> bool {
        self.tx().with(|d| {
            let open = !d.done && !d.gone;
            if open {
                d.active = true;
            }
            open
        })
    }

    /// Whether the ring can answer reads with nothing else to look at (a read
    /// would say EAGAIN): one atomic load.
    pub fn read_here_empty(&self) -> bool {
        self.rx().word() & (READ_HERE | DATA) == READ_HERE
    }

    /// A read of up to `max` bytes, handed to `out` (at most two calls, in order,
    /// each told its offset); `peek` leaves them. `smoltcp_empty`: the caller
    /// saw its smoltcp receive buffer empty under the stack's lock (from then on,
    /// with the direction switched, the ring alone has this end's bytes).
    pub fn read(
        &self,
        max: usize,
        peek: bool,
        smoltcp_empty: bool,
        mut out: impl FnMut(usize, &[u8]) -> Result<(), Errno>,
    ) -> Result<Read, Errno> {
        self.rx().with(|d| {
            if smoltcp_empty && d.active {
                d.drained = true;
            }
            if !d.drained || d.rd_shut {
                return Ok(Read::Elsewhere);
            }
            if d.buf.available() == 0 {
                return Ok(if d.done { Read::Elsewhere } else { Read::Empty });
            }
            let was_full = d.buf.room() == 0;
            let mut at = 0;
            let mut copy = |piece: &[u8]| {
                out(at, piece)?;
                at += piece.len();
                Ok(())
            };
            let n = if peek { d.buf.peek_with(max, &mut copy)? } else { d.buf.read_with(max, &mut copy)? };
            let wake = !peek && (core::mem::take(&mut d.writer_waits) || was_full);
            Ok(Read::Got { n, wake })
        })
    }

    /// Bytes waiting in the ring for this end.
    pub fn queued(&self) -> usize {
        self.rx().dir.lock().buf.available()
    }

    /// This end shut down writing (or closed): its peer reads the end of file
    /// after the ring's bytes.
    pub fn shut_write(&self) {
        self.tx().with(|d| d.done = true);
    }

    /// This end shut down reading.
    pub fn shut_read(&self) {
        self.rx().with(|d| d.rd_shut = true);
    }

    /// This end closed: no more writes from it, nobody reads what its peer
    /// sends. Whether bytes it never read were left (then the close is a reset,
    /// as Linux's).
    pub fn close(&self) -> bool {
        self.shut_write();
        self.rx().with(|d| {
            d.gone = true;
            d.buf.available() > 0
        })
    }

    /// The readiness the ring adds: no lock.
    pub fn poll(&self) -> Polled {
        let (r, t) = (self.rx().word(), self.tx().word());
        Polled { readable: r & DATA != 0, full: t & FULL != 0, gen: (r >> 8).wrapping_add(t >> 8) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn write(e: &End, data: &[u8]) -> Option<Result<usize, Errno>> {
        e.write(data.len(), |at, dst| {
            dst.copy_from_slice(&data[at..at + dst.len()]);
            Ok(())
        })
    }

    fn read(e: &End, max: usize, peek: bool, empty: bool) -> (Result<Read, Errno>, Vec<u8>) {
        let mut got = Vec::new();
        let r = e.read(max, peek, empty, |at, piece| {
            assert_eq!(at, got.len());
            got.extend_from_slice(piece);
            Ok(())
        });
        (r, got)
    }

    #[test]
    fn bytes_go_through_the_ring_only_after_both_sides_switched() {
        let (a, b) = pair(1, 2);
        assert_eq!((a.peer_key, b.peer_key), (2, 1));
        // Not switched: smoltcp's path, both ways.
        assert_eq!(write(&a, b"x"), None);
        assert_eq!(read(&b, 10, false, true).0, Ok(Read::Elsewhere));
        assert!(a.switch());
        assert_eq!(write(&a, b"hello"), Some(Ok(5)));
        // The receiver has not yet seen its smoltcp buffer empty.
        assert_eq!(read(&b, 10, false, false).0, Ok(Read::Elsewhere));
        assert!(!b.read_here_empty());
        assert!(b.poll().readable);
        let (r, got) = read(&b, 3, true, true);
        assert_eq!((r, &got[..]), (Ok(Read::Got { n: 3, wake: false }), &b"hel"[..]));
        let (r, got) = read(&b, 10, false, false);
        assert_eq!((r, &got[..]), (Ok(Read::Got { n: 5, wake: false }), &b"hello"[..]));
        assert_eq!(read(&b, 10, false, false).0, Ok(Read::Empty));
        assert!(b.read_here_empty());
        // The other direction is independent.
        assert_eq!(write(&b, b"y"), None);
        assert_eq!(read(&a, 10, false, true).0, Ok(Read::Elsewhere));
    }

    #[test]
    fn a_full_ring_wakes_its_writer_when_read() {
        let (a, b) = pair(1, 2);
        a.switch();
        let big = alloc::vec![7u8; crate::pipebuf::CAPACITY + 10];
        assert_eq!(write(&a, &big), Some(Ok(crate::pipebuf::CAPACITY)));
        assert!(a.poll().full);
        assert_eq!(write(&a, b"z"), Some(Err(Errno::EAGAIN)));
        let (r, _) = read(&b, 100, false, true);
        assert_eq!(r, Ok(Read::Got { n: 100, wake: true }));
        assert!(!a.poll().full);
        let (r, _) = read(&b, 100, false, true);
        assert_eq!(r, Ok(Read::Got { n: 100, wake: false }));
    }

    #[test]
    fn ends_shutdowns_and_closes() {
        let (a, b) = pair(1, 2);
        a.switch();
        b.switch();
        assert_eq!(write(&a, b"last"), Some(Ok(4)));
        let g = b.poll().gen;
        a.shut_write();
        assert!(b.poll().gen != g);
        assert_eq!(write(&a, b"more"), None);
        // The bytes, then smoltcp's end of file.
        assert_eq!(read(&b, 10, false, true).0, Ok(Read::Got { n: 4, wake: false }));
        assert_eq!(read(&b, 10, false, true).0, Ok(Read::Elsewhere));
        assert!(!b.read_here_empty());
        // a closes with b's bytes unread: a reset; b's writes go back to smoltcp.
        assert_eq!(write(&b, b"unread"), Some(Ok(6)));
        assert!(a.close());
        assert_eq!(write(&b, b"again"), None);
        // Shut down for reading: smoltcp's path answers.
        let (c, d) = pair(1, 2);
        d.switch();
        write(&d, b"q");
        c.shut_read();
        assert_eq!(read(&c, 10, false, true).0, Ok(Read::Elsewhere));
        assert!(!d.close());
        // Neither switches any more: d is done sending, and nobody reads c's.
        assert!(!c.switch() && !d.switch());
    }

    #[test]
    fn a_failed_copy_takes_nothing() {
        let (a, b) = pair(1, 2);
        a.switch();
        assert_eq!(a.write(3, |_, _| Err(Errno::EFAULT)), Some(Err(Errno::EFAULT)));
        assert_eq!(write(&a, b"abc"), Some(Ok(3)));
        assert_eq!(b.read(3, false, true, |_, _| Err(Errno::EFAULT)), Err(Errno::EFAULT));
        assert_eq!(b.queued(), 3);
    }
}
