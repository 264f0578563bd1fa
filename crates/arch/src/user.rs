//! Access to the program's memory, always by copying and always fallible: the
//! kernel never holds a Rust reference into user memory (another vCPU, or the
//! program itself, may change or unmap it at any moment).
//!
//! Each access is a tiny assembly routine with one instruction that can fault. If
//! it does, the kernel's fault handler first gives the memory manager a chance to
//! back the page (a lazily backed mapping) and retries; otherwise it calls
//! `entry::fail_user_access`, which resumes the routine at a landing that returns failure. So a bad
//! pointer becomes `Err(Fault)` (EFAULT for the program), never a fault in the
//! kernel. Addresses are checked to lie in the program's half first, where a fault
//! can only be a missing mapping.
//!
//! The kernel still checks mappings and protections before copying (its VMAs know
//! read-only segments, which the 2 MiB hardware pages cannot express); what these
//! routines add is soundness when that check races with an `munmap` elsewhere.

use crate::frame::{FaultFrame, UserRegs};
use onering_abi::layout::USER_END;

/// An access to user memory failed: nothing mapped there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault;

/// Whether `[addr, addr + len)` lies in the program's half.
pub fn in_user_half(addr: u64, len: u64) -> bool {
    addr.checked_add(len).is_some_and(|end| end <= USER_END)
}

#[cfg(target_os = "none")]
mod imp {
    use super::*;

    core::arch::global_asm!(
        r#"
    .section .text.user_access, "ax"
    // Every instruction between these labels may fault on a user address; none of
    // the routines uses the stack, so the landing can simply return.
    .global onering_user_access_start
onering_user_access_start:
    // copy(dst: rdi, src: rsi, len: rdx) -> 0
onering_user_copy:
    mov %rdx, %rcx
    rep movsb
    xor %eax, %eax
    ret
    // fill(dst: rdi, byte: sil, len: rdx) -> 0
onering_user_fill:
    mov %esi, %eax
    mov %rdx, %rcx
    rep stosb
    xor %eax, %eax
    ret
    // load32(addr: rdi) -> the word, zero-extended
onering_user_load32:
    mov (%rdi), %eax
    ret
    // cmpxchg32(addr: rdi, old: esi, new: edx) -> the word found, zero-extended
onering_user_cmpxchg32:
    mov %esi, %eax
    lock cmpxchg %edx, (%rdi)
    ret
    .global onering_user_access_end
onering_user_access_end:
    // Where a faulting access resumes: -1 (no routine returns that otherwise).
    .global onering_user_fault
onering_user_fault:
    mov $-1, %rax
    ret
    .global onering_user_copy, onering_user_fill, onering_user_load32, onering_user_cmpxchg32
"#,
        options(att_syntax)
    );

    // SAFETY: the assembly above defines these symbols with these System V
    // signatures; each reads or writes only the user range it is given (and
    // clobbers only caller-saved registers).
    extern "C" {
        fn onering_user_copy(dst: u64, src: u64, len: u64) -> i64;
        fn onering_user_fill(dst: u64, byte: u64, len: u64) -> i64;
        fn onering_user_load32(addr: u64) -> u64;
        fn onering_user_cmpxchg32(addr: u64, old: u32, new: u32) -> u64;
        static onering_user_access_start: u8;
        static onering_user_access_end: u8;
        static onering_user_fault: u8;
    }

    fn ok(r: i64) -> Result<(), Fault> {
        if r == 0 {
            Ok(())
        } else {
            Err(Fault)
        }
    }

    /// Copies user memory at `src` into `dst`.
    pub fn read(src: u64, dst: &mut [u8]) -> Result<(), Fault> {
        let len = dst.len() as u64;
        if !in_user_half(src, len) {
            return Err(Fault);
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: `dst` is a live, exclusively borrowed kernel buffer of `len` bytes;
        // `src..src + len` lies in the user half, where a fault is caught (see the
        // module note) and turned into an error. User memory never aliases `dst`
        // (the kernel's memory is in the upper half).
        ok(unsafe { onering_user_copy(dst.as_mut_ptr() as u64, src, len) })
    }

    /// Copies `src` to user memory at `dst`.
    pub fn write(dst: u64, src: &[u8]) -> Result<(), Fault> {
        let len = src.len() as u64;
        if !in_user_half(dst, len) {
            return Err(Fault);
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: `src` is a live kernel buffer of `len` bytes that the copy only reads;
        // the destination lies in the user half, faults are caught.
        ok(unsafe { onering_user_copy(dst, src.as_ptr() as u64, len) })
    }

    /// Sets `len` bytes of user memory at `dst` to `byte`.
    pub fn fill(dst: u64, byte: u8, len: u64) -> Result<(), Fault> {
        if !in_user_half(dst, len) {
            return Err(Fault);
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: writes only the user range, which is checked to lie in the user
        // half; faults are caught.
        ok(unsafe { onering_user_fill(dst, u64::from(byte), len) })
    }

    /// Copies `len` bytes of user memory from `src` to `dst` (the ranges may not
    /// overlap, or the result is whatever `rep movsb` leaves).
    pub fn copy_within(src: u64, dst: u64, len: u64) -> Result<(), Fault> {
        if !in_user_half(src, len) || !in_user_half(dst, len) {
            return Err(Fault);
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie in the user half; only user memory is touched and
        // faults are caught.
        ok(unsafe { onering_user_copy(dst, src, len) })
    }

    /// Atomically reads the aligned user word at `addr`.
    pub fn load_u32(addr: u64) -> Result<u32, Fault> {
        if !addr.is_multiple_of(4) || !in_user_half(addr, 4) {
            return Err(Fault);
        }
        // SAFETY: an aligned 4-byte load from the user half (atomic on x86); a
        // fault returns u64::MAX, which no zero-extended word equals.
        let v = unsafe { onering_user_load32(addr) };
        u32::try_from(v).map_err(|_| Fault)
    }

    /// Atomically replaces the aligned user word at `addr` with `new` if it holds
    /// `old`; returns the value found.
    pub fn cmpxchg_u32(addr: u64, old: u32, new: u32) -> Result<u32, Fault> {
        if !addr.is_multiple_of(4) || !in_user_half(addr, 4) {
            return Err(Fault);
        }
        // SAFETY: a locked compare-and-exchange of an aligned user word; a fault
        // returns u64::MAX.
        let v = unsafe { onering_user_cmpxchg32(addr, old, new) };
        u32::try_from(v).map_err(|_| Fault)
    }

    /// If the exception in `frame` was raised by one of these routines, the
    /// registers to resume with: the same, at the landing that returns failure
    /// (`entry::fail_user_access` resumes there).
    pub(crate) fn fixup(frame: &FaultFrame) -> Option<UserRegs> {
        // Only the addresses of the labels are taken.
        let (start, end, land) = (
            core::ptr::addr_of!(onering_user_access_start) as u64,
            core::ptr::addr_of!(onering_user_access_end) as u64,
            core::ptr::addr_of!(onering_user_fault) as u64,
        );
        (start..end).contains(&frame.rip).then(|| UserRegs { rip: land, ..frame.regs() })
    }
}

#[cfg(target_os = "none")]
pub use imp::*;

/// Host builds have no user memory to reach: every access faults.
#[cfg(not(target_os = "none"))]
mod imp {
    use super::*;
    pub fn read(_: u64, _: &mut [u8]) -> Result<(), Fault> {
        Err(Fault)
    }
    pub fn write(_: u64, _: &[u8]) -> Result<(), Fault> {
        Err(Fault)
    }
    pub fn fill(_: u64, _: u8, _: u64) -> Result<(), Fault> {
        Err(Fault)
    }
    pub fn copy_within(_: u64, _: u64, _: u64) -> Result<(), Fault> {
        Err(Fault)
    }
    pub fn load_u32(_: u64) -> Result<u32, Fault> {
        Err(Fault)
    }
    pub fn cmpxchg_u32(_: u64, _: u32, _: u32) -> Result<u32, Fault> {
        Err(Fault)
    }
    pub(crate) fn fixup(_: &FaultFrame) -> Option<UserRegs> {
        None
    }
}

#[cfg(not(target_os = "none"))]
pub use imp::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_lower_half() {
        assert!(in_user_half(0, 0));
        assert!(in_user_half(USER_END - 8, 8));
        assert!(!in_user_half(USER_END - 8, 9));
        assert!(!in_user_half(u64::MAX, 2));
        assert!(!in_user_half(onering_abi::layout::KERNEL_VBASE, 1));
    }
}
