//! AF_INET and AF_INET6 sockets, TCP and UDP, on smoltcp over a loopback
//! interface (127.0.0.1/8 and ::1): everything inside the VM (the network
//! device comes with issue 15).
//!
//! - One stack ([`Stack`]: the interface, smoltcp's sockets and our sockets'
//!   state) under one lock. Protocol work runs on the calling thread, as the
//!   seed's in-application processing: every operation that may produce or
//!   consume packets ends with [`Stack::pump`], which runs smoltcp until no socket
//!   has work (a send is delivered to its receiver within the sender's call), then
//!   wakes the sockets whose readiness changed. No network thread, no tick: a
//!   thread that waits on a socket also waits for the stack's next timer and
//!   pumps when it wakes.
//! - Every smoltcp socket is in a socket set of its own ([`Shard`]): smoltcp walks
//!   all the sockets of the set it polls, per packet, so one set for all made
//!   every packet cost as much as there were connections. `pump` runs only the
//!   shards that have work, and [`Stack::route`] hands each packet sent to the
//!   shard it is for (by connection, listener, or UDP port; `net::route` parses).
//! - smoltcp has no accept queue: a listener keeps a pool of smoltcp sockets in
//!   LISTEN; each one a SYN claims is replaced, and those that reach ESTABLISHED
//!   wait for `accept` (the backlog bounds pool and queue together; SYNs beyond
//!   it wait for room, as Linux's clients send theirs again).
//! - Ports (bind, ephemeral 32768-60999, SO_REUSEADDR / SO_REUSEPORT, the
//!   dual-stack rule of IPV6_V6ONLY) are ours: smoltcp does not manage them.
//! - Buffers are fixed when a smoltcp socket is made (SO_RCVBUF/SO_SNDBUF set
//!   before connect or listen size them); they come from the kernel heap, which
//!   `--mem` bounds, and exhaustion is ENOBUFS, never a panic.
//! - Errors are Linux's: `observe` tells a reset from an orderly end (smoltcp
//!   forgets), closed connections that data still reaches are reset
//!   (`reset_orphan`), and ICMP port unreachable on the loopback gives a
//!   connected UDP sender ECONNREFUSED (`unreachable_udp`).
//! - Readiness: a signature of each socket's state, and a generation bumped
//!   whenever it changes (what edge-triggered epoll compares).

use crate::errno::{Errno, SysResult};
use crate::file::socket::{self as sock, msg, opt, Iov, NetEnv, RecvExtra, SendExtra, Socket};
use crate::file::socket::{AF_INET, AF_INET6, SHUT_RD, SHUT_RDWR, SHUT_WR, SOCK_DGRAM, SOCK_STREAM};
use crate::file::{ev, key_of, File, FileRef, Meta, OpenFile, Readiness};
use crate::mm::user::UserMem;
use crate::net::ether::Ether;
use crate::net::fuse;
use crate::net::route;
use crate::net::slab::Slab;
use crate::task::sched;
use crate::time::mono_now;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::any::Any;
use core::net::{Ipv4Addr, Ipv6Addr};
use core::sync::atomic::{AtomicU64, Ordering};
use onering_arch::sync::Mutex;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::socket::{tcp, udp};
use smoltcp::time::Instant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpEndpoint, IpListenEndpoint};
use spin::Once;

pub const IPPROTO_TCP: u64 = 6;
pub const IPPROTO_UDP: u64 = 17;
const IPPROTO_ICMP: u64 = 1;
const IPPROTO_ICMPV6: u64 = 58;
/// Protocol numbers Linux knows end below this (IPPROTO_MPTCP is 262).
const IPPROTO_MAX: u64 = 263;
const SOCK_RAW: u32 = 3;
const IPPROTO_IP: u64 = 0;
const IPPROTO_IPV6: u64 = 41;
const TCP_NODELAY: u64 = 1;
const TCP_MAXSEG: u64 = 2;
const TCP_KEEPIDLE: u64 = 4;
const TCP_KEEPINTVL: u64 = 5;
const TCP_KEEPCNT: u64 = 6;
const TCP_INFO: u64 = 11;
const TCP_QUICKACK: u64 = 12;
const TCP_USER_TIMEOUT: u64 = 18;
const TCP_FASTOPEN: u64 = 23;
const TCP_CONGESTION: u64 = 13;
const IP_TOS: u64 = 1;
const IP_TTL: u64 = 2;
const IP_MULTICAST_IF: u64 = 32;
const IP_MULTICAST_TTL: u64 = 33;
const IP_MULTICAST_LOOP: u64 = 34;
const IP_ADD_MEMBERSHIP: u64 = 35;
const IP_DROP_MEMBERSHIP: u64 = 36;
const IP_RECVERR: u64 = 11;
const IPV6_UNICAST_HOPS: u64 = 16;
const IPV6_MULTICAST_IF: u64 = 17;
const IPV6_MULTICAST_HOPS: u64 = 18;
const IPV6_MULTICAST_LOOP: u64 = 19;
const IPV6_V6ONLY: u64 = 26;
const IPV6_TCLASS: u64 = 67;

/// The smallest TCP buffers, each way (SO_RCVBUF / SO_SNDBUF may ask for more,
/// up to 4x; smoltcp's buffers do not grow afterwards).
const TCP_BUF_MIN: usize = 8 * 1024;
const TCP_BUF_MAX: usize = 256 * 1024;
/// SO_RCVBUF's default (Linux's `tcp_rmem[1]`).
const RCVBUF_DEFAULT: u32 = 131072;
const UDP_BUF: usize = 64 * 1024;
const UDP_PACKETS: usize = 256;
/// Largest UDP payload over IPv4.
const UDP_MAX: usize = 65507;
const EPHEMERAL: core::ops::RangeInclusive<u16> = 32768..=60999;
/// Rounds of smoltcp per pump at most (each empties the loopback queue once).
/// Most shard runs in one pump (a bound on the work of one call; a pump that
/// stops early leaves the rest dirty for the next).
const PUMP_ROUNDS: usize = 4096;
/// SYNs held for a full backlog, per listener.
const DEFERRED_MAX: usize = 4096;
pub const MTU: usize = 65535;

// ---- one socket set per smoltcp socket ------------------------------------------

/// A smoltcp socket's name here: its shard.
type Ref = u64;

/// The device a shard is polled with: the packets routed to it come in, what it
/// sends goes out to be routed.
struct ShardDev<'a> {
    rx: &'a mut VecDeque<Vec<u8>>,
    out: &'a mut Vec<Vec<u8>>,
}

/// If IP packet `p` is an ICMP or ICMPv6 "destination unreachable" about a UDP
/// datagram, that datagram's source and destination.
fn unreachable_udp(p: &[u8]) -> Option<(IpEndpoint, IpEndpoint)> {
    let ep = |a: IpAddress, port: &[u8]| IpEndpoint::new(a, u16::from_be_bytes([port[0], port[1]]));
    match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0xf) * 4;
            // ICMP type 3, then the datagram's IP header and its first 8 bytes.
            if *p.get(9)? != 1 || *p.get(ihl)? != 3 {
                return None;
            }
            let o = p.get(ihl + 8..)?;
            let oihl = usize::from(o.first()? & 0xf) * 4;
            if *o.get(9)? != IPPROTO_UDP as u8 {
                return None;
            }
            let (src, dst) = (o.get(12..16)?, o.get(16..20)?);
            let udp = o.get(oihl..oihl + 4)?;
            let v4 = |b: &[u8]| IpAddress::Ipv4(Ipv4Addr::new(b[0], b[1], b[2], b[3]));
            Some((ep(v4(src), &udp[..2]), ep(v4(dst), &udp[2..])))
        }
        6 => {
            // ICMPv6 type 1, then the datagram's IPv6 header (smoltcp adds no
            // extension headers) and its first bytes.
            if *p.get(6)? != 58 || *p.get(40)? != 1 {
                return None;
            }
            let o = p.get(48..)?;
            if *o.get(6)? != IPPROTO_UDP as u8 {
                return None;
            }
            let v6 = |b: &[u8]| {
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                IpAddress::Ipv6(Ipv6Addr::from(a))
            };
            let udp = o.get(40..44)?;
            Some((ep(v6(o.get(8..24)?), &udp[..2]), ep(v6(o.get(24..40)?), &udp[2..])))
        }
        _ => None,
    }
}

struct DevRx(Vec<u8>);
struct DevTx<'a>(&'a mut Vec<Vec<u8>>);

impl phy::RxToken for DevRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for DevTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0u8; len];
        let r = f(&mut buf);
        self.0.push(buf);
        r
    }
}

impl Device for ShardDev<'_> {
    type RxToken<'a>
        = DevRx
    where
        Self: 'a;
    type TxToken<'a>
        = DevTx<'a>
    where
        Self: 'a;

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.max_transmission_unit = MTU;
        c.medium = Medium::Ip;
        // Loopback: nothing corrupts a packet.
        c.checksum = ChecksumCapabilities::ignored();
        c
    }

    fn receive(&mut self, _: Instant) -> Option<(DevRx, DevTx<'_>)> {
        let p = self.rx.pop_front()?;
        Some((DevRx(p), DevTx(self.out)))
    }

    fn transmit(&mut self, _: Instant) -> Option<DevTx<'_>> {
        Some(DevTx(self.out))
    }
}

/// One smoltcp socket in a socket set of its own (smoltcp walks every socket of
/// the set it polls, on every packet: with one set for all, ten thousand idle
/// connections made each packet cost milliseconds).
struct Shard {
    set: SocketSet<'static>,
    h: SocketHandle,
    /// Packets routed to it, not yet taken in.
    rx: VecDeque<Vec<u8>>,
    /// The socket (`Sock` id) whose readiness it makes; 0 for none (closing).
    owner: u64,
    /// The TCP connection's (local, remote) endpoints it is found by.
    tuple: Option<(IpEndpoint, IpEndpoint)>,
    /// When smoltcp next needs to run it (µs), as filed in `Shards::timers`.
    deadline: Option<i64>,
    /// Whether it is on `Shards::dirty`.
    queued: bool,
}

/// Every smoltcp socket, each in its shard, and where packets go.
#[derive(Default)]
struct Shards {
    map: Slab<Shard>,
    /// Shards with work: changed by a call, or packets routed to them.
    /// (A queue, each shard on it once: `Shard::queued`.)
    dirty: VecDeque<Ref>,
    /// TCP connections by (local, remote) endpoint.
    conns: BTreeMap<(IpEndpoint, IpEndpoint), Ref>,
    /// UDP sockets by local port.
    udp: BTreeMap<u16, Vec<Ref>>,
    /// Shards by the time smoltcp next needs them (µs).
    timers: BTreeSet<(i64, Ref)>,
    /// An empty set: packets nobody takes are polled with it, so smoltcp answers
    /// them (a reset for TCP).
    nobody: Option<SocketSet<'static>>,
    nobody_rx: VecDeque<Vec<u8>>,
}

impl Shards {
    fn get<T: smoltcp::socket::AnySocket<'static>>(&self, r: Ref) -> &T {
        let sh = self.map.get(r).expect("a socket of the stack");
        sh.set.get::<T>(sh.h)
    }

    /// Marks shard `r` to run at the next pump (and tells waiters the stack has
    /// work now).
    fn mark(&mut self, r: Ref) {
        if let Some(sh) = self.map.get_mut(r) {
            if !core::mem::replace(&mut sh.queued, true) {
                self.dirty.push_back(r);
            }
        }
        NEXT_RUN.store(0, Ordering::Relaxed);
    }

    /// The next shard with work, taken off the queue.
    fn next_dirty(&mut self) -> Option<Ref> {
        let r = self.dirty.pop_front()?;
        if let Some(sh) = self.map.get_mut(r) {
            sh.queued = false;
        }
        Some(r)
    }

    /// When the stack next needs to run (monotonic ns; 0: now, u64::MAX: never).
    fn next_run(&self) -> u64 {
        if !self.dirty.is_empty() || !self.nobody_rx.is_empty() {
            return 0;
        }
        self.timers.first().map_or(u64::MAX, |(at, _)| ((*at).max(0) as u64).saturating_mul(1000))
    }

    /// The socket, to change: its shard is polled at the next pump.
    fn get_mut<T: smoltcp::socket::AnySocket<'static>>(&mut self, r: Ref) -> &mut T {
        self.mark(r);
        let sh = self.map.get_mut(r).expect("a socket of the stack");
        sh.set.get_mut::<T>(sh.h)
    }

    fn add<T: smoltcp::socket::AnySocket<'static>>(&mut self, sock: T) -> Result<Ref, Errno> {
        let mut storage = Vec::new();
        storage.try_reserve_exact(1).map_err(|_| Errno::ENOBUFS)?;
        let mut set = SocketSet::new(storage);
        let h = set.add(sock);
        let shard = Shard { set, h, rx: VecDeque::new(), owner: 0, tuple: None, deadline: None, queued: false };
        let r = self.map.insert(shard).map_err(|_| Errno::ENOBUFS)?;
        self.mark(r);
        Ok(r)
    }

    fn remove(&mut self, r: Ref) {
        let Some(sh) = self.map.remove(r) else { return };
        if let Some(t) = sh.tuple {
            if self.conns.get(&t) == Some(&r) {
                self.conns.remove(&t);
            }
        }
        if let Some(d) = sh.deadline {
            self.timers.remove(&(d, r));
        }
        // A UDP socket leaves its port's list (TCP shards were never on one).
        let udp_port = match sh.set.iter().next() {
            Some((_, smoltcp::socket::Socket::Udp(u))) => Some(u.endpoint().port),
            _ => None,
        };
        if let Some(port) = udp_port {
            if let Some(v) = self.udp.get_mut(&port) {
                v.retain(|x| *x != r);
                if v.is_empty() {
                    self.udp.remove(&port);
                }
            }
        }
    }

    /// Names `owner` as the socket whose readiness shard `r` makes.
    fn own(&mut self, r: Ref, owner: u64) {
        if let Some(sh) = self.map.get_mut(r) {
            sh.owner = owner;
        }
    }

    fn owner(&self, r: Ref) -> u64 {
        self.map.get(r).map_or(0, |sh| sh.owner)
    }

    /// Files UDP socket `r` under its local port.
    fn add_udp(&mut self, port: u16, r: Ref) {
        self.udp.entry(port).or_default().push(r);
    }

    /// Marks the shards whose timer is due at `now` (µs) to run.
    fn due(&mut self, now: i64) {
        while let Some(&(at, r)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, r));
            if let Some(sh) = self.map.get_mut(r) {
                sh.deadline = None;
            }
            self.mark(r);
        }
    }

    /// Keeps the connection table and the timers up to date for shard `r`
    /// (after it ran).
    fn refile(&mut self, iface: &mut Interface, t: Instant, r: Ref) {
        let Some(sh) = self.map.get_mut(r) else { return };
        if let Some((_, smoltcp::socket::Socket::Tcp(tcp))) = sh.set.iter().next() {
            let tuple = tcp.local_endpoint().zip(tcp.remote_endpoint());
            if tuple != sh.tuple {
                if let Some(old) = sh.tuple {
                    if self.conns.get(&old) == Some(&r) {
                        self.conns.remove(&old);
                    }
                }
                if let Some(new) = tuple {
                    self.conns.insert(new, r);
                }
                sh.tuple = tuple;
            }
        }
        let at = iface.poll_at(t, &sh.set).map(|i| i.total_micros());
        if at != sh.deadline {
            if let Some(d) = sh.deadline {
                self.timers.remove(&(d, r));
            }
            if let Some(d) = at {
                self.timers.insert((d, r));
            }
            sh.deadline = at;
        }
    }
}

// ---- our sockets' state ---------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
}

/// What a socket is now.
enum Role {
    /// Made, maybe bound; no smoltcp socket yet.
    Fresh,
    Udp(Ref),
    Listener {
        pool: Vec<Ref>,
        ready: VecDeque<Ref>,
        backlog: usize,
    },
    /// A TCP connection (or one being made).
    Conn(Ref),
}

/// Options, as stored and read back.
#[derive(Clone)]
struct Opts {
    reuseaddr: bool,
    reuseport: bool,
    keepalive: bool,
    nodelay: bool,
    v6only: bool,
    broadcast: bool,
    rcvtimeo: u64,
    sndtimeo: u64,
    sndbuf: u32,
    rcvbuf: u32,
    linger: [u8; 8],
    ttl: i32,
    keepidle: i32,
    keepintvl: i32,
    keepcnt: i32,
    /// Others read back as stored: (level, name) -> value.
    misc: Vec<((u64, u64), i32)>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            reuseaddr: false,
            reuseport: false,
            keepalive: false,
            nodelay: false,
            v6only: false,
            broadcast: false,
            rcvtimeo: 0,
            sndtimeo: 0,
            sndbuf: 16384,
            rcvbuf: RCVBUF_DEFAULT,
            linger: [0; 8],
            ttl: 64,
            keepidle: 7200,
            keepintvl: 75,
            keepcnt: 9,
            misc: Vec::new(),
        }
    }
}

struct Sock {
    family: u16,
    proto: Proto,
    /// The local address and port bound (None: unbound; address None: any).
    local: Option<(Option<IpAddress>, u16)>,
    /// A UDP socket's connected peer.
    peer: Option<IpEndpoint>,
    role: Role,
    opts: Opts,
    /// The error SO_ERROR reports (and the next call, for some).
    error: Option<Errno>,
    /// A connect was started (EALREADY / EISCONN bookkeeping).
    connecting: bool,
    /// The connection was made (past the handshake), its peer's FIN came (or
    /// TIME-WAIT), and its state when `observe` last looked: smoltcp forgets how
    /// a socket closed, so these tell a reset from an orderly end.
    synced: bool,
    fin: bool,
    state: tcp::State,
    shut_rd: bool,
    shut_wr: bool,
    /// The wait key, the readiness signature last seen (to wake on a change),
    /// and the generation epoll's edge triggering compares: a counter bumped on
    /// every change of the signature (the signature itself comes back to an
    /// old value, as a listener's queue going 1, 0, 1, and an edge-triggered
    /// waiter would miss the second connection).
    key: u64,
    seen: u64,
    gen: u64,
    /// What `publish` last made of it, shared with the socket's file.
    ready: Arc<Ready>,
}

/// A socket's published readiness: its generation (low 32 bits) above its
/// events, and `QUIET_EMPTY` among them. Its address is the socket's wait key.
/// With it, shared with the file the same way: the socket's end of a fused
/// connection, once `accept` fused it (`net::fuse`).
struct Ready {
    word: AtomicU64,
    fuse: Once<fuse::End>,
}

/// Not a `poll` event (masked from them): set when the socket's readiness alone
/// tells a read that finds nothing (a connection or UDP socket with none of
/// IN, ERR, HUP, RDHUP, whose `recv` can only say EAGAIN). Such a read answers
/// from the published word without the stack's lock: half of a non-blocking
/// reader's reads are its last, empty one (Go reads until EAGAIN).
const QUIET_EMPTY: u32 = 1 << 31;

/// The network stack.
pub struct Stack {
    iface: Interface,
    set: Shards,
    socks: BTreeMap<u64, Sock>,
    next_id: u64,
    next_port: u16,
    /// smoltcp sockets of closed files, closing gracefully (FIN, TIME-WAIT).
    closing: BTreeSet<Ref>,
    /// Listening sockets (`Sock` ids), and SYNs that found a listener's backlog
    /// full: held, as Linux drops them for the client to send again, until
    /// `accept` makes room.
    listeners: BTreeSet<u64>,
    deferred: BTreeMap<u64, VecDeque<Vec<u8>>>,
    /// Sockets by local port (for the bind rules without a walk over all).
    by_port: BTreeMap<u16, BTreeSet<u64>>,
    /// Packets sent by the shard being run, to route.
    out: Vec<Vec<u8>>,
    /// Packets carried (for --stats and tests).
    packets: u64,
    /// The UDP datagrams ICMP said nobody took (port unreachable), as (source,
    /// destination) of the datagram: `pump` gives their connected senders
    /// ECONNREFUSED, as Linux does.
    unreachable: Vec<(IpEndpoint, IpEndpoint)>,
    /// The network device and its link layer, when the VM has one.
    link: Option<Link>,
    /// Whether the listeners need tending: a shard of a listener's pool ran, a
    /// SYN was held, or an accept made room (else `pump` leaves them alone).
    tend: bool,
    /// The shards a pump ran (kept for the next pump's use).
    ran: Vec<Ref>,
}

/// The VM's network device, seen from the stack: packets to addresses beyond the
/// VM leave through it (framed by `ether`), frames it receives come in through
/// `route` like the loopback's packets.
struct Link {
    nic: onering_arch::virtio::Nic,
    ether: Ether,
    /// The VM's IPv4 address on it.
    ip: Ipv4Addr,
    /// The largest TCP segment the link carries (its MTU less the headers).
    mss: u16,
    /// The link's MTU: larger packets leave in fragments.
    mtu: usize,
    /// Fragments that came in, being put back together.
    frags: crate::net::frag::Reassembler,
}

static STACK: Once<Mutex<Stack>> = Once::new();

/// The network device the VMM described (`BootInfo::net`), set at boot.
static LINK: Once<onering_abi::NetInfo> = Once::new();

/// Receive buffers posted to the device.
const RX_BUFFERS: usize = 128;
/// Frames taken from the device per look.
const RX_BATCH: usize = 256;

/// Tells the stack about the VM's network device (at boot, before any socket).
pub fn configure_link(info: onering_abi::NetInfo) {
    if info.present != 0 {
        LINK.call_once(|| info);
    }
}

/// The network device the VMM described, if any.
pub fn link_info() -> Option<onering_abi::NetInfo> {
    LINK.get().copied()
}

/// An address in a `NetInfo` field.
pub fn v4(field: u64) -> Ipv4Addr {
    Ipv4Addr::from((field as u32).to_be_bytes())
}

/// Opens the device and gives the interface the VM's address and default route.
fn open_link(iface: &mut Interface) -> Option<Link> {
    let info = LINK.get()?;
    let nic = onering_arch::virtio::Nic::open(info.mtu as usize, RX_BUFFERS)?;
    let ip = v4(info.ipv4);
    let gateway = v4(info.gateway4);
    let prefix = (info.prefix4 as u8).min(32);
    iface.update_ip_addrs(|a| {
        let _ = a.push(IpCidr::new(IpAddress::Ipv4(ip), prefix));
    });
    if !gateway.is_unspecified() {
        let _ = iface.routes_mut().add_default_ipv4_route(gateway);
    }
    let ether = Ether::new(nic.mac(), ip, prefix, gateway);
    let mtu = info.mtu.clamp(576, 65_535) as usize;
    let mss = (mtu - 40) as u16;
    Some(Link { nic, ether, ip, mss, mtu, frags: Default::default() })
}

/// Sends Ethernet frame `f` through the device, with a checksum request for
/// an IPv4 TCP or UDP packet when the device takes them (`Stack::link_out` left
/// that checksum to complete).
fn send_frame(nic: &mut onering_arch::virtio::Nic, ether: &mut Ether, f: &[u8]) {
    let csum = if nic.csum_offload() { crate::net::ether::csum_request(f) } else { None };
    if !nic.send(f, csum) {
        ether.dropped += 1;
    }
}

/// The destination address of IP packet `p`.
fn packet_dst(p: &[u8]) -> Option<IpAddress> {
    match p.first()? >> 4 {
        4 => Some(IpAddress::Ipv4(Ipv4Addr::from(<[u8; 4]>::try_from(p.get(16..20)?).ok()?))),
        6 => Some(IpAddress::Ipv6(Ipv6Addr::from(<[u8; 16]>::try_from(p.get(24..40)?).ok()?))),
        _ => None,
    }
}

/// At the program's exit: gives what its connections beyond the VM still have to
/// send (a reply, a FIN after `close`) up to `limit` ns to leave and be
/// acknowledged. On Linux the kernel goes on sending after the process is gone;
/// here the VM ends with the program, and a server that answers and exits would
/// lose its answer. Returns at once when nothing is pending (the usual case).
pub fn linger(limit: u64) {
    if LINK.get().is_none() {
        return;
    }
    let Some(stack) = STACK.get() else { return };
    let end = mono_now().saturating_add(limit);
    loop {
        let done = {
            let mut s = stack.lock();
            let _ = s.pump(None);
            s.settled()
        };
        if done || mono_now() >= end {
            return;
        }
        for _ in 0..64 {
            core::hint::spin_loop();
        }
    }
}

/// Looks at the network device from the scheduler (a vCPU about to idle or run a
/// thread): runs the stack if frames came. Skipped while another CPU holds the
/// stack (it looks at the device in its own pump).
pub fn poll_link() {
    if LINK.get().is_none() {
        return;
    }
    let Some(stack) = STACK.get() else { return };
    let Some(mut s) = stack.try_lock() else { return };
    if !s.link.as_ref().is_some_and(|l| l.nic.has_rx()) {
        return;
    }
    let keys = s.pump(None);
    drop(s);
    wake(keys);
}

fn now() -> Instant {
    Instant::from_micros((mono_now() / 1000) as i64)
}

/// The stack, made on first use.
fn stack() -> &'static Mutex<Stack> {
    STACK.call_once(|| {
        let mut set = Shards::default();
        let mut cfg = Config::new(HardwareAddress::Ip);
        cfg.random_seed = mono_now() ^ 0x006f_6e65_7269_6e67;
        let mut none = VecDeque::new();
        let mut out = Vec::new();
        let mut iface = Interface::new(cfg, &mut ShardDev { rx: &mut none, out: &mut out }, now());
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::v4(127, 0, 0, 1), 8));
            let _ = a.push(IpCidr::new(IpAddress::v6(0, 0, 0, 0, 0, 0, 0, 1), 128));
        });
        set.nobody = Some(SocketSet::new(Vec::new()));
        let link = open_link(&mut iface);
        Mutex::new(Stack {
            iface,
            set,
            socks: BTreeMap::new(),
            next_id: 1,
            next_port: *EPHEMERAL.start(),
            closing: BTreeSet::new(),
            listeners: BTreeSet::new(),
            deferred: BTreeMap::new(),
            by_port: BTreeMap::new(),
            out: Vec::new(),
            packets: 0,
            unreachable: Vec::new(),
            link,
            tend: false,
            ran: Vec::new(),
        })
    })
}

/// Packets the loopback device has carried.
pub fn packets() -> u64 {
    STACK.get().map_or(0, |s| s.lock().packets)
}

/// Runs the stack's timers that are due (and wakes whom they concern); for
/// waits that are not on one socket (poll, select, epoll).
pub fn tick() {
    let Some(stack) = STACK.get() else { return };
    let keys = stack.lock().pump(None);
    wake(keys);
}

/// The next time the stack needs to run (monotonic ns), if any: now if a pump
/// stopped at its bound with shards still to run.
/// Read without the stack's lock (every thread about to wait on a socket, poll or
/// epoll asks): the pump publishes it, and a change that gives a shard work sets it
/// to now, so a stale value is never later than the truth was at the last change.
pub fn next_deadline() -> Option<u64> {
    match NEXT_RUN.load(Ordering::Relaxed) {
        u64::MAX => None,
        at => Some(at),
    }
}

/// When the stack next needs to run, as [`next_deadline`] gives it.
static NEXT_RUN: AtomicU64 = AtomicU64::new(u64::MAX);

/// smoltcp's receive buffer (its window) for SO_RCVBUF `r`: a quarter, as Linux
/// counts overhead in SO_RCVBUF, within 8 KiB..256 KiB (32 KiB by default).
/// A connection that may go `beyond` the VM gets 256 KiB unless the program set
/// SO_RCVBUF: Linux would grow its window to megabytes, and passt (the Debian 12
/// one, before its fix for bug 74) clamps its host socket to the smallest window
/// we advertise, after which the host's sender only learns of room by its 200 ms
/// zero-window probe. A small window makes that happen at once.
fn rx_size(r: usize, beyond: bool) -> usize {
    if beyond && r == RCVBUF_DEFAULT as usize {
        return TCP_BUF_MAX;
    }
    (r / 4).clamp(TCP_BUF_MIN, TCP_BUF_MAX)
}

/// smoltcp's send buffer for SO_SNDBUF `t` (16 KiB by default).
fn tx_size(t: usize) -> usize {
    t.clamp(TCP_BUF_MIN, TCP_BUF_MAX)
}

fn tcp_socket(rx: usize, tx: usize) -> Result<tcp::Socket<'static>, Errno> {
    let mut r = Vec::new();
    r.try_reserve_exact(rx).map_err(|_| Errno::ENOBUFS)?;
    r.resize(rx, 0);
    let mut t = Vec::new();
    t.try_reserve_exact(tx).map_err(|_| Errno::ENOBUFS)?;
    t.resize(tx, 0);
    let mut s = tcp::Socket::new(tcp::SocketBuffer::new(r), tcp::SocketBuffer::new(t));
    // Loopback loses nothing: acknowledge at once (no delayed-ACK stalls).
    s.set_ack_delay(None);
    Ok(s)
}

/// The `poll` events of socket `sk`.
fn events(set: &Shards, sk: &Sock) -> u32 {
    use ev::*;
    let mut e = 0;
    if sk.error.is_some() {
        e |= ERR;
    }
    match &sk.role {
        Role::Fresh => {
            if sk.proto == Proto::Tcp {
                e |= OUT | WRNORM | HUP;
            } else {
                e |= OUT | WRNORM;
            }
        }
        Role::Udp(h) => {
            let u = set.get::<udp::Socket>(*h);
            if u.can_recv() {
                e |= IN | RDNORM;
            }
            if u.can_send() {
                e |= OUT | WRNORM;
            }
        }
        Role::Listener { ready, .. } => {
            if !ready.is_empty() {
                e |= IN | RDNORM;
            }
        }
        Role::Conn(h) => {
            let t = set.get::<tcp::Socket>(*h);
            let st = t.state();
            if t.recv_queue() > 0 || sk.shut_rd {
                e |= IN | RDNORM;
            }
            let rd_done = !t.may_recv() && !matches!(st, tcp::State::SynSent | tcp::State::SynReceived);
            if rd_done {
                e |= IN | RDNORM | RDHUP;
            }
            if matches!(st, tcp::State::Established | tcp::State::CloseWait) && t.can_send() && !sk.shut_wr {
                e |= OUT | WRNORM;
            }
            if st == tcp::State::Closed || (rd_done && sk.shut_wr) {
                e |= HUP;
                if !sk.shut_wr {
                    e |= OUT | WRNORM;
                }
            }
        }
    }
    e
}

/// Publishes socket `sk`'s readiness for `InetSocket::poll`: its events, and a
/// generation bumped when they or the state behind them changed (what epoll's
/// edge triggering compares; the state itself comes back to old values, as a
/// listener's queue going 1, 0, 1, and an edge-triggered waiter would miss the
/// second connection). Whether anything changed (then its waiters are woken).
fn publish(set: &Shards, sk: &mut Sock) -> bool {
    let e = events(set, sk);
    let sig = readiness_sig(set, sk) ^ u64::from(e).rotate_left(24);
    let changed = sig != sk.seen;
    if changed {
        sk.seen = sig;
        sk.gen = sk.gen.wrapping_add(1);
    }
    let readable = ev::IN | ev::ERR | ev::HUP | ev::RDHUP;
    let quiet = match sk.role {
        Role::Conn(_) | Role::Udp(_) => e & readable == 0 && !sk.shut_rd && sk.error.is_none(),
        Role::Fresh | Role::Listener { .. } => false,
    };
    let e = if quiet { e | QUIET_EMPTY } else { e };
    sk.ready.word.store((sk.gen & 0xffff_ffff) << 32 | u64::from(e), Ordering::Release);
    changed
}

fn readiness_sig(set: &Shards, s: &Sock) -> u64 {
    let mut h: u64 = s.error.map_or(0, |e| e as u64) << 56;
    let mix = |h: u64, v: u64| (h ^ v).wrapping_mul(0x100_0000_01b3);
    match &s.role {
        Role::Fresh => {}
        Role::Udp(u) => {
            let u = set.get::<udp::Socket>(*u);
            h = mix(h, u.recv_queue() as u64);
            h = mix(h, u.can_send() as u64);
        }
        Role::Listener { ready, .. } => h = mix(h, ready.len() as u64),
        Role::Conn(c) => {
            let t = set.get::<tcp::Socket>(*c);
            h = mix(h, t.state() as u64);
            h = mix(h, t.recv_queue() as u64);
            h = mix(h, t.send_queue() as u64);
        }
    }
    h
}

impl Stack {
    /// Adds a smoltcp socket (a shard of its own; the caller names its owner).
    fn add<T: smoltcp::socket::AnySocket<'static>>(&mut self, sock: T) -> Result<Ref, Errno> {
        self.set.add(sock)
    }

    fn remove(&mut self, r: Ref) {
        self.set.remove(r);
    }

    /// Where packet `p` goes: a connection's shard, a listener's (a SYN), a UDP
    /// socket's; held for a listener whose backlog is full; else to nobody (smoltcp
    /// answers a TCP segment with a reset). Packets that are neither TCP nor UDP
    /// (ICMP errors, which smoltcp's sockets ignore anyway) are dropped.
    fn route(&mut self, p: Vec<u8>) {
        self.packets += 1;
        if packet_dst(&p).is_some_and(|d| !self.is_local(d)) {
            self.link_out(p);
            return;
        }
        if let Some(u) = unreachable_udp(&p) {
            self.unreachable.push(u);
        }
        let Some(f) = route::parse(&p) else { return };
        let to = match f.proto {
            route::IPPROTO_TCP => match self.set.conns.get(&(f.dst, f.src)) {
                Some(r) => Some(*r),
                None if f.is_syn() => match self.listener_for(f.dst) {
                    Some((_, Some(r))) => Some(r),
                    Some((id, None)) => {
                        self.tend = true;
                        let q = self.deferred.entry(id).or_default();
                        if q.len() < DEFERRED_MAX {
                            q.push_back(p);
                        }
                        return;
                    }
                    None => None,
                },
                None => None,
            },
            _ => self.udp_for(f.dst),
        };
        match to.and_then(|r| self.set.map.get_mut(r).map(|sh| (r, sh))) {
            Some((r, sh)) => {
                sh.rx.push_back(p);
                self.set.mark(r);
            }
            None => {
                self.set.nobody_rx.push_back(p);
                NEXT_RUN.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Whether nothing bound beyond the VM waits to be sent or acknowledged: no TCP
    /// connection to an outside address has data or a FIN in flight, and the
    /// device has taken every frame.
    fn settled(&mut self) -> bool {
        let Some(link) = self.link.as_mut() else { return true };
        if link.nic.tx_pending() > 0 {
            return false;
        }
        let outside = |e: Option<IpEndpoint>| match e.map(|e| e.addr) {
            Some(IpAddress::Ipv4(v)) => !v.is_loopback() && v != link.ip,
            _ => false,
        };
        self.set.map.values().all(|sh| match sh.set.iter().next() {
            Some((_, smoltcp::socket::Socket::Tcp(t))) => {
                !outside(t.remote_endpoint())
                    || (t.send_queue() == 0
                        && !matches!(
                            t.state(),
                            tcp::State::FinWait1 | tcp::State::Closing | tcp::State::LastAck | tcp::State::SynReceived
                        ))
            }
            _ => true,
        })
    }

    /// Whether `a` is one of the VM's own addresses (loopback's, the device's).
    fn is_local(&self, a: IpAddress) -> bool {
        match a {
            IpAddress::Ipv4(v) => v.is_loopback() || self.link.as_ref().is_some_and(|l| l.ip == v),
            IpAddress::Ipv6(v) => v == Ipv6Addr::LOCALHOST,
        }
    }

    /// Whether packets to `a` go anywhere: the VM's own addresses, and IPv4
    /// addresses beyond it when there is a device (IPv6 stays inside for now).
    fn reachable(&self, a: IpAddress) -> bool {
        self.is_local(a) || (self.link.is_some() && matches!(a, IpAddress::Ipv4(v) if !v.is_unspecified()))
    }

    /// The source address for a packet to `dst` from a socket bound to "any":
    /// None (smoltcp's choice, the loopback address) inside the VM, the device's
    /// address beyond it, or `dst` itself when it is the device's address.
    fn source_for(&self, dst: IpAddress) -> Option<IpAddress> {
        let link = self.link.as_ref()?;
        match dst {
            IpAddress::Ipv4(v) if !v.is_loopback() => Some(IpAddress::Ipv4(link.ip)),
            _ => None,
        }
    }

    /// IP packet `p` leaves through the device (dropped without one).
    fn link_out(&mut self, mut p: Vec<u8>) {
        let Some(link) = self.link.as_mut() else { return };
        if p.first().is_some_and(|v| v >> 4 != 4) {
            link.ether.dropped += 1;
            return;
        }
        crate::net::ether::clamp_mss(&mut p, link.mss);
        // With checksum offload the device (the host) completes TCP and UDP
        // checksums; every IPv4 frame sent then asks it to (`send_frame`). A
        // packet larger than the link's MTU (a big UDP datagram: TCP segments fit
        // the MSS) is checksummed whole, then leaves in fragments.
        let mut frames = Vec::new();
        if p.len() > link.mtu {
            crate::net::ether::fill_checksums(&mut p);
            let now = mono_now();
            for f in crate::net::frag::fragment(p, link.mtu) {
                link.ether.output(f, now, &mut frames);
            }
        } else {
            if link.nic.csum_offload() {
                crate::net::ether::fill_checksums_partial(&mut p);
            } else {
                crate::net::ether::fill_checksums(&mut p);
            }
            link.ether.output(p, mono_now(), &mut frames);
        }
        for f in frames {
            send_frame(&mut link.nic, &mut link.ether, &f);
        }
    }

    /// Takes in what the device received: IP packets are routed (to the shards
    /// they are for), ARP is answered. Whether anything came.
    fn link_in(&mut self) -> bool {
        let Some(link) = self.link.as_mut() else { return false };
        if !link.nic.has_rx() {
            return false;
        }
        let (mut packets, mut replies) = (Vec::new(), Vec::new());
        let t = mono_now();
        let Link { nic, ether, frags, .. } = link;
        nic.recv(RX_BATCH, |f| {
            if let Some(p) = ether.input(f, t, &mut replies).and_then(|p| frags.input(p, t)) {
                packets.push(p);
            }
        });
        for f in replies {
            send_frame(nic, ether, &f);
        }
        for p in packets {
            self.route(p);
        }
        true
    }

    /// The listener for a SYN to `dst` (an exact address before "any"), and its
    /// listening smoltcp socket (None: its backlog is full).
    fn listener_for(&self, dst: IpEndpoint) -> Option<(u64, Option<Ref>)> {
        let mut best: Option<(bool, u64)> = None;
        for id in &self.listeners {
            let s = &self.socks[id];
            let Some((a, port)) = s.local else { continue };
            if port != dst.port {
                continue;
            }
            let exact = match a {
                Some(x) if x == dst.addr => true,
                None if family_covers(s, dst.addr) => false,
                _ => continue,
            };
            if best.is_none_or(|(e, _)| exact && !e) {
                best = Some((exact, *id));
            }
        }
        let (_, id) = best?;
        let Role::Listener { pool, .. } = &self.socks[&id].role else { return None };
        // A listening socket with a packet waiting is taken: that packet is a SYN
        // routed to it since it last ran (frames from the device come in batches),
        // and a second SYN would find it no longer listening and be reset.
        let free = |r: &Ref| {
            self.set.get::<tcp::Socket>(*r).state() == tcp::State::Listen
                && self.set.map.get(*r).is_some_and(|sh| sh.rx.is_empty())
        };
        let listening = pool.iter().copied().find(free);
        Some((id, listening))
    }

    /// The UDP socket bound to `dst` (an exact address before "any").
    fn udp_for(&self, dst: IpEndpoint) -> Option<Ref> {
        let v = self.set.udp.get(&dst.port)?;
        let sock = |r: &Ref| self.socks.get(&self.set.owner(*r));
        let bound = |r: &&Ref| sock(r).and_then(|s| s.local).map(|(a, _)| a);
        v.iter()
            .find(|r| bound(r) == Some(Some(dst.addr)))
            .or_else(|| {
                v.iter().find(|r| bound(r) == Some(None) && sock(r).is_some_and(|s| family_covers(s, dst.addr)))
            })
            .copied()
    }

    /// Runs the shards that have work until none has: each takes in the packets
    /// routed to it and sends what it has, and what it sends is routed on. Then
    /// moves connections that listeners' pools took into their accept queues
    /// (refilling the pools), frees closed sockets, and returns the keys of
    /// sockets whose readiness changed (to wake once the lock is dropped): those
    /// of the shards that ran, the listeners, and `also`.
    fn pump(&mut self, also: Option<u64>) -> Vec<u64> {
        let keys = self.run(also);
        NEXT_RUN.store(self.set.next_run(), Ordering::Relaxed);
        keys
    }

    /// [`Stack::pump`]'s work.
    fn run(&mut self, also: Option<u64>) -> Vec<u64> {
        let t = now();
        self.set.due(t.total_micros());
        self.link_in();
        if self.set.dirty.is_empty() && self.set.nobody_rx.is_empty() && self.unreachable.is_empty() && !self.tend {
            // No shard has work (the last pump left the listeners settled): only
            // the call's own socket may have changed.
            return self.changed(also.into_iter().collect());
        }
        // (The shards that ran, in a vector kept between pumps: no allocation.)
        let mut ran = core::mem::take(&mut self.ran);
        ran.clear();
        let mut tended = false;
        for _ in 0..PUMP_ROUNDS {
            if !self.set.nobody_rx.is_empty() {
                let Shards { nobody, nobody_rx, .. } = &mut self.set;
                if let Some(set) = nobody.as_mut() {
                    let _ = self.iface.poll(t, &mut ShardDev { rx: nobody_rx, out: &mut self.out }, set);
                }
                nobody_rx.clear();
            } else {
                let Some(r) = self.set.next_dirty() else {
                    if core::mem::take(&mut self.tend) {
                        tended = true;
                        if self.tend_listeners() {
                            continue;
                        }
                    }
                    if self.link_in() {
                        continue;
                    }
                    break;
                };
                let Some(sh) = self.set.map.get_mut(r) else { continue };
                let _ = self.iface.poll(t, &mut ShardDev { rx: &mut sh.rx, out: &mut self.out }, &mut sh.set);
                // smoltcp sends one segment per run: a shard that sent runs again.
                if !self.out.is_empty() {
                    self.set.mark(r);
                }
                if self.closing.contains(&r) {
                    self.reset_orphan(r);
                }
                self.set.refile(&mut self.iface, t, r);
                if self.listeners.contains(&self.set.owner(r)) {
                    self.tend = true;
                }
                ran.push(r);
            }
            let mut out = core::mem::take(&mut self.out);
            for p in out.drain(..) {
                self.route(p);
            }
            self.out = out;
        }
        ran.sort_unstable();
        ran.dedup();
        // TIME-WAIT guards against a lost segment's late duplicate; loopback loses
        // and reorders nothing, so a closed connection's socket (and buffers) goes now.
        for r in &ran {
            if self.closing.contains(r) {
                let done = self.set.map.get(*r).is_none_or(|_| {
                    matches!(self.set.get::<tcp::Socket>(*r).state(), tcp::State::Closed | tcp::State::TimeWait)
                });
                if done {
                    self.closing.remove(r);
                    self.set.remove(*r);
                }
            }
        }
        let mut ids: Vec<u64> = ran.iter().map(|r| self.set.owner(*r)).filter(|o| *o != 0).collect();
        self.ran = ran;
        if tended {
            ids.extend(self.listeners.iter().copied());
        }
        ids.extend(also);
        for (from, to) in core::mem::take(&mut self.unreachable) {
            // A connected UDP socket learns that its peer's port is closed (an
            // unconnected one does not, without IP_RECVERR), as Linux.
            for id in self.by_port.get(&from.port).into_iter().flatten() {
                let Some(s) = self.socks.get_mut(id) else { continue };
                if matches!(s.role, Role::Udp(_))
                    && s.peer == Some(to)
                    && s.local.is_some_and(|(a, p)| p == from.port && a.is_none_or(|a| a == from.addr))
                {
                    s.error = Some(Errno::ECONNREFUSED);
                    ids.push(*id);
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        self.changed(ids)
    }

    /// Publishes socket `id`'s readiness again after a change outside `pump`.
    fn republish(&mut self, id: u64) {
        if let Some(sk) = self.socks.get_mut(&id) {
            publish(&self.set, sk);
        }
    }

    /// The wait keys of sockets among `ids` (each once) whose readiness changed
    /// (each one's generation is bumped).
    fn changed(&mut self, ids: Vec<u64>) -> Vec<u64> {
        let mut keys = Vec::new();
        for id in ids {
            let Some(s) = self.socks.get_mut(&id) else { continue };
            if let Role::Conn(c) = s.role {
                if self.set.map.contains_key(c) {
                    observe(s, self.set.get::<tcp::Socket>(c));
                }
            }
            if publish(&self.set, s) {
                keys.push(s.key);
            }
        }
        keys
    }

    /// Resets a closed connection that data still reaches: Linux answers data for
    /// a socket the program has closed with a reset, so a sender learns that
    /// nobody will read (else it would fill the window and wait forever).
    fn reset_orphan(&mut self, r: Ref) {
        let t = self.set.get::<tcp::Socket>(r);
        if t.recv_queue() > 0 && t.state() != tcp::State::Closed {
            self.set.get_mut::<tcp::Socket>(r).abort();
        }
    }

    /// Moves listeners' established connections to their accept queues and gives
    /// each a listening socket while its backlog has room (then the next SYN it
    /// held goes to it). Whether a held SYN was routed.
    fn tend_listeners(&mut self) -> bool {
        let mut routed = false;
        let ids: Vec<u64> = self.listeners.iter().copied().collect();
        for id in ids {
            let Some(s) = self.socks.get_mut(&id) else { continue };
            let (rb, tb) = (s.opts.rcvbuf as usize, s.opts.sndbuf as usize);
            let ep = listen_endpoint(s);
            let nodelay = s.opts.nodelay;
            let Role::Listener { pool, ready, backlog } = &mut s.role else { continue };
            let set = &mut self.set;
            let mut i = 0;
            while i < pool.len() {
                let st = set.get::<tcp::Socket>(pool[i]).state();
                match st {
                    tcp::State::Listen | tcp::State::SynReceived => i += 1,
                    tcp::State::Closed => {
                        // (A SYN-RECEIVED that was reset: back to listening.)
                        let _ = set.get_mut::<tcp::Socket>(pool[i]).listen(ep);
                        i += 1;
                    }
                    _ => ready.push_back(pool.swap_remove(i)),
                }
            }
            let listening = pool.iter().filter(|h| set.get::<tcp::Socket>(**h).state() == tcp::State::Listen).count();
            let want = listening == 0 && pool.len() + ready.len() <= *backlog;
            // (A listener not bound to loopback may be reached from beyond.)
            let beyond = self.link.is_some()
                && ep.addr.is_none_or(|a| {
                    !matches!(a, IpAddress::Ipv4(v) if v.is_loopback()) && a != IpAddress::Ipv6(Ipv6Addr::LOCALHOST)
                });
            if want {
                if let Ok(mut t) = tcp_socket(rx_size(rb, beyond), tx_size(tb)) {
                    t.set_nagle_enabled(!nodelay);
                    if t.listen(ep).is_ok() {
                        // (No memory: the SYN waits, as for a full backlog.)
                        if let Ok(h) = self.set.add(t) {
                            self.set.own(h, id);
                            if let Some(Role::Listener { pool, .. }) = self.socks.get_mut(&id).map(|s| &mut s.role) {
                                pool.push(h);
                            }
                        }
                    }
                }
            }
            // A held SYN for the socket now listening.
            let has_listening = matches!(self.listener_pool_listening(id), Some(true));
            if has_listening {
                if let Some(p) = self.deferred.get_mut(&id).and_then(|q| q.pop_front()) {
                    self.packets -= 1; // (counted when first routed)
                    self.route(p);
                    routed = true;
                }
                if self.deferred.get(&id).is_some_and(|q| q.is_empty()) {
                    self.deferred.remove(&id);
                }
            }
        }
        routed
    }

    fn listener_pool_listening(&self, id: u64) -> Option<bool> {
        let Role::Listener { pool, .. } = &self.socks.get(&id)?.role else { return None };
        Some(pool.iter().any(|r| self.set.get::<tcp::Socket>(*r).state() == tcp::State::Listen))
    }

    /// Sets socket `id`'s local address and port, filed by port.
    /// Fuses connection `id` (just accepted) with its client, if that is a
    /// socket of this VM (`net::fuse`): found by its port, and both ends'
    /// endpoints, crossed.
    fn fuse(&mut self, id: u64) {
        let Some(me) = self.socks.get(&id) else { return };
        let Role::Conn(h) = me.role else { return };
        let t = self.set.get::<tcp::Socket>(h);
        let (Some(local), Some(remote)) = (t.local_endpoint(), t.remote_endpoint()) else { return };
        if !self.is_local(remote.addr) {
            return;
        }
        let client = |p: &u64| {
            *p != id
                && self.socks.get(p).is_some_and(|o| match o.role {
                    Role::Conn(c) if self.set.map.contains_key(c) => {
                        let u = self.set.get::<tcp::Socket>(c);
                        u.local_endpoint() == Some(remote) && u.remote_endpoint() == Some(local)
                    }
                    _ => false,
                })
        };
        let Some(peer) = self.by_port.get(&remote.port).and_then(|ids| ids.iter().copied().find(client)) else {
            return;
        };
        let (Some(me), Some(them)) = (self.socks.get(&id), self.socks.get(&peer)) else { return };
        let (mine, theirs) = fuse::pair(me.key, them.key);
        // (The client may have shut a side down before the accept.)
        if them.shut_wr {
            theirs.shut_write();
        }
        if them.shut_rd {
            theirs.shut_read();
        }
        me.ready.fuse.call_once(|| mine);
        them.ready.fuse.call_once(|| theirs);
    }

    fn set_local(&mut self, id: u64, local: Option<(Option<IpAddress>, u16)>) -> Result<(), Errno> {
        let sk = self.socks.get_mut(&id).ok_or(Errno::EBADF)?;
        if let Some((_, p)) = core::mem::replace(&mut sk.local, local) {
            if let Some(ids) = self.by_port.get_mut(&p) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.by_port.remove(&p);
                }
            }
        }
        if let Some((_, p)) = local {
            self.by_port.entry(p).or_default().insert(id);
        }
        Ok(())
    }

    fn sock(&mut self, id: u64) -> Result<&mut Sock, Errno> {
        self.socks.get_mut(&id).ok_or(Errno::EBADF)
    }

    /// Whether port `port` of `proto` is free for `me` to bind at `addr`.
    fn port_free(&self, me: u64, proto: Proto, addr: Option<IpAddress>, port: u16) -> bool {
        let mine = &self.socks[&me];
        let Some(ids) = self.by_port.get(&port) else { return true };
        !ids.iter().filter_map(|id| Some((id, self.socks.get(id)?))).any(|(id, s)| {
            if *id == me || s.proto != proto {
                return false;
            }
            let Some((a, p)) = s.local else { return false };
            if p != port {
                return false;
            }
            // Overlap: either is "any" (of the same family, or a dual-stack one).
            let overlap = match (a, addr) {
                // Two "any"s meet where their families do: a v6-only [::] and
                // 0.0.0.0 share a port, as on Linux.
                (None, None) => {
                    let v4 = |s: &Sock| family_covers(s, IpAddress::Ipv4(Ipv4Addr::UNSPECIFIED));
                    let v6 = |s: &Sock| s.family == AF_INET6;
                    (v4(s) && v4(mine)) || (v6(s) && v6(mine))
                }
                (None, Some(x)) => family_covers(s, x),
                (Some(x), None) => family_covers(mine, x),
                (Some(x), Some(y)) => x == y,
            };
            if !overlap {
                return false;
            }
            let listening = matches!(s.role, Role::Listener { .. });
            let shared = (s.opts.reuseport && mine.opts.reuseport)
                || (s.opts.reuseaddr && mine.opts.reuseaddr && (proto == Proto::Udp || !listening));
            !shared
        })
    }

    fn ephemeral(&mut self, me: u64, proto: Proto, addr: Option<IpAddress>) -> Result<u16, Errno> {
        let span = (EPHEMERAL.end() - EPHEMERAL.start()) as u32 + 1;
        for _ in 0..span {
            let p = self.next_port;
            self.next_port = if p >= *EPHEMERAL.end() { *EPHEMERAL.start() } else { p + 1 };
            if self.port_free(me, proto, addr, p) {
                return Ok(p);
            }
        }
        Err(Errno::EADDRNOTAVAIL)
    }
}

/// Whether an "any" socket `s` covers address `x` (an AF_INET6 socket covers
/// IPv4 unless IPV6_V6ONLY).
fn family_covers(s: &Sock, x: IpAddress) -> bool {
    match x {
        IpAddress::Ipv4(_) => s.family == AF_INET || !s.opts.v6only,
        IpAddress::Ipv6(_) => s.family == AF_INET6,
    }
}

/// Where smoltcp takes packets for socket `s`: its address, or smoltcp's "any"
/// (None), which takes both families and every address of the VM. Which family
/// and address a socket bound to "any" takes is `route`'s choice (`listener_for`,
/// `udp_for`: a 0.0.0.0 socket never gets IPv6, a v6-only [::] never IPv4), so
/// the two may share a port (`port_free`).
fn listen_endpoint(s: &Sock) -> IpListenEndpoint {
    let (addr, port) = s.local.unwrap_or((None, 0));
    IpListenEndpoint { addr, port }
}

// ---- addresses -------------------------------------------------------------------

/// Parses a `sockaddr_in` or `sockaddr_in6` for a socket of `family`. A v4-mapped
/// IPv6 address becomes IPv4. `None` address: INADDR_ANY / in6addr_any.
fn parse_addr(family: u16, a: &[u8]) -> Result<(Option<IpAddress>, u16), Errno> {
    if a.len() < 2 {
        return Err(Errno::EINVAL);
    }
    let fam = u16::from_le_bytes([a[0], a[1]]);
    if fam != family {
        return Err(Errno::EAFNOSUPPORT);
    }
    if family == AF_INET {
        if a.len() < 16 {
            return Err(Errno::EINVAL);
        }
        let port = u16::from_be_bytes([a[2], a[3]]);
        let ip = Ipv4Addr::new(a[4], a[5], a[6], a[7]);
        return Ok(((!ip.is_unspecified()).then_some(IpAddress::Ipv4(ip)), port));
    }
    if a.len() < 24 {
        return Err(Errno::EINVAL);
    }
    let port = u16::from_be_bytes([a[2], a[3]]);
    let mut b = [0u8; 16];
    b.copy_from_slice(&a[8..24]);
    let ip = Ipv6Addr::from(b);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Ok(((!v4.is_unspecified()).then_some(IpAddress::Ipv4(v4)), port));
    }
    Ok(((!ip.is_unspecified()).then_some(IpAddress::Ipv6(ip)), port))
}

/// Encodes an address for a socket of `family` (IPv4 in an AF_INET6 socket as
/// v4-mapped).
fn encode(family: u16, addr: Option<IpAddress>, port: u16) -> Vec<u8> {
    let mut v = family.to_le_bytes().to_vec();
    v.extend_from_slice(&port.to_be_bytes());
    if family == AF_INET {
        let ip = match addr {
            Some(IpAddress::Ipv4(a)) => a,
            _ => Ipv4Addr::UNSPECIFIED,
        };
        v.extend_from_slice(&ip.octets());
        v.extend_from_slice(&[0; 8]);
    } else {
        v.extend_from_slice(&[0; 4]);
        let ip = match addr {
            Some(IpAddress::Ipv6(a)) => a,
            Some(IpAddress::Ipv4(a)) => a.to_ipv6_mapped(),
            None => Ipv6Addr::UNSPECIFIED,
        };
        v.extend_from_slice(&ip.octets());
        v.extend_from_slice(&[0; 4]);
    }
    v
}

// ---- the file object ---------------------------------------------------------------

/// An AF_INET or AF_INET6 socket's file object: an id in the stack's table.
pub struct InetSocket {
    id: u64,
    ready: Arc<Ready>,
}

fn wake(keys: Vec<u64>) {
    for k in keys {
        sched::wake_all(k);
    }
}

impl InetSocket {
    /// A new socket (`kind`: SOCK_STREAM or SOCK_DGRAM; `proto` 0 or the match).
    pub fn new(family: u16, kind: u32, proto: u64) -> Result<InetSocket, Errno> {
        // As Linux: a protocol past IPPROTO_MAX is EINVAL; raw sockets need
        // CAP_NET_RAW, which the program does not have here (there is no raw
        // access to anything), EPERM; ICMP "ping" datagram sockets are refused as
        // Linux's default net.ipv4.ping_group_range refuses everyone, EACCES.
        if proto >= IPPROTO_MAX {
            return Err(Errno::EINVAL);
        }
        let p = match (kind, proto) {
            (SOCK_STREAM, 0 | IPPROTO_TCP) => Proto::Tcp,
            (SOCK_DGRAM, 0 | IPPROTO_UDP) => Proto::Udp,
            (SOCK_DGRAM, IPPROTO_ICMP) if family == AF_INET => return Err(Errno::EACCES),
            (SOCK_DGRAM, IPPROTO_ICMPV6) if family == AF_INET6 => return Err(Errno::EACCES),
            (SOCK_RAW, 0) | (SOCK_STREAM | SOCK_DGRAM, _) => return Err(Errno::EPROTONOSUPPORT),
            (SOCK_RAW, _) => return Err(Errno::EPERM),
            _ => return Err(Errno::ESOCKTNOSUPPORT),
        };
        let mut s = stack().lock();
        let id = s.next_id;
        s.next_id += 1;
        let ready = Arc::new(Ready { word: AtomicU64::new(0), fuse: Once::new() });
        let key = key_of(&*ready);
        let mut sock = Sock {
            family,
            proto: p,
            local: None,
            peer: None,
            role: Role::Fresh,
            opts: Opts::default(),
            error: None,
            connecting: false,
            synced: false,
            fin: false,
            state: tcp::State::Closed,
            shut_rd: false,
            shut_wr: false,
            key,
            seen: 0,
            gen: 0,
            ready: ready.clone(),
        };
        publish(&s.set, &mut sock);
        s.socks.insert(id, sock);
        Ok(InetSocket { id, ready })
    }

    fn key(&self) -> u64 {
        key_of(&*self.ready)
    }

    /// Runs `f` on the stack and this socket, pumps, and wakes.
    fn with<R>(&self, f: impl FnOnce(&mut Stack) -> Result<R, Errno>) -> Result<R, Errno> {
        // Room for a call's buffers (a new connection's, a listener's next) before
        // the stack's lock: the heap grows from guest memory here, not under it.
        // If it cannot, the buffers' own allocations fail with ENOBUFS.
        let _ = onering_arch::heap::ensure(1 << 20);
        let (r, keys) = {
            let mut s = stack().lock();
            let r = f(&mut s);
            let keys = s.pump(Some(self.id));
            (r, keys)
        };
        wake(keys);
        r
    }

    /// A write to a fused connection's ring (`fuse::End::write`). A ring that
    /// could not grow gets the heap grown (not under any lock) and one more try.
    fn ring_write(
        f: &fuse::End,
        len: u64,
        fill: impl Fn(usize, &mut [u8]) -> Result<(), Errno> + Copy,
    ) -> Option<Result<u64, Errno>> {
        let r = match f.write(len as usize, fill) {
            Some(Err(Errno::ENOBUFS)) if onering_arch::heap::ensure(crate::pipebuf::CAPACITY) => {
                f.write(len as usize, fill)
            }
            r => r,
        };
        r.map(|r| r.map(|n| n as u64))
    }

    /// Binds to an ephemeral port if unbound (connect, listen, a UDP send).
    fn autobind(s: &mut Stack, id: u64) -> Result<(), Errno> {
        if s.sock(id)?.local.is_some() {
            return Ok(());
        }
        let proto = s.sock(id)?.proto;
        let port = s.ephemeral(id, proto, None)?;
        s.set_local(id, Some((None, port)))?;
        Ok(())
    }

    /// The UDP socket, made on first need.
    fn udp(s: &mut Stack, id: u64) -> Result<Ref, Errno> {
        Self::autobind(s, id)?;
        let sk = s.sock(id)?;
        if let Role::Udp(h) = sk.role {
            return Ok(h);
        }
        let ep = listen_endpoint(sk);
        let mut rx = Vec::new();
        rx.try_reserve_exact(UDP_BUF).map_err(|_| Errno::ENOBUFS)?;
        rx.resize(UDP_BUF, 0);
        let mut tx = Vec::new();
        tx.try_reserve_exact(UDP_BUF).map_err(|_| Errno::ENOBUFS)?;
        tx.resize(UDP_BUF, 0);
        let mut u = udp::Socket::new(
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; UDP_PACKETS], rx),
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; UDP_PACKETS], tx),
        );
        u.bind(ep).map_err(|_| Errno::EINVAL)?;
        let h = s.add(u)?;
        s.set.own(h, id);
        s.set.add_udp(ep.port, h);
        s.sock(id)?.role = Role::Udp(h);
        Ok(h)
    }
}

impl Drop for InetSocket {
    fn drop(&mut self) {
        let keys = {
            let mut s = stack().lock();
            let _ = s.set_local(self.id, None);
            let Some(sk) = s.socks.remove(&self.id) else { return };
            match sk.role {
                Role::Fresh => {}
                Role::Udp(h) => s.remove(h),
                Role::Listener { pool, ready, .. } => {
                    s.listeners.remove(&self.id);
                    for h in pool.into_iter().chain(ready) {
                        s.set.get_mut::<tcp::Socket>(h).abort();
                        s.set.own(h, 0);
                        s.closing.insert(h);
                    }
                    // SYNs it held: refused, as the connections in Linux's queue are.
                    for p in s.deferred.remove(&self.id).unwrap_or_default() {
                        s.set.nobody_rx.push_back(p);
                        NEXT_RUN.store(0, Ordering::Relaxed);
                    }
                }
                Role::Conn(h) => {
                    let unread = self.ready.fuse.get().is_some_and(|f| f.close());
                    let t = s.set.get_mut::<tcp::Socket>(h);
                    // Unread data, or SO_LINGER on with a zero time: a reset, as
                    // Linux; else an orderly close.
                    let l = &sk.opts.linger;
                    let abortive = l[..4] != [0; 4] && l[4..] == [0; 4];
                    if t.recv_queue() > 0 || unread || abortive {
                        t.abort();
                    } else {
                        t.close();
                    }
                    s.set.own(h, 0);
                    s.closing.insert(h);
                }
            }
            s.pump(None)
        };
        wake(keys);
    }
}

impl Socket for InetSocket {
    fn domain(&self) -> u16 {
        stack().lock().socks.get(&self.id).map_or(AF_INET, |s| s.family)
    }

    fn kind(&self) -> u32 {
        match stack().lock().socks.get(&self.id).map(|s| s.proto) {
            Some(Proto::Udp) => SOCK_DGRAM,
            _ => SOCK_STREAM,
        }
    }

    fn bind(&self, _: &dyn NetEnv, addr: &[u8]) -> SysResult {
        let id = self.id;
        self.with(|s| {
            let fam = s.sock(id)?.family;
            let (a, mut port) = parse_addr(fam, addr)?;
            if a.is_some_and(|a| !s.is_local(a)) {
                return Err(Errno::EADDRNOTAVAIL);
            }
            if s.sock(id)?.local.is_some() {
                return Err(Errno::EINVAL);
            }
            let proto = s.sock(id)?.proto;
            if port == 0 {
                port = s.ephemeral(id, proto, a)?;
            } else if !s.port_free(id, proto, a, port) {
                return Err(Errno::EADDRINUSE);
            }
            s.set_local(id, Some((a, port)))?;
            if proto == Proto::Udp {
                // Datagrams to the port arrive from now on, read or not.
                if let Err(e) = Self::udp(s, id) {
                    s.set_local(id, None)?;
                    return Err(e);
                }
            }
            Ok(0)
        })
    }

    fn listen(&self, backlog: u32) -> SysResult {
        let id = self.id;
        self.with(|s| {
            if s.sock(id)?.proto != Proto::Tcp {
                return Err(Errno::EOPNOTSUPP);
            }
            let backlog = (backlog as usize).clamp(1, 4096);
            match &mut s.sock(id)?.role {
                Role::Listener { backlog: b, .. } => {
                    *b = backlog;
                    return Ok(0);
                }
                Role::Fresh => {}
                _ => return Err(Errno::EINVAL),
            }
            Self::autobind(s, id)?;
            let (a, port) = s.sock(id)?.local.unwrap_or((None, 0));
            if !s.port_free(id, Proto::Tcp, a, port) {
                return Err(Errno::EADDRINUSE);
            }
            s.sock(id)?.role = Role::Listener { pool: Vec::new(), ready: VecDeque::new(), backlog };
            s.listeners.insert(id);
            s.tend_listeners();
            Ok(0)
        })
    }

    fn accept(&self) -> Result<(FileRef, Vec<u8>), Errno> {
        let id = self.id;
        let (conn, fam, opts) = self.with(|s| {
            let sk = s.sock(id)?;
            let (fam, opts) = (sk.family, sk.opts.clone());
            match &mut sk.role {
                Role::Listener { ready, .. } => match ready.pop_front() {
                    Some(h) => {
                        s.tend = true;
                        Ok((h, fam, opts))
                    }
                    None => Err(Errno::EAGAIN),
                },
                _ if sk.proto == Proto::Udp => Err(Errno::EOPNOTSUPP),
                _ => Err(Errno::EINVAL),
            }
        })?;
        let new = InetSocket::new(fam, SOCK_STREAM, 0)?;
        let peer = {
            let mut s = stack().lock();
            s.set.own(conn, new.id);
            let local = s.set.get::<tcp::Socket>(conn).local_endpoint();
            s.set_local(new.id, local.map(|e| (Some(e.addr), e.port)))?;
            let Stack { set, socks, .. } = &mut *s;
            let t = set.get::<tcp::Socket>(conn);
            let remote = t.remote_endpoint();
            let sk = socks.get_mut(&new.id).ok_or(Errno::EBADF)?;
            sk.role = Role::Conn(conn);
            sk.opts = opts;
            sk.opts.misc.clear();
            // (Made, so a reset while it waited is ECONNRESET.)
            sk.synced = true;
            sk.state = tcp::State::Established;
            observe(sk, t);
            let Stack { set, socks, .. } = &mut *s;
            if let Some(sk) = socks.get_mut(&new.id) {
                publish(set, sk);
            }
            s.fuse(new.id);
            remote.map_or_else(|| encode(fam, None, 0), |e| encode(fam, Some(e.addr), e.port))
        };
        Ok((OpenFile::new(new, crate::file::oflag::O_RDWR), peer))
    }

    fn connect(&self, _: &dyn NetEnv, addr: &[u8]) -> SysResult {
        let id = self.id;
        self.with(|s| {
            let sk = s.sock(id)?;
            let fam = sk.family;
            if sk.proto == Proto::Udp {
                // AF_UNSPEC dissolves the association.
                if addr.len() >= 2 && u16::from_le_bytes([addr[0], addr[1]]) == 0 {
                    sk.peer = None;
                    return Ok(0);
                }
                let (a, port) = parse_addr(fam, addr)?;
                let a = a.unwrap_or(if fam == AF_INET {
                    IpAddress::Ipv4(Ipv4Addr::LOCALHOST)
                } else {
                    IpAddress::Ipv6(Ipv6Addr::LOCALHOST)
                });
                s.sock(id)?.peer = Some(IpEndpoint::new(a, port));
                Self::udp(s, id)?;
                return Ok(0);
            }
            match sk.role {
                Role::Listener { .. } => return Err(Errno::EINVAL),
                Role::Conn(h) => {
                    let st = s.set.get::<tcp::Socket>(h).state();
                    if let Some(e) = s.sock(id)?.error.take() {
                        return Err(e);
                    }
                    return match st {
                        tcp::State::SynSent => Err(Errno::EALREADY),
                        _ => Err(Errno::EISCONN),
                    };
                }
                Role::Fresh | Role::Udp(_) => {}
            }
            let (a, port) = parse_addr(fam, addr)?;
            if port == 0 {
                return Err(Errno::ECONNREFUSED);
            }
            let a = a.unwrap_or(IpAddress::Ipv4(Ipv4Addr::LOCALHOST));
            if !s.reachable(a) {
                return Err(Errno::ENETUNREACH);
            }
            Self::autobind(s, id)?;
            let source = s.source_for(a);
            let sk = s.sock(id)?;
            let (la, lp) = sk.local.unwrap_or((None, 0));
            let la = la.or(source);
            let (rb, tb, nodelay) = (sk.opts.rcvbuf as usize, sk.opts.sndbuf as usize, sk.opts.nodelay);
            let beyond = !s.is_local(a);
            let mut t = tcp_socket(rx_size(rb, beyond), tx_size(tb))?;
            t.set_nagle_enabled(!nodelay);
            let cx = s.iface.context();
            t.connect(cx, IpEndpoint::new(a, port), IpListenEndpoint { addr: la, port: lp })
                .map_err(|_| Errno::EADDRNOTAVAIL)?;
            let h = s.add(t)?;
            s.set.own(h, id);
            let sk = s.sock(id)?;
            sk.role = Role::Conn(h);
            sk.connecting = true;
            Ok(0)
        })?;
        // On loopback the handshake is usually over already; if not, the
        // caller waits with connect_wait (a non-blocking one gets EINPROGRESS).
        // A refusal is news for later, as on Linux: EINPROGRESS now, the error
        // from SO_ERROR or from the blocking caller's wait.
        match self.connect_done() {
            Err(e) if e != Errno::EINPROGRESS => {
                let mut s = stack().lock();
                let Stack { set, socks, .. } = &mut *s;
                if let Some(sk) = socks.get_mut(&self.id) {
                    sk.error = Some(e);
                    publish(set, sk);
                }
                Err(Errno::EINPROGRESS)
            }
            r => r,
        }
    }

    fn connect_wait(&self) -> SysResult {
        match self.connect_done() {
            Err(Errno::EINPROGRESS) => Err(Errno::EAGAIN),
            r => r,
        }
    }

    fn blocked_on(&self) -> Option<u64> {
        None
    }

    fn send(&self, _: &dyn NetEnv, user: &dyn UserMem, iov: &Iov, extra: SendExtra) -> SysResult {
        let id = self.id;
        let len = iov.len();
        let fused = self.ready.fuse.get();
        let fill = |at: usize, dst: &mut [u8]| iov.read_at(user, at as u64, dst);
        // A fused connection's bytes go to the peer's ring: no stack, no lock of
        // its (`net::fuse`).
        if let Some(f) = fused.filter(|_| extra.addr.is_none()) {
            if let Some(r) = Self::ring_write(f, len, fill) {
                if r.is_ok() {
                    sched::wake_all(f.peer_key);
                }
                return r;
            }
        }
        let to_ring = core::cell::Cell::new(false);
        let r = self.with(|s| {
            let sk = s.sock(id)?;
            if let Some(e) = sk.error.take() {
                return Err(e);
            }
            match sk.proto {
                Proto::Udp => {
                    let fam = sk.family;
                    let dest = match &extra.addr {
                        Some(a) => {
                            let (ip, port) = parse_addr(fam, a)?;
                            if port == 0 {
                                return Err(Errno::EINVAL);
                            }
                            IpEndpoint::new(ip.unwrap_or(IpAddress::Ipv4(Ipv4Addr::LOCALHOST)), port)
                        }
                        None => sk.peer.ok_or(Errno::EDESTADDRREQ)?,
                    };
                    if !s.reachable(dest.addr) {
                        return Err(Errno::ENETUNREACH);
                    }
                    let source = match s.sock(id)?.local {
                        Some((Some(_), _)) => None,
                        _ => s.source_for(dest.addr),
                    };
                    if len as usize > UDP_MAX {
                        return Err(Errno::EMSGSIZE);
                    }
                    let mut data = Vec::new();
                    data.try_reserve_exact(len as usize).map_err(|_| Errno::ENOBUFS)?;
                    data.resize(len as usize, 0);
                    iov.read_at(user, 0, &mut data)?;
                    let h = Self::udp(s, id)?;
                    let u = s.set.get_mut::<udp::Socket>(h);
                    let meta = udp::UdpMetadata { endpoint: dest, local_address: source, meta: Default::default() };
                    match u.send_slice(&data, meta) {
                        Ok(()) => Ok(len),
                        Err(udp::SendError::BufferFull) => Err(Errno::EAGAIN),
                        Err(udp::SendError::Unaddressable) => Err(Errno::EINVAL),
                    }
                }
                Proto::Tcp => {
                    if extra.addr.is_some() && !matches!(sk.role, Role::Conn(_)) {
                        return Err(Errno::EPIPE);
                    }
                    let shut = sk.shut_wr;
                    let Role::Conn(h) = sk.role else { return Err(Errno::EPIPE) };
                    let t = s.set.get_mut::<tcp::Socket>(h);
                    if shut {
                        return Err(Errno::EPIPE);
                    }
                    match t.state() {
                        tcp::State::SynSent | tcp::State::SynReceived => return Err(Errno::EAGAIN),
                        tcp::State::Established | tcp::State::CloseWait => {}
                        _ => return Err(Errno::EPIPE),
                    }
                    if len == 0 {
                        return Ok(0);
                    }
                    // Fused, with none of its bytes left in smoltcp: from now on
                    // they go through the ring.
                    if let Some(f) = fused.filter(|_| t.send_queue() == 0 && extra.addr.is_none()) {
                        if f.switch() {
                            if let Some(r) = Self::ring_write(f, len, fill) {
                                to_ring.set(r.is_ok());
                                return r;
                            }
                        }
                    }
                    let mut done = 0u64;
                    while done < len {
                        let r = t.send(|buf| {
                            let n = (buf.len() as u64).min(len - done) as usize;
                            match iov.read_at(user, done, &mut buf[..n]) {
                                Ok(()) => (n, Ok(n)),
                                Err(e) => (0, Err(e)),
                            }
                        });
                        match r {
                            Ok(Ok(0)) => break,
                            Ok(Ok(n)) => done += n as u64,
                            Ok(Err(e)) if done == 0 => return Err(e),
                            Ok(Err(_)) => break,
                            Err(_) => return if done > 0 { Ok(done) } else { Err(Errno::EPIPE) },
                        }
                    }
                    if done == 0 {
                        return Err(Errno::EAGAIN);
                    }
                    Ok(done)
                }
            }
        });
        if let Some(f) = fused.filter(|_| to_ring.get()) {
            sched::wake_all(f.peer_key);
        }
        r
    }

    fn recv(&self, user: &dyn UserMem, iov: &Iov, flags: u32) -> Result<(u64, RecvExtra), Errno> {
        let id = self.id;
        let peek = flags & msg::PEEK != 0;
        let want = iov.len();
        let quiet = || self.ready.word.load(Ordering::Acquire) as u32 & QUIET_EMPTY != 0;
        let fused = self.ready.fuse.get();
        let out = |at: usize, piece: &[u8]| iov.write_at(user, at as u64, piece);
        // A fused connection reads its ring without the stack (`net::fuse`).
        if let Some(f) = fused {
            if f.read_here_empty() && quiet() {
                return Err(Errno::EAGAIN);
            }
            match f.read(want as usize, peek, false, out)? {
                fuse::Read::Got { n, wake } => {
                    if wake {
                        sched::wake_all(f.peer_key);
                    }
                    return Ok((n as u64, RecvExtra::default()));
                }
                fuse::Read::Empty if quiet() => return Err(Errno::EAGAIN),
                _ => {}
            }
        }
        let woke = core::cell::Cell::new(false);
        // Nothing to read, as published: no lock. (Packets from the network
        // device are taken in by a pump; with a device the read looks.)
        if quiet() && fused.is_none() && LINK.get().is_none() {
            return Err(Errno::EAGAIN);
        }
        let r = self.with(|s| {
            let sk = s.sock(id)?;
            let mut extra = RecvExtra::default();
            let fam = sk.family;
            match sk.role {
                Role::Udp(h) => {
                    if let Some(e) = sk.error.take() {
                        return Err(e); // (before any datagram, as Linux)
                    }
                    let peer = sk.peer;
                    let u = s.set.get_mut::<udp::Socket>(h);
                    loop {
                        let (data, meta) = match u.peek() {
                            Ok((d, m)) => (d, *m),
                            Err(_) => return Err(Errno::EAGAIN),
                        };
                        // A connected socket takes only its peer's datagrams.
                        if peer.is_some_and(|p| p != meta.endpoint) {
                            let _ = u.recv();
                            continue;
                        }
                        let n = (data.len() as u64).min(want);
                        iov.write_at(user, 0, &data[..n as usize])?;
                        let full = data.len() as u64;
                        if full > want {
                            extra.flags |= msg::TRUNC;
                        }
                        extra.addr = Some(encode(fam, Some(meta.endpoint.addr), meta.endpoint.port));
                        if !peek {
                            let _ = u.recv();
                        }
                        return Ok((if flags & msg::TRUNC != 0 { full } else { n }, extra));
                    }
                }
                Role::Fresh if sk.proto == Proto::Udp => {
                    Self::udp(s, id)?;
                    Err(Errno::EAGAIN)
                }
                Role::Conn(h) => {
                    if sk.shut_rd {
                        return Ok((0, extra));
                    }
                    // As Linux: bytes that came are read before an error (a reset's),
                    // and after them the peer's FIN is the end of file, the error
                    // left for SO_ERROR or a write.
                    let fin = sk.fin;
                    let ring = fused.map_or(0, |f| f.queued());
                    if s.set.get::<tcp::Socket>(h).recv_queue() == 0 && ring == 0 && !fin {
                        if let Some(e) = s.sock(id)?.error.take() {
                            return Err(e);
                        }
                    }
                    // (Looked at first without marking the shard for the pump: a
                    // read that finds nothing, as every non-blocking reader's last,
                    // changes nothing.)
                    let t = s.set.get::<tcp::Socket>(h);
                    if t.recv_queue() == 0 {
                        // Fused: smoltcp has nothing more (of the bytes sent before
                        // the switch); the ring has the rest.
                        if let Some(f) = fused {
                            if let fuse::Read::Got { n, wake } = f.read(want as usize, peek, true, out)? {
                                woke.set(wake);
                                return Ok((n as u64, extra));
                            }
                        }
                        return match t.state() {
                            tcp::State::SynSent | tcp::State::SynReceived | tcp::State::Established => {
                                Err(Errno::EAGAIN)
                            }
                            tcp::State::FinWait1 | tcp::State::FinWait2 if t.may_recv() => Err(Errno::EAGAIN),
                            _ => Ok((0, extra)),
                        };
                    }
                    let t = s.set.get_mut::<tcp::Socket>(h);
                    let mut got = 0u64;
                    if peek {
                        let mut tmp = vec![0u8; (want as usize).min(t.recv_queue())];
                        let n = t.peek_slice(&mut tmp).unwrap_or(0);
                        iov.write_at(user, 0, &tmp[..n])?;
                        return Ok((n as u64, extra));
                    }
                    while got < want {
                        let r = t.recv(|buf| {
                            let n = (buf.len() as u64).min(want - got) as usize;
                            match iov.write_at(user, got, &buf[..n]) {
                                Ok(()) => (n, Ok(n)),
                                Err(e) => (0, Err(e)),
                            }
                        });
                        match r {
                            Ok(Ok(0)) => break,
                            Ok(Ok(n)) => got += n as u64,
                            Ok(Err(e)) if got == 0 => return Err(e),
                            _ => break,
                        }
                    }
                    Ok((got, extra))
                }
                Role::Listener { .. } | Role::Fresh => Err(Errno::ENOTCONN),
            }
        });
        if let Some(f) = fused.filter(|_| woke.get()) {
            sched::wake_all(f.peer_key);
        }
        r
    }

    fn shutdown(&self, how: u64) -> SysResult {
        if how > SHUT_RDWR {
            return Err(Errno::EINVAL);
        }
        let id = self.id;
        self.with(|s| {
            let sk = s.sock(id)?;
            let Role::Conn(h) = sk.role else {
                return if sk.proto == Proto::Udp && sk.peer.is_some() { Ok(0) } else { Err(Errno::ENOTCONN) };
            };
            let fused = self.ready.fuse.get();
            if how != SHUT_WR {
                sk.shut_rd = true;
                if let Some(f) = fused {
                    f.shut_read();
                }
            }
            if how != SHUT_RD {
                sk.shut_wr = true;
                if let Some(f) = fused {
                    f.shut_write();
                }
                s.set.get_mut::<tcp::Socket>(h).close();
            }
            Ok(0)
        })
    }

    fn name(&self) -> Vec<u8> {
        let s = stack().lock();
        let Some(sk) = s.socks.get(&self.id) else { return Vec::new() };
        if let Role::Conn(h) = sk.role {
            if let Some(e) = s.set.get::<tcp::Socket>(h).local_endpoint() {
                return encode(sk.family, Some(e.addr), e.port);
            }
        }
        let (a, p) = sk.local.unwrap_or((None, 0));
        encode(sk.family, a, p)
    }

    fn peer(&self) -> Result<Vec<u8>, Errno> {
        let s = stack().lock();
        let sk = s.socks.get(&self.id).ok_or(Errno::EBADF)?;
        match sk.role {
            Role::Conn(h) => {
                let t = s.set.get::<tcp::Socket>(h);
                match (t.state(), t.remote_endpoint()) {
                    (tcp::State::SynSent | tcp::State::Closed, _) | (_, None) => Err(Errno::ENOTCONN),
                    (_, Some(e)) => Ok(encode(sk.family, Some(e.addr), e.port)),
                }
            }
            _ => sk.peer.map(|e| encode(sk.family, Some(e.addr), e.port)).ok_or(Errno::ENOTCONN),
        }
    }

    fn getopt(&self, level: u64, name: u64) -> Result<Vec<u8>, Errno> {
        let mut s = stack().lock();
        let r = Self::getopt_in(&mut s, self.id, level, name);
        // (SO_ERROR takes the error: ERR goes.)
        s.republish(self.id);
        r
    }
    fn setopt(&self, level: u64, name: u64, val: &[u8]) -> SysResult {
        let id = self.id;
        self.with(|s| {
            let sk = s.sock(id)?;
            let role_conn = if let Role::Conn(h) = sk.role { Some(h) } else { None };
            let o = &mut sk.opts;
            let buf = |v: i32| (v.max(0) as u32).min(4 << 20).saturating_mul(2).max(4608);
            match (level, name) {
                (opt::SOL_SOCKET, opt::SO_RCVTIMEO) => o.rcvtimeo = sock::timeval_opt(val)?,
                (opt::SOL_SOCKET, opt::SO_SNDTIMEO) => o.sndtimeo = sock::timeval_opt(val)?,
                (opt::SOL_SOCKET, opt::SO_LINGER) => {
                    // struct linger: l_onoff (read back as 0 or 1), l_linger.
                    let v = val.get(..8).ok_or(Errno::EINVAL)?;
                    o.linger[..4].copy_from_slice(&u32::from(v[..4] != [0; 4]).to_le_bytes());
                    o.linger[4..].copy_from_slice(&v[4..]);
                }
                (opt::SOL_SOCKET, opt::SO_REUSEADDR) => o.reuseaddr = sock::int_opt(val)? != 0,
                (opt::SOL_SOCKET, opt::SO_REUSEPORT) => o.reuseport = sock::int_opt(val)? != 0,
                (opt::SOL_SOCKET, opt::SO_KEEPALIVE) => o.keepalive = sock::int_opt(val)? != 0,
                (opt::SOL_SOCKET, opt::SO_BROADCAST) => o.broadcast = sock::int_opt(val)? != 0,
                (opt::SOL_SOCKET, opt::SO_SNDBUF | opt::SO_SNDBUFFORCE) => o.sndbuf = buf(sock::int_opt(val)?),
                (opt::SOL_SOCKET, opt::SO_RCVBUF | opt::SO_RCVBUFFORCE) => o.rcvbuf = buf(sock::int_opt(val)?),
                (opt::SOL_SOCKET, opt::SO_TYPE | opt::SO_DOMAIN | opt::SO_PROTOCOL | opt::SO_ERROR) => {
                    return Err(Errno::ENOPROTOOPT)
                }
                (IPPROTO_TCP, _) if sk.proto != Proto::Tcp => return Err(Errno::EOPNOTSUPP),
                (IPPROTO_TCP, TCP_NODELAY) => {
                    o.nodelay = sock::int_opt(val)? != 0;
                    let nagle = !o.nodelay;
                    if let Some(h) = role_conn {
                        s.set.get_mut::<tcp::Socket>(h).set_nagle_enabled(nagle);
                    }
                }
                (IPPROTO_TCP, TCP_KEEPIDLE | TCP_KEEPINTVL | TCP_KEEPCNT) => {
                    let v = sock::int_opt(val)?;
                    if v < 1 {
                        return Err(Errno::EINVAL);
                    }
                    match name {
                        TCP_KEEPIDLE => o.keepidle = v,
                        TCP_KEEPINTVL => o.keepintvl = v,
                        _ => o.keepcnt = v,
                    }
                }
                (IPPROTO_IP, IP_TTL) | (IPPROTO_IPV6, IPV6_UNICAST_HOPS) => {
                    let v = sock::int_opt(val)?;
                    if !(-1..=255).contains(&v) || v == 0 && level == IPPROTO_IP {
                        return Err(Errno::EINVAL);
                    }
                    o.ttl = if v == -1 { 64 } else { v };
                }
                (IPPROTO_IPV6, IPV6_V6ONLY) if sk.family == AF_INET6 => {
                    if sk.local.is_some() {
                        return Err(Errno::EINVAL);
                    }
                    sk.opts.v6only = sock::int_opt(val)? != 0;
                }
                (l, n) if known_opt(l, n) => {
                    // Harmless here (one host, no routing): stored, read back.
                    let v = sock::int_opt(val).unwrap_or(0);
                    o.misc.retain(|m| m.0 != (l, n));
                    o.misc.push(((l, n), v));
                }
                _ => return Err(Errno::ENOPROTOOPT),
            }
            Ok(0)
        })
    }

    fn inq(&self) -> u64 {
        let mut s = stack().lock();
        let Ok(sk) = s.sock(self.id) else { return 0 };
        match sk.role {
            Role::Conn(h) => {
                let ring = self.ready.fuse.get().map_or(0, |f| f.queued());
                (s.set.get::<tcp::Socket>(h).recv_queue() + ring) as u64
            }
            Role::Udp(h) => {
                let u = s.set.get_mut::<udp::Socket>(h);
                u.peek().map_or(0, |(d, _)| d.len() as u64)
            }
            _ => 0,
        }
    }

    fn outq(&self) -> u64 {
        let mut s = stack().lock();
        let Ok(sk) = s.sock(self.id) else { return 0 };
        match sk.role {
            Role::Conn(h) => s.set.get::<tcp::Socket>(h).send_queue() as u64,
            _ => 0,
        }
    }

    fn timeouts(&self) -> (u64, u64) {
        let s = stack().lock();
        s.socks.get(&self.id).map_or((0, 0), |sk| (sk.opts.rcvtimeo, sk.opts.sndtimeo))
    }

    fn next_timer(&self) -> Option<u64> {
        next_deadline()
    }

    fn tick(&self) {
        let keys = stack().lock().pump(None);
        wake(keys);
    }
}

/// Options accepted and stored without effect here.
fn known_opt(level: u64, name: u64) -> bool {
    matches!(
        (level, name),
        (IPPROTO_TCP, TCP_QUICKACK | TCP_USER_TIMEOUT | TCP_FASTOPEN)
            | (IPPROTO_IP, IP_TOS | IP_MULTICAST_IF | IP_MULTICAST_TTL | IP_MULTICAST_LOOP | IP_RECVERR)
            | (IPPROTO_IP, IP_ADD_MEMBERSHIP | IP_DROP_MEMBERSHIP)
            | (IPPROTO_IPV6, IPV6_MULTICAST_IF | IPV6_MULTICAST_HOPS | IPV6_MULTICAST_LOOP | IPV6_TCLASS)
            | (opt::SOL_SOCKET, opt::SO_DEBUG | opt::SO_DONTROUTE | opt::SO_OOBINLINE)
            | (opt::SOL_SOCKET, opt::SO_RCVLOWAT | opt::SO_SNDLOWAT | opt::SO_PASSCRED)
    )
}

/// Follows connection `s`'s smoltcp socket `t` after protocol work: a connect
/// refused is ECONNREFUSED; a connection made and then closed without the
/// orderly end (the peer's FIN, our FIN acknowledged, TIME-WAIT) was reset:
/// ECONNRESET, or EPIPE if the peer had sent its FIN (Linux's choice for a reset
/// in CLOSE-WAIT). Each error is reported once (SO_ERROR or the next call).
fn observe(s: &mut Sock, t: &tcp::Socket) {
    use tcp::State::*;
    let st = t.state();
    match st {
        Closed if s.connecting => {
            if s.error.is_none() {
                s.error = Some(Errno::ECONNREFUSED);
            }
            s.connecting = false;
        }
        Closed if s.synced && s.state != Closed => {
            if !s.fin {
                s.error = Some(Errno::ECONNRESET);
            } else if s.state == CloseWait && !s.shut_wr {
                s.error = Some(Errno::EPIPE);
            }
        }
        Closed | SynSent => {}
        _ => {
            s.connecting = false;
            s.synced = true;
            if matches!(st, CloseWait | LastAck | Closing | TimeWait) {
                s.fin = true;
            }
        }
    }
    s.state = st;
}

impl InetSocket {
    /// `getopt` on the locked stack.
    fn getopt_in(s: &mut Stack, id: u64, level: u64, name: u64) -> Result<Vec<u8>, Errno> {
        let sk = s.sock(id)?;
        let int = |v: i32| Ok(v.to_le_bytes().to_vec());
        let o = &sk.opts;
        match (level, name) {
            (opt::SOL_SOCKET, opt::SO_TYPE) => int(if sk.proto == Proto::Tcp { 1 } else { 2 }),
            (opt::SOL_SOCKET, opt::SO_DOMAIN) => int(i32::from(sk.family)),
            (opt::SOL_SOCKET, opt::SO_PROTOCOL) => {
                int(if sk.proto == Proto::Tcp { IPPROTO_TCP as i32 } else { IPPROTO_UDP as i32 })
            }
            (opt::SOL_SOCKET, opt::SO_ERROR) => int(sk.error.take().map_or(0, |e| e as i32)),
            (opt::SOL_SOCKET, opt::SO_ACCEPTCONN) => int(matches!(sk.role, Role::Listener { .. }) as i32),
            (opt::SOL_SOCKET, opt::SO_REUSEADDR) => int(o.reuseaddr as i32),
            (opt::SOL_SOCKET, opt::SO_REUSEPORT) => int(o.reuseport as i32),
            (opt::SOL_SOCKET, opt::SO_KEEPALIVE) => int(o.keepalive as i32),
            (opt::SOL_SOCKET, opt::SO_BROADCAST) => int(o.broadcast as i32),
            (opt::SOL_SOCKET, opt::SO_SNDBUF) => int(o.sndbuf as i32),
            (opt::SOL_SOCKET, opt::SO_RCVBUF) => int(o.rcvbuf as i32),
            (opt::SOL_SOCKET, opt::SO_RCVTIMEO) => Ok(sock::timeval_bytes(o.rcvtimeo)),
            (opt::SOL_SOCKET, opt::SO_SNDTIMEO) => Ok(sock::timeval_bytes(o.sndtimeo)),
            (opt::SOL_SOCKET, opt::SO_LINGER) => Ok(o.linger.to_vec()),
            (IPPROTO_TCP, _) if sk.proto != Proto::Tcp => Err(Errno::EOPNOTSUPP),
            (IPPROTO_TCP, TCP_NODELAY) => int(o.nodelay as i32),
            (IPPROTO_TCP, TCP_MAXSEG) => int((MTU - 40) as i32),
            (IPPROTO_TCP, TCP_KEEPIDLE) => int(o.keepidle),
            (IPPROTO_TCP, TCP_KEEPINTVL) => int(o.keepintvl),
            (IPPROTO_TCP, TCP_KEEPCNT) => int(o.keepcnt),
            (IPPROTO_TCP, TCP_INFO) => Ok(vec![0u8; 104]),
            (IPPROTO_TCP, TCP_CONGESTION) => Ok(b"reno\0\0\0\0\0\0\0\0\0\0\0\0".to_vec()),
            (IPPROTO_IP, IP_TTL) | (IPPROTO_IPV6, IPV6_UNICAST_HOPS) => int(o.ttl),
            (IPPROTO_IPV6, IPV6_V6ONLY) if sk.family == AF_INET6 => int(o.v6only as i32),
            (l, n) => match o.misc.iter().find(|m| m.0 == (l, n)) {
                Some(m) => int(m.1),
                None if known_opt(l, n) => int(0),
                // As Linux's ip_getsockopt: an IPv4 socket knows no other level.
                None if sk.family == AF_INET
                    && ![opt::SOL_SOCKET, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_IP].contains(&l) =>
                {
                    Err(Errno::EOPNOTSUPP)
                }
                None => Err(Errno::ENOPROTOOPT),
            },
        }
    }

    /// After connect started: done, EINPROGRESS for the caller to wait, or the
    /// error the handshake ended with.
    fn connect_done(&self) -> SysResult {
        let mut s = stack().lock();
        let sk = s.sock(self.id)?;
        let Role::Conn(h) = sk.role else { return Ok(0) };
        if let Some(e) = sk.error.take() {
            s.republish(self.id);
            return Err(e);
        }
        match s.set.get::<tcp::Socket>(h).state() {
            tcp::State::SynSent => Err(Errno::EINPROGRESS),
            _ => Ok(0),
        }
    }
}

impl File for InetSocket {
    /// Reads and writes run smoltcp under the stack's lock: not under the
    /// descriptor table's too.
    fn long_io(&self) -> bool {
        true
    }

    fn read(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        super::read(self, user, buf, len, off)
    }

    fn write(&self, _: &OpenFile, user: &dyn UserMem, buf: u64, len: u64, off: Option<u64>) -> SysResult {
        super::write(self, user, buf, len, off)
    }

    /// The readiness the stack last published for this socket: an atomic load,
    /// no lock (epoll and poll look at every socket they watch on every wait).
    fn poll(&self, _: &OpenFile) -> Option<Readiness> {
        let v = self.ready.word.load(Ordering::Acquire);
        let (mut events, mut gen) = (v as u32 & !QUIET_EMPTY, v >> 32);
        // A fused connection's bytes are in its rings.
        if let Some(f) = self.ready.fuse.get() {
            let p = f.poll();
            if p.readable {
                events |= ev::IN | ev::RDNORM;
            }
            if p.full {
                events &= !(ev::OUT | ev::WRNORM);
            }
            gen = gen.wrapping_add(p.gen);
        }
        Some(Readiness { events, gen, key: key_of(&*self.ready) })
    }

    fn wait_key(&self) -> Option<u64> {
        Some(self.key())
    }

    fn ioctl(&self, _: &OpenFile, user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
        let v = match request {
            0x541b => self.inq(),
            0x5411 => self.outq(),
            _ => return super::iface::ioctl(user, self.domain(), request, arg).unwrap_or(Err(Errno::ENOTTY)),
        };
        user.write(arg, &(v.min(i32::MAX as u64) as u32).to_le_bytes())?;
        Ok(0)
    }

    fn stat(&self) -> Meta {
        super::socket_stat(self.id)
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

    #[test]
    fn addresses_parse_and_encode() {
        let mut a = vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1];
        a.extend_from_slice(&[0; 8]);
        assert_eq!(parse_addr(AF_INET, &a), Ok((Some(IpAddress::v4(127, 0, 0, 1)), 8080)));
        assert_eq!(encode(AF_INET, Some(IpAddress::v4(127, 0, 0, 1)), 8080), a);
        assert_eq!(parse_addr(AF_INET, &a[..15]), Err(Errno::EINVAL));
        assert_eq!(parse_addr(AF_INET6, &a), Err(Errno::EAFNOSUPPORT));
        let m = encode(AF_INET6, Some(IpAddress::v4(127, 0, 0, 1)), 80);
        assert_eq!(m.len(), 28);
        assert_eq!(parse_addr(AF_INET6, &m), Ok((Some(IpAddress::v4(127, 0, 0, 1)), 80)), "v4-mapped");
        assert_eq!(parse_addr(AF_INET6, &encode(AF_INET6, None, 9)), Ok((None, 9)));
    }
}
