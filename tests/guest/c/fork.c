// fork: each child gets a copy of the parent's memory (globals, heap, stack)
// and changes it without the parent seeing; MAP_SHARED memory stays shared;
// statuses, signals and orphans reach the right parent. Same output as the host.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

#define N 100
#define WORDS 1024

static unsigned global[WORDS];


static void fill(unsigned *p, unsigned tag) {
    for (int i = 0; i < WORDS; i++) p[i] = tag * 7919u + i;
}

static int same(const unsigned *p, unsigned tag) {
    for (int i = 0; i < WORDS; i++)
        if (p[i] != tag * 7919u + i) return 0;
    return 1;
}

// 100 children, one after another and then all at once: each overwrites the
// copies of the parent's global, heap and stack arrays with its own pattern,
// checks it sees its own pattern and exits with its number.
static void many_children(void) {
    unsigned stack[WORDS];
    unsigned *heap = malloc(sizeof(unsigned) * WORDS);
    fill(global, 1);
    fill(heap, 2);
    fill(stack, 3);
    pid_t pids[N];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) {
            pid_t p = fork();
            if (p == 0) {
                int ok = same(global, 1) && same(heap, 2) && same(stack, 3);
                fill(global, 100 + i);
                fill(heap, 200 + i);
                fill(stack, 300 + i);
                ok = ok && same(global, 100 + i) && same(heap, 200 + i) && same(stack, 300 + i);
                _exit(ok ? i : 255);
            }
            CHECKF(p > 0, "fork %d", i);
            pids[i] = p;
            if (round == 0) {
                int st = 0;
                CHECKF(waitpid(p, &st, 0) == p, "waitpid %d", i);
                CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == i, "child %d status %#x", i, st);
            }
        }
        if (round == 1) {
            int seen[N] = {0};
            for (int i = 0; i < N; i++) {
                int st = 0;
                pid_t p = waitpid(-1, &st, 0);
                int k = -1;
                for (int j = 0; j < N; j++)
                    if (pids[j] == p) k = j;
                CHECKF(k >= 0 && !seen[k], "reaped %d", p);
                if (k >= 0) seen[k] = 1;
                CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == k, "child %d status %#x", k, st);
            }
        }
        CHECKF(same(global, 1) && same(heap, 2) && same(stack, 3), "parent's memory changed");
    }
    CHECKF(waitpid(-1, NULL, WNOHANG) == -1, "no children left");
    free(heap);
    printf("100 children x2: ok\n");
}

static void *spin(void *arg) {
    volatile int *stop = arg;
    while (!*stop) global[0]++;
    return NULL;
}

// A parent with a second thread forks: the child has one thread, the copy.
static void from_threads(void) {
    volatile int stop = 0;
    pthread_t t;
    pthread_create(&t, NULL, spin, (void *)&stop);
    for (int i = 0; i < 10; i++) {
        pid_t p = fork();
        if (p == 0) {
            unsigned before = global[0];
            for (volatile int k = 0; k < 100000; k++) {
            }
            _exit(global[0] == before ? 0 : 1); // nobody changes the child's copy
        }
        int st = 0;
        waitpid(p, &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "threaded fork %d: %#x", i, st);
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("fork from a threaded parent: ok\n");
}

// Ping-pong over two pipes, the child on its own memory (on another vCPU with
// --smp 2).
static void pipes(void) {
    int a[2], b[2];
    pipe(a);
    pipe(b);
    pid_t p = fork();
    if (p == 0) {
        close(a[1]);
        close(b[0]);
        unsigned v;
        while (read(a[0], &v, sizeof v) == sizeof v) {
            v = v * 3 + 1;
            write(b[1], &v, sizeof v);
        }
        _exit(7);
    }
    close(a[0]);
    close(b[1]);
    unsigned sum = 0;
    for (unsigned i = 0; i < 1000; i++) {
        unsigned v = i;
        write(a[1], &v, sizeof v);
        CHECKF(read(b[0], &v, sizeof v) == sizeof v && v == i * 3 + 1, "pipe reply %u", i);
        sum += v;
    }
    close(a[1]);
    int st = 0;
    waitpid(p, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 7, "pipe child %#x", st);
    close(b[0]);
    printf("pipe ping-pong: sum %u\n", sum);
}

// MAP_SHARED anonymous memory is the same in parent and child; a private
// mapping is not.
static void shared_memory(void) {
    volatile unsigned *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    volatile unsigned *pv = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    sh[0] = 1;
    pv[0] = 1;
    pid_t p = fork();
    if (p == 0) {
        sh[0] = 42;
        pv[0] = 43;
        sh[1] = 1; // ready
        while (sh[2] == 0) {
        }
        _exit(sh[2] == 99 ? 0 : 1);
    }
    while (sh[1] == 0) {
    }
    CHECKF(sh[0] == 42, "shared value %u", sh[0]);
    CHECKF(pv[0] == 1, "private value %u", pv[0]);
    sh[2] = 99;
    int st = 0;
    waitpid(p, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "shared child %#x", st);
    munmap((void *)sh, 4096);
    munmap((void *)pv, 4096);
    printf("MAP_SHARED across fork: ok\n");
}

// A child that crashes is reported as killed by SIGSEGV; SIGCHLD comes.
static volatile sig_atomic_t chld;
static void on_chld(int s) {
    (void)s;
    chld++;
}

static void crash(void) {
    signal(SIGCHLD, on_chld);
    pid_t p = fork();
    if (p == 0) {
        *(volatile int *)8 = 1;
        _exit(0);
    }
    int st = 0;
    while (waitpid(p, &st, 0) < 0) {
    }
    CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "crash status %#x", st);
    CHECKF(chld >= 1, "no SIGCHLD");
    signal(SIGCHLD, SIG_DFL);
    printf("crashing child: signal %d\n", WTERMSIG(st));
}

// A child whose own child outlives it: the grandchild becomes pid 1's (in the
// VM, the program is pid 1; on the host, whoever reaps orphans), and getppid
// says so.
static void orphans(void) {
    int fd[2];
    pipe(fd);
    pid_t me = getpid();
    pid_t p = fork();
    if (p == 0) {
        pid_t mid = getpid(); // (the grandchild's copy says who its parent was)
        pid_t g = fork();
        if (g == 0) {
            close(fd[0]);
            // Wait until the middle process has gone.
            for (int i = 0; i < 100000 && getppid() == mid; i++) usleep(100);
            pid_t now = getppid();
            char c = now != mid && (me != 1 || now == 1) ? 'y' : 'n';
            if (c == 'n') printf("orphan: parent %d, was %d\n", now, mid);
            write(fd[1], &c, 1);
            _exit(0);
        }
        _exit(3);
    }
    close(fd[1]);
    int st = 0;
    waitpid(p, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 3, "middle %#x", st);
    char c = 0;
    CHECKF(read(fd[0], &c, 1) == 1 && c == 'y', "orphan's parent");
    close(fd[0]);
    // The orphan ends; in the VM pid 1 may reap it (on the host it is not ours).
    if (me == 1) {
        while (waitpid(-1, &st, 0) > 0) {
        }
    }
    printf("orphan re-parented: ok\n");
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    many_children();
    from_threads();
    pipes();
    shared_memory();
    crash();
    orphans();
    printf(failures ? "FAILED\n" : "all ok\n");
    return failures != 0;
}
