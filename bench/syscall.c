/* System-call cost, run the same on the host and in onering.
     syscall rw N       the seed's Benchmark-1: N iterations of write + read of 40 bytes
                        on /dev/null; prints ns per iteration
     syscall getppid N  N null system calls; prints ns per call
   Built with musl-gcc -static; the loop calls the C library as a program would. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: syscall rw|getppid N\n");
        return 2;
    }
    long n = atol(argv[2]);
    char buf[40];
    memset(buf, 'x', sizeof buf);
    double t0, t1;
    if (!strcmp(argv[1], "rw")) {
        int fd = open("/dev/null", O_RDWR);
        if (fd < 0) {
            perror("/dev/null");
            return 1;
        }
        t0 = now_ns();
        for (long i = 0; i < n; i++) {
            if (write(fd, buf, sizeof buf) != sizeof buf || read(fd, buf, sizeof buf) != 0) {
                fprintf(stderr, "unexpected result\n");
                return 1;
            }
        }
        t1 = now_ns();
    } else {
        t0 = now_ns();
        for (long i = 0; i < n; i++)
            syscall(SYS_getppid);
        t1 = now_ns();
    }
    printf("%.1f\n", (t1 - t0) / n);
    return 0;
}
