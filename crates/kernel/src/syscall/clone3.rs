//! clone3's argument block (`struct clone_args`), checked as Linux checks it and
//! turned into the arguments of the classic `clone`, which does the work. glibc
//! 2.34 and later create every thread with clone3 (and fall back to clone only on
//! ENOSYS). Pure, so it is unit-tested on the host.

use crate::errno::Errno;

/// `sizeof(struct clone_args)` of its first version (Linux 5.3).
pub const SIZE_VER0: usize = 64;
/// The version this kernel knows (with `set_tid`, `set_tid_size`, `cgroup`).
pub const SIZE_KNOWN: usize = 88;
/// Linux refuses argument blocks larger than a page.
pub const SIZE_MAX: usize = 4096;

const CSIGNAL: u64 = 0xff;
const CLONE_DETACHED: u64 = 0x40_0000;

/// What `clone` needs: flags with the exit signal in the low byte, the child's stack
/// pointer (0: the caller's), and the three pointers.
#[derive(Debug, PartialEq, Eq)]
pub struct CloneCall {
    pub flags: u64,
    pub sp: u64,
    pub parent_tid: u64,
    pub child_tid: u64,
    pub tls: u64,
    /// Where CLONE_PIDFD stores the pidfd.
    pub pidfd: u64,
}

/// Checks the block (`bytes` is all `size` bytes the program passed) and converts it.
pub fn parse(bytes: &[u8]) -> Result<CloneCall, Errno> {
    if bytes.len() < SIZE_VER0 {
        return Err(Errno::EINVAL);
    }
    if bytes.len() > SIZE_MAX {
        return Err(Errno::E2BIG);
    }
    // A newer program's extra fields must be zero, or it asked for something unknown.
    if bytes.len() > SIZE_KNOWN && bytes[SIZE_KNOWN..].iter().any(|b| *b != 0) {
        return Err(Errno::E2BIG);
    }
    let field = |i: usize| -> u64 {
        let at = i * 8;
        bytes.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let [flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, _cgroup] =
        core::array::from_fn(field);
    // The exit signal has its own field; CLONE_DETACHED is refused by clone3.
    if flags & (CSIGNAL | CLONE_DETACHED) != 0 || exit_signal & !CSIGNAL != 0 || exit_signal > 64 {
        return Err(Errno::EINVAL);
    }
    if (stack == 0) != (stack_size == 0) || (set_tid == 0) != (set_tid_size == 0) {
        return Err(Errno::EINVAL);
    }
    if set_tid_size != 0 {
        // Choosing the child's tid needs privileges in a pid namespace.
        return Err(Errno::EPERM);
    }
    let sp = if stack == 0 { 0 } else { stack.checked_add(stack_size).ok_or(Errno::EINVAL)? };
    Ok(CloneCall { flags: flags | exit_signal, sp, parent_tid, child_tid, tls, pidfd })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn block(fields: &[u64], size: usize) -> Vec<u8> {
        let mut v: Vec<u8> = fields.iter().flat_map(|f| f.to_le_bytes()).collect();
        v.resize(size, 0);
        v
    }

    #[test]
    fn glibc_thread() {
        // glibc's pthread_create: flags, pidfd, child_tid, parent_tid, exit_signal,
        // stack, stack_size, tls.
        let flags = 0x3d0f00;
        let b = block(&[flags, 0, 0x1000, 0x1000, 0, 0x7000_0000, 0x80_0000, 0x7080_0000], SIZE_VER0);
        assert_eq!(
            parse(&b),
            Ok(CloneCall { flags, sp: 0x7080_0000, parent_tid: 0x1000, child_tid: 0x1000, tls: 0x7080_0000, pidfd: 0 })
        );
    }

    #[test]
    fn exit_signal_moves_into_the_flags() {
        let b = block(&[0x4100, 0, 0, 0, 17], SIZE_KNOWN);
        assert_eq!(parse(&b).map(|c| (c.flags, c.sp)), Ok((0x4111, 0)));
    }

    #[test]
    fn bad_blocks() {
        assert_eq!(parse(&block(&[], 56)), Err(Errno::EINVAL));
        assert_eq!(parse(&block(&[], SIZE_MAX + 8)), Err(Errno::E2BIG));
        let mut big = block(&[0x100], 128);
        assert!(parse(&big).is_ok());
        big[100] = 1;
        assert_eq!(parse(&big), Err(Errno::E2BIG));
        assert_eq!(parse(&block(&[0x111], SIZE_VER0)), Err(Errno::EINVAL)); // signal in flags
        assert_eq!(parse(&block(&[0x40_0000], SIZE_VER0)), Err(Errno::EINVAL)); // CLONE_DETACHED
        assert_eq!(parse(&block(&[0, 0, 0, 0, 65], SIZE_VER0)), Err(Errno::EINVAL));
        assert_eq!(parse(&block(&[0, 0, 0, 0, 0, 0x1000], SIZE_VER0)), Err(Errno::EINVAL)); // stack, no size
        assert_eq!(parse(&block(&[0, 0, 0, 0, 0, 0, 0x1000], SIZE_VER0)), Err(Errno::EINVAL)); // size, no stack
        assert_eq!(parse(&block(&[0, 0, 0, 0, 0, u64::MAX, 2], SIZE_VER0)), Err(Errno::EINVAL));
        assert_eq!(parse(&block(&[0, 0, 0, 0, 0, 0, 0, 0, 0x1000, 1], SIZE_KNOWN)), Err(Errno::EPERM));
        assert_eq!(parse(&block(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 1], SIZE_KNOWN)), Err(Errno::EINVAL));
    }
}
