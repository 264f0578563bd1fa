/* sendfile against the host: file to file at an explicit offset (the input's own
   offset untouched) and at the file's offset (advanced), to a pipe, a socketpair
   and a TCP connection over loopback, short counts, end of file, inputs that are
   not regular files (EINVAL), and the errors. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"


static unsigned sum(const char *b, long n) {
    unsigned s = 0;
    for (long i = 0; i < n; i++) s = s * 31 + (unsigned char)b[i];
    return s;
}

int main(void) {
    char path[] = "/tmp/sendfile-XXXXXX", out[] = "/tmp/sendfile-out-XXXXXX";
    int in = mkstemp(path), dst = mkstemp(out);
    static char data[300000], back[300000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (char)(i * 7 + i / 251);
    if (write(in, data, sizeof data) != (long)sizeof data) return 1;
    lseek(in, 0, SEEK_SET);

    off_t off = 1000;
    SHOW("file to file at offset", sendfile(dst, in, &off, 100000));
    printf("offset now %ld, input position %ld\n", (long)off, (long)lseek(in, 0, SEEK_CUR));
    SHOW("file to file at position", sendfile(dst, in, NULL, 5000));
    printf("input position %ld, output size %ld\n", (long)lseek(in, 0, SEEK_CUR), (long)lseek(dst, 0, SEEK_END));
    pread(dst, back, 105000, 0);
    printf("copied right: %d\n", memcmp(back, data + 1000, 100000) == 0 && memcmp(back + 100000, data, 5000) == 0);
    off = sizeof data - 10;
    SHOW("near the end", sendfile(dst, in, &off, 100));
    off = sizeof data + 10;
    SHOW("past the end", sendfile(dst, in, &off, 100));
    SHOW("count 0", sendfile(dst, in, NULL, 0));

    int p[2];
    pipe(p);
    lseek(in, 0, SEEK_SET);
    SHOW("to a pipe", sendfile(p[1], in, NULL, 4000));
    long n = read(p[0], back, sizeof back);
    printf("pipe got %ld, sum %u (want %u)\n", n, sum(back, n), sum(data, 4000));

    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    /* A pipe is never read, a socket only into a pipe (other outputs need a
       seekable input): otherwise EINVAL (the caller falls back to read and
       write), data waiting or not. */
    SHOW("from an empty pipe", sendfile(sv[0], p[0], NULL, 10));
    write(p[1], "xy", 2);
    SHOW("from a pipe with data", sendfile(sv[0], p[0], NULL, 10));
    SHOW("pipe kept its data", read(p[0], back, sizeof back));
    int q[2];
    pipe(q);
    write(q[1], "xy", 2);
    SHOW("pipe to pipe", sendfile(p[1], q[0], NULL, 10));
    write(sv[1], "abc", 3);
    SHOW("socket to socket", sendfile(sv[1], sv[0], NULL, 10));
    SHOW("socket to pipe", sendfile(p[1], sv[0], NULL, 10));
    SHOW("pipe got", read(p[0], back, sizeof back));
    int zero = open("/dev/zero", O_RDONLY);
    SHOW("/dev/zero to a socket", sendfile(sv[0], zero, NULL, 10));
    SHOW("/dev/zero to a pipe", sendfile(p[1], zero, NULL, 10));
    SHOW("pipe got", read(p[0], back, sizeof back));
    SHOW("socket got", read(sv[1], back, sizeof back));
    close(zero);
    close(q[0]);
    close(q[1]);
    off = 0;
    SHOW("to a unix socket", sendfile(sv[0], in, &off, 50000));
    long got = 0;
    while (got < 50000 && (n = read(sv[1], back + got, sizeof back - got)) > 0) got += n;
    printf("socket got %ld, same: %d\n", got, memcmp(back, data, 50000) == 0);

    int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(l, (void *)&a, sizeof a);
    listen(l, 1);
    getsockname(l, (void *)&a, &al);
    connect(c, (void *)&a, sizeof a);
    int s = accept(l, 0, 0);
    off = 0;
    long sent = 0;
    while (sent < (long)sizeof data) {
        long w = sendfile(s, in, &off, sizeof data - sent);
        if (w <= 0) break;
        sent += w;
        got = 0;
        while (got < w && (n = read(c, back + sent - w + got, w - got)) > 0) got += n;
    }
    printf("tcp sent %ld, same: %d\n", sent, memcmp(back, data, sizeof data) == 0);

    int app = open(out, O_WRONLY | O_APPEND);
    SHOW("append output", sendfile(app, in, NULL, 10));
    int ro = open(out, O_RDONLY);
    SHOW("read-only output", sendfile(ro, in, NULL, 10));
    int wo = open(path, O_WRONLY);
    SHOW("write-only input", sendfile(dst, wo, NULL, 10));
    SHOW("bad input fd", sendfile(dst, 999, NULL, 10));
    SHOW("bad output fd", sendfile(999, in, NULL, 10));
    off = -1;
    SHOW("negative offset", sendfile(dst, in, &off, 10));
    SHOW("offset pointer bad", sendfile(dst, in, (off_t *)16, 10));
    unlink(path);
    unlink(out);
    printf("sendfile ok\n");
    return 0;
}
