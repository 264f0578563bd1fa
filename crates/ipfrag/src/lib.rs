//! IPv4 fragmentation, pure and bounded, for the two places a datagram larger
//! than a link's MTU must be cut or put back together: the guest kernel's network
//! device (`net::inet` there: a packet the stack sends beyond the VM that is larger
//! than the link's MTU, a UDP datagram of 4 KB as DNS with EDNS or a media protocol
//! sends, leaves in fragments, and fragments that come in are put back together
//! before the stack routes them, by ports only the first fragment carries), and
//! the VMM's passt back end (passt neither fragments nor reassembles: it hands the
//! VM a datagram from outside as one frame beyond the MTU, and takes a fragment
//! from the VM for a whole datagram).
//!
//! The kernel's, rather than smoltcp's: smoltcp fragments and reassembles inside an
//! interface's own poll, while the kernel's stack routes packets between
//! per-connection socket sets itself, so this sits where packets leave and enter
//! the VM, as the link layer does. Bounded and unit-tested: at most
//! `MAX_DATAGRAMS` datagrams in progress (the oldest given up first), each at most
//! 65,535 bytes, given up `GIVE_UP_NS` after its first fragment (RFC 791's
//! reassembly timer, Linux's `ipfrag_time` is 30 s). Fragments are untrusted (from
//! the host, or from the guest): every offset and length is checked; overlapping
//! fragments simply overwrite (the datagram is whatever the sender sent last).
#![cfg_attr(not(test), no_std)]

extern crate alloc;

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

/// Datagrams being reassembled at once.
const MAX_DATAGRAMS: usize = 64;
/// How long a datagram's fragments are waited for.
const GIVE_UP_NS: u64 = 30_000_000_000;
const MF: u16 = 0x2000;
const OFFSET: u16 = 0x1fff;

/// The IPv4 header checksum of `h` (its checksum field included as it is).
fn header_sum(h: &[u8]) -> u16 {
    let mut sum: u32 = h.chunks_exact(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Fills in the header checksum of the IPv4 header `h`.
fn fill_header_checksum(h: &mut [u8]) {
    h[10..12].fill(0);
    let c = header_sum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Whether IPv4 packet `p` is a fragment (more follow, or an offset).
pub fn is_fragment(p: &[u8]) -> bool {
    p.len() >= 20 && u16::from_be_bytes([p[6], p[7]]) & (MF | OFFSET) != 0
}

/// IPv4 packet `p` (its checksums complete) in pieces of at most `mtu` bytes: the
/// packet itself if it fits. Each fragment has the packet's header (options only
/// in the first, as options not marked "copied" go only there; the stack sends
/// none), its own length, offset and flags, DF cleared, and its header checksum.
/// Nothing if `mtu` cannot carry 8 bytes of data, or `p` is malformed.
pub fn fragment(p: Vec<u8>, mtu: usize) -> Vec<Vec<u8>> {
    if p.len() <= mtu {
        return vec![p];
    }
    if p.len() < 20 || p[0] >> 4 != 4 {
        return Vec::new();
    }
    let ihl = usize::from(p[0] & 0xf) * 4;
    let flags = u16::from_be_bytes([p[6], p[7]]);
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if ihl < 20 || total != p.len() || mtu < 28 {
        return Vec::new();
    }
    let base = usize::from(flags & OFFSET) * 8;
    let step = (mtu - 20) & !7;
    let data = &p[ihl..];
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let n = step.min(data.len() - at);
        let last = at + n == data.len();
        // The first fragment keeps the options; the others get a plain header.
        let hlen = if at == 0 { ihl } else { 20 };
        let mut f = Vec::with_capacity(hlen + n);
        f.extend_from_slice(&p[..20]);
        if at == 0 {
            f.extend_from_slice(&p[20..ihl]);
        }
        f[0] = 0x40 | (hlen / 4) as u8;
        f[2..4].copy_from_slice(&((hlen + n) as u16).to_be_bytes());
        let more = !last || flags & MF != 0;
        let off = ((base + at) / 8) as u16 & OFFSET;
        f[6..8].copy_from_slice(&(off | if more { MF } else { 0 }).to_be_bytes());
        f.extend_from_slice(&data[at..at + n]);
        fill_header_checksum(&mut f[..hlen]);
        out.push(f);
        at += n;
    }
    out
}

/// One datagram being put back together.
struct Partial {
    /// When its first fragment came (monotonic ns).
    since: u64,
    /// The first fragment's header (from offset 0), once it came.
    header: Option<Vec<u8>>,
    /// The data so far, and which byte ranges of it came (sorted, merged).
    data: Vec<u8>,
    have: Vec<(usize, usize)>,
    /// The data's length, once the last fragment came.
    total: Option<usize>,
}

impl Partial {
    fn add(&mut self, start: usize, end: usize) {
        self.have.push((start, end));
        self.have.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.have.len());
        for &(s, e) in &self.have {
            match merged.last_mut() {
                Some(l) if s <= l.1 => l.1 = l.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.have = merged;
    }

    fn complete(&self) -> bool {
        self.header.is_some() && self.total.is_some_and(|t| self.have.first() == Some(&(0, t)))
    }
}

/// Fragments in, datagrams out.
#[derive(Default)]
pub struct Reassembler {
    /// By (source, destination, identification, protocol), as RFC 791.
    partial: BTreeMap<([u8; 4], [u8; 4], u16, u8), Partial>,
    /// Fragments dropped or datagrams given up.
    pub dropped: u64,
}

impl Reassembler {
    /// IPv4 packet `p` from the link at `now`: itself if it is not a fragment;
    /// the whole datagram if it was the fragment that completed one; else None
    /// (kept, or dropped if malformed).
    pub fn input(&mut self, p: Vec<u8>, now: u64) -> Option<Vec<u8>> {
        if !is_fragment(&p) {
            return Some(p);
        }
        self.expire(now);
        let ihl = usize::from(p[0] & 0xf) * 4;
        let flags = u16::from_be_bytes([p[6], p[7]]);
        let start = usize::from(flags & OFFSET) * 8;
        let end = start + p.len().saturating_sub(ihl);
        let more = flags & MF != 0;
        // (A fragment's data is a multiple of 8 bytes unless it is the last; a
        // datagram is at most 65,535 bytes with its header.)
        if ihl < 20 || p.len() < ihl || (more && (end - start) % 8 != 0) || end + ihl > 65_535 || end == start {
            self.dropped += 1;
            return None;
        }
        let key = (
            <[u8; 4]>::try_from(&p[12..16]).ok()?,
            <[u8; 4]>::try_from(&p[16..20]).ok()?,
            u16::from_be_bytes([p[4], p[5]]),
            p[9],
        );
        if !self.partial.contains_key(&key) && self.partial.len() >= MAX_DATAGRAMS {
            if let Some(oldest) = self.partial.iter().min_by_key(|(_, d)| d.since).map(|(k, _)| *k) {
                self.partial.remove(&oldest);
                self.dropped += 1;
            }
        }
        let d = self.partial.entry(key).or_insert(Partial {
            since: now,
            header: None,
            data: Vec::new(),
            have: Vec::new(),
            total: None,
        });
        if !more {
            // A second, different end, or data already past it: a broken datagram.
            if d.total.is_some_and(|t| t != end) || d.have.last().is_some_and(|h| h.1 > end) {
                self.partial.remove(&key);
                self.dropped += 1;
                return None;
            }
            d.total = Some(end);
        } else if d.total.is_some_and(|t| end > t) {
            self.partial.remove(&key);
            self.dropped += 1;
            return None;
        }
        if start == 0 {
            d.header = Some(p[..ihl].to_vec());
        }
        if d.data.len() < end {
            d.data.resize(end, 0);
        }
        d.data[start..end].copy_from_slice(&p[ihl..]);
        d.add(start, end);
        if !d.complete() {
            return None;
        }
        let d = self.partial.remove(&key)?;
        let mut out = d.header?;
        let total = d.total?;
        let hlen = out.len();
        out.extend_from_slice(&d.data[..total]);
        out[2..4].copy_from_slice(&((hlen + total) as u16).to_be_bytes());
        out[6..8].fill(0);
        fill_header_checksum(&mut out[..hlen]);
        Some(out)
    }

    /// Gives up datagrams whose fragments did not all come in time.
    fn expire(&mut self, now: u64) {
        let before = self.partial.len();
        self.partial.retain(|_, d| now.saturating_sub(d.since) < GIVE_UP_NS);
        self.dropped += (before - self.partial.len()) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 UDP-ish packet with `n` bytes of payload after a 20-byte header.
    fn packet(n: usize, id: u16) -> Vec<u8> {
        let mut p = vec![0u8; 20 + n];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + n) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40; // DF, as smoltcp sets it
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 2, 15]);
        p[16..20].copy_from_slice(&[10, 0, 2, 2]);
        for (i, b) in p[20..].iter_mut().enumerate() {
            *b = (i * 31 + 7) as u8;
        }
        fill_header_checksum(&mut p[..20]);
        p
    }

    #[test]
    fn a_large_packet_leaves_in_fragments_and_comes_back_whole() {
        let p = packet(4000, 7);
        assert_eq!(fragment(p.clone(), 5000), vec![p.clone()], "it fits");
        let frags = fragment(p.clone(), 1500);
        assert_eq!(frags.len(), 3);
        for (i, f) in frags.iter().enumerate() {
            assert!(f.len() <= 1500);
            assert_eq!(header_sum(&f[..20]), 0, "each header's checksum is right");
            let flags = u16::from_be_bytes([f[6], f[7]]);
            assert_eq!(flags & MF != 0, i < 2);
            assert_eq!(flags & 0x4000, 0, "DF cleared");
            assert_eq!(usize::from(flags & OFFSET) * 8, i * 1480);
        }
        // In any order, with a duplicate: the same packet, DF aside.
        let mut want = p.clone();
        want[6..8].fill(0);
        fill_header_checksum(&mut want[..20]);
        for order in [[0, 1, 1, 2], [2, 1, 1, 0], [1, 2, 2, 0]] {
            let mut r = Reassembler::default();
            let mut got = None;
            for i in order {
                if let Some(d) = r.input(frags[i].clone(), 0) {
                    assert!(got.is_none(), "one datagram");
                    got = Some(d);
                }
            }
            assert_eq!(got.as_ref(), Some(&want), "{order:?}");
            assert!(r.partial.is_empty());
        }
        // A packet that is not a fragment goes straight through.
        assert_eq!(Reassembler::default().input(p.clone(), 0), Some(p));
    }

    #[test]
    fn hostile_fragments_are_dropped_and_bounded() {
        let mut r = Reassembler::default();
        let frags = fragment(packet(3000, 9), 1500);
        // A middle fragment with a length that is not a multiple of 8.
        let mut odd = frags[0].clone();
        odd.pop();
        let len = odd.len() as u16;
        odd[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(r.input(odd, 0), None);
        assert_eq!(r.dropped, 1);
        // Past 65,535 bytes.
        let mut far = frags[1].clone();
        far[6..8].copy_from_slice(&(OFFSET | MF).to_be_bytes());
        assert_eq!(r.input(far, 0), None);
        // Two different ends: given up.
        let mut end1 = frags[2].clone();
        end1.truncate(end1.len() - 8);
        assert_eq!(r.input(frags[2].clone(), 0), None);
        assert_eq!(r.input(end1, 0), None);
        assert!(r.partial.is_empty());
        // Many datagrams never finished: at most MAX_DATAGRAMS kept; old ones expire.
        for id in 0..1000u16 {
            let f = fragment(packet(3000, id), 1500);
            assert_eq!(r.input(f[0].clone(), u64::from(id)), None);
        }
        assert_eq!(r.partial.len(), MAX_DATAGRAMS);
        let late = fragment(packet(3000, 5000), 1500);
        assert_eq!(r.input(late[1].clone(), GIVE_UP_NS + 2000), None);
        assert_eq!(r.partial.len(), 1, "the old ones were given up");
        // Too small to say anything: not a fragment (and the link drops it elsewhere).
        assert_eq!(r.input(vec![0x45; 10], 0), Some(vec![0x45; 10]));
        assert!(fragment(packet(100, 1), 20).is_empty(), "no room for data");
    }
}
