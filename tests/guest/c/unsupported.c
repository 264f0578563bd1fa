/* Calls system calls onering does not implement (twice each): each must fail with
   ENOSYS and be reported once on stderr. */
#include <errno.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    for (int i = 0; i < 2; i++) {
        long r = syscall(SYS_acct, 0);
        printf("acct: %ld errno=%d\n", r, r < 0 ? errno : 0);
        r = syscall(SYS_getcpu, 0, 0, 0);
        printf("getcpu: %ld errno=%d\n", r, r < 0 ? errno : 0);
        r = syscall(999);
        printf("999: %ld errno=%d\n", r, r < 0 ? errno : 0);
    }
    return 0;
}
