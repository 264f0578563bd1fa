/* Breaks the kernel's contract: moves the GS base (which belongs to the kernel) to an
   unmapped address, then makes a system call. Run with --no-rewrite, the ring-0 trap
   stub faults; the VMM must report an unrecoverable exception (125). */
#include <stdint.h>

int main(void) {
    __asm__ volatile("wrgsbase %0" ::"r"((uint64_t)0x1000));
    __asm__ volatile("mov $39, %%eax; syscall" ::: "rax", "rcx", "r11", "memory");
    return 0;
}
