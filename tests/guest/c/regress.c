/* Regression tests for what fuzzing found (issue 13), compared with the host line
   by line: memory calls on ranges that wrap around the top of the address space
   (once a kernel panic), vfork of a thread whose child ends at once (once a hung
   parent), copies into read-only segments (EFAULT, not a write), mincore, mlock,
   msync, PR_SET_KEEPCAPS and /dev/full. Prints "ok ..." lines; exit status is the
   number of failures. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char ro[3 * 4096] __attribute__((aligned(4096))) = "read-only";
static char stack[65536];
static int quick(void *a) { return 0; }
static volatile int got;
static void on_usr1(int s) { got++; }

static void wrapping_ranges(void) {
    const unsigned long top = 0xfffffffffffff000ul;
    char what[96];
    for (unsigned long len = 1; len < 0x3000; len += 0x7ff) {
        long r;
        unsigned char v[8];
#define SAME(call, name)                                                       \
    r = (call);                                                                \
    snprintf(what, sizeof what, "%s(top, %#lx) = %ld errno %d", name, len, r, \
             r < 0 ? errno : 0);                                               \
    CHECK(1, what);
        errno = 0; SAME(syscall(SYS_madvise, top, len, MADV_DONTNEED), "madvise dontneed");
        errno = 0; SAME(syscall(SYS_madvise, top, len, MADV_NORMAL), "madvise normal");
        errno = 0; SAME(syscall(SYS_mprotect, top, len, PROT_READ), "mprotect");
        errno = 0; SAME(syscall(SYS_munmap, top, len), "munmap");
        errno = 0; SAME(syscall(SYS_msync, top, len, MS_SYNC), "msync");
        errno = 0; SAME(syscall(SYS_mremap, top, len, 8192, MREMAP_MAYMOVE), "mremap");
        errno = 0; SAME(syscall(SYS_mmap, top, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), "mmap fixed");
        errno = 0; SAME(syscall(SYS_mincore, top, len, v), "mincore");
        errno = 0; SAME(syscall(SYS_mlock, top, len), "mlock");
        errno = 0; SAME(syscall(SYS_munlock, top, len), "munlock");
    }
}

static void vforks(void) {
    int bad = 0;
    for (int i = 0; i < 50; i++)
        if (clone(quick, stack + sizeof stack, CLONE_VM | CLONE_VFORK | CLONE_THREAD | CLONE_SIGHAND, 0) <= 0) bad++;
    CHECK(bad == 0, "vfork of a thread that ends at once returns, 50 times");
    bad = 0;
    for (int i = 0; i < 50; i++) {
        int pid = clone(quick, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, 0);
        int st;
        if (pid <= 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) bad++;
    }
    CHECK(bad == 0, "vfork of a process that ends at once returns, 50 times");
}

static void read_only(void) {
    char *p = (char *)ro + 4096; /* a whole page of .rodata */
    int fd = open("/dev/zero", O_RDONLY);
    CHECK_ERR(syscall(SYS_read, fd, p, 16), EFAULT, "read into .rodata is EFAULT");
    CHECK_ERR(syscall(SYS_fstat, fd, p), EFAULT, "fstat into .rodata is EFAULT");
    CHECK_ERR(syscall(SYS_clock_gettime, CLOCK_MONOTONIC, p), EFAULT, "clock_gettime into .rodata is EFAULT");
    CHECK_ERR(syscall(SYS_getrandom, p, 16, 0), EFAULT, "getrandom into .rodata is EFAULT");
    CHECK_ERR(syscall(SYS_uname, p), EFAULT, "uname into .rodata is EFAULT");
    CHECK_ERR(syscall(SYS_pipe, p), EFAULT, "pipe into .rodata is EFAULT");
    CHECK_ERR(syscall(SYS_read, fd, (void *)vforks, 16), EFAULT, "read into .text is EFAULT");
    CHECK(p[0] == 0 && ro[0] == 'r', ".rodata is unchanged");
    close(fd);
    /* What mprotect makes read-only is read-only for the kernel too. */
    char *m = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fd = open("/dev/zero", O_RDONLY);
    CHECK(mprotect(m, 4096, PROT_READ) == 0, "mprotect read-only");
    CHECK_ERR(read(fd, m, 4096), EFAULT, "read into a read-only mapping is EFAULT");
    CHECK(read(fd, m + 4096, 4096) == 4096, "read into the writable page beside it works");
    close(fd);
    munmap(m, 8192);
}

static void misc(void) {
    unsigned char v[4];
    char *p = mmap(0, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    p[0] = 1;
    CHECK(mincore(p, 4 * 4096, v) == 0 && (v[0] & 1), "mincore: a touched page is resident");
    CHECK_ERR(mincore(p + 1, 4096, v), EINVAL, "mincore: unaligned address is EINVAL");
    CHECK_ERR(mincore(p, 4096, (unsigned char *)ro + 4096), EFAULT, "mincore: read-only vector is EFAULT");
    munmap(p + 4096, 4096);
    CHECK_ERR(mincore(p, 4 * 4096, v), ENOMEM, "mincore: a hole is ENOMEM");
    CHECK(mlock(p, 4096) == 0 && munlock(p, 4096) == 0, "mlock and munlock a mapping");
    CHECK_ERR(mlock(p, 4 * 4096), ENOMEM, "mlock over a hole is ENOMEM");
    CHECK(msync(p, 4096, MS_SYNC) == 0, "msync");
    CHECK_ERR(msync(p, 4096, MS_SYNC | MS_ASYNC), EINVAL, "msync with both SYNC and ASYNC is EINVAL");
    CHECK_ERR(mlockall(0), EINVAL, "mlockall(0) is EINVAL");
    CHECK(munlockall() == 0, "munlockall");
    CHECK(prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0) == 0, "keepcaps is off at first");
    CHECK(prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == 0 && prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0) == 1, "PR_SET_KEEPCAPS");
    CHECK_ERR(prctl(PR_SET_KEEPCAPS, 2, 0, 0, 0), EINVAL, "PR_SET_KEEPCAPS 2 is EINVAL");
    int fd = open("/dev/full", O_WRONLY);
    CHECK_ERR(write(fd, "x", 1), ENOSPC, "a write to /dev/full is ENOSPC");
    close(fd);
}

int main(void) {
    wrapping_ranges();
    vforks();
    read_only();
    misc();
    return failures;
}
