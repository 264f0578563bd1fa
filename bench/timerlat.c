/* cyclictest-style timer latency: N absolute sleeps of PERIOD µs on
   CLOCK_MONOTONIC; prints the median, p99 and maximum lateness in µs.
   BURN_US: after each wake-up, spin that long (a thread whose every wake-up
   costs host CPU, as a vCPU's return into the guest does on PVM).
   usage: timerlat [n] [period_us] [burn_us] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long period = (argc > 2 ? atol(argv[2]) : 200) * 1000;
    long burn = (argc > 3 ? atol(argv[3]) : 0) * 1000;
    long *late = malloc(n * sizeof *late);
    struct timespec next, now;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (long i = 0; i < n; i++) {
        next.tv_nsec += period;
        while (next.tv_nsec >= 1000000000) {
            next.tv_nsec -= 1000000000;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        late[i] = (now.tv_sec - next.tv_sec) * 1000000000L + (now.tv_nsec - next.tv_nsec);
        struct timespec spin;
        do
            clock_gettime(CLOCK_MONOTONIC, &spin);
        while ((spin.tv_sec - now.tv_sec) * 1000000000L + (spin.tv_nsec - now.tv_nsec) < burn);
    }
    qsort(late, n, sizeof *late, cmp);
    printf("%.1f %.1f %.1f\n", late[n / 2] / 1e3, late[n * 99 / 100] / 1e3, late[n - 1] / 1e3);
    return 0;
}
