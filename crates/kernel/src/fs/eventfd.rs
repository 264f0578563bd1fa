//! eventfd: a 64-bit counter as a file. `EventFd` is the counter's logic (pure,
//! tested below); `EventFdFile` is the open file, which copies the 8-byte values
//! in and out and wakes the threads waiting on it.

use crate::errno::{Errno, SysResult};
use crate::file::{ev, key_of, File, Meta, OpenFile, Readiness};
use crate::mm::user::{UserMem, UserMemExt};
use crate::task::sched;
use core::any::Any;
use onering_arch::sync::Mutex;

/// The largest value an eventfd counter holds.
pub const EVENTFD_MAX: u64 = u64::MAX - 1;

#[derive(Debug, Default)]
pub struct EventFd {
    pub count: u64,
    /// EFD_SEMAPHORE: a read takes 1, not everything.
    pub semaphore: bool,
    pub gen: u64,
}

impl EventFd {
    pub fn new(count: u64, semaphore: bool) -> Self {
        EventFd { count, semaphore, gen: 0 }
    }

    pub fn events(&self) -> u32 {
        let mut e = 0;
        if self.count > 0 {
            e |= ev::IN | ev::RDNORM;
        }
        if self.count < EVENTFD_MAX {
            e |= ev::OUT | ev::WRNORM;
        }
        e
    }

    /// A read: the value, or EAGAIN while the counter is 0.
    pub fn read(&mut self) -> Result<u64, Errno> {
        if self.count == 0 {
            return Err(Errno::EAGAIN);
        }
        let v = if self.semaphore { 1 } else { self.count };
        self.count -= v;
        self.gen += 1;
        Ok(v)
    }

    /// A write of `v`: EINVAL for the all-ones value, EAGAIN while it does not fit.
    pub fn write(&mut self, v: u64) -> Result<(), Errno> {
        if v == u64::MAX {
            return Err(Errno::EINVAL);
        }
        if v > EVENTFD_MAX - self.count {
            return Err(Errno::EAGAIN);
        }
        self.count += v;
        if v > 0 {
            self.gen += 1;
        }
        Ok(())
    }
}

pub struct EventFdFile {
    pub counter: Mutex<EventFd>,
}

impl EventFdFile {
    pub fn new(count: u64, semaphore: bool) -> Self {
        EventFdFile { counter: Mutex::new(EventFd::new(count, semaphore)) }
    }

    fn key(&self) -> u64 {
        key_of(self)
    }
}

impl File for EventFdFile {
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE);
        }
        if len < 8 {
            return Err(Errno::EINVAL);
        }
        user.check(buf, 8, true)?;
        let v = {
            let mut c = self.counter.lock();
            let v = c.read()?;
            if let Err(e) = user.write_u64(buf, v) {
                // (Unmapped meanwhile: the value goes back.)
                c.count += v;
                return Err(e);
            }
            v
        };
        let _ = v;
        sched::wake_all(self.key()); // writers waiting for room, pollers
        Ok(8)
    }

    /// Exactly 8 bytes (EINVAL otherwise, as this host's Linux).
    fn write(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE);
        }
        if len != 8 {
            return Err(Errno::EINVAL);
        }
        let v = user.read_u64(buf)?;
        self.counter.lock().write(v)?;
        sched::wake_all(self.key()); // readers, pollers
        Ok(8)
    }

    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        let c = self.counter.lock();
        Some(Readiness { events: c.events(), gen: c.gen, key: self.key() })
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.key())
    }

    /// An anonymous inode, as Linux shows it: no file type, mode 0600.
    fn stat(&self) -> Meta {
        Meta { ino: self.key() & 0xffff_ffff, mode: 0o600, nlink: 1, ..Meta::default() }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_counts() {
        let mut e = EventFd::new(0, false);
        assert_eq!(e.read(), Err(Errno::EAGAIN));
        assert_eq!(e.events(), ev::OUT | ev::WRNORM);
        e.write(3).unwrap();
        e.write(4).unwrap();
        assert_eq!(e.read(), Ok(7));
        assert_eq!(e.write(u64::MAX), Err(Errno::EINVAL));
        e.write(EVENTFD_MAX).unwrap();
        assert_eq!(e.events(), ev::IN | ev::RDNORM);
        assert_eq!(e.write(1), Err(Errno::EAGAIN));
        let mut s = EventFd::new(2, true);
        assert_eq!((s.read(), s.read(), s.read()), (Ok(1), Ok(1), Err(Errno::EAGAIN)));
    }

    #[test]
    fn eventfd_file_reads_and_writes_eight_bytes() {
        let u = crate::mm::user::BufferMem::new(0x1000, 64);
        let f = OpenFile::new(EventFdFile::new(0, false), crate::file::oflag::O_RDWR);
        u.write_u64(0x1000, 5).unwrap();
        assert_eq!(f.write(&u, 0x1000, 4, None), Err(Errno::EINVAL));
        assert_eq!(f.write(&u, 0x1000, 8, None), Ok(8));
        assert_eq!(f.read(&u, 0x1008, 4, None), Err(Errno::EINVAL));
        assert_eq!(f.read(&u, 0x9000, 8, None), Err(Errno::EFAULT));
        assert_eq!(f.read(&u, 0x1008, 8, None), Ok(8));
        assert_eq!(u.read_u64(0x1008), Ok(5));
        assert_eq!(f.read(&u, 0x1008, 8, None), Err(Errno::EAGAIN));
    }
}
