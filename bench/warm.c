/* bench/warm.sh: first touch of fresh memory after the program was idle for a
 * while (it sleeps SLEEP_MS first): `warm MB SLEEP_MS` maps MB megabytes, writes a
 * byte in every 4 KiB page, and prints the microseconds per page; then maps and
 * touches it again (memory the program had and gave back). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double touch(long n) {
    double t = now();
    char *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(1);
    for (long i = 0; i < n; i += 4096) p[i] = 1;
    t = now() - t;
    munmap(p, n);
    return t * 1e6 / (n / 4096);
}

int main(int argc, char **argv) {
    long n = (argc > 1 ? atol(argv[1]) : 32) << 20;
    long ms = argc > 2 ? atol(argv[2]) : 500;
    struct timespec s = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&s, 0);
    double first = touch(n), again = touch(n);
    printf("%.2f %.2f\n", first, again);
    return 0;
}
