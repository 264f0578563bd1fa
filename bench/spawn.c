/* Times a command end to end: runs it N times (fork, exec, wait; stdout and stderr
   to /dev/null) and prints the median, 10th and 90th percentile wall time in µs.
   Between runs it pauses GAP_US µs (environment, default 5000) so that one run's
   background work (onering tears the VM down after exiting) does not slow the next:
   each run is timed as a lone command would be.
   Usage: spawn N command [args...] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: spawn N command [args...]\n");
        return 2;
    }
    int n = atoi(argv[1]);
    double *t = malloc(sizeof *t * n);
    const char *gap_env = getenv("GAP_US");
    int gap = gap_env ? atoi(gap_env) : 5000;
    for (int i = 0; i < n; i++) {
        usleep(gap);
        double t0 = now_us();
        pid_t pid = fork();
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            dup2(null, 2);
            execv(argv[2], argv + 2);
            _exit(127);
        }
        int st;
        waitpid(pid, &st, 0);
        t[i] = now_us() - t0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "spawn: %s failed (status %d)\n", argv[2], st);
            return 1;
        }
    }
    qsort(t, n, sizeof *t, cmp);
    printf("%.0f %.0f %.0f\n", t[n / 2], t[n / 10], t[n * 9 / 10]);
    return 0;
}
