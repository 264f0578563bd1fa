//! Where the program's functions are, so the rewriter can decode its code function by
//! function: from the symbol table when there is one, else from the unwind
//! information that stripped binaries keep (`.eh_frame` FDEs, else the
//! `.eh_frame_hdr` search index). Pure and total: the file is hostile input, read
//! only through [`crate::bytes`]; every count and offset it gives is checked, and
//! the work done is linear in the file's size whatever its headers claim.
//!
//! Function ranges only guide decoding (code no range covers is swept linearly), so
//! a file whose tables are damaged loses speed, never correctness of the parse. A
//! `.eh_frame` that is structurally broken (a record that runs past the section or
//! is too short for its own header, an FDE cut off in its address range) is not
//! trusted at all: it yields no ranges, and the caller falls back to the
//! `.eh_frame_hdr` index, as an unwinder would stop at the first bad record.
//! Contents that are merely not understood (an augmentation, a pointer encoding)
//! skip only the records that use them.

use crate::bytes::{i16_at, i32_at, i64_at, slice, u16_at, u32_at, u64_at, u8_at};
use crate::elf::Program;

const SHT_SYMTAB: u32 = 2;
const STT_FUNC: u8 = 2;
const SHDR_SIZE: u64 = 64;
const SYM_SIZE: u64 = 24;

/// Function ranges `(start, size)` (loaded addresses: `bias` added) for decoding:
/// the symbol table's; in a stripped file the unwind information's (`.eh_frame`
/// FDEs, else the `.eh_frame_hdr` index's function starts, each running to the next
/// or to the end of its segment).
pub fn ranges(prog: &Program, file: &[u8], bias: u64) -> Vec<(u64, u64)> {
    let symbols = functions(file);
    if !symbols.is_empty() {
        return symbols.into_iter().map(|(a, s)| (a.wrapping_add(bias), s)).collect();
    }
    let fdes = eh_frame_functions(file);
    if !fdes.is_empty() {
        return fdes.into_iter().map(|(a, s)| (a.wrapping_add(bias), s)).collect();
    }
    let starts = unwind_function_starts(file, prog);
    // The end of the file-backed part of the segment holding `a` (segments are
    // sorted and disjoint: a binary search, so the work stays n log n).
    let end_of = |a: u64| {
        let i = prog.segments.partition_point(|s| s.vaddr <= a);
        i.checked_sub(1)
            .and_then(|i| prog.segments.get(i))
            .map(|s| s.vaddr.saturating_add(s.filesz))
            .filter(|end| a < *end)
            .unwrap_or(a)
    };
    starts
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let seg_end = end_of(a);
            let end = starts.get(i + 1).map_or(seg_end, |&n| n.min(seg_end));
            (a.wrapping_add(bias), end.saturating_sub(a))
        })
        .filter(|(_, s)| *s > 0)
        .collect()
}

/// Function start addresses from the unwind table's search index (`.eh_frame_hdr`),
/// sorted, unbiased: present even in stripped files, so code can still be decoded
/// function by function. Empty when absent or in an encoding not handled (only the
/// usual 4-byte ones are).
pub fn unwind_function_starts(file: &[u8], prog: &Program) -> Vec<u64> {
    const SDATA4_DATAREL: u8 = 0x3b;
    const UDATA4: u8 = 0x03;
    let Some((off, size, vaddr)) = prog.eh_frame_hdr else {
        return Vec::new();
    };
    let Some(hdr) = slice(file, off, size) else {
        return Vec::new();
    };
    // version, eh_frame_ptr encoding, fde_count encoding, table encoding
    let (Some(1), Some(ptr_enc), Some(UDATA4), Some(SDATA4_DATAREL), Some(count)) =
        (u8_at(hdr, 0), u8_at(hdr, 1), u8_at(hdr, 2), u8_at(hdr, 3), u32_at(hdr, 8))
    else {
        return Vec::new();
    };
    if ptr_enc & 0x0f != 0x0b {
        return Vec::new();
    }
    // The count is the file's word: no more entries than the table has bytes for.
    let count = (count as usize).min(hdr.len().saturating_sub(12) / 8);
    let mut out: Vec<u64> =
        (0..count).map_while(|i| i32_at(hdr, 12 + i * 8)).map(|rel| vaddr.wrapping_add(rel as i64 as u64)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// One section header's fields that matter here.
#[derive(Clone, Copy, Debug)]
struct SectionHeader {
    name: u32,
    kind: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

/// The section headers, in order; stops at the first one that does not lie in the
/// file. None of a file with odd-sized headers (64 bytes each in ELF64).
fn section_headers(file: &[u8]) -> impl Iterator<Item = SectionHeader> + '_ {
    let shoff = u64_at(file, 40).unwrap_or(0);
    let shentsize = u16_at(file, 58).map_or(0, u64::from);
    let shnum = if shoff != 0 && shentsize >= SHDR_SIZE { u16_at(file, 60).unwrap_or(0) } else { 0 };
    (0..u64::from(shnum)).map_while(move |i| section_header(file, shoff.checked_add(i * shentsize)?))
}

fn section_header(file: &[u8], at: u64) -> Option<SectionHeader> {
    let h = slice(file, at, SHDR_SIZE)?;
    Some(SectionHeader {
        name: u32_at(h, 0)?,
        kind: u32_at(h, 4)?,
        addr: u64_at(h, 16)?,
        offset: u64_at(h, 24)?,
        size: u64_at(h, 32)?,
        link: u32_at(h, 40)?,
        entsize: u64_at(h, 56)?,
    })
}

/// Function symbols `(address, size)` from the symbol table, if the file has one;
/// empty for a stripped or malformed file. Used to decode code function by function.
pub fn functions(file: &[u8]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = function_symbols(file).map(|(value, size, _)| (value, size)).collect();
    out.sort_unstable();
    out.dedup_by_key(|f| f.0);
    out
}

/// Function symbols with their names `(address, size, name)`, sorted by address
/// (unbiased), for naming addresses in a profile; names that are not in the file or
/// not UTF-8 are replaced by `?` or lossily converted. Empty for a stripped file.
pub fn named_functions(file: &[u8]) -> Vec<(u64, u64, String)> {
    let mut out: Vec<(u64, u64, String)> = function_symbols(file)
        .map(|(value, size, name)| {
            (value, size, name.map_or_else(|| "?".into(), |n| String::from_utf8_lossy(n).into()))
        })
        .collect();
    out.sort_unstable_by_key(|f| f.0);
    out.dedup_by_key(|f| f.0);
    out
}

/// The function symbols of the symbol table `(value, size, name)` in file order.
/// Only the first `SHT_SYMTAB` is read (ELF allows one): a file that names the same
/// table many times must not multiply the work. The count follows from the size and
/// stops at the end of the file.
fn function_symbols(file: &[u8]) -> impl Iterator<Item = (u64, u64, Option<&[u8]>)> + '_ {
    let symtab = section_headers(file).find(|h| h.kind == SHT_SYMTAB).filter(|h| h.entsize >= SYM_SIZE);
    let strings = symtab
        .and_then(|t| {
            let shoff = u64_at(file, 40)?;
            let shentsize = u64::from(u16_at(file, 58)?);
            section_header(file, shoff.checked_add(u64::from(t.link).checked_mul(shentsize)?)?)
        })
        .and_then(|h| slice(file, h.offset, h.size));
    let (offset, count, entsize) = symtab.map_or((0, 0, SYM_SIZE), |t| (t.offset, t.size / t.entsize, t.entsize));
    (0..count)
        .map_while(move |j| {
            let sym = offset.checked_add(j * entsize).and_then(|at| slice(file, at, SYM_SIZE))?;
            Some((u32_at(sym, 0)?, u8_at(sym, 4)?, u64_at(sym, 8)?, u64_at(sym, 16)?))
        })
        .filter(|&(_, info, value, size)| info & 0xf == STT_FUNC && size > 0 && value != 0)
        .map(move |(name, _, value, size)| {
            let name = strings.and_then(|s| s.get(name as usize..)).and_then(|s| s.split(|b| *b == 0).next());
            (value, size, name)
        })
}

/// A section's bytes and address, by name; None if it is absent or any header on
/// the way does not lie in the file.
pub fn section<'a>(file: &'a [u8], name: &[u8]) -> Option<(&'a [u8], u64)> {
    let shoff = u64_at(file, 40)?;
    let shentsize = u64::from(u16_at(file, 58)?);
    let shstrndx = u64::from(u16_at(file, 62)?);
    if shentsize < SHDR_SIZE {
        return None;
    }
    let strtab = section_header(file, shoff.checked_add(shstrndx * shentsize)?)?;
    let names = slice(file, strtab.offset, strtab.size)?;
    for h in section_headers(file) {
        let sname = names.get(h.name as usize..)?.split(|b| *b == 0).next()?;
        if sname == name {
            return Some((slice(file, h.offset, h.size)?, h.addr));
        }
    }
    None
}

/// Function ranges `(start, size)` (unbiased) from the `.eh_frame` section's FDEs:
/// the unwind information is in nearly every x86-64 binary, stripped or not, and
/// tells where each function starts and ends. Empty when absent, structurally broken
/// (see the module note) or unparsable (only the common pointer encodings are
/// understood).
pub fn eh_frame_functions(file: &[u8]) -> Vec<(u64, u64)> {
    let Some((data, addr)) = section(file, b".eh_frame") else {
        return Vec::new();
    };
    eh_frame_records(data, addr).unwrap_or_default()
}

/// The FDE ranges of an `.eh_frame` section's bytes `data` (at address `addr`); None
/// if the section is structurally broken.
fn eh_frame_records(data: &[u8], addr: u64) -> Option<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    // The FDE pointer encoding of each CIE understood, by the CIE's offset. Records
    // only move forward, so this holds at most one entry per record.
    let mut fde_enc: std::collections::HashMap<usize, u8> = std::collections::HashMap::new();
    let mut at = 0usize;
    // A record has at least a length and an id; a shorter tail is padding.
    while at.checked_add(8).is_some_and(|e| e <= data.len()) {
        let len = u32_at(data, at)?;
        if len == 0 || len == 0xffff_ffff {
            break; // terminator, or 64-bit lengths (not produced for x86-64 code)
        }
        let body = at + 4;
        // The record (after its length): inside the section, and long enough for its id.
        let end = body.checked_add(len as usize).filter(|e| *e <= data.len())?;
        let record = data.get(body..end)?;
        let id = u32_at(record, 0)? as usize;
        if id == 0 {
            if let Some(enc) = record.get(4..).and_then(cie_fde_encoding) {
                fde_enc.insert(at, enc);
            }
        } else if let Some(&enc) = body.checked_sub(id).and_then(|cie| fde_enc.get(&cie)) {
            // pc_begin and pc_range follow the id. An encoding not understood skips
            // the FDE; a record too short for the two is broken.
            if let (Some(size), true) = (enc_size(enc), matches!(enc & 0x70, 0x00 | 0x10)) {
                let field_addr = addr.wrapping_add(body as u64 + 4);
                let start = read_encoded(record, 4, enc, field_addr)?;
                let range = read_encoded(record, 4 + size, enc & 0x0f, 0)?;
                if range > 0 {
                    out.push((start, range));
                }
            }
        }
        at = end;
    }
    out.sort_unstable();
    out.dedup_by_key(|f| f.0);
    Some(out)
}

fn uleb(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = u8_at(data, *at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Size of a fixed-size pointer encoding.
fn enc_size(enc: u8) -> Option<usize> {
    match enc & 0x0f {
        0x00 | 0x04 | 0x0c => Some(8),
        0x02 | 0x0a => Some(2),
        0x03 | 0x0b => Some(4),
        _ => None,
    }
}

/// Reads a pointer in encoding `enc` at `at`; `field_addr` is its address (pcrel).
/// None if it does not lie in `data` or the encoding is not understood.
fn read_encoded(data: &[u8], at: usize, enc: u8, field_addr: u64) -> Option<u64> {
    let raw = match enc & 0x0f {
        0x00 | 0x04 => u64_at(data, at)?,
        0x0c => i64_at(data, at)? as u64,
        0x03 => u64::from(u32_at(data, at)?),
        0x0b => i32_at(data, at)? as i64 as u64,
        0x02 => u64::from(u16_at(data, at)?),
        0x0a => i16_at(data, at)? as i64 as u64,
        _ => return None,
    };
    match enc & 0x70 {
        0x00 => Some(raw),
        0x10 => Some(field_addr.wrapping_add(raw)),
        _ => None, // datarel, textrel, funcrel: not used for .eh_frame FDEs on x86-64
    }
}

/// The FDE pointer encoding of a CIE (its body after the CIE id).
fn cie_fde_encoding(cie: &[u8]) -> Option<u8> {
    let version = u8_at(cie, 0)?;
    let aug = cie.get(1..)?.split(|b| *b == 0).next()?;
    if !cie.get(1..)?.contains(&0) {
        return None; // an unterminated augmentation string
    }
    let mut at = 1 + aug.len() + 1;
    if version >= 4 {
        at += 2; // address size, segment size
    }
    uleb(cie, &mut at)?; // code alignment
    uleb(cie, &mut at)?; // data alignment (SLEB: same length)
    if version == 1 {
        at += 1;
    } else {
        uleb(cie, &mut at)?;
    }
    let Some((b'z', rest)) = aug.split_first() else {
        return Some(0); // absptr
    };
    uleb(cie, &mut at)?; // augmentation data length
    for c in rest {
        match c {
            b'R' => return u8_at(cie, at),
            b'L' => at += 1,
            b'P' => {
                let enc = u8_at(cie, at)?;
                at += 1 + enc_size(enc)?;
            }
            b'S' | b'B' => {}
            _ => return None,
        }
    }
    Some(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CIE (version 1, "zR", FDE pointers pcrel|sdata4) and one FDE for
    /// [0x1000, 0x1010), as an `.eh_frame` at address 0x2000, then a terminator.
    pub(crate) fn eh_frame() -> Vec<u8> {
        let mut d = Vec::new();
        // CIE: length, id 0, version 1, "zR\0", code align 1, data align -8, RA 16,
        // aug length 1, encoding 0x1b.
        let cie = [0u8, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b, 0, 0, 0];
        d.extend((cie.len() as u32).to_le_bytes());
        d.extend(cie);
        // FDE: length, CIE pointer (distance back to the CIE), pc_begin (pcrel), range.
        let fde_at = d.len();
        let field_addr = 0x2000 + fde_at as u64 + 8;
        let pc = (0x1000i64 - field_addr as i64) as i32;
        let mut fde = Vec::new();
        fde.extend((fde_at as u32 + 4).to_le_bytes());
        fde.extend(pc.to_le_bytes());
        fde.extend(0x10u32.to_le_bytes());
        fde.extend([0, 0, 0, 0]);
        d.extend((fde.len() as u32).to_le_bytes());
        d.extend(fde);
        d.extend([0, 0, 0, 0]);
        d
    }

    #[test]
    fn reads_fdes() {
        assert_eq!(eh_frame_records(&eh_frame(), 0x2000), Some(vec![(0x1000, 0x10)]));
    }

    /// The crash of the "Foundations" issue: a record of length 1 made the parser
    /// slice out of bounds (the VMM aborted with status 134). Every length of the
    /// first record, and of the second, is now either parsed or refused.
    #[test]
    fn records_of_any_length_are_refused_or_parsed() {
        let good = eh_frame();
        for first in [0u32, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 0x7fff_ffff, 0xffff_fffe, 0xffff_ffff] {
            let mut d = good.clone();
            d[..4].copy_from_slice(&first.to_le_bytes());
            let r = eh_frame_records(&d, 0x2000);
            if first != 0xffff_ffff && (matches!(first, 1..=3) || first > d.len() as u32) {
                assert_eq!(r, None, "length {first}");
            }
            for second in [0u32, 1, 2, 3, 4, 8, 11, 12, 16, 0xffff_ffff] {
                let mut d = d.clone();
                d[20..24].copy_from_slice(&second.to_le_bytes());
                let _ = eh_frame_records(&d, 0x2000);
            }
        }
        // Every truncation of the section, and every byte set to edge values.
        for n in 0..good.len() {
            let _ = eh_frame_records(&good[..n], 0x2000);
        }
        for i in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut d = good.clone();
                d[i] = v;
                let _ = eh_frame_records(&d, u64::MAX - 4);
            }
        }
    }

    #[test]
    fn cies_never_read_past_their_end() {
        let cie = [1u8, b'z', b'R', b'P', b'L', 0, 1, 0x78, 16, 4, 0x1b];
        for n in 0..cie.len() {
            let _ = cie_fde_encoding(&cie[..n]);
        }
        assert_eq!(cie_fde_encoding(&[1, b'z', b'R']), None, "unterminated augmentation");
        assert_eq!(cie_fde_encoding(&[1, 0, 1, 0x78, 16]), Some(0));
        assert_eq!(uleb(&[0xff; 20], &mut 0), None);
    }

    /// A stripped file whose first `.eh_frame` record has length 1 (the crafted file
    /// of the issue, built here by hand): no FDE ranges, and the caller falls back.
    #[test]
    fn a_broken_eh_frame_in_a_file_yields_nothing() {
        let mut eh = eh_frame();
        let file = crate::testing::with_sections(&crate::testing::tiny_elf(&[0x90; 16]), &[(".eh_frame", 0x2000, &eh)]);
        assert_eq!(eh_frame_functions(&file), vec![(0x1000, 0x10)]);
        eh[..4].copy_from_slice(&1u32.to_le_bytes());
        let file = crate::testing::with_sections(&crate::testing::tiny_elf(&[0x90; 16]), &[(".eh_frame", 0x2000, &eh)]);
        assert_eq!(eh_frame_functions(&file), vec![]);
        let prog = Program::parse(&file).unwrap();
        assert_eq!(ranges(&prog, &file, 0), vec![]);
    }

    #[test]
    fn section_headers_pointing_anywhere() {
        let eh = eh_frame();
        let good = crate::testing::with_sections(&crate::testing::tiny_elf(&[0x90; 16]), &[(".eh_frame", 0x2000, &eh)]);
        let shoff = u64_at(&good, 40).unwrap() as usize;
        for field in [40usize, 58, 60, 62] {
            for v in [0u64, 1, 63, 64, 0xffff, u64::MAX, good.len() as u64, shoff as u64 + 1] {
                let mut f = good.clone();
                let w = if field == 40 { 8 } else { 2 };
                f[field..field + w].copy_from_slice(&v.to_le_bytes()[..w]);
                let _ = (eh_frame_functions(&f), functions(&f));
            }
        }
        // Every field of every section header.
        for at in (shoff..good.len()).step_by(4) {
            for v in [0u32, 1, 0x7fff_ffff, u32::MAX] {
                let mut f = good.clone();
                f[at..at + 4].copy_from_slice(&v.to_le_bytes());
                let _ = (eh_frame_functions(&f), functions(&f));
            }
        }
    }

    #[test]
    fn huge_symbol_tables_cost_what_the_file_holds() {
        // One SHT_SYMTAB claiming 2^60 bytes of symbols: read up to the end of the file.
        let f = crate::testing::with_sections(&crate::testing::tiny_elf(&[0x90; 16]), &[(".symtab", 0, &[0u8; 48])]);
        let shoff = u64_at(&f, 40).unwrap() as usize;
        let mut f = f;
        for i in 0..u16_at(&f, 60).unwrap() as usize {
            let h = shoff + i * 64;
            if u32_at(&f, h + 4) == Some(1) && u64_at(&f, h + 32) == Some(48) {
                f[h + 4..h + 8].copy_from_slice(&SHT_SYMTAB.to_le_bytes());
                f[h + 32..h + 40].copy_from_slice(&(1u64 << 60).to_le_bytes());
                f[h + 56..h + 64].copy_from_slice(&24u64.to_le_bytes());
            }
        }
        let t = std::time::Instant::now();
        let _ = functions(&f);
        assert!(t.elapsed().as_millis() < 100);
    }

    #[test]
    fn the_hdr_index_count_is_bounded_by_its_size() {
        let mut f = crate::testing::tiny_elf(&[0x90; 0x40]);
        let hdr_at = f.len() as u64;
        let mut hdr = vec![1u8, 0x1b, 0x03, 0x3b, 0, 0, 0, 0];
        hdr.extend(u32::MAX.to_le_bytes());
        hdr.extend([0x10, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0]);
        f.extend(&hdr);
        let mut prog = Program::parse(&f).unwrap();
        prog.eh_frame_hdr = Some((hdr_at, hdr.len() as u64, 0x401000));
        assert_eq!(unwind_function_starts(&f, &prog), vec![0x401010, 0x401020]);
        assert_eq!(ranges(&prog, &f, 0), vec![(0x401010, 0x10), (0x401020, 0x20)]);
        prog.eh_frame_hdr = Some((hdr_at, u64::MAX, 0));
        assert_eq!(unwind_function_starts(&f, &prog), vec![]);
    }

    /// Work stays n log n whatever the counts: a program of 60,000 segments whose
    /// `.eh_frame_hdr` lists 200,000 functions (a linear segment lookup per function
    /// would take minutes).
    #[test]
    fn many_segments_and_many_functions_are_cheap() {
        use crate::elf::Segment;
        let segments: Vec<Segment> = (0..60_000u64)
            .map(|i| Segment { vaddr: 0x40_0000 + i * 0x1000, offset: 0, filesz: 0x800, memsz: 0x1000, flags: 5 })
            .collect();
        let mut hdr = vec![1u8, 0x1b, 0x03, 0x3b, 0, 0, 0, 0];
        hdr.extend(200_000u32.to_le_bytes());
        for i in 0..200_000i32 {
            hdr.extend((i * 0x133).to_le_bytes());
            hdr.extend([0; 4]);
        }
        let prog = Program {
            pie: false,
            entry: 0x40_0000,
            phoff: 0,
            phnum: 0,
            phdr_vaddr: None,
            eh_frame_hdr: Some((0, hdr.len() as u64, 0x40_0000)),
            segments,
            interp: None,
            exec_stack: false,
        };
        let t = std::time::Instant::now();
        let r = ranges(&prog, &hdr, 0);
        assert!(r.len() > 100_000, "{}", r.len());
        assert!(t.elapsed().as_secs() < 2, "{:?}", t.elapsed());
    }
}
