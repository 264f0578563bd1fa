//! File objects: each kind of open file behind the `crate::file::File` interface.
//! Pipes and named pipes (`pipe`), eventfd (`eventfd`), epoll (`epoll`), inotify
//! (`inotify`), pidfds (`pidfd`), the device
//! nodes of /dev (`dev`), the standard streams (`stdio`), regular files,
//! directories and links of the tree (`node`), and those of /proc and /sys
//! (`proc`, their text `procfmt`).
//!
//! Objects copy user memory through the `UserMem` they are given and wake the
//! threads waiting on them through the scheduler's wait queues; they never block
//! (the system calls do the waiting).

pub mod dev;
pub mod epoll;
pub mod eventfd;
pub mod host;
pub mod inotify;
pub mod node;
pub mod pidfd;
pub mod pipe;
pub mod proc;
pub mod procfmt;
pub mod stdio;

use crate::file::{oflag, FileRef, Meta, OpenFile};
use crate::task::Kernel;
use crate::vfs::{Device, Hold, Ino, Vfs};
use onering_arch::sync::Mutex;

/// A node of the tree an open file refers to, kept alive while it is open.
pub struct NodeRef {
    pub vfs: &'static Mutex<Vfs>,
    pub ino: Ino,
    _hold: Hold,
}

impl NodeRef {
    /// `ino` of `vfs`, whose lock the caller holds (`locked`).
    pub fn new(vfs: &'static Mutex<Vfs>, locked: &Vfs, ino: Ino) -> NodeRef {
        NodeRef { vfs, ino, _hold: locked.hold(ino) }
    }

    /// The node's `stat`.
    pub fn meta(&self) -> Meta {
        meta_of(&self.vfs.lock(), self.ino)
    }
}

/// What `stat` says about node `ino`.
pub fn meta_of(v: &Vfs, ino: Ino) -> Meta {
    let n = v.node(ino);
    let rdev = match v.device(ino) {
        Some(Device::Null) => (1, 3),
        Some(Device::Zero) => (1, 5),
        Some(Device::Full) => (1, 7),
        Some(Device::Random) => (1, 8),
        Some(Device::Urandom) => (1, 9),
        Some(Device::Tty) => (5, 0),
        Some(_) => (136, 0),
        None => (0, 0),
    };
    Meta {
        ino: ino as u64 + 1,
        mode: n.st_mode(),
        size: n.size(),
        rdev,
        mtime: n.mtime,
        atime: n.atime,
        nlink: if n.is_dir() { 2 } else { u64::from(n.nlink) },
        owner: Some((n.uid, n.gid)),
        ..Meta::default()
    }
}

/// Descriptor `fd` (0-2) of the process the host started in slot `slot`
/// (`task::hostexec`), which is a `kind` on the host: none if closed there;
/// /dev/null for a stdin that is /dev/null on the host; otherwise the host
/// stream `exec::stream(slot, fd)`: its stdin through the slot's stdin device
/// (a new epoch of it: a process there before reads end of file), its output
/// through the console. A terminal is shown as a character device, so that its
/// ioctls reach it without the VM terminal's job control (which is the program's).
pub fn open_host_stream(k: &'static Kernel, v: &mut Vfs, slot: u64, fd: u32, kind: u64) -> Option<FileRef> {
    use onering_abi::stdio::{CHAR, CLOSED, NULL, TTY};
    let stdin = if fd == 0 { k.exec_stdin.get(slot as usize) } else { None };
    let epoch = stdin.map(|s| s.reset());
    let path: &[u8] = match (kind, fd) {
        (CLOSED, _) | (_, 3..) => return None,
        (NULL, 0) => b"/dev/null",
        (_, 0) => b"/dev/stdin",
        (_, 1) => b"/dev/stdout",
        _ => b"/dev/stderr",
    };
    let ino = v.lookup(crate::vfs::ROOT, path, true).ok()?;
    if kind == NULL && fd == 0 {
        return Some(open_node(k, v, ino, oflag::O_RDONLY));
    }
    let stream = onering_abi::exec::stream(slot, u64::from(fd)) as u32;
    let host = stdio::HostStream { fd: stream, kind: if kind == TTY { CHAR } else { kind } };
    let node = NodeRef::new(&k.vfs, v, ino);
    match (stdin, epoch) {
        (Some(stdin), Some(epoch)) => {
            Some(OpenFile::new(stdio::StdinFile { node, stdin, host, epoch }, oflag::O_RDONLY))
        }
        _ if fd == 0 => None,
        _ => Some(OpenFile::new(stdio::StdoutFile { node, console: &k.console, host }, oflag::O_WRONLY)),
    }
}

/// The open file for node `ino` (not a named pipe: see `pipe::fifo_end`), with
/// open flags `flags`; `v` is the tree, locked by the caller.
pub fn open_node(k: &'static Kernel, v: &mut Vfs, ino: Ino, flags: u32) -> FileRef {
    let host = |fd: u32| stdio::HostStream { fd, kind: onering_abi::stdio::kind(k.cfg.stdio, fd) };
    match v.device(ino) {
        // Without `-i` the program's stdin is /dev/null.
        Some(Device::Stdin) if k.cfg.flags & onering_abi::flags::STDIN == 0 => {
            let null = v.lookup(crate::vfs::ROOT, b"/dev/null", true).unwrap_or(ino);
            let node = NodeRef::new(&k.vfs, v, null);
            OpenFile::new(dev::DevFile { node, kind: Device::Null, rng: &k.rng }, flags)
        }
        Some(Device::Stdin) => {
            let node = NodeRef::new(&k.vfs, v, ino);
            OpenFile::new(stdio::StdinFile { node, stdin: &k.stdin, host: host(0), epoch: 0 }, flags)
        }
        Some(d @ (Device::Stdout | Device::Stderr)) => {
            let node = NodeRef::new(&k.vfs, v, ino);
            let fd = if d == Device::Stdout { 1 } else { 2 };
            OpenFile::new(stdio::StdoutFile { node, console: &k.console, host: host(fd) }, flags)
        }
        Some(Device::Tty) => {
            let node = NodeRef::new(&k.vfs, v, ino);
            OpenFile::new(stdio::TtyFile::new(k, node), flags)
        }
        Some(kind) => OpenFile::new(dev::DevFile { node: NodeRef::new(&k.vfs, v, ino), kind, rng: &k.rng }, flags),
        None if proc::is_synthetic(v, ino) => proc::open(k, v, ino, flags),
        None => {
            // (inotify: an O_PATH open is no open, and its close no close.)
            use crate::vfs::notify::{IN_CLOSE_NOWRITE, IN_CLOSE_WRITE, IN_OPEN};
            use oflag::{O_ACCMODE, O_PATH, O_RDONLY};
            let close = match flags {
                f if f & O_PATH != 0 => 0,
                f if f & O_ACCMODE == O_RDONLY => IN_CLOSE_NOWRITE,
                _ => IN_CLOSE_WRITE,
            };
            if close != 0 {
                v.notify_node(ino, IN_OPEN);
            }
            OpenFile::new(node::NodeFile { node: NodeRef::new(&k.vfs, v, ino), close }, flags)
        }
    }
}
