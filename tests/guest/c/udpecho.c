/* A UDP echo server for the network-device tests and benchmark: `udpecho PORT N`
   binds 0.0.0.0:PORT, prints "listening", sends back each of N datagrams to its
   sender, then prints "echoed N" and exits (N 0: forever). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    long n = argc > 2 ? atol(argv[2]) : 1;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a)) {
        perror("udpecho");
        return 1;
    }
    printf("listening\n");
    fflush(stdout);
    char buf[65536];
    long i = 0;
    while (n == 0 || i < n) {
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t r = recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
        if (r < 0) {
            perror("recvfrom");
            return 1;
        }
        if (sendto(s, buf, r, 0, (struct sockaddr *)&from, fl) != r) {
            perror("sendto");
            return 1;
        }
        i++;
    }
    printf("echoed %ld\n", i);
    return 0;
}
