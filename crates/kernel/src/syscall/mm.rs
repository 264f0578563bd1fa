//! Memory system calls: the program break and anonymous mappings. The policy lives in
//! `mm::space`; these only unpack arguments.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::kernel::{kernel, Kernel};
use crate::mm::space::map_flags;

pub fn brk(f: &mut SyscallFrame) -> SysResult {
    let Kernel { space, mmu, .. } = &mut *kernel();
    Ok(space.brk(f.rdi, mmu))
}

pub fn mmap(f: &mut SyscallFrame) -> SysResult {
    let [addr, len, prot, flags, fd, offset] = f.args();
    let (prot, flags) = (prot as u32, flags as u32);
    if flags & map_flags::ANONYMOUS == 0 {
        // Files come with the file system; the standard streams cannot be mapped.
        return Err(if (fd as i32) < 0 || fd > 2 {
            Errno::EBADF
        } else {
            Errno::ENODEV
        });
    }
    if offset % onering_abi::layout::PAGE_SIZE != 0 {
        return Err(Errno::EINVAL);
    }
    if offset.checked_add(len).is_none() {
        return Err(Errno::EOVERFLOW);
    }
    let Kernel { space, mmu, .. } = &mut *kernel();
    space.mmap_anon(addr, len, prot, flags, mmu)
}

pub fn munmap(f: &mut SyscallFrame) -> SysResult {
    let Kernel { space, mmu, .. } = &mut *kernel();
    space.munmap(f.rdi, f.rsi, mmu).map(|_| 0)
}

pub fn mprotect(f: &mut SyscallFrame) -> SysResult {
    let [addr, len, prot, ..] = f.args();
    let Kernel { space, mmu, .. } = &mut *kernel();
    space.mprotect(addr, len, prot as u32, mmu).map(|_| 0)
}
