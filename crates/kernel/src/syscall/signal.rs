//! Signal system calls. Dispositions, the mask and the alternate stack are recorded
//! and reported back faithfully; delivering signals comes with a later issue (a fault
//! still ends the program as an unhandled signal does).

use super::SyscallFrame;
use crate::arch::{self, copy_to_user};
use crate::errno::{Errno, SysResult};
use crate::kernel::kernel;

const SIGKILL: u64 = 9;
const SIGSTOP: u64 = 19;
const SIG_BLOCK: u64 = 0;
const SIG_UNBLOCK: u64 = 1;
const SIG_SETMASK: u64 = 2;
const SS_ONSTACK: u32 = 1;
const SS_DISABLE: u32 = 2;
const MINSIGSTKSZ: u64 = 2048;
/// KILL and STOP can be neither caught nor blocked.
const UNBLOCKABLE: u64 = (1 << (SIGKILL - 1)) | (1 << (SIGSTOP - 1));

pub fn rt_sigaction(f: &mut SyscallFrame) -> SysResult {
    let [sig, act, oact, size, ..] = f.args();
    if size != 8 || sig == 0 || sig > 64 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let new = if act != 0 {
        if sig == SIGKILL || sig == SIGSTOP {
            return Err(Errno::EINVAL);
        }
        let mut b = [0u8; 32];
        arch::copy_from_user(&k.space, act, &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        Some([w(0), w(1), w(2), w(3) & !UNBLOCKABLE])
    } else {
        None
    };
    let slot = &mut k.signals.actions[sig as usize - 1];
    if oact != 0 {
        let old: [u8; 32] = {
            let mut b = [0u8; 32];
            for (i, w) in slot.iter().enumerate() {
                b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            b
        };
        copy_to_user(&k.space, oact, &old)?;
    }
    if let Some(n) = new {
        k.signals.actions[sig as usize - 1] = n;
    }
    Ok(0)
}

pub fn rt_sigprocmask(f: &mut SyscallFrame) -> SysResult {
    let [how, set, oset, size, ..] = f.args();
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let new = if set != 0 { Some(arch::read_user_u64(&k.space, set)?) } else { None };
    let old = k.signals.mask;
    if let Some(s) = new {
        k.signals.mask = match how {
            SIG_BLOCK => old | s,
            SIG_UNBLOCK => old & !s,
            SIG_SETMASK => s,
            _ => return Err(Errno::EINVAL),
        } & !UNBLOCKABLE;
    }
    if oset != 0 {
        copy_to_user(&k.space, oset, &old.to_le_bytes())?;
    }
    Ok(0)
}

pub fn sigaltstack(f: &mut SyscallFrame) -> SysResult {
    let [ss, old, ..] = f.args();
    let k = &mut *kernel();
    let cur = k.signals.altstack;
    if ss != 0 {
        let mut b = [0u8; 24];
        arch::copy_from_user(&k.space, ss, &mut b)?;
        let sp = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let flags = u32::from_le_bytes(b[8..12].try_into().unwrap_or_default());
        let size = u64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
        if flags & !(SS_DISABLE | SS_ONSTACK | (1 << 31)) != 0
            || flags & (SS_DISABLE | SS_ONSTACK) == SS_DISABLE | SS_ONSTACK
        {
            return Err(Errno::EINVAL);
        }
        k.signals.altstack = if flags & SS_DISABLE != 0 {
            (0, SS_DISABLE, 0)
        } else {
            if size < MINSIGSTKSZ {
                return Err(Errno::ENOMEM);
            }
            (sp, 0, size)
        };
    }
    if old != 0 {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&cur.0.to_le_bytes());
        b[8..12].copy_from_slice(&cur.1.to_le_bytes());
        b[16..24].copy_from_slice(&cur.2.to_le_bytes());
        copy_to_user(&k.space, old, &b)?;
    }
    Ok(0)
}
