//! Parsing and validating the program's ELF file: enough to load an x86-64
//! executable (ET_EXEC, or ET_DYN: static-pie, or a dynamically linked program,
//! whose interpreter is named, or the interpreter itself), and a clear reason for
//! everything else. Pure: works on a byte slice, and total: every field is
//! read through [`crate::bytes`], so no file, however crafted, makes it panic.
//!
//! It lives in this crate rather than in the VMM because it is the first parser of
//! the same untrusted bytes the function discovery and the rewriter read: one pure
//! crate holds everything that interprets the file, and is fuzzed as one (the
//! rewriter's tests also need the segments). The VMM keeps what needs guest
//! memory: copying the segments into place.

use crate::bytes::{slice, u16_at, u32_at, u64_at, u8_at};
use alloc::vec::Vec;
use thiserror::Error;

pub const PT_LOAD: u32 = 1;
pub const PT_INTERP: u32 = 3;
pub const PT_PHDR: u32 = 6;
pub const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
pub const PT_GNU_STACK: u32 = 0x6474_e551;
/// The longest interpreter name accepted (Linux: one page).
const PATH_MAX: usize = 4096;
const ET_REL: u16 = 1;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const ET_CORE: u16 = 4;
const EM_X86_64: u16 = 62;
const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;

/// Why a file is not a program onering can run (exit status 126).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ElfError {
    #[error("not an ELF executable")]
    NotElf,
    #[error("a 32-bit ELF file; onering runs 64-bit x86-64 programs")]
    Class32,
    #[error("a big-endian ELF file; onering runs x86-64 programs")]
    BigEndian,
    #[error("built for {0}, not x86-64")]
    Machine(&'static str),
    #[error("not an executable but {0}")]
    NotExecutable(&'static str),
    #[error("truncated or malformed ELF file: {0}")]
    Malformed(&'static str),
    #[error("has no loadable segments")]
    NoLoad,
    /// Only for [`Program::parse_head`]: the headers and the interpreter's name
    /// lie beyond the bytes given; the file's first this many bytes hold them.
    #[error("its headers lie beyond the first bytes read ({0} needed)")]
    NeedHead(u64),
}

/// One loadable segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub flags: u32,
}

/// A validated static executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// Position-independent (static-pie): loaded at a base of our choosing.
    pub pie: bool,
    pub entry: u64,
    pub phoff: u64,
    pub phnum: u64,
    /// Virtual address of the program headers if a PT_PHDR says so.
    pub phdr_vaddr: Option<u64>,
    /// The `.eh_frame_hdr` (PT_GNU_EH_FRAME): (file offset, size, virtual address).
    pub eh_frame_hdr: Option<(u64, u64, u64)>,
    pub segments: Vec<Segment>,
    /// PT_INTERP: the dynamic loader's path (up to its NUL), for a dynamically
    /// linked program. Untrusted bytes: [`crate::bytes::printable`] before showing.
    pub interp: Option<Vec<u8>>,
    /// PT_GNU_STACK asked for an executable stack.
    pub exec_stack: bool,
}

fn machine_name(m: u16) -> &'static str {
    match m {
        3 => "32-bit x86 (i386)",
        8 => "MIPS",
        20 => "PowerPC",
        21 => "PowerPC64",
        22 => "s390",
        40 => "32-bit ARM",
        43 => "SPARC v9",
        50 => "IA-64",
        183 => "64-bit ARM (aarch64)",
        243 => "RISC-V",
        258 => "LoongArch",
        _ => "another architecture",
    }
}

impl Segment {
    /// The segment's bytes in `file` (the file it was parsed from); empty if they do
    /// not lie in it.
    pub fn bytes<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        slice(file, self.offset, self.filesz).unwrap_or(&[])
    }

    /// The end of the segment in memory (exclusive), saturated.
    pub fn end(&self) -> u64 {
        self.vaddr.saturating_add(self.memsz)
    }
}

impl Program {
    /// Parses and validates `file`.
    pub fn parse(file: &[u8]) -> Result<Program, ElfError> {
        Self::parse_head(file, file.len() as u64)
    }

    /// [`parse`](Self::parse) of a file `len` bytes long from its first bytes
    /// `head`, which need only hold the ELF header, the program headers and the
    /// interpreter's name (the segments are checked to lie within `len`): the
    /// same result as `parse` of the whole file, or [`ElfError::NeedHead`] with how
    /// many first bytes do hold them (asked again with those, it may name more:
    /// the interpreter's name is found through the program headers).
    pub fn parse_head(head: &[u8], len: u64) -> Result<Program, ElfError> {
        Self::parse_head_with(head, len, true)
    }

    /// [`parse_head`](Self::parse_head) for mapping a library's code, which does
    /// not need its interpreter: an interpreter's name that lies past `head` is not
    /// asked for, and `interp` is then None. (glibc's libc.so.6 names one 1.6 MB
    /// into the file.) The checks are the same.
    pub fn parse_code(head: &[u8], len: u64) -> Result<Program, ElfError> {
        Self::parse_head_with(head, len, false)
    }

    fn parse_head_with(head: &[u8], len: u64, want_interp: bool) -> Result<Program, ElfError> {
        let file = head;
        let have = file.len() as u64;
        if have > len {
            return Err(ElfError::Malformed("more bytes than the file holds"));
        }
        // What lies in the file but not in `head` is asked for.
        let need = |end: u64| if end > have && end <= len { Err(ElfError::NeedHead(end)) } else { Ok(()) };
        need(len.min(EHDR_SIZE as u64))?;
        if len < 16 || file.get(..4) != Some(b"\x7fELF") {
            return Err(ElfError::NotElf);
        }
        match u8_at(file, 4) {
            Some(1) => return Err(ElfError::Class32),
            Some(2) => {}
            _ => return Err(ElfError::Malformed("unknown ELF class")),
        }
        match u8_at(file, 5) {
            Some(1) => {}
            Some(2) => return Err(ElfError::BigEndian),
            _ => return Err(ElfError::Malformed("unknown data encoding")),
        }
        const SHORT: ElfError = ElfError::Malformed("file shorter than an ELF header");
        if len < EHDR_SIZE as u64 {
            return Err(SHORT);
        }
        let machine = u16_at(file, 18).ok_or(SHORT)?;
        if machine != EM_X86_64 {
            return Err(ElfError::Machine(machine_name(machine)));
        }
        let pie = match u16_at(file, 16).ok_or(SHORT)? {
            ET_EXEC => false,
            ET_DYN => true,
            ET_REL => return Err(ElfError::NotExecutable("a relocatable object file (.o)")),
            ET_CORE => return Err(ElfError::NotExecutable("a core dump")),
            _ => return Err(ElfError::NotExecutable("an ELF file of unknown type")),
        };
        let entry = u64_at(file, 24).ok_or(SHORT)?;
        let phoff = u64_at(file, 32).ok_or(SHORT)?;
        let phentsize = u16_at(file, 54).ok_or(SHORT)?;
        let phnum = u64::from(u16_at(file, 56).ok_or(SHORT)?);
        if usize::from(phentsize) != PHDR_SIZE {
            return Err(ElfError::Malformed("unexpected program header size"));
        }
        const PAST_END: ElfError = ElfError::Malformed("program headers past the end of the file");
        let headers_end = phnum
            .checked_mul(PHDR_SIZE as u64)
            .and_then(|n| n.checked_add(phoff))
            .filter(|e| *e <= len)
            .ok_or(PAST_END)?;
        need(headers_end)?;
        let mut segments = Vec::new();
        let mut phdr_vaddr = None;
        let mut eh_frame_hdr = None;
        let mut interp = None;
        let mut exec_stack = false;
        for i in 0..phnum {
            // In the file: checked above (and again here, without a panic path).
            let p = slice(file, phoff + i * PHDR_SIZE as u64, PHDR_SIZE as u64).ok_or(PAST_END)?;
            let field = |at: usize| u64_at(p, at).unwrap_or(0);
            let kind = u32_at(p, 0).unwrap_or(0);
            let (offset, vaddr, filesz, memsz) = (field(8), field(16), field(32), field(40));
            match kind {
                PT_INTERP if !want_interp && offset.saturating_add(filesz) > have => {}
                PT_INTERP => {
                    if filesz <= PATH_MAX as u64 {
                        need(offset.saturating_add(filesz))?;
                    }
                    let bytes = slice(file, offset, filesz)
                        .filter(|b| b.len() <= PATH_MAX)
                        .ok_or(ElfError::Malformed("unreadable interpreter name"))?;
                    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                    if end == 0 {
                        return Err(ElfError::Malformed("empty interpreter name"));
                    }
                    interp = Some(bytes[..end].to_vec());
                }
                PT_GNU_STACK => exec_stack = u32_at(p, 4).unwrap_or(0) & PF_X != 0,
                PT_PHDR => phdr_vaddr = Some(vaddr),
                PT_GNU_EH_FRAME => eh_frame_hdr = Some((offset, filesz, vaddr)),
                PT_LOAD => {
                    if memsz == 0 {
                        continue;
                    }
                    if filesz > memsz {
                        return Err(ElfError::Malformed("segment larger in the file than in memory"));
                    }
                    if offset.checked_add(filesz).is_none_or(|end| end > len) {
                        return Err(ElfError::Malformed("segment extends past the end of the file"));
                    }
                    if vaddr.checked_add(memsz).is_none() {
                        return Err(ElfError::Malformed("segment wraps around the address space"));
                    }
                    segments.push(Segment { vaddr, offset, filesz, memsz, flags: u32_at(p, 4).unwrap_or(0) });
                }
                _ => {}
            }
        }
        if segments.is_empty() {
            return Err(ElfError::NoLoad);
        }
        segments.sort_by_key(|s| s.vaddr);
        if segments.windows(2).any(|w| matches!(w, [a, b] if a.end() > b.vaddr)) {
            return Err(ElfError::Malformed("overlapping segments"));
        }
        Ok(Program { pie, entry, phoff, phnum, phdr_vaddr, eh_frame_hdr, segments, interp, exec_stack })
    }

    /// Lowest and highest (exclusive) virtual address of the loaded image, unbiased.
    pub fn span(&self) -> (u64, u64) {
        let lo = self.segments.first().map(|s| s.vaddr).unwrap_or(0);
        let hi = self.segments.iter().map(Segment::end).max().unwrap_or(0);
        (lo, hi)
    }

    /// Where the program headers are in memory (unbiased): PT_PHDR, or the loaded
    /// segment that contains them in the file.
    pub fn phdr_addr(&self) -> Option<u64> {
        self.phdr_vaddr.or_else(|| {
            self.segments
                .iter()
                .find(|s| {
                    let headers_end = self.phnum.checked_mul(PHDR_SIZE as u64).and_then(|n| n.checked_add(self.phoff));
                    s.offset <= self.phoff && headers_end.is_some_and(|e| Some(e) <= s.offset.checked_add(s.filesz))
                })
                .map(|s| s.vaddr.wrapping_add(self.phoff - s.offset))
        })
    }
}

/// A `#!` line's interpreter and its optional argument.
pub type Shebang = (Vec<u8>, Option<Vec<u8>>);

/// A `#!` line: the interpreter and its one optional argument, as Linux splits it
/// (blanks around them dropped; the rest of the line, inner blanks included, is
/// the argument). None if `head` does not start with `#!`; an error if it
/// names no interpreter. (The kernel's `execve` and the VMM's first program.)
pub fn shebang(head: &[u8]) -> Option<Result<Shebang, ElfError>> {
    let rest = head.strip_prefix(b"#!")?;
    let line = &rest[..rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len())];
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let line = match line.iter().position(|b| !blank(b)) {
        Some(i) => &line[i..],
        None => return Some(Err(ElfError::NotElf)),
    };
    let end = line.iter().position(blank).unwrap_or(line.len());
    let (interp, tail) = line.split_at(end);
    let tail = match (tail.iter().position(|b| !blank(b)), tail.iter().rposition(|b| !blank(b))) {
        (Some(a), Some(b)) => Some(tail[a..=b].to_vec()),
        _ => None,
    };
    Some(Ok((interp.to_vec(), tail)))
}

/// Executable segments have this flag.
pub const PF_X: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{tiny_elf, xorshift};

    fn set_phdr(f: &mut [u8], i: usize, kind: u32, offset: u64, filesz: u64) {
        let p = 64 + i * 56;
        f[p..p + 4].copy_from_slice(&kind.to_le_bytes());
        f[p + 8..p + 16].copy_from_slice(&offset.to_le_bytes());
        f[p + 32..p + 40].copy_from_slice(&filesz.to_le_bytes());
    }

    #[test]
    fn shebang_lines_split_as_linux_splits_them() {
        assert!(shebang(b"\x7fELF").is_none());
        assert_eq!(shebang(b"#!/bin/sh\necho hi"), Some(Ok((b"/bin/sh".to_vec(), None))));
        assert_eq!(
            shebang(b"#! /usr/bin/env  python3 -u \n"),
            Some(Ok((b"/usr/bin/env".to_vec(), Some(b"python3 -u".to_vec()))))
        );
        assert_eq!(shebang(b"#!/bin/awk\t-f\n"), Some(Ok((b"/bin/awk".to_vec(), Some(b"-f".to_vec())))));
        assert_eq!(shebang(b"#!/bin/sh"), Some(Ok((b"/bin/sh".to_vec(), None))), "no newline");
        assert_eq!(shebang(b"#!   \n/bin/sh"), Some(Err(ElfError::NotElf)));
        assert_eq!(shebang(b"#!"), Some(Err(ElfError::NotElf)));
    }

    #[test]
    fn parses_a_static_executable() {
        let p = Program::parse(&tiny_elf(&[0xcc; 16])).unwrap();
        assert!(!p.pie);
        assert_eq!(p.entry, 0x401000);
        assert_eq!(p.segments.len(), 1);
        assert_eq!(p.span(), (0x401000, 0x401110));
        assert_eq!(p.phdr_addr(), None, "headers are not inside the loaded segment");
    }

    #[test]
    fn rejects_what_it_cannot_run() {
        let good = tiny_elf(&[0x90]);
        assert_eq!(Program::parse(b"#!/bin/sh\necho hi\n"), Err(ElfError::NotElf));
        assert_eq!(Program::parse(b""), Err(ElfError::NotElf));
        let mut f = good.clone();
        f[4] = 1;
        assert_eq!(Program::parse(&f), Err(ElfError::Class32));
        let mut f = good.clone();
        f[5] = 2;
        assert_eq!(Program::parse(&f), Err(ElfError::BigEndian));
        let mut f = good.clone();
        f[18] = 183;
        assert_eq!(Program::parse(&f), Err(ElfError::Machine("64-bit ARM (aarch64)")));
        let mut f = good.clone();
        f[16] = 1;
        assert!(matches!(Program::parse(&f), Err(ElfError::NotExecutable(_))));
        let mut f = good.clone();
        f.extend_from_slice(b"/lib/ld-musl-x86_64.so.1\0");
        let off = f.len() as u64 - 25;
        set_phdr(&mut f, 0, PT_INTERP, off, 25);
        assert_eq!(Program::parse(&f), Err(ElfError::NoLoad), "its only header was made the PT_INTERP");
        let mut f = good.clone();
        f.extend_from_slice(b"/lib/ld-musl-x86_64.so.1\0");
        let off = f.len() as u64 - 25;
        f[56] = 2; // a second program header (in the zeroed padding): the PT_INTERP
        set_phdr(&mut f, 1, PT_INTERP, off, 25);
        assert_eq!(Program::parse(&f).unwrap().interp.as_deref(), Some(&b"/lib/ld-musl-x86_64.so.1"[..]));
        set_phdr(&mut f, 1, PT_INTERP, off, 0);
        assert!(matches!(Program::parse(&f), Err(ElfError::Malformed(_))), "an empty name");
        let mut f = good.clone();
        set_phdr(&mut f, 0, 4, 0, 0); // PT_NOTE only
        assert_eq!(Program::parse(&f), Err(ElfError::NoLoad));
    }

    /// `parse_head` of a file from its first bytes, asking for more as it says.
    fn parse_growing(f: &[u8], first: usize) -> Result<Program, ElfError> {
        let mut have = first.min(f.len());
        loop {
            match Program::parse_head(&f[..have], f.len() as u64) {
                Err(ElfError::NeedHead(n)) => {
                    assert!(n as usize > have && n as usize <= f.len(), "asks for more, within the file");
                    have = n as usize;
                }
                r => return r,
            }
        }
    }

    #[test]
    fn parsing_from_the_first_bytes_is_parsing_the_whole_file() {
        // Headers at the start, the interpreter's name and the code far behind.
        let mut f = tiny_elf(&[0x90; 64]);
        f.resize(0x3000, 0);
        f.extend_from_slice(b"/lib/ld-musl-x86_64.so.1\0");
        let off = f.len() as u64 - 25;
        f[56] = 2;
        set_phdr(&mut f, 1, PT_INTERP, off, 25);
        let whole = Program::parse(&f).unwrap();
        assert_eq!(Program::parse_head(&f[..4096], f.len() as u64), Err(ElfError::NeedHead(off + 25)));
        // Mapping code does not need the interpreter: nothing more is asked for.
        let code = Program::parse_code(&f[..4096], f.len() as u64).unwrap();
        assert_eq!(code.interp, None);
        assert_eq!(code.segments, Program::parse(&f).unwrap().segments);
        for first in [0, 1, 16, 64, 100, 4096, f.len()] {
            assert_eq!(parse_growing(&f, first), Ok(whole.clone()), "from {first} bytes");
        }
        // Program headers far behind too.
        let mut g = f.clone();
        let phoff = g.len() as u64;
        g.extend_from_slice(&f[64..64 + 2 * 56]);
        g[32..40].copy_from_slice(&phoff.to_le_bytes());
        let moved = Program { phoff, ..whole.clone() };
        assert_eq!(Program::parse_head(&g[..4096], g.len() as u64), Err(ElfError::NeedHead(phoff + 112)));
        assert_eq!(parse_growing(&g, 64), Ok(moved));
        // A segment past the end of the file is found from the headers alone.
        let (p, end) = (phoff as usize, g.len() as u64);
        g[p + 8..p + 16].copy_from_slice(&end.to_le_bytes());
        assert!(matches!(parse_growing(&g, 64), Err(ElfError::Malformed(_))));
        assert!(matches!(Program::parse_head(&f, f.len() as u64 - 1), Err(ElfError::Malformed(_))));
        // Corrupted files: the same answer either way.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..3000 {
            let mut h = f.clone();
            for _ in 0..4 {
                xorshift(&mut x);
                let at = (x as usize >> 8) % 200;
                h[at] = x as u8;
            }
            let first = (x as usize >> 20) % 300;
            assert_eq!(parse_growing(&h, first), Program::parse(&h));
        }
    }

    #[test]
    fn truncated_and_garbage_inputs_never_panic() {
        let good = tiny_elf(&[0x90; 64]);
        for len in 0..good.len() {
            let _ = Program::parse(&good[..len]);
        }
        // Every single-byte corruption of the header and program header.
        for i in 0..120 {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut f = good.clone();
                f[i] = v;
                let _ = Program::parse(&f);
            }
        }
        let mut f = good.clone();
        f[56..58].copy_from_slice(&0xffffu16.to_le_bytes());
        assert!(matches!(Program::parse(&f), Err(ElfError::Malformed(_))));
        let mut f = good.clone();
        set_phdr(&mut f, 0, PT_LOAD, 0x1000, 1 << 40);
        assert!(matches!(Program::parse(&f), Err(ElfError::Malformed(_))));
        // A pseudo-random byte soup.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let mut f = good.clone();
            for _ in 0..8 {
                xorshift(&mut x);
                let i = (x % 128) as usize;
                f[i] = (x >> 32) as u8;
            }
            let _ = Program::parse(&f);
        }
    }
}
