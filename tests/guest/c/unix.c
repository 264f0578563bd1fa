/* AF_UNIX sockets against the host: socketpair of each type, a path listener
   with a client thread, abstract names, datagrams with sender addresses and
   truncation, SCM_RIGHTS and SCM_CREDENTIALS, MSG_PEEK / MSG_DONTWAIT /
   MSG_WAITALL, shutdown and end of file, poll and epoll readiness, options, a
   megabyte through a stream between threads, and the errors Linux gives for bad
   descriptors, names, types and pointers. Same output on the host and in onering. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <unistd.h>

static const char *path = "/tmp/onering-unix-test.sock";

static socklen_t addr_of(struct sockaddr_un *a, const char *p, int abstract) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (abstract) {
        a->sun_path[0] = 0;
        memcpy(a->sun_path + 1, p, strlen(p));
        return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(p));
    }
    strcpy(a->sun_path, p);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(p) + 1);
}

static void *client(void *arg) {
    struct sockaddr_un a;
    socklen_t n = addr_of(&a, (const char *)arg, 0);
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&a, n) != 0) {
        perror("client connect");
        return NULL;
    }
    char buf[64];
    write(c, "ping", 4);
    ssize_t r = read(c, buf, sizeof buf);
    if (r == 4 && !memcmp(buf, "pong", 4)) write(c, "done", 4);
    close(c);
    return NULL;
}

static void *bulk_writer(void *arg) {
    int fd = *(int *)arg;
    static unsigned char buf[1 << 20];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 + i / 251);
    size_t off = 0;
    while (off < sizeof buf) {
        size_t chunk = 1 + (off * 31) % 70000;
        if (chunk > sizeof buf - off) chunk = sizeof buf - off;
        ssize_t w = write(fd, buf + off, chunk);
        if (w <= 0) break;
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    return NULL;
}

static void pairs(void) {
    int sv[2];
    char buf[256];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair stream");
    CHECK(write(sv[0], "hello", 5) == 5 && write(sv[0], " world", 6) == 6, "two writes");
    int avail = -1;
    CHECK(ioctl(sv[1], FIONREAD, &avail) == 0 && avail == 11, "FIONREAD counts both");
    CHECK(recv(sv[1], buf, 5, MSG_PEEK) == 5 && !memcmp(buf, "hello", 5), "MSG_PEEK");
    CHECK(read(sv[1], buf, sizeof buf) == 11 && !memcmp(buf, "hello world", 11), "a stream read joins them");
    CHECK_ERR(recv(sv[1], buf, 1, MSG_DONTWAIT), EAGAIN, "empty: MSG_DONTWAIT is EAGAIN");
    struct pollfd p = {sv[1], POLLIN | POLLOUT | POLLRDHUP, 0};
    CHECK(poll(&p, 1, 0) == 1 && p.revents == POLLOUT, "poll: writable only");
    CHECK(shutdown(sv[0], SHUT_WR) == 0, "shutdown SHUT_WR");
    CHECK(poll(&p, 1, 0) == 1 && p.revents == (POLLIN | POLLOUT | POLLRDHUP), "poll: end of file is readable and RDHUP");
    CHECK(read(sv[1], buf, sizeof buf) == 0, "then read gives end of file");
    CHECK(write(sv[1], "back", 4) == 4 && read(sv[0], buf, 4) == 4, "the other direction still works");
    CHECK_ERR(send(sv[0], "x", 1, MSG_NOSIGNAL), EPIPE, "send after SHUT_WR is EPIPE");
    CHECK_ERR(shutdown(sv[0], 7), EINVAL, "shutdown with a bad direction");
    close(sv[0]);
    CHECK(poll(&p, 1, 0) == 1 && (p.revents & POLLHUP), "peer closed: POLLHUP");
    CHECK_ERR(send(sv[1], "x", 1, MSG_NOSIGNAL), EPIPE, "peer closed: EPIPE");
    close(sv[1]);

    CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0, "socketpair dgram");
    CHECK(send(sv[0], "one", 3, 0) == 3 && send(sv[0], "three", 5, 0) == 5, "two datagrams");
    CHECK(ioctl(sv[1], FIONREAD, &avail) == 0 && avail == 3, "FIONREAD is the first datagram");
    CHECK(recv(sv[1], buf, 2, 0) == 2, "a short read truncates");
    CHECK(recv(sv[1], buf, 2, MSG_TRUNC) == 5, "MSG_TRUNC gives the real length");
    CHECK_ERR(recv(sv[1], buf, 2, MSG_DONTWAIT), EAGAIN, "nothing left");
    struct iovec iov = {buf, 2};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    send(sv[0], "abcdef", 6, 0);
    CHECK(recvmsg(sv[1], &m, 0) == 2 && (m.msg_flags & MSG_TRUNC), "recvmsg sets MSG_TRUNC");
    close(sv[0]);
    close(sv[1]);

    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0, "socketpair seqpacket");
    CHECK(write(sv[0], "rec1", 4) == 4 && write(sv[0], "record2", 7) == 7, "two records");
    CHECK(read(sv[1], buf, sizeof buf) == 4 && read(sv[1], buf, sizeof buf) == 7, "read one record at a time");
    close(sv[0]);
    CHECK(read(sv[1], buf, sizeof buf) == 0, "seqpacket end of file");
    close(sv[1]);
}

static void listener(void) {
    struct sockaddr_un a, got;
    socklen_t n = addr_of(&a, path, 0), gl;
    char buf[64];
    unlink(path);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(l >= 0, "socket");
    CHECK_ERR(connect(socket(AF_UNIX, SOCK_STREAM, 0), (struct sockaddr *)&a, n), ENOENT, "connect to no file: ENOENT");
    CHECK_ERR(listen(l, 5), EINVAL, "listen before bind: EINVAL");
    CHECK(bind(l, (struct sockaddr *)&a, n) == 0, "bind a path");
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISSOCK(st.st_mode), "the path is a socket file");
    CHECK_ERR(open(path, O_RDONLY), ENXIO, "opening it: ENXIO");
    CHECK_ERR(bind(socket(AF_UNIX, SOCK_STREAM, 0), (struct sockaddr *)&a, n), EADDRINUSE, "binding it again: EADDRINUSE");
    CHECK_ERR(connect(socket(AF_UNIX, SOCK_STREAM, 0), (struct sockaddr *)&a, n), ECONNREFUSED, "not listening: ECONNREFUSED");
    CHECK(listen(l, 5) == 0, "listen");
    gl = sizeof got;
    CHECK(getsockname(l, (struct sockaddr *)&got, &gl) == 0 && gl == n && !strcmp(got.sun_path, path), "getsockname");
    int fl = fcntl(l, F_GETFL);
    fcntl(l, F_SETFL, fl | O_NONBLOCK);
    CHECK_ERR(accept(l, NULL, NULL), EAGAIN, "non-blocking accept with nobody: EAGAIN");
    fcntl(l, F_SETFL, fl);
    pthread_t t;
    pthread_create(&t, NULL, client, (void *)path);
    gl = sizeof got;
    int c = accept4(l, (struct sockaddr *)&got, &gl, SOCK_CLOEXEC);
    CHECK(c >= 0 && gl == sizeof(sa_family_t), "accept4: an unnamed peer");
    CHECK(fcntl(c, F_GETFD) == FD_CLOEXEC, "SOCK_CLOEXEC");
    CHECK(read(c, buf, sizeof buf) == 4 && !memcmp(buf, "ping", 4), "read the client's ping");
    CHECK(write(c, "pong", 4) == 4, "answer");
    CHECK(read(c, buf, sizeof buf) == 4 && !memcmp(buf, "done", 4), "the client got it");
    CHECK(read(c, buf, sizeof buf) == 0, "client closed: end of file");
    struct ucred cr;
    socklen_t cl = sizeof cr;
    CHECK(getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid == getpid() && cr.uid == getuid(), "SO_PEERCRED");
    int v;
    socklen_t vl = sizeof v;
    CHECK(getsockopt(l, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl) == 0 && v == 1, "SO_ACCEPTCONN");
    CHECK(getsockopt(c, SOL_SOCKET, SO_TYPE, &v, &vl) == 0 && v == SOCK_STREAM, "SO_TYPE");
    CHECK(getsockopt(c, SOL_SOCKET, SO_DOMAIN, &v, &vl) == 0 && v == AF_UNIX, "SO_DOMAIN");
    pthread_join(t, NULL);
    close(c);
    close(l);
    CHECK(stat(path, &st) == 0, "the socket file stays after close");
    CHECK_ERR(connect(socket(AF_UNIX, SOCK_STREAM, 0), (struct sockaddr *)&a, n), ECONNREFUSED, "its socket is gone: ECONNREFUSED");
    unlink(path);
}

static void abstract_and_dgram(void) {
    struct sockaddr_un a, b, from;
    socklen_t an = addr_of(&a, "onering-test-a", 1), bn = addr_of(&b, "onering-test-b", 1), fl;
    char buf[64];
    int s = socket(AF_UNIX, SOCK_DGRAM, 0), t = socket(AF_UNIX, SOCK_DGRAM, 0), u = socket(AF_UNIX, SOCK_DGRAM, 0);
    CHECK(bind(s, (struct sockaddr *)&a, an) == 0, "bind an abstract name");
    CHECK_ERR(bind(u, (struct sockaddr *)&a, an), EADDRINUSE, "the abstract name is taken");
    CHECK(bind(t, (struct sockaddr *)&b, bn) == 0, "bind another");
    CHECK(sendto(t, "hi", 2, 0, (struct sockaddr *)&a, an) == 2, "sendto by name");
    fl = sizeof from;
    CHECK(recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl) == 2 && fl == bn && !memcmp(from.sun_path + 1, "onering-test-b", 14), "recvfrom gives the sender's name");
    CHECK(sendto(u, "anon", 4, 0, (struct sockaddr *)&a, an) == 4, "an unnamed sender");
    fl = sizeof from;
    CHECK(recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl) == 4 && fl == 0, "has no address");
    CHECK(connect(t, (struct sockaddr *)&a, an) == 0 && send(t, "c", 1, 0) == 1, "connected datagram socket");
    CHECK(recv(s, buf, sizeof buf, 0) == 1, "received");
    CHECK(connect(s, (struct sockaddr *)&b, bn) == 0, "s connects to t");
    CHECK_ERR(sendto(u, "x", 1, 0, (struct sockaddr *)&a, an), EPERM, "others may not send to a connected socket");
    close(s);
    CHECK_ERR(send(t, "x", 1, 0), ECONNREFUSED, "its peer closed: ECONNREFUSED");
    struct sockaddr_un z;
    socklen_t zn = addr_of(&z, "onering-nobody", 1);
    CHECK_ERR(sendto(u, "x", 1, 0, (struct sockaddr *)&z, zn), ECONNREFUSED, "an unbound abstract name: ECONNREFUSED");
    int st = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un c;
    socklen_t cn = addr_of(&c, "onering-test-c", 1);
    bind(st, (struct sockaddr *)&c, cn);
    listen(st, 1);
    CHECK_ERR(connect(u, (struct sockaddr *)&c, cn), ECONNREFUSED, "datagram to an abstract stream name: ECONNREFUSED");
    struct sockaddr_un pa;
    socklen_t pn = addr_of(&pa, path, 0);
    unlink(path);
    int ps = socket(AF_UNIX, SOCK_STREAM, 0);
    bind(ps, (struct sockaddr *)&pa, pn);
    listen(ps, 1);
    CHECK_ERR(connect(u, (struct sockaddr *)&pa, pn), EPROTOTYPE, "datagram to a stream socket's path: EPROTOTYPE");
    close(ps);
    unlink(path);
    sa_family_t fam = AF_UNIX;
    int w = socket(AF_UNIX, SOCK_DGRAM, 0);
    CHECK(bind(w, (struct sockaddr *)&fam, sizeof fam) == 0, "autobind");
    fl = sizeof from;
    CHECK(getsockname(w, (struct sockaddr *)&from, &fl) == 0 && fl == 8 && from.sun_path[0] == 0, "an abstract name of 5 characters");
    close(st), close(t), close(u), close(w);
}

static void rights(void) {
    int sv[2], p[2];
    char buf[16];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pipe(p);
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(2 * sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {"x", 1};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.b;
    m.msg_controllen = CMSG_SPACE(2 * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    int fds[2] = {p[0], p[1]};
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    CHECK(sendmsg(sv[0], &m, 0) == 1, "sendmsg with two descriptors");
    close(p[0]);
    close(p[1]);
    memset(&u, 0, sizeof u);
    struct iovec riov = {buf, sizeof buf};
    struct msghdr r = {0};
    r.msg_iov = &riov;
    r.msg_iovlen = 1;
    r.msg_control = u.b;
    r.msg_controllen = sizeof u.b;
    CHECK(recvmsg(sv[1], &r, MSG_CMSG_CLOEXEC) == 1, "recvmsg");
    c = CMSG_FIRSTHDR(&r);
    CHECK(c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(2 * sizeof(int)), "an SCM_RIGHTS message of two");
    int got[2];
    memcpy(got, CMSG_DATA(c), sizeof got);
    CHECK(fcntl(got[0], F_GETFD) == FD_CLOEXEC, "MSG_CMSG_CLOEXEC");
    CHECK(write(got[1], "via", 3) == 3 && read(got[0], buf, 3) == 3 && !memcmp(buf, "via", 3), "the passed pipe works");
    close(got[0]);
    close(got[1]);
    /* A control buffer too small for what came: MSG_CTRUNC. */
    int q[2];
    pipe(q);
    m.msg_controllen = CMSG_SPACE(sizeof(int));
    c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &q[0], sizeof(int));
    sendmsg(sv[0], &m, 0);
    r.msg_controllen = 0;
    r.msg_control = NULL;
    CHECK(recvmsg(sv[1], &r, 0) == 1 && (r.msg_flags & MSG_CTRUNC), "no room for the descriptor: MSG_CTRUNC");
    /* Bad descriptors and control messages. */
    m.msg_control = u.b;
    m.msg_controllen = CMSG_SPACE(sizeof(int));
    c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    int bad = 999;
    memcpy(CMSG_DATA(c), &bad, sizeof bad);
    CHECK_ERR(sendmsg(sv[0], &m, 0), EBADF, "a bad descriptor: EBADF");
    c->cmsg_len = 3;
    CHECK_ERR(sendmsg(sv[0], &m, 0), EINVAL, "a short cmsg_len: EINVAL");
    /* Credentials with SO_PASSCRED. */
    int one = 1;
    setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
    write(sv[0], "y", 1);
    memset(&u, 0, sizeof u);
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(struct ucred))];
    } cu;
    r.msg_control = cu.b;
    r.msg_controllen = sizeof cu.b;
    CHECK(recvmsg(sv[1], &r, 0) == 1, "recvmsg with SO_PASSCRED");
    c = CMSG_FIRSTHDR(&r);
    struct ucred cr;
    if (c) memcpy(&cr, CMSG_DATA(c), sizeof cr);
    CHECK(c && c->cmsg_type == SCM_CREDENTIALS && cr.pid == getpid() && cr.uid == getuid(), "SCM_CREDENTIALS");
    close(q[0]), close(q[1]), close(sv[0]), close(sv[1]);
}

static void bulk(void) {
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pthread_t t;
    pthread_create(&t, NULL, bulk_writer, &sv[0]);
    static unsigned char buf[1 << 20];
    size_t got = 0;
    for (;;) {
        ssize_t r = recv(sv[1], buf + got, sizeof buf - got > 5000 ? 5000 : sizeof buf - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    pthread_join(t, NULL);
    int same = got == sizeof buf;
    for (size_t i = 0; same && i < sizeof buf; i++) same = buf[i] == (unsigned char)(i * 7 + i / 251);
    CHECK(same, "a megabyte through a stream between threads, in order");
    close(sv[0]);
    close(sv[1]);
    /* MSG_WAITALL waits for all of it. */
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pthread_create(&t, NULL, bulk_writer, &sv[0]);
    CHECK(recv(sv[1], buf, 300000, MSG_WAITALL) == 300000, "MSG_WAITALL");
    while (recv(sv[1], buf, sizeof buf, 0) > 0) {
    }
    pthread_join(t, NULL);
    close(sv[0]);
    close(sv[1]);
}

static void readiness(void) {
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv);
    int ep = epoll_create1(0);
    struct epoll_event e = {EPOLLIN | EPOLLET, {.u32 = 7}}, out[4];
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &e) == 0, "epoll_ctl a socket");
    CHECK(epoll_wait(ep, out, 4, 0) == 0, "nothing yet");
    write(sv[0], "a", 1);
    CHECK(epoll_wait(ep, out, 4, 1000) == 1 && out[0].data.u32 == 7, "data: one event");
    CHECK(epoll_wait(ep, out, 4, 0) == 0, "edge-triggered: once");
    write(sv[0], "b", 1);
    CHECK(epoll_wait(ep, out, 4, 0) == 1, "more data: again");
    /* Fill the pipe until EAGAIN: then POLLOUT is off. */
    static char big[65536];
    long total = 0;
    int err = 0;
    for (;;) {
        ssize_t w = write(sv[0], big, sizeof big);
        if (w < 0) {
            err = errno;
            break;
        }
        total += w;
    }
    CHECK(err == EAGAIN && total > 0, "a non-blocking writer fills the socket and gets EAGAIN");
    struct pollfd p = {sv[0], POLLOUT, 0};
    CHECK(poll(&p, 1, 0) == 0, "full: not writable");
    close(ep), close(sv[0]), close(sv[1]);
}

static void errors(void) {
    char buf[8];
    int fd = open("/dev/null", O_RDONLY);
    CHECK_ERR(send(fd, "x", 1, 0), ENOTSOCK, "send on a file: ENOTSOCK");
    CHECK_ERR(listen(fd, 1), ENOTSOCK, "listen on a file: ENOTSOCK");
    CHECK_ERR(send(99, "x", 1, 0), EBADF, "send on a bad descriptor: EBADF");
    CHECK_ERR(socket(AF_UNIX, 77, 0), EINVAL, "a type past SOCK_MAX: EINVAL");
    CHECK_ERR(socket(AF_UNIX, SOCK_STREAM, 9), EPROTONOSUPPORT, "a protocol: EPROTONOSUPPORT");
    CHECK_ERR(socket(1000, SOCK_STREAM, 0), EAFNOSUPPORT, "a family past the last: EAFNOSUPPORT");
    CHECK_ERR(socket(AF_UNIX, SOCK_STREAM | 0x100000, 0), EINVAL, "unknown type flags: EINVAL");
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK_ERR(recv(s, buf, 1, 0), EINVAL, "recv on an unconnected stream socket: EINVAL");
    CHECK_ERR(send(s, "x", 1, MSG_NOSIGNAL), ENOTCONN, "send on it: ENOTCONN");
    CHECK_ERR(getpeername(s, (struct sockaddr *)buf, &(socklen_t){8}), ENOTCONN, "getpeername: ENOTCONN");
    CHECK(shutdown(s, SHUT_RD) == 0, "shutdown of an unconnected socket: 0, as Linux");
    CHECK_ERR(connect(s, (struct sockaddr *)1, 20), EFAULT, "connect with a bad pointer: EFAULT");
    CHECK_ERR(bind(s, (struct sockaddr *)buf, 1), EINVAL, "bind with a short address: EINVAL");
    struct sockaddr_in in = {.sin_family = AF_INET};
    CHECK_ERR(bind(s, (struct sockaddr *)&in, sizeof in), EINVAL, "bind an AF_INET address: EINVAL");
    int v = 0;
    CHECK_ERR(setsockopt(s, SOL_SOCKET, 9999, &v, sizeof v), ENOPROTOOPT, "unknown option: ENOPROTOOPT");
    socklen_t *badlen = (socklen_t *)(uintptr_t)1;
    CHECK_ERR(getsockopt(s, SOL_SOCKET, SO_TYPE, &v, badlen), EFAULT, "getsockopt with a bad length pointer: EFAULT");
    int *badsv = (int *)(uintptr_t)v;
    CHECK_ERR(socketpair(AF_UNIX, SOCK_STREAM, 0, badsv + 1), EFAULT, "socketpair with a bad array: EFAULT");
    struct timeval tv = {0, 20000};
    CHECK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0, "SO_RCVTIMEO");
    socklen_t tl = sizeof tv;
    CHECK(getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl) == 0 && tv.tv_usec == 20000 && tl == sizeof tv, "reads back");
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    CHECK_ERR(recv(sv[1], buf, 1, 0), EAGAIN, "a receive timeout: EAGAIN");
    int bufsz = 10000;
    socklen_t bl = sizeof bufsz;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
    CHECK(getsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bufsz, &bl) == 0 && bufsz == 20000, "SO_SNDBUF is doubled");
    signal(SIGPIPE, SIG_IGN);
    close(sv[1]);
    CHECK_ERR(write(sv[0], "x", 1), EPIPE, "write to a closed peer: EPIPE");
    close(sv[0]), close(s), close(fd);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    pairs();
    listener();
    abstract_and_dgram();
    rights();
    bulk();
    readiness();
    errors();
    return failures;
}
