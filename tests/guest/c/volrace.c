/* A file a child wrote on a volume is whole for its parent once the child ended,
   however its writes reached the host: as GNU as writes an object file (its
   sections, then the header at offset 0 last), and ld after it reads the file.
   Meanwhile another process keeps calling msync on a shared mapping of a volume
   file, which sends the host writes still waiting (whoever made them) from its
   own vCPU, as a vCPU that idles does: a write that went that way must reach
   the host before anything the parent asks after the child's end.
   Usage: volrace DIR ROUNDS. Prints "rounds N, bad 0" when each round read back
   what was written (size, read(), mmap); exits 1 otherwise. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HDR 64
#define PIECE 3000
#define PIECES 3
#define SIZE (HDR + PIECE * PIECES)

/* Byte i of round r's file. */
static unsigned char byte_of(int r, int i) {
    if (i < HDR) return (unsigned char)(0x7f ^ (r * 7 + i));
    return (unsigned char)(r * 31 + i * 13 + 1);
}

static void fill(int r, unsigned char *buf) {
    for (int i = 0; i < SIZE; i++) buf[i] = byte_of(r, i);
}

/* The writer: the body in pieces past the header, then the header at 0. */
static void write_file(const char *path, int r) {
    static unsigned char buf[SIZE];
    fill(r, buf);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) _exit(2);
    if (lseek(fd, HDR, SEEK_SET) != HDR) _exit(3);
    for (int p = 0; p < PIECES; p++)
        if (write(fd, buf + HDR + p * PIECE, PIECE) != PIECE) _exit(4);
    if (pwrite(fd, buf, HDR, 0) != HDR) _exit(5);
    if (close(fd) != 0) _exit(6);
    _exit(0);
}

/* Keeps sending the writes that wait for the host, until killed. */
static void flusher(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/.flush", dir);
    int fd = open(path, O_CREAT | O_RDWR, 0644);
    if (fd < 0 || ftruncate(fd, 4096) != 0) _exit(2);
    char *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) _exit(3);
    for (;;) msync(m, 4096, MS_SYNC);
}

static int check(const char *path, int r) {
    static unsigned char want[SIZE], got[SIZE + 1];
    fill(r, want);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("round %d: open failed\n", r);
        return 1;
    }
    struct stat st;
    int bad = 0;
    if (fstat(fd, &st) != 0 || st.st_size != SIZE) {
        printf("round %d: size %lld, not %d\n", r, (long long)st.st_size, SIZE);
        bad = 1;
    }
    ssize_t n = pread(fd, got, sizeof got, 0);
    if (n != SIZE || memcmp(got, want, SIZE) != 0) {
        int at = 0;
        while (n > 0 && at < n && at < SIZE && got[at] == want[at]) at++;
        printf("round %d: read %zd bytes, first difference at %d\n", r, n, at);
        bad = 1;
    }
    void *m = mmap(0, SIZE, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED || memcmp(m, want, SIZE) != 0) {
        printf("round %d: the mapping differs\n", r);
        bad = 1;
    }
    if (m != MAP_FAILED) munmap(m, SIZE);
    close(fd);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *dir = argv[1];
    int rounds = atoi(argv[2]);
    pid_t fl = fork();
    if (fl == 0) flusher(dir);
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/o%d", dir, r);
        pid_t w = fork();
        if (w == 0) write_file(path, r);
        int status;
        if (waitpid(w, &status, 0) != w || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("round %d: the writer failed (%#x)\n", r, status);
            bad++;
            continue;
        }
        bad += check(path, r);
        unlink(path);
    }
    kill(fl, SIGKILL);
    waitpid(fl, 0, 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/.flush", dir);
    unlink(path);
    printf("rounds %d, bad %d\n", rounds, bad);
    return bad ? 1 : 0;
}
