//! AF_UNIX sockets: stream, datagram and seqpacket, entirely in the kernel's
//! memory. Each socket owns a [`Core`]: its receive queue and its state, each
//! under its own lock; the socket's wait key is the core's address.
//!
//! - A sender copies its bytes into the *receiver's* queue (one message per send,
//!   small stream writes coalesced), bounded by [`QUEUE_BYTES`] (and
//!   [`MAX_DGRAMS`] datagrams); a full queue is EAGAIN. Every change to a queue
//!   wakes both its owner's key and its owner's peer's key, so readers, writers
//!   waiting for room and pollers of either side all see it.
//! - Connected sockets know each other by `Weak` references (no cycle); the
//!   socket's file object (`UnixSocket`) closing shuts both directions down for
//!   the peer (it reads EOF after the data, its writes get EPIPE).
//! - A stream connect completes at once, as on Linux: the server's socket is made
//!   then and waits in the listener's backlog for `accept`; a full backlog makes
//!   the connector wait on the listener (`Socket::blocked_on`).
//! - Names: a path is a socket file in the tree whose node holds a `Weak` to the
//!   core (so a stale file refuses connections, ECONNREFUSED, as on Linux); an
//!   abstract name (leading NUL) lives in the kernel's table of abstract names.
//! - Locks: a queue's lock may be held while taking a state's lock, never the
//!   reverse; no two queues' or two states' locks are held at once.
//! - Descriptors passed with SCM_RIGHTS travel as open-file references inside
//!   the message; a socket sent over itself and never received stays alive until
//!   the program ends (Linux has a garbage collector for such cycles; we do not).

use crate::errno::{Errno, SysResult};
use crate::file::socket::{self as sock, msg, opt, Cred, Iov, NetEnv, RecvExtra, SendExtra, Socket};
use crate::file::socket::{AF_UNIX, SHUT_RD, SHUT_RDWR, SHUT_WR, SOCK_DGRAM, SOCK_SEQPACKET, SOCK_STREAM};
use crate::file::{ev, key_of, oflag, File, FileRef, Meta, OpenFile, Readiness};
use crate::mm::user::UserMem;
use crate::task::sched;
use alloc::collections::VecDeque;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::any::Any;
use onering_arch::sync::Mutex;

/// Bytes a receive queue holds (Linux's default socket buffer, 208 KiB).
pub const QUEUE_BYTES: usize = 212_992;
/// Datagrams a receive queue holds (Linux's net.unix.max_dgram_qlen).
pub const MAX_DGRAMS: usize = 512;
/// Longest `sun_path`.
const PATH_MAX: usize = 108;
/// Linux's socket-buffer limits (`setsockopt` doubles what it is given).
const MIN_BUF: u32 = 4608;
const MAX_BUF: u32 = 2 * 212_992;
/// `listen`'s backlog is capped at Linux's default somaxconn.
const SOMAXCONN: u32 = 4096;

/// An AF_UNIX name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Name {
    Unnamed,
    Path(Vec<u8>),
    Abstract(Vec<u8>),
}

impl Name {
    /// Parses a `sockaddr_un` of `addr.len()` bytes.
    pub fn parse(addr: &[u8]) -> Result<Name, Errno> {
        if addr.len() < 2 || addr.len() > 2 + PATH_MAX {
            return Err(Errno::EINVAL);
        }
        if u16::from_le_bytes([addr[0], addr[1]]) != AF_UNIX {
            return Err(Errno::EINVAL);
        }
        let path = &addr[2..];
        Ok(match path.first() {
            None => Name::Unnamed,
            Some(0) => Name::Abstract(path[1..].to_vec()),
            Some(_) => {
                let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
                Name::Path(path[..end].to_vec())
            }
        })
    }

    /// The `sockaddr_un` bytes `getsockname` and friends return (a path with its
    /// NUL, as Linux reports it).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = AF_UNIX.to_le_bytes().to_vec();
        match self {
            Name::Unnamed => {}
            Name::Path(p) => {
                v.extend_from_slice(p);
                v.push(0);
            }
            Name::Abstract(a) => {
                v.push(0);
                v.extend_from_slice(a);
            }
        }
        v
    }
}

/// One send's bytes and what came with them.
struct Message {
    data: Vec<u8>,
    /// Bytes already read (a stream read can take part of a message).
    off: usize,
    rights: Vec<FileRef>,
    cred: Cred,
    from: Vec<u8>,
}

impl Message {
    fn left(&self) -> usize {
        self.data.len() - self.off
    }
}

/// A socket's receive side.
#[derive(Default)]
struct Queue {
    msgs: VecDeque<Message>,
    /// Unread bytes in `msgs`.
    bytes: usize,
    /// No more data will come (shut down for reading, or the peer is done).
    rcv_shut: bool,
    /// No more data may be sent (shut down for writing, or the peer is gone).
    snd_shut: bool,
    /// Connections waiting for `accept` (a listening socket): the servers'
    /// sockets, and the connectors' addresses.
    backlog: VecDeque<(FileRef, Vec<u8>)>,
    /// Bumped on every change (edge-triggered epoll).
    gen: u64,
}

#[derive(Default)]
struct State {
    name: Option<Name>,
    /// The backlog limit of a listening socket.
    listening: Option<u32>,
    /// A connected socket's peer (stream and seqpacket: the other end; datagram:
    /// the default destination), its wait key and its address.
    peer: Option<(Weak<Core>, u64, Vec<u8>)>,
    /// Whether it ever was connected (a stream socket's EOF versus ENOTCONN).
    connected: bool,
    peer_cred: Option<Cred>,
    /// Who made it (what its peer's SO_PEERCRED says).
    cred: Cred,
    passcred: bool,
    /// SO_RCVTIMEO, SO_SNDTIMEO (ns), SO_SNDBUF, SO_RCVBUF as stored.
    rcvtimeo: u64,
    sndtimeo: u64,
    sndbuf: u32,
    rcvbuf: u32,
    /// Options kept only to be read back (SO_REUSEADDR, SO_KEEPALIVE...).
    flags: Vec<(u64, i32)>,
    linger: [u8; 8],
    /// What a caller that got EAGAIN waits on: a full listener or receiver.
    blocked_on: Option<u64>,
}

/// A socket's shared part: what its peer and its name lead to.
pub struct Core {
    kind: u32,
    q: Mutex<Queue>,
    st: Mutex<State>,
}

impl Core {
    fn new(kind: u32, cred: Cred) -> Arc<Core> {
        let st = State { cred, sndbuf: QUEUE_BYTES as u32, rcvbuf: QUEUE_BYTES as u32, ..State::default() };
        Arc::new(Core { kind, q: Mutex::new(Queue::default()), st: Mutex::new(st) })
    }

    fn key(&self) -> u64 {
        key_of(self)
    }

    fn peer(&self) -> Option<(Option<Arc<Core>>, u64)> {
        self.st.lock().peer.as_ref().map(|(w, k, _)| (w.upgrade(), *k))
    }

    /// Wakes everyone interested in this socket's queue: its own waiters and
    /// its peer's (a peer's writers wait for room here on their own key).
    fn wake(&self) {
        sched::wake_all(self.key());
        if let Some((_, k)) = self.peer() {
            sched::wake_all(k);
        }
    }

    fn connection(&self) -> bool {
        self.kind != SOCK_DGRAM
    }
}

/// An AF_UNIX socket's file object.
pub struct UnixSocket {
    core: Arc<Core>,
}

impl UnixSocket {
    /// A new socket of `kind` (SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET).
    pub fn new(kind: u32, cred: Cred) -> UnixSocket {
        UnixSocket { core: Core::new(kind, cred) }
    }

    /// `socketpair`: two connected sockets.
    pub fn pair(kind: u32, cred: Cred) -> (UnixSocket, UnixSocket) {
        let (a, b) = (Core::new(kind, cred), Core::new(kind, cred));
        connect_cores(&a, &b, Name::Unnamed.encode(), Name::Unnamed.encode());
        (UnixSocket { core: a }, UnixSocket { core: b })
    }

    fn named(&self) -> Weak<dyn Any + Send + Sync> {
        let w: Weak<Core> = Arc::downgrade(&self.core);
        w
    }
}

/// Makes `a` and `b` each other's peer.
fn connect_cores(a: &Arc<Core>, b: &Arc<Core>, a_addr: Vec<u8>, b_addr: Vec<u8>) {
    let (ca, cb) = (a.st.lock().cred, b.st.lock().cred);
    {
        let mut s = a.st.lock();
        s.peer = Some((Arc::downgrade(b), b.key(), b_addr));
        s.connected = true;
        s.peer_cred = Some(cb);
    }
    let mut s = b.st.lock();
    s.peer = Some((Arc::downgrade(a), a.key(), a_addr));
    s.connected = true;
    s.peer_cred = Some(ca);
}

/// The socket of `kind` a name leads to. As Linux: an abstract name of another
/// kind is not found (ECONNREFUSED), a path is (EPROTOTYPE).
fn find(env: &dyn NetEnv, name: &Name, kind: u32) -> Result<Arc<Core>, Errno> {
    let target = match name {
        Name::Unnamed => return Err(Errno::EINVAL),
        Name::Path(p) => env.find_path(p)?,
        Name::Abstract(a) => env.find_abstract(a)?,
    };
    let core = target.downcast::<Core>().map_err(|_| Errno::ECONNREFUSED)?;
    match name {
        _ if core.kind == kind => Ok(core),
        Name::Abstract(_) => Err(Errno::ECONNREFUSED),
        _ => Err(Errno::EPROTOTYPE),
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let (msgs, backlog, mine) = {
            let mut q = self.core.q.lock();
            q.rcv_shut = true;
            q.snd_shut = true;
            q.gen += 1;
            q.bytes = 0;
            (core::mem::take(&mut q.msgs), core::mem::take(&mut q.backlog), q.gen)
        };
        // Passed descriptors and waiting connections close outside the lock.
        drop((msgs, backlog));
        let peer = self.core.peer();
        if let Some((Some(p), _)) = &peer {
            if self.core.connection() {
                let mut q = p.q.lock();
                q.rcv_shut = true;
                q.snd_shut = true;
                // The peer's generation was its own plus this socket's (`poll`);
                // with this socket gone it is its own alone, so it takes this
                // one's in: the sum only grows, and an edge-triggered waiter
                // always sees the hang-up (a bump of 1 could give back the very
                // sum it last saw, and the reader slept on: Go's bufio test
                // TestCopyUnixpacket hung so).
                q.gen = q.gen.wrapping_add(1 + mine);
            }
        }
        sched::wake_all(self.core.key());
        if let Some((_, k)) = peer {
            sched::wake_all(k);
        }
    }
}

impl Socket for UnixSocket {
    fn domain(&self) -> u16 {
        AF_UNIX
    }

    fn kind(&self) -> u32 {
        self.core.kind
    }

    fn bind(&self, env: &dyn NetEnv, addr: &[u8]) -> SysResult {
        let mut name = Name::parse(addr)?;
        if self.core.st.lock().name.is_some() {
            // Autobinding a named socket does nothing, as on Linux.
            return if matches!(name, Name::Unnamed) { Ok(0) } else { Err(Errno::EINVAL) };
        }
        match &name {
            Name::Path(p) => {
                env.bind_path(p, self.named())?;
            }
            Name::Abstract(a) => {
                env.bind_abstract(a, self.named())?;
            }
            Name::Unnamed => {
                // Autobind: an abstract name of five hex digits, as Linux.
                let mut n = (key_of(&*self.core) >> 4) as u32 & 0xfffff;
                loop {
                    let a = alloc::format!("{n:05x}").into_bytes();
                    if env.bind_abstract(&a, self.named()).is_ok() {
                        name = Name::Abstract(a);
                        break;
                    }
                    n = (n + 1) & 0xfffff;
                }
            }
        }
        let mut st = self.core.st.lock();
        if st.name.is_some() {
            return Err(Errno::EINVAL); // another thread bound it meanwhile
        }
        st.name = Some(name);
        Ok(0)
    }

    fn listen(&self, backlog: u32) -> SysResult {
        if !self.core.connection() {
            return Err(Errno::EOPNOTSUPP);
        }
        let mut st = self.core.st.lock();
        if st.connected {
            return Err(Errno::EINVAL);
        }
        if st.name.is_none() {
            return Err(Errno::EINVAL); // Linux: listen needs a bound unix socket
        }
        st.listening = Some(backlog.min(SOMAXCONN));
        drop(st);
        self.core.q.lock().gen += 1;
        Ok(0)
    }

    fn accept(&self) -> Result<(FileRef, Vec<u8>), Errno> {
        if !self.core.connection() {
            return Err(Errno::EOPNOTSUPP);
        }
        if self.core.st.lock().listening.is_none() {
            return Err(Errno::EINVAL);
        }
        let got = {
            let mut q = self.core.q.lock();
            let got = q.backlog.pop_front();
            if got.is_some() {
                q.gen += 1;
            }
            got
        };
        match got {
            Some(c) => {
                sched::wake_all(self.core.key()); // connectors waiting for room
                Ok(c)
            }
            None => Err(Errno::EAGAIN),
        }
    }

    fn connect(&self, env: &dyn NetEnv, addr: &[u8]) -> SysResult {
        let name = Name::parse(addr)?;
        if name == Name::Unnamed {
            return Err(Errno::EINVAL);
        }
        let target = find(env, &name, self.core.kind)?;
        if !self.core.connection() {
            // A datagram socket's connect sets its default destination.
            if target.kind != self.core.kind {
                return Err(Errno::EPROTOTYPE);
            }
            let key = target.key();
            self.core.st.lock().peer = Some((Arc::downgrade(&target), key, name.encode()));
            return Ok(0);
        }
        {
            let st = self.core.st.lock();
            if st.connected {
                return Err(Errno::EISCONN);
            }
            if st.listening.is_some() {
                return Err(Errno::EINVAL);
            }
        }
        if target.kind != self.core.kind {
            return Err(Errno::EPROTOTYPE);
        }
        let (limit, lname, lcred) = {
            let st = target.st.lock();
            match st.listening {
                Some(l) => (l, st.name.clone().unwrap_or(Name::Unnamed), st.cred),
                None => return Err(Errno::ECONNREFUSED),
            }
        };
        // The server's end, as accept will hand it out.
        let server = Core::new(self.core.kind, lcred);
        server.st.lock().name = Some(lname);
        let mine = self.core.st.lock().name.clone().unwrap_or(Name::Unnamed).encode();
        let file = OpenFile::new(UnixSocket { core: server.clone() }, oflag::O_RDWR);
        {
            let mut q = target.q.lock();
            if q.rcv_shut {
                return Err(Errno::ECONNREFUSED); // closed meanwhile
            }
            if q.backlog.len() > limit as usize {
                drop(q);
                self.core.st.lock().blocked_on = Some(target.key());
                return Err(Errno::EAGAIN);
            }
            connect_cores(&self.core, &server, mine.clone(), name.encode());
            q.backlog.push_back((file, mine));
            q.gen += 1;
        }
        sched::wake_all(target.key()); // the acceptor
        Ok(0)
    }

    fn blocked_on(&self) -> Option<u64> {
        self.core.st.lock().blocked_on.take()
    }

    fn send(&self, env: &dyn NetEnv, user: &dyn UserMem, iov: &Iov, extra: SendExtra) -> SysResult {
        let len = iov.len();
        let (dest, from) = {
            let st = self.core.st.lock();
            // (An unnamed sender has no address: the receiver gets length 0.)
            let from = st.name.as_ref().map(Name::encode).unwrap_or_default();
            match (&extra.addr, &st.peer) {
                (Some(_), _) if self.core.connection() => {
                    return Err(if st.connected { Errno::EISCONN } else { Errno::EOPNOTSUPP });
                }
                (Some(a), _) => {
                    let name = Name::parse(a)?;
                    drop(st);
                    (find(env, &name, self.core.kind)?, from)
                }
                (None, Some((w, _, _))) => match w.upgrade() {
                    Some(p) => (p, from),
                    None if self.core.connection() => return Err(Errno::EPIPE),
                    None => return Err(Errno::ECONNREFUSED),
                },
                (None, None) if self.core.connection() => return Err(Errno::ENOTCONN),
                (None, None) => return Err(Errno::ENOTCONN),
            }
        };
        if self.core.connection() && self.core.q.lock().snd_shut {
            return Err(Errno::EPIPE);
        }
        if !self.core.connection() {
            if dest.kind != self.core.kind {
                return Err(Errno::EPROTOTYPE);
            }
            // A datagram socket connected elsewhere takes nothing from us.
            if let Some((w, _, _)) = &dest.st.lock().peer {
                if !core::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.core)) {
                    return Err(Errno::EPERM);
                }
            }
        }
        let whole = self.core.kind != SOCK_STREAM;
        if whole && len > (QUEUE_BYTES - 32) as u64 {
            return Err(Errno::EMSGSIZE);
        }
        let mut q = dest.q.lock();
        if q.rcv_shut {
            return Err(if self.core.connection() { Errno::EPIPE } else { Errno::ECONNREFUSED });
        }
        let room = QUEUE_BYTES.saturating_sub(q.bytes);
        let full = if whole { room < len as usize || q.msgs.len() >= MAX_DGRAMS } else { room == 0 && len > 0 };
        if full {
            drop(q);
            self.core.st.lock().blocked_on = Some(dest.key());
            return Err(Errno::EAGAIN);
        }
        let n = if whole { len as usize } else { room.min(len as usize) };
        let coalesce = !whole
            && extra.rights.is_empty()
            && q.msgs.back().is_some_and(|m| m.rights.is_empty() && m.data.len() + n <= 64 * 1024);
        if coalesce {
            let last = q.msgs.back_mut().ok_or(Errno::EINVAL)?;
            let at = last.data.len();
            last.data.try_reserve(n).map_err(|_| Errno::ENOBUFS)?;
            last.data.resize(at + n, 0);
            if let Err(e) = iov.read_at(user, 0, &mut last.data[at..]) {
                last.data.truncate(at);
                return Err(e);
            }
        } else {
            let mut data = Vec::new();
            data.try_reserve_exact(n).map_err(|_| Errno::ENOBUFS)?;
            data.resize(n, 0);
            iov.read_at(user, 0, &mut data)?;
            q.msgs.try_reserve(1).map_err(|_| Errno::ENOBUFS)?;
            // (write(2) passes no credentials: the socket's maker's.)
            let cred = if extra.cred.pid != 0 { extra.cred } else { self.core.st.lock().cred };
            q.msgs.push_back(Message { data, off: 0, rights: extra.rights, cred, from });
        }
        q.bytes += n;
        q.gen += 1;
        drop(q);
        dest.wake();
        sched::wake_all(self.core.key());
        Ok(n as u64)
    }

    fn recv(&self, user: &dyn UserMem, iov: &Iov, flags: u32) -> Result<(u64, RecvExtra), Errno> {
        let want = iov.len();
        let peek = flags & msg::PEEK != 0;
        let passcred = self.core.st.lock().passcred;
        let mut extra = RecvExtra::default();
        let mut q = self.core.q.lock();
        if q.msgs.is_empty() {
            if q.rcv_shut {
                return Ok((0, extra));
            }
            if self.core.connection() && !self.core.st.lock().connected {
                return Err(if self.core.kind == SOCK_SEQPACKET { Errno::ENOTCONN } else { Errno::EINVAL });
            }
            return Err(Errno::EAGAIN);
        }
        let mut got = 0u64;
        if self.core.kind == SOCK_STREAM {
            // Bytes across messages, stopping at one that brings descriptors
            // (they arrive with the first byte of their message) and after it.
            let mut i = 0;
            while got < want && i < q.msgs.len() {
                let m = &q.msgs[i];
                if !m.rights.is_empty() && got > 0 {
                    break;
                }
                let n = m.left().min((want - got) as usize);
                iov.write_at(user, got, &m.data[m.off..m.off + n])?;
                got += n as u64;
                let carried = !m.rights.is_empty();
                if passcred && extra.cred.is_none() {
                    extra.cred = Some(m.cred);
                }
                if peek {
                    if carried {
                        extra.rights = m.rights.clone();
                        break;
                    }
                    i += 1;
                    continue;
                }
                let m = &mut q.msgs[i];
                m.off += n;
                extra.rights.append(&mut m.rights);
                if m.left() == 0 {
                    q.msgs.pop_front();
                } else {
                    i += 1;
                }
                if carried {
                    break;
                }
            }
            if !peek {
                q.bytes -= got as usize;
            }
        } else {
            let m = &q.msgs[0];
            let n = (m.left() as u64).min(want);
            iov.write_at(user, 0, &m.data[m.off..m.off + n as usize])?;
            if (m.left() as u64) > want {
                extra.flags |= msg::TRUNC;
            }
            got = if flags & msg::TRUNC != 0 { m.left() as u64 } else { n };
            if self.core.kind == SOCK_SEQPACKET {
                extra.flags |= msg::EOR;
            } else {
                extra.addr = Some(m.from.clone());
            }
            if passcred {
                extra.cred = Some(m.cred);
            }
            if !peek {
                let mut m = q.msgs.pop_front().ok_or(Errno::EAGAIN)?;
                q.bytes -= m.left();
                extra.rights.append(&mut m.rights);
            } else {
                extra.rights = m.rights.clone();
            }
        }
        if !peek {
            q.gen += 1;
        }
        drop(q);
        if !peek {
            self.core.wake();
        }
        Ok((got, extra))
    }

    fn shutdown(&self, how: u64) -> SysResult {
        if how > SHUT_RDWR {
            return Err(Errno::EINVAL);
        }
        let peer = {
            // (Linux shuts down an unconnected socket too, without complaint.)
            let st = self.core.st.lock();
            st.peer.as_ref().and_then(|(w, _, _)| w.upgrade())
        };
        {
            let mut q = self.core.q.lock();
            if how != SHUT_WR {
                q.rcv_shut = true;
            }
            if how != SHUT_RD {
                q.snd_shut = true;
            }
            q.gen += 1;
        }
        if let Some(p) = peer.filter(|_| self.core.connection()) {
            let mut q = p.q.lock();
            if how != SHUT_WR {
                q.snd_shut = true;
            }
            if how != SHUT_RD {
                q.rcv_shut = true;
            }
            q.gen += 1;
        }
        self.core.wake();
        Ok(0)
    }

    fn name(&self) -> Vec<u8> {
        self.core.st.lock().name.clone().unwrap_or(Name::Unnamed).encode()
    }

    fn peer(&self) -> Result<Vec<u8>, Errno> {
        let st = self.core.st.lock();
        match &st.peer {
            Some((_, _, a)) => Ok(a.clone()),
            None => Err(Errno::ENOTCONN),
        }
    }

    fn getopt(&self, level: u64, name: u64) -> Result<Vec<u8>, Errno> {
        if level != opt::SOL_SOCKET {
            return Err(Errno::EOPNOTSUPP);
        }
        let int = |v: i32| Ok(v.to_le_bytes().to_vec());
        let st = self.core.st.lock();
        match name {
            opt::SO_TYPE => int(self.core.kind as i32),
            opt::SO_DOMAIN => int(AF_UNIX as i32),
            opt::SO_PROTOCOL => int(0),
            opt::SO_ERROR => int(0),
            opt::SO_ACCEPTCONN => int(st.listening.is_some() as i32),
            opt::SO_PASSCRED => int(st.passcred as i32),
            opt::SO_SNDBUF => int(st.sndbuf as i32),
            opt::SO_RCVBUF => int(st.rcvbuf as i32),
            opt::SO_RCVTIMEO => Ok(sock::timeval_bytes(st.rcvtimeo)),
            opt::SO_SNDTIMEO => Ok(sock::timeval_bytes(st.sndtimeo)),
            opt::SO_LINGER => Ok(st.linger.to_vec()),
            opt::SO_PEERCRED => {
                // Not connected: pid 0, uid and gid -1, as Linux.
                let c = st.peer_cred.unwrap_or(Cred { pid: 0, uid: u32::MAX, gid: u32::MAX });
                Ok(c.to_bytes().to_vec())
            }
            opt::SO_REUSEADDR
            | opt::SO_REUSEPORT
            | opt::SO_KEEPALIVE
            | opt::SO_BROADCAST
            | opt::SO_DEBUG
            | opt::SO_DONTROUTE
            | opt::SO_OOBINLINE
            | opt::SO_RCVLOWAT
            | opt::SO_SNDLOWAT => {
                let dflt = i32::from(name == opt::SO_RCVLOWAT || name == opt::SO_SNDLOWAT);
                int(st.flags.iter().find(|f| f.0 == name).map_or(dflt, |f| f.1))
            }
            _ => Err(Errno::ENOPROTOOPT),
        }
    }

    fn setopt(&self, level: u64, name: u64, val: &[u8]) -> SysResult {
        if level != opt::SOL_SOCKET {
            return Err(Errno::EOPNOTSUPP);
        }
        let mut st = self.core.st.lock();
        let buf = |v: i32| (v.max(0) as u32).min(MAX_BUF / 2).saturating_mul(2).max(MIN_BUF);
        match name {
            opt::SO_RCVTIMEO => st.rcvtimeo = sock::timeval_opt(val)?,
            opt::SO_SNDTIMEO => st.sndtimeo = sock::timeval_opt(val)?,
            opt::SO_LINGER => {
                let v = val.get(..8).ok_or(Errno::EINVAL)?;
                st.linger.copy_from_slice(v);
            }
            opt::SO_PASSCRED => st.passcred = sock::int_opt(val)? != 0,
            opt::SO_SNDBUF | opt::SO_SNDBUFFORCE => st.sndbuf = buf(sock::int_opt(val)?),
            opt::SO_RCVBUF | opt::SO_RCVBUFFORCE => st.rcvbuf = buf(sock::int_opt(val)?),
            opt::SO_REUSEADDR
            | opt::SO_REUSEPORT
            | opt::SO_KEEPALIVE
            | opt::SO_BROADCAST
            | opt::SO_DEBUG
            | opt::SO_DONTROUTE
            | opt::SO_OOBINLINE
            | opt::SO_RCVLOWAT
            | opt::SO_SNDLOWAT => {
                let mut v = sock::int_opt(val)?;
                if name != opt::SO_RCVLOWAT && name != opt::SO_SNDLOWAT {
                    v = (v != 0) as i32;
                }
                st.flags.retain(|f| f.0 != name);
                st.flags.push((name, v));
            }
            opt::SO_TYPE
            | opt::SO_DOMAIN
            | opt::SO_PROTOCOL
            | opt::SO_ERROR
            | opt::SO_PEERCRED
            | opt::SO_ACCEPTCONN => return Err(Errno::ENOPROTOOPT),
            _ => return Err(Errno::ENOPROTOOPT),
        }
        Ok(0)
    }

    fn inq(&self) -> u64 {
        let q = self.core.q.lock();
        if self.core.kind == SOCK_STREAM {
            q.bytes as u64
        } else {
            q.msgs.front().map_or(0, |m| m.left() as u64)
        }
    }

    fn outq(&self) -> u64 {
        match self.core.peer() {
            Some((Some(p), _)) => p.q.lock().bytes as u64,
            _ => 0,
        }
    }

    fn timeouts(&self) -> (u64, u64) {
        let st = self.core.st.lock();
        (st.rcvtimeo, st.sndtimeo)
    }
}

const FIONREAD: u64 = 0x541b;
const SIOCOUTQ: u64 = 0x5411;

impl File for UnixSocket {
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        // (Descriptors sent with data read by read(2) are closed.)
        super::read(self, user, buf, len, off)
    }

    fn write(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        // (No destination: a datagram socket must be connected.)
        super::write(self, user, buf, len, off)
    }

    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        use ev::*;
        let (listening, connected, peer) = {
            let st = self.core.st.lock();
            (st.listening.is_some(), st.connected, st.peer.as_ref().and_then(|(w, _, _)| w.upgrade()))
        };
        let (mut events, mut gen) = {
            let q = self.core.q.lock();
            let mut e = 0;
            if listening {
                if !q.backlog.is_empty() {
                    e |= IN | RDNORM;
                }
            } else {
                if !q.msgs.is_empty() || q.rcv_shut {
                    e |= IN | RDNORM;
                }
                if q.rcv_shut {
                    e |= RDHUP;
                }
                if q.rcv_shut && q.snd_shut {
                    e |= HUP;
                }
            }
            (e, q.gen)
        };
        if self.core.connection() && !connected && !listening {
            events |= HUP;
        }
        if !listening {
            // Writable while the receiver has room (or writing fails at once).
            let room = match &peer {
                Some(p) => {
                    let q = p.q.lock();
                    gen = gen.wrapping_add(q.gen);
                    q.snd_shut || q.rcv_shut || (q.bytes < QUEUE_BYTES && q.msgs.len() < MAX_DGRAMS)
                }
                None => true,
            };
            if room {
                events |= OUT | WRNORM;
            }
        }
        Some(Readiness { events, gen, key: self.core.key() })
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.core.key())
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        let v = match request {
            FIONREAD => self.inq(),
            SIOCOUTQ => self.outq(),
            _ => return super::iface::ioctl(user, AF_UNIX, request, arg).unwrap_or(Err(Errno::ENOTTY)),
        };
        user.write(arg, &(v.min(i32::MAX as u64) as u32).to_le_bytes())?;
        Ok(0)
    }

    fn stat(&self) -> Meta {
        super::socket_stat(self.core.key() & 0xffff_ffff)
    }

    fn sigpipe(&self) -> bool {
        true
    }

    fn socket(&self) -> Option<&dyn Socket> {
        Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::user::BufferMem;
    use alloc::collections::BTreeMap;

    /// Abstract names only.
    #[derive(Default)]
    struct Names(Mutex<BTreeMap<Vec<u8>, Weak<dyn Any + Send + Sync>>>);

    impl NetEnv for Names {
        fn bind_path(&self, _: &[u8], _: Weak<dyn Any + Send + Sync>) -> SysResult {
            Err(Errno::EROFS)
        }
        fn find_path(&self, _: &[u8]) -> Result<sock::Named, Errno> {
            Err(Errno::ENOENT)
        }
        fn bind_abstract(&self, name: &[u8], t: Weak<dyn Any + Send + Sync>) -> SysResult {
            self.0.lock().insert(name.to_vec(), t);
            Ok(0)
        }
        fn find_abstract(&self, name: &[u8]) -> Result<sock::Named, Errno> {
            self.0.lock().get(name).and_then(Weak::upgrade).ok_or(Errno::ECONNREFUSED)
        }
        fn cred(&self) -> Cred {
            Cred { pid: 1, uid: 2, gid: 3 }
        }
    }

    fn abs(name: &str) -> Vec<u8> {
        Name::Abstract(name.as_bytes().to_vec()).encode()
    }

    #[test]
    fn names_parse_and_encode_as_linux() {
        assert_eq!(Name::parse(&[1, 0]), Ok(Name::Unnamed));
        assert_eq!(Name::parse(&[1, 0, b'/', b'a', 0, b'x']), Ok(Name::Path(b"/a".to_vec())));
        assert_eq!(Name::parse(&[1, 0, 0, b'a']), Ok(Name::Abstract(b"a".to_vec())));
        assert_eq!(Name::parse(&[2, 0, b'a']), Err(Errno::EINVAL), "another family");
        assert_eq!(Name::parse(&[1]), Err(Errno::EINVAL));
        assert_eq!(Name::parse(&[1u8; 111]), Err(Errno::EINVAL), "longer than sockaddr_un");
        assert_eq!(Name::Path(b"/a".to_vec()).encode(), [1, 0, b'/', b'a', 0]);
    }

    #[test]
    fn a_pair_carries_bytes_and_ends() {
        let u = BufferMem::new(0x1000, 4096);
        let env = Names::default();
        let (a, b) = UnixSocket::pair(SOCK_STREAM, env.cred());
        u.write(0x1000, b"hello").unwrap();
        assert_eq!(a.send(&env, &u, &Iov::one(0x1000, 5), SendExtra::default()), Ok(5));
        assert_eq!(b.inq(), 5);
        assert_eq!(a.outq(), 5);
        let (n, _) = b.recv(&u, &Iov::one(0x1800, 3), msg::PEEK).unwrap();
        assert_eq!((n, b.inq()), (3, 5), "peeking takes nothing");
        let (n, _) = b.recv(&u, &Iov { parts: alloc::vec![(0x1800, 2), (0x1900, 8)] }, 0).unwrap();
        assert_eq!(n, 5);
        assert_eq!(&u.mem.lock()[0x900..0x903], b"llo", "across iovecs");
        assert_eq!(b.recv(&u, &Iov::one(0x1800, 3), 0).err(), Some(Errno::EAGAIN));
        assert_eq!(
            b.recv(&u, &Iov::one(0x9000, 3), 0).err(),
            Some(Errno::EAGAIN),
            "the pointer matters only with data"
        );
        a.send(&env, &u, &Iov::one(0x1000, 5), SendExtra::default()).unwrap();
        assert_eq!(b.recv(&u, &Iov::one(0x9000, 3), 0).err(), Some(Errno::EFAULT));
        assert_eq!(b.inq(), 5, "a failed copy takes nothing");
        drop(a);
        assert_eq!(b.recv(&u, &Iov::one(0x1800, 16), 0).map(|r| r.0), Ok(5));
        assert_eq!(b.recv(&u, &Iov::one(0x1800, 16), 0).map(|r| r.0), Ok(0), "end of file");
        assert_eq!(b.send(&env, &u, &Iov::one(0x1000, 1), SendExtra::default()), Err(Errno::EPIPE));
    }

    #[test]
    fn a_full_queue_is_eagain_and_datagrams_stay_whole() {
        let u = BufferMem::new(0x1000, 4096);
        let env = Names::default();
        let (a, b) = UnixSocket::pair(SOCK_STREAM, env.cred());
        let mut sent = 0;
        while let Ok(n) = a.send(&env, &u, &Iov::one(0x1000, 4096), SendExtra::default()) {
            sent += n;
        }
        assert_eq!(sent as usize, QUEUE_BYTES);
        drop(b);
        let (c, d) = UnixSocket::pair(SOCK_DGRAM, env.cred());
        c.send(&env, &u, &Iov::one(0x1000, 10), SendExtra::default()).unwrap();
        let (n, e) = d.recv(&u, &Iov::one(0x1800, 4), msg::TRUNC).unwrap();
        assert_eq!((n, e.flags & msg::TRUNC), (10, msg::TRUNC));
        assert_eq!(d.recv(&u, &Iov::one(0x1800, 4), 0).err(), Some(Errno::EAGAIN), "the rest is gone");
    }

    #[test]
    fn listeners_hand_out_connections_in_order() {
        let u = BufferMem::new(0x1000, 4096);
        let env = Names::default();
        let l = UnixSocket::new(SOCK_STREAM, env.cred());
        assert_eq!(l.listen(1), Err(Errno::EINVAL), "unbound");
        l.bind(&env, &abs("srv")).unwrap();
        let c1 = UnixSocket::new(SOCK_STREAM, env.cred());
        assert_eq!(c1.connect(&env, &abs("srv")), Err(Errno::ECONNREFUSED), "not listening");
        l.listen(0).unwrap();
        assert_eq!(c1.connect(&env, &abs("srv")), Ok(0));
        let c2 = UnixSocket::new(SOCK_STREAM, env.cred());
        assert_eq!(c2.connect(&env, &abs("srv")), Err(Errno::EAGAIN), "backlog 0 holds one");
        assert_eq!(c2.blocked_on(), Some(l.core.key()), "waits on the listener");
        u.write(0x1000, b"x").unwrap();
        c1.send(&env, &u, &Iov::one(0x1000, 1), SendExtra::default()).unwrap();
        let (s1, peer) = l.accept().unwrap();
        assert_eq!(peer, [1, 0], "an unnamed connector");
        assert_eq!(s1.obj().socket().unwrap().inq(), 1, "data sent before accept is there");
        assert_eq!(s1.obj().socket().unwrap().name(), abs("srv"));
        assert_eq!(l.accept().err(), Some(Errno::EAGAIN));
        assert_eq!(c2.connect(&env, &abs("srv")), Ok(0));
        assert_eq!(c2.connect(&env, &abs("srv")), Err(Errno::EISCONN));
        let d = UnixSocket::new(SOCK_DGRAM, env.cred());
        assert_eq!(d.connect(&env, &abs("srv")), Err(Errno::ECONNREFUSED), "another kind's abstract name");
    }
}
