/* Copies stdin to stdout (to test -i), then reports how many bytes it saw. */
#include <stdio.h>
#include <unistd.h>

int main(void) {
    char buf[4096];
    long total = 0, n;
    while ((n = read(0, buf, sizeof buf)) > 0) {
        write(1, buf, n);
        total += n;
    }
    printf("%ld bytes\n", total);
    return n < 0;
}
