//! The user context the entry code saves, as plain data: what a system call finds
//! (`SyscallFrame`, in the order `syscall_entry` pushes it), what an exception or an
//! interrupt finds (`FaultFrame`, in the order the ring-0 stubs lay it out), and the
//! complete register set a return with every register chosen loads (`UserRegs`: a
//! signal handler's entry, `rt_sigreturn`, the end of a page fault).
//!
//! Pure types: they build on the host too, so layout code above (signal frames) is
//! unit-tested there. The assembly in `entry.rs` depends on these layouts; the
//! offsets it uses are computed from the types, and the tests below pin the sizes.

/// User registers at system-call entry. `rax` holds the number on entry and the
/// result on return; `rip` and `rflags` are what the `syscall` instruction put in
/// `rcx` and `r11`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub rbp: u64,
    pub rbx: u64,
    pub r9: u64,
    pub r8: u64,
    pub r10: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rax: u64,
    pub rip: u64,
    pub rflags: u64,
    pub rsp: u64,
}

impl SyscallFrame {
    /// The six arguments, in ABI order.
    pub fn args(&self) -> [u64; 6] {
        [self.rdi, self.rsi, self.rdx, self.r10, self.r8, self.r9]
    }

    /// The registers the program sees when this call returns `rax`: what the
    /// hardware `syscall`/`sysret` pair leaves (rcx = rip, r11 = rflags).
    pub fn regs(&self) -> UserRegs {
        UserRegs {
            r8: self.r8,
            r9: self.r9,
            r10: self.r10,
            r11: self.rflags,
            r12: self.r12,
            r13: self.r13,
            r14: self.r14,
            r15: self.r15,
            rdi: self.rdi,
            rsi: self.rsi,
            rbp: self.rbp,
            rbx: self.rbx,
            rdx: self.rdx,
            rax: self.rax,
            rcx: self.rip,
            rsp: self.rsp,
            rip: self.rip,
            rflags: self.rflags,
        }
    }

    /// A frame that makes system call `regs.rax` with the argument registers of
    /// `regs` and returns to `regs.rip` (a call made again after an SA_RESTART
    /// handler).
    pub fn from_regs(regs: &UserRegs) -> SyscallFrame {
        SyscallFrame {
            r15: regs.r15,
            r14: regs.r14,
            r13: regs.r13,
            r12: regs.r12,
            rbp: regs.rbp,
            rbx: regs.rbx,
            r9: regs.r9,
            r8: regs.r8,
            r10: regs.r10,
            rdx: regs.rdx,
            rsi: regs.rsi,
            rdi: regs.rdi,
            rax: regs.rax,
            rip: regs.rip,
            rflags: regs.rflags,
            rsp: regs.rsp,
        }
    }
}

/// Every general register, the instruction pointer and the flags: the state a
/// "full return" (`entry::full_return`) resumes, and what a signal frame's
/// `sigcontext` holds (in this order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct UserRegs {
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rbp: u64,
    pub rbx: u64,
    pub rdx: u64,
    pub rax: u64,
    pub rcx: u64,
    pub rsp: u64,
    pub rip: u64,
    pub rflags: u64,
}

impl UserRegs {
    /// The registers as words, in the struct's order (a signal frame's
    /// `sigcontext`, the gdb stub's `onering_abi::debug::Regs`).
    pub fn to_words(&self) -> [u64; 18] {
        let r = self;
        [
            r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rdi, r.rsi, r.rbp, r.rbx, r.rdx, r.rax, r.rcx,
            r.rsp, r.rip, r.rflags,
        ]
    }

    /// The registers from words in the struct's order ([`to_words`](Self::to_words)).
    pub fn from_words(w: [u64; 18]) -> Self {
        let [r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, rflags] = w;
        UserRegs { r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, rflags }
    }
}

/// Registers at an exception or interrupt, as the ring-0 stubs lay them out
/// (general registers, then vector and error code, then the `iretq` frame).
///
/// Only the stubs make one (non-exhaustive, no Clone: the kernel can neither build
/// nor copy one): a `&FaultFrame` is the state the CPU really was in, which
/// `entry::retry_fault` may resume even in the kernel.
#[repr(C)]
#[derive(Debug)]
#[non_exhaustive]
pub struct FaultFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    pub vector: u64,
    pub error: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

impl FaultFrame {
    /// A copy (arch only: a copy is still the genuine state).
    pub(crate) fn duplicate(&self) -> FaultFrame {
        FaultFrame {
            r15: self.r15,
            r14: self.r14,
            r13: self.r13,
            r12: self.r12,
            r11: self.r11,
            r10: self.r10,
            r9: self.r9,
            r8: self.r8,
            rbp: self.rbp,
            rdi: self.rdi,
            rsi: self.rsi,
            rdx: self.rdx,
            rcx: self.rcx,
            rbx: self.rbx,
            rax: self.rax,
            vector: self.vector,
            error: self.error,
            rip: self.rip,
            cs: self.cs,
            rflags: self.rflags,
            rsp: self.rsp,
            ss: self.ss,
        }
    }

    /// The interrupted registers.
    pub fn regs(&self) -> UserRegs {
        UserRegs {
            r8: self.r8,
            r9: self.r9,
            r10: self.r10,
            r11: self.r11,
            r12: self.r12,
            r13: self.r13,
            r14: self.r14,
            r15: self.r15,
            rdi: self.rdi,
            rsi: self.rsi,
            rbp: self.rbp,
            rbx: self.rbx,
            rdx: self.rdx,
            rax: self.rax,
            rcx: self.rcx,
            rsp: self.rsp,
            rip: self.rip,
            rflags: self.rflags,
        }
    }
}

/// Words the ring-0 stubs copy for a `FaultFrame`.
pub const FAULT_FRAME_WORDS: usize = 22;

const _: () = {
    // syscall_entry pushes 16 registers; rsp must stay 16-byte aligned.
    assert!(core::mem::size_of::<SyscallFrame>() == 16 * 8);
    assert!(core::mem::size_of::<FaultFrame>() == FAULT_FRAME_WORDS * 8);
    assert!(core::mem::size_of::<UserRegs>() == 18 * 8);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_made_again_keeps_its_arguments() {
        let f = SyscallFrame {
            rdi: 1,
            rsi: 2,
            rdx: 3,
            r10: 4,
            r8: 5,
            r9: 6,
            rax: 7,
            rip: 8,
            rflags: 0x202,
            rsp: 9,
            ..Default::default()
        };
        let r = f.regs();
        assert_eq!((r.rcx, r.r11), (8, 0x202), "as sysret leaves them");
        let g = SyscallFrame::from_regs(&r);
        assert_eq!(g.args(), [1, 2, 3, 4, 5, 6]);
        assert_eq!((g.rax, g.rip, g.rsp), (7, 8, 9));
    }
}
