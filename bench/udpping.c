/* The seed's Benchmark-2 client (bench/net.sh, issue 15): sends COUNT datagrams of
   SIZE bytes to HOST:PORT one at a time, each after the echo of the one before,
   and prints packets per second (each way), Mbit/s (both ways) and the round
   trip's median and 99th percentile in microseconds, and how many were lost (no
   echo within 200 ms: sent again up to 5 times). An echo of another size or with
   other bytes is an error (status 1): datagrams larger than the MTU test IP
   fragmentation both ways.
     udpping HOST PORT [COUNT] [SIZE] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: udpping HOST PORT [COUNT] [SIZE]\n");
        return 2;
    }
    int count = argc > 3 ? atoi(argv[3]) : 100000, size = argc > 4 ? atoi(argv[4]) : 200;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) {
        perror("connect");
        return 1;
    }
    struct timeval tv = {0, 200000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (size < 4 || size > 65507) {
        fprintf(stderr, "udpping: SIZE must be 4..65507\n");
        return 2;
    }
    char *buf = calloc(1, size + 16), *in = calloc(1, 65536);
    for (int k = 4; k < size; k++) buf[k] = (char)(k * 7 + 1);
    double *rtt = calloc(count, sizeof *rtt);
    int lost = 0, n = 0;
    double start = now_us();
    for (int i = 0; i < count; i++) {
        memcpy(buf, &i, sizeof i);
        int got = 0;
        for (int t = 0; t < 5 && !got; t++) {
            double t0 = now_us();
            if (send(s, buf, size, 0) != size) {
                perror("send");
                return 1;
            }
            for (;;) {
                ssize_t r = recv(s, in, 65536, 0);
                if (r < 0) break; /* timed out: send again */
                int id;
                memcpy(&id, in, sizeof id);
                if (id == i) {
                    if (r != size || memcmp(in + 4, buf + 4, size - 4)) {
                        fprintf(stderr, "udpping: echo %d came back wrong (%zd bytes of %d)\n", i, r, size);
                        return 1;
                    }
                    rtt[n++] = now_us() - t0;
                    got = 1;
                    break;
                }
            }
            if (!got) lost++;
        }
    }
    double secs = (now_us() - start) / 1e6;
    qsort(rtt, n, sizeof *rtt, cmp);
    printf("%.0f pps %.1f Mbit/s p50 %.1f us p99 %.1f us lost %d\n", n / secs, n * size * 8.0 * 2 / secs / 1e6,
           n ? rtt[n / 2] : 0, n ? rtt[(int)(n * 0.99)] : 0, lost);
    return 0;
}
