/* Asks the kernel to panic (a system-call number Linux does not have, which panics
   only when onering runs with ONERING_TEST_PANIC set): the tests check what a kernel
   panic reports. Without the variable it is ENOSYS, as on the host. */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
    long r = syscall(0x6f6e0001L);
    printf("%ld %s\n", r, r < 0 && errno == ENOSYS ? "ENOSYS" : "?");
    return 0;
}
