// Threads killed while they wait on a futex (their process exits) leave nothing
// behind: in later processes, at the same address of the same binary (and so,
// in onering, often the same address-space slot), a FUTEX_WAKE of one waiter
// wakes the live waiter. Each round: a child whose thread waits at `word` exits;
// then a child whose thread waits at `word` is woken by its main thread. A lost
// wake-up shows as "FAIL" after a 5-second alarm. (Go's runtime hung this way.)
#define _GNU_SOURCE
#include "check.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define FUTEX_PRIVATE_FLAG 128

static _Atomic int word;
static _Atomic int waiting;

static long futex(_Atomic int *w, int op, int val) {
    return syscall(SYS_futex, w, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

static void *waiter(void *arg) {
    (void)arg;
    waiting = 1;
    while (word == 0) futex(&word, FUTEX_WAIT, 0);
    return NULL;
}

static void lost(int sig) {
    (void)sig;
    static const char m[] = "FAIL a wake-up was lost\n";
    write(1, m, sizeof m - 1);
    _exit(1);
}

// Runs `f` in a child; its exit status.
static int in_child(void (*f)(void)) {
    pid_t c = fork();
    if (c == 0) {
        f();
        _exit(0);
    }
    int st;
    waitpid(c, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void start_waiter(void) {
    pthread_t t;
    pthread_create(&t, NULL, waiter, NULL);
    while (!waiting) usleep(100);
    usleep(2000); // (in the futex wait by now)
}

// Exits while its thread waits.
static void die_waiting(void) {
    start_waiter();
    _exit(0);
}

// Wakes its waiting thread, which must wake.
static void wake_one(void) {
    signal(SIGALRM, lost);
    alarm(5);
    pthread_t t;
    waiting = 0;
    pthread_create(&t, NULL, waiter, NULL);
    while (!waiting) usleep(100);
    usleep(2000);
    word = 1;
    futex(&word, FUTEX_WAKE, 1);
    pthread_join(t, NULL);
    _exit(0);
}

int main(void) {
    int bad = 0;
    for (int round = 0; round < 20; round++) {
        bad += in_child(die_waiting) != 0;
        bad += in_child(wake_one) != 0;
    }
    CHECK(bad == 0, "20 rounds: every wake-up reached the live waiter");
    return failures;
}
