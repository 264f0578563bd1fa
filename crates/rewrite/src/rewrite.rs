//! Load-time rewriting of the program's `syscall` instructions into calls into the
//! kernel, so that a system call never leaves guest ring 3 (a trap costs ~7 µs here,
//! a call a few nanoseconds).
//!
//! Sites are found by decoding instructions, function by function (ranges from the
//! symbol table, else from the unwind tables) and by a linear sweep of the code no
//! function covers. Pass 1 sweeps with a length decoder (`x86len`: lengths, sites
//! and branch targets only, ~25% faster than a full decode); pass 2
//! decodes each site's neighbourhood fully with yaxpeax-x86 (whose tables are
//! constant: iced-x86 spends ~0.6 ms building its tables on first use, a third of the
//! start-up budget; iced cross-checks both decoders in the tests).
//! A byte search would also find `0f 05` inside other instructions and data; it is
//! used only to skip functions that cannot contain a site.
//!
//! Each site is rewritten as LiteBox-style rewriters do: the 2-byte `syscall` and
//! neighbouring instructions (enough for 5 bytes, none of them a branch target) are
//! replaced by a `jmp rel32` to a per-site trampoline. The trampoline runs the moved
//! instructions before the call (copied, rip-relative displacements adjusted), switches to the
//! kernel stack without touching the program's stack (its red zone stays intact;
//! the user stack pointer goes to its per-CPU slot only once on the kernel stack,
//! where the kernel never preempts a thread, so the slot cannot be another CPU's),
//! puts the flags in R11 and the return address in RCX (which `syscall` clobbers
//! anyway), jumps to the kernel's ring-3 `syscall_entry`, and on return runs the moved
//! instructions after the call and jumps back. zpoline's `call *%rax` was rejected
//! because a call pushes a return address into the red zone; systrap-style rewriting
//! of only `mov $nr,%eax; syscall` would miss sites whose number is computed.
//!
//! `cpuid` is rewritten the same way when the target names a CPUID entry: here it
//! exits to the hypervisor (~27 µs under PVM, a few µs on hardware KVM), and glibc's
//! loader runs it ~70 times in every process. Its trampoline keeps every register
//! but the four `cpuid` writes and the flags: RBX (an output) carries the user stack
//! pointer to the kernel stack, where it is pushed; the entry answers from the
//! VMM's table and returns with `ret`.
//!
//! A site whose neighbourhood cannot be moved safely stays as it is and traps.

use crate::elf::{Program, PF_X};
use crate::x86len::{self, Flow};
use yaxpeax_arch::{Decoder as _, LengthedInstruction, U8Reader};
use yaxpeax_x86::long_mode::{InstDecoder, Instruction as X86, Opcode, Operand, RegSpec};

/// Bytes `jmp rel32` needs.
const JMP_LEN: usize = 5;
/// Instructions looked at on each side of a site.
const REACH: usize = 4;

/// What the rewriter needs to know about the kernel side.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Ring-3 system-call entry of the kernel.
    pub entry: u64,
    /// `%gs` offsets of the user stack pointer slot and of the kernel stack top.
    pub user_rsp: u32,
    pub kstack_top: u32,
    /// Ring-3 CPUID entry of the kernel; 0: `cpuid` instructions stay as they are.
    pub cpuid: u64,
}

/// Bytes to write over the program's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub addr: u64,
    pub bytes: Vec<u8>,
}

/// The result of rewriting one program.
#[derive(Debug, Default)]
pub struct Plan {
    pub patches: Vec<Patch>,
    /// Trampoline code, to be placed at the base address given to [`plan`].
    pub trampolines: Vec<u8>,
    /// `syscall` instructions found.
    pub sites: usize,
    /// Of those, rewritten.
    pub rewritten: usize,
    /// `cpuid` instructions found (none when the target has no CPUID entry), and
    /// of those, rewritten.
    pub cpuid_sites: usize,
    pub cpuid_rewritten: usize,
}

/// A stretch of code to decode: its (loaded) address and bytes.
#[derive(Clone, Copy, Debug)]
pub struct Code<'a> {
    pub addr: u64,
    pub bytes: &'a [u8],
}

/// The executable segments of `prog` (parsed from `file`) as code to rewrite, at
/// their loaded addresses (`bias` added).
pub fn program_code<'a>(prog: &Program, file: &'a [u8], bias: u64) -> Vec<Code<'a>> {
    prog.segments
        .iter()
        .filter(|s| s.flags & PF_X != 0)
        .map(|s| Code { addr: s.vaddr.wrapping_add(bias), bytes: s.bytes(file) })
        .collect()
}

/// What an instruction means to the rewriter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Syscall,
    Cpuid,
    /// A direct jump, conditional jump, call or loop, and where it goes.
    Branch(u64),
    Return,
    /// Any other control transfer (indirect, far, interrupt, ...) or undecodable
    /// bytes: never moved.
    Other,
    /// Everything else: movable.
    Plain,
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug)]
struct Ins {
    ip: u64,
    len: usize,
    kind: Kind,
    /// For a rip-relative memory operand: the address it reaches and where its 4-byte
    /// displacement sits in the instruction.
    rip_rel: Option<(u64, usize)>,
}

impl Ins {
    fn next_ip(&self) -> u64 {
        self.ip + self.len as u64
    }
}

/// The kind of the instructions both passes care about: a site, or a direct
/// branch and where it goes (an indirect one is `Other`). None for the rest.
fn site_or_branch(i: &X86, next: u64) -> Option<Kind> {
    use Opcode::*;
    Some(match i.opcode() {
        SYSCALL => Kind::Syscall,
        CPUID => Kind::Cpuid,
        JMP | CALL | JO | JNO | JB | JNB | JZ | JNZ | JA | JNA | JS | JNS | JP | JNP | JL | JGE | JLE | JG | LOOP
        | LOOPZ | LOOPNZ | JRCXZ | JECXZ => match i.operand(0) {
            Operand::ImmediateI8 { imm } => Kind::Branch(next.wrapping_add(imm as i64 as u64)),
            Operand::ImmediateI32 { imm } => Kind::Branch(next.wrapping_add(imm as i64 as u64)),
            _ => Kind::Other,
        },
        _ => return None,
    })
}

fn classify(i: &X86, ip: u64) -> (Kind, Option<i32>, usize) {
    use Opcode::*;
    let len = i.len().to_const() as usize;
    let mut rip_disp = None;
    let mut odd_rip = false;
    for n in 0..i.operand_count() {
        match i.operand(n) {
            Operand::Disp { base, disp } if base == RegSpec::rip() => rip_disp = Some(disp),
            Operand::DispMasked { base, .. } if base == RegSpec::rip() => odd_rip = true,
            _ => {}
        }
    }
    let kind = match site_or_branch(i, ip.wrapping_add(len as u64)) {
        Some(k) => k,
        None => match i.opcode() {
            RETURN => Kind::Return,
            RETF | IRET | IRETD | IRETQ | INT | INTO | UD0 | UD1 | UD2 | HLT | SYSENTER | SYSEXIT | SYSRET | JMPF
            | CALLF | XBEGIN | XABORT | XEND => Kind::Other,
            _ if odd_rip => Kind::Other,
            _ => Kind::Plain,
        },
    };
    (kind, rip_disp, len)
}

/// Where the 4-byte rip-relative displacement `disp` sits in `bytes` (one
/// instruction): after the opcode and ModRM, before any immediate (which ends the
/// instruction and is at most 4 bytes here), so the first match from byte 2 on that
/// leaves 0, 1, 2 or 4 bytes after it.
fn disp_offset(bytes: &[u8], disp: i32) -> Option<usize> {
    let want = disp.to_le_bytes();
    (2..=bytes.len().checked_sub(4)?)
        .find(|&p| bytes.get(p..p + 4) == Some(&want[..]) && matches!(bytes.len() - p - 4, 0 | 1 | 2 | 4))
}

/// Decodes one instruction of `bytes` at `ip`.
fn decode_one(decoder: &InstDecoder, ip: u64, bytes: &[u8]) -> Ins {
    let Ok(i) = decoder.decode(&mut U8Reader::new(bytes)) else {
        return Ins { ip, len: 1, kind: Kind::Other, rip_rel: None };
    };
    let (kind, rip_disp, len) = classify(&i, ip);
    let Some(ins_bytes) = bytes.get(..len).filter(|b| !b.is_empty()) else {
        return Ins { ip, len: 1, kind: Kind::Other, rip_rel: None };
    };
    let next = ip.wrapping_add(len as u64);
    let (kind, rip_rel) = match rip_disp {
        None => (kind, None),
        // A rip-relative operand is moved only if its displacement can be found.
        Some(d) => match disp_offset(ins_bytes, d) {
            Some(at) => (kind, Some((next.wrapping_add(d as i64 as u64), at))),
            None => (Kind::Other, None),
        },
    };
    Ins { ip, len, kind, rip_rel }
}

/// Decodes at most `max` instructions of `bytes` (at `addr`). Undecodable bytes
/// come out as one-byte `Other` instructions.
fn decode_n(addr: u64, bytes: &[u8], max: usize) -> Vec<Ins> {
    let decoder = InstDecoder::default();
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let Some(rest) = bytes.get(pos..).filter(|r| !r.is_empty() && out.len() < max) {
        let ins = decode_one(&decoder, addr + pos as u64, rest);
        pos += ins.len;
        out.push(ins);
    }
    out
}

/// The fast sweep of pass 1: for each instruction only its address and whether it is
/// a site or a direct branch (and where to), from the length decoder.
fn scan(addr: u64, bytes: &[u8], mut f: impl FnMut(u64, Kind)) {
    let mut pos = 0usize;
    while let Some(rest) = bytes.get(pos..).filter(|r| !r.is_empty()) {
        let ip = addr + pos as u64;
        match x86len::decode(rest, ip) {
            Some((len, flow)) => {
                f(
                    ip,
                    match flow {
                        Flow::Syscall => Kind::Syscall,
                        Flow::Cpuid => Kind::Cpuid,
                        Flow::Branch(t) => Kind::Branch(t),
                        Flow::Other => Kind::Plain,
                    },
                );
                pos += len;
            }
            None => {
                f(ip, Kind::Other);
                pos += 1;
            }
        }
    }
}

/// Whether `b` holds the bytes of a `syscall`, or of a `cpuid` if `cpuid` is set.
fn has_site_bytes(b: &[u8], cpuid: bool) -> bool {
    memchr::memmem::find(b, &[0x0f, 0x05]).is_some() || (cpuid && memchr::memmem::find(b, &[0x0f, 0xa2]).is_some())
}

/// The pieces of `code` to decode one by one: each function wholly inside a piece
/// of code, and the gaps between them; only those that may hold a site. `code`
/// pieces must not wrap around the address space; `functions` must be sorted.
fn units<'a>(code: &[Code<'a>], functions: &[(u64, u64)], cpuid: bool) -> Vec<Code<'a>> {
    let mut out = Vec::new();
    for c in code {
        let end = c.addr.saturating_add(c.bytes.len() as u64);
        // [from, to) lies inside `c` at every call below.
        let piece = |from: u64, to: u64| Code {
            addr: from,
            bytes: c.bytes.get((from - c.addr) as usize..(to - c.addr) as usize).unwrap_or(&[]),
        };
        let mut at = c.addr;
        // Functions from the first at or after the piece's start (a binary search, so
        // many pieces and many functions cost n log n); overlapping entries are skipped.
        let first = functions.partition_point(|f| f.0 < c.addr);
        for &(a, s) in functions.get(first..).unwrap_or(&[]).iter().take_while(|f| f.0 < end) {
            let Some(e) = a.checked_add(s).filter(|e| *e <= end) else {
                continue;
            };
            if a < at {
                continue;
            }
            if a > at {
                out.push(piece(at, a));
            }
            out.push(piece(a, e));
            at = e;
        }
        if at < end {
            out.push(piece(at, end));
        }
    }
    out.retain(|u| has_site_bytes(u.bytes, cpuid));
    out
}

/// Whether `i` may be moved into a trampoline (as a neighbour of the site).
fn movable(i: &Ins, last: bool) -> bool {
    match i.kind {
        Kind::Plain => true,
        // A return ends the window: nothing after it runs.
        Kind::Return => last,
        _ => false,
    }
}

/// Re-emits the instructions `ins` (bytes from `code`) at `rip`: bytes copied,
/// rip-relative displacements adjusted so they still reach the same address.
fn encode(ins: &[Ins], code: &Code, mut rip: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for i in ins {
        let start = usize::try_from(i.ip.checked_sub(code.addr)?).ok()?;
        let mut b = code.bytes.get(start..start.checked_add(i.len)?)?.to_vec();
        let next = rip.checked_add(i.len as u64)?;
        if let Some((target, at)) = i.rip_rel {
            b.get_mut(at..at + 4)?.copy_from_slice(&rel32(next, target)?);
        }
        rip = next;
        out.extend(b);
    }
    Some(out)
}

fn rel32(from_next: u64, to: u64) -> Option<[u8; 4]> {
    i32::try_from(to.wrapping_sub(from_next) as i64).ok().map(i32::to_le_bytes)
}

/// Builds the trampoline of a `syscall` site's window (`pre`, the site, `post`)
/// at `at`, returning to `back`.
fn trampoline(pre: &[Ins], post: &[Ins], code: &Code, at: u64, back: u64, t: &Target) -> Option<Vec<u8>> {
    let mut out = encode(pre, code, at)?;
    // mov %rsp, %r11 ; mov %gs:kstack_top, %rsp ; mov %r11, %gs:user_rsp
    // (R11 is scratch: `syscall` clobbers it. The per-CPU slot is written only once
    // on the kernel stack, where an interrupt cannot move the thread to another
    // CPU: the kernel defers preemption while a thread is on its kernel stack.)
    out.extend([0x49, 0x89, 0xe3]);
    out.extend([0x65, 0x48, 0x8b, 0x24, 0x25]);
    out.extend(t.kstack_top.to_le_bytes());
    out.extend([0x65, 0x4c, 0x89, 0x1c, 0x25]);
    out.extend(t.user_rsp.to_le_bytes());
    // pushfq ; pop %r11 (on the kernel stack)
    out.extend([0x9c, 0x41, 0x5b]);
    // lea R(%rip), %rcx ; jmp *E(%rip)  -- R follows the jmp
    // (Addresses are checked: `at` is the caller's and may lie anywhere.)
    let lea_at = at.checked_add(out.len() as u64)?;
    let r = lea_at.checked_add(7 + 6)?;
    out.extend([0x48, 0x8d, 0x0d]);
    out.extend(rel32(lea_at + 7, r)?);
    let post_code = encode(post, code, r)?;
    let e = r.checked_add(post_code.len() as u64 + JMP_LEN as u64)?;
    out.extend([0xff, 0x25]);
    out.extend(rel32(lea_at + 13, e)?);
    out.extend(&post_code);
    // jmp back
    let jmp_back_at = at.checked_add(out.len() as u64)?;
    out.push(0xe9);
    out.extend(rel32(jmp_back_at.checked_add(5)?, back)?);
    out.extend(t.entry.to_le_bytes());
    Some(out)
}

/// The trampoline of a `cpuid` site: the moved instructions before it; then
/// `mov %rsp, %rbx ; mov %gs:kstack_top, %rsp ; push %rbx ; call *E(%rip) ;
/// pop %rsp` (RBX is one of `cpuid`'s outputs; the entry keeps every other
/// register and the flags, and nothing touches the program's stack); the moved
/// instructions after it; the jump back; E, the entry's address.
fn cpuid_trampoline(pre: &[Ins], post: &[Ins], code: &Code, at: u64, back: u64, t: &Target) -> Option<Vec<u8>> {
    let mut out = encode(pre, code, at)?;
    out.extend([0x48, 0x89, 0xe3]);
    out.extend([0x65, 0x48, 0x8b, 0x24, 0x25]);
    out.extend(t.kstack_top.to_le_bytes());
    out.push(0x53);
    let call_at = at.checked_add(out.len() as u64)?;
    let post_at = call_at.checked_add(6 + 1)?;
    let post_code = encode(post, code, post_at)?;
    let jmp_back_at = post_at.checked_add(post_code.len() as u64)?;
    let e = jmp_back_at.checked_add(JMP_LEN as u64)?;
    out.extend([0xff, 0x15]);
    out.extend(rel32(call_at + 6, e)?);
    out.push(0x5c);
    out.extend(&post_code);
    out.push(0xe9);
    out.extend(rel32(jmp_back_at.checked_add(5)?, back)?);
    out.extend(t.cpuid.to_le_bytes());
    Some(out)
}

/// Finds and rewrites the `syscall` sites of `code` (and its `cpuid` sites, if
/// `target.cpuid` is set); trampolines go at `base`
/// (which must be within ±2 GiB of the code). `functions` are function ranges
/// (loaded addresses) from [`crate::functions::ranges`], empty if there are none.
///
/// Total on any input: code that would wrap around the address space is left alone,
/// function ranges may be anything (unsorted, overlapping, outside the code), and
/// every patch lies inside the code it was given (the fuzz tests check this).
pub fn plan(code: &[Code], functions: &[(u64, u64)], base: u64, target: &Target) -> Plan {
    let code: Vec<Code> = code.iter().copied().filter(|c| c.addr.checked_add(c.bytes.len() as u64).is_some()).collect();
    // Ranges come sorted from the file's tables; a load bias that wraps some of them
    // around (a hostile static-pie) unsorts them.
    let mut sorted;
    let functions = if functions.is_sorted() {
        functions
    } else {
        sorted = functions.to_vec();
        sorted.sort_unstable();
        &sorted[..]
    };
    // Pass 1, streaming (no instruction is kept: a large binary has hundreds of
    // thousands): every direct branch target, and for each site where decoding may
    // restart to see the instructions just before it.
    let cpuid = target.cpuid != 0;
    let units = units(&code, functions, cpuid);
    let mut targets: Vec<u64> = Vec::new();
    let mut sites: Vec<(usize, u64, u64, Kind)> = Vec::new(); // (unit, restart address, site, kind)
    for (n, unit) in units.iter().enumerate() {
        targets.push(unit.addr);
        let mut recent = [0u64; REACH];
        let mut seen = 0usize;
        scan(unit.addr, unit.bytes, |ip, kind| {
            match kind {
                Kind::Branch(t) => targets.push(t),
                Kind::Syscall | Kind::Cpuid if kind == Kind::Syscall || cpuid => {
                    let back = seen.min(REACH);
                    let restart = if back == 0 { ip } else { recent[(seen - back) % REACH] };
                    sites.push((n, restart, ip, kind));
                }
                _ => {}
            }
            recent[seen % REACH] = ip;
            seen += 1;
        });
    }
    targets.sort_unstable();
    targets.dedup();

    // Pass 2: decode a few instructions around each site and rewrite it.
    let cpuid_sites = sites.iter().filter(|s| s.3 == Kind::Cpuid).count();
    let mut plan = Plan { sites: sites.len() - cpuid_sites, cpuid_sites, ..Plan::default() };
    let mut done_until = 0u64; // code below this address is already patched
    for (n, restart, site, kind) in sites {
        let Some(unit) = units.get(n) else { continue };
        // In the unit: `restart <= site`, and `done_until` counts only if it is above
        // `restart` (so inside the unit) and not above the site.
        let mut from = restart.max(done_until).min(site);
        // A signal restorer's unwind entry starts a byte before it (glibc: for
        // unwinders, which subtract one from return addresses), so decoding from
        // the unit's start can be out of step there: start at its `mov` itself.
        if let Some(n) = sigreturn_mov_before(unit, site).filter(|_| kind == Kind::Syscall) {
            if site - n >= done_until {
                from = site - n;
            }
        }
        let bytes = unit.bytes.get((from - unit.addr) as usize..).unwrap_or(&[]);
        let local = decode_n(from, bytes, 2 * REACH + 2);
        let Some(idx) = local.iter().position(|i| i.ip == site) else {
            continue; // decoding from `done_until` lost the instruction boundaries
        };
        let local = &local[..(idx + REACH + 1).min(local.len())];
        let Some((lo, hi)) = window(local, idx, &targets) else {
            continue;
        };
        let (ws, we) = (local[lo].ip, local[hi].next_ip());
        let Some(at) = base.checked_add(plan.trampolines.len() as u64) else {
            continue;
        };
        let build = if kind == Kind::Cpuid { cpuid_trampoline } else { trampoline };
        let Some(tramp) = build(&local[lo..idx], &local[idx + 1..=hi], unit, at, we, target) else {
            continue;
        };
        let Some(rel) = rel32(ws + JMP_LEN as u64, at) else {
            continue;
        };
        let mut bytes = vec![0xe9];
        bytes.extend(rel);
        bytes.resize((we - ws) as usize, 0xcc); // int3: nothing may land here
        plan.patches.push(Patch { addr: ws, bytes });
        plan.trampolines.extend(tramp);
        if kind == Kind::Cpuid {
            plan.cpuid_rewritten += 1;
        } else {
            plan.rewritten += 1;
        }
        done_until = we;
    }
    plan
}

/// rt_sigreturn's number loaded as a signal restorer loads it.
const SIGRETURN_MOVS: [&[u8]; 2] = [&[0x48, 0xc7, 0xc0, 15, 0, 0, 0], &[0xb8, 15, 0, 0, 0]];

/// The length of `mov $15, %eax` or `mov $15, %rax` right before the site at
/// `site`, if the bytes there are one (whatever the decoding in step says). A
/// signal restorer is entered by a handler's return, not by a branch, so no table
/// marks its start; decoding from its `mov` makes the window start there (the
/// smallest window, `mov` and `syscall`, never takes the padding before it).
fn sigreturn_mov_before(unit: &Code, site: u64) -> Option<u64> {
    let at = site.checked_sub(unit.addr)? as usize;
    SIGRETURN_MOVS.iter().find(|m| at >= m.len() && unit.bytes.get(at - m.len()..at) == Some(m)).map(|m| m.len() as u64)
}

/// The smallest window of instructions `[lo, hi]` around the site `idx` that is at
/// least 5 bytes long, movable, and holds no branch target except at its start.
fn window(unit: &[Ins], idx: usize, targets: &[u64]) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for back in 0..=REACH.min(idx) {
        for fwd in 0..=REACH {
            let (lo, hi) = (idx - back, idx + fwd);
            if hi >= unit.len() {
                break;
            }
            let len = (unit[hi].next_ip() - unit[lo].ip) as usize;
            if len < JMP_LEN {
                continue;
            }
            let ok = (lo..=hi).all(|k| k == idx || movable(&unit[k], k == hi))
                && (lo + 1..=hi).all(|k| targets.binary_search(&unit[k].ip).is_err())
                // A `ret` ends the window: nothing may follow it inside.
                && (lo..hi).all(|k| unit[k].kind != Kind::Return);
            // Fewest instructions; on a tie, fewer after the site (they may be needed by
            // the next site).
            if ok && best.is_none_or(|(l, h)| (hi - lo, hi - idx) < (h - l, h - idx)) {
                best = Some((lo, hi));
            }
            break; // longer forward windows of this `back` are no better
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Target =
        Target { entry: 0xffff_ffff_8020_0030, user_rsp: 32, kstack_top: 16, cpuid: 0xffff_ffff_8020_0040 };

    fn run(code: &[u8]) -> Plan {
        plan(&[Code { addr: 0x401000, bytes: code }], &[], 0x500000, &T)
    }

    #[test]
    fn a_signal_restorer_starts_its_window_at_its_mov() {
        // nopl 0(%rax) ; mov $15, %rax ; syscall ; nopl: the handler returns to the
        // mov, so the jump must start there, not in the padding before it.
        let code = [0x0f, 0x1f, 0x40, 0x00, 0x48, 0xc7, 0xc0, 15, 0, 0, 0, 0x0f, 0x05, 0x0f, 0x1f, 0x40, 0x00];
        let p = run(&code);
        assert_eq!((p.sites, p.rewritten), (1, 1));
        assert_eq!(p.patches[0].addr, 0x401004, "the window starts at the mov");
    }

    #[test]
    fn a_restorer_whose_unit_starts_a_byte_early_is_patched_in_step() {
        // glibc's unwind entry for __restore_rt starts one byte early, inside the
        // padding (`nopl 0(%rax)` ends with 00): decoded from there, `00 48 c7` and
        // `c0 0f 00` swallow the mov. The patch must still start at the mov.
        let code = [0x0f, 0x1f, 0x40, 0x00, 0x48, 0xc7, 0xc0, 15, 0, 0, 0, 0x0f, 0x05, 0x0f, 0x1f, 0x40, 0x00];
        let p = plan(&[Code { addr: 0x401000, bytes: &code }], &[(0x401003, 0x401011)], 0x500000, &T);
        assert_eq!((p.sites, p.rewritten), (1, 1));
        assert_eq!(p.patches[0].addr, 0x401004);
        assert_eq!(p.patches[0].bytes.len(), 9);
    }

    #[test]
    fn mov_then_syscall_is_rewritten() {
        // mov $1, %eax ; syscall ; ret
        let p = run(&[0xb8, 1, 0, 0, 0, 0x0f, 0x05, 0xc3]);
        assert_eq!((p.sites, p.rewritten), (1, 1));
        assert_eq!(p.patches[0].addr, 0x401000);
        assert_eq!(p.patches[0].bytes.len(), 7);
        assert_eq!(p.patches[0].bytes[0], 0xe9);
        assert!(p.patches[0].bytes[5..].iter().all(|b| *b == 0xcc));
        // The trampoline starts with the moved mov.
        assert_eq!(&p.trampolines[..5], &[0xb8, 1, 0, 0, 0]);
        // And ends with the kernel entry.
        assert_eq!(&p.trampolines[p.trampolines.len() - 8..], &T.entry.to_le_bytes());
    }

    #[test]
    fn cpuid_is_rewritten_into_a_call_on_the_kernel_stack() {
        // mov $7, %eax ; xor %ecx, %ecx ; cpuid ; ret
        let code = [0xb8, 7, 0, 0, 0, 0x31, 0xc9, 0x0f, 0xa2, 0xc3];
        let p = run(&code);
        assert_eq!((p.sites, p.rewritten, p.cpuid_sites, p.cpuid_rewritten), (0, 0, 1, 1));
        assert_eq!(p.patches[0].addr, 0x401000, "mov, xor and cpuid make the window");
        let t = iced(0x500000, &p.trampolines[..p.trampolines.len() - 8]);
        use iced_x86::{Code as C, Register as R};
        let ops: Vec<C> = t.iter().map(|i| i.code()).collect();
        let glue = [
            C::Mov_r32_imm32,
            C::Xor_rm32_r32,
            C::Mov_rm64_r64,
            C::Mov_r64_rm64,
            C::Push_r64,
            C::Call_rm64,
            C::Pop_r64,
            C::Jmp_rel32_64,
        ];
        assert_eq!(ops[..8], glue);
        assert_eq!((t[2].op0_register(), t[2].op1_register()), (R::RBX, R::RSP));
        assert_eq!((t[3].segment_prefix(), t[3].memory_displacement64()), (R::GS, 16));
        assert_eq!(t[7].near_branch_target(), 0x401009, "back to the ret");
        let entry = t[5].ip_rel_memory_address();
        assert_eq!(entry, 0x500000 + p.trampolines.len() as u64 - 8, "the call reads the entry's address");
        assert_eq!(&p.trampolines[p.trampolines.len() - 8..], &T.cpuid.to_le_bytes());
        // Without a CPUID entry, cpuid is not a site.
        let off = Target { cpuid: 0, ..T };
        let p = plan(&[Code { addr: 0x401000, bytes: &code }], &[], 0x500000, &off);
        assert_eq!((p.cpuid_sites, p.cpuid_rewritten, p.patches.len()), (0, 0, 0));
    }

    #[test]
    fn a_branch_target_inside_the_window_is_respected() {
        // 0: mov %rdi,%rax (3) ; 3: syscall ; 5: ret ; 6: jmp 3 (back to the syscall)
        let code = [0x48, 0x89, 0xf8, 0x0f, 0x05, 0xc3, 0xeb, 0xfb];
        let p = run(&code);
        assert_eq!(p.sites, 1);
        // Window [mov, syscall] holds the target 0x401003: not allowed. [syscall, ret]
        // is 3 bytes: too short. So the site stays on the trap path.
        assert_eq!(p.rewritten, 0);
    }

    #[test]
    fn syscall_followed_by_code_uses_the_instructions_after() {
        // 0: syscall ; 2: cmp $-4095,%rax (6) ; 8: ret ; and a jump to 0 (start is fine)
        let code = [0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, 0xc3, 0xeb, 0xf5];
        let p = run(&code);
        assert_eq!((p.sites, p.rewritten), (1, 1));
        assert_eq!(p.patches[0].bytes.len(), 8);
    }

    #[test]
    fn rip_relative_neighbours_are_relocated() {
        // mov 0x10(%rip),%eax (6) ; syscall ; and cmpl $5, 0x20(%rip) (an immediate after
        // the displacement) ; syscall
        let code = [0x8b, 0x05, 0x10, 0, 0, 0, 0x0f, 0x05, 0x83, 0x3d, 0x20, 0, 0, 0, 5, 0x0f, 0x05, 0xc3];
        let p = run(&code);
        assert_eq!(p.rewritten, 2);
        // Decode the moved instructions with iced: they must reach the same addresses.
        let first = iced(0x500000, &p.trampolines[..6]);
        assert_eq!(first[0].ip_rel_memory_address(), 0x401006 + 0x10);
        let second_at = (p.patches[1].addr + 5)
            .wrapping_add(i32::from_le_bytes(p.patches[1].bytes[1..5].try_into().unwrap()) as i64 as u64);
        let off = (second_at - 0x500000) as usize;
        let second = iced(second_at, &p.trampolines[off..off + 7]);
        assert_eq!(second[0].ip_rel_memory_address(), 0x40100f + 0x20);
        assert_eq!(second[0].immediate8(), 5);
    }

    /// Decodes with iced-x86, as a second opinion.
    fn iced(addr: u64, bytes: &[u8]) -> Vec<iced_x86::Instruction> {
        let mut d = iced_x86::Decoder::with_ip(64, bytes, addr, iced_x86::DecoderOptions::NONE);
        let mut out = Vec::new();
        while d.can_decode() {
            out.push(d.decode());
        }
        out
    }

    #[test]
    fn syscall_bytes_inside_other_instructions_are_not_sites() {
        // mov $0x050f, %eax contains 0f 05 but is not a syscall.
        let p = run(&[0xb8, 0x0f, 0x05, 0, 0, 0xc3]);
        assert_eq!((p.sites, p.rewritten), (0, 0));
    }

    #[test]
    fn far_trampolines_are_refused() {
        let p =
            plan(&[Code { addr: 0x401000, bytes: &[0xb8, 1, 0, 0, 0, 0x0f, 0x05, 0xc3] }], &[], 0x7000_0000_0000, &T);
        assert_eq!((p.sites, p.rewritten), (1, 0));
    }

    /// Many pieces of code and many function ranges: the split into units is a
    /// binary search per piece, not a scan of every function for every piece.
    #[test]
    fn many_pieces_and_many_functions_are_cheap() {
        let bytes = [0x0f, 0x05, 0x90, 0x90];
        let code: Vec<Code> = (0..60_000u64).map(|i| Code { addr: 0x40_0000 + i * 0x10, bytes: &bytes }).collect();
        let functions: Vec<(u64, u64)> = (0..200_000u64).map(|i| (0x40_0000 + i * 3, 2)).collect();
        let t = std::time::Instant::now();
        let p = plan(&code, &functions, 0x1000_0000, &T);
        assert!(p.sites > 40_000, "{}", p.sites); // functions that split a `0f 05` hide it
        assert!(t.elapsed().as_secs() < 2, "{:?}", t.elapsed());
    }
}
