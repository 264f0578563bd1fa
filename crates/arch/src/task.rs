//! Tasks: the machine side of a thread. A task is a kernel stack, the stack pointer
//! saved while it is switched out, its FS base and its extended (x87/SSE/AVX)
//! register state. The kernel's scheduler decides which task runs; this module
//! makes running it sound:
//!
//! - a task runs on at most one CPU: `on_cpu` is taken with a compare-and-swap
//!   before its stack is used and dropped by the switch code only once its stack
//!   pointer is saved;
//! - a saved context is resumed at most once: switching in takes `ctx` (0 after),
//!   and a task whose context was never prepared, or has ended, cannot be resumed;
//! - `prepare` (a new thread's first return to the program) writes the stack only
//!   while holding `on_cpu`.
//!
//! Task structures and stacks are allocated once and recycled by the kernel, never
//! freed, so a task is a `&'static Task`. Stacks are cut from 2 MiB chunks.
//!
//! Extended state is saved only when a task is switched out, never on a system
//! call or interrupt (the kernel is built without SSE), with XSAVEOPT where the CPU
//! has it, and restored only when the CPU's registers do not already hold it.
//! Signal frames get a copy of it in user memory (`save_fpu_to_user`), and
//! `rt_sigreturn` loads one back after checking it (`restore_fpu_from_user`): the
//! image is copied into a kernel buffer first, so the program cannot change it
//! between the check and the load. `reset_fpu` gives a new program (execve) the
//! initial state.

use crate::frame::SyscallFrame;
use crate::mm::Chunk;
use crate::user::{self, Fault};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use onering_abi::layout::HUGE_PAGE_SIZE;
use onering_abi::MAX_CPUS;
use spin::{Mutex, Once};

/// Each task's kernel stack.
pub const KSTACK_SIZE: u64 = 32 * 1024;
/// Most tasks (stacks are never freed, so this bounds their memory: 128 MiB).
pub const MAX_TASKS: usize = 4096;

const NONE: usize = usize::MAX;

/// A 64-byte aligned piece of an XSAVE area.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Align64([u8; 64]);

fn area(size: u64) -> Vec<Align64> {
    alloc::vec![Align64([0; 64]); (size as usize).div_ceil(64)]
}

fn bytes(a: &[Align64]) -> &[u8] {
    // SAFETY: Align64 is a repr(C) array of 64 bytes with no padding, so a slice of
    // them is `64 * len` initialised bytes.
    unsafe { core::slice::from_raw_parts(a.as_ptr().cast::<u8>(), a.len() * 64) }
}

fn bytes_mut(a: &mut [Align64]) -> &mut [u8] {
    // SAFETY: Align64 is a repr(C) array of 64 bytes with no padding, so the slice
    // is `64 * len` initialised bytes, borrowed exclusively for the result's life.
    unsafe { core::slice::from_raw_parts_mut(a.as_mut_ptr().cast::<u8>(), a.len() * 64) }
}

pub struct Task {
    id: usize,
    kstack_top: u64,
    /// Saved stack pointer while switched out; 0: nothing to resume.
    ctx: AtomicU64,
    on_cpu: AtomicBool,
    /// The CPU it last ran on (NONE: its registers are nowhere).
    cpu: AtomicUsize,
    fs_base: AtomicU64,
    fpu: Mutex<Vec<Align64>>,
    /// Where a signal frame's FP state is checked before it is loaded (kept, so
    /// its address is never another task's area: see the module note).
    scratch: Mutex<Vec<Align64>>,
}

impl core::fmt::Debug for Task {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Task").field("id", &self.id).finish()
    }
}

/// Why `prepare` refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

struct Arena {
    next: u64,
    end: u64,
    count: usize,
}

static ARENA: Mutex<Arena> = Mutex::new(Arena { next: 0, end: 0, count: 0 });

/// XSAVE area size and enabled features (from CPUID at boot), and whether the CPU
/// has XSAVEOPT.
static XSAVE: Once<(u32, u64, bool)> = Once::new();

/// The XSAVE area size for the enabled features.
pub fn xsave_size() -> u64 {
    u64::from(XSAVE.get().map_or(512, |x| x.0))
}

/// The enabled XSAVE features (XCR0).
pub fn xfeatures() -> u64 {
    XSAVE.get().map_or(3, |x| x.1)
}

#[cfg(target_os = "none")]
pub(crate) fn init() {
    XSAVE.call_once(|| {
        // From the VMM's CPUID table (a real cpuid exits to the hypervisor).
        let [_, ebx, _, _] = crate::cpuid::query(0xd, 0);
        let opt = crate::cpuid::query(0xd, 1)[0] & 1 != 0;
        let (lo, hi): (u32, u32);
        // SAFETY: xgetbv reads XCR0 (the VMM set CR4.OSXSAVE); no memory.
        unsafe { core::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi, options(nomem, nostack)) };
        (ebx, u64::from(lo) | (u64::from(hi) << 32), opt)
    });
}

/// Per CPU: the saved context of its idle loop (the boot stack it started on), a
/// scratch slot for ending tasks, the on-CPU flag of the idle loop (nobody waits
/// on it), and whose extended state its registers hold (task id + 1; 0: nobody's).
static IDLE_CTX: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static DEAD_CTX: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static IDLE_ON_CPU: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static FPU_OWNER: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];

impl Task {
    /// A new task with a fresh kernel stack; `more` gives a chunk when the current
    /// one is used up. None when out of memory or past [`MAX_TASKS`].
    pub fn new(more: impl FnOnce() -> Option<Chunk>) -> Option<&'static Task> {
        let (id, top) = {
            let mut a = ARENA.lock();
            if a.count >= MAX_TASKS {
                return None;
            }
            if a.next == a.end {
                let c = more()?;
                a.next = onering_abi::layout::direct(crate::mm::keep(c));
                a.end = a.next + HUGE_PAGE_SIZE;
            }
            a.next += KSTACK_SIZE;
            a.count += 1;
            (a.count - 1, a.next)
        };
        Some(Box::leak(Box::new(Task {
            id,
            kstack_top: top,
            ctx: AtomicU64::new(0),
            on_cpu: AtomicBool::new(false),
            cpu: AtomicUsize::new(NONE),
            fs_base: AtomicU64::new(0),
            fpu: Mutex::new(area(xsave_size())),
            scratch: Mutex::new(Vec::new()),
        })))
    }

    /// A small number, fixed for the task's life (allocation order).
    pub fn id(&self) -> usize {
        self.id
    }

    /// Whether some CPU runs it (or is still leaving it).
    pub fn running(&self) -> bool {
        self.on_cpu.load(Acquire)
    }

    /// The CPU it runs or last ran on.
    pub fn last_cpu(&self) -> Option<usize> {
        Some(self.cpu.load(Relaxed)).filter(|&c| c != NONE)
    }

    /// The system-call frame at the top of its kernel stack, as the entry code
    /// pushed it, if this is the running task and it is in a system call: for panic
    /// messages only (the number is still in `rax` until the call returns), hence
    /// the token, which only the panic handler makes. The system-call path holds a
    /// `&mut` to that frame; reading it is sound only because that code never runs
    /// again after a panic.
    pub fn syscall_frame(&self, _: &crate::panic::Panicking) -> Option<SyscallFrame> {
        if !current().is_some_and(|c| core::ptr::eq(c, self)) {
            return None;
        }
        #[cfg(target_os = "none")]
        {
            let at = self.kstack_top - core::mem::size_of::<SyscallFrame>() as u64;
            // SAFETY: [at, kstack_top) is the top of this task's own kernel stack (cut
            // from a chunk the arena keeps, never freed), which the running task
            // (this one) owns; a volatile copy of plain integers, whatever they
            // hold (garbage if the task is not in a system call).
            Some(unsafe { (at as *const SyscallFrame).read_volatile() })
        }
        #[cfg(not(target_os = "none"))]
        None
    }

    /// The top of its kernel stack (where the way into the kernel leaves the
    /// program's registers; the gdb stub reads them there, `--gdb`).
    pub fn stack_top(&self) -> u64 {
        self.kstack_top
    }

    /// Whether the address lies on its kernel stack.
    pub fn on_stack(&self, addr: u64) -> bool {
        addr < self.kstack_top && addr >= self.kstack_top - KSTACK_SIZE
    }

    /// Makes the task's next run return to the program with `frame` and FS base
    /// `fs_base`, whatever it did before: its kernel stack gets the system-call
    /// frame (as `syscall_entry` pushes it), the address of the system-call return
    /// path, and six zero callee-saved registers for the switch to pop. Its extended
    /// state is the caller's (copied now). Busy if it is on a CPU.
    pub fn prepare(&self, frame: &SyscallFrame, fs_base: u64) -> Result<(), Busy> {
        self.on_cpu.compare_exchange(false, true, Acquire, Relaxed).map_err(|_| Busy)?;
        // SAFETY: the task's own kernel stack, and we hold its `on_cpu`: no CPU
        // runs on it.
        let sp = unsafe { init_stack(self.kstack_top, frame) };
        self.ctx.store(sp, Relaxed);
        self.fs_base.store(fs_base, Relaxed);
        self.cpu.store(NONE, Relaxed);
        // SAFETY: a task's area is sized and aligned for XSAVE (`area`).
        unsafe { save_fpu(&mut self.fpu.lock(), false) };
        self.on_cpu.store(false, Release);
        Ok(())
    }

    /// Writes the FP state the program has now into a signal frame at `addr`
    /// (`size` bytes, 64-byte aligned): the running task's area gets a full XSAVE
    /// first, which is also a valid image for its next switch.
    /// Only for the running task: the registers hold its state.
    pub fn save_fpu_to_user(&self, addr: u64, size: u64) -> Result<(), Fault> {
        assert!(self.is_current(), "the FP state of task {} saved while it is not running", self.id);
        if !addr.is_multiple_of(64) || size < 576 || size > xsave_size() {
            return Err(Fault);
        }
        let mut a = self.fpu.lock();
        // SAFETY: a task's area is sized and aligned for XSAVE (`area`).
        unsafe { save_fpu(&mut a, false) };
        user::write(addr, &bytes(&a)[..size as usize])
    }

    /// Loads FP state from a signal frame at `addr` after copying it into the
    /// kernel and checking that XRSTOR accepts it: MXCSR without reserved bits,
    /// features within XCR0, a standard-format header with zero reserved bytes.
    /// Only for the running task: its registers get the state.
    pub fn restore_fpu_from_user(&self, addr: u64, size: u64) -> Result<(), Fault> {
        assert!(self.is_current(), "the FP state of task {} restored while it is not running", self.id);
        if !addr.is_multiple_of(64) || size < 576 || size > xsave_size() {
            return Err(Fault);
        }
        let mut s = self.scratch.lock();
        if s.is_empty() {
            *s = area(xsave_size());
        }
        let img = bytes_mut(&mut s);
        img.fill(0);
        user::read(addr, &mut img[..size as usize])?;
        let word = |o: usize| u64::from_le_bytes(img[o..o + 8].try_into().unwrap_or_default());
        let mxcsr = u32::from_le_bytes(img[24..28].try_into().unwrap_or_default());
        let (xstate_bv, xcomp_bv) = (word(512), word(520));
        if mxcsr & !mxcsr_mask() != 0
            || xstate_bv & !xfeatures() != 0
            || xcomp_bv != 0
            || (528..576).step_by(8).any(|o| word(o) != 0)
        {
            return Err(Fault);
        }
        // SAFETY: the scratch area is sized and aligned for XSAVE, and the image in
        // it passed the checks above (reserved MXCSR bits, features, header), so
        // XRSTOR accepts it.
        unsafe { load_fpu(&s) };
        Ok(())
    }

    /// Puts the program's extended state in its initial state, as Linux does at
    /// execve: x87 control word 0x37f, MXCSR 0x1f80, every register zero. Only for
    /// the running task: its registers get the state (and its area the image).
    pub fn reset_fpu(&self) {
        assert!(self.is_current(), "the FP state of task {} reset while it is not running", self.id);
        let mut a = self.fpu.lock();
        let img = bytes_mut(&mut a);
        img.fill(0);
        img[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
        // The image: a zero XSAVE header (every component in its initial state,
        // the x87 control word 0x37f among them) and MXCSR 0x1f80, which has no
        // reserved bit.
        // SAFETY: a task's area is sized and aligned for XSAVE (`area`) and holds that valid image, which XRSTOR accepts.
        unsafe { load_fpu(&a) };
    }

    /// Whether this is the task the CPU runs.
    fn is_current(&self) -> bool {
        current().is_some_and(|c| core::ptr::eq(c, self))
    }
}

/// The MXCSR bits this CPU supports (FXSAVE's MXCSR_MASK; 0xffbf when it reports
/// none, as the SDM says).
fn mxcsr_mask() -> u32 {
    static MASK: spin::Once<u32> = spin::Once::new();
    *MASK.call_once(|| {
        let mut a = area(512);
        #[cfg(target_os = "none")]
        {
            // SAFETY: FXSAVE writes 512 bytes to a 16-byte aligned area: `area(512)`
            // is that large and 64-byte aligned; it only stores the FP state.
            unsafe { core::arch::asm!("fxsave64 [{}]", in(reg) a.as_mut_ptr(), options(nostack)) };
        }
        let b = bytes_mut(&mut a);
        match u32::from_le_bytes(b[28..32].try_into().unwrap_or_default()) {
            0 => 0xffbf,
            m => m,
        }
    })
}

/// Saves the registers' extended state into `area`; `opt`: with XSAVEOPT, only
/// what is in use and changed since `area` was last loaded. That is sound because
/// the kernel never writes a task's area between loading and saving it, except
/// with a full save of the same registers (`prepare`, signal frames).
///
/// # Safety
/// `area` holds at least `xsave_size()` bytes (it was made by `area`).
unsafe fn save_fpu(area: &mut [Align64], opt: bool) {
    #[cfg(target_os = "none")]
    {
        let opt = opt && XSAVE.get().is_some_and(|x| x.2);
        // SAFETY: `area` is 64-byte aligned (Align64) and as large as CPUID says
        // XSAVE writes (the caller's promise); the kernel is built without SSE, so
        // the registers hold the program's state.
        unsafe {
            if opt {
                core::arch::asm!("xsaveopt64 [{}]", in(reg) area.as_mut_ptr(), in("eax") u32::MAX, in("edx") u32::MAX, options(nostack))
            } else {
                core::arch::asm!("xsave64 [{}]", in(reg) area.as_mut_ptr(), in("eax") u32::MAX, in("edx") u32::MAX, options(nostack))
            }
        }
    }
    #[cfg(not(target_os = "none"))]
    let _ = (area, opt);
}

/// Loads extended state from `area`.
///
/// # Safety
/// `area` holds at least `xsave_size()` bytes and a valid XSAVE image: one XSAVE
/// wrote, a zeroed area (every component in its initial state), or one
/// `restore_fpu_from_user` checked.
unsafe fn load_fpu(area: &[Align64]) {
    #[cfg(target_os = "none")]
    // SAFETY: `area` is aligned (Align64), large enough and a valid image (the
    // caller's promise), so XRSTOR reads only it and cannot fault.
    unsafe {
        core::arch::asm!("xrstor64 [{}]", in(reg) area.as_ptr(), in("eax") u32::MAX, in("edx") u32::MAX, options(nostack))
    }
    #[cfg(not(target_os = "none"))]
    let _ = area;
}

#[cfg(target_os = "none")]
mod machine {
    use super::*;

    core::arch::global_asm!(
        r#"
    .section .text.entry, "ax"
    // switch_context(save: *mut u64 (rdi), next: u64 (rsi), off: *mut u8 (rdx))
    .global onering_switch_context
onering_switch_context:
    push %rbp
    push %rbx
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, (%rdi)
    // x86 keeps stores in order: the saved rsp is visible before the flag drops.
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

    // SAFETY: the assembly above defines this symbol with this System V signature.
    extern "C" {
        fn onering_switch_context(save: *mut u64, next: u64, off: *mut u8);
        /// The system-call exit path (entry.rs): only its address is taken.
        static syscall_return: u8;
    }

    /// Lays out a new context on the kernel stack below `top`: the stack pointer
    /// to resume it with.
    ///
    /// # Safety
    /// `[top - KSTACK_SIZE, top)` is a task's kernel stack that no CPU runs on.
    pub(super) unsafe fn init_stack(top: u64, frame: &SyscallFrame) -> u64 {
        const CALLEE_SAVED: u64 = 6;
        let frame_at = top - core::mem::size_of::<SyscallFrame>() as u64;
        let sp = frame_at - (CALLEE_SAVED + 1) * 8;
        // SAFETY: [sp, top) is the top ~200 bytes of the kernel stack below `top`,
        // which the caller promises no CPU runs on; the writes stay inside it.
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

    /// Saves this context in `save` (then clears `off`) and resumes the one saved
    /// at `next`.
    ///
    /// # Safety
    /// `next` is a stack pointer saved by this function (or made by `init_stack`)
    /// for a context no CPU runs, taken once (the caller took its `on_cpu` and its
    /// `ctx`); `save` and `off` live forever.
    pub(super) unsafe fn jump(save: &AtomicU64, next: u64, off: &AtomicBool) {
        // SAFETY: the caller's promises above. The assembly saves the callee-saved
        // registers on the current stack, stores the stack pointer in `save`, then
        // clears `off`, and returns on `next`'s stack, popping what `jump` or
        // `init_stack` put there.
        unsafe { onering_switch_context(save.as_ptr(), next, off.as_ptr() as *mut u8) }
    }
}

#[cfg(target_os = "none")]
use machine::{init_stack, jump};

/// # Safety
/// None on the host (it writes nothing).
#[cfg(not(target_os = "none"))]
unsafe fn init_stack(top: u64, _: &SyscallFrame) -> u64 {
    top
}

/// # Safety
/// None on the host (it only panics).
#[cfg(not(target_os = "none"))]
unsafe fn jump(_: &AtomicU64, _: u64, _: &AtomicBool) {
    panic!("tasks cannot be switched on the host");
}

/// The task this CPU runs (None: its idle loop).
#[inline(always)]
pub fn current() -> Option<&'static Task> {
    let p = crate::cpu::current_task_word() as *const Task;
    // SAFETY: the word is 0 or holds the address of a `&'static Task` that `switch`
    // stored (the only writer); tasks are never freed.
    unsafe { p.as_ref() }
}

/// Switches this CPU from what it runs (a task, or its idle loop) to `next` (a
/// task, or the idle loop when None). Returns when something switches back to the
/// task (or idle loop) that called it. The caller's FS base and extended state are
/// saved; `next`'s are loaded.
pub fn switch(next: Option<&'static Task>) {
    let cpu = crate::cpu::cpu_id();
    let me = current();
    if me.is_none() && next.is_none() {
        return;
    }
    if let Some(m) = me {
        m.fs_base.store(crate::cpu::fs_base(), Relaxed);
        // SAFETY: a task's area is sized and aligned for XSAVE (`area`).
        unsafe { save_fpu(&mut m.fpu.lock(), true) };
        FPU_OWNER[cpu].store(m.id + 1, Relaxed);
    }
    let (save, off) = match me {
        Some(m) => (&m.ctx, &m.on_cpu),
        None => (&IDLE_CTX[cpu], &IDLE_ON_CPU[cpu]),
    };
    go(cpu, save, off, next);
}

/// Like [`switch`], for a task that has ended: nothing of it is saved and it can
/// never be resumed (only `prepare`d again). Does not return.
pub fn exit_to(next: Option<&'static Task>) -> ! {
    let cpu = crate::cpu::cpu_id();
    let me = current();
    FPU_OWNER[cpu].store(0, Relaxed);
    let off = match me {
        Some(m) => &m.on_cpu,
        None => &IDLE_ON_CPU[cpu],
    };
    go(cpu, &DEAD_CTX[cpu], off, next);
    panic!("an ended task was resumed");
}

fn go(cpu: usize, save: &AtomicU64, off: &AtomicBool, next: Option<&'static Task>) {
    crate::cpu::count(crate::cpu::Counter::Switches);
    match next {
        Some(n) => {
            // It may still be leaving another CPU: wait until its context is saved,
            // then take it.
            while n.on_cpu.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
                crate::sync::relax();
            }
            let sp = n.ctx.swap(0, Relaxed);
            if sp == 0 {
                panic!("task {} has no context to resume", n.id);
            }
            crate::cpu::set_current_task_word(n as *const Task as u64);
            // SAFETY: `n`'s own kernel stack; we hold its `on_cpu`, so only this
            // CPU runs it from here on.
            unsafe { crate::cpu::set_kstack_top(n.kstack_top) };
            crate::cpu::set_fs_base(n.fs_base.load(Relaxed));
            // The registers hold its state only if it was the last to use them here
            // and has not run anywhere else since.
            if FPU_OWNER[cpu].load(Relaxed) != n.id + 1 || n.cpu.load(Relaxed) != cpu {
                // SAFETY: a task's area is sized for XSAVE and holds what XSAVE
                // wrote or zeros (`new`), or a checked image.
                unsafe { load_fpu(&n.fpu.lock()) };
                FPU_OWNER[cpu].store(n.id + 1, Relaxed);
            }
            n.cpu.store(cpu, Relaxed);
            // SAFETY: `sp` was saved by `jump` or made by `init_stack` for `n`, whose
            // `on_cpu` we took and whose `ctx` we took (swapped to 0): resumed once.
            // `save`/`off` are a task's or this CPU's idle slots (static).
            unsafe { jump(save, sp, off) };
        }
        None => {
            crate::cpu::set_current_task_word(0);
            IDLE_ON_CPU[cpu].store(true, Relaxed);
            let sp = IDLE_CTX[cpu].swap(0, Relaxed);
            if sp == 0 {
                panic!("cpu {cpu} has no idle loop to go back to");
            }
            // SAFETY: this CPU's idle context, saved by `jump` and taken once
            // (swapped to 0); `save`/`off` are static.
            unsafe { jump(save, sp, off) };
        }
    }
}
