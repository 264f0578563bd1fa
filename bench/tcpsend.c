/* bench/net.sh (h), the client side: `tcpsend HOST PORT MB` connects, writes MB
   MiB in 64 KiB writes, half-closes, waits for the sink's byte count and prints
   MB/s (from connect to the count). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    long mb = atol(argv[3]);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) {
        perror("connect");
        return 1;
    }
    static char buf[1 << 16];
    for (long i = 0; i < mb * 16; i++) {
        for (size_t off = 0; off < sizeof buf;) {
            ssize_t w = write(s, buf + off, sizeof buf - off);
            if (w <= 0) {
                perror("write");
                return 1;
            }
            off += w;
        }
    }
    shutdown(s, SHUT_WR);
    unsigned long long got = 0;
    if (read(s, &got, sizeof got) != sizeof got || got != (unsigned long long)mb << 20) {
        fprintf(stderr, "tcpsend: the sink counted %llu bytes\n", got);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%.0f\n", mb / secs);
    return 0;
}
