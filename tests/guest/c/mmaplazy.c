/* mmaplazy DIR: large file mappings are filled as they are touched, not at mmap.
 * Run in the VM with --mem 256M and DIR a volume; its output is compared with the
 * host's. DIR/dense (400 MiB, data everywhere: more than the VM's memory) is mapped
 * whole and three of its pages read; DIR/big (1 GiB, sparse) is mapped shared and
 * private: values at known offsets, a write through the shared mapping seen by
 * pread after msync and by a private mapping touched after it, a private write
 * not reaching the file, MAP_POPULATE, MADV_DONTNEED, read() and write() with a
 * buffer in a mapping not touched yet; four threads touching the same blocks of
 * the dense mapping at once (one fills a block, the others wait for it). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MiB (1024L * 1024)
#define DENSE (400 * MiB)
#define BIG (1024 * MiB)

static char path[4096];

static const char *at(const char *dir, const char *name) {
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void put(int fd, long off, const char *s) {
    if (pwrite(fd, s, strlen(s), off) != (ssize_t)strlen(s)) perror("pwrite"), exit(1);
}

static void show(const char *what, const char *p) {
    printf("%s: %.8s\n", what, p);
}

static const char *dense_map;

/* The page numbers at the start of 50 blocks' pages, summed (each thread starts
 * at another page of the block, so they meet in each block). */
static void *toucher(void *arg) {
    long sum = 0, i = (long)arg;
    for (long k = 0; k < 50; k++) sum += atol(dense_map + (4 * k + 1) * 2 * MiB + i * 4096);
    return (void *)sum;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/data";

    /* Dense: each 4 KiB page starts with its number. */
    int d = open(at(dir, "dense"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (d < 0) return perror("open dense"), 1;
    char *buf = malloc(MiB);
    for (long off = 0; off < DENSE; off += MiB) {
        memset(buf, 'd', MiB);
        for (long p = 0; p < MiB; p += 4096) snprintf(buf + p, 9, "%08ld", (off + p) / 4096);
        if (write(d, buf, MiB) != MiB) return perror("write dense"), 1;
    }
    char *m = mmap(0, DENSE, PROT_READ, MAP_PRIVATE, d, 0);
    if (m == MAP_FAILED) return perror("mmap dense"), 1;
    show("dense first page", m);
    show("dense middle page", m + DENSE / 2 + 4096 * 3);
    show("dense last page", m + DENSE - 4096);
    printf("dense byte: %c\n", m[DENSE - 1]);
    dense_map = m;
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, toucher, (void *)i);
    long total = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    printf("four threads read: %ld\n", total);
    munmap(m, DENSE);

    /* Big: sparse, values at known offsets. */
    int b = open(at(dir, "big"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (b < 0 || ftruncate(b, BIG) != 0) return perror("big"), 1;
    put(b, 0, "start");
    put(b, 300 * MiB + 123, "middle");
    put(b, BIG - 8, "the end");
    char *s = mmap(0, BIG, PROT_READ | PROT_WRITE, MAP_SHARED, b, 0);
    char *p = mmap(0, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE, b, 0);
    if (s == MAP_FAILED || p == MAP_FAILED) return perror("mmap big"), 1;
    show("shared start", s);
    show("shared middle", s + 300 * MiB + 123);
    show("shared end", s + BIG - 8);
    printf("shared hole: %d\n", s[500 * MiB]);
    show("private start", p);

    /* A write through the shared mapping: in the file after msync; a private
     * mapping's page touched only now sees it (and its own write stays its own). */
    memcpy(s + 700 * MiB, "written", 8);
    printf("msync: %d\n", msync(s + 700 * MiB, 4096, MS_SYNC));
    char got[16] = {0};
    pread(b, got, 8, 700 * MiB);
    printf("pread after msync: %s\n", got);
    show("private after msync", p + 700 * MiB);
    memcpy(p + 300 * MiB + 123, "PRIVATE", 7);
    pread(b, got, 6, 300 * MiB + 123);
    printf("file after private write: %.6s\n", got);
    show("shared after private write", s + 300 * MiB + 123);
    /* MADV_DONTNEED: the private page reads the file again. */
    printf("madvise: %d\n", madvise(p + 300 * MiB, 2 * MiB, MADV_DONTNEED));
    show("private after dontneed", p + 300 * MiB + 123);

    /* read() into, and write() from, a buffer in blocks not touched yet. */
    char *r = p + 900 * MiB;
    printf("read into a mapping: %ld\n", (long)pread(d, r, 3 * MiB, 4096 * 10));
    show("read gave", r);
    show("read gave, later", r + 2 * MiB + 4096);
    put(b, 800 * MiB, "source");
    int o = open(at(dir, "out"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    printf("write from a mapping: %ld\n", (long)write(o, s + 800 * MiB, 4 * MiB));
    pread(o, got, 6, 0);
    printf("written: %.6s\n", got);
    munmap(p, BIG);

    /* MAP_POPULATE: there at once. */
    char *q = mmap(0, 64 * MiB, PROT_READ, MAP_PRIVATE | MAP_POPULATE, b, 256 * MiB);
    if (q == MAP_FAILED) return perror("mmap populate"), 1;
    show("populated middle", q + 44 * MiB + 123);
    munmap(q, 64 * MiB);
    memcpy(s + BIG - 8, "THE END", 8);
    munmap(s, BIG);
    pread(b, got, 8, BIG - 8);
    printf("after munmap: %s\n", got);

    close(o);
    close(b);
    close(d);
    unlink(at(dir, "out"));
    unlink(at(dir, "big"));
    unlink(at(dir, "dense"));
    printf("done\n");
    return 0;
}
