/* Network interfaces against the host: getifaddrs, if_nametoindex and friends,
   the SIOCGIF* ioctls on AF_INET and AF_UNIX sockets, and NETLINK_ROUTE itself
   (link and address dumps, single requests, acknowledgements, errors, port ids,
   truncation). The host has more interfaces than the VM's one, `lo`, so only
   what is true of `lo` is printed (and no MTU: the host's lo has 65536, onering's
   65535). Same output on the host and in onering. */
#define _GNU_SOURCE
#include "check.h"
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define LO_FLAGS (IFF_UP | IFF_LOOPBACK | IFF_RUNNING)

/* Netlink's structures (musl has no <linux/...> headers). */
#ifndef AF_NETLINK
#define AF_NETLINK 16
#endif
#define NETLINK_ROUTE 0
#define NLM_F_REQUEST 1
#define NLM_F_MULTI 2
#define NLM_F_ACK 4
#define NLM_F_DUMP 0x300
#define NLMSG_ERROR 2
#define NLMSG_DONE 3
#define RTM_NEWLINK 16
#define RTM_GETLINK 18
#define RTM_NEWADDR 20
#define RTM_GETADDR 22
#define IFLA_IFNAME 3
#define IFA_ADDRESS 1
#define RT_SCOPE_HOST 254
#define ARPHRD_LOOPBACK 772
struct sockaddr_nl {
    unsigned short nl_family, nl_pad;
    unsigned nl_pid, nl_groups;
};
struct nlmsghdr {
    unsigned nlmsg_len;
    unsigned short nlmsg_type, nlmsg_flags;
    unsigned nlmsg_seq, nlmsg_pid;
};
struct nlmsgerr {
    int error;
    struct nlmsghdr msg;
};
struct rtattr {
    unsigned short rta_len, rta_type;
};
struct ifinfomsg {
    unsigned char ifi_family, pad;
    unsigned short ifi_type;
    int ifi_index;
    unsigned ifi_flags, ifi_change;
};
struct ifaddrmsg {
    unsigned char ifa_family, ifa_prefixlen, ifa_flags, ifa_scope;
    unsigned ifa_index;
};
struct rtgenmsg {
    unsigned char rtgen_family;
};
#define ALIGN4(n) (((n) + 3) & ~3)
#define NLMSG_LENGTH(n) ((n) + 16)
#define NLMSG_DATA(h) ((void *)((char *)(h) + 16))
#define NLMSG_OK(h, n) ((n) >= 16 && (h)->nlmsg_len >= 16 && (int)(h)->nlmsg_len <= (n))
#define NLMSG_NEXT(h, n) ((n) -= ALIGN4((h)->nlmsg_len), (struct nlmsghdr *)((char *)(h) + ALIGN4((h)->nlmsg_len)))
#define RTA_LENGTH(n) ((n) + 4)
#define RTA_DATA(a) ((void *)((char *)(a) + 4))
#define RTA_OK(a, n) ((n) >= 4 && (a)->rta_len >= 4 && (a)->rta_len <= (n))
#define RTA_NEXT(a, n) ((n) -= ALIGN4((a)->rta_len), (struct rtattr *)((char *)(a) + ALIGN4((a)->rta_len)))
#define IFLA_RTA(i) ((struct rtattr *)((char *)(i) + ALIGN4(sizeof(struct ifinfomsg))))
#define IFLA_PAYLOAD(h) ((int)(h)->nlmsg_len - 16 - (int)ALIGN4(sizeof(struct ifinfomsg)))
#define IFA_RTA(i) ((struct rtattr *)((char *)(i) + ALIGN4(sizeof(struct ifaddrmsg))))
#define IFA_PAYLOAD(h) ((int)(h)->nlmsg_len - 16 - (int)ALIGN4(sizeof(struct ifaddrmsg)))

static void with_libc(void) {
    struct ifaddrs *ifa, *i;
    CHECK(getifaddrs(&ifa) == 0, "getifaddrs");
    int v4 = 0, v6 = 0, packet = 0;
    for (i = ifa; i; i = i->ifa_next) {
        if (strcmp(i->ifa_name, "lo") || !i->ifa_addr) continue;
        CHECK((i->ifa_flags & LO_FLAGS) == LO_FLAGS, "lo: up, loopback, running");
        if (i->ifa_addr->sa_family == AF_INET) {
            struct sockaddr_in *a = (void *)i->ifa_addr, *m = (void *)i->ifa_netmask;
            v4 += a->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && m && m->sin_addr.s_addr == htonl(0xff000000);
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            struct sockaddr_in6 *a = (void *)i->ifa_addr, *m = (void *)i->ifa_netmask;
            static const unsigned char all[16] = {255, 255, 255, 255, 255, 255, 255, 255,
                                                  255, 255, 255, 255, 255, 255, 255, 255};
            v6 += IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) && m && !memcmp(&m->sin6_addr, all, 16);
        } else if (i->ifa_addr->sa_family == AF_PACKET) {
            packet++;
        }
    }
    freeifaddrs(ifa);
    printf("lo in getifaddrs: 127.0.0.1/8 %d, ::1/128 %d, link %d\n", v4, v6, packet);
    printf("if_nametoindex(lo): %u\n", if_nametoindex("lo"));
    char name[IF_NAMESIZE] = "";
    printf("if_indextoname(1): %s\n", if_indextoname(1, name) ? name : "(none)");
    errno = 0;
    printf("if_nametoindex(nosuch0): %u, errno %s\n", if_nametoindex("nosuch0"), strerror(errno));
    struct if_nameindex *ni = if_nameindex(), *n;
    int found = 0;
    for (n = ni; n && n->if_index; n++) found += n->if_index == 1 && !strcmp(n->if_name, "lo");
    if_freenameindex(ni);
    printf("if_nameindex has lo as 1: %d\n", found);
}

static void with_ioctls(int family) {
    int s = socket(family, SOCK_DGRAM, 0);
    const char *f = family == AF_INET ? "AF_INET" : "AF_UNIX";
    struct ifreq r;
    memset(&r, 0, sizeof r);
    strcpy(r.ifr_name, "lo");
    if (ioctl(s, SIOCGIFINDEX, &r) == 0) printf("%s SIOCGIFINDEX lo: %d\n", f, r.ifr_ifindex);
    else printf("%s SIOCGIFINDEX lo: %s\n", f, strerror(errno));
    memset(&r, 0, sizeof r);
    r.ifr_ifindex = 1;
    SHOW("SIOCGIFNAME 1", ioctl(s, SIOCGIFNAME, &r));
    printf("  name %s\n", r.ifr_name);
    strcpy(r.ifr_name, "lo");
    SHOW("SIOCGIFFLAGS", ioctl(s, SIOCGIFFLAGS, &r));
    printf("  lo flags: 0x%x\n", r.ifr_flags & (LO_FLAGS | IFF_BROADCAST | IFF_POINTOPOINT | IFF_MULTICAST));
    SHOW("SIOCGIFMTU", ioctl(s, SIOCGIFMTU, &r));
    printf("  mtu over 1500: %d\n", r.ifr_mtu > 1500);
    SHOW("SIOCGIFHWADDR", ioctl(s, SIOCGIFHWADDR, &r));
    printf("  family %d\n", r.ifr_hwaddr.sa_family);
    memset(&r.ifr_addr, 0, sizeof r.ifr_addr);
    SHOW("SIOCGIFADDR", ioctl(s, SIOCGIFADDR, &r));
    printf("  %s\n", inet_ntoa(((struct sockaddr_in *)&r.ifr_addr)->sin_addr));
    memset(&r.ifr_addr, 0, sizeof r.ifr_addr);
    SHOW("SIOCGIFNETMASK", ioctl(s, SIOCGIFNETMASK, &r));
    printf("  %s\n", inet_ntoa(((struct sockaddr_in *)&r.ifr_addr)->sin_addr));
    strcpy(r.ifr_name, "nosuch0");
    SHOW("SIOCGIFFLAGS nosuch0", ioctl(s, SIOCGIFFLAGS, &r));
    r.ifr_ifindex = 9999;
    SHOW("SIOCGIFNAME 9999", ioctl(s, SIOCGIFNAME, &r));
    struct ifconf c = {0};
    SHOW("SIOCGIFCONF size", ioctl(s, SIOCGIFCONF, &c));
    printf("  room for some: %d\n", c.ifc_len >= (int)sizeof(struct ifreq) && c.ifc_len % (int)sizeof(struct ifreq) == 0);
    struct ifreq all[64];
    c.ifc_len = sizeof all;
    c.ifc_req = all;
    SHOW("SIOCGIFCONF", ioctl(s, SIOCGIFCONF, &c));
    int lo = 0;
    for (int i = 0; i < c.ifc_len / (int)sizeof(struct ifreq); i++)
        lo += !strcmp(all[i].ifr_name, "lo") &&
              ((struct sockaddr_in *)&all[i].ifr_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    printf("  lo 127.0.0.1 listed: %d\n", lo);
    close(s);
}

/* Sends a request and returns the next datagram's length (into buf). */
static int ask(int s, int type, int flags, int seq, const void *body, int blen, char *buf, int room) {
    struct {
        struct nlmsghdr h;
        char body[64];
    } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = NLMSG_LENGTH(blen);
    req.h.nlmsg_type = type;
    req.h.nlmsg_flags = NLM_F_REQUEST | flags;
    req.h.nlmsg_seq = seq;
    memcpy(req.body, body, blen);
    struct sockaddr_nl k = {.nl_family = AF_NETLINK};
    if (sendto(s, &req, req.h.nlmsg_len, 0, (struct sockaddr *)&k, sizeof k) != (int)req.h.nlmsg_len) return -1;
    return recv(s, buf, room, 0);
}

static void with_netlink(void) {
    static char buf[65536];
    int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    CHECK(s >= 0, "netlink socket");
    struct sockaddr_nl me = {.nl_family = AF_NETLINK};
    socklen_t ml = sizeof me;
    CHECK(getsockname(s, (struct sockaddr *)&me, &ml) == 0 && me.nl_pid == 0, "unbound: port 0");
    CHECK(bind(s, (struct sockaddr *)&me, sizeof me) == 0, "bind port 0");
    CHECK(getsockname(s, (struct sockaddr *)&me, &ml) == 0 && me.nl_pid == (unsigned)getpid(), "port: the pid");
    int s2 = socket(AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE);
    struct sockaddr_nl me2 = {.nl_family = AF_NETLINK};
    bind(s2, (struct sockaddr *)&me2, sizeof me2);
    getsockname(s2, (struct sockaddr *)&me2, &ml);
    CHECK((int)me2.nl_pid < 0, "the second: a negative port");
    struct sockaddr_nl same = {.nl_family = AF_NETLINK, .nl_pid = me.nl_pid};
    int s3 = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
    CHECK_ERR(bind(s3, (struct sockaddr *)&same, sizeof same), EADDRINUSE, "a taken port: EADDRINUSE");
    close(s3);
    close(s2);

    /* The link dump: lo among the links, each message for us, then DONE. */
    struct rtgenmsg g = {AF_PACKET};
    int seq = 10, lo = 0, done = 0, ours = 1;
    int n = ask(s, RTM_GETLINK, NLM_F_DUMP, seq, &g, sizeof g, buf, sizeof buf);
    for (; n > 0 && !done; n = done ? 0 : recv(s, buf, sizeof buf, 0)) {
        for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
            ours &= h->nlmsg_seq == (unsigned)seq && h->nlmsg_pid == me.nl_pid;
            if (h->nlmsg_type == NLMSG_DONE) done = 1;
            if (h->nlmsg_type != RTM_NEWLINK) continue;
            struct ifinfomsg *i = NLMSG_DATA(h);
            int len = IFLA_PAYLOAD(h);
            for (struct rtattr *a = IFLA_RTA(i); RTA_OK(a, len); a = RTA_NEXT(a, len))
                if (a->rta_type == IFLA_IFNAME && !strcmp(RTA_DATA(a), "lo"))
                    lo = i->ifi_index == 1 && i->ifi_type == ARPHRD_LOOPBACK && (i->ifi_flags & LO_FLAGS) == LO_FLAGS;
            ours &= (h->nlmsg_flags & NLM_F_MULTI) != 0;
        }
    }
    CHECK(lo, "link dump: lo, index 1, loopback, up");
    CHECK(done && ours, "link dump: multi-part, our seq and port, then DONE");

    /* The IPv6 address dump: ::1/128 on index 1, and no IPv4. */
    struct ifaddrmsg am = {.ifa_family = AF_INET6};
    n = ask(s, RTM_GETADDR, NLM_F_DUMP, 11, &am, sizeof am, buf, sizeof buf);
    int one = 0, v4 = 0;
    done = 0;
    for (; n > 0 && !done; n = done ? 0 : recv(s, buf, sizeof buf, 0)) {
        for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE) done = 1;
            if (h->nlmsg_type != RTM_NEWADDR) continue;
            struct ifaddrmsg *a = NLMSG_DATA(h);
            v4 += a->ifa_family == AF_INET;
            int len = IFA_PAYLOAD(h);
            for (struct rtattr *r = IFA_RTA(a); RTA_OK(r, len); r = RTA_NEXT(r, len))
                if (r->rta_type == IFA_ADDRESS && IN6_IS_ADDR_LOOPBACK((struct in6_addr *)RTA_DATA(r)))
                    one = a->ifa_index == 1 && a->ifa_prefixlen == 128 && a->ifa_scope == RT_SCOPE_HOST;
        }
    }
    CHECK(one && !v4 && done, "IPv6 address dump: ::1/128 on lo, host scope, only IPv6");

    /* Single requests: by index with an acknowledgement, by name, a missing one. */
    struct {
        struct ifinfomsg i;
        struct rtattr a;
        char name[4];
    } q;
    memset(&q, 0, sizeof q);
    q.i.ifi_index = 1;
    n = ask(s, RTM_GETLINK, NLM_F_ACK, 12, &q.i, sizeof q.i, buf, sizeof buf);
    struct nlmsghdr *h = (void *)buf;
    CHECK(n > 0 && h->nlmsg_type == RTM_NEWLINK && !(h->nlmsg_flags & NLM_F_MULTI), "get link 1: one message");
    n = recv(s, buf, sizeof buf, 0);
    struct nlmsgerr *e = NLMSG_DATA(h);
    CHECK(n > 0 && h->nlmsg_type == NLMSG_ERROR && e->error == 0 && e->msg.nlmsg_seq == 12, "then its acknowledgement");
    q.i.ifi_index = 0;
    q.a.rta_len = RTA_LENGTH(3);
    q.a.rta_type = IFLA_IFNAME;
    memcpy(q.name, "lo", 3);
    n = ask(s, RTM_GETLINK, 0, 13, &q, sizeof q, buf, sizeof buf);
    CHECK(n > 0 && h->nlmsg_type == RTM_NEWLINK && ((struct ifinfomsg *)NLMSG_DATA(h))->ifi_index == 1, "get link lo by name");
    q.i.ifi_index = 9999;
    n = ask(s, RTM_GETLINK, 0, 14, &q.i, sizeof q.i, buf, sizeof buf);
    CHECK(n > 0 && h->nlmsg_type == NLMSG_ERROR && e->error == -ENODEV, "get link 9999: ENODEV");

    /* A datagram read in part: MSG_TRUNC says so, the rest is gone; MSG_PEEK |
       MSG_TRUNC tells the size first. */
    struct sockaddr_nl k = {.nl_family = AF_NETLINK};
    struct {
        struct nlmsghdr h;
        struct ifinfomsg i;
    } r = {{NLMSG_LENGTH(sizeof(struct ifinfomsg)), RTM_GETLINK, NLM_F_REQUEST, 16, 0}, {.ifi_index = 1}};
    sendto(s, &r, sizeof r, 0, (struct sockaddr *)&k, sizeof k);
    int full = recv(s, NULL, 0, MSG_PEEK | MSG_TRUNC);
    CHECK(full > 40, "MSG_PEEK | MSG_TRUNC: the whole length");
    struct iovec iov = {buf, 20};
    struct msghdr m = {.msg_name = &k, .msg_namelen = sizeof k, .msg_iov = &iov, .msg_iovlen = 1};
    n = recvmsg(s, &m, 0);
    CHECK(n == 20 && (m.msg_flags & MSG_TRUNC), "20 bytes of it: MSG_TRUNC");
    CHECK(k.nl_pid == 0 && m.msg_namelen == sizeof k, "from the kernel, port 0");
    CHECK(recv(s, buf, sizeof buf, MSG_DONTWAIT) == -1 && errno == EAGAIN, "the rest is gone");

    /* Errors. */
    CHECK_ERR(socket(AF_NETLINK, SOCK_STREAM, NETLINK_ROUTE), ESOCKTNOSUPPORT, "SOCK_STREAM: ESOCKTNOSUPPORT");
    CHECK_ERR(socket(AF_NETLINK, SOCK_RAW, 30), EPROTONOSUPPORT, "protocol 30: EPROTONOSUPPORT");
    CHECK_ERR(listen(s, 1), EOPNOTSUPP, "listen: EOPNOTSUPP");
    close(s);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    with_libc();
    with_ioctls(AF_INET);
    with_ioctls(AF_UNIX);
    with_netlink();
    return failures;
}
