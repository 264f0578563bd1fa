/* splice and tee against the host: file to pipe at an offset, pipe to file, pipe
   to socket and back, pipe to pipe, tee (the data stays), end of file, empty
   non-blocking pipes, and the errors. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"


int main(void) {
    char path[] = "/tmp/splice-XXXXXX";
    int f = mkstemp(path);
    static char data[100000], back[100000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (char)(i * 13 + i / 97);
    write(f, data, sizeof data);
    int p[2], q[2], sv[2];
    pipe(p);
    pipe(q);
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);

    loff_t off = 500;
    SHOW("file to pipe at offset", splice(f, &off, p[1], NULL, 30000, 0));
    printf("offset %ld, file position %ld\n", (long)off, (long)lseek(f, 0, SEEK_CUR));
    SHOW("tee pipe to pipe", tee(p[0], q[1], 100000, 0));
    long n = read(q[0], back, sizeof back);
    printf("tee copy %ld same %d\n", n, memcmp(back, data + 500, 30000) == 0);
    SHOW("pipe to socket", splice(p[0], NULL, sv[0], NULL, 100000, 0));
    n = read(sv[1], back, sizeof back);
    printf("socket got %ld same %d\n", n, memcmp(back, data + 500, 30000) == 0);
    write(sv[1], "reply", 5);
    SHOW("socket to pipe", splice(sv[0], NULL, p[1], NULL, 100, SPLICE_F_NONBLOCK));
    n = read(p[0], back, sizeof back);
    printf("pipe got %.*s\n", (int)n, back);
    SHOW("empty socket, non-blocking", splice(sv[0], NULL, p[1], NULL, 100, SPLICE_F_NONBLOCK));
    SHOW("empty pipe, non-blocking", splice(p[0], NULL, sv[0], NULL, 100, SPLICE_F_NONBLOCK));

    write(p[1], "to the file", 11);
    off = 10;
    SHOW("pipe to file at offset", splice(p[0], NULL, f, &off, 100, 0));
    pread(f, back, 11, 10);
    printf("file has %.11s, offset %ld\n", back, (long)off);
    write(p[1], "abc", 3);
    SHOW("pipe to pipe", splice(p[0], NULL, q[1], NULL, 100, 0));
    n = read(q[0], back, sizeof back);
    printf("moved %.*s\n", (int)n, back);
    close(q[1]);
    SHOW("end of file", splice(q[0], NULL, p[1], NULL, 100, 0));

    int r[2];
    pipe(r);
    SHOW("no pipe", splice(f, NULL, sv[0], NULL, 10, 0));
    off = 0;
    SHOW("offset on a pipe", splice(r[0], &off, f, NULL, 10, 0));
    SHOW("bad flags", splice(f, NULL, r[1], NULL, 10, 0x100));
    SHOW("same pipe", splice(r[0], NULL, r[1], NULL, 10, 0));
    SHOW("write end as input", splice(r[1], NULL, f, NULL, 10, 0));
    SHOW("bad fd", splice(999, NULL, r[1], NULL, 10, 0));
    off = -5;
    SHOW("negative offset", splice(f, &off, r[1], NULL, 10, 0));
    SHOW("len 0", splice(f, NULL, r[1], NULL, 0, 0));
    SHOW("tee no pipe", tee(f, r[1], 10, 0));
    SHOW("tee same pipe", tee(r[0], r[1], 10, 0));
    SHOW("tee empty, non-blocking", tee(r[0], p[1], 10, SPLICE_F_NONBLOCK));
    unlink(path);
    printf("splice ok\n");
    return 0;
}
