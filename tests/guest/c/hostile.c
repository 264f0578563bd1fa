/* Arguments a broken or malicious program might pass: each must give an error code
   (never a kernel panic or a hung VM). Prints "hostile ok" when every answer is right. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <poll.h>
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
    /* epoll, eventfd, poll, clone3 with bad pointers and sizes. */
    int ep = epoll_create1(0), pp[2];
    pipe(pp);
    if (epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], (void *)8) != -1 || errno != EFAULT) return fail("epoll_ctl bad event");
    struct epoll_event ev = {EPOLLIN, {0}};
    epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev);
    write(pp[1], "x", 1);
    if (epoll_wait(ep, (void *)8, 4, 0) != -1 || errno != EFAULT) return fail("epoll_wait bad buffer");
    if (epoll_wait(ep, &ev, -1, 0) != -1 || errno != EINVAL) return fail("epoll_wait negative maxevents");
    if (epoll_wait(pp[0], &ev, 1, 0) != -1 || errno != EINVAL) return fail("epoll_wait on a pipe");
    int efd = eventfd(0, EFD_NONBLOCK);
    if (read(efd, (void *)8, 8) != -1 || (errno != EFAULT && errno != EAGAIN)) return fail("eventfd read bad buffer");
    if (write(efd, (void *)8, 8) != -1 || errno != EFAULT) return fail("eventfd write bad buffer");
    if (poll((void *)8, 1, 0) != -1 || errno != EFAULT) return fail("poll bad array");
    if (poll(&(struct pollfd){0, 0, 0}, 1ul << 40, 0) != -1 || errno != EINVAL) return fail("poll of 2^40 fds");
    if (syscall(435 /* clone3 */, (void *)8, 64) != -1 || errno != EFAULT) return fail("clone3 bad args");
    if (syscall(435, &ev, 8) != -1 || errno != EINVAL) return fail("clone3 short args");
    if (syscall(435, &ev, 1ul << 20) != -1 || errno != E2BIG) return fail("clone3 huge args");
    if (syscall(SYS_copy_file_range, efd, 0, 1, 0, 1ul << 40, 0) != -1 || errno != EINVAL)
        return fail("copy_file_range of an eventfd");
    if (syscall(SYS_utimensat, AT_FDCWD, "/tmp", (void *)8, 0) != -1 || errno != EFAULT) return fail("utimensat bad times");
    if (syscall(SYS_chmod, NULL, 0) != -1 || errno != EFAULT) return fail("chmod of a null path");
    if (syscall(SYS_utimensat, AT_FDCWD, NULL, NULL, 0) != -1 || errno != EFAULT) return fail("utimensat null path, cwd");
    unsigned long two[2] = {1, 2};
    if (write(efd, two, 16) != -1 || errno != EINVAL) return fail("eventfd write of 16 bytes");
    printf("hostile ok\n");
    return 0;
}
