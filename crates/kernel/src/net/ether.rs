//! Ethernet and ARP between the TCP/IP stack and the network device: IPv4 packets
//! the stack sends to an address beyond the VM are framed for their next hop (the
//! destination itself on the VM's subnet, else the gateway), whose MAC address ARP
//! finds; frames the device receives give up their IPv4 packets to the stack, and
//! ARP requests for the VM's address are answered.
//!
//! Ours rather than smoltcp's: smoltcp resolves neighbours inside an Ethernet
//! `Interface`'s own poll, but the stack polls one socket set per connection through
//! an IP-medium interface and routes packets itself (`inet::Stack::route`), so the
//! link layer sits where packets leave and enter that router. It is small, pure and
//! unit-tested here: framing, a neighbour table, a bounded queue of packets waiting
//! for an answer, requests asked again after a second and given up after three.
//! IPv6 is not carried yet (no neighbour discovery): the device is IPv4 only.
//!
//! Every frame from the device is untrusted input: lengths are checked before any
//! field is read; anything malformed or not for us is dropped.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::net::Ipv4Addr;

pub const ETH_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
const BROADCAST: [u8; 6] = [0xff; 6];
/// Packets held per unresolved neighbour, and neighbours being resolved at once.
const PENDING_PER_HOST: usize = 16;
const PENDING_HOSTS: usize = 64;
/// Neighbour entries kept (the oldest goes first past this).
const NEIGHBOURS: usize = 1024;
/// Ask again after 1 s without an answer; drop the held packets after 3 s.
const ASK_AGAIN_NS: u64 = 1_000_000_000;
const GIVE_UP_NS: u64 = 3_000_000_000;
/// Neighbour entries expire after a minute (asked again on the next packet).
const NEIGHBOUR_TTL_NS: u64 = 60_000_000_000;

/// The link layer's state: who we are on the link, and who our neighbours are.
pub struct Ether {
    mac: [u8; 6],
    ip: Ipv4Addr,
    prefix: u8,
    gateway: Ipv4Addr,
    /// IPv4 address -> (MAC address, when learnt).
    neighbours: BTreeMap<Ipv4Addr, ([u8; 6], u64)>,
    /// Next hops being resolved: when last asked, when first asked, and the packets waiting.
    pending: BTreeMap<Ipv4Addr, (u64, u64, VecDeque<Vec<u8>>)>,
    /// Frames and packets dropped (no room, no answer, malformed).
    pub dropped: u64,
}

impl Ether {
    pub fn new(mac: [u8; 6], ip: Ipv4Addr, prefix: u8, gateway: Ipv4Addr) -> Ether {
        Ether {
            mac,
            ip,
            prefix: prefix.min(32),
            gateway,
            neighbours: BTreeMap::new(),
            pending: BTreeMap::new(),
            dropped: 0,
        }
    }

    /// Whether `a` is on the VM's subnet.
    fn on_link(&self, a: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(self.prefix)) };
        u32::from(a) & mask == u32::from(self.ip) & mask
    }

    /// IPv4 packet `packet` from the stack, to leave through the device: the frames
    /// to send now go to `out` (the packet framed for its next hop, or an ARP
    /// request while the next hop is unknown, the packet waiting for the answer).
    pub fn output(&mut self, packet: Vec<u8>, now: u64, out: &mut Vec<Vec<u8>>) {
        let Some(dst) = ipv4_dst(&packet) else {
            self.dropped += 1;
            return;
        };
        let hop = if dst == Ipv4Addr::BROADCAST || self.on_link(dst) { dst } else { self.gateway };
        if hop == Ipv4Addr::BROADCAST {
            out.push(frame(BROADCAST, self.mac, ETHERTYPE_IPV4, &packet));
            return;
        }
        if let Some((mac, at)) = self.neighbours.get(&hop) {
            if now.saturating_sub(*at) < NEIGHBOUR_TTL_NS {
                out.push(frame(*mac, self.mac, ETHERTYPE_IPV4, &packet));
                return;
            }
        }
        self.expire(now);
        if !self.pending.contains_key(&hop) && self.pending.len() >= PENDING_HOSTS {
            self.dropped += 1;
            return;
        }
        let entry = self.pending.entry(hop).or_insert((0, now, VecDeque::new()));
        if entry.2.len() >= PENDING_PER_HOST {
            entry.2.pop_front();
            self.dropped += 1;
        }
        entry.2.push_back(packet);
        if entry.0 == 0 || now.saturating_sub(entry.0) >= ASK_AGAIN_NS {
            entry.0 = now.max(1);
            out.push(self.arp(1, BROADCAST, [0; 6], hop));
        }
    }

    /// Drops what waited too long for an answer.
    fn expire(&mut self, now: u64) {
        let before: usize = self.pending.values().map(|p| p.2.len()).sum();
        self.pending.retain(|_, p| now.saturating_sub(p.1) < GIVE_UP_NS);
        let after: usize = self.pending.values().map(|p| p.2.len()).sum();
        self.dropped += (before - after) as u64;
    }

    /// Frame `f` from the device: returns the IPv4 packet it carries for the VM, if
    /// any; answers ARP requests for the VM's address and, on an ARP answer, sends
    /// the packets that waited for it (into `out`).
    pub fn input(&mut self, f: &[u8], now: u64, out: &mut Vec<Vec<u8>>) -> Option<Vec<u8>> {
        if f.len() < ETH_HEADER {
            self.dropped += 1;
            return None;
        }
        let dst: [u8; 6] = f[0..6].try_into().ok()?;
        if dst != self.mac && dst != BROADCAST {
            return None;
        }
        let kind = u16::from_be_bytes([f[12], f[13]]);
        let body = &f[ETH_HEADER..];
        match kind {
            ETHERTYPE_IPV4 => {
                // (Short frames are padded to 60 bytes: keep the packet's own length.)
                let total = usize::from(u16::from_be_bytes([*body.get(2)?, *body.get(3)?]));
                if body.first()? >> 4 != 4 || total < 20 || total > body.len() {
                    self.dropped += 1;
                    return None;
                }
                Some(body[..total].to_vec())
            }
            ETHERTYPE_ARP => {
                self.arp_input(body, now, out);
                None
            }
            _ => None,
        }
    }

    fn arp_input(&mut self, a: &[u8], now: u64, out: &mut Vec<Vec<u8>>) {
        // Ethernet and IPv4 only: htype 1, ptype 0x0800, hlen 6, plen 4.
        if a.len() < 28 || a[0..6] != [0, 1, 8, 0, 6, 4] {
            self.dropped += 1;
            return;
        }
        let op = u16::from_be_bytes([a[6], a[7]]);
        let sha: [u8; 6] = a[8..14].try_into().unwrap_or_default();
        let spa = Ipv4Addr::new(a[14], a[15], a[16], a[17]);
        let tpa = Ipv4Addr::new(a[24], a[25], a[26], a[27]);
        if sha == BROADCAST || sha[0] & 1 != 0 || spa.is_unspecified() {
            return;
        }
        // Learn the sender when it talks to us (or answers us).
        if tpa == self.ip || self.pending.contains_key(&spa) {
            if self.neighbours.len() >= NEIGHBOURS && !self.neighbours.contains_key(&spa) {
                if let Some(oldest) = self.neighbours.iter().min_by_key(|(_, v)| v.1).map(|(k, _)| *k) {
                    self.neighbours.remove(&oldest);
                }
            }
            self.neighbours.insert(spa, (sha, now));
            if let Some((_, _, waiting)) = self.pending.remove(&spa) {
                for p in waiting {
                    out.push(frame(sha, self.mac, ETHERTYPE_IPV4, &p));
                }
            }
        }
        if op == 1 && tpa == self.ip {
            out.push(self.arp(2, sha, sha, spa));
        }
    }

    /// An ARP request (op 1) or reply (op 2) from us to `to` (Ethernet), about
    /// target `tha`/`tpa`.
    fn arp(&self, op: u16, to: [u8; 6], tha: [u8; 6], tpa: Ipv4Addr) -> Vec<u8> {
        let mut a = Vec::with_capacity(28);
        a.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
        a.extend_from_slice(&op.to_be_bytes());
        a.extend_from_slice(&self.mac);
        a.extend_from_slice(&self.ip.octets());
        a.extend_from_slice(&tha);
        a.extend_from_slice(&tpa.octets());
        frame(to, self.mac, ETHERTYPE_ARP, &a)
    }
}

/// Fills in the checksums of IPv4 packet `p` (its header's, and its TCP or UDP
/// segment's over the pseudo-header), with smoltcp's wire code: the stack leaves
/// them out on the loopback, where nothing corrupts a packet, and they are
/// computed here for packets that leave the VM. A packet too short for what its
/// headers say is left alone.
pub fn fill_checksums(p: &mut [u8]) {
    use smoltcp::wire::{IpAddress, IpProtocol, Ipv4Packet, TcpPacket, UdpPacket};
    let Ok(mut ip) = Ipv4Packet::new_checked(p) else { return };
    ip.fill_checksum();
    // Fragments after the first carry no transport header.
    if ip.frag_offset() != 0 {
        return;
    }
    let (src, dst) = (IpAddress::Ipv4(ip.src_addr()), IpAddress::Ipv4(ip.dst_addr()));
    match ip.next_header() {
        IpProtocol::Tcp => {
            if let Ok(mut t) = TcpPacket::new_checked(ip.payload_mut()) {
                t.fill_checksum(&src, &dst);
            }
        }
        IpProtocol::Udp => {
            if let Ok(mut u) = UdpPacket::new_checked(ip.payload_mut()) {
                u.fill_checksum(&src, &dst);
            }
        }
        _ => {}
    }
}

/// As [`fill_checksums`], but the TCP or UDP checksum is left for the device to
/// complete (its field holds the pseudo-header's sum, as checksum offload
/// wants): what [`csum_request`] then asks of it. Fragments get complete ones.
pub fn fill_checksums_partial(p: &mut [u8]) {
    use smoltcp::wire::Ipv4Packet;
    let Some(off) = transport_csum(p) else {
        fill_checksums(p);
        return;
    };
    let Ok(mut ip) = Ipv4Packet::new_checked(&mut *p) else { return };
    ip.fill_checksum();
    let ihl = usize::from(p[0] & 0xf) * 4;
    let len = (p.len() - ihl) as u32;
    let mut sum: u32 = 0;
    for w in p[12..20].chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    sum += u32::from(p[9]) + len;
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[ihl + off..ihl + off + 2].copy_from_slice(&(sum as u16).to_be_bytes());
}

/// Where the checksum field of IPv4 packet `p`'s TCP or UDP header is, from the
/// transport header's start; None for other protocols and for fragments.
fn transport_csum(p: &[u8]) -> Option<usize> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(p[0] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    // (More fragments, or an offset: a fragment.)
    if ihl < 20 || total != p.len() || u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0 {
        return None;
    }
    let off = match p[9] {
        6 => 16,
        17 => 6,
        _ => return None,
    };
    (p.len() >= ihl + off + 2).then_some(off)
}

/// The checksum request (start, offset in the frame) for Ethernet frame `f`
/// carrying an IPv4 TCP or UDP packet whose checksum [`fill_checksums_partial`]
/// left to complete; None for anything else.
pub fn csum_request(f: &[u8]) -> Option<(u16, u16)> {
    if f.len() < 14 || f[12..14] != [0x08, 0x00] {
        return None;
    }
    let off = transport_csum(&f[14..])?;
    let ihl = usize::from(f[14] & 0xf) * 4;
    Some(((14 + ihl) as u16, off as u16))
}

/// Lowers the MSS option of a TCP SYN in IPv4 packet `p` to at most `mss` (MSS
/// clamping, as routers do): the stack's interface has the loopback's 64 KiB MTU,
/// and a peer beyond the device must not send segments larger than the link's.
/// Checksums are filled in afterwards.
pub fn clamp_mss(p: &mut [u8], mss: u16) {
    if p.len() < 20 || p[0] >> 4 != 4 || p[9] != 6 {
        return;
    }
    let ihl = usize::from(p[0] & 15) * 4;
    let Some(tcp) = p.get_mut(ihl..) else { return };
    if tcp.len() < 20 || tcp[13] & 0x02 == 0 {
        return;
    }
    let end = (usize::from(tcp[12] >> 4) * 4).min(tcp.len());
    let mut at = 20;
    while at < end {
        match tcp[at] {
            0 => return,
            1 => at += 1,
            kind => {
                let Some(&len) = tcp.get(at + 1) else { return };
                let len = usize::from(len);
                if len < 2 || at + len > end {
                    return;
                }
                if kind == 2 && len == 4 {
                    let cur = u16::from_be_bytes([tcp[at + 2], tcp[at + 3]]);
                    if cur > mss {
                        tcp[at + 2..at + 4].copy_from_slice(&mss.to_be_bytes());
                    }
                    return;
                }
                at += len;
            }
        }
    }
}

/// An Ethernet frame.
fn frame(dst: [u8; 6], src: [u8; 6], kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HEADER + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&kind.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The destination of an IPv4 packet.
fn ipv4_dst(p: &[u8]) -> Option<Ipv4Addr> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    Some(Ipv4Addr::new(p[16], p[17], p[18], p[19]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// The one's-complement sum of `b` as 16-bit big-endian words, added to `acc`
    /// (to verify checksums independently of the code that fills them in).
    fn sum(b: &[u8], mut acc: u64) -> u64 {
        let mut words = b.chunks_exact(2);
        for w in &mut words {
            acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = words.remainder() {
            acc += u64::from(*last) << 8;
        }
        acc
    }

    fn fold(mut acc: u64) -> u16 {
        while acc >> 16 != 0 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    const US: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
    const GW: [u8; 6] = [0x9a, 0x55, 0x9a, 0x55, 0x9a, 0x55];

    fn ether() -> Ether {
        Ether::new(US, Ipv4Addr::new(10, 0, 2, 15), 24, Ipv4Addr::new(10, 0, 2, 2))
    }

    fn packet_to(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[12..16].copy_from_slice(&[10, 0, 2, 15]);
        p[16..20].copy_from_slice(&dst);
        p
    }

    fn arp_reply(from_mac: [u8; 6], from_ip: [u8; 4]) -> Vec<u8> {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 2];
        a.extend_from_slice(&from_mac);
        a.extend_from_slice(&from_ip);
        a.extend_from_slice(&US);
        a.extend_from_slice(&[10, 0, 2, 15]);
        frame(US, from_mac, ETHERTYPE_ARP, &a)
    }

    #[test]
    fn a_packet_beyond_the_subnet_waits_for_the_gateways_address() {
        let mut e = ether();
        let mut out = Vec::new();
        e.output(packet_to([1, 2, 3, 4]), 10, &mut out);
        // An ARP request for the gateway, broadcast.
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &BROADCAST);
        assert_eq!(u16::from_be_bytes([out[0][12], out[0][13]]), ETHERTYPE_ARP);
        assert_eq!(&out[0][ETH_HEADER + 24..ETH_HEADER + 28], &[10, 0, 2, 2]);
        // A second packet waits without asking again.
        out.clear();
        e.output(packet_to([1, 2, 3, 5]), 20, &mut out);
        assert!(out.is_empty());
        // The answer releases both, framed for the gateway.
        assert_eq!(e.input(&arp_reply(GW, [10, 0, 2, 2]), 30, &mut out), None);
        assert_eq!(out.len(), 2);
        for f in &out {
            assert_eq!(&f[0..6], &GW);
            assert_eq!(&f[6..12], &US);
            assert_eq!(u16::from_be_bytes([f[12], f[13]]), ETHERTYPE_IPV4);
        }
        // Known now: straight out.
        out.clear();
        e.output(packet_to([8, 8, 8, 8]), 40, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &GW);
    }

    #[test]
    fn on_the_subnet_the_destination_itself_is_asked_for() {
        let mut e = ether();
        let mut out = Vec::new();
        e.output(packet_to([10, 0, 2, 77]), 1, &mut out);
        assert_eq!(&out[0][ETH_HEADER + 24..ETH_HEADER + 28], &[10, 0, 2, 77]);
    }

    #[test]
    fn requests_for_our_address_are_answered_and_ip_is_unwrapped() {
        let mut e = ether();
        let mut req = vec![0, 1, 8, 0, 6, 4, 0, 1];
        req.extend_from_slice(&GW);
        req.extend_from_slice(&[10, 0, 2, 2]);
        req.extend_from_slice(&[0; 6]);
        req.extend_from_slice(&[10, 0, 2, 15]);
        let mut out = Vec::new();
        assert_eq!(e.input(&frame(BROADCAST, GW, ETHERTYPE_ARP, &req), 5, &mut out), None);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &GW);
        assert_eq!(u16::from_be_bytes([out[0][ETH_HEADER + 6], out[0][ETH_HEADER + 7]]), 2);
        assert_eq!(&out[0][ETH_HEADER + 8..ETH_HEADER + 14], &US);
        // An IPv4 packet padded to the minimum frame comes out at its own length.
        let mut p = packet_to([10, 0, 2, 15]);
        p.resize(46, 0);
        let got = e.input(&frame(US, GW, ETHERTYPE_IPV4, &p), 6, &mut out).unwrap();
        assert_eq!(got.len(), 28);
        // Not for us, or malformed: nothing.
        assert_eq!(e.input(&frame([2; 6], GW, ETHERTYPE_IPV4, &p), 7, &mut out), None);
        assert_eq!(e.input(&[1, 2, 3], 7, &mut out), None);
        let mut bad = p.clone();
        bad[2..4].copy_from_slice(&9999u16.to_be_bytes());
        assert_eq!(e.input(&frame(US, GW, ETHERTYPE_IPV4, &bad), 7, &mut out), None);
        assert_eq!(e.input(&frame(US, GW, ETHERTYPE_ARP, &[0, 1]), 7, &mut out), None);
    }

    #[test]
    fn checksums_are_what_the_wire_expects() {
        // A SYN from 10.0.2.15:32768 to 10.0.2.2:18081 (a real capture's bytes,
        // checksums zeroed): its IPv4 and TCP checksums verify to 0 once filled,
        // and the header's is the one Linux computed for the same header.
        let mut p = vec![
            0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 2, 15, 10, 0, 2, 2, 0x80, 0, 0x46, 0xa1, 0x65, 0x74,
            0x3e, 0xd3, 0, 0, 0, 0, 0x50, 0x02, 0xfa, 0xf0, 0, 0, 0, 0,
        ];
        fill_checksums(&mut p);
        assert_eq!(fold(sum(&p[..20], 0)), 0xffff, "header verifies");
        let mut pseudo = [0u8; 12];
        pseudo[..8].copy_from_slice(&p[12..20]);
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&20u16.to_be_bytes());
        assert_eq!(fold(sum(&p[20..], sum(&pseudo, 0))), 0xffff, "segment verifies");
        assert_ne!(&p[10..12], &[0, 0]);
        // UDP likewise, odd length; garbage is left alone.
        let mut u = vec![
            0x45, 0, 0, 31, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 2, 15, 10, 0, 2, 3, 0x30, 0x39, 0, 53, 0, 11, 0, 0, 1, 2,
            3,
        ];
        fill_checksums(&mut u);
        let mut pseudo = [0u8; 12];
        pseudo[..8].copy_from_slice(&u[12..20]);
        pseudo[9] = 17;
        pseudo[10..12].copy_from_slice(&11u16.to_be_bytes());
        assert_eq!(fold(sum(&u[20..], sum(&pseudo, 0))), 0xffff);
        let mut bad = vec![0x45, 0, 0xff, 0xff, 0, 0];
        fill_checksums(&mut bad);
        assert_eq!(bad, [0x45, 0, 0xff, 0xff, 0, 0]);
    }

    #[test]
    fn a_syns_mss_is_clamped_to_the_link() {
        // SYN-ACK with options: NOP, MSS 65495, window scale.
        let mut p = vec![0x45, 0, 0, 52, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 2, 15, 10, 0, 2, 2];
        let mut tcp = vec![0x13, 0x89, 0xe8, 0x7c, 0, 0, 0, 1, 0, 0, 0, 1, 0x80, 0x12, 0xff, 0xff, 0, 0, 0, 0];
        tcp.extend_from_slice(&[1, 2, 4, 0xff, 0xd7, 3, 3, 7, 0, 0, 0, 0]);
        p.extend_from_slice(&tcp);
        clamp_mss(&mut p, 1460);
        assert_eq!(&p[20 + 21..20 + 25], &[2, 4, 0x05, 0xb4]);
        // A smaller one stays; a segment without SYN, or options that run off the
        // header, are left alone.
        clamp_mss(&mut p, 9000);
        assert_eq!(&p[20 + 23..20 + 25], &[0x05, 0xb4]);
        let mut ack = p.clone();
        ack[20 + 13] = 0x10;
        ack[20 + 23] = 0xff;
        clamp_mss(&mut ack, 100);
        assert_eq!(ack[20 + 23], 0xff);
        let mut bad = p.clone();
        bad[20 + 22] = 40;
        clamp_mss(&mut bad, 100);
        assert_eq!(&bad[20 + 23..20 + 25], &[0x05, 0xb4]);
    }

    #[test]
    fn unanswered_packets_are_bounded_and_given_up() {
        let mut e = ether();
        let mut out = Vec::new();
        for i in 0..100 {
            e.output(packet_to([1, 1, 1, 1]), i, &mut out);
        }
        assert_eq!(e.pending[&Ipv4Addr::new(10, 0, 2, 2)].2.len(), PENDING_PER_HOST);
        // Asked again after a second.
        out.clear();
        e.output(packet_to([1, 1, 1, 1]), ASK_AGAIN_NS + 200, &mut out);
        assert_eq!(out.len(), 1);
        // Given up after three.
        e.output(packet_to([10, 0, 2, 9]), GIVE_UP_NS + 500, &mut out);
        assert!(!e.pending.contains_key(&Ipv4Addr::new(10, 0, 2, 2)));
        assert!(e.dropped > 0);
    }

    #[test]
    fn a_checksum_left_to_the_device_completes_to_the_full_one() {
        for (proto, off) in [(17u8, 6usize), (6, 16)] {
            // IPv4 + a transport header and an odd-length payload.
            let len = 20 + 20 + 33;
            let mut p = vec![0u8; len];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            p[8] = 64;
            p[9] = proto;
            p[12..16].copy_from_slice(&[10, 0, 2, 15]);
            p[16..20].copy_from_slice(&[93, 184, 216, 34]);
            for (i, b) in p[20..].iter_mut().enumerate() {
                *b = (i * 13 + 5) as u8;
            }
            if proto == 17 {
                p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
            } else {
                p[32] = 0x50;
            }
            let mut full = p.clone();
            fill_checksums(&mut full);
            let mut partial = p.clone();
            fill_checksums_partial(&mut partial);
            assert_eq!(partial[10..12], full[10..12], "the IP header's own checksum is complete");
            // What the device does: the sum from the transport header on, with the
            // field's pseudo-header sum in it, complemented into the field.
            let f = frame(GW, US, ETHERTYPE_IPV4, &partial);
            let (start, at) = csum_request(&f).expect("a request");
            assert_eq!((start, at), (34, off as u16));
            let done = !fold(sum(&f[usize::from(start)..], 0));
            assert_eq!(done.to_be_bytes(), full[20 + off..22 + off], "protocol {proto}");
        }
        // Not asked for: ARP, ICMP, a fragment (checksummed whole instead).
        assert_eq!(csum_request(&arp_reply(GW, [10, 0, 2, 2])), None);
        let mut icmp = packet_to([1, 1, 1, 1]);
        icmp[9] = 1;
        assert_eq!(csum_request(&frame(GW, US, ETHERTYPE_IPV4, &icmp)), None);
        let mut frag = packet_to([1, 1, 1, 1]);
        frag[9] = 17;
        frag[6] = 0x20; // more fragments
        assert_eq!(csum_request(&frame(GW, US, ETHERTYPE_IPV4, &frag)), None);
        let mut whole = frag.clone();
        fill_checksums(&mut whole);
        fill_checksums_partial(&mut frag);
        assert_eq!(frag, whole);
    }
}
