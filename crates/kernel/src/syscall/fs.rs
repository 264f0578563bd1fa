//! File-descriptor system calls. For now the only files are the standard streams:
//! stdin is empty, stdout and stderr go to the host through the console.

use super::SyscallFrame;
use crate::arch::{self, copy_to_user, user_slice};
use crate::errno::{Errno, SysResult};
use crate::kernel::{kernel, HostSink, Kernel};
use alloc::vec::Vec;

/// Linux caps one read or write at this many bytes.
const MAX_RW_COUNT: u64 = 0x7fff_f000;
const IOV_MAX: u64 = 1024;
const TIOCGWINSZ: u64 = 0x5413;

fn check_fd(fd: u64) -> Result<u32, Errno> {
    match fd {
        0..=2 => Ok(fd as u32),
        _ => Err(Errno::EBADF),
    }
}

fn write_to(k: &mut Kernel, fd: u32, addr: u64, len: u64) -> SysResult {
    if fd == 0 {
        return Err(Errno::EBADF);
    }
    let len = len.min(MAX_RW_COUNT);
    let Kernel { space, console, .. } = k;
    let data = user_slice(space, addr, len)?;
    if data.is_empty() {
        return Ok(0);
    }
    console.write(fd, data, addr, &mut HostSink)
}

pub fn read(f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, len, ..] = f.args();
    match check_fd(fd)? {
        // stdin is empty (forwarding the host's comes with `-i`).
        0 => {
            kernel().space.check(addr, len.min(MAX_RW_COUNT), true)?;
            Ok(0)
        }
        _ => Err(Errno::EBADF),
    }
}

pub fn write(f: &mut SyscallFrame) -> SysResult {
    let [fd, addr, len, ..] = f.args();
    let fd = check_fd(fd)?;
    write_to(&mut kernel(), fd, addr, len)
}

pub fn writev(f: &mut SyscallFrame) -> SysResult {
    let [fd, iov, count, ..] = f.args();
    let fd = check_fd(fd)?;
    if count > IOV_MAX {
        return Err(Errno::EINVAL);
    }
    let mut k = kernel();
    // The vector is read and checked as a whole first, as Linux does: a bad array is
    // EFAULT, lengths adding up past isize::MAX are EINVAL, before anything is written.
    let vecs: Vec<(u64, u64)> = {
        let raw = arch::user_slice(&k.space, iov, count * 16)?;
        raw.chunks_exact(16)
            .map(|c| {
                (
                    u64::from_le_bytes(c[..8].try_into().unwrap_or_default()),
                    u64::from_le_bytes(c[8..].try_into().unwrap_or_default()),
                )
            })
            .collect()
    };
    vecs.iter()
        .try_fold(0u64, |sum, (_, len)| {
            sum.checked_add(*len).filter(|s| *s <= isize::MAX as u64)
        })
        .ok_or(Errno::EINVAL)?;
    let mut total: u64 = 0;
    for (base, len) in vecs {
        match write_to(&mut k, fd, base, len.min(MAX_RW_COUNT - total)) {
            Ok(n) => total += n,
            // Linux reports what was written before the error, if anything.
            Err(e) if total == 0 => return Err(e),
            Err(_) => break,
        }
        if total >= MAX_RW_COUNT {
            break;
        }
    }
    Ok(total)
}

pub fn ioctl(f: &mut SyscallFrame) -> SysResult {
    let [fd, request, arg, ..] = f.args();
    let fd = check_fd(fd)?;
    let k = kernel();
    match request {
        // The terminal size, when the host's stdout/stderr is a terminal.
        TIOCGWINSZ if fd != 0 && k.winsize != 0 => {
            let rows = (k.winsize >> 16) as u16;
            let cols = k.winsize as u16;
            let mut ws = [0u8; 8];
            ws[0..2].copy_from_slice(&rows.to_le_bytes());
            ws[2..4].copy_from_slice(&cols.to_le_bytes());
            copy_to_user(&k.space, arg, &ws)?;
            Ok(0)
        }
        _ => Err(Errno::ENOTTY),
    }
}
