//! Support for tests and fuzzing, here and in the VMM's tests: small hand-made ELF
//! files, and a pseudo-random sequence to corrupt them with. Not used by onering
//! itself.

use crate::elf::PT_LOAD;

const ET_EXEC: u16 = 2;
const EM_X86_64: u16 = 62;

/// The next number of a xorshift sequence (state `x`, never 0): cheap, repeatable
/// noise for corrupting files in tests.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A minimal valid static executable: one PT_LOAD of `code` at 0x401000.
pub fn tiny_elf(code: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 0x1000];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4] = 2;
    f[5] = 1;
    f[6] = 1;
    f[16..18].copy_from_slice(&ET_EXEC.to_le_bytes());
    f[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
    f[24..32].copy_from_slice(&0x401000u64.to_le_bytes());
    f[32..40].copy_from_slice(&64u64.to_le_bytes());
    f[52..54].copy_from_slice(&64u16.to_le_bytes());
    f[54..56].copy_from_slice(&56u16.to_le_bytes());
    f[56..58].copy_from_slice(&1u16.to_le_bytes());
    let p = 64;
    f[p..p + 4].copy_from_slice(&PT_LOAD.to_le_bytes());
    f[p + 4..p + 8].copy_from_slice(&5u32.to_le_bytes());
    f[p + 8..p + 16].copy_from_slice(&0x1000u64.to_le_bytes());
    f[p + 16..p + 24].copy_from_slice(&0x401000u64.to_le_bytes());
    f[p + 32..p + 40].copy_from_slice(&(code.len() as u64).to_le_bytes());
    f[p + 40..p + 48].copy_from_slice(&(code.len() as u64 + 0x100).to_le_bytes());
    f.extend_from_slice(code);
    f
}

/// `elf` with sections appended: each `(name, address, bytes)` as an allocated
/// PROGBITS section, then a `.shstrtab`, then the section headers (a null one first),
/// as a linker lays them out.
pub fn with_sections(elf: &[u8], sections: &[(&str, u64, &[u8])]) -> Vec<u8> {
    let mut f = elf.to_vec();
    let mut names = vec![0u8];
    let mut headers = vec![[0u8; 64]];
    let mut header = |name: u32, kind: u32, addr: u64, offset: u64, size: u64| {
        let mut h = [0u8; 64];
        h[0..4].copy_from_slice(&name.to_le_bytes());
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[8..16].copy_from_slice(&2u64.to_le_bytes());
        h[16..24].copy_from_slice(&addr.to_le_bytes());
        h[24..32].copy_from_slice(&offset.to_le_bytes());
        h[32..40].copy_from_slice(&size.to_le_bytes());
        headers.push(h);
    };
    for (name, addr, data) in sections {
        f.resize(f.len().next_multiple_of(8), 0);
        let name_at = names.len() as u32;
        names.extend(name.as_bytes());
        names.push(0);
        header(name_at, 1, *addr, f.len() as u64, data.len() as u64);
        f.extend_from_slice(data);
    }
    let strtab_name = names.len() as u32;
    names.extend(b".shstrtab\0");
    header(strtab_name, 3, 0, f.len() as u64, names.len() as u64);
    f.extend(&names);
    f.resize(f.len().next_multiple_of(8), 0);
    let shoff = f.len() as u64;
    for h in &headers {
        f.extend(h);
    }
    f[40..48].copy_from_slice(&shoff.to_le_bytes());
    f[58..60].copy_from_slice(&64u16.to_le_bytes());
    f[60..62].copy_from_slice(&(headers.len() as u16).to_le_bytes());
    f[62..64].copy_from_slice(&(headers.len() as u16 - 1).to_le_bytes());
    f
}
