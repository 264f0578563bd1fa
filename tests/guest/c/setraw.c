/* Puts the terminal on stdin in raw mode and ends without restoring it: normally,
   or with "crash" by SIGSEGV. onering must give the user's terminal its modes back. */
#include <string.h>
#include <termios.h>
#include <stdio.h>

int main(int argc, char **argv) {
    struct termios t;
    if (tcgetattr(0, &t) != 0) {
        perror("tcgetattr");
        return 1;
    }
    cfmakeraw(&t);
    if (tcsetattr(0, TCSANOW, &t) != 0) {
        perror("tcsetattr");
        return 1;
    }
    struct termios now;
    tcgetattr(0, &now);
    printf("raw: %d\n", (now.c_lflag & ICANON) == 0);
    fflush(stdout);
    if (argc > 1 && !strcmp(argv[1], "crash")) *(volatile int *)0 = 1;
    return 0;
}
