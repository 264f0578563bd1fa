//! Signals: what a signal does by default, and the x86-64 Linux signal frame
//! (`struct rt_sigframe`: return address, `ucontext`, `siginfo`, then the extended
//! FP state) that a handler gets and `rt_sigreturn` reads back.
//!
//! Pure layout code, tested on the host; the task layer (`task::signal`) decides
//! when to deliver and writes these bytes to the user stack.

pub use onering_arch::UserRegs as Regs;

/// Signal numbers used by the kernel.
pub mod sig {
    pub const SIGILL: u64 = 4;
    pub const SIGTRAP: u64 = 5;
    pub const SIGBUS: u64 = 7;
    pub const SIGFPE: u64 = 8;
    pub const SIGKILL: u64 = 9;
    pub const SIGSEGV: u64 = 11;
    pub const SIGPIPE: u64 = 13;
    pub const SIGALRM: u64 = 14;
    pub const SIGCHLD: u64 = 17;
    pub const SIGCONT: u64 = 18;
    pub const SIGSTOP: u64 = 19;
    pub const SIGTSTP: u64 = 20;
    pub const SIGTTIN: u64 = 21;
    pub const SIGTTOU: u64 = 22;
    pub const SIGURG: u64 = 23;
    pub const SIGVTALRM: u64 = 26;
    pub const SIGPROF: u64 = 27;
    pub const SIGWINCH: u64 = 28;
}

/// `sa_flags` bits the kernel acts on (the handler is always called with siginfo
/// and returns through `sa_restorer`).
pub mod sa {
    pub const RESTART: u64 = 0x1000_0000;
    pub const ONSTACK: u64 = 0x0800_0000;
    pub const NODEFER: u64 = 0x4000_0000;
    pub const RESETHAND: u64 = 0x8000_0000;
    /// SIGCHLD only: no SIGCHLD when a child stops or continues.
    pub const NOCLDSTOP: u64 = 1;
}

/// `si_code` values.
pub mod code {
    pub const SI_USER: i32 = 0;
    pub const SI_TKILL: i32 = -6;
    pub const SI_KERNEL: i32 = 0x80;
    pub const SEGV_MAPERR: i32 = 1;
    pub const ILL_ILLOPN: i32 = 2;
    pub const FPE_INTDIV: i32 = 1;
    pub const BUS_ADRALN: i32 = 1;
    pub const TRAP_BRKPT: i32 = 1;
    /// SIGCHLD's: a child exited, was killed, stopped, continued.
    pub const CLD_EXITED: i32 = 1;
    pub const CLD_KILLED: i32 = 2;
    pub const CLD_STOPPED: i32 = 5;
    pub const CLD_CONTINUED: i32 = 6;
}

pub const SIG_DFL: u64 = 0;
pub const SIG_IGN: u64 = 1;
pub const SS_ONSTACK: u32 = 1;
pub const SS_DISABLE: u32 = 2;

/// The bit of signal `s` (1..=64) in a mask.
pub const fn bit(s: u64) -> u64 {
    1 << (s - 1)
}

/// KILL and STOP can be neither caught nor blocked.
pub const UNBLOCKABLE: u64 = bit(sig::SIGKILL) | bit(sig::SIGSTOP);

/// The job-control stop signals.
pub const STOP_SIGNALS: u64 = bit(sig::SIGSTOP) | bit(sig::SIGTSTP) | bit(sig::SIGTTIN) | bit(sig::SIGTTOU);

/// What happens to a signal nobody handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Default {
    /// The program ends as killed by the signal.
    Terminate,
    Ignore,
    /// The process stops until SIGCONT (`task::job`).
    Stop,
}

/// Linux's default action (SIGCONT's is to ignore: sending it is what continues).
pub fn default_action(s: u64) -> Default {
    use sig::*;
    match s {
        SIGCHLD | SIGCONT | SIGURG | SIGWINCH => Default::Ignore,
        SIGSTOP | SIGTSTP | SIGTTIN | SIGTTOU => Default::Stop,
        _ => Default::Terminate,
    }
}

/// What a handler learns about the signal (`siginfo_t`, the fields we fill).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    pub signo: u64,
    pub code: i32,
    /// Sender pid and uid (kill, tgkill; the child for SIGCHLD).
    pub pid: u32,
    pub uid: u32,
    /// SIGCHLD's `si_status`: the exit code, or the signal that killed,
    /// stopped or continued the child.
    pub status: i32,
    /// Faulting address (SIGSEGV, SIGBUS, SIGILL, SIGFPE).
    pub addr: u64,
    /// The exception vector and error code, for `sigcontext.trapno`/`err`.
    pub trapno: u64,
    pub err: u64,
}

/// Offsets in the frame.
pub const UC_OFFSET: u64 = 8;
const MCONTEXT_OFFSET: usize = 8 + 40;
const SIGMASK_OFFSET: usize = 8 + 40 + 256;
pub const INFO_OFFSET: u64 = 8 + 304;
/// `struct rt_sigframe` without the FP state.
pub const FRAME_SIZE: usize = 8 + 304 + 128;
/// `uc_flags`: the FP state is in XSAVE format.
const UC_FP_XSTATE: u64 = 1;
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// Where the XSAVE area's software-reserved bytes start (Linux's `_fpx_sw_bytes`).
pub const SW_BYTES_OFFSET: usize = 464;
/// The program's user-mode code and stack selectors, for `sigcontext.cs`/`ss`.
const USER_CS: u64 = onering_abi::layout::USER_CS as u64;
const USER_SS: u64 = onering_abi::layout::USER_DS as u64;

/// Where a frame goes: `sp` is the interrupted stack pointer, `alt` the alternate
/// stack (sp, size) if the handler runs on it, `fp_size` the XSAVE area's size.
/// Returns (frame address, FP-state address).
pub fn place(sp: u64, alt: Option<(u64, u64)>, fp_size: u64) -> (u64, u64) {
    // Below the red zone, or at the top of the alternate stack.
    let top = match alt {
        Some((base, size)) => base.wrapping_add(size),
        None => sp.wrapping_sub(128),
    };
    // The FP state (64-byte aligned, plus Linux's 4-byte end marker), then the frame,
    // placed so that rsp + 8 is 16-byte aligned at the handler, as after a call.
    let fp = top.wrapping_sub(fp_size + 4) & !63;
    let frame = (fp.wrapping_sub(FRAME_SIZE as u64) & !15).wrapping_sub(8);
    (frame, fp)
}

/// Everything about the frame besides the FP state.
pub struct Frame<'a> {
    pub regs: &'a Regs,
    pub info: &'a Info,
    pub restorer: u64,
    /// The mask to restore on return.
    pub old_mask: u64,
    /// The alternate stack at delivery (sp, flags, size) for `uc_stack`.
    pub altstack: (u64, u32, u64),
    pub fp: u64,
}

fn put(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The bytes of `struct rt_sigframe` for `f`.
pub fn encode(f: &Frame) -> [u8; FRAME_SIZE] {
    let mut b = [0u8; FRAME_SIZE];
    put(&mut b, 0, f.restorer);
    let uc = UC_OFFSET as usize;
    put(&mut b, uc, if f.fp != 0 { UC_FP_XSTATE } else { 0 });
    put(&mut b, uc + 16, f.altstack.0);
    b[uc + 24..uc + 28].copy_from_slice(&f.altstack.1.to_le_bytes());
    put(&mut b, uc + 32, f.altstack.2);
    let m = MCONTEXT_OFFSET;
    for (i, v) in f.regs.to_words().iter().enumerate() {
        put(&mut b, m + i * 8, *v);
    }
    // cs, gs, fs, ss (16 bits each).
    put(&mut b, m + 144, USER_CS | (USER_SS << 48));
    put(&mut b, m + 152, f.info.err);
    put(&mut b, m + 160, f.info.trapno);
    put(&mut b, m + 168, f.old_mask);
    put(&mut b, m + 176, f.info.addr);
    put(&mut b, m + 184, f.fp);
    put(&mut b, SIGMASK_OFFSET, f.old_mask);
    let si = INFO_OFFSET as usize;
    b[si..si + INFO_SIZE].copy_from_slice(&f.info.encode());
    b
}

/// `sizeof(siginfo_t)`.
pub const INFO_SIZE: usize = 128;

impl Info {
    /// The bytes of `siginfo_t` (for a handler's frame and `rt_sigtimedwait`).
    pub fn encode(&self) -> [u8; INFO_SIZE] {
        let mut b = [0u8; INFO_SIZE];
        b[0..4].copy_from_slice(&(self.signo as u32).to_le_bytes());
        b[8..12].copy_from_slice(&self.code.to_le_bytes());
        if self.addr != 0 || matches!(self.signo, sig::SIGSEGV | sig::SIGBUS | sig::SIGILL | sig::SIGFPE) {
            b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        } else {
            b[16..20].copy_from_slice(&self.pid.to_le_bytes());
            b[20..24].copy_from_slice(&self.uid.to_le_bytes());
        }
        if self.signo == sig::SIGCHLD {
            b[24..28].copy_from_slice(&self.status.to_le_bytes());
        }
        b
    }
}

/// Linux's `_fpx_sw_bytes`, written into the XSAVE area's reserved bytes so that
/// programs that parse the FP state find it; plus the end marker at `fp + size`.
pub fn sw_bytes(xsave_size: u32, xfeatures: u64) -> [u8; 48] {
    let mut b = [0u8; 48];
    b[0..4].copy_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
    b[4..8].copy_from_slice(&(xsave_size + 4).to_le_bytes());
    b[8..16].copy_from_slice(&xfeatures.to_le_bytes());
    b[16..20].copy_from_slice(&xsave_size.to_le_bytes());
    b
}

pub const fn end_marker() -> [u8; 4] {
    FP_XSTATE_MAGIC2.to_le_bytes()
}

/// What `rt_sigreturn` restores from a `ucontext` (the bytes from `UC_OFFSET` on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restored {
    pub regs: Regs,
    pub mask: u64,
    pub fp: u64,
    pub altstack: (u64, u32, u64),
}

/// Bytes of the `ucontext` that `decode` reads.
pub const UCONTEXT_SIZE: usize = 304;

/// Reads back a `ucontext` (as [`encode`] wrote it, possibly edited by the handler).
pub fn decode(uc: &[u8; UCONTEXT_SIZE]) -> Restored {
    let m = MCONTEXT_OFFSET - 8;
    let r = |i: usize| get(uc, m + i * 8);
    let regs = Regs::from_words(core::array::from_fn(r));
    let mut flags = [0u8; 4];
    flags.copy_from_slice(&uc[24..28]);
    Restored {
        regs,
        mask: get(uc, SIGMASK_OFFSET - 8) & !UNBLOCKABLE,
        fp: get(uc, m + 184),
        altstack: (get(uc, 16), u32::from_le_bytes(flags), get(uc, 32)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip() {
        let regs = Regs {
            r8: 8,
            r15: 15,
            rdi: 1,
            rax: 0xdead,
            rcx: 7,
            rsp: 0x7000,
            rip: 0x40_1000,
            rflags: 0x246,
            ..Regs::default()
        };
        let info =
            Info { signo: sig::SIGSEGV, code: code::SEGV_MAPERR, addr: 0x10, trapno: 14, err: 4, ..Info::default() };
        let f = Frame {
            regs: &regs,
            info: &info,
            restorer: 0x40_2000,
            old_mask: 0x5,
            altstack: (0x9000, 0, 0x4000),
            fp: 0x6000,
        };
        let b = encode(&f);
        assert_eq!(get(&b, 0), 0x40_2000);
        assert_eq!(u32::from_le_bytes(b[312..316].try_into().unwrap()), 11);
        assert_eq!(get(&b, INFO_OFFSET as usize + 16), 0x10);
        let uc: [u8; UCONTEXT_SIZE] = b[8..8 + UCONTEXT_SIZE].try_into().unwrap();
        let r = decode(&uc);
        assert_eq!(r.regs, regs);
        assert_eq!(r.mask, 0x5);
        assert_eq!(r.fp, 0x6000);
        assert_eq!(r.altstack, (0x9000, 0, 0x4000));
    }

    #[test]
    fn placement_keeps_the_red_zone_and_call_alignment() {
        let (frame, fp) = place(0x7fff_0000, None, 832);
        assert!(fp + 836 <= 0x7fff_0000 - 128);
        assert_eq!(fp % 64, 0);
        assert!(frame + FRAME_SIZE as u64 <= fp);
        assert_eq!((frame + 8) % 16, 0);
        let (frame, fp) = place(0x1234, Some((0x10_0000, 0x8000)), 832);
        assert!(fp + 836 <= 0x10_8000 && frame > 0x10_0000);
    }

    #[test]
    fn sigchld_carries_its_status() {
        let i = Info { signo: sig::SIGCHLD, code: code::CLD_STOPPED, pid: 7, uid: 1000, status: 19, ..Info::default() };
        let b = i.encode();
        assert_eq!(&b[8..12], &5i32.to_le_bytes());
        assert_eq!(&b[16..20], &7u32.to_le_bytes());
        assert_eq!(&b[24..28], &19i32.to_le_bytes());
        assert_eq!(default_action(sig::SIGTSTP), Default::Stop);
        assert_eq!(default_action(sig::SIGCONT), Default::Ignore);
    }

    #[test]
    fn sigreturn_cannot_unblock_kill() {
        let regs = Regs::default();
        let info = Info::default();
        let f = Frame { regs: &regs, info: &info, restorer: 0, old_mask: u64::MAX, altstack: (0, 2, 0), fp: 0 };
        let uc: [u8; UCONTEXT_SIZE] = encode(&f)[8..8 + UCONTEXT_SIZE].try_into().unwrap();
        assert_eq!(decode(&uc).mask, !UNBLOCKABLE);
    }
}
