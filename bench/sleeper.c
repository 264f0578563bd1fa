/* bench/density.sh's guest: says it is alive, sleeps S seconds (argv[1]), exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct timespec t = {argc > 1 ? atoi(argv[1]) : 10, 0};
    printf("up %d\n", (int)getpid());
    fflush(stdout);
    while (nanosleep(&t, &t) != 0) {
    }
    return 0;
}
