/* Waits for stdin with poll (as line editors and event loops do), then reads what
   came; three times, then reports end of file. */
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
    for (;;) {
        struct pollfd p = {.fd = 0, .events = POLLIN};
        int n = poll(&p, 1, 10000);
        if (n != 1) {
            printf("poll: %d\n", n);
            return 1;
        }
        char buf[256];
        ssize_t r = read(0, buf, sizeof buf);
        if (r <= 0) {
            printf("end of input (%zd)\n", r);
            return 0;
        }
        printf("got %zd bytes: %.*s", r, (int)r, buf);
        fflush(stdout);
    }
}
