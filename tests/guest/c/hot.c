/* A program for the profiler's test: most of its time goes to one function of its
   own (`burn_cycles`, kept out of line and fed its last result, so it runs
   every time), the rest to writes to /dev/null (the
   kernel's write path). Prints the checksum so the loop is not optimized away.
   With the argument "fork", a forked child does the work (in `child_loop`) while
   the parent waits: its stacks are walked through its own address space. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) unsigned long burn_cycles(unsigned long seed, unsigned long n) {
    unsigned long x = seed;
    for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
    return x;
}

__attribute__((noinline)) int child_loop(void) {
    int fd = open("/dev/null", O_WRONLY);
    char buf[64] = {0};
    unsigned long sum = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        sum += burn_cycles(sum, 2000000);
        for (int i = 0; i < 20000; i++) write(fd, buf, sizeof buf);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 400000000L);
    printf("hot %lu\n", sum & 1);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "fork")) return child_loop();
    pid_t c = fork();
    if (c == 0) _exit(child_loop());
    int st = 1;
    waitpid(c, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
