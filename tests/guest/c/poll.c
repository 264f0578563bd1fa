/* epoll, eventfd and poll over pipes and eventfds: level- and edge-triggered
   events, one-shot, hang-up, errors, timeouts, and waits ended by another thread.
   The same output on the host and in onering. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int wait1(int ep, int timeout, struct epoll_event *e) {
    return epoll_wait(ep, e, 1, timeout);
}

static int pfd[2], efd;
static volatile int usr1_seen;
static void on_usr1(int s) {
    (void)s;
    usr1_seen++;
}
static void *later_write(void *arg) {
    usleep(30000);
    if (arg)
        eventfd_write(efd, 5);
    else
        write(pfd[1], "x", 1);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct epoll_event ev, out[8];
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0, "epoll_create1");
    CHECK(fcntl(ep, F_GETFD) == FD_CLOEXEC, "epoll fd is close-on-exec");

    ev.events = EPOLLIN;
    ev.data.u64 = 11;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) == 0, "add the read end (level)");
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev), EEXIST, "adding twice is EEXIST");
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_MOD, p[1], &ev), ENOENT, "modifying an unwatched fd is ENOENT");
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev), EINVAL, "an epoll cannot watch itself");
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, 99, &ev), EBADF, "a bad fd is EBADF");
    int reg = open("/tmp/poll-regular", O_CREAT | O_RDWR, 0600);
    CHECK_ERR(epoll_ctl(ep, EPOLL_CTL_ADD, reg, &ev), EPERM, "a regular file is EPERM");
    unlink("/tmp/poll-regular");
    CHECK_ERR(epoll_wait(ep, out, 0, 0), EINVAL, "maxevents 0 is EINVAL");
    CHECK(wait1(ep, 0, out) == 0, "nothing ready: 0 at once");
    long t0 = now_ms();
    CHECK(wait1(ep, 50, out) == 0 && now_ms() - t0 >= 45, "a 50 ms timeout waits about 50 ms");

    write(p[1], "ab", 2);
    CHECK(wait1(ep, -1, out) == 1 && out[0].events == EPOLLIN && out[0].data.u64 == 11, "data: EPOLLIN with its data");
    CHECK(wait1(ep, 0, out) == 1, "level-triggered: reported again while unread");
    char buf[16];
    read(p[0], buf, sizeof buf);
    CHECK(wait1(ep, 0, out) == 0, "read: no longer ready");

    ev.events = EPOLLIN | EPOLLET;
    ev.data.u64 = 12;
    CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev) == 0, "switch to edge-triggered");
    write(p[1], "c", 1);
    CHECK(wait1(ep, 0, out) == 1 && out[0].data.u64 == 12, "edge: reported once");
    CHECK(wait1(ep, 0, out) == 0, "edge: not again without new data");
    write(p[1], "d", 1);
    CHECK(wait1(ep, 0, out) == 1, "edge: new data is a new edge");
    read(p[0], buf, sizeof buf);

    ev.events = EPOLLIN | EPOLLONESHOT;
    CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev) == 0, "one-shot");
    write(p[1], "e", 1);
    CHECK(wait1(ep, 0, out) == 1, "one-shot: reported");
    write(p[1], "f", 1);
    CHECK(wait1(ep, 0, out) == 0, "one-shot: then silent");
    CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev) == 0 && wait1(ep, 0, out) == 1, "re-armed by MOD");
    read(p[0], buf, sizeof buf);

    ev.events = EPOLLIN;
    epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev);
    close(p[1]);
    CHECK(wait1(ep, 0, out) == 1 && out[0].events == EPOLLHUP, "writer closed: EPOLLHUP");
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL) == 0, "delete");
    CHECK(wait1(ep, 0, out) == 0, "deleted: nothing");
    close(p[0]);

    /* A closed fd leaves the interest list by itself. */
    pipe(p);
    ev.events = EPOLLOUT;
    epoll_ctl(ep, EPOLL_CTL_ADD, p[1], &ev);
    CHECK(wait1(ep, 0, out) == 1 && out[0].events == EPOLLOUT, "write end: EPOLLOUT");
    close(p[1]);
    CHECK(wait1(ep, 0, out) == 0, "closed fd: gone from the list");
    close(p[0]);

    /* eventfd */
    int e = eventfd(3, EFD_NONBLOCK);
    uint64_t v = 0;
    CHECK(read(e, &v, 8) == 8 && v == 3, "eventfd: read gives the count");
    CHECK_ERR(read(e, &v, 8), EAGAIN, "eventfd: empty and non-blocking is EAGAIN");
    CHECK_ERR(read(e, &v, 4), EINVAL, "eventfd: short buffers are EINVAL");
    v = UINT64_MAX;
    CHECK_ERR(write(e, &v, 8), EINVAL, "eventfd: all ones is EINVAL");
    v = UINT64_MAX - 1;
    CHECK(write(e, &v, 8) == 8, "eventfd: up to the maximum");
    v = 1;
    CHECK_ERR(write(e, &v, 8), EAGAIN, "eventfd: overflow is EAGAIN");
    read(e, &v, 8);
    close(e);
    int s = eventfd(2, EFD_SEMAPHORE);
    CHECK(read(s, &v, 8) == 8 && v == 1 && read(s, &v, 8) == 8 && v == 1, "semaphore eventfd: one at a time");
    close(s);

    /* Waits ended by another thread. */
    pipe(pfd);
    efd = eventfd(0, 0);
    ev.events = EPOLLIN;
    ev.data.u64 = 21;
    epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &ev);
    ev.data.u64 = 22;
    epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);
    pthread_t t;
    pthread_create(&t, NULL, later_write, NULL);
    CHECK(wait1(ep, 5000, out) == 1 && out[0].data.u64 == 21, "epoll_wait woken by a pipe write from a thread");
    pthread_join(t, NULL);
    read(pfd[0], buf, 1);
    pthread_create(&t, NULL, later_write, (void *)1);
    sigset_t mask;
    sigemptyset(&mask);
    CHECK(epoll_pwait(ep, out, 8, 5000, &mask) == 1 && out[0].data.u64 == 22, "epoll_pwait woken by an eventfd write");
    pthread_join(t, NULL);
    pthread_create(&t, NULL, later_write, (void *)1);
    CHECK(read(efd, &v, 8) == 8 && v == 5, "a blocking eventfd read woken by a thread");
    pthread_join(t, NULL);

    /* poll */
    struct pollfd pf[3] = {{pfd[0], POLLIN, 0}, {pfd[1], POLLOUT, 0}, {77, POLLIN, 0}};
    CHECK(poll(pf, 3, 0) == 2 && pf[0].revents == 0 && pf[1].revents == POLLOUT && pf[2].revents == POLLNVAL,
          "poll: writable end, nothing to read, a bad fd is POLLNVAL");
    pthread_create(&t, NULL, later_write, NULL);
    CHECK(poll(pf, 1, 5000) == 1 && pf[0].revents == POLLIN, "poll woken by a thread's write");
    pthread_join(t, NULL);
    close(pfd[1]);
    CHECK(poll(pf, 1, 0) == 1 && pf[0].revents == (POLLIN | POLLHUP), "poll: hang-up");
    t0 = now_ms();
    struct pollfd none = {-1, POLLIN, 0};
    CHECK(poll(&none, 1, 40) == 0 && now_ms() - t0 >= 35, "poll: a timeout with nothing to watch");
    /* ppoll with a temporary mask that lets SIGUSR1 in: the handler runs once, the
       call says EINTR, and the old mask (SIGUSR1 blocked) is back afterwards. */
    signal(SIGUSR1, on_usr1);
    sigset_t block, open_mask, now;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, NULL);
    raise(SIGUSR1); /* pending, blocked */
    sigemptyset(&open_mask);
    struct pollfd nothing = {-1, POLLIN, 0};
    struct timespec second = {1, 0};
    int pr = ppoll(&nothing, 1, &second, &open_mask), pe = errno;
    CHECK(pr == -1 && pe == EINTR && usr1_seen == 1, "ppoll: the signal its mask lets in is handled, EINTR");
    sigprocmask(SIG_BLOCK, NULL, &now);
    CHECK(sigismember(&now, SIGUSR1), "ppoll: the old mask is back");
    sigprocmask(SIG_UNBLOCK, &block, NULL);
    printf("poll %s\n", failures ? "FAILED" : "ok");
    return failures;
}
