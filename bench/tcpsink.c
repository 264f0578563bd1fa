/* bench/net.sh (h), the server side: `tcpsink PORT` accepts one connection on
   0.0.0.0:PORT, reads it to its end, sends back the byte count (8 bytes) and
   exits. Prints "listening" once it listens. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1)) {
        perror("tcpsink");
        return 1;
    }
    printf("listening\n");
    fflush(stdout);
    int c = accept(l, 0, 0);
    static char buf[1 << 16];
    unsigned long long total = 0;
    for (;;) {
        ssize_t r = read(c, buf, sizeof buf);
        if (r <= 0) break;
        total += r;
    }
    write(c, &total, sizeof total);
    close(c);
    return 0;
}
