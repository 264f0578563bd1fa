/* Devices, pipes and random numbers: the same output on the host and in onering. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    char buf[64];
    int null = open("/dev/null", O_RDWR);
    CHECK(null >= 0, "open /dev/null");
    CHECK(write(null, "abc", 3) == 3 && read(null, buf, sizeof buf) == 0, "/dev/null swallows and is empty");
    CHECK(write(null, (void *)8, 3) == 3, "/dev/null does not read the buffer");
    struct stat st;
    CHECK(fstat(null, &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is a character device");
    int zero = open("/dev/zero", O_RDONLY);
    memset(buf, 1, sizeof buf);
    CHECK(read(zero, buf, sizeof buf) == sizeof buf && buf[0] == 0 && buf[63] == 0, "/dev/zero reads zeros");
    int ur = open("/dev/urandom", O_RDONLY);
    char r1[32] = {0}, r2[32] = {0};
    CHECK(read(ur, r1, sizeof r1) == sizeof r1 && read(ur, r2, sizeof r2) == sizeof r2 && memcmp(r1, r2, 32), "/dev/urandom");
    CHECK(getrandom(r1, sizeof r1, 0) == sizeof r1 && memcmp(r1, r2, 32), "getrandom");
    CHECK_ERR(getrandom(r1, sizeof r1, 0x100), EINVAL, "getrandom bad flags: EINVAL");
    CHECK(access("/dev/random", R_OK) == 0, "/dev/random exists");
    char link[32] = {0};
    CHECK(readlink("/dev/fd", link, sizeof link) == 13 && !strcmp(link, "/proc/self/fd"), "/dev/fd is /proc/self/fd");
    CHECK(fstat(null, &st) == 0 && open("/dev/fd/3", O_RDONLY) >= 0, "and /dev/fd/N opens descriptor N");
    const char *nodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"};
    for (unsigned i = 0; i < sizeof nodes / sizeof *nodes; i++) {
        CHECK(stat(nodes[i], &st) == 0 && S_ISCHR(st.st_mode), nodes[i]);
        printf("%s is %u:%u\n", nodes[i], major(st.st_rdev), minor(st.st_rdev));
    }

    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    CHECK(write(p[1], "hello", 5) == 5, "write to a pipe");
    int avail = 0;
    CHECK(ioctl(p[0], FIONREAD, &avail) == 0 && avail == 5, "FIONREAD on a pipe");
    CHECK(read(p[0], buf, sizeof buf) == 5 && !memcmp(buf, "hello", 5), "read from a pipe");
    CHECK_ERR(lseek(p[0], 0, SEEK_SET), ESPIPE, "lseek on a pipe: ESPIPE");
    CHECK(fstat(p[0], &st) == 0 && S_ISFIFO(st.st_mode), "a pipe is a FIFO");
    struct iovec iov[2] = {{"ab", 2}, {"cd", 2}};
    CHECK(writev(p[1], iov, 2) == 4, "writev to a pipe");
    char a[3] = {0}, b[3] = {0};
    struct iovec in[2] = {{a, 2}, {b, 2}};
    CHECK(readv(p[0], in, 2) == 4 && !strcmp(a, "ab") && !strcmp(b, "cd"), "readv from a pipe");
    CHECK(close(p[1]) == 0 && read(p[0], buf, sizeof buf) == 0, "end of file when the writer closes");
    close(p[0]);
    CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0, "pipe2");
    CHECK(fcntl(p[0], F_GETFD) == FD_CLOEXEC && (fcntl(p[0], F_GETFL) & O_NONBLOCK), "pipe2 flags");
    CHECK_ERR(read(p[0], buf, sizeof buf), EAGAIN, "empty non-blocking pipe: EAGAIN");
    CHECK(close(p[0]) == 0, "close the read end");
    CHECK_ERR(write(p[1], "x", 1), EPIPE, "write without readers: EPIPE");
    close(p[1]);
    CHECK_ERR(pipe2(p, 0x12345), EINVAL, "pipe2 bad flags: EINVAL");
    CHECK_ERR(pipe((int *)8), EFAULT, "pipe with a bad pointer: EFAULT");

    /* /dev/stdout and the others are the caller's descriptors 0-2 opened again. */
    int saved = dup(1);
    fflush(stdout);
    CHECK(pipe(p) == 0 && dup2(p[1], 1) == 1, "stdout onto a pipe");
    int so = open("/dev/stdout", O_WRONLY);
    CHECK(so >= 0 && write(so, "via", 3) == 3, "write to /dev/stdout");
    CHECK(read(p[0], buf, sizeof buf) == 3 && !memcmp(buf, "via", 3), "/dev/stdout led to the pipe");
    CHECK(fstat(so, &st) == 0 && S_ISFIFO(st.st_mode), "and is the pipe");
    close(so);
    close(p[0]);
    close(p[1]);
    int f = open("/tmp/devices-out", O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(f >= 0 && dup2(f, 1) == 1, "stdout onto a file");
    CHECK(write(1, "0123456789", 10) == 10, "write the file");
    so = open("/dev/stdout", O_WRONLY);
    CHECK(so >= 0 && write(so, "ab", 2) == 2, "/dev/stdout opens the file anew");
    CHECK(pread(f, buf, sizeof buf, 0) == 10 && !memcmp(buf, "ab23456789", 10), "with its own offset");
    close(so);
    close(f);
    CHECK(dup2(saved, 1) == 1, "stdout back");
    close(saved);
    unlink("/tmp/devices-out");
    saved = dup(0);
    close(0);
    CHECK_ERR(open("/dev/stdin", O_RDONLY), ENOENT, "/dev/stdin with descriptor 0 closed: ENOENT");
    CHECK(dup2(saved, 0) == 0, "stdin back");
    close(saved);
    return failures;
}
