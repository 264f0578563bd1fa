/* Memory pressure against the page cache (issue 16): `reclaim FILE [fill]`.
 *
 * FILE (on a volume, larger than the cache's quarter of RAM) holds 32-bit words,
 * word k being k * 2654435761. With `fill` it is read whole first, so that the
 * page cache holds all it may; without, nothing is cached (the baseline).
 *
 * anon: anonymous memory, 2 MiB at a time (each mapping small enough to be backed
 * when made), touched, until mmap fails: how many MB. Then FILE is read and
 * checked while that memory is held (no room for the cache: reads go straight to
 * the program), and the memory is given back.
 * tmp: (with `fill`, FILE read whole again first) 96 MB are taken again and held,
 * and /tmp is written a megabyte at a time until a write fails: how many MB. Then
 * FILE is read and checked once more. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PIECE (2L << 20)
#define MAX_PIECES 4096

static char buf[1 << 20];
static char *pieces[MAX_PIECES];

/* Reads FILE whole and checks every word: "ok" or what went wrong. */
static const char *read_file(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return strerror(errno);
    uint64_t at = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0) {
            close(fd);
            return strerror(errno);
        }
        if (n == 0) break;
        if (n % 4 != 0 || at % 4 != 0) {
            close(fd);
            return "odd read";
        }
        for (ssize_t i = 0; i < n; i += 4) {
            uint32_t w;
            memcpy(&w, buf + i, 4);
            if (w != (uint32_t)((at + i) / 4 * 2654435761u)) {
                close(fd);
                return "bad contents";
            }
        }
        at += n;
    }
    close(fd);
    return at > 0 ? "ok" : "empty";
}

/* Maps and touches up to `max` pieces: how many. */
static long take(long max) {
    long n = 0;
    while (n < max) {
        char *p = mmap(0, PIECE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) break;
        for (long o = 0; o < PIECE; o += 4096) p[o] = 1;
        pieces[n++] = p;
    }
    return n;
}

static void give_back(long n) {
    for (long i = 0; i < n; i++) munmap(pieces[i], PIECE);
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: reclaim FILE [fill]\n"), 2;
    int fill = argc > 2 && strcmp(argv[2], "fill") == 0;
    if (fill) printf("read: %s\n", read_file(argv[1]));
    long n = take(MAX_PIECES);
    printf("anon: %ld MB\n", n * 2);
    printf("read while held: %s\n", read_file(argv[1]));
    give_back(n);
    if (fill) printf("read again: %s\n", read_file(argv[1]));
    long held = take(48);
    int fd = open("/tmp/fill", O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) return perror("open /tmp/fill"), 1;
    memset(buf, 7, sizeof buf);
    long mb = 0;
    ssize_t w;
    errno = 0;
    while ((w = write(fd, buf, sizeof buf)) == (ssize_t)sizeof buf) mb++;
    printf("tmp: %ld MB (%s)\n", mb, w < 0 ? strerror(errno) : "short write");
    close(fd);
    unlink("/tmp/fill");
    give_back(held);
    printf("read at the end: %s\n", read_file(argv[1]));
    return 0;
}
