/* A thread blocked reading stdin (-i, nothing written) holds up nobody: another
   thread keeps making system calls at full speed, on any number of vCPUs (stdin is
   a request to the VMM and a wait in the scheduler, not a vCPU stuck in the host).
   Prints the ratio of the call rate with the reader blocked to the rate before. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int started;

static void *reader(void *arg) {
    (void)arg;
    char c;
    started = 1;
    long n = read(0, &c, 1); /* blocks: the test keeps stdin open and silent */
    printf("reader woke up: %ld\n", n);
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static double rate(long n) {
    double t0 = now();
    for (long i = 0; i < n; i++)
        syscall(SYS_getppid);
    return (now() - t0) / n;
}

int main(void) {
    long n = 2000000;
    rate(n / 10); /* warm up */
    double before = rate(n);
    pthread_t t;
    pthread_create(&t, 0, reader, 0);
    while (!started)
        sched_yield();
    usleep(20000); /* the reader is now blocked in read */
    double during = rate(n);
    double ratio = during / before;
    printf("blocked reader: calls %.2fx as slow as before\n", ratio);
    fflush(stdout);
    /* Within 3x: the calls keep going (a vCPU stuck in the host, or a lock held
       across it, would stop them entirely). */
    _exit(ratio < 3.0 ? 0 : 1);
}
