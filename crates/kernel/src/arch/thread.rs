//! The machine side of threads: switching kernel stacks, preparing a new thread's
//! stack, returning to the program with every register chosen (signal handlers and
//! `rt_sigreturn`; the assembly is in entry.rs), saving and restoring the extended (FP/vector) state, and atomic
//! access to futex words.
//!
//! A thread switch happens in ring 3 between two kernel stacks: `switch_context`
//! pushes the callee-saved registers, stores the stack pointer, marks the old thread
//! as off the CPU (another CPU may then resume it), and pops the new thread's.

use crate::signal::Regs;
use crate::syscall::SyscallFrame;
use core::arch::global_asm;
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicBool, AtomicU64};

/// Where, in each CPU's per-CPU page, the kernel keeps the registers
/// `onering_full_return` (entry.rs) loads: past the ABI header, in the part the
/// kernel owns.
pub(super) const FULL_REGS: usize = 0x800;

/// Where, in each CPU's per-CPU page, the kernel keeps the running thread's address.
pub(super) const CURRENT_THREAD: usize = 0x900;
/// Set by the preemption stub when an interrupt landed in the kernel's own code:
/// the kernel looks at its run queue on its way back to the program.
pub(super) const RESCHED: usize = 0x908;
/// When (monotonic ns) this CPU's APIC timer is armed to fire; 0 when it is not.
/// The preemption stub clears it.
pub(super) const TIMER_ARMED: usize = 0x910;

/// A word of this CPU's per-CPU page at `offset` (past the ABI header, in the part
/// the kernel owns): the GS base points at the page, which the VMM mapped for the
/// kernel's whole life, and only this CPU (and its interrupt stubs) touch it.
fn percpu_word(offset: usize) -> *mut u64 {
    (super::percpu_ptr() as u64 + offset as u64) as *mut u64
}

/// Whether an interrupt asked this CPU to look at its run queue.
#[inline(always)]
pub fn resched_pending() -> bool {
    let v: u64;
    // An aligned load through the GS base of a word of this CPU's page (see
    // `percpu_word`); it changes nothing.
    // SAFETY: as explained above.
    unsafe {
        core::arch::asm!("mov {}, gs:[{}]", out(reg) v, const RESCHED, options(nostack, readonly, preserves_flags))
    };
    v != 0
}

/// Clears the request [`resched_pending`] reports; returns whether it was set.
pub fn take_resched() -> bool {
    // An aligned word of this CPU's mapped page (see `percpu_word`), used only as
    // an atomic; an interrupt on this CPU may set it concurrently, which the swap
    // does not lose.
    // SAFETY: as explained above.
    unsafe { (*(percpu_word(RESCHED) as *const AtomicU64)).swap(0, core::sync::atomic::Ordering::Relaxed) != 0 }
}

/// When this CPU's timer fires (0: not armed).
pub fn timer_armed() -> u64 {
    // An aligned, mapped word that only this CPU touches (see `percpu_word`).
    // SAFETY: as explained above.
    unsafe { percpu_word(TIMER_ARMED).read_volatile() }
}

/// Records when this CPU's timer fires (0: not armed).
pub fn set_timer_armed(at: u64) {
    // An aligned, mapped word that only this CPU and its preemption stub touch
    // (see `percpu_word`); a plain store cannot break anything else.
    // SAFETY: as explained above.
    unsafe { percpu_word(TIMER_ARMED).write_volatile(at) }
}

const _: () = assert!(FULL_REGS + core::mem::size_of::<Regs>() <= CURRENT_THREAD);
const _: () = assert!(TIMER_ARMED + 8 <= onering_abi::layout::PERCPU_STRIDE as usize);

/// Records `t` as the thread this CPU runs (None: its idle loop).
pub fn set_current(t: Option<&'static crate::sched::Thread>) {
    let p = t.map_or(0, |t| t as *const crate::sched::Thread as u64);
    let pc = super::percpu_ptr() as *mut u8;
    // The slot lies in this CPU's per-CPU page, past the ABI header.
    // SAFETY: as explained above.
    unsafe { (pc.add(CURRENT_THREAD) as *mut u64).write_volatile(p) }
}

/// The thread this CPU runs, in one load through the GS base.
#[inline(always)]
pub fn current() -> Option<&'static crate::sched::Thread> {
    let p: u64;
    // Reads this CPU's slot, which only `set_current` writes, always with the
    // address of a thread structure; those are leaked (`sched`), never freed.
    // SAFETY: as explained above.
    unsafe {
        core::arch::asm!("mov {}, gs:[{}]", out(reg) p, const CURRENT_THREAD, options(nostack, readonly, preserves_flags));
        (p as *const crate::sched::Thread).as_ref()
    }
}

global_asm!(
    r#"
    .section .text.entry, "ax"
    // switch_context(save: *mut u64 (rdi), next: u64 (rsi), on_cpu: *mut u8 (rdx))
    .global onering_switch_context
onering_switch_context:
    push %rbp
    push %rbx
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, (%rdi)
    // x86 keeps stores in order: the saved rsp is visible before on_cpu drops.
    movb $0, (%rdx)
    mov %rsi, %rsp
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbx
    pop %rbp
    ret

"#,
    options(att_syntax)
);

// SAFETY: the assembly above and in entry.rs defines both symbols with these
// signatures (System V arguments; onering_full_return never returns).
extern "C" {
    fn onering_switch_context(save: *mut u64, next: u64, on_cpu: *mut u8);
    fn onering_full_return() -> !;
}

/// Saves the running context's stack pointer in `save`, clears `on_cpu` once it is
/// saved, and continues the context whose stack pointer is `next`. Returns when
/// something switches back to the saved context.
pub fn switch_context(save: &AtomicU64, next: u64, on_cpu: &AtomicBool) {
    // `next` is a stack pointer saved by this function (or prepared by
    // `init_stack`) for a context that is not running anywhere: the scheduler
    // waited for its on_cpu to drop. The pointers are to atomics that live as long
    // as their thread, which never ends while it runs here.
    // SAFETY: as explained above.
    unsafe { onering_switch_context(save.as_ptr(), next, on_cpu.as_ptr() as *mut u8) }
}

/// Writes a new thread's first kernel-stack contents below `top`: the system-call
/// frame it returns to the program with (as `syscall_entry` pushes it), the address
/// of the system-call return path, and six zero callee-saved registers for
/// `switch_context` to pop. Returns the stack pointer to give `switch_context`.
pub fn init_stack(top: u64, frame: &SyscallFrame) -> u64 {
    // SAFETY: entry.rs defines this label (the system-call exit path); only its
    // address is taken.
    extern "C" {
        static syscall_return: u8;
    }
    const CALLEE_SAVED: u64 = 6;
    let frame_at = top - core::mem::size_of::<SyscallFrame>() as u64;
    let sp = frame_at - (CALLEE_SAVED + 1) * 8;
    // [sp, top) lies in a kernel stack the scheduler owns and nobody runs on yet
    // (fresh, or of a thread that finished and is off every CPU).
    // SAFETY: as explained above.
    unsafe {
        let p = sp as *mut u64;
        for i in 0..CALLEE_SAVED as usize {
            p.add(i).write(0);
        }
        p.add(CALLEE_SAVED as usize).write(core::ptr::addr_of!(syscall_return) as u64);
        (frame_at as *mut SyscallFrame).write(*frame);
    }
    sp
}

/// Returns to the program with exactly `regs` (never comes back).
pub fn full_return(regs: &Regs) -> ! {
    let pc = super::percpu_ptr() as *mut u8;
    // FULL_REGS lies in this CPU's per-CPU page, which the kernel owns past the
    // ABI header (room for Regs before CURRENT_THREAD); nothing else on this CPU
    // uses it until the jump below.
    // SAFETY: as explained above.
    unsafe {
        (pc.add(FULL_REGS) as *mut Regs).write_volatile(*regs);
        onering_full_return()
    }
}

/// A 64-byte aligned piece of an XSAVE area.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Align64(pub [u8; 64]);

/// Whether the CPU has XSAVEOPT (set once at boot by [`xsave_size`]).
static XSAVEOPT: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The XSAVE area size for the enabled features (CPUID 0xD), and those features.
/// Also notes whether XSAVEOPT is there.
pub fn xsave_size() -> (u32, u64) {
    // cpuid is unprivileged (here it exits to the hypervisor, once at boot).
    let r = core::arch::x86_64::__cpuid_count(0xd, 0);
    let opt = core::arch::x86_64::__cpuid_count(0xd, 1).eax & 1 != 0;
    XSAVEOPT.store(opt, core::sync::atomic::Ordering::Relaxed);
    let xcr0: u64;
    // SAFETY: xgetbv reads XCR0; the VMM set CR4.OSXSAVE.
    unsafe {
        let (lo, hi): (u32, u32);
        core::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi, options(nomem, nostack));
        xcr0 = u64::from(lo) | (u64::from(hi) << 32);
    }
    (r.ebx, xcr0)
}

/// Saves the program's extended state into `area` (big enough: see [`xsave_size`]).
/// With XSAVEOPT, only what is in use and changed since `area` was last loaded
/// is written: components in their initial state (AVX never used, say) and
/// components untouched since the thread was switched in cost nothing. That is
/// sound because the kernel never writes a thread's area between loading and
/// saving it (a reused area is always loaded before it is saved again).
pub fn xsave(area: &mut [Align64]) {
    // `area` is 64-byte aligned and as large as CPUID says XSAVE writes. The
    // kernel itself is built without SSE, so the registers hold the program's state.
    // SAFETY: as explained above.
    unsafe {
        if XSAVEOPT.load(core::sync::atomic::Ordering::Relaxed) {
            core::arch::asm!("xsaveopt64 [{}]", in(reg) area.as_mut_ptr(), in("eax") u32::MAX, in("edx") u32::MAX, options(nostack))
        } else {
            core::arch::asm!("xsave64 [{}]", in(reg) area.as_mut_ptr(), in("eax") u32::MAX, in("edx") u32::MAX, options(nostack))
        }
    }
}

/// Loads extended state saved by [`xsave`].
pub fn xrstor(area: &[Align64]) {
    // `area` holds a valid XSAVE image written by `xsave` (or zeroed: an all-zero
    // header means every component is in its initial state).
    // SAFETY: as explained above.
    unsafe {
        core::arch::asm!("xrstor64 [{}]", in(reg) area.as_ptr(), in("eax") u32::MAX, in("edx") u32::MAX, options(nostack))
    }
}

/// Saves the extended state to user memory at `addr` (64-byte aligned, `size`
/// bytes, checked writable by the caller through the address space).
pub fn xsave_user(space: &super::UserSpace, addr: u64, size: u64) -> Result<(), crate::errno::Errno> {
    if !addr.is_multiple_of(64) || size < 576 {
        return Err(crate::errno::Errno::EFAULT);
    }
    space.check(addr, size, true)?;
    // The range is mapped and writable user memory, aligned for XSAVE. XSAVE
    // writes only XSTATE_BV of the 64-byte header: clear the rest first (XRSTOR
    // refuses a header with anything in its reserved bytes).
    // SAFETY: as explained above.
    unsafe {
        core::ptr::write_bytes((addr + 512) as *mut u8, 0, 64);
        core::arch::asm!("xsave64 [{}]", in(reg) addr, in("eax") u32::MAX, in("edx") u32::MAX, options(nostack))
    }
    Ok(())
}

/// Loads extended state from user memory at `addr` after checking it: an XSAVE
/// image whose header is invalid would fault in the kernel, so the header's
/// reserved bytes must be zero and its feature bits within `xcr0`.
pub fn xrstor_user(space: &super::UserSpace, addr: u64, size: u64, xcr0: u64) -> Result<(), crate::errno::Errno> {
    use crate::errno::Errno;
    if !addr.is_multiple_of(64) || size < 576 {
        return Err(Errno::EFAULT);
    }
    let img = super::user_slice(space, addr, size)?;
    let word = |o: usize| u64::from_le_bytes(img[o..o + 8].try_into().unwrap_or_default());
    // Legacy area: MXCSR (offset 24) must not set reserved bits.
    let mxcsr = u32::from_le_bytes(img[24..28].try_into().unwrap_or_default());
    let xstate_bv = word(512);
    let xcomp_bv = word(520);
    if mxcsr & 0xffff_0000 != 0
        || xstate_bv & !xcr0 != 0
        || xcomp_bv != 0
        || (528..576).step_by(8).any(|o| word(o) != 0)
    {
        return Err(Errno::EFAULT);
    }
    // Checked above: mapped, aligned, and a header XRSTOR accepts.
    // SAFETY: as explained above.
    unsafe { core::arch::asm!("xrstor64 [{}]", in(reg) addr, in("eax") u32::MAX, in("edx") u32::MAX, options(nostack)) }
    Ok(())
}

/// Atomically reads the user word at `addr` (checked through `space`).
pub fn user_load_u32(space: &super::UserSpace, addr: u64) -> Result<u32, crate::errno::Errno> {
    if !addr.is_multiple_of(4) {
        return Err(crate::errno::Errno::EINVAL);
    }
    space.check(addr, 4, false)?;
    // Checked: a mapped, aligned user word.
    // SAFETY: as explained above.
    Ok(unsafe { (*(addr as *const core::sync::atomic::AtomicU32)).load(core::sync::atomic::Ordering::SeqCst) })
}

/// Atomically replaces the user word at `addr` with `f(old)`; returns the old value.
pub fn user_update_u32(
    space: &super::UserSpace,
    addr: u64,
    f: impl Fn(u32) -> u32,
) -> Result<u32, crate::errno::Errno> {
    if !addr.is_multiple_of(4) {
        return Err(crate::errno::Errno::EINVAL);
    }
    space.check(addr, 4, true)?;
    // Checked: a mapped, writable, aligned user word.
    // SAFETY: as explained above.
    let a = unsafe { &*(addr as *const core::sync::atomic::AtomicU32) };
    let mut old = a.load(core::sync::atomic::Ordering::SeqCst);
    loop {
        match a.compare_exchange(
            old,
            f(old),
            core::sync::atomic::Ordering::SeqCst,
            core::sync::atomic::Ordering::SeqCst,
        ) {
            Ok(v) => return Ok(v),
            Err(v) => old = v,
        }
    }
}

/// This CPU's number (from the per-CPU header).
pub fn cpu_id() -> usize {
    let pc = super::percpu_ptr();
    // The GS base points at this CPU's header, written by the VMM.
    // SAFETY: as explained above.
    unsafe { core::ptr::read_volatile(addr_of_mut!((*pc).cpu)) as usize }
}

/// Points this CPU's system-call entry at the kernel stack ending at `top`.
pub fn set_kstack_top(top: u64) {
    let pc = super::percpu_ptr();
    // As in cpu_id; the entry stubs read this field.
    // SAFETY: as explained above.
    unsafe { core::ptr::write_volatile(addr_of_mut!((*pc).kstack_top), top) }
}

/// Marks this CPU's exception handling finished (the fault path is about to return
/// to the program, e.g. into a signal handler).
pub fn clear_in_fault() {
    let pc = super::percpu_ptr();
    // SAFETY: as in cpu_id.
    unsafe { core::ptr::write_volatile(addr_of_mut!((*pc).in_fault), 0) }
}
