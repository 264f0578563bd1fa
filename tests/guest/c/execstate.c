// What a program inherits across fork and execve, compared with the host:
// resource limits are kept by both (and the descriptor limit still applies);
// the FPU state is not: after execve the new program starts with Linux's initial
// x87 control word (0x37f), MXCSR (0x1f80) and zeroed vector registers, whatever
// the old program left in them. Run with this program's directory as a volume.
#define _GNU_SOURCE
#include "check.h"
#include <stdint.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void show_limits(const char *who) {
    struct rlimit n, c;
    getrlimit(RLIMIT_NOFILE, &n);
    getrlimit(RLIMIT_CORE, &c);
    printf("%s: nofile %ld/%ld core %ld/%ld\n", who, (long)n.rlim_cur, (long)n.rlim_max, (long)c.rlim_cur,
           (long)c.rlim_max);
    errno = 0;
    int r = dup2(1, 150);
    printf("%s: dup2 onto 150: %d %s\n", who, r, r < 0 ? strerror(errno) : "");
    r = dup2(1, 99);
    printf("%s: dup2 onto 99: %d\n", who, r);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "exec")) {
        // First, before anything else touches them.
        uint32_t mxcsr;
        uint16_t fcw;
        uint64_t x5[2], x15[2];
        __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
        __asm__ volatile("fnstcw %0" : "=m"(fcw));
        __asm__ volatile("movdqu %%xmm5, %0" : "=m"(x5));
        __asm__ volatile("movdqu %%xmm15, %0" : "=m"(x15));
        printf("after execve: mxcsr %#x fcw %#x xmm5 %#lx:%#lx xmm15 %#lx:%#lx\n", mxcsr, fcw, (unsigned long)x5[0],
               (unsigned long)x5[1], (unsigned long)x15[0], (unsigned long)x15[1]);
        show_limits("after execve");
        return 0;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *self = (const char *)getauxval(AT_EXECFN);
    struct rlimit n = {100, 200}, c = {0, 0};
    CHECK(setrlimit(RLIMIT_NOFILE, &n) == 0, "setrlimit NOFILE 100/200");
    CHECK(setrlimit(RLIMIT_CORE, &c) == 0, "setrlimit CORE 0/0");
    show_limits("parent");
    pid_t p = fork();
    if (p == 0) {
        show_limits("fork child");
        _exit(0);
    }
    waitpid(p, NULL, 0);
    p = fork();
    if (p == 0) {
        uint32_t mxcsr = 0x9fc0; // FTZ, DAZ, round toward zero... and masks
        uint16_t fcw = 0x27f;    // double precision
        uint64_t junk[2] = {0x1122334455667788ull, 0x99aabbccddeeff00ull};
        __asm__ volatile("ldmxcsr %0" ::"m"(mxcsr));
        __asm__ volatile("fldcw %0" ::"m"(fcw));
        __asm__ volatile("movdqu %0, %%xmm5\n\tmovdqu %0, %%xmm15" ::"m"(junk) : "xmm5", "xmm15");
        char *a[] = {(char *)self, "exec", NULL};
        execve(self, a, environ);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the exec'd child ran");
    printf("done\n");
    return failures;
}
