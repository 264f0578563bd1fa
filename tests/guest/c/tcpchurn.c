/* TCP connection churn over loopback: 8 client threads each make 3,000
   connections to a listener served by 4 threads; every client writes 1 B to
   16 KiB (what both kernels take before the server reads) and reads until the
   end of file, every server reads once (at random 1 byte, leaving the rest
   unread, so that its close is a reset) and, at random, echoes or not, shuts its
   side down first or not, and closes. In onering these connections are fused (net/fuse.rs),
   so this runs their every ending against the rings: no hang, no lost
   connection, the same one line as on the host. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define CLIENTS 8
#define ROUNDS 3000

static struct sockaddr_in sa;
static socklen_t sl = sizeof sa;
static int l;

static void *server(void *arg) {
    unsigned seed = (unsigned)(long)arg;
    static __thread char buf[70000];
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) continue;
        unsigned r = (unsigned)rand_r(&seed);
        ssize_t n = read(c, buf, (r & 16) ? 1 : sizeof buf);
        if (n > 0 && (r & 3)) write(c, buf, (size_t)n);
        if (r & 8) shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

static void *client(void *arg) {
    unsigned seed = (unsigned)(long)arg + 100;
    static __thread char buf[70000];
    long ok = 0;
    for (int i = 0; i < ROUNDS; i++) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, (struct sockaddr *)&sa, sl)) {
            close(c);
            continue;
        }
        size_t n = 1 + (size_t)(rand_r(&seed) % 16384);
        if (write(c, buf, n) == (ssize_t)n) {
            struct pollfd p = {c, POLLIN, 0};
            poll(&p, 1, 5000);
            while (read(c, buf, sizeof buf) > 0) {
            }
            ok++;
        }
        close(c);
    }
    return (void *)ok;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    l = socket(AF_INET, SOCK_STREAM, 0);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(l, (struct sockaddr *)&sa, sl) || listen(l, 512) || getsockname(l, (struct sockaddr *)&sa, &sl)) {
        perror("listener");
        return 1;
    }
    pthread_t t[4 + CLIENTS];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, server, (void *)i);
    for (long i = 0; i < CLIENTS; i++) pthread_create(&t[4 + i], NULL, client, (void *)i);
    long total = 0;
    for (int i = 0; i < CLIENTS; i++) {
        void *ok;
        pthread_join(t[4 + i], &ok);
        total += (long)ok;
    }
    printf("connections written and read to the end: %ld of %d\n", total, CLIENTS * ROUNDS);
    return 0;
}
