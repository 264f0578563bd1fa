/* Socket calls with the arguments a broken or malicious program might pass: bad
   pointers, lengths, families, option values, msghdr and cmsghdr contents. Each
   line prints what the call returned and its error, so the output is compared
   with the host's (Linux semantics to the errno); none may crash or hang the VM. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"

/* A pointer into the kernel's half and one just past a mapping. */
#define KPTR ((void *)0xffffffff81000000ul)
static char *edge;

static long raw(long nr, long a, long b, long c, long d, long e, long f) { return syscall(nr, a, b, c, d, e, f); }
/* sendmsg/recvmsg without libc, which reads and rewrites the header and the
   control messages itself. */
static long xsendmsg(int fd, const struct msghdr *m, int flags) { return raw(SYS_sendmsg, fd, (long)m, flags, 0, 0, 0); }
static long xrecvmsg(int fd, struct msghdr *m, int flags) { return raw(SYS_recvmsg, fd, (long)m, flags, 0, 0, 0); }

static void sockets(void) {
    SHOW("socket bad family", socket(12345, SOCK_STREAM, 0));
    SHOW("socket AF_INET bad type", socket(AF_INET, 99, 0));
    SHOW("socket AF_INET bad flags", socket(AF_INET, SOCK_STREAM | 0x40000000, 0));
    SHOW("socket AF_INET stream with UDP", socket(AF_INET, SOCK_STREAM, IPPROTO_UDP));
    SHOW("socket AF_INET dgram with TCP", socket(AF_INET, SOCK_DGRAM, IPPROTO_TCP));
    SHOW("socket AF_INET6 bad protocol", socket(AF_INET6, SOCK_STREAM, 99));
    SHOW("socket AF_UNIX bad protocol", socket(AF_UNIX, SOCK_STREAM, 1));
    SHOW("socket negative family", socket(-1, SOCK_STREAM, 0));
    SHOW("socketpair AF_INET", socketpair(AF_INET, SOCK_STREAM, 0, (int *)edge));
    SHOW("socketpair bad vector", socketpair(AF_UNIX, SOCK_STREAM, 0, KPTR));
    SHOW("socketpair vector past a mapping", socketpair(AF_UNIX, SOCK_STREAM, 0, (int *)(edge + 4096 - 4)));
}

static void addresses(void) {
    int t = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
    SHOW("bind NULL", bind(t, NULL, sizeof a));
    SHOW("bind length 0", bind(t, (void *)&a, 0));
    SHOW("bind short", bind(t, (void *)&a, 4));
    SHOW("bind huge length", bind(t, (void *)&a, 1u << 31));
    SHOW("bind kernel pointer", bind(t, KPTR, sizeof a));
    SHOW("bind past a mapping", bind(t, (void *)(edge + 4096 - 8), sizeof a));
    SHOW("bind v6 address to v4 socket", bind(t, (void *)&a6, sizeof a6));
    struct sockaddr_in wrong = a;
    wrong.sin_family = 12345;
    SHOW("bind wrong family", bind(t, (void *)&wrong, sizeof wrong));
    struct sockaddr_in far = a;
    far.sin_addr.s_addr = htonl(0x0a0b0c0d);
    SHOW("bind non-local address", bind(t, (void *)&far, sizeof far));
    SHOW("connect NULL", connect(t, NULL, sizeof a));
    SHOW("connect short", connect(t, (void *)&a, 2));
    SHOW("connect kernel pointer", connect(t, KPTR, sizeof a));
    socklen_t len = sizeof a;
    SHOW("getsockname NULL length", getsockname(t, (void *)&a, NULL));
    SHOW("getsockname bad length pointer", getsockname(t, (void *)&a, KPTR));
    len = -1;
    SHOW("getsockname negative length", getsockname(t, (void *)&a, &len));
    len = sizeof a;
    SHOW("getsockname bad buffer", getsockname(t, KPTR, &len));
    len = 0;
    SHOW("getsockname zero length", getsockname(t, (void *)&a, &len));
    printf("  length after: %u\n", len);
    len = sizeof a;
    SHOW("getpeername not connected", getpeername(t, (void *)&a, &len));
    SHOW("accept not listening", accept(t, NULL, NULL));
    close(t);

    int u = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    memset(un.sun_path, 'x', sizeof un.sun_path);
    memcpy(un.sun_path, "/tmp/", 5);
    SHOW("unix bind path without NUL, full length", bind(u, (void *)&un, sizeof un));
    SHOW("unix bind longer than sockaddr_un", bind(u, (void *)&un, sizeof un + 1));
    char path[sizeof un.sun_path + 1] = {0};
    memcpy(path, un.sun_path, sizeof un.sun_path);
    SHOW("unlink it", unlink(path));
    SHOW("unix bind family only (autobind)", bind(u, (void *)&un, sizeof(sa_family_t)));
    SHOW("unix connect kernel pointer", connect(u, KPTR, sizeof un));
    SHOW("unix connect to nothing", connect(u, (void *)&(struct sockaddr_un){AF_UNIX, "/nonexistent/sock"}, sizeof un));
    close(u);
}

static void options(void) {
    int t = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    socklen_t len = sizeof one;
    SHOW("setsockopt NULL value", setsockopt(t, SOL_SOCKET, SO_REUSEADDR, NULL, sizeof one));
    SHOW("setsockopt short value", setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, 2));
    SHOW("setsockopt negative length", setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, -1));
    SHOW("setsockopt kernel pointer", setsockopt(t, SOL_SOCKET, SO_REUSEADDR, KPTR, sizeof one));
    SHOW("setsockopt unknown level", setsockopt(t, 9999, 1, &one, sizeof one));
    SHOW("setsockopt unknown socket option", setsockopt(t, SOL_SOCKET, 9999, &one, sizeof one));
    SHOW("setsockopt unknown TCP option", setsockopt(t, IPPROTO_TCP, 9999, &one, sizeof one));
    SHOW("setsockopt SO_LINGER short", setsockopt(t, SOL_SOCKET, SO_LINGER, &one, sizeof one));
    int neg = -5;
    SHOW("setsockopt TCP_KEEPIDLE negative", setsockopt(t, IPPROTO_TCP, TCP_KEEPIDLE, &neg, sizeof neg));
    SHOW("setsockopt TCP_KEEPCNT zero", setsockopt(t, IPPROTO_TCP, TCP_KEEPCNT, &(int){0}, sizeof(int)));
    SHOW("setsockopt IP_TTL 256", setsockopt(t, IPPROTO_IP, IP_TTL, &(int){256}, sizeof(int)));
    SHOW("setsockopt IP_TTL -1 (default)", setsockopt(t, IPPROTO_IP, IP_TTL, &(int){-1}, sizeof(int)));
    SHOW("setsockopt huge SO_RCVBUF", setsockopt(t, SOL_SOCKET, SO_RCVBUF, &(int){0x7fffffff}, sizeof(int)));
    SHOW("getsockopt NULL length", getsockopt(t, SOL_SOCKET, SO_TYPE, &one, NULL));
    SHOW("getsockopt kernel length pointer", getsockopt(t, SOL_SOCKET, SO_TYPE, &one, KPTR));
    len = -1;
    SHOW("getsockopt negative length", getsockopt(t, SOL_SOCKET, SO_TYPE, &one, &len));
    len = sizeof one;
    SHOW("getsockopt kernel buffer", getsockopt(t, SOL_SOCKET, SO_TYPE, KPTR, &len));
    len = 0;
    SHOW("getsockopt zero length", getsockopt(t, SOL_SOCKET, SO_TYPE, &one, &len));
    printf("  length after: %u\n", len);
    len = sizeof one;
    SHOW("getsockopt unknown", getsockopt(t, SOL_SOCKET, 9999, &one, &len));
    SHOW("getsockopt unknown level", getsockopt(t, 9999, 1, &one, &len));
    SHOW("getsockopt IPV6_V6ONLY on v4", getsockopt(t, IPPROTO_IPV6, IPV6_V6ONLY, &one, &len));
    SHOW("shutdown bad how", shutdown(t, 99));
    SHOW("shutdown not connected", shutdown(t, SHUT_RDWR));
    SHOW("ioctl FIONREAD kernel pointer", ioctl(t, FIONREAD, KPTR));
    SHOW("ioctl unknown", ioctl(t, 0x12345678, &one));
    close(t);
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    SHOW("listen on UDP", listen(u, 1));
    SHOW("accept on UDP", accept(u, NULL, NULL));
    close(u);
}

static void not_sockets(void) {
    int p[2];
    pipe(p);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof a;
    SHOW("bind on a pipe", bind(p[0], (void *)&a, sizeof a));
    SHOW("listen on a pipe", listen(p[0], 1));
    SHOW("accept on a pipe", accept(p[0], NULL, NULL));
    SHOW("getsockname on a pipe", getsockname(p[0], (void *)&a, &len));
    SHOW("sendto on a pipe", sendto(p[1], "x", 1, 0, NULL, 0));
    SHOW("recvfrom on a pipe", recvfrom(p[0], &a, 1, MSG_DONTWAIT, NULL, NULL));
    SHOW("shutdown on a pipe", shutdown(p[0], SHUT_RD));
    SHOW("setsockopt on a pipe", setsockopt(p[0], SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int)));
    SHOW("bind on a bad descriptor", bind(9999, (void *)&a, sizeof a));
    SHOW("bind on descriptor -1", bind(-1, (void *)&a, sizeof a));
    close(p[0]);
    close(p[1]);
}

static void messages(void) {
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    char c = 'x';
    struct iovec iov = {&c, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    /* (Raw calls where libc would read the header itself.) */
    SHOW("sendmsg NULL header", raw(SYS_sendmsg, sv[0], 0, 0, 0, 0, 0));
    SHOW("sendmsg kernel header", raw(SYS_sendmsg, sv[0], (long)KPTR, 0, 0, 0, 0));
    m.msg_iov = KPTR;
    SHOW("sendmsg kernel iovec", xsendmsg(sv[0], &m, 0));
    m.msg_iov = &iov;
    m.msg_iovlen = 5000;
    SHOW("sendmsg too many iovecs", xsendmsg(sv[0], &m, 0));
    m.msg_iovlen = 1;
    struct iovec bad = {KPTR, 1};
    m.msg_iov = &bad;
    SHOW("sendmsg iovec into the kernel", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    m.msg_iov = &iov;
    m.msg_name = KPTR;
    m.msg_namelen = 16;
    SHOW("sendmsg stream with a name", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    m.msg_name = NULL;
    m.msg_namelen = 0;

    /* Control messages. */
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * 300)];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    m.msg_control = &ctl;
    m.msg_controllen = CMSG_SPACE(sizeof(int));
    ctl.h.cmsg_level = SOL_SOCKET;
    ctl.h.cmsg_type = SCM_RIGHTS;
    ctl.h.cmsg_len = 4;
    SHOW("cmsg shorter than its header", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    ctl.h.cmsg_len = 4096;
    SHOW("cmsg longer than the control buffer", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    ctl.h.cmsg_len = CMSG_LEN(sizeof(int));
    *(int *)CMSG_DATA(&ctl.h) = 9999;
    SHOW("SCM_RIGHTS with a bad descriptor", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    *(int *)CMSG_DATA(&ctl.h) = -1;
    SHOW("SCM_RIGHTS with descriptor -1", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    ctl.h.cmsg_len = CMSG_LEN(sizeof(int) * 300);
    m.msg_controllen = CMSG_SPACE(sizeof(int) * 300);
    for (int i = 0; i < 300; i++) ((int *)CMSG_DATA(&ctl.h))[i] = sv[0];
    SHOW("SCM_RIGHTS with 300 descriptors", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    ctl.h.cmsg_len = CMSG_LEN(sizeof(int));
    m.msg_controllen = CMSG_SPACE(sizeof(int));
    ctl.h.cmsg_type = 77;
    SHOW("unknown control message type", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    ctl.h.cmsg_level = 1234;
    SHOW("unknown control message level", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    ctl.h.cmsg_level = SOL_SOCKET;
    ctl.h.cmsg_type = SCM_CREDENTIALS;
    ctl.h.cmsg_len = CMSG_LEN(4);
    SHOW("SCM_CREDENTIALS too short", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    m.msg_control = KPTR;
    SHOW("control buffer in the kernel", xsendmsg(sv[0], &m, MSG_DONTWAIT));
    m.msg_control = NULL;
    m.msg_controllen = 0;

    /* Receiving. */
    SHOW("send one byte", send(sv[0], "y", 1, 0));
    SHOW("recvmsg NULL header", raw(SYS_recvmsg, sv[1], 0, MSG_DONTWAIT, 0, 0, 0));
    SHOW("recvmsg kernel header", raw(SYS_recvmsg, sv[1], (long)KPTR, MSG_DONTWAIT, 0, 0, 0));
    struct msghdr r = {.msg_iov = &bad, .msg_iovlen = 1};
    SHOW("recvmsg into the kernel", xrecvmsg(sv[1], &r, MSG_DONTWAIT));
    r.msg_iov = &iov;
    r.msg_iovlen = 5000;
    SHOW("recvmsg too many iovecs", xrecvmsg(sv[1], &r, MSG_DONTWAIT));
    r.msg_iovlen = 1;
    SHOW("recvfrom into the kernel", recvfrom(sv[1], KPTR, 1, MSG_DONTWAIT, NULL, NULL));
    socklen_t alen = 16;
    SHOW("recvfrom, address length in the kernel", recvfrom(sv[1], &c, 1, MSG_DONTWAIT | MSG_PEEK, (void *)&alen, KPTR));
    SHOW("recv the byte", recv(sv[1], &c, 1, MSG_DONTWAIT));
    printf("  got %c\n", c);
    SHOW("recv nothing left", recv(sv[1], &c, 1, MSG_DONTWAIT));
    (void)alen;
    SHOW("sendmmsg kernel vector", raw(SYS_sendmmsg, sv[0], (long)KPTR, 2, 0, 0, 0));
    SHOW("recvmmsg kernel vector", raw(SYS_recvmmsg, sv[1], (long)KPTR, 2, MSG_DONTWAIT, 0, 0));
    SHOW("sendto huge length", sendto(sv[0], &c, ~0ul >> 1, MSG_DONTWAIT, NULL, 0));
    SHOW("send with unknown flags", send(sv[0], &c, 1, 0x40000000 | MSG_DONTWAIT));
    close(sv[0]);
    close(sv[1]);

    /* UDP: a datagram too large, and to a bad address. */
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static char big[70000];
    SHOW("UDP datagram over 64 KiB", sendto(u, big, sizeof big, 0, (void *)&to, sizeof to));
    SHOW("UDP to a short address", sendto(u, "x", 1, 0, (void *)&to, 3));
    SHOW("UDP to a kernel address", sendto(u, "x", 1, 0, KPTR, sizeof to));
    SHOW("UDP without an address", send(u, "x", 1, 0));
    close(u);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    edge = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(edge + 4096, 4096);
    sockets();
    addresses();
    options();
    not_sockets();
    messages();
    return 0;
}
