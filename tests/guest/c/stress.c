/* Threads under load, many more of them than vCPUs: mutex, condition variable,
   semaphore, barrier and rwlock stress; busy loops that must not starve anybody;
   a signal for a thread that spins; sleeps that return on time; CPU affinity.
   The same output on the host and in onering (run with --smp 1, 2 and 4).
   `stress exit` ends the program with exit(7) from a thread other than main. */
#define _GNU_SOURCE
#include "check.h"
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* ---- mutex: 32 threads, 20,000 increments each ---- */
#define MT 32
#define MITERS 20000
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static void *adder(void *arg) {
    (void)arg;
    for (int i = 0; i < MITERS; i++) {
        pthread_mutex_lock(&mu);
        counter++;
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* ---- condition variables: 8 producers, 8 consumers, a queue of 16 ---- */
#define QP 8
#define QITEMS 10000
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static long queue[16];
static int qlen, qhead;
static long qsum;
static void *producer(void *arg) {
    long base = (long)arg * QITEMS;
    for (long i = 1; i <= QITEMS; i++) {
        pthread_mutex_lock(&qmu);
        while (qlen == 16) pthread_cond_wait(&not_full, &qmu);
        queue[(qhead + qlen++) % 16] = base + i;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&qmu);
    }
    return NULL;
}
static void *consumer(void *arg) {
    (void)arg;
    long sum = 0;
    for (int i = 0; i < QITEMS; i++) {
        pthread_mutex_lock(&qmu);
        while (qlen == 0) pthread_cond_wait(&not_empty, &qmu);
        sum += queue[qhead];
        qhead = (qhead + 1) % 16;
        qlen--;
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&qmu);
    }
    pthread_mutex_lock(&qmu);
    qsum += sum;
    pthread_mutex_unlock(&qmu);
    return NULL;
}

/* ---- semaphores: a token passed around a ring of 16 threads ---- */
#define RING 16
#define ROUNDS 500
static sem_t ring[RING];
static long passes;
static void *ring_member(void *arg) {
    long id = (long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        sem_wait(&ring[id]);
        passes++; /* only the token holder runs here */
        sem_post(&ring[(id + 1) % RING]);
    }
    return NULL;
}

/* ---- barrier: 24 threads, 200 phases ---- */
#define BT 24
#define PHASES 200
static pthread_barrier_t bar;
static int arrived[PHASES];
static int barrier_broken;
static void *barrier_worker(void *arg) {
    (void)arg;
    for (int ph = 0; ph < PHASES; ph++) {
        __atomic_fetch_add(&arrived[ph], 1, __ATOMIC_SEQ_CST);
        pthread_barrier_wait(&bar);
        /* Everybody arrived at this phase before anybody left it. */
        if (__atomic_load_n(&arrived[ph], __ATOMIC_SEQ_CST) != BT) barrier_broken = 1;
    }
    return NULL;
}

/* ---- rwlock: 4 writers, 12 readers ---- */
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static long shared_a, shared_b;
static int torn;
static void *rw_worker(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < 3000; i++) {
        if (id % 4 == 0) {
            pthread_rwlock_wrlock(&rw);
            shared_a++;
            for (volatile int k = 0; k < 50; k++) {
            }
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

/* ---- busy loops: more spinners than CPUs; main must still run ---- */
static volatile int stop_spinning;
static volatile long spins[16];
static void *spinner(void *arg) {
    long id = (long)arg;
    while (!stop_spinning) spins[id]++;
    return NULL;
}

/* ---- a signal for a thread that spins (on another CPU, or preempted) ---- */
static volatile int got_signal;
static void on_usr1(int s) {
    (void)s;
    got_signal = 1;
}
static void *spin_until_signalled(void *arg) {
    (void)arg;
    while (!got_signal) {
    }
    return NULL;
}

/* ---- sleeps: 8 threads sleep 5 times 10 ms ---- */
static void *sleeper(void *arg) {
    (void)arg;
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        struct timespec d = {0, 10 * 1000 * 1000};
        long t0 = now_ns();
        nanosleep(&d, NULL);
        long late = now_ns() - t0 - 10 * 1000 * 1000;
        ok &= late >= 0 && late < 200 * 1000 * 1000;
    }
    return (void *)(intptr_t)ok;
}

static void *exit_from_thread(void *arg) {
    (void)arg;
    struct timespec d = {0, 5 * 1000 * 1000};
    nanosleep(&d, NULL);
    printf("thread calls exit(7)\n");
    exit(7);
}

static int run(void *(*fn)(void *), int n, long arg_base) {
    pthread_t t[64];
    int ok = 1;
    for (long i = 0; i < n; i++) ok &= pthread_create(&t[i], NULL, fn, (void *)(arg_base + i)) == 0;
    for (int i = 0; i < n; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (fn == sleeper) ok &= (intptr_t)r == 1;
    }
    return ok;
}

/* ---- robust mutexes: the owner dies holding one ---- */
static pthread_mutex_t robust_mu;
static sem_t robust_locked;
static void *die_holding(void *arg) {
    pthread_mutex_lock(&robust_mu);
    sem_post(&robust_locked);
    if (arg) {
        struct timespec d = {0, 20 * 1000 * 1000}; /* let main block on it first */
        nanosleep(&d, NULL);
    }
    return NULL; /* ends without unlocking */
}
static int robust_case(int main_waits) {
    pthread_t t;
    sem_init(&robust_locked, 0, 0);
    pthread_create(&t, NULL, die_holding, main_waits ? (void *)1 : NULL);
    sem_wait(&robust_locked);
    if (!main_waits) pthread_join(t, NULL);
    int r = pthread_mutex_lock(&robust_mu);
    if (main_waits) pthread_join(t, NULL);
    if (r != EOWNERDEAD) return 0;
    pthread_mutex_consistent(&robust_mu);
    pthread_mutex_unlock(&robust_mu);
    return pthread_mutex_lock(&robust_mu) == 0 && pthread_mutex_unlock(&robust_mu) == 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && argv[1][0] == 'e') {
        pthread_t t;
        pthread_create(&t, NULL, exit_from_thread, NULL);
        pthread_join(t, NULL);
        printf("not reached\n");
        return 1;
    }
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);

    CHECK(run(adder, MT, 0) && counter == (long)MT * MITERS, "mutex: 32 threads, every increment counted");

    pthread_t p[QP], c[QP];
    for (long i = 0; i < QP; i++) pthread_create(&c[i], NULL, consumer, NULL);
    for (long i = 0; i < QP; i++) pthread_create(&p[i], NULL, producer, (void *)i);
    for (int i = 0; i < QP; i++) pthread_join(p[i], NULL);
    for (int i = 0; i < QP; i++) pthread_join(c[i], NULL);
    long n = (long)QP * QITEMS;
    CHECK(qsum == n * (n + 1) / 2, "condition variables: 8 producers, 8 consumers, every item once");

    for (int i = 0; i < RING; i++) sem_init(&ring[i], 0, 0);
    sem_post(&ring[0]);
    CHECK(run(ring_member, RING, 0) && passes == (long)RING * ROUNDS, "semaphores: a token around 16 threads");

    pthread_barrier_init(&bar, NULL, BT);
    CHECK(run(barrier_worker, BT, 0) && !barrier_broken, "barrier: 24 threads, 200 phases");

    CHECK(run(rw_worker, 16, 0) && !torn && shared_a == 4 * 3000 && shared_b == shared_a,
          "rwlock: readers never see a half update");

    /* More spinners than CPUs: main sleeps, then must get the CPU back to stop them,
       and every spinner must have had a share. */
    int nspin = ncpu + 2 > 16 ? 16 : ncpu + 2;
    pthread_t sp[16];
    for (long i = 0; i < nspin; i++) pthread_create(&sp[i], NULL, spinner, (void *)i);
    struct timespec d = {0, 100 * 1000 * 1000};
    long t0 = now_ns();
    nanosleep(&d, NULL);
    long slept = now_ns() - t0;
    stop_spinning = 1;
    for (int i = 0; i < nspin; i++) pthread_join(sp[i], NULL);
    int all_ran = 1;
    for (int i = 0; i < nspin; i++) all_ran &= spins[i] > 0;
    CHECK(all_ran, "busy loops: every spinner ran");
    CHECK(slept < 2000L * 1000 * 1000, "busy loops: a sleeper still wakes");

    signal(SIGUSR1, on_usr1);
    pthread_t sig_t;
    pthread_create(&sig_t, NULL, spin_until_signalled, NULL);
    struct timespec ms = {0, 10 * 1000 * 1000};
    nanosleep(&ms, NULL);
    pthread_kill(sig_t, SIGUSR1);
    pthread_join(sig_t, NULL);
    CHECK(got_signal, "a signal reaches a thread that spins");

    CHECK(run(sleeper, 8, 0), "sleeps: 8 threads wake on time");

    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "sched_setaffinity to CPU 0");
    cpu_set_t got;
    CPU_ZERO(&got);
    CHECK(sched_getaffinity(0, sizeof got, &got) == 0 && CPU_COUNT(&got) == 1 && CPU_ISSET(0, &got),
          "sched_getaffinity gives it back");
    counter = 0;
    CHECK(run(adder, 4, 0) && counter == 4L * MITERS, "threads created on CPU 0 alone still work");
    CPU_ZERO(&set);
    CHECK_ERR(sched_setaffinity(0, sizeof set, &set), EINVAL, "an empty CPU set is EINVAL");
    CHECK_ERR(sched_setaffinity(999999, sizeof got, &got), ESRCH, "an unknown thread is ESRCH");

    pthread_mutexattr_t ra;
    pthread_mutexattr_init(&ra);
    pthread_mutexattr_setrobust(&ra, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&robust_mu, &ra);
    CHECK(robust_case(0), "robust mutex: its owner ended, the next locker gets EOWNERDEAD");
    CHECK(robust_case(1), "robust mutex: a waiter is woken with EOWNERDEAD when the owner ends");

    printf("stress %s\n", failures ? "FAILED" : "ok");
    return failures;
}
