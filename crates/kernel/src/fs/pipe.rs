//! Pipe ends: anonymous pipes (`pipe2`) and named pipes (`mkfifo`, opened through
//! the tree). Both ends share a `PipeBuf` (the ring buffer, `crate::pipebuf`) under
//! a lock; reads and writes copy between it and user memory and wake the threads
//! waiting on the pipe's key (readers for data, writers for room, pollers, an
//! opener of a named pipe waiting for its other end).

use crate::errno::{Errno, SysResult};
use crate::file::{ev, key_of, mode, oflag, File, FileRef, Meta, OpenFile, Readiness};
use crate::mm::user::UserMem;
use crate::pipebuf::PipeBuf;
use crate::task::sched;
use crate::vfs::Hold;
use alloc::sync::Arc;
use core::any::Any;
use onering_arch::sync::Mutex;

const FIONREAD: u64 = 0x541b;

pub struct PipeEnd {
    pipe: Arc<Mutex<PipeBuf>>,
    write: bool,
    /// For a read end of a named pipe opened with O_NONBLOCK while no writer had it
    /// open: the writers' open count then. As Linux, such a reader reports hang-up
    /// only once a writer has come (and gone) since; every other end has u64::MAX,
    /// which no count equals.
    partner: u64,
    /// A named pipe's node, kept while open.
    _hold: Option<Hold>,
}

/// The key threads blocked on pipe `p` wait on.
pub fn key(p: &Arc<Mutex<PipeBuf>>) -> u64 {
    key_of(&**p)
}

impl PipeEnd {
    pub fn key(&self) -> u64 {
        key(&self.pipe)
    }

    /// The pipe this end belongs to.
    pub fn pipe(&self) -> &Arc<Mutex<PipeBuf>> {
        &self.pipe
    }

    pub fn is_write_end(&self) -> bool {
        self.write
    }
}

impl Drop for PipeEnd {
    fn drop(&mut self) {
        {
            let mut p = self.pipe.lock();
            if self.write {
                p.writers -= 1;
            } else {
                p.readers -= 1;
            }
            p.gen += 1;
        }
        sched::wake_all(self.key()); // the other end's readers, writers and pollers
    }
}

impl File for PipeEnd {
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE);
        }
        if len == 0 {
            return Ok(0);
        }
        let mut done = 0u64;
        let n = self.pipe.lock().read_with(len as usize, |piece| {
            user.write(buf + done, piece)?;
            done += piece.len() as u64;
            Ok(())
        })?;
        if n > 0 {
            sched::wake_all(self.key()); // writers waiting for room
        }
        Ok(n as u64)
    }

    fn write(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE);
        }
        let mut done = 0u64;
        let n = self.pipe.lock().write_with(len as usize, |dst| {
            user.read(buf + done, dst)?;
            done += dst.len() as u64;
            Ok(())
        })?;
        if n > 0 {
            sched::wake_all(self.key()); // readers waiting for data
        }
        Ok(n as u64)
    }

    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        use ev::*;
        let p = self.pipe.lock();
        let events = if self.write {
            if p.readers == 0 {
                OUT | WRNORM | ERR
            } else if p.room() > 0 {
                OUT | WRNORM
            } else {
                0
            }
        } else {
            // As Linux's pipe_poll: readable with data; hung up without writers
            // (a read then returns 0).
            let mut e = if p.available() > 0 { IN | RDNORM } else { 0 };
            if p.writers == 0 && p.w_opens != self.partner {
                e |= HUP;
            }
            e
        };
        Some(Readiness { events, gen: p.gen, key: self.key() })
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.key())
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        match request {
            FIONREAD => {
                let n = if self.write { 0 } else { self.pipe.lock().available() as u32 };
                user.write(arg, &n.to_le_bytes())?;
                Ok(0)
            }
            _ => Err(Errno::ENOTTY),
        }
    }

    fn stat(&self) -> Meta {
        Meta { ino: self.key() & 0xffff_ffff, mode: mode::S_IFIFO | 0o600, nlink: 1, ..Meta::default() }
    }

    fn sigpipe(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A pipe's two ends (`pipe2` flags: O_NONBLOCK).
pub fn pipe(flags: u32) -> (FileRef, FileRef) {
    let p = Arc::new(Mutex::new(PipeBuf::new()));
    let status = flags & oflag::O_NONBLOCK;
    let r = PipeEnd { pipe: p.clone(), write: false, partner: u64::MAX, _hold: None };
    let w = PipeEnd { pipe: p, write: true, partner: u64::MAX, _hold: None };
    (OpenFile::new(r, oflag::O_RDONLY | status), OpenFile::new(w, oflag::O_WRONLY | status))
}

/// Opens an end of named pipe `p` (`write`: the write end). When nobody has it open
/// any more its leftover data is dropped, as on Linux. Also returns how many times
/// the other end had been opened (a blocking opener waits for that to change).
pub fn fifo_end(p: &Arc<Mutex<PipeBuf>>, write: bool, status: u32, hold: Hold) -> (FileRef, u64) {
    let (seen, partner) = {
        let mut g = p.lock();
        if g.readers == 0 && g.writers == 0 {
            g.clear();
        }
        g.gen += 1;
        if write {
            g.writers += 1;
            g.w_opens += 1;
            (g.r_opens, u64::MAX)
        } else {
            let lone = status & oflag::O_NONBLOCK != 0 && g.writers == 0;
            g.readers += 1;
            g.r_opens += 1;
            (g.w_opens, if lone { g.w_opens } else { u64::MAX })
        }
    };
    let end = PipeEnd { pipe: p.clone(), write, partner, _hold: Some(hold) };
    let acc = if write { oflag::O_WRONLY } else { oflag::O_RDONLY };
    sched::wake_all(key(p)); // an opener waiting for this end
    (OpenFile::new(end, acc | (status & oflag::O_NONBLOCK)), seen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::user::BufferMem;

    #[test]
    fn data_flows_and_ends_hang_up() {
        let u = BufferMem::new(0x1000, 4096);
        let (r, w) = pipe(0);
        u.write(0x1000, b"hello").unwrap();
        assert_eq!(r.read(&u, 0x1100, 16, None), Err(Errno::EAGAIN));
        assert_eq!(w.write(&u, 0x1000, 5, None), Ok(5));
        assert_eq!(r.poll().map(|p| p.events), Some(ev::IN | ev::RDNORM));
        assert_eq!(r.read(&u, 0x1100, 16, Some(0)), Err(Errno::ESPIPE));
        assert_eq!(r.read(&u, 0x1100, 16, None), Ok(5));
        assert_eq!(&u.mem.lock()[0x100..0x105], b"hello");
        assert_eq!(w.read(&u, 0x1100, 1, None), Err(Errno::EBADF), "the write end");
        assert_eq!(r.read(&u, 0x9000, 16, None), Err(Errno::EAGAIN), "empty: before the bad pointer matters");
        w.write(&u, 0x1000, 5, None).unwrap();
        assert_eq!(r.read(&u, 0x9000, 16, None), Err(Errno::EFAULT));
        assert_eq!(r.poll().map(|p| p.events), Some(ev::IN | ev::RDNORM), "nothing taken");
        drop(w);
        assert_eq!(r.poll().map(|p| p.events), Some(ev::IN | ev::RDNORM | ev::HUP));
        let (r2, w2) = pipe(0);
        drop(r2);
        assert_eq!(w2.write(&u, 0x1000, 1, None), Err(Errno::EPIPE));
        assert!(w2.obj().sigpipe());
        assert_eq!(w2.obj().stat().mode & mode::S_IFMT, mode::S_IFIFO);
    }
}
