//! Hostcalls: how the guest asks the VMM for a service.
//!
//! The guest fills its vCPU's [`HostcallBlock`] (in the per-CPU header, at a
//! guest-physical address the VMM knows), then writes the hostcall number to the
//! doorbell page ([`crate::layout::HOSTCALL_DOORBELL_PHYS`]). That MMIO write exits to
//! the VMM, which reads the block, validates every address and length in it against
//! guest memory, does the work, stores the result in `ret` and resumes the vCPU.
//! One exit costs ~18 µs here, so callers batch (the console buffers output).

/// Most return addresses a `Panic` hostcall carries.
pub const MAX_BACKTRACE: usize = 32;

/// Longest single `Halt` in nanoseconds (an hour; the guest asks again if it needs
/// more). A halt ends at its deadline or at a kick (a waker, a device, a host
/// signal), never on a tick, so an idle VM costs the host no CPU: a thousand VMs
/// that woke once a second each took half a core here (docs/perf.md, Density).
pub const MAX_HALT_NS: u64 = 3_600_000_000_000;

/// Hostcall numbers.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostcall {
    /// Write bytes to the host's stdout or stderr.
    /// `args[0]`: 1 or 2, or descriptor 1 or 2 of a process the host started
    /// (`crate::exec::stream`); `args[1]`: guest-virtual address; `args[2]`: length.
    /// Returns the number of bytes written or a negative errno.
    Write = 1,
    /// The program exited: `args[0]` is its status (0..=255). Does not return.
    Exit = 2,
    /// The program was killed by a signal: `args[0]` signal number, `args[1]` the
    /// faulting instruction, `args[2]` the faulting address (or 0). Does not return.
    Killed = 3,
    /// The kernel failed: `args[0]`/`args[1]` a message (guest-virtual address and
    /// length); `args[2]`/`args[3]` the return addresses of its call stack
    /// (guest-virtual address of an array of u64, and their count, at most
    /// [`MAX_BACKTRACE`]), which the VMM names with the kernel's symbols. Does not
    /// return.
    Panic = 4,
    // (5 was `FaultAddr`, CR2 read by the VMM; the #PF stub reads it since ABI 34.)
    /// Sent by the ring-0 exception stub when an exception cannot be handed to ring 3
    /// (it hit ring 0, or ring 3 was still handling the previous one). No arguments:
    /// the stub trusts nothing, GS included, so the VMM reads the exception frame
    /// (vector, error code, rip, cs, rflags, rsp, ss) from the top of the CPU's IST
    /// stack. Does not return.
    Fatal = 6,
    /// Asks for a host stdin: `args[2]` is the host stream, 0 (the program's, with
    /// `-i`) or `exec::stream(slot, 0)` (that of the process `onering exec` started
    /// in `slot`). The VMM reads at most `args[1]` bytes into
    /// the guest-virtual buffer at `args[0]` when the host has input, then posts the
    /// result in the events page ([`crate::events::result_word`] and
    /// [`crate::events::done_bit`] of the stream's input) and wakes a vCPU. Returns at
    /// once: 0 (accepted), -EBUSY (a request is outstanding), -EBADF (stdin is not
    /// forwarded: no `-i`, or no process holds the slot), -EFAULT (the buffer is not guest memory). The buffer
    /// belongs to the VMM until the result is posted. With a length of 0 it only
    /// watches: the VMM posts [`crate::events::ready_bit`] once the host's stdin
    /// is readable (or at end of file), without reading anything (for `poll`).
    StdinRequest = 7,
    /// Halts this vCPU for at most `args[0]` nanoseconds: its thread sleeps in the
    /// VMM until then or until another vCPU kicks it (the guest cannot `hlt` on
    /// PVM). A kick that came before the halt makes it return at once.
    Halt = 8,
    /// Kicks vCPU `args[0]` out of `Halt` (or makes its next `Halt` return at once);
    /// starts it at the kernel's entry if it has not run yet. Returns 0, or a
    /// negative errno for a vCPU number the VM does not have.
    Kick = 9,
    /// This vCPU has spun long waiting for another vCPU's progress (a lock its
    /// holder keeps, a block another vCPU fills): the VMM gives the calling vCPU
    /// thread's host CPU away once (`sched_yield`), so that a vCPU thread the host
    /// preempted, waiting on the same host CPU, runs sooner. No arguments; the
    /// VMM writes no result (the call may come from any point of the kernel).
    Yield = 15,
    /// Takes the next message the host queued for processes it starts in the VM
    /// (`onering exec`; [`crate::exec`]): the VMM writes it to the guest-virtual
    /// buffer `args[0]` of `args[1]` bytes and returns its length, 0 when none is
    /// left, or -ENOSPC (the message stays queued) when it does not fit.
    ExecTake = 16,
    /// A process the host started began or ended: `args[0]` its slot, `args[1]`
    /// [`crate::exec::STARTED`] with its pid in `args[2]`,
    /// [`crate::exec::ENDED`] with its wait status, or
    /// [`crate::exec::FAILED`] with the errno that kept it from starting. The VMM
    /// tells whoever asked for it and, once it ended, frees the slot. Returns 0
    /// or -EINVAL.
    ExecDone = 17,
    /// `fstat` of the host's standard stream `args[0]` (0, 1, 2): the VMM writes a
    /// [`crate::HostStat`] to the guest-virtual address `args[1]`. Returns 0 or a
    /// negative errno (-EBADF for a stream the program does not get from the host:
    /// stdin without `-i`).
    StdioStat = 10,
    /// `lseek(args[0], args[1] as i64, args[2])` on the host's standard stream
    /// `args[0]`: the new offset or a negative errno (-ESPIPE for a pipe or a
    /// terminal, as Linux).
    StdioSeek = 11,
    /// A terminal `ioctl` on the host's standard stream `args[0]`: request
    /// `args[1]` (one of [`crate::stdio::IOCTLS`]) with its argument at the
    /// guest-virtual address `args[2]` (read or written by the VMM, as the request
    /// says). Returns the ioctl's result or a negative errno.
    StdioIoctl = 12,
    /// A host file operation (`-v` volumes, `--rootfs DIR`): `args[0]` is the
    /// operation ([`crate::hostfs`] says each one's arguments), the rest its
    /// arguments. Returns a result or a negative errno.
    Fs = 13,
    /// Plans the rewriting of the `syscall` instructions of an ELF file the kernel
    /// maps executable (`execve`, the dynamic loader, a library): `args[0]`/`args[1]`
    /// an array of [`RewritePiece`]s and their count (at most
    /// [`MAX_REWRITE_PIECES`]; guest-virtual): the whole file, in order, in pieces of
    /// kernel memory (at most [`MAX_REWRITE_FILE`] bytes in all),
    /// `args[5]` the load bias to plan at and `args[2]` where the trampolines go
    /// (the plan holds at any other bias too, everything moved by the difference:
    /// its jumps are relative), `args[3]`/`args[4]` the output buffer. The VMM writes a [`crate::rewrite`] plan there
    /// and returns its length; -ENOSPC if it does not fit (the guest retries with
    /// more), -ENOEXEC if the file is not an x86-64 executable or shared object.
    Rewrite = 20,
    // (14 was `SetRoot`, the address-space switch through the VMM; the kernel
    // loads CR3 itself since ABI 33: arch's supervisor call.)
    /// Backs the 2 MiB chunk of guest RAM at guest-physical `args[0]` (2 MiB
    /// aligned) with one host huge page now, merging the small pages the host
    /// gave it (`MADV_COLLAPSE`): the guest asks before it copies or zeroes a whole
    /// chunk that lies where the host backs RAM with small pages (the first
    /// program's stack and image, which the VMM wrote before boot). Each small page
    /// costs its own shadow fill when first touched through a mapping (~15 µs
    /// here), so a whole chunk costs ~7.7 ms; after the merge, one fill covers it.
    /// Returns 0, -EINVAL for a range that is not a chunk of guest RAM, or the
    /// host's error (the chunk stays as it was: only slower).
    HugePages = 18,
    /// `--trace` lines or the `--stats` table: `args[0]` the kind
    /// ([`crate::trace`]), `args[1]`/`args[2]` the data (guest-virtual address and
    /// length). Returns 0 or a negative errno. Untrusted as any output.
    Trace = 30,
    /// `--gdb`: the program stopped on a breakpoint or a single step (or a step
    /// ran into the kernel through a rewritten site). `args[0]` the vector (1 or
    /// 3), `args[1]` the guest-virtual address of the stopped thread's
    /// [`crate::debug::Regs`] (a kernel buffer the VMM may rewrite: gdb changes
    /// registers), `args[2]`/`args[3]` an array of [`crate::debug::Thread`] (every
    /// live thread) and its length (at most [`crate::debug::MAX_THREADS`]),
    /// `args[4]` the stopped thread's id. All vCPUs stop until gdb resumes. Returns
    /// what the thread does next ([`crate::debug::resume`]), or -ENODEV when no
    /// debugger listens (the trap is then the program's SIGTRAP).
    Debug = 31,
}

/// The largest file the VMM plans a rewrite for (larger ones run trapping).
pub const MAX_REWRITE_FILE: u64 = 64 << 20;
/// Most pieces a [`Hostcall::Rewrite`] file comes in.
pub const MAX_REWRITE_PIECES: u64 = 4096;

/// A piece of a file handed to [`Hostcall::Rewrite`]: `len` bytes at guest-virtual
/// `addr`. (Kernel memory has no block as large as a big program, 33 MiB for gcc's
/// `cc1`, once the program's memory has split it up.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RewritePiece {
    pub addr: u64,
    pub len: u64,
}

impl Hostcall {
    pub const fn from_u64(n: u64) -> Option<Self> {
        Some(match n {
            1 => Self::Write,
            2 => Self::Exit,
            3 => Self::Killed,
            4 => Self::Panic,
            6 => Self::Fatal,
            7 => Self::StdinRequest,
            8 => Self::Halt,
            9 => Self::Kick,
            10 => Self::StdioStat,
            11 => Self::StdioSeek,
            12 => Self::StdioIoctl,
            13 => Self::Fs,
            15 => Self::Yield,
            16 => Self::ExecTake,
            17 => Self::ExecDone,
            18 => Self::HugePages,
            20 => Self::Rewrite,
            30 => Self::Trace,
            31 => Self::Debug,
            _ => return None,
        })
    }
}

/// Arguments and result of one hostcall.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostcallBlock {
    pub args: [u64; 6],
    pub ret: u64,
}

/// Byte offset of `ret` in [`HostcallBlock`].
pub const RET_OFFSET: u64 = 48;

const _: () = assert!(core::mem::offset_of!(HostcallBlock, ret) == RET_OFFSET as usize);

/// A hostcall without an exit (`Fs` only, today): each vCPU has a [`PollSlot`] at
/// [`POLL_OFFSET`] in its per-CPU page, which a VMM thread polls while host-file
/// calls keep coming. An exit costs ~30 µs here and a host file call a few, so a
/// burst of them (a metadata loop, a database commit, a loader opening libraries)
/// would otherwise be mostly exits.
///
/// The VMM sets `open` while it polls. A vCPU that finds it open writes `args` and
/// `root` (the page tables its guest-virtual arguments translate through), then
/// `state` = [`POLL_POSTED`]. The VMM takes the call by moving `state` from
/// POSTED to [`POLL_TAKEN`] (compare-and-swap), serves it as it would the same
/// hostcall's exit, writes `ret`, then `state` = [`POLL_DONE`]; the vCPU reads
/// `ret` and sets `state` back to [`POLL_IDLE`]. A vCPU whose call is not taken
/// soon (the VMM's thread stopped polling, or the host did not run it) takes it
/// back, POSTED to IDLE by compare-and-swap, and rings the doorbell instead: a
/// call is served exactly once, whichever side wins. Nothing in a slot is trusted:
/// `root` and every address are checked as an exit's are.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollSlot {
    pub state: u64,
    /// Non-zero while the VMM polls (written by the VMM only).
    pub open: u64,
    /// The hostcall number.
    pub nr: u64,
    /// The vCPU's page-table root (its CR3), written by the guest at each switch,
    /// before it loads it: the VMM translates the vCPU's guest-virtual arguments
    /// through it, for polled calls and exits alike (0: the boot root).
    pub root: u64,
    pub args: [u64; 6],
    pub ret: u64,
}

pub const POLL_IDLE: u64 = 0;
pub const POLL_POSTED: u64 = 1;
pub const POLL_TAKEN: u64 = 2;
pub const POLL_DONE: u64 = 3;

/// Where a vCPU's [`PollSlot`] lies in its per-CPU page (past the steal-time
/// record), and the byte offsets of its words.
pub const POLL_OFFSET: u64 = 0xc40;
pub mod poll_offsets {
    pub const STATE: u64 = 0;
    pub const OPEN: u64 = 8;
    pub const NR: u64 = 16;
    pub const ROOT: u64 = 24;
    pub const ARGS: u64 = 32;
    pub const RET: u64 = 80;
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(offset_of!(PollSlot, open) == poll_offsets::OPEN as usize);
    assert!(offset_of!(PollSlot, nr) == poll_offsets::NR as usize);
    assert!(offset_of!(PollSlot, root) == poll_offsets::ROOT as usize);
    assert!(offset_of!(PollSlot, args) == poll_offsets::ARGS as usize);
    assert!(offset_of!(PollSlot, ret) == poll_offsets::RET as usize);
    assert!(POLL_OFFSET >= crate::STEAL_TIME_OFFSET + 64);
    assert!(POLL_OFFSET as usize + size_of::<PollSlot>() <= crate::layout::PERCPU_STRIDE as usize);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip() {
        for h in [
            Hostcall::Write,
            Hostcall::Exit,
            Hostcall::Killed,
            Hostcall::Panic,
            Hostcall::Fatal,
            Hostcall::StdinRequest,
            Hostcall::Halt,
            Hostcall::Kick,
            Hostcall::StdioStat,
            Hostcall::StdioSeek,
            Hostcall::StdioIoctl,
            Hostcall::Fs,
            Hostcall::Rewrite,
            Hostcall::Trace,
            Hostcall::Debug,
            Hostcall::ExecTake,
            Hostcall::ExecDone,
            Hostcall::HugePages,
        ] {
            assert_eq!(Hostcall::from_u64(h as u64), Some(h));
        }
        assert_eq!(Hostcall::from_u64(0), None);
        assert_eq!(Hostcall::from_u64(u64::MAX), None);
    }
}
