// fork benchmarks, one figure per run on stdout:
//   forkbench fork N      fork + _exit + waitpid, N times: µs per iteration
//   forkbench pingpong N  a byte back and forth over two pipes between parent and
//                         forked child, N round trips: µs per round trip (on one
//                         vCPU each round trip is two address-space switches)
//   forkbench threadpp N  the same between two threads of one process (no
//                         address-space switch): the baseline for the difference
//   forkbench exec N      fork + execve of this program (which exits at once) +
//                         waitpid, N times: µs per iteration
//   forkbench spawn N     the same with posix_spawn (vfork + exec)
#include <pthread.h>
#include <spawn.h>
#include <sys/auxv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int a[2], b[2];
static long n;

static void *echo(void *arg) {
    (void)arg;
    char c;
    while (read(a[0], &c, 1) == 1) write(b[1], &c, 1);
    return NULL;
}

extern char **environ;

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "noop")) return 0;
    if (argc < 3) return 2;
    n = atol(argv[2]);
    double t0;
    if (!strcmp(argv[1], "exec") || !strcmp(argv[1], "spawn")) {
        char *self = (char *)getauxval(AT_EXECFN);
        char *args[] = {self, "noop", NULL};
        int spawn = !strcmp(argv[1], "spawn");
        t0 = now_us();
        for (long i = 0; i < n; i++) {
            pid_t p;
            if (spawn) {
                if (posix_spawn(&p, self, NULL, NULL, args, environ) != 0) return 1;
            } else if ((p = fork()) == 0) {
                execve(self, args, environ);
                _exit(127);
            }
            int st;
            if (p < 0 || waitpid(p, &st, 0) != p || st != 0) return 1;
        }
    } else if (!strcmp(argv[1], "fork")) {
        t0 = now_us();
        for (long i = 0; i < n; i++) {
            pid_t p = fork();
            if (p == 0) _exit(0);
            int st;
            if (p < 0 || waitpid(p, &st, 0) != p) return 1;
        }
    } else {
        pipe(a);
        pipe(b);
        pthread_t t;
        if (!strcmp(argv[1], "pingpong")) {
            if (fork() == 0) {
                close(a[1]); // (end of file once the parent is gone)
                close(b[0]);
                echo(NULL);
                _exit(0);
            }
        } else {
            pthread_create(&t, NULL, echo, NULL);
        }
        char c = 'x';
        t0 = now_us();
        for (long i = 0; i < n; i++) {
            write(a[1], &c, 1);
            if (read(b[0], &c, 1) != 1) return 1;
        }
    }
    printf("%.2f\n", (now_us() - t0) / n);
    return 0;
}
