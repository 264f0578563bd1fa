/* Waiting for signals: pause, sigsuspend with a temporary mask, sigtimedwait
   (its own signals, one sent to the process before another thread waits, an
   ignored-by-default signal that is blocked, the timeout). Prints what happened,
   to compare with the host. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int handled;
static void on_sig(int s) { handled = s; }

static void *send_later(void *arg) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, 0);
    kill(getpid(), (int)(long)arg);
    return 0;
}

static void *waiter(void *arg) {
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    siginfo_t si;
    int s = sigwaitinfo(&set, &si);
    printf("thread sigwaitinfo: %s code %s\n", s > 0 ? strsignal(s) : "error",
           si.si_code == SI_USER ? "SI_USER" : "other");
    return 0;
}

int main(void) {
    setvbuf(stdout, 0, _IONBF, 0);
    struct sigaction sa = {0};
    sa.sa_handler = on_sig;
    sigaction(SIGUSR1, &sa, 0);
    sigaction(SIGALRM, &sa, 0);

    /* pause: the handler runs, then EINTR. */
    pthread_t t;
    pthread_create(&t, 0, send_later, (void *)(long)SIGALRM);
    int r = pause();
    printf("pause: %d %s, handled %d\n", r, strerror(errno), handled);
    pthread_join(t, 0);

    /* sigsuspend: SIGUSR1 blocked, let in only while suspended. */
    sigset_t block, old, now;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &old);
    handled = 0;
    pthread_create(&t, 0, send_later, (void *)(long)SIGUSR1);
    sigset_t empty;
    sigemptyset(&empty);
    r = sigsuspend(&empty);
    sigprocmask(SIG_BLOCK, 0, &now);
    printf("sigsuspend: %d %s, handled %d, SIGUSR1 blocked again: %d\n", r, strerror(errno), handled,
           sigismember(&now, SIGUSR1));
    pthread_join(t, 0);

    /* sigtimedwait: a pending blocked signal is taken without its handler. */
    handled = 0;
    kill(getpid(), SIGUSR1);
    siginfo_t si;
    struct timespec zero = {0, 0}, short_wait = {0, 30 * 1000 * 1000};
    int s = sigtimedwait(&block, &si, &zero);
    printf("sigtimedwait pending: %s, code SI_USER %d, pid ok %d, handled %d\n", strsignal(s), si.si_code == SI_USER,
           si.si_pid == getpid(), handled);
    s = sigtimedwait(&block, &si, &short_wait);
    printf("sigtimedwait timeout: %d %s\n", s, strerror(errno));
    pthread_create(&t, 0, send_later, (void *)(long)SIGUSR1);
    s = sigwaitinfo(&block, &si);
    printf("sigwaitinfo later: %s\n", strsignal(s));
    pthread_join(t, 0);

    /* A blocked signal that is ignored by default is kept for sigwait. */
    sigset_t winch;
    sigemptyset(&winch);
    sigaddset(&winch, SIGWINCH);
    sigprocmask(SIG_BLOCK, &winch, 0);
    kill(getpid(), SIGWINCH);
    s = sigtimedwait(&winch, &si, &zero);
    printf("blocked SIGWINCH: %s\n", s > 0 ? strsignal(s) : strerror(errno));

    /* Sent to the process while only another thread will wait for it. */
    kill(getpid(), SIGUSR1);
    pthread_create(&t, 0, waiter, 0);
    pthread_join(t, 0);
    s = sigtimedwait(&block, &si, &zero);
    printf("left for main: %d %s\n", s, strerror(errno));
    return 0;
}
