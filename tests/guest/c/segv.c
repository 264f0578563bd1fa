/* Writes a line, then dereferences NULL: must die of SIGSEGV (status 139) with the
   line already printed. */
#include <stdio.h>

int main(void) {
    printf("about to crash\n");
    fflush(stdout);
    volatile int *p = 0;
    *p = 42;
    return 0;
}
