//! The VM's network interfaces, as programs see them: one, `lo` (index 1, up,
//! loopback), with the addresses `net::inet` serves (127.0.0.1/8, ::1/128) and
//! its MTU. `net::netlink` reports it to RTM_GETLINK/RTM_GETADDR; [`ioctl`]
//! answers the interface ioctls every socket takes on Linux (SIOCGIFINDEX,
//! SIOCGIFNAME, SIOCGIFFLAGS, SIOCGIFMTU, SIOCGIFHWADDR, SIOCGIFTXQLEN,
//! SIOCGIFCONF; the address ones on AF_INET sockets), which musl's and glibc's
//! `if_nametoindex` and `ifconfig`-style programs use. Nothing can be configured
//! (the SIOCSIF* calls are EPERM, as for a user without CAP_NET_ADMIN).

use crate::errno::{Errno, SysResult};
use crate::file::socket::AF_INET;
use crate::mm::user::UserMem;

pub const LO_INDEX: u32 = 1;
pub const LO_NAME: &[u8] = b"lo";
/// IFF_UP | IFF_LOOPBACK | IFF_RUNNING, and IFF_LOWER_UP (above 16 bits: netlink only).
pub const LO_FLAGS: u32 = 0x1 | 0x8 | 0x40 | 0x1_0000;
pub const ARPHRD_LOOPBACK: u16 = 772;
pub const TXQLEN: u32 = 1000;

pub fn mtu() -> u32 {
    super::inet::MTU as u32
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
        if index != LO_INDEX as i32 {
            return Err(Errno::ENODEV);
        }
        let mut name = [0u8; IFNAMSIZ];
        name[..LO_NAME.len()].copy_from_slice(LO_NAME);
        return user.write(arg, &name).map(|_| 0);
    }
    let name = r[..IFNAMSIZ].split(|b| *b == 0).next().unwrap_or_default();
    if name != LO_NAME {
        return Err(Errno::ENODEV);
    }
    let mut v = [0u8; 24];
    match request {
        SIOCGIFFLAGS => v[..2].copy_from_slice(&(LO_FLAGS as u16).to_le_bytes()),
        SIOCGIFMETRIC => {}
        SIOCGIFMTU => v[..4].copy_from_slice(&mtu().to_le_bytes()),
        SIOCGIFINDEX => v[..4].copy_from_slice(&LO_INDEX.to_le_bytes()),
        SIOCGIFTXQLEN => v[..4].copy_from_slice(&TXQLEN.to_le_bytes()),
        SIOCGIFHWADDR => v[..2].copy_from_slice(&ARPHRD_LOOPBACK.to_le_bytes()),
        SIOCGIFADDR => v[..16].copy_from_slice(&sockaddr_in([127, 0, 0, 1])),
        SIOCGIFNETMASK => v[..16].copy_from_slice(&sockaddr_in([255, 0, 0, 0])),
        // (The peer address is the address itself; lo has no broadcast address.)
        SIOCGIFDSTADDR => v[..16].copy_from_slice(&sockaddr_in([127, 0, 0, 1])),
        SIOCGIFBRDADDR => v[..16].copy_from_slice(&sockaddr_in([0, 0, 0, 0])),
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
    let len = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    let buf = u64::from_le_bytes([c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]]);
    let mut entry = [0u8; IFREQ];
    entry[..LO_NAME.len()].copy_from_slice(LO_NAME);
    entry[16..32].copy_from_slice(&sockaddr_in([127, 0, 0, 1]));
    let used = if buf == 0 {
        IFREQ as i32
    } else if len >= IFREQ as i32 {
        user.write(buf, &entry)?;
        IFREQ as i32
    } else {
        0
    };
    user.write(arg, &used.to_le_bytes()).map(|_| 0)
}
