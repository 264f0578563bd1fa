//! The standard streams the program got from the host: /dev/stdin reads the
//! host's stdin through the stdin device (`task::stdin`, with `-i`; without it the
//! program's stdin is /dev/null, as `docker run` gives; a process `onering exec`
//! started reads its client's stdin through its slot's device), /dev/stdout and
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
//!
//! On a terminal the job-control requests (foreground group, session, controlling
//! terminal) are the kernel's own (`task::tty`), and a background group's reads
//! and mode changes are checked there first. /dev/tty (`TtyFile`) is that
//! terminal: reads come from stdin when stdin is the terminal and forwarded
//! (`-i`), writes go to the first of stdout and stderr that is the terminal;
//! without one of those the read or write is EIO.

use super::NodeRef;
use crate::errno::{Errno, SysResult};
use crate::file::{File, Meta, OpenFile, Readiness};
use crate::mm::user::UserMem;
use crate::task::console::Console;
use crate::task::stdin::Stdin;
use crate::task::tty;
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

    /// Whether the host terminal's TOSTOP flag is set (its modes asked for).
    fn tostop(&self) -> bool {
        const TOSTOP: u32 = 0o400;
        let mut termios = [0u8; kind::TERMIOS_SIZE as usize];
        let r = onering_arch::hostcall::stdio_ioctl(self.fd, kind::TCGETS, &mut termios);
        // (c_lflag is the fourth word.)
        r >= 0 && u32::from_le_bytes([termios[12], termios[13], termios[14], termios[15]]) & TOSTOP != 0
    }

    /// A terminal ioctl: job control is the kernel's (`task::tty`; a change of
    /// modes from a background group is checked there), the rest forwarded if it
    /// is one the VMM takes; ENOTTY otherwise.
    fn ioctl(&self, of: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        if self.kind == kind::TTY {
            match request {
                tty::TIOCGPGRP | tty::TIOCSPGRP | tty::TIOCGSID | tty::TIOCSCTTY | tty::TIOCNOTTY => {
                    let root = crate::task::kernel().cfg.uid == 0;
                    return tty::ioctl(user, request, arg, of.readable(), root);
                }
                kind::TCSETS | kind::TCSETSW | kind::TCSETSF => tty::check(crate::sigframe::sig::SIGTTOU)?,
                _ => {}
            }
        }
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
    /// The device's epoch it was opened in (an exec slot's process; 0 for the
    /// program's): in a later one it is at end of file.
    pub epoch: u64,
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
        if self.host.kind == kind::TTY {
            tty::check(crate::sigframe::sig::SIGTTIN)?;
        }
        self.stdin.read(self.epoch, user, buf, len.min(MAX_RW_COUNT))
    }

    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        Some(self.stdin.poll(self.epoch))
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.stdin.key())
    }

    /// (A read makes a hostcall and copies out under the stdin lock: not under the
    /// descriptor table's.)
    fn long_io(&self) -> bool {
        true
    }

    fn ioctl(&self, of: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        self.host.ioctl(of, user, request, arg)
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
        if self.host.kind == kind::TTY {
            tty::check_write(|| self.host.tostop())?;
        }
        self.console.write(user, self.host.fd, buf, len.min(MAX_RW_COUNT))
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.console.key())
    }

    fn ioctl(&self, of: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        self.host.ioctl(of, user, request, arg)
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

/// /dev/tty: the terminal among the standard streams (`task::tty` checks, at
/// open, that it is the caller's controlling terminal). Reads go to stdin when
/// stdin is the terminal and forwarded, writes to stdout or stderr, whichever is
/// the terminal first; the terminal's ioctls and stat are those of the first
/// standard stream that is it.
pub struct TtyFile {
    node: NodeRef,
    host: HostStream,
    stdin: Option<&'static Stdin>,
    console: &'static Console,
    out: Option<u32>,
}

impl TtyFile {
    pub fn new(k: &'static crate::task::Kernel, node: NodeRef) -> TtyFile {
        let is_tty = |fd: u32| kind::kind(k.cfg.stdio, fd) == kind::TTY;
        let forwarded = k.cfg.flags & onering_abi::flags::STDIN != 0;
        let fd = (0..3).find(|&fd| is_tty(fd)).unwrap_or(0);
        TtyFile {
            node,
            host: HostStream { fd, kind: kind::TTY },
            stdin: (forwarded && is_tty(0)).then_some(&k.stdin),
            console: &k.console,
            out: [1, 2].into_iter().find(|&fd| is_tty(fd)),
        }
    }
}

impl File for TtyFile {
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE);
        }
        let stdin = self.stdin.ok_or(Errno::EIO)?;
        tty::check(crate::sigframe::sig::SIGTTIN)?;
        stdin.read(0, user, buf, len.min(MAX_RW_COUNT))
    }

    /// (The console's EAGAIN, rare, is waited out here: the file's wait key is
    /// stdin's.)
    fn write(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        if off.is_some() {
            return Err(Errno::ESPIPE);
        }
        let fd = self.out.ok_or(Errno::EIO)?;
        loop {
            match self.console.write(user, fd, buf, len.min(MAX_RW_COUNT)) {
                Err(Errno::EAGAIN) => crate::task::sched::yield_now(),
                r => return r,
            }
        }
    }

    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        self.stdin.map(|s| s.poll(0))
    }

    fn wait_key(&self) -> Option<u64> {
        self.stdin.map(|s| s.key())
    }

    fn long_io(&self) -> bool {
        true
    }

    fn ioctl(&self, of: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        self.host.ioctl(of, user, request, arg)
    }

    fn stat(&self) -> Meta {
        self.node.meta()
    }

    fn seek(&self, _: &OpenFile, _: i64, _: u64) -> SysResult {
        Err(Errno::ESPIPE)
    }

    fn node(&self) -> Option<Ino> {
        Some(self.node.ino)
    }

    fn sigpipe(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
