/* Exercises brk and anonymous mmap/munmap through malloc and directly, and checks
   that fresh memory is zeroed. Prints "memory ok" on success, exits 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <errno.h>
#include <sys/syscall.h>

static int fail(const char *what) {
    printf("FAIL: %s\n", what);
    return 1;
}

int main(void) {
    /* musl's sbrk refuses to move the break: use the system call. */
    char *b0 = (char *)syscall(SYS_brk, 0);
    if ((char *)syscall(SYS_brk, b0 + (1 << 20)) != b0 + (1 << 20)) return fail("brk grow");
    memset(b0, 0x5a, 1 << 20);
    if ((char *)syscall(SYS_brk, b0) != b0) return fail("brk shrink");
    if ((char *)syscall(SYS_brk, b0 + (1 << 20)) != b0 + (1 << 20)) return fail("brk regrow");
    for (int i = 0; i < (1 << 20); i++)
        if (b0[i] != 0) return fail("regrown brk not zero");
    if ((char *)syscall(SYS_brk, 16) != b0 + (1 << 20)) return fail("brk below the start must not move it");

    for (int round = 0; round < 50; round++) {
        size_t sz = (size_t)(round + 1) * 100000;
        char *p = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return fail("mmap");
        for (size_t i = 0; i < sz; i += 4096)
            if (p[i] != 0) return fail("mmap memory not zero");
        memset(p, round, sz);
        if (munmap(p, sz)) return fail("munmap");
    }
    void **blocks = malloc(1000 * sizeof *blocks);
    for (int i = 0; i < 1000; i++) {
        blocks[i] = malloc((size_t)(i % 37) * 1000 + 1);
        if (!blocks[i]) return fail("malloc");
        memset(blocks[i], 1, (size_t)(i % 37) * 1000 + 1);
    }
    for (int i = 0; i < 1000; i++) free(blocks[i]);
    free(blocks);

    errno = 0;
    if (mmap(0, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED || errno != EINVAL)
        return fail("mmap of length 0 must fail with EINVAL");
    if (munmap((void *)0x1001, 10) == 0 || errno != EINVAL) return fail("unaligned munmap must fail");
    void *r = mmap(0, 1ul << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return fail("1 GiB PROT_NONE reservation");
    if (mmap((char *)r + (4 << 20), 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != (char *)r + (4 << 20))
        return fail("MAP_FIXED commit inside a reservation");
    memset((char *)r + (4 << 20), 7, 1 << 20);
    if (mprotect((char *)r + (4 << 20), 4096, PROT_READ)) return fail("mprotect");
    if (mprotect((void *)0x1000, 4096, PROT_READ) == 0 || errno != ENOMEM) return fail("mprotect of unmapped memory must fail with ENOMEM");
    if (write(1, (void *)8, 10) != -1 || errno != EFAULT) return fail("write from a bad pointer must fail with EFAULT");
    printf("memory ok\n");
    return 0;
}
