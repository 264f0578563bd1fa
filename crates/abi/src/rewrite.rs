//! The wire form of a rewrite plan (`Hostcall::Rewrite`): what the VMM's rewriter
//! answers when the kernel maps an ELF file executable. Little-endian u64 words:
//!
//! ```text
//! sites, rewritten, cpuid sites, cpuid rewritten, patch count, trampoline length,
//! then per patch: address, length, the bytes padded to 8,
//! then the trampoline bytes.
//! ```
//!
//! Addresses are at the load bias the plan was made for. The decoder is total:
//! the kernel reads what the VMM wrote into its own memory, but checks every length
//! against the buffer all the same.

extern crate alloc;
use alloc::vec::Vec;

/// One run of bytes to write over the code, at load bias 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WirePatch {
    pub addr: u64,
    pub bytes: Vec<u8>,
}

/// A decoded plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WirePlan {
    pub sites: u64,
    pub rewritten: u64,
    pub cpuid_sites: u64,
    pub cpuid_rewritten: u64,
    pub patches: Vec<WirePatch>,
    pub trampolines: Vec<u8>,
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

impl WirePlan {
    /// The encoded form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for w in [
            self.sites,
            self.rewritten,
            self.cpuid_sites,
            self.cpuid_rewritten,
            self.patches.len() as u64,
            self.trampolines.len() as u64,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for p in &self.patches {
            out.extend_from_slice(&p.addr.to_le_bytes());
            out.extend_from_slice(&(p.bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&p.bytes);
            out.resize(pad8(out.len()), 0);
        }
        out.extend_from_slice(&self.trampolines);
        out
    }

    /// Decodes `b`; None if it is not a whole plan.
    pub fn decode(b: &[u8]) -> Option<WirePlan> {
        let mut at = 0usize;
        let word = |at: &mut usize| -> Option<u64> {
            let w = b.get(*at..at.checked_add(8)?)?;
            *at += 8;
            Some(u64::from_le_bytes(w.try_into().ok()?))
        };
        let (sites, rewritten) = (word(&mut at)?, word(&mut at)?);
        let (cpuid_sites, cpuid_rewritten) = (word(&mut at)?, word(&mut at)?);
        let (n, tramp_len) = (word(&mut at)?, word(&mut at)?);
        // Each patch takes at least 16 bytes: a count beyond that is a lie.
        if n > (b.len() / 16) as u64 {
            return None;
        }
        let mut patches = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let addr = word(&mut at)?;
            let len = usize::try_from(word(&mut at)?).ok()?;
            let bytes = b.get(at..at.checked_add(len)?)?.to_vec();
            at = at.checked_add(pad8(len))?;
            patches.push(WirePatch { addr, bytes });
        }
        let end = at.checked_add(usize::try_from(tramp_len).ok()?)?;
        let trampolines = b.get(at..end)?.to_vec();
        Some(WirePlan { sites, rewritten, cpuid_sites, cpuid_rewritten, patches, trampolines })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_short_or_lying_input() {
        let plan = WirePlan {
            sites: 3,
            rewritten: 1,
            cpuid_sites: 2,
            cpuid_rewritten: 1,
            patches: alloc::vec![
                WirePatch { addr: 0x1000, bytes: alloc::vec![0xe9, 1, 2, 3, 4] },
                WirePatch { addr: 0x2000, bytes: alloc::vec![0xcc; 9] },
            ],
            trampolines: alloc::vec![0x90; 13],
        };
        let b = plan.encode();
        assert_eq!(b.len() % 8, 13 % 8);
        assert_eq!(WirePlan::decode(&b), Some(plan.clone()));
        for cut in 0..b.len() {
            assert_eq!(WirePlan::decode(&b[..cut]), None, "cut at {cut}");
        }
        let mut lie = b.clone();
        lie[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(WirePlan::decode(&lie), None);
        let mut lie = b;
        lie[56..64].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
        assert_eq!(WirePlan::decode(&lie), None);
        assert_eq!(WirePlan::decode(&WirePlan::default().encode()), Some(WirePlan::default()));
    }
}
