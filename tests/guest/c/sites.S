/* System-call sites of several shapes, for the rewriter. Each function takes a
   pointer to 16 input words and 16 output words (rdi, rsi), loads registers and the
   flags (in[14]) from the inputs, makes a getpid system call in its own way, and
   stores every register (and the flags, and a red-zone word) to the outputs. Callee-saved registers are saved
   on the stack first and restored after. */
    .section .note.GNU-stack,"",@progbits
    .text

/* Loads rbx, rdx, r8-r10, r12-r15, rbp from in[1..]; keeps `out` in the red zone's
   neighbour, the stack. */
.macro PROLOGUE
    push %rbx
    push %rbp
    push %r12
    push %r13
    push %r14
    push %r15
    push %rsi                   /* out */
    mov 8(%rdi), %rbx
    mov 16(%rdi), %rdx
    mov 24(%rdi), %r8
    mov 32(%rdi), %r9
    mov 40(%rdi), %r10
    mov 48(%rdi), %r12
    mov 56(%rdi), %r13
    mov 64(%rdi), %r14
    mov 72(%rdi), %r15
    mov 80(%rdi), %rbp
    mov 88(%rdi), %rsi
    movq 96(%rdi), %xmm0
    push 112(%rdi)              /* the flags to carry across the system call */
    popfq
    movq $0x5ed20e, -8(%rsp)    /* a red-zone word below the stack pointer */
    mov 104(%rdi), %rdi
.endm

.macro EPILOGUE
    mov -8(%rsp), %rcx          /* the red-zone word, before anything is pushed */
    pushfq
    push %rdi
    mov 16(%rsp), %rdi          /* out */
    pop 8*1(%rdi)               /* rdi */
    pop 8*2(%rdi)               /* flags */
    mov %rax, 0(%rdi)
    mov %rbx, 24(%rdi)
    mov %rdx, 32(%rdi)
    mov %r8, 40(%rdi)
    mov %r9, 48(%rdi)
    mov %r10, 56(%rdi)
    mov %r12, 64(%rdi)
    mov %r13, 72(%rdi)
    mov %r14, 80(%rdi)
    mov %r15, 88(%rdi)
    mov %rbp, 96(%rdi)
    mov %rsi, 104(%rdi)
    movq %xmm0, 112(%rdi)
    mov %rcx, 120(%rdi)
    pop %rsi
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbp
    pop %rbx
    ret
.endm

    .globl site_mov_imm
site_mov_imm:                   /* mov $nr, %eax ; syscall */
    PROLOGUE
    mov $39, %eax
    syscall
    EPILOGUE

    .globl site_syscall_first
site_syscall_first:             /* syscall followed by code (nr loaded earlier) */
    PROLOGUE
    mov $39, %eax
    jmp 1f
1:  syscall
    cmp $-4095, %rax
    EPILOGUE

    .globl site_rip_relative
site_rip_relative:              /* the number comes from memory, rip-relative */
    PROLOGUE
    mov number(%rip), %eax
    syscall
    EPILOGUE

    .section .rodata
number: .long 39
