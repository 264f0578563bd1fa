// Job-control stops of child processes: SIGSTOP and waitpid(WUNTRACED), a stopped
// child not running (its counter in a shared page stands still, all its threads'
// too, and one blocked in read() stays there), SIGCONT and WCONTINUED, waitid's
// CLD_STOPPED/CLD_CONTINUED with WNOWAIT, SIGCHLD's codes and SA_NOCLDSTOP,
// SIGTSTP (handled: no stop; default: a stop, also when a blocked one is let
// through; dropped for an orphaned group), SIGCONT and stop signals discarding
// each other, SIGKILL of a stopped child, /proc/PID/stat's 'T'. Each check
// prints one line; the children print nothing.
#include "check.h"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long *ctr; // shared with the children

// Whether ctr[i] moves within about a second.
static int moves(int i) {
    long a = ctr[i];
    for (int n = 0; n < 200; n++) {
        usleep(5000);
        if (ctr[i] != a) return 1;
    }
    return 0;
}

// Whether ctr[i] stands still for 50 ms.
static int still(int i) {
    long a = ctr[i];
    usleep(50000);
    return ctr[i] == a;
}

// Waits until ctr[i] is at least v (about 2 s at most).
static int reaches(int i, long v) {
    for (int n = 0; n < 400 && ctr[i] < v; n++) usleep(5000);
    return ctr[i] >= v;
}

// Blocks (SIG_BLOCK) or unblocks (SIG_UNBLOCK) signal `sig`.
static void mask(int how, int sig) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(how, &s, NULL);
}

// Whether signal `sig` is pending.
static int pending(int sig) {
    sigset_t s;
    sigpending(&s);
    return sigismember(&s, sig);
}

static void spin(int i) {
    for (;;) ctr[i]++;
}

static pid_t spinner(int own_group) {
    pid_t pid = fork();
    if (pid == 0) {
        if (own_group) setpgid(0, 0);
        spin(0);
    }
    if (own_group) setpgid(pid, pid); // both sides, as shells do
    return pid;
}

static int killed_by(pid_t pid, int sig) {
    int st;
    return waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == sig;
}

static int stopped_by(pid_t pid, int sig) {
    int st = 0;
    return waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st) && WSTOPSIG(st) == sig;
}

static int not_stopped(pid_t pid) {
    int st;
    return waitpid(pid, &st, WUNTRACED | WNOHANG) == 0;
}

// The state letter of /proc/PID/stat, and whether /proc/PID/status agrees.
static char proc_state(pid_t pid, int *status_agrees) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return '?';
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return '?';
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    char st = p && p[1] ? p[2] : '?';
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    fd = open(path, O_RDONLY);
    n = fd < 0 ? 0 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0) close(fd);
    buf[n > 0 ? n : 0] = 0;
    char want[32];
    snprintf(want, sizeof want, "State:\t%c (%s)", st, st == 'T' ? "stopped" : st == 'S' ? "sleeping" : "running");
    *status_agrees = strstr(buf, want) != NULL;
    return st;
}

static void stop_and_continue(void) {
    pid_t pid = spinner(0);
    CHECK(moves(0), "the child runs");
    int st = 0;
    CHECK(kill(pid, SIGCONT) == 0 && waitpid(pid, &st, WCONTINUED | WNOHANG) == 0,
          "SIGCONT to a running child reports nothing");
    CHECK(kill(pid, SIGSTOP) == 0, "kill SIGSTOP");
    CHECK(stopped_by(pid, SIGSTOP), "waitpid WUNTRACED: WIFSTOPPED, WSTOPSIG SIGSTOP");
    CHECK(still(0), "a stopped child does not run");
    CHECK(waitpid(pid, &st, WUNTRACED | WNOHANG) == 0, "the stop is reported once");
    int agrees = 0;
    CHECK(proc_state(pid, &agrees) == 'T', "/proc/PID/stat says T");
    CHECK(agrees, "/proc/PID/status says T (stopped)");
    CHECK(kill(pid, SIGSTOP) == 0 && waitpid(pid, &st, WUNTRACED | WNOHANG) == 0,
          "a second SIGSTOP reports nothing new");
    CHECK(kill(pid, SIGCONT) == 0, "kill SIGCONT");
    st = 0;
    CHECK(waitpid(pid, &st, WCONTINUED) == pid && WIFCONTINUED(st) && st == 0xffff,
          "waitpid WCONTINUED: WIFCONTINUED");
    CHECK(waitpid(pid, &st, WCONTINUED | WNOHANG) == 0, "the continuation is reported once");
    CHECK(moves(0), "a continued child runs again");
    CHECK(proc_state(pid, &agrees) != 'T', "/proc/PID/stat no longer says T");
    kill(pid, SIGKILL);
    CHECK(killed_by(pid, SIGKILL), "killed");
}

static void with_waitid(void) {
    pid_t pid = spinner(0);
    CHECK(moves(0), "waitid: the child runs");
    kill(pid, SIGSTOP);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PID, pid, &si, WSTOPPED | WNOWAIT) == 0 && si.si_signo == SIGCHLD && si.si_code == CLD_STOPPED &&
              si.si_status == SIGSTOP && si.si_pid == pid,
          "waitid WSTOPPED|WNOWAIT: CLD_STOPPED, SIGSTOP");
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PID, pid, &si, WSTOPPED) == 0 && si.si_code == CLD_STOPPED && si.si_status == SIGSTOP,
          "WNOWAIT left it: waitid WSTOPPED reports it again");
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PID, pid, &si, WSTOPPED | WNOHANG) == 0 && si.si_pid == 0, "then it is gone");
    CHECK(waitid(P_PID, pid, &si, WEXITED | WNOHANG) == 0 && si.si_pid == 0, "WEXITED does not see a stop");
    kill(pid, SIGCONT);
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_ALL, 0, &si, WCONTINUED | WNOWAIT) == 0 && si.si_code == CLD_CONTINUED &&
              si.si_status == SIGCONT && si.si_pid == pid,
          "waitid WCONTINUED|WNOWAIT: CLD_CONTINUED, SIGCONT");
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PID, pid, &si, WCONTINUED | WSTOPPED) == 0 && si.si_code == CLD_CONTINUED,
          "waitid WCONTINUED reports it again");
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PID, pid, &si, WCONTINUED | WNOHANG) == 0 && si.si_pid == 0, "then it is gone too");
    kill(pid, SIGKILL);
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PID, pid, &si, WEXITED) == 0 && si.si_code == CLD_KILLED && si.si_status == SIGKILL,
          "waitid WEXITED: CLD_KILLED");
}

static volatile int chld_codes[8], chld_status[8], nchld;

static void on_chld(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    if (nchld < 8) {
        chld_codes[nchld] = si->si_code;
        chld_status[nchld] = si->si_status;
        nchld++;
    }
}

static int chld_count(int n) {
    for (int i = 0; i < 200 && nchld < n; i++) usleep(5000);
    return nchld;
}

static void sigchld_codes(void) {
    struct sigaction sa = {0};
    sa.sa_sigaction = on_chld;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    nchld = 0;
    pid_t pid = spinner(0);
    CHECK(moves(0), "SIGCHLD: the child runs");
    kill(pid, SIGSTOP);
    CHECK(stopped_by(pid, SIGSTOP), "SIGCHLD: stopped");
    CHECK(chld_count(1) == 1 && chld_codes[0] == CLD_STOPPED && chld_status[0] == SIGSTOP,
          "SIGCHLD with CLD_STOPPED, si_status SIGSTOP");
    kill(pid, SIGCONT);
    int st;
    CHECK(waitpid(pid, &st, WCONTINUED) == pid && WIFCONTINUED(st), "SIGCHLD: continued");
    CHECK(chld_count(2) == 2 && chld_codes[1] == CLD_CONTINUED && chld_status[1] == SIGCONT,
          "SIGCHLD with CLD_CONTINUED, si_status SIGCONT");
    sa.sa_flags |= SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    kill(pid, SIGSTOP);
    CHECK(stopped_by(pid, SIGSTOP), "SA_NOCLDSTOP: stopped");
    kill(pid, SIGCONT);
    CHECK(waitpid(pid, &st, WCONTINUED) == pid && WIFCONTINUED(st), "SA_NOCLDSTOP: continued");
    usleep(20000);
    CHECK(nchld == 2, "SA_NOCLDSTOP: no SIGCHLD for either");
    kill(pid, SIGKILL);
    CHECK(killed_by(pid, SIGKILL), "SA_NOCLDSTOP: killed");
    CHECK(chld_count(3) == 3 && chld_codes[2] == CLD_KILLED && chld_status[2] == SIGKILL,
          "SA_NOCLDSTOP: SIGCHLD with CLD_KILLED still");
    signal(SIGCHLD, SIG_DFL);
}

static void on_tstp(int sig) {
    (void)sig;
    ctr[1]++;
}

static void sigtstp(void) {
    // Handled: the handler runs, nothing stops; and it discards a pending SIGCONT.
    ctr[1] = ctr[2] = 0;
    ctr[3] = -1;
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTSTP, on_tstp);
        mask(SIG_BLOCK, SIGCONT);
        ctr[2] = 1;
        while (ctr[2] != 2) ctr[0]++;
        ctr[3] = pending(SIGCONT);
        spin(0);
    }
    reaches(2, 1);
    kill(pid, SIGCONT); // pending: blocked
    kill(pid, SIGTSTP);
    CHECK(reaches(1, 1), "SIGTSTP with a handler runs the handler");
    CHECK(not_stopped(pid), "and does not stop");
    ctr[2] = 2;
    CHECK(reaches(3, 0) && ctr[3] == 0, "SIGTSTP discarded the pending SIGCONT");
    kill(pid, SIGKILL);
    CHECK(killed_by(pid, SIGKILL), "handled SIGTSTP: killed");

    // Default, in a group of its own (not orphaned): it stops; SIGKILL ends it.
    pid = spinner(1);
    CHECK(moves(0), "SIGTSTP: the child runs");
    kill(pid, SIGTSTP);
    CHECK(stopped_by(pid, SIGTSTP), "SIGTSTP at its default stops, WSTOPSIG SIGTSTP");
    CHECK(still(0), "SIGTSTP: the child does not run");
    kill(pid, SIGKILL);
    CHECK(killed_by(pid, SIGKILL), "SIGKILL ends a stopped child");

    // Blocked: pending; SIGCONT discards it; one let through later stops.
    ctr[2] = 0;
    ctr[3] = ctr[4] = -1;
    pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        mask(SIG_BLOCK, SIGTSTP);
        ctr[2] = 1;
        while (ctr[2] != 2) ctr[0]++;
        ctr[3] = pending(SIGTSTP);
        while (ctr[2] != 3) ctr[0]++;
        ctr[4] = pending(SIGTSTP);
        mask(SIG_UNBLOCK, SIGTSTP);
        spin(0);
    }
    setpgid(pid, pid);
    reaches(2, 1);
    kill(pid, SIGTSTP);
    CHECK(not_stopped(pid), "a blocked SIGTSTP does not stop");
    kill(pid, SIGCONT);
    ctr[2] = 2;
    CHECK(reaches(3, 0) && ctr[3] == 0, "SIGCONT discarded the pending SIGTSTP");
    kill(pid, SIGTSTP);
    ctr[2] = 3;
    CHECK(stopped_by(pid, SIGTSTP), "a blocked SIGTSTP stops once let through");
    CHECK(ctr[4] == 1, "it was pending until then");
    kill(pid, SIGKILL);
    CHECK(killed_by(pid, SIGKILL), "blocked SIGTSTP: killed");

    // An orphaned group (the child's own session): SIGTSTP is dropped, SIGSTOP not.
    ctr[2] = 0;
    pid = fork();
    if (pid == 0) {
        setsid();
        ctr[2] = 1;
        spin(0);
    }
    reaches(2, 1);
    kill(pid, SIGTSTP);
    CHECK(moves(0) && not_stopped(pid), "SIGTSTP to an orphaned group does nothing");
    kill(pid, SIGSTOP);
    CHECK(stopped_by(pid, SIGSTOP), "SIGSTOP stops it still");
    kill(pid, SIGKILL);
    CHECK(killed_by(pid, SIGKILL), "orphaned: killed");
}

static void *thread_spin(void *arg) {
    spin((int)(long)arg);
    return NULL;
}

static void threads(void) {
    pid_t pid = fork();
    if (pid == 0) {
        pthread_t t;
        pthread_create(&t, NULL, thread_spin, (void *)11L);
        pthread_create(&t, NULL, thread_spin, (void *)12L);
        spin(10);
    }
    CHECK(moves(10) && moves(11) && moves(12), "threads: all three run");
    kill(pid, SIGSTOP);
    CHECK(stopped_by(pid, SIGSTOP), "threads: stopped");
    long a = ctr[10], b = ctr[11], c = ctr[12];
    usleep(50000);
    CHECK(ctr[10] == a && ctr[11] == b && ctr[12] == c, "a stopped child's threads all stand still");
    kill(pid, SIGCONT);
    CHECK(moves(10) && moves(11) && moves(12), "threads: all three run again");
    kill(pid, SIGKILL);
    CHECK(killed_by(pid, SIGKILL), "threads: killed");
}

static void blocked_in_read(void) {
    int p[2];
    pipe(p);
    ctr[20] = 0;
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        ctr[20] = 1;
        if (read(p[0], &c, 1) == 1) ctr[20] = 2;
        _exit(0);
    }
    reaches(20, 1);
    usleep(20000); // in read() by now
    kill(pid, SIGSTOP);
    CHECK(stopped_by(pid, SIGSTOP), "a child blocked in read() stops");
    write(p[1], "x", 1);
    usleep(50000);
    CHECK(ctr[20] == 1, "its read does not return to it while stopped");
    kill(pid, SIGCONT);
    CHECK(reaches(20, 2), "it gets the byte once continued");
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st), "and exits");
    close(p[0]);
    close(p[1]);
}

static void raise_stop(void) {
    ctr[21] = 0;
    pid_t pid = fork();
    if (pid == 0) {
        raise(SIGSTOP);
        ctr[21] = 1;
        _exit(3);
    }
    CHECK(stopped_by(pid, SIGSTOP), "a child that raises SIGSTOP stops");
    usleep(20000);
    CHECK(ctr[21] == 0, "and stays stopped");
    kill(pid, SIGCONT);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 3 && ctr[21] == 1,
          "SIGCONT: it goes on and exits");
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    ctr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ctr == MAP_FAILED) return 1;
    stop_and_continue();
    with_waitid();
    sigchld_codes();
    sigtstp();
    threads();
    blocked_in_read();
    raise_stop();
    printf("%d failures\n", failures);
    return failures;
}
