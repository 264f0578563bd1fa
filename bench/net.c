/* Socket benchmarks, two threads in one process over loopback (or AF_UNIX):
     net tcp-pingpong N    1-byte request and reply, N round trips: ns per trip
     net unix-pingpong N   the same over a socketpair
     net tcp-stream MB     MB megabytes in 64 KiB writes to a reader: MB/s
   Run on the host and in onering by bench/net.sh. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static long count;
static int server_fd;

static void *echo(void *arg) {
    (void)arg;
    char c;
    for (long i = 0; i < count; i++) {
        if (read(server_fd, &c, 1) != 1 || write(server_fd, &c, 1) != 1) break;
    }
    return 0;
}

static void *drain(void *arg) {
    (void)arg;
    static char buf[65536];
    long n;
    while ((n = read(server_fd, buf, sizeof buf)) > 0) {
    }
    return 0;
}

static void tcp_pair(int *client) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(l, (void *)&a, sizeof a) || listen(l, 1) || getsockname(l, (void *)&a, &al)) exit(2);
    *client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(*client, (void *)&a, sizeof a)) exit(3);
    server_fd = accept(l, 0, 0);
    int one = 1;
    setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(server_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    close(l);
}

int main(int argc, char **argv) {
    if (argc < 3) return 64;
    const char *mode = argv[1];
    count = atol(argv[2]);
    int c;
    pthread_t t;
    if (!strcmp(mode, "tcp-pingpong") || !strcmp(mode, "unix-pingpong")) {
        if (mode[0] == 't') {
            tcp_pair(&c);
        } else {
            int sv[2];
            socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
            c = sv[0];
            server_fd = sv[1];
        }
        pthread_create(&t, 0, echo, 0);
        char x = 'x';
        double t0 = now();
        for (long i = 0; i < count; i++) {
            if (write(c, &x, 1) != 1 || read(c, &x, 1) != 1) return 4;
        }
        double el = now() - t0;
        pthread_join(t, 0);
        printf("%.0f\n", el / count * 1e9);
    } else if (!strcmp(mode, "tcp-stream")) {
        tcp_pair(&c);
        pthread_create(&t, 0, drain, 0);
        static char buf[65536];
        memset(buf, 'y', sizeof buf);
        long total = count << 20;
        double t0 = now();
        for (long done = 0; done < total;) {
            long n = write(c, buf, sizeof buf);
            if (n <= 0) return 5;
            done += n;
        }
        shutdown(c, SHUT_WR);
        pthread_join(t, 0);
        double el = now() - t0;
        printf("%.0f\n", count / el);
    } else {
        return 64;
    }
    return 0;
}
