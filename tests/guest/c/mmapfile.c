/* File mappings: private and shared mappings of a file in /tmp, msync, munmap
   write-back, data seen through read() afterwards, MAP_POPULATE, mprotect,
   madvise(MADV_DONTNEED), mremap grow and shrink, offsets, the zeros past the end
   of the file in its last page, a descriptor closed while mapped, MAP_FIXED over a
   shared mapping, and Linux's errors. One line per check (check.h), the same on
   the host and in onering. Pages wholly past the end of the file are never touched
   (Linux raises SIGBUS there). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"

#define PG 4096
#define SIZE 10000 /* two pages and a bit */

static char path[64];

static unsigned char pat(long i) { return (unsigned char)(i * 7 + 3); }

/* Whether `n` bytes at `p` are the pattern from file offset `off`. */
static int is_pattern(const unsigned char *p, long off, long n) {
    for (long i = 0; i < n; i++)
        if (p[i] != pat(off + i)) return 0;
    return 1;
}

static int is_zero(const unsigned char *p, long n) {
    for (long i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* Rewrites the file with the pattern, SIZE bytes. */
static void reset_file(void) {
    static unsigned char buf[SIZE];
    for (long i = 0; i < SIZE; i++) buf[i] = pat(i);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, buf, SIZE) != SIZE) {
        printf("cannot write %s\n", "the file");
        exit(100);
    }
    close(fd);
}

/* The byte at `off` in the file, read with pread. */
static int file_byte(int fd, long off) {
    unsigned char c;
    return pread(fd, &c, 1, off) == 1 ? c : -1;
}

static long file_size(int fd) {
    struct stat st;
    return fstat(fd, &st) ? -1 : (long)st.st_size;
}

static void private_mappings(void) {
    reset_file();
    int fd = open(path, O_RDWR);
    unsigned char *p = mmap(0, 3 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(p != MAP_FAILED, "private mapping");
    CHECK(is_pattern(p, 0, SIZE), "private: the file's contents");
    CHECK(is_zero(p + SIZE, 3 * PG - SIZE), "private: zeros past the end in the last page");
    memset(p, 'x', 100);
    p[SIZE + 5] = 'y';
    CHECK(file_byte(fd, 0) == pat(0), "private: writes do not reach the file");
    CHECK(msync(p, 3 * PG, MS_SYNC) == 0 && file_byte(fd, 0) == pat(0), "private: not even after msync");
    CHECK(munmap(p, 3 * PG) == 0 && file_byte(fd, 50) == pat(50), "private: nor after munmap");
    CHECK(file_size(fd) == SIZE, "private: the file keeps its size");

    /* An offset: the second page on. */
    p = mmap(0, PG, PROT_READ, MAP_PRIVATE, fd, PG);
    CHECK(p != MAP_FAILED && is_pattern(p, PG, PG), "offset: the second page");
    munmap(p, PG);
    p = mmap(0, PG, PROT_READ, MAP_PRIVATE, fd, 2 * PG);
    CHECK(p != MAP_FAILED && is_pattern(p, 2 * PG, SIZE - 2 * PG) && is_zero(p + SIZE - 2 * PG, 3 * PG - SIZE),
          "offset: the last, partial page");
    munmap(p, PG);

    /* MAP_POPULATE. */
    p = mmap(0, SIZE, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    CHECK(p != MAP_FAILED && is_pattern(p, 0, SIZE), "MAP_POPULATE");
    munmap(p, SIZE);

    /* The descriptor closed while mapped. */
    p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    CHECK(p != MAP_FAILED && is_pattern(p, 0, SIZE), "private: readable after close");
    p[1] = 'z';
    CHECK(p[1] == 'z', "private: writable after close");
    munmap(p, SIZE);

    /* A read-only descriptor: private mappings may still be written. */
    fd = open(path, O_RDONLY);
    p = mmap(0, SIZE, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(p != MAP_FAILED, "private mapping of a read-only descriptor");
    CHECK(mprotect(p, SIZE, PROT_READ | PROT_WRITE) == 0, "mprotect: private, made writable");
    p[0] = 'w';
    CHECK(p[0] == 'w' && file_byte(fd, 0) == pat(0), "mprotect: written, the file not");
    CHECK(mprotect(p, SIZE, PROT_READ) == 0 && p[0] == 'w', "mprotect: read-only again, data kept");
    munmap(p, SIZE);
    close(fd);
}

static void dontneed(void) {
    reset_file();
    int fd = open(path, O_RDWR);
    unsigned char *p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    memset(p, 'q', PG + 10);
    CHECK(madvise(p, 2 * PG, MADV_DONTNEED) == 0, "madvise(DONTNEED) on a private mapping");
    CHECK(is_pattern(p, 0, SIZE), "private: the file's data again after DONTNEED");
    /* The file changed meanwhile: DONTNEED reads it afresh. */
    p[0] = 'q';
    CHECK(pwrite(fd, "NEW", 3, 0) == 3, "pwrite to the file");
    madvise(p, PG, MADV_DONTNEED);
    CHECK(memcmp(p, "NEW", 3) == 0 && is_pattern(p + 3, 3, PG - 3), "private: the new data after DONTNEED");
    munmap(p, SIZE);

    reset_file();
    p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    memcpy(p + 10, "kept", 4);
    CHECK(madvise(p, SIZE, MADV_DONTNEED) == 0 && memcmp(p + 10, "kept", 4) == 0,
          "shared: DONTNEED keeps what was written");
    CHECK(munmap(p, SIZE) == 0 && file_byte(fd, 10) == 'k', "shared: and it reaches the file");
    close(fd);
}

static void shared_mappings(void) {
    reset_file();
    int fd = open(path, O_RDWR);
    unsigned char *p = mmap(0, 3 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED && is_pattern(p, 0, SIZE), "shared mapping: the file's contents");
    CHECK(is_zero(p + SIZE, 3 * PG - SIZE), "shared: zeros past the end in the last page");
    p[100] = 'A';
    p[5000] = 'B';
    CHECK(msync(p, 3 * PG, MS_SYNC) == 0, "msync(MS_SYNC)");
    CHECK(file_byte(fd, 100) == 'A' && file_byte(fd, 5000) == 'B', "shared: read() sees writes after msync");
    CHECK(file_byte(fd, 101) == pat(101), "shared: and the rest unchanged");
    p[200] = 'C';
    CHECK(msync(p, PG, MS_ASYNC) == 0, "msync(MS_ASYNC)");
    CHECK(msync(p, PG, MS_SYNC | MS_INVALIDATE) == 0 && file_byte(fd, 200) == 'C', "msync(MS_SYNC | MS_INVALIDATE)");
    CHECK_ERR(msync(p, PG, MS_SYNC | MS_ASYNC), EINVAL, "msync(MS_SYNC | MS_ASYNC): EINVAL");
    CHECK_ERR(msync(p + 1, PG, MS_SYNC), EINVAL, "msync misaligned: EINVAL");
    /* Past the end of the file, in its last page: never written to the file. */
    p[SIZE + 10] = 'E';
    msync(p, 3 * PG, MS_SYNC);
    CHECK(file_size(fd) == SIZE, "shared: writes past the end do not grow the file");
    p[8000] = 'D';
    CHECK(munmap(p, 3 * PG) == 0, "munmap");
    CHECK(file_byte(fd, 8000) == 'D', "shared: munmap writes back");

    /* The descriptor closed while mapped. */
    p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    memcpy(p + 300, "closed", 6);
    munmap(p, SIZE);
    fd = open(path, O_RDONLY);
    char got[7] = {0};
    CHECK(pread(fd, got, 6, 300) == 6 && strcmp(got, "closed") == 0, "shared: written back after the fd closed");
    close(fd);

    /* mprotect of a shared mapping: made writable only if the file was opened so. */
    fd = open(path, O_RDONLY);
    p = mmap(0, SIZE, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED && p[100] == 'A' && p[5000] == 'B', "shared mapping of a read-only descriptor");
    CHECK_ERR(mprotect(p, SIZE, PROT_READ | PROT_WRITE), EACCES, "mprotect: shared, read-only file: EACCES");
    CHECK(mprotect(p, SIZE, PROT_NONE) == 0 && mprotect(p, SIZE, PROT_READ) == 0 && p[300] == 'c',
          "mprotect: none and back, data kept");
    munmap(p, SIZE);
    close(fd);

    /* MAP_FIXED over a shared mapping: its writes are kept. */
    fd = open(path, O_RDWR);
    p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE, fd, 0);
    CHECK(p != MAP_FAILED, "MAP_SHARED_VALIDATE");
    p[400] = 'F';
    void *q = mmap(p, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(q == p && p[400] == 0, "MAP_FIXED over a shared mapping");
    CHECK(file_byte(fd, 400) == 'F', "shared: replaced pages are written back");
    munmap(p, SIZE);

    /* A mapping much larger than the file: only its pages are there to touch. */
    p = mmap(0, 1 << 30, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED && p[0] == pat(0) && p[SIZE - 1] == pat(SIZE - 1), "a 1 GiB mapping of a small file");
    p[1] = 'G';
    CHECK(munmap(p, 1 << 30) == 0 && file_byte(fd, 1) == 'G', "and its write-back");
    close(fd);
}

static void remaps(void) {
    reset_file();
    int fd = open(path, O_RDWR);
    /* Something right after, so that growing must move. */
    unsigned char *p = mmap(0, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *m = mmap(p, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
    CHECK(m == p && is_pattern(m, 0, PG), "private one-page mapping");
    m[0] = 'r';
    unsigned char *g = mremap(m, PG, 3 * PG, MREMAP_MAYMOVE);
    CHECK(g != MAP_FAILED && g[0] == 'r' && is_pattern(g + 1, 1, SIZE - 1), "mremap grow: the file's next pages");
    CHECK(is_zero(g + SIZE, 3 * PG - SIZE), "mremap grow: zeros past the end");
    g = mremap(g, 3 * PG, PG, 0);
    CHECK(g != MAP_FAILED && g[0] == 'r' && is_pattern(g + 1, 1, PG - 1), "mremap shrink");
    munmap(g, PG);
    munmap(p + PG, PG);

    m = mmap(0, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g = mremap(m, PG, 3 * PG, MREMAP_MAYMOVE);
    CHECK(g != MAP_FAILED && is_pattern(g, 0, SIZE), "shared: mremap grow");
    g[0] = 'S';
    g[2 * PG + 1] = 'T';
    g = mremap(g, 3 * PG, PG, 0);
    CHECK(g != MAP_FAILED && file_byte(fd, 2 * PG + 1) == 'T', "shared: mremap shrink writes back the tail");
    CHECK(msync(g, PG, MS_SYNC) == 0 && file_byte(fd, 0) == 'S', "shared: the moved mapping writes back");
    munmap(g, PG);
    close(fd);
}

static void errors(void) {
    reset_file();
    int rw = open(path, O_RDWR), ro = open(path, O_RDONLY), wo = open(path, O_WRONLY);
    CHECK(mmap(0, PG, PROT_READ, MAP_PRIVATE, rw, 1) == MAP_FAILED && errno == EINVAL, "offset not page aligned: EINVAL");
    CHECK(mmap(0, PG, PROT_READ, MAP_PRIVATE, -1, 0) == MAP_FAILED && errno == EBADF, "fd -1: EBADF");
    CHECK(mmap(0, PG, PROT_READ, MAP_PRIVATE, 999, 0) == MAP_FAILED && errno == EBADF, "fd 999: EBADF");
    CHECK(mmap(0, 0, PROT_READ, MAP_PRIVATE, rw, 0) == MAP_FAILED && errno == EINVAL, "length 0: EINVAL");
    CHECK(mmap(0, PG, PROT_READ, 0, rw, 0) == MAP_FAILED && errno == EINVAL, "neither shared nor private: EINVAL");
    CHECK(mmap(0, PG, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0) == MAP_FAILED && errno == EACCES,
          "shared writable, read-only fd: EACCES");
    CHECK(mmap(0, PG, PROT_READ, MAP_SHARED, ro, 0) != MAP_FAILED, "shared read-only, read-only fd");
    CHECK(mmap(0, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, ro, 0) != MAP_FAILED, "private writable, read-only fd");
    CHECK(mmap(0, PG, PROT_READ, MAP_PRIVATE, wo, 0) == MAP_FAILED && errno == EACCES, "private, write-only fd: EACCES");
    CHECK(mmap(0, PG, PROT_WRITE, MAP_SHARED, wo, 0) == MAP_FAILED && errno == EACCES, "shared, write-only fd: EACCES");
    CHECK(mmap(0, 2 * PG, PROT_READ, MAP_PRIVATE, rw, 0x7ffffffffffff000L) == MAP_FAILED && errno == EOVERFLOW,
          "offset past the largest file: EOVERFLOW");
    int pfd[2];
    pipe(pfd);
    CHECK(mmap(0, PG, PROT_READ, MAP_PRIVATE, pfd[0], 0) == MAP_FAILED && errno == ENODEV, "pipe: ENODEV");
    CHECK(mmap(0, PG, PROT_READ, MAP_SHARED, pfd[1], 0) == MAP_FAILED && errno == EACCES, "pipe's write end: EACCES");
    int dir = open("/tmp", O_RDONLY | O_DIRECTORY);
    CHECK(mmap(0, PG, PROT_READ, MAP_PRIVATE, dir, 0) == MAP_FAILED && errno == ENODEV, "directory: ENODEV");
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    CHECK(mmap(0, PG, PROT_READ, MAP_SHARED, sv[0], 0) == MAP_FAILED && errno == ENODEV, "socket: ENODEV");
    int opath = open(path, O_PATH);
    CHECK(mmap(0, PG, PROT_READ, MAP_PRIVATE, opath, 0) == MAP_FAILED && errno == EBADF, "O_PATH: EBADF");
    int zero = open("/dev/zero", O_RDWR);
    unsigned char *z = mmap(0, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, zero, 0);
    CHECK(z != MAP_FAILED && is_zero(z, 2 * PG), "/dev/zero: zeros");
    z[0] = 1;
    CHECK(z[0] == 1, "/dev/zero: writable");
    close(rw), close(ro), close(wo), close(pfd[0]), close(pfd[1]), close(dir), close(sv[0]), close(sv[1]);
    close(opath), close(zero);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/mmapfile-%d", (int)getpid());
    private_mappings();
    dontneed();
    shared_mappings();
    remaps();
    errors();
    /* Left mapped, written: the program's end writes it back. */
    reset_file();
    int fd = open(path, O_RDWR);
    unsigned char *p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    p[0] = 'X';
    unlink(path);
    printf("%d failures\n", failures);
    return failures;
}
