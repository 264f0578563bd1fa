//! A table-driven x86-64 instruction-length decoder for the rewriter's first pass.
//!
//! Pass 1 sweeps every byte of code that may hold a `syscall` and needs only each
//! instruction's length, whether it is `syscall` or `cpuid`, and where a direct branch goes.
//! A full decoder (yaxpeax) spends ~22 ns per instruction producing operands nobody
//! reads; this one reads prefixes, the opcode, ModRM/SIB and the immediate size and
//! stops, at a few nanoseconds. It is a real decoder, not a byte search: it walks
//! instruction boundaries exactly as the CPU does. The tests compare it with iced-x86
//! on every instruction of real musl, glibc and Go binaries; pass 2 re-decodes each
//! site's neighbourhood with yaxpeax, so a disagreement could only cost a rewrite,
//! never produce a wrong one.

/// What pass 1 needs to know about an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Syscall,
    /// `cpuid` (also rewritten: here it exits to the hypervisor).
    Cpuid,
    /// A direct jump, conditional jump, call, loop or jrcxz, and its target.
    Branch(u64),
    /// Anything else.
    Other,
}

/// Immediate sizes.
const I0: u8 = 0;
const I8: u8 = 1;
const I16: u8 = 2;
/// 2 or 4 bytes by operand size ("z").
const IZ: u8 = 3;
/// `enter`: 2 + 1 bytes.
const I24: u8 = 4;
/// Not valid in 64-bit mode, or handled specially.
const BAD: u8 = 0xff;

/// One-byte opcode map: bit 7 = has ModRM, low bits = immediate kind (or BAD).
const M: u8 = 0x80;
#[rustfmt::skip]
const ONE: [u8; 256] = [
    // 0x00
    M, M, M, M, I8, IZ, BAD, BAD, M, M, M, M, I8, IZ, BAD, BAD,
    // 0x10
    M, M, M, M, I8, IZ, BAD, BAD, M, M, M, M, I8, IZ, BAD, BAD,
    // 0x20 (26, 2e prefixes)
    M, M, M, M, I8, IZ, BAD, BAD, M, M, M, M, I8, IZ, BAD, BAD,
    // 0x30 (36, 3e prefixes)
    M, M, M, M, I8, IZ, BAD, BAD, M, M, M, M, I8, IZ, BAD, BAD,
    // 0x40 REX (handled as prefixes)
    I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0,
    // 0x50
    I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, I0,
    // 0x60: 60-62 invalid (62 = EVEX, handled), 63 movsxd, 64-67 prefixes, 68 push iz,
    // 69 imul iz, 6a push ib, 6b imul ib, 6c-6f ins/outs
    BAD, BAD, BAD, M, I0, I0, I0, I0, IZ, M | IZ, I8, M | I8, I0, I0, I0, I0,
    // 0x70 jcc rel8
    I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8,
    // 0x80 (82 invalid)
    M | I8, M | IZ, BAD, M | I8, M, M, M, M, M, M, M, M, M, M, M, M,
    // 0x90 (9a invalid)
    I0, I0, I0, I0, I0, I0, I0, I0, I0, I0, BAD, I0, I0, I0, I0, I0,
    // 0xa0: a0-a3 moffs (handled), a8 test ib, a9 test iz
    BAD, BAD, BAD, BAD, I0, I0, I0, I0, I8, IZ, I0, I0, I0, I0, I0, I0,
    // 0xb0 mov r8, ib; mov r, iz (or io with REX.W, handled)
    I8, I8, I8, I8, I8, I8, I8, I8, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ,
    // 0xc0: c4/c5 VEX (handled), c6 ib, c7 iz, c8 enter, ca retf iw, cd int ib, ce invalid
    M | I8, M | I8, I16, I0, BAD, BAD, M | I8, M | IZ, I24, I0, I16, I0, I0, I8, BAD, I0,
    // 0xd0: d4-d6 invalid, d8-df x87
    M, M, M, M, BAD, BAD, BAD, I0, M, M, M, M, M, M, M, M,
    // 0xe0: loop/jrcxz rel8, in/out ib, call/jmp rel32, ea invalid, jmp rel8
    I8, I8, I8, I8, I8, I8, I8, I8, IZ, IZ, BAD, I8, I0, I0, I0, I0,
    // 0xf0 (f0, f2, f3 prefixes; f6/f7 handled)
    I0, I0, I0, I0, I0, I0, M, M, I0, I0, I0, I0, I0, I0, M, M,
];

/// Two-byte map (0f xx): the same encoding.
#[rustfmt::skip]
const TWO: [u8; 256] = [
    // 0x00: 04, 0a, 0c invalid; 0f = 3DNow! (ModRM + ib)
    M, M, M, M, BAD, I0, I0, I0, I0, I0, BAD, I0, BAD, M, I0, M | I8,
    // 0x10
    M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
    // 0x20: 24-27 invalid
    M, M, M, M, BAD, BAD, BAD, BAD, M, M, M, M, M, M, M, M,
    // 0x30: 36 invalid, 38/3a escapes (handled), 39, 3b-3f invalid
    I0, I0, I0, I0, I0, I0, BAD, I0, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
    // 0x40 cmovcc
    M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
    // 0x50
    M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
    // 0x60
    M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
    // 0x70: 70-73 ib, 77 emms, 78 (handled), 7a-7b invalid
    M | I8, M | I8, M | I8, M | I8, M, M, M, I0, M, M, BAD, BAD, M, M, M, M,
    // 0x80 jcc rel32
    IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ, IZ,
    // 0x90 setcc
    M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
    // 0xa0: a6, a7 invalid; a4, ac ib
    I0, I0, I0, M, M | I8, M, BAD, BAD, I0, I0, I0, M, M | I8, M, M, M,
    // 0xb0: ba ib
    M, M, M, M, M, M, M, M, M, M, M | I8, M, M, M, M, M,
    // 0xc0: c2, c4, c5, c6 ib; c8-cf bswap
    M, M, M | I8, M, M | I8, M | I8, M | I8, M, I0, I0, I0, I0, I0, I0, I0, I0,
    // 0xd0
    M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
    // 0xe0
    M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
    // 0xf0
    M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
];

/// Prefix bytes, by kind.
const P_66: u8 = 1;
const P_67: u8 = 2;
const P_REP: u8 = 4;
const P_OTHER: u8 = 8;
const P_REX: u8 = 16;
const P_REXW: u8 = 32;
const PREFIX: [u8; 256] = {
    let mut t = [0u8; 256];
    t[0x66] = P_66;
    t[0x67] = P_67;
    t[0xf2] = P_REP;
    t[0xf3] = P_REP;
    let others = [0xf0, 0x2e, 0x36, 0x3e, 0x26, 0x64, 0x65];
    let mut i = 0;
    while i < others.len() {
        t[others[i]] = P_OTHER;
        i += 1;
    }
    let mut r = 0x40;
    while r < 0x50 {
        t[r] = P_REX | if r & 8 != 0 { P_REXW } else { 0 };
        r += 1;
    }
    t
};

/// Longest x86 instruction.
const MAX_LEN: usize = 15;

/// Bytes a ModRM byte and its displacement take, by ModRM value, without the SIB
/// byte's own effect (see [`modrm_len`]).
const MODRM: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut m = 0;
    while m < 256 {
        let (md, rm) = (m >> 6, m & 7);
        t[m] = match md {
            3 => 1,
            0 if rm == 5 => 5, // rip-relative disp32
            0 => 1,
            1 => 2,
            _ => 5,
        } + if md != 3 && rm == 4 { 1 } else { 0 };
        m += 1;
    }
    t
};

/// Bytes taken by a ModRM byte at `b[0]` and what follows it (SIB, displacement).
#[inline(always)]
fn modrm_len(b: &[u8]) -> Option<usize> {
    let modrm = *b.first()?;
    let mut n = MODRM[modrm as usize] as usize;
    // A SIB with base 5 under mod 0 adds a disp32.
    if modrm & 0xc7 == 0x04 {
        n += if *b.get(1)? & 7 == 5 { 4 } else { 0 };
    }
    Some(n)
}

/// Immediate bytes for an encoding entry.
fn imm_len(kind: u8, opsize16: bool) -> usize {
    match kind & 0x7f {
        I8 => 1,
        I16 => 2,
        IZ if opsize16 => 2,
        IZ => 4,
        I24 => 3,
        _ => 0,
    }
}

/// Decodes the instruction at the start of `b` (at address `ip`): its length and
/// flow, or None when the bytes are not a valid 64-bit instruction (or are cut off).
pub fn decode(b: &[u8], ip: u64) -> Option<(usize, Flow)> {
    // Prefixes: legacy ones in any order and REX, until the opcode. A REX counts
    // only right before the opcode (another prefix after it voids it), as on the CPU.
    let mut p = 0;
    let mut seen = 0u8;
    let mut rex_w = false;
    loop {
        let k = PREFIX[*b.get(p)? as usize];
        if k == 0 {
            break;
        }
        seen |= k;
        rex_w = k & P_REXW != 0;
        p += 1;
        if p >= MAX_LEN {
            return None;
        }
    }
    // REX.W overrides 66 for the operand size (and so for `iz` immediates).
    let (p66, addr32, rep) = (seen & P_66 != 0, seen & P_67 != 0, seen & P_REP != 0);
    let opsize16 = p66 && !rex_w;
    let op = *b.get(p)?;
    p += 1;
    let finish = |len: usize, flow: Flow| if len <= MAX_LEN && len <= b.len() { Some((len, flow)) } else { None };
    let rel = |len: usize, size: usize| -> Option<Flow> {
        let d = b.get(len - size..len)?;
        let disp = if size == 1 { d[0] as i8 as i64 } else { i32::from_le_bytes([d[0], d[1], d[2], d[3]]) as i64 };
        Some(Flow::Branch(ip.wrapping_add(len as u64).wrapping_add(disp as u64)))
    };
    match op {
        0x0f => {
            let op2 = *b.get(p)?;
            p += 1;
            match op2 {
                0x05 => finish(p, Flow::Syscall),
                0xa2 => finish(p, Flow::Cpuid),
                0x38 => {
                    b.get(p)?; // the third opcode byte
                    let len = p + 1 + modrm_len(b.get(p + 1..)?)?;
                    finish(len, Flow::Other)
                }
                0x3a => {
                    b.get(p)?;
                    let len = p + 1 + modrm_len(b.get(p + 1..)?)? + 1;
                    finish(len, Flow::Other)
                }
                0x80..=0x8f => {
                    if p66 {
                        return None; // 16-bit near branches: never in compiled code
                    }
                    let len = p + 4;
                    finish(len, rel(len, 4)?)
                }
                0x78 if p66 || rep => {
                    // SSE4a extrq/insertq: ModRM + two immediate bytes.
                    let len = p + modrm_len(b.get(p..)?)? + 2;
                    finish(len, Flow::Other)
                }
                _ => finish(p + operands_len(TWO[op2 as usize], b.get(p..)?, opsize16)?, Flow::Other),
            }
        }
        0xc4 | 0xc5 | 0x62 | 0x8f => vex(b, p - 1, op),
        0x70..=0x7f | 0xe0..=0xe3 | 0xeb => finish(p + 1, rel(p + 1, 1)?),
        0xe8 | 0xe9 => {
            if p66 {
                return None;
            }
            finish(p + 4, rel(p + 4, 4)?)
        }
        0xa0..=0xa3 => finish(p + if addr32 { 4 } else { 8 }, Flow::Other),
        0xb8..=0xbf if rex_w => finish(p + 8, Flow::Other),
        0xf6 | 0xf7 => {
            let modrm = *b.get(p)?;
            let mut len = p + modrm_len(b.get(p..)?)?;
            if modrm & 0x38 < 0x10 {
                len += if op == 0xf6 { 1 } else { imm_len(IZ, opsize16) };
            }
            finish(len, Flow::Other)
        }
        _ => finish(p + operands_len(ONE[op as usize], b.get(p..)?, opsize16)?, Flow::Other),
    }
}

/// Bytes after the opcode for an opcode-map entry `e`: ModRM and what follows it
/// (from `rest`), then the immediate; None for an invalid opcode.
fn operands_len(e: u8, rest: &[u8], opsize16: bool) -> Option<usize> {
    if e == BAD {
        return None;
    }
    let modrm = if e & M != 0 { modrm_len(rest)? } else { 0 };
    Some(modrm + imm_len(e, opsize16))
}

/// VEX (c4, c5), EVEX (62) and XOP (8f) encoded instructions, starting at `b[at]`.
fn vex(b: &[u8], at: usize, op: u8) -> Option<(usize, Flow)> {
    let p1 = *b.get(at + 1)?;
    // 8f with ModRM.reg = 0 is `pop r/m`, not XOP.
    if op == 0x8f && p1 & 0x38 == 0 {
        let len = at + 1 + modrm_len(b.get(at + 1..)?)?;
        return (len <= MAX_LEN && len <= b.len()).then_some((len, Flow::Other));
    }
    let (map, opcode_at) = match op {
        0xc5 => (1, at + 2),
        0xc4 => (p1 & 0x1f, at + 3),
        0x62 => (p1 & 0x07, at + 4),
        _ => (p1 & 0x1f, at + 3), // XOP: maps 8, 9, 10
    };
    let opc = *b.get(opcode_at)?;
    // vzeroupper / vzeroall have no ModRM.
    if op != 0x62 && map == 1 && opc == 0x77 {
        let len = opcode_at + 1;
        return (len <= b.len()).then_some((len, Flow::Other));
    }
    let imm = match (op, map) {
        (0x8f, 8) => 1,
        (0x8f, 10) => 4,
        (0x8f, 9) => 0,
        (0x8f, _) => return None,
        (_, 1) => usize::from(matches!(opc, 0x70..=0x73 | 0xc2 | 0xc4..=0xc6)),
        (_, 2) | (0x62, 5) | (0x62, 6) => 0,
        (_, 3) => 1,
        _ => return None,
    };
    let len = opcode_at + 1 + modrm_len(b.get(opcode_at + 1..)?)? + imm;
    (len <= MAX_LEN && len <= b.len()).then_some((len, Flow::Other))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(b: &[u8]) -> Option<(usize, Flow)> {
        decode(b, 0x1000)
    }

    #[test]
    fn common_shapes() {
        assert_eq!(d(&[0x0f, 0x05]), Some((2, Flow::Syscall)));
        assert_eq!(d(&[0x0f, 0xa2]), Some((2, Flow::Cpuid)));
        assert_eq!(d(&[0xb8, 1, 0, 0, 0]), Some((5, Flow::Other)));
        assert_eq!(d(&[0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8]), Some((10, Flow::Other)));
        assert_eq!(d(&[0x66, 0xb8, 1, 2]), Some((4, Flow::Other)));
        assert_eq!(d(&[0xeb, 0xfe]), Some((2, Flow::Branch(0x1000))));
        assert_eq!(d(&[0xe8, 0, 0, 0, 0]), Some((5, Flow::Branch(0x1005))));
        assert_eq!(d(&[0x0f, 0x84, 0x10, 0, 0, 0]), Some((6, Flow::Branch(0x1016))));
        // lea 0x10(%rip), %rax; mov 0x8(%rsp,%rbx,4), %eax; movl $1, 4(%rax)
        assert_eq!(d(&[0x48, 0x8d, 0x05, 0x10, 0, 0, 0]), Some((7, Flow::Other)));
        assert_eq!(d(&[0x8b, 0x44, 0x9c, 0x08]), Some((4, Flow::Other)));
        assert_eq!(d(&[0xc7, 0x40, 0x04, 1, 0, 0, 0]), Some((7, Flow::Other)));
        // test $1, %al via f6 /0 ib; neg %eax via f7 /3
        assert_eq!(d(&[0xf6, 0xc0, 0x01]), Some((3, Flow::Other)));
        assert_eq!(d(&[0xf7, 0xd8]), Some((2, Flow::Other)));
        // nopw %cs:0(%rax,%rax,1)
        assert_eq!(d(&[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]), Some((10, Flow::Other)));
        // vmovdqu (%rsi), %ymm0; vpcmpeqb %ymm1, %ymm0, %ymm2; vzeroupper
        assert_eq!(d(&[0xc5, 0xfe, 0x6f, 0x06]), Some((4, Flow::Other)));
        assert_eq!(d(&[0xc5, 0xfd, 0x74, 0xd1]), Some((4, Flow::Other)));
        assert_eq!(d(&[0xc5, 0xf8, 0x77]), Some((3, Flow::Other)));
        // endbr64
        assert_eq!(d(&[0xf3, 0x0f, 0x1e, 0xfa]), Some((4, Flow::Other)));
        // invalid in 64-bit mode, and cut off
        assert_eq!(d(&[0x06]), None);
        assert_eq!(d(&[0xe8, 0, 0]), None);
        assert_eq!(d(&[0x66; 20]), None);
    }
}
