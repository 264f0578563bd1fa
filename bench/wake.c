/* Cross-CPU wake-up latency: a thread blocks on a futex; another, after a gap,
   stamps the time and wakes it; the woken thread stamps the time again. With a
   short gap the sleeper's CPU is still spinning (onering) or haltpolling (the host);
   with a long gap it has halted, and waking it costs a kick (onering: a hostcall
   that signals the VMM's vCPU thread) or an IPI (the host).
   usage: wake [rounds] [gap_us]; prints median and p99 wake-up latency in us. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int word;
static volatile long stamp;
static long rounds, gap_us;
static long *lat;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void *sleeper(void *arg) {
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        while (word == 0) syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
        lat[i] = now_ns() - stamp;
        __atomic_store_n(&word, 0, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 2000;
    gap_us = argc > 2 ? atol(argv[2]) : 1000;
    lat = calloc(rounds, sizeof *lat);
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    for (long i = 0; i < rounds; i++) {
        struct timespec g = {gap_us / 1000000, (gap_us % 1000000) * 1000};
        nanosleep(&g, NULL);
        while (__atomic_load_n(&word, __ATOMIC_SEQ_CST) != 0) sched_yield();
        stamp = now_ns();
        __atomic_store_n(&word, 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
    pthread_join(t, NULL);
    qsort(lat, rounds, sizeof *lat, cmp);
    printf("%.1f %.1f\n", lat[rounds / 2] / 1000.0, lat[rounds * 99 / 100] / 1000.0);
    return 0;
}
