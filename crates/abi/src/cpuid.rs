//! The CPUID table the VMM hands the kernel, so that rewritten `cpuid`
//! instructions are answered in ring 3 (a trapped one costs ~27 µs under PVM).
//!
//! The page at [`crate::layout::CPUID_PHYS`] holds a count word, then that many
//! [`Entry`]s as little-endian u32s: what KVM answers vCPU 0 after the VMM built its
//! state (`KVM_GET_CPUID2`, so the bits that follow CR4 and XCR0 are as the guest
//! sees them). What differs between vCPUs is only the APIC id ([`for_cpu`], used by
//! the VMM to give each vCPU its table and by the kernel to answer for the CPU it
//! runs on). A leaf the table does not hold is asked of the CPU itself (the
//! kernel's business): KVM's rules for out-of-range leaves stay KVM's.

/// One leaf (and sub-leaf), as `kvm_cpuid_entry2`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub function: u32,
    pub index: u32,
    /// [`SIGNIFICANT_INDEX`]: the sub-leaf (ECX) selects this entry.
    pub flags: u32,
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

/// KVM's `KVM_CPUID_FLAG_SIGNIFCANT_INDEX`.
pub const SIGNIFICANT_INDEX: u32 = 1;
/// Bytes per entry in the page: the seven words and one of padding.
pub const ENTRY_BYTES: usize = 32;
/// Most entries the page holds (after the count word); a VMM with more writes
/// none, and every `cpuid` is then asked of the CPU.
pub const MAX_ENTRIES: usize = (crate::layout::PAGE_SIZE as usize - 8) / ENTRY_BYTES;

/// `regs` (EAX, EBX, ECX, EDX of leaf `function`) as the vCPU `cpu` sees them:
/// its APIC id in leaf 1 (EBX bits 31:24) and in the topology leaves 0xb and 0x1f
/// (EDX).
pub fn for_cpu(function: u32, mut regs: [u32; 4], cpu: u32) -> [u32; 4] {
    match function {
        1 => regs[1] = (regs[1] & 0x00ff_ffff) | (cpu << 24),
        0xb | 0x1f => regs[3] = cpu,
        _ => {}
    }
    regs
}

/// What `cpuid` answers on vCPU `cpu` for EAX `leaf`, ECX `sub`, if `table`
/// holds it.
pub fn lookup(table: &[Entry], leaf: u32, sub: u32, cpu: u32) -> Option<[u32; 4]> {
    let e = table.iter().find(|e| e.function == leaf && (e.flags & SIGNIFICANT_INDEX == 0 || e.index == sub))?;
    Some(for_cpu(leaf, [e.eax, e.ebx, e.ecx, e.edx], cpu))
}

/// The page's bytes for `entries` (none if there are more than [`MAX_ENTRIES`]).
pub fn encode(entries: &[Entry]) -> alloc::vec::Vec<u8> {
    let entries = if entries.len() > MAX_ENTRIES { &[][..] } else { entries };
    let mut out = alloc::vec::Vec::with_capacity(8 + entries.len() * ENTRY_BYTES);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        for w in [e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx, 0] {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    out
}

/// The entries of a page (`encode`'s output); a count beyond what the bytes hold
/// or beyond [`MAX_ENTRIES`] gives none.
pub fn decode(page: &[u8]) -> alloc::vec::Vec<Entry> {
    let word = |at: usize| page.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let n = page.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    if n > MAX_ENTRIES as u64 || 8 + n as usize * ENTRY_BYTES > page.len() {
        return alloc::vec::Vec::new();
    }
    (0..n as usize)
        .filter_map(|i| {
            let at = 8 + i * ENTRY_BYTES;
            Some(Entry {
                function: word(at)?,
                index: word(at + 4)?,
                flags: word(at + 8)?,
                eax: word(at + 12)?,
                ebx: word(at + 16)?,
                ecx: word(at + 20)?,
                edx: word(at + 24)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(function: u32, index: u32, flags: u32, ebx: u32) -> Entry {
        Entry { function, index, flags, eax: function ^ index, ebx, ecx: 3, edx: 4 }
    }

    #[test]
    fn a_table_survives_the_page_and_answers_per_cpu() {
        let t = [e(0, 0, 0, 0x756e_6547), e(1, 0, 0, 0x0102_0800), e(4, 0, 1, 10), e(4, 1, 1, 11), e(0xb, 0, 1, 1)];
        let page = encode(&t);
        assert_eq!(page.len(), 8 + 5 * ENTRY_BYTES);
        let back = decode(&page);
        assert_eq!(back, t);
        // A sub-leaf that does not select: any ECX.
        assert_eq!(lookup(&back, 0, 77, 0), Some([0, 0x756e_6547, 3, 4]));
        // One that does.
        assert_eq!(lookup(&back, 4, 1, 0), Some([5, 11, 3, 4]));
        assert_eq!(lookup(&back, 4, 2, 0), None);
        // The APIC id of the asking CPU.
        assert_eq!(lookup(&back, 1, 0, 3).map(|r| r[1]), Some(0x0302_0800));
        assert_eq!(lookup(&back, 0xb, 0, 5).map(|r| r[3]), Some(5));
        assert_eq!(lookup(&back, 0x8000_0000, 0, 0), None);
    }

    #[test]
    fn a_broken_page_gives_no_entries() {
        let mut page = encode(&[e(0, 0, 0, 1)]);
        page.truncate(20);
        assert!(decode(&page).is_empty());
        assert!(decode(&[]).is_empty());
        assert!(decode(&u64::MAX.to_le_bytes()).is_empty());
        let many = alloc::vec![Entry::default(); MAX_ENTRIES + 1];
        assert_eq!(encode(&many), 0u64.to_le_bytes());
    }
}
