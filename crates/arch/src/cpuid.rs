//! `cpuid` answered in ring 3. Here a `cpuid` exits to the hypervisor, which
//! emulates it (~27 µs under PVM), and glibc's loader runs ~70 of them in every
//! process. The rewriter turns the program's `cpuid`s into calls to
//! `cpuid_entry` (on the thread's kernel stack, like a rewritten system call),
//! which answers from the table the VMM wrote at boot (`onering_abi::cpuid`: what
//! KVM answers, with each CPU's APIC id). A leaf the table lacks is asked of the
//! CPU once per CPU and remembered: nothing in a VM's CPUID changes after boot.
//! The kernel's own questions ([`query`]) go the same way.

use alloc::vec::Vec;
use onering_abi::cpuid::{self, Entry};
use spin::{Mutex, Once};

static TABLE: Once<Vec<Entry>> = Once::new();

/// Leaves the table lacked, as the CPU answered them: (cpu, leaf, sub-leaf) and
/// the registers, at most [`MISSES`], the oldest replaced first.
static ASKED: Mutex<Vec<Asked>> = Mutex::new(Vec::new());
type Asked = ((u32, u32, u32), [u32; 4]);
const MISSES: usize = 64;

/// Reads the VMM's table (at boot, once).
#[cfg(target_os = "none")]
pub(crate) fn init() {
    TABLE.call_once(|| {
        let at = onering_abi::layout::direct(onering_abi::layout::CPUID_PHYS);
        let len = onering_abi::layout::PAGE_SIZE as usize;
        // SAFETY: the CPUID page (boot area, mapped by the direct map) was written by the VMM before boot and nothing writes it after: a shared 'static view of its bytes is sound.
        let page: &'static [u8] = unsafe { core::slice::from_raw_parts(at as *const u8, len) };
        cpuid::decode(page)
    });
    // The cache of leaves the table lacks never grows past this while a program
    // waits in `cpuid_entry`.
    ASKED.lock().reserve_exact(MISSES);
}

/// What `cpuid` answers for EAX `leaf`, ECX `sub` on this CPU (EAX, EBX, ECX, EDX).
pub fn query(leaf: u32, sub: u32) -> [u32; 4] {
    let cpu = crate::cpu::cpu_id() as u32;
    if let Some(r) = TABLE.get().and_then(|t| cpuid::lookup(t, leaf, sub, cpu)) {
        return r;
    }
    let key = (cpu, leaf, sub);
    if let Some(r) = ASKED.lock().iter().find(|e| e.0 == key) {
        return r.1;
    }
    let r = core::arch::x86_64::__cpuid_count(leaf, sub);
    let regs = [r.eax, r.ebx, r.ecx, r.edx];
    let mut asked = ASKED.lock();
    if asked.len() >= MISSES {
        asked.remove(0);
    }
    asked.push((key, regs));
    regs
}

/// The Rust half of `cpuid_entry`.
extern "C" fn onering_cpuid(leaf: u32, sub: u32, out: &mut [u32; 4]) {
    *out = query(leaf, sub);
}

// (In a section of its own, which the linker script keeps: nothing in the kernel
// calls it; the VMM puts its address in the trampolines.)
// Ring 3, called by a rewritten site's trampoline on the thread's kernel stack
// (the interrupt stub then treats the thread as in the kernel and does not preempt
// it): EAX and ECX in, EAX, EBX, ECX, EDX out (upper halves zeroed, as `cpuid`
// leaves them); every other register and the flags kept.
core::arch::global_asm!(
    r#"
    .pushsection .text.cpuid, "ax"
    .global cpuid_entry
cpuid_entry:
    pushfq
    push %rbp
    mov %rsp, %rbp
    push %rsi
    push %rdi
    push %r8
    push %r9
    push %r10
    push %r11
    and $-16, %rsp
    sub $16, %rsp
    mov %eax, %edi
    mov %ecx, %esi
    mov %rsp, %rdx
    cld
    call {handler}
    mov (%rsp), %eax
    mov 4(%rsp), %ebx
    mov 8(%rsp), %ecx
    mov 12(%rsp), %edx
    lea -48(%rbp), %rsp
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rdi
    pop %rsi
    pop %rbp
    popfq
    ret
    .popsection
"#,
    handler = sym onering_cpuid,
    options(att_syntax)
);
