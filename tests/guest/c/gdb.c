/* The gdb stub's test program (crates/onering/tests/gdb.rs drives gdb against
 * it): a global to read at main, a function whose argument gdb reads at a
 * breakpoint, a second thread blocked in read() so that gdb lists two threads,
 * a system call of its own (which the rewriter turns into a jump to a
 * trampoline) for gdb to step over, and a known exit status (7); with an
 * argument it spins forever instead, for gdb's Ctrl-C. Built with -g -O0 so the
 * variables are where gdb looks for them. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

int magic = 24301;
static int fds[2];
volatile int counter;

static void *waiter(void *arg) {
    char c;
    if (read(fds[0], &c, 1) != 1)
        return 0;
    return arg;
}

__attribute__((noinline)) int compute(int x) {
    int secret = x * 6 + 1;
    counter += secret;
    return secret;
}

/* getpid, as a bare `syscall`: 1, the program being the VM's first process. */
__attribute__((noinline)) long raw_getpid(void) {
    long r;
    __asm__ volatile("mov $39, %%eax\n\tsyscall" : "=a"(r) : : "rcx", "r11", "memory");
    return r;
}

/* cpuid leaf 0, rewritten like a system call (its trampoline calls the
   kernel's ring-3 CPUID entry): EAX is the highest basic leaf, never 0. */
__attribute__((noinline)) unsigned raw_cpuid(void) {
    unsigned a, b, c, d;
    __asm__ volatile("xor %%ecx, %%ecx\n\tmov $0, %%eax\n\tcpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : : "memory");
    return a;
}

int main(int argc, char **argv) {
    (void)argv;
    while (argc > 1)
        counter += counter < 1000000000; /* spins on, never past INT_MAX (~2 s here) */
    pthread_t t;
    if (pipe(fds) != 0 || pthread_create(&t, 0, waiter, 0) != 0)
        return 1;
    int answer = compute(7);
    if (write(fds[1], "x", 1) != 1)
        return 2;
    pthread_join(t, 0);
    printf("answer %d pid %ld\n", answer + (raw_cpuid() == 0), raw_getpid());
    return answer - 36;
}
