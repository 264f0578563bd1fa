// Rewritten `cpuid` (this program's own, answered by the kernel from the VMM's
// table) against a `cpuid` nobody rewrites (built at run time in anonymous
// memory, so it reaches the CPU, here the hypervisor), on every CPU, for every
// basic, hypervisor and extended leaf, sub-leaves 0 to 9, and leaves past the
// ends. Both must agree to the bit; on the host both are the CPU's own.
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

typedef void (*raw_fn)(uint32_t leaf, uint32_t sub, uint32_t out[4]);

static void rewritten(uint32_t leaf, uint32_t sub, uint32_t out[4]) {
    uint32_t a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(leaf), "c"(sub));
    out[0] = a, out[1] = b, out[2] = c, out[3] = d;
}

// push %rbx; mov %edi,%eax; mov %esi,%ecx; mov %rdx,%r8; cpuid;
// mov %eax,(%r8); mov %ebx,4(%r8); mov %ecx,8(%r8); mov %edx,12(%r8); pop %rbx; ret
static const unsigned char RAW[] = {0x53, 0x89, 0xf8, 0x89, 0xf1, 0x49, 0x89, 0xd0, 0x0f, 0xa2, 0x41, 0x89, 0x00,
                                    0x41, 0x89, 0x58, 0x04, 0x41, 0x89, 0x48, 0x08, 0x41, 0x89, 0x50, 0x0c, 0x5b, 0xc3};

static int bad;
static long compared;

static void compare(raw_fn raw, int cpu, uint32_t leaf, uint32_t sub) {
    uint32_t r[4], t[4];
    rewritten(leaf, sub, r);
    raw(leaf, sub, t);
    compared++;
    if (memcmp(r, t, sizeof r) != 0 && bad++ < 20)
        printf("cpu %d leaf %#x.%u: rewritten %08x %08x %08x %08x, trapped %08x %08x %08x %08x\n", cpu, leaf, sub, r[0],
               r[1], r[2], r[3], t[0], t[1], t[2], t[3]);
}

static void range(raw_fn raw, int cpu, uint32_t first) {
    uint32_t top[4];
    rewritten(first, 0, top);
    uint32_t last = top[0] >= first && top[0] - first < 64 ? top[0] : first;
    for (uint32_t leaf = first; leaf <= last + 2; leaf++)
        for (uint32_t sub = 0; sub < 10; sub++) compare(raw, cpu, leaf, sub);
}

int main(void) {
    void *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return perror("mmap"), 1;
    memcpy(m, RAW, sizeof RAW);
    if (mprotect(m, 4096, PROT_READ | PROT_EXEC)) return perror("mprotect"), 1;
    raw_fn raw = (raw_fn)m;
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all)) return perror("sched_getaffinity"), 1;
    int cpus = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && cpus < 8; cpu++) {
        if (!CPU_ISSET(cpu, &all)) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one)) return perror("sched_setaffinity"), 1;
        cpus++;
        range(raw, cpu, 0);
        range(raw, cpu, 0x40000000);
        range(raw, cpu, 0x80000000);
        compare(raw, cpu, 0x7fffffff, 0);
        compare(raw, cpu, 0xffffffff, 3);
        compare(raw, cpu, 0x12345678, 0);
    }
    printf("cpuid: %s\n", bad ? "rewritten and trapped differ" : "rewritten and trapped agree on every leaf and CPU");
    fprintf(stderr, "%ld queries on %d CPUs\n", compared, cpus);
    printf("done\n");
    return bad != 0;
}
