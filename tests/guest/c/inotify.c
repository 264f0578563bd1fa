/* inotify on changes the program makes itself, printed in a canonical form that is
   the same on the host and in onering: events as "wd MASK|BITS name=NAME len=N",
   MOVED_TO's cookie as whether it matches the MOVED_FROM before it (cookie values
   differ), wd numbers as they come (1, 2, ...: the same on both).
   Usage: inotify [DIR [quick]]: works in a new directory under DIR (default /tmp);
   "quick" leaves out the overflow and the blocking read. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char base[256];
static uint32_t last_from;

static const char *P(const char *rel) {
    static char bufs[4][PATH_MAX];
    static int i;
    char *b = bufs[i++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", base, rel);
    return b;
}

static void print_mask(uint32_t m) {
    static const struct { uint32_t bit; const char *name; } names[] = {
        {IN_ACCESS, "ACCESS"}, {IN_MODIFY, "MODIFY"}, {IN_ATTRIB, "ATTRIB"},
        {IN_CLOSE_WRITE, "CLOSE_WRITE"}, {IN_CLOSE_NOWRITE, "CLOSE_NOWRITE"}, {IN_OPEN, "OPEN"},
        {IN_MOVED_FROM, "MOVED_FROM"}, {IN_MOVED_TO, "MOVED_TO"}, {IN_CREATE, "CREATE"},
        {IN_DELETE, "DELETE"}, {IN_DELETE_SELF, "DELETE_SELF"}, {IN_MOVE_SELF, "MOVE_SELF"},
        {IN_UNMOUNT, "UNMOUNT"}, {IN_Q_OVERFLOW, "Q_OVERFLOW"}, {IN_IGNORED, "IGNORED"},
        {IN_ISDIR, "ISDIR"},
    };
    const char *sep = "";
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
        if (m & names[i].bit) {
            printf("%s%s", sep, names[i].name);
            sep = "|";
            m &= ~names[i].bit;
        }
    if (m)
        printf("%s0x%x", sep, m);
}

static void print_event(const struct inotify_event *e) {
    printf("  %d ", e->wd);
    print_mask(e->mask);
    if (e->len)
        printf(" name=%s len=%u", e->name, e->len);
    if (e->mask & IN_MOVED_FROM)
        last_from = e->cookie;
    if (e->mask & IN_MOVED_TO)
        printf(" cookie=%s", e->cookie && e->cookie == last_from ? "matches" : "differs");
    else if (!(e->mask & IN_MOVED_FROM) && e->cookie)
        printf(" cookie=%u", e->cookie);
    printf("\n");
}

/* Prints everything queued on non-blocking `fd`, under a heading. */
static void show(int fd, const char *what) {
    char buf[4096] __attribute__((aligned(8)));
    printf("%s:\n", what);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno != EAGAIN)
                printf("  read: %s\n", strerror(errno));
            break;
        }
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            print_event(e);
            p += sizeof *e + e->len;
        }
    }
}

static void touch(const char *path) {
    int f = open(path, O_CREAT | O_WRONLY, 0644);
    if (f >= 0)
        close(f);
}

static void *late_create(void *arg) {
    struct timespec t = {0, 50 * 1000 * 1000};
    nanosleep(&t, 0);
    touch((const char *)arg);
    return 0;
}

int main(int argc, char **argv) {
    const char *top = argc > 1 ? argv[1] : "/tmp";
    int quick = argc > 2 && strcmp(argv[2], "quick") == 0;
    setvbuf(stdout, 0, _IONBF, 0);
    snprintf(base, sizeof base, "%s/inotifyXXXXXX", top);
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }

    /* Errors. */
    CHECK_ERR(inotify_init1(0x1234), EINVAL, "inotify_init1 with unknown flags");
    int pfd[2];
    CHECK(pipe(pfd) == 0, "pipe");
    CHECK_ERR(inotify_add_watch(pfd[0], base, IN_ALL_EVENTS), EINVAL, "add_watch on a pipe");
    CHECK_ERR(inotify_rm_watch(pfd[0], 1), EINVAL, "rm_watch on a pipe");
    CHECK_ERR(inotify_add_watch(999, base, IN_ALL_EVENTS), EBADF, "add_watch on a bad descriptor");
    int old = inotify_init();
    CHECK(old >= 0, "inotify_init");
    close(old);
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    CHECK(fd >= 0, "inotify_init1");
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) && (fcntl(fd, F_GETFL) & O_NONBLOCK), "IN_CLOEXEC, IN_NONBLOCK");
    CHECK_ERR(inotify_add_watch(fd, base, 0), EINVAL, "empty mask");
    CHECK_ERR(inotify_add_watch(fd, base, IN_MODIFY | IN_MASK_ADD | IN_MASK_CREATE), EINVAL, "MASK_ADD with MASK_CREATE");
    CHECK_ERR(inotify_add_watch(fd, P("nothing"), IN_ALL_EVENTS), ENOENT, "no such path");
    CHECK_ERR(inotify_rm_watch(fd, 1), EINVAL, "rm_watch of an unknown wd");
    char small[64];
    CHECK_ERR(read(fd, small, sizeof small), EAGAIN, "empty non-blocking read");

    /* Two watched directories. */
    mkdir(P("a"), 0755);
    mkdir(P("b"), 0755);
    int wa = inotify_add_watch(fd, P("a"), IN_ALL_EVENTS);
    int wb = inotify_add_watch(fd, P("b"), IN_ALL_EVENTS);
    printf("wd a=%d b=%d again a=%d\n", wa, wb, inotify_add_watch(fd, P("a"), IN_ALL_EVENTS));
    CHECK_ERR(inotify_add_watch(fd, P("a"), IN_ALL_EVENTS | IN_MASK_CREATE), EEXIST, "MASK_CREATE on a watched directory");

    int f = open(P("a/f"), O_CREAT | O_WRONLY, 0644);
    CHECK(write(f, "hello", 5) == 5 && write(f, "world", 5) == 5, "two writes");
    close(f);
    show(fd, "create, write twice, close");

    int wf = inotify_add_watch(fd, P("a/f"), IN_ALL_EVENTS);
    printf("wd f=%d\n", wf);
    CHECK_ERR(inotify_add_watch(fd, P("a/f"), IN_ALL_EVENTS | IN_ONLYDIR), ENOTDIR, "ONLYDIR on a file");
    f = open(P("a/f"), O_RDONLY);
    CHECK(read(f, small, sizeof small) == 10, "read");
    CHECK(read(f, small, sizeof small) == 0, "read at the end");
    close(f);
    show(fd, "open, read, read at the end, close");

    CHECK(chmod(P("a/f"), 0600) == 0, "chmod");
    CHECK(utimensat(AT_FDCWD, P("a/f"), 0, 0) == 0, "utimensat");
    CHECK(truncate(P("a/f"), 2) == 0, "truncate");
    show(fd, "chmod, utimensat, truncate");

    CHECK(rename(P("a/f"), P("a/g")) == 0, "rename within a");
    CHECK(rename(P("a/g"), P("b/h")) == 0, "rename from a to b");
    show(fd, "renames");

    CHECK(mkdir(P("a/sub"), 0755) == 0 && rmdir(P("a/sub")) == 0, "mkdir, rmdir");
    show(fd, "mkdir, rmdir");

    CHECK(link(P("b/h"), P("b/h2")) == 0, "link");
    CHECK(unlink(P("b/h2")) == 0, "unlink a second name");
    CHECK(unlink(P("b/h")) == 0, "unlink the watched file");
    show(fd, "link, unlink, unlink");

    /* A buffer too small for the next event, FIONREAD, epoll. */
    touch(P("a/x"));
    int avail = -1;
    CHECK(ioctl(fd, FIONREAD, &avail) == 0, "FIONREAD");
    printf("FIONREAD %d\n", avail);
    CHECK_ERR(read(fd, small, 16), EINVAL, "read into 16 bytes");
    CHECK(read(fd, small, 32) == 32, "read of one event");
    print_event((struct inotify_event *)small);
    show(fd, "touch a/x");
    int ep = epoll_create1(0);
    struct epoll_event ee = {.events = EPOLLIN, .data.u32 = 7}, got;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ee) == 0, "epoll_ctl");
    CHECK(epoll_wait(ep, &got, 1, 0) == 0, "nothing ready");
    CHECK(chmod(P("a/x"), 0600) == 0, "chmod a/x");
    CHECK(epoll_wait(ep, &got, 1, 1000) == 1 && got.events == EPOLLIN && got.data.u32 == 7, "readable");
    show(fd, "chmod a/x");
    CHECK(epoll_wait(ep, &got, 1, 0) == 0, "nothing ready after the read");
    close(ep);

    CHECK(inotify_rm_watch(fd, wb) == 0, "rm_watch b");
    CHECK_ERR(inotify_rm_watch(fd, wb), EINVAL, "rm_watch b again");
    touch(P("b/y"));
    show(fd, "rm_watch b, touch b/y");

    /* One-shot, MASK_ADD, DONT_FOLLOW, a watched directory's own events. */
    int wx = inotify_add_watch(fd, P("a/x"), IN_OPEN | IN_ONESHOT);
    printf("wd x=%d\n", wx);
    touch(P("a/x"));
    touch(P("a/x"));
    show(fd, "one-shot open, touched twice");
    wx = inotify_add_watch(fd, P("a/x"), IN_ATTRIB);
    printf("wd x=%d again=%d\n", wx, inotify_add_watch(fd, P("a/x"), IN_MODIFY | IN_MASK_ADD));
    CHECK(chmod(P("a/x"), 0644) == 0, "chmod");
    f = open(P("a/x"), O_WRONLY | O_APPEND);
    CHECK(write(f, "x", 1) == 1, "write");
    close(f);
    show(fd, "ATTRIB, then MODIFY added");
    CHECK(symlink("x", P("a/lnk")) == 0, "symlink");
    int wl = inotify_add_watch(fd, P("a/lnk"), IN_ATTRIB | IN_DONT_FOLLOW);
    printf("link: same wd as x followed=%d not followed=%d\n", inotify_add_watch(fd, P("a/lnk"), IN_ATTRIB) == wx,
           wl == wx);
    int wtop = inotify_add_watch(fd, base, IN_ALL_EVENTS);
    CHECK(chmod(P("a"), 0700) == 0, "chmod a");
    CHECK(unlink(P("a/lnk")) == 0 && unlink(P("a/x")) == 0, "unlink lnk, x");
    CHECK(rmdir(P("a")) == 0, "rmdir a");
    show(fd, "symlink, chmod a, unlink, rmdir a");
    printf("wd top=%d\n", wtop);

    if (!quick) {
        /* A blocking read. */
        int bfd = inotify_init();
        inotify_add_watch(bfd, P("b"), IN_CREATE);
        pthread_t t;
        pthread_create(&t, 0, late_create, (void *)P("b/late"));
        char buf[256] __attribute__((aligned(8)));
        ssize_t n = read(bfd, buf, sizeof buf);
        printf("blocking read: %zd\n", n);
        if (n > 0)
            print_event((struct inotify_event *)buf);
        pthread_join(t, 0);
        close(bfd);

        /* The queue's limit. */
        int ofd = inotify_init1(IN_NONBLOCK);
        touch(P("b/o"));
        inotify_add_watch(ofd, P("b/o"), IN_OPEN | IN_CLOSE);
        for (int i = 0; i < 9000; i++)
            close(open(P("b/o"), O_RDONLY));
        avail = 0;
        ioctl(ofd, FIONREAD, &avail);
        static char big[1 << 20] __attribute__((aligned(8)));
        n = read(ofd, big, sizeof big);
        int count = 0, opens = 0;
        struct inotify_event *last = 0;
        for (char *p = big; n > 0 && p < big + n; count++) {
            last = (struct inotify_event *)p;
            opens += (last->mask & IN_OPEN) != 0;
            p += sizeof *last + last->len;
        }
        printf("overflow: FIONREAD %d, read %zd, events %d, opens %d, last wd %d mask ", avail, n, count, opens,
               last ? last->wd : 0);
        print_mask(last ? last->mask : 0);
        printf("\n");
        close(open(P("b/o"), O_RDONLY));
        show(ofd, "after the overflow");
        close(ofd);
        unlink(P("b/o"));
        unlink(P("b/late"));
    }

    close(fd);
    unlink(P("b/y"));
    rmdir(P("b"));
    CHECK(rmdir(base) == 0, "everything removed");
    return failures;
}
