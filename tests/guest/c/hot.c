/* A program for the profiler's test: most of its time goes to one function of its
   own (`burn_cycles`, kept out of line and fed its last result, so it runs
   every time), the rest to writes to /dev/null (the
   kernel's write path). Prints the checksum so the loop is not optimized away. */
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) unsigned long burn_cycles(unsigned long seed, unsigned long n) {
    unsigned long x = seed;
    for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
    return x;
}

int main(void) {
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
