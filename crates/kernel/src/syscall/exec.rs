//! `execve` and `execveat`, and the kernel's ELF loader behind them; also the
//! dynamic loader of the first program and the rewriting of code the program maps
//! executable itself (shared libraries, `dlopen`).
//!
//! The VMM loads the first program before boot (fast, no guest work). Everything
//! loaded later is loaded here, from the VM's own file tree: the program file's
//! headers are read and checked by the same total parser the VMM uses
//! (`onering_rewrite::elf`), its segments mapped from the file (an image of 4 MiB
//! or more: filled as touched) or read into fresh anonymous memory, and its
//! `syscall` instructions rewritten with a plan the VMM's rewriter makes (the
//! decoder is a std crate and large, so it stays in the VMM, behind one exit). The
//! VMM reads a host file the VM has not changed itself (`hostfs::PLAN`); any
//! other file it gets whole (`Hostcall::Rewrite`, in pieces of kernel memory: the
//! planner reads the symbol table too). Nothing needs a block of kernel memory as
//! large as the file: once the program's memory has split the chunks up, a 33 MiB
//! `cc1` found none. Plans are cached by file (device, inode, size, mtime) and
//! by where the trampolines go relative to the code, so a program or library that
//! is loaded again (every `fork`+`exec` of a shell command, libc each time) is
//! patched with no exit at all.
//!
//! A program with an interpreter (`PT_INTERP`) gets it loaded beside it, anywhere
//! `mmap` finds room; the interpreter then maps the libraries with `mmap`, and
//! [`rewrite_mapping`] rewrites each executable file mapping as it is made, with
//! its trampolines in a mapping of their own just below the library (where
//! top-down placement keeps the next library from landing). Code that cannot be
//! rewritten (no room within ±2 GiB, a file too large, `--no-rewrite`) still runs:
//! its system calls trap, which is slower, never wrong.
//!
//! `execve` checks everything it can before the point of no return (the file,
//! its interpreter, the arguments); past it, a failure kills the process with
//! SIGSEGV, as Linux does.

use super::fs::{blocking, dir, path_arg, start_dir};
use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::file::{mode, oflag, FileRef};
use crate::mm::space::map_flags;
use crate::mm::user::{BufferMem, UserMem, UserMemExt};

/// An address space under its lock.
type Mm = Mutex<crate::mm::UserSpace>;
use crate::mm::vma::{PROT_EXEC, PROT_READ, PROT_WRITE};
use crate::sigframe::{Regs, SIG_DFL, SIG_IGN};
use crate::task::kernel::Kernel;
use crate::task::process::ExecImage;
use crate::task::{sched, Ctx};
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;
use onering_abi::layout::{align_down, align_up, HUGE_PAGE_SIZE, PAGE_SIZE, PIE_BASE, STACK_SIZE, STACK_TOP, USER_END};
use onering_abi::rewrite::WirePlan;
use onering_arch::sync::Mutex;
use onering_rewrite::elf::{shebang, Program, PF_X};
use onering_rewrite::stack::{self, StackSpec};
use spin::Once;

/// First bytes read of a program file: its `#!` line, or the ELF header and
/// program headers of every usual program (more are read when they lie further).
const HEAD: u64 = 4096;
/// Most first bytes read to find the headers (65535 program headers: 3.5 MiB).
const MAX_HEAD: u64 = 4 << 20;
/// Pieces a whole file is read in for the planner (small heap blocks).
const PIECE: u64 = 256 << 10;
/// A whole file in pieces of [`PIECE`] bytes (the last shorter).
type Pieces = Vec<Vec<u8>>;
/// `#!` lines are read up to this length (Linux's BINPRM_BUF_SIZE).
const SHEBANG_MAX: usize = 256;
/// Interpreters of interpreters followed (Linux: 4 levels of binfmt).
const MAX_SCRIPT_DEPTH: usize = 4;
/// Room for the trampolines of one `syscall` or `cpuid` site, to size a library's
/// trampoline mapping before the plan is known (the longest seen is ~90 bytes).
const TRAMPOLINE_ROOM: u64 = 128;
/// Plans kept (a program and its libraries take a few each).
const MAX_PLANS: usize = 128;
/// Where the plan a library's trampolines get is made: any bias does, one far
/// from zero keeps the trampolines below the code from wrapping.
const PLAN_BIAS: u64 = 1 << 40;

/// What the first program started with that every later one gets too: the
/// hardware capabilities for AT_HWCAP, and the vDSO with its clock page.
struct BootImage {
    hwcap: u64,
    /// The clock page and then the vDSO, as mapped below and at AT_SYSINFO_EHDR.
    vdso: Vec<u8>,
}

static BOOT: Once<BootImage> = Once::new();

/// Boot: remembers the first program's AT_HWCAP and a copy of its vDSO (`vdso_len`
/// bytes at `vdso`, 0: none) with the clock page below it.
pub fn remember_boot(user: &dyn UserMem, sp: u64, vdso: u64, vdso_len: u64) {
    let hwcap = auxv(user, sp).iter().find(|(k, _)| *k == stack::AT_HWCAP).map_or(0, |(_, v)| *v);
    let below = onering_abi::vvar::BELOW_VDSO;
    let copy = (vdso != 0 && vdso_len > 0 && vdso_len < 1 << 20)
        .then(|| user.read_vec(vdso - below, (below + vdso_len) as usize).ok())
        .flatten()
        .unwrap_or_default();
    BOOT.call_once(|| BootImage { hwcap, vdso: copy });
}

/// The auxiliary vector of the initial stack at `sp` (argc, argv..., 0, envp...,
/// 0, then the pairs), and where each pair's value lies.
fn auxv(user: &dyn UserMem, sp: u64) -> Vec<(u64, u64)> {
    auxv_slots(user, sp).into_iter().map(|(k, v, _)| (k, v)).collect()
}

fn auxv_slots(user: &dyn UserMem, sp: u64) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let Ok(argc) = user.read_u64(sp) else { return out };
    let mut at = sp.saturating_add(8).saturating_add(argc.saturating_add(1).saturating_mul(8));
    while user.read_u64(at).is_ok_and(|p| p != 0) {
        at += 8;
    }
    at += 8;
    for _ in 0..64 {
        let (Ok(k), Ok(v)) = (user.read_u64(at), user.read_u64(at + 8)) else { break };
        if k == stack::AT_NULL {
            break;
        }
        out.push((k, v, at + 8));
        at += 16;
    }
    out
}

/// Boot, for a dynamically linked first program (the VMM loaded it, not its
/// interpreter): loads the interpreter its `PT_INTERP` names from the VM's tree,
/// sets AT_BASE on the initial stack at `sp`; the entry point to start at. Err: a
/// message for the user (the VM ends with 126).
pub fn boot_interp(k: &'static Kernel, user: &dyn UserMem, sp: u64) -> Result<Option<u64>, alloc::string::String> {
    use alloc::format;
    let aux = auxv_slots(user, sp);
    let get = |key: u64| aux.iter().find(|a| a.0 == key).map(|a| a.1);
    let (Some(phdr), Some(phnum)) = (get(stack::AT_PHDR), get(stack::AT_PHNUM)) else { return Ok(None) };
    let mut interp = None;
    let mut self_at = None;
    for i in 0..phnum.min(256) {
        let Ok(h) = user.read_array::<56>(phdr + i * 56) else { break };
        let word = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap_or_default());
        match u32::from_le_bytes(h[..4].try_into().unwrap_or_default()) {
            onering_rewrite::elf::PT_INTERP => interp = Some((word(16), word(32))),
            onering_rewrite::elf::PT_PHDR => self_at = Some(word(16)),
            _ => {}
        }
    }
    let Some((vaddr, len)) = interp else { return Ok(None) };
    let bias = self_at.map_or(0, |v| phdr.wrapping_sub(v));
    let path = user
        .read_vec(vaddr.wrapping_add(bias), len.min(4096) as usize)
        .map_err(|_| "its interpreter's name is unreadable")?;
    let path = &path[..path.iter().position(|b| *b == 0).unwrap_or(path.len())];
    let shown = onering_rewrite::bytes::printable(path, 256);
    let fail = |e: Errno| format!("cannot load its interpreter {shown}: {e:?}");
    let file = open_in(k, crate::vfs::ROOT, path, true).map_err(fail)?;
    let mut exe = Exe::open(file).map_err(fail)?;
    let prog = exe.parse().map_err(|e| format!("its interpreter {shown}: {e}"))?;
    if prog.interp.is_some() {
        return Err(format!("its interpreter {shown} has an interpreter itself"));
    }
    let loaded = load(k, &crate::mm::spaces::boot().mm, user, &exe, &prog, Place::Anywhere).map_err(fail)?;
    if let Some(slot) = aux.iter().find(|a| a.0 == stack::AT_BASE).map(|a| a.2) {
        user.write_u64(slot, loaded.start).map_err(fail)?;
    }
    Ok(Some(loaded.entry))
}

// ---------------------------------------------------------------------------
// Pure parts.

/// The span an image takes at bias 0: its segments, then `tramp` bytes of
/// trampolines at [`tramp_base`] (page-aligned; start, end).
fn image_span(prog: &Program, tramp: u64) -> Option<(u64, u64)> {
    let (lo, hi) = prog.span();
    let end = if tramp == 0 { hi } else { tramp_base(prog).checked_add(tramp)? };
    Some((align_down(lo, PAGE_SIZE), end.checked_add(PAGE_SIZE - 1)? & !(PAGE_SIZE - 1)))
}

/// Where an image's trampolines go at bias 0: on the page after its segments (the
/// rest of the last page is the program's: glibc's loader puts its first
/// allocations past `_end` up to the page's end).
fn tramp_base(prog: &Program) -> u64 {
    align_up(prog.span().1, PAGE_SIZE)
}

/// The `PROT_*` bits of ELF segment flags (`PF_X` 1, `PF_W` 2, `PF_R` 4).
fn prot_of(flags: u32) -> u32 {
    (if flags & 4 != 0 { PROT_READ } else { 0 })
        | (if flags & 2 != 0 { PROT_WRITE } else { 0 })
        | (if flags & PF_X != 0 { PROT_EXEC } else { 0 })
}

/// Bytes `0f 05` (`syscall`) and `0f a2` (`cpuid`) in the executable segments of
/// the file that is `pieces` (each [`PIECE`] bytes long but the last): an upper
/// bound on the sites.
fn site_bound(prog: &Program, pieces: &[Vec<u8>]) -> u64 {
    let mut n = 0;
    for s in prog.segments.iter().filter(|s| s.flags & PF_X != 0) {
        let (mut at, end, mut last) = (s.offset, s.offset.saturating_add(s.filesz), 0u8);
        while at < end {
            let Some(p) = pieces.get((at / PIECE) as usize) else { break };
            let from = (at % PIECE) as usize;
            let b = p.get(from..p.len().min(from.saturating_add((end - at) as usize))).unwrap_or(&[]);
            let Some(&tail) = b.last() else { break };
            let inside = b.windows(2).filter(|w| w[0] == 0x0f && matches!(w[1], 0x05 | 0xa2)).count() as u64;
            n += inside + u64::from(last == 0x0f && matches!(b[0], 0x05 | 0xa2));
            last = tail;
            at += b.len() as u64;
        }
    }
    n
}

// ---------------------------------------------------------------------------
// Plans.

/// A file as the plan cache knows it: device, inode, size, modification time.
type FileKey = (u64, u64, u64, u64);

/// Plans at bias 0, by file and trampoline offset (bias 0 too).
static PLANS: Mutex<BTreeMap<(FileKey, u64), Arc<WirePlan>>> = Mutex::new(BTreeMap::new());

/// Inserts into one of the per-VM caches, emptied when it holds [`MAX_PLANS`].
fn remember<K: Ord, V: Clone>(cache: &Mutex<BTreeMap<K, V>>, key: K, value: &V) {
    let mut c = cache.lock();
    if c.len() >= MAX_PLANS {
        c.clear();
    }
    c.insert(key, value.clone());
}

fn rewriting(k: &Kernel) -> bool {
    k.cfg.flags & onering_abi::flags::NO_REWRITE == 0
}

/// The plan for `exe` (parsed: `prog`) with trampolines at `tramp` (both at bias
/// 0): from the cache, else from the VMM (one exit). A host file the VM has not
/// changed the VMM reads itself (`fs::host::plan`: a 33 MiB `cc1` is then not
/// read into the VM at every `execve`); any other file it gets whole (`pieces`,
/// read now if not given). None: nothing to rewrite or no plan.
fn plan_for(k: &Kernel, exe: &Exe, prog: &Program, pieces: Option<&[Vec<u8>]>, tramp: u64) -> Option<Arc<WirePlan>> {
    if let Some(c) = cached_plan(exe.key, tramp) {
        return Some(c);
    }
    if exe.size > onering_abi::hostcall::MAX_REWRITE_FILE {
        return None;
    }
    let host = if pieces.is_none() { host_handle(k, exe) } else { None };
    let read;
    let pieces = match (pieces, host) {
        (Some(p), _) => p,
        (None, Some(_)) => &[][..],
        (None, None) => {
            read = exe.pieces().ok()?;
            &read
        }
    };
    let slices: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).collect();
    let mut out = core::mem::take(&mut *PLAN_OUT.lock());
    // (A site's patch and trampolines take about a hundred bytes; a host file's
    // sites are not counted here.)
    let sites = if host.is_some() { exe.size / 64 } else { site_bound(prog, pieces) * 256 };
    let mut cap = (64 * 1024 + sites).min(MAX_PLAN) as usize;
    let len = loop {
        if out.capacity() < cap && !onering_arch::heap::ensure_block(cap) {
            return None;
        }
        out.try_reserve_exact(cap.saturating_sub(out.len())).ok()?;
        out.resize(cap, 0);
        let (base, bias) = (tramp.wrapping_add(PLAN_BIAS), PLAN_BIAS);
        let r = match host {
            Some(h) => crate::fs::host::plan(h, base, bias, &mut out),
            None => onering_arch::hostcall::rewrite_plan(&slices, base, bias, &mut out),
        };
        match r {
            n if n >= 0 => break n as usize,
            n if n == -(Errno::ENOSPC as i64) && (cap as u64) < MAX_PLAN => {
                cap = (cap as u64 * 4).min(MAX_PLAN) as usize
            }
            _ => return None,
        }
    };
    let plan = WirePlan::decode(out.get(..len)?);
    keep(&PLAN_OUT, out);
    let mut plan = plan?;
    for p in &mut plan.patches {
        p.addr = p.addr.wrapping_sub(PLAN_BIAS);
    }
    let c = Arc::new(plan);
    remember(&PLANS, (exe.key, tramp), &c);
    Some(c)
}

/// An I/O handle on `exe`'s file if it is a host file the VM has not changed:
/// the VMM plans it from the file itself.
fn host_handle(k: &Kernel, exe: &Exe) -> Option<u64> {
    let ino = exe.file.obj().node()?;
    k.vfs.lock().unchanged_host_file(ino)
}

fn cached_plan(key: FileKey, tramp: u64) -> Option<Arc<WirePlan>> {
    PLANS.lock().get(&(key, tramp)).cloned()
}

/// What a library's mapping needs to know of its file, kept per file so that a
/// library mapped again (every process maps libc) is not read again.
struct Library {
    /// Page-aligned file offset and address (bias 0) of each executable segment.
    code: Vec<(u64, u64)>,
    /// Lowest address of the image (bias 0), and room for its trampolines.
    lo: u64,
    room: u64,
}

static LIBRARIES: Mutex<BTreeMap<FileKey, Arc<Library>>> = Mutex::new(BTreeMap::new());

/// The [`Library`] facts of `exe` (parsed: `prog`), and the whole file if it was
/// read for them. The room for its trampolines: for a host file the VM has not
/// changed, what the VMM's plan takes (planned at a first guess of the room, and
/// once more if it took more; the plan is then in the cache), else a bound from
/// the `syscall` bytes in its code, which reads the file.
fn library(k: &Kernel, exe: &Exe, prog: &Program) -> Option<(Arc<Library>, Option<Pieces>)> {
    let code = prog
        .segments
        .iter()
        .filter(|s| s.flags & PF_X != 0)
        .map(|s| (align_down(s.offset, PAGE_SIZE), align_down(s.vaddr, PAGE_SIZE)))
        .collect();
    let lo = align_down(prog.span().0, PAGE_SIZE);
    let (room, pieces) = if host_handle(k, exe).is_some() {
        // (The trampolines' length does not depend on where they go: a second
        // plan fits; a third is not asked for.)
        let mut room = align_up(exe.size / 32 + TRAMPOLINE_ROOM, PAGE_SIZE);
        let mut fits = None;
        for _ in 0..2 {
            let plan = plan_for(k, exe, prog, None, lo.wrapping_sub(room))?;
            let need = align_up(plan.trampolines.len() as u64, PAGE_SIZE);
            if plan.trampolines.is_empty() || need <= room {
                fits = Some(if plan.trampolines.is_empty() { 0 } else { room });
                break;
            }
            room = need;
        }
        (fits?, None)
    } else {
        let pieces = exe.pieces().ok()?;
        let sites = site_bound(prog, &pieces);
        (if sites == 0 { 0 } else { align_up(sites * TRAMPOLINE_ROOM + 64, PAGE_SIZE) }, Some(pieces))
    };
    let l = Arc::new(Library { code, lo, room });
    remember(&LIBRARIES, exe.key, &l);
    Some((l, pieces))
}

/// Writes `plan` over code loaded at `bias` (only patches inside `[lo, hi)`, the
/// executable mapping), trampolines at `bias + tramp`. Through the kernel's view
/// of memory: the code is not writable to the program.
fn apply(user: &dyn UserMem, plan: &WirePlan, bias: u64, tramp: u64, lo: u64, hi: u64) -> Result<(), Errno> {
    let mut r = Ok(());
    user.unprotected(&mut |u| {
        r = (|| {
            u.write(bias.wrapping_add(tramp), &plan.trampolines)?;
            for p in &plan.patches {
                let at = bias.wrapping_add(p.addr);
                if at >= lo && at.saturating_add(p.bytes.len() as u64) <= hi {
                    u.write(at, &p.bytes)?;
                }
            }
            Ok(())
        })();
    });
    r
}

// ---------------------------------------------------------------------------
// Files.

/// A program file opened for `execve` (or a library to rewrite): what identifies
/// it, its length, and its first bytes (the headers: [`Exe::parse`] reads more
/// when they lie further). The segments go from the file straight into the new
/// image ([`load`]); the whole file is read only when the VMM plans the rewriting
/// of a file it cannot read itself ([`Exe::pieces`]).
struct Exe {
    file: FileRef,
    key: FileKey,
    size: u64,
    head: Vec<u8>,
}

impl Exe {
    /// `file` with its first [`HEAD`] bytes.
    fn open(file: FileRef) -> Result<Exe, Errno> {
        let meta = file.obj().stat();
        let head = read_at(&file, 0, meta.size.min(HEAD))?;
        Ok(Exe { key: file_key(&meta), size: meta.size, head, file })
    }

    /// The file checked and parsed, its first bytes read further as the headers
    /// need (up to [`MAX_HEAD`]).
    fn parse(&mut self) -> Result<Program, onering_rewrite::elf::ElfError> {
        self.parse_with(Program::parse_head)
    }

    /// [`parse`](Self::parse) for mapping its code (`Program::parse_code`): no
    /// interpreter's name read from far into the file.
    fn parse_code(&mut self) -> Result<Program, onering_rewrite::elf::ElfError> {
        self.parse_with(Program::parse_code)
    }

    fn parse_with(
        &mut self,
        parse: fn(&[u8], u64) -> Result<Program, onering_rewrite::elf::ElfError>,
    ) -> Result<Program, onering_rewrite::elf::ElfError> {
        use onering_rewrite::elf::ElfError;
        loop {
            match parse(&self.head, self.size) {
                Err(ElfError::NeedHead(n)) if n <= MAX_HEAD && n > self.head.len() as u64 => {
                    self.head = read_at(&self.file, 0, n).map_err(|_| ElfError::Malformed("unreadable headers"))?;
                    if (self.head.len() as u64) < n {
                        return Err(ElfError::Malformed("the file shrank while it was read"));
                    }
                }
                Err(ElfError::NeedHead(_)) => return Err(ElfError::Malformed("headers too far into the file")),
                r => return r,
            }
        }
    }

    /// The whole file, in pieces of [`PIECE`] bytes (the last shorter): no block
    /// of kernel memory as large as the file is needed.
    fn pieces(&self) -> Result<Pieces, Errno> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < self.size {
            let p = read_at(&self.file, at, (self.size - at).min(PIECE))?;
            let n = p.len() as u64;
            out.push(p);
            if n < PIECE {
                break;
            }
            at += n;
        }
        Ok(out)
    }
}

/// The buffer the VMM writes plans into, kept for the next plan: on this
/// hypervisor the first touch of each fresh page of kernel memory costs 4-20 µs.
static PLAN_OUT: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Largest plan buffer.
const MAX_PLAN: u64 = 64 << 20;
/// Largest plan buffer kept for the next plan (a larger one goes back to the heap).
const MAX_KEPT: usize = 16 << 20;

/// Opens `path` (from `dirfd`) to run it: a regular file with an execute bit
/// (EACCES otherwise, as for a directory).
fn open_exe(ctx: &Ctx, dirfd: u64, path: &[u8], follow: bool) -> Result<FileRef, Errno> {
    let (start, _keep) = start_dir(ctx, dirfd, path)?;
    open_in(ctx.k, start, path, follow)
}

/// [`open_exe`] from directory `start`.
fn open_in(k: &'static Kernel, start: crate::vfs::Ino, path: &[u8], follow: bool) -> Result<FileRef, Errno> {
    let file = {
        let mut v = k.vfs.lock();
        let base = dir(&v, start)?;
        let ino = v.lookup(base, path, follow)?;
        if v.node(ino).is_dir() {
            return Err(Errno::EACCES);
        }
        crate::fs::open_node(k, &mut v, ino, oflag::O_RDONLY)
    };
    let meta = file.obj().stat();
    if meta.mode & mode::S_IFMT != mode::S_IFREG {
        return Err(Errno::EACCES);
    }
    if meta.mode & 0o111 == 0 {
        return Err(Errno::EACCES);
    }
    Ok(file)
}

/// Gives buffer `v` back to `slot` to be kept (if it is larger than the one kept,
/// and not larger than [`MAX_KEPT`]).
fn keep(slot: &Mutex<Vec<u8>>, v: Vec<u8>) {
    let mut s = slot.lock();
    if v.capacity() > s.capacity() && v.capacity() <= MAX_KEPT {
        *s = v;
    }
}

/// Up to `len` bytes of `file` from `offset` (fewer at its end), in kernel memory.
fn read_at(file: &FileRef, offset: u64, len: u64) -> Result<Vec<u8>, Errno> {
    const BASE: u64 = 0x1000;
    if !onering_arch::heap::ensure_block(len as usize) {
        return Err(Errno::ENOMEM);
    }
    let mut v = Vec::new();
    v.try_reserve_exact(len as usize).map_err(|_| Errno::ENOMEM)?;
    v.resize(len as usize, 0);
    let buf = BufferMem { base: BASE, mem: Mutex::new(v) };
    let done = read_to(file, &buf, BASE, offset, len)?;
    let mut bytes = buf.mem.into_inner();
    bytes.truncate(done as usize);
    Ok(bytes)
}

/// Reads up to `len` bytes of `file` from `offset` to `addr` in `mem` (fewer at
/// its end: what lies past it is left as it was); how many.
fn read_to(file: &FileRef, mem: &dyn UserMem, addr: u64, offset: u64, len: u64) -> Result<u64, Errno> {
    let mut done = 0;
    while done < len {
        let n = blocking(file, || file.read(mem, addr + done, len - done, Some(offset + done)))?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

fn file_key(meta: &crate::file::Meta) -> FileKey {
    (meta.dev.unwrap_or(0), meta.ino, meta.size, meta.mtime)
}

// ---------------------------------------------------------------------------
// Loading.

/// Where an image goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// At its link addresses (ET_EXEC).
    Fixed,
    /// Its lowest address at `PIE_BASE` (a position-independent program).
    Pie,
    /// Wherever `mmap` finds room (the interpreter).
    Anywhere,
}

/// An image in memory.
#[derive(Clone, Copy, Debug, Default)]
struct Loaded {
    entry: u64,
    phdr: u64,
    phnum: u64,
    /// Page-aligned end, trampolines included.
    end: u64,
    start: u64,
}

/// Loads `exe` into the current address space: a fresh anonymous mapping, its
/// segments mapped from the file over it or read into it, rewritten, then each
/// given its protection.
fn load(k: &Kernel, mm: &Mm, user: &dyn UserMem, exe: &Exe, prog: &Program, place: Place) -> Result<Loaded, Errno> {
    let plan = if rewriting(k) { plan_for(k, exe, prog, None, tramp_base(prog)) } else { None };
    let tramp_len = plan.as_ref().map_or(0, |c| c.trampolines.len() as u64);
    let (lo, hi) = image_span(prog, tramp_len).ok_or(Errno::ENOEXEC)?;
    let len = hi - lo;
    let rw = PROT_READ | PROT_WRITE;
    let private = map_flags::PRIVATE | map_flags::ANONYMOUS;
    let start = {
        let space = &mut *mm.lock();
        match place {
            Place::Fixed => space.mmap_anon(lo, len, rw, private | map_flags::FIXED)?,
            Place::Pie => space.mmap_anon(PIE_BASE + (lo % HUGE_PAGE_SIZE), len, rw, private | map_flags::FIXED)?,
            Place::Anywhere => space.mmap_anon(0, len, rw, private)?,
        }
    };
    let bias = start.wrapping_sub(lo);
    if start.checked_add(len).is_none_or(|e| e > USER_END) || prog.entry.wrapping_add(bias) >= USER_END {
        return Err(Errno::ENOEXEC);
    }
    // A large image's segments mapped from the file (filled as they are first
    // touched, as Linux maps them: a large program's code is not read at every
    // exec), unless two segments share a page; a small one (backed at once by
    // its anonymous mapping anyway) read in.
    let shared_page =
        prog.segments.windows(2).any(|w| align_up(w[0].end(), PAGE_SIZE) > align_down(w[1].vaddr, PAGE_SIZE));
    let mapped = len >= crate::mm::space::LAZY_MIN && !shared_page;
    for s in &prog.segments {
        if !mapped || !map_from_file(mm, user, exe, s, bias)? {
            read_to(&exe.file, user, s.vaddr.wrapping_add(bias), s.offset, s.filesz)?;
        }
    }
    if let Some(c) = &plan {
        apply(user, c, bias, tramp_base(prog), start, start + len)?;
    }
    // Protections: the whole span inaccessible, then each segment's (a page two
    // segments share gets both), the trampolines readable and executable.
    let mut prots: Vec<(u64, u64, u32)> = Vec::new();
    for s in &prog.segments {
        let a = align_down(s.vaddr.wrapping_add(bias), PAGE_SIZE);
        let b = align_up(s.end().wrapping_add(bias), PAGE_SIZE);
        prots.push((a, b, prot_of(s.flags)));
    }
    if tramp_len > 0 {
        let t = align_down(tramp_base(prog).wrapping_add(bias), PAGE_SIZE);
        prots.push((t, start + len, PROT_READ | PROT_EXEC));
    }
    {
        let space = &mut *mm.lock();
        space.mprotect(start, len, 0)?;
        for (i, &(a, b, p)) in prots.iter().enumerate() {
            let shared: u32 = prots.iter().take(i).filter(|o| o.0 < b && a < o.1).fold(0, |m, o| m | o.2);
            space.mprotect(a, b - a, p | shared)?;
        }
    }
    let phdr = prog.phdr_addr().map_or(0, |a| a.wrapping_add(bias));
    Ok(Loaded { entry: prog.entry.wrapping_add(bias), phdr, phnum: prog.phnum, end: start + len, start })
}

/// Maps the part of segment `s` (at `bias`) that lies in `exe`'s file, privately,
/// from the file over the image's anonymous mapping (what lies in blocks backed
/// already is filled now, the rest when first touched); the rest of its last
/// page past the file part is zeroed when the segment goes on (its `.bss`).
/// False (nothing done) when the segment's address and offset disagree within a
/// page: it is read in instead.
fn map_from_file(
    mm: &Mm,
    user: &dyn UserMem,
    exe: &Exe,
    s: &onering_rewrite::elf::Segment,
    bias: u64,
) -> Result<bool, Errno> {
    use crate::mm::filemap::{FileMap, MappedFile};
    let at = s.vaddr.wrapping_add(bias);
    if s.filesz == 0 {
        return Ok(true);
    }
    if at % PAGE_SIZE != s.offset % PAGE_SIZE {
        return Ok(false);
    }
    let (lo, offset) = (align_down(at, PAGE_SIZE), align_down(s.offset, PAGE_SIZE));
    let file_end = at.checked_add(s.filesz).ok_or(Errno::ENOEXEC)?;
    let hi = align_up(file_end, PAGE_SIZE);
    let file: Arc<dyn MappedFile> = exe.file.clone();
    let flags = map_flags::PRIVATE | map_flags::FIXED;
    let (start, map) = super::mm::with_mm(mm, |space| {
        space.mmap_file(lo, hi - lo, PROT_READ | PROT_WRITE, flags, |x| FileMap::new(file, x, offset, false, true))
    })?;
    super::mm::fill_backed(mm, user, &[(map, start, hi)])?;
    // (To the page's end, as Linux: glibc's loader takes its first allocations
    // from past its `_end`, and counts on zeros there.)
    if s.memsz > s.filesz && hi > file_end {
        user.write(file_end, &alloc::vec![0u8; (hi - file_end) as usize])?;
    }
    Ok(true)
}

/// Maps a copy of the boot vDSO (clock page below it): AT_SYSINFO_EHDR, or 0.
fn map_vdso(mm: &Mm, user: &dyn UserMem) -> Result<u64, Errno> {
    let Some(b) = BOOT.get().filter(|b| !b.vdso.is_empty()) else { return Ok(0) };
    let below = onering_abi::vvar::BELOW_VDSO;
    let len = align_up(b.vdso.len() as u64, PAGE_SIZE);
    let flags = map_flags::PRIVATE | map_flags::ANONYMOUS;
    let at = mm.lock().mmap_anon(0, len, PROT_READ | PROT_WRITE, flags)?;
    user.write(at, &b.vdso)?;
    let space = &mut *mm.lock();
    space.mprotect(at, below, PROT_READ)?;
    space.mprotect(at + below, len - below, PROT_READ | PROT_EXEC)?;
    Ok(at + below)
}

/// What the new program starts with.
struct Start {
    regs: Regs,
    image: ExecImage,
    brk: u64,
}

/// Builds the new program in the (emptied) address space: the program, its
/// interpreter, the vDSO, the stack.
fn build(
    ctx: &Ctx,
    mm: &Mm,
    user: &dyn UserMem,
    exe: &Exe,
    prog: &Program,
    interp: Option<(&Exe, &Program)>,
    args: &Args,
) -> Result<Start, Errno> {
    let place = if prog.pie { Place::Pie } else { Place::Fixed };
    let main = load(ctx.k, mm, user, exe, prog, place)?;
    let base = match interp {
        Some((e, p)) => Some(load(ctx.k, mm, user, e, p, Place::Anywhere)?),
        None => None,
    };
    let vdso = map_vdso(mm, user)?;
    let stack_prot = PROT_READ | PROT_WRITE | if prog.exec_stack { PROT_EXEC } else { 0 };
    mm.lock().map_stack(STACK_TOP - STACK_SIZE, STACK_TOP, stack_prot)?;
    let (uid, gid) = (ctx.k.cfg.uid, ctx.k.cfg.gid);
    let mut auxv = alloc::vec![
        (stack::AT_PHDR, main.phdr),
        (stack::AT_PHENT, 56),
        (stack::AT_PHNUM, main.phnum),
        (stack::AT_PAGESZ, PAGE_SIZE),
        (stack::AT_BASE, base.map_or(0, |b| b.start)),
        (stack::AT_FLAGS, 0),
        (stack::AT_ENTRY, main.entry),
        (stack::AT_UID, uid),
        (stack::AT_EUID, uid),
        (stack::AT_GID, gid),
        (stack::AT_EGID, gid),
        (stack::AT_HWCAP, BOOT.get().map_or(0, |b| b.hwcap)),
        (stack::AT_HWCAP2, 0),
        (stack::AT_CLKTCK, 100),
        (stack::AT_SECURE, 0),
    ];
    if vdso != 0 {
        auxv.push((stack::AT_SYSINFO_EHDR, vdso));
    }
    let mut random = [0u8; 16];
    ctx.k.rng.lock().fill(&mut random);
    let spec = StackSpec { argv: &args.argv, envp: &args.envp, execfn: &args.execfn, random, auxv: &auxv };
    let st = stack::build(STACK_TOP, &spec).map_err(|_| Errno::E2BIG)?;
    user.write(st.sp, &st.bytes)?;
    let entry = base.map_or(main.entry, |b| b.entry);
    let regs = Regs { rip: entry, rsp: st.sp, rflags: 0x202, ..Regs::default() };
    let image = ExecImage {
        exe: args.exe.clone(),
        cmdline: nul_joined(&args.argv),
        environ: nul_joined(&args.envp),
        span: (main.start, main.end),
        vdso,
    };
    Ok(Start { regs, image, brk: main.end })
}

fn nul_joined(list: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in list {
        out.extend_from_slice(s);
        out.push(0);
    }
    out
}

// ---------------------------------------------------------------------------
// The system calls.

/// The new program's arguments, environment and names.
struct Args {
    argv: Vec<Vec<u8>>,
    envp: Vec<Vec<u8>>,
    /// AT_EXECFN: the path as given.
    execfn: Vec<u8>,
    /// /proc/PID/exe: the program file's absolute path.
    exe: Vec<u8>,
}

/// A NULL-ended array of string pointers at `addr` (NULL: none), within Linux's
/// limit on arguments and environment together (`used` so far).
fn strings(user: &dyn UserMem, addr: u64, used: &mut usize) -> Result<Vec<Vec<u8>>, Errno> {
    let mut out = Vec::new();
    if addr == 0 {
        return Ok(out);
    }
    for i in 0.. {
        let p = user.read_u64(addr.checked_add(i * 8).ok_or(Errno::EFAULT)?)?;
        if p == 0 {
            break;
        }
        let s =
            user.read_cstr(p, stack::MAX_ARG_BYTES)
                .map_err(|e| if e == Errno::ENAMETOOLONG { Errno::E2BIG } else { e })?;
        *used += s.len() + 1 + 8;
        if *used > stack::MAX_ARG_BYTES {
            return Err(Errno::E2BIG);
        }
        out.push(s);
    }
    Ok(out)
}

pub fn execve(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [path, argv, envp, ..] = f.args();
    exec_at(ctx, super::fs::AT_FDCWD, path, argv, envp, 0)
}

const AT_EMPTY_PATH: u64 = 0x1000;
const AT_SYMLINK_NOFOLLOW: u64 = 0x100;

pub fn execveat(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [dirfd, path, argv, envp, flags, ..] = f.args();
    if flags & !(AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0 {
        return Err(Errno::EINVAL);
    }
    exec_at(ctx, dirfd, path, argv, envp, flags)
}

fn exec_at(ctx: &Ctx, dirfd: u64, path_addr: u64, argv: u64, envp: u64, flags: u64) -> SysResult {
    let path = match path_arg(ctx, path_addr) {
        Err(Errno::ENOENT) if flags & AT_EMPTY_PATH != 0 => Vec::new(),
        r => r?,
    };
    let mut used = 0;
    let argv = strings(ctx.user, argv, &mut used)?;
    let envp = strings(ctx.user, envp, &mut used)?;
    exec_with(ctx, dirfd, path, argv, envp, flags, &|| {})
}

/// A process the host started (`onering_abi::exec`) loads its program: `path`
/// (a bare name is looked for in the `PATH` of `envp`, else docker's default,
/// as `runc exec` does) with `argv` and `envp`; `committed` is called at the
/// point of no return. Returns only on failure, before that point.
pub fn exec_for_host(ctx: &Ctx, path: &[u8], argv: Vec<Vec<u8>>, envp: Vec<Vec<u8>>, committed: &dyn Fn()) -> Errno {
    let used = argv.iter().chain(&envp).map(|s| s.len() + 9).sum::<usize>();
    if used > stack::MAX_ARG_BYTES || path.is_empty() {
        return if path.is_empty() { Errno::ENOENT } else { Errno::E2BIG };
    }
    if path.contains(&b'/') {
        return exec_with(ctx, super::fs::AT_FDCWD, path.to_vec(), argv, envp, 0, committed)
            .err()
            .unwrap_or(Errno::ENOEXEC);
    }
    let search = envp.iter().find_map(|e| e.strip_prefix(b"PATH=")).unwrap_or(onering_abi::DEFAULT_PATH).to_vec();
    let mut why = Errno::ENOENT;
    for dir in search.split(|b| *b == b':').filter(|d| !d.is_empty()) {
        let mut full = dir.to_vec();
        full.push(b'/');
        full.extend_from_slice(path);
        match exec_with(ctx, super::fs::AT_FDCWD, full, argv.clone(), envp.clone(), 0, committed) {
            Err(Errno::ENOENT | Errno::ENOTDIR) => {}
            Err(e) => why = e,
            Ok(_) => return Errno::ENOEXEC,
        }
    }
    why
}

/// `execve` of `path` (relative to `dirfd`) with arguments and environment read;
/// `committed` is called at the point of no return.
fn exec_with(
    ctx: &Ctx,
    dirfd: u64,
    path: Vec<u8>,
    argv: Vec<Vec<u8>>,
    envp: Vec<Vec<u8>>,
    flags: u64,
    committed: &dyn Fn(),
) -> SysResult {
    let mut args = Args { argv, envp, execfn: path.clone(), exe: Vec::new() };
    // The file, following `#!` interpreters.
    let mut name = path;
    let mut file =
        if name.is_empty() { ctx.file(dirfd)? } else { open_exe(ctx, dirfd, &name, flags & AT_SYMLINK_NOFOLLOW == 0)? };
    let mut depth = 0;
    let mut exe = loop {
        let e = Exe::open(file)?;
        let Some(line) = shebang(&e.head[..e.head.len().min(SHEBANG_MAX)]) else { break e };
        let (interp, arg) = line.map_err(|_| Errno::ENOEXEC)?;
        depth += 1;
        if depth > MAX_SCRIPT_DEPTH {
            return Err(Errno::ELOOP);
        }
        // argv[0] gives way to: the interpreter, its argument, the script's path.
        let mut new = alloc::vec![interp.clone()];
        new.extend(arg);
        new.push(name.clone());
        new.extend(args.argv.iter().skip(1).cloned());
        args.argv = new;
        file = open_exe(ctx, super::fs::AT_FDCWD, &interp, true)?;
        name = interp;
    };
    args.exe = absolute(ctx, &name);
    let prog = exe.parse().map_err(|_| Errno::ENOEXEC)?;
    let interp = match &prog.interp {
        Some(p) => {
            let f = open_exe(ctx, super::fs::AT_FDCWD, p, true).map_err(|e| {
                if e == Errno::EACCES {
                    e
                } else {
                    Errno::ENOENT
                }
            })?;
            let mut e = Exe::open(f)?;
            let ip = e.parse().map_err(|_| Errno::ELIBBAD)?;
            if ip.interp.is_some() {
                return Err(Errno::ELIBBAD);
            }
            Some((e, ip))
        }
        None => None,
    };
    // The point of no return.
    committed();
    let regs = replace_image(ctx, &exe, &prog, interp.as_ref().map(|(e, p)| (e, p)), &args);
    drop((exe, prog, interp, args));
    crate::observe::exec_done(ctx.thread.tid());
    finish(regs)
}

/// The absolute form of `path` from the working directory (for /proc/PID/exe).
fn absolute(ctx: &Ctx, path: &[u8]) -> Vec<u8> {
    let cwd = ctx.proc().fs.lock().cwd;
    let base = ctx.k.vfs.lock().path_of(cwd).unwrap_or_else(|_| b"/".to_vec());
    crate::vfs::absolute(&base, path)
}

/// Replaces the calling process's program: its other threads end, its memory goes,
/// the new image is built; descriptors marked close-on-exec close, caught signals
/// go back to their default action, the FPU state to its initial state (resource
/// limits, kept by the process, stay). The registers the new program starts with.
fn replace_image(ctx: &Ctx, exe: &Exe, prog: &Program, interp: Option<(&Exe, &Program)>, args: &Args) -> Regs {
    let me = ctx.thread;
    let p = ctx.proc();
    let others: Vec<_> = sched::threads_of(p.pid()).into_iter().filter(|t| !core::ptr::eq(*t, me)).collect();
    for t in &others {
        sched::kill_thread(t);
    }
    while sched::threads_of(p.pid()).len() > 1 {
        sched::yield_now();
    }
    p.threads.store(1, Relaxed);
    // A fresh address space; the old one goes (unless a vfork parent shares it).
    // Past this point a failure ends the process: SIGSEGV as on Linux, or, when
    // memory ran out, SIGKILL with the out-of-memory message (Linux's OOM killer).
    let kill = |e: Errno| -> ! {
        let signal = if e == Errno::ENOMEM {
            ctx.k.report_oom();
            crate::sigframe::sig::SIGKILL
        } else {
            crate::sigframe::sig::SIGSEGV
        };
        crate::task::signal::terminate(ctx.k, me, signal, 0, 0)
    };
    // Page tables last used by this program file first (it maps the same blocks
    // again): its identity, top bit set (a fork's keys are root addresses).
    let (dev, ino, ..) = exe.key;
    let key = (ino ^ dev.rotate_left(32)) | 1 << 63;
    let space = crate::mm::spaces::fresh(&ctx.k.chunks, key).unwrap_or_else(|e| kill(e));
    // Loaded before it is settled: what the image maps where an earlier space
    // left the same entry is not stored again (each store into a table the
    // hypervisor shadows traps), and the rest is cleared right after, before the
    // program, or the exit of a failed build, touches anything else.
    p.replace_space(space);
    let user = space.user();
    let built = build(ctx, &space.mm, &user, exe, prog, interp, args);
    let start = {
        let mut mm = space.mm.lock();
        mm.mmu().settle();
        built.inspect(|s| mm.set_brk_start(s.brk))
    }
    .unwrap_or_else(|e| kill(e));
    let closing = p.fds.lock().take_cloexec();
    drop(closing);
    for a in p.actions.lock().iter_mut() {
        if a[0] != SIG_IGN {
            *a = [SIG_DFL, 0, 0, 0];
        }
    }
    *me.altstack.lock() = (0, crate::sigframe::SS_DISABLE, 0);
    me.robust_list.store(0, Relaxed);
    onering_arch::cpu::set_fs_base(0);
    // The new program does not see the old one's x87/SSE/AVX registers or modes.
    me.task.reset_fpu();
    let mut comm = [0u8; 16];
    let base = args.exe.rsplit(|b| *b == b'/').next().unwrap_or(&[]);
    let n = base.len().min(15);
    comm[..n].copy_from_slice(&base[..n]);
    *ctx.k.comm.lock() = comm;
    *p.image.lock() = Some(Arc::new(start.image));
    sched::release_vfork_parent(me);
    start.regs
}

#[cfg(target_os = "none")]
fn finish(regs: Regs) -> ! {
    onering_arch::entry::full_return(&regs)
}

#[cfg(not(target_os = "none"))]
fn finish(regs: Regs) -> SysResult {
    panic!("no return to a program on the host: {regs:?}")
}

// ---------------------------------------------------------------------------
// Libraries.

/// A file mapping was just made executable at `[start, start + len)`, mapping
/// `file` from `offset`: if it is the code segment of an ELF file, rewrite it,
/// trampolines in a mapping of their own just below the file's image. Best effort:
/// whatever fails leaves the code trapping.
pub fn rewrite_mapping(ctx: &Ctx, file: &FileRef, start: u64, len: u64, offset: u64) {
    if !rewriting(ctx.k) {
        return;
    }
    let meta = file.obj().stat();
    if meta.size > onering_abi::hostcall::MAX_REWRITE_FILE || meta.size < 64 {
        return;
    }
    // Read the file only the first time it is mapped in this VM.
    let key = file_key(&meta);
    let open = || -> Option<(Exe, Program)> {
        let mut e = Exe::open(file.clone()).ok()?;
        let prog = e.parse_code().ok()?;
        Some((e, prog))
    };
    let known = LIBRARIES.lock().get(&key).cloned();
    let mut read = None;
    let lib = match known {
        Some(l) => l,
        None => {
            let Some((e, prog)) = open() else { return };
            let Some((l, pieces)) = library(ctx.k, &e, &prog) else { return };
            read = Some((e, prog, pieces));
            l
        }
    };
    // The executable segment this mapping holds, and so the load bias.
    let Some(&(_, vaddr)) = lib.code.iter().find(|c| c.0 == offset) else {
        return;
    };
    if lib.room == 0 {
        return;
    }
    let bias = start.wrapping_sub(vaddr);
    // Just below the image (bias-relative, so the plan is the same each time).
    let tramp = lib.lo.wrapping_sub(lib.room);
    let at = bias.wrapping_add(tramp);
    let flags = map_flags::PRIVATE | map_flags::ANONYMOUS | map_flags::FIXED_NOREPLACE;
    if ctx.mm().lock().mmap_anon(at, lib.room, PROT_READ | PROT_WRITE, flags) != Ok(at) {
        return;
    }
    let plan = cached_plan(key, tramp).or_else(|| {
        let (e, prog, pieces) = read.take().or_else(|| open().map(|(e, p)| (e, p, None)))?;
        plan_for(ctx.k, &e, &prog, pieces.as_deref(), tramp)
    });
    let ok = plan.as_ref().is_some_and(|c| {
        c.trampolines.len() as u64 <= lib.room && apply(ctx.user, c, bias, tramp, start, start + len).is_ok()
    });
    let space = &mut *ctx.mm().lock();
    if ok {
        let _ = space.mprotect(at, lib.room, PROT_READ | PROT_EXEC);
    } else {
        let _ = space.munmap(at, lib.room);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_flags_become_protections() {
        assert_eq!(prot_of(5), PROT_READ | PROT_EXEC);
        assert_eq!(prot_of(6), PROT_READ | PROT_WRITE);
        assert_eq!(prot_of(4), PROT_READ);
        assert_eq!(prot_of(0), 0);
    }

    /// Sites are counted in a file held in pieces as in the file itself, pairs
    /// across a piece's end included, only in executable segments.
    #[test]
    fn sites_are_counted_across_pieces() {
        use onering_rewrite::elf::Segment;
        let len = 3 * PIECE as usize + 1000;
        let mut file = alloc::vec![0x90u8; len];
        let mut x: u64 = 88172645463325252;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x as usize) % (len - 1);
            file[at..at + 2].copy_from_slice(&[0x0f, 0x05]);
        }
        for edge in 1..4 {
            let at = edge * PIECE as usize - 1;
            file[at..at + 2].copy_from_slice(&[0x0f, 0x05]);
        }
        let seg =
            |offset: u64, filesz: u64, flags: u32| Segment { vaddr: offset, offset, filesz, memsz: filesz, flags };
        let segments = alloc::vec![seg(0, 100, 4), seg(100, PIECE * 2, 5), seg(PIECE * 2 + 100, len as u64, 5)];
        let prog = Program {
            pie: false,
            entry: 0,
            phoff: 0,
            phnum: 0,
            phdr_vaddr: None,
            eh_frame_hdr: None,
            segments: segments.clone(),
            interp: None,
            exec_stack: false,
        };
        let pieces: Vec<Vec<u8>> = file.chunks(PIECE as usize).map(|c| c.to_vec()).collect();
        let whole = |s: &Segment| {
            let end = ((s.offset + s.filesz) as usize).min(len);
            file[s.offset as usize..end].windows(2).filter(|w| *w == [0x0f, 0x05]).count() as u64
        };
        let expected: u64 = segments.iter().filter(|s| s.flags & PF_X != 0).map(whole).sum();
        assert!(expected > 1000);
        assert_eq!(site_bound(&prog, &pieces), expected);
    }
}
