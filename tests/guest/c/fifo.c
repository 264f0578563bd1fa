/* Named pipes: mkfifo, the open rendezvous (a blocking reader waits for a writer and
   the other way round), O_NONBLOCK opens (ENXIO for a writer without readers), data
   through, end of file when the writer goes, stat. Same output on the host and in
   onering. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *path = "/tmp/onering-fifo-test";

static void *writer(void *arg) {
    (void)arg;
    usleep(20000);
    int w = open(path, O_WRONLY); /* meets the blocked reader */
    write(w, "hello", 5);
    close(w); /* at once: the reader must still wake and find the data */
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    CHECK_ERR(mkfifo(path, 0600), EEXIST, "mkfifo again is EEXIST");
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISFIFO(st.st_mode) && (st.st_mode & 0777) == 0600, "stat: a FIFO, mode 0600");
    CHECK_ERR(open(path, O_WRONLY | O_NONBLOCK), ENXIO, "a non-blocking writer without readers is ENXIO");
    int r = open(path, O_RDONLY | O_NONBLOCK);
    CHECK(r >= 0, "a non-blocking reader opens at once");
    struct pollfd pf = {r, POLLIN, 0};
    CHECK(poll(&pf, 1, 0) == 0, "no writer yet: not ready, no hang-up");
    int w = open(path, O_WRONLY | O_NONBLOCK);
    CHECK(w >= 0, "then a non-blocking writer opens");
    CHECK(write(w, "abc", 3) == 3, "write");
    char buf[16] = {0};
    CHECK(read(r, buf, sizeof buf) == 3 && buf[0] == 'a', "read what was written");
    CHECK_ERR(read(r, buf, sizeof buf), EAGAIN, "empty with a writer: EAGAIN");
    close(w);
    CHECK(poll(&pf, 1, 0) == 1 && pf.revents == POLLHUP, "writer gone: hang-up");
    CHECK(read(r, buf, sizeof buf) == 0, "writer gone: end of file");
    close(r);

    pthread_t t;
    pthread_create(&t, NULL, writer, NULL);
    r = open(path, O_RDONLY); /* blocks until the writer opens */
    CHECK(r >= 0, "a blocking reader waits for a writer");
    CHECK(read(r, buf, sizeof buf) == 5 && buf[4] == 'o', "and reads its data");
    CHECK(read(r, buf, sizeof buf) == 0, "then end of file when it closes");
    pthread_join(t, NULL);
    close(r);

    /* A reader that opens after the writer sees hang-up when that writer closes. */
    r = open(path, O_RDONLY | O_NONBLOCK);
    w = open(path, O_WRONLY);
    close(r);
    r = open(path, O_RDONLY | O_NONBLOCK); /* the writer is already there */
    pf.fd = r;
    CHECK(poll(&pf, 1, 0) == 0, "writer open: not ready");
    close(w);
    CHECK(poll(&pf, 1, 0) == 1 && pf.revents == POLLHUP, "late reader: hang-up when the writer goes");
    close(r);
    CHECK(unlink(path) == 0, "unlink");
    printf("fifo %s\n", failures ? "FAILED" : "ok");
    return failures;
}
