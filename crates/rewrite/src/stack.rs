//! The program's initial stack, as the System V x86-64 ABI and Linux lay it out:
//! from `sp` up, argc, argv pointers, NULL, envp pointers, NULL, auxv pairs ending in
//! AT_NULL; above them the strings, the 16 AT_RANDOM bytes and the platform name.
//! Pure: builds the bytes and the stack pointer for a given stack top.

use alloc::{vec, vec::Vec};
use thiserror::Error;

pub const AT_NULL: u64 = 0;
pub const AT_PHDR: u64 = 3;
pub const AT_PHENT: u64 = 4;
pub const AT_PHNUM: u64 = 5;
pub const AT_PAGESZ: u64 = 6;
pub const AT_BASE: u64 = 7;
pub const AT_FLAGS: u64 = 8;
pub const AT_ENTRY: u64 = 9;
pub const AT_UID: u64 = 11;
pub const AT_EUID: u64 = 12;
pub const AT_GID: u64 = 13;
pub const AT_EGID: u64 = 14;
pub const AT_PLATFORM: u64 = 15;
pub const AT_HWCAP: u64 = 16;
pub const AT_CLKTCK: u64 = 17;
pub const AT_SECURE: u64 = 23;
pub const AT_RANDOM: u64 = 25;
pub const AT_HWCAP2: u64 = 26;
pub const AT_EXECFN: u64 = 31;
pub const AT_SYSINFO_EHDR: u64 = 33;

/// Linux limits arguments plus environment to a quarter of the 8 MiB stack.
pub const MAX_ARG_BYTES: usize = 2 << 20;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum StackError {
    #[error("argument list and environment too long ({0} bytes, limit {MAX_ARG_BYTES})")]
    TooLong(usize),
    #[error("an argument or environment variable contains a NUL byte")]
    Nul,
}

/// What goes on the stack. `auxv` holds the plain-valued entries; the builder adds
/// the pointer-valued ones (AT_RANDOM, AT_PLATFORM, AT_EXECFN) and AT_NULL.
pub struct StackSpec<'a> {
    pub argv: &'a [Vec<u8>],
    pub envp: &'a [Vec<u8>],
    pub execfn: &'a [u8],
    pub random: [u8; 16],
    pub auxv: &'a [(u64, u64)],
}

/// The stack's bytes, to be placed so that they end at the stack top.
#[derive(Debug)]
pub struct InitialStack {
    pub bytes: Vec<u8>,
    /// The initial stack pointer (16-byte aligned, pointing at argc).
    pub sp: u64,
    /// Address of the AT_EXECFN string.
    pub execfn: u64,
}

pub fn build(top: u64, spec: &StackSpec) -> Result<InitialStack, StackError> {
    let strings = spec.argv.iter().chain(spec.envp).map(|s| s.as_slice()).chain(core::iter::once(spec.execfn));
    let mut str_bytes = 0usize;
    for s in strings {
        if s.contains(&0) {
            return Err(StackError::Nul);
        }
        str_bytes += s.len() + 1;
    }
    let words = 1 + spec.argv.len() + 1 + spec.envp.len() + 1 + 2 * (spec.auxv.len() + 4);
    let total_est = str_bytes + words * 8 + 64;
    if total_est > MAX_ARG_BYTES {
        return Err(StackError::TooLong(total_est));
    }

    // The area above the vector, in ascending order, ending 8 bytes below the top
    // (a NULL end marker): platform name, random bytes, argument strings,
    // environment strings, execfn.
    let high_len = 7 + 16 + str_bytes;
    let strings_start = top - 8 - high_len as u64;
    let mut high: Vec<u8> = Vec::with_capacity(high_len);
    let mut put = |data: &[u8], nul: bool| -> u64 {
        let at = strings_start + high.len() as u64;
        high.extend_from_slice(data);
        if nul {
            high.push(0);
        }
        at
    };
    let platform = put(b"x86_64", true);
    let random = put(&spec.random, false);
    let arg_ptrs: Vec<u64> = spec.argv.iter().map(|a| put(a, true)).collect();
    let env_ptrs: Vec<u64> = spec.envp.iter().map(|e| put(e, true)).collect();
    let execfn = put(spec.execfn, true);

    let mut vec: Vec<u64> = Vec::with_capacity(words);
    vec.push(spec.argv.len() as u64);
    vec.extend(&arg_ptrs);
    vec.push(0);
    vec.extend(&env_ptrs);
    vec.push(0);
    for &(k, v) in spec.auxv {
        vec.extend([k, v]);
    }
    vec.extend([AT_RANDOM, random, AT_PLATFORM, platform, AT_EXECFN, execfn, AT_NULL, 0]);

    let vec_bytes = vec.len() as u64 * 8;
    let sp = (strings_start - vec_bytes) & !15;
    let mut bytes = vec![0u8; (top - sp) as usize];
    for (i, w) in vec.iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    let off = (strings_start - sp) as usize;
    bytes[off..off + high.len()].copy_from_slice(&high);
    Ok(InitialStack { bytes, sp, execfn })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(s: &InitialStack, addr: u64) -> u64 {
        let o = (addr - s.sp) as usize;
        u64::from_le_bytes(s.bytes[o..o + 8].try_into().unwrap())
    }

    fn cstr(s: &InitialStack, addr: u64) -> Vec<u8> {
        let o = (addr - s.sp) as usize;
        s.bytes[o..].iter().take_while(|b| **b != 0).copied().collect()
    }

    #[test]
    fn layout_follows_the_abi() {
        let top = 0x7fff_ffe0_0000;
        let argv = [b"./hello".to_vec(), b"a".to_vec(), b"bc".to_vec()];
        let envp = [b"A=1".to_vec()];
        let spec = StackSpec {
            argv: &argv,
            envp: &envp,
            execfn: b"./hello",
            random: [7; 16],
            auxv: &[(AT_PAGESZ, 4096), (AT_ENTRY, 0x401000)],
        };
        let s = build(top, &spec).unwrap();
        assert_eq!(s.sp % 16, 0);
        assert_eq!(s.sp + s.bytes.len() as u64, top);
        assert_eq!(word(&s, s.sp), 3);
        assert_eq!(cstr(&s, word(&s, s.sp + 8)), b"./hello");
        assert_eq!(cstr(&s, word(&s, s.sp + 16)), b"a");
        assert_eq!(cstr(&s, word(&s, s.sp + 24)), b"bc");
        assert_eq!(word(&s, s.sp + 32), 0);
        assert_eq!(cstr(&s, word(&s, s.sp + 40)), b"A=1");
        assert_eq!(word(&s, s.sp + 48), 0);
        let mut aux = std::collections::HashMap::new();
        let mut a = s.sp + 56;
        loop {
            let (k, v) = (word(&s, a), word(&s, a + 8));
            a += 16;
            if k == AT_NULL {
                break;
            }
            assert!(aux.insert(k, v).is_none(), "duplicate auxv entry {k}");
        }
        assert_eq!(aux[&AT_PAGESZ], 4096);
        assert_eq!(aux[&AT_ENTRY], 0x401000);
        assert_eq!(cstr(&s, aux[&AT_PLATFORM]), b"x86_64");
        assert_eq!(cstr(&s, aux[&AT_EXECFN]), b"./hello");
        assert_eq!(aux[&AT_EXECFN], s.execfn);
        let r = (aux[&AT_RANDOM] - s.sp) as usize;
        assert_eq!(&s.bytes[r..r + 16], &[7; 16]);
        assert!(a <= aux[&AT_PLATFORM], "vector below the strings");
        assert_eq!(word(&s, top - 8), 0, "end marker");
    }

    #[test]
    fn alignment_holds_for_any_count() {
        for n in 0..6 {
            let argv: Vec<Vec<u8>> = (0..n).map(|i| vec![b'x'; i + 1]).collect();
            let s = build(0x10000, &StackSpec { argv: &argv, envp: &[], execfn: b"p", random: [0; 16], auxv: &[] })
                .unwrap();
            assert_eq!(s.sp % 16, 0);
            assert_eq!(word(&s, s.sp), n as u64);
        }
    }

    #[test]
    fn limits() {
        let huge = [vec![b'x'; MAX_ARG_BYTES]];
        assert!(matches!(
            build(1 << 30, &StackSpec { argv: &huge, envp: &[], execfn: b"p", random: [0; 16], auxv: &[] }),
            Err(StackError::TooLong(_))
        ));
        let nul = [b"a\0b".to_vec()];
        assert_eq!(
            build(1 << 30, &StackSpec { argv: &nul, envp: &[], execfn: b"p", random: [0; 16], auxv: &[] }).unwrap_err(),
            StackError::Nul
        );
    }
}
