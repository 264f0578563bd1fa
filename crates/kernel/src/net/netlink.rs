//! AF_NETLINK sockets, NETLINK_ROUTE only: how programs ask the kernel about its
//! network interfaces (Go's net.Interfaces and InterfaceAddrs, getifaddrs and
//! if_nameindex in musl and glibc, `ip`). The VM has one interface, `lo` (index
//! 1, `net::iface`), with the loopback addresses `net::inet` serves, 127.0.0.1/8
//! and ::1/128; there is no route table to show and nothing can be configured.
//!
//! - A socket is a queue of reply datagrams under one lock. A request is
//!   answered within `send`, as Linux's rtnetlink answers within the sender's
//!   call: a dump (RTM_GETLINK, RTM_GETADDR with NLM_F_DUMP) is one datagram
//!   holding every message and NLMSG_DONE; a single RTM_GETLINK (by index or
//!   name) one message or ENODEV; anything else an NLMSG_ERROR (EOPNOTSUPP),
//!   and NLM_F_ACK an acknowledgement. A reply that would overflow SO_RCVBUF is
//!   dropped and the next receive says ENOBUFS, as Linux.
//! - Port ids: `bind` with 0 (or the first send) takes the process id, or
//!   when that is taken a negative number from -4097 down, as Linux; a chosen id
//!   must be free. Group subscriptions are accepted; no event ever comes, as
//!   nothing changes. Sending to a port other than the kernel's (0) is
//!   ECONNREFUSED: there is no user-space netlink traffic here.
//! - The message encoding is pure functions ([`dump_links`], [`dump_addrs`]...),
//!   unit-tested on the host.

use super::iface::{Iface, TXQLEN};
use crate::errno::{Errno, SysResult};
use crate::file::socket::{self as sock, msg, opt, Iov, NetEnv, RecvExtra, SendExtra, Socket};
use crate::file::{ev, key_of, File, Meta, OpenFile, Readiness};
use crate::mm::user::UserMem;
use crate::task::sched;
use alloc::boxed::Box;
use alloc::collections::{BTreeSet, VecDeque};
use alloc::vec::Vec;
use core::any::Any;
use onering_arch::sync::Mutex;

pub const AF_NETLINK: u16 = 16;
pub const NETLINK_ROUTE: u64 = 0;
const SOL_NETLINK: u64 = 270;
const SOCK_RAW: u32 = 3;

const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_MIN_TYPE: u16 = 0x10;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_MULTI: u16 = 0x2;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CAPPED: u16 = 0x100;

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;

const IFLA_ADDRESS: u16 = 1;
const IFLA_BROADCAST: u16 = 2;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_QDISC: u16 = 6;
const IFLA_TXQLEN: u16 = 13;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_LINKMODE: u16 = 17;
const IFLA_CARRIER: u16 = 33;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_LABEL: u16 = 3;
const IFA_BROADCAST: u16 = 4;
const IFA_CACHEINFO: u16 = 6;
const IFA_FLAGS: u16 = 8;

const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IFA_F_PERMANENT: u8 = 0x80;
const RT_SCOPE_HOST: u8 = 254;
const RT_SCOPE_UNIVERSE: u8 = 0;

/// Linux's default socket buffer; `setsockopt` doubles what it is given.
const DEFAULT_BUF: u32 = 212_992;
const MIN_BUF: u32 = 2304;
const MAX_BUF: u32 = 2 * 212_992;

// ---- messages ------------------------------------------------------------------------

/// Appends a netlink message: header (`len` filled in), then `body`, padded to 4.
fn message(out: &mut Vec<u8>, ty: u16, flags: u16, seq: u32, port: u32, body: &[u8]) {
    let len = (NLMSG_HDRLEN + body.len()) as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&port.to_le_bytes());
    out.extend_from_slice(body);
    pad(out);
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Appends a route attribute (`struct rtattr`), padded to 4.
fn attr(out: &mut Vec<u8>, ty: u16, data: &[u8]) {
    out.extend_from_slice(&((4 + data.len()) as u16).to_le_bytes());
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(data);
    pad(out);
}

/// The body of RTM_NEWLINK for interface `i`: `struct ifinfomsg` and the
/// attributes Linux puts first.
fn link_body(i: &Iface) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&[AF_UNSPEC, 0]);
    b.extend_from_slice(&i.hwtype.to_le_bytes());
    b.extend_from_slice(&i.index.to_le_bytes());
    b.extend_from_slice(&i.flags.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // ifi_change
    let mut name = i.name.to_vec();
    name.push(0);
    attr(&mut b, IFLA_IFNAME, &name);
    attr(&mut b, IFLA_TXQLEN, &TXQLEN.to_le_bytes());
    // IF_OPER_UNKNOWN for lo, as Linux's; IF_OPER_UP for the device.
    attr(&mut b, IFLA_OPERSTATE, &[if i.is_loopback() { 0 } else { 6 }]);
    attr(&mut b, IFLA_LINKMODE, &[0]);
    attr(&mut b, IFLA_MTU, &i.mtu.to_le_bytes());
    attr(&mut b, IFLA_QDISC, if i.is_loopback() { b"noqueue\0" } else { b"pfifo_fast\0" });
    attr(&mut b, IFLA_CARRIER, &[1]);
    attr(&mut b, IFLA_ADDRESS, &i.mac);
    attr(&mut b, IFLA_BROADCAST, &if i.is_loopback() { [0; 6] } else { [0xff; 6] });
    b
}

/// The bodies of RTM_NEWADDR for every interface's addresses of `family`
/// (AF_UNSPEC: all).
fn addr_bodies(family: u8) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // (Linux's cache info for a permanent address: lifetimes infinite.)
    let mut cache = Vec::new();
    cache.extend_from_slice(&u32::MAX.to_le_bytes());
    cache.extend_from_slice(&u32::MAX.to_le_bytes());
    cache.extend_from_slice(&[0; 8]);
    let flags = u32::from(IFA_F_PERMANENT).to_le_bytes();
    let ifaces = super::iface::all();
    if family == AF_UNSPEC || family == AF_INET {
        for i in &ifaces {
            let Some((a, prefix)) = i.v4 else { continue };
            let mut b = ifaddrmsg(AF_INET, prefix, i);
            let mut label = i.name.to_vec();
            label.push(0);
            attr(&mut b, IFA_ADDRESS, &a);
            attr(&mut b, IFA_LOCAL, &a);
            if !i.is_loopback() {
                attr(&mut b, IFA_BROADCAST, &i.broadcast());
            }
            attr(&mut b, IFA_LABEL, &label);
            attr(&mut b, IFA_FLAGS, &flags);
            attr(&mut b, IFA_CACHEINFO, &cache);
            out.push(b);
        }
    }
    if family == AF_UNSPEC || family == AF_INET6 {
        for i in ifaces.iter().filter(|i| i.v6_loopback) {
            let mut b = ifaddrmsg(AF_INET6, 128, i);
            let mut a = [0u8; 16];
            a[15] = 1;
            attr(&mut b, IFA_ADDRESS, &a);
            attr(&mut b, IFA_CACHEINFO, &cache);
            attr(&mut b, IFA_FLAGS, &flags);
            out.push(b);
        }
    }
    out
}

/// `struct ifaddrmsg` of a permanent address of interface `i` (host scope on lo,
/// universe elsewhere).
fn ifaddrmsg(family: u8, prefix: u8, i: &Iface) -> Vec<u8> {
    let scope = if i.is_loopback() { RT_SCOPE_HOST } else { RT_SCOPE_UNIVERSE };
    let mut b = alloc::vec![family, prefix, IFA_F_PERMANENT, scope];
    b.extend_from_slice(&i.index.to_le_bytes());
    b
}

/// A dump's reply: each message with NLM_F_MULTI, then NLMSG_DONE (its body the
/// int 0), in one datagram.
fn dump(ty: u16, bodies: &[Vec<u8>], seq: u32, port: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bodies {
        message(&mut out, ty, NLM_F_MULTI, seq, port, b);
    }
    message(&mut out, NLMSG_DONE, NLM_F_MULTI, seq, port, &0i32.to_le_bytes());
    out
}

pub fn dump_links(seq: u32, port: u32) -> Vec<u8> {
    let bodies: Vec<Vec<u8>> = super::iface::all().iter().map(link_body).collect();
    dump(RTM_NEWLINK, &bodies, seq, port)
}

pub fn dump_addrs(family: u8, seq: u32, port: u32) -> Vec<u8> {
    dump(RTM_NEWADDR, &addr_bodies(family), seq, port)
}

/// NLMSG_ERROR for request header `req` (`err` 0: an acknowledgement); the
/// request is quoted by its header only (NLM_F_CAPPED, as with NETLINK_CAP_ACK).
fn error(req: &[u8], err: i32, port: u32) -> Vec<u8> {
    let mut body = err.to_le_bytes().to_vec();
    body.extend_from_slice(&req[..NLMSG_HDRLEN]);
    let seq = u32::from_le_bytes([req[8], req[9], req[10], req[11]]);
    let mut out = Vec::new();
    message(&mut out, NLMSG_ERROR, NLM_F_CAPPED, seq, port, &body);
    out
}

/// A single RTM_GETLINK: by `ifi_index`, else by IFLA_IFNAME.
fn get_link(m: &[u8], seq: u32, port: u32) -> Result<Vec<u8>, Errno> {
    let body = m.get(NLMSG_HDRLEN..NLMSG_HDRLEN + 16).ok_or(Errno::EINVAL)?;
    let index = i32::from_le_bytes([body[4], body[5], body[6], body[7]]);
    let found = if index > 0 {
        super::iface::by_index(index as u32)
    } else {
        // IFLA_IFNAME among the attributes after the ifinfomsg.
        let mut name = None;
        let mut at = NLMSG_HDRLEN + 16;
        while at + 4 <= m.len() {
            let len = u16::from_le_bytes([m[at], m[at + 1]]) as usize;
            let ty = u16::from_le_bytes([m[at + 2], m[at + 3]]);
            if len < 4 || at + len > m.len() {
                break;
            }
            if ty == IFLA_IFNAME {
                let v = &m[at + 4..at + len];
                name = Some(v.split(|b| *b == 0).next().unwrap_or_default());
            }
            at += len.next_multiple_of(4);
        }
        match name {
            Some(n) => super::iface::by_name(n),
            None => return Err(Errno::EINVAL),
        }
    };
    let i = found.ok_or(Errno::ENODEV)?;
    let mut out = Vec::new();
    message(&mut out, RTM_NEWLINK, 0, seq, port, &link_body(&i));
    Ok(out)
}

/// The datagrams answering request bytes `req` from `port`, in order.
pub fn answer(req: &[u8], port: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= req.len() {
        let m = &req[at..];
        let len = u32::from_le_bytes([m[0], m[1], m[2], m[3]]) as usize;
        if len < NLMSG_HDRLEN || len > m.len() {
            break; // (Linux ignores the rest)
        }
        let m = &m[..len];
        let ty = u16::from_le_bytes([m[4], m[5]]);
        let flags = u16::from_le_bytes([m[6], m[7]]);
        let seq = u32::from_le_bytes([m[8], m[9], m[10], m[11]]);
        let r: Result<Option<Vec<u8>>, Errno> = if flags & NLM_F_REQUEST == 0 || ty < NLMSG_MIN_TYPE {
            Ok(None) // not a request, or a control message: nothing to do
        } else if flags & NLM_F_DUMP != 0 && ty == RTM_GETLINK {
            Ok(Some(dump_links(seq, port)))
        } else if flags & NLM_F_DUMP != 0 && ty == RTM_GETADDR {
            // (The family: the first byte of the rtgenmsg or ifaddrmsg, if any.)
            Ok(Some(dump_addrs(m.get(NLMSG_HDRLEN).copied().unwrap_or(AF_UNSPEC), seq, port)))
        } else if ty == RTM_GETLINK {
            get_link(m, seq, port).map(Some)
        } else {
            Err(Errno::EOPNOTSUPP)
        };
        match r {
            Ok(reply) => {
                let dumped = reply.is_some() && flags & NLM_F_DUMP != 0;
                out.extend(reply);
                if flags & NLM_F_ACK != 0 && !dumped {
                    out.push(error(m, 0, port));
                }
            }
            Err(e) => out.push(error(m, -(e as i32), port)),
        }
        at += len.next_multiple_of(4);
    }
    out
}

// ---- port ids -----------------------------------------------------------------------

struct Ports {
    taken: BTreeSet<u32>,
    rover: i32,
}

static PORTS: Mutex<Ports> = Mutex::new(Ports { taken: BTreeSet::new(), rover: -4097 });

/// Takes port `want` (EADDRINUSE if taken), or with 0 the process id `pid` or
/// the next free negative number.
fn take_port(want: u32, pid: u32) -> Result<u32, Errno> {
    let mut p = PORTS.lock();
    if want != 0 {
        if !p.taken.insert(want) {
            return Err(Errno::EADDRINUSE);
        }
        return Ok(want);
    }
    if pid != 0 && p.taken.insert(pid) {
        return Ok(pid);
    }
    for _ in 0..1 << 20 {
        let id = p.rover as u32;
        p.rover = if p.rover <= i32::MIN + 1 { -4097 } else { p.rover - 1 };
        if p.taken.insert(id) {
            return Ok(id);
        }
    }
    Err(Errno::EADDRINUSE)
}

// ---- the socket -------------------------------------------------------------------------

struct State {
    /// Our port id (0: not bound yet) and subscribed groups.
    port: u32,
    groups: u32,
    /// connect's destination port (0: the kernel).
    dest: u32,
    queue: VecDeque<Vec<u8>>,
    bytes: usize,
    /// ENOBUFS after a dropped reply, for the next receive.
    error: Option<Errno>,
    rcvbuf: u32,
    sndbuf: u32,
    rcvtimeo: u64,
    sndtimeo: u64,
    /// Options read back as set: (level, name) -> value.
    misc: Vec<((u64, u64), i32)>,
    gen: u64,
}

/// A NETLINK_ROUTE socket.
pub struct NetlinkSocket {
    kind: u32,
    /// Boxed: its address is the wait key.
    st: Box<Mutex<State>>,
}

impl NetlinkSocket {
    /// A new socket (`kind` SOCK_RAW or SOCK_DGRAM; `proto` NETLINK_ROUTE).
    pub fn new(kind: u32, proto: u64) -> Result<NetlinkSocket, Errno> {
        if kind != SOCK_RAW && kind != sock::SOCK_DGRAM {
            return Err(Errno::ESOCKTNOSUPPORT);
        }
        if proto != NETLINK_ROUTE {
            return Err(Errno::EPROTONOSUPPORT);
        }
        let st = State {
            port: 0,
            groups: 0,
            dest: 0,
            queue: VecDeque::new(),
            bytes: 0,
            error: None,
            rcvbuf: DEFAULT_BUF,
            sndbuf: DEFAULT_BUF,
            rcvtimeo: 0,
            sndtimeo: 0,
            misc: Vec::new(),
            gen: 0,
        };
        Ok(NetlinkSocket { kind, st: Box::new(Mutex::new(st)) })
    }

    fn key(&self) -> u64 {
        key_of(&*self.st)
    }

    fn autobind(st: &mut State, pid: u32) -> Result<(), Errno> {
        if st.port == 0 {
            st.port = take_port(0, pid)?;
        }
        Ok(())
    }
}

impl Drop for NetlinkSocket {
    fn drop(&mut self) {
        let port = self.st.lock().port;
        if port != 0 {
            PORTS.lock().taken.remove(&port);
        }
    }
}

/// Parses a `sockaddr_nl`: (port, groups).
fn parse_addr(a: &[u8]) -> Result<(u32, u32), Errno> {
    if a.len() < 12 {
        return Err(Errno::EINVAL);
    }
    if u16::from_le_bytes([a[0], a[1]]) != AF_NETLINK {
        return Err(Errno::EINVAL);
    }
    let w = |o: usize| u32::from_le_bytes([a[o], a[o + 1], a[o + 2], a[o + 3]]);
    Ok((w(4), w(8)))
}

fn encode(port: u32, groups: u32) -> Vec<u8> {
    let mut v = AF_NETLINK.to_le_bytes().to_vec();
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&port.to_le_bytes());
    v.extend_from_slice(&groups.to_le_bytes());
    v
}

impl Socket for NetlinkSocket {
    fn domain(&self) -> u16 {
        AF_NETLINK
    }

    fn kind(&self) -> u32 {
        self.kind
    }

    fn bind(&self, env: &dyn NetEnv, addr: &[u8]) -> SysResult {
        let (port, groups) = parse_addr(addr)?;
        let mut st = self.st.lock();
        if st.port != 0 {
            // Bound already: only the same id (groups may change).
            if port != 0 && port != st.port {
                return Err(Errno::EINVAL);
            }
        } else {
            st.port = take_port(port, env.cred().pid)?;
        }
        st.groups = groups;
        Ok(0)
    }

    fn connect(&self, env: &dyn NetEnv, addr: &[u8]) -> SysResult {
        if addr.len() >= 2 && u16::from_le_bytes([addr[0], addr[1]]) == 0 {
            self.st.lock().dest = 0; // AF_UNSPEC: back to the kernel
            return Ok(0);
        }
        let (port, _) = parse_addr(addr)?;
        let mut st = self.st.lock();
        Self::autobind(&mut st, env.cred().pid)?;
        st.dest = port;
        Ok(0)
    }

    fn send(&self, env: &dyn NetEnv, user: &dyn UserMem, iov: &Iov, extra: SendExtra) -> SysResult {
        let len = iov.len();
        let dest = match &extra.addr {
            Some(a) => parse_addr(a)?.0,
            None => self.st.lock().dest,
        };
        {
            let st = self.st.lock();
            if len > u64::from(st.sndbuf) {
                return Err(Errno::EMSGSIZE);
            }
        }
        if dest != 0 {
            return Err(Errno::ECONNREFUSED); // no user-space peers here
        }
        let mut req = Vec::new();
        req.try_reserve_exact(len as usize).map_err(|_| Errno::ENOBUFS)?;
        req.resize(len as usize, 0);
        iov.read_at(user, 0, &mut req)?;
        let mut st = self.st.lock();
        Self::autobind(&mut st, env.cred().pid)?;
        let replies = answer(&req, st.port);
        let any = !replies.is_empty();
        for r in replies {
            if st.bytes + r.len() > st.rcvbuf as usize {
                st.error = Some(Errno::ENOBUFS);
                continue;
            }
            st.bytes += r.len();
            st.queue.push_back(r);
        }
        if any {
            st.gen += 1;
            drop(st);
            sched::wake_all(self.key());
        }
        Ok(len)
    }

    fn recv(&self, user: &dyn UserMem, iov: &Iov, flags: u32) -> Result<(u64, RecvExtra), Errno> {
        let mut st = self.st.lock();
        if let Some(e) = st.error.take() {
            return Err(e);
        }
        let d = st.queue.front().ok_or(Errno::EAGAIN)?;
        let want = iov.len();
        let n = (d.len() as u64).min(want);
        iov.write_at(user, 0, &d[..n as usize])?;
        let full = d.len() as u64;
        let mut extra = RecvExtra { addr: Some(encode(0, 0)), ..RecvExtra::default() };
        if full > want {
            extra.flags |= msg::TRUNC;
        }
        if flags & msg::PEEK == 0 {
            st.bytes -= d.len();
            st.queue.pop_front();
            st.gen += 1;
        }
        Ok((if flags & msg::TRUNC != 0 { full } else { n }, extra))
    }

    fn shutdown(&self, _: u64) -> SysResult {
        Err(Errno::EOPNOTSUPP)
    }

    fn name(&self) -> Vec<u8> {
        let st = self.st.lock();
        encode(st.port, st.groups)
    }

    fn peer(&self) -> Result<Vec<u8>, Errno> {
        Ok(encode(self.st.lock().dest, 0))
    }

    fn getopt(&self, level: u64, name: u64) -> Result<Vec<u8>, Errno> {
        let mut st = self.st.lock();
        let int = |v: i32| Ok(v.to_le_bytes().to_vec());
        match (level, name) {
            (opt::SOL_SOCKET, opt::SO_TYPE) => int(self.kind as i32),
            (opt::SOL_SOCKET, opt::SO_DOMAIN) => int(i32::from(AF_NETLINK)),
            (opt::SOL_SOCKET, opt::SO_PROTOCOL) => int(NETLINK_ROUTE as i32),
            (opt::SOL_SOCKET, opt::SO_ERROR) => int(st.error.take().map_or(0, |e| e as i32)),
            (opt::SOL_SOCKET, opt::SO_SNDBUF) => int(st.sndbuf as i32),
            (opt::SOL_SOCKET, opt::SO_RCVBUF) => int(st.rcvbuf as i32),
            (opt::SOL_SOCKET, opt::SO_RCVTIMEO) => Ok(sock::timeval_bytes(st.rcvtimeo)),
            (opt::SOL_SOCKET, opt::SO_SNDTIMEO) => Ok(sock::timeval_bytes(st.sndtimeo)),
            (l, n) if known_opt(l, n) => int(st.misc.iter().find(|m| m.0 == (l, n)).map_or(0, |m| m.1)),
            _ => Err(Errno::ENOPROTOOPT),
        }
    }

    fn setopt(&self, level: u64, name: u64, val: &[u8]) -> SysResult {
        let mut st = self.st.lock();
        let buf = |v: i32| (v.max(0) as u32).min(MAX_BUF / 2).saturating_mul(2).max(MIN_BUF);
        match (level, name) {
            (opt::SOL_SOCKET, opt::SO_RCVTIMEO) => st.rcvtimeo = sock::timeval_opt(val)?,
            (opt::SOL_SOCKET, opt::SO_SNDTIMEO) => st.sndtimeo = sock::timeval_opt(val)?,
            (opt::SOL_SOCKET, opt::SO_SNDBUF | opt::SO_SNDBUFFORCE) => st.sndbuf = buf(sock::int_opt(val)?),
            (opt::SOL_SOCKET, opt::SO_RCVBUF | opt::SO_RCVBUFFORCE) => st.rcvbuf = buf(sock::int_opt(val)?),
            (l, n) if known_opt(l, n) => {
                let v = sock::int_opt(val)?;
                st.misc.retain(|m| m.0 != (l, n));
                st.misc.push(((l, n), v));
            }
            _ => return Err(Errno::ENOPROTOOPT),
        }
        Ok(0)
    }

    fn inq(&self) -> u64 {
        self.st.lock().queue.front().map_or(0, |d| d.len() as u64)
    }

    fn timeouts(&self) -> (u64, u64) {
        let st = self.st.lock();
        (st.rcvtimeo, st.sndtimeo)
    }
}

/// Options accepted and read back (there are no events, so membership and the
/// reporting switches change nothing).
fn known_opt(level: u64, name: u64) -> bool {
    match level {
        // NETLINK_ADD_MEMBERSHIP .. NETLINK_GET_STRICT_CHK, as Linux knows them.
        SOL_NETLINK => (1..=12).contains(&name),
        opt::SOL_SOCKET => matches!(name, opt::SO_PASSCRED | opt::SO_REUSEADDR | opt::SO_BROADCAST),
        _ => false,
    }
}

impl File for NetlinkSocket {
    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        super::read(self, user, buf, len, off)
    }

    fn write(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        super::write(self, user, buf, len, off)
    }

    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        let st = self.st.lock();
        let mut e = ev::OUT | ev::WRNORM;
        if !st.queue.is_empty() {
            e |= ev::IN | ev::RDNORM;
        }
        if st.error.is_some() {
            e |= ev::ERR;
        }
        Some(Readiness { events: e, gen: st.gen, key: self.key() })
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.key())
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        match request {
            0x541b => {
                user.write(arg, &(self.inq().min(i32::MAX as u64) as u32).to_le_bytes())?;
                Ok(0)
            }
            _ => super::iface::ioctl(user, AF_NETLINK, request, arg).unwrap_or(Err(Errno::ENOTTY)),
        }
    }

    fn stat(&self) -> Meta {
        super::socket_stat(self.key() & 0xffff_ffff)
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

    /// The messages in a datagram: (type, flags, seq, port, body).
    fn parse(d: &[u8]) -> Vec<(u16, u16, u32, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 16 <= d.len() {
            let len = u32::from_le_bytes(d[at..at + 4].try_into().unwrap()) as usize;
            let w = |o: usize| u32::from_le_bytes(d[at + o..at + o + 4].try_into().unwrap());
            out.push((
                u16::from_le_bytes([d[at + 4], d[at + 5]]),
                u16::from_le_bytes([d[at + 6], d[at + 7]]),
                w(8),
                w(12),
                d[at + 16..at + len].to_vec(),
            ));
            at += len.next_multiple_of(4);
        }
        assert_eq!(at, d.len(), "messages fill the datagram exactly");
        out
    }

    fn request(ty: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        message(&mut v, ty, flags, seq, 0, body);
        v
    }

    /// The attributes of a body after its fixed header of `skip` bytes.
    fn attrs(b: &[u8], skip: usize) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = skip;
        while at + 4 <= b.len() {
            let len = u16::from_le_bytes([b[at], b[at + 1]]) as usize;
            out.push((u16::from_le_bytes([b[at + 2], b[at + 3]]), b[at + 4..at + len].to_vec()));
            at += len.next_multiple_of(4);
        }
        out
    }

    #[test]
    fn a_link_dump_is_lo_then_done() {
        let r = answer(&request(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, 7, &[0; 16]), 42);
        assert_eq!(r.len(), 1, "one datagram");
        let m = parse(&r[0]);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].0, m[0].1, m[0].2, m[0].3), (RTM_NEWLINK, NLM_F_MULTI, 7, 42));
        let b = &m[0].4;
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 1, "index");
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), super::super::iface::LO_FLAGS);
        let a = attrs(b, 16);
        assert!(a.contains(&(IFLA_IFNAME, b"lo\0".to_vec())));
        assert_eq!((m[1].0, m[1].4.clone()), (NLMSG_DONE, vec![0; 4]));
    }

    #[test]
    fn an_address_dump_filters_by_family() {
        let all = parse(&answer(&request(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 1, &[0]), 5)[0]);
        assert_eq!(all.len(), 3);
        assert_eq!(&all[0].4[..4], &[AF_INET, 8, IFA_F_PERMANENT, RT_SCOPE_HOST]);
        assert_eq!(attrs(&all[0].4, 8)[0], (IFA_ADDRESS, vec![127, 0, 0, 1]));
        assert_eq!(&all[1].4[..2], &[AF_INET6, 128]);
        let six = parse(&answer(&request(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 1, &[AF_INET6]), 5)[0]);
        assert_eq!(six.len(), 2);
        assert_eq!(six[0].4[0], AF_INET6);
    }

    #[test]
    fn single_requests_errors_and_acks() {
        let mut by_index = vec![0u8; 16];
        by_index[4] = 1;
        let m = parse(&answer(&request(RTM_GETLINK, NLM_F_REQUEST, 3, &by_index), 9)[0]);
        assert_eq!((m.len(), m[0].0, m[0].1), (1, RTM_NEWLINK, 0));
        by_index[4] = 2;
        let m = parse(&answer(&request(RTM_GETLINK, NLM_F_REQUEST, 3, &by_index), 9)[0]);
        assert_eq!(m[0].0, NLMSG_ERROR);
        assert_eq!(i32::from_le_bytes(m[0].4[..4].try_into().unwrap()), -(Errno::ENODEV as i32));
        let mut by_name = vec![0u8; 16];
        attr(&mut by_name, IFLA_IFNAME, b"lo\0");
        let r = answer(&request(RTM_GETLINK, NLM_F_REQUEST | NLM_F_ACK, 4, &by_name), 9);
        assert_eq!(r.len(), 2, "the link, then the acknowledgement");
        let ack = parse(&r[1]);
        assert_eq!((ack[0].0, i32::from_le_bytes(ack[0].4[..4].try_into().unwrap())), (NLMSG_ERROR, 0));
        let r = answer(&request(24, NLM_F_REQUEST | NLM_F_DUMP, 5, &[0; 12]), 9);
        let m = parse(&r[0]);
        assert_eq!(i32::from_le_bytes(m[0].4[..4].try_into().unwrap()), -(Errno::EOPNOTSUPP as i32));
        assert!(answer(&[1, 2, 3], 9).is_empty(), "too short: ignored");
        let mut bad = request(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, 1, &[0; 16]);
        bad[0] = 200;
        assert!(answer(&bad, 9).is_empty(), "a length past the end: ignored");
    }

    #[test]
    fn garbage_requests_never_panic() {
        // Seeded: valid requests with bytes flipped, cut short, or lengths forged.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut by_name = vec![0u8; 16];
        attr(&mut by_name, IFLA_IFNAME, b"lo\0");
        let seeds = [
            request(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, 1, &[0; 16]),
            request(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP | NLM_F_ACK, 2, &[AF_INET6]),
            request(RTM_GETLINK, NLM_F_REQUEST | NLM_F_ACK, 3, &by_name),
        ];
        for i in 0..20_000 {
            let mut m = seeds[i % seeds.len()].clone();
            m.extend_from_slice(&seeds[(i / 3) % seeds.len()]);
            for _ in 0..(next() % 4) {
                let at = (next() as usize) % m.len();
                m[at] = next() as u8;
            }
            let cut = (next() as usize) % (m.len() + 1);
            for d in answer(&m[..cut], 7) {
                assert!(d.len() >= 16 && d.len() % 4 == 0);
            }
        }
    }

    #[test]
    fn ports_are_the_pid_then_negative() {
        let a = take_port(0, 77).unwrap();
        let b = take_port(0, 77).unwrap();
        assert_eq!(a, 77);
        assert!((b as i32) < -4096);
        assert_eq!(take_port(77, 1), Err(Errno::EADDRINUSE));
        PORTS.lock().taken.remove(&a);
        PORTS.lock().taken.remove(&b);
    }
}
