//! Support for tests and fuzzing, here and in the VMM's tests: small hand-made ELF
//! files. Not used by onering itself.

use crate::elf::PT_LOAD;

const ET_EXEC: u16 = 2;
const EM_X86_64: u16 = 62;

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
