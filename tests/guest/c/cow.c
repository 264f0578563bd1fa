// Copy-on-write after fork: parent and child each see the memory as it was at
// fork plus their own writes, whoever writes first and however much: a page or
// two (copied one at a time), many pages of a block (copied whole), writes by
// the kernel (read() into a buffer), a grandchild forked from a child that had
// written part of a block, munmap/mmap, MADV_DONTNEED and mremap in the child.
// Same output as the host.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

#define PAGE 4096
#define BIG (6 << 20)

static unsigned char global[64 * PAGE];


// Every page of p[0, len) holds byte `v` (checked at the start, the middle and
// the end of each page).
static int all(const unsigned char *p, size_t len, unsigned char v) {
    for (size_t i = 0; i < len; i += PAGE) {
        size_t last = i + PAGE - 1 < len ? i + PAGE - 1 : len - 1;
        if (p[i] != v || p[i + (last - i) / 2] != v || p[last] != v) return 0;
    }
    return 1;
}

static void wait_ok(pid_t p, const char *what) {
    int st = 0;
    CHECKF(waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %#x", what, st);
}

// The parent writes first while its child waits, then the child writes and
// checks; both sizes: a few pages and most of a block.
static void who_writes_first(void) {
    unsigned char *big = mmap(0, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *heap = malloc(8 * PAGE);
    unsigned char stack[4 * PAGE];
    memset(global, 1, sizeof global);
    memset(big, 2, BIG);
    memset(heap, 3, 8 * PAGE);
    memset(stack, 4, sizeof stack);
    for (int pages = 1; pages <= 64; pages *= 8) {
        int go[2], done[2];
        pipe(go);
        pipe(done);
        pid_t p = fork();
        if (p == 0) {
            char c;
            read(go[0], &c, 1); // the parent has written by now
            int ok = all(global, sizeof global, 1) && all(big, BIG, 2) && all(heap, 8 * PAGE, 3) &&
                     all(stack, sizeof stack, 4);
            memset(global, 9, (size_t)pages * PAGE > sizeof global ? sizeof global : (size_t)pages * PAGE);
            memset(big + (2 << 20), 9, (size_t)pages * PAGE);
            memset(stack, 9, PAGE);
            ok = ok && global[0] == 9 && big[2 << 20] == 9 && big[(2 << 20) - 1] == 2 && stack[0] == 9;
            write(done[1], "x", 1);
            _exit(ok ? 0 : 1);
        }
        memset(global, 5, sizeof global);
        memset(big + (2 << 20) + PAGE, 5, (size_t)pages * PAGE);
        memset(heap, 6, PAGE);
        stack[PAGE] = 7;
        write(go[1], "x", 1);
        char c;
        read(done[0], &c, 1);
        wait_ok(p, "child after the parent wrote");
        CHECKF(all(global, sizeof global, 5), "parent's global (%d pages)", pages);
        CHECKF(big[2 << 20] == 2 && big[(2 << 20) + PAGE] == 5 && all(heap, PAGE, 6) && stack[PAGE] == 7 &&
                  stack[0] == 4,
              "parent's own writes only (%d pages)", pages);
        memset(global, 1, sizeof global);
        memset(big, 2, BIG);
        memset(heap, 3, 8 * PAGE);
        memset(stack, 4, sizeof stack);
        close(go[0]), close(go[1]), close(done[0]), close(done[1]);
    }
    munmap(big, BIG);
    free(heap);
    printf("parent first, child after: ok\n");
}

// The kernel writes into the child's copy (read from a pipe), and into the
// parent's, each seeing its own.
static void kernel_writes(void) {
    int fd[2];
    pipe(fd);
    memset(global, 1, sizeof global);
    pid_t p = fork();
    if (p == 0) {
        write(fd[1], "child!", 6);
        int ok = read(fd[0], global + 3 * PAGE - 2, 6) == 6 && memcmp(global + 3 * PAGE - 2, "child!", 6) == 0;
        _exit(ok && global[0] == 1 ? 0 : 1);
    }
    wait_ok(p, "kernel writes in the child");
    CHECKF(all(global, sizeof global, 1), "parent unchanged by the child's read");
    close(fd[0]), close(fd[1]);
    printf("kernel writes: ok\n");
}

// A child writes part of a block and forks: the grandchild sees the child's
// memory, the parent its own.
static void grandchild(void) {
    memset(global, 1, sizeof global);
    pid_t p = fork();
    if (p == 0) {
        global[PAGE] = 2;
        pid_t g = fork();
        if (g == 0) {
            int ok = global[PAGE] == 2 && global[0] == 1;
            global[0] = 3;
            _exit(ok ? 0 : 1);
        }
        int st = 0;
        waitpid(g, &st, 0);
        _exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 && global[0] == 1 && global[PAGE] == 2 ? 0 : 1);
    }
    wait_ok(p, "grandchild");
    CHECKF(global[0] == 1 && global[PAGE] == 1, "parent unchanged by its descendants");
    printf("grandchild: ok\n");
}

// In the child: part of a block unmapped and mapped again reads zeros; pages
// dropped with MADV_DONTNEED read zeros; a region moved by mremap keeps its data.
// The parent's stay.
static void remap_in_child(void) {
    unsigned char *a = mmap(0, 16 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(a, 7, 16 * PAGE);
    pid_t p = fork();
    if (p == 0) {
        int ok = 1;
        munmap(a + 2 * PAGE, 2 * PAGE);
        unsigned char *b = mmap(a + 2 * PAGE, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                                -1, 0);
        ok = ok && b == a + 2 * PAGE && all(b, 2 * PAGE, 0) && a[0] == 7 && a[4 * PAGE] == 7;
        madvise(a + 6 * PAGE, 2 * PAGE, MADV_DONTNEED);
        ok = ok && all(a + 6 * PAGE, 2 * PAGE, 0) && a[8 * PAGE] == 7;
        unsigned char *m = mremap(a + 8 * PAGE, 8 * PAGE, 64 * PAGE, MREMAP_MAYMOVE);
        ok = ok && m != MAP_FAILED && all(m, 8 * PAGE, 7) && all(m + 8 * PAGE, 56 * PAGE, 0);
        _exit(ok ? 0 : 1);
    }
    wait_ok(p, "remapping in the child");
    CHECKF(all(a, 16 * PAGE, 7), "parent's mapping unchanged");
    munmap(a, 16 * PAGE);
    printf("munmap, madvise, mremap in the child: ok\n");
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    who_writes_first();
    kernel_writes();
    grandchild();
    remap_in_child();
    printf(failures ? "FAILED\n" : "all ok\n");
    return failures != 0;
}
