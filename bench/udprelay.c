/* A user-mode UDP relay on the host, with nothing else in it: what passt adds to a
   datagram's trip behind -p (one more process that wakes in epoll_wait, reads the
   datagram and sends it on), measured without a VM (bench/net.sh, row (e2)).
   Datagrams to LISTENPORT go to 127.0.0.1:TARGETPORT; replies go back to the last
   sender.
     udprelay LISTENPORT TARGETPORT */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: udprelay LISTENPORT TARGETPORT\n");
        return 2;
    }
    int front = socket(AF_INET, SOCK_DGRAM, 0), back = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    struct sockaddr_in t = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    a.sin_addr.s_addr = t.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(front, (struct sockaddr *)&a, sizeof a) || connect(back, (struct sockaddr *)&t, sizeof t)) {
        perror("udprelay");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event e = {EPOLLIN, {.fd = front}}, got[2];
    epoll_ctl(ep, EPOLL_CTL_ADD, front, &e);
    e.data.fd = back;
    epoll_ctl(ep, EPOLL_CTL_ADD, back, &e);
    printf("relaying\n");
    fflush(stdout);
    struct sockaddr_in client;
    socklen_t cl = 0;
    static char buf[65536];
    for (;;) {
        int n = epoll_wait(ep, got, 2, -1);
        for (int i = 0; i < n; i++) {
            if (got[i].data.fd == front) {
                cl = sizeof client;
                ssize_t r = recvfrom(front, buf, sizeof buf, 0, (struct sockaddr *)&client, &cl);
                if (r >= 0) send(back, buf, (size_t)r, 0);
            } else {
                ssize_t r = recv(back, buf, sizeof buf, 0);
                if (r >= 0 && cl) sendto(front, buf, (size_t)r, 0, (struct sockaddr *)&client, cl);
            }
        }
    }
}
