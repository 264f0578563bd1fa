/* A program that wrecks its VM: it overwrites the kernel's interrupt table (every
   page is writable from ring 3, by design) and then faults. The CPU cannot deliver
   the exception and shuts down; the VMM must report it and exit 125, not crash. */
#include <stdint.h>
#include <string.h>

int main(void) {
    /* The IDT, through the direct map (onering-abi: DIRECT_MAP_BASE + IDT_PHYS). */
    volatile uint64_t *idt = (uint64_t *)(0xffff808000000000ull + 0x101000);
    for (int i = 0; i < 512; i++) idt[i] = 0;
    __asm__ volatile("ud2");
    return 0;
}
