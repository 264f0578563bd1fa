//! Socket system calls. These handlers read and check everything the program
//! passes (addresses, `msghdr`s, iovecs, control messages, option values), call
//! the socket through the socket interface (`crate::file::socket`), and do the
//! waiting sockets never do: O_NONBLOCK, MSG_DONTWAIT, SO_RCVTIMEO/SO_SNDTIMEO,
//! MSG_WAITALL, a stream send that takes everything. They also are the
//! sockets' environment (`NetEnv`): AF_UNIX path names in the file tree,
//! abstract names in the kernel's table, the caller's credentials.

use super::fs::{cwd, dir, iovecs, new_file_name};
use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::file::socket::{self, msg, opt, Cred, Iov, Named, NetEnv, RecvExtra, SendExtra, Socket};
use crate::file::socket::{AF_INET, AF_INET6, AF_UNIX, SOCK_CLOEXEC, SOCK_NONBLOCK, SOCK_STREAM};
use crate::file::{oflag, FileRef, OpenFile};
use crate::mm::user::{UserMem, UserMemExt};
use crate::net::inet::InetSocket;
use crate::net::netlink::{NetlinkSocket, AF_NETLINK};
use crate::net::unix::UnixSocket;
use crate::task::{sched, signal, Ctx};
use crate::time::{mono_now, real_now};
use alloc::sync::Weak;
use alloc::vec::Vec;
use core::any::Any;

/// Largest `sockaddr` (`sockaddr_storage`).
const SOCKADDR_MAX: u64 = 128;
/// Largest option value read.
const OPT_MAX: u64 = 256;
/// Descriptors one SCM_RIGHTS message may carry (Linux's SCM_MAX_FD).
const SCM_MAX_FD: usize = 253;
/// Messages one sendmmsg/recvmmsg handles (UIO_MAXIOV).
const MMSG_MAX: u64 = 1024;
const MSG_WAITFORONE: u32 = 0x10000;
/// Linux's limit on protocol families (NPROTO) and socket types (SOCK_MAX).
const NPROTO: u64 = 46;
const SOCK_MAX: u32 = 11;

// ---- the environment -----------------------------------------------------------

struct Env<'a, 'b>(&'a Ctx<'b>);

impl NetEnv for Env<'_, '_> {
    fn bind_path(&self, path: &[u8], target: Weak<dyn Any + Send + Sync>) -> SysResult {
        let ctx = self.0;
        let (start, _keep) = cwd(ctx);
        let umask = ctx.proc().fs.lock().umask;
        let mut v = ctx.k.vfs.lock();
        let base = dir(&v, start)?;
        new_file_name(&mut v, base, path)?;
        let (parent, name) = v.parent_of(base, path)?;
        let name = name.to_vec();
        match v.mksock(parent, &name, 0o777 & !umask, real_now(), target) {
            Err(Errno::EEXIST) => Err(Errno::EADDRINUSE),
            r => r.map(|_| 0),
        }
    }

    fn find_path(&self, path: &[u8]) -> Result<Named, Errno> {
        let ctx = self.0;
        let (start, _keep) = cwd(ctx);
        let mut v = ctx.k.vfs.lock();
        let ino = v.lookup(start, path, true)?;
        match v.socket(ino) {
            Some(Some(t)) => Ok(t),
            _ => Err(Errno::ECONNREFUSED),
        }
    }

    fn bind_abstract(&self, name: &[u8], target: Weak<dyn Any + Send + Sync>) -> SysResult {
        let mut names = self.0.k.unix_names.lock();
        if names.get(name).is_some_and(|w| w.strong_count() > 0) {
            return Err(Errno::EADDRINUSE);
        }
        names.retain(|_, w| w.strong_count() > 0); // forget closed sockets' names
        names.insert(name.to_vec(), target);
        Ok(0)
    }

    fn find_abstract(&self, name: &[u8]) -> Result<Named, Errno> {
        self.0.k.unix_names.lock().get(name).and_then(Weak::upgrade).ok_or(Errno::ECONNREFUSED)
    }

    fn cred(&self) -> Cred {
        let ctx = self.0;
        Cred { pid: ctx.thread.pid() as u32, uid: ctx.k.cfg.uid as u32, gid: ctx.k.cfg.gid as u32 }
    }
}

// ---- helpers -------------------------------------------------------------------

/// The open file of socket descriptor `fd` (ENOTSOCK if it is another file).
fn sock_file(ctx: &Ctx, fd: u64) -> Result<FileRef, Errno> {
    let of = ctx.file(fd)?;
    if of.obj().socket().is_none() {
        return Err(Errno::ENOTSOCK);
    }
    Ok(of)
}

fn sock(of: &FileRef) -> Result<&dyn Socket, Errno> {
    of.obj().socket().ok_or(Errno::ENOTSOCK)
}

/// The `sockaddr` of `len` bytes at `addr`.
fn read_addr(ctx: &Ctx, addr: u64, len: u64) -> Result<Vec<u8>, Errno> {
    let len = len as i32;
    if len < 0 || len as u64 > SOCKADDR_MAX {
        return Err(Errno::EINVAL);
    }
    ctx.user.read_vec(addr, len as usize)
}

/// Writes address `a` to `addr`, whose room is the int at `lenp`, and its full
/// length there (the program sees it was cut short), as Linux. Nothing if `addr`
/// is NULL.
fn write_addr(ctx: &Ctx, addr: u64, lenp: u64, a: &[u8]) -> Result<(), Errno> {
    if addr == 0 {
        return Ok(());
    }
    let room = ctx.user.read_u32(lenp)? as i32;
    if room < 0 {
        return Err(Errno::EINVAL);
    }
    let n = a.len().min(room as usize);
    ctx.user.write(addr, &a[..n])?;
    ctx.user.write_u32(lenp, a.len() as u32)
}

/// Runs `op`, an attempt on socket `of`, until it does not say EAGAIN, unless it
/// must not wait (O_NONBLOCK, MSG_DONTWAIT); sleeps in between on what the socket
/// says it waits for. `timeout` (ns, 0: none) ends the wait with EAGAIN; a signal
/// with ERESTARTSYS, or EINTR when there is a timeout (as Linux's sockets).
fn wait_on(
    of: &OpenFile,
    s: &dyn Socket,
    dontwait: bool,
    timeout: u64,
    mut op: impl FnMut() -> SysResult,
) -> SysResult {
    let deadline = (timeout > 0).then(|| mono_now().saturating_add(timeout));
    loop {
        let r = op();
        if r != Err(Errno::EAGAIN) || dontwait || of.nonblocking() {
            return r;
        }
        let Some(key) = s.blocked_on().or(of.wait_key()) else { return r };
        sched::prepare_wait(key);
        let r = op();
        if r != Err(Errno::EAGAIN) {
            sched::finish_wait(key);
            return r;
        }
        // Wake for the protocol's next timer too (and run it).
        let timer = s.next_timer();
        let until = match (deadline, timer) {
            (Some(d), Some(t)) => Some(d.min(t)),
            (d, t) => d.or(t),
        };
        let w = sched::block(until);
        sched::finish_wait(key);
        match w {
            sched::Wake::Woken => {}
            sched::Wake::TimedOut if deadline.is_some_and(|d| mono_now() >= d) => return Err(Errno::EAGAIN),
            sched::Wake::TimedOut => s.tick(),
            sched::Wake::Interrupted if timeout > 0 => return Err(Errno::EINTR),
            sched::Wake::Interrupted => return Err(Errno::ERESTARTSYS),
        }
    }
}

/// Installs a new socket's open file.
fn install(ctx: &Ctx, of: FileRef, cloexec: bool) -> SysResult {
    ctx.proc().fds.lock().insert(of, cloexec)
}

/// A new socket object for `socket`/`socketpair`.
fn new_unix(kind: u32, proto: u64) -> Result<u32, Errno> {
    if proto != 0 && proto != u64::from(AF_UNIX) {
        return Err(Errno::EPROTONOSUPPORT);
    }
    match kind {
        socket::SOCK_STREAM | socket::SOCK_DGRAM | socket::SOCK_SEQPACKET => Ok(kind),
        3 => Ok(socket::SOCK_DGRAM), // SOCK_RAW: Linux makes it a datagram socket
        _ => Err(Errno::ESOCKTNOSUPPORT),
    }
}

/// Splits `socket`'s type into the kind and the open-file flags.
fn type_flags(ty: u64) -> Result<(u32, u32, bool), Errno> {
    let ty = ty as u32;
    let (kind, flags) = (ty & 0xf, ty & !0xf);
    if flags & !(SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 || kind >= SOCK_MAX {
        return Err(Errno::EINVAL);
    }
    Ok((kind, oflag::O_RDWR | (flags & SOCK_NONBLOCK), flags & SOCK_CLOEXEC != 0))
}

// ---- making and naming sockets ---------------------------------------------------

pub fn socket(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [domain, ty, proto, ..] = f.args();
    let (kind, flags, cloexec) = type_flags(ty)?;
    match domain {
        d if d == u64::from(AF_UNIX) => {
            let kind = new_unix(kind, proto)?;
            let s = UnixSocket::new(kind, Env(ctx).cred());
            install(ctx, OpenFile::new(s, flags), cloexec)
        }
        d if d == u64::from(AF_INET) || d == u64::from(AF_INET6) => {
            let s = InetSocket::new(d as u16, kind, proto)?;
            install(ctx, OpenFile::new(s, flags), cloexec)
        }
        d if d == u64::from(AF_NETLINK) => {
            let s = NetlinkSocket::new(kind, proto)?;
            install(ctx, OpenFile::new(s, flags), cloexec)
        }
        d if d >= NPROTO => Err(Errno::EAFNOSUPPORT),
        _ => Err(Errno::EAFNOSUPPORT),
    }
}

pub fn socketpair(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [domain, ty, proto, sv, ..] = f.args();
    let (kind, flags, cloexec) = type_flags(ty)?;
    if domain != u64::from(AF_UNIX) {
        // (Linux: AF_INET has no socketpair; a bad type is checked first.)
        return Err(if domain == u64::from(AF_INET) || domain == u64::from(AF_INET6) {
            Errno::EOPNOTSUPP
        } else {
            Errno::EAFNOSUPPORT
        });
    }
    let kind = new_unix(kind, proto)?;
    ctx.user.check(sv, 8, true)?;
    let (a, b) = UnixSocket::pair(kind, Env(ctx).cred());
    let (a, b) = (OpenFile::new(a, flags), OpenFile::new(b, flags));
    let (fa, fb) = {
        let mut fds = ctx.proc().fds.lock();
        let fa = fds.insert(a, cloexec)?;
        match fds.insert(b, cloexec) {
            Ok(fb) => (fa, fb),
            Err(e) => {
                let a = fds.take(fa);
                drop(fds);
                drop(a);
                return Err(e);
            }
        }
    };
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&(fa as u32).to_le_bytes());
    out[4..].copy_from_slice(&(fb as u32).to_le_bytes());
    ctx.user.write(sv, &out)?;
    Ok(0)
}

pub fn bind(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, len, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    let a = read_addr(ctx, addr, len)?;
    sock(&of)?.bind(&Env(ctx), &a)
}

pub fn listen(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, backlog, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    // A negative backlog is the largest, as Linux reads it unsigned.
    sock(&of)?.listen(backlog as u32)
}

fn accept_call(ctx: &Ctx, fd: u64, addr: u64, lenp: u64, flags: u64) -> SysResult {
    if flags & !u64::from(SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    let of = sock_file(ctx, fd)?;
    let s = sock(&of)?;
    if addr != 0 && (ctx.user.read_u32(lenp)? as i32) < 0 {
        return Err(Errno::EINVAL);
    }
    let mut got = None;
    wait_on(&of, s, false, s.timeouts().0, || {
        got = Some(s.accept()?);
        Ok(0)
    })?;
    let (new, peer) = got.ok_or(Errno::EAGAIN)?;
    new.set_flags(oflag::O_RDWR | (flags as u32 & SOCK_NONBLOCK));
    let nfd = install(ctx, new, flags & u64::from(SOCK_CLOEXEC) != 0)?;
    if let Err(e) = write_addr(ctx, addr, lenp, &peer) {
        let f = ctx.proc().fds.lock().take(nfd);
        drop(f);
        return Err(e);
    }
    Ok(nfd)
}

pub fn accept(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    accept_call(ctx, f.rdi, f.rsi, f.rdx, 0)
}

pub fn accept4(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, lenp, flags, ..] = f.args();
    accept_call(ctx, fd, addr, lenp, flags)
}

pub fn connect(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, len, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    let s = sock(&of)?;
    let a = read_addr(ctx, addr, len)?;
    let env = Env(ctx);
    match wait_on(&of, s, false, s.timeouts().1, || s.connect(&env, &a)) {
        // A blocking connect waits for the handshake (its timeout leaves it going on).
        Err(Errno::EINPROGRESS) if !of.nonblocking() => {
            match wait_on(&of, s, false, s.timeouts().1, || s.connect_wait()) {
                Err(Errno::EAGAIN) => Err(Errno::EINPROGRESS),
                r => r,
            }
        }
        r => r,
    }
}

pub fn getsockname(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, lenp, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    let name = sock(&of)?.name();
    write_addr(ctx, addr, lenp, &name).map(|_| 0)
}

pub fn getpeername(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, lenp, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    let name = sock(&of)?.peer()?;
    write_addr(ctx, addr, lenp, &name).map(|_| 0)
}

pub fn shutdown(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, how, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    sock(&of)?.shutdown(how)
}

pub fn setsockopt(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, level, name, val, len, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    let len = len as i32;
    if len < 0 {
        return Err(Errno::EINVAL);
    }
    let v = ctx.user.read_vec(val, (len as u64).min(OPT_MAX) as usize)?;
    sock(&of)?.setopt(level, name, &v)
}

pub fn getsockopt(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, level, name, val, lenp, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    let room = ctx.user.read_u32(lenp)? as i32;
    if room < 0 {
        return Err(Errno::EINVAL);
    }
    let v = sock(&of)?.getopt(level, name)?;
    let n = v.len().min(room as usize);
    ctx.user.write(val, &v[..n])?;
    ctx.user.write_u32(lenp, n as u32)?;
    Ok(0)
}

// ---- sending and receiving -------------------------------------------------------

/// Sends `iov` with `extra`: waits as the socket's mode says; a blocking stream
/// send takes everything (or stops at a signal, returning what it sent); EPIPE
/// raises SIGPIPE unless MSG_NOSIGNAL.
fn send_call(ctx: &Ctx, of: &FileRef, iov: Iov, mut extra: SendExtra) -> SysResult {
    let s = sock(of)?;
    let env = Env(ctx);
    let flags = extra.flags;
    let dontwait = flags & msg::DONTWAIT != 0;
    let total = iov.len();
    let mut done = 0u64;
    let r = loop {
        let part = iov.skip(done);
        let mut first = Some(core::mem::take(&mut extra));
        let r = wait_on(of, s, dontwait, s.timeouts().1, || {
            // (What goes with the bytes goes with the first piece only.)
            let e = first.take().unwrap_or_default();
            s.send(&env, ctx.user, &part, e)
        });
        match r {
            Ok(n) => {
                done += n;
                if s.kind() != SOCK_STREAM || done >= total || n == 0 || dontwait || of.nonblocking() {
                    break Ok(done);
                }
            }
            Err(e) if done > 0 && e != Errno::EPIPE => break Ok(done),
            Err(e) => break if done > 0 { Ok(done) } else { Err(e) },
        }
    };
    if r == Err(Errno::EPIPE) && flags & msg::NOSIGNAL == 0 {
        signal::sigpipe();
    }
    r
}

/// Receives into `iov`: waits as the socket's mode says; MSG_WAITALL on a stream
/// waits for all of it (or the end, an error, a signal).
fn recv_call(of: &FileRef, user: &dyn UserMem, iov: &Iov, flags: u32) -> Result<(u64, RecvExtra), Errno> {
    let s = sock(of)?;
    let dontwait = flags & msg::DONTWAIT != 0;
    let want = iov.len();
    let mut done = 0u64;
    let mut extra = RecvExtra::default();
    loop {
        let part = iov.skip(done);
        let mut got = None;
        let r = wait_on(of, s, dontwait, s.timeouts().0, || {
            let (n, e) = s.recv(user, &part, flags)?;
            got = Some(e);
            Ok(n)
        });
        match r {
            Ok(n) => {
                done += n;
                if let Some(mut e) = got {
                    if extra.addr.is_none() {
                        extra.addr = e.addr.take();
                    }
                    extra.rights.append(&mut e.rights);
                    extra.cred = extra.cred.or(e.cred);
                    extra.flags |= e.flags;
                }
                let waitall = flags & msg::WAITALL != 0 && flags & msg::PEEK == 0 && s.kind() == SOCK_STREAM;
                if !waitall || n == 0 || done >= want || !extra.rights.is_empty() {
                    return Ok((done, extra));
                }
            }
            Err(_) if done > 0 => return Ok((done, extra)),
            Err(e) => return Err(e),
        }
    }
}

pub fn sendto(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, len, flags, addr, alen] = f.args();
    let of = sock_file(ctx, fd)?;
    let mut extra = SendExtra { flags: flags as u32, cred: Env(ctx).cred(), ..SendExtra::default() };
    if addr != 0 && alen != 0 {
        extra.addr = Some(read_addr(ctx, addr, alen)?);
    }
    send_call(ctx, &of, Iov::one(buf, len.min(isize::MAX as u64)), extra)
}

pub fn recvfrom(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, buf, len, flags, addr, lenp] = f.args();
    let of = sock_file(ctx, fd)?;
    if addr != 0 && (ctx.user.read_u32(lenp)? as i32) < 0 {
        return Err(Errno::EINVAL);
    }
    let (n, extra) = recv_call(&of, ctx.user, &Iov::one(buf, len.min(isize::MAX as u64)), flags as u32)?;
    write_addr(ctx, addr, lenp, extra.addr.as_deref().unwrap_or_default())?;
    Ok(n) // (descriptors passed with the bytes are closed, as Linux)
}

/// A `struct msghdr` as read from the program.
struct MsgHdr {
    name: u64,
    namelen: u32,
    iov: Iov,
    control: u64,
    controllen: u64,
}

fn read_msghdr(ctx: &Ctx, at: u64) -> Result<MsgHdr, Errno> {
    let b = ctx.user.read_array::<56>(at)?;
    let word = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let iovlen = word(24);
    if iovlen > 1024 {
        return Err(Errno::EMSGSIZE);
    }
    let iov = Iov { parts: iovecs(ctx.user, word(16), iovlen)? };
    Ok(MsgHdr { name: word(0), namelen: word(8) as u32, iov, control: word(32), controllen: word(40) })
}

const CMSG_HDR: u64 = 16;

fn cmsg_align(n: u64) -> u64 {
    (n + 7) & !7
}

/// The control messages of a send: SCM_RIGHTS descriptors (EBADF for a bad one)
/// and SCM_CREDENTIALS (EPERM unless they are the caller's own).
fn read_control(ctx: &Ctx, h: &MsgHdr, extra: &mut SendExtra) -> Result<(), Errno> {
    if h.controllen == 0 {
        return Ok(());
    }
    if h.controllen > 64 * 1024 {
        return Err(Errno::ENOBUFS);
    }
    let buf = ctx.user.read_vec(h.control, h.controllen as usize)?;
    let mut at = 0usize;
    while at + CMSG_HDR as usize <= buf.len() {
        let len = u64::from_le_bytes(buf[at..at + 8].try_into().unwrap_or_default());
        let level = u32::from_le_bytes(buf[at + 8..at + 12].try_into().unwrap_or_default());
        let ty = u32::from_le_bytes(buf[at + 12..at + 16].try_into().unwrap_or_default());
        if len < CMSG_HDR || len > (buf.len() - at) as u64 {
            return Err(Errno::EINVAL);
        }
        let data = &buf[at + CMSG_HDR as usize..at + len as usize];
        if u64::from(level) != opt::SOL_SOCKET {
            // As Linux's __scm_send: messages of other levels are not ours.
            at += cmsg_align(len) as usize;
            continue;
        }
        match ty {
            opt::SCM_RIGHTS => {
                let fds = data.len() / 4;
                if extra.rights.len() + fds > SCM_MAX_FD {
                    return Err(Errno::EINVAL);
                }
                for c in data.chunks_exact(4) {
                    let fd = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    if fd < 0 {
                        return Err(Errno::EBADF);
                    }
                    extra.rights.push(ctx.file(fd as u64)?);
                }
            }
            opt::SCM_CREDENTIALS => {
                if data.len() < 12 {
                    return Err(Errno::EINVAL);
                }
                let me = Env(ctx).cred();
                let w = |o: usize| u32::from_le_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]);
                if w(0) != me.pid || w(4) != me.uid || w(8) != me.gid {
                    return Err(Errno::EPERM);
                }
            }
            _ => return Err(Errno::EINVAL),
        }
        at += cmsg_align(len) as usize;
    }
    Ok(())
}

/// Writes what came with a receive into the control buffer (descriptors
/// installed, credentials); returns the bytes used and MSG_CTRUNC if some did not
/// fit (those descriptors are closed).
fn write_control(ctx: &Ctx, h: &MsgHdr, extra: RecvExtra, flags: u32) -> Result<(u64, u32), Errno> {
    let mut out: Vec<u8> = Vec::new();
    let mut trunc = 0;
    let room = h.controllen.min(64 * 1024) as usize;
    if h.control == 0 && (extra.cred.is_some() || !extra.rights.is_empty()) {
        return Ok((0, msg::CTRUNC));
    }
    if let Some(c) = extra.cred {
        if out.len() + 28 <= room {
            cmsg(&mut out, opt::SCM_CREDENTIALS, &c.to_bytes());
        } else {
            trunc = msg::CTRUNC;
        }
    }
    if !extra.rights.is_empty() {
        let space = room.saturating_sub(out.len() + CMSG_HDR as usize) / 4;
        let n = extra.rights.len().min(space);
        if n < extra.rights.len() {
            trunc = msg::CTRUNC;
        }
        let mut fds = Vec::new();
        let cloexec = flags & msg::CMSG_CLOEXEC != 0;
        let mut table = ctx.proc().fds.lock();
        for f in extra.rights.into_iter().take(n) {
            match table.insert(f, cloexec) {
                Ok(fd) => fds.extend_from_slice(&(fd as u32).to_le_bytes()),
                Err(_) => {
                    trunc = msg::CTRUNC;
                    break;
                }
            }
        }
        drop(table);
        if !fds.is_empty() {
            cmsg(&mut out, opt::SCM_RIGHTS, &fds);
        }
    }
    ctx.user.write(h.control, &out)?;
    Ok((out.len() as u64, trunc))
}

/// Appends a control message (its length unpadded, its space padded to 8).
fn cmsg(out: &mut Vec<u8>, ty: u32, data: &[u8]) {
    let len = CMSG_HDR + data.len() as u64;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(opt::SOL_SOCKET as u32).to_le_bytes());
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(data);
    out.resize(out.len() + (cmsg_align(len) - len) as usize, 0);
}

fn sendmsg_one(ctx: &Ctx, of: &FileRef, at: u64, flags: u64) -> SysResult {
    let h = read_msghdr(ctx, at)?;
    let mut extra = SendExtra { flags: flags as u32, cred: Env(ctx).cred(), ..SendExtra::default() };
    if h.name != 0 && h.namelen != 0 {
        extra.addr = Some(read_addr(ctx, h.name, u64::from(h.namelen))?);
    }
    read_control(ctx, &h, &mut extra)?;
    send_call(ctx, of, h.iov, extra)
}

fn recvmsg_one(ctx: &Ctx, of: &FileRef, at: u64, flags: u64) -> SysResult {
    let h = read_msghdr(ctx, at)?;
    if (h.namelen as i32) < 0 {
        return Err(Errno::EINVAL);
    }
    let (n, mut extra) = recv_call(of, ctx.user, &h.iov, flags as u32)?;
    let name = extra.addr.take().unwrap_or_default();
    let namelen = if h.name != 0 {
        let k = name.len().min(h.namelen as usize);
        ctx.user.write(h.name, &name[..k])?;
        name.len() as u32
    } else {
        0
    };
    let mflags = extra.flags;
    let (clen, trunc) = write_control(ctx, &h, extra, flags as u32)?;
    ctx.user.write_u32(at + 8, namelen)?;
    ctx.user.write_u64(at + 40, clen)?;
    ctx.user.write_u32(at + 48, mflags | trunc)?;
    Ok(n)
}

pub fn sendmsg(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, at, flags, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    sendmsg_one(ctx, &of, at, flags)
}

pub fn recvmsg(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, at, flags, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    recvmsg_one(ctx, &of, at, flags)
}

/// sendmmsg/recvmmsg: each `struct mmsghdr` is a msghdr and the count moved.
const MMSG_SIZE: u64 = 64;

pub fn sendmmsg(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, vec, vlen, flags, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    let mut sent = 0;
    for i in 0..vlen.min(MMSG_MAX) {
        let at = vec + i * MMSG_SIZE;
        match sendmsg_one(ctx, &of, at, flags) {
            Ok(n) => ctx.user.write_u32(at + 56, n as u32)?,
            Err(e) if sent == 0 => return Err(e),
            Err(_) => break,
        }
        sent += 1;
    }
    Ok(sent)
}

pub fn recvmmsg(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, vec, vlen, flags, ..] = f.args();
    let of = sock_file(ctx, fd)?;
    let mut got = 0;
    let mut flags = flags;
    for i in 0..vlen.min(MMSG_MAX) {
        let at = vec + i * MMSG_SIZE;
        match recvmsg_one(ctx, &of, at, flags) {
            Ok(n) => ctx.user.write_u32(at + 56, n as u32)?,
            Err(e) if got == 0 => return Err(e),
            Err(_) => break,
        }
        got += 1;
        if flags as u32 & MSG_WAITFORONE != 0 {
            flags |= u64::from(msg::DONTWAIT);
        }
    }
    Ok(got)
}
