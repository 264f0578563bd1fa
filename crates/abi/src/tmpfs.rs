//! In-memory file systems the kernel mounts at boot (`--tmpfs PATH[:OPTIONS]`,
//! an OCI bundle's tmpfs mounts). The VMM writes one record per mount at
//! `BootInfo::tmpfs_phys` (`tmpfs_len` bytes in all): a 16-byte header
//! (`flags`, `mode` as little-endian u32, `size` as u64), then the guest path
//! (absolute, normalized) NUL-padded to a multiple of 8 bytes; a path ends at
//! its first NUL.

use alloc::vec::Vec;

/// Mounted read-only.
pub const RO: u32 = 1;
/// Starts with a copy of what the directory held before (podman's
/// `tmpcopyup`); without it, empty.
pub const COPYUP: u32 = 2;

/// One mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tmpfs {
    pub flags: u32,
    /// Permission bits of its root.
    pub mode: u32,
    /// `size=`, in bytes (0: none; the kernel does not enforce it yet).
    pub size: u64,
    pub path: Vec<u8>,
}

const HEADER: usize = 16;

/// The records of `mounts`, one after another.
pub fn encode(mounts: &[Tmpfs]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in mounts {
        out.extend(m.flags.to_le_bytes());
        out.extend(m.mode.to_le_bytes());
        out.extend(m.size.to_le_bytes());
        out.extend(&m.path);
        out.resize((out.len() + 1).next_multiple_of(8), 0);
    }
    out
}

/// The mounts of `bytes` ([`encode`]'s form), up to the first malformed record.
pub fn decode(bytes: &[u8]) -> Vec<Tmpfs> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(h) = bytes.get(at..at + HEADER) {
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let mut size = [0u8; 8];
        size.copy_from_slice(&h[8..16]);
        let rest = &bytes[at + HEADER..];
        let Some(len) = rest.iter().position(|b| *b == 0) else { break };
        out.push(Tmpfs { flags: word(0), mode: word(4), size: u64::from_le_bytes(size), path: rest[..len].to_vec() });
        at = (at + HEADER + len + 1).next_multiple_of(8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let m = [
            Tmpfs { flags: RO | COPYUP, mode: 0o1777, size: 64 << 20, path: b"/run".to_vec() },
            Tmpfs { flags: 0, mode: 0o755, size: 0, path: b"/var/cache/app12".to_vec() },
        ];
        let bytes = encode(&m);
        assert_eq!(bytes.len() % 8, 0);
        assert_eq!(decode(&bytes), m);
        assert_eq!(decode(&bytes[..bytes.len() - 8]), m[..1]);
        assert!(decode(&[]).is_empty());
    }
}
