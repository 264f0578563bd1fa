//! The context a system call runs in: the kernel, the calling thread and its
//! process, and the user memory it copies through. Built once per call by the
//! entry hook (no lock, no reference count: the thread and its process are
//! `'static`), or by a host test around a kernel and a fake memory of its own.

use super::kernel::Kernel;
use super::process::Process;
use super::thread::Thread;
use crate::errno::Errno;
use crate::file::FileRef;
use crate::mm::user::UserMem;

pub struct Ctx<'a> {
    pub k: &'static Kernel,
    pub thread: &'static Thread,
    pub user: &'a dyn UserMem,
}

impl Ctx<'_> {
    /// The calling thread's process (looked up when a call needs it: most do not).
    #[inline]
    pub fn proc(&self) -> &'static Process {
        self.thread.process()
    }

    /// The calling process's address space.
    #[inline]
    pub fn mm(&self) -> &'static onering_arch::sync::Mutex<crate::mm::UserSpace> {
        &self.proc().space().mm
    }

    /// The open file of descriptor `fd`.
    pub fn file(&self, fd: u64) -> Result<FileRef, Errno> {
        self.proc().fds.lock().get(fd).cloned()
    }

    /// Runs `f` on the open file of descriptor `fd` under the descriptor table's
    /// lock: no reference count is taken and dropped (two atomic operations, a
    /// third of a null system call here). Only for short operations that take no
    /// lock before the table's in the lock order and wait for nothing.
    pub fn with_file<R>(&self, fd: u64, f: impl FnOnce(&FileRef) -> R) -> Result<R, Errno> {
        let fds = self.proc().fds.lock();
        Ok(f(fds.get(fd)?))
    }
}
