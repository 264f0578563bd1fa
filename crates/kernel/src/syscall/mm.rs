//! Memory system calls: the program break, anonymous mappings, and the calls that
//! only ask about memory or pin it (`msync`, `mincore`, `mlock`: all memory is
//! anonymous and never swapped, so these check the range and succeed). The policy
//! lives in `mm::space`; these only unpack arguments.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::mm::space::map_flags;
use crate::task::Ctx;
use onering_abi::layout::PAGE_SIZE;

pub fn brk(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let space = &mut *ctx.k.mm.lock();
    Ok(space.brk(f.rdi))
}

pub fn mmap(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, prot, flags, fd, offset] = f.args();
    let (prot, flags) = (prot as u32, flags as u32);
    if flags & map_flags::ANONYMOUS == 0 {
        // Files come with the file system; the standard streams cannot be mapped.
        return Err(if (fd as i32) < 0 || fd > 2 { Errno::EBADF } else { Errno::ENODEV });
    }
    if offset % onering_abi::layout::PAGE_SIZE != 0 {
        return Err(Errno::EINVAL);
    }
    if offset.checked_add(len).is_none() {
        return Err(Errno::EOVERFLOW);
    }
    let space = &mut *ctx.k.mm.lock();
    space.mmap_anon(addr, len, prot, flags)
}

pub fn munmap(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let space = &mut *ctx.k.mm.lock();
    space.munmap(f.rdi, f.rsi).map(|_| 0)
}

pub fn mprotect(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, prot, ..] = f.args();
    let space = &mut *ctx.k.mm.lock();
    space.mprotect(addr, len, prot as u32).map(|_| 0)
}

const MREMAP_MAYMOVE: u64 = 1;
const MREMAP_FIXED: u64 = 2;

pub fn mremap(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [old, old_len, new_len, flags, ..] = f.args();
    if flags & !(MREMAP_MAYMOVE | MREMAP_FIXED) != 0 || flags & MREMAP_FIXED != 0 {
        // MREMAP_FIXED is rarely used; refuse it plainly.
        return Err(Errno::EINVAL);
    }
    let space = &mut *ctx.k.mm.lock();
    space.mremap(old, old_len, new_len, flags & MREMAP_MAYMOVE != 0)
}

const MADV_DONTNEED: u64 = 4;
const MADV_REMOVE: u64 = 9;

pub fn madvise(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, advice, ..] = f.args();
    if !addr.is_multiple_of(onering_abi::layout::PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    let space = &mut *ctx.k.mm.lock();
    match advice {
        // Anonymous memory reads as zeros after these.
        MADV_DONTNEED | MADV_REMOVE => space.discard(addr, len).map(|_| 0),
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

/// `msync(2)`: nothing is backed by a file, so there is nothing to write back.
pub fn msync(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, flags, ..] = f.args();
    if !addr.is_multiple_of(PAGE_SIZE)
        || flags & !(MS_ASYNC | MS_INVALIDATE | MS_SYNC) != 0
        || flags & (MS_ASYNC | MS_SYNC) == MS_ASYNC | MS_SYNC
    {
        return Err(Errno::EINVAL);
    }
    ctx.k.mm.lock().mapped_end(addr, len).map(|_| 0).map_err(|e| if e == Errno::EINVAL { Errno::ENOMEM } else { e })
}

/// `mincore(2)`: one byte per page, 1 where memory is behind it.
pub fn mincore(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [addr, len, vec, ..] = f.args();
    if !addr.is_multiple_of(PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    let end = ctx.k.mm.lock().mapped_end(addr, len).map_err(|_| Errno::ENOMEM)?;
    let pages = (end - addr) / PAGE_SIZE;
    ctx.user.check(vec, pages, true)?;
    // A page of answers at a time, the memory lock not held across the copy.
    let mut at = 0;
    while at < pages {
        let n = (pages - at).min(4096);
        let mut buf = alloc::vec![0u8; n as usize];
        {
            let space = ctx.k.mm.lock();
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
    ctx.k.mm.lock().mapped_end(start, len).map(|_| 0)
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
