//! The standard streams the program got from the host: /dev/stdin reads the
//! host's stdin through the stdin device (`task::stdin`, with `-i`; without it the
//! program's stdin is /dev/null, as `docker run` gives), /dev/stdout and
//! /dev/stderr write to the console device (`task::console`), in order with
//! everything else written.
//!
//! Each is what the VMM's descriptor is on the host (`onering_abi::stdio`): `fstat`
//! asks the VMM for the host's stat (a pipe is a FIFO, a file a regular file with
//! its size, a terminal a character device), `lseek` is ESPIPE on a pipe, socket or
//! terminal and moves the host's offset on a file, and the terminal ioctls (modes,
//! window size, bytes waiting) go to the host's terminal. The console flushes first
//! where the answer depends on what was written (a file's size and offset).
//!
//! A write the console cannot take right now (another vCPU is sending and there is
//! no room) is EAGAIN here; the system call then waits on the console's key.

use super::NodeRef;
use crate::errno::{Errno, SysResult};
use crate::file::{File, Meta, OpenFile, Readiness};
use crate::mm::user::UserMem;
use crate::task::console::Console;
use crate::task::stdin::Stdin;
use crate::vfs::Ino;
use core::any::Any;
use onering_abi::stdio as kind;

/// Linux caps one read or write at this many bytes.
const MAX_RW_COUNT: u64 = 0x7fff_f000;

/// Descriptor `fd` of the VMM, which is a `kind` (`onering_abi::stdio`) on the host.
#[derive(Clone, Copy, Debug)]
pub struct HostStream {
    pub fd: u32,
    pub kind: u64,
}

impl HostStream {
    /// The host's stat of the stream (`node`'s if the host will not say).
    fn stat(&self, node: &NodeRef) -> Meta {
        match onering_arch::hostcall::stdio_stat(self.fd) {
            Ok(h) => meta_of_host(&h),
            Err(_) => node.meta(),
        }
    }

    fn seek(&self, off: i64, whence: u64) -> SysResult {
        if whence > 4 {
            return Err(Errno::EINVAL);
        }
        match self.kind {
            kind::PIPE | kind::SOCKET | kind::TTY => Err(Errno::ESPIPE),
            kind::NULL | kind::CHAR => Ok(0),
            _ => match onering_arch::hostcall::stdio_seek(self.fd, off, whence as u32) {
                r if r >= 0 => Ok(r as u64),
                r => Err(Errno::from_host(r)),
            },
        }
    }

    /// A terminal ioctl, forwarded if it is one the VMM takes; ENOTTY otherwise.
    fn ioctl(&self, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        let Some((size, out)) = kind::ioctl(request) else { return Err(Errno::ENOTTY) };
        let mut buf = [0u8; 40];
        let b = &mut buf[..size as usize];
        if out {
            user.check(arg, size, true)?;
        } else {
            user.read(arg, b)?;
        }
        let r = onering_arch::hostcall::stdio_ioctl(self.fd, request, b);
        if r < 0 {
            return Err(Errno::from_host(r));
        }
        if out {
            user.write(arg, b)?;
        }
        Ok(r as u64)
    }
}

/// `stat` of a host stream, from what the VMM reported.
fn meta_of_host(h: &onering_abi::HostStat) -> Meta {
    let major = ((h.rdev >> 32) & 0xffff_f000) | ((h.rdev >> 8) & 0xfff);
    let minor = ((h.rdev >> 12) & 0xffff_ff00) | (h.rdev & 0xff);
    let ns = |s: u64, n: u64| s.saturating_mul(1_000_000_000).saturating_add(n);
    Meta {
        ino: h.ino,
        mode: h.mode as u32,
        size: h.size,
        rdev: (major as u32, minor as u32),
        mtime: ns(h.mtime_sec, h.mtime_nsec),
        atime: ns(h.atime_sec, h.atime_nsec),
        ctime: ns(h.ctime_sec, h.ctime_nsec),
        nlink: h.nlink,
        owner: Some((h.uid as u32, h.gid as u32)),
        dev: Some(h.dev),
        blksize: h.blksize,
        blocks: Some(h.blocks),
    }
}

pub struct StdinFile {
    pub node: NodeRef,
    pub stdin: &'static Stdin,
    pub host: HostStream,
}

pub struct StdoutFile {
    pub node: NodeRef,
    pub console: &'static Console,
    pub host: HostStream,
}

impl File for StdinFile {
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE); // (pread of the host's stdin: not offered)
        }
        self.stdin.read(user, buf, len.min(MAX_RW_COUNT))
    }

    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        Some(self.stdin.poll())
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.stdin.key())
    }

    /// (A read makes a hostcall and copies out under the stdin lock: not under the
    /// descriptor table's.)
    fn long_io(&self) -> bool {
        true
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        self.host.ioctl(user, request, arg)
    }

    fn stat(&self) -> Meta {
        self.host.stat(&self.node)
    }

    /// Moving the host's offset drops what was read ahead of it (nothing, for a
    /// file: requests ask for what the program asked for) and a pending end of file.
    fn seek(&self, _: &OpenFile, off: i64, whence: u64) -> SysResult {
        let r = self.host.seek(off, whence)?;
        self.stdin.forget_buffered();
        Ok(r)
    }

    fn node(&self) -> Option<Ino> {
        Some(self.node.ino)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl File for StdoutFile {
    fn write(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE); // (pwrite of the host's stdout: not offered)
        }
        self.console.write(user, self.host.fd, buf, len.min(MAX_RW_COUNT))
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.console.key())
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        self.host.ioctl(user, request, arg)
    }

    /// A file's size counts what the program wrote: the console flushes first.
    fn stat(&self) -> Meta {
        if self.host.kind == kind::FILE {
            self.console.flush();
        }
        self.host.stat(&self.node)
    }

    fn seek(&self, _: &OpenFile, off: i64, whence: u64) -> SysResult {
        if self.host.kind == kind::FILE {
            self.console.flush();
        }
        self.host.seek(off, whence)
    }

    fn node(&self) -> Option<Ino> {
        Some(self.node.ino)
    }

    fn long_io(&self) -> bool {
        true
    }

    /// Writing to a closed host pipe raises SIGPIPE, as `prog | head -1` expects.
    fn sigpipe(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
