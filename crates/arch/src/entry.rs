//! Entry points in assembly: the kernel's first instruction, the ring-0 trap stubs
//! (system call and exceptions), the ring-3 landings they hand control to, the
//! supervisor calls, and the return to the program with every register chosen.
//! The kernel's Rust code is reached through five hooks it names with
//! `entry_point!` (lib.rs).
//!
//! Ring 0 entered by `syscall` runs natively on PVM and may run only unprivileged
//! instructions plus `iretq` (no `swapgs`, no `cli`/`sti`, no `hlt`, no `mov cr3`:
//! #GP). Ring 0 entered through the IDT (an exception or an interrupt) is run by
//! PVM's instruction emulator, ~0.5-1 µs an instruction, where `mov cr3` works
//! (measured, docs/design.md "Supervisor calls"). So the stubs reach per-CPU data
//! through `%gs`, whose base the VMM set to the CPU's
//! [`PerCpuHeader`](onering_abi::PerCpuHeader), switch to a known stack without a
//! scratch register, and leave ring 0 at once; and the kernel's one privileged
//! operation, loading CR3, is a `ud2` at a known address whose #UD stub does it
//! (the supervisor call, on hardware KVM too).

use crate::frame::UserRegs;
use core::arch::global_asm;
use core::mem::offset_of;
use onering_abi::layout::{USER_CS, USER_DS};
use onering_abi::percpu_offsets as pc;

/// When the timer or an IPI interrupts the kernel's own code, the kernel is asked
/// again this much later (ns), in case it went back to the program just before it
/// looked at the request.
const RETRY_NS: u32 = 1_000_000;

global_asm!(
    r#"
    // All entry code stays in .text.entry, which the linker script keeps: nothing in
    // the kernel refers to the stubs (the VMM puts their addresses in LSTAR and the IDT).
    .section .text.entry, "ax"

    // Loads the user's arithmetic flags and DF from the rflags value in r11, without
    // popfq (microcoded: ~4 ns of a ~15 ns call): DF with std (the kernel runs with
    // DF clear), OF by an 8-bit add that overflows exactly when it was set, the other
    // five with sahf. Clobbers rax. TF and AC are not restored. Everything after it
    // on the way out must leave the flags alone (mov, pop, jmp).
    .macro RESTORE_USER_FLAGS
    bt $10, %r11
    jnc 1f
    std
1:  mov %r11, %rax
    mov %al, %ah
    bt $11, %r11
    sbb %al, %al
    and $0x7f, %al
    add $1, %al
    sahf
    .endm

    // Loads every general register but rsp from this CPU's full-return block
    // (movs only: the flags are left alone).
    .macro LOAD_FRAME_REGS
    mov %gs:{fr}+{r_r8}, %r8
    mov %gs:{fr}+{r_r9}, %r9
    mov %gs:{fr}+{r_r10}, %r10
    mov %gs:{fr}+{r_r11}, %r11
    mov %gs:{fr}+{r_r12}, %r12
    mov %gs:{fr}+{r_r13}, %r13
    mov %gs:{fr}+{r_r14}, %r14
    mov %gs:{fr}+{r_r15}, %r15
    mov %gs:{fr}+{r_rdi}, %rdi
    mov %gs:{fr}+{r_rsi}, %rsi
    mov %gs:{fr}+{r_rbp}, %rbp
    mov %gs:{fr}+{r_rbx}, %rbx
    mov %gs:{fr}+{r_rdx}, %rdx
    mov %gs:{fr}+{r_rax}, %rax
    mov %gs:{fr}+{r_rcx}, %rcx
    .endm

    // Below the vector, error code and iret frame already on an IST stack: pushes
    // the general registers and copies those 22 words (a frame::FaultFrame) below
    // the stack top kept at %gs:\stack; rax = where the copy is. Clobbers rcx,
    // rsi, rdi (saved in the frame).
    .macro COPY_FRAME stack
    push %rax
    push %rbx
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %rbp
    push %r8
    push %r9
    push %r10
    push %r11
    push %r12
    push %r13
    push %r14
    push %r15
    cld
    mov %gs:\stack, %rdi
    sub $(22 * 8), %rdi
    mov %rdi, %rax
    mov %rsp, %rsi
    mov $22, %ecx
    rep movsq
    .endm

    // Ring 0: hands an event taken from ring 3 on to ring 3, at \target,
    // interrupts on, on the stack the frame was copied to (COPY_FRAME).
    .macro TO_RING3 stack, target
    COPY_FRAME \stack
    pushq ${user_ds}
    push %rax
    pushq $0x202
    pushq ${user_cs}
    pushq $\target
    iretq
    .endm

    // Ring 3 (an exception's landing): continues on the stack the frame was
    // copied to, the frame at rsp. Native code: the copy costs nanoseconds.
    .macro TO_STACK stack
    COPY_FRAME \stack
    mov %rax, %rsp
    .endm


    .global _start
    // The VMM starts CPU 0 here in ring 3: rdi = &BootInfo, rsp = its kernel stack.
    // A program that jumps here has its own (user-half) stack: ud2 at once, which
    // the fault hook turns into SIGSEGV for it rather than a second boot.
_start:
    test %rsp, %rsp
    jns 1f
    xor %ebp, %ebp
    call {start}
1:  ud2

    // (After `_start`, which begins the image: a program that jumps to the image's
    // first byte meets `_start`'s ud2, not this `syscall`.)
    // A process the host starts in the VM (`onering_abi::exec`) first returns
    // here from the kernel, rax holding `exec::START_SYSCALL`: the system call
    // in which the kernel loads its program (which never returns here).
    // ---- Ring 3: the supervisor calls (supervisor.rs). -------------------------
    // Each is a `ud2` the #UD stub recognizes by its address: it loads rax into
    // CR3 (`onering_supervisor_load`: rax is a root) or reloads CR3 (`_flush`:
    // rax clobbered), steps over the `ud2` and returns here. Called with `call`.
    .global onering_supervisor_load
onering_supervisor_load:
    ud2
    ret
    .global onering_supervisor_flush
onering_supervisor_flush:
    ud2
    ret

    .global spawn_landing
spawn_landing:
    syscall
    ud2

    // ---- Ring 0: the `syscall` instruction lands here (LSTAR). --------------------
    // rcx = user rip, r11 = user rflags, rsp = user stack (not to be written: red zone).
    // Switch to the kernel stack and iretq into ring 3 at syscall_entry; rcx and r11
    // travel in their registers.
    // With --trace or --stats the VMM puts the `_observed` twins in LSTAR and the
    // rewritten sites' jumps instead: they differ only in the hook they call, so
    // the plain path pays nothing for observing (design.md, "Tracing and stats").
    .macro TRAP_TO target
    incq %gs:{traps}
    mov %rsp, %gs:{user_rsp}
    mov %gs:{kstack_top}, %rsp
    pushq ${user_ds}
    pushq %gs:{kstack_top}
    pushq $0x202
    pushq ${user_cs}
    pushq $\target
    iretq
    .endm

    .global syscall_trap_entry
syscall_trap_entry:
    TRAP_TO syscall_entry
    .global syscall_trap_entry_observed
syscall_trap_entry_observed:
    TRAP_TO syscall_entry_observed

    // ---- Ring 3: the common system-call path. -------------------------------------
    // On entry: rsp = kernel stack top, user rsp in %gs:user_rsp, rcx = return address,
    // r11 = user rflags, rax = number, rdi..r9 = arguments. The trap stub and the
    // rewritten call sites both come here. Builds a SyscallFrame, dispatches, returns.
    .macro PUSH_SYSCALL_FRAME
    pushq %gs:{user_rsp}
    push %r11
    push %rcx
    push %rax
    push %rdi
    push %rsi
    push %rdx
    push %r10
    push %r8
    push %r9
    push %rbx
    push %rbp
    push %r12
    push %r13
    push %r14
    push %r15
    cld
    mov %rsp, %rdi
    .endm

    // The observed twin: the same frame, the kernel's observing hook, the same way out.
    .global syscall_entry_observed
syscall_entry_observed:
    PUSH_SYSCALL_FRAME
    call onering_hook_syscall_observed
    jmp syscall_return

    .global syscall_entry
syscall_entry:
    PUSH_SYSCALL_FRAME
    call onering_hook_syscall
    // A new thread's first return to the program starts here (see init_stack).
    // (Signal handler entry and rt_sigreturn leave through full_return instead.)
    .global syscall_return
syscall_return:
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbp
    pop %rbx
    pop %r9
    pop %r8
    pop %r10
    pop %rdx
    pop %rsi
    pop %rdi
    // Then rax, rcx and r11 (as sysret leaves them), the stack and the jump;
    // nothing is written to the user stack.
    mov 16(%rsp), %r11
    RESTORE_USER_FLAGS
    pop %rax
    pop %rcx
    pop %r11
    pop %rsp
    jmp *%rcx

    // ---- Ring 3: return with every register chosen (signal handler entry, --------
    // rt_sigreturn), from the UserRegs block in this CPU's per-CPU page, without
    // touching the program's stack: flags first, then the registers, then
    // `jmp *%gs:rip`.
    .global onering_full_return
onering_full_return:
    mov %gs:{fr}+{r_rflags}, %r11
    RESTORE_USER_FLAGS
    LOAD_FRAME_REGS
    mov %gs:{fr}+{r_rsp}, %rsp
    jmp *%gs:{fr}+{r_rip}

    // ---- Ring 3: the same, with the trap flag set (a gdb single step, --gdb). ----
    // `popfq` would trap on the next instruction, still the kernel's; `iretq` to
    // the same ring loads TF as it jumps, so the trap comes after the program's
    // first instruction. The frame goes on the kernel stack this runs on, with the
    // segment selectors the CPU holds (PVM's own in hardware, whatever the GDT says).
    .global onering_step_return
onering_step_return:
    mov %ss, %rax
    push %rax
    pushq %gs:{fr}+{r_rsp}
    pushq %gs:{fr}+{r_rflags}
    orq $0x100, (%rsp)
    mov %cs, %rax
    push %rax
    pushq %gs:{fr}+{r_rip}
    LOAD_FRAME_REGS
    iretq

    // ---- Ring 0: exceptions (IST1). ------------------------------------------------
    // Each stub is 16 bytes long, so the VMM finds stub n at exception_stubs + 16 * n.
    // PVM emulates every instruction from here to the `iretq` (~0.5-1 µs each), so
    // ring 0 only pushes the vector (and a 0 for a missing error code), checks the
    // ring and leaves through the CPU's prebuilt frame for `exception_landing`;
    // #PF first saves CR2, #UD first asks whether it is a supervisor call.
    .balign 16
    .global exception_stubs
exception_stubs:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .balign 16
    .if (\n == 6)
    jmp supervisor_call
    .elseif (\n == 14)
    pushq $14
    jmp page_fault
    .elseif (\n == 8) || (\n >= 10 && \n <= 14) || (\n == 17) || (\n == 21) || (\n == 29) || (\n == 30)
    pushq $\n
    .else
    pushq $0
    pushq $\n
    .endif
    jmp exception_common
    .endr

    // Ring 0, #UD: IST stack rip, cs, rflags, rsp, ss. A `ud2` at one of the two
    // supervisor-call sites (kernel text) is the kernel asking for CR3; any other
    // #UD is an exception like the others. Every instruction here is emulated on
    // PVM, so the load, the common case, is tested first.
supervisor_call:
    cmpq $onering_supervisor_load, (%rsp)
    jne 1f
    mov %rax, %cr3
    addq $2, (%rsp)
    iretq
1:  cmpq $onering_supervisor_flush, (%rsp)
    jne 2f
    mov %cr3, %rax
    mov %rax, %cr3
    addq $2, (%rsp)
    iretq
2:  pushq $0
    pushq $6
    jmp exception_common

    // Ring 0, #PF: IST stack vector, error, rip, cs, rflags, rsp, ss. The faulting
    // address goes to this CPU's page, where the kernel's fault hook reads it
    // (`cpu::fault_addr`): `mov %cr2` works here (emulated on PVM, native on
    // hardware KVM) and nowhere in ring 3. Not from ring 0 (GS may be what broke).
page_fault:
    testb $3, 24(%rsp)
    jz exception_fatal
    push %rax
    mov %cr2, %rax
    mov %rax, %gs:{fault_cr2}
    pop %rax
    mov %gs:{exc_frame_ptr}, %rsp
    iretq

    // Interrupts nobody asked for: ignore.
    .balign 16
    .global interrupt_stub
interrupt_stub:
    iretq

    // ---- Ring 0: the APIC timer and the reschedule IPI (IST2). --------------------
    // IST stack: rip, cs, rflags, rsp, ss. Ring 3 runs with IF set, ring 0 never
    // does, so ring 3 was interrupted: either the program, or the kernel's own code
    // (which runs in ring 3 too, in the top 2 GiB). The kernel is never preempted: it
    // finds the request flag on its way back to the program (and, should it miss it,
    // a short retry timer comes back). The program's state goes, as an exception's
    // does, to ring 3, but on the running thread's own kernel stack (empty while
    // the program runs), where the thread may switch away. "The kernel" is its code
    // or anything running on the thread's kernel stack.
    .balign 16
    .global preempt_stub
preempt_stub:
    incq %gs:{interrupts}
    push %rax
    movabs ${lapic_eoi}, %rax
    movl $0, (%rax)
    movq $0, %gs:{timer_armed}
    movabs ${kernel_vbase}, %rax
    cmp %rax, 8(%rsp)
    jae 1f
    // A rewritten site's trampoline (program code) has already moved to the
    // thread's kernel stack on its way into the kernel: that is the kernel's too.
    mov %gs:{kstack_top}, %rax
    sub 32(%rsp), %rax
    cmp ${kstack_size}, %rax
    jb 1f
    cmpq $0, %gs:{in_fault}
    jne 1f
    cmpq $0, %gs:{current}
    je 1f
    pop %rax
    pushq $0
    pushq ${timer_vector}
    TO_RING3 {kstack_top}, interrupt_entry
1:  movq $1, %gs:{resched}
    cmpq $0, %gs:{current}
    je 2f
    movabs ${lapic_timer}, %rax
    movl ${retry_ns}, (%rax)
2:  pop %rax
    iretq

    // ---- Ring 3: a preempted program continues here on its kernel stack. --------
interrupt_entry:
    mov %rsp, %rdi
    call onering_hook_interrupt
    ud2

exception_common:
    // IST stack: vector, error, rip, cs, rflags, rsp, ss. A fault in ring 0 (a
    // stub) cannot be handed on: report and stop, without GS (it may be what broke).
    testb $3, 24(%rsp)
    jz exception_fatal
    mov %gs:{exc_frame_ptr}, %rsp
    iretq
exception_fatal:
    // Fatal: tell the VMM, which reads vector, error code and the interrupted
    // state from the top of this CPU's IST1 stack (where the frame is now).
    movabs ${doorbell}, %rax
    movq $6, (%rax)
3:  pause
    jmp 3b

    // ---- Ring 3: an exception, on IST1 below vector, error code and frame. -------
    // One raised while ring 3 still handles the previous one (`in_fault`) cannot
    // be handed on either. Otherwise the frame and registers go to the fault stack.
    .global exception_landing
exception_landing:
    cmpq $0, %gs:{in_fault}
    jne exception_fatal
    movq $1, %gs:{in_fault}
    TO_STACK {fault_stack_top}
    jmp fault_entry

    // ---- Ring 3: exceptions continue here on the fault stack. ---------------------
fault_entry:
    mov %rsp, %rdi
    call onering_hook_fault
    ud2
"#,
    start = sym arch_start,
    lapic_eoi = const onering_abi::layout::direct(onering_abi::layout::LAPIC_PHYS + onering_abi::lapic::EOI),
    lapic_timer = const onering_abi::layout::direct(onering_abi::layout::LAPIC_PHYS + onering_abi::lapic::TIMER_INITIAL),
    kernel_vbase = const onering_abi::layout::KERNEL_VBASE,
    timer_vector = const onering_abi::vectors::TIMER as u64,
    retry_ns = const RETRY_NS,
    kstack_size = const crate::task::KSTACK_SIZE,
    timer_armed = const crate::cpu::TIMER_ARMED,
    resched = const crate::cpu::RESCHED,
    current = const crate::cpu::CURRENT_TASK,
    user_rsp = const pc::USER_RSP,
    traps = const pc::TRAPS,
    interrupts = const pc::INTERRUPTS,
    kstack_top = const pc::KSTACK_TOP,
    fault_stack_top = const pc::FAULT_STACK_TOP,
    in_fault = const pc::IN_FAULT,
    exc_frame_ptr = const pc::EXCEPTION_FRAME_PTR,
    fault_cr2 = const crate::cpu::FAULT_CR2,
    user_ds = const USER_DS as u64,
    user_cs = const USER_CS as u64,
    doorbell = const onering_abi::layout::direct(onering_abi::layout::HOSTCALL_DOORBELL_PHYS),
    fr = const crate::cpu::FULL_REGS,
    r_r8 = const offset_of!(UserRegs, r8),
    r_r9 = const offset_of!(UserRegs, r9),
    r_r10 = const offset_of!(UserRegs, r10),
    r_r11 = const offset_of!(UserRegs, r11),
    r_r12 = const offset_of!(UserRegs, r12),
    r_r13 = const offset_of!(UserRegs, r13),
    r_r14 = const offset_of!(UserRegs, r14),
    r_r15 = const offset_of!(UserRegs, r15),
    r_rdi = const offset_of!(UserRegs, rdi),
    r_rsi = const offset_of!(UserRegs, rsi),
    r_rbp = const offset_of!(UserRegs, rbp),
    r_rbx = const offset_of!(UserRegs, rbx),
    r_rdx = const offset_of!(UserRegs, rdx),
    r_rax = const offset_of!(UserRegs, rax),
    r_rcx = const offset_of!(UserRegs, rcx),
    r_rsp = const offset_of!(UserRegs, rsp),
    r_rip = const offset_of!(UserRegs, rip),
    r_rflags = const offset_of!(UserRegs, rflags),
    options(att_syntax)
);

// SAFETY: the kernel's `entry_point!` defines the first symbol (a jump to its
// hook, with this signature); the assembly above defines the last two. Both
// sides are Rust: the reference to an Option is just a pointer.
#[allow(improper_ctypes)]
extern "C" {
    fn onering_hook_main(boot: &mut Option<crate::boot::Boot>) -> !;
    fn onering_full_return() -> !;
    fn onering_step_return() -> !;
}

/// The first Rust code, on the CPU's boot stack in ring 3. CPU 0 checks the boot
/// info and sets up the heap and the machine, then hands the kernel its boot
/// resources; the other CPUs (started later, when the kernel first kicks them) go
/// straight to the kernel's main with nothing.
extern "C" fn arch_start(boot_info: u64) -> ! {
    let mut boot = if crate::cpu::cpu_id() == 0 { Some(crate::boot::init(boot_info)) } else { None };
    // SAFETY: the hook is the kernel's main, defined by `entry_point!`; it takes
    // the boot resources (or nothing) and never returns.
    unsafe { onering_hook_main(&mut boot) }
}

/// Loads every register from `regs` and jumps to `regs.rip`. Never comes back.
///
/// # Safety
/// `regs.rip` must be program code (anything in the user half: the program's own
/// business), or the kernel state the CPU was really in when an exception
/// interrupted it, or a user-access routine's landing with that routine's state.
unsafe fn jump_to(regs: &UserRegs) -> ! {
    // SAFETY: the caller's promise is `jump_with`'s.
    unsafe { jump_with(regs, onering_full_return) }
}

/// Stores `regs` where the way back reads them and leaves through `way`.
///
/// # Safety
/// As [`jump_to`]; `way` is `onering_full_return` or `onering_step_return`.
unsafe fn jump_with(regs: &UserRegs, way: unsafe extern "C" fn() -> !) -> ! {
    let pc = crate::cpu::page();
    // SAFETY: FULL_REGS lies in this CPU's per-CPU page, which the kernel owns past
    // the ABI header (room for UserRegs before CURRENT_TASK, checked in cpu.rs);
    // nothing else on this CPU uses it until the jump below, which loads every
    // register from it and jumps to `regs.rip` (the stepping way pushes its iretq
    // frame on the kernel stack it runs on, not the program's); what it jumps to
    // is the caller's promise.
    unsafe {
        (pc.add(crate::cpu::FULL_REGS) as *mut UserRegs).write_volatile(*regs);
        way()
    }
}

/// Returns to the program with exactly `regs` (after a signal frame, an
/// interrupt, `rt_sigreturn`). Never comes back. A kernel address in `regs.rip` is a
/// kernel bug: it panics rather than jump there. With the trap flag in
/// `regs.rflags` (a debugger's single step, `--gdb`, that an interrupt or a signal
/// came between) the return is `iretq`, which sets it: the program then runs one
/// instruction and traps (#DB).
pub fn full_return(regs: &UserRegs) -> ! {
    assert!(
        crate::user::in_user_half(regs.rip, 1),
        "a return to the program with rip {:#x}, outside its half",
        regs.rip
    );
    if regs.rflags & TRAP_FLAG != 0 {
        // SAFETY: rip lies in the program's half, checked just above.
        unsafe { jump_with(regs, onering_step_return) }
    }
    // SAFETY: rip lies in the program's half, checked just above.
    unsafe { jump_to(regs) }
}

/// Where a process the host starts (`onering_abi::exec`) first runs: a `syscall`
/// of the number its frame's rax holds, so that the kernel loads its program as
/// its first act (the landing is kernel text, which ring 3 runs in every address
/// space).
pub fn spawn_landing() -> u64 {
    extern "C" {
        /// The landing (above): only its address is taken.
        static spawn_landing: u8;
    }
    core::ptr::addr_of!(spawn_landing) as u64
}

/// RFLAGS.TF: a #DB after each instruction.
pub const TRAP_FLAG: u64 = 0x100;

/// Ends this CPU's handling of an exception (the ring-0 stub marked it) and
/// returns to the program with `regs` (its state, or its signal handler's entry).
pub fn resume_after_fault(regs: &UserRegs) -> ! {
    crate::cpu::clear_in_fault();
    full_return(regs)
}

/// As [`resume_after_fault`], with the trap flag set: the program runs one
/// instruction and traps again (#DB), for a debugger's single step (`--gdb`).
pub fn resume_stepping(regs: &UserRegs) -> ! {
    resume_after_fault(&UserRegs { rflags: regs.rflags | TRAP_FLAG, ..*regs })
}

/// Ends this CPU's handling of the exception in `frame` and runs the interrupted
/// instruction again, program or kernel (a page that was just backed).
pub fn retry_fault(frame: &crate::frame::FaultFrame) -> ! {
    crate::cpu::clear_in_fault();
    // SAFETY: `frame` was made by the exception stubs (FaultFrame cannot be made or
    // copied elsewhere), so its registers are exactly the state the CPU was in.
    unsafe { jump_to(&frame.regs()) }
}

/// A handler for a program's exception once it is off the fault stack (`frame`
/// is a copy on the thread's kernel stack; `a`, `b` are the caller's).
pub type FaultContinuation = fn(frame: &crate::frame::FaultFrame, a: u64, b: u64) -> !;

/// Leaves the CPU's fault stack for the running task's kernel stack, with a copy
/// of `frame`, and continues in `then`: the exception is the program's (it was
/// running its own code), so its kernel stack is free, and from there the kernel
/// may block, switch away or end the thread, and take another exception (a first
/// touch while writing a signal frame) on the fault stack. Panics with no task.
pub fn leave_fault_stack(frame: &crate::frame::FaultFrame, a: u64, b: u64, then: FaultContinuation) -> ! {
    let Some(task) = crate::task::current() else { panic!("a program exception with no task running") };
    // Below the stack pointer if the program was on its kernel stack (a rewritten
    // site's trampoline) with its red zone, else from the top.
    let top = if task.on_stack(frame.rsp) { frame.rsp - 128 } else { task.stack_top() };
    let at = (top - core::mem::size_of::<crate::frame::FaultFrame>() as u64) & !15;
    assert!(task.on_stack(at), "no room on the kernel stack for the exception frame");
    let copy = frame.duplicate();
    // SAFETY: [at, top) lies in the running task's own kernel stack (checked), which
    // nothing uses while the program runs its own code: the exception interrupted
    // the program, not the kernel (`fail_user_access` and kernel faults were handled
    // before), and below `frame.rsp` when the program's trampoline was using it.
    unsafe { (at as *mut crate::frame::FaultFrame).write(copy) };
    crate::cpu::clear_in_fault();
    #[cfg(target_os = "none")]
    // SAFETY: switches to the kernel stack just below the copy (16-byte aligned, so
    // the callee sees the usual alignment after `call`) and calls `fault_continue`,
    // which never returns; the fault stack is abandoned (its in-use mark cleared
    // above). The copy stays valid: nothing else uses that part of the stack.
    unsafe {
        core::arch::asm!(
            "mov rsp, rdi",
            "call {cont}",
            "ud2",
            cont = sym fault_continue,
            in("rdi") at,
            in("rsi") a,
            in("rdx") b,
            in("rcx") then as usize,
            options(noreturn)
        )
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = (a, b, then);
        panic!("no exceptions on the host");
    }
}

#[cfg(target_os = "none")]
extern "C" fn fault_continue(frame: *const crate::frame::FaultFrame, a: u64, b: u64, then: usize) -> ! {
    // SAFETY: `leave_fault_stack` passes the address of the copy it just wrote on
    // this stack (valid, aligned, not used by anything else) and the continuation it
    // was given, as a plain address of a function of that type.
    let (frame, then) = unsafe { (&*frame, core::mem::transmute::<usize, FaultContinuation>(then)) };
    then(frame, a, b)
}

/// If the exception in `frame` was raised by a user-memory access routine
/// (`crate::user`), ends this CPU's handling of it and makes that routine return
/// failure; otherwise returns.
pub fn fail_user_access(frame: &crate::frame::FaultFrame) {
    if let Some(regs) = crate::user::fixup(frame) {
        crate::cpu::clear_in_fault();
        // SAFETY: `fixup` gives the routine's own state (the genuine frame's) at its
        // failure landing, which needs nothing but returns.
        unsafe { jump_to(&regs) }
    }
}
