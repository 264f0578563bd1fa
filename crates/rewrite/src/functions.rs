//! Where the program's functions are, so the rewriter can decode its code function by
//! function: from the symbol table when there is one, else from the unwind
//! information that stripped binaries keep (`.eh_frame` FDEs, else the
//! `.eh_frame_hdr` search index). Pure: works on the file's bytes.

use crate::elf::{u32_at, u64_at, Program};

/// Function ranges (loaded addresses) for decoding: the symbol table's; in a stripped
/// file the unwind information's (.eh_frame FDEs, else the .eh_frame_hdr index's
/// function starts, each running to the next).
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
    let end_of = |a: u64| {
        prog.segments.iter().find(|s| a >= s.vaddr && a < s.vaddr + s.filesz).map(|s| s.vaddr + s.filesz).unwrap_or(a)
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
    let Some(hdr) = file.get(off as usize..(off as usize).saturating_add(size as usize)) else {
        return Vec::new();
    };
    // version, eh_frame_ptr encoding, fde_count encoding, table encoding
    if hdr.len() < 12 || hdr[0] != 1 || hdr[2] != UDATA4 || hdr[3] != SDATA4_DATAREL || hdr[1] & 0x0f != 0x0b {
        return Vec::new();
    }
    let count = u32_at(hdr, 8) as usize;
    let mut out = Vec::with_capacity(count.min(1 << 20));
    for i in 0..count {
        let Some(e) = hdr.get(12 + i * 8..12 + i * 8 + 4) else { break };
        let rel = i32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        out.push(vaddr.wrapping_add(rel as i64 as u64));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Function symbols `(address, size)` from the symbol table, if the file has one;
/// empty for a stripped or malformed file. Used to decode code function by function.
pub fn functions(file: &[u8]) -> Vec<(u64, u64)> {
    let get = |o: usize, n: usize| file.get(o..o.checked_add(n)?);
    let u16_ = |o: usize| get(o, 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u64_ = |o: usize| get(o, 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    let (Some(shoff), Some(shentsize), Some(shnum)) = (u64_(40), u16_(58), u16_(60)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for i in 0..shnum as usize {
        let Some(sh) = (shoff as usize).checked_add(i * shentsize as usize).and_then(|o| get(o, 64)) else {
            break;
        };
        if u32_at(sh, 4) != 2 {
            continue; // not SHT_SYMTAB
        }
        let (off, size, entsize) = (u64_at(sh, 24) as usize, u64_at(sh, 32) as usize, u64_at(sh, 56) as usize);
        if entsize < 24 {
            continue;
        }
        for j in 0..size / entsize {
            let Some(sym) = off.checked_add(j * entsize).and_then(|o| get(o, 24)) else {
                break;
            };
            let (info, value, sz) = (sym[4], u64_at(sym, 8), u64_at(sym, 16));
            if info & 0xf == 2 && sz > 0 && value != 0 {
                out.push((value, sz));
            }
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|f| f.0);
    out
}

/// Function ranges `(start, size)` (unbiased) from the `.eh_frame` section's FDEs:
/// the unwind information is in nearly every x86-64 binary, stripped or not, and
/// tells where each function starts and ends. Empty when absent or unparsable (only
/// the common pointer encodings are understood).
pub fn eh_frame_functions(file: &[u8]) -> Vec<(u64, u64)> {
    let Some((data, addr)) = section(file, b".eh_frame") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut fde_enc: std::collections::HashMap<usize, u8> = std::collections::HashMap::new();
    let mut at = 0usize;
    while at + 8 <= data.len() {
        let len = u32_at(data, at) as usize;
        if len == 0 || len == 0xffff_ffff {
            break; // terminator, or 64-bit lengths (not produced for x86-64 code)
        }
        let body = at + 4;
        let Some(end) = body.checked_add(len).filter(|e| *e <= data.len()) else { break };
        let id = u32_at(data, body) as usize;
        if id == 0 {
            if let Some(enc) = cie_fde_encoding(&data[body + 4..end]) {
                fde_enc.insert(at, enc);
            }
        } else if let Some(&enc) = body.checked_sub(id).and_then(|cie| fde_enc.get(&cie)) {
            let field = body + 4;
            let pc = read_encoded(data, field, enc, addr + field as u64);
            let range = read_encoded(data, field + enc_size(enc).unwrap_or(0), enc & 0x0f, 0);
            if let (Some(start), Some(size)) = (pc, range) {
                if size > 0 {
                    out.push((start, size));
                }
            }
        }
        at = end;
    }
    out.sort_unstable();
    out.dedup_by_key(|f| f.0);
    out
}

/// A section's bytes and address, by name.
fn section<'a>(file: &'a [u8], name: &[u8]) -> Option<(&'a [u8], u64)> {
    let shoff = u64::from_le_bytes(file.get(40..48)?.try_into().ok()?) as usize;
    let shentsize = u16::from_le_bytes(file.get(58..60)?.try_into().ok()?) as usize;
    let shnum = u16::from_le_bytes(file.get(60..62)?.try_into().ok()?) as usize;
    let shstrndx = u16::from_le_bytes(file.get(62..64)?.try_into().ok()?) as usize;
    if shentsize < 64 {
        return None;
    }
    let header = |i: usize| file.get(shoff.checked_add(i.checked_mul(shentsize)?)?..)?.get(..64);
    let strtab = header(shstrndx)?;
    let (str_off, str_size) = (u64_at(strtab, 24) as usize, u64_at(strtab, 32) as usize);
    let names = file.get(str_off..str_off.checked_add(str_size)?)?;
    for i in 0..shnum {
        let h = header(i)?;
        let n = u32_at(h, 0) as usize;
        let sname = names.get(n..)?.split(|b| *b == 0).next()?;
        if sname == name {
            let (addr, off, size) = (u64_at(h, 16), u64_at(h, 24) as usize, u64_at(h, 32) as usize);
            return Some((file.get(off..off.checked_add(size)?)?, addr));
        }
    }
    None
}

fn uleb(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*at)?;
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
fn read_encoded(data: &[u8], at: usize, enc: u8, field_addr: u64) -> Option<u64> {
    let b = data.get(at..at + enc_size(enc)?)?;
    let raw = match enc & 0x0f {
        0x00 | 0x04 => u64::from_le_bytes(b.try_into().ok()?),
        0x0c => i64::from_le_bytes(b.try_into().ok()?) as u64,
        0x03 => u64::from(u32::from_le_bytes(b.try_into().ok()?)),
        0x0b => i32::from_le_bytes(b.try_into().ok()?) as i64 as u64,
        0x02 => u64::from(u16::from_le_bytes(b.try_into().ok()?)),
        0x0a => i16::from_le_bytes(b.try_into().ok()?) as i64 as u64,
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
    let version = *cie.first()?;
    let mut at = 1;
    let aug_end = at + cie.get(at..)?.iter().position(|b| *b == 0)?;
    let aug = &cie[at..aug_end];
    at = aug_end + 1;
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
    if aug.first() != Some(&b'z') {
        return Some(0); // absptr
    }
    uleb(cie, &mut at)?; // augmentation data length
    for c in &aug[1..] {
        match c {
            b'R' => return cie.get(at).copied(),
            b'L' => at += 1,
            b'P' => {
                let enc = *cie.get(at)?;
                at += 1 + enc_size(enc)?;
            }
            b'S' | b'B' => {}
            _ => return None,
        }
    }
    Some(0)
}
