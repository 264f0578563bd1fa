/* Calls a function pointer into the upper half, where only the kernel lives (or at
   the address given as argv[1]): the program must die of SIGSEGV (139), not be
   taken for a kernel crash, wherever it lands: the kernel's own image in the top
   2 GiB, the last page, or a non-canonical address. */
#include <stdlib.h>

int main(int argc, char **argv) {
    unsigned long to = argc > 1 ? strtoul(argv[1], 0, 0) : 0xffff900000000000ul;
    void (*f)(void) = (void (*)(void))to;
    f();
    return 0;
}
