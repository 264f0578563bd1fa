// Writes to a pipe of at most PIPE_BUF bytes are atomic, writev's too: four
// children each write 2000 lines, every line as two iovecs (as musl's stdio
// writes a line: what it buffered, then the rest), and the parent finds every
// line whole, none cut by another writer's line or read in halves.
#define _GNU_SOURCE
#include "check.h"
#include <stdlib.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN 4
#define LINES 2000

int main(void) {
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    for (int c = 0; c < CHILDREN; c++) {
        if (fork() == 0) {
            close(fds[0]);
            for (int i = 0; i < LINES; i++) {
                char head[64], tail[16];
                int h = snprintf(head, sizeof head, "child %d line %05d:", c, i);
                int t = snprintf(tail, sizeof tail, " end\n");
                struct iovec v[2] = {{head, (size_t)h}, {tail, (size_t)t}};
                if (writev(fds[1], v, 2) != h + t) _exit(1);
            }
            _exit(0);
        }
    }
    close(fds[1]);
    static char all[CHILDREN * LINES * 40];
    size_t n = 0;
    ssize_t r;
    int short_reads = 0;
    while ((r = read(fds[0], all + n, sizeof all - n)) > 0) {
        // Every read ends at the end of a line: no write was seen in halves.
        if (all[n + r - 1] != '\n') short_reads++;
        n += r;
    }
    int bad = 0, lines = 0, next[CHILDREN] = {0};
    for (char *p = all; p < all + n;) {
        char *e = memchr(p, '\n', all + n - p);
        if (!e) { bad++; break; }
        int c, i;
        char end[8];
        if (sscanf(p, "child %d line %d: %3s", &c, &i, end) != 3 || c < 0 || c >= CHILDREN || i != next[c] ||
            strcmp(end, "end") != 0 || e - p != 23)
            bad++;
        else
            next[c]++;
        lines++;
        p = e + 1;
    }
    int st, failed = 0;
    while (wait(&st) > 0) failed += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    CHECK(failed == 0, "every writer wrote every line");
    CHECK(lines == CHILDREN * LINES && bad == 0, "8000 lines, each whole and in its writer's order");
    CHECK(short_reads == 0, "no read ended inside a line");
    return failures;
}
