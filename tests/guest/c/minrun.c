/* The minimum run time (sched.rs MIN_RUN_NS): on one vCPU, a thread sleeping 20 us
   at a time next to a busy thread wakes about once per millisecond, not every
   20 us (each preemption costs tens of microseconds of exits here), and it still
   wakes. Prints the number of wake-ups in 200 ms; the test checks the bounds. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static atomic_int stop;
static atomic_long wakes;

static void *sleeper(void *arg) {
    (void)arg;
    struct timespec ts = {0, 20000};
    while (!stop) {
        nanosleep(&ts, 0);
        wakes++;
    }
    return 0;
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, 0, sleeper, 0);
    long start = now_ns();
    while (now_ns() - start < 200000000L) {
    }
    stop = 1;
    long n = wakes;
    pthread_join(t, 0);
    printf("wakes %ld\n", n);
    return 0;
}
