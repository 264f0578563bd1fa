//! What a packet is, for routing it to the one smoltcp socket it is for. Pure.
//!
//! The stack (`inet.rs`) keeps every smoltcp socket in a socket set of its own,
//! so that smoltcp's work per packet (which walks the sockets of the set it is
//! given) does not grow with the number of connections. Packets therefore go
//! from set to set through us: [`parse`] reads the addresses, ports and TCP flags
//! of an IPv4 or IPv6 packet as smoltcp writes them (no options we need, no
//! extension headers), and the stack looks the flow up in its tables. Anything
//! that is not TCP or UDP, or is cut short, parses to None.

use smoltcp::wire::{IpAddress, IpEndpoint};

pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;

/// TCP flags.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

/// A TCP or UDP packet's flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    pub proto: u8,
    pub src: IpEndpoint,
    pub dst: IpEndpoint,
    /// TCP flags (0 for UDP).
    pub flags: u8,
}

impl Flow {
    /// A TCP segment that opens a connection (SYN without ACK).
    pub fn is_syn(&self) -> bool {
        self.proto == IPPROTO_TCP && self.flags & (SYN | ACK | RST) == SYN
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The flow of packet `p` (an IP packet), if it is TCP or UDP.
pub fn parse(p: &[u8]) -> Option<Flow> {
    let (proto, src, dst, l4) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl {
                return None;
            }
            // A fragment other than the first has no ports.
            if be16(p, 6)? & 0x1fff != 0 {
                return None;
            }
            let a = |at: usize| IpAddress::v4(p[at], p[at + 1], p[at + 2], p[at + 3]);
            (p[9], a(12), a(16), &p[ihl..])
        }
        6 => {
            if p.len() < 40 {
                return None;
            }
            let a = |at: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&p[at..at + 16]);
                IpAddress::Ipv6(core::net::Ipv6Addr::from(b))
            };
            (p[6], a(8), a(24), &p[40..])
        }
        _ => return None,
    };
    let flags = match proto {
        IPPROTO_TCP => *l4.get(13)?,
        IPPROTO_UDP => {
            be16(l4, 6)?;
            0
        }
        _ => return None,
    };
    Some(Flow { proto, src: IpEndpoint::new(src, be16(l4, 0)?), dst: IpEndpoint::new(dst, be16(l4, 2)?), flags })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn v4(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2];
        p.extend_from_slice(l4);
        p
    }

    fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[12] = 0x50;
        t[13] = flags;
        t
    }

    #[test]
    fn tcp_over_ipv4() {
        let f = parse(&v4(IPPROTO_TCP, &tcp(40000, 80, SYN))).unwrap();
        assert_eq!(f.src, IpEndpoint::new(IpAddress::v4(127, 0, 0, 1), 40000));
        assert_eq!(f.dst, IpEndpoint::new(IpAddress::v4(127, 0, 0, 2), 80));
        assert!(f.is_syn());
        assert!(!parse(&v4(IPPROTO_TCP, &tcp(1, 2, SYN | ACK))).unwrap().is_syn());
        assert!(!parse(&v4(IPPROTO_TCP, &tcp(1, 2, ACK | FIN))).unwrap().is_syn());
    }

    #[test]
    fn udp_over_ipv6() {
        let mut p = vec![0x60, 0, 0, 0, 0, 8, IPPROTO_UDP, 64];
        p.extend_from_slice(&[0; 15]);
        p.push(1); // ::1
        p.extend_from_slice(&[0; 15]);
        p.push(1);
        p.extend_from_slice(&[0x12, 0x34, 0, 53, 0, 8, 0, 0]);
        let f = parse(&p).unwrap();
        assert_eq!(f.proto, IPPROTO_UDP);
        assert_eq!(f.src.port, 0x1234);
        assert_eq!(f.dst, IpEndpoint::new(IpAddress::v6(0, 0, 0, 0, 0, 0, 0, 1), 53));
        assert_eq!(f.flags, 0);
    }

    #[test]
    fn anything_else_or_short_is_none() {
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&v4(1, &[8, 0, 0, 0])), None, "ICMP");
        assert_eq!(parse(&v4(IPPROTO_TCP, &[0, 1, 0])), None, "cut short");
        let mut frag = v4(IPPROTO_UDP, &[0, 1, 0, 2, 0, 8, 0, 0]);
        frag[7] = 8; // fragment offset 8
        assert_eq!(parse(&frag), None);
        let mut bad = v4(IPPROTO_UDP, &[0, 1, 0, 2, 0, 8, 0, 0]);
        bad[0] = 0x43; // header length 12
        assert_eq!(parse(&bad), None);
        assert_eq!(parse(&[0x60; 39]), None);
    }
}
