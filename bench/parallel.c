/* A parallel workload in the shape of a parallel grep or a parallel hash over a
   file tree: a walker thread hands file names through a bounded queue (a mutex
   and condition variables) to THREADS workers, which each open, read and hash a
   file and print a line for it through stdio under a lock.

   parallel DIR THREADS FILES KIB [files|mem] [ROUNDS]
     Creates FILES files of KIB KiB in DIR (untimed), then hashes them all ROUNDS
     times (default 1) with THREADS workers and prints "elapsed_ms N" on stderr
     (the timed part). With "mem" the workers hash memory instead of files (no
     file system calls). The
     hash is FNV-1a with extra mixing: a few cycles a byte, like a regex scan. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QCAP 64

static const char *dir;
static int nfiles, kib, use_mem, rounds = 1;
static unsigned char *memdata;
static int queue[QCAP], qhead, qlen, done;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER, outlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nonempty = PTHREAD_COND_INITIALIZER, nonfull = PTHREAD_COND_INITIALIZER;

static uint64_t hash(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

static int take(void) {
    pthread_mutex_lock(&qlock);
    while (qlen == 0 && !done) pthread_cond_wait(&nonempty, &qlock);
    int f = -1;
    if (qlen > 0) {
        f = queue[qhead];
        qhead = (qhead + 1) % QCAP;
        qlen--;
        pthread_cond_signal(&nonfull);
    }
    pthread_mutex_unlock(&qlock);
    return f;
}

static void *worker(void *arg) {
    (void)arg;
    static __thread unsigned char buf[65536];
    for (int f; (f = take()) >= 0;) {
        uint64_t h = 0xcbf29ce484222325ull;
        if (use_mem) {
            h = hash(h, memdata + (size_t)(f % 64) * kib * 1024, (size_t)kib * 1024);
        } else {
            char path[512];
            snprintf(path, sizeof path, "%s/f%05d", dir, f % nfiles);
            int fd = open(path, O_RDONLY);
            if (fd < 0) {
                perror(path);
                exit(1);
            }
            for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) h = hash(h, buf, (size_t)n);
            close(fd);
        }
        pthread_mutex_lock(&outlock);
        printf("f%05d %016llx\n", f, (unsigned long long)h);
        pthread_mutex_unlock(&outlock);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: parallel DIR THREADS FILES KIB [files|mem] [ROUNDS]\n");
        return 2;
    }
    dir = argv[1];
    int threads = atoi(argv[2]);
    nfiles = atoi(argv[3]);
    kib = atoi(argv[4]);
    use_mem = argc > 5 && !strcmp(argv[5], "mem");
    if (argc > 6 && atoi(argv[6]) > 0) rounds = atoi(argv[6]);
    unsigned char *block = malloc((size_t)kib * 1024);
    for (size_t i = 0; i < (size_t)kib * 1024; i++) block[i] = (unsigned char)(i * 131 + i / 7);
    if (use_mem) {
        memdata = malloc((size_t)kib * 1024 * 64);
        for (int i = 0; i < 64; i++) memcpy(memdata + (size_t)i * kib * 1024, block, (size_t)kib * 1024);
    } else {
        for (int f = 0; f < nfiles; f++) {
            char path[512];
            snprintf(path, sizeof path, "%s/f%05d", dir, f);
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            block[0] = (unsigned char)f;
            if (fd < 0 || write(fd, block, (size_t)kib * 1024) != (ssize_t)kib * 1024) {
                perror(path);
                return 1;
            }
            close(fd);
        }
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t t[64];
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, 0);
    for (int f = 0; f < nfiles * rounds; f++) {
        pthread_mutex_lock(&qlock);
        while (qlen == QCAP) pthread_cond_wait(&nonfull, &qlock);
        queue[(qhead + qlen) % QCAP] = f;
        qlen++;
        pthread_cond_signal(&nonempty);
        pthread_mutex_unlock(&qlock);
    }
    pthread_mutex_lock(&qlock);
    done = 1;
    pthread_cond_broadcast(&nonempty);
    pthread_mutex_unlock(&qlock);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    fflush(stdout);
    clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, "elapsed_ms %.1f\n", (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
    return 0;
}
