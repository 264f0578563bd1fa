/* Arguments a broken or malicious program might pass: each must give an error code
   (never a kernel panic or a hung VM). Prints "hostile ok" when every answer is right. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static int fail(const char *what) {
    printf("FAIL: %s (errno %d)\n", what, errno);
    return 1;
}

int main(void) {
    /* Memory made PROT_NONE and then unmapped must come back zeroed. */
    size_t sz = 4 << 20;
    unsigned char *p = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return fail("mmap");
    memset(p, 0xff, sz);
    if (mprotect(p, sz, PROT_NONE) || munmap(p, sz)) return fail("mprotect/munmap");
    p = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return fail("mmap again");
    for (size_t i = 0; i < sz; i++)
        if (p[i]) return fail("reused memory not zero");

    /* Splitting a reservation into ever more mappings ends in ENOMEM, not a panic. */
    char *r = mmap(0, 1ul << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return fail("reservation");
    int split = 0;
    for (long i = 0; i < 100000; i++) {
        if (munmap(r + i * 8192, 4096)) {
            if (errno != ENOMEM) return fail("split error is not ENOMEM");
            split = 1;
            break;
        }
    }
    if (!split) return fail("mappings were never limited");

    /* Thousands of distinct unknown system calls. */
    for (long n = 1000; n < 4000; n++)
        if (syscall(n) != -1 || errno != ENOSYS) return fail("unknown syscall");

    /* Bad pointers and lengths. */
    if (writev(1, (struct iovec *)8, 1) != -1 || errno != EFAULT) return fail("writev bad vector");
    struct iovec iov[2] = {{"x", ~0ul >> 1}, {"y", ~0ul >> 1}};
    if (writev(1, iov, 2) != -1 || errno != EINVAL) return fail("writev overflowing lengths");
    if (writev(1, iov, 5000) != -1 || errno != EINVAL) return fail("writev too many vectors");
    if (write(1, (void *)-4096l, 10) != -1 || errno != EFAULT) return fail("write from a kernel address");
    if (syscall(SYS_brk, ~0ul) == -1) return fail("brk far away must just not move");
    if (mmap((void *)0x7ffffffff000, 0x2000, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
        return fail("mapping past the end of user space");
    if (mmap(0, 1ul << 46, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED || errno != ENOMEM)
        return fail("64 TiB of memory");
    printf("hostile ok\n");
    return 0;
}
