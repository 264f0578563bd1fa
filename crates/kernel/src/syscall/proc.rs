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
