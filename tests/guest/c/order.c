/* Alternates unbuffered writes to stdout and stderr; with both sent to one pipe the
   lines must arrive in program order. */
#include <string.h>
#include <unistd.h>

int main(void) {
    for (int i = 0; i < 5; i++) {
        write(1, "out\n", 4);
        write(2, "err\n", 4);
    }
    write(1, "partial", 7);
    write(2, "-then-err\n", 10);
    return 0;
}
