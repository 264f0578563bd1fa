//! What the gdb stub (`--gdb`) and the kernel exchange when the program stops on a
//! breakpoint or a single step (`Hostcall::Debug`): the stopped thread's
//! registers, which gdb may change, and every live thread, so gdb lists threads,
//! not vCPUs. The VMM finds a thread's registers from these: the stopped thread's
//! from [`Regs`]; a thread running the program on a vCPU from the vCPU (KVM's
//! registers, as the VMM stopped it); any other from the frame at the top of its
//! kernel stack (`kstack_top`), where the way into the kernel left the program's
//! registers (a system-call frame, or an exception or interrupt frame).

/// Most threads one `Debug` hostcall lists (more are left out of gdb's list).
pub const MAX_THREADS: usize = 1024;

/// The program's registers at the stop, in the order of the kernel's `UserRegs`,
/// plus the FS base (read only).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
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
    pub fs_base: u64,
}

/// One live thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thread {
    pub tid: u64,
    pub pid: u64,
    /// The vCPU it runs on, or [`NOT_RUNNING`].
    pub cpu: u64,
    /// The top of its kernel stack (kernel half, the same in every address space).
    pub kstack_top: u64,
    /// Its scheduling state: [`state::RUNNING`], ...
    pub state: u64,
}

/// [`Thread::cpu`] of a thread no vCPU runs.
pub const NOT_RUNNING: u64 = u64::MAX;

/// [`Thread::state`].
pub mod state {
    pub const RUNNING: u64 = 0;
    pub const RUNNABLE: u64 = 1;
    pub const SLEEPING: u64 = 2;
    pub const OTHER: u64 = 3;
}

/// What `Hostcall::Debug` returns: the low byte says how the thread goes on,
/// bits 8-15 a signal to deliver to it first (0: none).
pub mod resume {
    /// Run on.
    pub const CONTINUE: u64 = 0;
    /// Run one instruction, then trap again (the trap flag, set by the return).
    pub const STEP: u64 = 1;
    /// The signal in bits 8-15 of a result.
    pub const fn signal(ret: u64) -> u64 {
        (ret >> 8) & 0xff
    }
}

/// `Hostcall::Debug`'s `args[0]`: a single-step trap and a breakpoint.
pub const VECTOR_DEBUG: u64 = 1;
pub const VECTOR_BREAKPOINT: u64 = 3;

const _: () = assert!(core::mem::size_of::<Regs>() == 19 * 8);
const _: () = assert!(core::mem::size_of::<Thread>() == 5 * 8);
