//! The standard streams: /dev/stdin reads the host's stdin through the stdin
//! device (`task::stdin`: with `-i`; without it the program's stdin is empty),
//! /dev/stdout and /dev/stderr write to the console device (`task::console`), in
//! order with everything else written.
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

const TIOCGWINSZ: u64 = 0x5413;

/// Linux caps one read or write at this many bytes.
const MAX_RW_COUNT: u64 = 0x7fff_f000;

pub struct StdinFile {
    pub node: NodeRef,
    pub stdin: &'static Stdin,
    /// Host terminal size (rows << 16 | cols), 0 when not a terminal.
    pub winsize: u64,
}

pub struct StdoutFile {
    pub node: NodeRef,
    /// 1 or 2.
    pub fd: u32,
    pub console: &'static Console,
    pub winsize: u64,
}

fn winsize(user: &dyn UserMem, ws: u64, arg: u64) -> SysResult {
    if ws == 0 {
        return Err(Errno::ENOTTY);
    }
    let mut b = [0u8; 8];
    b[0..2].copy_from_slice(&((ws >> 16) as u16).to_le_bytes());
    b[2..4].copy_from_slice(&(ws as u16).to_le_bytes());
    user.write(arg, &b)?;
    Ok(0)
}

impl File for StdinFile {
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, _: Option<u64>) -> SysResult {
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
    fn host_io(&self) -> bool {
        true
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        match request {
            TIOCGWINSZ => winsize(user, self.winsize, arg),
            _ => Err(Errno::ENOTTY),
        }
    }

    fn stat(&self) -> Meta {
        self.node.meta()
    }

    fn seek(&self, _: &OpenFile, _: i64, _: u64) -> SysResult {
        Ok(0)
    }

    fn node(&self) -> Option<Ino> {
        Some(self.node.ino)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl File for StdoutFile {
    fn write(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, _: Option<u64>) -> SysResult {
        self.console.write(user, self.fd, buf, len.min(MAX_RW_COUNT))
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.console.key())
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        match request {
            TIOCGWINSZ => winsize(user, self.winsize, arg),
            _ => Err(Errno::ENOTTY),
        }
    }

    fn stat(&self) -> Meta {
        self.node.meta()
    }

    fn seek(&self, _: &OpenFile, _: i64, _: u64) -> SysResult {
        Ok(0)
    }

    fn node(&self) -> Option<Ino> {
        Some(self.node.ino)
    }

    fn host_io(&self) -> bool {
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
