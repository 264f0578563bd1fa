/* Threads: create/join/detach, mutexes, condition variables, semaphores, barriers,
   rwlocks, thread-local storage, thread ids, sleeps. Same output on the host and in
   onering; prints "threads ok". */
#define _GNU_SOURCE
#include "check.h"
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NT 16
#define ITERS 2000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static __thread long tls = 7;
static long tls_seen[NT];
static pid_t tids[NT];

static void *adder(void *arg) {
    long id = (long)arg;
    tls += id;
    for (int i = 0; i < ITERS; i++) {
        pthread_mutex_lock(&mu);
        counter++;
        pthread_mutex_unlock(&mu);
        if (i % 500 == 0) sched_yield();
    }
    tls_seen[id] = tls;
    tids[id] = (pid_t)syscall(SYS_gettid);
    return (void *)(id * 10);
}

/* A bounded queue with a mutex and two condition variables. */
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static int queue[4], qlen, qhead;
static long consumed_sum;

static void *producer(void *arg) {
    (void)arg;
    for (int i = 1; i <= 1000; i++) {
        pthread_mutex_lock(&mu);
        while (qlen == 4) pthread_cond_wait(&not_full, &mu);
        queue[(qhead + qlen++) % 4] = i;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&mu);
        while (qlen == 0) pthread_cond_wait(&not_empty, &mu);
        consumed_sum += queue[qhead];
        qhead = (qhead + 1) % 4;
        qlen--;
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

static sem_t ping, pong;
static void *ponger(void *arg) {
    (void)arg;
    for (int i = 0; i < 500; i++) {
        sem_wait(&ping);
        sem_post(&pong);
    }
    return NULL;
}

static pthread_barrier_t bar;
static int phase_count[3];
static void *barrier_worker(void *arg) {
    (void)arg;
    for (int ph = 0; ph < 3; ph++) {
        __atomic_fetch_add(&phase_count[ph], 1, __ATOMIC_SEQ_CST);
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static long shared_a, shared_b;
static int torn;
static void *rw_worker(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < 300; i++) {
        if (id % 4 == 0) {
            pthread_rwlock_wrlock(&rw);
            shared_a++;
            sched_yield();
            shared_b++;
            pthread_rwlock_unlock(&rw);
        } else {
            pthread_rwlock_rdlock(&rw);
            if (shared_a != shared_b) torn = 1;
            pthread_rwlock_unlock(&rw);
        }
    }
    return NULL;
}

static volatile int detached_ran;
static void *detached(void *arg) {
    (void)arg;
    detached_ran = 1;
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    struct timespec t0, t1, d = {0, 20 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    nanosleep(&d, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ns = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
    return (void *)(intptr_t)(ns >= 20 * 1000 * 1000 && ns < 2000L * 1000 * 1000);
}

/* A reader that drains a pipe until end of file. */
static int pfd[2];
static long piped;
static void *drain(void *arg) {
    (void)arg;
    char b[4096];
    ssize_t n;
    while ((n = read(pfd[0], b, sizeof b)) > 0) piped += n;
    return NULL;
}

int main(void) {
    pthread_t t[NT];
    for (long i = 0; i < NT; i++) pthread_create(&t[i], NULL, adder, (void *)i);
    long rets = 0;
    for (int i = 0; i < NT; i++) {
        void *r;
        pthread_join(t[i], &r);
        rets += (long)r;
    }
    CHECK(counter == (long)NT * ITERS, "mutex: every increment counted");
    CHECK(rets == 10L * NT * (NT - 1) / 2, "join returns each thread's value");
    int tls_ok = tls == 7;
    for (int i = 0; i < NT; i++) tls_ok &= tls_seen[i] == 7 + i;
    CHECK(tls_ok, "thread-local storage is per thread");
    int tid_ok = 1;
    for (int i = 0; i < NT; i++) {
        tid_ok &= tids[i] != getpid() && tids[i] > 0;
        for (int j = 0; j < i; j++) tid_ok &= tids[i] != tids[j];
    }
    CHECK(tid_ok && syscall(SYS_gettid) == getpid(), "thread ids are distinct; the main thread's is the pid");

    pthread_t p, c;
    pthread_create(&c, NULL, consumer, NULL);
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    CHECK(consumed_sum == 1000L * 1001 / 2, "condition variables hand over every item");

    sem_init(&ping, 0, 0);
    sem_init(&pong, 0, 0);
    pthread_t pg;
    pthread_create(&pg, NULL, ponger, NULL);
    int rounds = 0;
    for (int i = 0; i < 500; i++) {
        sem_post(&ping);
        sem_wait(&pong);
        rounds++;
    }
    pthread_join(pg, NULL);
    CHECK(rounds == 500, "semaphores ping-pong");

    pthread_barrier_init(&bar, NULL, 8);
    pthread_t b[8];
    for (int i = 0; i < 8; i++) pthread_create(&b[i], NULL, barrier_worker, NULL);
    for (int i = 0; i < 8; i++) pthread_join(b[i], NULL);
    CHECK(phase_count[0] == 8 && phase_count[1] == 8 && phase_count[2] == 8, "barrier phases");

    pthread_t r[12];
    for (long i = 0; i < 12; i++) pthread_create(&r[i], NULL, rw_worker, (void *)i);
    for (int i = 0; i < 12; i++) pthread_join(r[i], NULL);
    CHECK(!torn && shared_a == 3 * 300 && shared_b == shared_a, "rwlock: readers never see a half update");

    pthread_t d;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    CHECK(pthread_create(&d, &attr, detached, NULL) == 0, "detached thread created");
    struct timespec ms = {0, 1000 * 1000};
    for (int i = 0; i < 1000 && !detached_ran; i++) nanosleep(&ms, NULL);
    CHECK(detached_ran, "detached thread ran");

    pthread_t s[4];
    for (int i = 0; i < 4; i++) pthread_create(&s[i], NULL, sleeper, NULL);
    int slept = 0;
    for (int i = 0; i < 4; i++) {
        void *ok;
        pthread_join(s[i], &ok);
        slept += (int)(intptr_t)ok;
    }
    CHECK(slept == 4, "four threads sleep 20 ms together");

    /* Blocking pipes: the reader waits for data, the writer for room. */
    CHECK(pipe(pfd) == 0, "pipe");
    pthread_t dr;
    pthread_create(&dr, NULL, drain, NULL);
    nanosleep(&ms, NULL);
    static char big[300000];
    CHECK(write(pfd[1], big, sizeof big) == sizeof big, "a write larger than the pipe completes");
    close(pfd[1]);
    pthread_join(dr, NULL);
    CHECK(piped == sizeof big, "the reader got every byte, then end of file");

    printf(failures ? "threads failed\n" : "threads ok\n");
    return failures;
}
