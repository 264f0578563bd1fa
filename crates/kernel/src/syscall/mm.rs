//! Memory system calls: the program break, anonymous and file mappings, and the
//! calls that only ask about memory or pin it (`mincore`, `mlock`: memory is never
//! swapped, so these check the range and succeed). The policy lives in `mm::space`
//! and `mm::filemap`; these unpack arguments, check files, and do the file I/O a
//! mapping needs (filling what lies in blocks backed already or asked for with
//! MAP_POPULATE: the rest is filled on first touch; writing a shared one back
//! before `munmap`, `msync`, MAP_FIXED or a shrinking `mremap` drops its pages)
//! without the memory lock held, since that I/O copies user memory.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::file::{mode, oflag, FileRef};
use crate::mm::filemap::{self, FileMap, MappedFile};
use crate::mm::space::map_flags;
use crate::mm::UserSpace;
use crate::task::Ctx;
use alloc::sync::Arc;
use onering_abi::layout::{align_up, HUGE_PAGE_SIZE, PAGE_SIZE, USER_END};

pub fn brk(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let space = &mut *ctx.mm().lock();
    Ok(space.brk(f.rdi))
}

/// Runs `f` on the address space under the memory lock; the file mapping records
/// it let go of are dropped after the lock (closing a file may take other locks).
fn with_space<R>(ctx: &Ctx, f: impl FnOnce(&mut UserSpace) -> R) -> R {
    with_mm(ctx.mm(), f)
}

/// [`with_space`] on the address space under lock `mm`.
pub(super) fn with_mm<R>(mm: &onering_arch::sync::Mutex<UserSpace>, f: impl FnOnce(&mut UserSpace) -> R) -> R {
    let (r, orphans) = {
        let space = &mut *mm.lock();
        (f(space), space.take_orphans())
    };
    drop(orphans);
    r
}

/// Writes back what shared file mappings hold in `[start, end)` (page-rounded).
fn write_back(ctx: &Ctx, start: u64, end: u64) -> Result<(), Errno> {
    let end = end.checked_add(PAGE_SIZE - 1).map_or(USER_END, |e| e & !(PAGE_SIZE - 1));
    let pieces = ctx.mm().lock().shared_in(start, end);
    let r = filemap::each(ctx.user, &pieces, filemap::write_back);
    // (Written back means on the host: the writes waiting go now.)
    crate::fs::host::flush_writes();
    r
}

/// /dev/zero: mapping it is mapping anonymous memory.
const DEV_ZERO: (u32, u32) = (1, 5);
/// Files may not extend past this offset (Linux's MAX_LFS_FILESIZE).
const MAX_FILE_SIZE: u64 = i64::MAX as u64;

pub fn mmap(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, prot, flags, fd, offset] = f.args();
    let (prot, flags) = (prot as u32, flags as u32);
    if offset % PAGE_SIZE != 0 {
        return Err(Errno::EINVAL);
    }
    if flags & map_flags::ANONYMOUS == 0 {
        return mmap_file(ctx, addr, len, prot, flags, ctx.file(fd)?, offset);
    }
    if offset.checked_add(len).is_none() {
        return Err(Errno::EOVERFLOW);
    }
    replace(ctx, addr, len, flags);
    with_space(ctx, |s| s.mmap_anon(addr, len, prot, flags))
}

/// MAP_FIXED replaces what is at `[addr, addr + len)`: shared file mappings there
/// are written back first.
fn replace(ctx: &Ctx, addr: u64, len: u64, flags: u32) {
    if flags & map_flags::FIXED != 0 && addr.is_multiple_of(PAGE_SIZE) && len != 0 {
        let _ = write_back(ctx, addr, addr.saturating_add(len));
    }
}

/// Fills the parts of `pieces` in blocks backed already (by other mappings there):
/// the rest is filled when first touched (`AddressSpace::check_for`).
pub(super) fn fill_backed(
    mm: &onering_arch::sync::Mutex<UserSpace>,
    user: &dyn crate::mm::user::UserMem,
    pieces: &[filemap::FilePiece],
) -> Result<(), Errno> {
    let backed = mm.lock().backed_pieces(pieces.to_vec());
    filemap::each(user, &backed, filemap::fill)
}

/// Fills the blocks of `pieces` now, up to the end of their files (MAP_POPULATE,
/// code, and fork's shared mappings).
pub fn populate(ctx: &Ctx, pieces: &[filemap::FilePiece]) -> Result<(), Errno> {
    let mut r = Ok(());
    ctx.user.unprotected(&mut |u| {
        for (m, s, e) in pieces {
            let in_file = align_up(m.file.size().saturating_sub(m.offset_of(*s)), PAGE_SIZE);
            r = r.and(u.check(*s, in_file.min(e - s), false));
        }
    });
    r
}

/// `mmap` of open file `file`, in Linux's order of checks: a mapping of memory
/// filled from the file as it is touched (see `mm::filemap`).
fn mmap_file(ctx: &Ctx, addr: u64, len: u64, prot: u32, flags: u32, file: FileRef, offset: u64) -> SysResult {
    use map_flags::*;
    if file.flags() & oflag::O_PATH != 0 {
        return Err(Errno::EBADF);
    }
    if len == 0 {
        return Err(Errno::EINVAL);
    }
    let meta = file.obj().stat();
    let kind = meta.mode & mode::S_IFMT;
    let pages = len.checked_add(PAGE_SIZE - 1).ok_or(Errno::ENOMEM)? & !(PAGE_SIZE - 1);
    if kind == mode::S_IFREG && offset.checked_add(pages).is_none_or(|e| e > MAX_FILE_SIZE) {
        return Err(Errno::EOVERFLOW);
    }
    let shared = match flags & TYPE {
        SHARED | SHARED_VALIDATE => true,
        PRIVATE => false,
        _ => return Err(Errno::EINVAL),
    };
    if shared && prot & crate::mm::vma::PROT_WRITE != 0 && !file.writable() || !file.readable() {
        return Err(Errno::EACCES);
    }
    if kind == mode::S_IFCHR && meta.rdev == DEV_ZERO {
        return with_space(ctx, |s| s.mmap_anon(addr, len, prot, flags | ANONYMOUS));
    }
    if kind != mode::S_IFREG {
        return Err(Errno::ENODEV);
    }
    replace(ctx, addr, len, flags);
    let may_write = !shared || file.writable();
    let code = (prot & crate::mm::vma::PROT_EXEC != 0 && !shared).then(|| file.clone());
    let as_mapped: Arc<dyn MappedFile> = file;
    let (start, map) = with_space(ctx, |s| {
        s.mmap_file(addr, len, prot, flags, |at| FileMap::new(as_mapped, at, offset, shared, may_write))
    })?;
    let whole = [(map, start, start + pages)];
    if let Err(e) = fill_backed(ctx.mm(), ctx.user, &whole) {
        let _ = with_space(ctx, |s| s.munmap(start, pages));
        return Err(e);
    }
    if flags & POPULATE != 0 || code.is_some() {
        // (As on Linux, what cannot be filled now is filled when touched.)
        let _ = populate(ctx, &whole);
    }
    if let Some(file) = code {
        // Code the dynamic loader (or dlopen) maps: its system calls rewritten.
        super::exec::rewrite_mapping(ctx, &file, start, pages, offset);
    }
    Ok(start)
}

pub fn munmap(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let (addr, len) = (f.rdi, f.rsi);
    if addr.is_multiple_of(PAGE_SIZE) && len != 0 {
        // Linux reports no write-back errors here.
        let _ = write_back(ctx, addr, addr.saturating_add(len));
    }
    with_space(ctx, |s| s.munmap(addr, len)).map(|_| 0)
}

pub fn mprotect(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, prot, ..] = f.args();
    with_space(ctx, |s| s.mprotect(addr, len, prot as u32)).map(|_| 0)
}

const MREMAP_MAYMOVE: u64 = 1;
const MREMAP_FIXED: u64 = 2;

pub fn mremap(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [old, old_len, new_len, flags, ..] = f.args();
    if flags & !(MREMAP_MAYMOVE | MREMAP_FIXED) != 0 || flags & MREMAP_FIXED != 0 {
        // MREMAP_FIXED is rarely used; refuse it plainly.
        return Err(Errno::EINVAL);
    }
    let (old_pages, new_pages) =
        (align_up(old_len.min(USER_END), PAGE_SIZE), align_up(new_len.min(USER_END), PAGE_SIZE));
    if new_pages < old_pages && old.is_multiple_of(PAGE_SIZE) && new_len != 0 {
        let _ = write_back(ctx, old + new_pages, old.saturating_add(old_pages));
    }
    if flags & MREMAP_MAYMOVE != 0
        && new_pages > old_pages
        && !(old.is_multiple_of(HUGE_PAGE_SIZE) && new_pages >= HUGE_PAGE_SIZE)
    {
        // A mapping that moves copies only its filled blocks, and where the new
        // place is not at the same distance from a block's start, a block it
        // copies to also takes part of one not filled: file mappings are filled
        // first (it is that small or misplaced).
        let pieces = ctx.mm().lock().file_pieces(old, old.saturating_add(old_pages), false);
        let _ = populate(ctx, &pieces);
    }
    let at = with_space(ctx, |s| s.mremap(old, old_len, new_len, flags & MREMAP_MAYMOVE != 0))?;
    // A file mapping that grew maps more of the file.
    if new_pages > old_pages {
        let map = ctx.mm().lock().file_at(at); // not held while filling
        if let Some(map) = map {
            fill_backed(ctx.mm(), ctx.user, &[(map, at + old_pages, at + new_pages)])?;
        }
    }
    Ok(at)
}

const MADV_DONTNEED: u64 = 4;
const MADV_REMOVE: u64 = 9;

pub fn madvise(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, advice, ..] = f.args();
    if !addr.is_multiple_of(onering_abi::layout::PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    if let MADV_DONTNEED | MADV_REMOVE = advice {
        // Anonymous memory reads as zeros after these; private file mappings read
        // the file again.
        let refill = with_space(ctx, |s| s.discard(addr, len))?;
        return filemap::each(ctx.user, &refill, filemap::fill).map(|_| 0);
    }
    let space = &mut *ctx.mm().lock();
    match advice {
        // NORMAL, RANDOM, SEQUENTIAL, WILLNEED, FREE, MERGEABLE, UNMERGEABLE,
        // HUGEPAGE, NOHUGEPAGE, DONTDUMP, DODUMP, COLD, PAGEOUT, POPULATE_*, COLLAPSE:
        // hints; memory is already there, in 2 MiB pages.
        0..=3 | 8 | 10..=25 => {
            // Hints, but the range must be mapped, as on Linux.
            // As Linux: the page-rounded end must not wrap; past the user half
            // nothing is mapped.
            let end = addr
                .checked_add(len)
                .and_then(|e| e.checked_add(onering_abi::layout::PAGE_SIZE - 1))
                .map(|e| e & !(onering_abi::layout::PAGE_SIZE - 1))
                .ok_or(Errno::EINVAL)?;
            if len != 0 && !space.vmas.covers(addr, end) {
                return Err(Errno::ENOMEM);
            }
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

const MS_ASYNC: u64 = 1;
const MS_INVALIDATE: u64 = 2;
const MS_SYNC: u64 = 4;

/// `msync(2)`: shared file mappings in the range are written back, whatever the
/// flags (MS_ASYNC too: it is as cheap here; MS_INVALIDATE has nothing to drop,
/// mappings not seeing later writes to the file anyway, see `mm::filemap`).
pub fn msync(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, flags, ..] = f.args();
    if !addr.is_multiple_of(PAGE_SIZE)
        || flags & !(MS_ASYNC | MS_INVALIDATE | MS_SYNC) != 0
        || flags & (MS_ASYNC | MS_SYNC) == MS_ASYNC | MS_SYNC
    {
        return Err(Errno::EINVAL);
    }
    let end = ctx.mm().lock().mapped_end(addr, len).map_err(|e| if e == Errno::EINVAL { Errno::ENOMEM } else { e })?;
    write_back(ctx, addr, end).map(|_| 0)
}

/// `mincore(2)`: one byte per page, 1 where memory is behind it.
pub fn mincore(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, vec, ..] = f.args();
    if !addr.is_multiple_of(PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    let end = ctx.mm().lock().mapped_end(addr, len).map_err(|_| Errno::ENOMEM)?;
    let pages = (end - addr) / PAGE_SIZE;
    ctx.user.check(vec, pages, true)?;
    // A page of answers at a time, the memory lock not held across the copy.
    let mut at = 0;
    while at < pages {
        let n = (pages - at).min(4096);
        let mut buf = alloc::vec![0u8; n as usize];
        {
            let space = ctx.mm().lock();
            for (i, b) in buf.iter_mut().enumerate() {
                *b = u8::from(space.resident(addr + (at + i as u64) * PAGE_SIZE));
            }
        }
        ctx.user.write(vec + at, &buf)?;
        at += n;
    }
    Ok(0)
}

/// `mlock(2)` and `munlock(2)`: memory is never swapped out, so the range need
/// only be mapped.
pub fn mlock(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, ..] = f.args();
    let start = addr & !(PAGE_SIZE - 1);
    let len = len.checked_add(addr - start).ok_or(Errno::EINVAL)?;
    ctx.mm().lock().mapped_end(start, len).map(|_| 0)
}

/// `mlock2(2)`: its only flag is MLOCK_ONFAULT.
pub fn mlock2(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    if f.rdx & !1 != 0 {
        return Err(Errno::EINVAL);
    }
    mlock(ctx, f)
}

const MCL_CURRENT: u64 = 1;
const MCL_FUTURE: u64 = 2;
const MCL_ONFAULT: u64 = 4;

/// `mlockall(2)`.
pub fn mlockall(_: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let flags = f.rdi;
    if flags & !(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) != 0 || flags & (MCL_CURRENT | MCL_FUTURE) == 0 {
        return Err(Errno::EINVAL);
    }
    Ok(0)
}

/// `munlockall(2)`.
pub fn munlockall(_: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Ok(0)
}
