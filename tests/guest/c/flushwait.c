/* Writes a line, then waits without writing more: "read" blocks reading stdin,
   "spin" computes for 3 seconds without a system call. Whoever reads the output
   must get the line while the program waits (the console batches output to pipes,
   but never holds it while the program waits or for long). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    write(1, "ready\n", 6);
    if (argc > 1 && !strcmp(argv[1], "read")) {
        char c;
        read(0, &c, 1);
    } else {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a); /* (the vDSO: no system call) */
        volatile unsigned long x = 0;
        do {
            for (int i = 0; i < 1000000; i++) x += i;
            clock_gettime(CLOCK_MONOTONIC, &b);
        } while (b.tv_sec - a.tv_sec < 3);
    }
    write(1, "done\n", 5);
    return 0;
}
