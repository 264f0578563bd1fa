//! An inotify instance as a file: reads take whole `struct inotify_event`s from
//! its group's queue (`vfs::notify`, where the watches and the queue logic are),
//! `poll` says readable while events are queued, FIONREAD says how many bytes
//! they take. Events are queued by the tree's operations under the tree's lock,
//! which wake this file's readers through the scheduler. Closing it drops its
//! watches from the tree's table (under the tree's lock, so it must not be
//! dropped with that lock held, as for any file of the tree).

use crate::errno::{Errno, SysResult};
use crate::file::{ev, File, Meta, OpenFile, Readiness};
use crate::mm::user::UserMem;
use crate::task::sched;
use crate::vfs::notify::Group;
use crate::vfs::Vfs;
use alloc::sync::Arc;
use core::any::Any;
use onering_arch::sync::Mutex;

const FIONREAD: u64 = 0x541b;

pub struct InotifyFile {
    pub group: Arc<Group>,
    vfs: &'static Mutex<Vfs>,
}

impl InotifyFile {
    pub fn new(vfs: &'static Mutex<Vfs>) -> InotifyFile {
        InotifyFile { group: Group::new(sched::wake_all), vfs }
    }
}

impl File for InotifyFile {
    /// Whole events that fit (EINVAL if the next one does not), EAGAIN when
    /// there is none. Events taken are gone even if the copy fails (EFAULT), as
    /// on Linux.
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE);
        }
        let bytes = self.group.queue.lock().read(len.min(usize::MAX as u64) as usize)?;
        user.write(buf, &bytes)?;
        Ok(bytes.len() as u64)
    }

    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        let q = self.group.queue.lock();
        let events = if q.is_empty() { 0 } else { ev::IN | ev::RDNORM };
        Some(Readiness { events, gen: q.gen(), key: self.group.key() })
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.group.key())
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        match request {
            FIONREAD => {
                let n = self.group.queue.lock().pending() as u32;
                user.write(arg, &n.to_le_bytes())?;
                Ok(0)
            }
            _ => Err(Errno::ENOTTY),
        }
    }

    /// An anonymous inode, as Linux shows it: no file type, mode 0600.
    fn stat(&self) -> Meta {
        Meta { ino: self.group.key() & 0xffff_ffff, mode: 0o600, nlink: 1, ..Meta::default() }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for InotifyFile {
    fn drop(&mut self) {
        self.vfs.lock().watches().drop_group(&self.group);
    }
}
