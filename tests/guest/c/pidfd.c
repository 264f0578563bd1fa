// pidfds: pidfd_open, pidfd_send_signal, waitid(P_PIDFD), poll and epoll readiness
// (POLLIN once the process ended, POLLHUP once reaped too), clone and clone3 with
// CLONE_PIDFD, and the errors of each, compared with the host.
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NR_pidfd_send_signal 424
#define NR_pidfd_open 434
#define NR_clone3 435
#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x1000
#endif

static int pidfd_open(pid_t pid, unsigned flags) { return syscall(NR_pidfd_open, pid, flags); }
static int pidfd_send(int fd, int sig, siginfo_t *si, unsigned flags) {
    return syscall(NR_pidfd_send_signal, fd, sig, si, flags);
}

/* A child that waits until a byte arrives on the returned pipe, then exits 5. */
static pid_t held_child(int *release) {
    int p[2];
    pipe(p);
    pid_t c = fork();
    if (c == 0) {
        char b;
        close(p[1]);
        read(p[0], &b, 1);
        _exit(5);
    }
    close(p[0]);
    *release = p[1];
    return c;
}

static int revents(int fd, int timeout) {
    struct pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, timeout);
    return n < 0 ? -1 : p.revents;
}

static volatile sig_atomic_t got_code, got_pid;
static void on_usr1(int s, siginfo_t *si, void *uc) {
    (void)s, (void)uc;
    got_code = si->si_code;
    got_pid = si->si_pid;
}

static volatile pid_t live_tid;
static void *blocked(void *arg) {
    char b;
    live_tid = gettid();
    read(((int *)arg)[0], &b, 1);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int self = pidfd_open(getpid(), 0);
    CHECK(self >= 0, "pidfd_open of itself");
    CHECK(fcntl(self, F_GETFD) == FD_CLOEXEC, "a pidfd is close-on-exec");
    CHECK((fcntl(self, F_GETFL) & O_ACCMODE) == O_RDWR, "a pidfd is O_RDWR");
    char link[64] = {0}, path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", self);
    readlink(path, link, sizeof link - 1);
    printf("its link: %s\n", link);
    CHECK(revents(self, 0) == 0, "a running process's pidfd is not readable");
    char b;
    CHECK_ERR(read(self, &b, 1), EINVAL, "read of a pidfd is EINVAL");
    CHECK_ERR(pidfd_open(0, 0), EINVAL, "pid 0 is EINVAL");
    CHECK_ERR(pidfd_open(-1, 0), EINVAL, "pid -1 is EINVAL");
    CHECK_ERR(pidfd_open(getpid(), 1), EINVAL, "an unknown flag is EINVAL");
    // (Not a thread that just ended: pthread_join returns before it is gone, on
    // Linux too, so whether it is ENOENT or ESRCH is a race.)
    pthread_t th;
    int hold[2];
    pipe(hold);
    pthread_create(&th, NULL, blocked, hold);
    while (!live_tid) usleep(1000);
    SHOW("pidfd_open of a live thread", pidfd_open(live_tid, 0));
    write(hold[1], "x", 1);
    pthread_join(th, NULL);

    // Poll: nothing while it runs, POLLIN once it ended, POLLHUP too once reaped.
    int rel;
    pid_t c = held_child(&rel);
    int fd = pidfd_open(c, 0);
    CHECK(fd >= 0, "pidfd_open of a child");
    CHECK(revents(fd, 0) == 0, "nothing while the child runs");
    siginfo_t si;
    CHECK_ERR(waitid(P_PIDFD, self, &si, WEXITED), ECHILD, "waitid of a non-child's pidfd is ECHILD");
    CHECK_ERR(waitpid(getpid(), NULL, 0), ECHILD, "waitpid of a non-child is ECHILD");
    CHECK_ERR(waitid(P_PIDFD, rel, &si, WEXITED), EBADF, "waitid of another file is EBADF");
    CHECK_ERR(waitid(P_PID, 0, &si, WEXITED), EINVAL, "waitid P_PID 0 is EINVAL");
    memset(&si, 0xff, sizeof si);
    CHECK(waitid(P_PIDFD, fd, &si, WEXITED | WNOHANG) == 0 && si.si_pid == 0, "waitid WNOHANG finds nothing yet");
    int nb = pidfd_open(c, O_NONBLOCK);
    CHECK((fcntl(nb, F_GETFL) & O_NONBLOCK) != 0, "PIDFD_NONBLOCK");
    CHECK_ERR(waitid(P_PIDFD, nb, &si, WEXITED), EAGAIN, "waitid of a non-blocking pidfd is EAGAIN");
    write(rel, "x", 1);
    CHECK(revents(fd, -1) == (POLLIN), "POLLIN once it ended");
    CHECK(pidfd_send(fd, SIGTERM, NULL, 0) == 0, "a zombie takes a signal");
    int again = pidfd_open(c, 0);
    CHECK(again >= 0, "pidfd_open of a zombie");
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PIDFD, fd, &si, WEXITED) == 0, "waitid P_PIDFD");
    printf("siginfo: signo %d code %d status %d pid is the child %d\n", si.si_signo, si.si_code, si.si_status,
           si.si_pid == c);
    CHECK(revents(fd, 0) == (POLLIN | POLLHUP), "POLLIN|POLLHUP once reaped");
    CHECK(revents(again, 0) == (POLLIN | POLLHUP), "and on every pidfd of it");
    CHECK_ERR(pidfd_send(fd, SIGTERM, NULL, 0), ESRCH, "a signal for a reaped process is ESRCH");
    CHECK_ERR(pidfd_send(fd, 65, NULL, 0), ESRCH, "even signal 65");
    CHECK_ERR(pidfd_open(c, 0), ESRCH, "pidfd_open of a reaped pid is ESRCH");
    CHECK_ERR(waitid(P_PIDFD, fd, &si, WEXITED), ECHILD, "waitid of a reaped child is ECHILD");
    close(fd), close(nb), close(again), close(rel);

    // epoll.
    c = held_child(&rel);
    fd = pidfd_open(c, 0);
    int ep = epoll_create1(0);
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = 77};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) == 0, "epoll_ctl adds a pidfd");
    CHECK(epoll_wait(ep, &e, 1, 0) == 0, "epoll: nothing while it runs");
    write(rel, "x", 1);
    CHECK(epoll_wait(ep, &e, 1, -1) == 1 && e.events == EPOLLIN && e.data.u64 == 77, "epoll: EPOLLIN once it ended");
    int st;
    CHECK(waitpid(c, &st, 0) == c && WEXITSTATUS(st) == 5, "waitpid reaps it");
    CHECK(epoll_wait(ep, &e, 1, 0) == 1 && e.events == (EPOLLIN | EPOLLHUP), "epoll: EPOLLIN|EPOLLHUP once reaped");
    close(ep), close(fd), close(rel);

    // pidfd_send_signal.
    c = held_child(&rel);
    fd = pidfd_open(c, 0);
    CHECK_ERR(pidfd_send(fd, SIGTERM, NULL, 8), EINVAL, "unknown flags are EINVAL");
    CHECK_ERR(pidfd_send(fd, SIGTERM, NULL, 3), EINVAL, "two scopes are EINVAL");
    CHECK_ERR(pidfd_send(fd, 0, NULL, 4), ESRCH, "PIDFD_SIGNAL_PROCESS_GROUP of a non-leader is ESRCH");
    CHECK(pidfd_send(fd, 0, NULL, 1) == 0 && pidfd_send(fd, 0, NULL, 2) == 0, "PIDFD_SIGNAL_THREAD, _THREAD_GROUP");
    CHECK_ERR(pidfd_send(rel, SIGTERM, NULL, 0), EBADF, "another file is EBADF");
    CHECK_ERR(pidfd_send(99, SIGTERM, NULL, 0), EBADF, "a closed descriptor is EBADF");
    CHECK_ERR(pidfd_send(fd, 65, NULL, 0), EINVAL, "signal 65 is EINVAL");
    CHECK(pidfd_send(fd, 0, NULL, 0) == 0, "signal 0 checks it exists");
    memset(&si, 0, sizeof si);
    si.si_signo = SIGUSR1;
    si.si_code = SI_QUEUE;
    CHECK_ERR(pidfd_send(fd, SIGTERM, &si, 0), EINVAL, "an info with another signal is EINVAL");
    si.si_signo = SIGTERM;
    si.si_code = SI_USER;
    CHECK_ERR(pidfd_send(fd, SIGTERM, &si, 0), EPERM, "a forged SI_USER for another process is EPERM");
    si.si_code = SI_TKILL;
    CHECK_ERR(pidfd_send(fd, SIGTERM, &si, 0), EPERM, "a forged SI_TKILL is EPERM");
    CHECK_ERR(pidfd_send(fd, SIGTERM, (siginfo_t *)8, 0), EFAULT, "a bad info pointer is EFAULT");
    CHECK(pidfd_send(fd, SIGTERM, NULL, 0) == 0, "SIGTERM through the pidfd");
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PIDFD, fd, &si, WEXITED) == 0 && si.si_code == CLD_KILLED && si.si_status == SIGTERM,
          "the child was killed by SIGTERM");
    close(fd), close(rel);
    c = held_child(&rel);
    setpgid(c, c);
    fd = pidfd_open(c, 0);
    CHECK(pidfd_send(fd, SIGKILL, NULL, 4) == 0, "PIDFD_SIGNAL_PROCESS_GROUP of a group leader");
    CHECK(waitpid(c, &st, 0) == c && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "its group was killed");
    close(fd), close(rel);
    struct sigaction sa = {0};
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);
    memset(&si, 0, sizeof si);
    si.si_signo = SIGUSR1;
    si.si_code = SI_QUEUE;
    si.si_pid = 4321;
    CHECK(pidfd_send(self, SIGUSR1, &si, 0) == 0, "a queued signal for itself");
    printf("handler saw code %d pid %d\n", (int)got_code, (int)got_pid);

    // clone and clone3 with CLONE_PIDFD.
    int pfd = -1;
    long r = syscall(SYS_clone, CLONE_PIDFD | SIGCHLD, 0, &pfd, 0, 0);
    if (r == 0) _exit(9);
    CHECK(r > 0 && pfd >= 0, "clone(CLONE_PIDFD) stores a pidfd");
    CHECK(fcntl(pfd, F_GETFD) == FD_CLOEXEC, "close-on-exec");
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PIDFD, pfd, &si, WEXITED) == 0 && si.si_pid == r && si.si_status == 9, "waitid through it");
    close(pfd);
    CHECK_ERR(syscall(SYS_clone, CLONE_PIDFD | CLONE_PARENT_SETTID | SIGCHLD, 0, &pfd, 0, 0), EINVAL,
              "clone: CLONE_PIDFD with CLONE_PARENT_SETTID is EINVAL");
    CHECK_ERR(syscall(SYS_clone, CLONE_PIDFD | SIGCHLD, 0, (int *)8, 0, 0), EFAULT,
              "clone: a bad pidfd pointer is EFAULT");
    struct {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    } args = {0};
    int pfd3 = -1;
    args.flags = CLONE_PIDFD;
    args.pidfd = (uintptr_t)&pfd3;
    args.exit_signal = SIGCHLD;
    r = syscall(NR_clone3, &args, sizeof args);
    if (r == 0) _exit(11);
    CHECK(r > 0 && pfd3 >= 0, "clone3(CLONE_PIDFD) stores a pidfd");
    memset(&si, 0, sizeof si);
    CHECK(waitid(P_PIDFD, pfd3, &si, WEXITED) == 0 && si.si_pid == r && si.si_status == 11, "waitid through it");
    printf("done\n");
    return failures;
}
