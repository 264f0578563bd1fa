//! pidfds (`pidfd_open`, `clone(CLONE_PIDFD)`): a file that names a process by its
//! pid (pids are never reused here, so the pid is the whole identity). It is
//! readable in poll and epoll once the process has ended (POLLIN), and hangs up
//! once it was reaped too (POLLHUP), as Linux 6.9 and later; it cannot be read
//! or written. `pidfd_send_signal` and `waitid(P_PIDFD)` find the pid here.

use crate::file::{ev, File, Meta, OpenFile, Readiness};
use crate::task::exit::pidfd_key;
use crate::task::process::{self, Life};
use core::any::Any;

pub struct PidFd {
    pub pid: u64,
}

impl File for PidFd {
    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        let (events, gen) = match process::life(self.pid) {
            Life::Live { .. } => (0, 0),
            Life::Zombie { .. } => (ev::IN | ev::RDNORM, 1),
            Life::Gone => (ev::IN | ev::RDNORM | ev::HUP, 2),
        };
        Some(Readiness { events, gen, key: pidfd_key(self.pid) })
    }

    fn wait_key(&self) -> Option<u64> {
        Some(pidfd_key(self.pid))
    }

    /// An anonymous inode, as Linux shows it (mode 0600, no file type).
    fn stat(&self) -> Meta {
        Meta { ino: self.pid, mode: 0o600, nlink: 1, ..Meta::default() }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
