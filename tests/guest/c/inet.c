/* TCP and UDP over loopback against the host: echo over IPv4 and IPv6, a
   dual-stack listener, non-blocking connect with epoll, edge-triggered epoll,
   half-close, resets, refused connections and datagrams, a backlog of many
   concurrent connects, names, options, and the errors Linux gives. Ports are
   chosen by the kernel (bind to port 0), so runs do not collide; only
   properties are printed. Same output on the host and in onering. */
#define _GNU_SOURCE
#include "check.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int listener(int family, struct sockaddr_storage *ss, socklen_t *len) {
    int l = socket(family, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        *len = sizeof *a;
    }
    if (bind(l, (struct sockaddr *)ss, *len) || listen(l, 128)) {
        perror("listener");
        exit(1);
    }
    getsockname(l, (struct sockaddr *)ss, len);
    return l;
}

static void *echo_server(void *arg) {
    int l = (int)(intptr_t)arg;
    int c = accept(l, NULL, NULL);
    char buf[4096];
    for (ssize_t n; (n = read(c, buf, sizeof buf)) > 0;) write(c, buf, (size_t)n);
    close(c);
    return NULL;
}

static void tcp_echo(int family, const char *what) {
    struct sockaddr_storage ss;
    socklen_t len;
    char msg[128], buf[4096];
    int l = listener(family, &ss, &len);
    pthread_t t;
    pthread_create(&t, NULL, echo_server, (void *)(intptr_t)l);
    int c = socket(family, SOCK_STREAM, 0);
    snprintf(msg, sizeof msg, "%s: connect", what);
    CHECK(connect(c, (struct sockaddr *)&ss, len) == 0, msg);
    long total = 0;
    int good = 1;
    for (int i = 0; i < 200; i++) {
        int n = 1 + (i * 37) % 4000;
        memset(buf, 'a' + i % 26, (size_t)n);
        if (write(c, buf, (size_t)n) != n) good = 0;
        int got = 0;
        while (got < n) {
            ssize_t r = read(c, buf + got, (size_t)(n - got));
            if (r <= 0) break;
            got += (int)r;
        }
        if (got != n || buf[n - 1] != 'a' + i % 26) good = 0;
        total += n;
    }
    snprintf(msg, sizeof msg, "%s: 200 round trips echoed", what);
    CHECK(good && total > 0, msg);
    struct sockaddr_storage peer, me;
    socklen_t pl = sizeof peer, ml = sizeof me;
    snprintf(msg, sizeof msg, "%s: getpeername is the listener", what);
    CHECK(getpeername(c, (struct sockaddr *)&peer, &pl) == 0 && pl == len && !memcmp(&peer, &ss, len), msg);
    snprintf(msg, sizeof msg, "%s: getsockname has an ephemeral port", what);
    CHECK(getsockname(c, (struct sockaddr *)&me, &ml) == 0 && ml == len && ntohs(((struct sockaddr_in *)&me)->sin_port) >= 1024, msg);
    shutdown(c, SHUT_WR);
    snprintf(msg, sizeof msg, "%s: half-close: the server ends, we read end of file", what);
    CHECK(read(c, buf, sizeof buf) == 0, msg);
    pthread_join(t, NULL);
    close(c);
    close(l);
}

static void udp_echo(int family, const char *what) {
    char msg[128], buf[2048];
    int s = socket(family, SOCK_DGRAM, 0), c = socket(family, SOCK_DGRAM, 0);
    struct sockaddr_storage ss, from;
    socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6), fl;
    memset(&ss, 0, sizeof ss);
    ss.ss_family = (sa_family_t)family;
    if (family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else
        ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
    snprintf(msg, sizeof msg, "%s: bind port 0", what);
    CHECK(bind(s, (struct sockaddr *)&ss, len) == 0, msg);
    getsockname(s, (struct sockaddr *)&ss, &len);
    snprintf(msg, sizeof msg, "%s: sendto", what);
    CHECK(sendto(c, "datagram", 8, 0, (struct sockaddr *)&ss, len) == 8, msg);
    fl = sizeof from;
    snprintf(msg, sizeof msg, "%s: recvfrom with the sender's address", what);
    CHECK(recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl) == 8 && fl == len && !memcmp(buf, "datagram", 8), msg);
    snprintf(msg, sizeof msg, "%s: reply to it", what);
    CHECK(sendto(s, "reply", 5, 0, (struct sockaddr *)&from, fl) == 5 && recv(c, buf, sizeof buf, 0) == 5, msg);
    sendto(c, "0123456789", 10, 0, (struct sockaddr *)&ss, len);
    snprintf(msg, sizeof msg, "%s: a short buffer truncates (MSG_TRUNC gives the length)", what);
    CHECK(recv(s, buf, 4, MSG_TRUNC) == 10, msg);
    snprintf(msg, sizeof msg, "%s: empty: EAGAIN with MSG_DONTWAIT", what);
    CHECK_ERR(recv(s, buf, sizeof buf, MSG_DONTWAIT), EAGAIN, msg);
    snprintf(msg, sizeof msg, "%s: connected UDP", what);
    CHECK(connect(c, (struct sockaddr *)&ss, len) == 0 && send(c, "x", 1, 0) == 1 && recv(s, buf, 1, 0) == 1, msg);
    int u = socket(family, SOCK_DGRAM, 0);
    snprintf(msg, sizeof msg, "%s: send on an unconnected socket: EDESTADDRREQ", what);
    CHECK_ERR(send(u, "x", 1, 0), EDESTADDRREQ, msg);
    /* A closed port: ICMP's port unreachable is ECONNREFUSED for a connected
       sender, once, at its next send or receive (Go's DNS client moves on to the
       next server at once); an unconnected sender hears nothing. */
    close(s);
    struct pollfd p = {c, POLLIN, 0};
    snprintf(msg, sizeof msg, "%s: to a closed port: sent, then POLLERR", what);
    CHECK(send(c, "x", 1, 0) == 1 && poll(&p, 1, 2000) == 1 && p.revents == POLLERR, msg);
    snprintf(msg, sizeof msg, "%s: recv: ECONNREFUSED", what);
    CHECK_ERR(recv(c, buf, sizeof buf, MSG_DONTWAIT), ECONNREFUSED, msg);
    snprintf(msg, sizeof msg, "%s: then EAGAIN", what);
    CHECK_ERR(recv(c, buf, sizeof buf, MSG_DONTWAIT), EAGAIN, msg);
    send(c, "x", 1, 0);
    snprintf(msg, sizeof msg, "%s: the next send: ECONNREFUSED", what);
    CHECK_ERR(send(c, "x", 1, 0), ECONNREFUSED, msg);
    send(c, "x", 1, 0);
    int err = 0;
    socklen_t el = sizeof err;
    snprintf(msg, sizeof msg, "%s: or SO_ERROR", what);
    CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == ECONNREFUSED, msg);
    u = socket(family, SOCK_DGRAM, 0);
    p.fd = u;
    snprintf(msg, sizeof msg, "%s: unconnected: no error", what);
    CHECK(sendto(u, "x", 1, 0, (struct sockaddr *)&ss, len) == 1 && poll(&p, 1, 0) == 0 &&
              sendto(u, "x", 1, 0, (struct sockaddr *)&ss, len) == 1, msg);
    close(u), close(c);
}

static void nonblocking(void) {
    struct sockaddr_storage ss;
    socklen_t len;
    char buf[64];
    int l = listener(AF_INET, &ss, &len);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int r = connect(c, (struct sockaddr *)&ss, len);
    int started = r == 0 || errno == EINPROGRESS;
    CHECK(started, "non-blocking connect: done or EINPROGRESS");
    int ep = epoll_create1(0);
    struct epoll_event e = {EPOLLOUT, {.fd = c}}, out[2];
    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
    CHECK(epoll_wait(ep, out, 2, 2000) == 1 && (out[0].events & EPOLLOUT), "epoll: writable when connected");
    int err = -1;
    socklen_t el = sizeof err;
    CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "SO_ERROR is 0");
    int fl = fcntl(l, F_GETFL);
    fcntl(l, F_SETFL, fl | O_NONBLOCK);
    int a = accept(l, NULL, NULL);
    CHECK(a >= 0, "accept");
    CHECK_ERR(accept(l, NULL, NULL), EAGAIN, "accept again: EAGAIN");
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = a;
    epoll_ctl(ep, EPOLL_CTL_ADD, a, &e);
    CHECK(epoll_wait(ep, out, 2, 0) == 1, "only the client is ready (writable)");
    write(c, "hey", 3);
    int n = epoll_wait(ep, out, 2, 1000), sawin = 0;
    for (int i = 0; i < n; i++) sawin |= out[i].data.fd == a && (out[i].events & EPOLLIN);
    CHECK(sawin, "epoll: the server side is readable");
    int avail = 0;
    CHECK(ioctl(a, FIONREAD, &avail) == 0 && avail == 3, "FIONREAD");
    CHECK(recv(a, buf, sizeof buf, MSG_PEEK) == 3 && recv(a, buf, sizeof buf, 0) == 3, "MSG_PEEK then read");
    CHECK_ERR(recv(a, buf, sizeof buf, MSG_DONTWAIT), EAGAIN, "empty: EAGAIN with MSG_DONTWAIT");
    close(c);
    struct pollfd p = {a, POLLIN | POLLRDHUP, 0};
    CHECK(poll(&p, 1, 1000) == 1 && (p.revents & POLLIN) && (p.revents & POLLRDHUP), "peer closed: readable, RDHUP");
    CHECK(read(a, buf, sizeof buf) == 0, "end of file");
    close(a), close(ep), close(l);
}

/* Edge-triggered epoll reports each new arrival, even when the socket returns
   to a state it was in before (a listener's queue 1, 0, 1; a connection's bytes
   waiting 1, 0, 1): onering once compared a hash of the state, and a Go server
   never saw its second connection. */
static void edge_triggered(void) {
    struct sockaddr_storage ss;
    socklen_t len;
    char buf[8];
    int l = listener(AF_INET, &ss, &len);
    fcntl(l, F_SETFL, fcntl(l, F_GETFL) | O_NONBLOCK);
    int ep = epoll_create1(0);
    struct epoll_event e = {EPOLLIN | EPOLLET, {.fd = l}}, out[2];
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &e);
    int c1 = socket(AF_INET, SOCK_STREAM, 0);
    connect(c1, (struct sockaddr *)&ss, len);
    CHECK(epoll_wait(ep, out, 2, 2000) == 1, "ET: a connection to accept");
    int a = accept(l, NULL, NULL);
    CHECK(a >= 0, "ET: accepted");
    CHECK_ERR(accept(l, NULL, NULL), EAGAIN, "ET: then none");
    CHECK(epoll_wait(ep, out, 2, 0) == 0, "ET: nothing new");
    int c2 = socket(AF_INET, SOCK_STREAM, 0);
    connect(c2, (struct sockaddr *)&ss, len);
    CHECK(epoll_wait(ep, out, 2, 2000) == 1, "ET: the second connection is an edge");
    int a2 = accept(l, NULL, NULL);
    CHECK(a2 >= 0, "ET: second accepted");
    e.events = EPOLLIN | EPOLLET;
    e.data.fd = a;
    epoll_ctl(ep, EPOLL_CTL_ADD, a, &e);
    write(c1, "x", 1);
    CHECK(epoll_wait(ep, out, 2, 2000) == 1 && out[0].data.fd == a, "ET: a byte to read");
    CHECK(read(a, buf, sizeof buf) == 1, "ET: read it");
    CHECK(epoll_wait(ep, out, 2, 0) == 0, "ET: nothing new after the read");
    write(c1, "y", 1);
    CHECK(epoll_wait(ep, out, 2, 2000) == 1 && out[0].data.fd == a, "ET: the next byte is an edge");
    close(a), close(a2), close(c1), close(c2), close(ep), close(l);
}

static void refused_and_errors(void) {
    struct sockaddr_storage ss;
    socklen_t len;
    int l = listener(AF_INET, &ss, &len);
    close(l); /* the port is free again: nothing listens there */
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_ERR(connect(c, (struct sockaddr *)&ss, len), ECONNREFUSED, "connect to a closed port: ECONNREFUSED");
    close(c);
    c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int r = connect(c, (struct sockaddr *)&ss, len);
    if (r != 0 && errno == EINPROGRESS) {
        struct pollfd p = {c, POLLOUT, 0};
        poll(&p, 1, 1000);
    }
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el);
    CHECK(r == -1 && err == ECONNREFUSED, "non-blocking: SO_ERROR is ECONNREFUSED");
    close(c);
    /* Rebinding a port a closed listener had, with SO_REUSEADDR. */
    int l2 = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l2, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    CHECK(bind(l2, (struct sockaddr *)&ss, len) == 0 && listen(l2, 1) == 0, "rebind with SO_REUSEADDR");
    int l3 = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_ERR(bind(l3, (struct sockaddr *)&ss, len), EADDRINUSE, "a second listener: EADDRINUSE");
    struct sockaddr_in far = {.sin_family = AF_INET, .sin_port = 0};
    far.sin_addr.s_addr = inet_addr("192.0.2.1");
    CHECK_ERR(bind(l3, (struct sockaddr *)&far, sizeof far), EADDRNOTAVAIL, "bind a foreign address: EADDRNOTAVAIL");
    struct sockaddr_in6 six = {.sin6_family = AF_INET6};
    CHECK_ERR(bind(l3, (struct sockaddr *)&six, sizeof six), EAFNOSUPPORT, "bind an AF_INET6 address to AF_INET: EAFNOSUPPORT");
    CHECK_ERR(bind(l3, (struct sockaddr *)&far, 4), EINVAL, "a short address: EINVAL");
    CHECK_ERR(socket(AF_INET, SOCK_STREAM, IPPROTO_UDP), EPROTONOSUPPORT, "TCP with IPPROTO_UDP: EPROTONOSUPPORT");
    /* (A raw socket with a protocol needs CAP_NET_RAW: EPERM in onering, made on a
       host that runs this as root, so not compared.) */
    CHECK_ERR(socket(AF_INET, SOCK_RAW, 0), EPROTONOSUPPORT, "SOCK_RAW with protocol 0: EPROTONOSUPPORT");
    CHECK_ERR(socket(AF_INET6, SOCK_DGRAM, 300), EINVAL, "protocol 300: EINVAL");
    CHECK_ERR(socket(AF_INET, SOCK_SEQPACKET, 0), ESOCKTNOSUPPORT, "SOCK_SEQPACKET: ESOCKTNOSUPPORT");
    int sv[2];
    CHECK_ERR(socketpair(AF_INET, SOCK_STREAM, 0, sv), EOPNOTSUPP, "socketpair AF_INET: EOPNOTSUPP");
    int v = 1;
    socklen_t vl = sizeof v;
    CHECK(setsockopt(l3, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) == 0 && getsockopt(l3, IPPROTO_TCP, TCP_NODELAY, &v, &vl) == 0 && v == 1, "TCP_NODELAY");
    CHECK(getsockopt(l3, SOL_SOCKET, SO_TYPE, &v, &vl) == 0 && v == SOCK_STREAM, "SO_TYPE");
    CHECK(getsockopt(l3, SOL_SOCKET, SO_PROTOCOL, &v, &vl) == 0 && v == IPPROTO_TCP, "SO_PROTOCOL");
    CHECK_ERR(getsockopt(l3, SOL_SOCKET, 9999, &v, &vl), ENOPROTOOPT, "an unknown option: ENOPROTOOPT");
    char b;
    CHECK_ERR(recv(l3, &b, 1, 0), ENOTCONN, "recv on an unconnected TCP socket: ENOTCONN");
    signal(SIGPIPE, SIG_IGN);
    CHECK_ERR(send(l3, &b, 1, 0), EPIPE, "send on it: EPIPE");
    close(l2), close(l3);
}

/* Resets: data for a socket its program closed is answered with a reset (a
   writer learns nobody reads; Go's TestWritevError wrote 1 GB into a closed
   peer and waited forever), which a peer that had the FIN reports as EPIPE;
   closing with unread data (or SO_LINGER's zero time) resets, reported once as
   ECONNRESET, then end of file and EPIPE. */
static void resets(void) {
    struct sockaddr_storage ss;
    socklen_t len;
    char buf[64];
    int err = 0;
    socklen_t el = sizeof err;
    signal(SIGPIPE, SIG_IGN);
    int l = listener(AF_INET, &ss, &len);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&ss, len);
    int a = accept(l, NULL, NULL);
    close(a);
    CHECK(write(c, "x", 1) == 1, "write to a closed peer: taken");
    struct pollfd p = {c, POLLIN, 0};
    CHECK(poll(&p, 1, 2000) == 1 && (p.revents & POLLERR) && (p.revents & POLLHUP), "then reset: POLLERR, POLLHUP");
    CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == EPIPE, "SO_ERROR after the FIN: EPIPE");
    CHECK(read(c, buf, sizeof buf) == 0, "read: end of file");
    CHECK_ERR(write(c, "x", 1), EPIPE, "write: EPIPE");
    close(c);

    c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&ss, len);
    a = accept(l, NULL, NULL);
    write(c, "unread", 6);
    struct pollfd pa = {a, POLLIN, 0};
    poll(&pa, 1, 2000);
    close(a);
    p.revents = 0;
    CHECK(poll(&p, 1, 2000) == 1 && (p.revents & POLLERR), "closed with unread data: POLLERR");
    CHECK_ERR(read(c, buf, sizeof buf), ECONNRESET, "read: ECONNRESET");
    CHECK(read(c, buf, sizeof buf) == 0, "then end of file");
    CHECK_ERR(write(c, "x", 1), EPIPE, "then write: EPIPE");
    CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "SO_ERROR: reported already");
    close(c);

    /* A reply, then a reset: the reply is read first, then the end of file (the
       FIN came before the reset), the error left for SO_ERROR. Go's HTTP server
       answers an oversized request so: 431, shutdown(SHUT_WR), close. */
    c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&ss, len);
    a = accept(l, NULL, NULL);
    write(c, "request", 7);
    pa.fd = a;
    poll(&pa, 1, 2000);
    write(a, "431", 3);
    shutdown(a, SHUT_WR);
    close(a);
    p.revents = 0;
    CHECK(poll(&p, 1, 2000) == 1 && (p.revents & POLLERR) && (p.revents & POLLIN), "reply and reset: POLLIN, POLLERR");
    CHECK(read(c, buf, sizeof buf) == 3, "the reply is read");
    CHECK(read(c, buf, sizeof buf) == 0, "then end of file");
    CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == EPIPE, "SO_ERROR: EPIPE");
    close(c);

    /* Bytes that came before a reset are read before its ECONNRESET. */
    c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&ss, len);
    a = accept(l, NULL, NULL);
    write(c, "unread", 6);
    pa.fd = a;
    poll(&pa, 1, 2000);
    write(a, "data", 4);
    close(a);
    p.revents = 0;
    CHECK(poll(&p, 1, 2000) == 1 && (p.revents & POLLERR), "data and reset: POLLERR");
    CHECK(read(c, buf, sizeof buf) == 4, "the data is read");
    CHECK_ERR(read(c, buf, sizeof buf), ECONNRESET, "then ECONNRESET");
    close(c);

    c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&ss, len);
    a = accept(l, NULL, NULL);
    struct linger lg = {5, 0};
    socklen_t lgl = sizeof lg;
    CHECK(setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0, "SO_LINGER {5, 0}");
    CHECK(getsockopt(a, SOL_SOCKET, SO_LINGER, &lg, &lgl) == 0 && lg.l_onoff == 1 && lg.l_linger == 0, "read back as {1, 0}");
    close(a);
    CHECK_ERR(read(c, buf, sizeof buf), ECONNRESET, "closed with a zero linger time: ECONNRESET");
    close(c), close(l);
}

static void dual_stack(void) {
    int l = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 any = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    socklen_t len = sizeof any;
    CHECK(bind(l, (struct sockaddr *)&any, len) == 0 && listen(l, 4) == 0, "listen on [::]");
    getsockname(l, (struct sockaddr *)&any, &len);
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = any.sin6_port};
    v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(c, (struct sockaddr *)&v4, sizeof v4) == 0, "an IPv4 client connects to it");
    struct sockaddr_in6 peer;
    socklen_t pl = sizeof peer;
    int a = accept(l, (struct sockaddr *)&peer, &pl);
    CHECK(a >= 0 && pl == sizeof peer && IN6_IS_ADDR_V4MAPPED(&peer.sin6_addr), "the peer is v4-mapped");
    close(a), close(c);
    /* 0.0.0.0 on the port of a dual-stack [::] is taken; beside a v6-only one it
       is free (and the other way round), for TCP and UDP. */
    struct sockaddr_in v4any = {.sin_family = AF_INET, .sin_port = any.sin6_port};
    int t = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_ERR(bind(t, (struct sockaddr *)&v4any, sizeof v4any), EADDRINUSE, "0.0.0.0 beside a dual-stack [::]: EADDRINUSE");
    close(t), close(l);
    int one = 1;
    for (int ty = SOCK_STREAM; ty <= SOCK_DGRAM; ty++) {
        /* (On the host another process may hold the v6 port's number in IPv4:
           then another port is tried, or the accept below would wait forever.) */
        int six = -1, four = -1, bound = 0;
        for (int tries = 0; tries < 50 && !bound; tries++) {
            if (six >= 0) close(six), close(four);
            six = socket(AF_INET6, ty, 0);
            setsockopt(six, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
            any.sin6_port = 0;
            len = sizeof any;
            bind(six, (struct sockaddr *)&any, len);
            getsockname(six, (struct sockaddr *)&any, &len);
            v4any.sin_port = any.sin6_port;
            four = socket(AF_INET, ty, 0);
            bound = bind(four, (struct sockaddr *)&v4any, sizeof v4any) == 0;
        }
        CHECK(bound, ty == SOCK_STREAM ? "TCP: 0.0.0.0 beside a v6-only [::]" : "UDP: 0.0.0.0 beside a v6-only [::]");
        if (!bound) return;
        /* Each gets its own family's traffic only. */
        struct sockaddr_in to4 = v4any;
        to4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct sockaddr_in6 to6 = any;
        to6.sin6_addr = in6addr_loopback;
        int c4 = socket(AF_INET, ty, 0), c6 = socket(AF_INET6, ty, 0);
        char b[8];
        int ok;
        if (ty == SOCK_STREAM) {
            listen(six, 4), listen(four, 4);
            ok = connect(c4, (struct sockaddr *)&to4, sizeof to4) == 0 && connect(c6, (struct sockaddr *)&to6, sizeof to6) == 0;
            struct sockaddr_storage p4, p6;
            socklen_t l4 = sizeof p4, l6 = sizeof p6;
            int a4 = accept(four, (struct sockaddr *)&p4, &l4), a6 = accept(six, (struct sockaddr *)&p6, &l6);
            ok = ok && a4 >= 0 && a6 >= 0 && p4.ss_family == AF_INET && p6.ss_family == AF_INET6 &&
                 IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&p6)->sin6_addr);
            /* (The clients close first: TIME-WAIT stays on their ports.) */
            close(c4), close(c6), close(a4), close(a6);
            c4 = c6 = -1;
        } else {
            sendto(c4, "4", 1, 0, (struct sockaddr *)&to4, sizeof to4);
            sendto(c6, "6", 1, 0, (struct sockaddr *)&to6, sizeof to6);
            ok = recv(four, b, 8, MSG_DONTWAIT) == 1 && b[0] == '4' && recv(six, b, 8, MSG_DONTWAIT) == 1 && b[0] == '6' &&
                 recv(four, b, 8, MSG_DONTWAIT) == -1;
        }
        CHECK(ok, ty == SOCK_STREAM ? "TCP: each listener gets its family" : "UDP: each socket gets its family");
        close(c4), close(c6), close(six);
        six = socket(AF_INET6, ty, 0);
        setsockopt(six, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        CHECK(bind(six, (struct sockaddr *)&any, len) == 0,
              ty == SOCK_STREAM ? "TCP: and a v6-only [::] beside 0.0.0.0" : "UDP: and a v6-only [::] beside 0.0.0.0");
        close(six), close(four);
    }
}

static void backlog(void) {
    struct sockaddr_storage ss;
    socklen_t len;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(l, (struct sockaddr *)&a, sizeof a);
    listen(l, 1024);
    len = sizeof ss;
    getsockname(l, (struct sockaddr *)&ss, &len);
    enum { N = 1000 };
    static int cs[N];
    int ok = 0;
    for (int i = 0; i < N; i++) {
        cs[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        int r = connect(cs[i], (struct sockaddr *)&ss, len);
        ok += r == 0 || errno == EINPROGRESS;
    }
    CHECK(ok == N, "1000 non-blocking connects");
    int accepted = 0;
    for (int i = 0; i < N; i++) {
        int c = accept(l, NULL, NULL);
        if (c >= 0) {
            accepted++;
            close(c);
        }
    }
    CHECK(accepted == N, "all 1000 accepted");
    for (int i = 0; i < N; i++) close(cs[i]);
    close(l);
}

/* A connection between two of the VM's own sockets (onering fuses it: the bytes
   skip the TCP/IP stack, net/fuse.rs) behaves as any other: bytes sent before the
   accept come first, a full receiver stops the writer and clears POLLOUT,
   FIONREAD and MSG_PEEK see what waits, each arrival is an edge, and half-close
   and a close with unread bytes are Linux's. */
static ssize_t read_full(int fd, char *buf, size_t n) {
    size_t got = 0;
    for (ssize_t r; got < n && (r = read(fd, buf + got, n - got)) > 0;) got += (size_t)r;
    return (ssize_t)got;
}

#define BULK (4 << 20)
static void *bulk_writer(void *arg) {
    int fd = (int)(intptr_t)arg;
    static unsigned char chunk[65536 + 7];
    size_t sent = 0;
    while (sent < BULK) {
        size_t n = sizeof chunk;
        if (n > BULK - sent) n = BULK - sent;
        for (size_t i = 0; i < n; i++) chunk[i] = (unsigned char)((sent + i) * 7 + 3);
        ssize_t w = write(fd, chunk, n);
        if (w <= 0) break;
        sent += (size_t)w;
    }
    return (void *)(intptr_t)sent;
}

static void fused(void) {
    struct sockaddr_storage ss;
    socklen_t len;
    char buf[256];
    int avail = 0;
    int l = listener(AF_INET, &ss, &len);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&ss, len);
    write(c, "early", 5);
    int a = accept(l, NULL, NULL);
    write(c, "-late", 5);
    CHECK(read_full(a, buf, 10) == 10 && memcmp(buf, "early-late", 10) == 0, "fused: bytes before and after the accept, in order");
    int ok = 1;
    for (int i = 0; i < 1000 && ok; i++) {
        int j = -1, k = -1;
        ok = write(c, &i, sizeof i) == sizeof i && read_full(a, (char *)&j, sizeof j) == sizeof j && j == i;
        j++;
        ok = ok && write(a, &j, sizeof j) == sizeof j && read_full(c, (char *)&k, sizeof k) == sizeof k && k == i + 1;
    }
    CHECK(ok, "fused: 1000 round trips");
    write(a, "peekaboo", 8);
    struct pollfd pc = {c, POLLIN, 0};
    poll(&pc, 1, 2000);
    CHECK(ioctl(c, FIONREAD, &avail) == 0 && avail == 8, "fused: FIONREAD");
    CHECK(recv(c, buf, 4, MSG_PEEK) == 4 && memcmp(buf, "peek", 4) == 0, "fused: MSG_PEEK");
    CHECK(read(c, buf, sizeof buf) == 8 && memcmp(buf, "peekaboo", 8) == 0, "fused: then read");
    char *volatile bad = (char *)8;
    CHECK_ERR(write(c, bad, 4), EFAULT, "fused: write from a bad address: EFAULT");
    write(c, "keep", 4);
    struct pollfd pk = {a, POLLIN, 0};
    poll(&pk, 1, 2000);
    CHECK_ERR(read(a, bad, 4), EFAULT, "fused: read into a bad address: EFAULT");
    CHECK(read_full(a, buf, 4) == 4 && memcmp(buf, "keep", 4) == 0, "fused: the bytes are still there");

    /* Fill the receiver without reading. */
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    static char block[16384];
    long written = 0;
    int werr = 0;
    for (ssize_t w; (w = write(c, block, sizeof block)) > 0 || (werr = errno, 0);) written += w;
    CHECK(werr == EAGAIN && written > 0, "fused: a full receiver is EAGAIN");
    struct pollfd p = {c, POLLOUT, 0};
    CHECK(poll(&p, 1, 0) == 0, "fused: full, not writable");
    long got = 0;
    struct pollfd pa = {a, POLLIN, 0};
    while (got < written && poll(&pa, 1, 2000) == 1) {
        ssize_t r = read(a, block, sizeof block);
        if (r <= 0) break;
        got += r;
    }
    CHECK(got == written, "fused: every byte arrived");
    CHECK(poll(&p, 1, 2000) == 1 && (p.revents & POLLOUT), "fused: writable again once read");
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) & ~O_NONBLOCK);

    /* 4 MiB through a small ring, blocking, checked byte by byte. */
    pthread_t t;
    pthread_create(&t, NULL, bulk_writer, (void *)(intptr_t)c);
    static unsigned char in[65536];
    size_t total = 0;
    int same = 1;
    for (ssize_t r; total < BULK && (r = read(a, in, sizeof in)) > 0; total += (size_t)r)
        for (ssize_t i = 0; i < r; i++) same &= in[i] == (unsigned char)((total + (size_t)i) * 7 + 3);
    void *sent;
    pthread_join(t, &sent);
    CHECK(total == BULK && (size_t)(intptr_t)sent == BULK && same, "fused: 4 MiB in order");

    /* Each arrival is an edge, read or not. */
    int ep = epoll_create1(0);
    struct epoll_event e = {EPOLLIN | EPOLLET, {.fd = a}}, out[2];
    epoll_ctl(ep, EPOLL_CTL_ADD, a, &e);
    write(c, "1", 1);
    CHECK(epoll_wait(ep, out, 2, 2000) == 1, "fused: ET, an arrival");
    write(c, "2", 1);
    CHECK(epoll_wait(ep, out, 2, 2000) == 1, "fused: ET, the next arrival without a read");
    CHECK(read(a, buf, sizeof buf) == 2, "fused: both bytes");
    close(ep);

    /* Half-close both ways, with bytes in flight. */
    write(c, "bye", 3);
    shutdown(c, SHUT_WR);
    CHECK(read_full(a, buf, 3) == 3 && read(a, buf, sizeof buf) == 0, "fused: the bytes, then end of file");
    CHECK_ERR(write(c, "x", 1), EPIPE, "fused: write after SHUT_WR: EPIPE");
    CHECK(write(a, "ack", 3) == 3 && read_full(c, buf, 3) == 3 && memcmp(buf, "ack", 3) == 0, "fused: the other way still works");
    shutdown(a, SHUT_WR);
    CHECK(read(c, buf, sizeof buf) == 0, "fused: both ends done");
    close(a), close(c);

    /* Closed with bytes it never read: a reset, after the bytes it sent. */
    c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&ss, len);
    a = accept(l, NULL, NULL);
    write(a, "x", 1);
    write(c, "unread", 6);
    pa.fd = a;
    poll(&pa, 1, 2000);
    close(a);
    CHECK(read(c, buf, sizeof buf) == 1, "fused: the byte sent before the close");
    CHECK_ERR(read(c, buf, sizeof buf), ECONNRESET, "fused: then ECONNRESET");
    close(c), close(l);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    tcp_echo(AF_INET, "tcp4");
    tcp_echo(AF_INET6, "tcp6");
    udp_echo(AF_INET, "udp4");
    udp_echo(AF_INET6, "udp6");
    nonblocking();
    edge_triggered();
    refused_and_errors();
    resets();
    dual_stack();
    backlog();
    fused();
    return failures;
}
