//! The program's standard streams on the host side: what each of descriptors 0,
//! 1, 2 is (told to the guest at boot), and the `StdioStat`, `StdioSeek` and
//! `StdioIoctl` hostcalls, checked against what the options allow: descriptor 0
//! only with `-i` (without it the program's stdin is /dev/null), only descriptors
//! open on the host, only the six forwarded terminal ioctls.
//!
//! A program may change the terminal's modes (an editor, a shell turning echo
//! off): the modes each terminal had are saved at start and put back when the VM
//! ends, however it ends (`restore`), so the user's shell gets its terminal back.
//!
//! The processes `onering exec` starts have standard streams of their own
//! (`exec`): host streams 3 and up, reached the same way while their process
//! runs (their stdin too: written never, read through their slot's stdin
//! device; their terminal's modes are theirs).

use crate::sys::stdio as host;
use onering_abi::stdio as kind;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const EBADF: i64 = 9;
const EINVAL: i64 = 22;

pub struct Stdio {
    /// What the guest was told at boot (`BootInfo::stdio`).
    pub word: u64,
    /// Each terminal's modes at start (the kernel's 36-byte termios).
    saved: Mutex<[Option<[u8; kind::TERMIOS_SIZE as usize]>; 3]>,
    /// The program set terminal modes: put them back at the end.
    changed: AtomicBool,
    /// `-i`: the program's stdin is the host's.
    interactive: bool,
    /// The processes `onering exec` started, with their streams.
    pub execs: super::exec::Execs,
}

/// A host descriptor the guest may reach: one of the VMM's own 0-2, or a
/// stream of a process `onering exec` started (held while it is used).
enum Reach {
    Own(i32),
    Exec(Arc<File>),
}

impl Reach {
    fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Reach::Own(fd) => *fd,
            Reach::Exec(f) => f.as_raw_fd(),
        }
    }
}

impl Stdio {
    /// Looks at the VMM's descriptors 0, 1, 2 (stdin counts only with `-i`).
    pub fn new(interactive: bool) -> Stdio {
        let mut word = 0;
        let mut saved = [None; 3];
        for fd in 0..3u32 {
            let k = if fd == 0 && !interactive { kind::NULL } else { host::kind(fd as i32) };
            word |= k << (8 * fd);
            if k == kind::TTY {
                let mut t = [0u8; kind::TERMIOS_SIZE as usize];
                if host::ioctl(fd as i32, kind::TCGETS, &mut t) == 0 {
                    saved[fd as usize] = Some(t);
                }
            }
        }
        Stdio {
            word,
            saved: Mutex::new(saved),
            changed: AtomicBool::new(false),
            interactive,
            execs: Default::default(),
        }
    }

    /// `-i`: the program reads the host's stdin.
    pub fn interactive(&self) -> bool {
        self.interactive
    }

    /// Whether the program may reach host descriptor `fd`: 0 only with `-i`, and
    /// only descriptors open on the host; a stream of a running exec'd process.
    fn reachable(&self, fd: u64) -> Option<Reach> {
        if fd > 2 {
            return self.execs.stream(fd, true).map(Reach::Exec);
        }
        if (fd == 0 && !self.interactive) || kind::kind(self.word, fd as u32) == kind::CLOSED {
            return None;
        }
        Some(Reach::Own(fd as i32))
    }

    /// Writes all of `data` to host stream `fd` (1, 2, or an exec'd process's).
    pub fn output(&self, fd: u32, data: &[u8]) -> std::io::Result<()> {
        match fd {
            2 => std::io::stderr().lock().write_all(data),
            1 => {
                let mut out = std::io::stdout().lock();
                out.write_all(data)?;
                out.flush()
            }
            s => match self.execs.stream(u64::from(s), false) {
                Some(f) => (&*f).write_all(data),
                None => Err(std::io::Error::from_raw_os_error(EBADF as i32)),
            },
        }
    }

    /// The `StdioStat` hostcall's work: the host's stat of `fd`, or -errno.
    pub fn stat(&self, fd: u64) -> Result<onering_abi::HostStat, i64> {
        let fd = self.reachable(fd).ok_or(-EBADF)?;
        let st = host::fstat(fd.fd())?;
        Ok(crate::hostfs::host_stat(&st))
    }

    /// The `StdioSeek` hostcall's work.
    pub fn seek(&self, fd: u64, offset: u64, whence: u64) -> i64 {
        let Some(fd) = self.reachable(fd) else { return -EBADF };
        if whence > 4 {
            return -EINVAL;
        }
        host::lseek(fd.fd(), offset as i64, whence as i32)
    }

    /// The `StdioIoctl` hostcall's work, `arg` sized for `request`.
    pub fn ioctl(&self, fd: u64, request: u64, arg: &mut [u8]) -> i64 {
        let Some(fd) = self.reachable(fd) else { return -EBADF };
        if kind::ioctl(request).is_none() {
            return -EINVAL;
        }
        if matches!(request, kind::TCSETS | kind::TCSETSW | kind::TCSETSF) && matches!(fd, Reach::Own(_)) {
            self.changed.store(true, Ordering::SeqCst);
        }
        host::ioctl(fd.fd(), request, arg)
    }

    /// Puts back the terminal modes the program changed (at the end of the VM).
    pub fn restore(&self) {
        if !self.changed.swap(false, Ordering::SeqCst) {
            return;
        }
        let saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        for (fd, t) in saved.iter().enumerate() {
            if let Some(mut t) = *t {
                host::ioctl(fd as i32, kind::TCSETS, &mut t);
            }
        }
    }
}
