/* Writes a random mix of sizes (1 B to 1 MiB) to stdout and stderr with write(2),
   to check that every byte reaches the host in the order written, none lost or
   doubled. Deterministic from the seed, so the host run gives the same bytes.

   outmix SEED THREADS MIB
     THREADS = 0: one thread writes MIB MiB in all, to fd 1 and fd 2 in turns
                 chosen at random: each stream must equal the host's byte for byte.
     THREADS > 0: THREADS threads each write records of MIB MiB in all to fd 1, a
                 record per write(2): "@" thread(1) seq(4) len(4) payload(len), the
                 payload from the generator seeded with (SEED, thread, seq). Each
                 thread's records must come out whole and in its order.
   outmix SEED 0 MIB END ends, after writing, as END says: "abort" (SIGABRT),
   "segv" (a null dereference) or "thread" (another thread calls exit_group(7)
   while this one sleeps): all the bytes written before must still arrive.
   Sizes: half up to 100 B, a quarter up to 4 KiB, 15% up to 64 KiB, the rest up
   to 1 MiB (the sizes around the console's buffer are the ones that went wrong). */
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t pick_size(uint64_t *s) {
    uint64_t r = next(s) % 100;
    uint64_t v = next(s);
    if (r < 50) return 1 + v % 100;
    if (r < 75) return 1 + v % 4096;
    if (r < 90) return 1 + v % 65536;
    return 1 + v % (1 << 20);
}

static void fill(uint64_t *s, unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = next(s);
        size_t k = n - i < 8 ? n - i : 8;
        memcpy(p + i, &v, k);
    }
}

static void write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            perror("outmix: write");
            exit(3);
        }
        p += w;
        n -= (size_t)w;
    }
}

static uint64_t seed;
static size_t budget;

static void *writer(void *arg) {
    unsigned thread = (unsigned)(uintptr_t)arg;
    unsigned char *rec = malloc(10 + (1 << 20));
    uint64_t sizes = seed ^ (0x1234567ull * (thread + 1));
    size_t done = 0;
    for (uint32_t seq = 0; done < budget; seq++) {
        uint32_t len = (uint32_t)pick_size(&sizes);
        uint64_t s = seed * 1000003u + thread * 7919u + seq;
        rec[0] = '@';
        rec[1] = (unsigned char)thread;
        memcpy(rec + 2, &seq, 4);
        memcpy(rec + 6, &len, 4);
        fill(&s, rec + 10, len);
        write_all(1, rec, 10 + len);
        done += len;
    }
    free(rec);
    return NULL;
}

static void *end_all(void *arg) {
    (void)arg;
    syscall(SYS_exit_group, 7);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: outmix SEED THREADS MIB\n");
        return 2;
    }
    seed = strtoull(argv[1], 0, 0);
    int threads = atoi(argv[2]);
    budget = (size_t)atoi(argv[3]) << 20;
    if (threads == 0) {
        unsigned char *buf = malloc(1 << 20);
        uint64_t s = seed;
        for (size_t done = 0; done < budget;) {
            size_t n = pick_size(&s);
            fill(&s, buf, n);
            write_all(next(&s) % 4 == 0 ? 2 : 1, buf, n);
            done += n;
        }
        const char *end = argc == 5 ? argv[4] : "";
        if (!strcmp(end, "abort")) abort();
        if (!strcmp(end, "segv")) *(volatile int *)0 = 1;
        if (!strcmp(end, "thread")) {
            pthread_t t;
            pthread_create(&t, 0, end_all, 0);
            for (;;) pause();
        }
        return 0;
    }
    pthread_t t[64];
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, writer, (void *)(uintptr_t)i);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    return 0;
}
