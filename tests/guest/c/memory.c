/* Exercises brk and anonymous mmap/munmap through malloc and directly, and checks
   that fresh memory is zeroed; large mappings backed on first touch (more address
   space than the VM has memory; the kernel writing into untouched parts; 8 MiB
   thread stacks). Prints "memory ok" on success, exits 1 otherwise.
   `memory oom` touches more than the VM has: onering kills it (SIGKILL, as the
   OOM killer would). */
#define _GNU_SOURCE
#include <pthread.h>
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

static void *on_big_stack(void *arg) {
    volatile char buf[64 * 1024];
    buf[0] = 1;
    return (void *)(long)(buf[0] + (long)arg);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        /* Touch one byte per 2 MiB of 32 mappings of 32 MiB: more than --mem. */
        for (int m = 0; m < 32; m++) {
            char *p = mmap(0, 32 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) return fail("32 MiB mapping");
            for (size_t i = 0; i < (32 << 20); i += 2 << 20) p[i] = 1;
        }
        printf("not killed\n");
        return 0;
    }
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

    /* Three 200 MiB mappings (more than the VM's 256 MiB): blocks are backed
       when touched, by the program or by the kernel writing into them. */
    char *big[3];
    for (int i = 0; i < 3; i++) {
        big[i] = mmap(0, 200 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (big[i] == MAP_FAILED) return fail("200 MiB mapping");
        for (size_t off = 0; off < (20 << 20); off += 4096)
            if (big[i][off] != 0) return fail("lazily backed memory not zero");
        memset(big[i] + (100 << 20), 0x33, 3 << 20);
        if (syscall(SYS_getrandom, big[i] + (150 << 20) - 8, 4096, 0) != 4096)
            return fail("the kernel writing into an untouched part");
    }
    for (int i = 0; i < 3; i++)
        if (big[i][(100 << 20) + (3 << 20) - 1] != 0x33 || munmap(big[i], 200 << 20)) return fail("big mapping");
    if (mmap(0, 64ul << 30, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED || errno != ENOMEM)
        return fail("a mapping larger than all memory must fail with ENOMEM");
    /* Moving a large, mostly untouched mapping (glibc's realloc does this): what was
       written comes along; a read-only one moves too. */
    char *m8 = mmap(0, 8 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    m8[3 << 20] = 42;
    mmap(m8 + (8 << 20), 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0); /* no room to grow */
    char *m16 = mremap(m8, 8 << 20, 16 << 20, MREMAP_MAYMOVE);
    if (m16 == MAP_FAILED || m16 == m8 || m16[3 << 20] != 42 || m16[7 << 20] != 0 || m16[12 << 20] != 0)
        return fail("mremap moving a lazily backed mapping");
    munmap(m16, 16 << 20);
    munmap(m8 + (8 << 20), 4096);
    char *ro = mmap(0, 8 << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mmap(ro + (8 << 20), 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    char *ro2 = mremap(ro, 8 << 20, 12 << 20, MREMAP_MAYMOVE);
    if (ro2 == MAP_FAILED || ro2[5 << 20] != 0) return fail("mremap moving a read-only mapping");
    munmap(ro2, 12 << 20);
    munmap(ro + (8 << 20), 4096);
    /* A read of a few bytes into a huge untouched buffer backs nothing more. */
    int pp[2];
    pipe(pp);
    write(pp[1], "hi", 2);
    char *huge = mmap(0, 200 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (read(pp[0], huge, 200 << 20) != 2 || huge[1] != 'i') return fail("a short read into a huge buffer");
    munmap(huge, 200 << 20);
    close(pp[0]);
    close(pp[1]);

    /* 48 threads with 8 MiB stacks (glibc's default size): 384 MiB of stacks. */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 8 << 20);
    pthread_t th[48];
    for (long i = 0; i < 48; i++)
        if (pthread_create(&th[i], &attr, on_big_stack, (void *)i)) return fail("thread with an 8 MiB stack");
    for (long i = 0; i < 48; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        if ((long)ret != i + 1) return fail("thread result");
    }
    printf("memory ok\n");
    return 0;
}
