/* File locks from one process, several threads and several open file descriptions
   of a file in /tmp: OFD record locks that conflict between descriptions, POSIX
   locks that never conflict within the process but do with OFD locks, F_GETLK's
   report, ranges split and merged, l_whence and negative lengths, flock (and its
   non-atomic conversion), the errors, waits that end when another thread unlocks,
   EINTR and SA_RESTART, EDEADLK for a cycle of a POSIX and an OFD wait, the
   releases on close, dup2, the last close of a description and a vfork child's
   exit. Same output on the host and in onering. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *path = "/tmp/onering-locks-test";

static int lk(int fd, int cmd, int type, int whence, off_t start, off_t len) {
    struct flock f = {.l_type = type, .l_whence = whence, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &f);
}

/* What F_GETLK (or F_OFD_GETLK) on fd reports for a lock of `type` over a range. */
static void show(const char *what, int fd, int cmd, int type, int whence, off_t start, off_t len) {
    struct flock f = {.l_type = type, .l_whence = whence, .l_start = start, .l_len = len};
    if (fcntl(fd, cmd, &f) < 0) {
        printf("%s: error %s\n", what, strerror(errno));
    } else if (f.l_type == F_UNLCK) {
        printf("%s: unlocked (start %ld len %ld kept)\n", what, (long)f.l_start, (long)f.l_len);
    } else {
        const char *pid = f.l_pid == -1 ? "-1" : f.l_pid == getpid() ? "mine" : "another";
        printf("%s: %s whence %d start %ld len %ld pid %s\n", what, f.l_type == F_RDLCK ? "read" : "write",
               f.l_whence, (long)f.l_start, (long)f.l_len, pid);
    }
}

static void unlock_all(int fd) {
    lk(fd, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0);
}

/* ---- a thread that takes a lock and may have to wait ---- */

struct waiter {
    int fd, cmd, type;
    off_t start, len;
    int flock_op; /* flock instead of fcntl if non-zero */
    atomic_int started, done;
    int result, err;
    int released_before; /* the main thread's "released" flag, seen when it returned */
};
static atomic_int released;
static atomic_int handled;

static void *waiter_main(void *arg) {
    struct waiter *w = arg;
    atomic_store(&w->started, 1);
    errno = 0;
    w->result = w->flock_op ? flock(w->fd, w->flock_op) : lk(w->fd, w->cmd, w->type, SEEK_SET, w->start, w->len);
    w->err = errno;
    w->released_before = atomic_load(&released);
    atomic_store(&w->done, 1);
    return NULL;
}

static void start_waiter(pthread_t *t, struct waiter *w) {
    atomic_store(&released, 0);
    pthread_create(t, NULL, waiter_main, w);
    while (!atomic_load(&w->started))
        usleep(1000);
    usleep(100000); /* long enough to be asleep in the call */
}

static void on_signal(int sig) {
    (void)sig;
    atomic_fetch_add(&handled, 1);
}

static void handle_usr1(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = flags;
    sigaction(SIGUSR1, &sa, NULL);
}

/* Signals the waiter until its call returns (a signal before it sleeps only runs the
   handler). */
static void interrupt_until_done(pthread_t t, struct waiter *w) {
    while (!atomic_load(&w->done)) {
        pthread_kill(t, SIGUSR1);
        usleep(20000);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    unlink(path);
    int a = open(path, O_RDWR | O_CREAT, 0600);
    int b = open(path, O_RDWR);
    CHECK(a >= 0 && b >= 0, "two open file descriptions of one file");
    char data[100];
    memset(data, 'x', sizeof data);
    CHECK(write(a, data, sizeof data) == 100, "100 bytes");

    /* OFD locks: owned by the description, so two descriptions conflict. */
    CHECK(lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 10) == 0, "OFD write lock on 0..9 through a");
    CHECK_ERR(lk(b, F_OFD_SETLK, F_RDLCK, SEEK_SET, 5, 1), EAGAIN, "b's read lock on byte 5: EAGAIN");
    CHECK(lk(b, F_OFD_SETLK, F_WRLCK, SEEK_SET, 10, 10) == 0, "b's write lock on 10..19 (next to a's)");
    CHECK(lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 5) == 0, "a locks again inside its own lock");
    show("b asks about all", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    show("a asks about all", a, F_OFD_GETLK, F_RDLCK, SEEK_SET, 0, 0);
    show("the process asks about 15", a, F_GETLK, F_RDLCK, SEEK_SET, 15, 1);
    show("b asks about 20..", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 20, 0);
    show("a's own lock (F_UNLCK)", a, F_OFD_GETLK, F_UNLCK, SEEK_SET, 0, 0);
    int a2 = dup(a);
    CHECK(lk(a2, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 10) == 0, "a dup is the same description");
    unlock_all(a);
    unlock_all(b);
    CHECK(lk(b, F_OFD_SETLK, F_RDLCK, SEEK_SET, 50, 10) == 0 && lk(a, F_OFD_SETLK, F_RDLCK, SEEK_SET, 55, 10) == 0,
          "read locks share");
    CHECK_ERR(lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 59, 1), EAGAIN, "but not with a write lock");
    unlock_all(a);
    unlock_all(b);
    show("all unlocked", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);

    /* Ranges: split and merge. */
    lk(a, F_OFD_SETLK, F_RDLCK, SEEK_SET, 0, 100);
    lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 40, 10);
    show("split: read over all", b, F_OFD_GETLK, F_RDLCK, SEEK_SET, 0, 100);
    show("split: write over all", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    show("split: write from 50", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 50, 0);
    lk(a, F_OFD_SETLK, F_UNLCK, SEEK_SET, 45, 1);
    show("hole: read 40..49", b, F_OFD_GETLK, F_RDLCK, SEEK_SET, 40, 10);
    show("hole: read 46..", b, F_OFD_GETLK, F_RDLCK, SEEK_SET, 46, 100);
    show("hole: write 45", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 45, 1);
    lk(a, F_OFD_SETLK, F_RDLCK, SEEK_SET, 40, 10);
    show("merged back", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    lk(a, F_OFD_SETLK, F_RDLCK, SEEK_SET, 100, 10);
    show("adjacent merged", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 200, 0);
    show("to the end of the file", b, F_OFD_GETLK, F_RDLCK, SEEK_SET, 1000000, 1);
    lk(a, F_OFD_SETLK, F_UNLCK, SEEK_SET, 300, 0);
    show("cut short", b, F_OFD_GETLK, F_RDLCK, SEEK_SET, 250, 0);
    unlock_all(a);

    /* l_whence: the offset and the end of the file; negative lengths. */
    lseek(a, 30, SEEK_SET);
    CHECK(lk(a, F_OFD_SETLK, F_WRLCK, SEEK_CUR, 5, 10) == 0, "SEEK_CUR + 5, 10 bytes");
    show("at 35", b, F_OFD_GETLK, F_RDLCK, SEEK_SET, 0, 40);
    unlock_all(a);
    CHECK(lk(a, F_OFD_SETLK, F_WRLCK, SEEK_END, -10, 5) == 0, "SEEK_END - 10, 5 bytes");
    show("at 90", b, F_OFD_GETLK, F_RDLCK, SEEK_END, -20, 0);
    unlock_all(a);
    CHECK(lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 80, -5) == 0, "80, -5 bytes");
    lseek(b, 70, SEEK_SET);
    show("before 80", b, F_OFD_GETLK, F_RDLCK, SEEK_CUR, 0, 100);
    CHECK(lk(a, F_OFD_SETLK, F_UNLCK, SEEK_CUR, 0, -30) == 0, "unlock the 30 bytes before a's offset (0..29)");
    show("75..79 still locked", b, F_OFD_GETLK, F_RDLCK, SEEK_SET, 0, 0);
    unlock_all(a);

    /* Errors. */
    CHECK_ERR(lk(a, F_SETLK, 7, SEEK_SET, 0, 0), EINVAL, "bad l_type: EINVAL");
    CHECK_ERR(lk(a, F_SETLK, F_RDLCK, 3, 0, 0), EINVAL, "bad l_whence: EINVAL");
    CHECK_ERR(lk(a, F_SETLK, F_RDLCK, SEEK_SET, -1, 0), EINVAL, "negative start: EINVAL");
    CHECK_ERR(lk(a, F_SETLK, F_RDLCK, SEEK_SET, 2, -5), EINVAL, "a length before byte 0: EINVAL");
    CHECK_ERR(lk(a, F_SETLK, F_RDLCK, SEEK_SET, 10, 0x7fffffffffffffffL), EOVERFLOW, "past the largest offset");
    CHECK_ERR(lk(a, F_GETLK, F_UNLCK, SEEK_SET, 0, 0), EINVAL, "F_GETLK of F_UNLCK: EINVAL");
    {
        struct flock f = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_pid = 1};
        CHECK_ERR(fcntl(a, F_OFD_SETLK, &f), EINVAL, "an OFD lock with l_pid: EINVAL");
        CHECK_ERR(fcntl(a, F_OFD_GETLK, &f), EINVAL, "F_OFD_GETLK with l_pid: EINVAL");
    }
    CHECK_ERR(fcntl(a, F_SETLK, (void *)8), EFAULT, "a bad struct flock: EFAULT");
    CHECK_ERR(fcntl(a, F_OFD_GETLK, (void *)8), EFAULT, "F_OFD_GETLK too");
    CHECK_ERR(fcntl(a, F_SETLKW, NULL), EFAULT, "F_SETLKW too");
    int rd = open(path, O_RDONLY), wr = open(path, O_WRONLY), opath = open(path, O_PATH);
    CHECK_ERR(lk(rd, F_SETLK, F_WRLCK, SEEK_SET, 0, 0), EBADF, "a write lock on a read-only descriptor: EBADF");
    CHECK_ERR(lk(wr, F_OFD_SETLK, F_RDLCK, SEEK_SET, 0, 0), EBADF, "a read lock on a write-only one: EBADF");
    CHECK(lk(rd, F_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0 && lk(wr, F_SETLK, F_UNLCK, SEEK_SET, 0, 0) == 0,
          "unlocking needs no mode");
    show("F_GETLK of a write lock on a read-only descriptor", rd, F_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    CHECK_ERR(lk(opath, F_SETLK, F_UNLCK, SEEK_SET, 0, 0), EBADF, "O_PATH: EBADF");
    CHECK_ERR(flock(opath, LOCK_UN), EBADF, "flock on O_PATH: EBADF");
    CHECK_ERR(lk(999, F_SETLK, F_RDLCK, SEEK_SET, 0, 0), EBADF, "no descriptor: EBADF");
    CHECK_ERR(flock(999, LOCK_SH), EBADF, "flock without a descriptor: EBADF");
    CHECK_ERR(flock(999, 0), EINVAL, "flock's command is checked first: EINVAL");
    CHECK_ERR(flock(a, LOCK_SH | LOCK_EX), EINVAL, "LOCK_SH|LOCK_EX: EINVAL");
    CHECK_ERR(flock(a, LOCK_NB), EINVAL, "LOCK_NB alone: EINVAL");
    CHECK(flock(a, 32 | LOCK_EX) == 0, "LOCK_MAND is ignored");
    CHECK(flock(rd, LOCK_EX) == 0 && flock(rd, LOCK_UN) == 0, "flock does not care about the mode");
    close(opath);

    /* POSIX locks: the process's. Its own never conflict, OFD locks do. */
    CHECK(lk(a, F_SETLK, F_WRLCK, SEEK_SET, 0, 10) == 0, "POSIX write lock through a");
    CHECK(lk(b, F_SETLK, F_WRLCK, SEEK_SET, 5, 10) == 0, "and through b: the same owner");
    show("the process asks", rd, F_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    CHECK_ERR(lk(rd, F_OFD_SETLK, F_RDLCK, SEEK_SET, 0, 1), EAGAIN, "an OFD lock conflicts with them");
    show("rd's description asks", rd, F_OFD_GETLK, F_RDLCK, SEEK_SET, 0, 0);
    int c = open(path, O_RDONLY);
    close(c); /* any descriptor of the file: the process's locks go */
    show("after closing another descriptor", rd, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    lk(a, F_SETLK, F_WRLCK, SEEK_SET, 0, 10);
    c = open(path, O_RDONLY);
    dup2(rd, c); /* closes c */
    show("after dup2 over one", rd, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    close(c);

    /* A vfork child is another process: it conflicts, and its locks go with it. */
    lk(a, F_SETLK, F_WRLCK, SEEK_SET, 0, 10);
    static volatile int child_set, child_err, child_pid_is_parent, child_took;
    int parent = getpid();
    pid_t pid = vfork();
    if (pid == 0) {
        struct flock f = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        child_set = fcntl(a, F_SETLK, &f);
        child_err = errno;
        fcntl(a, F_GETLK, &f);
        child_pid_is_parent = f.l_pid == parent;
        struct flock g = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 50, .l_len = 1};
        child_took = fcntl(a, F_SETLK, &g);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    CHECK(child_set == -1 && child_err == EAGAIN, "the child's lock conflicts with the parent's");
    CHECK(child_pid_is_parent, "and F_GETLK names the parent's pid");
    CHECK(child_took == 0, "the child locked byte 50");
    show("after it exited", rd, F_OFD_GETLK, F_WRLCK, SEEK_SET, 50, 1);
    lk(a, F_SETLK, F_UNLCK, SEEK_SET, 0, 0);

    /* OFD and flock locks go with the last descriptor of their description. */
    int d = open(path, O_RDWR), d2 = dup(d);
    lk(d, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 1);
    flock(d, LOCK_EX);
    close(d);
    show("one of two descriptors closed", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    CHECK_ERR(flock(b, LOCK_SH | LOCK_NB), EWOULDBLOCK, "flock still held");
    close(d2);
    show("both closed", b, F_OFD_GETLK, F_WRLCK, SEEK_SET, 0, 0);
    CHECK(flock(b, LOCK_SH | LOCK_NB) == 0 && flock(b, LOCK_UN) == 0, "flock released");

    /* flock: shared and exclusive; a conversion lets go first; apart from fcntl. */
    CHECK(flock(a, LOCK_SH) == 0 && flock(b, LOCK_SH | LOCK_NB) == 0, "two shared flocks");
    CHECK_ERR(flock(b, LOCK_EX | LOCK_NB), EWOULDBLOCK, "b's conversion to exclusive: EWOULDBLOCK");
    CHECK(flock(a, LOCK_EX | LOCK_NB) == 0, "b lost its shared lock on the way: a converts");
    CHECK(flock(a, LOCK_EX | LOCK_NB) == 0, "again: nothing to do");
    CHECK(lk(b, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 0) == 0, "fcntl locks do not see flock locks");
    unlock_all(b);
    CHECK(flock(a, LOCK_UN) == 0 && flock(a, LOCK_UN) == 0, "unlock twice");

    /* Pipes and sockets lock too; a pipe's two ends are one file. */
    int p[2], s[2];
    pipe(p);
    socketpair(AF_UNIX, SOCK_STREAM, 0, s);
    CHECK(flock(p[0], LOCK_EX) == 0, "flock on a pipe");
    CHECK_ERR(flock(p[1], LOCK_EX | LOCK_NB), EWOULDBLOCK, "the other end is the same file");
    CHECK(lk(p[1], F_SETLK, F_WRLCK, SEEK_SET, 0, 0) == 0, "fcntl lock on a pipe");
    CHECK_ERR(lk(p[0], F_OFD_SETLK, F_RDLCK, SEEK_SET, 0, 0), EAGAIN, "OFD lock on its other end: EAGAIN");
    CHECK(flock(s[0], LOCK_EX) == 0 && flock(s[1], LOCK_EX | LOCK_NB) == 0, "two sockets are two files");
    CHECK(lk(s[0], F_SETLK, F_WRLCK, SEEK_SET, 0, 0) == 0, "fcntl lock on a socket");
    CHECK_ERR(lk(s[0], F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 0), EAGAIN, "and an OFD lock after it: EAGAIN");
    close(p[0]);
    close(p[1]);
    close(s[0]);
    close(s[1]);

    /* Waiting: until another thread unlocks, downgrades or closes. */
    pthread_t t;
    struct waiter w = {.fd = b, .cmd = F_OFD_SETLKW, .type = F_WRLCK, .start = 0, .len = 10};
    lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 5, 1);
    start_waiter(&t, &w);
    CHECK(!atomic_load(&w.done), "F_OFD_SETLKW waits");
    atomic_store(&released, 1);
    unlock_all(a);
    pthread_join(t, NULL);
    CHECK(w.result == 0 && w.released_before, "until the lock is released");
    show("and holds it", a, F_OFD_GETLK, F_RDLCK, SEEK_SET, 0, 0);
    unlock_all(b);

    struct waiter w2 = {.fd = b, .cmd = F_SETLKW, .type = F_RDLCK, .start = 0, .len = 0};
    lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 0);
    start_waiter(&t, &w2);
    CHECK(!atomic_load(&w2.done), "a POSIX F_SETLKW waits for an OFD lock");
    atomic_store(&released, 1);
    lk(a, F_OFD_SETLK, F_RDLCK, SEEK_SET, 0, 0);
    pthread_join(t, NULL);
    CHECK(w2.result == 0 && w2.released_before, "until it is downgraded to a read lock");
    unlock_all(a);
    lk(b, F_SETLK, F_UNLCK, SEEK_SET, 0, 0);

    int e = open(path, O_RDWR);
    struct waiter w3 = {.fd = b, .flock_op = LOCK_EX};
    flock(e, LOCK_SH);
    start_waiter(&t, &w3);
    CHECK(!atomic_load(&w3.done), "flock waits");
    atomic_store(&released, 1);
    close(e);
    pthread_join(t, NULL);
    CHECK(w3.result == 0 && w3.released_before, "until the holder's description is closed");
    CHECK_ERR(flock(a, LOCK_SH | LOCK_NB), EWOULDBLOCK, "and holds it");
    flock(b, LOCK_UN);

    /* A signal ends a wait: EINTR without SA_RESTART; with it, the call goes on. */
    handle_usr1(0);
    lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 0);
    struct waiter w4 = {.fd = b, .cmd = F_OFD_SETLKW, .type = F_RDLCK, .start = 0, .len = 1};
    start_waiter(&t, &w4);
    interrupt_until_done(t, &w4);
    pthread_join(t, NULL);
    CHECK(w4.result == -1 && w4.err == EINTR, "F_OFD_SETLKW: EINTR on a signal");
    struct waiter w5 = {.fd = b, .cmd = F_SETLKW, .type = F_RDLCK, .start = 0, .len = 1};
    start_waiter(&t, &w5);
    interrupt_until_done(t, &w5);
    pthread_join(t, NULL);
    CHECK(w5.result == -1 && w5.err == EINTR, "F_SETLKW: EINTR on a signal");
    flock(a, LOCK_EX);
    struct waiter w6 = {.fd = b, .flock_op = LOCK_SH};
    start_waiter(&t, &w6);
    interrupt_until_done(t, &w6);
    pthread_join(t, NULL);
    CHECK(w6.result == -1 && w6.err == EINTR, "flock: EINTR on a signal");
    handle_usr1(SA_RESTART);
    atomic_store(&handled, 0);
    struct waiter w7 = {.fd = b, .flock_op = LOCK_SH};
    start_waiter(&t, &w7);
    for (int i = 1; i <= 3; i++) { /* one at a time: each handled before the next */
        pthread_kill(t, SIGUSR1);
        for (int n = 0; n < 5000 && atomic_load(&handled) < i; n++)
            usleep(1000);
    }
    usleep(20000);
    CHECK(!atomic_load(&w7.done) && atomic_load(&handled) == 3, "with SA_RESTART the handler runs, the wait goes on");
    atomic_store(&released, 1);
    flock(a, LOCK_UN);
    pthread_join(t, NULL);
    CHECK(w7.result == 0 && w7.released_before, "and ends with the unlock");
    flock(b, LOCK_UN);
    unlock_all(a);

    /* EDEADLK: b's description waits for the process's POSIX lock on byte 0; the
       process waiting for b's OFD lock on byte 1 would never end. An alarm ends the
       wait if the check ever failed, instead of hanging. */
    lk(a, F_SETLK, F_WRLCK, SEEK_SET, 0, 1);
    lk(b, F_OFD_SETLK, F_WRLCK, SEEK_SET, 1, 1);
    struct waiter w8 = {.fd = b, .cmd = F_OFD_SETLKW, .type = F_WRLCK, .start = 0, .len = 1};
    start_waiter(&t, &w8);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGALRM, &sa, NULL);
    alarm(5);
    CHECK_ERR(lk(a, F_SETLKW, F_WRLCK, SEEK_SET, 1, 1), EDEADLK, "a cycle of waits: EDEADLK");
    alarm(0);
    atomic_store(&released, 1);
    lk(a, F_SETLK, F_UNLCK, SEEK_SET, 0, 0);
    pthread_join(t, NULL);
    CHECK(w8.result == 0 && w8.released_before, "the waiter gets its lock when the POSIX lock goes");
    unlock_all(b);

    close(a);
    close(a2);
    close(b);
    close(rd);
    close(wr);
    CHECK(unlink(path) == 0, "unlink");
    printf("locks %s\n", failures ? "FAILED" : "ok");
    return failures;
}
