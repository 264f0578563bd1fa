/* The time a spinning program loses to interruptions it does not cause: spins for
   SECS seconds (default 2) reading the TSC, and every gap between two reads longer
   than 3 us is something that took the CPU away: an exit to the VMM, a host
   interrupt, a host preemption. Gaps of 1 ms or more are the host scheduler
   running something else (a busy machine); the rest is the price of being
   interrupted. Prints that price as a share of the time the program ran, then
   the gaps in bands (count/mean). bench/go.sh runs it with and without --profile:
   what the profiler costs, without the noise of other programs' CPU time.
   usage: gaps [SECS] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t rdtsc(void) {
    uint32_t a, d;
    __asm__ volatile("rdtsc" : "=a"(a), "=d"(d));
    return ((uint64_t)d << 32) | a;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 2;
    double t0 = now();
    uint64_t c0 = rdtsc();
    while (now() - t0 < 0.2) {
    }
    double hz = (rdtsc() - c0) / (now() - t0);
    static const double edges[] = {3, 10, 20, 40, 80, 200, 1000, 1e12};
    enum { BANDS = 7 };
    long count[BANDS] = {0};
    double sum[BANDS] = {0};
    uint64_t prev = rdtsc(), end = prev + (uint64_t)(secs * hz), min = (uint64_t)(3e-6 * hz);
    for (;;) {
        uint64_t t = rdtsc();
        if (t - prev > min) {
            double us = (t - prev) / hz * 1e6;
            for (int b = 0; b < BANDS; b++)
                if (us < edges[b + 1]) {
                    count[b]++;
                    sum[b] += us;
                    break;
                }
        }
        prev = t;
        if (t > end) break;
    }
    double lost = 0;
    for (int b = 0; b < BANDS - 1; b++) lost += sum[b];
    double ran = secs * 1e6 - sum[BANDS - 1];
    printf("lost %.2f%% of %.0f ms run in gaps under 1 ms |", 100 * lost / ran, ran / 1e3);
    for (int b = 0; b < BANDS; b++)
        printf(" [%g-%g us) %ld/%.0fus", edges[b], edges[b + 1], count[b], count[b] ? sum[b] / count[b] : 0);
    printf("\n");
    return 0;
}
