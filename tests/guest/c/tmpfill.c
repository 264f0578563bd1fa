/* Fills /tmp: `tmpfill MB` writes MB megabytes to one file, reports how far it got
 * and the error that stopped it (ENOSPC when memory runs out), then checks that
 * the file reads back, that the VM still works (a new small file), and that
 * deleting the big file lets a new one in. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char buf[1 << 20];

int main(int argc, char **argv) {
    long mb = argc > 1 ? atol(argv[1]) : 16, i;
    int fd = open("/tmp/big", O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) return perror("open"), 1;
    for (i = 0; i < mb; i++) {
        memset(buf, (int)(i & 0xff), sizeof buf);
        ssize_t n = write(fd, buf, sizeof buf);
        if (n != (ssize_t)sizeof buf) {
            if (n < 0) printf("stopped: %s\n", strerror(errno));
            else printf("stopped: short write\n");
            break;
        }
    }
    printf("wrote %s\n", i == mb ? "all" : "part");
    /* Each megabyte written reads back as written. */
    long good = 0;
    for (long j = 0; j < i; j++) {
        if (pread(fd, buf, sizeof buf, j << 20) != (ssize_t)sizeof buf) break;
        if (buf[0] != (char)(j & 0xff) || buf[sizeof buf - 1] != (char)(j & 0xff)) break;
        good++;
    }
    printf("read back: %s\n", good == i ? "ok" : "bad");
    int s = open("/tmp/small", O_CREAT | O_RDWR, 0644);
    printf("small file while full: %s\n", s >= 0 ? "opened" : strerror(errno));
    close(fd);
    unlink("/tmp/big");
    fd = open("/tmp/again", O_CREAT | O_RDWR, 0644);
    memset(buf, 1, sizeof buf);
    printf("after unlink: %s\n", write(fd, buf, sizeof buf) == (ssize_t)sizeof buf ? "written" : strerror(errno));
    return 0;
}
