//! Memory system calls: the program break and anonymous mappings. The policy lives in
//! `mm::space`; these only unpack arguments.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::mm::space::map_flags;
use crate::task::Ctx;

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
            let end = addr.checked_add(len).ok_or(Errno::EINVAL)?;
            let end = (end + onering_abi::layout::PAGE_SIZE - 1) & !(onering_abi::layout::PAGE_SIZE - 1);
            if len != 0 && !space.vmas.covers(addr, end) {
                return Err(Errno::ENOMEM);
            }
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}
