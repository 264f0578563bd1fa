//! Process system calls. One process, one thread (threads come later): it is pid 1 of
//! its VM, as in a container, and its thread id equals its pid.

use super::SyscallFrame;
use crate::arch;
use crate::errno::{Errno, SysResult};
use crate::kernel::kernel;
use onering_abi::layout::USER_END;

const ARCH_SET_GS: u64 = 0x1001;
const ARCH_SET_FS: u64 = 0x1002;
const ARCH_GET_FS: u64 = 0x1003;
const ARCH_GET_GS: u64 = 0x1004;

pub const PID: u64 = 1;

pub fn getpid(_: &mut SyscallFrame) -> SysResult {
    Ok(PID)
}

pub fn set_tid_address(f: &mut SyscallFrame) -> SysResult {
    kernel().clear_child_tid = f.rdi;
    Ok(PID)
}

pub fn arch_prctl(f: &mut SyscallFrame) -> SysResult {
    let [code, addr, ..] = f.args();
    match code {
        ARCH_SET_FS => {
            if addr >= USER_END {
                return Err(Errno::EPERM);
            }
            arch::set_fs_base(addr);
            Ok(0)
        }
        ARCH_GET_FS => {
            let k = kernel();
            arch::copy_to_user(&k.space, addr, &arch::fs_base().to_le_bytes())?;
            Ok(0)
        }
        // The GS base belongs to the kernel (per-CPU data): programs cannot have it.
        ARCH_SET_GS | ARCH_GET_GS => Err(Errno::EPERM),
        _ => Err(Errno::EINVAL),
    }
}

pub fn exit(f: &mut SyscallFrame) -> SysResult {
    // With one thread, the thread's exit is the process's.
    kernel().exit(f.rdi)
}

pub fn exit_group(f: &mut SyscallFrame) -> SysResult {
    kernel().exit(f.rdi)
}

pub fn getppid(_: &mut SyscallFrame) -> SysResult {
    Ok(0)
}

pub fn gettid(_: &mut SyscallFrame) -> SysResult {
    Ok(PID)
}

pub fn getuid(_: &mut SyscallFrame) -> SysResult {
    Ok(kernel().uid)
}

pub fn getgid(_: &mut SyscallFrame) -> SysResult {
    Ok(kernel().gid)
}

pub fn sched_yield(_: &mut SyscallFrame) -> SysResult {
    Ok(0)
}

pub fn sched_getaffinity(f: &mut SyscallFrame) -> SysResult {
    let [pid, len, mask, ..] = f.args();
    if pid != 0 && pid != PID {
        return Err(Errno::ESRCH);
    }
    if len < 8 || len % 8 != 0 {
        return Err(Errno::EINVAL);
    }
    // One CPU runs the program for now.
    arch::copy_to_user(&kernel().space, mask, &1u64.to_le_bytes())?;
    Ok(8)
}

/// Resource limits: (soft, hard); RLIM_INFINITY is u64::MAX.
fn default_rlimit(resource: u32) -> Option<(u64, u64)> {
    const INF: u64 = u64::MAX;
    Some(match resource {
        3 => (onering_abi::layout::STACK_SIZE, INF), // STACK
        7 => (crate::fs::file::MAX_FDS as u64, crate::fs::file::MAX_FDS as u64), // NOFILE
        0 | 1 | 2 | 4 | 5 | 6 | 8 | 9 | 10 | 11 | 12 | 13 | 14 | 15 => (INF, INF), // the rest
        _ => return None,
    })
}

fn rlimit(resource: u64, new: u64, old: u64) -> SysResult {
    let resource = u32::try_from(resource).map_err(|_| Errno::EINVAL)?;
    let k = &mut *kernel();
    let cur = match k.rlimits.get(&resource) {
        Some(l) => *l,
        None => default_rlimit(resource).ok_or(Errno::EINVAL)?,
    };
    let set = if new != 0 {
        let mut b = [0u8; 16];
        arch::copy_from_user(&k.space, new, &mut b)?;
        let soft = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let hard = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        if soft > hard || hard > cur.1 {
            return Err(if soft > hard { Errno::EINVAL } else { Errno::EPERM });
        }
        Some((soft, hard))
    } else {
        None
    };
    if old != 0 {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&cur.0.to_le_bytes());
        b[8..].copy_from_slice(&cur.1.to_le_bytes());
        arch::copy_to_user(&k.space, old, &b)?;
    }
    if let Some(l) = set {
        k.rlimits.insert(resource, l);
    }
    Ok(0)
}

pub fn getrlimit(f: &mut SyscallFrame) -> SysResult {
    rlimit(f.rdi, 0, f.rsi)
}

pub fn prlimit64(f: &mut SyscallFrame) -> SysResult {
    let [pid, resource, new, old, ..] = f.args();
    if pid != 0 && pid != PID {
        return Err(Errno::ESRCH);
    }
    rlimit(resource, new, old)
}

pub fn uname(f: &mut SyscallFrame) -> SysResult {
    let mut b = [0u8; 65 * 6];
    for (i, field) in
        [&b"Linux"[..], b"onering", b"6.1.0-onering", b"#1 SMP onering", b"x86_64", b"(none)"].iter().enumerate()
    {
        b[i * 65..i * 65 + field.len()].copy_from_slice(field);
    }
    arch::copy_to_user(&kernel().space, f.rdi, &b)?;
    Ok(0)
}

pub fn sysinfo(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    let mut b = [0u8; 112];
    let put = |b: &mut [u8], at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut b, 0, k.now_mono() / crate::time::NS_PER_SEC);
    let total = k.space.total_bytes();
    put(&mut b, 32, total);
    put(&mut b, 40, k.space.chunks.free_chunks() as u64 * onering_abi::layout::HUGE_PAGE_SIZE);
    b[80..82].copy_from_slice(&1u16.to_le_bytes()); // procs
    b[104..108].copy_from_slice(&1u32.to_le_bytes()); // mem_unit
    arch::copy_to_user(&k.space, f.rdi, &b)?;
    Ok(0)
}

pub fn getrandom(f: &mut SyscallFrame) -> SysResult {
    let [buf, len, flags, ..] = f.args();
    if flags & !7 != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let len = len.min(0x7fff_f000);
    let crate::kernel::Kernel { space, rng, .. } = k;
    rng.fill(arch::user_slice_mut(space, buf, len)?);
    Ok(len)
}

pub fn set_robust_list(f: &mut SyscallFrame) -> SysResult {
    // struct robust_list_head is 24 bytes; the list matters only when a thread dies
    // holding a lock, which needs threads (a later issue): record nothing more.
    if f.rsi != 24 {
        return Err(Errno::EINVAL);
    }
    Ok(0)
}

/// Restartable sequences are not offered; C libraries expect ENOSYS and carry on,
/// so this one is not reported as unsupported.
pub fn rseq(_: &mut SyscallFrame) -> SysResult {
    Err(Errno::ENOSYS)
}

const PR_SET_NAME: u64 = 15;
const PR_GET_NAME: u64 = 16;
const PR_GET_DUMPABLE: u64 = 3;
const PR_SET_DUMPABLE: u64 = 4;
const PR_SET_NO_NEW_PRIVS: u64 = 38;
const PR_GET_NO_NEW_PRIVS: u64 = 39;

pub fn prctl(f: &mut SyscallFrame) -> SysResult {
    let [option, arg2, ..] = f.args();
    let k = &mut *kernel();
    match option {
        PR_SET_NAME => {
            let mut name = [0u8; 16];
            let s = arch::user_cstr(&k.space, arg2, 4095)?;
            let n = s.len().min(15);
            name[..n].copy_from_slice(&s[..n]);
            k.comm = name;
            Ok(0)
        }
        PR_GET_NAME => {
            let name = k.comm;
            arch::copy_to_user(&k.space, arg2, &name)?;
            Ok(0)
        }
        PR_GET_DUMPABLE => Ok(1),
        PR_SET_DUMPABLE if arg2 <= 1 => Ok(0),
        PR_SET_NO_NEW_PRIVS if arg2 == 1 => Ok(0),
        PR_GET_NO_NEW_PRIVS => Ok(1),
        // Everything else, PR_SET_VMA included (Go copes with EINVAL there).
        _ => Err(Errno::EINVAL),
    }
}
