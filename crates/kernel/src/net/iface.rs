//! The VM's network interfaces, as programs see them: `lo` (index 1, up,
//! loopback) with the addresses `net::inet` serves (127.0.0.1/8, ::1/128) and its
//! MTU, and `eth0` (index 2) when the VMM gave the VM a network device, with its
//! MAC address, MTU and IPv4 address ([`all`]). `net::netlink` reports them to
//! RTM_GETLINK/RTM_GETADDR; [`ioctl`] answers the interface ioctls every socket
//! takes on Linux (SIOCGIFINDEX, SIOCGIFNAME, SIOCGIFFLAGS, SIOCGIFMTU,
//! SIOCGIFHWADDR, SIOCGIFTXQLEN, SIOCGIFCONF; the address ones on AF_INET
//! sockets), which musl's and glibc's `if_nametoindex` and `ifconfig`-style
//! programs use. Nothing can be configured (the SIOCSIF* calls are EPERM, as for a
//! user without CAP_NET_ADMIN).

use crate::errno::{Errno, SysResult};
use crate::file::socket::AF_INET;
use crate::mm::user::UserMem;

pub const LO_INDEX: u32 = 1;
pub const LO_NAME: &[u8] = b"lo";
/// IFF_UP | IFF_LOOPBACK | IFF_RUNNING, and IFF_LOWER_UP (above 16 bits: netlink only).
pub const LO_FLAGS: u32 = 0x1 | 0x8 | 0x40 | 0x1_0000;
pub const ARPHRD_LOOPBACK: u16 = 772;
pub const TXQLEN: u32 = 1000;

pub const ETH_INDEX: u32 = 2;
/// IFF_UP | IFF_BROADCAST | IFF_RUNNING | IFF_MULTICAST, and IFF_LOWER_UP.
pub const ETH_FLAGS: u32 = 0x1 | 0x2 | 0x40 | 0x1000 | 0x1_0000;
pub const ARPHRD_ETHER: u16 = 1;

/// One network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub index: u32,
    pub name: &'static [u8],
    pub flags: u32,
    pub mtu: u32,
    pub hwtype: u16,
    pub mac: [u8; 6],
    /// Its IPv4 address and prefix length, and whether it has ::1.
    pub v4: Option<([u8; 4], u8)>,
    pub v6_loopback: bool,
}

impl Iface {
    pub fn is_loopback(&self) -> bool {
        self.hwtype == ARPHRD_LOOPBACK
    }

    /// Its IPv4 broadcast address (none for lo).
    pub fn broadcast(&self) -> [u8; 4] {
        match self.v4 {
            Some((a, prefix)) if !self.is_loopback() => {
                let host = if prefix >= 32 { 0 } else { u32::MAX >> prefix };
                (u32::from_be_bytes(a) | host).to_be_bytes()
            }
            _ => [0; 4],
        }
    }
}

/// The interfaces, by index: `lo`, then `eth0` when the VM has a network device.
pub fn all() -> alloc::vec::Vec<Iface> {
    let mut v = alloc::vec![Iface {
        index: LO_INDEX,
        name: LO_NAME,
        flags: LO_FLAGS,
        mtu: super::inet::MTU as u32,
        hwtype: ARPHRD_LOOPBACK,
        mac: [0; 6],
        v4: Some(([127, 0, 0, 1], 8)),
        v6_loopback: true,
    }];
    if let Some(n) = super::inet::link_info() {
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&n.mac.to_le_bytes()[..6]);
        v.push(Iface {
            index: ETH_INDEX,
            name: b"eth0",
            flags: ETH_FLAGS,
            mtu: n.mtu as u32,
            hwtype: ARPHRD_ETHER,
            mac,
            v4: (n.ipv4 != 0).then(|| (super::inet::v4(n.ipv4).octets(), (n.prefix4 as u8).min(32))),
            v6_loopback: false,
        });
    }
    v
}

/// The interface named `name`, or of index `index`.
pub fn by_name(name: &[u8]) -> Option<Iface> {
    all().into_iter().find(|i| i.name == name)
}

pub fn by_index(index: u32) -> Option<Iface> {
    all().into_iter().find(|i| i.index == index)
}

/// The netmask of a prefix length.
fn netmask(prefix: u8) -> [u8; 4] {
    let m = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix.min(32))) };
    m.to_be_bytes()
}

const SIOCGIFNAME: u64 = 0x8910;
const SIOCGIFCONF: u64 = 0x8912;
const SIOCGIFFLAGS: u64 = 0x8913;
const SIOCGIFADDR: u64 = 0x8915;
const SIOCGIFDSTADDR: u64 = 0x8917;
const SIOCGIFBRDADDR: u64 = 0x8919;
const SIOCGIFNETMASK: u64 = 0x891b;
const SIOCGIFMETRIC: u64 = 0x891d;
const SIOCGIFMTU: u64 = 0x8921;
const SIOCGIFHWADDR: u64 = 0x8927;
const SIOCGIFINDEX: u64 = 0x8933;
const SIOCGIFTXQLEN: u64 = 0x8942;
/// SIOCSIFFLAGS .. SIOCSIFHWBROADCAST and the other setters in 0x89xx.
const SETTERS: &[u64] = &[0x8914, 0x8916, 0x8918, 0x891a, 0x891c, 0x891e, 0x8922, 0x8924, 0x8934, 0x8943];

/// `struct ifreq`: the name, then a 24-byte union.
const IFREQ: usize = 40;
const IFNAMSIZ: usize = 16;

/// A `sockaddr_in` for `a`.
fn sockaddr_in(a: [u8; 4]) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[..2].copy_from_slice(&AF_INET.to_le_bytes());
    s[4..8].copy_from_slice(&a);
    s
}

/// Answers interface ioctl `request` made on a socket of `family`; None if it is
/// not one (the socket's own ioctls, or ENOTTY).
pub fn ioctl(user: &dyn UserMem, family: u16, request: u64, arg: u64) -> Option<SysResult> {
    if SETTERS.contains(&request) {
        return Some(Err(Errno::EPERM));
    }
    let inet = family == AF_INET;
    match request {
        SIOCGIFCONF => Some(ifconf(user, arg)),
        SIOCGIFNAME | SIOCGIFFLAGS | SIOCGIFMETRIC | SIOCGIFMTU | SIOCGIFHWADDR | SIOCGIFINDEX | SIOCGIFTXQLEN => {
            Some(ifreq(user, request, arg))
        }
        SIOCGIFADDR | SIOCGIFDSTADDR | SIOCGIFBRDADDR | SIOCGIFNETMASK if inet => Some(ifreq(user, request, arg)),
        _ => None,
    }
}

fn ifreq(user: &dyn UserMem, request: u64, arg: u64) -> SysResult {
    let mut r = [0u8; IFREQ];
    user.read(arg, &mut r)?;
    if request == SIOCGIFNAME {
        let index = i32::from_le_bytes([r[16], r[17], r[18], r[19]]);
        let i = u32::try_from(index).ok().and_then(by_index).ok_or(Errno::ENODEV)?;
        let mut name = [0u8; IFNAMSIZ];
        name[..i.name.len()].copy_from_slice(i.name);
        return user.write(arg, &name).map(|_| 0);
    }
    let name = r[..IFNAMSIZ].split(|b| *b == 0).next().unwrap_or_default();
    let i = by_name(name).ok_or(Errno::ENODEV)?;
    let (addr, prefix) = i.v4.unwrap_or(([0; 4], 0));
    let mut v = [0u8; 24];
    match request {
        SIOCGIFFLAGS => v[..2].copy_from_slice(&(i.flags as u16).to_le_bytes()),
        SIOCGIFMETRIC => {}
        SIOCGIFMTU => v[..4].copy_from_slice(&i.mtu.to_le_bytes()),
        SIOCGIFINDEX => v[..4].copy_from_slice(&i.index.to_le_bytes()),
        SIOCGIFTXQLEN => v[..4].copy_from_slice(&TXQLEN.to_le_bytes()),
        SIOCGIFHWADDR => {
            v[..2].copy_from_slice(&i.hwtype.to_le_bytes());
            v[2..8].copy_from_slice(&i.mac);
        }
        SIOCGIFADDR if i.v4.is_none() => return Err(Errno::EADDRNOTAVAIL),
        SIOCGIFADDR => v[..16].copy_from_slice(&sockaddr_in(addr)),
        SIOCGIFNETMASK => v[..16].copy_from_slice(&sockaddr_in(netmask(prefix))),
        // (lo's peer address is the address itself; lo has no broadcast address.)
        SIOCGIFDSTADDR => v[..16].copy_from_slice(&sockaddr_in(addr)),
        SIOCGIFBRDADDR => v[..16].copy_from_slice(&sockaddr_in(i.broadcast())),
        _ => return Err(Errno::ENOTTY),
    }
    user.write(arg + IFNAMSIZ as u64, &v).map(|_| 0)
}

/// SIOCGIFCONF: `struct ifconf { int ifc_len; char *ifc_buf; }`; the IPv4
/// addresses, one `ifreq` each, as many as fit (with a NULL buffer, the room
/// needed). Sockets of other families list them too, as Linux.
fn ifconf(user: &dyn UserMem, arg: u64) -> SysResult {
    let mut c = [0u8; 16];
    user.read(arg, &mut c)?;
    let len = i32::from_le_bytes([c[0], c[1], c[2], c[3]]).max(0) as usize;
    let buf = u64::from_le_bytes([c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]]);
    let mut entries = alloc::vec::Vec::new();
    for i in all() {
        let Some((a, _)) = i.v4 else { continue };
        let mut entry = [0u8; IFREQ];
        entry[..i.name.len()].copy_from_slice(i.name);
        entry[16..32].copy_from_slice(&sockaddr_in(a));
        entries.push(entry);
    }
    let used = if buf == 0 {
        entries.len() * IFREQ
    } else {
        let fit = (len / IFREQ).min(entries.len());
        for (k, e) in entries.iter().take(fit).enumerate() {
            user.write(buf + (k * IFREQ) as u64, e)?;
        }
        fit * IFREQ
    };
    user.write(arg, &(used as i32).to_le_bytes()).map(|_| 0)
}
