// prctl(PR_SET_PDEATHSIG): the signal a process gets when the thread that created
// it ends (not its process: a thread that forks and exits is enough); cleared in a
// fork child, kept across execve; the sender is the parent (SI_USER, its pid).
// Run with this program's directory as a volume (it execs itself). Output compared
// with the host's.
#define _GNU_SOURCE
#include "check.h"
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static volatile sig_atomic_t got, got_code, got_pid;

static void on_sig(int s, siginfo_t *si, void *uc) {
    (void)uc;
    got = s;
    got_code = si->si_code;
    got_pid = si->si_pid;
}

static int pdeath(void) {
    int s = -1;
    prctl(PR_GET_PDEATHSIG, &s);
    return s;
}

static void nap(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

static int ready[2];

/* A thread that forks a child with a parent-death signal, waits until the child
   has set it, then ends. */
static void *forker(void *arg) {
    pid_t *out = arg;
    pid_t c = fork();
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        write(ready[1], "r", 1);
        for (;;) pause();
    }
    char b;
    read(ready[0], &b, 1);
    *out = c;
    return NULL;
}

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "show")) {
        printf("after execve: %d\n", pdeath());
        return 0;
    }
    const char *self = (const char *)getauxval(AT_EXECFN);
    setvbuf(stdout, NULL, _IONBF, 0);
    pipe(ready);
    CHECK(pdeath() == 0, "no parent-death signal at first");
    CHECK(prctl(PR_SET_PDEATHSIG, SIGUSR1) == 0 && pdeath() == SIGUSR1, "set and get SIGUSR1");
    CHECK_ERR(prctl(PR_SET_PDEATHSIG, 65), EINVAL, "signal 65 is EINVAL");
    CHECK_ERR(prctl(PR_SET_PDEATHSIG, -1L), EINVAL, "signal -1 is EINVAL");
    CHECK_ERR(prctl(PR_GET_PDEATHSIG, (int *)8), EFAULT, "get into a bad pointer is EFAULT");
    CHECK(pdeath() == SIGUSR1, "a failed set changes nothing");

    pid_t c = fork();
    if (c == 0) _exit(pdeath());
    int st;
    waitpid(c, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a fork child starts without one");
    pthread_t th;
    int in_thread = -1;
    pthread_create(&th, NULL, (void *(*)(void *))(void *)pdeath, NULL);
    void *r;
    pthread_join(th, &r);
    in_thread = (int)(long)r;
    CHECK(in_thread == 0, "a new thread starts without one");
    prctl(PR_SET_PDEATHSIG, 0);

    // Kept across execve.
    c = fork();
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGUSR2);
        char *a[] = {(char *)self, "show", NULL};
        execve(self, a, environ);
        _exit(127);
    }
    waitpid(c, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the exec'd child ran");

    // The creating thread ends, the process lives on: the child gets SIGTERM.
    pid_t victim = 0;
    pthread_create(&th, NULL, forker, &victim);
    pthread_join(th, NULL);
    CHECK(waitpid(victim, &st, 0) == victim && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM,
          "the child of an ended thread gets SIGTERM");

    // Another thread ending sends nothing.
    c = fork();
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        write(ready[1], "r", 1);
        nap(300);
        _exit(7);
    }
    char b;
    read(ready[0], &b, 1);
    pthread_create(&th, NULL, nothing, NULL);
    pthread_join(th, NULL);
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 7,
          "another thread's end sends nothing");

    // The parent process ends: the grandchild's handler sees SI_USER from it.
    int rep[2];
    pipe(rep);
    pid_t mid = fork();
    if (mid == 0) {
        pid_t me = getpid();
        pid_t g = fork();
        if (g == 0) {
            struct sigaction sa = {0};
            sa.sa_sigaction = on_sig;
            sa.sa_flags = SA_SIGINFO;
            sigaction(SIGUSR1, &sa, NULL);
            prctl(PR_SET_PDEATHSIG, SIGUSR1);
            write(ready[1], "r", 1);
            while (!got) pause();
            char msg[128];
            int n = snprintf(msg, sizeof msg, "grandchild: signal %d, code %d, from its parent %d, reparented %d\n",
                             (int)got, (int)got_code, got_pid == me, getppid() != me);
            write(rep[1], msg, n);
            _exit(0);
        }
        read(ready[0], &b, 1);
        _exit(0);
    }
    waitpid(mid, &st, 0);
    close(rep[1]);
    char msg[128];
    int n = read(rep[0], msg, sizeof msg - 1);
    if (n > 0) {
        msg[n] = 0;
        printf("%s", msg);
    } else
        printf("FAIL no report from the grandchild\n");
    printf("done\n");
    return failures;
}
